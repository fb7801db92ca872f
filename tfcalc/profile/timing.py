"""Timing steps: CUDA events with synchronisation on a GPU, perf_counter on the CPU; warm-up excluded."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch


def time_interleaved(steps: Sequence[Callable[[], object]], device: torch.device, warmup: int, repeat: int,
                     on_step: Callable[[str], None] | None = None) -> tuple[list[list[float]], bool]:
    """Seconds of each of `steps`, run in turn: a round runs every step once, and `warmup` untimed rounds come
    before `repeat` timed ones. Taking turns puts every step under the same machine conditions, so that ratios
    between them (the model's step against a GEMM's) hold on a machine whose speed drifts while it runs.

    Returns ([times of steps[0], times of steps[1], ...], interrupted). `on_step("warmup" | "timed")` is called
    after each round (for a progress bar). Ctrl-C stops early: the rounds completed are returned, flagged as
    interrupted; with no timed round complete, the KeyboardInterrupt propagates."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    times: list[list[float]] = [[] for _ in steps]

    def one(step: Callable[[], object]) -> float:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000  # ms -> s
        t0 = time.perf_counter()
        step()
        return time.perf_counter() - t0

    try:
        for _ in range(warmup):
            for step in steps:
                step()
            if cuda:
                torch.cuda.synchronize(device)
            if on_step:
                on_step("warmup")
        for _ in range(repeat):
            round_times = [one(step) for step in steps]
            for kept, t in zip(times, round_times):
                kept.append(t)
            if on_step:
                on_step("timed")
    except KeyboardInterrupt:
        if cuda:
            torch.cuda.synchronize(device)
        if not times[0]:
            raise
        return times, True
    return times, False

