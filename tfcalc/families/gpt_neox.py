"""GPT-NeoX (Pythia, GPT-NeoX-20B): transformers' GPTNeoXForCausalLM.

Every block: LayerNorms with biases, a fused query_key_value linear [D, 3D] and the output dense [D, D] (biases by
attention_bias), an MLP dense_h_to_4h [D, F] -> act -> dense_4h_to_h [F, D] with biases always; with
use_parallel_residual (the default) attention and the MLP read the block's input through their own norms
(input_layernorm, post_attention_layernorm) and both add to it (parallel_block two_norms), else the MLP follows
attention (pre-norm). Rotary on the first int(head_dim * partial_rotary_factor) channels of each head (rotary_pct,
0.25 by default; transformers 5 keeps it in rope_parameters); a final LayerNorm; an untied head without a bias by
default.

Not read, because they change no shape and no matmul: rotary_emb_base / rope_theta and the rope scaling type
(frequencies), layer_norm_eps, the dropouts, initializer_range, use_cache, the token ids.
"""

from __future__ import annotations

from ..hf import Unmodelled, activation_of, refuse_if, show
from .registry import Family, register

MODEL_TYPE = "gpt_neox"

# GPTNeoXConfig's defaults (transformers 5) for the fields read here; rotary_pct is a kwarg its
# convert_rope_params_to_dict turns into rope_parameters["partial_rotary_factor"] (default 0.25)
DEFAULTS = dict(vocab_size=50432, hidden_size=6144, num_hidden_layers=44, num_attention_heads=64,
                intermediate_size=24576, hidden_act="gelu", max_position_embeddings=2048, tie_word_embeddings=False,
                use_parallel_residual=True, rope_parameters=None, attention_bias=True)
TYPES = dict(vocab_size="size", hidden_size="size", num_hidden_layers="size", num_attention_heads="size",
             intermediate_size="size", hidden_act="str", max_position_embeddings="size", tie_word_embeddings="bool",
             use_parallel_residual="bool", rope_parameters="object?", rope_scaling="object?", attention_bias="bool",
             rotary_pct="float?", head_dim="size?")

COMPONENTS = [
    (r"gpt_neox\.embed_in", "embedding/token"),
    (r"gpt_neox\.layers\.\d+\.input_layernorm", "attention/norm"),
    (r"gpt_neox\.layers\.\d+\.attention\.query_key_value", "attention/qkv"),
    (r"gpt_neox\.layers\.\d+\.attention", "attention/core"),
    (r"gpt_neox\.layers\.\d+\.attention\.dense", "attention/out"),
    (r"gpt_neox\.layers\.\d+\.post_attention_layernorm", "mlp/norm"),
    (r"gpt_neox\.layers\.\d+\.mlp\.dense_h_to_4h", "mlp/up"),
    (r"gpt_neox\.layers\.\d+\.mlp\.dense_4h_to_h", "mlp/down"),
    (r"gpt_neox\.final_layer_norm", "final_norm"),
    (r"lm_head", "head"),
]


def rope_dict(cfg: dict) -> tuple[str, dict]:
    """(its field name, the rope parameters transformers 5 keeps): rope_scaling when given (and not empty), over
    rope_parameters (PreTrainedConfig.convert_rope_params_to_dict)."""
    if cfg.get("rope_scaling"):
        return "rope_scaling", cfg["rope_scaling"]
    return "rope_parameters", cfg.get("rope_parameters") or {}


def partial_factor(cfg: dict, fallback_key: str | None, fallback: float) -> tuple[str, float]:
    """(where it was read, the partial rotary factor): the rope parameters' partial_rotary_factor, else the config's
    `fallback_key` (rotary_pct, partial_rotary_factor), else `fallback`; a number, refused by name otherwise."""
    key, rope = rope_dict(cfg)
    if "partial_rotary_factor" in rope:
        where, value = f"{key}.partial_rotary_factor", rope["partial_rotary_factor"]
    elif fallback_key is not None and fallback_key in cfg:
        where, value = fallback_key, cfg[fallback_key]
    else:
        return f"{fallback_key or 'partial_rotary_factor'} (default)", fallback
    if type(value) not in (int, float) or not 0 <= value <= 1:
        raise Unmodelled(f"{where}={show(value)} is not modelled: expected a number from 0 to 1 (the share of each "
                         "head's channels that rotary turns)")
    return where, value


def rotary_channels(head_dim: int, factor: float, head_field: str) -> int:
    """int(head_dim * factor), as transformers computes it (a float product); a head too wide for a float is refused
    by the field that gave it."""
    try:
        return int(head_dim * factor)
    except OverflowError:
        raise Unmodelled(f"{head_field}={show(head_dim)} is not modelled: transformers' rotary width "
                         "int(head_dim * partial_rotary_factor) overflows a float") from None


def partial_rotary(cfg: dict, fields: dict, notes: list[str], head_dim: int, factor: float, where: str,
                   head_field: str = "hidden_size") -> None:
    """Rotary on the first channels of each head: transformers' tables are int(head_dim * factor) wide, rounded up
    to even (arange(0, dim, 2) frequencies, each twice), and turn that many channels of each head."""
    dim = rotary_channels(head_dim, factor, head_field)
    rotated = dim + dim % 2
    if rotated > head_dim:
        raise Unmodelled(f"{where}={show(factor)} is not modelled: its tables turn {rotated} channels, more than a "
                         f"head's {head_dim} (transformers' rotary fails)")
    if rotated == 0:
        fields["positions"] = "none"
        notes.append(f"{where}={show(factor)}: no channel of a {head_dim}-channel head is rotated (positions none)")
    elif rotated < head_dim:
        fields["rotary_dim"] = rotated
        notes.append(f"partial rotary: {rotated} of {head_dim} channels per head ({where}={show(factor)})")


def gpt_neox(cfg: dict, notes: list[str]) -> dict:
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    refuse_if(cfg, "hidden_size", D % H != 0, f"not divisible by num_attention_heads={H} (GPTNeoXConfig refuses "
              "it)")
    refuse_if(cfg, "rotary_pct", "rotary_pct" in cfg and cfg["rotary_pct"] is None,
              "transformers' rotary then multiplies by None")
    fields = dict(n_layers=cfg["num_hidden_layers"], d_model=D, n_heads=H, d_ff=cfg["intermediate_size"],
                  vocab_size=cfg["vocab_size"], mlp="standard", activation=activation_of(cfg, "hidden_act"),
                  norm="layernorm", norm_position="pre", positions="rotary", bias=cfg["attention_bias"],
                  mlp_bias=True, tie_embeddings=cfg["tie_word_embeddings"],
                  parallel_block="two_norms" if cfg["use_parallel_residual"] is True else "none",
                  context=cfg["max_position_embeddings"])
    refuse_if(cfg, "head_dim", cfg.get("head_dim") not in (None, D // H), f"GPTNeoXAttention's heads are "
              f"hidden_size // num_attention_heads = {D // H} wide, and transformers' rotary tables would be sized "
              "from head_dim")
    where, factor = partial_factor(cfg, "rotary_pct", 0.25)
    partial_rotary(cfg, fields, notes, D // H, factor, where)
    return fields


register(Family(MODEL_TYPE, DEFAULTS, TYPES, gpt_neox, COMPONENTS))
