"""Peak FLOP/s: a GEMM measured in the same process, and the datasheet figure for known GPUs.

Datasheet figures come from tfcalc.plan.gpus, the one table of accelerators: dense peaks (never the "with
sparsity" figure, which is twice as large), in FLOP/s, for the tensor-core math a matmul of that dtype uses (fp32
is the CUDA-core figure: torch does not use TF32 for fp32 matmuls unless allowed, and then the tf32 figure
applies).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..plan.gpus import from_device_name


@dataclass(frozen=True)
class Datasheet:
    """What profile reports of a GPU's datasheet (the figures live in tfcalc.plan.gpus)."""
    name: str
    peaks: dict[str, int]  # dtype -> dense FLOP/s
    source: str


def datasheet_for(device_name: str) -> Datasheet | None:
    """The datasheet of the GPU torch.cuda.get_device_name() calls `device_name`, or None if it is not known."""
    gpu = from_device_name(device_name)
    return None if gpu is None else Datasheet(gpu.name, dict(gpu.peak_flops), gpu.source)


def math_mode(dtype: torch.dtype) -> str:
    """The datasheet column a matmul of `dtype` runs at on a CUDA device."""
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float16:
        return "fp16"
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"


Shape = tuple[int, int, int]  # m, k, n: [m, k] @ [k, n]


@dataclass(frozen=True)
class GemmPeak:
    shape: Shape
    flops_per_s: float

    @classmethod
    def of(cls, shape: Shape, times: list[float]) -> GemmPeak:
        """From the median of the timed runs: the same statistic as the step it is compared with."""
        m, k, n = shape
        return cls(shape, 2 * m * k * n / statistics.median(times))


def gemm_bytes(shapes: list[Shape], dtype_bytes: int) -> int:
    """Memory the GEMM operands of GemmBench(shapes) take: the largest input, weight and output."""
    return dtype_bytes * (max(m * k for m, k, _ in shapes) + max(n * k for _, k, n in shapes)
                          + max(m * n for m, _, n in shapes))


class GemmBench:
    """A GEMM at each of `shapes`, laid out as nn.Linear lays out its product (x [m, k] times a weight stored
    [n, k], a fresh output each call). Inputs and weights are views of two shared random buffers, so they take
    the memory of the largest operands, not of all of them."""

    def __init__(self, shapes: list[Shape], device: torch.device, dtype: torch.dtype):
        self._x = torch.randn(max(m * k for m, k, _ in shapes), device=device, dtype=dtype)
        self._w = torch.randn(max(n * k for _, k, n in shapes), device=device, dtype=dtype)
        self.nbytes = (self._x.numel() + self._w.numel()) * self._x.element_size()

    def step(self, shape: Shape) -> Callable[[], object]:
        m, k, n = shape
        x, weight = self._x[: m * k].view(m, k), self._w[: n * k].view(n, k)
        return lambda: torch.nn.functional.linear(x, weight)
