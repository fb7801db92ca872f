"""The `cross_attention` kind's torch module: queries from the decoder, keys and values from the encoder."""

from __future__ import annotations

import torch
from torch import nn

from ...reference.layers import AttentionCore, linear, make_norm, run_core, split_heads
from ...spec import ModelSpec


class Gate(nn.Module):
    """A tanh gate: one scalar parameter (zeros, as transformers initialises it) scaling a sublayer's output."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.weight.tanh() * h


class CrossAttention(nn.Module):
    """The `cross_attention` builder: queries from the decoder, keys and values from the encoder's output, or,
    in decode, from the cache (`src_len` of them)."""

    def __init__(self, spec: ModelSpec, explicit: bool, recompute: str = "none"):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = spec.n_heads, spec.n_kv_heads, spec.d_head
        self.q = nn.Linear(spec.d_model, spec.d_attn, bias=spec.has_qkv_bias)
        self.kv = linear(spec.d_model, 2 * spec.d_kv, spec.has_qkv_bias, (0, 0 if spec.k_bias else spec.d_kv))
        self.core = AttentionCore(False, None, explicit)
        self.out = nn.Linear(spec.d_attn, spec.d_model, bias=spec.bias)
        self.recompute_core = recompute == "selective"
        sizes = spec.sizes("cross_attention")  # the gated variant (Llama 3.2 Vision): q/k norms over each head
        self.q_norm = make_norm(spec, spec.d_head) if sizes.qk_norm else None
        self.k_norm = make_norm(spec, spec.d_head) if sizes.qk_norm else None
        # tanh gates on this output and on the block's MLP output (the MLP's reference reads mlp_gate)
        self.gate = Gate() if sizes.gated else None
        self.mlp_gate = Gate() if sizes.gated else None

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None, src_len: int) -> torch.Tensor:
        B, N, _ = x.shape
        H, Hkv, dh = self.n_heads, self.n_kv_heads, self.d_head
        q = split_heads(self.q(x), H, dh)
        q = (q if self.q_norm is None else self.q_norm(q)).contiguous()
        if memory is None:  # decode: the encoder's keys and values were cached at prefill
            k = v = x.new_zeros(B, Hkv, src_len, dh)
        else:
            k, v = self.kv(memory).split([Hkv * dh, Hkv * dh], dim=-1)
            # each its own copy: a norm reading a view of the fused output would keep v's half alive too
            k, v = split_heads(k, Hkv, dh).contiguous(), split_heads(v, Hkv, dh).contiguous()
            k = (k if self.k_norm is None else self.k_norm(k)).contiguous()
        y = run_core(self.core, self.recompute_core, q, k, v)
        y = self.out(y.transpose(1, 2).reshape(B, N, H * dh))
        return y if self.gate is None else self.gate(y)



def attach(block: nn.Module, site) -> None:
    block.cross_attention = CrossAttention(site.spec, site.explicit, site.recompute)


def call(block: nn.Module, h: torch.Tensor, env) -> torch.Tensor:
    return block.cross_attention(h, env.memory, env.src_len)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.normed("cross_attention", lambda h: call(block, h, env), x)
