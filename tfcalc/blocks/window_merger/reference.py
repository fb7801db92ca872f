"""The `window_merger` kind's torch module: layer_norm1, the attention kind's module with its core run in each
window of the image's patch grid, the residual, each window's patches concatenated (pre_norm, linear_1, gelu_tanh,
linear_2) plus their mean: [B, N, D] -> [B, N / w^2, D], the windows in raster order. Not run (`runs` false): the
input as it is."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import LayerNorm
from ..attention.reference import Attention
from ..window_attention.reference import WindowCore


class WindowMerger(nn.Module):
    def __init__(self, site):
        super().__init__()
        spec = site.spec
        sizes = spec.sizes("window_merger")
        D, self.w, self.runs = spec.d_model, sizes.window, sizes.runs
        self.grid = site.grid  # (rows, columns) of patches at this block: the image's
        self.norm = LayerNorm(D)
        self.attention = Attention(spec, site.layer, False, site.explicit, site.recompute)
        self.attention.core = WindowCore(site.explicit, self.w, self.grid)
        w2, d_ff = self.w ** 2, spec.d_ff * self.w ** 2
        self.pre_norm = LayerNorm(w2 * D)
        self.linear_1 = nn.Linear(w2 * D, d_ff)
        self.linear_2 = nn.Linear(d_ff, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.runs:
            return x
        B, N, D = (int(n) for n in x.shape)
        (rows, cols), w = self.grid, self.w
        x = x + self.attention(self.norm(x))
        # each window's w x w patches, in raster order within it, one row of w^2 D
        x = x.view(B, rows // w, w, cols // w, w, D).transpose(2, 3).reshape(B, N // w ** 2, w * w, D)
        h = self.linear_2(F.gelu(self.linear_1(self.pre_norm(x.flatten(2))), approximate="tanh"))
        return h + x.mean(dim=2)


def attach(block: nn.Module, site) -> None:
    block.window_merger = WindowMerger(site)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.window_merger(x)
