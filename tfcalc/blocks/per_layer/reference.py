"""The `per_layer_input` kind's torch module (Gemma 4)."""

from __future__ import annotations

import torch
from torch import nn

from ...reference.layers import ACTIVATIONS, make_norm
from ...spec import ModelSpec


class PerLayerInput(nn.Module):
    """The `per_layer_input` builder (Gemma 4): x + norm(projection(act(gate(x)) * the block's slice))."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.gate = nn.Linear(spec.d_model, spec.d_per_layer_input, bias=False)
        self.projection = nn.Linear(spec.d_per_layer_input, spec.d_model, bias=False)
        self.norm = make_norm(spec)
        self.act = ACTIVATIONS[spec.activation]

    def forward(self, x: torch.Tensor, per_layer: torch.Tensor) -> torch.Tensor:
        return x + self.norm(self.projection(self.act(self.gate(x)) * per_layer))



def attach(block: nn.Module, site) -> None:
    block.per_layer = PerLayerInput(site.spec)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.per_layer(x, env.per_layer)
