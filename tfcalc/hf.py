"""Read a Hugging Face `config.json` into a ModelSpec: no network, no weights, no transformers.

Each supported `model_type` starts from the defaults transformers' config class uses for a field the file leaves
out (DEFAULTS below; tests/test_hf.py holds them against transformers' own classes). A field whose value would
change the shapes in a way ModelSpec does not model is refused, by name: never a silently wrong count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .errors import TfcalcError, validation_lines
from .loading import SpecFile
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
}
SUPPORTED = tuple(DEFAULTS)

# transformers' ACT2FN names -> ModelSpec.activation
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "relu": "relu", "silu": "silu", "swish": "silu"}


def find_config(path: str | Path) -> Path:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise TfcalcError(f"{path}: no such file (give a config.json or a folder holding one)")
    return path


def read_hf_config(path: str | Path) -> SpecFile:
    """The ModelSpec of a Hugging Face config.json (or a folder holding one)."""
    path = find_config(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TfcalcError(f"{path}: line {e.lineno}, column {e.colno}: invalid JSON: {e.msg}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TfcalcError(f"{path}: cannot read: {e}") from None
    if not isinstance(raw, dict):
        raise TfcalcError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    model_type = raw.get("model_type")
    if model_type not in DEFAULTS:
        raise TfcalcError(f"{path}: model_type={model_type!r} is not supported; supported: {', '.join(SUPPORTED)}")
    cfg = {**DEFAULTS[model_type], **raw}
    notes: list[str] = []
    try:
        fields = _MAPPERS[model_type](cfg, notes)
    except _Unmodelled as e:
        raise TfcalcError(f"{path}: {e}; supported: the standard {model_type} architecture") from None
    except (TypeError, ValueError) as e:
        raise TfcalcError(f"{path}: {e}") from None
    max_positions = fields.pop("context")
    seq_len = min(max_positions, SEQ_LEN_CAP)
    if seq_len < max_positions:
        notes.append(f"seq_len capped at {SEQ_LEN_CAP:,} (max_position_embeddings={max_positions:,}); "
                     "use --seq-len to change it")
    fields.setdefault("seq_len", seq_len)
    name = raw.get("_name_or_path") or (path.parent.name if path.name == "config.json" else path.stem) or model_type
    try:
        spec = ModelSpec.model_validate({"name": str(name), **fields})
    except ValidationError as e:
        raise TfcalcError("\n".join(f"{path}: {line}" for line in validation_lines(e))) from None
    source = f"Hugging Face config {path} (model_type {model_type})" + "".join(f"; {n}" for n in notes)
    return SpecFile(spec, spec.name, f"{model_type} from config.json", source)


class _Unmodelled(Exception):
    pass


def _int(cfg: dict, key: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key}={value!r}: expected an integer")
    return value


def _activation(cfg: dict, key: str) -> str:
    value = cfg[key]
    if value not in ACTIVATIONS:
        raise _Unmodelled(f"{key}={value!r} is not modelled (known: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[value]


def _refuse_if(cfg: dict, key: str, bad: bool, why: str) -> None:
    if bad:
        raise _Unmodelled(f"{key}={cfg.get(key)!r} is not modelled: {why}")


def _gpt2(cfg: dict, notes: list[str]) -> dict:
    _refuse_if(cfg, "add_cross_attention", cfg["add_cross_attention"], "cross-attention adds layers")
    n_embd = _int(cfg, "n_embd")
    return dict(n_layers=_int(cfg, "n_layer"), d_model=n_embd, n_heads=_int(cfg, "n_head"),
                d_ff=cfg["n_inner"] if cfg["n_inner"] is not None else 4 * n_embd,
                vocab_size=_int(cfg, "vocab_size"), max_positions=_int(cfg, "n_positions"),
                activation=_activation(cfg, "activation_function"), tie_embeddings=bool(cfg["tie_word_embeddings"]),
                context=_int(cfg, "n_positions"))


def _bert(cfg: dict, notes: list[str]) -> dict:
    # transformers 4 read this field (transformers 5 dropped it and supports absolute positions alone)
    _refuse_if(cfg, "position_embedding_type", cfg.get("position_embedding_type", "absolute") != "absolute",
               "relative position embeddings add a distance table")
    _refuse_if(cfg, "add_cross_attention", cfg["add_cross_attention"], "cross-attention adds layers")
    positions = _int(cfg, "max_position_embeddings")
    return dict(n_layers=_int(cfg, "num_hidden_layers"), d_model=_int(cfg, "hidden_size"),
                n_heads=_int(cfg, "num_attention_heads"), d_ff=_int(cfg, "intermediate_size"),
                vocab_size=_int(cfg, "vocab_size"), max_positions=positions, activation=_activation(cfg, "hidden_act"),
                n_token_types=_int(cfg, "type_vocab_size"), embedding_norm=True, norm_position="post",
                final_norm=False, pooler=True, causal=bool(cfg["is_decoder"]), lm_head=False, context=positions)


def _decoder(cfg: dict, notes: list[str]) -> dict:
    """The LLaMA family: pre-norm RMSNorm, gated MLP, rotary positions, GQA; shared by all decoders below."""
    heads = _int(cfg, "num_attention_heads")
    fields = dict(n_layers=_int(cfg, "num_hidden_layers"), d_model=_int(cfg, "hidden_size"), n_heads=heads,
                  n_kv_heads=_int(cfg, "num_key_value_heads") if cfg.get("num_key_value_heads") is not None else heads,
                  d_ff=_int(cfg, "intermediate_size"), vocab_size=_int(cfg, "vocab_size"), mlp="gated",
                  activation=_activation(cfg, "hidden_act"), norm="rmsnorm", positions="rotary", bias=False,
                  tie_embeddings=bool(cfg["tie_word_embeddings"]), context=_int(cfg, "max_position_embeddings"))
    if cfg.get("head_dim") is not None:
        fields["d_head"] = _int(cfg, "head_dim")
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if scaling:
        notes.append("rope scaling/parameters read: they change rotary frequencies, not shapes or counts")
    return fields


def _llama(cfg: dict, notes: list[str]) -> dict:
    fields = _decoder(cfg, notes)
    fields |= dict(bias=bool(cfg["attention_bias"]), mlp_bias=bool(cfg["mlp_bias"]))
    return fields


def _window(cfg: dict, fields: dict, notes: list[str], pattern: list[str] | None = None,
            last: int | None = None) -> None:
    """A sliding window in every block, in the blocks `pattern` (cycled) marks local, or in the `last` blocks."""
    window = cfg.get("sliding_window")
    L = fields["n_layers"]
    layers = L if pattern is None and last is None else last if last is not None else pattern.count("local")
    if window is None or not layers:
        return
    fields["sliding_window"] = _int(cfg, "sliding_window")
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
    fields = _mistral(cfg, notes)
    fields |= dict(n_experts=_int(cfg, "num_local_experts"), top_k=_int(cfg, "num_experts_per_tok"))
    return fields


def _qwen_window(cfg: dict, fields: dict, notes: list[str], alternating: bool) -> None:
    """Blocks with sliding attention, by `layer_types` when given, else by transformers' rule for the type."""
    L = fields["n_layers"]
    if cfg.get("layer_types"):
        types = cfg["layer_types"]
        _refuse_if(cfg, "layer_types", not isinstance(types, list) or len(types) != L,
                   f"expected a list of num_hidden_layers={L} entries")
        return _window(cfg, fields, notes, ["local" if t == "sliding_attention" else "global" for t in types])
    if not cfg["use_sliding_window"] or cfg.get("sliding_window") is None:
        return None
    limit = _int(cfg, "max_window_layers")
    if alternating:  # Qwen2-MoE: every other block below max_window_layers
        return _window(cfg, fields, notes, ["local" if (i + 1) % 2 and i < limit else "global" for i in range(L)])
    return _window(cfg, fields, notes, last=max(0, L - limit))  # Qwen2: the blocks from max_window_layers on


def _qwen2(cfg: dict, notes: list[str]) -> dict:
    fields = _decoder(cfg, notes) | dict(qkv_bias=True)
    _qwen_window(cfg, fields, notes, alternating=False)
    return fields


def _qwen2_moe(cfg: dict, notes: list[str]) -> dict:
    _refuse_if(cfg, "mlp_only_layers", bool(cfg["mlp_only_layers"]),
               "a list of dense blocks; tfcalc models the first k (first_dense_layers) or every n-th "
               "(decoder_sparse_step)")
    fields = _decoder(cfg, notes)
    shared = _int(cfg, "shared_expert_intermediate_size")
    _refuse_if(cfg, "shared_expert_intermediate_size", shared == 0,
               "transformers keeps the shared expert's gate even with no shared expert width")
    fields |= dict(qkv_bias=bool(cfg["qkv_bias"]), n_experts=_int(cfg, "num_experts"),
                   top_k=_int(cfg, "num_experts_per_tok"), d_expert=_int(cfg, "moe_intermediate_size"))
    fields |= dict(n_shared_experts=1, d_shared_expert=shared, shared_expert_gate=True)
    step = _int(cfg, "decoder_sparse_step")
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
    layers = _int(cfg, "num_layers")
    decoder = _int(cfg, "num_decoder_layers") if cfg["num_decoder_layers"] is not None else layers
    tie = cfg.get("tie_word_embeddings", True)
    if tie is False:
        notes.append("tie_word_embeddings=false: the head is counted untied, as the v1.1/FLAN checkpoints hold it "
                     "(transformers 5 builds T5 from a config with a tied head: vocab_size x d_model fewer)")
    return dict(n_encoder_layers=layers, n_layers=decoder, d_model=_int(cfg, "d_model"),
                n_heads=_int(cfg, "num_heads"), d_head=_int(cfg, "d_kv"), d_ff=_int(cfg, "d_ff"),
                vocab_size=_int(cfg, "vocab_size"), mlp="gated" if gated else "standard", activation=activation,
                norm="rmsnorm", norm_position="pre", final_norm=True, bias=False, positions="relative",
                relative_attention_buckets=_int(cfg, "relative_attention_num_buckets"), tie_embeddings=tie is not False,
                context=512)


def _bart(cfg: dict, notes: list[str]) -> dict:
    """BART: post-norm, biases, learned positions with an offset of 2 rows, a norm after each embedding."""
    for field in ("attention_heads", "ffn_dim"):
        _refuse_if(cfg, f"decoder_{field}", cfg[f"encoder_{field}"] != cfg[f"decoder_{field}"],
                   f"encoder_{field}={cfg[f'encoder_{field}']!r} differs; tfcalc gives both stacks one width")
    _refuse_if(cfg, "tie_word_embeddings", cfg["tie_word_embeddings"] is not True,
               "transformers then unties the encoder's, the decoder's and the head's tables from the shared one")
    positions = _int(cfg, "max_position_embeddings")
    notes.append("learned positions: max_position_embeddings + 2 rows per stack (BART's offset)")
    return dict(n_encoder_layers=_int(cfg, "encoder_layers"), n_layers=_int(cfg, "decoder_layers"),
                d_model=_int(cfg, "d_model"), n_heads=_int(cfg, "encoder_attention_heads"),
                d_ff=_int(cfg, "encoder_ffn_dim"), vocab_size=_int(cfg, "vocab_size"), positions="learned",
                max_positions=positions + 2, embedding_norm=True, norm="layernorm", norm_position="post",
                final_norm=False, bias=True, activation=_activation(cfg, "activation_function"), context=positions)


_MAPPERS = {"gpt2": _gpt2, "bert": _bert, "llama": _llama, "mistral": _mistral, "mixtral": _mixtral,
            "qwen2": _qwen2, "qwen2_moe": _qwen2_moe, "t5": _t5, "bart": _bart}
