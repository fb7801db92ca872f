"""Whole-process wall time and peak resident memory of `tfcalc check` (meta device) on the DeepSeek-V3 preset (MLA,
256 experts in 58 MoE blocks: 44,544 expert linears unfolded) and the Llama 3.1 405B preset.

    python benchmarks/check_at_scale.py

Target (the issue's floor): each at most 60 s and 4 GB peak RSS, exit 0 (the check matches). A model with more
than tfcalc.verify.folding.FOLD_EXPERTS expert modules is checked with its repeated blocks folded (one block of each
kind built and traced, counted once per block of that kind); `--no-fold` here times the unfolded check of
DeepSeek-V3 for comparison (minutes: not part of the target).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

RUNS = [
    ["check", "--preset", "deepseek-v3"],
    ["check", "--preset", "llama3.1-405b"],
]
LIMIT_S, LIMIT_BYTES = 60.0, 4 * 10**9


def measure(args: list[str], env: dict | None = None) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in bytes, exit code) of one tfcalc process; os.wait4 gives this child's own rusage
    (RUSAGE_CHILDREN would be the maximum over every child waited for so far)."""
    exe = shutil.which("tfcalc")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "tfcalc", *args]
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    return elapsed, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)  # ru_maxrss is in KiB on Linux


def main() -> int:
    ok = True
    for args in RUNS:
        seconds, peak, code = measure(args)
        within = seconds <= LIMIT_S and peak <= LIMIT_BYTES and code == 0
        ok &= within
        print(f"tfcalc {' '.join(args):40s} {seconds:6.1f} s  peak {peak / 2**30:5.2f} GiB  exit {code}  "
              f"{'ok' if within else 'OVER'}")
    if "--no-fold" in sys.argv[1:]:
        code = ("import sys, time; from tfcalc import load_preset; from tfcalc.verify.checker import check; "
                "t = time.perf_counter(); r = check(load_preset('deepseek-v3'), fold=False); "
                "sys.exit(0 if r.match else 1)")
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-c", code])
        _, status, usage = os.wait4(process.pid, 0)
        print(f"unfolded check of deepseek-v3 (API, fold=False)   {time.perf_counter() - start:6.1f} s  peak "
              f"{usage.ru_maxrss * 1024 / 2**30:5.2f} GiB  exit {os.waitstatus_to_exitcode(status)}")
    print(f"target (each <= {LIMIT_S:.0f} s and <= 4 GB, exit 0): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
