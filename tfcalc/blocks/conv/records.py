"""`Conv`: a depthwise causal convolution along the sequence, the record of LFM2's short convolution and of the
convolutions in Mamba2 and gated DeltaNet blocks (imported with those kinds: counting a model without them never
loads it)."""

from __future__ import annotations

from dataclasses import dataclass

from ...arch.ops import Parallel, Record, _ceil


@dataclass(frozen=True, slots=True)
class Conv(Record):
    """A depthwise causal convolution along the sequence (nn.Conv1d with groups = channels; LFM2's short
    convolution): each of `channels` channels has its own `kernel` taps over its last `kernel` positions, for `b`
    sequences of `s` new positions each.

    `outputs`: the positions per sequence an eager model computes, which is more than `s`: transformers' pure-torch
    path (causal_conv1d_fn) pads both ends by kernel - 1 and keeps the first positions, so a new sequence computes
    s + kernel - 1; over a cache of `kernel` positions a one-token step (causal_conv1d_update) computes 2 and a
    longer one s + 2 kernel - 1 (docs/formulas.md). `carried`: positions per channel an inference step keeps for
    the next (kernel - 1, what the next token's taps read); 0 in training. `output_kept`: the op after it keeps its
    output for backward (a multiply, an activation), which is a slice of the padded output, so the whole padded
    output stays. Tensor parallelism splits the channels (the projections around it are column- and row-parallel)."""

    component: str
    b: int
    s: int
    channels: int
    kernel: int
    outputs: int
    bias: bool = False
    carried: int = 0
    output_kept: bool = False
    sublayer: str = ""

    role = "conv"

    def params(self) -> int:
        return self.channels * self.kernel + (self.channels if self.bias else 0)  # weight [C, 1, K], bias [C]

    def parameters(self) -> dict[str, int]:
        return {self.component: self.params()}

    def inactive_params(self) -> int:
        return 0

    def matrix_params(self, tp: int = 1) -> int:
        return 0  # not a linear layer's matrix: weight-only schemes leave it in 16 bits

    def forward(self) -> dict[str, int]:
        # FlopCounterMode's convolution: 2 x batch x output positions x weight elements (C x 1 x K)
        return {self.component: 2 * self.b * self.outputs * self.channels * self.kernel}

    def useful(self) -> int:
        """FLOPs over the s positions the step uses (a fused causal-conv kernel's), without eager's padding."""
        return 2 * self.b * self.s * self.channels * self.kernel

    def masked(self, windows: bool) -> dict[str, int]:
        return {}

    def non_matmul(self) -> dict[str, int]:
        return {"bias": self.b * self.outputs * self.channels} if self.bias else {}

    def names(self) -> list[str]:
        return [self.component]

    def cache(self, tp: int = 1) -> dict[str, int]:
        return {}

    def cache_per_token(self, tp: int = 1) -> int:
        return 0

    def state(self, tp: int = 1) -> dict[str, int]:
        """[b, channels / tp, kernel - 1]: the last positions of the convolution's input, per sequence."""
        return {self.component: self.b * _ceil(self.channels, tp) * self.carried} if self.carried else {}

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        if not self.s:
            return None
        c = _ceil(self.channels, tp)
        flops = 2 * self.b * self.s * c * self.kernel  # a serving kernel's: the new positions only
        # weights and bias (16-bit, never quantized), input and output, the state read and written back
        moved = (c * self.kernel + (c if self.bias else 0)) * act + 2 * self.b * self.s * c * act \
            + 2 * self.b * c * self.carried * act
        return flops, moved

    def collective(self, act: int, tp: int) -> tuple[str, int, str] | None:
        return None

    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        c = _ceil(self.channels, tp)
        return [c * self.kernel] + ([c] if self.bias else [])

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        """Its input [b, C, s] (the convolution's backward reads it) and, when the next op keeps a slice of its
        output, the padded output [b, C, outputs]. Split by channels under tensor parallelism."""
        kept = self.b * self.s * self.channels + (self.b * self.outputs * self.channels if self.output_kept else 0)
        return {"conv": par.part(kept * a, par.tp)}

    def frozen_backward(self, grad: bool = True) -> int:
        """With its weight frozen: its input's gradient alone, when the input needs one. torch runs it as the
        transposed convolution of the gradient [b, C, outputs] by the weight, 2 b outputs C K: its forward's figure
        (FlopCounterMode's conv_backward_flop, output_mask [True, False, False]); no weight or bias gradient."""
        return sum(self.forward().values()) if grad else 0

    def saved_frozen(self, a: int, recompute: str, par: Parallel, grad: bool) -> dict[str, int]:
        """What it keeps in full training, when a gradient flows: autograd's convolution node saves its input
        whether or not the weight needs a gradient (ConvolutionBackward0 keeps input and weight), and the op after
        it keeps a slice of its output as before; nothing without one."""
        return self.saved(a, recompute, par) if grad else {}

    def gemm(self) -> tuple[int, int, int] | None:
        return None

    def scores(self) -> int:
        return 0

    def transient(self, par: Parallel) -> int:
        return 0

