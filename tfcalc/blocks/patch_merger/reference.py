"""The `patch_merger` kind's torch module: the class token dropped (if any), ln_q (if any), each m x m block of
patches concatenated, up, GELU, down (and GELU, Llama 4's)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import make_norm


class PatchMerger(nn.Module):
    """[B, (class token +) patches, D] (patches in raster order over the grid) -> [B, patches / m^2, d_out]."""

    def __init__(self, spec, grid: tuple[int, int]):
        super().__init__()
        patches, sizes = spec.sizes("patch_embedding"), spec.sizes("patch_merger")
        D, self.m, self.grid = spec.d_model, patches.merge_size, grid
        self.first = int(patches.class_token)  # the reference puts the class token first: dropped
        self.norm = make_norm(spec) if sizes.norm else None
        self.up = nn.Linear(D * self.m ** 2, sizes.hidden(spec), bias=sizes.bias)
        self.down = nn.Linear(sizes.hidden(spec), sizes.d_out, bias=sizes.bias)
        self.out_activation = sizes.out_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, self.first:]
        B, N, D = (int(n) for n in x.shape)
        (rows, cols), m = self.grid, self.m
        x = x if self.norm is None else self.norm(x)
        x = x.view(B, rows // m, m, cols // m, m, D).transpose(2, 3).reshape(B, N // m ** 2, m * m * D)
        x = self.down(F.gelu(self.up(x)))
        return F.gelu(x) if self.out_activation else x


def attach(model: nn.Module, spec) -> None:
    from ...reference.model import image_grid

    model.merger = PatchMerger(spec, image_grid(spec, model.workload))


def forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model.merger(x)
