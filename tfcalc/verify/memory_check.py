"""`tfcalc check --memory`: the training-memory plan (`tfcalc.plan.training`) held against torch's own MemTracker
on the reference model (`tfcalc.verify.memory`), category by category, and on CUDA against
`torch.cuda.max_memory_allocated`.

Parameters, gradients, optimizer states and master weights must agree to the byte; the activations kept for
backward within 5% (for every block kind built so far they agree to the byte: the tests hold them to it); the
peak, an estimate, within 10%.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arch import Workload
from ..errors import TfcalcError
from ..plan.training import training_memory
from ..spec import ModelSpec

DEVICES = {"meta": "fake", "cpu": "cpu", "cuda": "cuda"}
ACTIVATION_TOLERANCE = 0.05
PEAK_TOLERANCE = 0.10


@dataclass(frozen=True)
class MemoryRow:
    category: str
    analytic: int
    measured: int
    tolerance: float  # 0: exact
    note: str = ""
    slack: int = 0  # exact rows on CUDA: up to this many bytes more (every storage rounded up to 512 B)

    @property
    def difference(self) -> int:
        return self.measured - self.analytic

    @property
    def relative(self) -> float:
        return self.difference / self.measured if self.measured else float(self.difference != 0)

    @property
    def match(self) -> bool:
        if self.tolerance == 0:
            return 0 <= self.difference <= self.slack
        return abs(self.relative) <= self.tolerance

    def to_dict(self) -> dict:
        return {"category": self.category, "analytic": self.analytic, "measured": self.measured,
                "difference": self.difference, "tolerance": self.tolerance, "slack": self.slack,
                "match": self.match, "note": self.note}


@dataclass(frozen=True)
class MemoryReport:
    spec: ModelSpec
    workload: Workload
    precision: str
    optimizer: str
    recompute: str
    device: str
    rows: tuple[MemoryRow, ...]
    seconds: float
    notes: tuple[str, ...]
    attention: str = "fused"

    @property
    def match(self) -> bool:
        return all(r.match for r in self.rows)

    def to_dict(self) -> dict:
        return {"spec": self.spec.model_dump(), "workload": self.workload.model_dump(),
                "precision": self.precision, "optimizer": self.optimizer, "recompute": self.recompute,
                "attention": self.attention, "device": self.device, "rows": [r.to_dict() for r in self.rows],
                "match": self.match,
                "seconds": self.seconds, "notes": list(self.notes)}


def _activation_note(difference: int) -> str:
    return "" if difference == 0 else f"{difference:+,} B the plan does not model"


GUARD_MARGIN = 1.25  # the plan's peak is an estimate (within PEAK_TOLERANCE); the allocator's slack beside it


def _guard(spec: ModelSpec, plan, device: str) -> None:
    """On the CPU (real allocations), refuse a step the machine's available memory cannot hold, by the plan's own
    peak with a margin: before allocating, not after the machine starts to swap."""
    if not str(device).startswith("cpu"):
        return
    import torch

    from ..profile.memory import available_bytes

    need, have = int(plan.peak * GUARD_MARGIN), available_bytes(torch.device("cpu"))
    if need > have:
        raise TfcalcError(f"device='cpu': a train step of {spec.label} peaks at about {plan.peak / 2**30:.1f} GiB by "
                          f"the plan ({need / 2**30:.1f} GiB with a margin) and {have / 2**30:.1f} GiB is available; "
                          "use --device meta (measures without allocating), or smaller --n-layers/--seq-len")


def check_memory(spec: ModelSpec, workload: Workload, precision: str = "bf16-mixed", optimizer: str = "adamw",
                 recompute: str = "none", device: str = "meta", attention: str = "fused",
                 adapters=None) -> MemoryReport:
    """The plan's per-category bytes against MemTracker's on the reference model's train step (one GPU), its
    attention run fused (torch SDPA) or eager (two matmuls and a softmax); with `adapters`, a fine-tuning step of
    LoRA adapters on the frozen reference model."""
    from .memory import measure_training_memory

    plan = training_memory(spec, workload, precision, optimizer, recompute, adapters=adapters, attention=attention)
    _guard(spec, plan, device)
    measured = measure_training_memory(spec, plan.workload, precision, optimizer, recompute,
                                       DEVICES.get(str(device).split(":")[0], device), attention=attention,
                                       adapters=adapters)
    # CUDA's caching allocator gives every storage a multiple of 512 bytes: an exact row may be over by less
    # than 512 B a tensor (AdamW's 4-byte step counters take 512 B each there)
    n = plan.stage.tensors if measured.cuda_max_allocated is not None else 0
    rounded = "; on CUDA each storage rounded up to 512 B" if n else ""
    states = {"adamw": 3, "sgd": 1}.get(optimizer, 0)
    rows = [
        MemoryRow("weights", plan.weights, measured.parameters, 0, rounded.lstrip("; "), 511 * n),
        MemoryRow("gradients", plan.gradients, measured.gradients, 0, rounded.lstrip("; "), 511 * n),
        MemoryRow("optimizer states", plan.optimizer_states, measured.optimizer_states, 0,
                  ("AdamW's step counters included" if optimizer == "adamw" else "") + rounded, 511 * n * states),
        MemoryRow("master weights", plan.master_weights, measured.master_weights, 0, rounded.lstrip("; "),
                  511 * n if plan.master_weights else 0),
        MemoryRow("activations (end of forward)", plan.activations, measured.activations_end_of_forward,
                  ACTIVATION_TOLERANCE, _activation_note(measured.activations_end_of_forward - plan.activations)),
        MemoryRow("peak (MemTracker)", plan.peak, measured.peak_total, PEAK_TOLERANCE,
                  f"at {measured.peak_at}; the plan's peak is an estimate"),
    ]
    if measured.cuda_max_allocated is not None:
        rows.append(MemoryRow("peak (torch.cuda.max_memory_allocated)", plan.peak, measured.cuda_max_allocated,
                              PEAK_TOLERANCE, "the caching allocator rounds every block up to 512 B and "
                              "holds cuBLAS workspaces and the inputs"))
    return MemoryReport(spec, plan.workload, precision, optimizer, recompute, measured.device, tuple(rows),
                        measured.seconds, tuple(measured.notes), attention)
