"""A window merger between two blocks of a vision tower (`window_merger`; MiniCPM-V 4.6's
MiniCPMV4_6ViTWindowAttentionMerger, run after block `after` = insert_layer_id): one token per window of `window` x
`window` patches of each image's grid, so the blocks after it and the final norm run over a quarter of the patches
(`divisor` = window^2: BlockKind.inserted, read by Stack.layer and Ctx.s).

Its forward on an image of T patches: layer_norm1 (LayerNorm, D) over every patch; the attention kind's projections
(q, k, v, out with the blocks' biases, the blocks' heads) over every patch, the core within each window alone (w^2
queries against the same w^2 keys, T / w^2 windows: 2 * 2 * D * T * w^2 FLOPs); the residual add; each window's w^2
patches concatenated (a reshape) into a row of w^2 D: pre_norm (LayerNorm, w^2 D), linear_1 (w^2 D -> w^2 F, F the
blocks' d_ff: window_intermediate_size) with a bias, gelu_tanh (gelu_pytorch_tanh, whatever the blocks' activation),
linear_2 (w^2 F -> D) with a bias; plus the window's mean (its w^2 patches averaged: no matmul). T / w^2 rows out.

`runs` false (MiniCPM-OCR's downsample_mode "4x"): transformers builds the module and never runs it: its parameters
counted, no work (every record over 0 rows), nothing divided.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import ACTIVATION_FLOPS, RESIDUAL_ADD, BlockKind, Ctx, register
from ...arch.ops import Elementwise, Matmul, Norm, Op
from ...sizes import Count, Size
from ..attention import mixer


class WindowMergerSizes(BaseModel):
    """The `window_merger` kind's own sizes (a spec's `[kinds.window_merger]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    after: Count = Field(description="The block (0-based) after which it runs (MiniCPM-V's insert_layer_id).")
    window: Size = Field(2, description="Patches per side of a window (window_kernel_size): one token out per window.")
    runs: bool = Field(True, description="It runs (MiniCPM-V's downsample_mode '16x'); false: built, never run "
                                         "('4x': its parameters, no work, no token merged).")

    @property
    def divisor(self) -> int:
        """What it divides the tokens of the blocks after it by."""
        return self.window ** 2 if self.runs else 1

    def problems(self, spec) -> list[str]:
        out = []
        if spec.inputs != "images":
            out.append(f"kinds.window_merger: windows of an image's patch grid need a model of images "
                       f"(inputs='images'), got inputs={spec.inputs!r}")
        elif spec.causal:
            out.append("kinds.window_merger: merges a bidirectional encoder's patches; set causal=false")
        elif self.runs and spec.sizes("patch_embedding").merge_size % self.window:
            out.append(f"kinds.window_merger.window={self.window}: kinds.patch_embedding.merge_size="
                       f"{spec.sizes('patch_embedding').merge_size} is not a multiple of it (an image's patch grid "
                       "is read in whole windows)")
        if self.after >= spec.n_layers:
            out.append(f"kinds.window_merger.after={self.after}: names no block of n_layers={spec.n_layers} "
                       "(it runs after that block)")
        if spec.block_pattern is not None or spec.is_encoder_decoder:
            out.append("kinds.window_merger: one stack of attention and MLP blocks (no block_pattern, no encoder)")
        return out


def window_merger(ctx: Ctx) -> list[Op]:
    spec, D = ctx.spec, ctx.spec.d_model
    sizes = spec.sizes("window_merger")
    w2 = sizes.window ** 2
    T = ctx.t  # every image's patches at this block
    rows = T // w2  # one per window
    F = spec.d_ff * w2  # window_intermediate_size
    attention, here = ctx.name("attention"), ctx.name("window_merger")
    ops: list[Op] = [Norm(ctx.name("window_merger/norm"), "layernorm", T, D)]  # layer_norm1 over every patch [T, D]
    for op in mixer(ctx):  # q, k, v and out over every patch; the core in each window: w^2 x w^2 pairs
        op = replace(op, component=op.component.replace(attention, here, 1))
        ops.append(replace(op, b=ctx.b * (ctx.s // w2), s_q=w2, s_k=w2) if op.role == "core" else op)
    ops += [
        Elementwise(ctx.name("window_merger/residual"), "residual", T * D, RESIDUAL_ADD),
        Norm(ctx.name("window_merger/pre_norm"), "layernorm", rows, w2 * D),  # each window's patches [T / w^2, w^2 D]
        Matmul(ctx.name("window_merger/linear_1"), rows, w2 * D, F, bias=True),  # [T / w^2, w^2 D] @ [w^2 D, w^2 F]
        Elementwise(ctx.name("window_merger/linear_1"), "activation", rows * F, ACTIVATION_FLOPS["gelu_tanh"],
                    "gelu_tanh"),
        Matmul(ctx.name("window_merger/linear_2"), rows, F, D, bias=True),  # [T / w^2, w^2 F] @ [w^2 F, D]
        # the window's mean (w^2 patches summed and scaled) added: no matmul
        Elementwise(ctx.name("window_merger/mean"), "residual", T * D + rows * D, RESIDUAL_ADD),
    ]
    return ops if sizes.runs else [op.idle() for op in ops]  # built, not run: parameters, no work


register(BlockKind("window_merger", window_merger, family="attention", inserted=True, sizes=WindowMergerSizes,
                   reference=f"{__name__}.reference",
                   components=((r"window_merger\.attention\.(qkv|core|out)", r"window_merger/\1"),
                               (r"window_merger\.(norm|pre_norm|linear_1|linear_2)", r"window_merger/\1"))))
