"""The `layer_gates` kind's torch module: the block's two tanh gates (Mllama's gate_attn, gate_ffn).

The block composes its sublayers one after the other (x + f(norm(x)) each), so the gates' parameters are held here
and their multiplies, which are not matmuls (no FLOPs a counter sees), are left out of the reference forward: the
block's matmuls and parameters are those of the gated layer."""

from __future__ import annotations

import torch
from torch import nn

from ..patch_embedding.reference import Parameter


def attach(block: nn.Module, site) -> None:
    block.layer_gates = nn.Module()
    block.layer_gates.attention = Parameter(1)
    block.layer_gates.mlp = Parameter(1)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return x
