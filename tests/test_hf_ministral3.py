"""Ministral 3 (ministral3) from its config.json: exact against transformers' Ministral3ForCausalLM (sum(numel) on
meta, FlopCounterMode forward FLOPs with eager attention), with transformers' defaults, and refusals by field name."""

import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import hf_model

CLASS = transformers.Ministral3ForCausalLM
ACTS = ["silu", "gelu", "gelu_pytorch_tanh", "relu"]


def meta_params(config: dict) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in CLASS(hf_config(config)).parameters())


def eager_forward_flops(config: dict, batch: int, seq_len: int) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = CLASS._from_config(hf_config(config), attn_implementation="eager")
        ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=ids)
    return counter.get_total_flops()


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["ministral3"].items():
        assert getattr(CLASS.config_class, key) == value, key


def test_default_config_is_transformers_class_on_meta(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "ministral3"})).spec
    assert spec.d_head == 128 and spec.n_kv_heads == 8 and spec.sliding_window is None
    assert count(spec).params.total == meta_params({"model_type": "ministral3"})


@st.composite
def configs(draw) -> dict:
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    config = {"model_type": "ministral3", "num_hidden_layers": draw(st.integers(1, 4)), "num_attention_heads": heads,
              "num_key_value_heads": kv, "intermediate_size": draw(st.integers(2, 12)),
              "vocab_size": draw(st.integers(16, 64)), "tie_word_embeddings": draw(st.booleans()),
              "max_position_embeddings": draw(st.integers(8, 64)), "hidden_act": draw(st.sampled_from(ACTS)),
              "sliding_window": draw(st.none() | st.integers(1, 6)), "pad_token_id": 0, "bos_token_id": 0,
              "eos_token_id": 0}
    config |= {"hidden_size": draw(st.sampled_from([8, 12, 16])), "head_dim": draw(st.sampled_from([2, 4, 6]))}
    return config


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(configs())
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 8))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec.replace(batch_size=batch,
                                                                                     seq_len=seq_len)
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_forward_flops(config, batch, seq_len)
    assert spec.sliding_window == config["sliding_window"]  # in every block when set
    assert spec.attention_pattern is None and spec.sliding_window_layers is None


@pytest.mark.parametrize("changes, message", [
    ({"head_dim": None}, "head_dim=None: expected an integer"),
    ({"num_key_value_heads": None}, "num_key_value_heads=None: expected an integer"),
    ({"sliding_window": 0}, "sliding_window=0: Input should be greater than 0"),
    ({"sliding_window": "4096"}, "sliding_window='4096': expected"),
    ({"hidden_act": "swiglu"}, "hidden_act='swiglu' is not modelled"),
    ({"text_config": {}}, "text_config"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "ministral3", **changes}))
    assert message in str(e.value), str(e.value)


def test_check_hf_config_matches_every_component(tmp_path):
    config = {"model_type": "ministral3", "num_hidden_layers": 3, "hidden_size": 48, "intermediate_size": 24,
              "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 97,
              "sliding_window": 4, "max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": 0,
              "eos_token_id": 0}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=16))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "attention/qkv"].transformers == 3 * 48 * (6 + 2 + 2) * 16
