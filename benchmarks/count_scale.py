"""Time of one `tfcalc.count` call as the number of layers grows, for a model with three distinct layer kinds.

    python benchmarks/count_scale.py [--calls 2000]

Target (issue 9): at most 1 ms a call on a 126-layer model with three distinct layer kinds, and a cost that does
not grow with the number of layers (12 vs 126 vs 1,260). The model: the first 3 blocks dense (DeepSeek's
first_k_dense_replace), the rest MoE, attention local, local, global (4,096-token window) over all of them: four
distinct kinds (dense or MoE, local or global), one more than the target asks; they are printed with their
repeat counts. Each figure is the median of 5 rounds of `--calls` calls, measured in one run (this VM's speed
drifts; compare numbers from one run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from tfcalc import ModelSpec, build, count

BASE = ModelSpec(name="mixed", n_layers=126, d_model=8192, n_heads=64, n_kv_heads=8, d_ff=28672,
                 vocab_size=128256, seq_len=8192, mlp="gated", activation="silu", norm="rmsnorm", bias=False,
                 positions="rotary", tie_embeddings=False, n_experts=64, top_k=8, d_expert=2048,
                 n_shared_experts=1, first_dense_layers=3, sliding_window=4096,
                 attention_pattern=["local", "local", "global"])
LIMIT_S = 1e-3


def per_call(spec: ModelSpec, calls: int) -> float:
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            count(spec)
        rounds.append((time.perf_counter() - start) / calls)
    return statistics.median(rounds)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    results = {}
    for L in (12, 126, 1260):
        spec = BASE.replace(n_layers=L)
        kinds = [g for g in build(spec).groups if "block" in g.label]
        results[L] = per_call(spec, args.calls)
        print(f"L={L:5d}  distinct layers {len(kinds)}  "
              f"({', '.join(f'{g.repeat} x {g.label}' for g in kinds)})  {results[L] * 1e6:7.1f} us per call")
    ok = results[126] <= LIMIT_S and results[1260] <= 1.5 * results[12]
    print(f"126 layers / 12 layers: {results[126] / results[12]:.2f}; 1,260 / 12: {results[1260] / results[12]:.2f}")
    print(f"target (<= 1 ms a call at 126 layers; flat in L): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
