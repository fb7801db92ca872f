"""The `audio_conv` kind's torch module: Whisper's encoder input (transformers' WhisperEncoder before its layers), run
as it runs it: GELU(conv1), GELU(conv2) over the mel frames [B, mel_bins, F], to [B, F/2, D], the position table's
first F/2 rows added (all of them for a whole window, as transformers adds them; the table frozen, a parameter)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import LayerNorm
from ...spec import ModelSpec
from . import KERNEL, STRIDE


class MelConv(nn.Conv1d):
    """A Conv1d of kernel 3 and padding 1. Under fvcore's jit trace on the meta device (where torch's meta convolution
    cannot check traced shapes) the same products as one matmul over the output positions, [B, out, C*3] @ [C*3, D]:
    fvcore counts it as it counts the convolution (B x out x D x C*3 multiply-adds)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (torch.jit.is_tracing() and x.device.type == "meta"):
            return super().forward(x)
        windows = F.pad(x, (1, 1)).unfold(2, KERNEL, self.stride[0])  # [B, C, out, 3]
        B, C, out, k = windows.shape
        y = windows.permute(0, 2, 1, 3).reshape(B, out, C * k) @ self.weight.reshape(self.out_channels, -1).t()
        return (y + self.bias).transpose(1, 2)


class Parameter(nn.Module):
    """One learned tensor as a module of its own (`weight`), so that its name maps onto its component."""

    def __init__(self, *shape: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(*shape), requires_grad=False)  # frozen, as Whisper's embed_positions


class Conv2d(nn.Conv2d):
    """A Conv2d of kernel 3, stride 2, padding 1, no bias. Under fvcore's jit trace on the meta device the same
    products as one matmul over the output positions, [B, out, C*9] @ [C*9, c_out]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (torch.jit.is_tracing() and x.device.type == "meta"):
            return super().forward(x)
        windows = F.pad(x, (1, 1, 1, 1)).unfold(2, 3, 2).unfold(3, 3, 2)  # [B, C, F', M', 3, 3]
        B, C, f, m = windows.shape[:4]
        y = windows.permute(0, 2, 3, 1, 4, 5).reshape(B, f * m, C * 9) @ self.weight.reshape(self.out_channels, -1).t()
        return y.transpose(1, 2).reshape(B, self.out_channels, f, m)


class Subsample(nn.Module):
    """Gemma 4's front end (Gemma4AudioSubSampleConvProjection): `conv0`, `norm0`, ReLU, `conv1`, `norm1`, ReLU over
    [B, 1, F, mel_bins], then `proj` over each token's frequency rows x channels."""

    token = per_layer = None

    def __init__(self, spec: ModelSpec):
        super().__init__()
        (c0, c1), D = spec.sizes("audio_conv").subsample, spec.d_model
        self.conv0, self.conv1 = Conv2d(1, c0, 3, 2, 1, bias=False), Conv2d(c0, c1, 3, 2, 1, bias=False)
        self.norm0, self.norm1 = LayerNorm(c0, bias=False), LayerNorm(c1, bias=False)
        self.proj = nn.Linear((c0 // 4) * c1, D, bias=False)

    def forward(self, mel: torch.Tensor, token_types=None, offset: int = 0, table=None) -> torch.Tensor:
        x = mel.transpose(1, 2).unsqueeze(1)  # [B, 1, F, mel_bins]
        for conv, norm in ((self.conv0, self.norm0), (self.conv1, self.norm1)):
            x = F.relu(norm(conv(x).permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
        B, _, s, _ = x.shape
        return self.proj(x.permute(0, 2, 3, 1).reshape(B, s, -1))


class AudioConv(nn.Module):
    """The encoder's input from mel frames: `conv1`, `conv2` and `position` [positions, D] (frozen)."""

    token = per_layer = None  # (the frame asks every stack's input for its token table and per-layer embeddings)

    def __init__(self, spec: ModelSpec):
        super().__init__()
        sizes, D = spec.sizes("audio_conv"), spec.d_model
        self.conv1 = MelConv(sizes.mel_bins, D, KERNEL, padding=1)
        self.conv2 = MelConv(D, D, KERNEL, stride=STRIDE, padding=1)
        self.position = Parameter(sizes.positions, D)

    def forward(self, mel: torch.Tensor, token_types=None, offset: int = 0, table=None) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2)  # [B, F/2, D]
        return x + self.position.weight[: x.shape[1]]


def input_module(spec: ModelSpec) -> nn.Module:
    """The stack's input, as the reference model builds it: Whisper's convolutions, or Gemma 4's subsampling."""
    return Subsample(spec) if spec.sizes("audio_conv").subsample else AudioConv(spec)


def example_mel(spec: ModelSpec, batch: int, frames: int | None, device, generator=None) -> torch.Tensor:
    """[B, mel_bins, F] mel frames (default F: the model's window)."""
    sizes = spec.sizes("audio_conv")
    shape = (batch, sizes.mel_bins, frames or sizes.window)
    if str(device) == "meta":
        return torch.empty(*shape, device=device)
    return torch.randn(*shape, device=device, generator=generator)
