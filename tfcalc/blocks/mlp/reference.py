"""The `mlp` kind's torch module (also one expert of `moe`)."""

from __future__ import annotations

import torch
from torch import nn

from ...reference.layers import ACTIVATIONS
from ...spec import ModelSpec


class MLP(nn.Module):
    """The `mlp` builder (and one expert of `moe`)."""

    def __init__(self, spec: ModelSpec, d_hidden: int, d_in: int | None = None):
        super().__init__()
        bias, d_in = spec.has_mlp_bias, d_in or spec.d_model  # d_in: an expert on a latent width
        self.up = nn.Linear(d_in, d_hidden, bias=bias)
        self.gate = nn.Linear(d_in, d_hidden, bias=bias) if spec.mlp == "gated" else None
        self.down = nn.Linear(d_hidden, d_in, bias=bias)
        self.act = ACTIVATIONS[spec.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.up(x)) if self.gate is None else self.act(self.gate(x)) * self.up(x)
        return self.down(h)



def attach(block: nn.Module, site) -> None:
    spec, layer = site.spec, site.layer  # twice as wide in a KV-sharing block (use_double_wide_mlp)
    block.mlp = MLP(spec, spec.kv_shared_d_ff if layer.kv_shared and spec.kv_shared_d_ff else spec.d_ff)


def call(block: nn.Module, h: torch.Tensor, env) -> torch.Tensor:
    return block.mlp(h)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    # a gated cross-attention block (Llama 3.2 Vision) scales the MLP's output by its tanh gate, as a block with
    # layer_gates does (its vision tower's global encoder)
    gate = getattr(getattr(block, "cross_attention", None), "mlp_gate", None) or \
        getattr(getattr(block, "layer_gates", None), "mlp", None)
    return block.normed("mlp", block.mlp if gate is None else (lambda h: gate(block.mlp(h))), x)
