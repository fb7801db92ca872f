"""The `patch_embedding` kind's torch module: ViT's embeddings (transformers' ViTEmbeddings), run as it runs them:
a Conv2d of kernel and stride patch_size over the images, flattened to [B, patches, D], the class token before them
(if any), the position table added (bicubically interpolated to another image's grid, as interpolate_pos_encoding does).
With temporal_patch_size T > 1 (Qwen2-VL's PatchEmbed) a Conv3d of kernel and stride (T, p, p) over each image
repeated to T frames; without a bias, a class token or a position table where the sizes and positions say so. A packed
tower (Pixtral's) concatenates every image's patches into one sequence [1, images x patches, D]. Qwen3-VL's table
beside the rotary (`position_table` rows): resampled to the image's grid bilinearly (align_corners), as transformers
does it, 4 gathered rows per patch weighted and summed (no matmul), and added."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import make_norm
from ...spec import ModelSpec


class PatchConv(nn.Conv2d):
    """[B, C, H, W] -> [B, patches, D]. Under fvcore's jit trace on the meta device (where torch's meta convolution
    cannot check traced shapes) the same products as one matmul over the patches, [B * patches, C*p*p] @ [C*p*p, D]:
    fvcore counts it as it counts the convolution (B x patches x D x C*p*p multiply-adds)."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if not (torch.jit.is_tracing() and images.device.type == "meta"):
            return super().forward(images).flatten(2).transpose(1, 2)
        B, C, H, W = images.shape
        p = self.kernel_size[0]
        patches = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5).reshape(B, -1, C * p * p)
        out = patches @ self.weight.reshape(self.out_channels, -1).t()
        return out if self.bias is None else out + self.bias


class PatchConv3d(nn.Conv3d):
    """[B, C, H, W] -> [B, patches, D]: the image repeated to T frames (as Qwen2-VL's processor lays it out), one
    Conv3d of kernel and stride (T, p, p). Under fvcore's jit trace on meta, the same products as one matmul over the
    patches, [B * patches, C*T*p*p] @ [C*T*p*p, D]."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        T, p = self.kernel_size[0], self.kernel_size[1]
        frames = images.unsqueeze(2).expand(-1, -1, T, -1, -1)  # [B, C, T, H, W]
        if not (torch.jit.is_tracing() and images.device.type == "meta"):
            return super().forward(frames).flatten(2).transpose(1, 2)
        B, C, _, H, W = frames.shape
        patches = frames.reshape(B, C, T, H // p, p, W // p, p).permute(0, 3, 5, 1, 2, 4, 6)
        patches = patches.reshape(B, -1, C * T * p * p)
        out = patches @ self.weight.reshape(self.out_channels, -1).t()
        return out if self.bias is None else out + self.bias


class Parameter(nn.Module):
    """One learned tensor as a module of its own (`weight`), so that its name maps onto its component."""

    def __init__(self, *shape: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(*shape))


class PositionResize(nn.Module):
    """SigLIP2's resampling of the position table to an image's patches: interpolation weights [B, patches, rows]
    (built from the grids, no gradient) @ the table [rows, D], as transformers' resize_positional_embeddings runs it."""

    def forward(self, table: torch.Tensor, batch: int, patches: int) -> torch.Tensor:
        rows = table.shape[-2]
        weights = torch.full((batch, patches, rows), 1.0 / rows, device=table.device, dtype=table.dtype)
        return weights @ table.reshape(rows, -1)


def bilinear_taps(side: int, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each patch of a rows x cols grid (raster order): the 4 rows of a side x side table that bilinear
    resampling (align_corners) reads, and their weights: ([patches, 4] indices, [patches, 4] weights)."""
    def axis(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        at = torch.linspace(0, side - 1, n)
        lo = at.floor().long()
        return lo, (lo + 1).clamp(max=side - 1), at - lo

    r0, r1, fr = axis(rows)
    c0, c1, fc = axis(cols)
    r0, r1, fr = r0[:, None], r1[:, None], fr[:, None]
    index = torch.stack([r0 * side + c0, r0 * side + c1, r1 * side + c0, r1 * side + c1], -1).reshape(-1, 4)
    weight = torch.stack([(1 - fr) * (1 - fc), (1 - fr) * fc, fr * (1 - fc), fr * fc], -1).reshape(-1, 4)
    return index, weight


class TileMask(nn.Module):
    """Mllama's attention mask over each image's S tokens, built as transformers builds it: the padding mask m [B, S, 1]
    (a constant: no gradient) times its transpose, [B, S, 1] @ [B, 1, S]. Its first column is added to the stream (all
    zeros: the reference attends over every token, the pads too, as the eager model computes them), so that a tracer
    keeps it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = torch.zeros(x.shape[0], x.shape[1], 1, device=x.device, dtype=x.dtype)
        mask = m @ m.transpose(-1, -2)
        return x + mask[:, :, :1]


class PatchEmbedding(nn.Module):
    """The stack's input from images: `patch` (the convolution), `class_token` [1, 1, D], `position` [1, rows, D]."""

    token = per_layer = None  # (the frame asks every stack's input for its token table and per-layer embeddings)

    def __init__(self, spec: ModelSpec):
        super().__init__()
        sizes, D = spec.sizes("patch_embedding"), spec.d_model
        self.grid = sizes.table_grid  # the position table's grid (its rows resampled to another image's)
        T, p = sizes.temporal_patch_size, sizes.patch_size
        self.patch = (PatchConv(sizes.channels, D, p, stride=p, bias=sizes.bias) if T == 1 else
                      PatchConv3d(sizes.channels, D, (T, p, p), stride=(T, p, p), bias=sizes.bias))
        self.class_token = Parameter(1, 1, D) if sizes.class_token else None
        # rotary positions (Qwen2-VL's 2-D rotary over the grid): no table, nothing added here
        self.position = Parameter(1, spec.max_positions, D) if spec.positions == "learned" else None
        # Qwen3-VL: a table beside the rotary, resampled to each image's grid
        self.position_table = Parameter(sizes.position_table, D) if sizes.position_table else None
        self.table_grid = sizes.position_grid  # GLM-4.1V: a table of its own beside rotary positions
        if self.table_grid is not None:
            self.position = Parameter(1, self.table_grid ** 2, D)
        # Gemma 4: a [2, rows, D] table, each patch's x and y rows looked up and summed
        self.axis_table = Parameter(2, sizes.axis_table, D) if sizes.axis_table else None
        self.norm = make_norm(spec) if spec.embedding_norm else None  # CLIP's pre_layrnorm
        self.position_resize = PositionResize() if sizes.resized_positions else None  # SigLIP2
        self.packed = sizes.packed  # Pixtral: every image's patches one sequence
        # Mllama: tiles of each image, padded to pad_to tokens each, and its gated aspect-ratio tables
        self.tiled, self.tiles, self.pad_to = sizes.tiled, sizes.tiles, sizes.pad_to
        self.position_gate = self.tile_position = self.pre_tile = self.pre_tile_gate = self.tile_mask = None
        if sizes.tile_tables:
            R, T, N = sizes.tile_tables, sizes.tiles, spec.max_positions
            self.position_gate = Parameter(1)
            self.tile_position = nn.Embedding(R, T * N * D)
            self.pre_tile = nn.Embedding(R, T * D)
            self.pre_tile_gate = Parameter(1)
            self.tile_mask = TileMask()

    def positions(self, height: int, width: int) -> torch.Tensor:
        """The table at this image's grid: as it is, or its patch rows resampled bicubically (the class token's row
        as it is)."""
        table = self.position.weight
        if (height, width) == self.grid:
            return table
        first = 1 if self.class_token is not None else 0
        D = table.shape[-1]
        grid = table[:, first:].reshape(1, *self.grid, D).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(height, width), mode="bicubic", align_corners=False)
        return torch.cat([table[:, :first], grid.permute(0, 2, 3, 1).reshape(1, -1, D)], dim=1)

    def tiled_forward(self, images: torch.Tensor) -> torch.Tensor:
        """Mllama (MllamaVisionModel.forward up to its blocks): images [B, tiles, C, H, W] -> [B, tiles * padded
        tokens, D]. Every image takes aspect-ratio id 0 (any row: a lookup either way)."""
        B, T = images.shape[:2]
        x = self.patch(images.flatten(0, 1))  # [B*T, patches, D]
        D = x.shape[-1]
        ids = torch.zeros(B, dtype=torch.long, device=images.device)
        if self.pre_tile is not None:  # gated pre-tile table, one row of T*D per image
            x = x.view(B, T, -1, D) + self.pre_tile(ids).view(B, T, 1, D) * self.pre_tile_gate.weight.tanh()
            x = x.flatten(0, 1)
        if self.class_token is not None:
            x = torch.cat([self.class_token.weight.expand(x.shape[0], -1, -1), x], dim=1)
        N = x.shape[1]
        x = x.view(B, T, N, D)
        if self.position_gate is not None:  # (1 - tanh g) * table + tanh g * the tile position table
            gate = self.position_gate.weight.tanh()
            x = x + (1 - gate) * self.position.weight.view(1, 1, N, D)
            x = x + gate * self.tile_position(ids).view(B, T, N, D)
        elif self.position is not None:
            x = x + self.position.weight.view(1, 1, N, D)
        if self.norm is not None:
            x = self.norm(x)
        x = F.pad(x, (0, 0, 0, -N % self.pad_to)).reshape(B, -1, D)  # each tile padded to pad_to tokens
        return x if self.tile_mask is None else self.tile_mask(x)

    def forward(self, images: torch.Tensor, token_types=None, offset: int = 0, table=None) -> torch.Tensor:
        if self.tiled:
            return self.tiled_forward(images)
        p = self.patch.kernel_size[-1]
        x = self.patch(images)
        if self.packed:  # [images, patches, D] -> [1, images * patches, D] (no class token, no table)
            x = x.reshape(1, -1, x.shape[-1])
        if self.class_token is not None:
            x = torch.cat([self.class_token.weight.expand(x.shape[0], -1, -1), x], dim=1)
        if self.position_resize is not None:  # every forward, at any size (SigLIP2)
            x = x + self.position_resize(self.position.weight, x.shape[0], x.shape[1])
        elif self.table_grid is not None:  # GLM-4.1V: the g x g table resampled bicubically to the image's grid
            g, D = self.table_grid, x.shape[-1]
            grid = self.position.weight.reshape(1, g, g, D).permute(0, 3, 1, 2)
            grid = F.interpolate(grid, size=(images.shape[-2] // p, images.shape[-1] // p), mode="bicubic",
                                 align_corners=False)
            x = x + grid.permute(0, 2, 3, 1).reshape(1, -1, D)
        elif self.position is not None:
            x = x + self.positions(images.shape[-2] // p, images.shape[-1] // p)
        if self.position_table is not None:  # gathers, weights and a sum: no matmul
            table = self.position_table.weight
            index, weight = bilinear_taps(int(table.shape[0] ** 0.5), images.shape[-2] // p, images.shape[-1] // p)
            rows = F.embedding(index.to(table.device), table)  # [patches, 4, D]
            x = x + (rows * weight.to(table.device, table.dtype)[:, :, None]).sum(1)
        if self.axis_table is not None:  # Gemma 4: the x row of each patch's column plus the y row of its row
            rows, cols = images.shape[-2] // p, images.shape[-1] // p
            y, xs = (i.reshape(-1).to(x.device) for i in torch.meshgrid(torch.arange(rows), torch.arange(cols),
                                                                       indexing="ij"))
            table = self.axis_table.weight
            x = x + F.embedding(xs, table[0]) + F.embedding(y, table[1])
        return x if self.norm is None else self.norm(x)


input_module = PatchEmbedding  # the stack's input, as the reference model builds it


def example_images(spec: ModelSpec, batch: int, image_size: tuple[int, int] | None, device, generator=None,
                   seq_len: int | None = None):
    """[B, C, H, W] images at `image_size` (default: the model's); a packed tower's (Pixtral's) one sequence of
    seq_len tokens is seq_len / patches images; [B, tiles, C, H, W] for a tiled tower (Mllama)."""
    sizes = spec.sizes("patch_embedding")
    H, W = image_size or (sizes.height, sizes.width)
    if sizes.packed and seq_len is not None:
        batch *= seq_len // sizes.tokens(H, W)
    shape = (batch, sizes.tiles, sizes.channels, H, W) if sizes.tiled else (batch, sizes.channels, H, W)
    if str(device) == "meta":
        return torch.empty(*shape, device=device)
    return torch.randn(*shape, device=device, generator=generator)
