"""The `patch_merger` kind's torch module: ln_q, each m x m block of patches concatenated, up, GELU, down."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import make_norm


class PatchMerger(nn.Module):
    """[B, patches, D] (patches in raster order over the grid) -> [B, patches / m^2, d_out]."""

    def __init__(self, spec, grid: tuple[int, int]):
        super().__init__()
        D, self.m, self.grid = spec.d_model, spec.sizes("patch_embedding").merge_size, grid
        d_out = spec.sizes("patch_merger").d_out
        self.norm = make_norm(spec)
        self.up = nn.Linear(D * self.m ** 2, D * self.m ** 2)
        self.down = nn.Linear(D * self.m ** 2, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = (int(n) for n in x.shape)
        (rows, cols), m = self.grid, self.m
        x = self.norm(x).view(B, rows // m, m, cols // m, m, D).transpose(2, 3).reshape(B, N // m ** 2, m * m * D)
        return self.down(F.gelu(self.up(x)))


def attach(model: nn.Module, spec) -> None:
    from ...reference.model import image_grid

    model.merger = PatchMerger(spec, image_grid(spec, model.workload))


def forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model.merger(x)
