"""Time and peak RSS of measuring a full-depth llama2-7b train step (seq 4096) under FakeTensorMode with
MemTracker: `tfcalc.verify.memory.measure_training_memory(..., device="fake")`. The floor: 120 s and 4 GB.

    python benchmarks/memtracker_scale.py [--json]

Exits 1 when either figure is over its floor."""

from __future__ import annotations

import json
import resource
import sys
import time

FLOOR_SECONDS = 120.0
FLOOR_RSS_BYTES = 4 * 10**9


def main() -> int:
    started = time.perf_counter()
    from tfcalc import load_preset
    from tfcalc.arch import Workload
    from tfcalc.verify.memory import measure_training_memory

    imported = time.perf_counter() - started
    spec = load_preset("llama2-7b").replace(seq_len=4096)
    # eager attention, as the published figures were measured (docs/benchmarks.md)
    m = measure_training_memory(spec, Workload(seq_len=4096), "bf16-mixed", "adamw", "none", "fake", "eager")
    seconds = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    figures = {"seconds": round(seconds, 2), "import_seconds": round(imported, 2),
               "measure_seconds": round(m.seconds, 2), "max_rss_bytes": rss,
               "floor_seconds": FLOOR_SECONDS, "floor_rss_bytes": FLOOR_RSS_BYTES, "measured": m.to_dict()}
    if "--json" in sys.argv[1:]:
        print(json.dumps(figures, indent=2))
    else:
        print(f"llama2-7b, seq 4096, bf16-mixed AdamW, no recomputation, eager attention, fake: {seconds:.1f} s "
              f"(import {imported:.1f} s), peak RSS {rss / 1e9:.2f} GB")
        for name in ("parameters", "gradients", "optimizer_states", "master_weights", "activations_peak",
                     "activations_end_of_forward", "temporaries_peak", "optimizer_peak", "peak_total"):
            print(f"  {name:28s} {getattr(m, name):>16,d} B")
        print(f"  {'saved for backward':28s} {m.saved_bytes:>16,d} B ({len(m.saved)} storages)")
        print(f"  peak at {m.peak_at}")
    over = [f"{seconds:.1f} s > {FLOOR_SECONDS:.0f} s"] if seconds > FLOOR_SECONDS else []
    if rss > FLOOR_RSS_BYTES:
        over.append(f"RSS {rss / 1e9:.2f} GB > {FLOOR_RSS_BYTES / 1e9:.0f} GB")
    if over:
        print("over the floor: " + "; ".join(over), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
