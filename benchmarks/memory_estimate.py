"""profile's memory estimate against the measured peak of CPU steps, for several models, dtypes and modes.

    python benchmarks/memory_estimate.py

Each run is a process of its own (`tfcalc.profile.profile` on the CPU, the tuned allocator on, as by default)
and reports the growth of its peak RSS against `step_bytes` (what profile holds against the memory budget: the
estimate, the peak GEMMs' buffers and the tuned heap's retention). Target (the reliability issue): the estimate
covers the measured peak for every dtype and mode, so that a step the check lets through does not run out of
memory. Needs about 10 GB free; takes a few minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys

RUNS = [
    ("gpt2", 2, 256, "fp32", "train"), ("gpt2", 2, 256, "bf16", "train"), ("gpt2", 2, 256, "bf16", "forward"),
    ("gpt2", 12, 512, "bf16", "train"), ("llama2-7b", 2, 256, "bf16", "train"), ("llama2-7b", 2, 256, "fp32", "forward"),
    ("mixtral-8x7b", 1, 128, "bf16", "train"), ("bert-base", 4, 512, "fp32", "train"),
]
ONE = """
import json, sys
from tfcalc import load_preset
from tfcalc.profile import profile
from tfcalc.profile.memory import step_bytes
from tfcalc.profile.peak import gemm_bytes
from tfcalc.profile.runner import matmul_shapes
name, L, N, dtype, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
spec = load_preset(name).replace(n_layers=L, seq_len=N, batch_size=2)
size = {"fp32": 4, "bf16": 2}[dtype]
r = profile(spec, device="cpu", dtype=dtype, mode=mode, warmup=1, repeat=1)
print(json.dumps([r.peak_memory_bytes, step_bytes(spec, size, mode, gemm_bytes(matmul_shapes(spec), size), True)]))
"""


def main() -> int:
    ok = True
    for name, L, N, dtype, mode in RUNS:
        out = subprocess.run([sys.executable, "-c", ONE, name, str(L), str(N), dtype, mode], capture_output=True,
                             text=True, check=True).stdout
        measured, need = json.loads(out.strip().splitlines()[-1])
        ok &= measured <= need
        print(f"{name:13s} L={L:<3d} N={N:<4d} B=2 {dtype} {mode:8s} measured {measured / 2**30:5.2f} GiB  "
              f"held to {need / 2**30:5.2f} GiB  ratio {measured / need:.2f}")
    print(f"target (measured <= estimate in every run): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
