"""Parameters per component: every trainable tensor of the reference model, tied weights counted once.

Each component is summed over all layers. Shapes follow torch's nn.Linear (weight [out, in], bias [out]).
"""

from __future__ import annotations

from ..spec import ModelSpec
from .breakdown import Breakdown


def linear(d_in: int, d_out: int, bias: bool) -> int:
    """nn.Linear(d_in, d_out): weight [d_out, d_in], bias [d_out]."""
    return d_in * d_out + (d_out if bias else 0)


def norm(spec: ModelSpec) -> int:
    """LayerNorm: weight and bias [D]. RMSNorm: weight [D]."""
    return spec.d_model * (2 if spec.norm == "layernorm" else 1)


def mlp_matrices(spec: ModelSpec) -> int:
    """Weight matrices in one MLP (or one expert): up, down, and gate when gated."""
    return 3 if spec.mlp == "gated" else 2


def mlp_width(spec: ModelSpec) -> int:
    """Hidden units one token passes through in the MLP, or in its top_k routed and shared experts."""
    if spec.is_moe:
        return spec.top_k * spec.d_expert + spec.n_shared_experts * spec.d_shared_expert
    return spec.d_ff


def expert(spec: ModelSpec, d_hidden: int) -> int:
    """One MLP of hidden width d_hidden: up [and gate] D -> d_hidden, down d_hidden -> D."""
    D = spec.d_model
    bias = spec.has_mlp_bias
    return (mlp_matrices(spec) - 1) * linear(D, d_hidden, bias) + linear(d_hidden, D, bias)


def params(spec: ModelSpec) -> Breakdown:
    """Trainable parameters per component, summed over all layers."""
    L, D, V = spec.n_layers, spec.d_model, spec.vocab_size
    c: dict[str, int] = {
        "embedding/token": V * D,
        "embedding/position": spec.max_positions * D if spec.positions == "learned" else 0,
        "embedding/token_type": spec.n_token_types * D,
        "embedding/norm": norm(spec) if spec.embedding_norm else 0,
        "attention/norm": L * norm(spec),
        "attention/qkv": L * linear(D, spec.d_attn + 2 * spec.d_kv, spec.has_qkv_bias),
        "attention/out": L * linear(spec.d_attn, D, spec.bias),
        "mlp/norm": L * norm(spec),
    }
    if spec.is_moe:
        c |= {
            "moe/router": L * linear(D, spec.n_experts, False),
            "moe/experts": L * spec.n_experts * expert(spec, spec.d_expert),
            "moe/shared_experts": L * spec.n_shared_experts * expert(spec, spec.d_shared_expert),
            "moe/shared_gate": L * linear(D, 1, False) if spec.shared_expert_gate else 0,
        }
    else:
        gated, bias = spec.mlp == "gated", spec.has_mlp_bias
        c |= {
            "mlp/up": L * linear(D, spec.d_ff, bias),
            "mlp/gate": L * linear(D, spec.d_ff, bias) if gated else 0,
            "mlp/down": L * linear(spec.d_ff, D, bias),
        }
    c |= {
        "final_norm": norm(spec) if spec.final_norm else 0,
        "pooler": linear(D, D, True) if spec.pooler else 0,
        # A tied head is the token embedding, already counted above.
        "head": D * V if spec.lm_head and not spec.tie_embeddings else 0,
    }
    return Breakdown(c)


def inactive(spec: ModelSpec) -> int:
    """Parameters one token does not touch: the routed experts it is not sent to."""
    return spec.n_layers * (spec.n_experts - spec.top_k) * expert(spec, spec.d_expert) if spec.is_moe else 0


EMBEDDING_COMPONENTS = ("embedding/token", "embedding/position", "embedding/token_type", "head")
"""Kaplan et al.'s "vocabulary and positional embeddings": input tables and an untied unembedding."""
