"""The `gated_deltanet` kind's torch module: Qwen3NextGatedDeltaNet as transformers' pure-torch path runs it
(causal_conv1d_fn / causal_conv1d_update, torch_chunk_gated_delta_rule / torch_recurrent_gated_delta_rule).

In a train step it keeps for backward what the fused kernels keep (FLA's chunk_gated_delta_rule with the l2 norm in
the kernel, and FusedRMSNormGated), not the eager rule's fp32 chunk intermediates: the rule and the gated norm are
autograd functions (`_ChunkRuleFunction`, `_GatedRMSNormFunction`) that save what FLA's save and run the eager
arithmetic again in backward. Same ops, same forward matmul FLOPs; the rule's backward runs its forward once more
(one more forward's bmm FLOPs): a FLOP check of the train step sets the rule's `explicit` and counts autograd of the
eager rule, as transformers' torch path runs it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import saving
from ...spec import ModelSpec
from ..conv.reference import CausalConv


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def chunked(q, k, v, g, beta, chunk: int, state: torch.Tensor | None, parts: dict | None = None) -> torch.Tensor:
    """torch_chunk_gated_delta_rule: q, k [b, s, H, dk], v [b, s, H, dv], g, beta [b, s, H] (heads already
    repeated) -> [b, s, H, dv]. `parts`, when given, receives the chunks' unit-lower-triangular systems
    [b, H, n, C, C] ("system") for the fused form's WY matrix."""
    b, s, H, dk = k.shape
    dv = v.shape[-1]
    q, k, v, beta, g = (x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
                        for x in (q, k, v, beta, g))
    q, k = l2norm(q), l2norm(k)
    q = q * dk ** -0.5
    pad = (chunk - s % chunk) % chunk
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    beta, g = (F.pad(x, (0, pad)) for x in (beta, g))
    n = (s + pad) // chunk
    v_beta, k_beta = v * beta.unsqueeze(-1), k * beta.unsqueeze(-1)
    q, k, k_beta, v_beta = (x.reshape(b, H, n, chunk, x.shape[-1]) for x in (q, k, k_beta, v_beta))
    g = g.reshape(b, H, n, chunk).cumsum(dim=-1)
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    pairwise = (g.unsqueeze(-1) - g.unsqueeze(-2)).masked_fill(upper, float("-inf")).exp()
    system = (k_beta @ k.transpose(-1, -2)) * pairwise  # [b, H, n, C, C]
    if parts is not None:
        parts["system"] = system
    intra = (q @ k.transpose(-1, -2)) * pairwise
    new_values = torch.linalg.solve_triangular(system, v_beta, upper=False, unitriangular=True)
    k_cumdecay = torch.linalg.solve_triangular(system, k_beta * g.exp().unsqueeze(-1), upper=False,
                                               unitriangular=True)
    S = q.new_zeros(b, H, dk, dv) if state is None else state.to(new_values)
    q = q * g.exp().unsqueeze(-1)
    k = k * (g[..., -1:] - g).exp().unsqueeze(-1)
    decay = g[..., -1].exp()[..., None, None]
    if torch.jit.is_tracing():
        out, S = _scan_for_trace(q, k, new_values, k_cumdecay, intra, decay, S)
    else:
        out = torch.zeros_like(new_values)
        for i in range(n):
            v_new = new_values[:, :, i] - k_cumdecay[:, :, i] @ S  # [C, dk] @ [dk, dv]
            out[:, :, i] = q[:, :, i] @ S + intra[:, :, i] @ v_new  # [C, dk] @ [dk, dv]; [C, C] @ [C, dv]
            S = S * decay[:, :, i] + k[:, :, i].transpose(-1, -2) @ v_new  # [dk, C] @ [C, dv]
    return out.reshape(b, H, -1, dv)[:, :, :s].transpose(1, 2)


def _scan_for_trace(q, k, new_values, k_cumdecay, intra, decay, S):
    """The scan over chunks for fvcore's jit trace: the same products as the loop, batched over the n chunks (each
    chunk against a stand-in of its incoming state [b, H, n, dk, dv]; only shapes count), so that a trace of a long
    sequence is n times shorter. fvcore counts each batched matmul as the loop's n matmuls (prod(a) x b[-1]
    multiply-adds); the last state update is kept in the output so that the trace does not drop it (eager computes
    it)."""
    states = S.unsqueeze(2).expand(-1, -1, q.shape[2], -1, -1)  # [b, H, n, dk, dv]
    v_new = new_values - k_cumdecay @ states  # [n, C, dk] @ [n, dk, dv]
    out = q @ states + intra @ v_new  # [n, C, dk] @ [n, dk, dv]; [n, C, C] @ [n, C, dv]
    states = states * decay + k.transpose(-1, -2) @ v_new  # [n, dk, C] @ [n, C, dv]
    return out + 0 * states.sum(), states


def recurrent(q, k, v, g, beta, state: torch.Tensor) -> torch.Tensor:
    """torch_recurrent_gated_delta_rule: one token at a time, elementwise products and sums (no matmul)."""
    _b, s, _H, dk = k.shape
    q, k, v, beta, g = (x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
                        for x in (q, k, v, beta, g))
    q, k = l2norm(q), l2norm(k)
    q = q / dk ** 0.5
    S = state.to(v)
    out = torch.zeros_like(v)
    for i in range(s):
        S = S * g[:, :, i].exp()[..., None, None]
        delta = (v[:, :, i] - (S * k[:, :, i].unsqueeze(-1)).sum(dim=-2)) * beta[:, :, i].unsqueeze(-1)
        S = S + k[:, :, i].unsqueeze(-1) * delta.unsqueeze(-2)
        out[:, :, i] = (S * q[:, :, i].unsqueeze(-1)).sum(dim=-2)
    return out.transpose(1, 2)


def _l2norm_fwd(x: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """FLA's l2norm_fwd: x / sqrt(sum(x^2) + eps) in x's dtype, and that rstd in fp32 per row [..., ]."""
    rstd = torch.rsqrt(x.float().pow(2).sum(-1) + eps)
    return (x.float() * rstd[..., None]).to(x.dtype), rstd


def _local_cumsum(g: torch.Tensor, chunk: int, inverse: bool = False) -> torch.Tensor:
    """g [b, s, H] summed along s within each chunk (FLA's chunk_local_cumsum, fp32); `inverse`: back from the sums
    to g (each position's difference from the one before it in its chunk)."""
    b, s, H = g.shape
    pad = (chunk - s % chunk) % chunk
    x = F.pad(g.float(), (0, 0, 0, pad)).reshape(b, -1, chunk, H)
    x = x - F.pad(x, (0, 0, 1, -1)) if inverse else x.cumsum(dim=2)
    return x.reshape(b, -1, H)[:, :s].clone(memory_format=torch.contiguous_format)  # unpadded, a storage of its own


class _ChunkRuleFunction(torch.autograd.Function):
    """The chunked gated delta rule as FLA's fused kernel keeps it for backward (ChunkGatedDeltaRuleFunction with
    use_qk_l2norm_in_kernel, fla/ops/gated_delta_rule/chunk.py): the l2-normalised q and k [b, s, H, dk] in their
    dtype with their fp32 rstd [b, s, H], v made contiguous [b, s, H, dv], the chunk-local cumsum of g (fp32
    [b, s, H]), beta [b, s, H] and the WY matrix A [b, s, H, C] (the inverse of each chunk's unit lower triangular
    system, in k's dtype); nothing else. Its backward runs the eager rule again from them (q and k rebuilt from
    their norm and rstd, g from its sums) and hands autograd's gradients back: the same figures as autograd of the
    eager rule, one more forward's FLOPs."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, chunk):
        b, s, H, _ = q.shape
        q_n, q_rstd = _l2norm_fwd(q)
        k_n, k_rstd = _l2norm_fwd(k)
        v = v.contiguous()
        parts: dict = {}
        out = chunked(q, k, v, g, beta, chunk, None, parts)
        eye = torch.eye(chunk, dtype=torch.float32, device=q.device)
        A = torch.linalg.solve_triangular(parts.pop("system"), eye, upper=False, unitriangular=True)
        A = A.reshape(b, H, -1, chunk)[:, :, :s].transpose(1, 2).to(k.dtype).clone(memory_format=torch.contiguous_format)
        ctx.chunk = chunk
        ctx.save_for_backward(q_n, q_rstd, k_n, k_rstd, v, _local_cumsum(g, chunk), beta, A)
        return out.to(q.dtype).clone(memory_format=torch.contiguous_format)

    @staticmethod
    def backward(ctx, dout):
        q_n, q_rstd, k_n, k_rstd, v, g_cum, beta, _A = ctx.saved_tensors
        with torch.enable_grad():
            inputs = [(q_n.float() / q_rstd[..., None]).to(q_n.dtype), (k_n.float() / k_rstd[..., None]).to(k_n.dtype),
                      v.detach(), _local_cumsum(g_cum, ctx.chunk, inverse=True), beta.detach()]
            inputs = [t.requires_grad_(need) for t, need in zip(inputs, ctx.needs_input_grad)]
            out = chunked(*inputs, ctx.chunk, None)
            wanted = [t for t in inputs if t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, dout.to(out.dtype)))
        return (*(next(grads) if t.requires_grad else None for t in inputs), None)


class DeltaRule(nn.Module):
    """A_log and dt_bias (one each per value head), the decay and the delta rule: chunked over a new sequence or a
    prefill after a cache (a zero state of the cache's shape), recurrent for one token after a cache."""

    train_note = ("train step: the gated delta rule without its fused form (the reference's memory form runs the "
                  "rule's forward again in backward, as FLA's kernel recomputes; transformers' eager rule does not)")

    def __init__(self, key_heads: int, value_heads: int, chunk: int):
        super().__init__()
        self.key_heads, self.chunk = key_heads, chunk
        self.A_log = nn.Parameter(torch.zeros(value_heads))
        self.dt_bias = nn.Parameter(torch.ones(value_heads))
        # True: autograd of the eager rule (transformers' torch path, `backward_extra`'s figures); False (a memory
        # check): the fused form, keeping what FLA's kernel keeps. check(train=True) sets it, as Mamba2's scan's.
        self.explicit = False

    def forward(self, q, k, v, b, a, context: int = 0) -> torch.Tensor:
        H, dk, dv = v.shape[2], k.shape[-1], v.shape[-1]
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        if H != self.key_heads:
            q = q.repeat_interleave(H // self.key_heads, dim=2)
            k = k.repeat_interleave(H // self.key_heads, dim=2)
        state = v.new_zeros(v.shape[0], H, dk, dv, dtype=torch.float32) if context else None
        if context and q.shape[1] == 1:
            return recurrent(q, k, v, g, beta, state).to(v.dtype)
        if state is None and saving(q, self.A_log) and not self.explicit:
            return _ChunkRuleFunction.apply(q, k, v, g, beta, self.chunk)
        return chunked(q, k, v, g, beta, self.chunk, state).to(v.dtype)


def _gated_rms_norm(x, z, weight, eps: float) -> torch.Tensor:
    """Qwen3NextRMSNormGated's arithmetic: rmsnorm(x) in fp32, back in x's dtype, times the weight and silu(z)."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * x.to(dtype) * F.silu(z.to(torch.float32))).to(dtype)


class _GatedRMSNormFunction(torch.autograd.Function):
    """The gated RMSNorm as FLA's fused kernel keeps it (FusedRMSNormGated, which transformers' Qwen3-Next and
    Qwen3.5 use when fla is installed): x, z, the weight and the fp32 rstd per row; recomputed in backward."""

    @staticmethod
    def forward(ctx, x, z, weight, eps):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)  # [..., 1], fp32
        ctx.eps = eps
        ctx.save_for_backward(x, z, weight, rstd)
        return (weight * (x.float() * rstd).to(x.dtype) * F.silu(z.float())).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, z, weight, _ = ctx.saved_tensors
        with torch.enable_grad():
            inputs = [t.detach().requires_grad_(need) for t, need in zip((x, z, weight), ctx.needs_input_grad)]
            out = _gated_rms_norm(*inputs, ctx.eps)
            wanted = [t for t in inputs if t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, dy))
        return (*(next(grads) if t.requires_grad else None for t in inputs), None)


class GatedRMSNorm(nn.Module):
    """Qwen3NextRMSNormGated: rmsnorm(x) * weight * silu(z), over each value head's channels (weight [dv]); in a
    train step the fused form (`_GatedRMSNormFunction`)."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(width)), eps

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        if saving(x, self.weight):
            return _GatedRMSNormFunction.apply(x, z, self.weight, self.eps)
        return _gated_rms_norm(x, z, self.weight, self.eps)


class GatedDeltaNet(nn.Module):
    """The `gated_deltanet` builder: in_proj_qkvz, in_proj_ba, the convolution over q, k, v with silu, the delta
    rule, the gated norm, out_proj."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        z, D = spec.sizes("gated_deltanet"), spec.d_model
        self.hk, self.hv, self.dk, self.dv = z.key_heads, z.value_heads, z.key_head_dim, z.value_head_dim
        key_dim, value_dim = self.hk * self.dk, self.hv * self.dv
        self.in_proj_qkvz = nn.Linear(D, 2 * key_dim + 2 * value_dim, bias=False)
        self.in_proj_ba = nn.Linear(D, 2 * self.hv, bias=False)
        self.conv = CausalConv(2 * key_dim + value_dim, z.conv_kernel, False)
        self.delta_rule = DeltaRule(self.hk, self.hv, z.chunk)
        self.out_norm = GatedRMSNorm(self.dv)
        self.out_proj = nn.Linear(value_dim, D, bias=False)

    def forward(self, x: torch.Tensor, context: int = 0) -> torch.Tensor:
        bsz, s, _ = x.shape
        key_dim, value_dim = self.hk * self.dk, self.hv * self.dv
        qkv, z = self.in_proj_qkvz(x).split([2 * key_dim + value_dim, value_dim], dim=-1)
        b, a = self.in_proj_ba(x).chunk(2, dim=-1)
        qkv = F.silu(self.conv(qkv.transpose(1, 2), context)).transpose(1, 2)
        q, k, v = qkv.split([key_dim, key_dim, value_dim], dim=-1)
        o = self.delta_rule(q.reshape(bsz, s, self.hk, self.dk), k.reshape(bsz, s, self.hk, self.dk),
                            v.reshape(bsz, s, self.hv, self.dv), b, a, context)
        # o and z per value head [b, s, Hv, dv]: z a view of in_proj_qkvz's output (no copy to keep)
        o = self.out_norm(o, z.reshape(bsz, s, self.hv, self.dv))
        return self.out_proj(o.reshape(bsz, s, value_dim))


def attach(block: nn.Module, site) -> None:
    block.gated_deltanet = GatedDeltaNet(site.spec)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.normed("gated_deltanet", lambda h: block.gated_deltanet(h, env.context), x)
