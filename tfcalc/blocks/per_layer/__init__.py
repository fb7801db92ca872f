"""Gemma 4's per-layer input, after the MLP: x + norm(proj(act(gate(x)) * the block's slice of the per-layer
embeddings))."""

from __future__ import annotations

from ...arch.builders import ACTIVATION_FLOPS, RESIDUAL_ADD, BlockKind, Ctx, register
from ...arch.ops import Elementwise, Matmul, Norm, Op


def per_layer_input(ctx: Ctx) -> list[Op]:
    """Gemma 4's per-layer input, after the MLP: x + norm(proj(act(gate(x)) * the block's P slice))."""
    spec, t, D, P = ctx.spec, ctx.t, ctx.spec.d_model, ctx.spec.d_per_layer_input
    return [
        Matmul(ctx.name("per_layer/gate"), t, D, P),  # x: [T, D] @ W_gate: [D, P]
        Elementwise(ctx.name("per_layer/gate"), "activation", t * P, ACTIVATION_FLOPS[spec.activation] + 1,
                    spec.activation, multiplies=1),  # act(gate) * the block's slice: keeps act(gate)
        Matmul(ctx.name("per_layer/projection"), t, P, D),  # [T, P] @ W_proj: [P, D]
        Norm(ctx.name("per_layer/norm"), spec.norm, t, D),
        Elementwise(ctx.name("residual"), "residual", t * D, RESIDUAL_ADD),
    ]


register(BlockKind("per_layer_input", per_layer_input, reference=f"{__name__}.reference",
                   components=((r"per_layer\.(gate|projection|norm)", r"per_layer/\1"),)))
