"""Block kinds, one module each: its builder (op records from the spec, the workload, the stack and the layer), the
names its reference modules carry (`check` maps counters onto components with them) and its reference torch module
(`<kind>/reference.py`, imported only when a model is built: counting never imports torch). Each registers itself
in `tfcalc.arch.builders.KINDS`; the inventory and the reference model compose a block by looping over
`tfcalc.arch.Layer.kinds`. docs/architecture.md tells how a kind is added.

- `embedding`, `head`: the model's frame (each stack's embedding and final norm, the pooler and the head).
- `attention` (with multi-head latent attention), `cross_attention`, `mlp`, `moe` (and the experts beside a dense
  MLP), `per_layer` (Gemma 4's per-layer input): the sublayers of a block.
"""

from . import attention, cross_attention, embedding, head, mlp, moe, per_layer  # noqa: F401  (each registers)
