"""The dense MLP: up [and gate] D -> d_ff, the activation, down d_ff -> D (`ffn`, shared with the experts)."""

from __future__ import annotations

from ...arch.builders import (
    ACTIVATION_FLOPS,
    GATE_MULTIPLY,
    BlockKind,
    Ctx,
    register,
    sublayer,
)
from ...arch.ops import Elementwise, Linear, Matmul, Op


def ffn(ctx: Ctx, names: tuple[str, str, str], rows: int, width: int, weights: int = 1,
         active: int | None = None, d_in: int | None = None) -> list[Op]:
    """up [and gate] D -> width, the activation, down width -> D, over `rows` token rows; `names` are the
    components of (up, gate, down); D is d_in where given (experts on a latent width). Shared by the dense MLP and
    the experts."""
    spec, D, bias = ctx.spec, d_in or ctx.spec.d_model, ctx.spec.has_mlp_bias
    gated = spec.mlp == "gated"
    up, gate, down = (ctx.name(name) for name in names)
    lin_up, lin_gate, lin_down = _linears(width, D, gated, routed=active is not None)
    # x: [rows, D] @ W_up: [D, F]
    ops: list[Op] = [Matmul(up, rows, D, width, weights, bias, active, "column", linears=lin_up)]
    if gated:  # x: [rows, D] @ W_gate: [D, F], the same x as up's
        ops.append(Matmul(gate, rows, D, width, weights, bias, active, "column", shares_input=True, linears=lin_gate))
    # h: [rows, F] @ W_down: [F, D]
    ops.append(Matmul(down, rows, width, D, weights, bias, active, "row", linears=lin_down))
    ops.append(Elementwise(up, "activation", rows * width,  # gated: act(gate) * up keeps both
                           ACTIVATION_FLOPS[spec.activation] + (GATE_MULTIPLY if gated else 0), spec.activation,
                           multiplies=2 if gated else 0))
    return ops


def _linears(width: int, D: int, gated: bool, routed: bool) -> tuple[tuple[Linear, ...], ...]:
    """up, gate and down as an adapter sees them. A dense MLP's (and shared experts'): up_proj, gate_proj, down_proj.
    Routed experts (transformers 5 stacks them in 3-D parameters, gate_up [E, 2F, D] and down [E, D, F]): PEFT
    adapts each parameter with its update folded into the weight (ParamWrapper), the fused gate_up at twice the rank
    (it stands for w1 and w3, each of rank r, as the experts' "experts" or "all-linear" targets give it)."""
    if not routed:
        return (Linear("up", width),), (Linear("gate", width),), (Linear("down", D),)
    if not gated:
        return (Linear("experts", width, delta=True),), (), (Linear("experts", D, delta=True),)
    return ((Linear("experts", 2 * width, 2, delta=True),), (Linear("experts", width, 2, delta=True, part=True),),
            (Linear("experts", D, delta=True),))


def mlp(ctx: Ctx) -> list[Op]:
    """A dense MLP: norm, up [and gate], activation, down, residual."""
    return sublayer(ctx, "mlp", ffn(ctx, ("mlp/up", "mlp/gate", "mlp/down"), ctx.t, d_ff(ctx)), beside_attention=True)


def d_ff(ctx: Ctx) -> int:
    """The dense MLP's width in this block: kv_shared_d_ff in a block that shares keys and values (Gemma 4)."""
    spec = ctx.spec
    return spec.kv_shared_d_ff if ctx.layer.kv_shared and spec.kv_shared_d_ff else spec.d_ff


register(BlockKind("mlp", mlp, family="mlp", norm="mlp", in_pattern=True, reference=f"{__name__}.reference",
                   components=((r"mlp\.(up|gate|down)", r"mlp/\1"),)))
