"""The `mamba` kind's torch module: Mamba's (v1) mixer, run as transformers' pure-torch path runs it (MambaMixer
with causal_conv1d_fn / causal_conv1d_update and the sequential mamba_selective_scan). With a context, the conv and
the scan start from zero states (only shapes count)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import ACTIVATIONS, RMSNorm
from ...spec import ModelSpec
from ..conv.reference import CausalConv


class Scan(nn.Module):
    """The selective scan: A_log [d_inner, n], D [d_inner]; x, dt [b, d_inner, s], B, C [b, s, n] -> y [b, d_inner,
    s]. One step per token (transformers' sequential loop; one token after a state is the same step, its recurrent
    form): state = exp(A dt) state + dt B x, y = state @ C, a bmm [b, d_inner, n] @ [b, n, 1]. On meta (shapes only)
    the states are formed at once and the s bmm calls run as one batched bmm: the same multiply-adds."""

    def __init__(self, channels: int, d_state: int):
        super().__init__()
        self.A_log = nn.Parameter(torch.zeros(channels, d_state))
        self.D = nn.Parameter(torch.ones(channels))

    def forward(self, x, dt, B, C) -> torch.Tensor:
        b, d, s = x.shape
        A = -torch.exp(self.A_log.float())
        dt = F.softplus(dt)
        dA = torch.exp(A[None, :, None, :] * dt[..., None])  # [b, d, s, n]
        dBx = dt[..., None] * B[:, None].float() * x[..., None].float()  # [b, d, s, n]
        if x.device.type == "meta":
            # shapes only: every position's state at once (state_i = exp(L_i) sum_j<=i exp(-L_j) dBx_j, L the
            # cumulative A dt), then the same bmm per token batched: [b, s, d, n] @ [b, s, n, 1], 2 b s d n FLOPs as
            # the loop's s bmm calls (FlopCounterMode and fvcore count both alike), in one op instead of s
            L = torch.cumsum(A[None, :, None, :] * dt[..., None], dim=2)
            states = (torch.exp(L) * torch.cumsum(torch.exp(-L) * dBx, dim=2)).transpose(1, 2)
            y = torch.matmul(states.to(x.dtype), C[..., None])[..., 0].transpose(1, 2)
            return y + x * self.D[:, None]
        state = x.new_zeros(b, d, A.shape[-1], dtype=dA.dtype)
        ys = []
        for i in range(s):  # transformers' sequential loop
            state = dA[:, :, i] * state + dBx[:, :, i]
            ys.append(torch.matmul(state.to(x.dtype), C[:, i, :, None])[..., 0])
        return torch.stack(ys, dim=-1) + x * self.D[:, None]


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
        self.dt_proj = nn.Linear(r, inner, bias=True)
        self.scan = Scan(inner, n)
        self.out_proj = nn.Linear(inner, D, bias=z.bias)

    def forward(self, h: torch.Tensor, context: int = 0) -> torch.Tensor:
        x, gate = self.in_proj(h).transpose(1, 2).chunk(2, dim=1)  # [b, d_inner, s] each
        x = self.act(self.conv(x, context))
        dt, B, C = self.x_proj(x.transpose(1, 2)).split(self.widths, dim=-1)
        if self.norms:
            dt, B, C = self.dt_norm(dt), self.b_norm(B), self.c_norm(C)
        y = self.scan(x, self.dt_proj(dt).transpose(1, 2), B, C) * F.silu(gate)
        return self.out_proj(y.transpose(1, 2))


def attach(block: nn.Module, site) -> None:
    block.mamba = Mamba(site.spec)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.normed("mamba", lambda h: block.mamba(h, env.context), x)
