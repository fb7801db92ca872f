"""MPT (MosaicML) as transformers' MptForCausalLM builds it: ALiBi positions (no parameters), pre-norm blocks of
LayerNorms with a weight and no bias (norm_1, norm_2, norm_f: transformers drops their biases whatever no_bias says),
a fused Wqkv linear (D -> 3D) and out_proj without biases, an MLP D -> 4D -> D without biases and exact GELU, a head
tied to the token table unless tie_word_embeddings=false.

transformers' MptModel reads d_model, n_heads, n_layers, vocab_size, max_seq_len (the length of its ALiBi bias: the
longest input), tie_word_embeddings and, in attn_config, softmax_scale, clip_qkv, attn_pdrop and alibi_bias_max
(elementwise: no parameters, no matmul). It does not read expansion_ratio (its MLP is always 4 x d_model), no_bias (it
builds no biases), learned_pos_emb (it has no position table), norm_type, logit_scale or embedding_fraction, nor
attn_config's attn_type, qk_ln, alibi, prefix_lm or attn_uses_sequence_id. A value of those that would give the
MosaicML checkpoint other shapes than transformers' class (expansion_ratio != 4, no_bias=false, attn_config.qk_ln=true,
attn_config.alibi=false, multi-query attention, ...) is refused by name: the two would not count the same model.
learned_pos_emb is not read: transformers builds no table for it (and MosaicML's code turns it off with alibi)."""

from __future__ import annotations

from ..hf import Unmodelled, check_type, show
from .registry import Family, register

DEFAULTS = dict(d_model=2048, n_heads=16, n_layers=24, expansion_ratio=4, max_seq_len=2048, vocab_size=50368,
                attn_config=None, no_bias=True, norm_type="low_precision_layernorm", tie_word_embeddings=True)
ALIASES = dict(num_attention_heads="n_heads", hidden_size="d_model", num_hidden_layers="n_layers")
TYPES = dict(d_model="size", n_heads="size", n_layers="size", expansion_ratio="int", max_seq_len="size",
             vocab_size="size", attn_config="object?", no_bias="bool", norm_type="str",
             tie_word_embeddings="bool")  # and the aliases, of the kinds of the fields they set

# MptAttentionConfig's fields: (JSON kind, transformers' default). transformers validates each strictly (attn_pdrop and
# alibi_bias_max are ints, clip_qkv and softmax_scale floats or null); so does tfcalc, naming attn_config.<field>
ATTN_TYPES = {"attn_type": "str", "attn_pdrop": "int", "attn_impl": "str", "clip_qkv": "float?",
              "softmax_scale": "float?", "prefix_lm": "bool", "qk_ln": "bool", "attn_uses_sequence_id": "bool",
              "alibi": "bool", "alibi_bias_max": "int"}
ATTN_DEFAULTS = dict(attn_type="multihead_attention", attn_pdrop=0, attn_impl="torch", clip_qkv=None,
                     softmax_scale=None, prefix_lm=False, qk_ln=False, attn_uses_sequence_id=False, alibi=True,
                     alibi_bias_max=8)
ATTN_TYPE_VALUES = ("multihead_attention", "multiquery_attention")  # MptAttentionConfig's Literal
NORM_TYPES = ("low_precision_layernorm", "layernorm")  # MosaicML's LayerNorms (the first in low precision)

_LAYER = r"transformer\.blocks\.\d+\."
COMPONENTS = [
    (r"transformer\.wte", "embedding/token"),
    (_LAYER + r"norm_1", "attention/norm"),
    (_LAYER + r"attn\.Wqkv", "attention/qkv"),
    (_LAYER + r"attn", "attention/core"),
    (_LAYER + r"attn\.out_proj", "attention/out"),
    (_LAYER + r"norm_2", "mlp/norm"),
    (_LAYER + r"ffn\.up_proj", "mlp/up"),
    (_LAYER + r"ffn\.down_proj", "mlp/down"),
    (r"transformer\.norm_f", "final_norm"),
    (r"lm_head", "head"),
]


def attention_config(value: dict | None) -> dict:
    """attn_config with MptAttentionConfig's defaults under it, each field of its kind, strictly; one line each."""
    given = value or {}
    problems = [line for key, kind in ATTN_TYPES.items() if key in given
                for line in check_type(f"attn_config.{key}", given[key], kind)]
    attn_type = given.get("attn_type", ATTN_DEFAULTS["attn_type"])
    if not problems and attn_type not in ATTN_TYPE_VALUES:
        problems.append(f"attn_config.attn_type={show(attn_type)}: expected one of {', '.join(ATTN_TYPE_VALUES)}")
    if problems:
        raise Unmodelled("; ".join(problems))
    return {**ATTN_DEFAULTS, **given}


def _refuse(key: str, value, why: str) -> None:
    raise Unmodelled(f"{key}={show(value)} is not modelled: {why}")


def mpt(cfg: dict, notes: list[str]) -> dict:
    attn = attention_config(cfg["attn_config"])
    d = cfg["d_model"]
    if cfg["expansion_ratio"] != 4:
        _refuse("expansion_ratio", cfg["expansion_ratio"], "transformers' MptMLP is always 4 x d_model wide (it does "
                "not read expansion_ratio); MosaicML's code builds expansion_ratio x d_model")
    if cfg["no_bias"] is not True:
        _refuse("no_bias", cfg["no_bias"], "transformers' MptModel builds no biases (it does not read no_bias); "
                "MosaicML's code builds them on every linear and LayerNorm")
    if cfg["norm_type"] not in NORM_TYPES:
        _refuse("norm_type", cfg["norm_type"], f"transformers builds LayerNorms whatever norm_type says; known: "
                f"{', '.join(NORM_TYPES)}")
    if attn["alibi"] is not True:
        _refuse("attn_config.alibi", attn["alibi"], "transformers' MptModel always adds the ALiBi bias (it does not "
                "read alibi); MosaicML's code then uses learned positions (a table) or none")
    if attn["attn_type"] != "multihead_attention":
        _refuse("attn_config.attn_type", attn["attn_type"], "transformers' MptAttention is always multi-head (Wqkv "
                "of 3 x d_model); multi-query attention has one key and value head")
    if attn["qk_ln"] is True:
        _refuse("attn_config.qk_ln", True, "transformers' MptAttention has no q/k LayerNorms (it does not read "
                "qk_ln); MosaicML's code adds two, with weights")
    for key in ("rope", "qk_gn"):  # llm-foundry fields transformers does not read; they change the model
        if attn.get(key) not in (None, False):
            _refuse(f"attn_config.{key}", attn[key], "transformers' MptAttention does not read it (ALiBi and no "
                    "group norms); MosaicML's code builds another model")
    kv = attn.get("kv_n_heads")
    if kv is not None and kv != cfg["n_heads"]:
        _refuse("attn_config.kv_n_heads", kv, "grouped-query attention; transformers' MptAttention has n_heads key "
                "and value heads")
    elementwise = [f"attn_config.{key}={show(attn[key])}" for key in ("softmax_scale", "clip_qkv")
                   if attn[key] is not None]
    if attn["alibi_bias_max"] != ATTN_DEFAULTS["alibi_bias_max"]:
        elementwise.append(f"attn_config.alibi_bias_max={attn['alibi_bias_max']}")
    if elementwise:
        notes.append(f"{', '.join(elementwise)}: elementwise (scale, clamp, ALiBi slopes): no parameters, no matmul")
    if attn["prefix_lm"] is True or attn["attn_uses_sequence_id"] is True:
        notes.append("attn_config.prefix_lm / attn_uses_sequence_id: masks only, not read by transformers; the "
                     "forward counts full N x N attention")
    notes.append("alibi positions (no parameters); seq_len at most max_seq_len (the length of transformers' ALiBi "
                 "bias)")
    return dict(n_layers=cfg["n_layers"], d_model=d, n_heads=cfg["n_heads"], vocab_size=cfg["vocab_size"],
                mlp="standard", activation="gelu", norm="layernorm_no_bias", norm_position="pre", positions="alibi",
                final_norm=True, bias=False, tie_embeddings=cfg["tie_word_embeddings"], context=cfg["max_seq_len"])


register(Family("mpt", DEFAULTS, TYPES, mpt, COMPONENTS, aliases=ALIASES))
