"""The `audio_conv` kind's torch module: Whisper's encoder input (transformers' WhisperEncoder before its layers), run
as it runs it: GELU(conv1), GELU(conv2) over the mel frames [B, mel_bins, F], to [B, F/2, D], the position table's
first F/2 rows added (all of them for a whole window, as transformers adds them; the table frozen, a parameter)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

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


input_module = AudioConv  # the stack's input, as the reference model builds it


def example_mel(spec: ModelSpec, batch: int, frames: int | None, device, generator=None) -> torch.Tensor:
    """[B, mel_bins, F] mel frames (default F: the model's window)."""
    sizes = spec.sizes("audio_conv")
    shape = (batch, sizes.mel_bins, frames or sizes.window)
    if str(device) == "meta":
        return torch.empty(*shape, device=device)
    return torch.randn(*shape, device=device, generator=generator)
