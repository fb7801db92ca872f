"""ALBERT from its config.json (tfcalc/families/albert.py), and the spec features it needs (a factorised embedding,
blocks that share parameters): exact against transformers' AlbertModel (sum(numel) on meta, FlopCounterMode forward
FLOPs of an eager forward), with transformers' defaults, and refusals by field name."""

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


def write(folder, config: dict):
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def transformers_counts(config: dict, batch: int, seq_len: int) -> tuple[int, int]:
    hf_config = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        n_params = sum(p.numel() for p in transformers.AlbertModel(hf_config).parameters())
    model = transformers.AlbertModel._from_config(hf_config, attn_implementation="eager")
    ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids)
    return n_params, counter.get_total_flops()


@st.composite
def albert_configs(draw) -> dict:
    heads = draw(st.integers(1, 4))
    layers = draw(st.integers(1, 4))
    return dict(model_type="albert", vocab_size=draw(st.integers(16, 80)), embedding_size=draw(st.integers(2, 24)),
                hidden_size=heads * draw(st.sampled_from([2, 4, 8])), num_attention_heads=heads,
                num_hidden_layers=layers, num_hidden_groups=draw(st.integers(1, layers)),
                intermediate_size=draw(st.integers(4, 40)), max_position_embeddings=draw(st.integers(8, 24)),
                type_vocab_size=draw(st.integers(1, 3)),
                hidden_act=draw(st.sampled_from(["gelu_new", "gelu", "relu"])))


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["albert"].items():
        assert getattr(transformers.AlbertConfig, key) == value, key


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(albert_configs())
    path = write(tmp_path_factory.mktemp("albert"), config)
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 8))
    spec = read_hf_config(path).spec.replace(batch_size=batch, seq_len=seq_len)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n_params, flops = transformers_counts(config, batch, seq_len)
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == n_params
    assert result.flops.forward == flops


def test_shared_blocks_arithmetic():
    # ALBERT-base: 12 blocks run one set of block parameters; the factorised embedding is V*E + P*E + 2*E + 2E
    # (LayerNorm over E) + E*D + D (the projection)
    V, E, D, F, P = 30000, 128, 768, 3072, 512
    block = (D * 3 * D + 3 * D) + (D * D + D) + 2 * D + (D * F + F) + (F * D + D) + 2 * D
    embedding = V * E + P * E + 2 * E + 2 * E + E * D + D
    spec = load_preset("albert-base-v2")
    result = count(spec)
    assert result.params.total == embedding + block + (D * D + D) == 11_683_584
    # FLOPs run every block: the same forward as 12 blocks with their own parameters
    unshared = spec.replace(shared_blocks=None)
    assert count(unshared).flops.forward == result.flops.forward
    assert count(unshared).params.total - result.params.total == 11 * block


@pytest.mark.parametrize("name, config", [
    ("albert-base-v2", dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072)),
    ("albert-xxlarge-v2", dict()),  # AlbertConfig's defaults are ALBERT-xxlarge's
])
def test_presets_equal_transformers_built_from_the_published_config(name, config):
    with torch.device("meta"):
        n_params = sum(p.numel() for p in transformers.AlbertModel(transformers.AlbertConfig(**config)).parameters())
    assert count(load_preset(name)).params.total == n_params
    assert f"{n_params:,}" in find_preset(name).source


@pytest.mark.parametrize("change, message", [
    (dict(inner_group_num=2), "inner_group_num=2 is not modelled"),
    (dict(num_hidden_layers=2, num_hidden_groups=3), "num_hidden_groups=3 is not modelled: more than"),
])
def test_refusals_name_the_field(tmp_path, change, message):
    config = dict(model_type="albert", hidden_size=32, num_attention_heads=4, intermediate_size=16) | change
    with pytest.raises(TfcalcError, match=message):
        read_hf_config(write(tmp_path, config))


def test_check_against_transformers_matches_every_row(tmp_path):
    config = dict(model_type="albert", vocab_size=64, embedding_size=8, hidden_size=32, num_attention_heads=4,
                  num_hidden_layers=4, num_hidden_groups=2, intermediate_size=40, max_position_embeddings=16)
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec.replace(seq_len=8)
    report = hf_model.compare(path, spec, Workload(seq_len=8))
    assert report.match and not any(r.known for r in report.rows)
    assert {r.component for r in report.rows} >= {"embedding/projection", "attention/qkv", "pooler"}
