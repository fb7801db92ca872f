"""The `mamba` kind's torch module: Mamba's (v1) mixer, run as transformers' pure-torch path runs it (MambaMixer
with causal_conv1d_fn / causal_conv1d_update and the sequential mamba_selective_scan). With a context, the conv and
the scan start from zero states (only shapes count).

In a train step the scan keeps for backward what mamba_ssm's fused selective_scan_fn keeps (its inputs, the state at
the end of each chunk of 2048 positions and its pre-gate output), not the eager loop's state per token: it is an
autograd function (`_SelectiveScanFunction`) that runs the eager scan again in backward; a FLOP check of the train
step sets its `explicit` and counts autograd of the eager scan. dt_proj's bias and the gate y * silu(z) are the
scan's (transformers hands both to the kernel)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import ACTIVATIONS, RMSNorm, saving
from ...spec import ModelSpec
from ..conv.reference import CausalConv


class Scan(nn.Module):
    """The selective scan: A_log [d_inner, n], D [d_inner]; x, dt [b, d_inner, s], B, C [b, s, n] -> y [b, d_inner,
    s]. One step per token (transformers' sequential loop; one token after a state is the same step, its recurrent
    form): state = exp(A dt) state + dt B x, y = state @ C, a bmm [b, d_inner, n] @ [b, n, 1]. On meta (shapes only)
    the states are formed at once and the s bmm calls run as one batched bmm: the same multiply-adds."""

    train_note = ("train step: Mamba's selective scan without its fused form (the reference's memory form runs the "
                  "scan's forward again in backward, as mamba_ssm's kernel recomputes; the eager loop does not)")

    def __init__(self, channels: int, d_state: int):
        super().__init__()
        self.A_log = nn.Parameter(torch.zeros(channels, d_state))
        self.D = nn.Parameter(torch.ones(channels))
        # True: autograd of the eager scan (transformers' torch path); False (a memory check): the fused form,
        # keeping what mamba_ssm's selective_scan_fn keeps. check(train=True) sets it, as Mamba2's scan's.
        self.explicit = False

    def forward(self, x, dt, B, C, z=None, dt_bias=None) -> torch.Tensor:
        """y = scan(x, softplus(dt + dt_bias), A, B, C) + D x, times silu(z) when z is given (selective_scan_fn's
        arguments: dt_bias added inside, as transformers hands dt_proj's bias to the kernel)."""
        A = -torch.exp(self.A_log.float())
        if saving(x, self.A_log) and not self.explicit:  # D and dt_bias as they are (fp32 parameters in a mixed step)
            return _SelectiveScanFunction.apply(x, dt, A, B, C, self.D, z, dt_bias)
        return _scan(x, dt, A, B, C, self.D, z, dt_bias)


CHUNK = 2048  # mamba_ssm's selective scan keeps the state at the end of each chunk of 2048 positions


def _scan(x, dt, A, B, C, D, z=None, dt_bias=None, boundaries: list | None = None) -> torch.Tensor:
    """The scan itself: x, dt [b, d, s], A [d, n], B, C [b, s, n] -> (y + D x) * silu(z) [b, d, s]. `boundaries`,
    when given, receives the state [b, d, n] (fp32) after each chunk of CHUNK positions (the fused kernel's x)."""
    b, d, s = x.shape
    dt = F.softplus(dt if dt_bias is None else dt + dt_bias[:, None])
    dA = torch.exp(A[None, :, None, :] * dt[..., None])  # [b, d, s, n]
    dBx = dt[..., None] * B[:, None].float() * x[..., None].float()  # [b, d, s, n]
    if x.device.type == "meta":
        # shapes only: every position's state at once (state_i = exp(L_i) sum_j<=i exp(-L_j) dBx_j, L the
        # cumulative A dt), then the same bmm per token batched: [b, s, d, n] @ [b, s, n, 1], 2 b s d n FLOPs as
        # the loop's s bmm calls (FlopCounterMode and fvcore count both alike), in one op instead of s
        L = torch.cumsum(A[None, :, None, :] * dt[..., None], dim=2)
        states = (torch.exp(L) * torch.cumsum(torch.exp(-L) * dBx, dim=2)).transpose(1, 2)
        y = torch.matmul(states.to(x.dtype), C[..., None])[..., 0].transpose(1, 2)
        if boundaries is not None:
            boundaries += [states[:, min(s, i + CHUNK) - 1] for i in range(0, s, CHUNK)]
    else:
        state = x.new_zeros(b, d, A.shape[-1], dtype=dA.dtype)
        ys = []
        for i in range(s):  # transformers' sequential loop
            state = dA[:, :, i] * state + dBx[:, :, i]
            ys.append(torch.matmul(state.to(x.dtype), C[:, i, :, None])[..., 0])
            if boundaries is not None and (i % CHUNK == CHUNK - 1 or i == s - 1):
                boundaries.append(state)
        y = torch.stack(ys, dim=-1)
    y = y + x * D[:, None]
    return y if z is None else y * F.silu(z)


class _SelectiveScanFunction(torch.autograd.Function):
    """The scan as mamba_ssm's fused selective_scan_fn keeps it for backward (SelectiveScanFn with z, the kernel
    transformers' Mamba and Jamba run when mamba_ssm is installed): u, delta, A, B, C, D, z and delta_bias as given
    (u, delta, B, C and z copied to contiguous rows where their last stride is not 1: B and C [b, n, s]), the fp32
    states at each chunk's end x [b, d, ceil(s / 2048), 2 n] and the output before the gate, out [b, d, s]; nothing
    per step. Its backward runs the eager scan again from them: the same gradients, one more forward's FLOPs."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, z, delta_bias):
        u, delta = (t if t.stride(-1) == 1 else t.contiguous() for t in (u, delta))
        B, C = (t.transpose(1, 2).contiguous() for t in (B, C))  # [b, n, s], as the kernel takes them
        if z is not None and z.stride(-1) != 1:
            z = z.contiguous()
        bounds: list = []
        out = _scan(u, delta, A, B.transpose(1, 2), C.transpose(1, 2), D, None, delta_bias, bounds)
        out = out.to(delta.dtype)
        x = torch.stack([torch.stack([torch.ones_like(t), t], dim=-1) for t in bounds], dim=2).flatten(-2)
        ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, x, out)
        return out if z is None else out * F.silu(z)

    @staticmethod
    def backward(ctx, dy):
        u, delta, A, B, C, D, z, delta_bias, _, _ = ctx.saved_tensors
        with torch.enable_grad():
            given = (u, delta, A, B.transpose(1, 2), C.transpose(1, 2), D, z, delta_bias)
            inputs = [None if t is None else t.detach().requires_grad_(need)
                      for t, need in zip(given, ctx.needs_input_grad)]
            out = _scan(*inputs)
            wanted = [t for t in inputs if t is not None and t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, dy))
        return tuple(next(grads) if t is not None and t.requires_grad else None for t in inputs)


class DtProj(nn.Linear):
    """dt_proj as transformers runs it: its weight alone on dt, the same products as [d_inner, r] @ [b, r, s] ->
    [b, d_inner, s], run as [b, s, r] @ [r, d_inner] (fvcore's matmul handle counts that one right); its bias is the
    scan's (selective_scan_fn's delta_bias). The transposed result's rows are strided: the scan copies it, as the
    kernel does."""

    def forward(self, dt: torch.Tensor) -> torch.Tensor:
        return (dt @ self.weight.T).transpose(1, 2)


class Mamba(nn.Module):
    """The `mamba` builder: in_proj, the conv and its activation, x_proj, (Jamba's dt/B/C norms), dt_proj, the scan,
    y * silu(z), out_proj."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        z, D = spec.sizes("mamba"), spec.d_model
        inner, r, n = z.inner(D), z.rank(D), z.d_state
        self.widths = (r, n, n)
        self.act = ACTIVATIONS[z.activation]
        self.in_proj = nn.Linear(D, 2 * inner, bias=z.bias)
        self.conv = CausalConv(inner, z.d_conv, z.conv_bias)
        self.x_proj = nn.Linear(inner, r + 2 * n, bias=False)
        self.norms = z.inner_norms
        if z.inner_norms:
            self.dt_norm, self.b_norm, self.c_norm = RMSNorm(r), RMSNorm(n), RMSNorm(n)
        self.dt_proj = DtProj(r, inner, bias=True)
        self.scan = Scan(inner, n)
        self.out_proj = nn.Linear(inner, D, bias=z.bias)

    def forward(self, h: torch.Tensor, context: int = 0) -> torch.Tensor:
        x, gate = self.in_proj(h).transpose(1, 2).chunk(2, dim=1)  # [b, d_inner, s] each
        x = self.act(self.conv(x, context))
        dt, B, C = self.x_proj(x.transpose(1, 2)).split(self.widths, dim=-1)
        if self.norms:
            dt, B, C = self.dt_norm(dt), self.b_norm(B), self.c_norm(C)
        # dt_proj's weight on dt, [d_inner, r] @ [b, r, s]; its bias added in the scan (as transformers hands it to
        # the kernel, there as .float(), the same fp32 parameter in a mixed step); the gate y * silu(z) in the scan
        # too (selective_scan_fn's z)
        y = self.scan(x, self.dt_proj(dt), B, C, gate, self.dt_proj.bias)
        return self.out_proj(y.transpose(1, 2))


def attach(block: nn.Module, site) -> None:
    block.mamba = Mamba(site.spec)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.normed("mamba", lambda h: block.mamba(h, env.context), x)
