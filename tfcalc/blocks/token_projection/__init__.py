"""A linear over every token after a tower's stack (`token_projection`; Gemma 4's audio output_proj, Linear(D, d_out)
with a bias): the tower's output is d_out wide. A frame kind after the stack, as `patch_merger` is
(`ModelSpec.output_kinds`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import BlockKind, Ctx, register
from ...arch.ops import Matmul, Op
from ...sizes import Size


class ProjectionSizes(BaseModel):
    """The `token_projection` kind's own sizes (a spec's `[kinds.token_projection]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    d_out: Size = Field(description="Its output width (Gemma 4's audio output_proj_dims).")
    bias: bool = Field(True, description="A bias on it.")

    def problems(self, spec) -> list[str]:
        return []


def token_projection(ctx: Ctx) -> list[Op]:
    sizes = ctx.spec.sizes("token_projection")
    # every token x: [B * s, D] @ W: [D, d_out] (+ b)
    return [Matmul("output_proj", ctx.t, ctx.spec.d_model, sizes.d_out, bias=sizes.bias)]


register(BlockKind("token_projection", token_projection, in_block=False, sizes=ProjectionSizes,
                   reference=f"{__name__}.reference", components=((r"output_proj", "output_proj"),)))
