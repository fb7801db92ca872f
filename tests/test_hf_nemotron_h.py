"""Nemotron-H (nemotron_h) from its config.json: exact against transformers' NemotronHForCausalLM (sum(numel) on meta,
FlopCounterMode forward FLOPs of an eager CPU forward over its pure-torch path, a decode step after a cache too), with
transformers' defaults, its pattern string and legacy keys, refusals by field name, the check against transformers
per component, and the nemotron-h-8b preset pinned to the class built from the published config."""

import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count, find_preset, load_preset
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.plan.memory import inference_memory
from tfcalc.verify import check, hf_model
from tfcalc.verify.folding import foldable

# nvidia/Nemotron-H-8B-Base-8K's config.json, the keys transformers reads, verbatim from a public copy (no network
# here to the hub): NVIDIA-NeMo/Megatron-Bridge's test fixture nemotronh_8b_config_dict
# (tests/unit_tests/models/nemotronh/test_nemotron_h_bridge.py). Its attention_head_dim is not a NemotronHConfig
# field (head_dim's default, 128, is the same width).
NEMOTRON_H_8B = {"model_type": "nemotron_h", "attention_bias": False, "attention_head_dim": 128, "chunk_size": 128,
                 "conv_kernel": 4, "expand": 2, "hidden_size": 4096,
                 "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
                 "intermediate_size": 21504, "mamba_head_dim": 64, "mamba_hidden_act": "silu", "mamba_num_heads": 128,
                 "mamba_proj_bias": False, "max_position_embeddings": 8192, "mlp_bias": False,
                 "mlp_hidden_act": "relu2", "n_groups": 8, "num_attention_heads": 32, "num_hidden_layers": 52,
                 "num_key_value_heads": 8, "ssm_state_size": 128, "tie_word_embeddings": False, "use_bias": False,
                 "use_conv_bias": True, "vocab_size": 131072}


def meta_params(config: dict) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in transformers.NemotronHForCausalLM(hf_config(config)).parameters())


def eager_flops(config: dict, batch: int, seq_len: int, context: int = 0) -> int:
    """FlopCounterMode over one forward of `seq_len` tokens after a prefill of `context` (not counted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.NemotronHForCausalLM._from_config(hf_config(config), attn_implementation="eager")
        ids = torch.randint(config["vocab_size"], (batch, context + seq_len),
                            generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            cache = model(input_ids=ids[:, :context], use_cache=True).cache if context else None
            with FlopCounterMode(display=False) as counter:
                model(input_ids=ids[:, context:], cache=cache, use_cache=bool(context))
    return counter.get_total_flops()


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["nemotron_h"].items():
        assert getattr(transformers.NemotronHConfig, key) == value, key


def test_the_default_config_is_refused_by_its_moe_block(tmp_path):
    # NemotronHConfig's default blocks: linear_attention, moe, full_attention, mlp
    with pytest.raises(TfcalcError, match="layers_block_type=None is not modelled: its 'moe' blocks"):
        read_hf_config(write(tmp_path, {"model_type": "nemotron_h"}))


@st.composite
def configs(draw) -> dict:
    groups = draw(st.integers(1, 2))
    kv = draw(st.integers(1, 2))
    pattern = draw(st.text(alphabet="M*-", min_size=1, max_size=6))
    config = {"model_type": "nemotron_h", "hidden_size": draw(st.sampled_from([8, 12, 16])),
              "num_attention_heads": kv * draw(st.integers(1, 2)), "num_key_value_heads": kv,
              "head_dim": draw(st.integers(1, 6)), "intermediate_size": draw(st.integers(1, 24)),
              "mlp_bias": draw(st.booleans()), "mamba_num_heads": groups * draw(st.integers(1, 3)),
              "mamba_head_dim": draw(st.integers(1, 4)), "ssm_state_size": draw(st.integers(1, 5)),
              "n_groups": groups, "conv_kernel": draw(st.integers(1, 4)), "chunk_size": draw(st.integers(1, 6)),
              "use_conv_bias": draw(st.booleans()), "use_bias": draw(st.booleans()),
              "tie_word_embeddings": draw(st.booleans()), "vocab_size": draw(st.integers(8, 32)),
              "max_position_embeddings": 64}
    if draw(st.booleans()):
        config["hybrid_override_pattern"] = pattern
    else:
        config["layers_block_type"] = [{"M": "linear_attention", "*": "full_attention", "-": "mlp"}[c]
                                       for c in pattern]
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
    # transformers' cached forward needs an attention block (get_seq_length)
    assume("full_attention" in hf_config(config).layers_block_type)
    batch, context = data.draw(st.integers(1, 2)), data.draw(st.integers(config["conv_kernel"], 7))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    decode = count(spec, Workload(phase="decode", batch_size=batch, seq_len=1, context=context))
    assert decode.flops.forward == eager_flops(config, batch, 1, context)


def test_the_pattern_string_and_legacy_keys(tmp_path):
    config = {"model_type": "nemotron_h", "hybrid_override_pattern": "M*M-", "num_hidden_layers": 9,
              "hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
              "intermediate_size": 24, "mamba_num_heads": 4, "mamba_head_dim": 4, "ssm_state_size": 4,
              "n_groups": 4, "mamba_n_groups": 2, "conv_kernel": 2, "mamba_d_conv": 3, "mamba_chunk_size": 8,
              "mamba_conv_bias": False, "vocab_size": 32}
    source = read_hf_config(write(tmp_path, config))
    spec = source.spec
    assert spec.block_pattern == ["mamba2", "attention", "mamba2", "mlp"] and spec.n_layers == 4
    z = spec.sizes("mamba2")
    assert (z.n_groups, z.conv_kernel, z.chunk_size, z.conv_bias) == (2, 3, 8, False)  # the legacy keys win
    assert "num_hidden_layers=9 not read" in source.source
    assert "mamba_d_conv=3 read as conv_kernel" in source.source
    assert count(spec).params.total == meta_params(config)
    # layers_block_type (or its alias layer_types) over the pattern string
    both = {**config, "layer_types": ["mlp", "linear_attention"]}
    assert read_hf_config(write(tmp_path, both)).spec.block_pattern == ["mlp", "mamba2"]


@pytest.mark.parametrize("changes, message", [
    ({"hybrid_override_pattern": "M*E-"}, "hybrid_override_pattern='M*E-' is not modelled: its 'moe' blocks"),
    ({"hybrid_override_pattern": "M*X"}, "hybrid_override_pattern='M*X' is not modelled: characters 'X'"),
    ({"hybrid_override_pattern": ""}, "hybrid_override_pattern='' is not modelled: no block"),
    ({"layers_block_type": ["mamba"]}, "layers_block_type=['mamba'] is not modelled: entries 'mamba'"),
    ({"hybrid_override_pattern": "M", "mamba_num_heads": 6, "n_groups": 4},
     "n_groups=4 is not modelled: does not divide mamba_num_heads=6"),
    ({"hybrid_override_pattern": "*", "num_key_value_heads": 3},
     "num_key_value_heads=3 is not modelled: does not divide num_attention_heads=32"),
    ({"hybrid_override_pattern": "*", "sliding_window": 16}, "sliding_window=16 is not modelled"),
    ({"hybrid_override_pattern": "-", "mlp_hidden_act": "swiglu"}, "mlp_hidden_act='swiglu' is not modelled"),
    ({"num_key_value_heads": None}, "num_key_value_heads=None: expected an integer"),
    ({"hybrid_override_pattern": ["M"]}, "hybrid_override_pattern=['M']: expected a string or null"),
    ({"mamba_d_conv": 4.0}, "mamba_d_conv=4.0: expected an integer"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "nemotron_h", **changes}))
    assert message in str(e.value), str(e.value)


def test_the_mlp_blocks_activation(tmp_path):
    base = {"model_type": "nemotron_h", "hybrid_override_pattern": "M-", "hidden_size": 16, "intermediate_size": 24,
            "mamba_num_heads": 4, "mamba_head_dim": 4, "ssm_state_size": 4, "n_groups": 2, "vocab_size": 32}
    relu2 = read_hf_config(write(tmp_path, base))
    assert relu2.spec.activation == "relu" and "mlp_hidden_act 'relu2' counted as relu" in relu2.source
    assert read_hf_config(write(tmp_path, {**base, "mlp_hidden_act": "gelu"})).spec.activation == "gelu"


@pytest.mark.parametrize("config", [
    {"hybrid_override_pattern": "M-M*-M", "hidden_size": 16, "mamba_num_heads": 4, "mamba_head_dim": 8,
     "ssm_state_size": 6, "n_groups": 2, "conv_kernel": 3, "chunk_size": 4, "vocab_size": 40,
     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 24},
    {"layers_block_type": ["linear_attention", "linear_attention", "full_attention"], "hidden_size": 24,
     "mamba_num_heads": 3, "mamba_head_dim": 4, "ssm_state_size": 2, "n_groups": 1, "conv_kernel": 2,
     "chunk_size": 16, "vocab_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 12,
     "use_bias": True, "use_conv_bias": False, "tie_word_embeddings": True},
], ids=["every-kind", "biases-tied-one-chunk"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    path = write(tmp_path, {"model_type": "nemotron_h", "max_position_embeddings": 64, **config})
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=9))
    assert report.match and all(r.match for r in report.rows), report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    blocks = len(config.get("hybrid_override_pattern") or config["layers_block_type"])
    assert rows["params", "mamba2/norm+attention/norm+mlp/norm"].transformers == blocks * config["hidden_size"]


def test_nemotron_h_8b_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = meta_params(NEMOTRON_H_8B)
    # embedding and head 2 * 131072 * 4096 = 1,073,741,824; 24 Mamba2 blocks: in_proj 4096 * 18560 + conv 10240 * 5 +
    # 3 * 128 + gated norm 8192 + out_proj 8192 * 4096 + norm 4096 = 109,640,064; 4 attention blocks: 4096 * (4096 +
    # 2 * 1024) + 4096 * 4096 + 4096 = 41,947,136; 24 MLP blocks: 2 * 4096 * 21504 + 4096 = 176,164,864; final norm
    assert n_params == 1_073_741_824 + 24 * 109_640_064 + 4 * 41_947_136 + 24 * 176_164_864 + 4096 == 8_100_852_736
    preset = load_preset("nemotron-h-8b")
    assert count(preset).params.total == n_params
    assert f"{n_params:,}" in find_preset("nemotron-h-8b").source
    spec = read_hf_config(write(tmp_path, NEMOTRON_H_8B)).spec
    assert spec.replace(name=preset.name) == preset


def test_nemotron_h_8b_decode_state_and_kv_cache_apart():
    m = inference_memory(load_preset("nemotron-h-8b"), Workload(phase="decode", seq_len=1, context=131071))
    # 24 Mamba2 blocks: the conv's last 3 positions of 10240 channels in bf16 and the SSM state [128, 64, 128] in
    # fp32 (transformers' cache, and the config's mamba_ssm_cache_dtype)
    assert m.state.to_dict() == {"mamba2/conv": 24 * 10240 * 3 * 2, "mamba2/scan": 24 * 128 * 64 * 128 * 4}
    assert m.state_bytes == 1_474_560 + 100_663_296 == 102_137_856  # 97.4 MiB per sequence, whatever the context
    # 4 attention blocks: 131,072 tokens x 8 key/value heads x (128 + 128) x 2 bytes
    assert m.kv_cache_bytes == 4 * 131_072 * 8 * 256 * 2 == 2_147_483_648


def test_the_preset_on_meta_agrees_with_flop_counter_and_fvcore():
    # as tests/test_verify.py holds every preset: one block of each kind, counted once per block of that kind
    spec = load_preset("nemotron-h-8b")
    report = check(spec, "meta", fold=foldable(spec))
    assert report.match and all(row.match for row in [*report.forward, *report.params])
    assert report.to_dict()["forward"]["flop_counter"] == count(spec).flops.forward
