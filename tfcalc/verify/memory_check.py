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
from ..plan.training import PRECISIONS, Layout, training_memory
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
    known: int = 0  # a byte difference the note names the cause of (torch's convention that the plan does not take)

    @property
    def difference(self) -> int:
        return self.measured - self.analytic

    @property
    def relative(self) -> float:
        return self.difference / self.measured if self.measured else float(self.difference != 0)

    @property
    def match(self) -> bool:
        if self.tolerance == 0:
            return 0 <= self.difference - self.known <= self.slack
        return abs(self.relative) <= self.tolerance

    def to_dict(self) -> dict:
        return {"category": self.category, "analytic": self.analytic, "measured": self.measured,
                "difference": self.difference, "tolerance": self.tolerance, "slack": self.slack,
                "explained_bytes": self.known,
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
    layout: object = None  # a tfcalc.plan.training.Layout when the check ran a parallel layout

    @property
    def match(self) -> bool:
        return all(r.match for r in self.rows)

    def to_dict(self) -> dict:
        return {"spec": self.spec.model_dump(), "workload": self.workload.model_dump(),
                "precision": self.precision, "optimizer": self.optimizer, "recompute": self.recompute,
                "attention": self.attention, "device": self.device, "rows": [r.to_dict() for r in self.rows],
                "match": self.match, "seconds": self.seconds, "notes": list(self.notes),
                **({"layout": self.layout.to_dict()} if self.layout is not None else {})}


def _activation_note(difference: int) -> str:
    return "" if difference == 0 else f"{difference:+,} B the plan does not model"


GUARD_MARGIN = 1.25  # the plan's peak is an estimate (within PEAK_TOLERANCE); the allocator's slack beside it


def _guard(spec: ModelSpec, plan, device: str, what: str = "device='cpu'",
           hint: str = "use --device meta (measures without allocating), or smaller --n-layers/--seq-len") -> None:
    """On the CPU (real allocations), refuse a step the machine's available memory cannot hold, by the plan's own
    peak with a margin: before allocating, not after the machine starts to swap."""
    if not str(device).startswith("cpu"):
        return
    import torch

    from ..profile.memory import available_bytes

    need, have = int(plan.peak * GUARD_MARGIN), available_bytes(torch.device("cpu"))
    if need > have:
        raise TfcalcError(f"{what}: a train step of {spec.label} peaks at about {plan.peak / 2**30:.1f} GiB by "
                          f"the plan ({need / 2**30:.1f} GiB with a margin) and {have / 2**30:.1f} GiB is available; "
                          f"{hint}")


def check_memory(spec: ModelSpec, workload: Workload, precision: str = "bf16-mixed", optimizer: str = "adamw",
                 recompute: str = "none", device: str = "meta", attention: str = "fused",
                 adapters=None, layout: Layout | None = None) -> MemoryReport:
    """The plan's per-category bytes against MemTracker's on the reference model's train step (one GPU), its
    attention run fused (torch SDPA) or eager (two matmuls and a softmax); with `adapters`, a fine-tuning step of
    LoRA adapters on the frozen reference model; with a parallel layout, per rank against torch.distributed's own
    sharding on a fake process group (`check_parallel_memory`: eager attention)."""
    from .memory import measure_training_memory

    if layout is not None and layout != Layout():
        if adapters is not None:
            raise TfcalcError("--lora-rank: the parallel check measures full training (adapters: one GPU)")
        if attention != "eager":
            raise TfcalcError(f"--attention {attention}: the parallel check runs eager attention (DTensor has no "
                              "sharding rule for torch's CPU flash-attention kernel); check the fused kernel on one "
                              "GPU (no layout flags), or give --attention eager")
        return check_parallel_memory(spec, workload, precision, optimizer, recompute, device, layout)
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
    grad_note, grad_known = rounded.lstrip("; "), 0
    sizes = spec.sizes("patch_embedding") if spec.inputs == "images" else None
    if sizes is not None and plan.workload.batch_size * sizes.tiles == 1 and sizes.class_token:
        # expand's backward at batch 1 hands the class token the gradient of its slice of the embeddings as it is: a
        # view [1, 1, D] of the [1, N, D] gradient, whose storage its .grad then keeps (a tower of tiles, Mllama's,
        # expands it over every tile: its backward sums them into a tensor of its own)
        elements = (plan.workload.seq_len - 1) * spec.d_model
        grad_known = elements * (plan.gradients // max(plan.stage.params, 1) or 2)
        grad_note = (f"batch 1: the class token's gradient is a view of the embeddings' [1, {plan.workload.seq_len}, "
                     f"{spec.d_model}] gradient (expand's backward returns it as it is) and keeps its storage"
                     + rounded)
    rows = [
        MemoryRow("weights", plan.weights, measured.parameters, 0, rounded.lstrip("; "), 511 * n),
        MemoryRow("gradients", plan.gradients, measured.gradients, 0, grad_note, 511 * n, grad_known),
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


# ------------------------------------------------------------------------------------------- parallel layouts


def check_parallel_memory(spec: ModelSpec, workload: Workload, precision: str, optimizer: str, recompute: str,
                          device: str, layout: Layout) -> MemoryReport:
    """The plan per GPU under `layout` against `tfcalc.verify.parallel`'s measurement, rank by rank: weights,
    gradients, optimizer states, master weights and the activations kept at the end of forward (under pipelining
    at the first backward, every warm-up microbatch in flight) to the byte, or by the bytes of a cause named and
    computed (`known_activations`); the peak within 10%."""
    from .parallel import check_measurable, measure_parallel_memory

    check_measurable(layout)
    if recompute != "none":
        raise TfcalcError(f"--recompute {recompute}: the parallel check measures --recompute none")
    if str(device).split(":")[0] != "meta":
        raise TfcalcError(f"--device {device}: the parallel check runs on the fake process group (--device meta); "
                          "on GPUs run tfcalc.verify.parallel.measure_rank_cuda under torchrun")
    plan = training_memory(spec, workload, precision, optimizer, recompute, layout, attention="eager")
    if layout.dp > 1 and layout.zero == 0:  # DDP's step runs on real CPU tensors
        _guard(spec, plan, "cpu", f"--dp {layout.dp} (DDP, measured on real CPU tensors: its reducer needs them)",
               "use --zero 1, 2 or 3 (measured on fake tensors), or smaller --n-layers/--d-model/--seq-len")
    measured = measure_parallel_memory(spec, plan.workload, precision, optimizer, layout)
    rows = []
    for rank in measured.ranks:
        stage = plan if layout.pp == 1 else training_memory(spec, plan.workload, precision, optimizer, recompute,
                                                            layout, attention="eager", stage=rank.coords["pp"])
        mine = stage.stage.for_rank(rank.coords["dp"])
        states = mine.states
        where = f"rank {rank.rank}"
        pad = _padding(rank, states, layout, precision, optimizer, stage.stage.tensors)
        known, note = known_activations(spec, plan.workload, layout, rank.coords["pp"],
                                        PRECISIONS[precision].activations)
        rows += [
            MemoryRow(f"{where}: weights", states.weights, rank.weights, 0, pad["note"] if pad["weights"] else "",
                      known=pad["weights"]),
            MemoryRow(f"{where}: gradients", states.gradients, rank.gradients, 0,
                      pad["note"] if pad["gradients"] else "", known=pad["gradients"]),
            MemoryRow(f"{where}: optimizer states", states.optimizer_states, rank.optimizer_states, 0,
                      "; ".join(x for x in (f"AdamW's step counters included ({rank.step_counters:,} B)"
                                            if optimizer == "adamw" else "",
                                            pad["note"] if pad["optimizer states"] else "") if x),
                      known=pad["optimizer states"]),
            MemoryRow(f"{where}: master weights", states.master_weights, rank.master_weights, 0,
                      pad["note"] if pad["master weights"] else "", known=pad["master weights"]),
            MemoryRow(f"{where}: activations", stage.activations, rank.activations, 0, note, known=known),
            MemoryRow(f"{where}: peak", mine.peak, rank.peak, PEAK_TOLERANCE,
                      f"at {rank.peak_at}; the plan's: {mine.peak_items()[0]}" + (
                          f"; it holds the receive buffers ({mine.recv_buffers:,} B), made with the stage, "
                          "before MemTracker starts" if mine.recv_buffers else "")),
        ]
    notes = (*measured.notes, *(f"rank {r.rank}: {', '.join(f'{k} {v}' for k, v in r.coords.items())}"
                                for r in measured.ranks))
    return MemoryReport(spec, plan.workload, precision, optimizer, recompute, "fake process group",
                        tuple(rows), measured.seconds, notes, "eager", layout)


def _padding(rank, states, layout: Layout, precision: str, optimizer: str, tensors: int) -> dict:
    """FSDP2's padding, not in the plan: each tensor's first dimension padded to a multiple of dp in the shards the
    weights and gradients live in, the fp32 masters and optimizer states made from the unpadded local shards (the
    last ranks' shorter). The bytes by which the measurement must differ from the plan's even split, per
    category (0 where the dimensions divide dp)."""
    from .parallel import fsdp_padding

    out = {"weights": 0, "gradients": 0, "optimizer states": 0, "master weights": 0, "note": ""}
    if not rank.shapes:
        return out
    recipe = PRECISIONS[precision]
    padded, local = fsdp_padding(rank.shapes, layout.dp, rank.coords["dp"])
    from ..plan.training import OPTIMIZERS, STEP_COUNTER

    counters = STEP_COUNTER * tensors if optimizer == "adamw" else 0
    expected = {"weights": padded * recipe.weights, "gradients": padded * recipe.grads,
                "optimizer states": local * recipe.state * OPTIMIZERS[optimizer] + counters,
                "master weights": local * recipe.master}
    planned = {"weights": states.weights, "gradients": states.gradients,
               "optimizer states": states.optimizer_states, "master weights": states.master_weights}
    out.update({k: expected[k] - planned[k] for k in expected})
    out["note"] = (f"FSDP2 pads each tensor's first dimension to a multiple of dp={layout.dp} (padded shards: "
                   f"{padded:,} values; this rank's unpadded: {local:,})")
    return out


def known_activations(spec: ModelSpec, workload: Workload, layout: Layout, stage: int = 0,
                      a: int = 2) -> tuple[int, str]:
    """Bytes MemTracker counts at the end of forward beyond the plan's activations, with their cause: under
    pipelining the last stage's input arrives in a receive buffer made with the stage, before MemTracker starts (the
    plan counts it where the first block keeps it). (loss_parallel's int64 tensors and the schedule's copies of the
    ids and targets are in the plan.)"""
    known, causes = 0, []
    if layout.pp > 1 and stage == layout.pp - 1:
        received = workload.batch_size * workload.seq_len * spec.d_model * a
        known -= received
        causes.append(f"-{received:,} B the input's receive buffer MemTracker does not see")
    return known, "; ".join(causes)
