"""The `conformer` kind's torch module: Gemma 4's conformer block (transformers' Gemma4AudioLayer) as its eager path
runs it: the chunked attention's blocks of queries against their padded contexts, the relative scores over the
positions' sinusoids shifted into place (Transformer-XL's shift), the light convolution's left-padded depthwise
Conv1d. Module names are the kind's components (`ff1.up`, `attention.qkv`, `lconv.conv`, ...); the clamps and scales
are left out (elementwise, not counted)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import ACTIVATIONS, RMSNorm
from ..conv.reference import depthwise


class Parameter(nn.Module):
    """One learned tensor as a module of its own (`weight`), so that its name maps onto its component."""

    def __init__(self, *shape: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(*shape))


class HalfFeedForward(nn.Module):
    def __init__(self, spec):
        super().__init__()
        D = spec.d_model
        self.norm, self.post_norm = RMSNorm(D), RMSNorm(D)
        self.up, self.down = nn.Linear(D, spec.d_ff, bias=False), nn.Linear(spec.d_ff, D, bias=False)
        self.act = ACTIVATIONS[spec.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.5 * self.post_norm(self.down(self.act(self.up(self.norm(x)))))


class ChunkedAttention(nn.Module):
    def __init__(self, spec):
        super().__init__()
        sizes, D, H, dh = spec.sizes("conformer"), spec.d_model, spec.n_heads, spec.d_head
        self.H, self.dh, self.chunk, self.context = H, dh, sizes.chunk, sizes.context
        self.past, self.future, self.P = sizes.left - 1, sizes.right, sizes.positions
        self.norm, self.post_norm = RMSNorm(D), RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * H * dh, bias=False)  # q_proj, k_proj, v_proj as one module (one record)
        self.relative = nn.Linear(D, H * dh, bias=False)
        self.scale = Parameter(dh)
        self.out = nn.Linear(H * dh, D, bias=False)
        self.core = ChunkedCore(self.chunk, self.context, self.past, self.future, self.P)

    def sinusoids(self, D: int, device, dtype) -> torch.Tensor:
        """[P, D]: sin and cos of positions P - 1 .. 0 (Gemma4AudioRelPositionalEncoding; no parameters)."""
        rate = torch.exp(torch.arange(D // 2, device=device) * -(math.log(10000.0) / max(D // 2 - 1, 1)))
        t = torch.arange(self.P - 1, -1, -1, device=device)[:, None] * rate
        return torch.cat([torch.sin(t), torch.cos(t)], -1).to(dtype)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        b, s, D = x.shape
        H, dh = self.H, self.dh
        q, k, v = (t.reshape(b, s, H, dh) for t in self.qkv(x).chunk(3, dim=-1))
        q = q * F.softplus(self.scale.weight)
        r = self.relative(self.sinusoids(D, x.device, x.dtype)).view(-1, H, dh)  # [P, H, dh]
        return self.out(self.core(q, k, v, r))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.post_norm(self.attend(self.norm(x)))


class ChunkedCore(nn.Module):
    """The scores and value mixing of Gemma4AudioAttention: blocks of `chunk` queries against their padded contexts,
    plus the relative scores shifted into place, soft-capped, softmax, @ v: [b, s, H dh]."""

    def __init__(self, chunk: int, context: int, past: int, future: int, P: int):
        super().__init__()
        self.chunk, self.context, self.past, self.future, self.P = chunk, context, past, future, P

    def forward(self, q, k, v, r) -> torch.Tensor:
        b, s, H, dh = q.shape
        C, W = self.chunk, self.context
        nb = -(-s // C)
        q = F.pad(q, (0, 0, 0, 0, 0, nb * C - s)).reshape(b, nb, C, H, dh)  # blocks of queries

        def contexts(t: torch.Tensor) -> torch.Tensor:  # [b, nb, W, H, dh]: each block's keys, zero padded
            t = F.pad(t, (0, 0, 0, 0, self.past, self.future + C - 1)).unfold(1, W, C)
            return torch.movedim(t, -1, 2).contiguous()

        k, v = contexts(k), contexts(v)
        queries = q.permute(0, 3, 1, 2, 4)  # [b, H, nb, C, dh]
        ac = queries @ k.permute(0, 3, 1, 4, 2)  # [b, H, nb, C, W]
        bd = queries.reshape(b, H, -1, dh) @ r.permute(1, 2, 0)  # [b, H, nb C, P]
        bd = F.pad(bd.reshape(b, H, nb, C, -1), (0, W + 1 - self.P))  # the shift: pad, flatten, cut, view
        bd = bd.reshape(b, H, nb, C * (W + 1))[..., : C * W].reshape(b, H, nb, C, W)
        probs = torch.softmax(torch.tanh((ac + bd) / 50.0) * 50.0, dim=-1)
        o = (probs @ v.permute(0, 3, 1, 2, 4)).permute(0, 2, 3, 1, 4).reshape(b, nb * C, H * dh)[:, :s]
        return o.contiguous()




class CausalConv(nn.Conv1d):
    """A depthwise Conv1d left padded by kernel - 1 (Gemma4AudioCausalConv1d): s outputs per sequence."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return depthwise(F.pad(h, (self.kernel_size[0] - 1, 0)), self.weight, None)


class LightConv(nn.Module):
    def __init__(self, spec):
        super().__init__()
        D, K = spec.d_model, spec.sizes("conformer").kernel
        self.norm, self.conv_norm = RMSNorm(D), RMSNorm(D)
        self.start, self.end = nn.Linear(D, 2 * D, bias=False), nn.Linear(D, D, bias=False)
        self.conv = CausalConv(D, D, K, groups=D, bias=False)
        self.act = ACTIVATIONS[spec.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.glu(self.start(self.norm(x)), dim=-1).transpose(1, 2)  # [b, D, s]
        h = self.conv(h).transpose(1, 2)
        return x + self.end(self.act(self.conv_norm(h)))


class Conformer(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.ff1, self.attention = HalfFeedForward(spec), ChunkedAttention(spec)
        self.lconv, self.ff2, self.norm = LightConv(spec), HalfFeedForward(spec), RMSNorm(spec.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.ff2(self.lconv(self.attention(self.ff1(x)))))


def attach(block: nn.Module, site) -> None:
    block.conformer = Conformer(site.spec)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.conformer(x)
