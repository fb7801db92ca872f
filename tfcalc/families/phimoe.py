"""Phi-3.5-MoE (phimoe, PhimoeForCausalLM): Mixtral's layout with LayerNorms (weight and bias; pre-norm, a final
LayerNorm), biases on q, k, v and o by attention_bias, num_local_experts SwiGLU experts of intermediate_size without
biases (gate and up fused in gate_up_proj [E, 2F, D]), a router `mlp.router` [E, D] without bias, an LM head with a
bias [V] by lm_head_bias, and a sliding_window, when set, in every block (PhimoeModel builds a sliding mask whenever
it is). Its sparsemixer router sends every token to exactly 2 experts, whatever num_experts_per_tok says: a config
saying another number is refused by name. The router's jitter (router_jitter_noise, input_jitter_noise) changes which
experts, in training, not how many; rope scaling changes frequencies only.
"""

from __future__ import annotations

from ..hf import DECODER_TYPES, refuse_if
from .llama import DECODER_COMPONENTS, mixtral
from .registry import Family, register

PHIMOE_COMPONENTS = [
    (r"model\.layers\.\d+\.input_layernorm", "attention/norm"),
    (r"model\.layers\.\d+\.post_attention_layernorm", "mlp/norm"),
    (r"model\.layers\.\d+\.mlp\.router", "moe/router"),
    *DECODER_COMPONENTS,
]

# PhimoeConfig's defaults (transformers 5). It declares no head_dim; PhimoeAttention reads one when a config gives it
# (an integer: null fails there), else hidden_size // num_attention_heads. num_key_value_heads is declared int
# (strict): null is refused, as there
PHIMOE_DEFAULTS = {
    "vocab_size": 32064, "hidden_size": 4096, "intermediate_size": 6400, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu", "max_position_embeddings": 4096 * 32,
    "tie_word_embeddings": False, "sliding_window": None, "num_experts_per_tok": 2, "num_local_experts": 16,
    "attention_bias": False, "lm_head_bias": False}
PHIMOE_TYPES = DECODER_TYPES | {
    "num_key_value_heads": "size", "head_dim": "size", "sliding_window": "int?", "num_experts_per_tok": "size",
    "num_local_experts": "int", "attention_bias": "bool", "lm_head_bias": "bool"}


def phimoe(cfg: dict, notes: list[str]) -> dict:
    refuse_if(cfg, "num_experts_per_tok", cfg["num_experts_per_tok"] != 2,
              "transformers' sparsemixer router sends every token to exactly 2 experts whatever it says, so its "
              "FLOPs are of 2 experts per token")
    refuse_if(cfg, "lm_head_bias", cfg["lm_head_bias"] is True and cfg["tie_word_embeddings"] is True,
              "with tie_word_embeddings=true transformers ties lm_head's weight to the token table and keeps its "
              "bias [V]; tfcalc's head bias is for an untied head")
    fields = mixtral(cfg, notes)
    # without head_dim the heads are hidden_size // num_attention_heads wide, divisible or not
    refuse_if(cfg, "hidden_size", cfg.get("head_dim") is None and cfg["hidden_size"] < cfg["num_attention_heads"],
              f"fewer channels than num_attention_heads={cfg['num_attention_heads']}: without head_dim the heads "
              "are hidden_size // num_attention_heads = 0 wide")
    fields.setdefault("d_head", cfg["hidden_size"] // cfg["num_attention_heads"])
    fields |= {"norm": "layernorm", "bias": cfg["attention_bias"], "mlp_bias": False, "head_bias": cfg["lm_head_bias"]}
    return fields


register(Family("phimoe", PHIMOE_DEFAULTS, PHIMOE_TYPES, phimoe, PHIMOE_COMPONENTS))
