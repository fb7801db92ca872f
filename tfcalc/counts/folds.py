"""Folds over the op inventory: pure integer functions of its records, one per figure.

Every count tfcalc reports comes from here: parameters (every op's own weights, tied weights once), forward
FLOPs (2 per multiply-add, attention over every (query, key) pair an eager model computes), the causal and
windowed figures (only the pairs the mask keeps), and the non-matmul estimate.
"""

from __future__ import annotations

from collections import defaultdict

from ..arch import AttentionCore, Elementwise, Inventory, Matmul, Norm, Table
from .breakdown import Breakdown

# Rough FLOPs per element of non-matmul work, stated once (the activation constants live with the builders).
SOFTMAX_PER_SCORE = 6  # scale, max, subtract, exp, sum, divide
# mean/var (or mean square), normalise, affine (a layer norm without bias: no add)
NORM_PER_ELEMENT = {"layernorm": 8, "layernorm_no_bias": 7, "rmsnorm": 4}
NON_MATMUL_KIND = {"activation": "activations", "residual": "residual", "routing": "moe/routing"}


def matmul(m: int, k: int, n: int) -> int:
    """FLOPs of [m, k] @ [k, n]: m * n dot products of length k, 2 FLOPs per multiply-add. The only place
    that multiplies by 2."""
    return 2 * m * k * n


def params(inv: Inventory) -> Breakdown:
    """Trainable parameters per component, summed over layers: what sum(p.numel()) gives."""
    c: dict[str, int] = defaultdict(int)
    for op, repeat in inv.parameters():  # shared blocks: once per set of parameters
        if isinstance(op, Matmul):
            c[op.component] += repeat * op.weights * op.params_each
        elif isinstance(op, Table):
            c[op.component] += repeat * op.rows * op.dim
        elif isinstance(op, Norm):
            c[op.component] += repeat * op.params
    return Breakdown(c)


def inactive_params(inv: Inventory) -> int:
    """Parameters one token does not touch: the routed experts it is not sent to."""
    return sum(repeat * (op.weights - op.active) * op.params_each for op, repeat in inv.parameters()
               if isinstance(op, Matmul) and op.active is not None)


def table_params(inv: Inventory, *kinds: str) -> int:
    """Parameters of the lookup tables of the given kinds (token, position, token_type)."""
    return sum(repeat * op.rows * op.dim for op, repeat in inv.parameters()
               if isinstance(op, Table) and op.kind in kinds)


def forward(inv: Inventory) -> Breakdown:
    """Forward matmul FLOPs per component, summed over layers, for the inventory's whole workload."""
    c: dict[str, int] = defaultdict(int)
    for op, repeat in inv:
        if isinstance(op, Matmul):
            c[op.component] += repeat * matmul(op.m, op.k, op.n)
        elif isinstance(op, AttentionCore):
            c[op.component + "/scores"] += repeat * op.b * op.h * matmul(op.s_q, op.d_qk, op.s_k)
            c[op.component + "/values"] += repeat * op.b * op.h * matmul(op.s_q, op.s_k, op.d_v)
    return Breakdown(c)


def _kept_up_to(n: int, window: int | None) -> int:
    """sum over p = 1..n of min(p, window): the keys kept by queries at positions 0..n-1 under a causal mask."""
    if window is None or n <= window:
        return n * (n + 1) // 2
    return window * (window + 1) // 2 + (n - window) * window


def pairs(core: AttentionCore, windows: bool) -> int:
    """(query, key) pairs the mask keeps. Query i is at key position (s_k - s_q) + i and sees the keys at or
    before it (causal), within the last `window` of them when `windows`."""
    if not core.mask.causal:
        return core.s_q * core.s_k
    window = core.mask.window if windows else None
    return _kept_up_to(core.s_k, window) - _kept_up_to(core.s_k - core.s_q, window)


def masked_attention(inv: Inventory, windows: bool) -> Breakdown:
    """Scores and value mixing over the pairs each mask keeps (the work a causal or sliding-window kernel such as
    FlashAttention needs), per component."""
    c: dict[str, int] = defaultdict(int)
    for op, repeat in inv:
        if isinstance(op, AttentionCore):
            kept = pairs(op, windows)
            c[op.component + "/scores"] += repeat * op.b * op.h * matmul(kept, op.d_qk, 1)
            c[op.component + "/values"] += repeat * op.b * op.h * matmul(kept, 1, op.d_v)
    return Breakdown(c)


def kv_cache(inv: Inventory, tp: int = 1) -> Breakdown:
    """Elements in the KV cache after the step, per component: for every cached attention, keys [b, kv heads,
    tokens, d_qk] and values [b, kv heads, tokens, d_v], where tokens are the keys attended to (the context and the
    new tokens; the encoder's tokens for cross-attention), at most the window for a sliding-window layer (a ring
    buffer keeps the last `window` keys). Multi-head latent attention caches its latent and the shared rotary key,
    [b, tokens, kv_lora_rank + qk_rope_dim], as serving engines (vLLM, SGLang) and transformers do. `tp`: on one of
    that many tensor-parallel GPUs (AttentionCore.cached_per_token_on)."""
    c: dict[str, int] = defaultdict(int)
    for op, repeat in inv:
        if isinstance(op, AttentionCore) and op.cached:
            tokens = op.s_k if op.mask.window is None else min(op.s_k, op.mask.window)
            c[op.component] += repeat * op.b * tokens * op.cached_per_token_on(tp)  # MLA: its latent (cache_width)
    return Breakdown(c)


def kv_per_token(inv: Inventory, tp: int = 1) -> int:
    """KV-cache elements one more token of one sequence adds: keys and values of every cached self-attention layer
    (a window caps the total, not this figure; cross-attention caches the encoder's tokens, not the decoder's)."""
    return sum(repeat * op.cached_per_token_on(tp) for op, repeat in inv
               if isinstance(op, AttentionCore) and op.cached and op.mask.causal)


def matmul_weights(inv: Inventory) -> int:
    """Parameters in the weight matrices of linear layers (an untied head's included; a tied head's matrix is the
    token table). The rest are tables, norms and biases."""
    return sum(repeat * op.weights * op.k * op.n for op, repeat in inv.parameters() if isinstance(op, Matmul))


def has_window(inv: Inventory) -> bool:
    return any(isinstance(op, AttentionCore) and op.mask.window is not None for op, _ in inv)


def non_matmul(inv: Inventory) -> Breakdown:
    """An estimate of the forward FLOPs that are not matmuls (softmax, norms, activations, residuals, biases)."""
    c: dict[str, int] = defaultdict(int)
    for op, repeat in inv:
        if isinstance(op, AttentionCore):
            # a sink (gpt-oss) is one more logit in each softmax row
            c["attention/softmax"] += repeat * op.b * op.h * op.s_q * (op.s_k + op.sinks) * SOFTMAX_PER_SCORE
        elif isinstance(op, Norm):
            c["norms"] += repeat * op.rows * op.width * NORM_PER_ELEMENT[op.kind]
        elif isinstance(op, Elementwise):
            c[NON_MATMUL_KIND[op.kind]] += repeat * op.elements * op.flops_each
        elif isinstance(op, Matmul) and op.bias and op.weights:
            c["bias"] += repeat * op.m * op.n
    order = ["attention/softmax", "norms", "activations", "residual", "bias", "moe/routing"]
    return Breakdown({k: c[k] for k in order})
