"""`tfcalc profile`: timed runs of the reference model, achieved FLOP/s, MFU, predicted against measured time."""

from __future__ import annotations

import resource
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import torch

from ..arch import build
from ..counts import Breakdown, count
from ..errors import TfcalcError
from ..reference import build_model, example_inputs
from ..spec import ModelSpec
from . import allocator
from .memory import available_bytes, layers_that_fit, step_bytes
from .peak import Datasheet, GemmBench, GemmPeak, Shape, datasheet_for, gemm_bytes, math_mode
from .timing import time_interleaved

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MODES = ("forward", "train")


@dataclass(frozen=True)
class Timing:
    median: float
    min: float
    max: float
    repeats: int

    @classmethod
    def of(cls, times: list[float]) -> Timing:
        return cls(statistics.median(times), min(times), max(times), len(times))


@dataclass
class ProfileResult:
    spec: ModelSpec
    device: str
    device_name: str
    dtype: str
    mode: str
    compiled: bool
    time: Timing
    flops: int  # analytic FLOPs of one step (forward, or count's train step: 3 x forward, a ViT's less its
    # patch embedding's input gradient)
    flops_causal: int | None  # the same with causal attention counted over the lower triangle only
    gemm: GemmPeak  # the fastest of the model's matmul shapes: the measured peak
    gemm_largest: GemmPeak  # the model's largest matmul shape
    predicted_by_shape_s: float  # each weight matmul at its own shape's measured rate
    datasheet: Datasheet | None
    peak_memory_bytes: int
    interrupted: bool = False
    layers_profiled: int | None = None  # set when the time is extrapolated from fewer blocks
    cpu_allocator: str | None = None  # the host allocator setting a CPU run ran under (profile.allocator)

    @property
    def tokens_per_s(self) -> float:
        return self.spec.tokens / self.time.median

    @property
    def images_per_s(self) -> float | None:
        """A model of images: the step's images (its batch) a second; None for a model of tokens."""
        return self.spec.batch_size / self.time.median if self.spec.inputs == "images" else None

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops / self.time.median

    @property
    def achieved_causal_flops_per_s(self) -> float | None:
        return None if self.flops_causal is None else self.flops_causal / self.time.median

    @property
    def mfu(self) -> float:
        return self.achieved_flops_per_s / self.gemm.flops_per_s

    @property
    def predicted_time_s(self) -> float:
        return self.flops / self.gemm.flops_per_s

    @property
    def datasheet_peak(self) -> float | None:
        if self.datasheet is None:
            return None
        return self.datasheet.peaks.get(self.dtype if self.dtype != "fp32" else math_mode(torch.float32))

    @property
    def mfu_datasheet(self) -> float | None:
        peak = self.datasheet_peak
        return None if peak is None else self.achieved_flops_per_s / peak

    @property
    def predicted_time_datasheet_s(self) -> float | None:
        peak = self.datasheet_peak
        return None if peak is None else self.flops / peak

    def to_dict(self) -> dict:
        return {
            "spec": self.spec.model_dump(),
            "device": self.device,
            "device_name": self.device_name,
            "dtype": self.dtype,
            "mode": self.mode,
            "compiled": self.compiled,
            "time_s": {"median": self.time.median, "min": self.time.min, "max": self.time.max},
            "repeats": self.time.repeats,
            "interrupted": self.interrupted,
            "extrapolated_from_layers": self.layers_profiled,
            "flops": self.flops,
            "flops_causal": self.flops_causal,
            "tokens_per_s": self.tokens_per_s,
            "images_per_s": self.images_per_s,
            "achieved_flops_per_s": self.achieved_flops_per_s,
            "achieved_causal_flops_per_s": self.achieved_causal_flops_per_s,
            "peak_flops_per_s": self.gemm.flops_per_s,
            "peak_gemm_shape": list(self.gemm.shape),
            "largest_matmul": {"shape": list(self.gemm_largest.shape),
                               "flops_per_s": self.gemm_largest.flops_per_s},
            "datasheet_peak_flops_per_s": self.datasheet_peak,
            "datasheet": None if self.datasheet is None else {"name": self.datasheet.name,
                                                              "source": self.datasheet.source},
            "mfu": self.mfu,
            "mfu_datasheet": self.mfu_datasheet,
            "predicted_time_s": self.predicted_time_s,
            "predicted_time_datasheet_s": self.predicted_time_datasheet_s,
            "predicted_time_by_shape_s": self.predicted_by_shape_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "cpu_allocator": self.cpu_allocator,
        }


def resolve_device(device: str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise TfcalcError(f"device={device!r}: expected cpu, cuda or cuda:N") from None
    if resolved.type not in ("cpu", "cuda"):
        raise TfcalcError(f"device={device!r}: expected cpu, cuda or cuda:N")
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise TfcalcError(f"device={device!r}: CUDA is not available here; use --device cpu")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise TfcalcError(f"device={device!r}: there are {torch.cuda.device_count()} CUDA devices")
    return resolved


# Small matmuls beside the main path (router logits, the shared experts' gate, the pooler), by role: timed at the peak
SIDE_ROLES = ("router", "shared_gate", "pooler")


def component_shapes(spec: ModelSpec) -> dict[str, list[tuple[Shape, Fraction]]]:
    """For each weight-matmul component, the (m, k, n) it runs as and the share of its FLOPs at that shape, read
    off the op inventory (a tied head included: its GEMM runs, its weight is the token table's). Routed experts
    run an even share of their rows each (m / E)."""
    flops: dict[str, dict[Shape, int]] = {}
    for op, repeat in build(spec):
        shape = op.gemm()
        if shape is None or op.role in SIDE_ROLES:
            continue
        by_shape = flops.setdefault(op.component, {})
        by_shape[shape] = by_shape.get(shape, 0) + repeat * sum(op.forward().values())
    return {name: [(shape, Fraction(f, sum(by_shape.values()))) for shape, f in by_shape.items()]
            for name, by_shape in flops.items()}


def matmul_shapes(spec: ModelSpec) -> list[Shape]:
    """The distinct (m, k, n) of the model's weight matmuls, largest (by FLOPs) first."""
    distinct = {shape for parts in component_shapes(spec).values() for shape, _ in parts}
    return sorted(distinct, key=lambda s: -s[0] * s[1] * s[2])


def predict_by_shape(spec: ModelSpec, forward: Breakdown, rates: dict[Shape, float], peak: float) -> float:
    """Forward seconds with each weight matmul at its own shape's measured rate, and the rest (attention core,
    router, pooler) at the peak: what the matmuls alone should take."""
    shapes = component_shapes(spec)
    total = 0.0
    for name, flops in forward.items():
        parts = shapes.get(name, [])
        total += sum(float(flops * share) / rates[shape] for shape, share in parts) if parts else flops / peak
    return total


def profile(spec: ModelSpec, device: str | None = None, dtype: str | None = None, mode: str = "forward",
            warmup: int = 2, repeat: int = 5, compile: bool = False, layers: int | None = None,
            memory_budget: int | None = None, on_step: Callable[[str], None] | None = None,
            tune_allocator: bool = True) -> ProfileResult:
    """Time `repeat` steps of the reference model (after `warmup` untimed ones) and compare with the count.

    With `layers=K`, blocks 1 and K are timed and the full model's time is extrapolated linearly in blocks.
    On the CPU, `tune_allocator` keeps freed blocks in glibc's heap for the rest of the process, so that steps
    do not pay for page faults (`tfcalc.profile.allocator`); the result says which setting was in effect."""
    dev = resolve_device(device)
    dtype = dtype or ("bf16" if dev.type == "cuda" else "fp32")
    if dtype not in DTYPES:
        raise TfcalcError(f"dtype={dtype!r}: expected one of {', '.join(DTYPES)}")
    if mode not in MODES:
        raise TfcalcError(f"mode={mode!r}: expected forward or train")
    if warmup < 0 or repeat < 1:
        raise TfcalcError(f"warmup={warmup}, repeat={repeat}: need warmup >= 0 and repeat >= 1")
    if memory_budget is not None and memory_budget < 1:
        raise TfcalcError(f"memory_budget={memory_budget}: expected a positive number of bytes")
    if layers is not None and not 2 <= layers <= spec.n_layers:
        raise TfcalcError(f"layers={layers}: needs 2 <= layers <= n_layers={spec.n_layers} (blocks 1 and K are "
                          "timed to separate per-block time from embedding and head)")
    torch_dtype = DTYPES[dtype]
    size = torch.tensor([], dtype=torch_dtype).element_size()
    budget = memory_budget if memory_budget is not None else available_bytes(dev)
    profiled = spec if layers is None else spec.replace(n_layers=layers)
    shapes = matmul_shapes(spec)
    gemm_need = gemm_bytes(shapes, size)  # the peak's GEMMs run beside the model
    tuned_heap = dev.type == "cpu" and tune_allocator
    need = step_bytes(profiled, size, mode, gemm_need, tuned_heap)
    if need > budget:
        fit = layers_that_fit(spec, size, mode, budget, gemm_need, tuned_heap)
        hint = (f"try --layers {fit} (profile {fit} blocks and extrapolate)" if fit >= 2
                else "try a smaller --seq-len or --batch-size")
        raise TfcalcError(f"{spec.label} needs about {need / 2**30:.2f} GiB for a {mode} step in {dtype} and "
                          f"{budget / 2**30:.2f} GiB is available on {dev}; {hint}")

    cpu_allocator = None
    if dev.type == "cpu":
        cpu_allocator = allocator.tune() if tune_allocator else allocator.state()
    result = count(spec)
    # a train step: 3 x forward, less a patch embedding's input gradient (the images need none: formulas.md)
    flops = result.flops.forward if mode == "forward" else result.flops.train_step
    causal = result.flops.forward_causal * (1 if mode == "forward" else 3) if spec.causal else None
    bench = GemmBench(shapes, dev, torch_dtype)  # before the memory baselines: its buffers are not the model's
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def timed(n_layers: int, gemms: list[Callable[[], object]]) -> tuple[list[list[float]], bool]:
        run_spec = spec.replace(n_layers=n_layers)
        model = build_model(run_spec, dev, torch_dtype)
        if compile:
            model = torch.compile(model)
        inputs = example_inputs(run_spec, dev)
        return time_interleaved([_step(model, inputs, mode), *gemms], dev, warmup, repeat, on_step)

    try:
        # The peak: a GEMM at each of the model's matmul shapes, timed in turn with the model's steps so that
        # both see the same machine (a VM's speed drifts by tens of percent within seconds). The fastest shape
        # is the peak; the largest alone can be a poor one: GPT-2's head ([T, 768] @ [768, 50257], an odd
        # width) runs at 97-126 TFLOP/s on an H100 in bf16, against 665-780 for its MLP.
        (times, *gemm_times), interrupted = timed(profiled.n_layers, [bench.step(shape) for shape in shapes])
        timing = Timing.of(times)
        if layers is not None and not interrupted:
            (one,), interrupted = timed(1, [])
            timing = _extrapolate(Timing.of(one), timing, layers, spec.n_layers)
    except torch.cuda.OutOfMemoryError:
        # the estimate said it would fit (fragmentation, other processes, workspaces): say so, no traceback
        torch.cuda.empty_cache()
        fit = layers_that_fit(spec, size, mode, budget // 2, gemm_need, tuned_heap)
        hint = f"try --layers {fit}" if fit >= 2 else "try a smaller --seq-len or --batch-size"
        raise TfcalcError(f"{spec.label}: CUDA ran out of memory in a {mode} step although the estimate "
                          f"({need / 2**30:.2f} GiB) fitted in {budget / 2**30:.2f} GiB; {hint}") from None
    if dev.type == "cuda":
        peak_memory = torch.cuda.max_memory_allocated(dev) - bench.nbytes
    else:
        peak_memory = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) * 1024
    gemms = [GemmPeak.of(shape, t) for shape, t in zip(shapes, gemm_times)]
    gemm = max(gemms, key=lambda g: g.flops_per_s)
    by_shape = predict_by_shape(spec, result.flops.components, {g.shape: g.flops_per_s for g in gemms},
                                gemm.flops_per_s) * flops / result.flops.forward  # (a ViT's step: not 3 x)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    sheet = datasheet_for(name) if dev.type == "cuda" else None
    return ProfileResult(spec, str(dev), name, dtype, mode, compile, timing, flops, causal, gemm, gemms[0], by_shape,
                         sheet, peak_memory, interrupted, layers, cpu_allocator)


def _step(model: torch.nn.Module, inputs: tuple, mode: str) -> Callable[[], None]:
    if mode == "forward":
        def forward() -> None:
            with torch.inference_mode():
                model(*inputs)
        return forward

    def train() -> None:
        for p in model.parameters():
            p.grad = None
        out = model(*inputs)
        outputs = out if isinstance(out, tuple) else (out,)
        sum(o.float().sum() for o in outputs).backward()
    return train


def _extrapolate(one: Timing, k: Timing, layers: int, n_layers: int) -> Timing:
    """t(n) = rest + n * block, fitted through t(1) and t(K), evaluated at n = n_layers."""
    def at(t1: float, tk: float) -> float:
        block = (tk - t1) / (layers - 1)
        return t1 + (n_layers - 1) * block

    return Timing(at(one.median, k.median), at(one.min, k.min), at(one.max, k.max), k.repeats)
