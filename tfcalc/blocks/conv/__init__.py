"""LFM2's short convolution (`conv`): in_proj D -> 3D (gates B and C and the values x), B * x, a depthwise causal
convolution of `kernel` taps along the sequence, C * that, out_proj D -> D. Its own sizes are `kinds.conv`
(`ConvSizes`: the kernel, transformers' conv_L_cache, and the bias, conv_bias). An inference step carries the
convolution's last kernel - 1 input positions per channel to the next: a state of constant size per sequence."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import BlockKind, Ctx, register, sublayer
from ...arch.ops import Elementwise, Linear, Matmul, Op
from .records import Conv

GATES = 2  # B * x before the convolution, C * its output after it


class ConvSizes(BaseModel):
    """The `conv` kind's own sizes (a spec's `[kinds.conv]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    kernel: int = Field(3, ge=1, description="Taps of the depthwise convolution, each channel over its last kernel "
                                             "positions (transformers' conv_L_cache; LFM2: 3).")
    bias: bool = Field(False, description="Biases on in_proj, the convolution and out_proj (conv_bias).")

    def problems(self, spec) -> list[str]:
        """A causal convolution needs a causal stack of one kind (no encoder-decoder)."""
        out = []
        if not spec.causal:
            out.append("block_pattern has 'conv' blocks, a causal convolution: set causal=true")
        if spec.n_encoder_layers:
            out.append(f"block_pattern has 'conv' blocks: not modelled in an encoder-decoder (n_encoder_layers="
                       f"{spec.n_encoder_layers})")
        return out


def outputs(ctx: Ctx, kernel: int) -> int:
    """Positions per sequence the eager convolution computes (transformers' pure-torch path): over a new sequence,
    F.conv1d padded by kernel - 1 at both ends (s + kernel - 1); over a cache of `kernel` positions, one new token
    through causal_conv1d_update (2), several through the padded form over cache + new (s + 2 kernel - 1)."""
    s = ctx.s
    if not s:
        return 0
    if not ctx.workload.context:
        return s + kernel - 1
    return 2 if s == 1 else s + 2 * kernel - 1


def conv(ctx: Ctx) -> list[Op]:
    """The short convolution block: norm, in_proj, B * x, the convolution, C * y, out_proj, residual."""
    spec, t, D = ctx.spec, ctx.t, ctx.spec.d_model
    sizes = spec.sizes("conv")
    K, bias = sizes.kernel, sizes.bias
    carried = 0 if ctx.workload.phase == "train" else K - 1
    ops: list[Op] = [
        # x: [t, D] @ W: [D, 3D] -> B, C, x (PEFT's target name: in_proj)
        Matmul(ctx.name("conv/in_proj"), t, D, 3 * D, 1, bias, None, "column", linears=(Linear("in_proj", 3 * D),)),
        # B * x: [t, D]; C * conv(B * x): [t, D]; the two keep B, C and x, views of in_proj's output [t, 3D]
        Elementwise(ctx.name("conv/in_proj"), "gate", GATES * t * D, 1, kept=3 * t * D),
        # B * x: [b, D, s] through D filters of [1, K] (groups = D); C * y keeps y, a slice of the padded output
        Conv(ctx.name("conv/conv"), ctx.b, ctx.s, D, K, outputs(ctx, K), bias, carried, output_kept=True),
        Matmul(ctx.name("conv/out_proj"), t, D, D, 1, bias, None, "row",
               linears=(Linear("out_proj", D),)),  # y: [t, D] @ W: [D, D]
    ]
    return sublayer(ctx, "conv", ops)


register(BlockKind("conv", conv, family="mixer", norm="conv", in_pattern=True, reference=f"{__name__}.reference",
                   components=((r"conv\.(in_proj|conv|out_proj)", r"conv/\1"),), sizes=ConvSizes))
