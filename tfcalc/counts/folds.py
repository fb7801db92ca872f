"""Folds over the op inventory: sums over its records, one per figure. Each record answers the figure for itself
(`tfcalc.arch.ops`); a fold never asks what type a record is, and a record that lacks a figure raises.

Every count tfcalc reports comes from here: parameters (every op's own weights, tied weights once), forward
FLOPs (2 per multiply-add, attention over every (query, key) pair an eager model computes), the causal and
windowed figures (only the pairs the mask keeps), and the non-matmul estimate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ..arch import Inventory
from ..arch.ops import matmul
from .breakdown import Breakdown

__all__ = ["forward", "has_window", "inactive_params",
           "kv_cache", "kv_per_token", "masked_attention", "matmul", "matmul_weights", "non_matmul",
           "params", "role_params", "state", "state_bytes"]


def _sum(parts: Iterable[tuple[dict[str, int], int]]) -> dict[str, int]:
    """Per-component figures of each record, times its repeat, summed (a key a record gives stays, even at 0)."""
    c: dict[str, int] = defaultdict(int)
    for figures, repeat in parts:
        for name, value in figures.items():
            c[name] += repeat * value
    return c


def params(inv: Inventory) -> Breakdown:
    """Trainable parameters per component, summed over layers: what sum(p.numel()) gives. A record with no
    parameters of its own (an attention core, an activation) adds no row."""
    return Breakdown(_sum((op.parameters(), repeat) for op, repeat in inv.parameters()))


def inactive_params(inv: Inventory) -> int:
    """Parameters one token does not touch: the routed experts it is not sent to."""
    return sum(repeat * op.inactive_params() for op, repeat in inv.parameters())


def role_params(inv: Inventory, *roles: str) -> int:
    """Parameters of the records with the given roles: a table's role is its kind (token, position, token_type,
    per_layer), a matmul's what it is for (head, pooler, router, ...)."""
    return sum(repeat * op.params() for op, repeat in inv.parameters() if op.role in roles)


def forward(inv: Inventory) -> Breakdown:
    """Forward matmul FLOPs per component, summed over layers, for the inventory's whole workload."""
    return Breakdown(_sum((op.forward(), repeat) for op, repeat in inv))


def masked_attention(inv: Inventory, windows: bool) -> Breakdown:
    """Scores and value mixing over the pairs each mask keeps (the work a causal or sliding-window kernel such as
    FlashAttention needs), per component."""
    return Breakdown(_sum((op.masked(windows), repeat) for op, repeat in inv))


def kv_cache(inv: Inventory, tp: int = 1) -> Breakdown:
    """Elements in the KV cache after the step, per component: for every cached attention, keys [b, kv heads,
    tokens, d_qk] and values [b, kv heads, tokens, d_v], where tokens are the keys attended to (the context and the
    new tokens; the encoder's tokens for cross-attention), at most the window for a sliding-window layer (a ring
    buffer keeps the last `window` keys). Multi-head latent attention caches its latent and the shared rotary key,
    [b, tokens, kv_lora_rank + qk_rope_dim], as serving engines (vLLM, SGLang) and transformers do. `tp`: on one of
    that many tensor-parallel GPUs (AttentionCore.cached_per_token_on)."""
    return Breakdown(_sum((op.cache(tp), repeat) for op, repeat in inv))


def kv_per_token(inv: Inventory, tp: int = 1) -> int:
    """KV-cache elements one more token of one sequence adds: keys and values of every cached self-attention layer
    (a window caps the total, not this figure; cross-attention caches the encoder's tokens, not the decoder's)."""
    return sum(repeat * op.cache_per_token(tp) for op, repeat in inv)


def state(inv: Inventory, tp: int = 1) -> Breakdown:
    """Elements of recurrent state kept for the next inference step, per component: a constant per sequence,
    whatever the context (a short convolution's last kernel - 1 input positions per channel, [b, C / tp, K - 1])."""
    return Breakdown(_sum((op.state(tp), repeat) for op, repeat in inv))


def state_bytes(inv: Inventory, tp: int = 1, act=2) -> Breakdown:
    """Bytes of recurrent state per component: each record's state elements in its own dtype (`state_bytes`, an
    SSM state's fp32) or else in the activations' (`act` bytes each)."""
    return Breakdown({name: int(n) for name, n in _sum(
        ({k: v * (op.state_bytes or act) for k, v in op.state(tp).items()}, repeat) for op, repeat in inv).items()})


def matmul_weights(inv: Inventory) -> int:
    """Parameters in the weight matrices of linear layers (an untied head's included; a tied head's matrix is the
    token table). The rest are tables, norms and biases."""
    return sum(repeat * op.matrix_params() for op, repeat in inv.parameters())


def has_window(inv: Inventory) -> bool:
    return any(op.windowed for op, _ in inv)


NON_MATMUL_ORDER = ["attention/softmax", "norms", "activations", "residual", "bias", "moe/routing"]


def non_matmul(inv: Inventory) -> Breakdown:
    """An estimate of the forward FLOPs that are not matmuls (softmax, norms, activations, residuals, biases)."""
    c = _sum((op.non_matmul(), repeat) for op, repeat in inv)
    # the usual kinds in their order, then any a record type of its own names (a scan's), never dropped
    return Breakdown({k: c.get(k, 0) for k in NON_MATMUL_ORDER} | {k: v for k, v in c.items()
                                                                   if k not in NON_MATMUL_ORDER})
