"""Timing one step: CUDA events with synchronisation on a GPU, perf_counter on the CPU; warm-up excluded."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def time_steps(step: Callable[[], object], device: torch.device, warmup: int, repeat: int,
               on_step: Callable[[str], None] | None = None) -> tuple[list[float], bool]:
    """(seconds per timed step, interrupted). Warm-up steps run first and are not timed.
    `on_step("warmup" | "timed")` is called after each step (for a progress bar). Ctrl-C stops early: what was
    timed is returned, flagged as interrupted; with nothing timed yet, the KeyboardInterrupt propagates."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    times: list[float] = []
    try:
        for _ in range(warmup):
            step()
            if cuda:
                torch.cuda.synchronize(device)
            if on_step:
                on_step("warmup")
        for _ in range(repeat):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1000)  # ms -> s
            else:
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            if on_step:
                on_step("timed")
    except KeyboardInterrupt:
        if cuda:
            torch.cuda.synchronize(device)
        if not times:
            raise
        return times, True
    return times, False
