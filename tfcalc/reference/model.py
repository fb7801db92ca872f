"""A real torch.nn.Module built from any ModelSpec.

Module names follow tfcalc's component names (`blocks.3.attention.qkv` is `attention/qkv`), so that counters'
per-module figures map onto the analytic breakdown (see `tfcalc.verify.components`).

Mixture of experts, on a real device: a softmax router picks the top_k experts of each token and each expert
runs on exactly the tokens sent to it. On the meta device there is no data to route on, so routing is
deterministic: token t's j-th choice is slot i = t * top_k + j, and slot i goes to expert i mod n_experts
(round robin). Every token still goes through exactly top_k distinct experts, so expert FLOPs equal
tokens * top_k * one expert's FLOPs on both paths.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..spec import ModelSpec

ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}


def make_norm(spec: ModelSpec) -> nn.Module:
    return nn.LayerNorm(spec.d_model) if spec.norm == "layernorm" else nn.RMSNorm(spec.d_model)


class Embedding(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        D = spec.d_model
        self.token = nn.Embedding(spec.vocab_size, D)
        self.position = nn.Embedding(spec.max_positions, D) if spec.positions == "learned" else None
        self.token_type = nn.Embedding(spec.n_token_types, D) if spec.n_token_types else None
        self.norm = make_norm(spec) if spec.embedding_norm else None
        self.sinusoidal = spec.positions == "sinusoidal"

    def forward(self, tokens: torch.Tensor, token_types: torch.Tensor | None) -> torch.Tensor:
        N = tokens.shape[1]
        x = self.token(tokens)
        if self.position is not None:
            x = x + self.position(torch.arange(N, device=tokens.device))
        if self.sinusoidal:
            x = x + sinusoidal_table(N, x.shape[-1], x.device, x.dtype)
        if self.token_type is not None:
            x = x + self.token_type(token_types)
        return self.norm(x) if self.norm is not None else x


def sinusoidal_table(n: int, d: int, device, dtype) -> torch.Tensor:
    """Vaswani et al.: sin on even channels, cos on odd ones; no parameters."""
    position = torch.arange(n, device=device, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, d, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d, device=device)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)[:, : d // 2]
    return table.to(dtype)


def rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (Su et al.) on x: [B, H, N, d_head], rotate-half form; no parameters.
    An odd last channel is left as it is."""
    N, d = x.shape[-2], x.shape[-1] - x.shape[-1] % 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    angles = torch.arange(N, device=x.device, dtype=torch.float32)[:, None] * inv_freq
    cos, sin = torch.cat([angles, angles], -1).cos().to(x.dtype), torch.cat([angles, angles], -1).sin().to(x.dtype)
    rot, rest = x[..., :d], x[..., d:]
    half1, half2 = rot[..., : d // 2], rot[..., d // 2:]
    rotated = rot * cos + torch.cat([-half2, half1], -1) * sin
    return torch.cat([rotated, rest], -1)


class AttentionCore(nn.Module):
    """softmax(q k^T / sqrt(d)) v: the scores and value mixing, as one module with no parameters.

    `explicit=True` computes it with two matmuls (what fvcore can trace op by op, and what a backward pass
    differentiates without recomputation); otherwise torch's scaled_dot_product_attention."""

    def __init__(self, causal: bool, explicit: bool):
        super().__init__()
        self.causal, self.explicit = causal, explicit

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if not self.explicit:
            return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, N, dh] @ [B, H, dh, N]
        if self.causal:
            N = q.shape[-2]
            future = torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        return scores.softmax(-1) @ v  # [B, H, N, N] @ [B, H, N, dh]


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, explicit: bool):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = spec.n_heads, spec.n_kv_heads, spec.d_head
        self.qkv = nn.Linear(spec.d_model, spec.d_attn + 2 * spec.d_kv, bias=spec.has_qkv_bias)
        self.core = AttentionCore(spec.causal, explicit)
        self.out = nn.Linear(spec.d_attn, spec.d_model, bias=spec.bias)
        self.rotary = spec.positions == "rotary"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        H, Hkv, dh = self.n_heads, self.n_kv_heads, self.d_head
        q, k, v = self.qkv(x).split([H * dh, Hkv * dh, Hkv * dh], dim=-1)
        q = q.view(B, N, H, dh).transpose(1, 2)
        k = k.view(B, N, Hkv, dh).transpose(1, 2)
        v = v.view(B, N, Hkv, dh).transpose(1, 2)
        if self.rotary:
            q, k = rotary(q), rotary(k)
        if Hkv != H:  # GQA/MQA: each key/value head serves H / Hkv query heads
            k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
        y = self.core(q, k, v)
        return self.out(y.transpose(1, 2).reshape(B, N, H * dh))


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec, d_hidden: int):
        super().__init__()
        bias = spec.has_mlp_bias
        self.up = nn.Linear(spec.d_model, d_hidden, bias=bias)
        self.gate = nn.Linear(spec.d_model, d_hidden, bias=bias) if spec.mlp == "gated" else None
        self.down = nn.Linear(d_hidden, spec.d_model, bias=bias)
        self.act = ACTIVATIONS[spec.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.up(x)) if self.gate is None else self.act(self.gate(x)) * self.up(x)
        return self.down(h)


class MoE(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.top_k = spec.top_k
        self.router = nn.Linear(spec.d_model, spec.n_experts, bias=False)
        self.experts = nn.ModuleList(MLP(spec, spec.d_expert) for _ in range(spec.n_experts))
        self.shared = nn.ModuleList(MLP(spec, spec.d_shared_expert) for _ in range(spec.n_shared_experts))
        self.shared_gate = nn.Linear(spec.d_model, 1, bias=False) if spec.shared_expert_gate else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        probs = self.router(flat).softmax(-1)
        out = torch.zeros_like(flat)
        for e, (tokens, weights) in enumerate(self._route(probs)):
            out = out.index_add(0, tokens, self.experts[e](flat[tokens]) * weights)
        if len(self.shared):
            shared = sum(expert(flat) for expert in self.shared)
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(flat)) * shared
            out = out + shared
        return out.view(shape)

    def _route(self, probs: torch.Tensor):
        """(token indices, routing weights [n, 1]) for each expert in turn."""
        T, E, k = probs.shape[0], probs.shape[1], self.top_k
        if probs.is_meta:  # no data: round robin over slots t * k + j (see the module docstring)
            for e in range(E):
                n = (T * k - e + E - 1) // E  # slots i < T k with i mod E == e
                tokens = torch.arange(n, device=probs.device)
                yield tokens, probs[tokens, e: e + 1]
            return
        weights, chosen = probs.topk(k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        for e in range(E):
            tokens, slot = (chosen == e).nonzero(as_tuple=True)
            yield tokens, weights[tokens, slot].unsqueeze(-1)


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, explicit: bool):
        super().__init__()
        self.pre_norm = spec.norm_position == "pre"
        self.attention_norm = make_norm(spec)
        self.attention = Attention(spec, explicit)
        self.mlp_norm = make_norm(spec)
        if spec.is_moe:
            self.moe = MoE(spec)
        else:
            self.mlp = MLP(spec, spec.d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ff = self.moe if hasattr(self, "moe") else self.mlp
        if self.pre_norm:
            x = x + self.attention(self.attention_norm(x))
            return x + ff(self.mlp_norm(x))
        x = self.attention_norm(x + self.attention(x))
        return self.mlp_norm(x + ff(x))


class Transformer(nn.Module):
    """The reference model. forward(tokens [B, N], token_types [B, N] or None) returns the logits [B, N, V] (or
    the hidden states [B, N, D] without an LM head) and, with a pooler, also the pooled output [B, D]."""

    def __init__(self, spec: ModelSpec, explicit_attention: bool = False):
        super().__init__()
        self.spec = spec
        self.embedding = Embedding(spec)
        self.blocks = nn.ModuleList(Block(spec, explicit_attention) for _ in range(spec.n_layers))
        self.final_norm = make_norm(spec) if spec.final_norm else None
        self.pooler = nn.Linear(spec.d_model, spec.d_model) if spec.pooler else None
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False) if spec.lm_head else None
        if self.head is not None and spec.tie_embeddings:
            self.head.weight = self.embedding.token.weight

    def forward(self, tokens: torch.Tensor, token_types: torch.Tensor | None = None):
        x = self.embedding(tokens, token_types)
        for block in self.blocks:
            x = block(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        out = self.head(x) if self.head is not None else x
        if self.pooler is None:
            return out
        return out, torch.tanh(self.pooler(x[:, 0]))


def build_model(spec: ModelSpec, device: str | torch.device = "meta", dtype: torch.dtype = torch.float32,
                explicit_attention: bool = False) -> Transformer:
    """The reference model, its parameters created directly on `device` (on meta, nothing is allocated)."""
    with torch.device(device):
        model = Transformer(spec, explicit_attention)
    return model.to(dtype)


def example_inputs(spec: ModelSpec, device: str | torch.device = "meta") -> tuple[torch.Tensor, ...]:
    """Token ids [B, N] (and token types when the spec has them) on `device`."""
    generator = None if str(device) == "meta" else torch.Generator(device=device).manual_seed(0)
    shape = (spec.batch_size, spec.seq_len)
    tokens = torch.randint(spec.vocab_size, shape, device=device, generator=generator)
    if not spec.n_token_types:
        return (tokens,)
    return tokens, torch.randint(spec.n_token_types, shape, device=device, generator=generator)
