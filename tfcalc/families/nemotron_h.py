"""Nemotron-H (model_type nemotron_h): transformers' NemotronHForCausalLM, a hybrid whose every block is one mixer.

The blocks are layers_block_type (or, in older configs, hybrid_override_pattern, one character a block: M Mamba2,
* attention, - MLP, E MoE; transformers reads it only when layers_block_type is not given); the number of blocks is
that list's length (num_hidden_layers is ignored). Each block is pre-norm, an RMSNorm (`norm`) before its one mixer
and a residual add; a final RMSNorm (norm_f); the head is never tied (NemotronHForCausalLM's _tied_weights_keys is empty,
whatever tie_word_embeddings says).
  * M, linear_attention (NemotronHMamba2Mixer; tfcalc's `mamba2` kind): in_proj D -> 2 d_inner + 2 g n + h
    (use_bias), a depthwise causal Conv1d of conv_kernel taps (use_conv_bias), A_log, D, dt_bias [h], a gated RMSNorm
    over n_groups groups, out_proj (use_bias); d_inner = mamba_num_heads * mamba_head_dim (expand is not read by it);
  * *, full_attention (NemotronHAttention): q_proj, k_proj, v_proj (grouped-query, head_dim) and o_proj, no biases
    (attention_bias is not read) and no position encoding at all;
  * -, mlp (NemotronHMLP): down_proj(act(up_proj x)), mlp_hidden_act (relu2 by default), mlp_bias;
  * E, moe (NemotronHMoE; tfcalc's `moe` kind): a router weight [n_routed_experts, D] (fp32, no bias; its
    e_score_correction_bias is a buffer, not a parameter), n_routed_experts experts without gate, each
    down_proj(act(up_proj x)) of moe_intermediate_size with mlp_hidden_act and no bias, num_experts_per_tok of them
    per token; with moe_latent_size set, the experts read and write that width: fc1_latent_proj D -> latent before
    them, fc2_latent_proj latent -> D after (mlp_bias); one shared MLP (NemotronHMLP, mlp_bias) of
    moe_shared_expert_intermediate_size (intermediate_size where that is 0) on the block's input, whatever
    n_shared_experts says. The sigmoid scores, n_group/topk_group (group-limited choice), norm_topk_prob and
    routed_scaling_factor pick which experts, not how many: checked where transformers' router needs them to run.
Legacy keys NemotronHConfig pops from its kwargs, each over the field it sets: mamba_n_groups, mamba_d_conv,
mamba_chunk_size, mamba_conv_bias (and mamba_expand, mamba_dt_*: not read). Multi-token-prediction layers
(num_nextn_predict_layers, mtp_layers_block_type) are not built by NemotronHForCausalLM (it drops mtp.* weights
on load): not counted.
"""

from __future__ import annotations

from typing import Any

from ..hf import ACTIVATIONS, activation_of, refuse_if, shortest_cycle, show
from .mamba2 import mixer_rules, mixer_sizes, padded_conv
from .registry import Family, register

DEFAULTS = {"vocab_size": 131072, "hidden_size": 4096, "layers_block_type": None, "tie_word_embeddings": False,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 4096,
            "sliding_window": None, "intermediate_size": 21504, "mlp_hidden_act": "relu2", "mlp_bias": False,
            "ssm_state_size": 128, "mamba_num_heads": 128, "mamba_head_dim": 64, "mamba_hidden_act": "silu",
            "n_groups": 8, "conv_kernel": 4, "use_conv_bias": True, "chunk_size": 128, "use_bias": False,
            "n_routed_experts": 8, "n_shared_experts": 1, "moe_intermediate_size": 7688,
            "moe_shared_expert_intermediate_size": 7688, "moe_latent_size": None, "num_experts_per_tok": 2,
            "n_group": 1, "topk_group": 1, "num_nextn_predict_layers": 0}
TYPES = {"vocab_size": "size", "hidden_size": "size", "layers_block_type": "strings?",
         "hybrid_override_pattern": "str?", "num_hidden_layers": "int?", "tie_word_embeddings": "bool",
         "num_attention_heads": "size", "num_key_value_heads": "size", "head_dim": "size",
         "max_position_embeddings": "size", "sliding_window": "int?", "intermediate_size": "size",
         "mlp_hidden_act": "str", "mlp_bias": "bool", "ssm_state_size": "size", "mamba_num_heads": "size",
         "mamba_head_dim": "size", "mamba_hidden_act": "str", "n_groups": "size", "conv_kernel": "size",
         "use_conv_bias": "bool", "chunk_size": "size", "use_bias": "bool", "n_routed_experts": "int",
         "n_shared_experts": "count", "moe_intermediate_size": "size", "moe_shared_expert_intermediate_size": "count",
         "moe_latent_size": "size?", "num_experts_per_tok": "size", "n_group": "int", "topk_group": "int",
         "num_nextn_predict_layers": "count"}
# its attribute_map's layer_types and num_local_experts, and the legacy keys NemotronHConfig.__post_init__ pops from its kwargs, each over
# the field it sets
ALIASES = {"layer_types": "layers_block_type", "num_local_experts": "n_routed_experts", "mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel", "mamba_chunk_size": "chunk_size",
           "mamba_conv_bias": "use_conv_bias"}

PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}  # NemotronHConfig._pattern_to_list
BLOCKS = {"linear_attention": "mamba2", "full_attention": "attention", "mlp": "mlp", "moe": "moe"}

LAYERS = r"model\.layers\.\d+"
COMPONENTS = [
    (r"model\.embeddings", "embedding/token"),
    # one norm before each block's one mixer: compared with the sum of the three kinds' (hf_model.fused_parts)
    (rf"{LAYERS}\.norm", "mamba2/norm+attention/norm+mlp/norm"),
    (rf"{LAYERS}\.mixer\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (rf"{LAYERS}\.mixer\.o_proj", "attention/out"),
    (rf"{LAYERS}\.mixer\.up_proj", "mlp/up"),
    (rf"{LAYERS}\.mixer\.down_proj", "mlp/down"),
    (rf"{LAYERS}\.mixer\.gate", "moe/router"),
    (rf"{LAYERS}\.mixer\.fc1_latent_proj", "moe/latent_in"),
    (rf"{LAYERS}\.mixer\.experts", "moe/experts"),
    (rf"{LAYERS}\.mixer\.fc2_latent_proj", "moe/latent_out"),
    (rf"{LAYERS}\.mixer\.shared_experts\.(up_proj|down_proj)", "moe/shared_experts"),
    # `mixer` is the Mamba2 mixer (its own FLOPs: the conv and the scan) or the attention (its own: the core): one
    # name, compared with the sum of the three (hf_model.fused_parts)
    *[(pattern, "mamba2/conv+scan+attention/core" if component == "mamba2/conv+scan" else component)
      for pattern, component in mixer_rules(LAYERS)],
    (r"model\.norm_f", "final_norm"),
    (r"lm_head", "head"),
]


def _types(cfg: dict, notes: list[str]) -> list[str]:
    """The blocks' types, as NemotronHConfig sets layers_block_type."""
    types = cfg.get("layers_block_type")
    pattern = cfg.get("hybrid_override_pattern")
    if types is None and pattern is not None:
        unknown = sorted(set(pattern) - set(PATTERN))
        refuse_if(cfg, "hybrid_override_pattern", bool(unknown), f"characters {', '.join(map(show, unknown))}; "
                  f"known: {', '.join(PATTERN)} (transformers fails on any other)")
        types = [PATTERN[c] for c in pattern]
    elif types is not None and pattern is not None:
        notes.append(f"hybrid_override_pattern={show(pattern)} not read: layers_block_type is given")
    if types is None:  # NemotronHConfig's default
        types = ["linear_attention", "moe", "full_attention", "mlp"]
    key = "layers_block_type" if cfg.get("layers_block_type") is not None else (
        "hybrid_override_pattern" if pattern is not None else "layers_block_type")
    refuse_if(cfg, key, not types, "no block: give at least one")
    unknown = sorted(set(types) - set(PATTERN.values()))
    refuse_if(cfg, key, bool(unknown), f"entries {', '.join(map(show, unknown))}; known: "
              f"{', '.join(PATTERN.values())} (transformers refuses any other)")
    L = cfg.get("num_hidden_layers")
    if L is not None and L != len(types):
        notes.append(f"num_hidden_layers={L} not read: transformers builds the {len(types)} blocks the layer types "
                     "list")
    return types


def nemotron_h(cfg: dict, notes: list[str]) -> dict[str, Any]:
    types = _types(cfg, notes)
    D, H, H_kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    kinds = [BLOCKS[t] for t in types]
    fields = {"n_layers": len(types), "d_model": D, "n_heads": H, "n_kv_heads": H_kv, "d_head": cfg["head_dim"],
              "vocab_size": cfg["vocab_size"], "norm": "rmsnorm", "norm_position": "pre", "positions": "none",
              "bias": False, "tie_embeddings": False, "context": cfg["max_position_embeddings"]}
    if cfg["tie_word_embeddings"] is True:
        notes.append("tie_word_embeddings=True not read: NemotronHForCausalLM ties nothing (its _tied_weights_keys is "
                     "empty), the head is a matrix of its own")
    if "attention" in kinds:
        refuse_if(cfg, "num_key_value_heads", H % H_kv != 0, f"does not divide num_attention_heads={H} "
                  "(transformers' attention repeats each key/value head num_attention_heads // num_key_value_heads "
                  "times)")
        refuse_if(cfg, "sliding_window", cfg.get("sliding_window") is not None, "a sliding window on Nemotron-H's "
                  "attention is not modelled")
    if "mlp" in kinds or "moe" in kinds:  # the MLP blocks, the experts and the shared expert: one activation
        act = cfg["mlp_hidden_act"]
        if act == "relu2":  # relu(x)^2: the matmuls and what training keeps (relu's output) are relu's
            notes.append("mlp_hidden_act 'relu2' counted as relu: the same matmuls and the same kept output "
                         "(the non-matmul estimate is relu's, 1 FLOP an element where relu2 takes 2)")
            activation = "relu"
        else:
            refuse_if(cfg, "mlp_hidden_act", act not in ACTIVATIONS, f"known: relu2, {', '.join(ACTIVATIONS)}")
            activation = activation_of(cfg, "mlp_hidden_act")
        fields |= {"d_ff": cfg["intermediate_size"], "mlp": "standard", "activation": activation,
                   "mlp_bias": cfg["mlp_bias"]}
    if "moe" in kinds:
        fields |= _moe(cfg, notes)
    if "mamba2" in kinds:
        sizes = mixer_sizes(cfg, notes, cfg["mamba_num_heads"] * cfg["mamba_head_dim"], "mamba_num_heads",
                            heads="mamba_num_heads", head_dim="mamba_head_dim", state="ssm_state_size",
                            act="mamba_hidden_act")
        fields["kinds"] = {"mamba2": sizes}
    if "attention" not in kinds:
        notes.append("no attention block: transformers' model fails a forward with a cache (generation: "
                     "get_seq_length needs an attention layer); without one it runs")
    cycle = shortest_cycle(kinds)
    fields["block_pattern"] = cycle if len(kinds) % len(cycle) == 0 else kinds
    notes.append(f"{len(types)} blocks: {kinds.count('mamba2')} Mamba2, {kinds.count('attention')} attention, "
                 f"{kinds.count('mlp')} MLP" + (f", {kinds.count('moe')} MoE" if "moe" in kinds else ""))
    mtp = cfg["num_nextn_predict_layers"]
    if mtp:
        notes.append(f"num_nextn_predict_layers={mtp}: the multi-token-prediction layers are not built by "
                     "NemotronHForCausalLM (it drops mtp.* weights on load): not counted")
    return fields


def _moe(cfg: dict, notes: list[str]) -> dict[str, Any]:
    """The MoE blocks' fields, refusing what transformers' NemotronHMoE cannot run or tfcalc's `moe` cannot say."""
    E, k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    refuse_if(cfg, "n_routed_experts", E < 2, "tfcalc models a mixture of 2 or more experts (the router scores each "
              "group by its top 2)")
    groups, topk_group = cfg["n_group"], cfg["topk_group"]
    # the router views the scores as [tokens, n_group, n_routed_experts / n_group] and sums each group's top 2
    refuse_if(cfg, "n_group", groups < 1 or E % groups != 0 or E // groups < 2,
              f"the group-limited router needs n_group dividing n_routed_experts={E} into groups of 2 or more")
    refuse_if(cfg, "topk_group", not 1 <= topk_group <= groups,
              f"the group-limited router keeps topk_group of the n_group={groups} groups")
    per_group = E // groups
    refuse_if(cfg, "num_experts_per_tok", k > topk_group * per_group,
              f"more than the topk_group * n_routed_experts / n_group = {topk_group * per_group} experts the kept "
              "groups hold")
    refuse_if(cfg, "mlp_bias", cfg["mlp_bias"] is True, "with 'moe' blocks transformers biases the shared expert "
              "and the latent projections but not the routed experts; tfcalc's mlp_bias is one switch for all")
    shared = cfg["moe_shared_expert_intermediate_size"]
    if not shared:  # NemotronHMLP: intermediate_size or config.intermediate_size
        shared = cfg["intermediate_size"]
        notes.append(f"moe_shared_expert_intermediate_size=0: transformers' shared expert (NemotronHMLP) falls back "
                     f"to intermediate_size={shared}")
    if cfg["n_shared_experts"] != 1:
        notes.append(f"n_shared_experts={cfg['n_shared_experts']} not read: NemotronHMoE builds one shared MLP of "
                     "moe_shared_expert_intermediate_size, whatever it says")
    notes.append("routing (sigmoid scores, e_score_correction_bias, a buffer, n_group, topk_group, norm_topk_prob, "
                 "routed_scaling_factor) picks which experts, not how many: no parameters, no shapes")
    return {"n_experts": E, "top_k": k, "d_expert": cfg["moe_intermediate_size"], "n_shared_experts": 1,
            "d_shared_expert": shared, "d_moe_latent": cfg["moe_latent_size"]}


register(Family("nemotron_h", DEFAULTS, TYPES, nemotron_h, COMPONENTS, aliases=ALIASES, known=padded_conv))
