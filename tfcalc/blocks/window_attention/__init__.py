"""Self-attention within windows of an image's patch grid (`window_attention`; Qwen2.5-VL's vision tower): the
attention kind's projections (fused q/k/v, out), its core run separately in each window of `window` x `window`
patches, as transformers' eager path runs it (Qwen2_5_VLVisionAttention splits q, k and v by cu_window_seqlens and
attends within each piece). The grid of H/p x W/p patches is cut into windows from its top-left corner: along each
side, full windows of `window` patches and, where the side is not a multiple of it, one window of the rest (the
padding transformers' get_vision_window_index adds holds no patch). A window of a x b patches is a x b queries
against the same a x b keys: a record per distinct window shape, with the windows of that shape (over every image)
as its batch. So forward counts exactly the pairs the eager model computes (sum over windows of (a b)^2), never a
masked N x N; the windowed figure is the same (no causal mask). Blocks the family marks global (fullatt_block_indexes)
are the `attention` kind: every patch of an image against every other.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import BlockKind, Ctx, register, sublayer
from ...arch.ops import Op
from ...sizes import Size
from ..attention import mixer


class WindowSizes(BaseModel):
    """The `window_attention` kind's own sizes (a spec's `[kinds.window_attention]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    window: Size = Field(8, description="Patches per side of a window (Qwen2.5-VL: window_size // patch_size // "
                                        "spatial_merge_size merged tokens, times spatial_merge_size: 112 // 14 // 2 "
                                        "* 2 = 8).")

    def problems(self, spec) -> list[str]:
        out = []
        if spec.inputs != "images":
            out.append(f"kinds.window_attention: windows of an image's patch grid need a model of images "
                       f"(inputs='images'), got inputs={spec.inputs!r}")
        elif spec.causal:
            out.append("kinds.window_attention: a bidirectional encoder's windows; set causal=false")
        else:
            merge = spec.sizes("patch_embedding").merge_size
            if self.window % merge:
                out.append(f"kinds.window_attention.window={self.window}: not a multiple of "
                           f"kinds.patch_embedding.merge_size={merge} (windows hold whole merge blocks)")
        return out


def pieces(n: int, window: int) -> list[tuple[int, int]]:
    """(length, how many) of the windows along a side of n patches: full ones, then the rest."""
    full, rest = divmod(n, window)
    return [(length, count) for length, count in ((window, full), (rest, 1)) if length and count]


def windows(ctx: Ctx) -> list[tuple[int, int]]:
    """(patches in a window, windows of that shape per image), one entry per distinct window shape."""
    spec = ctx.spec
    sizes = spec.sizes("patch_embedding")
    H, W = ctx.workload.image_size or (sizes.height, sizes.width)
    window = spec.sizes("window_attention").window
    rows, cols = H // sizes.patch_size, W // sizes.patch_size
    return [(a * b, na * nb) for a, na in pieces(rows, window) for b, nb in pieces(cols, window)]


def window_attention(ctx: Ctx) -> list[Op]:
    """Norm, the attention kind's projections around one core per window shape, residual."""
    ops = []
    for op in mixer(ctx):
        if op.role == "core":  # the image's N x N core -> each window's n x n
            ops += [replace(op, b=ctx.b * count, s_q=n, s_k=n) for n, count in windows(ctx)]
        else:
            ops.append(op)
    return sublayer(ctx, "attention", ops)


register(BlockKind("window_attention", window_attention, family="attention", norm="attention", in_pattern=True,
                   reference=f"{__name__}.reference", sizes=WindowSizes,
                   components=((r"attention\.(qkv|core|out)", r"attention/\1"),)))
