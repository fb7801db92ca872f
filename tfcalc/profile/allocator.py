"""The host allocator setting that CPU profiles run under.

glibc's malloc serves large blocks with mmap (from 128 KiB up, a threshold it raises adaptively) and unmaps them
on free, so the next allocation of the same size faults every page in again, zero-filled by the kernel. A
transformer step allocates and frees the same large activations every step, so on the CPU a step also pays for
page faults that have nothing to do with the model. Measured on the 2-core development VM (gpt2, N = 512, fp32
forward, torch.profiler): GELU on [512, 3072] took 9.9 ms a call with glibc's defaults and 3.5 ms with freed
blocks kept; the bias copy into nn.Linear's [512, 3072] output 5.8 ms against 0.5 ms; the whole step
1.05-1.18 s against 0.76-1.00 s.

`tune()` keeps freed memory in the heap for reuse: it raises M_MMAP_THRESHOLD and M_TRIM_THRESHOLD with
mallopt(3). That is the in-process form of MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_, and does what the
PyTorch CPU performance guide's advice (preload jemalloc or TCMalloc) does for this pattern. It is process-wide
and lasts until the process exits; the cost is memory the process keeps instead of returning to the system.
Other C libraries (musl, macOS) are left alone and reported as such.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
# The largest value every glibc accepts for M_MMAP_THRESHOLD is HEAP_MAX_SIZE / 2 (32 MiB on 64-bit) in releases
# before 2.26; later ones accept any. Try the large value first.
MMAP_THRESHOLDS = (1 << 30, 32 << 20)
TRIM_THRESHOLD = (1 << 31) - 1  # an int, as mallopt takes

_state = "default"


def state() -> str:
    """What is in effect in this process: 'default', or the thresholds tune() set."""
    return _state


def tune() -> str:
    """Keep freed blocks in the heap (see the module docstring); returns the resulting state()."""
    global _state
    libc_name, _ = platform.libc_ver()
    if libc_name != "glibc":
        return f"default ({libc_name or 'unknown C library'}: not tuned)"
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    threshold = next((t for t in MMAP_THRESHOLDS if mallopt(M_MMAP_THRESHOLD, t) == 1), None)
    if threshold is None:
        return f"{_state} (mallopt refused the thresholds)"
    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    _state = f"glibc malloc, mmap threshold {threshold >> 20} MiB, trim threshold 2 GiB (mallopt)"
    return _state
