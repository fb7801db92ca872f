"""GLM-4 (glm4) from its config.json: exact against transformers' Glm4ForCausalLM (sum(numel) on meta,
FlopCounterMode forward FLOPs with eager attention), with transformers' defaults, and refusals by field name."""

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

CLASS = transformers.Glm4ForCausalLM
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
    for key, value in DEFAULTS["glm4"].items():
        assert getattr(CLASS.config_class, key) == value, key


def test_default_config_is_transformers_class_on_meta(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "glm4"})).spec
    assert (spec.d_head, spec.rotary_dim, spec.n_kv_heads) == (128, 64, 2)
    assert spec.norm_position == "sandwich" and spec.qkv_bias is True and spec.bias is False
    assert count(spec).params.total == meta_params({"model_type": "glm4"}) == 9_400_279_040


@st.composite
def configs(draw) -> dict:
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    config = {"model_type": "glm4", "num_hidden_layers": draw(st.integers(1, 4)), "num_attention_heads": heads,
              "num_key_value_heads": kv, "intermediate_size": draw(st.integers(2, 12)),
              "vocab_size": draw(st.integers(16, 64)), "tie_word_embeddings": draw(st.booleans()),
              "attention_bias": draw(st.booleans()), "max_position_embeddings": draw(st.integers(8, 64)),
              "hidden_act": draw(st.sampled_from(ACTS)), "hidden_size": draw(st.sampled_from([8, 12, 16])),
              "head_dim": draw(st.sampled_from([2, 4, 6, 8])), "pad_token_id": 0, "bos_token_id": 0,
              "eos_token_id": 0}
    factor = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])
    where = draw(st.sampled_from(["none", "top", "rope", "both"]))
    if where in ("top", "both"):
        config["partial_rotary_factor"] = draw(factor)
    if where in ("rope", "both"):
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                                     "partial_rotary_factor": draw(factor)}
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
    # the rotated channels are transformers' cos/sin width
    factor = hf_config(config).rope_parameters["partial_rotary_factor"]
    dim = int(config["head_dim"] * factor)
    rotated = spec.rotary_dim if spec.rotary_dim is not None else (0 if spec.positions == "none" else spec.d_head)
    assert rotated == dim + dim % 2


@pytest.mark.parametrize("changes, message", [
    ({"head_dim": None}, "head_dim=None: expected an integer"),
    ({"num_key_value_heads": None}, "num_key_value_heads=None: expected an integer"),
    ({"partial_rotary_factor": None}, "partial_rotary_factor=None is not modelled"),
    ({"partial_rotary_factor": 1.5}, "partial_rotary_factor=1.5 is not modelled"),
    ({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": "half"}},
     "rope_parameters.partial_rotary_factor='half' is not modelled"),
    ({"head_dim": 5, "partial_rotary_factor": 1.0}, "partial_rotary_factor=1.0 is not modelled: its tables turn 6"),
    ({"hidden_act": "swiglu"}, "hidden_act='swiglu' is not modelled"),
    ({"attention_bias": "yes"}, "attention_bias='yes': expected a boolean"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "glm4", **changes}))
    assert message in str(e.value), str(e.value)


def test_check_hf_config_matches_every_component(tmp_path):
    config = {"model_type": "glm4", "num_hidden_layers": 3, "hidden_size": 48, "intermediate_size": 24,
              "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 97,
              "max_position_embeddings": 64, "attention_bias": True, "pad_token_id": 0, "bos_token_id": 0,
              "eos_token_id": 0}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=16))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "attention/qkv"].transformers == 3 * (48 + 1) * (6 + 2 + 2) * 16
    assert rows["params", "mlp/gate+up"].transformers == 3 * 48 * 2 * 24
    assert rows["params", "attention/post_norm"].transformers == rows["params", "mlp/post_norm"].transformers == 3 * 48
