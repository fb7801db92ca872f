"""Bamba (IBM; model_type bamba): transformers' BambaForCausalLM, Mamba2 blocks with attention at attn_layer_indices.

Every block is a mixer and a SwiGLU MLP, each pre-norm (input_layernorm, pre_ff_layernorm: RMSNorms), and a final
RMSNorm (final_layernorm); the head tied by tie_word_embeddings (false by default).
  * the Mamba2 mixer (BambaMixer; tfcalc's `mamba2` kind): in_proj D -> 2 d_inner + 2 g n + h (mamba_proj_bias), a
    depthwise causal Conv1d of mamba_d_conv taps (mamba_conv_bias), A_log, D, dt_bias [h], a gated RMSNorm over
    mamba_n_groups groups, out_proj; d_inner = int(mamba_expand * hidden_size), which BambaConfig requires to be
    mamba_n_heads * mamba_d_head ("auto": mamba_expand * hidden_size // mamba_n_heads);
  * attention (BambaAttention, at attn_layer_indices): q_proj, k_proj, v_proj (grouped-query) and o_proj, all with
    biases by attention_bias; heads of hidden_size // num_attention_heads (or a head_dim the config gives); rotary
    on half of each head (BambaConfig sets partial_rotary_factor 0.5);
  * the MLP (BambaMLP): down(act(gate x) * up x), hidden_act (also the activation after the mixer's conv), mlp_bias.
z_loss_coefficient and time_step_limit change values, not shapes: not read.
"""

from __future__ import annotations

from typing import Any

from ..hf import PATTERN_LIMIT, activation_of, refuse_if, shortest_cycle, show
from .mamba2 import mixer_rules, mixer_sizes, padded_conv
from .registry import Family, register

DEFAULTS = {"vocab_size": 128000, "tie_word_embeddings": False, "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
            "max_position_embeddings": 262144, "attn_layer_indices": None, "mamba_n_heads": 128,
            "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2,
            "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False, "rope_parameters": None,
            "attention_bias": False, "mlp_bias": False}
# BambaConfig declares no head_dim, but its attention reads one (getattr) when a config gives it
TYPES = {"vocab_size": "size", "tie_word_embeddings": "bool", "hidden_size": "size", "intermediate_size": "size",
         "num_hidden_layers": "size", "num_attention_heads": "size", "num_key_value_heads": "size?",
         "hidden_act": "str", "max_position_embeddings": "size", "attn_layer_indices": "integers?",
         "mamba_n_heads": "size?", "mamba_d_head": "int|str?", "mamba_n_groups": "size?", "mamba_d_state": "size?",
         "mamba_d_conv": "size?", "mamba_expand": "int?", "mamba_chunk_size": "size?", "mamba_conv_bias": "bool?",
         "mamba_proj_bias": "bool?", "rope_parameters": "object?", "attention_bias": "bool", "mlp_bias": "bool",
         "head_dim": "size"}

LAYERS = r"model\.layers\.\d+"
COMPONENTS = [
    (r"model\.embed_tokens", "embedding/token"),
    # one norm before the block's mixer, Mamba2 or attention: compared with the sum of both (hf_model.fused_parts)
    (rf"{LAYERS}\.input_layernorm", "mamba2/norm+attention/norm"),
    *mixer_rules(LAYERS, "mamba"),
    (rf"{LAYERS}\.self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (rf"{LAYERS}\.self_attn", "attention/core"),
    (rf"{LAYERS}\.self_attn\.o_proj", "attention/out"),
    (rf"{LAYERS}\.pre_ff_layernorm", "mlp/norm"),
    (rf"{LAYERS}\.feed_forward\.gate_proj", "mlp/gate"),
    (rf"{LAYERS}\.feed_forward\.up_proj", "mlp/up"),
    (rf"{LAYERS}\.feed_forward\.down_proj", "mlp/down"),
    (r"model\.final_layernorm", "final_norm"),
    (r"lm_head", "head"),
]

MAMBA_FIELDS = ("mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv", "mamba_expand",
                "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias")


def _mixer(cfg: dict, notes: list[str]) -> dict[str, Any]:
    """The `mamba2` kind's sizes, as BambaConfig resolves and checks them."""
    for key in MAMBA_FIELDS:
        refuse_if(cfg, key, cfg[key] is None, "BambaMixer needs a value (transformers fails on null)")
    D, h, expand = cfg["hidden_size"], cfg["mamba_n_heads"], cfg["mamba_expand"]
    refuse_if(cfg, "mamba_expand", expand < 1, "the inner width int(mamba_expand * hidden_size) must be 1 or more")
    inner = expand * D
    refuse_if(cfg, "mamba_n_heads", inner % h != 0, f"does not divide mamba_expand * hidden_size = {inner} "
              "(BambaConfig refuses it)")
    head = cfg["mamba_d_head"]
    refuse_if(cfg, "mamba_d_head", isinstance(head, str) and head != "auto", "expected an integer or 'auto'")
    if head == "auto":
        notes.append(f"mamba_d_head 'auto': mamba_expand * hidden_size // mamba_n_heads = {inner // h}")
        head = inner // h
    refuse_if(cfg, "mamba_d_head", head < 1, "heads of 1 channel or more")
    return mixer_sizes({**cfg, "mamba_d_head": head}, notes, inner, "mamba_d_head", heads="mamba_n_heads",
                       head_dim="mamba_d_head", state="mamba_d_state", groups="mamba_n_groups", kernel="mamba_d_conv",
                       chunk="mamba_chunk_size", conv_bias="mamba_conv_bias", bias="mamba_proj_bias")


def bamba(cfg: dict, notes: list[str]) -> dict[str, Any]:
    L, D, H = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    H_kv = cfg["num_key_value_heads"]
    H_kv = H if H_kv is None else H_kv
    indices = cfg["attn_layer_indices"] or []
    attention = {i for i in indices if 0 <= i < L}
    outside = sorted(set(indices) - attention)
    if outside:
        notes.append(f"attn_layer_indices entries {', '.join(map(show, outside))} not read: no block has that index "
                     "(transformers ignores them too)")
    fields = {"n_layers": L, "d_model": D, "n_heads": H, "n_kv_heads": H_kv, "d_ff": cfg["intermediate_size"],
              "vocab_size": cfg["vocab_size"], "mlp": "gated", "activation": activation_of(cfg, "hidden_act"),
              "norm": "rmsnorm", "norm_position": "pre", "bias": cfg["attention_bias"], "mlp_bias": cfg["mlp_bias"],
              "tie_embeddings": cfg["tie_word_embeddings"], "context": cfg["max_position_embeddings"]}
    if attention:
        head_dim = cfg.get("head_dim", D // H)
        refuse_if(cfg, "hidden_size", head_dim == 0, f"fewer channels than num_attention_heads={H}: heads of 0 "
                  "channels")
        refuse_if(cfg, "num_key_value_heads", H % H_kv != 0, f"does not divide num_attention_heads={H} (transformers' "
                  "attention repeats each key/value head num_attention_heads // num_key_value_heads times)")
        if "head_dim" in cfg or D % H:
            fields["d_head"] = head_dim
        rotary = -(-(head_dim // 2) // 2) * 2  # int(head_dim * 0.5) frequencies' channels, rounded up to even
        fields |= {"positions": "rotary", "rotary_dim": rotary} if rotary else {"positions": "none"}
        notes.append(f"rotary on {rotary} of each head's {head_dim} channels (BambaConfig's partial_rotary_factor "
                     "0.5)")
        if cfg.get("rope_parameters") not in (None, {}):
            notes.append("rope parameters read: they change rotary frequencies, not shapes or counts")
    else:  # ModelSpec's attention heads, which no block has here (1: any whole number of channels)
        fields |= {"positions": "none", "n_heads": 1, "n_kv_heads": 1}
        notes.append("no attention block: transformers' model fails a forward with a cache (generation: "
                     "get_seq_length needs an attention layer); without one it runs")
    sizes = _mixer(cfg, notes)  # BambaConfig checks the mixer's sizes whatever the blocks
    if len(attention) < L:
        fields["kinds"] = {"mamba2": sizes}
    if not attention:
        fields["block_pattern"] = ["mamba2+mlp"]
    elif len(attention) < L:
        refuse_if(cfg, "num_hidden_layers", L > PATTERN_LIMIT, f"with attn_layer_indices, tfcalc writes the blocks' "
                  f"kinds per block, for at most {PATTERN_LIMIT:,} blocks")
        kinds = ["attention+mlp" if i in attention else "mamba2+mlp" for i in range(L)]
        cycle = shortest_cycle(kinds)
        fields["block_pattern"] = cycle if len(kinds) % len(cycle) == 0 else kinds
    notes.append(f"{L - len(attention)} of {L} blocks Mamba2, {len(attention)} attention")
    return fields


register(Family("bamba", DEFAULTS, TYPES, bamba, COMPONENTS, known=padded_conv))
