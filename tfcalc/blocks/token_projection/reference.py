"""The `token_projection` kind's torch module: one nn.Linear over every token of the stack's output."""

from __future__ import annotations

import torch
from torch import nn


def attach(model: nn.Module, spec) -> None:
    sizes = spec.sizes("token_projection")
    model.output_proj = nn.Linear(spec.d_model, sizes.d_out, bias=sizes.bias)


def forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model.output_proj(x)
