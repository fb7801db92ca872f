"""The `tile_position` kind's torch module (Mllama's layernorm_post and post_tile_positional_embedding)."""

from __future__ import annotations

import torch
from torch import nn

from ...reference.layers import make_norm
from ..patch_embedding.reference import Parameter


class TilePosition(nn.Module):
    """x [B, tiles * tokens, D] -> norm(x) + tanh(g) * the image's row of the table, one [D] per tile (every image
    takes aspect-ratio id 0: any row, a lookup either way)."""

    def __init__(self, spec):
        super().__init__()
        sizes = spec.sizes("patch_embedding")
        self.tiles = sizes.tiles
        self.norm = make_norm(spec)
        self.table = nn.Embedding(sizes.tile_tables, sizes.tiles * spec.d_model)
        self.table_gate = Parameter(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        x = self.norm(x).view(B, self.tiles, S // self.tiles, D)
        ids = torch.zeros(B, dtype=torch.long, device=x.device)
        x = x + self.table(ids).view(B, self.tiles, 1, D) * self.table_gate.weight.tanh()
        return x.reshape(B, S, D)


def attach(block: nn.Module, site) -> None:
    block.tile_position = TilePosition(site.spec)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.tile_position(x)
