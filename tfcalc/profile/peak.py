"""Peak FLOP/s: a GEMM measured in the same process, and the datasheet figure for known GPUs.

Datasheet figures are NVIDIA's dense peaks (never the "with sparsity" figure, which is twice as large), in
FLOP/s, for the tensor-core math a matmul of that dtype uses (fp32 is the CUDA-core figure: torch does not use
TF32 for fp32 matmuls unless allowed, and then the tf32 figure applies).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch


T = 10**12


@dataclass(frozen=True)
class Datasheet:
    name: str
    peaks: dict[str, float]  # dtype -> dense FLOP/s
    source: str


# Ordered: the first whose every keyword appears in torch.cuda.get_device_name() wins.
DATASHEETS: list[tuple[tuple[str, ...], Datasheet]] = [
    (("H100", "PCIE"), Datasheet("H100 PCIe", {"bf16": 756 * T, "fp16": 756 * T, "tf32": 378 * T, "fp32": 51 * T},
                                 "NVIDIA H100 datasheet (PCIe), dense")),
    (("H100", "NVL"), Datasheet("H100 NVL", {"bf16": 835.5 * T, "fp16": 835.5 * T, "tf32": 417.5 * T, "fp32": 60 * T},
                                "NVIDIA H100 datasheet (NVL), dense")),
    (("H100",), Datasheet("H100 SXM", {"bf16": 989.4 * T, "fp16": 989.4 * T, "tf32": 494.7 * T, "fp32": 67 * T},
                          "NVIDIA H100 datasheet (SXM5), dense")),
    (("H200",), Datasheet("H200 SXM", {"bf16": 989.4 * T, "fp16": 989.4 * T, "tf32": 494.7 * T, "fp32": 67 * T},
                          "NVIDIA H200 datasheet (SXM), dense")),
    (("A100",), Datasheet("A100", {"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T},
                          "NVIDIA A100 datasheet (40 GB and 80 GB, SXM and PCIe), dense")),
    (("L40S",), Datasheet("L40S", {"bf16": 362.05 * T, "fp16": 362.05 * T, "tf32": 183 * T, "fp32": 91.6 * T},
                          "NVIDIA L40S datasheet, dense")),
    (("L4",), Datasheet("L4", {"bf16": 121 * T, "fp16": 121 * T, "tf32": 60 * T, "fp32": 30.3 * T},
                        "NVIDIA L4 datasheet, dense")),
    (("A10",), Datasheet("A10", {"bf16": 125 * T, "fp16": 125 * T, "tf32": 62.5 * T, "fp32": 31.2 * T},
                         "NVIDIA A10 datasheet, dense")),
    (("RTX 4090",), Datasheet("GeForce RTX 4090",
                              {"bf16": 165.2 * T, "fp16": 165.2 * T, "tf32": 82.6 * T, "fp32": 82.6 * T},
                              "NVIDIA Ada Lovelace architecture whitepaper (RTX 4090, FP32 accumulate), dense")),
]


def datasheet_for(device_name: str) -> Datasheet | None:
    upper = device_name.upper()
    for keywords, sheet in DATASHEETS:
        if all(k.upper() in upper for k in keywords):
            return sheet
    return None


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
