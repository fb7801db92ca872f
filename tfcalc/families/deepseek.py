"""DeepSeek-V2 and DeepSeek-V3 (`deepseek_v2`, `deepseek_v3`): multi-head latent attention (MLA) and a mixture of
experts with shared experts, as transformers' DeepseekV2/V3 classes build them.

Attention (DeepseekV2Attention, DeepseekV3Attention): q_a_proj [q_lora_rank, hidden] (bias by attention_bias),
q_a_layernorm (RMSNorm [q_lora_rank]), q_b_proj [H * (qk_nope + qk_rope), q_lora_rank] (no bias), or with
q_lora_rank null one q_proj [H * (qk_nope + qk_rope), hidden] (no bias); kv_a_proj_with_mqa [kv_lora_rank +
qk_rope, hidden] (bias by attention_bias), kv_a_layernorm (RMSNorm [kv_lora_rank]), kv_b_proj [H * (qk_nope +
v_head_dim), kv_lora_rank] (no bias); o_proj [hidden, H * v_head_dim] (bias by attention_bias). ModelSpec's MLA
fields (kv_lora_rank, q_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim).

MLP: blocks from first_k_dense_replace on are MoE (a router weight [n_routed_experts, hidden], no bias; stacked
experts of moe_intermediate_size; one shared MLP of width moe_intermediate_size * n_shared_experts, which has the
parameters and FLOPs of n_shared_experts experts of moe_intermediate_size: read as one shared expert of that width,
as transformers builds it); the first first_k_dense_replace blocks a dense MLP of intermediate_size.

Routing changes which experts a token goes to, never how many (num_experts_per_tok) nor any shape: V3's sigmoid
scores, e_score_correction_bias (a buffer in transformers, not a parameter: not in sum(numel)), n_group/topk_group
(group-limited choice), norm_topk_prob and routed_scaling_factor (an elementwise scale); V2's topk_method (greedy or
group_limited_greedy). They are checked where transformers' router needs them to run (n_group dividing
n_routed_experts), otherwise not read. DeepSeek-V3's multi-token-prediction module (num_nextn_predict_layers, 14B
on the hub) is not in transformers' DeepseekV3ForCausalLM: not counted.

DeepSeek-V3.2 (`deepseek_v32`, DeepseekV32ForCausalLM): V3's blocks, q_lora_rank required (its attention has no plain
q_proj), and in every attention a sparse-attention indexer (DeepseekV32Indexer): wq_b [index_n_heads *
index_head_dim, q_lora_rank], wk [index_head_dim, hidden], k_norm (a LayerNorm [index_head_dim], weight and bias),
weights_proj [index_n_heads, hidden], no biases; ModelSpec's index_n_heads, index_head_dim. Its scores cover every
(query, key) pair; index_topk keys per query are kept and transformers' eager attention masks the others (it
computes every pair: counted as it runs, docs/formulas.md gives the sparse figure). mlp_layer_types ("dense" or
"sparse" per block; by default first_k_dense_replace dense, then sparse) is read where its dense blocks come first.
"""

from __future__ import annotations

from ..hf import DECODER_TYPES, decoder_fields, refuse_if, show
from .registry import Family, register

_COMMON_DEFAULTS = dict(hidden_act="silu", tie_word_embeddings=False, attention_bias=False, kv_lora_rank=512,
                        q_lora_rank=1536, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
V2_DEFAULTS = _COMMON_DEFAULTS | dict(
    vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=None, max_position_embeddings=2048, mlp_bias=False, first_k_dense_replace=0,
    n_group=None, n_routed_experts=64, n_shared_experts=2, topk_group=None, topk_method="greedy",
    num_experts_per_tok=None, moe_intermediate_size=1407)
V3_DEFAULTS = _COMMON_DEFAULTS | dict(
    vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, num_hidden_layers=61,
    num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256, n_group=8,
    topk_group=4, num_experts_per_tok=8, first_k_dense_replace=3, max_position_embeddings=4096)

_COMMON_TYPES = DECODER_TYPES | dict(
    attention_bias="bool", kv_lora_rank="size", q_lora_rank="size?", qk_rope_head_dim="size",
    qk_nope_head_dim="size", n_routed_experts="int", n_shared_experts="count",
    moe_intermediate_size="size", num_experts_per_tok="size?", n_group="int?",
    topk_group="int?", norm_topk_prob="bool?", moe_layer_freq="int", num_experts="int", num_local_experts="int")
# the kinds transformers declares: V3's first_k_dense_replace and v_head_dim may be null there (its model cannot be
# built with null: refused by value)
V2_TYPES = _COMMON_TYPES | dict(mlp_bias="bool", topk_method="str?", first_k_dense_replace="count", v_head_dim="size")
V3_TYPES = _COMMON_TYPES | dict(first_k_dense_replace="int?", v_head_dim="size?", rope_interleave="bool?",
                                num_nextn_predict_layers="count", num_mtp_layers="count")

# DeepseekV32Config's class attributes for the fields it adds or changes (its head_dim is set to qk_rope_head_dim)
V32_DEFAULTS = V3_DEFAULTS | dict(n_group=8, topk_group=4, max_position_embeddings=163840, index_topk=2048,
                                  index_head_dim=128, index_n_heads=64, mlp_layer_types=None, mlp_bias=False)
V32_TYPES = {k: v for k, v in V3_TYPES.items() if k not in ("num_mtp_layers",)} | dict(
    q_lora_rank="size", num_key_value_heads="size", head_dim="size", v_head_dim="size", first_k_dense_replace="int",
    num_experts_per_tok="size", n_group="int", topk_group="int", norm_topk_prob="bool", index_topk="size",
    index_head_dim="size", index_n_heads="size",
    mlp_layer_types="strings?", mlp_bias="bool", layer_types="strings?")

_LAYER = r"model\.layers\.\d+\."
COMPONENTS = [
    (r"model\.embed_tokens", "embedding/token"),
    (_LAYER + r"input_layernorm", "attention/norm"),
    (_LAYER + r"self_attn\.q_a_proj", "attention/q_a"),
    (_LAYER + r"self_attn\.q_a_layernorm", "attention/q_a_norm"),
    (_LAYER + r"self_attn\.q_b_proj", "attention/q_b"),
    (_LAYER + r"self_attn\.q_proj", "attention/q"),
    (_LAYER + r"self_attn\.kv_a_proj_with_mqa", "attention/kv_a"),
    (_LAYER + r"self_attn\.kv_a_layernorm", "attention/kv_a_norm"),
    (_LAYER + r"self_attn\.kv_b_proj", "attention/kv_b"),
    (_LAYER + r"self_attn", "attention/core"),
    (_LAYER + r"self_attn\.o_proj", "attention/out"),
    (_LAYER + r"post_attention_layernorm", "mlp/norm"),
    (_LAYER + r"mlp\.gate_proj", "mlp/gate"),
    (_LAYER + r"mlp\.up_proj", "mlp/up"),
    (_LAYER + r"mlp\.down_proj", "mlp/down"),
    (_LAYER + r"mlp\.gate", "moe/router"),
    (_LAYER + r"mlp\.experts", "moe/experts"),
    (_LAYER + r"mlp\.shared_experts\.(gate_proj|up_proj|down_proj)", "moe/shared_experts"),
    (r"model\.norm", "final_norm"),
    (r"lm_head", "head"),
]
V32_COMPONENTS = [*COMPONENTS,
                  (_LAYER + r"self_attn\.indexer\.wq_b", "attention/indexer_q"),
                  (_LAYER + r"self_attn\.indexer\.wk", "attention/indexer_k"),
                  (_LAYER + r"self_attn\.indexer\.k_norm", "attention/indexer_k_norm"),
                  (_LAYER + r"self_attn\.indexer\.weights_proj", "attention/indexer_weights"),
                  # its own FLOPs: the scores, relu(q k^T) weighted over the heads
                  (_LAYER + r"self_attn\.indexer", "attention/indexer_scores")]


def _deepseek(cfg: dict, notes: list[str], version: int) -> dict:
    heads = cfg["num_attention_heads"]
    kv_heads = cfg["num_key_value_heads"]
    refuse_if(cfg, "num_key_value_heads", kv_heads is not None and kv_heads != heads,
              f"multi-head latent attention expands a key and a value for each of num_attention_heads={heads} "
              "heads; transformers would repeat them num_attention_heads / num_key_value_heads times and fail")
    refuse_if(cfg, "moe_layer_freq", cfg.get("moe_layer_freq", 1) != 1,
              "transformers ignores it (every block from first_k_dense_replace on is MoE), DeepSeek's own code "
              "makes only every moe_layer_freq-th block MoE: the two differ")
    experts = cfg["n_routed_experts"]
    refuse_if(cfg, "n_routed_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers "
              "builds a router even for 1 expert, which a dense MLP has not")
    top_k = cfg["num_experts_per_tok"]
    refuse_if(cfg, "num_experts_per_tok", top_k is None, "transformers' router needs a number of experts per token")
    refuse_if(cfg, "v_head_dim", cfg["v_head_dim"] is None, "transformers' attention needs a value head width")
    dense = cfg["first_k_dense_replace"]
    refuse_if(cfg, "first_k_dense_replace", dense is None or dense < 0,
              "expected the number of dense blocks before the MoE blocks (an integer >= 0)")
    groups, topk_group = cfg["n_group"], cfg["topk_group"]
    grouped = version == 3 or cfg["topk_method"] == "group_limited_greedy"
    if version == 2:
        method = cfg["topk_method"]
        refuse_if(cfg, "topk_method", method not in ("greedy", "group_limited_greedy"),
                  "transformers' DeepseekV2 router knows greedy and group_limited_greedy")
        refuse_if(cfg, "mlp_bias", cfg["mlp_bias"] is True,
                  "transformers then biases the dense and shared MLPs but not the routed experts; tfcalc's "
                  "mlp_bias is one switch for all of them")
        refuse_if(cfg, "hidden_size", cfg["hidden_size"] % heads != 0,
                  f"transformers' DeepseekV2Config refuses a hidden_size not divisible by num_attention_heads={heads}")
    if grouped:  # the router views the scores as [tokens, n_group, n_routed_experts / n_group]
        refuse_if(cfg, "n_group", not isinstance(groups, int) or groups < 1 or experts % groups != 0,
                  f"the group-limited router needs n_group dividing n_routed_experts={experts}")
        per_group = experts // groups
        refuse_if(cfg, "n_group", version == 3 and per_group < 2,
                  "DeepSeek-V3's router scores each group by its top 2 experts: at least 2 experts per group")
        refuse_if(cfg, "topk_group", not isinstance(topk_group, int) or not 1 <= topk_group <= groups,
                  f"the group-limited router keeps topk_group of the n_group={groups} groups")
        refuse_if(cfg, "num_experts_per_tok", top_k > topk_group * per_group,
                  f"more than the topk_group * n_routed_experts / n_group = {topk_group * per_group} experts the "
                  "kept groups hold")
    refuse_if(cfg, "attention_bias", cfg["attention_bias"] is True and cfg["q_lora_rank"] is None,
              "with q_lora_rank null transformers' q_proj has no bias while kv_a_proj_with_mqa and o_proj have one; "
              "tfcalc's qkv_bias is one switch for q and kv_a")
    fields = decoder_fields({k: v for k, v in cfg.items() if k != "head_dim"}, notes)
    fields.pop("n_kv_heads")
    L = fields["n_layers"]
    shared = cfg["n_shared_experts"]
    width = cfg["moe_intermediate_size"]
    fields |= dict(bias=cfg["attention_bias"], qkv_bias=cfg["attention_bias"], mlp_bias=False,
                   kv_lora_rank=cfg["kv_lora_rank"], q_lora_rank=cfg["q_lora_rank"],
                   qk_nope_dim=cfg["qk_nope_head_dim"], qk_rope_dim=cfg["qk_rope_head_dim"],
                   v_head_dim=cfg["v_head_dim"], n_experts=experts, top_k=top_k, d_expert=width,
                   first_dense_layers=min(dense, L))
    if shared:
        fields |= dict(n_shared_experts=1, d_shared_expert=width * shared)
        if shared > 1:
            notes.append(f"n_shared_experts={shared}: one shared MLP of width moe_intermediate_size * "
                         f"n_shared_experts = {width * shared}, as transformers builds it (the parameters and FLOPs "
                         f"of {shared} experts of width {width})")
    else:
        notes.append("n_shared_experts=0: transformers builds a shared MLP of width 0 (no parameters, no FLOPs): "
                     "none counted")
    if dense >= L:
        notes.append(f"first_k_dense_replace={dense} >= num_hidden_layers={L}: every block is dense")
    notes.append("routing (n_group, topk_group, norm_topk_prob, routed_scaling_factor"
                 + (", V3's sigmoid scores and e_score_correction_bias, a buffer" if version == 3 else ", topk_method")
                 + ") picks which experts, not how many: no parameters, no shapes")
    mtp = cfg.get("num_nextn_predict_layers", cfg.get("num_mtp_layers"))
    if version == 3 and mtp:
        notes.append(f"num_nextn_predict_layers={show(mtp)}: the multi-token-prediction module is not in "
                     "transformers' DeepseekV3ForCausalLM: not counted")
    return fields


def deepseek_v2(cfg: dict, notes: list[str]) -> dict:
    return _deepseek(cfg, notes, 2)


def deepseek_v3(cfg: dict, notes: list[str]) -> dict:
    return _deepseek(cfg, notes, 3)


def deepseek_v32(cfg: dict, notes: list[str]) -> dict:
    L = cfg["num_hidden_layers"]
    types = cfg["mlp_layer_types"]
    if types is not None:  # over first_k_dense_replace, as DeepseekV32Config reads it
        refuse_if(cfg, "mlp_layer_types", len(types) != L or set(types) - {"dense", "sparse"},
                  f"expected num_hidden_layers={L} entries, each 'dense' or 'sparse'")
        dense = types.count("dense")
        refuse_if(cfg, "mlp_layer_types", types != ["dense"] * dense + ["sparse"] * (L - dense),
                  "tfcalc models the dense blocks first, then the MoE blocks (first_dense_layers)")
        if dense != cfg["first_k_dense_replace"]:
            notes.append(f"first_k_dense_replace={cfg['first_k_dense_replace']} not read: mlp_layer_types gives "
                         f"{dense} dense blocks")
        cfg = {**cfg, "first_k_dense_replace": dense}
    layer_types = cfg.get("layer_types")
    refuse_if(cfg, "layer_types", layer_types is not None and set(layer_types) - {"indexed_attention"},
              "every DeepSeek-V3.2 block is indexed_attention")
    if cfg["mlp_bias"] is True:
        notes.append("mlp_bias=True not read: DeepseekV32MLP and its experts have no biases whatever it says")
    rope, d = cfg["qk_rope_head_dim"], cfg["index_head_dim"]
    refuse_if(cfg, "index_head_dim", d < rope, f"the indexer turns the first qk_rope_head_dim={rope} channels of each "
              "of its heads by rotary: give at least that many")
    fields = _deepseek(cfg, notes, 3)
    notes.append(f"index_topk={cfg['index_topk']}: transformers' eager attention scores every (query, key) pair and "
                 "masks the keys the indexer leaves out; counted as it runs (docs/formulas.md: the sparse figure)")
    return fields | dict(index_n_heads=cfg["index_n_heads"], index_head_dim=d, index_topk=cfg["index_topk"])


# the config classes' attribute_map: DeepseekV2Config names n_routed_experts num_experts, V3 num_local_experts
register(Family("deepseek_v2", V2_DEFAULTS, V2_TYPES, deepseek_v2, COMPONENTS,
                aliases={"num_experts": "n_routed_experts"}),
         Family("deepseek_v3", V3_DEFAULTS, V3_TYPES, deepseek_v3, COMPONENTS,
                aliases={"num_local_experts": "n_routed_experts"}),
         # V3.2's attribute_map, and num_experts, which its __post_init__ reads over n_routed_experts
         Family("deepseek_v32", V32_DEFAULTS, V32_TYPES, deepseek_v32, V32_COMPONENTS,
                aliases={"num_local_experts": "n_routed_experts", "num_experts": "n_routed_experts"}))
