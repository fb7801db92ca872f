"""The `layer_gates` kind's torch module: the block's two tanh gates (Mllama's gate_attn, gate_ffn), each one
scalar scaling its sublayer's output before the residual add. The attention and MLP references read them
(`block.layer_gates.attention`, `.mlp`) and apply them inside their sublayer; this kind's own step adds nothing."""

from __future__ import annotations

import torch
from torch import nn

from ..cross_attention.reference import Gate


def attach(block: nn.Module, site) -> None:
    block.layer_gates = nn.Module()
    block.layer_gates.attention = Gate()
    block.layer_gates.mlp = Gate()


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return x  # (the gates act inside the attention and MLP sublayers)
