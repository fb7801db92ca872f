"""The `attention_pool` kind's torch module: SigLIP's attention-pooling head as torch's MultiheadAttention runs it
for a query that is not the keys (the probe through q, the tokens through one fused k/v projection), laid out as the
builder's records (`probe`, `q`, `kv`, `core`, `out`, `norm`, `up`, `down`)."""

from __future__ import annotations

import torch
from torch import nn

from ...reference.layers import ACTIVATIONS, AttentionCore, make_norm, split_heads
from ...spec import ModelSpec
from ..patch_embedding.reference import Parameter


class AttentionPool(nn.Module):
    """[B, N, D] -> [B, D]: the probe's attention over the N tokens, then x + MLP(norm(x))."""

    def __init__(self, spec: ModelSpec, explicit: bool = False):
        super().__init__()
        D, F = spec.d_model, spec.d_ff
        self.heads = spec.n_heads
        self.probe = Parameter(1, 1, D)
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * D)
        self.core = AttentionCore(causal=False, window=None, explicit=explicit)
        self.out = nn.Linear(D, D)
        self.norm = make_norm(spec)
        self.up = nn.Linear(D, F)
        self.down = nn.Linear(F, D)
        self.act = ACTIVATIONS[spec.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, D, H = x.shape[0], x.shape[-1], self.heads
        q = split_heads(self.q(self.probe.weight.repeat(B, 1, 1)), H, D // H)  # [B, H, 1, dh]
        k, v = (split_heads(t.contiguous(), H, D // H) for t in self.kv(x).split(D, dim=-1))
        h = self.out(self.core(q, k, v).transpose(1, 2).reshape(B, 1, D))
        h = h + self.down(self.act(self.up(self.norm(h))))
        return h[:, 0]
