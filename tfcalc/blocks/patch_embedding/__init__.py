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
patch grid, no parameters; GLM-4.1V's tower has a learned table too, `position_grid`^2 rows resampled bicubically to
each image's grid by grid_sample, not counted, and added). Their patches come in merge_size x merge_size blocks (spatial_merge_size: the patch merger
concatenates each block), so an image's sides are multiples of patch_size * merge_size.

Gemma 4's tower (Gemma4VisionPatchEmbedder): the patches' projection a Linear(3 p^2, D) without a bias (the same
matmul), no class token, and a factorised table [2, axis_table, D] (position_embedding_size rows per axis): each patch
adds its column's x row and its row's y row (two lookups and a sum, no matmul), beside a 2-D rotary in the blocks.

Pixtral's tower (PixtralVisionModel: a Conv2d of kernel and stride p without a bias, no class token, no table; a 2-D
rotary) reads images of any size up to image_size (`up_to_image_size`) and cuts every image of the step to its own
patch grid, then CONCATENATES them into one sequence (`packed`): the blocks attend over all the images' patches at
once, a block-diagonal mask keeping each image's own pairs. The eager forward still computes every pair of that one
sequence (the mask is added to the scores), so the tower's workload is one sequence of images x patches tokens
(towers.tower_workload) and forward counts (images x patches)^2 pairs, as FlopCounterMode sees them.

Qwen3-VL's and Qwen3.5's vision towers: the same Conv3d with a bias, and beside the 2-D rotary a learned table of
`position_table` rows (pos_embed, a square grid of positions) resampled to each image's grid in every forward:
bilinear, each patch the weighted sum of 4 gathered rows (no matmul: FlopCounterMode counts nothing of it), added to
the patches. Its parameters are [rows, D] at any image size.

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
    fixed_size: bool = Field(False, description="Images are tiles of image_size alone (Llama 4: its processor cuts "
                                           "each image into them; the position table and the 2-D rotary are the "
                                           "config's grid's, added as they are, never interpolated).")
    packed: bool = Field(
        False, description="Every image of the step is one sequence: the images' patches concatenated (Pixtral), "
                           "the blocks attending over all of them at once under a block-diagonal mask (the eager "
                           "model computes every pair). A workload of k images is batch_size 1, seq_len k x "
                           "tokens per image.")
    up_to_image_size: bool = Field(
        False, description="image_size is the largest image it reads, not its one size (Pixtral: the processor "
                           "resizes a larger image down to it): any size up to it, each side a multiple of the patch.")
    position_grid: Size | None = Field(
        None, description="GLM-4.1V's vision embeddings: a learned position table of position_grid x position_grid "
                          "rows (image_size // patch_size a side) beside rotary positions, resampled to each image's "
                          "patch grid by a bicubic grid_sample (no matmul, not counted) and added. None: the table, "
                          "if any, is the spec's learned positions (ViT).")
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

    position_table: Count = Field(
        0, description="Rows of a learned position table beside rotary positions (Qwen3-VL's pos_embed, "
                       "num_position_embeddings), resampled bilinearly to each image's grid by gathers and weighted "
                       "sums (no matmul). 0: none.")

    axis_table: Count = Field(
        0, description="Rows of Gemma 4's factorised position table [2, rows, D] (position_embedding_size): each "
                       "patch's x row and y row looked up and summed (no matmul), beside the 2-D rotary. 0: none.")

    table_size: Size | None = Field(
        None, description="The side in pixels of the square image whose patch grid the learned position table holds, "
                          "when it is not the model's image (MiniCPM-V: its vision image_size 980, a table of 70 x 70 "
                          "rows bucketed to each image's grid; the model's image is the processor's 448). None: the "
                          "model's image's.")

    @property
    def table_rows(self) -> int:
        """Rows of the learned position table: the patches (and the class token) of the model's image (of one tile:
        Mllama), or of table_size's square."""
        if self.table_size is None:
            return self.tile_tokens(self.height, self.width)
        return (self.table_size // self.patch_size) ** 2 + int(self.class_token)

    @property
    def table_grid(self) -> tuple[int, int]:
        """The patch grid (rows, columns) the learned position table is laid out on."""
        if self.table_size is None:
            return self.height // self.patch_size, self.width // self.patch_size
        return (self.table_size // self.patch_size,) * 2

    @property
    def height(self) -> int:
        """The model's image's height (up_to_image_size: the largest it reads, a whole number of patch blocks)."""
        side = self.image_size if isinstance(self.image_size, int) else self.image_size[0]
        return side // self.multiple * self.multiple if self.up_to_image_size else side

    @property
    def width(self) -> int:
        side = self.image_size if isinstance(self.image_size, int) else self.image_size[-1]
        return side // self.multiple * self.multiple if self.up_to_image_size else side

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

    def refusal(self, height: int, width: int) -> str:
        """Why an image of height x width pixels cannot be read ('' when it can): a tower of tiles reads its own
        size alone."""
        if self.fixed_size and (height, width) != (self.height, self.width):
            return (f"reads tiles of {self.height}x{self.width} alone (its processor cuts each image "
                    "into them; --images counts the tiles)")
        return ""

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
        if self.packed and self.class_token:
            out.append("kinds.patch_embedding.packed=True: a packed tower's images have no class token (Pixtral's); "
                       "set class_token=false")
        if self.resized_positions and self.class_token:
            out.append("kinds.patch_embedding.resized_positions=True: SigLIP2's patches have no class token; set "
                       "class_token=false")
        if self.position_table and spec.positions == "learned":
            out.append(f"kinds.patch_embedding.position_table={self.position_table}: a second table beside "
                       "positions='learned' (its table is the model's own); expected 0")
        if self.axis_table and spec.positions == "learned":
            out.append(f"kinds.patch_embedding.axis_table={self.axis_table}: a second table beside "
                       "positions='learned' (its table is the model's own); expected 0")
        if self.position_grid is not None and spec.positions == "learned":
            out.append(f"kinds.patch_embedding.position_grid={self.position_grid}: a table beside rotary positions "
                       "(GLM-4.1V's); with positions='learned' the spec's own table is the positions")
        if self.table_size is not None and (spec.positions != "learned" or self.tiled):
            out.append(f"kinds.patch_embedding.table_size={self.table_size}: the grid of a learned position table "
                       "(positions='learned', one image a sequence); leave it out")
        if not isinstance(self.image_size, int) and len(self.image_size) != 2:
            out.append(f"kinds.patch_embedding.image_size={self.image_size!r}: expected H or [H, W]")
        elif self.up_to_image_size and min(self.height, self.width) == 0:
            out.append(f"kinds.patch_embedding.image_size={self.image_size!r}: under {self.covers()}")
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
        # Qwen3-VL: a table [rows, D] beside the rotary, resampled to each image's grid by gathers (no matmul)
        *([Table(ctx.name("embedding/position"), sizes.position_table, D, "position")]
          if sizes.position_table else []),
        # GLM-4.1V: a [grid^2, D] table beside rotary positions, resampled to the image's grid (grid_sample: no matmul)
        *([Table(ctx.name("embedding/position"), sizes.position_grid ** 2, D, "position")]
          if sizes.position_grid is not None else []),
        # Gemma 4: a [2, rows, D] table, each patch's x and y rows looked up and summed (no matmul)
        *([Table(ctx.name("embedding/position"), 2 * sizes.axis_table, D, "position")] if sizes.axis_table else []),
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
                               (r"embedding\.(position|pre_tile)_gate", r"embedding/\1"),
                               (r"embedding\.(position_table|axis_table)", "embedding/position"))))
