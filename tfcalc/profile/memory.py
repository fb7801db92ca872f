"""Will the step fit? A conservative estimate of weights, gradients and activations, and what the device has."""

from __future__ import annotations

import os

import torch

from ..arch import build
from ..counts import count
from ..spec import ModelSpec

OVERHEAD = 1.2  # allocator slack, workspaces, temporaries we do not model
# On the CPU with the tuned allocator (profile.allocator: freed blocks stay in glibc's heap), a step's peak RSS is
# higher than what it holds at once: a freed block is not returned, and a larger request cannot reuse a smaller
# hole. Measured (docs/profiling.md): mixtral-8x7b 1 block, N = 128, B = 2, bf16 train peaked at 9.1 GB with the
# tuned heap against 6.8 GB with glibc's defaults, 1.10x the estimate below (with its own 1.2 slack); 11 other
# runs stayed at 0.5-0.98x. 1.5 covers that with a margin.
TUNED_HEAP = 1.5


def estimate_bytes(spec: ModelSpec, dtype_bytes: int, mode: str, scores: bool = False) -> int:
    """Bytes a step needs: weights, then (train) gradients and the activations saved for backward, or (forward)
    the few activations alive at once. Attention is assumed fused unless `scores`: then one block's N x N
    scores and probabilities are added (the explicit-matmul path)."""
    T, D = spec.tokens, spec.d_model
    width = mlp_width(spec)
    F = width * (2 if spec.mlp == "gated" else 1)
    qkv = spec.d_attn + 2 * spec.d_kv
    logits = T * spec.vocab_size if spec.lm_head else 0
    weights = count(spec).params.total * dtype_bytes
    extra = 2 * spec.batch_size * spec.n_heads * spec.seq_len**2 * dtype_bytes if scores else 0
    if mode == "forward":
        live = T * (4 * D + 2 * max(qkv, F, spec.d_attn)) + 2 * logits
        return int(OVERHEAD * (weights + live * dtype_bytes + extra))
    per_block = T * (4 * D + qkv + 2 * spec.d_attn + 2 * F + width)  # saved for backward
    activations = spec.n_layers * per_block + 3 * logits
    # the loss is summed in fp32: a low-precision step also holds an fp32 copy of the logits
    loss = logits * 4 if dtype_bytes != 4 else 0
    # a tied table gets two gradients, the head's and the lookup's, summed into one: one more [V, D] for a moment
    tied = spec.vocab_size * D * dtype_bytes if spec.lm_head and spec.tie_embeddings else 0
    return int(OVERHEAD * (2 * weights + activations * dtype_bytes + loss + tied + extra))


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
