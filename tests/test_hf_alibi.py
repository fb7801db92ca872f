"""The ALiBi families BLOOM (model_type bloom) and MPT (model_type mpt): exact against transformers'
BloomForCausalLM and MptForCausalLM (sum(numel) on meta, FlopCounterMode over an eager forward on the CPU), their
defaults, their refusals by field and value, `check --hf-config` on every row, and the presets pinned against
transformers built from the published configs."""

import json
import warnings

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count, find_preset, load_preset
from tfcalc.families import bloom, mpt
from tfcalc.families.registry import family
from tfcalc.hf import read_hf_config
from tfcalc.verify import hf_model

CLASSES = {"bloom": transformers.BloomForCausalLM, "mpt": transformers.MptForCausalLM}


def write(folder, config: dict):
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def meta_params(config: dict) -> int:
    """transformers' sum(p.numel()) for `config`, built on the meta device."""
    hf_config = transformers.AutoConfig.for_model(**config)
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in CLASSES[config["model_type"]](hf_config).parameters())


def eager_forward_flops(config: dict, batch: int, seq_len: int) -> int:
    """FlopCounterMode FLOPs of one eager forward on the CPU."""
    hf_config = transformers.AutoConfig.for_model(**config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = CLASSES[config["model_type"]]._from_config(hf_config, attn_implementation="eager")
        ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=ids)
    return counter.get_total_flops()


def test_defaults_are_transformers_defaults():
    for model_type, config_class in (("bloom", transformers.BloomConfig), ("mpt", transformers.MptConfig)):
        for key, value in family(model_type).defaults.items():
            assert getattr(config_class, key) == value, (model_type, key)
    attention = transformers.MptConfig().attn_config
    for key, value in mpt.ATTN_DEFAULTS.items():
        assert getattr(attention, key) == value, key
    assert set(mpt.ATTN_TYPES) == set(mpt.ATTN_DEFAULTS)


def _sizes(draw):
    heads = draw(st.integers(1, 4))
    return heads, heads * draw(st.sampled_from([2, 4, 8])), draw(st.integers(1, 3)), draw(st.integers(16, 80))


@st.composite
def bloom_configs(draw) -> dict:
    """Small BLOOM configs over every field the family reads, its own names and its attribute_map's (and n_embed)."""
    heads, hidden, layers, vocab = _sizes(draw)
    config = {"model_type": "bloom", "vocab_size": vocab, "tie_word_embeddings": draw(st.booleans()),
              "apply_residual_connection_post_layernorm": draw(st.booleans()),
              "pretraining_tp": draw(st.integers(1, 3)), "slow_but_exact": draw(st.booleans())}
    config[draw(st.sampled_from(["n_layer", "num_hidden_layers"]))] = layers
    config[draw(st.sampled_from(["n_head", "num_attention_heads"]))] = heads
    how = draw(st.sampled_from(["hidden_size", "n_embed", "both"]))
    if how == "both":  # n_embed wins over hidden_size
        config |= {"hidden_size": hidden + heads, "n_embed": hidden}
    else:
        config[how] = hidden
    if draw(st.booleans()):  # the own name beside the alias: the alias wins
        config.setdefault("n_layer", layers + 1)
    return config


@st.composite
def mpt_configs(draw) -> dict:
    """Small MPT configs over every field the family reads (and learned_pos_emb, which transformers ignores)."""
    heads, hidden, layers, vocab = _sizes(draw)
    config = {"model_type": "mpt", "vocab_size": vocab, "max_seq_len": draw(st.integers(8, 24))}
    for own, alias, value in (("d_model", "hidden_size", hidden), ("n_heads", "num_attention_heads", heads),
                              ("n_layers", "num_hidden_layers", layers)):
        config[draw(st.sampled_from([own, alias]))] = value
    optional = {"tie_word_embeddings": st.booleans(), "expansion_ratio": st.just(4), "no_bias": st.just(True),
                "norm_type": st.sampled_from(mpt.NORM_TYPES), "learned_pos_emb": st.booleans()}
    for key, values in optional.items():
        if draw(st.booleans()):
            config[key] = draw(values)
    attention = {"attn_type": st.just("multihead_attention"), "attn_pdrop": st.just(0),
                 "attn_impl": st.sampled_from(["torch", "triton"]),
                 "clip_qkv": st.none() | st.floats(0.5, 8.0), "softmax_scale": st.none() | st.floats(0.1, 2.0),
                 "prefix_lm": st.booleans(), "qk_ln": st.just(False), "attn_uses_sequence_id": st.booleans(),
                 "alibi": st.just(True), "alibi_bias_max": st.integers(1, 16)}
    chosen = draw(st.none() | st.lists(st.sampled_from(sorted(attention)), unique=True))
    if chosen is not None:
        config["attn_config"] = {key: draw(attention[key]) for key in chosen}
    return config


@pytest.mark.parametrize("strategy", [bloom_configs, mpt_configs], ids=["bloom", "mpt"])
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, strategy, data):
    config = data.draw(strategy())
    path = write(tmp_path_factory.mktemp("hf"), config)
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 8))
    spec = read_hf_config(path).spec.replace(batch_size=batch, seq_len=seq_len)
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_forward_flops(config, batch, seq_len)


BLOOM_SMALL = {"model_type": "bloom", "n_embed": 48, "n_layer": 3, "num_attention_heads": 6, "vocab_size": 97,
               "tie_word_embeddings": False}
MPT_SMALL = {"model_type": "mpt", "d_model": 48, "n_layers": 3, "n_heads": 6, "vocab_size": 97, "max_seq_len": 32,
             "tie_word_embeddings": False, "attn_config": {"clip_qkv": 6.0, "softmax_scale": 0.25}}


@pytest.mark.parametrize("config", [BLOOM_SMALL, MPT_SMALL], ids=["bloom", "mpt"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    report = hf_model.compare(path, spec, Workload(batch_size=2, seq_len=16))
    assert report.match and not [r for r in report.rows if r.match is None or r.known], report.rows
    components = {r.component for r in report.rows if r.figure == "params"}
    assert {"attention/qkv", "attention/norm", "mlp/norm", "final_norm", "head"} <= components
    assert ("embedding/norm" in components) == (config["model_type"] == "bloom")


def test_the_norms_and_biases_are_transformers_own(tmp_path):
    # BLOOM: LayerNorms with weight and bias (two per block, one after the embedding, one final) and biases on every
    # linear; MPT: LayerNorms with a weight only and no bias anywhere
    b = count(read_hf_config(write(tmp_path, BLOOM_SMALL)).spec).params.components
    assert b["embedding/norm"] == 2 * 48 and b["attention/norm"] == 3 * 2 * 48 and b["final_norm"] == 2 * 48
    assert b["attention/qkv"] == 3 * (48 * 144 + 144) and b["mlp/up"] == 3 * (48 * 192 + 192)
    m = count(read_hf_config(write(tmp_path, MPT_SMALL)).spec).params.components
    assert m["attention/norm"] == 3 * 48 and m["final_norm"] == 48 and "embedding/norm" not in m
    assert m["attention/qkv"] == 3 * 48 * 144 and m["mlp/down"] == 3 * 192 * 48
    assert not [k for k in m if k.startswith("embedding/position")]


def test_default_seq_len(tmp_path):
    assert read_hf_config(write(tmp_path, BLOOM_SMALL)).spec.seq_len == bloom.TRAINING_LENGTH
    assert read_hf_config(write(tmp_path, MPT_SMALL)).spec.seq_len == 32  # max_seq_len


@pytest.mark.parametrize("change, message", [
    ({"expansion_ratio": 2}, "expansion_ratio=2 is not modelled: transformers' MptMLP is always 4 x d_model"),
    ({"no_bias": False}, "no_bias=False is not modelled: transformers' MptModel builds no biases"),
    ({"norm_type": "rmsnorm"}, "norm_type='rmsnorm' is not modelled: transformers builds LayerNorms"),
    ({"attn_config": {"alibi": False}}, "attn_config.alibi=False is not modelled"),
    ({"attn_config": {"qk_ln": True}}, "attn_config.qk_ln=True is not modelled"),
    ({"attn_config": {"attn_type": "multiquery_attention"}},
     "attn_config.attn_type='multiquery_attention' is not modelled"),
    ({"attn_config": {"rope": True}}, "attn_config.rope=True is not modelled"),
    ({"attn_config": {"qk_gn": True}}, "attn_config.qk_gn=True is not modelled"),
    ({"attn_config": {"kv_n_heads": 2}}, "attn_config.kv_n_heads=2 is not modelled: grouped-query attention"),
    ({"attn_config": {"attn_type": "grouped_query_attention"}},
     "attn_config.attn_type='grouped_query_attention': expected one of multihead_attention, multiquery_attention"),
    ({"attn_config": {"clip_qkv": 6}}, "attn_config.clip_qkv=6: expected a float (50.0, not 50) or null"),
    ({"attn_config": {"attn_pdrop": 0.1}}, "attn_config.attn_pdrop=0.1: expected an integer"),
    ({"attn_config": {"alibi_bias_max": 8.0}}, "attn_config.alibi_bias_max=8.0: expected an integer"),
    ({"attn_config": {"qk_ln": "false"}}, "attn_config.qk_ln='false': expected a boolean (true or false)"),
    ({"attn_config": "multihead"}, "attn_config='multihead': expected an object or null"),
])
def test_mpt_refusals_name_the_field(tmp_path, change, message):
    path = write(tmp_path, {**MPT_SMALL, **change})
    with pytest.raises(TfcalcError) as e:
        read_hf_config(path)
    assert message in str(e.value) and len(str(e.value).splitlines()) == 1, str(e.value)


def test_mpt_kinds_are_the_ones_transformers_takes():
    # each refused attn_config kind is one transformers' MptAttentionConfig refuses too
    for key, value in (("clip_qkv", 6), ("attn_pdrop", 0.1), ("alibi_bias_max", 8.0), ("qk_ln", "false"),
                       ("attn_type", "grouped_query_attention")):
        with pytest.raises(Exception, match=key):
            transformers.MptConfig(attn_config={key: value})


@pytest.mark.parametrize("change, message", [
    ({"n_embed": 50}, "n_embed=50 is not divisible by num_attention_heads=6"),  # the config's own names
    ({"n_embed": 48.0}, "n_embed=48.0: expected an integer"),
    ({"slow_but_exact": "false"}, "slow_but_exact='false': expected a boolean (true or false)"),
    ({"pretraining_tp": 1.0}, "pretraining_tp=1.0: expected an integer"),
])
def test_bloom_refusals_name_the_field(tmp_path, change, message):
    with pytest.raises(TfcalcError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_hf_config(write(tmp_path, {**BLOOM_SMALL, **change}))


def test_ignored_and_elementwise_fields_are_noted(tmp_path):
    source = read_hf_config(write(tmp_path, {**BLOOM_SMALL, "apply_residual_connection_post_layernorm": True,
                                             "slow_but_exact": True, "pretraining_tp": 4})).source
    assert "apply_residual_connection_post_layernorm=true" in source and "slow_but_exact=true" in source
    source = read_hf_config(write(tmp_path, MPT_SMALL)).source
    assert "attn_config.softmax_scale=0.25, attn_config.clip_qkv=6.0: elementwise" in source


# Published configs (typed from memory: no network here) and their presets
PUBLISHED = {
    "bloom-176b": ({"model_type": "bloom", "apply_residual_connection_post_layernorm": False, "n_embed": 14336,
                    "n_layer": 70, "num_attention_heads": 112, "pretraining_tp": 4, "slow_but_exact": False,
                    "vocab_size": 250880, "layer_norm_epsilon": 1e-05, "bos_token_id": 1, "eos_token_id": 2,
                    "pad_token_id": 3}, 176_247_271_424),
    "bloom-7b1": ({"model_type": "bloom", "apply_residual_connection_post_layernorm": False, "n_embed": 4096,
                   "n_layer": 30, "num_attention_heads": 32, "pretraining_tp": 1, "slow_but_exact": False,
                   "vocab_size": 250880, "layer_norm_epsilon": 1e-05, "bos_token_id": 1, "eos_token_id": 2,
                   "pad_token_id": 3}, 7_069_016_064),
    "mpt-7b": ({"model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32, "expansion_ratio": 4,
                "max_seq_len": 2048, "vocab_size": 50432, "learned_pos_emb": True, "no_bias": True,
                "norm_type": "low_precision_layernorm", "attn_config": {
                    "alibi": True, "alibi_bias_max": 8, "attn_impl": "torch", "attn_pdrop": 0,
                    "attn_type": "multihead_attention", "attn_uses_sequence_id": False, "clip_qkv": None,
                    "prefix_lm": False, "qk_ln": False, "softmax_scale": None}}, 6_649_286_656),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_presets_are_the_published_configs(tmp_path, name):
    config, total = PUBLISHED[name]
    assert meta_params(config) == total  # transformers, from the published config
    spec = read_hf_config(write(tmp_path, config)).spec
    preset = load_preset(name)
    assert count(preset).params.total == count(spec).params.total == total
    fields = ("n_layers", "d_model", "n_heads", "d_head", "d_ff", "vocab_size", "seq_len", "mlp", "activation", "norm",
              "bias", "positions", "embedding_norm", "tie_embeddings", "final_norm", "max_positions")
    assert {f: getattr(preset, f) for f in fields} == {f: getattr(spec, f) for f in fields}
    assert f"{total:,}" in find_preset(name).source


def test_sliced_bloom_matmuls_are_a_documented_difference(tmp_path):
    # slow_but_exact with pretraining_tp > 1: transformers runs dense and dense_4h_to_h as slices inside the
    # attention and MLP modules; the totals agree, the per-component rows are marked known (not a mismatch)
    config = {"model_type": "bloom", "n_layer": 2, "hidden_size": 64, "n_head": 4, "vocab_size": 100,
              "slow_but_exact": True, "pretraining_tp": 2}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = read_hf_config(path).spec.replace(seq_len=8)
    report = hf_model.compare(path, spec, Workload(seq_len=8))
    assert report.match
    totals = {r.figure: r for r in report.rows if r.component == "total"}
    assert totals["forward"].match and totals["params"].match
    assert {r.component for r in report.rows if r.known} == {"attention/core", "attention/out", "mlp/down"}
