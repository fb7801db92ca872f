"""Whole-process time and peak memory of `tfcalc check` on the largest presets (meta device).

    python benchmarks/check_scale.py

Targets: `tfcalc check --preset gpt3-175b` and `--preset llama3-405b --seq-len 4096` each at most 60 s and 4 GB
peak resident memory (issue 3); the same for the largest encoder-decoder preset (t5-large) and for decode with a
KV cache (issue 9), and for DeepSeek-V3 (MLA, 256 experts in 58 MoE blocks) and Llama 3.1 405B (issue 10). A model
with more than tfcalc.verify.folding.FOLD_EXPERTS expert modules is checked with its repeated blocks folded;
`--no-fold` also times DeepSeek-V3's unfolded check (minutes: not part of the target).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

RUNS = [
    ["check", "--preset", "gpt3-175b"],
    ["check", "--preset", "llama3-405b", "--seq-len", "4096"],
    ["check", "--preset", "mixtral-8x22b"],
    ["check", "--preset", "gpt3-175b", "--train"],
    ["check", "--preset", "t5-large"],
    ["check", "--preset", "bart-large"],
    ["check", "--preset", "llama3-405b", "--phase", "decode", "--context", "131071"],
    ["check", "--preset", "deepseek-v3"],
    ["check", "--preset", "llama3.1-405b"],
]
LIMIT_S, LIMIT_BYTES = 60.0, 4 * 10**9


def measure(args: list[str]) -> tuple[float, int, int]:
    exe = shutil.which("tfcalc")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "tfcalc", *args]
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    return elapsed, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)  # ru_maxrss is in KiB on Linux


def main() -> int:
    ok = True
    for args in RUNS:
        seconds, peak, code = measure(args)
        within = seconds <= LIMIT_S and peak <= LIMIT_BYTES and code == 0
        ok &= within
        print(f"tfcalc {' '.join(args):50s} {seconds:6.1f} s  peak {peak / 2**30:5.2f} GiB  exit {code}  "
              f"{'ok' if within else 'OVER'}")
    if "--no-fold" in sys.argv[1:]:
        code = ("import sys; from tfcalc import load_preset; from tfcalc.verify.checker import check; "
                "sys.exit(0 if check(load_preset('deepseek-v3'), fold=False).match else 1)")
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-c", code])
        _, status, usage = os.wait4(process.pid, 0)
        print(f"unfolded check of deepseek-v3 (API, fold=False) {time.perf_counter() - start:6.1f} s  peak "
              f"{usage.ru_maxrss * 1024 / 2**30:5.2f} GiB  exit {os.waitstatus_to_exitcode(status)}")
    print(f"target (each <= {LIMIT_S:.0f} s and <= 4 GB, exit 0): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
