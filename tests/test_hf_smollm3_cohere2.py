"""SmolLM3 (smollm3) and Cohere 2 (cohere2) from their config.json: exact against transformers' SmolLM3ForCausalLM and
Cohere2ForCausalLM (sum(numel) on meta, FlopCounterMode forward FLOPs with eager attention), with transformers'
defaults, and refusals by field name."""

import json
import warnings

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count, find_preset, load_preset
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import hf_model

CLASSES = {"smollm3": transformers.SmolLM3ForCausalLM, "cohere2": transformers.Cohere2ForCausalLM}
LAYER_TYPES = ["sliding_attention", "full_attention"]
ACTS = ["silu", "gelu", "gelu_pytorch_tanh", "relu"]


def write(folder, config: dict, name="config.json"):
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def hf_config(config: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoConfig.for_model(**config)


def meta_params(config: dict) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in CLASSES[config["model_type"]](hf_config(config)).parameters())


def eager_forward_flops(config: dict, batch: int, seq_len: int) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = CLASSES[config["model_type"]]._from_config(hf_config(config), attn_implementation="eager")
        ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=ids)
    return counter.get_total_flops()


@pytest.mark.parametrize("model_type", CLASSES)
def test_defaults_are_transformers_defaults(model_type):
    for key, value in DEFAULTS[model_type].items():
        assert getattr(CLASSES[model_type].config_class, key) == value, key


@st.composite
def configs(draw, model_type: str) -> dict:
    """Small configs over every field the family reads, within what it models (even heads: rotary)."""
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    layers = draw(st.integers(1, 6))
    config = dict(model_type=model_type, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv, intermediate_size=draw(st.integers(2, 12)),
                  vocab_size=draw(st.integers(16, 64)), tie_word_embeddings=draw(st.booleans()),
                  attention_bias=draw(st.booleans()), max_position_embeddings=draw(st.integers(8, 64)),
                  hidden_act=draw(st.sampled_from(ACTS)), pad_token_id=0, bos_token_id=0, eos_token_id=0)
    if draw(st.booleans()):
        config |= dict(hidden_size=draw(st.sampled_from([8, 12, 16])), head_dim=draw(st.sampled_from([2, 4, 6])))
    else:
        config["hidden_size"] = heads * draw(st.sampled_from([2, 4]))
    if draw(st.booleans()):
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    if model_type == "smollm3":
        config |= dict(mlp_bias=draw(st.booleans()), use_sliding_window=draw(st.booleans()),
                       sliding_window=draw(st.none() | st.integers(1, 6)))
        if draw(st.booleans()):
            config["no_rope_layers"] = draw(st.lists(st.integers(0, 1), min_size=layers, max_size=layers + 2))
        else:
            config["no_rope_layer_interval"] = draw(st.integers(1, 4))
        if draw(st.booleans()):
            window_on = config["use_sliding_window"] and config["sliding_window"] is not None
            kinds = st.sampled_from(LAYER_TYPES if window_on else ["full_attention"])
            config["layer_types"] = draw(st.lists(kinds, min_size=layers, max_size=layers))
    else:
        config["sliding_window"] = draw(st.integers(1, 6))
        if draw(st.booleans()):
            config["layer_types"] = draw(st.lists(st.sampled_from(LAYER_TYPES), min_size=layers, max_size=layers))
        elif draw(st.booleans()):
            config["sliding_window_pattern"] = draw(st.integers(1, 8))
    return config


@pytest.mark.parametrize("model_type", CLASSES)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, model_type, data):
    config = data.draw(configs(model_type))
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 8))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec.replace(batch_size=batch,
                                                                                     seq_len=seq_len)
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_forward_flops(config, batch, seq_len)
    # the windows are in the blocks transformers masks as sliding (its layer_types)
    L = config["num_hidden_layers"]
    pattern = spec.attention_pattern or ["global"]
    ours = [pattern[i % len(pattern)] if spec.sliding_window else "global" for i in range(L)]
    assert ours == ["local" if t == "sliding_attention" else "global" for t in hf_config(config).layer_types]
    if spec.sliding_window:
        assert spec.sliding_window == config["sliding_window"]


@pytest.mark.parametrize("model_type, changes, message", [
    ("smollm3", {"num_hidden_layers": 4, "no_rope_layers": [1, 1, 0]},
     "no_rope_layers=[1, 1, 0] is not modelled: expected at least num_hidden_layers=4 entries"),
    ("smollm3", {"no_rope_layer_interval": 0}, "no_rope_layer_interval=0 is not modelled"),
    ("smollm3", {"num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
                 "sliding_window": 8}, "layer_types=['sliding_attention', 'full_attention'] is not modelled: "
                                       "sliding_attention blocks need use_sliding_window=true"),
    ("smollm3", {"num_hidden_layers": 2, "layer_types": ["full_attention"]}, "expected a list of num_hidden_layers=2"),
    ("smollm3", {"num_hidden_layers": 1, "layer_types": ["chunked_attention"]}, "entries 'chunked_attention'"),
    ("smollm3", {"use_sliding_window": True, "sliding_window": 0}, "sliding_window=0 is not modelled"),
    ("smollm3", {"head_dim": 7}, "head_dim=7 is not modelled: an odd head"),
    ("smollm3", {"head_dim": None}, "head_dim=None: expected an integer"),
    ("smollm3", {"no_rope_layers": [1.0]}, "no_rope_layers=[1.0]: expected a list of integers or null"),
    ("smollm3", {"use_sliding_window": "true"}, "use_sliding_window='true': expected a boolean"),
    ("cohere2", {"sliding_window": None}, "sliding_window=None is not modelled"),
    ("cohere2", {"num_hidden_layers": 2, "layer_types": ["full_attention"]}, "expected a list of num_hidden_layers=2"),
    ("cohere2", {"num_hidden_layers": 1, "layer_types": ["chunked_attention"]}, "entries 'chunked_attention'"),
    ("cohere2", {"head_dim": 5}, "head_dim=5 is not modelled: an odd head"),
    ("cohere2", {"hidden_size": 96, "num_attention_heads": 32}, "hidden_size=96 is not modelled: an odd head"),
    ("cohere2", {"sliding_window_pattern": 0}, "sliding_window_pattern=0: expected a positive integer"),
    ("cohere2", {"hidden_act": "swiglu"}, "hidden_act='swiglu' is not modelled"),
])
def test_refusals_name_the_field(tmp_path, model_type, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": model_type, **changes}))
    assert message in str(e.value), str(e.value)


def test_all_global_blocks_need_no_window(tmp_path):
    config = {"model_type": "cohere2", "num_hidden_layers": 2, "sliding_window": None,
              "layer_types": ["full_attention", "full_attention"], "head_dim": 7}
    spec = read_hf_config(write(tmp_path, config)).spec
    assert spec.sliding_window is None and spec.d_head == 7  # no rotary in global blocks: an odd head is fine
    smol = read_hf_config(write(tmp_path, {"model_type": "smollm3", "sliding_window": 8})).spec
    assert smol.sliding_window is None  # use_sliding_window false (the default): no window anywhere


def test_default_windows(tmp_path):
    # Cohere 2: three local blocks then a global one; SmolLM3 with use_sliding_window: the NoPE blocks are local
    cohere = read_hf_config(write(tmp_path, {"model_type": "cohere2"})).spec
    assert cohere.attention_pattern == ["local", "local", "local", "global"] and cohere.sliding_window == 4096
    assert cohere.parallel_block == "one_norm" and cohere.norm == "layernorm_no_bias" and cohere.d_head == 128
    smol = read_hf_config(write(tmp_path, {"model_type": "smollm3", "use_sliding_window": True,
                                           "sliding_window": 8})).spec
    assert smol.attention_pattern == ["global", "global", "global", "local"] and smol.sliding_window == 8


@pytest.mark.parametrize("model_type", CLASSES)
def test_check_hf_config_matches_every_component(tmp_path, model_type):
    config = {"model_type": model_type, "num_hidden_layers": 5, "hidden_size": 48, "intermediate_size": 24,
              "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 97, "sliding_window": 4,
              "max_position_embeddings": 64, "attention_bias": True, "tie_word_embeddings": False,
              "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
    if model_type == "smollm3":
        config |= {"use_sliding_window": True, "mlp_bias": True}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=16))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "attention/norm"].transformers == 5 * 48  # one norm per block, a weight and no bias
    assert rows["params", "attention/qkv"].transformers == 5 * (48 * (6 + 2 + 2) * 8 + (6 + 2 + 2) * 8)


# SmolLM3-3B's config.json (HuggingFaceTB/SmolLM3-3B; the fields that matter, typed from memory)
SMOLLM3_3B = {"model_type": "smollm3", "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 11008,
              "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 4,
              "max_position_embeddings": 65536, "tie_word_embeddings": True, "attention_bias": False,
              "mlp_bias": False, "use_sliding_window": False, "sliding_window": None, "no_rope_layer_interval": 4,
              "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(36)], "pad_token_id": 128004}


def test_smollm3_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = meta_params(SMOLLM3_3B)
    assert n_params == 3_075_098_624
    assert count(load_preset("smollm3-3b")).params.total == n_params
    assert f"{n_params:,}" in find_preset("smollm3-3b").source
    spec = read_hf_config(write(tmp_path, SMOLLM3_3B)).spec
    ours, theirs = count(spec.replace(seq_len=4096)), count(load_preset("smollm3-3b").replace(seq_len=4096))
    assert ours.params.total == theirs.params.total and ours.flops.forward == theirs.flops.forward
