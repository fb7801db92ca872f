"""OLMo 3: OLMo 2's layout (norms on each sublayer's output only, an RMSNorm over all of q and all of k) with local
(sliding-window) and global blocks by layer_types; by default three local blocks then one global, cycled
(Olmo3Config: block i is global when (i + 1) % 4 == 0). The local and global rotary bases change frequencies, not
shapes."""

from __future__ import annotations

from ..hf import _DECODER_TYPES, _decoder, _refuse_if, _window, layer_kinds, register

DEFAULTS = dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                tie_word_embeddings=False, attention_bias=False, sliding_window=4096, layer_types=None)
TYPES = _DECODER_TYPES | dict(attention_bias="bool", sliding_window="int?", layer_types="strings?")

_LAYER = r"model\.layers\.\d+\."
# the llama names, with OLMo 2's norms (after attention and after the MLP, no input norms)
COMPONENTS = [
    (r"model\.embed_tokens", "embedding/token"),
    (_LAYER + r"post_attention_layernorm", "attention/post_norm"),
    (_LAYER + r"post_feedforward_layernorm", "mlp/post_norm"),
    (_LAYER + r"self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (_LAYER + r"self_attn\.q_norm", "attention/q_norm"),
    (_LAYER + r"self_attn\.k_norm", "attention/k_norm"),
    (_LAYER + r"self_attn", "attention/core"),
    (_LAYER + r"self_attn\.o_proj", "attention/out"),
    (_LAYER + r"mlp\.gate_proj", "mlp/gate"),
    (_LAYER + r"mlp\.up_proj", "mlp/up"),
    (_LAYER + r"mlp\.down_proj", "mlp/down"),
    (r"model\.norm", "final_norm"),
    (r"lm_head", "head"),
]


def layer_windows(cfg: dict, fields: dict, notes: list[str], default: list[str]) -> None:
    """Sliding windows in the blocks layer_types marks sliding_attention (a list of num_hidden_layers entries), else
    in the blocks `default` (cycled) marks local; none without a sliding_window."""
    L = fields["n_layers"]
    types = cfg.get("layer_types")
    if types is not None:
        kinds = layer_kinds(cfg, L)
        _refuse_if(cfg, "layer_types", "sliding_attention" in types and cfg.get("sliding_window") is None,
                   "sliding_attention blocks with sliding_window=None: transformers has no window for them (its "
                   "cache cannot be built)")
        default = kinds
    else:
        _refuse_if(cfg, "sliding_window", cfg.get("sliding_window") is None and "local" in default[:L],
                   "the default layer_types have sliding_attention blocks, for which transformers then has no window "
                   "(its cache cannot be built): give layer_types")
    _window(cfg, fields, notes, default)


def olmo3(cfg: dict, notes: list[str]) -> dict:
    _refuse_if(cfg, "sliding_window", cfg["sliding_window"] is None, "transformers' Olmo3Model builds a "
               "sliding-window mask in every forward and cannot run without a window")
    fields = _decoder(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False, qk_norm="full",
                                         norm_position="output")
    layer_windows(cfg, fields, notes, ["local", "local", "local", "global"])
    return fields


register("olmo3", DEFAULTS, TYPES, olmo3, COMPONENTS)
