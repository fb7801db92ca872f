"""Phi-3.5-MoE (phimoe) from its config.json: exact against transformers' PhimoeForCausalLM (sum(numel) on meta,
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

CLASS = transformers.PhimoeForCausalLM
ACTS = ["silu", "gelu", "gelu_pytorch_tanh", "relu"]


def meta_params(config: dict) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in CLASS(hf_config(config)).parameters())


def eager_forward_flops(config: dict, batch: int, seq_len: int) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = CLASS._from_config(hf_config(config), attn_implementation="eager", experts_implementation="eager")
        ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=ids)
    return counter.get_total_flops()


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["phimoe"].items():
        assert getattr(CLASS.config_class, key) == value, key


def test_default_config_is_transformers_class_on_meta(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "phimoe"})).spec
    assert (spec.norm, spec.n_experts, spec.top_k, spec.sliding_window) == ("layernorm", 16, 2, None)
    assert count(spec).params.total == meta_params({"model_type": "phimoe"}) == 41_872_793_600  # Phi-3.5-MoE


@st.composite
def configs(draw) -> dict:
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    tied = draw(st.booleans())
    config = {"model_type": "phimoe", "num_hidden_layers": draw(st.integers(1, 4)), "num_attention_heads": heads,
              "num_key_value_heads": kv, "intermediate_size": draw(st.integers(1, 8)),
              "vocab_size": draw(st.integers(16, 64)), "tie_word_embeddings": tied,
              "lm_head_bias": False if tied else draw(st.booleans()), "attention_bias": draw(st.booleans()),
              "max_position_embeddings": draw(st.integers(8, 64)), "hidden_act": draw(st.sampled_from(ACTS)),
              "num_local_experts": draw(st.integers(2, 6)), "num_experts_per_tok": 2,
              "sliding_window": draw(st.none() | st.integers(1, 6)), "pad_token_id": 0, "bos_token_id": 0,
              "eos_token_id": 0}
    if draw(st.booleans()):
        config |= {"hidden_size": draw(st.sampled_from([8, 12, 16])), "head_dim": draw(st.sampled_from([2, 4, 6]))}
    else:  # no head_dim: hidden_size // heads (even: rotary), divisible or not
        config["hidden_size"] = heads * draw(st.sampled_from([2, 4])) + draw(st.integers(0, heads - 1))
    if draw(st.booleans()):
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
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


@pytest.mark.parametrize("changes, message", [
    ({"head_dim": None}, "head_dim=None: expected an integer"),
    ({"num_key_value_heads": None}, "num_key_value_heads=None: expected an integer"),
    ({"num_experts_per_tok": 1}, "num_experts_per_tok=1 is not modelled: transformers' sparsemixer"),
    ({"num_experts_per_tok": 4}, "num_experts_per_tok=4 is not modelled"),
    ({"num_local_experts": 1}, "num_local_experts=1 is not modelled"),
    ({"tie_word_embeddings": True, "lm_head_bias": True}, "lm_head_bias=True is not modelled"),
    ({"sliding_window": 0}, "sliding_window=0"),
    ({"hidden_act": "swiglu"}, "hidden_act='swiglu' is not modelled"),
    ({"hidden_size": 2, "num_attention_heads": 4, "num_key_value_heads": 4}, "hidden_size=2 is not modelled"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "phimoe", **changes}))
    assert message in str(e.value), str(e.value)


def test_check_hf_config_matches_every_component(tmp_path):
    config = {"model_type": "phimoe", "num_hidden_layers": 3, "hidden_size": 48, "intermediate_size": 24,
              "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 97, "max_position_embeddings": 64,
              "attention_bias": True, "lm_head_bias": True, "num_local_experts": 4, "sliding_window": 4,
              "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=16))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "attention/norm"].transformers == 3 * 2 * 48  # LayerNorm: a weight and a bias
    assert rows["params", "moe/router"].transformers == 3 * 4 * 48
    assert rows["params", "moe/experts"].transformers == 3 * 4 * 3 * 48 * 24
    assert rows["params", "head"].transformers == 97 * 48 + 97


def test_sparsemixer_routes_every_token_to_two_experts_whatever_num_experts_per_tok_says(tmp_path):
    # why num_experts_per_tok other than 2 is refused: transformers' forward FLOPs are those of 2 experts per token
    config = {"model_type": "phimoe", "num_hidden_layers": 2, "hidden_size": 16, "intermediate_size": 8,
              "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32, "num_local_experts": 4,
              "num_experts_per_tok": 2, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
    spec = read_hf_config(write(tmp_path, config)).spec
    ours = count(spec, Workload(batch_size=2, seq_len=5)).flops.forward
    for top_k in (1, 3, 4):
        assert eager_forward_flops(config | {"num_experts_per_tok": top_k}, 2, 5) == ours
