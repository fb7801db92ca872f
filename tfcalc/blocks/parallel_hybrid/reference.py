"""The `parallel_hybrid` kind's torch module: the block's `mamba2` (tfcalc.blocks.mamba2.reference.Mamba2) and
`attention` (tfcalc.blocks.attention.reference) modules, both on the block's one normed input, summed."""

from __future__ import annotations

import torch
from torch import nn

from ..attention import reference as attention
from ..mamba2 import reference as mamba2


def attach(block: nn.Module, site) -> None:
    mamba2.attach(block, site)
    attention.attach(block, site)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.normed("parallel_hybrid", lambda h: block.mamba2(h, env.context) + attention.call(block, h, env), x)
