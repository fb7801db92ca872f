"""The parallel check at scale: Llama-3-8B (preset llama3-8b) under FSDP2 ZeRO-3 over 64 data-parallel GPUs, rank 0
and rank 63 measured on torch's fake process group in FakeTensorMode. Prints the wall time, the peak RSS of this
process and each rank's figures against the plan.

    PYTHONPATH=. python benchmarks/parallel_scale.py
"""

from __future__ import annotations

import resource
import time

from tfcalc import Workload, load_preset
from tfcalc.plan.training import Layout
from tfcalc.verify.memory_check import check_parallel_memory


def main() -> None:
    spec = load_preset("llama3-8b")
    workload = Workload(seq_len=spec.seq_len, batch_size=1, phase="train")
    started = time.perf_counter()
    report = check_parallel_memory(spec, workload, "bf16-mixed", "adamw", "none", "meta", Layout(dp=64, zero=3))
    seconds = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    for row in report.rows:
        print(f"{row.category:32} {row.analytic:>18,} {row.measured:>18,} {row.difference:>+16,} "
              f"{'ok' if row.match else 'MISMATCH'}")
    print(f"wall {seconds:.1f} s, max RSS {rss / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
