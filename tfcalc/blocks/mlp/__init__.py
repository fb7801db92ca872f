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
from ...arch.ops import Elementwise, Matmul, Op


def ffn(ctx: Ctx, names: tuple[str, str, str], rows: int, width: int, weights: int = 1,
         active: int | None = None) -> list[Op]:
    """up [and gate] D -> width, the activation, down width -> D, over `rows` token rows; `names` are the
    components of (up, gate, down). Shared by the dense MLP and the experts."""
    spec, D, bias = ctx.spec, ctx.spec.d_model, ctx.spec.has_mlp_bias
    gated = spec.mlp == "gated"
    up, gate, down = (ctx.name(name) for name in names)
    ops: list[Op] = [Matmul(up, rows, D, width, weights, bias, active, "column")]  # x: [rows, D] @ W_up: [D, F]
    if gated:  # x: [rows, D] @ W_gate: [D, F], the same x as up's
        ops.append(Matmul(gate, rows, D, width, weights, bias, active, "column", shares_input=True))
    ops.append(Matmul(down, rows, width, D, weights, bias, active, "row"))  # h: [rows, F] @ W_down: [F, D]
    ops.append(Elementwise(up, "activation", rows * width,  # gated: act(gate) * up keeps both
                           ACTIVATION_FLOPS[spec.activation] + (GATE_MULTIPLY if gated else 0), spec.activation,
                           multiplies=2 if gated else 0))
    return ops


def mlp(ctx: Ctx) -> list[Op]:
    """A dense MLP: norm, up [and gate], activation, down, residual."""
    return sublayer(ctx, "mlp", ffn(ctx, ("mlp/up", "mlp/gate", "mlp/down"), ctx.t, d_ff(ctx)), beside_attention=True)


def d_ff(ctx: Ctx) -> int:
    """The dense MLP's width in this block: kv_shared_d_ff in a block that shares keys and values (Gemma 4)."""
    spec = ctx.spec
    return spec.kv_shared_d_ff if ctx.layer.kv_shared and spec.kv_shared_d_ff else spec.d_ff


register(BlockKind("mlp", mlp, family="mlp", norm="mlp", in_pattern=True, reference=f"{__name__}.reference",
                   components=((r"mlp\.(up|gate|down)", r"mlp/\1"),)))
