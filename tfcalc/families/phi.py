"""Phi-1, Phi-1.5, Phi-2: transformers' PhiForCausalLM.

Every block is parallel with one norm (parallel_block one_norm): x + attn(input_layernorm(x)) + mlp(input_layernorm(x)),
LayerNorms with biases. Attention: q_proj [D, H * hd], k_proj and v_proj [D, Hkv * hd], dense [H * hd, D], all with
biases (hd = head_dim when a config gives one, else hidden_size // num_attention_heads); with qk_layernorm a LayerNorm
(weight and bias [hd], shared by the heads) on the queries and on the keys before rotary (qk_norm head). Rotary on the
first int(hd * partial_rotary_factor) channels of each head (default 0.5; transformers 5 keeps it in rope_parameters).
MLP: fc1 [D, F] -> act -> fc2 [F, D] with biases. A final LayerNorm; an untied lm_head with a bias [V] (head_bias).

Not read, because they change no shape and no matmul: rope_theta and the rope scaling type (frequencies),
layer_norm_eps, the dropouts, initializer_range, use_cache, the token ids.
"""

from __future__ import annotations

from ..hf import Unmodelled, activation_of, refuse_if, show
from .gpt_neox import partial_factor, partial_rotary, rotary_channels
from .registry import Family, register

MODEL_TYPE = "phi"

# PhiConfig's defaults (transformers 5) for the fields read here; partial_rotary_factor is a kwarg its __post_init__
# defaults to 0.5 and moves into rope_parameters
DEFAULTS = dict(vocab_size=51200, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                num_attention_heads=32, num_key_value_heads=None, hidden_act="gelu_new", max_position_embeddings=2048,
                tie_word_embeddings=False, rope_parameters=None, qk_layernorm=False)
TYPES = dict(vocab_size="size", hidden_size="size", intermediate_size="size", num_hidden_layers="size",
             num_attention_heads="size", num_key_value_heads="size?", hidden_act="str", max_position_embeddings="size",
             tie_word_embeddings="bool", rope_parameters="object?", rope_scaling="object?", qk_layernorm="bool",
             partial_rotary_factor="float?", head_dim="size")

COMPONENTS = [
    (r"model\.embed_tokens", "embedding/token"),
    (r"model\.layers\.\d+\.input_layernorm", "attention/norm"),
    (r"model\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (r"model\.layers\.\d+\.self_attn\.q_layernorm", "attention/q_norm"),
    (r"model\.layers\.\d+\.self_attn\.k_layernorm", "attention/k_norm"),
    (r"model\.layers\.\d+\.self_attn", "attention/core"),
    (r"model\.layers\.\d+\.self_attn\.dense", "attention/out"),
    (r"model\.layers\.\d+\.mlp\.fc1", "mlp/up"),
    (r"model\.layers\.\d+\.mlp\.fc2", "mlp/down"),
    (r"model\.final_layernorm", "final_norm"),
    (r"lm_head", "head"),
]


def phi(cfg: dict, notes: list[str]) -> dict:
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim", D // H)
    kv = cfg["num_key_value_heads"]
    refuse_if(cfg, "qk_layernorm", cfg["qk_layernorm"] is True and head_dim != D // H,
              f"its LayerNorms are hidden_size // num_attention_heads = {D // H} wide, the heads head_dim={head_dim} "
              "(transformers fails)")
    refuse_if(cfg, "tie_word_embeddings", cfg["tie_word_embeddings"] is True,
              "transformers ties lm_head's weight to the token table and keeps lm_head's bias [V]; tfcalc's head "
              "bias is for an untied head")
    refuse_if(cfg, "partial_rotary_factor", "partial_rotary_factor" in cfg and cfg["partial_rotary_factor"] is None,
              "transformers' rotary then multiplies by None")
    where, factor = partial_factor(cfg, "partial_rotary_factor", 0.5)
    head_field = "head_dim" if "head_dim" in cfg else "hidden_size"
    dim = rotary_channels(head_dim, factor, head_field)
    if dim % 2:
        raise Unmodelled(f"{where}={show(factor)} is not modelled: int({head_dim} * {factor}) = {dim} rotary "
                         f"channels, an odd number (transformers' tables turn {dim + 1} and fail to broadcast)")
    fields = dict(n_layers=cfg["num_hidden_layers"], d_model=D, n_heads=H, n_kv_heads=kv if kv is not None else H,
                  d_head=head_dim, d_ff=cfg["intermediate_size"], vocab_size=cfg["vocab_size"], mlp="standard",
                  activation=activation_of(cfg, "hidden_act"), norm="layernorm", norm_position="pre",
                  parallel_block="one_norm", positions="rotary", bias=True, mlp_bias=True, tie_embeddings=False,
                  head_bias=True, qk_norm="head" if cfg["qk_layernorm"] is True else "none",
                  context=cfg["max_position_embeddings"])
    partial_rotary(cfg, fields, notes, head_dim, factor, where, head_field)
    return fields


register(Family(MODEL_TYPE, DEFAULTS, TYPES, phi, COMPONENTS))
