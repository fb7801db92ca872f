"""GLM-4.5 / GLM-4.6 (glm4_moe, Glm4MoeForCausalLM): pre-norm RMSNorm (no sandwich norms, unlike glm4), GQA
attention (q/k/v biases by attention_bias, o_proj without; an RMSNorm [head_dim] on each query and key head with
use_qk_norm), GLM-4's partial rotary (tfcalc.families.glm4.glm_rotary), and DeepSeek-V3's mixture: the first
first_k_dense_replace blocks a SwiGLU MLP of intermediate_size, the others n_routed_experts SwiGLU experts of
moe_intermediate_size (gate and up fused in gate_up_proj [E, 2F, D]), num_experts_per_tok per token, a router
weight [E, D] without bias (its e_score_correction_bias is a buffer, not a parameter) and one shared MLP of width
moe_intermediate_size * n_shared_experts. Routing (sigmoid scores, n_group, topk_group, norm_topk_prob,
routed_scaling_factor) picks which experts, not how many: checked where the router needs it to run, else not read.
The multi-token-prediction layers (num_nextn_predict_layers, num_mtp_layers) are not in transformers'
Glm4MoeForCausalLM: not read, not counted.
"""

from __future__ import annotations

from ..hf import DECODER_TYPES, decoder_fields, refuse_if
from .glm4 import glm_rotary
from .llama import LLAMA_COMPONENTS
from .registry import Family, register

GLM4_MOE_COMPONENTS = [
    *LLAMA_COMPONENTS,
    (r"model\.layers\.\d+\.mlp\.shared_experts\.(gate_proj|up_proj|down_proj)", "moe/shared_experts"),
]

# Glm4MoeConfig's defaults (transformers 5). It declares no head_dim; Glm4MoeAttention reads one when a config gives
# it (an integer: null fails there), else hidden_size // num_attention_heads
GLM4_MOE_DEFAULTS = {
    "vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
    "num_attention_heads": 96, "num_key_value_heads": 8, "hidden_act": "silu", "max_position_embeddings": 131072,
    "tie_word_embeddings": False, "attention_bias": False, "moe_intermediate_size": 1408, "num_experts_per_tok": 8,
    "n_shared_experts": 1, "n_routed_experts": 128, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
    "norm_topk_prob": True, "use_qk_norm": False}
GLM4_MOE_TYPES = DECODER_TYPES | {
    "num_key_value_heads": "size", "head_dim": "size", "attention_bias": "bool", "partial_rotary_factor": "float?",
    "moe_intermediate_size": "size", "num_experts_per_tok": "size", "n_shared_experts": "count",
    "n_routed_experts": "int", "n_group": "int", "topk_group": "int", "first_k_dense_replace": "count",
    "norm_topk_prob": "bool", "use_qk_norm": "bool"}


def glm4_moe(cfg: dict, notes: list[str]) -> dict:
    experts, top_k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    refuse_if(cfg, "n_routed_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers "
              "builds a router even for 1 expert, which a dense MLP has not")
    groups, topk_group = cfg["n_group"], cfg["topk_group"]
    # the router views the scores as [tokens, n_group, n_routed_experts / n_group] and scores each group by its top 2
    refuse_if(cfg, "n_group", groups < 1 or experts % groups != 0,
              f"the group-limited router needs n_group dividing n_routed_experts={experts}")
    per_group = experts // groups
    refuse_if(cfg, "n_group", per_group < 2, "the router scores each group by its top 2 experts: at least 2 experts "
              "per group")
    refuse_if(cfg, "topk_group", not 1 <= topk_group <= groups,
              f"the group-limited router keeps topk_group of the n_group={groups} groups")
    refuse_if(cfg, "num_experts_per_tok", top_k > topk_group * per_group,
              f"more than the topk_group * n_routed_experts / n_group = {topk_group * per_group} experts the kept "
              "groups hold")
    fields = decoder_fields(cfg, notes)
    # without head_dim the heads are hidden_size // num_attention_heads wide, divisible or not (the class default's
    # 4,096 // 96 = 42)
    refuse_if(cfg, "hidden_size", cfg.get("head_dim") is None and cfg["hidden_size"] < cfg["num_attention_heads"],
              f"fewer channels than num_attention_heads={cfg['num_attention_heads']}: without head_dim the heads "
              "are hidden_size // num_attention_heads = 0 wide")
    fields.setdefault("d_head", cfg["hidden_size"] // cfg["num_attention_heads"])
    L = fields["n_layers"]
    dense, shared, width = cfg["first_k_dense_replace"], cfg["n_shared_experts"], cfg["moe_intermediate_size"]
    fields |= {"bias": False, "qkv_bias": cfg["attention_bias"], "mlp_bias": False,
               "qk_norm": "head" if cfg["use_qk_norm"] else "none", "n_experts": experts, "top_k": top_k,
               "d_expert": width, "first_dense_layers": min(dense, L)}
    if shared:
        fields |= {"n_shared_experts": 1, "d_shared_expert": width * shared}
        if shared > 1:
            notes.append(f"n_shared_experts={shared}: one shared MLP of width moe_intermediate_size * "
                         f"n_shared_experts = {width * shared}, as transformers builds it")
    else:
        notes.append("n_shared_experts=0: transformers builds a shared MLP of width 0 (no parameters, no FLOPs): "
                     "none counted")
    if dense >= L:
        notes.append(f"first_k_dense_replace={dense} >= num_hidden_layers={L}: every block is dense")
    notes.append("routing (sigmoid scores, e_score_correction_bias, a buffer; n_group, topk_group, norm_topk_prob, "
                 "routed_scaling_factor) picks which experts, not how many: no parameters, no shapes")
    glm_rotary(cfg, fields, notes)
    return fields


# Glm4MoeConfig's attribute_map: num_local_experts sets n_routed_experts
register(Family("glm4_moe", GLM4_MOE_DEFAULTS, GLM4_MOE_TYPES, glm4_moe, GLM4_MOE_COMPONENTS,
                aliases={"num_local_experts": "n_routed_experts"}))
