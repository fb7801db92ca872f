"""The `window_attention` kind's torch module: the attention kind's module with its core run in each window of the
image's patch grid (q, k and v cut into windows, each window attended separately, the outputs put back in place)."""

from __future__ import annotations

import torch
from torch import nn

from ...reference.layers import AttentionCore
from ..attention.reference import Attention
from . import pieces


class WindowCore(AttentionCore):
    """The core over each window of a `grid` (rows, columns) of patches in raster order: [B, H, N, d] cut into
    windows of `window` x `window` patches (the last along a side: the rest), each its own attention."""

    def __init__(self, explicit: bool, window: int, grid: tuple[int, int]):
        super().__init__(False, None, explicit)
        self.side, self.grid = window, grid

    def forward(self, q, k, v, bias=None, sinks=None):
        B, H, N, d = (int(n) for n in q.shape)
        rows, cols = self.grid
        grid = [t.view(B, int(t.shape[1]), rows, cols, d) for t in (q, k, v)]  # k, v: their own (GQA) heads
        out = q.new_empty(B, H, rows, cols, d)
        r0 = 0
        for a, na in pieces(rows, self.side):
            for _ in range(na):
                c0 = 0
                for b, nb in pieces(cols, self.side):
                    for _ in range(nb):
                        qw, kw, vw = (t[:, :, r0:r0 + a, c0:c0 + b].reshape(B, t.shape[1], a * b, d) for t in grid)
                        out[:, :, r0:r0 + a, c0:c0 + b] = super().forward(qw, kw, vw).view(B, H, a, b, d)
                        c0 += b
                r0 += a
        return out.view(B, H, N, d)


def attach(block: nn.Module, site) -> None:
    attention = Attention(site.spec, site.layer, site.causal, site.explicit, site.recompute)
    attention.core = WindowCore(site.explicit, site.spec.sizes("window_attention").window, site.grid)
    block.attention = attention


def call(block: nn.Module, h: torch.Tensor, env) -> torch.Tensor:
    return block.attention(h, env.context, env.bias, env.rope)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.normed("attention", lambda h: call(block, h, env), x)
