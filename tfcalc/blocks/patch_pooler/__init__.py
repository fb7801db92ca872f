"""A spatial pooler after a vision tower's blocks (`patch_pooler`; Gemma 4's Gemma4VisionPooler): each kernel x
kernel block of an image's patch grid averaged into one token, then every token scaled by sqrt(d_model) (elementwise,
no parameters). transformers averages with a matmul, so it is counted as one: per image, one-hot weights [patches /
kernel^2, patches] (built from the patches' positions, divided by kernel^2; no gradient) @ the blocks' output [patches,
D]: a bmm torch's FlopCounterMode counts, 2 * (patches / kernel^2) * patches * D FLOPs, its backward the input's
gradient alone (role "patch", as SigLIP2's position resize). With kernel 1 the tower's output is its patches: no
matmul. The pooled tokens are what the tower puts out (the connector's `pool` = kernel^2 says so to the prompt); an
image's sides are multiples of patch_size * kernel (kinds.patch_embedding.merge_size = kernel)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import BlockKind, Ctx, register
from ...arch.ops import Matmul, Op
from ...sizes import Size


class PoolerSizes(BaseModel):
    """The `patch_pooler` kind's own sizes (a spec's `[kinds.patch_pooler]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    kernel: Size = Field(description="Each kernel x kernel block of patches averaged into one token (Gemma 4's "
                                     "pooling_kernel_size); kinds.patch_embedding.merge_size is the same.")

    def problems(self, spec) -> list[str]:
        if spec.inputs != "images":
            return [f"kinds.patch_pooler: a pooler of image patches needs a model of images (inputs='images'), got "
                    f"inputs={spec.inputs!r}"]
        patches = spec.sizes("patch_embedding")
        out = []
        if patches.merge_size != self.kernel:
            out.append(f"kinds.patch_pooler.kernel={self.kernel}: kinds.patch_embedding.merge_size="
                       f"{patches.merge_size} must equal it (an image's sides are multiples of patch_size * kernel)")
        if patches.class_token:
            out.append("kinds.patch_pooler: the pooled tower's patches have no class token; set "
                       "kinds.patch_embedding.class_token=false")
        return out


def patch_pooler(ctx: Ctx) -> list[Op]:
    k2 = ctx.spec.sizes("patch_pooler").kernel ** 2
    if k2 == 1:  # transformers pools only when the output is shorter than the patches
        return []
    # per image: one-hot weights [patches / k^2, patches] @ x [patches, D] (no weights of the model's)
    return [Matmul("pooler", ctx.b * (ctx.s // k2), ctx.s, ctx.spec.d_model, weights=0, role="patch")]


register(BlockKind("patch_pooler", patch_pooler, in_block=False, sizes=PoolerSizes,
                   reference=f"{__name__}.reference", components=((r"patch_pooler", "pooler"),)))
