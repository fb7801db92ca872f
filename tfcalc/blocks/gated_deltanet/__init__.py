"""Gated DeltaNet (`gated_deltanet`; Qwen3-Next's and Qwen3.5's `linear_attention` layers), as transformers'
Qwen3NextGatedDeltaNet builds it and runs it on its pure-torch path (no fla, no causal-conv1d):

    [q | k | v | z] = in_proj_qkvz(h)          # D -> 2 Hk dk + 2 Hv dv
    [b | a] = in_proj_ba(h)                    # D -> 2 Hv
    q, k, v = silu(conv([q | k | v]))          # depthwise causal conv over 2 Hk dk + Hv dv channels, K taps
    beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias)
    o = delta_rule(l2norm(q), l2norm(k), v, g, beta)   # chunked (train, prefill) or recurrent (decode)
    out = out_proj(rmsnorm(o) * silu(z))       # a gated RMSNorm over each value head (weight [dv]); Hv dv -> D

Its own sizes are `kinds.gated_deltanet` (`GatedDeltaNetSizes`, Qwen3NextConfig's defaults). An inference step
carries the convolution's last K - 1 input positions per channel and the recurrent state [Hv, dk, dv] per sequence:
a constant, whatever the context. The delta rule is `DeltaRule` (its own record, `records.py`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import ACTIVATION_FLOPS, BlockKind, Ctx, register, sublayer
from ...arch.ops import Elementwise, Linear, Matmul, Norm, Op
from ..conv import outputs
from .records import DeltaNetConv, DeltaRule


class GatedDeltaNetSizes(BaseModel):
    """The `gated_deltanet` kind's own sizes (a spec's `[kinds.gated_deltanet]`); defaults are Qwen3NextConfig's."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    key_heads: int = Field(16, ge=1, description="Query/key heads Hk (linear_num_key_heads).")
    value_heads: int = Field(32, ge=1, description="Value heads Hv (linear_num_value_heads): each query/key head "
                                                   "serves Hv / Hk of them.")
    key_head_dim: int = Field(128, ge=1, description="Channels per query/key head dk (linear_key_head_dim).")
    value_head_dim: int = Field(128, ge=1, description="Channels per value head dv (linear_value_head_dim).")
    conv_kernel: int = Field(4, ge=1, description="Taps of the depthwise causal convolution over q, k and v "
                                                  "(linear_conv_kernel_dim).")
    chunk: int = Field(64, ge=1, description="Chunk length of the chunked delta rule (transformers' "
                                             "torch_chunk_gated_delta_rule: 64); the sequence is padded to a "
                                             "multiple of it.")
    split_projections: bool = Field(False, description="The input projections as four linears, in_proj_qkv, "
                                                       "in_proj_z, in_proj_b and in_proj_a (Qwen3.5), instead of "
                                                       "in_proj_qkvz and in_proj_ba (Qwen3-Next): the same weights "
                                                       "and multiply-adds, four modules for LoRA to adapt and four "
                                                       "tensors in a checkpoint.")

    def problems(self, spec) -> list[str]:
        out = []
        if self.value_heads % self.key_heads:
            out.append(f"kinds.gated_deltanet.key_heads={self.key_heads} does not divide "
                       f"kinds.gated_deltanet.value_heads={self.value_heads} (each query/key head serves a whole "
                       "number of value heads)")
        if not spec.causal:
            out.append("block_pattern has 'gated_deltanet' blocks, a causal recurrence: set causal=true")
        if spec.n_encoder_layers:
            out.append(f"block_pattern has 'gated_deltanet' blocks: not modelled in an encoder-decoder "
                       f"(n_encoder_layers={spec.n_encoder_layers})")
        return out


def widths(sizes: GatedDeltaNetSizes) -> tuple[int, int]:
    """(key_dim, value_dim) = (Hk dk, Hv dv)."""
    return sizes.key_heads * sizes.key_head_dim, sizes.value_heads * sizes.value_head_dim


def gated_deltanet(ctx: Ctx) -> list[Op]:
    """The gated DeltaNet block: norm, the two input projections, the convolution, the delta rule, the gated norm,
    out_proj, residual."""
    spec, t, b, s, D = ctx.spec, ctx.t, ctx.b, ctx.s, ctx.spec.d_model
    z = spec.sizes("gated_deltanet")
    Hv, dv, K = z.value_heads, z.value_head_dim, z.conv_kernel
    key_dim, value_dim = widths(z)
    channels = 2 * key_dim + value_dim
    inference = ctx.workload.phase != "train"
    recurrent = bool(ctx.workload.context) and s == 1  # transformers' decode step: torch_recurrent_gated_delta_rule
    # the modules LoRA adapts: z, b and a feed only part of the rule (`Linear.partial`), q, k and v all of it
    if z.split_projections:  # Qwen3.5
        qkvz = (Linear("in_proj_qkv", 2 * key_dim + value_dim), Linear("in_proj_z", value_dim, partial=True))
        ba = (Linear("in_proj_b", Hv, partial=True), Linear("in_proj_a", Hv, partial=True))
    else:  # Qwen3-Next
        qkvz = (Linear("in_proj_qkvz", 2 * key_dim + 2 * value_dim),)
        ba = (Linear("in_proj_ba", 2 * Hv, partial=True),)
    ops: list[Op] = [
        Matmul(ctx.name("gated_deltanet/in_proj_qkvz"), t, D, 2 * key_dim + 2 * value_dim, 1, False, None,
               "column", linears=qkvz),  # x: [t, D] @ W: [D, 2 Hk dk + 2 Hv dv] -> q, k, v, z
        # [t, D] @ [D, 2 Hv]: the normalised x in_proj_qkvz keeps
        Matmul(ctx.name("gated_deltanet/in_proj_ba"), t, D, 2 * Hv, 1, False, None, "column", shares_input=True,
               linears=ba),
        # [q | k | v]: [b, 2 Hk dk + Hv dv, s] through one filter of [1, K] per channel (groups = channels)
        DeltaNetConv(ctx.name("gated_deltanet/conv"), b, s, channels, K, outputs(ctx, K), False,
                     K - 1 if inference else 0),
        Elementwise(ctx.name("gated_deltanet/conv"), "activation", t * channels, ACTIVATION_FLOPS["silu"], "silu"),
        DeltaRule(ctx.name("gated_deltanet/delta_rule"), b, s, z.key_heads, Hv, z.key_head_dim, dv, z.chunk,
                  recurrent, inference),
        Norm(ctx.name("gated_deltanet/out_norm"), "rmsnorm", t * Hv, dv, "heads"),  # o: [t Hv, dv], weight [dv]
        # * silu(z): the fused gated norm keeps z [t, Hv dv], a view of in_proj_qkvz's output
        Elementwise(ctx.name("gated_deltanet/out_norm"), "gate", t * value_dim, ACTIVATION_FLOPS["silu"] + 1,
                    kept=t * value_dim),
        Matmul(ctx.name("gated_deltanet/out_proj"), t, value_dim, D, 1, False, None, "row",
               linears=(Linear("out_proj", D),)),  # [t, Hv dv] @ [Hv dv, D]
    ]
    return sublayer(ctx, "gated_deltanet", ops)


register(BlockKind("gated_deltanet", gated_deltanet, family="mixer", norm="gated_deltanet", in_pattern=True,
                   reference=f"{__name__}.reference", sizes=GatedDeltaNetSizes,
                   components=((r"gated_deltanet\.(in_proj_qkvz|in_proj_ba|conv|delta_rule|out_norm|out_proj)",
                                r"gated_deltanet/\1"),)))
