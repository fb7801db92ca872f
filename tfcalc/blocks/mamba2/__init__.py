"""Mamba2 (`mamba2`; the SSD mixer of Mamba2, Nemotron-H, Bamba, Granite 4.0-H), as transformers' Mamba2Mixer
builds it and runs it on its pure-torch path (no mamba_ssm, no causal_conv1d):

    [z | xBC | dt] = in_proj(h)                # D -> 2 d_inner + 2 g n + h   (d_inner = h p)
    [x | B | C] = silu(conv(xBC))              # depthwise causal conv over d_inner + 2 g n channels, K taps
    y = ssd(x, dt, A, B, C) + D x              # A = -exp(A_log), dt = softplus(dt + dt_bias); chunked or recurrent
    out = out_proj(rmsnorm_g(y * silu(z)))     # a gated RMSNorm over g groups (weight [d_inner]); d_inner -> D

Its own sizes are `kinds.mamba2` (`Mamba2Sizes`, Mamba2Config's defaults). An inference step carries the
convolution's last K - 1 input positions per channel and the SSM state [h, p, n] per sequence: a constant, whatever
the context. The scan is `SSDScan` (its own record, `records.py`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import ACTIVATION_FLOPS, BlockKind, Ctx, register, sublayer
from ...arch.ops import Elementwise, Linear, Matmul, Norm, Op
from ..conv import outputs
from ..conv.records import Conv
from .records import SSDScan


class Mamba2Sizes(BaseModel):
    """The `mamba2` kind's own sizes (a spec's `[kinds.mamba2]`); defaults are transformers' Mamba2Config's."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    n_heads: int = Field(128, ge=1, description="SSM heads h (num_heads; Nemotron-H: mamba_num_heads). The inner "
                                                "width d_inner is n_heads * head_dim.")
    head_dim: int = Field(64, ge=1, description="Channels per head p (head_dim; mamba_head_dim).")
    d_state: int = Field(128, ge=1, description="State per head channel n (state_size; ssm_state_size).")
    n_groups: int = Field(8, ge=1, description="Groups g of B and C, each shared by n_heads / n_groups heads; the "
                                               "gated RMSNorm normalises over d_inner / n_groups channels.")
    conv_kernel: int = Field(4, ge=1, description="Taps K of the depthwise causal convolution (conv_kernel).")
    chunk_size: int = Field(256, ge=1, description="Chunk length Q of the chunked scan (chunk_size); the sequence "
                                                   "is padded to a multiple of it.")
    conv_bias: bool = Field(True, description="A bias on the convolution (use_conv_bias).")
    bias: bool = Field(False, description="Biases on in_proj and out_proj (use_bias; mamba_proj_bias).")
    gated_norm: bool = Field(True, description="The gated RMSNorm before out_proj (weight [d_inner]); false: "
                                               "y * silu(z) alone, no norm (Falcon-H1's mamba_rms_norm false).")

    @property
    def d_inner(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """x, B and C: d_inner + 2 g n."""
        return self.d_inner + 2 * self.n_groups * self.d_state

    @property
    def in_width(self) -> int:
        """in_proj's outputs: z, x, B, C and dt."""
        return self.d_inner + self.conv_channels + self.n_heads

    def problems(self, spec) -> list[str]:
        out = []
        if self.n_heads % self.n_groups:
            out.append(f"kinds.mamba2.n_groups={self.n_groups} does not divide kinds.mamba2.n_heads={self.n_heads} "
                       "(each group of B and C serves a whole number of heads)")
        if not spec.causal:
            out.append("block_pattern has 'mamba2' blocks, a causal scan: set causal=true")
        if spec.n_encoder_layers:
            out.append(f"block_pattern has 'mamba2' blocks: not modelled in an encoder-decoder "
                       f"(n_encoder_layers={spec.n_encoder_layers})")
        return out


def mamba2(ctx: Ctx) -> list[Op]:
    """The Mamba2 block: norm, the mixer (`mixer`), the residual add."""
    return sublayer(ctx, "mamba2", mixer(ctx))


def mixer(ctx: Ctx) -> list[Op]:
    """The Mamba2 mixer, between a block's norms: in_proj, the conv and its silu, the scan, y * silu(z), the gated
    norm (unless `gated_norm` is false), out_proj."""
    spec, t, b, s, D = ctx.spec, ctx.t, ctx.b, ctx.s, ctx.spec.d_model
    z = spec.sizes("mamba2")
    inner, channels, K = z.d_inner, z.conv_channels, z.conv_kernel
    inference = ctx.workload.phase != "train"
    recurrent = bool(ctx.workload.context) and s == 1  # transformers' recurrent form: one token after a state
    silu = ACTIVATION_FLOPS["silu"]
    g = z.n_groups
    ops: list[Op] = [
        # x: [t, D] @ W: [D, 2 d_inner + 2 g n + h] -> z, x, B, C, dt (its output kept whole: the conv's input, z
        # and dt are views of it)
        Matmul(ctx.name("mamba2/in_proj"), t, D, z.in_width, 1, z.bias, None, "column",
               linears=(Linear("in_proj", z.in_width),)),
        # x, B, C: [b, d_inner + 2 g n, s] through d_inner + 2 g n filters of [1, K] (groups = channels); it keeps
        # its input and, sliced by the silu after it, its padded output
        Conv(ctx.name("mamba2/conv"), b, s, channels, K, outputs(ctx, K), z.conv_bias, K - 1 if inference else 0,
             output_kept=True),
        # silu(conv(xBC)): keeps [t, d_inner + 2 g n], its output, which the scan keeps as x, B and C
        Elementwise(ctx.name("mamba2/conv"), "activation", t * channels, silu, "silu"),
        # x: [b, s, h, p], dt: [b, s, h], B, C: [b, s, g, n] -> y: [b, s, h, p]
        SSDScan(ctx.name("mamba2/scan"), b, s, z.n_heads, z.head_dim, z.d_state, g, z.chunk_size,
                recurrent, inference),
    ]
    if z.gated_norm:
        ops += [
            # y * silu(z): [t, d_inner]; the fused gated norm keeps z (a view of in_proj's output)
            Elementwise(ctx.name("mamba2/gated_norm"), "gate", t * inner, silu + 1, kept=t * inner),
            # over g groups of d_inner / g channels (weight [d_inner], g sets of d_inner / g): keeps y and the fp32
            # rstd [t, g]
            Norm(ctx.name("mamba2/gated_norm"), "rmsnorm", t * g, inner // g, "heads", sets=g),
        ]
    else:  # y * silu(z): [t, d_inner], no norm; the multiply keeps both operands, y and z (one fused function)
        ops.append(Elementwise(ctx.name("mamba2/gate"), "gate", t * inner, silu + 1, kept=2 * t * inner))
    # y: [t, d_inner] @ W: [d_inner, D]
    return [*ops, Matmul(ctx.name("mamba2/out_proj"), t, inner, D, 1, z.bias, None, "row",
                         linears=(Linear("out_proj", D),))]


register(BlockKind("mamba2", mamba2, family="mixer", norm="mamba2", in_pattern=True,
                   reference=f"{__name__}.reference", sizes=Mamba2Sizes,
                   components=((r"mamba2\.(in_proj|conv|scan|gated_norm|out_proj)", r"mamba2/\1"),)))
