"""Forward FLOPs per component for the whole batch: matmuls only, 2 FLOPs per multiply-add.

Attention scores and value mixing are counted over the full N x N matrix, as an eager model computes them
(and as torch's FlopCounterMode counts them). `causal_attention` gives the lower-triangle figure.
Bias additions are not matmul work and are not counted here (nor by FlopCounterMode or fvcore).
"""

from __future__ import annotations

from ..spec import ModelSpec
from .breakdown import Breakdown
from .params import mlp_matrices


def matmul(m: int, k: int, n: int) -> int:
    """FLOPs of [m, k] @ [k, n]: m * n dot products of length k, 2 FLOPs per multiply-add."""
    return 2 * m * k * n


def forward(spec: ModelSpec) -> Breakdown:
    """Forward FLOPs per component, summed over layers, for batch_size sequences of seq_len tokens."""
    L, D, V = spec.n_layers, spec.d_model, spec.vocab_size
    B, N, H, dh = spec.batch_size, spec.seq_len, spec.n_heads, spec.d_head
    T = spec.tokens
    c: dict[str, int] = {
        # x: [T, D] @ W_qkv: [D, H*dh + 2*Hkv*dh]
        "attention/qkv": L * matmul(T, D, spec.d_attn + 2 * spec.d_kv),
        # q: [B, H, N, dh] @ k^T: [B, H, dh, N] -> scores: [B, H, N, N]  (full N x N; see causal_attention)
        "attention/scores": L * B * H * matmul(N, dh, N),
        # probs: [B, H, N, N] @ v: [B, H, N, dh] -> [B, H, N, dh]
        "attention/values": L * B * H * matmul(N, N, dh),
        # heads: [T, H*dh] @ W_o: [H*dh, D]
        "attention/out": L * matmul(T, spec.d_attn, D),
    }
    if spec.is_moe:
        per_expert = mlp_matrices(spec)
        c |= {
            # x: [T, D] @ W_router: [D, E]
            "moe/router": L * matmul(T, D, spec.n_experts),
            # each token through exactly top_k experts: [T*k, D] @ [D, F_e] (x2 or x3), [T*k, F_e] @ [F_e, D]
            "moe/experts": L * per_expert * matmul(T * spec.top_k, D, spec.d_expert),
            # every token through each shared expert
            "moe/shared_experts": L * spec.n_shared_experts * per_expert * matmul(T, D, spec.d_shared_expert),
            # x: [T, D] @ W_gate: [D, 1]
            "moe/shared_gate": L * matmul(T, D, 1) if spec.shared_expert_gate else 0,
        }
    else:
        c |= {
            # x: [T, D] @ W_up: [D, F]
            "mlp/up": L * matmul(T, D, spec.d_ff),
            # x: [T, D] @ W_gate: [D, F]
            "mlp/gate": L * matmul(T, D, spec.d_ff) if spec.mlp == "gated" else 0,
            # h: [T, F] @ W_down: [F, D]
            "mlp/down": L * matmul(T, spec.d_ff, D),
        }
    c |= {
        # first token of each sequence: [B, D] @ W_pool: [D, D]
        "pooler": matmul(B, D, D) if spec.pooler else 0,
        # x: [T, D] @ W_head: [D, V], every position (the training and scoring case)
        "head": matmul(T, D, V) if spec.lm_head else 0,
    }
    return Breakdown(c)


def _pairs(n: int, window: int | None) -> int:
    """(query, key) pairs with key <= query and, with a window, query - key < window."""
    if window is None or window >= n:
        return n * (n + 1) // 2
    return window * (window + 1) // 2 + (n - window) * window


def windowed_attention(spec: ModelSpec) -> Breakdown:
    """Scores and value mixing as a sliding-window kernel computes them: each query against its last
    `sliding_window` keys in the windowed blocks, the causal lower triangle in the others."""
    B, H, N, dh = spec.batch_size, spec.n_heads, spec.seq_len, spec.d_head
    windowed, full = spec.sliding_window_layers, spec.n_layers - spec.sliding_window_layers
    pairs = windowed * _pairs(N, spec.sliding_window) + full * _pairs(N, None)
    return Breakdown({
        "attention/scores": B * H * matmul(pairs, dh, 1),
        "attention/values": B * H * matmul(pairs, 1, dh),
    })


def causal_attention(spec: ModelSpec) -> Breakdown:
    """Scores and value mixing over the lower triangle only (query i sees keys 0..i): N(N+1)/2 pairs.

    This is the work a causal kernel such as FlashAttention needs; for a bidirectional model (causal=False)
    there is no triangle and the full figure is returned.
    """
    full = forward(spec)
    if not spec.causal:
        return Breakdown({k: full[k] for k in ("attention/scores", "attention/values")})
    L, B, H, N, dh = spec.n_layers, spec.batch_size, spec.n_heads, spec.seq_len, spec.d_head
    pairs = _pairs(N, None)
    return Breakdown({
        # one dh-long dot product per (query, key) pair with key <= query
        "attention/scores": L * B * H * matmul(pairs, dh, 1),
        # one dh-wide weighted sum term per pair
        "attention/values": L * B * H * matmul(pairs, 1, dh),
    })
