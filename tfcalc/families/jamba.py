"""Jamba (AI21; model_type jamba): transformers' JambaForCausalLM, Mamba (v1) blocks with attention every
attn_layer_period blocks (at attn_layer_offset) and a mixture of experts every expert_layer_period blocks (at
expert_layer_offset), a dense SwiGLU MLP in the others.

Every block is a mixer and a feed-forward, each pre-norm (input_layernorm, pre_ff_layernorm: RMSNorms), and a final
RMSNorm (final_layernorm); the head tied by tie_word_embeddings (false by default).
  * the Mamba mixer (JambaMambaMixer; tfcalc's `mamba` kind): in_proj D -> 2 d_inner (mamba_proj_bias), a depthwise
    causal Conv1d of mamba_d_conv taps (mamba_conv_bias), x_proj d_inner -> mamba_dt_rank + 2 mamba_d_state, then
    RMSNorms on dt, B and C (dt_layernorm [dt_rank], b_layernorm and c_layernorm [d_state]: the kind's
    inner_norms), dt_proj (its weight a matmul in the mixer, its bias added in the scan), A_log, D, out_proj;
    d_inner = mamba_expand * hidden_size, mamba_dt_rank 'auto' = ceil(hidden_size / 16);
  * attention (JambaAttention): q_proj, k_proj, v_proj (grouped-query) and o_proj, no biases, no positions (no
    rotary: the Mamba blocks carry the order), heads of hidden_size // num_attention_heads (or a head_dim the config
    gives);
  * the feed-forward: JambaSparseMoeBlock where num_experts > 1 (a router [num_experts, D] without bias, top
    num_experts_per_tok of its softmax, unnormalised; stacked experts gate_up_proj [E, 2 F, D] and down_proj
    [E, D, F], F = intermediate_size), else JambaMLP: down(act(gate x) * up x), no biases.
hidden_act is the MLP's and the experts' activation and the one after the mixer's conv. router_aux_loss_coef,
output_router_logits, use_mamba_kernels, use_mambapy and the initialisation fields change values, not shapes.
"""

from __future__ import annotations

from typing import Any

from ..hf import PATTERN_LIMIT, activation_of, refuse_if, shortest_cycle
from .mamba import mixer_rules, mixer_sizes, padded_conv
from .registry import Family, register

DEFAULTS = {"vocab_size": 65536, "tie_word_embeddings": False, "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
            "max_position_embeddings": 262144, "num_experts_per_tok": 2, "num_experts": 16,
            "expert_layer_period": 2, "expert_layer_offset": 1, "attn_layer_period": 8, "attn_layer_offset": 4,
            "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": "auto",
            "mamba_conv_bias": True, "mamba_proj_bias": False}
# JambaConfig declares no head_dim, but its attention reads one (getattr) when a config gives it
TYPES = {"vocab_size": "size", "tie_word_embeddings": "bool", "hidden_size": "size", "intermediate_size": "size",
         "num_hidden_layers": "size", "num_attention_heads": "size", "num_key_value_heads": "size",
         "hidden_act": "str", "max_position_embeddings": "size", "num_experts_per_tok": "size",
         "num_experts": "size", "expert_layer_period": "size", "expert_layer_offset": "count",
         "attn_layer_period": "size", "attn_layer_offset": "count", "mamba_d_state": "size", "mamba_d_conv": "size",
         "mamba_expand": "int", "mamba_dt_rank": "int|str", "mamba_conv_bias": "bool", "mamba_proj_bias": "bool",
         "head_dim": "size?"}
ALIASES = {"num_local_experts": "num_experts"}  # JambaConfig's attribute_map

LAYERS = r"model\.layers\.\d+"
COMPONENTS = [
    (r"model\.embed_tokens", "embedding/token"),
    # one norm before the block's mixer, Mamba or attention: compared with the sum of both (hf_model.fused_parts)
    (rf"{LAYERS}\.input_layernorm", "mamba/norm+attention/norm"),
    *mixer_rules(LAYERS, "mamba"),
    (rf"{LAYERS}\.self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (rf"{LAYERS}\.self_attn", "attention/core"),
    (rf"{LAYERS}\.self_attn\.o_proj", "attention/out"),
    (rf"{LAYERS}\.pre_ff_layernorm", "mlp/norm"),
    (rf"{LAYERS}\.feed_forward\.gate_proj", "mlp/gate"),
    (rf"{LAYERS}\.feed_forward\.up_proj", "mlp/up"),
    (rf"{LAYERS}\.feed_forward\.down_proj", "mlp/down"),
    (rf"{LAYERS}\.feed_forward\.router", "moe/router"),
    (rf"{LAYERS}\.feed_forward\.experts", "moe/experts"),
    (r"model\.final_layernorm", "final_norm"),
    (r"lm_head", "head"),
]


def blocks(cfg: dict) -> list[str]:
    """Each block's kinds, as JambaConfig's layers_block_type and layers_num_experts place them."""
    E = cfg["num_experts"]
    out = []
    for i in range(cfg["num_hidden_layers"]):
        mixer = "attention" if i % cfg["attn_layer_period"] == cfg["attn_layer_offset"] else "mamba"
        moe = E > 1 and i % cfg["expert_layer_period"] == cfg["expert_layer_offset"]
        out.append(f"{mixer}+{'moe' if moe else 'mlp'}")
    return out


def jamba(cfg: dict, notes: list[str]) -> dict[str, Any]:
    L, D, H = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    H_kv = cfg["num_key_value_heads"]
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    for offset, period in (("attn_layer_offset", "attn_layer_period"), ("expert_layer_offset", "expert_layer_period")):
        refuse_if(cfg, offset, cfg[offset] >= cfg[period], f"must be smaller than {period}={cfg[period]} "
                  "(JambaConfig refuses it)")
    refuse_if(cfg, "num_hidden_layers", L > PATTERN_LIMIT, f"tfcalc writes the blocks' kinds per block, for at most "
              f"{PATTERN_LIMIT:,} blocks")
    kinds = blocks(cfg)
    attention = sum(b.startswith("attention") for b in kinds)
    experts = sum(b.endswith("moe") for b in kinds)
    act = activation_of(cfg, "hidden_act")
    fields = {"n_layers": L, "d_model": D, "n_heads": H, "n_kv_heads": H_kv, "d_ff": cfg["intermediate_size"],
              "vocab_size": cfg["vocab_size"], "mlp": "gated", "activation": act, "norm": "rmsnorm",
              "norm_position": "pre", "bias": False, "mlp_bias": False, "positions": "none",
              "tie_embeddings": cfg["tie_word_embeddings"], "context": cfg["max_position_embeddings"]}
    if attention:
        head_dim = cfg.get("head_dim")
        refuse_if(cfg, "head_dim", "head_dim" in cfg and head_dim is None, "JambaAttention reads it as the heads' "
                  "width (transformers fails on null)")
        head_dim = D // H if head_dim is None else head_dim
        refuse_if(cfg, "hidden_size", head_dim == 0, f"fewer channels than num_attention_heads={H}: heads of 0 "
                  "channels")
        refuse_if(cfg, "num_key_value_heads", H % H_kv != 0, f"does not divide num_attention_heads={H} (transformers' "
                  "attention repeats each key/value head num_attention_heads // num_key_value_heads times)")
        if cfg.get("head_dim") is not None or D % H:
            fields["d_head"] = head_dim
    else:  # ModelSpec's attention heads, which no block has here (1: any whole number of channels)
        fields |= {"n_heads": 1, "n_kv_heads": 1}
        notes.append("no attention block: transformers' model fails a forward with a cache (generation: "
                     "get_seq_length needs an attention layer); without one it runs")
    if experts:
        refuse_if(cfg, "num_experts_per_tok", k > E, f"more than num_experts={E} (torch.topk fails)")
        fields |= {"n_experts": E, "top_k": k}
    elif E > 1:
        notes.append(f"num_experts={E}, but no block has experts (expert_layer_offset={cfg['expert_layer_offset']} "
                     f"of {L} blocks)")
    sizes = mixer_sizes(cfg, notes, state="mamba_d_state", kernel="mamba_d_conv", expand="mamba_expand",
                        rank="mamba_dt_rank", conv_bias="mamba_conv_bias", bias="mamba_proj_bias")
    if attention < L:
        fields["kinds"] = {"mamba": sizes | {"inner_norms": True}}
    cycle = shortest_cycle(kinds)
    fields["block_pattern"] = cycle if len(kinds) % len(cycle) == 0 else kinds
    notes.append(f"{L - attention} of {L} blocks Mamba, {attention} attention (no positions); {experts} with "
                 f"{E} experts (top {k}), {L - experts} a dense MLP")
    return fields


register(Family("jamba", DEFAULTS, TYPES, jamba, COMPONENTS, aliases=ALIASES, known=padded_conv))
