"""The `patch_merger` kind's torch module: ln_q, each m x m block of patches concatenated, up, GELU, down."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import ACTIVATIONS, LayerNorm, make_norm


class PatchMerger(nn.Module):
    """[B, patches, D] (patches in raster order over the grid) -> [B, patches / m^2, d_out]."""

    def __init__(self, spec, grid: tuple[int, int]):
        super().__init__()
        D, self.m, self.grid = spec.d_model, spec.sizes("patch_embedding").merge_size, grid
        d_out = spec.sizes("patch_merger").d_out
        self.norm = make_norm(spec)
        self.glu = spec.sizes("patch_merger").glu
        if self.glu is None:
            self.up = nn.Linear(D * self.m ** 2, D * self.m ** 2)
            self.down = nn.Linear(D * self.m ** 2, d_out)
        else:  # GLM-4.1V: downsample, proj, proj_norm, GELU, then a gated MLP without biases
            self.downsample = nn.Linear(D * self.m ** 2, d_out)
            self.proj = nn.Linear(d_out, d_out, bias=False)
            self.proj_norm = LayerNorm(d_out)
            self.gate = nn.Linear(d_out, self.glu, bias=False)
            self.up = nn.Linear(d_out, self.glu, bias=False)
            self.down = nn.Linear(self.glu, d_out, bias=False)
            self.act = ACTIVATIONS[spec.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = (int(n) for n in x.shape)
        (rows, cols), m = self.grid, self.m
        x = self.norm(x).view(B, rows // m, m, cols // m, m, D).transpose(2, 3).reshape(B, N // m ** 2, m * m * D)
        if self.glu is None:
            return self.down(F.gelu(self.up(x)))
        h = F.gelu(self.proj_norm(self.proj(self.downsample(x))))
        return self.down(self.act(self.gate(h)) * self.up(h))


def attach(model: nn.Module, spec) -> None:
    from ...reference.model import image_grid

    model.merger = PatchMerger(spec, image_grid(spec, model.workload))


def forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model.merger(x)
