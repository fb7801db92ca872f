"""GraniteMoE (IBM Granite 3.0 MoE): Granite's attention (q, k, v, o with attention_bias) and a mixture of experts in
every block: a router (GraniteMoeTopKRouter: weight [num_local_experts, hidden_size], no bias) and stacked experts
(gate_up_proj [E, 2 * intermediate_size, hidden_size], down_proj [E, hidden_size, intermediate_size]: a gated MLP
each, no bias). No shared experts, no dense blocks.

Its embedding_multiplier, residual_multiplier, attention_multiplier (the attention's scale) and logits_scaling scale
activations elementwise: no parameters, no matmul, not read.
"""

from __future__ import annotations

from ..hf import DECODER_TYPES, decoder_fields, refuse_if
from .registry import Family, register

DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                tie_word_embeddings=False, attention_bias=False, num_local_experts=8, num_experts_per_tok=2)
# GraniteMoeConfig declares num_local_experts and num_experts_per_tok int | None; the model cannot be built with null
TYPES = DECODER_TYPES | dict(attention_bias="bool", num_local_experts="int", num_experts_per_tok="size")

_LAYER = r"model\.layers\.\d+\."
COMPONENTS = [
    (r"model\.embed_tokens", "embedding/token"),
    (_LAYER + r"input_layernorm", "attention/norm"),
    (_LAYER + r"self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (_LAYER + r"self_attn", "attention/core"),
    (_LAYER + r"self_attn\.o_proj", "attention/out"),
    (_LAYER + r"post_attention_layernorm", "mlp/norm"),
    (_LAYER + r"block_sparse_moe\.router", "moe/router"),
    (_LAYER + r"block_sparse_moe\.experts", "moe/experts"),
    (r"model\.norm", "final_norm"),
    (r"lm_head", "head"),
]


def granitemoe(cfg: dict, notes: list[str]) -> dict:
    experts = cfg["num_local_experts"]
    refuse_if(cfg, "num_local_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers "
              "builds a router even for 1 expert, which a dense MLP has not")
    fields = decoder_fields(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False, n_experts=experts,
                                               top_k=cfg["num_experts_per_tok"])
    notes.append("embedding, residual and attention multipliers and logits_scaling: elementwise scales, no "
                 "parameters, not counted")
    return fields


register(Family("granitemoe", DEFAULTS, TYPES, granitemoe, COMPONENTS))
