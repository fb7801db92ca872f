"""GLM-4.5 (glm4_moe) from its config.json: exact against transformers' Glm4MoeForCausalLM (sum(numel) on meta,
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

CLASS = transformers.Glm4MoeForCausalLM
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
    for key, value in DEFAULTS["glm4_moe"].items():
        assert getattr(CLASS.config_class, key) == value, key


def test_default_config_is_transformers_class_on_meta(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "glm4_moe"})).spec
    # no head_dim: hidden_size // heads = 4,096 // 96 = 42, not a divisor; rotary int(42 * 0.5) = 21 -> 22 channels
    assert (spec.d_head, spec.rotary_dim, spec.first_dense_layers, spec.d_shared_expert) == (42, 22, 1, 1408)
    assert count(spec).params.total == meta_params({"model_type": "glm4_moe"}) == 103_481_200_640


@st.composite
def configs(draw) -> dict:
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    layers = draw(st.integers(1, 4))
    groups = draw(st.integers(1, 3))
    per_group = draw(st.integers(2, 3))
    topk_group = draw(st.integers(1, groups))
    config = {"model_type": "glm4_moe", "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv, "intermediate_size": draw(st.integers(2, 12)),
              "vocab_size": draw(st.integers(16, 64)), "tie_word_embeddings": draw(st.booleans()),
              "attention_bias": draw(st.booleans()), "max_position_embeddings": draw(st.integers(8, 64)),
              "hidden_act": draw(st.sampled_from(ACTS)), "use_qk_norm": draw(st.booleans()),
              "n_routed_experts": groups * per_group, "n_group": groups, "topk_group": topk_group,
              "num_experts_per_tok": draw(st.integers(1, topk_group * per_group)),
              "moe_intermediate_size": draw(st.integers(1, 8)), "n_shared_experts": draw(st.integers(0, 2)),
              "first_k_dense_replace": draw(st.integers(0, layers + 1)), "norm_topk_prob": draw(st.booleans()),
              "routed_scaling_factor": draw(st.sampled_from([1.0, 2.5])), "pad_token_id": 0, "bos_token_id": 0,
              "eos_token_id": 0}
    if draw(st.booleans()):
        config |= {"hidden_size": draw(st.sampled_from([8, 12, 16])), "head_dim": draw(st.sampled_from([2, 4, 6]))}
    else:  # no head_dim: hidden_size // heads (even: a whole rotated head), divisible or not
        config["hidden_size"] = heads * draw(st.sampled_from([2, 4])) + draw(st.integers(0, heads - 1))
    factor = st.sampled_from([0.0, 0.25, 0.5, 1.0])
    where = draw(st.sampled_from(["none", "top", "rope"]))
    if where == "top":
        config["partial_rotary_factor"] = draw(factor)
    elif where == "rope":
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                                     "partial_rotary_factor": draw(factor)}
    if draw(st.booleans()):  # the attribute_map name, read over n_routed_experts (routing unchanged: the same total)
        config["num_local_experts"] = config.pop("n_routed_experts")
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


@pytest.mark.parametrize("changes, message", [
    ({"head_dim": None}, "head_dim=None: expected an integer"),
    ({"num_key_value_heads": None}, "num_key_value_heads=None: expected an integer"),
    ({"n_routed_experts": 1, "n_group": 1}, "n_routed_experts=1 is not modelled"),
    ({"num_local_experts": 1, "n_group": 1}, "num_local_experts=1 is not modelled"),
    ({"n_group": 3}, "n_group=3 is not modelled: the group-limited router needs n_group dividing"),
    ({"n_group": 0}, "n_group=0 is not modelled"),
    ({"n_group": 128}, "n_group=128 is not modelled: the router scores each group by its top 2"),
    ({"n_group": 4, "topk_group": 5}, "topk_group=5 is not modelled"),
    ({"n_group": 4, "topk_group": 1, "num_experts_per_tok": 33}, "num_experts_per_tok=33 is not modelled"),
    ({"first_k_dense_replace": -1}, "first_k_dense_replace=-1"),
    ({"partial_rotary_factor": None}, "partial_rotary_factor=None is not modelled"),
    ({"use_qk_norm": 1}, "use_qk_norm=1: expected a boolean"),
    ({"hidden_size": 2, "num_attention_heads": 4, "num_key_value_heads": 4}, "hidden_size=2 is not modelled"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "glm4_moe", **changes}))
    assert message in str(e.value), str(e.value)


def test_check_hf_config_matches_every_component(tmp_path):
    config = {"model_type": "glm4_moe", "num_hidden_layers": 3, "hidden_size": 48, "intermediate_size": 24,
              "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 97,
              "max_position_embeddings": 64, "attention_bias": True, "use_qk_norm": True, "n_routed_experts": 8,
              "n_group": 2, "topk_group": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 12,
              "n_shared_experts": 2, "first_k_dense_replace": 1, "pad_token_id": 0, "bos_token_id": 0,
              "eos_token_id": 0}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=16))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "moe/router"].transformers == 2 * 8 * 48  # a weight [E, D]; the score bias is a buffer
    assert rows["params", "moe/shared_experts"].transformers == 2 * 3 * 48 * 24
    assert rows["params", "moe/experts"].transformers == 2 * 8 * 3 * 48 * 12
    assert rows["params", "attention/q_norm"].transformers == 3 * 16
