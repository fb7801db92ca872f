"""A 10,000-point sweep as a whole process, and the cost of one point as the model deepens (issue 13).

    python benchmarks/sweep_scale.py [--repeat 5] [--points 10000]

1. `tfcalc count -p llama2-7b --seq-len 1,2,...,10000 --format csv > /dev/null`, run `--repeat` times as a
   subprocess after one warm-up run: start-up, parsing the 10,000-value list, 10,000 counts and the tidy CSV.
   Target: the median at most 5 s.
2. The cost of one point in-process (what the command does per point: the spec with the point's values, the
   count, the tidy row), for llama2-7b with its 32 layers and with 3,200, over 2,000 sequence lengths each, the
   median of `--repeat` rounds; and at 32 layers over lengths near 10^6. Target: flat in L (3,200 layers at most
   1.5x the per-point cost of 32); the length is shown beside it.
Exit code 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import subprocess
import sys
import time


def whole_process(points: int, repeat: int) -> list[float]:
    tfcalc = shutil.which("tfcalc")
    base = [tfcalc] if tfcalc else [sys.executable, "-m", "tfcalc"]
    values = ",".join(str(n) for n in range(1, points + 1))
    cmd = [*base, "count", "-p", "llama2-7b", "--seq-len", values, "--format", "csv"]
    times = []
    for i in range(repeat + 1):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        if i:  # the first run warms the file cache
            times.append(time.perf_counter() - start)
    return times


def per_point(n_layers: int, points: int, first: int = 1) -> float:
    from tfcalc import load_preset
    from tfcalc.sweep import Model, count_points, count_row, expand

    model = Model(load_preset("llama2-7b"), "llama2-7b")
    lengths = list(range(first, first + points))
    start = time.perf_counter()
    rows = [count_row(p, r) for p, r in count_points(expand([model], {"n_layers": n_layers}, {"seq_len": lengths}))]
    elapsed = time.perf_counter() - start
    assert len(rows) == points and rows[-1]["spec.n_layers"] == n_layers
    return elapsed / points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--points", type=int, default=10_000)
    args = parser.parse_args()

    times = whole_process(args.points, args.repeat)
    median = statistics.median(times)
    print(f"tfcalc count -p llama2-7b --seq-len <{args.points:,} values> --format csv: median {median:.2f} s, "
          f"min {min(times):.2f} s, max {max(times):.2f} s ({args.repeat} runs)")
    gc.disable()  # as the CLI runs (tfcalc/__main__.py)
    cases = {"L = 32, N = 1 to 2,000": (32, 1), "L = 3,200, N = 1 to 2,000": (3200, 1),
             "L = 32, N = 1,000,000 to 1,001,999": (32, 1_000_000)}
    costs: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, (n_layers, first) in cases.items():
            costs[name].append(per_point(n_layers, 2000, first))
    medians = {name: statistics.median(c) for name, c in costs.items()}
    for name, c in medians.items():
        print(f"per point, llama2-7b, {name:34s} median {c * 1e6:5.0f} µs (min {min(costs[name]) * 1e6:.0f} µs)")
    small, large, long = medians.values()
    ratio = large / small
    print(f"L = 3,200 / L = 32: {ratio:.2f}; N near 10^6 / N up to 2,000: {long / small:.2f}")
    ok_time, ok_flat = median <= 5.0, ratio <= 1.5
    print(f"target (a {args.points:,}-point sweep <= 5 s as a whole process): {'met' if ok_time else 'NOT met'}")
    print(f"target (per-point cost flat in L: ratio <= 1.5): {'met' if ok_flat else 'NOT met'}")
    return 0 if ok_time and ok_flat else 1


if __name__ == "__main__":
    sys.exit(main())
