"""gpt-oss (model_type gpt_oss): exact against transformers' GptOssForCausalLM, and the two spec features it needs
(attention_sinks, router_bias) held against the reference model's counters and the arithmetic."""

import json
import warnings

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.families.registry import family
from tfcalc.hf import read_hf_config
from tfcalc.spec import ModelSpec
from tfcalc.verify import hf_model
from tfcalc.verify.checker import check
from tfcalc.verify.memory_check import check_memory


def write(folder, config: dict):
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def meta_params(config: dict) -> int:
    """transformers' sum(p.numel()) for `config`, built on the meta device."""
    hf_config = transformers.AutoConfig.for_model(**config)
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in transformers.GptOssForCausalLM(hf_config).parameters())


def eager_forward_flops(config: dict, batch: int, seq_len: int) -> int:
    """FlopCounterMode FLOPs of one eager forward (eager attention, eager experts, real routing) on the CPU."""
    hf_config = transformers.AutoConfig.for_model(**config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.GptOssForCausalLM._from_config(hf_config, attn_implementation="eager",
                                                             experts_implementation="eager")
        ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=ids)
    return counter.get_total_flops()


def test_defaults_are_transformers_defaults():
    for key, value in family("gpt_oss").defaults.items():
        assert getattr(transformers.GptOssConfig, key) == value, key


@st.composite
def gpt_oss_configs(draw) -> dict:
    """Small configs over every field the family reads (and the num_experts alias)."""
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    layers = draw(st.integers(1, 3))
    experts = draw(st.integers(2, 5))
    config = dict(model_type="gpt_oss", num_hidden_layers=layers, hidden_size=draw(st.sampled_from([8, 12, 16])),
                  intermediate_size=draw(st.integers(2, 12)), num_attention_heads=heads, num_key_value_heads=kv,
                  head_dim=draw(st.sampled_from([2, 4, 8])), num_experts_per_tok=draw(st.integers(1, experts)),
                  vocab_size=draw(st.integers(16, 64)), tie_word_embeddings=draw(st.booleans()),
                  attention_bias=draw(st.booleans()), sliding_window=draw(st.integers(1, 6)),
                  max_position_embeddings=draw(st.integers(8, 64)), pad_token_id=0, bos_token_id=0, eos_token_id=0)
    config["num_experts" if draw(st.booleans()) else "num_local_experts"] = experts
    if draw(st.booleans()):
        config["layer_types"] = draw(st.lists(st.sampled_from(["sliding_attention", "full_attention"]),
                                              min_size=layers, max_size=layers))
    if draw(st.booleans()):
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    return config


@settings(max_examples=12, deadline=None)
@given(config=gpt_oss_configs(), batch=st.integers(1, 2), seq_len=st.integers(1, 8))
def test_generated_configs_match_transformers_exactly(tmp_path_factory, config, batch, seq_len):
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec.replace(batch_size=batch,
                                                                                     seq_len=seq_len)
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_forward_flops(config, batch, seq_len)


def test_defaults_read_as_gpt_oss_120b(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "gpt_oss"})).spec
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.d_head, spec.n_experts, spec.top_k) == (
        36, 2880, 64, 8, 64, 128, 4)
    assert spec.attention_sinks and spec.router_bias and spec.has_mlp_bias and spec.has_qkv_bias and spec.bias
    assert spec.sliding_window == 128 and spec.attention_pattern == ["local", "global"]
    assert not spec.tie_embeddings and spec.mlp == "gated" and spec.activation == "silu"


def test_full_attention_blocks_need_no_window(tmp_path):
    config = {"model_type": "gpt_oss", "num_hidden_layers": 2, "sliding_window": None,
              "layer_types": ["full_attention", "full_attention"]}
    spec = read_hf_config(write(tmp_path, config)).spec
    assert spec.sliding_window is None and spec.attention_pattern is None


@pytest.mark.parametrize("changes, message", [
    ({"num_local_experts": 1}, "num_local_experts=1 is not modelled"),
    ({"num_experts": 1}, "num_experts=1 is not modelled"),  # the config's own name (the attribute_map alias)
    ({"num_local_experts": 4, "num_experts_per_tok": 5}, "num_experts_per_tok=5 is not modelled"),
    ({"num_hidden_layers": 2, "layer_types": ["full_attention"]}, "layer_types=['full_attention'] is not modelled"),
    ({"num_hidden_layers": 1, "layer_types": ["chunked_attention"]}, "entries 'chunked_attention'"),
    ({"sliding_window": None}, "sliding_window=None is not modelled"),
    ({"sliding_window": 0}, "sliding_window=0 is not modelled"),
    ({"attention_bias": "true"}, "attention_bias='true': expected a boolean"),
    ({"head_dim": None}, "head_dim=None: expected an integer"),
    ({"num_key_value_heads": 0}, "num_key_value_heads=0: expected a positive integer"),
    ({"num_local_experts": 4.0}, "num_local_experts=4.0: expected an integer"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "gpt_oss", **changes}))
    assert message in str(e.value), str(e.value)


def test_check_hf_config_matches_every_component(tmp_path):
    config = {"model_type": "gpt_oss", "num_hidden_layers": 3, "hidden_size": 48, "intermediate_size": 24,
              "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 8, "num_local_experts": 4,
              "num_experts_per_tok": 2, "vocab_size": 97, "sliding_window": 4, "max_position_embeddings": 64}
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    report = hf_model.compare(path, spec, Workload(batch_size=2, seq_len=16))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "attention/sinks"].transformers == 3 * 6  # L * H
    assert rows["params", "moe/router"].transformers == 3 * (48 * 4 + 4)  # L * (D * E + E)


# ---- the spec features -----------------------------------------------------------------------------------------

SMALL = ModelSpec(n_layers=2, d_model=64, n_heads=8, n_kv_heads=2, d_head=16, vocab_size=100, seq_len=32,
                  batch_size=2, mlp="gated", activation="silu", norm="rmsnorm", positions="rotary",
                  tie_embeddings=False, n_experts=4, top_k=2, d_expert=24, sliding_window=8,
                  attention_pattern=["local", "global"], attention_sinks=True, router_bias=True)


def test_sinks_and_router_bias_are_counted():
    p = count(SMALL).params
    plain = count(SMALL.replace(attention_sinks=False, router_bias=False)).params
    assert p.components["attention/sinks"] == 2 * 8  # L * H
    assert p.components["moe/router"] == 2 * (64 * 4 + 4)  # L * (D * E + E)
    assert p.total - plain.total == 2 * 8 + 2 * 4  # sinks L * H, router biases L * E


def test_sinks_add_a_softmax_column_and_no_matmul():
    with_sinks, without = count(SMALL), count(SMALL.replace(attention_sinks=False))
    assert with_sinks.flops.forward == without.flops.forward
    # one more logit per (sequence, head, query) in each of the L softmaxes, 6 FLOPs each (arch.ops.SOFTMAX_PER_SCORE)
    extra = with_sinks.non_matmul["attention/softmax"] - without.non_matmul["attention/softmax"]
    assert extra == 2 * 2 * 8 * 32 * 6  # L * B * H * N * 6


def test_spec_refusals():
    with pytest.raises(ValueError, match="router_bias=True needs a mixture of experts"):
        ModelSpec(n_layers=1, d_model=8, n_heads=2, vocab_size=10, seq_len=4, router_bias=True)
    with pytest.raises(ValueError, match="attention_sinks=True is for decoder- or encoder-only models"):
        ModelSpec(n_layers=1, n_encoder_layers=1, d_model=8, n_heads=2, vocab_size=10, seq_len=4,
                  attention_sinks=True)


@pytest.mark.parametrize("train", [False, True])
def test_check_matches_with_sinks_and_router_bias(train):
    report = check(SMALL, train=train)
    assert report.match, [r for r in [*report.forward, *report.params] if not r.match]
    assert {r.component for r in report.params} >= {"attention/sinks", "moe/router"}


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_check_memory_is_exact_with_sinks(recompute):
    # eager attention: SDPA has no sink logit (the reference model's sinks run the explicit path)
    report = check_memory(SMALL, Workload(batch_size=2, seq_len=32), "bf16-mixed", "adamw", recompute, "meta",
                          "eager")
    rows = {r.category: r for r in report.rows}
    for category in ("weights", "gradients", "optimizer states", "master weights", "activations (end of forward)"):
        assert rows[category].difference == 0, (category, rows[category])
    assert report.match


def test_tensor_parallelism_splits_sinks_by_heads():
    from tfcalc.arch import Table

    sinks = Table("attention/sinks", 1, 8, "sinks")  # [1, H = 8]: 4 heads' logits on each of 2 GPUs
    assert sinks.tensors(2, 1, False) == [4] and not sinks.expert


# ---- the presets ---------------------------------------------------------------------------------------------------

# The published config.json files (typed from memory; no network here), the fields transformers reads
_PUBLISHED = {"model_type": "gpt_oss", "attention_bias": True, "head_dim": 64, "hidden_act": "silu",
              "hidden_size": 2880, "intermediate_size": 2880, "max_position_embeddings": 131072,
              "num_attention_heads": 64, "num_experts_per_tok": 4, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
              "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                               "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
              "rope_theta": 150000, "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
              "vocab_size": 201088, "pad_token_id": 199999, "eos_token_id": 200002}


def _published(layers: int, experts: int) -> dict:
    return _PUBLISHED | {"num_hidden_layers": layers, "num_local_experts": experts,
                         "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention"
                                         for i in range(layers)]}


@pytest.mark.parametrize("preset, layers, experts, total, active", [
    # model cards: 20.9B total, 3.6B active; 116.8B total, 5.1B active (active without the token table)
    ("gpt-oss-20b", 24, 32, 20_914_757_184, 3_608_307_264),
    ("gpt-oss-120b", 36, 128, 116_829_156_672, 5_132_849_472),
])
def test_presets_are_transformers_on_meta(tmp_path, preset, layers, experts, total, active):
    config = _published(layers, experts)
    assert meta_params(config) == total
    p = count(load_preset(preset)).params
    assert p.total == total
    assert p.active - 201088 * 2880 == active  # the card leaves out the token table (V x D), not the head
    read = read_hf_config(write(tmp_path, config)).spec
    assert read.replace(name=preset) == load_preset(preset).replace(seq_len=read.seq_len)
