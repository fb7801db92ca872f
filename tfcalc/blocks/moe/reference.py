"""The `moe` kind's torch module: the router, the routed and shared experts; beside a dense MLP (Gemma 4)."""

from __future__ import annotations

import torch
from torch import nn

from ...reference.layers import RMSNorm, is_fake, make_norm, saving
from ...spec import ModelSpec
from ..mlp import reference as mlp
from ..mlp.reference import MLP


def _combine(out: torch.Tensor, tokens: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """out with y's rows added at `tokens`. With autograd on, scatter_add over the token index expanded (a view):
    its backward keeps only the index, where index_add's keeps its source too (its derivative formula reads the
    source's shape from the tensor)."""
    if saving(y):
        return out.scatter_add(0, tokens[:, None].expand(-1, y.shape[-1]), y)
    return out.index_add(0, tokens, y)


class Scale(nn.Module):
    """A learned scale [width] (Gemma 4's router: one over the model width, one per expert)."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))


class MoE(nn.Module):
    """The `moe` builder. Beside a dense MLP (moe_beside_mlp, Gemma 4) the router reads the block's residual stream
    through an RMS norm (`router_norm`: Gemma's weightless norm times its router scale [D], one RMSNorm), each
    routing weight is times its expert's `expert_scale`, and the experts read x through their own norm (`norm`)
    and end with `post_norm`."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.top_k = spec.top_k
        self.beside = spec.moe_beside_mlp
        if self.beside:  # the router's RMS norm, its weight Gemma's router scale [D]; a scale per expert [E]
            self.router_norm, self.expert_scale = RMSNorm(spec.d_model), Scale(spec.n_experts)
            self.norm, self.post_norm = make_norm(spec), make_norm(spec)
        self.router = nn.Linear(spec.d_model, spec.n_experts, bias=spec.router_bias)
        latent = spec.d_moe_latent  # the experts on a latent width: projected there and back (Nemotron 3)
        self.latent_in = nn.Linear(spec.d_model, latent, bias=spec.has_mlp_bias) if latent else None
        self.latent_out = nn.Linear(latent, spec.d_model, bias=spec.has_mlp_bias) if latent else None
        self.experts = nn.ModuleList(MLP(spec, spec.d_expert, latent) for _ in range(spec.n_experts))
        self.shared = nn.ModuleList(MLP(spec, spec.d_shared_expert) for _ in range(spec.n_shared_experts))
        self.shared_gate = nn.Linear(spec.d_model, 1, bias=False) if spec.shared_expert_gate else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        if self.beside:
            probs = self.router(self.router_norm(flat)).softmax(-1)
            inputs = self.norm(flat)
        else:
            probs, inputs = self.router(flat).softmax(-1), flat
        if self.latent_in is not None:
            inputs = self.latent_in(inputs)
        out = torch.zeros_like(inputs)
        for e, (tokens, weights) in enumerate(self._route(probs)):
            if self.beside:
                weights = weights * self.expert_scale.weight[e]
            out = _combine(out, tokens, self.experts[e](inputs[tokens]) * weights)
        if self.latent_out is not None:
            out = self.latent_out(out)
        if self.beside:
            return self.post_norm(out).view(shape)
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
        if is_fake(probs):  # no data to route on: the meta path's round robin, slot i = t * k + j -> i mod E
            for e in range(E):
                slots = torch.arange(e, T * k, E, device=probs.device)
                tokens, slot = slots // k, slots % k
                yield tokens, weights[tokens, slot].unsqueeze(-1)
            return
        for e in range(E):
            tokens, slot = (chosen == e).nonzero(as_tuple=True)
            yield tokens, weights[tokens, slot].unsqueeze(-1)



def attach(block: nn.Module, site) -> None:
    block.moe = MoE(site.spec)
    if site.spec.moe_beside_mlp:  # the dense MLP and its branch norm beside the experts (Gemma 4)
        mlp.attach(block, site)
        block.mlp_branch_norm = make_norm(site.spec)


def call(block: nn.Module, h: torch.Tensor, env) -> torch.Tensor:
    if block.moe.beside:  # both on x: the dense MLP normed before and after, the experts with norms of their own
        return block.mlp_branch_norm(block.mlp(block.mlp_norm(h))) + block.moe(h)
    return block.moe(h)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    if block.moe.beside:  # mlp_norm is the dense branch's own: the sum is normed after (mlp_post_norm) only
        h = call(block, x, env)
        return x + (block.mlp_post_norm(h) if block.mlp_post_norm is not None else h)
    return block.normed("mlp", block.moe, x)
