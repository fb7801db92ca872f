"""Bamba (bamba) from its config.json: exact against transformers' BambaForCausalLM (sum(numel) on meta, FlopCounterMode
forward FLOPs of an eager CPU forward over its pure-torch path, a decode step after a cache too), with transformers'
defaults, refusals by field name and the check against transformers per component."""

import pytest
import transformers
import hf_oracle as oracle
from hf_oracle import write
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tfcalc import TfcalcError, Workload, count
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import hf_model


def meta_params(config: dict) -> int:
    return oracle.meta_params(transformers.BambaForCausalLM, config)


def eager_flops(config: dict, batch: int, seq_len: int, context: int = 0, use_cache: bool = False) -> int:
    """FlopCounterMode over one forward of `seq_len` tokens after a prefill of `context` (not counted)."""
    return oracle.eager_flops(transformers.BambaForCausalLM, config, batch, seq_len, context, use_cache,
                              attn_implementation="eager")


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["bamba"].items():
        assert getattr(transformers.BambaConfig, key) == value, key


def test_the_default_config(tmp_path):
    source = read_hf_config(write(tmp_path, {"model_type": "bamba"}))
    spec = source.spec
    assert spec.block_pattern == ["mamba2+mlp"] and spec.n_layers == 32
    z = spec.sizes("mamba2")
    # mamba_d_head 'auto': 2 * 4096 // 128 = 64
    assert (z.n_heads, z.head_dim, z.d_state, z.n_groups, z.conv_kernel, z.chunk_size) == (128, 64, 256, 1, 4, 256)
    assert count(spec).params.total == meta_params({"model_type": "bamba"})


@st.composite
def configs(draw) -> dict:
    groups = draw(st.integers(1, 2))
    heads = groups * draw(st.integers(1, 3))
    expand = draw(st.integers(1, 2))
    kv = draw(st.integers(1, 2))
    layers = draw(st.integers(1, 4))
    config = {"model_type": "bamba", "num_hidden_layers": layers,
              "hidden_size": heads * draw(st.integers(1, 4)), "mamba_expand": expand, "mamba_n_heads": heads,
              "mamba_n_groups": groups, "mamba_d_state": draw(st.integers(1, 5)), "mamba_d_conv": draw(st.integers(1, 4)),
              "mamba_chunk_size": draw(st.integers(1, 6)), "mamba_conv_bias": draw(st.booleans()),
              "mamba_proj_bias": draw(st.booleans()), "num_attention_heads": kv * draw(st.integers(1, 2)),
              "num_key_value_heads": kv, "intermediate_size": draw(st.integers(1, 24)),
              "attention_bias": draw(st.booleans()), "mlp_bias": draw(st.booleans()),
              "tie_word_embeddings": draw(st.booleans()), "vocab_size": draw(st.integers(8, 32)),
              "max_position_embeddings": 64,
              "attn_layer_indices": draw(st.none() | st.lists(st.integers(-1, layers), max_size=layers))}
    if draw(st.booleans()):
        config["head_dim"] = draw(st.integers(1, 6))
    assume(config["hidden_size"] >= config["num_attention_heads"] or "head_dim" in config)
    return config


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(configs())
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 9))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_flops(config, batch, seq_len)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_decode_step_after_a_cache_matches_transformers(tmp_path_factory, data):
    config = data.draw(configs())
    # transformers' cached forward needs an attention block (get_seq_length): the last block's
    config["attn_layer_indices"] = [*(config["attn_layer_indices"] or []), config["num_hidden_layers"] - 1]
    batch, context = data.draw(st.integers(1, 2)), data.draw(st.integers(config["mamba_d_conv"], 7))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    decode = count(spec, Workload(phase="decode", batch_size=batch, seq_len=1, context=context))
    assert decode.flops.forward == eager_flops(config, batch, 1, context)


@pytest.mark.parametrize("changes, message", [
    ({"mamba_n_heads": 96}, "mamba_n_heads=96 is not modelled: does not divide mamba_expand * hidden_size = 8192"),
    ({"mamba_d_head": 32}, "mamba_d_head=32 is not modelled: the mixer's inner width 8192 is not mamba_n_heads=128"),
    ({"mamba_d_head": "half"}, "mamba_d_head='half' is not modelled: expected an integer or 'auto'"),
    ({"mamba_n_groups": 3}, "mamba_n_groups=3 is not modelled: does not divide mamba_n_heads=128"),
    ({"mamba_d_state": None}, "mamba_d_state=None is not modelled: BambaMixer needs a value"),
    ({"mamba_expand": 0}, "mamba_expand=0 is not modelled"),
    ({"attn_layer_indices": [1], "num_key_value_heads": 3},
     "num_key_value_heads=3 is not modelled: does not divide"),
    ({"attn_layer_indices": [0], "hidden_size": 16, "mamba_n_heads": 4},
     "hidden_size=16 is not modelled: fewer channels than num_attention_heads=32"),
    ({"num_hidden_layers": 70_000, "attn_layer_indices": [0]}, "num_hidden_layers=70000 is not modelled"),
    ({"hidden_act": "tanh"}, "hidden_act='tanh' is not modelled"),
    ({"mamba_conv_bias": "true"}, "mamba_conv_bias='true': expected a boolean (true or false) or null"),
    ({"attn_layer_indices": [1.0]}, "attn_layer_indices=[1.0]: expected a list of integers or null"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "bamba", **changes}))
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize("config", [
    {"num_hidden_layers": 4, "attn_layer_indices": [1, 9], "hidden_size": 16, "mamba_n_heads": 4, "mamba_d_state": 6,
     "mamba_n_groups": 2, "mamba_d_conv": 3, "mamba_chunk_size": 4, "vocab_size": 40, "num_attention_heads": 4,
     "num_key_value_heads": 2, "intermediate_size": 24, "attention_bias": True},
    {"num_hidden_layers": 3, "attn_layer_indices": [2], "hidden_size": 24, "mamba_expand": 1, "mamba_n_heads": 3,
     "mamba_d_head": 8, "mamba_d_state": 2, "mamba_n_groups": 1, "mamba_d_conv": 2, "mamba_chunk_size": 16,
     "vocab_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 6, "intermediate_size": 20,
     "mamba_proj_bias": True, "mamba_conv_bias": False, "mlp_bias": True, "tie_word_embeddings": True},
], ids=["biased-attention", "head_dim-biases-tied-one-chunk"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    path = write(tmp_path, {"model_type": "bamba", "max_position_embeddings": 64, **config})
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=9))
    assert report.match and all(r.match for r in report.rows), report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    D = config["hidden_size"]
    assert rows["params", "mamba2/norm+attention/norm"].transformers == config["num_hidden_layers"] * D
