"""Granite 4.0-H (granitemoehybrid) from its config.json: exact against transformers' GraniteMoeHybridForCausalLM
(sum(numel) on meta, FlopCounterMode forward FLOPs of an eager CPU forward over its pure-torch path with real routing,
a decode step after a cache too), with transformers' defaults, refusals by field name and the check against
transformers per component."""

import pytest
import transformers
import hf_oracle as oracle
from hf_oracle import write
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tfcalc import TfcalcError, Workload, count
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import hf_model

# GraniteMoeHybridConfig's names for the mixers, transformers' own and the legacy ones it remaps
MAMBA, ATTENTION = ("linear_attention", "mamba"), ("full_attention", "attention")


def meta_params(config: dict) -> int:
    return oracle.meta_params(transformers.GraniteMoeHybridForCausalLM, config)


def eager_flops(config: dict, batch: int, seq_len: int, context: int = 0, use_cache: bool = False) -> int:
    """FlopCounterMode over one forward of `seq_len` tokens after a prefill of `context` (not counted)."""
    return oracle.eager_flops(transformers.GraniteMoeHybridForCausalLM, config, batch, seq_len, context, use_cache,
                              attn_implementation="eager", experts_implementation="eager")


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["granitemoehybrid"].items():
        assert getattr(transformers.GraniteMoeHybridConfig, key) == value, key


def test_the_default_config(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "granitemoehybrid"})).spec
    # layer_types null: every block Mamba2; 8 experts of 11008, 2 per token, one shared expert of 1024
    assert spec.block_pattern == ["mamba2+moe"] and spec.n_layers == 32
    assert (spec.n_experts, spec.top_k, spec.d_expert, spec.n_shared_experts, spec.d_shared_expert,
            spec.shared_expert_gate, spec.mlp) == (8, 2, 11008, 1, 1024, False, "gated")
    z = spec.sizes("mamba2")
    # mamba_d_head 'auto': 2 * 4096 // 128 = 64
    assert (z.n_heads, z.head_dim, z.d_state, z.n_groups, z.conv_kernel, z.chunk_size) == (128, 64, 256, 1, 4, 256)
    assert count(spec).params.total == meta_params({"model_type": "granitemoehybrid"})


def test_layer_types_legacy_names_and_the_alias(tmp_path):
    """transformers remaps the published configs' "mamba"/"attention" to linear_attention/full_attention, and sets
    layer_types from its attribute_map's layers_block_type."""
    base = {"model_type": "granitemoehybrid", "num_hidden_layers": 4, "hidden_size": 16, "mamba_n_heads": 4,
            "num_attention_heads": 4, "num_local_experts": 0}
    legacy = read_hf_config(write(tmp_path, {**base, "layer_types": ["mamba", "attention"] * 2})).spec
    current = read_hf_config(write(tmp_path, {**base, "layer_types": ["linear_attention", "full_attention"] * 2}))
    alias = read_hf_config(write(tmp_path, {**base, "layers_block_type": ["mamba", "attention"] * 2}))
    assert legacy.block_pattern == current.spec.block_pattern == alias.spec.block_pattern == \
        ["mamba2+mlp", "attention+mlp"]
    assert "layers_block_type=" in alias.source and "read as layer_types" in alias.source
    assert legacy.d_ff == 1024 and legacy.n_experts == 1  # the shared MLP alone: shared_intermediate_size wide


def test_null_biases_are_no_biases_as_transformers_builds_them(tmp_path):
    config = {"model_type": "granitemoehybrid", "num_hidden_layers": 2, "hidden_size": 16, "mamba_n_heads": 4,
              "mamba_d_state": 4, "mamba_chunk_size": 4, "num_attention_heads": 4, "intermediate_size": 8,
              "shared_intermediate_size": 8, "num_local_experts": 2, "num_experts_per_tok": 1, "vocab_size": 32,
              "layer_types": ["mamba", "attention"], "mamba_conv_bias": None, "mamba_proj_bias": None,
              "head_dim": 4}
    source = read_hf_config(write(tmp_path, config))
    assert "mamba_conv_bias null: transformers builds no bias" in source.source
    z = source.spec.sizes("mamba2")
    assert (z.conv_bias, z.bias) == (False, False)
    result = count(source.spec, Workload(batch_size=1, seq_len=5))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_flops(config, 1, 5)


@st.composite
def configs(draw) -> dict:
    groups = draw(st.integers(1, 2))
    heads = groups * draw(st.integers(1, 3))
    kv = draw(st.integers(1, 2))
    layers = draw(st.integers(1, 4))
    experts = draw(st.sampled_from([0, 2, 3, 4]))
    config = {"model_type": "granitemoehybrid", "num_hidden_layers": layers,
              "hidden_size": heads * draw(st.integers(1, 4)), "mamba_expand": draw(st.integers(1, 2)),
              "mamba_n_heads": heads, "mamba_n_groups": groups, "mamba_d_state": draw(st.integers(1, 5)),
              "mamba_d_conv": draw(st.integers(1, 4)), "mamba_chunk_size": draw(st.integers(1, 6)),
              "mamba_conv_bias": draw(st.booleans()), "mamba_proj_bias": draw(st.booleans()),
              "num_attention_heads": kv * draw(st.integers(1, 2)), "num_key_value_heads": kv,
              "intermediate_size": draw(st.integers(1, 12)), "shared_intermediate_size": draw(st.integers(1, 12)),
              "num_local_experts": experts, "num_experts_per_tok": draw(st.integers(1, max(experts, 1))),
              "attention_bias": draw(st.booleans()), "tie_word_embeddings": draw(st.booleans()),
              "vocab_size": draw(st.integers(8, 32)), "max_position_embeddings": 64,
              "position_embedding_type": draw(st.sampled_from([None, "nope", "rope"])),
              "layer_types": draw(st.none() | st.lists(st.sampled_from(MAMBA + ATTENTION), min_size=layers,
                                                        max_size=layers))}
    if draw(st.booleans()):
        config["head_dim"] = 2 * draw(st.integers(1, 3))  # rotary needs an even head
    assume(config["hidden_size"] >= config["num_attention_heads"] or "head_dim" in config)
    assume(config["position_embedding_type"] != "rope" or "head_dim" in config
           or config["hidden_size"] // config["num_attention_heads"] % 2 == 0)
    return config


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(configs())
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 9))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_flops(config, batch, seq_len)


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_a_decode_step_after_a_cache_matches_transformers(tmp_path_factory, data):
    config = data.draw(configs())
    # transformers' cached forward needs an attention block (get_seq_length): the last block's
    L = config["num_hidden_layers"]
    config["layer_types"] = [*(config["layer_types"] or ["mamba"] * L)[:-1], "attention"]
    batch, context = data.draw(st.integers(1, 2)), data.draw(st.integers(config["mamba_d_conv"], 7))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    decode = count(spec, Workload(phase="decode", batch_size=batch, seq_len=1, context=context))
    assert decode.flops.forward == eager_flops(config, batch, 1, context)


@pytest.mark.parametrize("changes, message", [
    ({"layer_types": ["mamba"] * 3},
     "layer_types=['mamba', 'mamba', 'mamba'] is not modelled: expected a list of num_hidden_layers=32 entries"),
    ({"num_hidden_layers": 2, "layer_types": ["mamba", "sliding_attention"]},
     "is not modelled: entries 'sliding_attention'; known: linear_attention, mamba, full_attention, attention"),
    ({"num_local_experts": 1}, "num_local_experts=1 is not modelled: tfcalc models a mixture of 2 or more experts"),
    ({"num_local_experts": None}, "num_local_experts=None is not modelled: transformers' decoder layer fails on null"),
    ({"num_experts_per_tok": None}, "num_experts_per_tok=None is not modelled: expected 1 to num_local_experts=8"),
    ({"num_local_experts": 2.0}, "num_local_experts=2.0: expected an integer or null"),
    ({"num_experts_per_tok": 9}, "num_experts_per_tok=9 is not modelled: expected 1 to num_local_experts=8"),
    ({"num_experts_per_tok": 0}, "num_experts_per_tok=0 is not modelled: expected 1 to num_local_experts=8"),
    ({"mamba_n_heads": 96}, "mamba_n_heads=96 is not modelled: does not divide mamba_expand * hidden_size = 8192"),
    ({"mamba_d_head": 32}, "mamba_d_head=32 is not modelled: the mixer's inner width 8192 is not mamba_n_heads=128"),
    ({"mamba_d_head": "half"}, "mamba_d_head='half' is not modelled: expected an integer or 'auto'"),
    ({"mamba_n_groups": 3}, "mamba_n_groups=3 is not modelled: does not divide mamba_n_heads=128"),
    ({"mamba_d_state": None}, "mamba_d_state=None is not modelled: GraniteMoeHybridMambaLayer needs a value"),
    ({"mamba_expand": 0}, "mamba_expand=0 is not modelled"),
    ({"layer_types": ["attention"] * 32, "num_key_value_heads": 3},
     "num_key_value_heads=3 is not modelled: does not divide"),
    ({"layer_types": ["attention"] * 32, "hidden_size": 16, "mamba_n_heads": 4},
     "hidden_size=16 is not modelled: fewer channels than num_attention_heads=32"),
    ({"num_hidden_layers": 70_000, "layer_types": ["mamba", "attention"] * 35_000},
     "num_hidden_layers=70000 is not modelled"),
    ({"hidden_act": "tanh"}, "hidden_act='tanh' is not modelled"),
    ({"layers_block_type": None}, "layers_block_type=None is not modelled: transformers sets layer_types to null"),
    ({"layer_types": ["attention"] * 32, "head_dim": None}, "head_dim=None is not modelled: transformers' attention"),
    ({"mamba_chunk_size": None}, "mamba_chunk_size=None is not modelled: GraniteMoeHybridMambaLayer needs a value"),
    ({"shared_intermediate_size": 0}, "shared_intermediate_size=0: expected a positive integer"),
    ({"mamba_conv_bias": "true"}, "mamba_conv_bias='true': expected a boolean (true or false) or null"),
    ({"layer_types": "mamba"}, "layer_types='mamba': expected a list of strings or null"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "granitemoehybrid", **changes}))
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize("config", [
    {"num_hidden_layers": 4, "layer_types": ["mamba", "attention", "mamba", "mamba"], "hidden_size": 16,
     "mamba_n_heads": 4, "mamba_d_state": 6, "mamba_n_groups": 2, "mamba_d_conv": 3, "mamba_chunk_size": 4,
     "vocab_size": 40, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 12,
     "shared_intermediate_size": 10, "num_local_experts": 4, "num_experts_per_tok": 2, "attention_bias": True},
    {"num_hidden_layers": 3, "layer_types": ["linear_attention", "full_attention", "linear_attention"],
     "hidden_size": 24, "mamba_expand": 1, "mamba_n_heads": 3, "mamba_d_head": 8, "mamba_d_state": 2,
     "mamba_n_groups": 1, "mamba_d_conv": 2, "mamba_chunk_size": 16, "vocab_size": 32, "num_attention_heads": 2,
     "num_key_value_heads": 2, "head_dim": 6, "shared_intermediate_size": 20, "num_local_experts": 0,
     "num_experts_per_tok": 0, "position_embedding_type": "rope", "mamba_proj_bias": True,
     "mamba_conv_bias": False, "tie_word_embeddings": True},
], ids=["experts-shared-biased-attention", "dense-rope-head_dim-biases-tied"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    path = write(tmp_path, {"model_type": "granitemoehybrid", "max_position_embeddings": 64, **config})
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=9))
    assert report.match and all(r.match for r in report.rows), report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    D, L = config["hidden_size"], config["num_hidden_layers"]
    assert rows["params", "mamba2/norm+attention/norm"].transformers == L * D
    # the shared MLP: input_linear D -> 2 F_s (gate and up fused), output_linear F_s -> D, no biases
    assert rows["params", "moe/shared_experts+mlp/gate+up+down"].transformers == \
        L * 3 * D * config["shared_intermediate_size"]
    assert (("params", "moe/router") in rows) == (config["num_local_experts"] > 0)


def test_granite_4_0_h_tiny_shape_is_transformers_built_from_it(tmp_path):
    """Granite-4.0-H-Tiny's sizes as third-party code transcribes its config.json (not the published file itself):
    tfcalc's count is sum(numel) of GraniteMoeHybridForCausalLM built from them on meta, about the card's 7B total
    (its "1B active" is 1.47B by tfcalc's convention: the tied token table, the Mamba2 and attention blocks, the
    router, 6 of 64 experts and the shared expert)."""
    layer_types = (["mamba"] * 5 + ["attention"] + ["mamba"] * 4) * 4  # attention at 5, 15, 25, 35
    config = {"model_type": "granitemoehybrid", "hidden_size": 1536, "num_hidden_layers": 40,
              "num_attention_heads": 12, "num_key_value_heads": 4, "intermediate_size": 512,
              "shared_intermediate_size": 1024, "num_local_experts": 64, "num_experts_per_tok": 6,
              "vocab_size": 100352, "tie_word_embeddings": True, "mamba_d_state": 128, "mamba_n_groups": 1,
              "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_expand": 2, "mamba_d_conv": 4, "mamba_chunk_size": 256,
              "max_position_embeddings": 131072, "position_embedding_type": "nope", "layer_types": layer_types}
    spec = read_hf_config(write(tmp_path, config)).spec
    assert spec.block_pattern == ["mamba2+moe"] * 5 + ["attention+moe"] + ["mamba2+moe"] * 4
    params = count(spec).params
    assert params.total == meta_params(config) == 6_939_037_248
    assert params.active == 1_465_470_528
