"""torch's FlopCounterMode and fvcore's FlopCountAnalysis run on the reference model, mapped onto components.

Two gaps in the counters are closed here, and every report says so:
- FlopCounterMode has no formula for `aten._scaled_dot_product_flash_attention_for_cpu` (the kernel SDPA uses on
  the CPU), so it counts CPU attention as 0. We register torch's own SDPA formula for it (and its backward).
  On the meta device SDPA decomposes into bmm calls, which FlopCounterMode counts already.
- fvcore has no handle for `aten::scaled_dot_product_attention` and skips it. We register one that counts the two
  batched matmuls (q k^T and p v) in multiply-adds, the way fvcore's own matmul handle does.
fvcore's `aten::layer_norm` handle is switched off: norms are not matmul work, and neither side's forward counts
them; they are listed with the other uncounted ops.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from .components import component_of_module
from .folding import scaled

NOTE_FLOP_COUNTER_SDPA = ("FlopCounterMode ships no formula for aten._scaled_dot_product_flash_attention_for_cpu "
                          "(CPU attention would count 0): tfcalc registers torch's own SDPA formula for it and its "
                          "backward; on meta, SDPA runs as bmm calls and is counted as is")
NOTE_FVCORE_SDPA = ("fvcore has no handle for aten::scaled_dot_product_attention (it skips it): tfcalc registers "
                    "one that counts q k^T and p v in multiply-adds")
NOTE_FVCORE_NORM = ("fvcore: its aten::layer_norm handle (5 flops per element) switched off: norms are "
                    "non-matmul work, outside forward on both sides")


def _register_cpu_sdpa_formula() -> None:
    aten = torch.ops.aten
    forward_op = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward_op = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if forward_op is not None and forward_op not in flop_counter.flop_registry:
        @flop_counter.register_flop_formula(forward_op)
        def _forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
            return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)

    if backward_op is not None and backward_op not in flop_counter.flop_registry:
        @flop_counter.register_flop_formula(backward_op)
        def _backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
            return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


_register_cpu_sdpa_formula()


@dataclass
class Counted:
    """One counter's figures: per component, the total, and what did not map onto a component."""

    components: dict[str, int]
    total: int
    unattributed: int = 0
    uncounted_ops: dict[str, int] = field(default_factory=dict)


def _by_component(per_module: dict[str, int], total: int) -> Counted:
    components: Counter[str] = Counter()
    for name, value in per_module.items():
        component = component_of_module(name)
        if component is not None and value:
            components[component] += value
    return Counted(dict(components), total, total - sum(components.values()))


def _per_module(model: torch.nn.Module, counter: FlopCounterMode) -> dict[str, int]:
    root = type(model).__name__ + "."
    return {name.removeprefix(root): sum(ops.values())
            for name, ops in counter.get_flop_counts().items() if name.startswith(root)}


def flop_counter_forward(model: torch.nn.Module, inputs: tuple, repeats: dict[str, int] | None = None) -> Counted:
    """FLOPs of one forward pass, per component, as FlopCounterMode counts them. `repeats`: a folded model's
    blocks, each counted as many times as it stands for (tfcalc.verify.folding)."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(*inputs)
    return _by_component(*scaled(_per_module(model, counter), counter.get_total_flops(), repeats))


NOTE_FLOP_COUNTER_GROUPED_CONV = ("FlopCounterMode's convolution_backward formula ignores `groups` in the weight "
                                  "gradient (it counts a depthwise convolution's weight gradient channels times over): "
                                  "the train step counts it divided by groups (grouped_conv_backward_flop)")


# torch's formula on shapes (register_flop_formula keeps the shape-taking function as __wrapped__)
_torch_conv_backward = getattr(flop_counter.conv_backward_flop, "__wrapped__", flop_counter.conv_backward_flop)


def grouped_conv_backward_flop(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed,
                               output_padding, groups, output_mask, out_shape, **kwargs) -> int:
    """torch's conv_backward_flop with the weight gradient's term divided by `groups`. torch counts that term as a
    convolution of the input [C_in, b, ...] by grad_out [C_out, b, ...] (both transposed), all C_in x C_out channel
    pairs, while a grouped convolution pairs each output channel with C_in / groups inputs only: a depthwise
    convolution [b, C, s] -> [b, C, n] of K taps has a weight gradient of 2 b n C K FLOPs (what its forward costs),
    which torch counts as 2 b n C^2 K. The input gradient's term is right (it reads the weight's [C_out, C_in /
    groups, K] shape) and is left as torch counts it."""
    whole = _torch_conv_backward(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed,
                                 output_padding, groups, output_mask, out_shape)
    if not (output_mask[1] and groups > 1):
        return whole
    data = _torch_conv_backward(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed,
                                output_padding, groups, [output_mask[0], False, False], out_shape)
    return data + (whole - data) // groups


def flop_counter_train_step(model: torch.nn.Module, inputs: tuple, repeats: dict[str, int] | None = None) -> int:
    """FLOPs of forward + backward (loss = sum of every output), as FlopCounterMode counts them, but for a grouped
    convolution's weight gradient, counted with its groups (grouped_conv_backward_flop)."""
    with FlopCounterMode(display=False,
                         custom_mapping={torch.ops.aten.convolution_backward: grouped_conv_backward_flop}) as counter:
        out = model(*inputs)
        outputs = out if isinstance(out, tuple) else (out,)
        sum(o.sum() for o in outputs).backward()
    return scaled(_per_module(model, counter), counter.get_total_flops(), repeats)[1]


def _sdpa_macs(inputs, outputs) -> int:
    from fvcore.nn.jit_handles import get_shape

    b, h, s_q, d = get_shape(inputs[0])
    s_k, d_v = get_shape(inputs[1])[-2], get_shape(inputs[2])[-1]
    return b * h * s_q * s_k * d + b * h * s_q * s_k * d_v  # q @ k^T, then p @ v


def fvcore_forward(model: torch.nn.Module, inputs: tuple, repeats: dict[str, int] | None = None) -> Counted:
    """Multiply-adds of one forward pass, per component, as fvcore's FlopCountAnalysis counts them."""
    from fvcore.nn import FlopCountAnalysis

    with warnings.catch_warnings():
        # tracer warnings about data-dependent routing (the traced shapes are what we count), and torch's
        # deprecation of the jit API fvcore is built on
        warnings.simplefilter("ignore")
        analysis = FlopCountAnalysis(model, inputs)
        analysis.set_op_handle("aten::scaled_dot_product_attention", _sdpa_macs)
        # set_op_handle(name, None) does not remove a default handle in fvcore 0.1.5 (handles win over the
        # ignore list), so the norm handle is replaced by one that counts nothing.
        analysis.set_op_handle("aten::layer_norm", lambda inputs, outputs: 0)
        analysis.unsupported_ops_warnings(False)
        analysis.uncalled_modules_warnings(False)
        with torch.no_grad():
            total = analysis.total()
            per_module = dict(analysis.by_module())
            uncounted = dict(analysis.unsupported_ops())
    counted = _by_component(*scaled(per_module, total, repeats))
    counted.uncounted_ops = dict(sorted(uncounted.items()))
    return counted


def fvcore_parameters(model: torch.nn.Module) -> dict[str, int]:
    """fvcore's parameter_count, per parameter name."""
    from fvcore.nn import parameter_count

    names = {name for name, _ in model.named_parameters()}
    return {name: n for name, n in parameter_count(model).items() if name in names}
