"""Falcon-H1 (TII; model_type falcon_h1): transformers' FalconH1ForCausalLM, attention and a Mamba2 mixer side by side
in every block (tfcalc's `parallel_hybrid` kind), then a SwiGLU MLP.

Every block (FalconH1DecoderLayer) is h = input_layernorm(x); x = x + mamba(h) * ssm_out_multiplier +
self_attn(h * attention_in_multiplier) * attention_out_multiplier; x = x + feed_forward(pre_ff_layernorm(x)): RMSNorms,
a final RMSNorm (final_layernorm), the head tied by tie_word_embeddings (false by default).
  * the Mamba2 mixer (FalconH1Mixer; tfcalc's `mamba2` sizes): in_proj D -> 2 d_inner + 2 g n + h (mamba_proj_bias),
    a depthwise causal Conv1d of mamba_d_conv taps (mamba_conv_bias), A_log, D, dt_bias [h], y * silu(z), out_proj
    (its bias is projectors_bias); d_inner = mamba_d_ssm, or int(mamba_expand * hidden_size) when null, which the config
    requires to be mamba_n_heads * mamba_d_head ("auto": d_inner // mamba_n_heads). mamba_rms_norm: a gated RMSNorm
    over mamba_n_groups groups (weight [d_inner]) in place of y * silu(z) alone; mamba_norm_before_gate orders its
    norm and its gate (the same weight, matmuls and elementwise counts: not read); a null bias or mamba_rms_norm is
    built as false;
  * attention (FalconH1Attention): q_proj, k_proj, v_proj (grouped-query) and o_proj, all with biases by
    attention_bias; heads of hidden_size // num_attention_heads, or the head_dim a config gives; rotary on the whole
    head;
  * the MLP (FalconH1MLP): down(up x * act(gate x)), hidden_act (also the activation after the mixer's conv), mlp_bias.
The multipliers (embedding_multiplier, lm_head_multiplier, attention_in/out_multiplier, key_multiplier,
ssm_in/out_multiplier, ssm_multipliers: the mup_vector buffer over in_proj's outputs, mlp_multipliers) scale
activations: no parameters, no matmul (FlopCounterMode counts none of their multiplies; an implementation can fold
them into the weights): not read. time_step_limit and rope parameters change values, not shapes or counts.
"""

from __future__ import annotations

from typing import Any

from ..hf import activation_of, refuse_if
from .mamba2 import mixer_rules, mixer_sizes, padded_conv
from .registry import Family, register

# FalconH1Config's class attributes for the fields read here
DEFAULTS = {"vocab_size": 128000, "tie_word_embeddings": False, "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
            "max_position_embeddings": 8192, "mamba_d_ssm": 1024, "mamba_n_heads": 128, "mamba_d_head": "auto",
            "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256,
            "mamba_conv_bias": True, "mamba_proj_bias": False, "mamba_norm_before_gate": True,
            "mamba_rms_norm": False, "projectors_bias": False, "rope_parameters": None, "attention_bias": False,
            "mlp_bias": False}
# FalconH1Config declares no head_dim, but its attention and rotary read one (getattr) when a config gives it
TYPES = {"vocab_size": "size", "tie_word_embeddings": "bool", "hidden_size": "size", "intermediate_size": "size",
         "num_hidden_layers": "size", "num_attention_heads": "size", "num_key_value_heads": "size?",
         "hidden_act": "str", "max_position_embeddings": "size", "mamba_d_ssm": "size?", "mamba_n_heads": "size?",
         "mamba_d_head": "int|str?", "mamba_n_groups": "size?", "mamba_d_state": "size?", "mamba_d_conv": "size?",
         "mamba_expand": "int?", "mamba_chunk_size": "size?", "mamba_conv_bias": "bool?", "mamba_proj_bias": "bool?",
         "mamba_norm_before_gate": "bool?", "mamba_rms_norm": "bool?", "projectors_bias": "bool?",
         "rope_parameters": "object?", "attention_bias": "bool", "mlp_bias": "bool", "head_dim": "size"}

LAYERS = r"model\.layers\.\d+"
COMPONENTS = [
    (r"model\.embed_tokens", "embedding/token"),
    (rf"{LAYERS}\.input_layernorm", "parallel_hybrid/norm"),
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

MAMBA_FIELDS = ("mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv", "mamba_chunk_size")
# null switches FalconH1Mixer builds as false: nn.Linear / nn.Conv1d(bias=None) build no bias, a null mamba_rms_norm
# no norm (nn.Identity)
SWITCHES = ("mamba_conv_bias", "mamba_proj_bias", "projectors_bias", "mamba_rms_norm")


def _mixer(cfg: dict, notes: list[str]) -> dict[str, Any]:
    """The `mamba2` sizes, as FalconH1Config resolves and checks them and FalconH1Mixer builds them."""
    for key in SWITCHES:
        if cfg[key] is None:
            notes.append(f"{key} null: transformers builds it as false")
            cfg = {**cfg, key: False}
    for key in MAMBA_FIELDS:
        refuse_if(cfg, key, cfg[key] is None, "FalconH1Mixer needs a value (transformers fails on null)")
    D, h, ssm = cfg["hidden_size"], cfg["mamba_n_heads"], cfg["mamba_d_ssm"]
    if ssm is None:
        expand = cfg["mamba_expand"]
        refuse_if(cfg, "mamba_expand", expand is None, "with mamba_d_ssm null the inner width is mamba_expand * "
                  "hidden_size: give one of them")
        refuse_if(cfg, "mamba_expand", expand < 1, "the inner width mamba_expand * hidden_size must be 1 or more")
        inner, inner_from = expand * D, "mamba_expand"
    else:
        inner, inner_from = ssm, "mamba_d_ssm"
    refuse_if(cfg, "mamba_n_heads", inner % h != 0, f"does not divide the mixer's inner width {inner} "
              "(FalconH1Config refuses it)")
    head = cfg["mamba_d_head"]
    refuse_if(cfg, "mamba_d_head", isinstance(head, str) and head != "auto", "expected an integer or 'auto'")
    if head == "auto":
        notes.append(f"mamba_d_head 'auto': the inner width {inner} // mamba_n_heads = {inner // h}")
        head = inner // h
    refuse_if(cfg, "mamba_d_head", head < 1, "heads of 1 channel or more")
    refuse_if(cfg, "projectors_bias", cfg["projectors_bias"] != cfg["mamba_proj_bias"],
              f"out_proj's bias (projectors_bias) differs from in_proj's (mamba_proj_bias={cfg['mamba_proj_bias']}): "
              "the mamba2 kind has one bias switch for both")
    sizes = mixer_sizes({**cfg, "mamba_d_head": head}, notes, inner, inner_from, heads="mamba_n_heads",
                        head_dim="mamba_d_head", state="mamba_d_state", groups="mamba_n_groups", kernel="mamba_d_conv",
                        chunk="mamba_chunk_size", conv_bias="mamba_conv_bias", bias="mamba_proj_bias")
    if cfg["mamba_rms_norm"]:
        if cfg["mamba_norm_before_gate"]:
            notes.append("mamba_norm_before_gate true: the gated norm normalises y, then multiplies by silu(z) "
                         "(tfcalc's order is the other way round: the same weight, matmuls and elementwise counts)")
    else:
        sizes["gated_norm"] = False
    return sizes


def falcon_h1(cfg: dict, notes: list[str]) -> dict[str, Any]:
    L, D, H = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    H_kv = cfg["num_key_value_heads"]
    H_kv = H if H_kv is None else H_kv
    head_dim = cfg.get("head_dim", D // H)
    refuse_if(cfg, "hidden_size", head_dim == 0, f"fewer channels than num_attention_heads={H}: heads of 0 channels")
    refuse_if(cfg, "num_key_value_heads", H % H_kv != 0, f"does not divide num_attention_heads={H} (transformers' "
              "attention repeats each key/value head num_attention_heads // num_key_value_heads times)")
    fields = {"n_layers": L, "d_model": D, "n_heads": H, "n_kv_heads": H_kv, "d_ff": cfg["intermediate_size"],
              "vocab_size": cfg["vocab_size"], "mlp": "gated", "activation": activation_of(cfg, "hidden_act"),
              "norm": "rmsnorm", "norm_position": "pre", "bias": cfg["attention_bias"], "mlp_bias": cfg["mlp_bias"],
              "positions": "rotary", "tie_embeddings": cfg["tie_word_embeddings"],
              "context": cfg["max_position_embeddings"], "block_pattern": ["parallel_hybrid+mlp"],
              "kinds": {"mamba2": _mixer(cfg, notes)}}
    if "head_dim" in cfg or D % H:
        fields["d_head"] = head_dim
    refuse_if(cfg, "head_dim" if "head_dim" in cfg else "hidden_size", head_dim % 2 == 1, f"heads of {head_dim} "
              "channels, an odd number: transformers' rotary (on the whole head) fails on them")
    if cfg.get("rope_parameters") not in (None, {}):
        notes.append("rope parameters read: they change rotary frequencies, not shapes or counts")
    z = fields["kinds"]["mamba2"]
    notes.append(f"{L} blocks, each attention ({H} heads of {head_dim}, {H_kv} key/value heads) beside a Mamba2 mixer "
                 f"({z['n_heads']} heads of {z['head_dim']}, state {z['d_state']}, {z['n_groups']} group{'s' if z['n_groups'] != 1 else ''}"
                 f"{', a gated RMSNorm' if z.get('gated_norm', True) else ', no norm'}) on one norm, then the MLP")
    notes.append("the multipliers (embedding, lm_head, attention in/out, key, ssm in/out, ssm_multipliers, "
                 "mlp_multipliers) not read: they scale activations (no parameters, no matmul)")
    return fields


register(Family("falcon_h1", DEFAULTS, TYPES, falcon_h1, COMPONENTS, known=padded_conv))
