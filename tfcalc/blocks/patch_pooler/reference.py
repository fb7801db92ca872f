"""The `patch_pooler` kind's torch module: Gemma 4's pooler as transformers runs it (Gemma4VisionPooler's
_avg_pool_by_positions): one-hot weights from each patch's (x, y) position on the image's grid, divided by kernel^2,
[B, patches / k^2, patches] @ [B, patches, D], then scaled by sqrt(D)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PatchPooler(nn.Module):
    """[B, patches, D] (patches in raster order over a rows x cols grid) -> [B, patches / k^2, D]."""

    def __init__(self, spec, grid: tuple[int, int]):
        super().__init__()
        self.k, self.grid, self.scale = spec.sizes("patch_pooler").kernel, grid, spec.d_model ** 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.k
        if k == 1:
            return x * self.scale
        rows, cols = self.grid
        y, xs = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")  # built on the CPU (meta
        kernel = (xs // k + (cols // k) * (y // k)).reshape(-1)  # has no one_hot): each patch's block, raster order
        weights = F.one_hot(kernel, (rows // k) * (cols // k)).to(x.dtype) / k ** 2  # [patches, blocks]
        # [B, blocks, patches], no gradient: one per image, as transformers builds them (bmm keeps them for backward)
        weights = weights.t().to(x.device).repeat(x.shape[0], 1, 1)
        return (weights @ x) * self.scale


def attach(model: nn.Module, spec) -> None:  # (`pooler` is the frame's BERT pooler)
    from ...reference.model import image_grid

    model.patch_pooler = PatchPooler(spec, image_grid(spec, model.workload))


def forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model.patch_pooler(x)
