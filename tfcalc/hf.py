"""Read a Hugging Face `config.json` into a ModelSpec: no network, no weights, no transformers.

Each supported `model_type` starts from the defaults transformers' config class uses for a field the file leaves
out (DEFAULTS below; tests/test_hf.py holds them against transformers' own classes). Every field a mapper reads has
the JSON type transformers' config class declares for it (TYPES, checked strictly with pydantic before any mapper
runs): "false" is not false and 4096.7 is not 4096. A field whose value would change the shapes in a way ModelSpec
does not model is refused, by name: never a silently wrong count.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter, ValidationError

from .errors import TfcalcError, validation_lines
from .loading import SpecFile, as_path, parse_json, read_text_file
from .spec import ModelSpec

SEQ_LEN_CAP = 131_072  # default seq_len is max_position_embeddings, but not beyond this

DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt2": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                 activation_function="gelu_new", add_cross_attention=False, tie_word_embeddings=True),
    "bert": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2,
                 is_decoder=False, add_cross_attention=False),
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                  tie_word_embeddings=False, attention_bias=False, mlp_bias=False, head_dim=None),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                    max_position_embeddings=4096 * 32, tie_word_embeddings=False, sliding_window=4096),
    "mixtral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                    max_position_embeddings=4096 * 32, tie_word_embeddings=False, sliding_window=None,
                    num_experts_per_tok=2, num_local_experts=8),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=32768,
                  tie_word_embeddings=False, use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                  layer_types=None),
    "qwen2_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                      num_attention_heads=16, num_key_value_heads=16, hidden_act="silu",
                      max_position_embeddings=32768, tie_word_embeddings=False, use_sliding_window=False,
                      sliding_window=4096, max_window_layers=28, decoder_sparse_step=1, moe_intermediate_size=1408,
                      shared_expert_intermediate_size=5632, num_experts_per_tok=4, num_experts=60,
                      mlp_only_layers=None, qkv_bias=True, layer_types=None),
    "t5": dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=None,
               num_heads=8, relative_attention_num_buckets=32, feed_forward_proj="relu"),
    "bart": dict(vocab_size=50265, max_position_embeddings=1024, encoder_layers=12, encoder_ffn_dim=4096,
                 encoder_attention_heads=16, decoder_layers=12, decoder_ffn_dim=4096, decoder_attention_heads=16,
                 activation_function="gelu", d_model=1024, tie_word_embeddings=True),
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=16, head_dim=256, hidden_act="gelu_pytorch_tanh",
                  max_position_embeddings=8192, tie_word_embeddings=True, attention_bias=False),
    "gpt_bigcode": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                        activation_function="gelu_pytorch_tanh", multi_query=True, add_cross_attention=False,
                        tie_word_embeddings=True),
    "roberta": dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2,
                    is_decoder=False, add_cross_attention=False),
    "xlm-roberta": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2,
                        is_decoder=False, add_cross_attention=False),
    "opt": dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072, max_position_embeddings=2048,
                do_layer_norm_before=True, _remove_final_layer_norm=False, word_embed_proj_dim=None,
                num_attention_heads=12, activation_function="relu", enable_bias=True,
                layer_norm_elementwise_affine=True, tie_word_embeddings=True),
    "granite": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                    tie_word_embeddings=False, attention_bias=False, mlp_bias=False),
    "phi3": dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=4096,
                 tie_word_embeddings=False, sliding_window=None),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=128, hidden_act="silu",
                  max_position_embeddings=32768, tie_word_embeddings=False, attention_bias=False,
                  use_sliding_window=False, sliding_window=4096, max_window_layers=28, layer_types=None),
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, hidden_act="silu", max_position_embeddings=32768,
                      tie_word_embeddings=False, attention_bias=False, use_sliding_window=False, sliding_window=4096,
                      decoder_sparse_step=1, moe_intermediate_size=768, num_experts_per_tok=8, num_experts=128,
                      norm_topk_prob=False, mlp_only_layers=None),
    "olmo2": dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                  tie_word_embeddings=False, attention_bias=False),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh",
                   max_position_embeddings=8192, tie_word_embeddings=True, attention_bias=False,
                   query_pre_attn_scalar=256, sliding_window=4096, layer_types=None, final_logit_softcapping=30.0,
                   attn_logit_softcapping=50.0, use_bidirectional_attention=None),
    "gemma3_text": dict(vocab_size=262_208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131_072,
                        tie_word_embeddings=True, attention_bias=False, query_pre_attn_scalar=256, sliding_window=4096,
                        layer_types=None, final_logit_softcapping=None, attn_logit_softcapping=None,
                        use_bidirectional_attention=False),
}
# Multimodal configs whose language model is read from a nested config (its model_type, the field it is in); the
# other towers (vision) are not counted
NESTED = {"gemma3": ("gemma3_text", "text_config"), "gemma4": ("gemma4_text", "text_config")}

# The JSON type of every field a mapper reads, as transformers' config classes declare it (tests/test_file_inputs.py
# holds them against those declarations). A value of another type is refused by name, never coerced: JSON "false"
# is not false, 4096.7 is not 4096, true is not 1. "size": a positive integer; "count": zero or more; "?": or null.
_DECODER_TYPES = dict(vocab_size="size", hidden_size="size", intermediate_size="size", num_hidden_layers="size",
                      num_attention_heads="size", num_key_value_heads="size?", head_dim="size?", hidden_act="str",
                      max_position_embeddings="size", tie_word_embeddings="bool", rope_scaling="object?",
                      rope_parameters="object?")
_QWEN2_TYPES = _DECODER_TYPES | dict(use_sliding_window="bool", sliding_window="int?", max_window_layers="int",
                                     layer_types="strings?")
# GPT-2 and GPTBigCode configs take the common names for four of their own fields (their config classes'
# attribute_map); a name given this way wins over the own one in transformers, and so here (_unalias)
GPT2_ALIASES = dict(hidden_size="n_embd", max_position_embeddings="n_positions", num_attention_heads="n_head",
                    num_hidden_layers="n_layer")
_GPT2_TYPES = dict(vocab_size="size", n_positions="size", n_embd="size", n_layer="size", n_head="size",
                   n_inner="size?", activation_function="str", add_cross_attention="bool", tie_word_embeddings="bool",
                   hidden_size="size", max_position_embeddings="size", num_attention_heads="size",
                   num_hidden_layers="size")
_BERT_TYPES = dict(vocab_size="size", hidden_size="size", num_hidden_layers="size", num_attention_heads="size",
                   intermediate_size="size", hidden_act="str", max_position_embeddings="size", type_vocab_size="count",
                   is_decoder="bool", add_cross_attention="bool", position_embedding_type="str")
# Gemma 2 and 3 run hidden_activation (hidden_act, which their published configs also carry, is not read);
# the kinds are transformers 5's declarations (query_pre_attn_scalar an int, the soft-caps floats or null)
_GEMMA2_TYPES = _DECODER_TYPES | dict(num_key_value_heads="size", head_dim="size", hidden_activation="str",
                                      attention_bias="bool", query_pre_attn_scalar="int", sliding_window="int?",
                                      layer_types="strings?", final_logit_softcapping="float?",
                                      attn_logit_softcapping="float?", use_bidirectional_attention="bool?")
TYPES: dict[str, dict[str, str]] = {
    "gpt2": _GPT2_TYPES,
    "bert": _BERT_TYPES,
    "llama": _DECODER_TYPES | dict(attention_bias="bool", mlp_bias="bool"),
    "mistral": _DECODER_TYPES | dict(sliding_window="int?"),
    "mixtral": _DECODER_TYPES | dict(sliding_window="int?", num_experts_per_tok="size", num_local_experts="int"),
    "qwen2": _QWEN2_TYPES,
    "qwen2_moe": _QWEN2_TYPES | dict(decoder_sparse_step="size", moe_intermediate_size="size",
                                     shared_expert_intermediate_size="count", num_experts_per_tok="size",
                                     num_experts="int", mlp_only_layers="integers?", qkv_bias="bool"),
    "t5": dict(vocab_size="size", d_model="size", d_kv="size", d_ff="size", num_layers="size",
               num_decoder_layers="size?", num_heads="size", relative_attention_num_buckets="size",
               feed_forward_proj="str", tie_word_embeddings="bool"),
    "bart": dict(vocab_size="size", max_position_embeddings="size", encoder_layers="size", encoder_ffn_dim="size",
                 encoder_attention_heads="size", decoder_layers="size", decoder_ffn_dim="size",
                 decoder_attention_heads="size", activation_function="str", d_model="size",
                 tie_word_embeddings="bool", hidden_size="size", num_attention_heads="size",
                 num_hidden_layers="size"),
    # GemmaConfig declares head_dim and num_key_value_heads as int (no null); hidden_activation is the field
    # transformers 4.38-4.4x read instead of hidden_act (transformers 5 does not read it: it is only noted)
    "gemma": _DECODER_TYPES | dict(num_key_value_heads="size", head_dim="size", attention_bias="bool",
                                   hidden_activation="str?"),
    "gpt_bigcode": _GPT2_TYPES | dict(multi_query="bool"),
    "roberta": _BERT_TYPES,
    "xlm-roberta": _BERT_TYPES,
    "opt": dict(vocab_size="size", hidden_size="size", num_hidden_layers="size", ffn_dim="size",
                max_position_embeddings="size", do_layer_norm_before="bool", _remove_final_layer_norm="bool",
                word_embed_proj_dim="size?", num_attention_heads="size", activation_function="str",
                enable_bias="bool", layer_norm_elementwise_affine="bool", tie_word_embeddings="bool"),
    "granite": _DECODER_TYPES | dict(attention_bias="bool", mlp_bias="bool"),
    "phi3": _DECODER_TYPES | dict(sliding_window="int?"),
    "qwen3": _QWEN2_TYPES | dict(head_dim="size", attention_bias="bool"),
    # Qwen3MoeConfig and Olmo2Config declare no head_dim, but their attention reads one when a config gives it
    "qwen3_moe": _DECODER_TYPES | dict(num_key_value_heads="size", attention_bias="bool", use_sliding_window="bool",
                                       sliding_window="int?",
                                       decoder_sparse_step="size", moe_intermediate_size="size",
                                       num_experts_per_tok="size", num_experts="int", norm_topk_prob="bool",
                                       mlp_only_layers="integers?"),
    "olmo2": _DECODER_TYPES | dict(attention_bias="bool"),
    "gemma2": _GEMMA2_TYPES,
    "gemma3_text": _GEMMA2_TYPES | dict(sliding_window_pattern="size"),
}
COMMON_TYPES = {"_name_or_path": "str?"}  # model_type is checked first: it picks the mapper

_Size = Annotated[StrictInt, Field(gt=0)]
_Count = Annotated[StrictInt, Field(ge=0)]


def _not_an_int(value):
    if type(value) is int:  # strict pydantic takes 5 for a float; transformers 5 declares these float and refuses it
        raise ValueError("an int")
    return value


_Float = Annotated[StrictFloat, BeforeValidator(_not_an_int)]
# kind -> (strict pydantic validator, what a value of the wrong type is told, what one out of range is told)
KINDS: dict[str, tuple[TypeAdapter, str, str]] = {
    "bool": (TypeAdapter(StrictBool), "a boolean (true or false)", ""),
    "bool?": (TypeAdapter(StrictBool | None), "a boolean (true or false) or null", ""),
    "float?": (TypeAdapter(_Float | None), "a float (50.0, not 50) or null", ""),
    "int": (TypeAdapter(StrictInt), "an integer", ""),
    "int?": (TypeAdapter(StrictInt | None), "an integer or null", ""),
    "size": (TypeAdapter(_Size), "an integer", "a positive integer"),
    "size?": (TypeAdapter(_Size | None), "an integer or null", "a positive integer or null"),
    "count": (TypeAdapter(_Count), "an integer", "an integer >= 0"),
    "str": (TypeAdapter(StrictStr), "a string", ""),
    "str?": (TypeAdapter(StrictStr | None), "a string or null", ""),
    "integers?": (TypeAdapter(list[StrictInt] | None), "a list of integers or null", ""),
    "strings?": (TypeAdapter(list[StrictStr] | None), "a list of strings or null", ""),
    "object?": (TypeAdapter(dict[str, Any] | None), "an object or null", ""),
    "int|str?": (TypeAdapter(StrictInt | StrictStr | None), "an integer, a string or null", ""),
    "all|vision?": (TypeAdapter(Literal["all", "vision"] | None), "'all', 'vision' or null", ""),
}
_RANGE_ERRORS = {"greater_than", "greater_than_equal"}

# transformers' ACT2FN names -> ModelSpec.activation
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "relu": "relu", "silu": "silu", "swish": "silu"}


def find_config(path: str | Path) -> Path:
    """The config.json at `path`, or in the folder `path`."""
    path = as_path(path, "Hugging Face config")
    for candidate in (path, path / "config.json"):
        try:
            if not stat.S_ISDIR(os.stat(candidate).st_mode):
                return candidate
        except (FileNotFoundError, NotADirectoryError):
            raise TfcalcError(f"{candidate}: no such file (give a config.json or a folder holding one)") from None
        except OSError:
            return candidate  # read_text_file says what is wrong with it
    return path / "config.json"  # a folder named config.json in a folder: read_text_file refuses it by name


def read_hf_config(path: str | Path) -> SpecFile:
    """The ModelSpec of a Hugging Face config.json (or a folder holding one)."""
    path = find_config(path)
    raw = parse_json(path, read_text_file(path, "Hugging Face config"))
    if not isinstance(raw, dict):
        raise TfcalcError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    model_type = raw.get("model_type")
    if not isinstance(model_type, (str, type(None))):
        raise TfcalcError(f"{path}: model_type={show(model_type)}: expected a string, one of: {', '.join(SUPPORTED)}")
    if model_type not in DEFAULTS and model_type not in NESTED:
        raise TfcalcError(f"{path}: model_type={show(model_type)} is not supported; supported: {', '.join(SUPPORTED)}")
    notes: list[str] = []
    if model_type in NESTED:
        raw, model_type = _nested(raw, model_type, path, notes)
    types = COMMON_TYPES | TYPES[model_type]
    given = {**DEFAULTS[model_type], **raw}
    problems = [f"{path}: {line}" for key, kind in types.items() if key in given
                for line in check_type(key, given[key], kind)]
    if problems:
        raise TfcalcError("\n".join(problems))
    cfg = {key: given[key] for key in types if key in given}  # a mapper reads only fields whose type is checked
    try:
        fields = _MAPPERS[model_type](cfg, notes)
    except _Unmodelled as e:
        raise TfcalcError(f"{path}: {e}; supported: the standard {model_type} architecture") from None
    max_positions = fields.pop("context")
    seq_len = min(max_positions, SEQ_LEN_CAP)
    if seq_len < max_positions:
        notes.append(f"seq_len capped at {SEQ_LEN_CAP:,} (max_position_embeddings={max_positions:,}); "
                     "use --seq-len to change it")
    fields.setdefault("seq_len", seq_len)
    name = cfg.get("_name_or_path") or (path.parent.name if path.name == "config.json" else path.stem) or model_type
    try:
        spec = ModelSpec.model_validate({"name": name, **fields})
    except ValidationError as e:
        raise TfcalcError("\n".join(f"{path}: {line}" for line in validation_lines(e))) from None
    source = f"Hugging Face config {path} (model_type {model_type})" + "".join(f"; {n}" for n in notes)
    return SpecFile(spec, spec.name, f"{model_type} from config.json", source)


def _nested(raw: dict, model_type: str, path: Path, notes: list[str]) -> tuple[dict, str]:
    """The language model's config of a multimodal config (Gemma 3: its text_config, with the outer
    tie_word_embeddings and _name_or_path), and its model_type."""
    inner_type, key = NESTED[model_type]
    inner = raw.get(key)
    if inner is None:
        inner = {}
    if not isinstance(inner, dict):
        raise TfcalcError(f"{path}: {key}={show(inner)}: expected an object or null")
    if inner.get("model_type", inner_type) != inner_type:
        raise TfcalcError(f"{path}: {key}.model_type={show(inner['model_type'])}: expected {inner_type!r}")
    outer = {k: raw[k] for k in ("tie_word_embeddings", "_name_or_path") if k in raw}
    notes.append(f"{model_type}: the language model read from {key} ({inner_type}); the other towers (vision, "
                 "audio) and the multimodal projectors are not counted")
    return {**inner, **outer, "model_type": inner_type}, inner_type


def check_type(key: str, value: Any, kind: str) -> list[str]:
    """['key=value: expected ...'] when `value` is not of `kind` (KINDS), strictly; else []."""
    adapter, expected, in_range = KINDS[kind]
    try:
        adapter.validate_python(value, strict=True)
    except ValidationError as e:
        out_of_range = all(err["type"] in _RANGE_ERRORS or err["type"] == "none_required" for err in e.errors())
        return [f"{key}={show(value)}: expected {in_range if out_of_range and in_range else expected}"]
    return []


def show(value: Any, width: int = 80) -> str:
    """repr(value), cut to `width` characters: a message names the value without repeating a whole file."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<a {type(value).__name__} nested too deeply to show>"
    except ValueError:  # an integer beyond Python's digit limit for str()
        text = f"<an integer of {value.bit_length():,} bits>"
    return text if len(text) <= width else text[:width - 3] + "..."


class _Unmodelled(Exception):
    pass


# The mappers below read `cfg`: DEFAULTS laid under the file's fields, each of its JSON type (TYPES), checked.
# They read values as they are: no bool(), int() or truthiness that would turn "false" into True.

def _activation(cfg: dict, key: str) -> str:
    value = cfg[key]
    if value not in ACTIVATIONS:
        raise _Unmodelled(f"{key}={show(value)} is not modelled (known: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[value]


def _refuse_if(cfg: dict, key: str, bad: bool, why: str) -> None:
    if bad:
        raise _Unmodelled(f"{key}={show(cfg.get(key))} is not modelled: {why}")


def _unalias(cfg: dict, aliases: dict[str, str], notes: list[str]) -> dict:
    """`cfg` with each common name a config gave (hidden_size, ...) read into the field it stands for (n_embd, ...):
    transformers' attribute_map sets that field from it, over the field's own value."""
    cfg = dict(cfg)
    for alias, own in aliases.items():
        if alias in cfg:
            notes.append(f"{alias}={show(cfg[alias])} read as {own} (transformers sets {own} from it, over any {own} "
                         "given)")
            cfg[own] = cfg.pop(alias)
    return cfg


def _gpt2(cfg: dict, notes: list[str]) -> dict:
    cfg = _unalias(cfg, GPT2_ALIASES, notes)
    _refuse_if(cfg, "add_cross_attention", cfg["add_cross_attention"] is True, "cross-attention adds layers")
    n_embd = cfg["n_embd"]
    return dict(n_layers=cfg["n_layer"], d_model=n_embd, n_heads=cfg["n_head"],
                d_ff=cfg["n_inner"] if cfg["n_inner"] is not None else 4 * n_embd,
                vocab_size=cfg["vocab_size"], max_positions=cfg["n_positions"],
                activation=_activation(cfg, "activation_function"), tie_embeddings=cfg["tie_word_embeddings"],
                context=cfg["n_positions"])


def _bert(cfg: dict, notes: list[str]) -> dict:
    # transformers 4 read this field (transformers 5 dropped it and supports absolute positions alone)
    _refuse_if(cfg, "position_embedding_type", cfg.get("position_embedding_type", "absolute") != "absolute",
               "relative position embeddings add a distance table")
    _refuse_if(cfg, "add_cross_attention", cfg["add_cross_attention"] is True, "cross-attention adds layers")
    positions = cfg["max_position_embeddings"]
    return dict(n_layers=cfg["num_hidden_layers"], d_model=cfg["hidden_size"],
                n_heads=cfg["num_attention_heads"], d_ff=cfg["intermediate_size"],
                vocab_size=cfg["vocab_size"], max_positions=positions, activation=_activation(cfg, "hidden_act"),
                n_token_types=cfg["type_vocab_size"], embedding_norm=True, norm_position="post",
                final_norm=False, pooler=True, causal=cfg["is_decoder"], lm_head=False, context=positions)


def _decoder(cfg: dict, notes: list[str]) -> dict:
    """The LLaMA family: pre-norm RMSNorm, gated MLP, rotary positions, GQA; shared by all decoders below."""
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads")
    fields = dict(n_layers=cfg["num_hidden_layers"], d_model=cfg["hidden_size"], n_heads=heads,
                  n_kv_heads=kv_heads if kv_heads is not None else heads,
                  d_ff=cfg["intermediate_size"], vocab_size=cfg["vocab_size"], mlp="gated",
                  activation=_activation(cfg, "hidden_act"), norm="rmsnorm", positions="rotary", bias=False,
                  tie_embeddings=cfg["tie_word_embeddings"], context=cfg["max_position_embeddings"])
    if cfg.get("head_dim") is not None:
        fields["d_head"] = cfg["head_dim"]
    if any(cfg.get(key) not in (None, {}) for key in ("rope_scaling", "rope_parameters")):
        notes.append("rope scaling/parameters read: they change rotary frequencies, not shapes or counts")
    return fields


def _llama(cfg: dict, notes: list[str]) -> dict:
    fields = _decoder(cfg, notes)
    fields |= dict(bias=cfg["attention_bias"], mlp_bias=cfg["mlp_bias"])
    return fields


def _window(cfg: dict, fields: dict, notes: list[str], pattern: list[str] | None = None,
            last: int | None = None) -> None:
    """A sliding window in every block, in the blocks `pattern` (cycled) marks local, or in the `last` blocks."""
    window = cfg.get("sliding_window")
    L = fields["n_layers"]
    if pattern is not None:  # the pattern cycled over the L blocks: its whole cycles, then its first L % n entries
        cycles, rest = divmod(L, len(pattern))
        layers = cycles * pattern.count("local") + pattern[:rest].count("local")
    else:
        layers = L if last is None else last
    if window is None or not layers:
        return
    fields["sliding_window"] = window
    if pattern is not None:
        fields["attention_pattern"] = pattern
    elif last is not None:
        fields["sliding_window_layers"] = last
    notes.append(f"sliding_window={window} in {layers} of {L} blocks: forward counts full N x N attention, "
                 "forward_windowed the windowed figure")


def _mistral(cfg: dict, notes: list[str]) -> dict:
    fields = _decoder(cfg, notes)
    _window(cfg, fields, notes)
    return fields


def _mixtral(cfg: dict, notes: list[str]) -> dict:
    experts = cfg["num_local_experts"]
    # transformers' MixtralSparseMoeBlock builds a router (num_local_experts x hidden_size) and stacked expert weights
    # for any number of experts; ModelSpec's n_experts=1 is a dense MLP with no router
    _refuse_if(cfg, "num_local_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers "
               "builds a router even for 1 expert, which a dense MLP has not")
    fields = _mistral(cfg, notes)
    fields |= dict(n_experts=experts, top_k=cfg["num_experts_per_tok"])
    return fields


QWEN_LAYER_TYPES = ("full_attention", "sliding_attention")
PATTERN_LIMIT = 65_536  # blocks a per-block attention pattern is written for (a config's rule, not its file)


def layer_kinds(cfg: dict, L: int) -> list[str]:
    """The config's layer_types, one entry per block (full_attention or sliding_attention), checked, as the spec's
    'global' and 'local'."""
    types = cfg["layer_types"]
    _refuse_if(cfg, "layer_types", len(types) != L, f"expected a list of num_hidden_layers={L} entries")
    unknown = sorted(set(types) - set(QWEN_LAYER_TYPES))
    _refuse_if(cfg, "layer_types", bool(unknown), f"entries {', '.join(map(show, unknown))}; known: "
               f"{', '.join(QWEN_LAYER_TYPES)}")
    return ["local" if t == "sliding_attention" else "global" for t in types]


def shortest_cycle(kinds: list[str]) -> list[str]:
    """The shortest pattern that, cycled, gives `kinds` (block i: pattern[i % len(pattern)]): its length is the
    list's smallest period, len - the longest proper border (Knuth-Morris-Pratt's prefix function, linear time)."""
    border = [0] * len(kinds)
    for i in range(1, len(kinds)):
        k = border[i - 1]
        while k and kinds[i] != kinds[k]:
            k = border[k - 1]
        border[i] = k + (kinds[i] == kinds[k])
    return kinds[:len(kinds) - border[-1]] if kinds else kinds


def _qwen_window(cfg: dict, fields: dict, notes: list[str], alternating: bool) -> None:
    """Blocks with sliding attention, by `layer_types` when given, else by transformers' rule for the type.

    transformers keeps sliding_window only with use_sliding_window=true (Qwen2 sets it to None, Qwen2-MoE to 0)."""
    L = fields["n_layers"]
    window_on = cfg["use_sliding_window"] is True and cfg.get("sliding_window") is not None
    types = cfg.get("layer_types")
    if types is not None:
        kinds = layer_kinds(cfg, L)
        _refuse_if(cfg, "layer_types", "sliding_attention" in types and not window_on,
                   f"sliding_attention blocks need use_sliding_window=true and a sliding_window (got "
                   f"use_sliding_window={show(cfg['use_sliding_window'])}, sliding_window="
                   f"{show(cfg.get('sliding_window'))}): transformers then has no window for them")
        return _window(cfg, fields, notes, kinds)
    if not window_on:
        return None
    limit = cfg["max_window_layers"]
    if alternating:  # Qwen2-MoE: every other block below max_window_layers
        if limit >= L:  # block i local when i is even: a cycle of two
            return _window(cfg, fields, notes, ["local", "global"] if L > 1 else ["local"])
        _refuse_if(cfg, "num_hidden_layers", L > PATTERN_LIMIT, f"with use_sliding_window=true and max_window_layers="
                   f"{limit}, tfcalc writes the windowed blocks per block, for at most {PATTERN_LIMIT:,} blocks")
        return _window(cfg, fields, notes, ["local" if (i + 1) % 2 and i < limit else "global" for i in range(L)])
    return _window(cfg, fields, notes, last=min(L, max(0, L - limit)))  # Qwen2: the blocks from max_window_layers on


def _qwen2(cfg: dict, notes: list[str]) -> dict:
    fields = _decoder(cfg, notes) | dict(qkv_bias=True)
    _qwen_window(cfg, fields, notes, alternating=False)
    return fields


def _qwen2_moe(cfg: dict, notes: list[str]) -> dict:
    _refuse_if(cfg, "mlp_only_layers", cfg["mlp_only_layers"] not in (None, []),
               "a list of dense blocks; tfcalc models the first k (first_dense_layers) or every n-th "
               "(decoder_sparse_step)")
    experts = cfg["num_experts"]
    _refuse_if(cfg, "num_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers builds "
               "a router even for 1 expert, and dense blocks for 0")
    fields = _decoder(cfg, notes)
    shared = cfg["shared_expert_intermediate_size"]
    _refuse_if(cfg, "shared_expert_intermediate_size", shared == 0,
               "transformers keeps the shared expert's gate even with no shared expert width")
    fields |= dict(qkv_bias=cfg["qkv_bias"], n_experts=experts,
                   top_k=cfg["num_experts_per_tok"], d_expert=cfg["moe_intermediate_size"])
    fields |= dict(n_shared_experts=1, d_shared_expert=shared, shared_expert_gate=True)
    step = cfg["decoder_sparse_step"]
    if step != 1:
        fields["moe_every"] = step
    _qwen_window(cfg, fields, notes, alternating=True)
    return fields


def _t5(cfg: dict, notes: list[str]) -> dict:
    """T5 v1.0 (ReLU) and v1.1 / FLAN (gated-gelu): relative position bias, pre-norm RMSNorm, no biases."""
    proj = cfg["feed_forward_proj"]
    _refuse_if(cfg, "feed_forward_proj", proj not in ("relu", "gated-gelu", "gelu", "gated-relu", "gated-silu"),
               "known: relu, gelu, gated-gelu, gated-relu, gated-silu")
    gated = proj.startswith("gated-")
    # transformers: gated-gelu runs gelu_new (the tanh approximation)
    activation = "gelu_tanh" if proj == "gated-gelu" else proj.removeprefix("gated-")
    layers = cfg["num_layers"]
    decoder = cfg["num_decoder_layers"] if cfg["num_decoder_layers"] is not None else layers
    tie = cfg.get("tie_word_embeddings", True)
    if tie is False:
        notes.append("tie_word_embeddings=false: the head is counted untied, as the v1.1/FLAN checkpoints hold it "
                     "(transformers 5 builds T5 from a config with a tied head: vocab_size x d_model fewer)")
    return dict(n_encoder_layers=layers, n_layers=decoder, d_model=cfg["d_model"],
                n_heads=cfg["num_heads"], d_head=cfg["d_kv"], d_ff=cfg["d_ff"],
                vocab_size=cfg["vocab_size"], mlp="gated" if gated else "standard", activation=activation,
                norm="rmsnorm", norm_position="pre", final_norm=True, bias=False, positions="relative",
                relative_attention_buckets=cfg["relative_attention_num_buckets"], tie_embeddings=tie,
                context=512)


# BartConfig's attribute_map (also mBART's and Marian's): these names set the field they stand for, over its own value
BART_ALIASES = dict(hidden_size="d_model", num_attention_heads="encoder_attention_heads",
                    num_hidden_layers="encoder_layers")


def _bart(cfg: dict, notes: list[str]) -> dict:
    """BART: post-norm, biases, learned positions with an offset of 2 rows, a norm after each embedding."""
    cfg = _unalias(cfg, BART_ALIASES, notes)
    for field in ("attention_heads", "ffn_dim"):
        _refuse_if(cfg, f"decoder_{field}", cfg[f"encoder_{field}"] != cfg[f"decoder_{field}"],
                   f"encoder_{field}={show(cfg[f'encoder_{field}'])} differs; tfcalc gives both stacks one width")
    _refuse_if(cfg, "tie_word_embeddings", cfg["tie_word_embeddings"] is not True,
               "transformers then unties the encoder's, the decoder's and the head's tables from the shared one")
    positions = cfg["max_position_embeddings"]
    notes.append("learned positions: max_position_embeddings + 2 rows per stack (BART's offset)")
    return dict(n_encoder_layers=cfg["encoder_layers"], n_layers=cfg["decoder_layers"],
                d_model=cfg["d_model"], n_heads=cfg["encoder_attention_heads"],
                d_ff=cfg["encoder_ffn_dim"], vocab_size=cfg["vocab_size"], positions="learned",
                max_positions=positions + 2, embedding_norm=True, norm="layernorm", norm_position="post",
                final_norm=False, bias=True, activation=_activation(cfg, "activation_function"), context=positions)


def _gemma(cfg: dict, notes: list[str]) -> dict:
    """Gemma: the llama layout with GeGLU, a head_dim of its own, a tied head by default, RMSNorm in its (1 + w) form
    (one weight per channel, as RMSNorm) and the token embedding scaled by sqrt(hidden_size) (elementwise: no
    parameters, no matmul)."""
    if cfg["hidden_act"] == "gelu":  # GemmaConfig turns the official releases' legacy "gelu" into the tanh form
        notes.append("hidden_act='gelu' read as gelu_pytorch_tanh, as transformers' GemmaConfig does")
        cfg = cfg | {"hidden_act": "gelu_pytorch_tanh"}
    fields = _decoder(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False)
    legacy = cfg.get("hidden_activation")
    if legacy is not None and ACTIVATIONS.get(legacy) != fields["activation"]:
        notes.append(f"hidden_activation={show(legacy)} not read: transformers 5's GemmaMLP runs hidden_act "
                     "(activations have no parameters and no matmul)")
    return fields


def _gpt_bigcode(cfg: dict, notes: list[str]) -> dict:
    """GPTBigCode (SantaCoder, StarCoder): GPT-2's layout with one key/value head when multi_query is true."""
    fields = _gpt2(cfg, notes)
    fields["n_kv_heads"] = 1 if cfg["multi_query"] is True else fields["n_heads"]
    return fields


def _roberta(cfg: dict, notes: list[str]) -> dict:
    """RoBERTa and XLM-RoBERTa: BERT's layout. Position ids start at padding_idx + 1 (2 with pad_token_id=1), so
    max_position_embeddings (514 in the published configs) is the table's rows and 2 more than the longest input."""
    fields = _bert(cfg, notes)
    fields["context"] = max(1, cfg["max_position_embeddings"] - 2)
    notes.append("learned positions: max_position_embeddings rows, numbered from padding_idx + 1 (default seq_len "
                 "max_position_embeddings - 2)")
    return fields


def _opt(cfg: dict, notes: list[str]) -> dict:
    """OPT: learned positions with an offset of 2 rows, biases by enable_bias, pre-norm (with a final norm) or
    post-norm (without one) by do_layer_norm_before, a tied head by default."""
    hidden = cfg["hidden_size"]
    proj = cfg["word_embed_proj_dim"]
    _refuse_if(cfg, "word_embed_proj_dim", proj is not None and proj != hidden,
               f"it differs from hidden_size={hidden}: transformers then builds the token table and head "
               "that wide, with project_in and project_out linears to and from hidden_size, a layout tfcalc does not "
               "have")
    _refuse_if(cfg, "layer_norm_elementwise_affine", cfg["layer_norm_elementwise_affine"] is not True,
               "layer norms without weight or bias; tfcalc's layernorm has both")
    pre = cfg["do_layer_norm_before"] is True
    positions = cfg["max_position_embeddings"]
    notes.append("learned positions: max_position_embeddings + 2 rows (OPT's offset)")
    return dict(n_layers=cfg["num_hidden_layers"], d_model=hidden, n_heads=cfg["num_attention_heads"],
                d_ff=cfg["ffn_dim"], vocab_size=cfg["vocab_size"], positions="learned", max_positions=positions + 2,
                norm="layernorm", norm_position="pre" if pre else "post",
                final_norm=pre and cfg["_remove_final_layer_norm"] is not True, bias=cfg["enable_bias"],
                activation=_activation(cfg, "activation_function"), tie_embeddings=cfg["tie_word_embeddings"],
                context=positions)


def _granite(cfg: dict, notes: list[str]) -> dict:
    """Granite: the llama layout; its embedding, residual and attention multipliers and logits_scaling scale
    activations (no parameters, no matmul) and are not read."""
    return _llama(cfg, notes)


def _phi3(cfg: dict, notes: list[str]) -> dict:
    """Phi-3 and Phi-4: the llama layout without biases; the fused qkv_proj and gate_up_proj hold the same weights and
    do the same multiply-adds as separate q, k, v and gate, up projections. A sliding_window is in every block;
    partial_rotary_factor changes which channels rotate, not shapes."""
    fields = _decoder(cfg, notes)
    _window(cfg, fields, notes)
    return fields


def _qwen3(cfg: dict, notes: list[str]) -> dict:
    """Qwen3: the llama layout with an RMSNorm on each query and key head (weight [head_dim] each) before rotary,
    attention_bias on q, k, v and o, an explicit head_dim, Qwen2's sliding-window rule."""
    fields = _decoder(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False, qk_norm="head")
    _qwen_window(cfg, fields, notes, alternating=False)
    return fields


def _qwen3_moe(cfg: dict, notes: list[str]) -> dict:
    """Qwen3-MoE: Qwen3's attention, routed experts (no shared expert), dense blocks of intermediate_size where
    decoder_sparse_step or mlp_only_layers say. norm_topk_prob renormalises the routing weights: no parameters."""
    experts = cfg["num_experts"]
    _refuse_if(cfg, "num_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers builds "
               "a router even for 1 expert, and dense blocks for 0")
    fields = _decoder(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False, qk_norm="head",
                                         n_experts=experts, top_k=cfg["num_experts_per_tok"],
                                         d_expert=cfg["moe_intermediate_size"])
    dense = cfg["mlp_only_layers"] or []
    _refuse_if(cfg, "mlp_only_layers", dense != list(range(len(dense))) or len(dense) > fields["n_layers"],
               "tfcalc models dense blocks as the first k (mlp_only_layers [0, 1, .., k-1]) or every n-th "
               "(decoder_sparse_step)")
    if dense:
        fields["first_dense_layers"] = len(dense)
    if cfg["decoder_sparse_step"] != 1:
        fields["moe_every"] = cfg["decoder_sparse_step"]
    if cfg["use_sliding_window"] is True:  # transformers keeps sliding_window only then, for every block
        _window(cfg, fields, notes)
    return fields


def _olmo2(cfg: dict, notes: list[str]) -> dict:
    """OLMo 2: the llama layout with its norms on each sublayer's output, before the residual add
    (post_attention_layernorm, post_feedforward_layernorm; no input norms), and an RMSNorm over all of q
    ([heads * head_dim]) and all of k ([kv_heads * head_dim]) before rotary."""
    return _decoder(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False, qk_norm="full",
                                       norm_position="output")


GEMMA_LAYER_TYPES = QWEN_LAYER_TYPES


def _gemma2(cfg: dict, notes: list[str], pattern: list[str] | None = None) -> dict:
    """Gemma 2: sandwich norms (input_layernorm and post_attention_layernorm around attention,
    pre_feedforward_layernorm and post_feedforward_layernorm around the MLP), GeGLU by hidden_activation, a
    head_dim of its own, local (sliding) and global blocks by layer_types (default: alternating, local first).
    RMSNorm's (1 + w) form has one weight per channel. The embedding scale sqrt(hidden_size), query_pre_attn_scalar
    and the soft-capping of attention scores and final logits (tanh) are elementwise, with no parameters: not in
    forward FLOPs (not matmuls), nor in the non-matmul estimate or the training-memory plan."""
    _refuse_if(cfg, "use_bidirectional_attention", cfg.get("use_bidirectional_attention") is True,
               "tfcalc's windows are causal")
    activation = _activation(cfg, "hidden_activation")  # first: a refusal names the field the file gave
    fields = _decoder(cfg | {"hidden_act": cfg["hidden_activation"]}, notes)
    fields |= dict(activation=activation, bias=cfg["attention_bias"], mlp_bias=False, norm_position="sandwich")
    act = cfg.get("hidden_act")
    if act is not None and act != cfg["hidden_activation"]:
        notes.append(f"hidden_act={show(act)} not read: transformers runs hidden_activation")
    L = fields["n_layers"]
    types = cfg.get("layer_types")
    if types is not None:
        pattern = layer_kinds(cfg, L)
    _window(cfg, fields, notes, pattern or ["local", "global"])
    caps = [f"{key}={cfg[key]}" for key in ("attn_logit_softcapping", "final_logit_softcapping")
            if cfg.get(key) is not None]
    if caps:
        notes.append(f"{' and '.join(caps)}: tanh soft-capping, elementwise (no parameters, not counted)")
    return fields


def _gemma3_text(cfg: dict, notes: list[str]) -> dict:
    """Gemma 3's language model: Gemma 2's sandwich norms plus an RMSNorm on each query and key head (weight
    [head_dim] each); blocks local except every sliding_window_pattern-th (default 6: five local, one global)
    unless layer_types says. Its local and global rotary bases change frequencies, not shapes."""
    every = min(cfg.get("sliding_window_pattern", 6), cfg["num_hidden_layers"] + 1)  # beyond L: no global block
    pattern = ["global" if (i + 1) % every == 0 else "local" for i in range(every)]
    return _gemma2(cfg, notes, pattern) | dict(qk_norm="head")


_MAPPERS: dict[str, Any] = {"gpt2": _gpt2, "bert": _bert, "llama": _llama, "mistral": _mistral, "mixtral": _mixtral,
            "qwen2": _qwen2, "qwen2_moe": _qwen2_moe, "t5": _t5, "bart": _bart, "gemma": _gemma,
            "gpt_bigcode": _gpt_bigcode, "roberta": _roberta, "xlm-roberta": _roberta, "opt": _opt,
            "granite": _granite, "phi3": _phi3, "qwen3": _qwen3, "qwen3_moe": _qwen3_moe, "olmo2": _olmo2,
            "gemma2": _gemma2, "gemma3_text": _gemma3_text}

# transformers' module names -> tfcalc components (`check --hf-config`; tfcalc/verify/hf_model.py). A rule is (regex
# over a module's path, component); the LLaMA layout's tables are here, where the family modules can reach them.
DECODER_COMPONENTS = [  # the LLaMA layout and its descendants; the norms around a block differ per family (below)
    (r"model\.embed_tokens", "embedding/token"),
    (r"model\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj|qkv_proj)", "attention/qkv"),
    (r"model\.layers\.\d+\.self_attn\.q_norm", "attention/q_norm"),
    (r"model\.layers\.\d+\.self_attn\.k_norm", "attention/k_norm"),
    (r"model\.layers\.\d+\.self_attn", "attention/core"),
    (r"model\.layers\.\d+\.self_attn\.o_proj", "attention/out"),
    (r"model\.layers\.\d+\.mlp\.gate_proj", "mlp/gate"),
    (r"model\.layers\.\d+\.mlp\.up_proj", "mlp/up"),
    (r"model\.layers\.\d+\.mlp\.gate_up_proj", "mlp/gate+up"),  # Phi-3's fused gate and up
    (r"model\.layers\.\d+\.mlp\.down_proj", "mlp/down"),
    (r"model\.layers\.\d+\.mlp\.gate", "moe/router"),
    (r"model\.layers\.\d+\.mlp\.experts", "moe/experts"),
    (r"model\.layers\.\d+\.mlp\.shared_expert\.(gate_proj|up_proj|down_proj)", "moe/shared_experts"),
    (r"model\.layers\.\d+\.mlp\.shared_expert_gate", "moe/shared_gate"),
    (r"model\.norm", "final_norm"),
    (r"lm_head", "head"),
]
LLAMA_COMPONENTS = [  # pre-norm: one norm before attention, one before the MLP
    (r"model\.layers\.\d+\.input_layernorm", "attention/norm"),
    (r"model\.layers\.\d+\.post_attention_layernorm", "mlp/norm"),
    *DECODER_COMPONENTS,
]
GEMMA2_COMPONENTS = [  # sandwich norms: before and after attention, before and after the MLP
    (r"model\.layers\.\d+\.input_layernorm", "attention/norm"),
    (r"model\.layers\.\d+\.post_attention_layernorm", "attention/post_norm"),
    (r"model\.layers\.\d+\.pre_feedforward_layernorm", "mlp/norm"),
    (r"model\.layers\.\d+\.post_feedforward_layernorm", "mlp/post_norm"),
    *DECODER_COMPONENTS,
]
OLMO2_COMPONENTS = [  # norms after attention and after the MLP only
    (r"model\.layers\.\d+\.post_attention_layernorm", "attention/post_norm"),
    (r"model\.layers\.\d+\.post_feedforward_layernorm", "mlp/post_norm"),
    *DECODER_COMPONENTS,
]

# the tables of the families registered from tfcalc/families/ (the families above keep theirs in
# tfcalc/verify/hf_model.py); model types that are encoder-decoders
COMPONENTS: dict[str, list[tuple[str, str]]] = {}
ENCODER_DECODER: set[str] = {"t5", "bart"}


def register(model_type: str, defaults: dict[str, Any], types: dict[str, str], mapper,
             components: list[tuple[str, str]] | None = None, encoder_decoder: bool = False) -> None:
    """Add a model_type: transformers' defaults for the fields it reads, their JSON kinds, the mapper to ModelSpec
    fields and (for `check --hf-config`) the table of transformers' module names -> tfcalc components (a rule is
    (regex over a module's path, component), as in tfcalc/verify/hf_model.py)."""
    assert model_type not in DEFAULTS, model_type
    assert set(defaults) <= set(types), (model_type, sorted(set(defaults) - set(types)))
    DEFAULTS[model_type], TYPES[model_type], _MAPPERS[model_type] = defaults, types, mapper
    if components is not None:
        COMPONENTS[model_type] = components
    if encoder_decoder:
        ENCODER_DECODER.add(model_type)


from . import families  # noqa: E402,F401  (registers the families in tfcalc/families/)

SUPPORTED = (*DEFAULTS, *NESTED)
