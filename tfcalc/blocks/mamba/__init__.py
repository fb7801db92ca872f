"""Mamba (`mamba`; the selective-scan mixer of Mamba v1, Falcon-Mamba's layout, Jamba's Mamba blocks), as
transformers' MambaMixer builds it and runs it on its pure-torch path (no mamba_ssm, no causal_conv1d):

    [x | z] = in_proj(h)                       # D -> 2 d_inner
    x = act(conv(x))                           # depthwise causal conv over d_inner channels, K taps
    [dt | B | C] = x_proj(x)                   # d_inner -> dt_rank + 2 n (no bias)
    (Jamba: dt, B, C each through an RMSNorm of its own width)
    dt = dt_proj.weight @ dt                   # dt_rank -> d_inner; its bias is added inside the scan
    y = scan(x, dt, A, B, C) + D x             # A = -exp(A_log) [d_inner, n]; one step per token
    out = out_proj(y * silu(z))                # d_inner -> D

Its own sizes are `kinds.mamba` (`MambaSizes`, MambaConfig's defaults). An inference step carries the convolution's
last K - 1 input positions per channel and the SSM state [d_inner, n] per sequence (fp32): a constant, whatever the
context. The scan is `SelectiveScan` (its own record, `records.py`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import ACTIVATION_FLOPS, BlockKind, Ctx, register, sublayer
from ...arch.ops import Elementwise, Linear, Matmul, Norm, Op
from ..conv import outputs
from ..conv.records import Conv
from .records import SelectiveScan


class MambaSizes(BaseModel):
    """The `mamba` kind's own sizes (a spec's `[kinds.mamba]`); defaults are transformers' MambaConfig's."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    d_state: int = Field(16, ge=1, description="State per channel n (state_size; Jamba: mamba_d_state).")
    d_conv: int = Field(4, ge=1, description="Taps K of the depthwise causal convolution (conv_kernel; mamba_d_conv).")
    expand: int = Field(2, ge=1, description="The inner width d_inner = expand * d_model (expand; mamba_expand), "
                                             "unless d_inner is given.")
    d_inner: int | None = Field(None, ge=1, description="The inner width d_inner (intermediate_size); default "
                                                        "expand * d_model.")
    dt_rank: int | None = Field(None, ge=1, description="Rank of the time-step projection (time_step_rank; "
                                                        "mamba_dt_rank); default ceil(d_model / 16).")
    conv_bias: bool = Field(True, description="A bias on the convolution (use_conv_bias; mamba_conv_bias).")
    bias: bool = Field(False, description="Biases on in_proj and out_proj (use_bias; mamba_proj_bias).")
    inner_norms: bool = Field(False, description="RMSNorms on dt, B and C after x_proj, weights [dt_rank], [n], [n] "
                                                 "(Jamba's dt_layernorm, b_layernorm, c_layernorm).")
    activation: str = Field("silu", description="The activation after the convolution (hidden_act); elementwise, "
                                                "only the non-matmul estimate reads it.")

    def inner(self, d_model: int) -> int:
        return self.d_inner if self.d_inner is not None else self.expand * d_model

    def rank(self, d_model: int) -> int:
        return self.dt_rank if self.dt_rank is not None else -(-d_model // 16)

    def problems(self, spec) -> list[str]:
        out = []
        if self.activation not in ACTIVATION_FLOPS:
            out.append(f"kinds.mamba.activation={self.activation!r}: expected one of {', '.join(ACTIVATION_FLOPS)}")
        if not spec.causal:
            out.append("block_pattern has 'mamba' blocks, a causal scan: set causal=true")
        if spec.n_encoder_layers:
            out.append(f"block_pattern has 'mamba' blocks: not modelled in an encoder-decoder "
                       f"(n_encoder_layers={spec.n_encoder_layers})")
        return out


def mamba(ctx: Ctx) -> list[Op]:
    """The Mamba block: norm, in_proj, the conv and its activation, x_proj, (dt/B/C norms), dt_proj, the scan,
    y * silu(z), out_proj."""
    spec, t, b, s, D = ctx.spec, ctx.t, ctx.b, ctx.s, ctx.spec.d_model
    z = spec.sizes("mamba")
    inner, n, K, r = z.inner(D), z.d_state, z.d_conv, z.rank(D)
    inference = ctx.workload.phase != "train"
    ops: list[Op] = [
        Matmul(ctx.name("mamba/in_proj"), t, D, 2 * inner, 1, z.bias, None, "column",
               linears=(Linear("in_proj", 2 * inner),)),  # [t, D] @ [D, 2 d_inner]
        # x: [b, d_inner, s] through d_inner filters of [1, K] (groups = d_inner), padded by K - 1, sliced
        # it keeps its input (a view of in_proj's output, which stays whole: its other half, z, is the activation's
        # figure below) and its padded output, which the activation reads a slice of
        Conv(ctx.name("mamba/conv"), b, s, inner, K, outputs(ctx, K), z.conv_bias, K - 1 if inference else 0,
             output_kept=True),
        Elementwise(ctx.name("mamba/conv"), "activation", t * inner, ACTIVATION_FLOPS[z.activation], z.activation),
        Matmul(ctx.name("mamba/x_proj"), t, inner, r + 2 * n, 1, False, None, "row",
               linears=(Linear("x_proj", r + 2 * n),)),  # [t, d_inner] @ [d_inner, r + 2n]
    ]
    if z.inner_norms:  # Jamba: RMSNorms over dt [t, r], B [t, n], C [t, n]
        ops += [Norm(ctx.name("mamba/dt_norm"), "rmsnorm", t, r), Norm(ctx.name("mamba/b_norm"), "rmsnorm", t, n),
                Norm(ctx.name("mamba/c_norm"), "rmsnorm", t, n)]
    ops += [
        # dt: [d_inner, r] @ [b, r, s] (dt_proj's weight; its bias [d_inner] is added in the scan)
        # transformers multiplies by dt_proj.weight, never calling the module: a LoRA adapter on it does not run;
        # (without the norms its input dt is a view of x_proj's output [t, r + 2n], which it keeps whole)
        Matmul(ctx.name("mamba/dt_proj"), t, r, inner, 1, True, None, "column",
               input_kept=0 if z.inner_norms else t * (r + 2 * n), linears=(Linear("dt_proj", inner, unused=True),)),
        # x, dt: [b, d_inner, s], B, C: [b, s, n] -> y: [b, d_inner, s], one bmm [b, d_inner, n] @ [b, n, 1] a token
        SelectiveScan(ctx.name("mamba/scan"), b, s, inner, n, inference),
        Elementwise(ctx.name("mamba/scan"), "gate", t * inner, ACTIVATION_FLOPS["silu"] + 1),  # y * silu(z)
        Matmul(ctx.name("mamba/out_proj"), t, inner, D, 1, z.bias, None, "row",
               linears=(Linear("out_proj", D),)),  # [t, d_inner] @ [d_inner, D]
    ]
    return sublayer(ctx, "mamba", ops)


register(BlockKind("mamba", mamba, family="mixer", norm="mamba", in_pattern=True,
                   reference=f"{__name__}.reference", sizes=MambaSizes,
                   components=((r"mamba\.(in_proj|conv|x_proj|dt_norm|b_norm|c_norm|dt_proj|scan|out_proj)",
                                r"mamba/\1"),)))
