"""Between Llama 3.2 Vision's local and global encoders (`tile_position`; MllamaVisionModel's layernorm_post and
post_tile_positional_embedding), at the head of the first global block: a norm (the spec's) over every token of the
stream, the padding too, then a gated table of each image's tile positions added, [rows, tiles * D] looked up by
the image's aspect-ratio id and scaled by tanh of its gate [1] (no matmul). Its sizes are the patch embedding's
(kinds.patch_embedding.tiles and tile_tables).
"""

from __future__ import annotations

from ...arch.builders import RESIDUAL_ADD, BlockKind, Ctx, register
from ...arch.ops import Elementwise, Norm, Op, Table


def tile_position(ctx: Ctx) -> list[Op]:
    spec = ctx.spec
    sizes, D, t = spec.sizes("patch_embedding"), spec.d_model, ctx.t
    return [
        Norm(ctx.name("tile_position/norm"), spec.norm, t, D),  # layernorm_post over [T, D]
        Table(ctx.name("tile_position/table"), sizes.tile_tables, sizes.tiles * D, "position"),  # [rows, tiles * D]
        Table(ctx.name("tile_position/table"), 1, 1, "gate"),  # its gate [1]
        Elementwise(ctx.name("tile_position/table"), "residual", t * D, RESIDUAL_ADD),  # + tanh(g) * table
    ]


register(BlockKind("tile_position", tile_position, in_pattern=True, reference=f"{__name__}.reference",
                   components=((r"tile_position\.(norm|table)", r"tile_position/\1"),
                               (r"tile_position\.table_gate", "tile_position/table"))))
