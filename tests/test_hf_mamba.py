"""Mamba (mamba) from its config.json: exact against transformers' MambaForCausalLM (sum(numel) on meta,
FlopCounterMode forward FLOPs of an eager CPU forward over its pure-torch path: train or prefill, a decode step after
a cache, a prefill after a cache), with transformers' defaults, refusals by field name and the check against
transformers per component."""

import math

import pytest
import transformers
import hf_oracle as oracle
from hf_oracle import write
from hypothesis import given, settings
from hypothesis import strategies as st

from tfcalc import TfcalcError, Workload, count
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import check, hf_model


def meta_params(config: dict) -> int:
    return oracle.meta_params(transformers.MambaForCausalLM, config)


def eager_flops(config: dict, batch: int, seq_len: int, context: int = 0, use_cache: bool = False) -> int:
    """FlopCounterMode over one forward of `seq_len` tokens after a prefill of `context` (not counted)."""
    return oracle.eager_flops(transformers.MambaForCausalLM, config, batch, seq_len, context, use_cache)


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["mamba"].items():
        assert getattr(transformers.MambaConfig, key) == value, key


def test_the_default_config(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "mamba"})).spec
    assert spec.block_pattern == ["mamba"] and spec.n_layers == 32 and spec.tie_embeddings is True
    z = spec.sizes("mamba")
    assert (z.d_state, z.d_conv, z.inner(768), z.dt_rank, z.conv_bias, z.bias) == (16, 4, 1536, 48, True, False)
    # the tied embedding 50280 * 768; each block: in_proj 768 * 3072, conv 1536 * (4 + 1), x_proj 1536 * (48 + 32),
    # dt_proj 48 * 1536 + 1536, A_log 1536 * 16, D 1536, out_proj 1536 * 768, norm 768; final norm 768
    block = 768 * 3072 + 1536 * 5 + 1536 * 80 + 48 * 1536 + 1536 + 1536 * 16 + 1536 + 1536 * 768 + 768
    assert count(spec).params.total == 50280 * 768 + 32 * block + 768 == meta_params({"model_type": "mamba"})


@st.composite
def configs(draw) -> dict:
    config = {"model_type": "mamba", "num_hidden_layers": draw(st.integers(1, 2)),
              "hidden_size": draw(st.integers(1, 20)), "expand": draw(st.integers(1, 2)),
              "state_size": draw(st.integers(1, 4)), "conv_kernel": draw(st.integers(1, 4)),
              "use_bias": draw(st.booleans()), "use_conv_bias": draw(st.booleans()),
              "tie_word_embeddings": draw(st.booleans()), "vocab_size": draw(st.integers(8, 32))}
    if draw(st.booleans()):
        config["time_step_rank"] = draw(st.integers(1, 5))
    return config


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(configs())
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 6))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    # a forward without a cache: the conv's s + K - 1 positions, one scan step per token
    assert result.flops.forward == eager_flops(config, batch, seq_len)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_decode_and_prefill_after_a_cache_match_transformers(tmp_path_factory, data):
    config = data.draw(configs())
    K = config["conv_kernel"]
    batch, context = data.draw(st.integers(1, 2)), data.draw(st.integers(K, 6))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    # one token after the cache: causal_conv1d_update (2 outputs) and the recurrent step (one bmm)
    decode = count(spec, Workload(phase="decode", batch_size=batch, seq_len=1, context=context))
    assert decode.flops.forward == eager_flops(config, batch, 1, context)
    # several tokens after the cache: the conv over K cached + s new positions, the scan from a zero state;
    # transformers' forward scores every position, tfcalc's prefill the last one (the head's difference)
    s = data.draw(st.integers(2, 4))
    prefill = count(spec, Workload(phase="prefill", batch_size=batch, seq_len=s, context=context))
    head = 2 * batch * (s - 1) * config["hidden_size"] * config["vocab_size"]
    assert prefill.flops.forward + head == eager_flops(config, batch, s, context)


@pytest.mark.parametrize("changes, message", [
    ({"expand": 0}, "expand=0 is not modelled"),
    ({"time_step_rank": "half"}, "time_step_rank='half' is not modelled: expected an integer or 'auto'"),
    ({"time_step_rank": None}, "time_step_rank=None: expected an integer or a string"),  # as MambaConfig types it
    ({"time_step_rank": 0}, "time_step_rank=0 is not modelled"),
    ({"hidden_act": "tanh"}, "hidden_act='tanh' is not modelled"),
    ({"state_size": 0}, "state_size=0: expected a positive integer"),
    ({"use_conv_bias": "true"}, "use_conv_bias='true': expected a boolean"),
    ({"expand": 2.0}, "expand=2.0: expected an integer"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "mamba", **changes}))
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize("config", [
    {"num_hidden_layers": 2, "hidden_size": 20, "state_size": 3, "conv_kernel": 3, "vocab_size": 30},
    {"num_hidden_layers": 3, "hidden_size": 12, "expand": 1, "state_size": 1, "conv_kernel": 4, "time_step_rank": 5,
     "vocab_size": 32, "use_bias": True, "use_conv_bias": False, "tie_word_embeddings": False},
], ids=["tied-auto-rank", "biases-untied-rank"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    path = write(tmp_path, {"model_type": "mamba", **config})
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=5))
    assert report.match and all(r.match for r in report.rows), report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    inner, n = config.get("expand", 2) * config["hidden_size"], config["state_size"]
    rank = config.get("time_step_rank", math.ceil(config["hidden_size"] / 16))
    # the mixer's own: the conv, dt_proj's matmul and the scan's bmm per token
    K, L = config["conv_kernel"], config["num_hidden_layers"]
    assert rows["forward", "mamba/conv+dt_proj+scan"].transformers == L * 2 * 2 * (
        (5 + K - 1) * inner * K + 5 * rank * inner + 5 * inner * n)


def test_check_hf_config_knows_the_padded_conv(tmp_path):
    # check --hf-config runs transformers with a cache: with s = 2 < K = 4 the conv is padded to K positions first
    config = {"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 8, "state_size": 2, "conv_kernel": 4,
              "vocab_size": 16}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=2))
    assert report.match
    differ = {(r.figure, r.component): r for r in report.rows if not r.match}
    assert set(differ) == {("forward", "mamba/conv+dt_proj+scan"), ("forward", "total")}
    for row in differ.values():  # 2 blocks x 2 b d_inner K (K - s)
        assert row.known and row.transformers - row.analytic == 2 * 2 * 2 * 16 * 4 * 2


def test_the_default_stack_on_meta_agrees_with_flop_counter_and_fvcore(tmp_path):
    # the default Mamba config (32 blocks of the mixer alone), one block counted once per block
    spec = read_hf_config(write(tmp_path, {"model_type": "mamba"})).spec.replace(seq_len=16)
    for workload in (None, Workload(phase="decode", seq_len=1, context=1000, batch_size=2)):
        report = check(spec, "meta", fold=True, workload=workload)
        assert report.match and all(row.match for row in [*report.forward, *report.params])
