"""Will the step fit? A conservative estimate of weights, gradients and activations, and what the device has."""

from __future__ import annotations

import os

import torch

from ..arch import Elementwise, build
from ..counts import count
from ..spec import ModelSpec

OVERHEAD = 1.2  # allocator slack, workspaces, temporaries we do not model


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
    return int(OVERHEAD * (2 * weights + activations * dtype_bytes + extra))


def mlp_width(spec: ModelSpec) -> int:
    """Hidden units per token of the widest block's MLP or experts (the activation elements of the inventory's
    blocks, per token), for the memory estimate."""
    inv = build(spec)
    widths = [sum(op.elements for op in g.ops if isinstance(op, Elementwise) and op.kind == "activation")
              for g in inv.groups]
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


def layers_that_fit(spec: ModelSpec, dtype_bytes: int, mode: str, budget: int) -> int:
    """The most blocks of `spec` whose step fits in `budget` (0 if not even one does)."""
    fits = 0
    lo, hi = 1, spec.n_layers
    while lo <= hi:
        mid = (lo + hi) // 2
        if estimate_bytes(spec.replace(n_layers=mid), dtype_bytes, mode) <= budget:
            fits, lo = mid, mid + 1
        else:
            hi = mid - 1
    return fits
