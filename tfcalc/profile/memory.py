"""Will the step fit? What a profile step needs (a train step as the training memory plan has it) with slack for
what a process holds beyond its tensors, and what the device has."""

from __future__ import annotations

import os

import torch

from ..arch import build, default_workload
from ..counts import count
from ..plan.training import training_memory
from ..spec import ModelSpec

OVERHEAD = 1.2  # allocator slack, workspaces, temporaries we do not model
# On the CPU with the tuned allocator (profile.allocator: freed blocks stay in glibc's heap), a step's peak RSS is
# higher than what it holds at once: a freed block is not returned, and a larger request cannot reuse a smaller
# hole. Measured (docs/profiling.md): mixtral-8x7b 1 block, N = 128, B = 2, bf16 train peaked at 9.1 GB with the
# tuned heap against 6.8 GB with glibc's defaults, 1.10x the estimate below (with its own 1.2 slack); 11 other
# runs stayed at 0.5-0.98x. 1.5 covers that with a margin.
TUNED_HEAP = 1.5


def estimate_bytes(spec: ModelSpec, dtype_bytes: int, mode: str, scores: bool = False) -> int:
    """Bytes a step needs, with OVERHEAD's slack. A train step (forward and backward, no optimizer) asks the
    training memory plan (`tfcalc.plan.training`, exact against MemTracker for the reference model): the weights,
    then the activations kept for backward with the backward's transients, or the gradients with the end of
    backward's, whichever is larger; attention fused (SDPA keeps no probabilities: the plan's `selective`, one
    block's scores at a time) unless `scores` (the explicit path keeps every block's probabilities: `none`). A
    forward step (inference mode) keeps nothing for backward: the weights and the few activations alive at once,
    estimated here."""
    if mode == "train":
        workload = default_workload(spec)  # (a model of audio: its window of mel frames)
        plan = training_memory(spec, workload, "fp32" if dtype_bytes == 4 else "bf16", "sgd",
                               "none" if scores else "selective")
        stage = plan.stage  # no optimizer step: its states are left out
        need = stage.states.weights + max(stage.activations + stage.transient,
                                          stage.states.gradients + stage.transient_step)
        return int(OVERHEAD * need)
    T, D = spec.tokens, spec.d_model
    width = mlp_width(spec)
    F = width * (2 if spec.mlp == "gated" else 1)
    qkv = spec.d_attn + 2 * spec.d_kv
    logits = T * spec.vocab_size if spec.lm_head else 0
    weights = count(spec).params.total * dtype_bytes
    extra = 2 * spec.batch_size * spec.n_heads * spec.seq_len**2 * dtype_bytes if scores else 0
    live = T * (4 * D + 2 * max(qkv, F, spec.d_attn)) + 2 * logits
    return int(OVERHEAD * (weights + live * dtype_bytes + extra))


def step_bytes(spec: ModelSpec, dtype_bytes: int, mode: str, gemm_bytes: int = 0, tuned_heap: bool = False) -> int:
    """What a profile step is held to against the budget: the estimate, the peak GEMMs' buffers beside it, and on
    the CPU with the tuned allocator the heap's retention (TUNED_HEAP)."""
    need = estimate_bytes(spec, dtype_bytes, mode) + gemm_bytes
    return int(need * TUNED_HEAP) if tuned_heap else need


def mlp_width(spec: ModelSpec) -> int:
    """Hidden units per token of the widest block's MLP or experts (the activation elements of the inventory's
    blocks, per token), for the memory estimate."""
    inv = build(spec)
    widths = [sum(op.elements for op in g.ops if op.role == "activation") for g in inv.groups]
    return max(widths) // inv.workload.tokens


def available_bytes(device: torch.device) -> int:
    """Free memory on `device`: CUDA's free memory, or the system's MemAvailable for the CPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def layers_that_fit(spec: ModelSpec, dtype_bytes: int, mode: str, budget: int, gemm_bytes: int = 0,
                    tuned_heap: bool = False) -> int:
    """The most blocks of `spec` whose step fits in `budget` (0 if not even one does)."""
    fits = 0
    lo, hi = 1, spec.n_layers
    while lo <= hi:
        mid = (lo + hi) // 2
        if step_bytes(spec.replace(n_layers=mid), dtype_bytes, mode, gemm_bytes, tuned_heap) <= budget:
            fits, lo = mid, mid + 1
        else:
            hi = mid - 1
    return fits
