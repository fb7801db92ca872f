"""Tanh gates on a block's attention and MLP outputs (`layer_gates`; Llama 3.2 Vision's global encoder layers,
MllamaVisionEncoderLayer with is_gated: gate_attn and gate_ffn): x + tanh(g_a) * attn(norm(x)), then
x + tanh(g_m) * mlp(norm(x)). Two scalar parameters [1] and their multiplies over [T, D] each (no matmul), named in a
block_pattern after the sublayers they scale ("attention+mlp+layer_gates"); the attention and MLP references apply
them.
"""

from __future__ import annotations

from ...arch.builders import BlockKind, Ctx, register
from ...arch.ops import Elementwise, Op, Table
from ..cross_attention import GATE_FLOPS


def layer_gates(ctx: Ctx) -> list[Op]:
    t, D = ctx.t, ctx.spec.d_model
    ops: list[Op] = []
    for gated in ("attention", "mlp"):  # tanh(g) * out: [T, D]; the multiply keeps its [T, D] operand
        ops += [Table(ctx.name(f"layer_gates/{gated}"), 1, 1, "gate"),
                Elementwise(ctx.name(f"layer_gates/{gated}"), "scalar_gate", t * D, GATE_FLOPS, kept=t * D)]
    return ops


register(BlockKind("layer_gates", layer_gates, in_pattern=True, reference=f"{__name__}.reference",
                   components=((r"layer_gates\.(attention|mlp)", r"layer_gates/\1"),)))
