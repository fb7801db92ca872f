"""Mamba2 (mamba2) from its config.json: exact against transformers' Mamba2ForCausalLM (sum(numel) on meta,
FlopCounterMode forward FLOPs of an eager CPU forward over its pure-torch path: train or prefill, a decode step after
a cache, a prefill after a cache), with transformers' defaults, refusals by field name and the check against
transformers per component."""

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
    return oracle.meta_params(transformers.Mamba2ForCausalLM, config)


def eager_flops(config: dict, batch: int, seq_len: int, context: int = 0, use_cache: bool = False) -> int:
    """FlopCounterMode over one forward of `seq_len` tokens after a prefill of `context` (not counted)."""
    return oracle.eager_flops(transformers.Mamba2ForCausalLM, config, batch, seq_len, context, use_cache)


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["mamba2"].items():
        assert getattr(transformers.Mamba2Config, key) == value, key


def test_the_default_config(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "mamba2"})).spec
    assert spec.block_pattern == ["mamba2"] and spec.n_layers == 64 and spec.tie_embeddings is False
    z = spec.sizes("mamba2")
    assert (z.n_heads, z.head_dim, z.d_state, z.n_groups, z.conv_kernel, z.chunk_size) == (128, 64, 128, 8, 4, 256)
    # embedding and head 2 * 32768 * 4096; each block: in_proj 4096 * (2 * 8192 + 2 * 8 * 128 + 128), conv 10240 *
    # (4 + 1), A_log, D, dt_bias 3 * 128, gated norm 8192, out_proj 8192 * 4096, norm 4096; final norm 4096
    block = 4096 * 18560 + 10240 * 5 + 384 + 8192 + 8192 * 4096 + 4096
    assert count(spec).params.total == 2 * 32768 * 4096 + 64 * block + 4096 == meta_params({"model_type": "mamba2"})


@st.composite
def configs(draw) -> dict:
    groups = draw(st.integers(1, 2))
    heads = groups * draw(st.integers(1, 3))
    head_dim = draw(st.integers(1, 4))
    expand = draw(st.integers(1, 2))
    inner = heads * head_dim
    hidden = inner // expand
    if hidden * expand != inner:  # hidden_size * expand must be num_heads * head_dim
        expand, hidden = 1, inner
    return {"model_type": "mamba2", "num_hidden_layers": draw(st.integers(1, 3)), "hidden_size": hidden,
            "expand": expand, "num_heads": heads, "head_dim": head_dim, "n_groups": groups,
            "state_size": draw(st.integers(1, 5)), "conv_kernel": draw(st.integers(1, 4)),
            "chunk_size": draw(st.integers(1, 6)), "use_bias": draw(st.booleans()),
            "use_conv_bias": draw(st.booleans()), "tie_word_embeddings": draw(st.booleans()),
            "vocab_size": draw(st.integers(8, 32))}


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(configs())
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 9))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    # a forward without a cache: the chunked scan over the padded sequence, the conv's s + K - 1 positions
    assert result.flops.forward == eager_flops(config, batch, seq_len)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_decode_and_prefill_after_a_cache_match_transformers(tmp_path_factory, data):
    config = data.draw(configs())
    K = config["conv_kernel"]
    batch, context = data.draw(st.integers(1, 2)), data.draw(st.integers(K, 8))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    # one token after the cache: causal_conv1d_update (2 outputs) and the recurrent scan (one bmm)
    decode = count(spec, Workload(phase="decode", batch_size=batch, seq_len=1, context=context))
    assert decode.flops.forward == eager_flops(config, batch, 1, context)
    # several tokens after the cache: the conv over K cached + s new positions, the chunked scan from the state;
    # transformers' forward scores every position, tfcalc's prefill the last one (the head's difference)
    s = data.draw(st.integers(2, 6))
    prefill = count(spec, Workload(phase="prefill", batch_size=batch, seq_len=s, context=context))
    head = 2 * batch * (s - 1) * config["hidden_size"] * config["vocab_size"]
    assert prefill.flops.forward + head == eager_flops(config, batch, s, context)


@pytest.mark.parametrize("changes, message", [
    ({"hidden_size": 16, "expand": 2, "num_heads": 4, "head_dim": 4},
     "expand=2 is not modelled: the mixer's inner width 32 is not num_heads=4 * head_dim=4 = 16"),
    ({"hidden_size": 24, "num_heads": 6, "head_dim": 4, "expand": 1, "n_groups": 4},
     "n_groups=4 is not modelled: does not divide num_heads=6"),
    ({"num_heads": 128, "n_groups": 3}, "n_groups=3 is not modelled: does not divide num_heads=128"),
    ({"expand": 0}, "expand=0 is not modelled"),
    ({"state_size": 0}, "state_size=0: expected a positive integer"),
    ({"use_conv_bias": "true"}, "use_conv_bias='true': expected a boolean"),
    ({"chunk_size": 64.0}, "chunk_size=64.0: expected an integer"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "mamba2", **changes}))
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize("config", [
    {"num_hidden_layers": 2, "hidden_size": 16, "num_heads": 4, "head_dim": 8, "state_size": 6, "n_groups": 2,
     "conv_kernel": 3, "chunk_size": 4, "vocab_size": 40},
    {"num_hidden_layers": 3, "hidden_size": 24, "expand": 1, "num_heads": 3, "head_dim": 8, "state_size": 4,
     "n_groups": 1, "conv_kernel": 4, "chunk_size": 16, "vocab_size": 32, "use_bias": True, "use_conv_bias": False,
     "tie_word_embeddings": True},
], ids=["two-groups-chunked", "biases-tied-one-chunk"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    path = write(tmp_path, {"model_type": "mamba2", **config})
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=9))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    assert all(r.match for r in report.rows), report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "mamba2/gated_norm"].transformers == config["num_hidden_layers"] * config["num_heads"] * 8


def test_check_hf_config_knows_the_padded_conv(tmp_path):
    # check --hf-config runs transformers with a cache: with s = 2 < K = 4 the conv is padded to K positions first
    config = {"model_type": "mamba2", "num_hidden_layers": 2, "hidden_size": 8, "num_heads": 2, "head_dim": 8,
              "state_size": 2, "n_groups": 1, "conv_kernel": 4, "chunk_size": 4, "vocab_size": 16}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=2))
    assert report.match
    differ = {(r.figure, r.component): r for r in report.rows if not r.match}
    assert set(differ) == {("forward", "mamba2/conv+scan"), ("forward", "total")}
    channels = 16 + 2 * 2  # d_inner + 2 g n
    for row in differ.values():  # 2 blocks x 2 b C K (K - s)
        assert row.known and row.transformers - row.analytic == 2 * 2 * 2 * channels * 4 * 2


def test_a_pure_mamba2_stack_on_meta_agrees_with_flop_counter_and_fvcore(tmp_path):
    # the default Mamba2 config (64 blocks of the mixer alone), one block counted once per block
    spec = read_hf_config(write(tmp_path, {"model_type": "mamba2"})).spec.replace(seq_len=1000)
    for workload in (None, Workload(phase="decode", seq_len=1, context=1000, batch_size=2)):
        report = check(spec, "meta", fold=True, workload=workload)
        assert report.match and all(row.match for row in [*report.forward, *report.params])
