"""The `mamba2` kind's torch module: Mamba2's mixer, run as transformers' pure-torch path runs it (Mamba2Mixer with
causal_conv1d_fn / causal_conv1d_update, mamba2_chunk_scan / mamba2_selective_state_update). With a context, the
conv and the scan start from zero states (only shapes count).

In a train step it keeps for backward what the fused kernels keep (mamba_ssm's mamba_chunk_scan_combined and its
gated RMSNorm), not the eager scan's dozens of fp32 intermediates: the chunked scan runs under torch.utils.checkpoint
(it keeps its inputs x, dt, B and C and recomputes itself in backward) and the gated norm is one autograd function
keeping y, z and the fp32 rstd per group. Same ops, same forward matmul FLOPs; the scan computes in fp32 as
transformers' mamba2_chunk_scan does (x, B, C and dt cast up) and hands y back in the activations' dtype, unpadded
and contiguous (as the fused kernel does), so that no view keeps the padded fp32 output alive. The checkpoint runs
the scan's forward once more in backward (one more forward's bmm FLOPs): a FLOP check of the train step sets the
scan's `explicit` and counts autograd of the eager scan, as transformers' torch path runs it (2 x its forward)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...reference.layers import saving
from ...spec import ModelSpec
from ..conv.reference import CausalConv


def _segment_sum(x: torch.Tensor) -> torch.Tensor:
    """transformers' segment_sum: [..., Q] -> [..., Q, Q], the sums of x over (j, i] below the diagonal, -inf above."""
    Q = x.size(-1)
    x = x[..., None].expand(*x.size(), Q)
    x = x.masked_fill(~torch.tril(torch.ones(Q, Q, device=x.device, dtype=torch.bool), diagonal=-1), 0)
    total = torch.cumsum(x, dim=-2)
    return total.masked_fill(~torch.tril(torch.ones(Q, Q, device=x.device, dtype=torch.bool), diagonal=0), -torch.inf)


def _chunks(x: torch.Tensor, pad: int, Q: int) -> torch.Tensor:
    """[b, s, ...] padded with zeros to a multiple of Q along s, then [b, c, Q, ...]."""
    x = F.pad(x, (0, 0) * (x.dim() - 2) + (0, pad))
    return x.reshape(x.shape[0], -1, Q, *x.shape[2:])


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b; over a contraction of size 1 a broadcast multiply, as torch's einsum runs it (no bmm: no FLOPs)."""
    return a * b if a.shape[-1] == 1 else a @ b


# The scan's einsums as batched matmuls, for fvcore's jit trace: fvcore's einsum handle reads numpy's einsum_path
# count, printed to 4 significant digits; its matmul handle counts exactly (the same multiply-adds).
_AS_MATMUL = {
    "bclhn,bcshn->bclsh": lambda C, B: _mm(C.permute(0, 1, 3, 2, 4), B.permute(0, 1, 3, 4, 2)).permute(0, 1, 3, 4, 2),
    "bclsh,bcshp->bclhp": lambda M, x: _mm(M.permute(0, 1, 4, 2, 3), x.permute(0, 1, 3, 2, 4)).permute(0, 1, 3, 2, 4),
    "bclhn,bclhp->bchpn": lambda B, x: _mm(x.permute(0, 1, 3, 4, 2), B.permute(0, 1, 3, 2, 4)),
    "bzch,bzhpn->bchpn": lambda d, s: _mm(d.permute(0, 3, 2, 1), s.permute(0, 2, 1, 3, 4).flatten(3)).unflatten(
        3, s.shape[3:]).permute(0, 2, 1, 3, 4),
    "bclhn,bchpn->bclhp": lambda C, s: _mm(C.permute(0, 1, 3, 2, 4), s.transpose(-1, -2)).permute(0, 1, 3, 2, 4),
}


def _einsum(equation: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.einsum, as transformers calls it (FlopCounterMode counts the bmm it runs); under a jit trace (fvcore),
    the same products as matmuls."""
    if torch.jit.is_tracing():
        return _AS_MATMUL[equation](a, b)
    return torch.einsum(equation, a, b)


class Scan(nn.Module):
    """The SSD scan: A_log, D and dt_bias [h]; x [b, s, h, p], dt [b, s, h], B and C [b, s, g, n] -> y [b, s, h, p].
    Chunked over a sequence (mamba2_chunk_scan), recurrent for one token after a state (selective_state_update)."""

    train_note = ("train step: Mamba2's scan without its checkpoint (the reference's memory form recomputes the "
                  "scan's forward in backward, one more forward's bmm FLOPs; transformers' eager scan does not)")

    def __init__(self, heads: int, head_dim: int, d_state: int, groups: int, chunk: int):
        super().__init__()
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.D = nn.Parameter(torch.ones(heads))
        self.dt_bias = nn.Parameter(torch.zeros(heads))
        self.head_dim, self.d_state, self.groups, self.chunk = head_dim, d_state, groups, chunk
        # True: autograd of the eager scan, no checkpoint (what transformers' torch path runs, each einsum's backward
        # its two bmm, 2 x its forward). False (a memory check): the checkpointed scan, which runs its forward again
        # in backward, one more forward's FLOPs. check(train=True) sets it, as it sets attention's `explicit`.
        self.explicit = False

    def forward(self, x, dt, B, C, context: int = 0) -> torch.Tensor:
        if context and x.shape[1] == 1:
            A = -torch.exp(self.A_log.float())
            return self.step(x, F.softplus(dt + self.dt_bias), A, B, C)
        if saving(x, self.A_log) and not self.explicit:  # keeps x, dt, B, C (views kept anyway); recomputed in backward
            return checkpoint(self.chunked, x, dt, B, C, use_reentrant=False, preserve_rng_state=False)
        return self.chunked(x, dt, B, C)

    def step(self, x, dt, A, B, C) -> torch.Tensor:
        """One token after a state [b, h, p, n] (zeros here): state * exp(dt A) + dt B x, then state @ C (a bmm)."""
        b, _, h, p = x.shape
        n, g = self.d_state, self.groups
        x, dt = x[:, 0], dt[:, 0, :, None, None]  # [b, h, p], [b, h, 1, 1]
        B = B[:, 0].repeat_interleave(h // g, dim=1)[:, :, None, :]  # [b, h, 1, n]
        C = C[:, 0].repeat_interleave(h // g, dim=1)  # [b, h, n]
        state = x.new_zeros(b, h, p, n) * torch.exp(dt * A[:, None, None]) + dt * B * x[..., None]
        y = torch.bmm(state.view(b * h, p, n), C.reshape(b * h, n, 1)).view(b, h, p)
        return (y + x * self.D[:, None])[:, None]

    def chunked(self, x, dt, B, C) -> torch.Tensor:
        """transformers' mamba2_chunk_scan, einsum by einsum (FlopCounterMode counts each as a bmm), in fp32; y back
        in x's dtype, a tensor of its own [b, s, h, p] (not a view of the padded output)."""
        b, s, h, p = x.shape
        Q, g, dtype = self.chunk, self.groups, x.dtype
        A = -torch.exp(self.A_log.float())
        dt = F.softplus(dt + self.dt_bias).float()
        x = x.float()
        B = B.float().repeat_interleave(h // g, dim=2)
        C = C.float().repeat_interleave(h // g, dim=2)
        pad = (Q - s % Q) % Q
        residual = self.D[:, None] * F.pad(x, (0, 0, 0, 0, 0, pad))
        x = x * dt[..., None]
        A = A * dt
        x, A, B, C = (_chunks(t, pad, Q) for t in (x, A, B, C))
        A = A.permute(0, 3, 1, 2)  # [b, h, c, Q]
        A_cumsum = torch.cumsum(A, dim=-1)
        L = torch.exp(_segment_sum(A))
        G = _einsum("bclhn,bcshn->bclsh", C, B)
        M = G * L.permute(0, 2, 3, 4, 1)
        Y_diag = _einsum("bclsh,bcshp->bclhp", M, x)
        decay = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
        states = _einsum("bclhn,bclhp->bchpn", B * decay.permute(0, 2, 3, 1)[..., None], x)
        states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
        decay_chunk = torch.exp(_segment_sum(F.pad(A_cumsum[:, :, :, -1], (1, 0)))).transpose(1, 3)
        states = _einsum("bzch,bzhpn->bchpn", decay_chunk, states)[:, :-1]
        Y_off = _einsum("bclhn,bchpn->bclhp", C, states) * torch.exp(A_cumsum).permute(0, 2, 3, 1)[..., None]
        y = (Y_diag + Y_off).reshape(b, -1, h, p) + residual
        return y[:, :s].to(dtype).clone(memory_format=torch.contiguous_format)


def _gated_rms_norm(y, z, weight, groups: int, eps: float) -> torch.Tensor:
    """MambaRMSNormGated: rmsnorm(y * silu(z)) in fp32 over each of `groups` groups of channels, back in y's dtype,
    times the weight."""
    h = y.float() * F.silu(z.float())
    grouped = h.view(*h.shape[:-1], groups, -1)
    grouped = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)
    return weight * grouped.view(h.shape).to(y.dtype)


class _GatedRMSNormFunction(torch.autograd.Function):
    """The gated RMSNorm as a fused kernel runs it (mamba_ssm's rmsnorm_fn with z): keeps y, z, the weight and the
    fp32 rstd per group, and recomputes y * silu(z) in backward."""

    @staticmethod
    def forward(ctx, y, z, weight, groups, eps):
        h = y.float() * F.silu(z.float())
        grouped = h.view(*h.shape[:-1], groups, -1)
        rstd = torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)  # [..., g, 1], fp32
        ctx.groups, ctx.eps = groups, eps
        ctx.save_for_backward(y, z, weight, rstd)
        return weight * (grouped * rstd).view(h.shape).to(y.dtype)

    @staticmethod
    def backward(ctx, dy):
        y, z, weight, _ = ctx.saved_tensors
        with torch.enable_grad():
            inputs = [t.detach().requires_grad_(need) for t, need in zip((y, z, weight), ctx.needs_input_grad)]
            out = _gated_rms_norm(*inputs, ctx.groups, ctx.eps)
            wanted = [t for t in inputs if t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, dy))
        return (*(next(grads) if t.requires_grad else None for t in inputs), None, None)


class GatedNorm(nn.Module):
    """MambaRMSNormGated: rmsnorm(y * silu(z)) over each of g groups of d_inner / g channels, weight [d_inner]; in a
    train step the fused form (`_GatedRMSNormFunction`)."""

    def __init__(self, width: int, groups: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.groups, self.eps = groups, eps

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        if saving(y, self.weight):
            return _GatedRMSNormFunction.apply(y, z, self.weight, self.groups, self.eps)
        return _gated_rms_norm(y, z, self.weight, self.groups, self.eps)


class _GateFunction(torch.autograd.Function):
    """y * silu(z) as one fused kernel runs it: keeps y and z, recomputes silu(z) in backward."""

    @staticmethod
    def forward(ctx, y, z):
        ctx.save_for_backward(y, z)
        return y * F.silu(z)

    @staticmethod
    def backward(ctx, dy):
        y, z = ctx.saved_tensors
        sig = torch.sigmoid(z)
        return dy * z * sig, dy * y * sig * (1 + z * (1 - sig))


def _gate(y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """y * silu(z) without a norm (Falcon-H1's mamba_rms_norm false); in a train step the fused form."""
    return _GateFunction.apply(y, z) if saving(y, z) else y * F.silu(z)


class Mamba2(nn.Module):
    """The `mamba2` builder: in_proj, the conv and its silu, the scan, the gated norm (or the gate alone), out_proj."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        z, D = spec.sizes("mamba2"), spec.d_model
        self.sizes = z
        self.in_proj = nn.Linear(D, z.in_width, bias=z.bias)
        self.conv = CausalConv(z.conv_channels, z.conv_kernel, z.conv_bias)
        self.scan = Scan(z.n_heads, z.head_dim, z.d_state, z.n_groups, z.chunk_size)
        self.gated_norm = GatedNorm(z.d_inner, z.n_groups) if z.gated_norm else None
        self.out_proj = nn.Linear(z.d_inner, D, bias=z.bias)

    def forward(self, h: torch.Tensor, context: int = 0) -> torch.Tensor:
        z = self.sizes
        b, s, _ = h.shape
        gate, xBC, dt = self.in_proj(h).split([z.d_inner, z.conv_channels, z.n_heads], dim=-1)
        xBC = F.silu(self.conv(xBC.transpose(1, 2), context)).transpose(1, 2)
        x, B, C = xBC.split([z.d_inner, z.n_groups * z.d_state, z.n_groups * z.d_state], dim=-1)
        y = self.scan(x.reshape(b, s, z.n_heads, z.head_dim), dt, B.reshape(b, s, z.n_groups, z.d_state),
                      C.reshape(b, s, z.n_groups, z.d_state), context)
        y = y.reshape(b, s, z.d_inner)
        return self.out_proj(_gate(y, gate) if self.gated_norm is None else self.gated_norm(y, gate))


def attach(block: nn.Module, site) -> None:
    block.mamba2 = Mamba2(site.spec)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.normed("mamba2", lambda h: block.mamba2(h, env.context), x)
