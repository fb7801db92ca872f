"""Whole-process time of `tfcalc count --preset gpt3` against `python -c "import torch"`, in one run.

    python benchmarks/startup.py [--repeat 15]

Each command runs `--repeat` times, interleaved so that machine noise hits both alike; the medians are
compared. Target (issue 2, raised by issue 9): count at most 0.5 s, and at least 6x faster than importing torch.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    tfcalc = shutil.which("tfcalc")
    count_cmd = [tfcalc, "count", "--preset", "gpt3"] if tfcalc else [sys.executable, "-m", "tfcalc", "count",
                                                                       "--preset", "gpt3"]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "tfcalc count --preset gpt3": count_cmd,
        "tfcalc count --preset gpt3 --json": count_cmd + ["--json"],
        'python -c "import torch"': [sys.executable, "-c", "import torch"],
    }
    for cmd in commands.values():  # warm the file cache
        timed(cmd)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            times[name].append(timed(cmd))
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:36s} median {medians[name]:.3f} s  min {min(t):.3f} s  max {max(t):.3f} s")
    count_s, torch_s = medians["tfcalc count --preset gpt3"], medians['python -c "import torch"']
    ratio = torch_s / count_s
    print(f"import torch / count = {ratio:.1f}x")
    ok = count_s <= 0.5 and ratio >= 6
    print(f"target (count <= 0.5 s and >= 6x faster than import torch): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
