"""A model of images' input (`patch_embedding`; ViT): each image cut into patch_size x patch_size patches, each patch
projected to d_model, a learned class token before them (none in SigLIP) and a learned position table added, then
a norm when the spec has `embedding_norm` (CLIP's pre_layrnorm).

The projection is a convolution whose stride equals its kernel (transformers' ViTPatchEmbeddings.projection, a Conv2d
of C -> D channels, kernel and stride p): the patches do not overlap, so it is one matmul over the patches,
[B * patches, C * p * p] @ [C * p * p, D], with its bias [D] (none in CLIP: `bias`), and counted as that matmul
(2 FLOPs per multiply-add, as torch's FlopCounterMode counts the convolution). The class token is a [1, D] parameter, the position table
[patches + 1, D] at the model's image size (the kind's sizes, `kinds.patch_embedding`); an image of another size
(Workload.image_size) runs with the table interpolated to its grid (transformers' interpolate_pos_encoding: a
bicubic resampling, no matmul, not counted), the parameters unchanged. Dropout is not work.

Qwen2-VL's and Qwen2.5-VL's vision towers (PatchEmbed: a Conv3d of kernel = stride = (temporal_patch_size, p, p), no
bias) read each image repeated to temporal_patch_size frames, so a patch is C * T * p * p pixels: [B * patches,
C*T*p*p] @ [C*T*p*p, D], no bias; no class token, and no position table (positions='rotary': a 2-D rotary over the
patch grid, no parameters). Their patches come in merge_size x merge_size blocks (spatial_merge_size: the patch merger
concatenates each block), so an image's sides are multiples of patch_size * merge_size.

Llama 3.2 Vision's tower (MllamaVisionModel) reads each image as `tiles` tiles of image_size (max_num_tiles; its
processor cuts and pads every image into them): each tile its patches and the class token, the tile's tokens padded
with zeros to a multiple of `pad_to` (8), and all the tiles of one image one sequence of the blocks (tokens per image
= tiles * pad(patches + 1)); the padding is dropped after the blocks (`kept`: tiles * (patches + 1) tokens out).
`tile_tables` > 0 (its max_aspect_ratio_id + 1 rows) adds its gated tables: the position table's gate [1], a tile
position table [rows, tiles * (patches + 1) * D] (gated_positional_embedding.tile_embedding), a pre-tile table [rows,
tiles * D] with its gate [1] (pre_tile_positional_embedding), looked up by each image's aspect-ratio id (no matmul);
and its attention mask, built per image as an outer product [S, 1] @ [1, S] of the padding mask over the S tokens
(_prepare_aspect_ratio_attention_mask: a bmm FlopCounterMode counts, 2 * S^2 FLOPs per image, `embedding/tile_mask`).
Its layernorm_pre (`embedding_norm`) runs over the unpadded tokens.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import BlockKind, Ctx, register
from ...arch.ops import Matmul, Norm, Op, Table
from ...sizes import Count, Size


class PatchSizes(BaseModel):
    """The `patch_embedding` kind's own sizes (a spec's `[kinds.patch_embedding]`), ViTConfig's names."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    image_size: Size | list[Size] = Field(224, description="The model's image, H (square) or [H, W] pixels: sizes "
                                                           "the position table (image_size)")
    patch_size: Size = Field(16, description="Each patch's side in pixels: the convolution's kernel and stride "
                                             "(patch_size).")
    channels: Size = Field(3, description="Channels of an input image (num_channels).")
    class_token: bool = Field(True, description="A learned class token before the patches (ViT's cls_token, CLIP's "
                                                "class_embedding; SigLIP and Qwen2-VL have none).")
    temporal_patch_size: Size = Field(1, description="Frames in a patch (Qwen2-VL's temporal_patch_size): the "
                                                     "convolution's kernel (T, p, p); an image is repeated to T "
                                                     "frames. 1: a Conv2d (ViT).")
    bias: bool = Field(True, description="A bias on the patches' projection (ViT, SigLIP: true; CLIP, Qwen2-VL's "
                                         "Conv3d: false).")
    merge_size: Size = Field(1, description="Patches come in merge_size x merge_size blocks that a patch merger "
                                            "concatenates (Qwen2-VL's spatial_merge_size): an image's sides are "
                                            "multiples of patch_size * merge_size. 1: no blocks (ViT).")
    tiles: Size = Field(1, description="Tiles of image_size per image, one sequence of the blocks (Mllama's "
                                       "max_num_tiles); 1: the image alone (ViT).")
    pad_to: Size = Field(1, description="Each tile's tokens padded with zeros to a multiple of this before the "
                                        "blocks, dropped after them (Mllama: 8).")
    tile_tables: Count = Field(0, description="Rows of Mllama's gated aspect-ratio tables (max_aspect_ratio_id + 1): "
                                              "a tile position table, a pre-tile table and their gates, and the "
                                              "tiles' attention mask; 0: none.")
    resized_positions: bool = Field(
        False, description="SigLIP2's NaFlex: the position table (a square grid of patches) resampled to each image's "
                           "patches in every forward by a matmul of interpolation weights, [B * patches, rows] @ "
                           "[rows, D]; no class token.")

    @property
    def height(self) -> int:
        return self.image_size if isinstance(self.image_size, int) else self.image_size[0]

    @property
    def width(self) -> int:
        return self.image_size if isinstance(self.image_size, int) else self.image_size[-1]

    @property
    def multiple(self) -> int:
        """What an image's sides are multiples of: the patch, times the merge blocks."""
        return self.patch_size * self.merge_size

    @property
    def patch_pixels(self) -> int:
        """Inputs of one patch: channels x frames x p x p (the convolution's kernel)."""
        return self.channels * self.temporal_patch_size * self.patch_size ** 2

    def patches(self, height: int, width: int) -> int:
        """Patches of an image of height x width pixels (each a multiple of patch_size)."""
        return (height // self.patch_size) * (width // self.patch_size)

    @property
    def tiled(self) -> bool:
        """Mllama's layout: tiles, padding or aspect-ratio tables."""
        return self.tiles > 1 or self.pad_to > 1 or self.tile_tables > 0

    def tile_tokens(self, height: int, width: int) -> int:
        """One tile's (one image's) patches and the class token, unpadded."""
        return self.patches(height, width) + int(self.class_token)

    def tokens(self, height: int, width: int) -> int:
        """The stack's tokens per image: its patches and the class token (of each tile, padded to pad_to)."""
        per_tile = self.tile_tokens(height, width)
        return self.tiles * (-(-per_tile // self.pad_to) * self.pad_to)

    def kept(self, height: int, width: int) -> int:
        """The tokens per image the stack puts out: its tokens without the padding."""
        return self.tiles * self.tile_tokens(height, width)

    def describe(self) -> str:
        merged = f", merge_size {self.merge_size}" if self.merge_size != 1 else ""
        return f"image_size {self.height}x{self.width}, patch_size {self.patch_size}{merged}"

    def covers(self) -> str:
        """What an image's sides must be multiples of, in words."""
        if self.merge_size == 1:
            return f"patch_size={self.patch_size} (the patches would not cover the image)"
        return (f"patch_size * merge_size = {self.multiple} (the patches would not cover the image in "
                f"{self.merge_size}x{self.merge_size} blocks)")

    def problems(self, spec) -> list[str]:
        out = []
        if self.resized_positions and self.class_token:
            out.append("kinds.patch_embedding.resized_positions=True: SigLIP2's patches have no class token; set "
                       "class_token=false")
        if not isinstance(self.image_size, int) and len(self.image_size) != 2:
            out.append(f"kinds.patch_embedding.image_size={self.image_size!r}: expected H or [H, W]")
        elif self.height % self.multiple or self.width % self.multiple:
            out.append(f"kinds.patch_embedding.image_size={self.image_size!r}: not a multiple of {self.covers()}")
        return out


def patch_embedding(ctx: Ctx) -> list[Op]:
    """The stack's input from images: the patches' projection, the class token, the position table (learned
    positions; rotary ones have none)."""
    spec = ctx.spec
    sizes = spec.sizes("patch_embedding")
    D = spec.d_model
    patches = ctx.s - int(sizes.class_token)  # per image: the workload's tokens less the class token
    normed = ctx.t
    tables: list[Op] = []
    if sizes.tiled:  # Mllama: per image its tiles' patches; layernorm_pre over the unpadded tokens
        H, W = ctx.workload.image_size or (sizes.height, sizes.width)
        patches, normed = sizes.tiles * sizes.patches(H, W), ctx.b * sizes.kept(H, W)
    if sizes.tile_tables:
        R, T, N = sizes.tile_tables, sizes.tiles, spec.max_positions
        tables = [
            Table(ctx.name("embedding/position"), 1, 1, "gate"),  # the position table's gate [1]
            Table(ctx.name("embedding/tile_position"), R, T * N * D, "position"),  # [rows, tiles * (patches + 1) * D]
            Table(ctx.name("embedding/pre_tile"), R, T * D, "position"),  # [rows, tiles * D]
            Table(ctx.name("embedding/pre_tile"), 1, 1, "gate"),  # its gate [1]
            # the mask over each image's S tokens: m [S, 1] @ m^T [1, S] (a bmm, no weights)
            Matmul(ctx.name("embedding/tile_mask"), ctx.t, 1, ctx.s, weights=0, role="constant"),
        ]
    return [
        # images [B, C, H, W] as patches x: [B * patches, C*T*p*p] @ W: [C*T*p*p, D] (the Conv2d's weight [D, C, p, p],
        # a Conv3d's [D, C, T, p, p] over the image repeated to T frames)
        Matmul(ctx.name("embedding/patch"), ctx.b * patches, sizes.patch_pixels, D, bias=sizes.bias, role="patch"),
        *([Table(ctx.name("embedding/class_token"), 1, D, "class_token")] if sizes.class_token else []),  # [1, D]
        *([Table(ctx.name("embedding/position"), spec.max_positions, D, "position")]  # [patches (+ 1), D]
          if spec.positions == "learned" else []),
        *tables,
        # SigLIP2: the table resampled to each image's patches, weights [B * patches, rows] @ table [rows, D] (the
        # table's parameters are the row above; the weights need no gradient: role "patch", as the images)
        *([Matmul(ctx.name("embedding/position_resize"), ctx.b * patches, spec.max_positions, D, weights=0,
                  role="patch")] if sizes.resized_positions else []),
        # CLIP's pre_layrnorm over every token, the class token's too
        *([Norm(ctx.name("embedding/norm"), spec.norm, normed, D)] if spec.embedding_norm else []),
    ]


register(BlockKind("patch_embedding", patch_embedding, in_block=False, sizes=PatchSizes,
                   reference=f"{__name__}.reference",
                   components=(((r"embedding\.(patch|class_token|position|position_resize|norm|tile_position|"
                                 r"pre_tile|tile_mask)"), r"embedding/\1"),
                               (r"embedding\.(position|pre_tile)_gate", r"embedding/\1"))))
