"""The well-known approximations, non-matmul work, and where attention overtakes the MLP.

Everything here is an estimate or a derived figure, reported beside the exact counts, never inside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..spec import ModelSpec
from .breakdown import Breakdown
from .params import mlp_matrices, mlp_width


@dataclass(frozen=True)
class Estimate:
    name: str
    formula: str
    source: str
    value: int
    exact: int
    compared_with: str

    @property
    def ratio(self) -> float:
        """estimate / exact."""
        return self.value / self.exact

    def to_dict(self) -> dict:
        return {
            "formula": self.formula,
            "source": self.source,
            "value": self.value,
            "compared_with": self.compared_with,
            "exact": self.exact,
            "ratio": self.ratio,
        }


def published(spec: ModelSpec, *, n_non_embedding: int, n_without_positions: int,
              forward: int, train_step: int) -> list[Estimate]:
    """Kaplan's 6N and C_forward, and PaLM's 6N + 12LHQT, for the whole step, against the exact counts.

    n_non_embedding: active parameters less vocabulary and position embeddings (Kaplan's N).
    n_without_positions: active parameters less the position table (nanoGPT's get_num_params, used for PaLM).
    """
    T, L, N = spec.tokens, spec.n_layers, spec.seq_len
    return [
        Estimate("kaplan_6n", "6 N per token, N = non-embedding params", "Kaplan et al. 2020, sec. 2.1",
                 6 * n_non_embedding * T, train_step, "train_step"),
        Estimate("kaplan_forward", "2 N + 2 L n_ctx d_attn per token", "Kaplan et al. 2020, Table 1",
                 (2 * n_non_embedding + 2 * L * N * spec.d_attn) * T, forward, "forward"),
        Estimate("palm", "6 N + 12 L H Q T per token, N = params less positions",
                 "Chowdhery et al. 2022, appendix B (as in nanoGPT)",
                 (6 * n_without_positions + 12 * L * spec.n_heads * spec.d_head * N) * T, train_step,
                 "train_step"),
    ]


# FLOPs per element for the work that is not a matmul. Rough, stated once, and only ever reported apart.
SOFTMAX_PER_SCORE = 6  # scale, max, subtract, exp, sum, divide
NORM_PER_ELEMENT = {"layernorm": 8, "rmsnorm": 4}  # mean/var (or mean square), normalise, affine
ACTIVATION_PER_ELEMENT = {"gelu": 8, "gelu_tanh": 8, "silu": 4, "relu": 1}
GATE_MULTIPLY = 1  # act(gate) * up
RESIDUAL_PER_BLOCK = 2  # two residual adds of [T, D]


def non_matmul(spec: ModelSpec) -> Breakdown:
    """An estimate of the forward FLOPs that are not matmuls (softmax, norms, activations, residuals, biases)."""
    L, D, T, B, H, N = spec.n_layers, spec.d_model, spec.tokens, spec.batch_size, spec.n_heads, spec.seq_len
    n_norms = 2 * L + spec.final_norm + spec.embedding_norm
    width = mlp_width(spec)
    per_hidden = ACTIVATION_PER_ELEMENT[spec.activation] + (GATE_MULTIPLY if spec.mlp == "gated" else 0)
    biases = 0
    if spec.bias:
        biases += L * T * D  # attention out
    if spec.has_mlp_bias:
        biases += L * T * (width * (mlp_matrices(spec) - 1) + D)  # up [and gate], down
    if spec.has_qkv_bias:
        biases += L * T * (spec.d_attn + 2 * spec.d_kv)
    return Breakdown({
        "attention/softmax": L * B * H * N * N * SOFTMAX_PER_SCORE,
        "norms": n_norms * T * D * NORM_PER_ELEMENT[spec.norm],
        "activations": L * T * width * per_hidden,
        "residual": L * RESIDUAL_PER_BLOCK * T * D,
        "bias": biases,
        # softmax over E router logits, then weighting each of the top_k expert outputs
        "moe/routing": L * T * (5 * spec.n_experts + spec.top_k * D) if spec.is_moe else 0,
    })


@dataclass(frozen=True)
class Crossover:
    """Attention (projections + scores + values) against the MLP, per block, as N grows."""

    seq_len: int  # the smallest N at which attention FLOPs >= MLP FLOPs
    attention_share: float  # attention's share of block FLOPs at the spec's N
    mlp_share: float
    quadratic_share: float  # scores + values' share of block FLOPs at the spec's N

    def to_dict(self) -> dict:
        return {
            "attention_overtakes_mlp_at_seq_len": self.seq_len,
            "attention_share": self.attention_share,
            "mlp_share": self.mlp_share,
            "quadratic_share": self.quadratic_share,
        }


def crossover(spec: ModelSpec, forward: Breakdown) -> Crossover:
    """Per sequence and block: attention(N) = a N + b N^2 and MLP(N) = m N, so attention >= MLP from
    N = (m - a) / b. a, b and m are read off the exact forward counts, which are linear in tokens except
    for scores and values, which are linear in (query, key) pairs."""
    L, B, N, T = spec.n_layers, spec.batch_size, spec.seq_len, spec.tokens
    linear_attention = forward["attention/qkv"] + forward["attention/out"]
    quadratic = forward["attention/scores"] + forward["attention/values"]
    mlp = forward.subtotal("mlp") + forward.subtotal("moe")
    assert linear_attention % (L * T) == 0 and quadratic % (L * B * N * N) == 0 and mlp % (L * T) == 0
    a, b, m = linear_attention // (L * T), quadratic // (L * B * N * N), mlp // (L * T)
    n_cross = max(1, -((a - m) // b))  # ceil((m - a) / b), at least one token
    block = linear_attention + quadratic + mlp
    return Crossover(n_cross, float(Fraction(linear_attention + quadratic, block)),
                     float(Fraction(mlp, block)), float(Fraction(quadratic, block)))
