"""A conformer block (`conformer`; Gemma 4's audio tower, transformers' Gemma4AudioLayer): two half-step
feed-forward modules around chunked local self-attention with relative positions and a light convolution module,
then a norm. Every norm is an RMSNorm over d_model with a weight; no linear has a bias.

- `ff1`, `ff2` (Gemma4AudioFeedForward): norm, up D -> d_ff, the activation, down d_ff -> D, post_norm, scaled by
  residual_weight (elementwise) and added to the residual.
- `attention` (Gemma4AudioAttention): norm, q, k, v (D -> H dh each), the sequence cut into blocks of `chunk`
  queries (nb = ceil(s / chunk), the last padded), each block's queries attending to a context of
  `context` = chunk + left - 1 + right keys (zero padded at both ends); `relative` (relative_k_proj, D -> H dh) over
  the P = context // 2 + 1 sinusoidal relative positions, the same for every sequence: P x D x H dh per forward;
  scores q k^T [b nb, H, chunk, context] plus the relative scores q r^T [b, H, nb chunk, P] (a matmul with no weight
  of its own, then shifted into place), soft-capped, softmax, @ v; out (`post`, D -> D), post_norm, residual. The
  per-channel query scale per_dim_scale [dh] is a parameter (`attention/scale`, elementwise). transformers computes
  every (query, key) pair of every block, masked or not: so does the count.
- `lconv` (Gemma4AudioLightConv1d): norm, start D -> 2D, GLU, a depthwise causal Conv1d of `kernel` taps without a
  bias (left padded by kernel - 1: s outputs per sequence), conv_norm, the activation, end D -> D, residual.
- `norm` (norm_out) on the block's output (no residual).
The clamps (gradient_clipping, clipped linears' buffers) and scales are elementwise: not counted.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import ACTIVATION_FLOPS, RESIDUAL_ADD, BlockKind, Ctx, register
from ...arch.ops import AttentionCore, Elementwise, Linear, Mask, Matmul, Norm, Op, Table
from ...sizes import Size
from ..conv.records import Conv


class ConformerSizes(BaseModel):
    """The `conformer` kind's own sizes (a spec's `[kinds.conformer]`): Gemma4AudioConfig's."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    chunk: Size = Field(12, description="Queries per block of the chunked attention (attention_chunk_size).")
    left: Size = Field(13, description="attention_context_left: each block's keys reach left - 1 positions back.")
    right: int = Field(0, ge=0, le=10 ** 9, description="attention_context_right: positions ahead of the block.")
    kernel: Size = Field(5, description="Taps of the light convolution module's depthwise Conv1d (conv_kernel_size).")

    @property
    def context(self) -> int:
        """Keys each block of queries attends to: chunk + left - 1 + right."""
        return self.chunk + self.left - 1 + self.right

    @property
    def positions(self) -> int:
        """Relative positions the relative keys are computed for: context // 2 + 1."""
        return self.context // 2 + 1

    def problems(self, spec) -> list[str]:
        out = []
        if spec.causal:
            out.append("block_pattern has 'conformer' blocks (a bidirectional encoder's): set causal=false")
        if spec.n_kv_heads != spec.n_heads:
            out.append(f"block_pattern has 'conformer' blocks: one key head per query head (n_kv_heads="
                       f"{spec.n_kv_heads}, n_heads={spec.n_heads})")
        if spec.mlp != "standard" or spec.norm != "rmsnorm" or spec.bias or spec.has_mlp_bias:
            out.append("block_pattern has 'conformer' blocks: an ungated MLP (mlp='standard'), RMSNorm and no biases "
                       "(Gemma 4's)")
        return out


def conformer(ctx: Ctx) -> list[Op]:
    spec, b, s = ctx.spec, ctx.b, ctx.s
    t, D, F, H, dh = ctx.t, spec.d_model, spec.d_ff, spec.n_heads, spec.d_head
    sizes = spec.sizes("conformer")
    C, K, P = sizes.chunk, sizes.kernel, sizes.positions
    nb = -(-s // C)  # blocks of queries (the last padded to chunk)
    act, flops = spec.activation, ACTIVATION_FLOPS[spec.activation]
    name = ctx.name

    def residual() -> Elementwise:
        return Elementwise(name("residual"), "residual", t * D, RESIDUAL_ADD)

    def half(ff: str) -> list[Op]:
        return [Norm(name(f"{ff}/norm"), "rmsnorm", t, D),
                Matmul(name(f"{ff}/up"), t, D, F, split="column"),  # x: [t, D] @ W: [D, F]
                Elementwise(name(f"{ff}/up"), "activation", t * F, flops, act),
                Matmul(name(f"{ff}/down"), t, F, D, split="row"),  # h: [t, F] @ W: [F, D]
                Norm(name(f"{ff}/post_norm"), "rmsnorm", t, D), residual()]

    attention = [
        Norm(name("attention/norm"), "rmsnorm", t, D),
        # x: [t, D] @ W_q|W_k|W_v: [D, 3 H dh], three modules (three tensors a checkpoint and an optimizer keep)
        Matmul(name("attention/qkv"), t, D, 3 * H * dh, split="column",
               linears=(Linear("q", H * dh), Linear("k", H * dh), Linear("v", H * dh))),
        Table(name("attention/scale"), 1, dh, "scalar"),  # per_dim_scale [dh]: softplus, times each query
        # the relative positions' sinusoids [P, D] @ W: [D, H dh], once per forward (no batch); role "features": its
        # input is a constant (no gradient), its backward the weight gradient alone
        Matmul(name("attention/relative"), P if s else 0, D, H * dh, role="features"),
        # per block: q [b nb, H, chunk, dh] @ k^T [.., dh, context]; probs @ v [.., context, dh]
        AttentionCore(name("attention"), b * nb, H, C, sizes.context, dh, dh, Mask(False)),
        # the relative scores q [b, H, nb chunk, dh] @ r^T [H, dh, P] (no weight of its own), shifted into place
        Matmul(name("attention/scores"), b * H * nb * C, dh, P, weights=0, role="scores"),
        Matmul(name("attention/out"), t, H * dh, D, split="row"),  # o: [t, H dh] @ W: [H dh, D]
        Norm(name("attention/post_norm"), "rmsnorm", t, D), residual(),
    ]
    lconv = [
        Norm(name("lconv/norm"), "rmsnorm", t, D),
        Matmul(name("lconv/start"), t, D, 2 * D, split="column"),  # x: [t, D] @ W: [D, 2D]
        Elementwise(name("lconv/start"), "gate", t * D, 1 + flops, "silu", kept=2 * t * D),  # GLU: a * sigmoid(b)
        Conv(name("lconv/conv"), b, s, D, K, s),  # [b, D, s] left padded by K - 1, D filters of [1, K]
        Norm(name("lconv/conv_norm"), "rmsnorm", t, D),
        Elementwise(name("lconv/conv_norm"), "activation", t * D, flops, act),
        Matmul(name("lconv/end"), t, D, D, split="row"),  # [t, D] @ W: [D, D]
        residual(),
    ]
    return [*mark(half("ff1"), "mlp"), *mark(attention, "attention"), *mark(lconv, "conv"),
            *mark(half("ff2"), "mlp"), Norm(name("conformer/norm"), "rmsnorm", t, D)]


def mark(ops: list[Op], sublayer: str) -> list[Op]:
    """Each module's records marked with the kind of work it does (its family: the attention/MLP crossover)."""
    from dataclasses import replace

    return [replace(op, sublayer=sublayer) for op in ops]


register(BlockKind("conformer", conformer, family="other", in_pattern=True, sizes=ConformerSizes,
                   reference=f"{__name__}.reference",
                   components=((r"conformer\.ff1\.(norm|up|down|post_norm)", r"ff1/\1"),
                               (r"conformer\.ff2\.(norm|up|down|post_norm)", r"ff2/\1"),
                               (r"conformer\.attention\.(norm|qkv|scale|relative|out|post_norm)", r"attention/\1"),
                               (r"conformer\.attention\.core", "attention/core"),
                               (r"conformer\.lconv\.(norm|start|conv|conv_norm|end)", r"lconv/\1"),
                               (r"conformer\.norm", "conformer/norm"))))
