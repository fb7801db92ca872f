"""GraniteMoE, EXAONE 4.0, OLMo 3, mBART, DistilBERT and Marian from their config.json (tfcalc/families/): exact against
transformers' own classes (sum(numel) on meta, FlopCounterMode forward FLOPs with eager attention and experts), with
transformers' defaults, and refusals by field name for what ModelSpec does not model."""

import json
import warnings

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, find_preset, load_preset
from tfcalc.cli import app
from tfcalc.hf import DEFAULTS, ENCODER_DECODER, read_hf_config
from tfcalc.verify import hf_model

CLASSES = {
    "granitemoe": transformers.GraniteMoeForCausalLM, "exaone4": transformers.Exaone4ForCausalLM,
    "olmo3": transformers.Olmo3ForCausalLM, "mbart": transformers.MBartForConditionalGeneration,
    "marian": transformers.MarianMTModel, "distilbert": transformers.DistilBertModel,
}
MOE = {"granitemoe"}
LAYER_TYPES = ["sliding_attention", "full_attention"]


def write(folder, config: dict, name="config.json"):
    path = folder / name
    path.write_text(json.dumps(config))
    return path


@st.composite
def configs(draw, model_type: str) -> dict:
    kv = draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 3))
    hidden = heads * draw(st.sampled_from([2, 4, 8]))
    vocab = draw(st.integers(16, 80))
    n_pos = draw(st.integers(8, 24))
    if model_type in ("mbart", "marian"):
        ffn = draw(st.integers(4, 40))
        config = dict(model_type=model_type, vocab_size=vocab, encoder_layers=draw(st.integers(1, 2)),
                      decoder_layers=draw(st.integers(1, 2)), d_model=hidden, encoder_attention_heads=heads,
                      decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
                      max_position_embeddings=n_pos, scale_embedding=draw(st.booleans()),
                      activation_function=draw(st.sampled_from(["gelu", "relu", "swish", "gelu_new"])),
                      decoder_start_token_id=2, pad_token_id=1, bos_token_id=0, eos_token_id=2, forced_eos_token_id=2)
        # sometimes the common names of their attribute_map (they win over the own ones)
        if draw(st.booleans()):
            config["hidden_size"] = config.pop("d_model")
        if draw(st.booleans()):
            config["num_hidden_layers"] = config.pop("encoder_layers")
        if draw(st.booleans()):
            config["num_attention_heads"] = config.pop("encoder_attention_heads")
        if model_type == "marian":
            shared = draw(st.booleans())
            config |= dict(share_encoder_decoder_embeddings=shared,
                           tie_word_embeddings=True if shared else draw(st.booleans()),
                           decoder_vocab_size=draw(st.sampled_from([None, vocab])),
                           normalize_before=draw(st.sampled_from([False, None])))
            if config["normalize_before"] is None:
                del config["normalize_before"]
        return config
    if model_type == "distilbert":
        sizes = dict(n_layers=draw(st.integers(1, 2)), dim=hidden, n_heads=heads)
        aliases = {"n_layers": "num_hidden_layers", "dim": "hidden_size", "n_heads": "num_attention_heads"}
        renamed = draw(st.sets(st.sampled_from(sorted(aliases))))
        sizes = {aliases[k] if k in renamed else k: v for k, v in sizes.items()}
        return dict(model_type=model_type, vocab_size=vocab, max_position_embeddings=n_pos, **sizes,
                    hidden_dim=draw(st.integers(4, 40)), sinusoidal_pos_embds=draw(st.booleans()),
                    activation=draw(st.sampled_from(["gelu", "relu", "gelu_new", "silu"])), pad_token_id=0)
    L = draw(st.integers(1, 4))
    config = dict(model_type=model_type, vocab_size=vocab, tie_word_embeddings=draw(st.booleans()),
                  num_hidden_layers=L, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv,
                  intermediate_size=draw(st.integers(4, 40)), max_position_embeddings=n_pos, bos_token_id=0,
                  eos_token_id=0, pad_token_id=0,
                  hidden_act=draw(st.sampled_from(["silu", "gelu", "gelu_pytorch_tanh", "relu"])))
    if draw(st.booleans()):
        config["head_dim"] = draw(st.sampled_from([2, 4, 6]))
    if model_type in ("granitemoe", "olmo3"):
        config["attention_bias"] = draw(st.booleans())
    if model_type == "granitemoe":
        experts = draw(st.integers(2, 4))
        config |= dict(num_local_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)))
        config |= {key: draw(st.sampled_from([1.0, 0.5, 12.0])) for key in
                   ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling")}
    if model_type in ("exaone4", "olmo3"):
        # OLMo 3 needs a window (Olmo3Model builds a sliding mask in every forward)
        window = draw((st.none() if model_type == "exaone4" else st.nothing()) | st.integers(1, 8))
        config["sliding_window"] = window
        # without a window, layer_types must be given (all full): EXAONE 4.0's rule divides by 0 then, OLMo 3's
        # default has sliding blocks that transformers cannot build without one
        if window is None or draw(st.booleans()):
            # sliding blocks need a window: transformers cannot build their cache without one
            kinds = LAYER_TYPES if window is not None else ["full_attention"]
            config["layer_types"] = draw(st.lists(st.sampled_from(kinds), min_size=L, max_size=L))
        elif model_type == "exaone4" and draw(st.booleans()):
            config["sliding_window_pattern"] = draw(st.integers(1, 5) | st.integers(-3, -1))
    return config


def transformers_counts(config: dict, batch: int, seq_len: int, src_len: int | None) -> tuple[int, int]:
    """(sum(p.numel()) on the meta device, FlopCounterMode FLOPs of one eager forward on the CPU)."""
    hf_config = transformers.AutoConfig.for_model(**config)
    cls = CLASSES[config["model_type"]]
    with torch.device("meta"):
        n_params = sum(p.numel() for p in cls(hf_config).parameters())
    extra = {"experts_implementation": "eager"} if config["model_type"] in MOE else {}
    model = cls._from_config(hf_config, attn_implementation="eager", **extra)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=generator)
    inputs = {"input_ids": ids}
    if src_len is not None:
        src = torch.randint(config["vocab_size"], (batch, src_len), generator=generator)
        inputs = {"input_ids": src, "decoder_input_ids": ids}
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs)
    return n_params, counter.get_total_flops()


@pytest.mark.parametrize("model_type", CLASSES)
def test_defaults_are_transformers_defaults(model_type):
    config_class = transformers.AutoConfig.for_model(model_type).__class__
    for key, value in DEFAULTS[model_type].items():
        assert getattr(config_class, key) == value, key


@pytest.mark.parametrize("model_type", CLASSES)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, model_type, data):
    config = data.draw(configs(model_type))
    path = write(tmp_path_factory.mktemp("hf"), config)
    batch = data.draw(st.integers(1, 2))
    seq_len = data.draw(st.integers(1, min(8, config["max_position_embeddings"])))
    src_len = data.draw(st.integers(1, 8)) if model_type in ENCODER_DECODER else None
    spec = read_hf_config(path).spec.replace(batch_size=batch, seq_len=seq_len)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        n_params, flops = transformers_counts(config, batch, seq_len, src_len)
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len, src_len=src_len))
    assert result.params.total == n_params
    assert result.flops.forward == flops


# A small config of each type for `check --hf-config`: every component row must match
CHECK = {
    "granitemoe": dict(num_hidden_layers=2, hidden_size=16, num_attention_heads=4, num_key_value_heads=2,
                       intermediate_size=24, vocab_size=50, max_position_embeddings=16, num_local_experts=4,
                       num_experts_per_tok=2, attention_bias=True, pad_token_id=0, bos_token_id=0, eos_token_id=0),
    "exaone4": dict(num_hidden_layers=5, hidden_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=6,
                    intermediate_size=24, vocab_size=50, max_position_embeddings=16, sliding_window=4,
                    pad_token_id=0, bos_token_id=0, eos_token_id=0),
    "olmo3": dict(num_hidden_layers=5, hidden_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=6,
                  intermediate_size=24, vocab_size=50, max_position_embeddings=16, sliding_window=4,
                  attention_bias=True, pad_token_id=0, bos_token_id=0, eos_token_id=0),
    "mbart": dict(encoder_layers=2, decoder_layers=1, d_model=16, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, vocab_size=50,
                  max_position_embeddings=16, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                  decoder_start_token_id=2, forced_eos_token_id=2),
    "marian": dict(encoder_layers=2, decoder_layers=1, d_model=16, encoder_attention_heads=2,
                   decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, vocab_size=50,
                   max_position_embeddings=16, share_encoder_decoder_embeddings=False, pad_token_id=1,
                   bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2),
    "distilbert": dict(n_layers=2, dim=16, n_heads=2, hidden_dim=24, vocab_size=50, max_position_embeddings=16,
                       sinusoidal_pos_embds=True),
}


@pytest.mark.parametrize("model_type", CHECK)
def test_every_component_matches_transformers_exactly(tmp_path, model_type):
    folder = tmp_path / model_type
    folder.mkdir()
    write(folder, {"model_type": model_type, **CHECK[model_type]})
    encdec = model_type in ENCODER_DECODER
    workload = Workload(batch_size=2, seq_len=8, src_len=6 if encdec else None)
    spec = read_hf_config(folder).spec.replace(batch_size=2, seq_len=8)
    report = hf_model.compare(folder, spec, workload)
    assert report.match and not report.traced, [r for r in report.rows if not r.match]
    assert all(r.match is True for r in report.rows)  # every row compared: no unmapped module
    assert len(report.rows) > 6


def test_windows_follow_the_layer_rules(tmp_path):
    base = dict(num_hidden_layers=8, hidden_size=16, num_attention_heads=4, num_key_value_heads=4,
                intermediate_size=24, vocab_size=50, max_position_embeddings=16)
    olmo3 = read_hf_config(write(tmp_path, {"model_type": "olmo3", **base})).spec
    assert olmo3.attention_pattern == ["local", "local", "local", "global"] and olmo3.sliding_window == 4096
    assert olmo3.qk_norm == "full" and olmo3.norm_position == "output"
    exaone = read_hf_config(write(tmp_path, {"model_type": "exaone4", **base, "sliding_window_pattern": 3})).spec
    assert exaone.attention_pattern == ["local", "local", "global"] and exaone.qk_norm == "head"
    wide = read_hf_config(write(tmp_path, {"model_type": "exaone4", **base, "sliding_window_pattern": 9})).spec
    assert wide.attention_pattern == ["local"]  # no block i < 8 with (i + 1) % 9 == 0
    given = read_hf_config(write(tmp_path, {"model_type": "exaone4", **base, "sliding_window": None,
                                            "layer_types": ["full_attention"] * 8})).spec
    assert given.sliding_window is None


@pytest.mark.parametrize("config, message", [
    ({"model_type": "granitemoe", "num_local_experts": 1}, "num_local_experts=1 is not modelled"),
    ({"model_type": "granitemoe", "num_experts_per_tok": None}, "num_experts_per_tok=None: expected an integer"),
    ({"model_type": "granitemoe", "hidden_act": "gelu_10"}, "hidden_act='gelu_10' is not modelled"),
    ({"model_type": "exaone4", "sliding_window": None}, "sliding_window=None is not modelled"),
    ({"model_type": "exaone4", "sliding_window_pattern": 0}, "sliding_window_pattern=0 is not modelled"),
    # a string pattern (the published configs' "LLLG") is read only beside layer_types, which transformers then reads
    ({"model_type": "exaone4", "sliding_window_pattern": "LLLG"}, "sliding_window_pattern='LLLG' is not modelled: "
                                                                  "Exaone4Config's rule"),
    ({"model_type": "exaone4", "num_hidden_layers": 2, "layer_types": ["full_attention"]},
     "layer_types=['full_attention'] is not modelled: expected a list of num_hidden_layers=2 entries"),
    ({"model_type": "olmo3", "num_hidden_layers": 1, "layer_types": ["chunked_attention"]},
     "entries 'chunked_attention'; known: full_attention, sliding_attention"),
    ({"model_type": "olmo3", "attention_bias": 1}, "attention_bias=1: expected a boolean"),
    ({"model_type": "exaone4", "num_hidden_layers": 1, "sliding_window": None, "layer_types": ["sliding_attention"]},
     "sliding_attention blocks with sliding_window=None"),
    ({"model_type": "olmo3", "sliding_window": None}, "sliding_window=None is not modelled: transformers' Olmo3Model"),
    ({"model_type": "mbart", "decoder_ffn_dim": 8}, "decoder_ffn_dim=8 is not modelled"),
    ({"model_type": "mbart", "decoder_attention_heads": 8}, "decoder_attention_heads=8 is not modelled"),
    ({"model_type": "mbart", "tie_word_embeddings": False}, "tie_word_embeddings=False is not modelled"),
    ({"model_type": "marian", "decoder_vocab_size": 100}, "decoder_vocab_size=100 is not modelled"),
    ({"model_type": "marian", "tie_word_embeddings": False}, "tie_word_embeddings=False is not modelled"),
    ({"model_type": "marian", "normalize_before": True}, "normalize_before=True is not modelled"),
    ({"model_type": "marian", "decoder_ffn_dim": 8}, "decoder_ffn_dim=8 is not modelled"),
    ({"model_type": "marian", "share_encoder_decoder_embeddings": "false"},
     "share_encoder_decoder_embeddings='false': expected a boolean"),
    ({"model_type": "distilbert", "activation": "gelu_10"}, "activation='gelu_10' is not modelled"),
    ({"model_type": "distilbert", "sinusoidal_pos_embds": 1}, "sinusoidal_pos_embds=1: expected a boolean"),
])
def test_unmodelled_or_bad_fields_are_refused_by_name(tmp_path, config, message):
    path = write(tmp_path, config)
    with pytest.raises(TfcalcError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_hf_config(path)
    result = CliRunner().invoke(app, ["count", "--hf-config", str(path)])
    assert result.exit_code == 2 and message.split(" is not")[0].split(":")[0] in result.output


def test_notes_say_what_is_not_counted(tmp_path):
    granite = read_hf_config(write(tmp_path, {"model_type": "granitemoe"})).source
    assert "elementwise scales, no parameters" in granite
    marian = read_hf_config(write(tmp_path, {"model_type": "marian"})).source
    assert "counted as learned positions of that size" in marian
    distil = read_hf_config(write(tmp_path, {"model_type": "distilbert", "sinusoidal_pos_embds": True})).source
    assert "counted as learned positions of that size" in distil
    aliased = read_hf_config(write(tmp_path, {"model_type": "mbart", "hidden_size": 64, "d_model": 32,
                                              "encoder_attention_heads": 4, "decoder_attention_heads": 4}))
    assert aliased.spec.d_model == 64 and "hidden_size=64 read as d_model" in aliased.source


# Published config.json files (the fields that matter, typed from memory where the preset says so) and their presets
PUBLISHED = {
    "granite3-3b-a800m": {
        "model_type": "granitemoe", "attention_bias": False, "attention_multiplier": 0.015625, "bos_token_id": 0,
        "embedding_multiplier": 12.0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 1536,
        "intermediate_size": 512, "logits_scaling": 6.0, "max_position_embeddings": 4096, "num_attention_heads": 24,
        "num_experts_per_tok": 8, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 40,
        "pad_token_id": 0, "residual_multiplier": 0.22, "rope_theta": 10000, "tie_word_embeddings": True,
        "vocab_size": 49155},
    "mbart-large-cc25": {
        "model_type": "mbart", "activation_function": "gelu", "d_model": 1024, "decoder_attention_heads": 16,
        "decoder_ffn_dim": 4096, "decoder_layers": 12, "encoder_attention_heads": 16, "encoder_ffn_dim": 4096,
        "encoder_layers": 12, "max_position_embeddings": 1024, "scale_embedding": True, "vocab_size": 250027,
        "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2},
    "distilbert-base": {
        "model_type": "distilbert", "activation": "gelu", "dim": 768, "hidden_dim": 3072,
        "max_position_embeddings": 512, "n_heads": 12, "n_layers": 6, "sinusoidal_pos_embds": False,
        "vocab_size": 30522, "pad_token_id": 0},
    "opus-mt-en-de": {
        "model_type": "marian", "activation_function": "swish", "d_model": 512, "decoder_attention_heads": 8,
        "decoder_ffn_dim": 2048, "decoder_layers": 6, "encoder_attention_heads": 8, "encoder_ffn_dim": 2048,
        "encoder_layers": 6, "max_position_embeddings": 512, "scale_embedding": True, "vocab_size": 58101,
        "pad_token_id": 58100, "decoder_start_token_id": 58100, "eos_token_id": 0, "normalize_before": False},
}


@pytest.mark.parametrize("preset", PUBLISHED)
def test_presets_equal_transformers_built_from_the_published_config(tmp_path, preset):
    config = PUBLISHED[preset]
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = CLASSES[config["model_type"]](transformers.AutoConfig.for_model(**config))
    n_params = sum(p.numel() for p in model.parameters())
    assert count(load_preset(preset)).params.total == n_params
    assert f"{n_params:,}" in find_preset(preset).source
    spec = read_hf_config(write(tmp_path, config)).spec
    ours, theirs = count(spec), count(load_preset(preset))
    assert ours.params.total == theirs.params.total and ours.params.active == theirs.params.active
    assert ours.flops.forward == theirs.flops.forward


def test_exaone4_published_string_pattern_is_read_beside_layer_types(tmp_path):
    # EXAONE 4.0's published configs carry sliding_window_pattern "LLLG" and layer_types; transformers reads the
    # latter (three local, one global) and so does tfcalc
    types = ["sliding_attention"] * 3 + ["full_attention"]
    config = {"model_type": "exaone4", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 100, "max_position_embeddings": 32,
              "sliding_window": 8, "sliding_window_pattern": "LLLG", "layer_types": types}
    spec = read_hf_config(write(tmp_path, config)).spec
    assert spec.attention_pattern == ["local", "local", "local", "global"] and spec.sliding_window == 8
