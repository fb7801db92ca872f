"""The `patch_merger` kind's torch module: the class token dropped (if any), ln_q (if any), each m x m block of
patches concatenated, up, GELU, down (and GELU, Llama 4's). With `deepstack` blocks (Qwen3-VL), a merger of their own
on each listed block's output (a forward hook keeps it), the norm after the concatenation; their rows are added to the
merger's (in transformers, to the language model's hidden states at the image's tokens: an add either way), so that
backward runs through them as it does in the whole model."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...reference.layers import ACTIVATIONS, LayerNorm, make_norm


class PatchMerger(nn.Module):
    """[B, (class token +) patches, D] (patches in raster order over the grid) -> [B, patches / m^2, d_out]."""

    def __init__(self, spec, grid: tuple[int, int], after_shuffle: bool = False):
        super().__init__()
        patches, sizes = spec.sizes("patch_embedding"), spec.sizes("patch_merger")
        D, self.m, self.grid = spec.d_model, patches.merge_size, grid
        self.first = int(patches.class_token)  # the reference puts the class token first: dropped
        self.after_shuffle = after_shuffle
        self.norm = make_norm(spec, D * self.m ** 2 if after_shuffle else D) if sizes.norm else None
        self.out_activation = sizes.out_activation
        self.glu = sizes.glu
        d_out = sizes.d_out
        if self.glu is None:
            self.up = nn.Linear(D * self.m ** 2, sizes.hidden(spec), bias=sizes.bias)
            self.down = nn.Linear(sizes.hidden(spec), d_out, bias=sizes.bias)
        else:  # GLM-4.1V: downsample, proj, proj_norm, GELU, then a gated MLP without biases
            self.downsample = nn.Linear(D * self.m ** 2, d_out)
            self.proj = nn.Linear(d_out, d_out, bias=False)
            self.proj_norm = LayerNorm(d_out)
            self.gate = nn.Linear(d_out, self.glu, bias=False)
            self.up = nn.Linear(d_out, self.glu, bias=False)
            self.down = nn.Linear(self.glu, d_out, bias=False)
            self.act = ACTIVATIONS[spec.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, self.first:]
        B, N, D = (int(n) for n in x.shape)
        (rows, cols), m = self.grid, self.m
        x = x if self.norm is None or self.after_shuffle else self.norm(x)
        x = x.view(B, rows // m, m, cols // m, m, D).transpose(2, 3).reshape(B, N // m ** 2, m * m * D)
        x = self.norm(x) if self.norm is not None and self.after_shuffle else x
        if self.glu is not None:
            h = F.gelu(self.proj_norm(self.proj(self.downsample(x))))
            return self.down(self.act(self.gate(h)) * self.up(h))
        x = self.down(F.gelu(self.up(x)))
        return F.gelu(x) if self.out_activation else x


def attach(model: nn.Module, spec) -> None:
    from ...reference.model import image_grid

    grid = image_grid(spec, model.workload)
    model.merger = PatchMerger(spec, grid)
    listed = spec.sizes("patch_merger").deepstack
    model.deepstack = nn.ModuleList(PatchMerger(spec, grid, after_shuffle=True) for _ in listed) if listed else None
    model.deepstack_inputs = {}  # block index -> its output in this forward (not a module: no parameters)
    for i in listed:  # a folded model (check's one block per kind) reads its last block: the same [B, N, D] output
        block = model.blocks[min(i, len(model.blocks) - 1)]
        block.register_forward_hook(lambda _, __, out, i=i: model.deepstack_inputs.__setitem__(i, out))


def forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model.merger(x)
    if model.deepstack is not None:
        listed = model.spec.sizes("patch_merger").deepstack
        for i, merger in zip(listed, model.deepstack):
            out = out + merger(model.deepstack_inputs.pop(i))
    return out
