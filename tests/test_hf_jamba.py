"""Jamba (jamba) from its config.json: exact against transformers' JambaForCausalLM (sum(numel) on meta, FlopCounterMode
forward FLOPs of an eager CPU forward over its pure-torch path with real routing, a decode step after a cache too),
with transformers' defaults, refusals by field name and the check against transformers per component."""

import pytest
import transformers
import hf_oracle as oracle
from hf_oracle import write
from hypothesis import given, settings
from hypothesis import strategies as st

from tfcalc import TfcalcError, Workload, count
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import hf_model


def meta_params(config: dict) -> int:
    return oracle.meta_params(transformers.JambaForCausalLM, config)


def eager_flops(config: dict, batch: int, seq_len: int, context: int = 0, use_cache: bool = False) -> int:
    """FlopCounterMode over one forward of `seq_len` tokens after a prefill of `context` (not counted)."""
    return oracle.eager_flops(transformers.JambaForCausalLM, config, batch, seq_len, context, use_cache,
                              attn_implementation="eager", experts_implementation="eager")


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["jamba"].items():
        assert getattr(transformers.JambaConfig, key) == value, key


def test_the_default_config(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "jamba"})).spec
    # attention at block 4 of every 8, experts at every odd block
    assert spec.block_pattern == ["mamba+mlp", "mamba+moe", "mamba+mlp", "mamba+moe", "attention+mlp", "mamba+moe",
                                  "mamba+mlp", "mamba+moe"] and spec.n_layers == 32
    assert (spec.n_experts, spec.top_k, spec.positions) == (16, 2, "none")
    z = spec.sizes("mamba")
    assert (z.d_state, z.d_conv, z.inner(4096), z.dt_rank, z.inner_norms) == (16, 4, 8192, 256, True)
    assert count(spec).params.total == meta_params({"model_type": "jamba"})


@st.composite
def configs(draw) -> dict:
    kv = draw(st.integers(1, 2))
    layers = draw(st.integers(1, 4))
    attn_period, expert_period = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    experts = draw(st.integers(1, 4))
    config = {"model_type": "jamba", "num_hidden_layers": layers, "hidden_size": draw(st.integers(2, 12)),
              "num_attention_heads": kv * draw(st.integers(1, 2)), "num_key_value_heads": kv,
              "intermediate_size": draw(st.integers(1, 12)), "num_experts": experts,
              "num_experts_per_tok": draw(st.integers(1, experts)), "attn_layer_period": attn_period,
              "attn_layer_offset": draw(st.integers(0, attn_period - 1)), "expert_layer_period": expert_period,
              "expert_layer_offset": draw(st.integers(0, expert_period - 1)),
              "mamba_d_state": draw(st.integers(1, 4)), "mamba_d_conv": draw(st.integers(1, 4)),
              "mamba_expand": draw(st.integers(1, 2)), "mamba_conv_bias": draw(st.booleans()),
              "mamba_proj_bias": draw(st.booleans()), "hidden_act": draw(st.sampled_from(["silu", "gelu"])),
              "tie_word_embeddings": draw(st.booleans()), "vocab_size": draw(st.integers(8, 32)),
              "max_position_embeddings": 64}
    if draw(st.booleans()):
        config["mamba_dt_rank"] = draw(st.integers(1, 4))
    if draw(st.booleans()) or config["hidden_size"] < config["num_attention_heads"]:
        config["head_dim"] = draw(st.integers(1, 6))
    return config


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(configs())
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 6))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_flops(config, batch, seq_len)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_decode_step_after_a_cache_matches_transformers(tmp_path_factory, data):
    config = data.draw(configs())
    # transformers' cached forward needs an attention block (get_seq_length): block 0's when no other has one
    if not any(i % config["attn_layer_period"] == config["attn_layer_offset"]
               for i in range(config["num_hidden_layers"])):
        config["attn_layer_offset"] = 0
    batch, context = data.draw(st.integers(1, 2)), data.draw(st.integers(config["mamba_d_conv"], 6))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    decode = count(spec, Workload(phase="decode", batch_size=batch, seq_len=1, context=context))
    assert decode.flops.forward == eager_flops(config, batch, 1, context)


@pytest.mark.parametrize("changes, message", [
    ({"attn_layer_offset": 8}, "attn_layer_offset=8 is not modelled: must be smaller than attn_layer_period=8"),
    ({"expert_layer_offset": 2}, "expert_layer_offset=2 is not modelled: must be smaller than expert_layer_period=2"),
    ({"num_experts_per_tok": 17}, "num_experts_per_tok=17 is not modelled: more than num_experts=16"),
    ({"num_key_value_heads": 3}, "num_key_value_heads=3 is not modelled: does not divide num_attention_heads=32"),
    ({"hidden_size": 16}, "hidden_size=16 is not modelled: fewer channels than num_attention_heads=32"),
    ({"mamba_dt_rank": "half"}, "mamba_dt_rank='half' is not modelled: expected an integer or 'auto'"),
    ({"mamba_expand": 0}, "mamba_expand=0 is not modelled"),
    ({"hidden_act": "tanh"}, "hidden_act='tanh' is not modelled"),
    ({"num_hidden_layers": 70_000}, "num_hidden_layers=70000 is not modelled"),
    ({"mamba_conv_bias": "true"}, "mamba_conv_bias='true': expected a boolean"),
    ({"attn_layer_period": 0}, "attn_layer_period=0: expected a positive integer"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "jamba", **changes}))
    assert message in str(e.value), str(e.value)


def test_num_local_experts_is_read_as_num_experts(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "jamba", "num_local_experts": 8})).spec
    assert spec.n_experts == 8


@pytest.mark.parametrize("config", [
    {"num_hidden_layers": 4, "hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
     "intermediate_size": 24, "num_experts": 4, "attn_layer_period": 2, "attn_layer_offset": 1, "mamba_d_state": 3,
     "mamba_d_conv": 3, "vocab_size": 30},
    {"num_hidden_layers": 3, "hidden_size": 12, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 5,
     "intermediate_size": 10, "num_experts": 3, "num_experts_per_tok": 3, "expert_layer_period": 3,
     "expert_layer_offset": 0, "attn_layer_period": 3, "attn_layer_offset": 2, "mamba_d_state": 2,
     "mamba_d_conv": 2, "mamba_expand": 1, "mamba_dt_rank": 4, "mamba_proj_bias": True, "mamba_conv_bias": False,
     "vocab_size": 20, "tie_word_embeddings": True},
], ids=["alternating", "head_dim-biases-tied"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    path = write(tmp_path, {"model_type": "jamba", "max_position_embeddings": 64, **config})
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=5))
    assert report.match and all(r.match for r in report.rows), report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    mamba_blocks = sum(i % config["attn_layer_period"] != config["attn_layer_offset"]
                       for i in range(config["num_hidden_layers"]))
    assert rows["params", "mamba/b_norm"].transformers == mamba_blocks * config["mamba_d_state"]
    assert rows["forward", "moe/experts"].transformers > 0


def test_a_jamba_stack_on_meta_agrees_with_flop_counter_and_fvcore(tmp_path):
    from tfcalc.verify import check

    config = {"model_type": "jamba", "num_hidden_layers": 4, "hidden_size": 16, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 24, "num_experts": 4, "attn_layer_period": 4,
              "attn_layer_offset": 2, "mamba_d_state": 3, "mamba_d_conv": 3, "vocab_size": 30,
              "max_position_embeddings": 64}
    spec = read_hf_config(write(tmp_path, config)).spec.replace(seq_len=6)
    for workload in (None, Workload(phase="decode", seq_len=1, context=9, batch_size=2)):
        report = check(spec, "meta", workload=workload) if workload else check(spec, "meta")
        assert report.match and all(row.match for row in [*report.forward, *report.params])


def test_the_state_per_sequence(tmp_path):
    from tfcalc.plan.memory import inference_memory

    spec = read_hf_config(write(tmp_path, {"model_type": "jamba"})).spec
    m = inference_memory(spec, Workload(phase="decode", seq_len=1, context=4096, batch_size=2))
    # 28 Mamba blocks: the conv's last 3 positions of 8192 channels (bf16) and the state [8192, 16] in fp32
    assert m.state.to_dict() == {"mamba/conv": 28 * 2 * 8192 * 3 * 2, "mamba/scan": 28 * 2 * 8192 * 16 * 4}
    # 4 attention blocks: 4097 tokens x 8 kv heads x (128 + 128) x 2 bytes
    assert m.kv_cache_bytes == 4 * 2 * 4097 * 8 * 256 * 2


# ai21labs/AI21-Jamba-1.5-Mini's config.json, as presets/jamba-1.5-mini.toml's source quotes it
JAMBA_15_MINI = {"model_type": "jamba", "attn_layer_offset": 4, "attn_layer_period": 8, "expert_layer_offset": 1,
                 "expert_layer_period": 2, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
                 "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_dt_rank": 256,
                 "mamba_expand": 2, "mamba_proj_bias": False, "max_position_embeddings": 262144,
                 "num_attention_heads": 32, "num_experts": 16, "num_experts_per_tok": 2, "num_hidden_layers": 32,
                 "num_key_value_heads": 8, "tie_word_embeddings": False, "vocab_size": 65536}


def test_the_jamba_15_mini_preset_is_transformers_built_from_the_config(tmp_path):
    from tfcalc import find_preset, load_preset

    n_params = meta_params(JAMBA_15_MINI)
    # embedding and head 2 * 65536 * 4096; 28 Mamba mixers: in_proj 4096 * 16384, conv 8192 * 5, x_proj 8192 * 288,
    # norms 256 + 2 * 16, dt_proj 256 * 8192 + 8192, A_log 8192 * 16, D 8192, out_proj 8192 * 4096; 4 attention
    # mixers: 4096 * (4096 + 2 * 1024) + 4096 * 4096; 16 MLPs 3 * 4096 * 14336; 16 MoEs: router 4096 * 16 and 16
    # experts of 3 * 4096 * 14336; 2 norms per block, the final norm
    mamba = 4096 * 16384 + 8192 * 5 + 8192 * 288 + 288 + 256 * 8192 + 8192 + 8192 * 16 + 8192 + 8192 * 4096
    attention = 4096 * 6144 + 4096 * 4096
    mlp, moe = 3 * 4096 * 14336, 4096 * 16 + 16 * 3 * 4096 * 14336
    total = 2 * 65536 * 4096 + 28 * mamba + 4 * attention + 16 * mlp + 16 * moe + 65 * 4096
    assert n_params == total == 51_570_323_328  # the card's 52B
    preset = load_preset("jamba-1.5-mini")
    result = count(preset)
    assert result.params.total == n_params
    assert result.params.active == n_params - 16 * 14 * 3 * 4096 * 14336 == 12_110_311_296  # the card's 12B
    assert f"{n_params:,}" in find_preset("jamba-1.5-mini").source
    spec = read_hf_config(write(tmp_path, JAMBA_15_MINI)).spec
    assert spec.replace(name=preset.name) == preset


def test_the_jamba_15_mini_decode_state_and_kv_cache_apart():
    from tfcalc import load_preset
    from tfcalc.plan.memory import inference_memory

    m = inference_memory(load_preset("jamba-1.5-mini"), Workload(phase="decode", seq_len=1, context=131071))
    # 28 Mamba blocks: the conv's last 3 positions of 8192 channels in bf16 and the SSM state [8192, 16] in fp32
    assert m.state.to_dict() == {"mamba/conv": 28 * 8192 * 3 * 2, "mamba/scan": 28 * 8192 * 16 * 4}
    assert m.state_bytes == 16_056_320  # 15.3 MiB per sequence, whatever the context
    # 4 attention blocks: 131,072 tokens x 8 key/value heads x (128 + 128) x 2 bytes
    assert m.kv_cache_bytes == 4 * 131_072 * 8 * 256 * 2 == 2_147_483_648
