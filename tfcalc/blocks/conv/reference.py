"""The `conv` kind's torch module: LFM2's short convolution, run as transformers' pure-torch path runs it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...spec import ModelSpec


def depthwise(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, padding: int = 0) -> torch.Tensor:
    """F.conv1d(x, weight, bias, padding, groups=channels). Under fvcore's jit trace on the meta device (where torch's
    meta convolution cannot check traced shapes) the same products as one batched matmul over the windows,
    [C, b * outputs, K] @ [C, K, 1]: fvcore counts it as it counts the convolution (b x C x outputs x K
    multiply-adds)."""
    c, K = weight.shape[0], weight.shape[-1]
    if not (torch.jit.is_tracing() and x.device.type == "meta"):
        return F.conv1d(x, weight, bias, padding=padding, groups=c)
    b = x.shape[0]
    windows = F.pad(x, (padding, padding)).unfold(-1, K, 1)  # [b, C, outputs, K]
    n = windows.shape[2]
    y = (windows.permute(1, 0, 2, 3).reshape(c, -1, K) @ weight.reshape(c, K, 1)).reshape(c, b, n).permute(1, 0, 2)
    return y if bias is None else y + bias[:, None]


class CausalConv(nn.Conv1d):
    """Depthwise causal convolution [b, C, s] -> [b, C, s], as transformers' causal_conv1d_fn (new sequence: padded
    by kernel - 1 at both ends, the first s positions kept) and causal_conv1d_update (one token after a cache of
    kernel positions) compute it; with a cache (`context`), a zero cache of `kernel` positions (only shapes count)."""

    def __init__(self, channels: int, kernel: int, bias: bool):
        super().__init__(channels, channels, kernel, groups=channels, bias=bias)

    def forward(self, h: torch.Tensor, context: int = 0) -> torch.Tensor:
        b, _, s = h.shape
        c, K = self.groups, self.kernel_size[0]
        if not context:
            return depthwise(h, self.weight, self.bias, K - 1)[..., :s]
        full = torch.cat([h.new_zeros(b, c, K), h], dim=-1)
        if s == 1:
            return depthwise(full, self.weight, self.bias)[..., -1:]
        return depthwise(full, self.weight, self.bias, K - 1)[..., :K + s][..., -s:]


class ShortConv(nn.Module):
    """The `conv` builder: in_proj D -> 3D (B, C, x), B * x, the convolution, C * y, out_proj."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        sizes, D = spec.sizes("conv"), spec.d_model
        self.in_proj = nn.Linear(D, 3 * D, bias=sizes.bias)
        self.conv = CausalConv(D, sizes.kernel, sizes.bias)
        self.out_proj = nn.Linear(D, D, bias=sizes.bias)

    def forward(self, x: torch.Tensor, context: int = 0) -> torch.Tensor:
        B, C, h = self.in_proj(x).transpose(-1, -2).chunk(3, dim=-2)  # views of one [b, s, 3D] output
        y = C * self.conv(B * h, context)
        return self.out_proj(y.transpose(-1, -2).contiguous())


def attach(block: nn.Module, site) -> None:
    block.conv = ShortConv(site.spec)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    return block.normed("conv", lambda h: block.conv(h, env.context), x)
