"""Falcon-H1 (falcon_h1) from its config.json: exact against transformers' FalconH1ForCausalLM (sum(numel) on meta,
FlopCounterMode forward FLOPs of an eager CPU forward over its pure-torch path, a decode step after a cache too), with
transformers' defaults, refusals by field name, the check against transformers per component, and the falcon-h1-7b
preset pinned to the class built from the published config and to the checkpoint's measured total."""

import pytest
import transformers
import hf_oracle as oracle
from hf_oracle import write
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tfcalc import TfcalcError, Workload, count, find_preset, load_preset
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.plan.memory import inference_memory
from tfcalc.verify import hf_model


def meta_params(config: dict) -> int:
    return oracle.meta_params(transformers.FalconH1ForCausalLM, config)


def eager_flops(config: dict, batch: int, seq_len: int, context: int = 0, use_cache: bool = False) -> int:
    """FlopCounterMode over one forward of `seq_len` tokens after a prefill of `context` (not counted)."""
    return oracle.eager_flops(transformers.FalconH1ForCausalLM, config, batch, seq_len, context, use_cache,
                              attn_implementation="eager")


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["falcon_h1"].items():
        assert getattr(transformers.FalconH1Config, key) == value, key


def test_the_default_config(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "falcon_h1"})).spec
    assert spec.block_pattern == ["parallel_hybrid+mlp"] and spec.n_layers == 32
    z = spec.sizes("mamba2")
    # mamba_d_ssm 1024, mamba_d_head 'auto': 1024 // 128 = 8; mamba_rms_norm false: no gated norm
    assert (z.n_heads, z.head_dim, z.d_state, z.n_groups, z.conv_kernel, z.gated_norm) == (128, 8, 256, 1, 4, False)
    assert count(spec).params.total == meta_params({"model_type": "falcon_h1"})


@st.composite
def configs(draw) -> dict:
    groups = draw(st.integers(1, 2))
    heads = groups * draw(st.integers(1, 3))
    kv = draw(st.integers(1, 2))
    attention_heads = kv * draw(st.integers(1, 2))
    proj_bias = draw(st.booleans())
    config = {"model_type": "falcon_h1", "num_hidden_layers": draw(st.integers(1, 3)),
              "hidden_size": 2 * attention_heads * draw(st.integers(1, 3)), "mamba_n_heads": heads,
              "mamba_n_groups": groups, "mamba_d_state": draw(st.integers(1, 5)), "mamba_d_conv": draw(st.integers(1, 4)),
              "mamba_chunk_size": draw(st.integers(1, 6)), "mamba_conv_bias": draw(st.booleans()),
              "mamba_proj_bias": proj_bias, "projectors_bias": proj_bias, "mamba_rms_norm": draw(st.booleans()),
              "mamba_norm_before_gate": draw(st.booleans()), "num_attention_heads": attention_heads,
              "num_key_value_heads": kv, "intermediate_size": draw(st.integers(1, 24)),
              "attention_bias": draw(st.booleans()), "mlp_bias": draw(st.booleans()),
              "tie_word_embeddings": draw(st.booleans()), "vocab_size": draw(st.integers(8, 32)),
              "max_position_embeddings": 64, "key_multiplier": 0.5, "ssm_multipliers": [0.5, 1.5, 1.0, 2.0, 0.25]}
    if draw(st.booleans()):  # the inner width from mamba_d_ssm, else mamba_expand * hidden_size
        config["mamba_d_ssm"] = heads * draw(st.integers(1, 4))
    else:
        config["mamba_d_ssm"], config["mamba_expand"] = None, draw(st.integers(1, 2))
        assume(config["mamba_expand"] * config["hidden_size"] % heads == 0)
    if draw(st.booleans()):
        config["head_dim"] = 2 * draw(st.integers(1, 3))
    return config


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(configs())
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 9))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_flops(config, batch, seq_len)


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_a_decode_step_after_a_cache_matches_transformers(tmp_path_factory, data):
    config = data.draw(configs())
    batch, context = data.draw(st.integers(1, 2)), data.draw(st.integers(config["mamba_d_conv"], 7))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    decode = count(spec, Workload(phase="decode", batch_size=batch, seq_len=1, context=context))
    assert decode.flops.forward == eager_flops(config, batch, 1, context)


@pytest.mark.parametrize("changes, message", [
    ({"mamba_n_heads": 96}, "mamba_n_heads=96 is not modelled: does not divide the mixer's inner width 1024"),
    ({"mamba_d_head": 16}, "mamba_d_ssm=1024 is not modelled: the mixer's inner width 1024 is not mamba_n_heads=128"),
    ({"mamba_d_head": "half"}, "mamba_d_head='half' is not modelled: expected an integer or 'auto'"),
    ({"mamba_n_groups": 3}, "mamba_n_groups=3 is not modelled: does not divide mamba_n_heads=128"),
    ({"mamba_d_state": None}, "mamba_d_state=None is not modelled: FalconH1Mixer needs a value"),
    ({"mamba_chunk_size": None}, "mamba_chunk_size=None is not modelled: FalconH1Mixer needs a value"),
    ({"mamba_d_ssm": None, "mamba_expand": None}, "mamba_expand=None is not modelled: with mamba_d_ssm null"),
    ({"mamba_d_ssm": None, "mamba_expand": 0}, "mamba_expand=0 is not modelled"),
    ({"projectors_bias": True}, "projectors_bias=True is not modelled: out_proj's bias (projectors_bias) differs"),
    ({"num_key_value_heads": 3}, "num_key_value_heads=3 is not modelled: does not divide"),
    ({"hidden_size": 16, "mamba_d_ssm": 128}, "hidden_size=16 is not modelled: fewer channels than"),
    ({"head_dim": 5}, "head_dim=5 is not modelled: heads of 5 channels, an odd number"),
    ({"hidden_act": "tanh"}, "hidden_act='tanh' is not modelled"),
    ({"mamba_rms_norm": "true"}, "mamba_rms_norm='true': expected a boolean (true or false) or null"),
    ({"head_dim": None}, "head_dim=None: expected an integer"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "falcon_h1", **changes}))
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize("config", [
    {"num_hidden_layers": 2, "hidden_size": 16, "mamba_d_ssm": 24, "mamba_n_heads": 4, "mamba_d_state": 6,
     "mamba_n_groups": 2, "mamba_d_conv": 3, "mamba_chunk_size": 4, "vocab_size": 40, "num_attention_heads": 4,
     "num_key_value_heads": 2, "intermediate_size": 24, "attention_bias": True, "mamba_rms_norm": True},
    {"num_hidden_layers": 3, "hidden_size": 24, "mamba_d_ssm": None, "mamba_expand": 1, "mamba_n_heads": 3,
     "mamba_d_state": 2, "mamba_n_groups": 1, "mamba_d_conv": 2, "mamba_chunk_size": 16, "vocab_size": 32,
     "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 6, "intermediate_size": 20,
     "mamba_proj_bias": True, "projectors_bias": True, "mamba_conv_bias": False, "mlp_bias": True,
     "tie_word_embeddings": True},
], ids=["gated-norm-biased-attention", "expand-head_dim-biases-tied-one-chunk"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    path = write(tmp_path, {"model_type": "falcon_h1", "max_position_embeddings": 64, **config})
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=9))
    assert report.match and all(r.match for r in report.rows), report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    L, D = config["num_hidden_layers"], config["hidden_size"]
    assert rows["params", "parallel_hybrid/norm"].transformers == L * D  # input_layernorm, one per block
    # q, k, v: D -> (H + 2 Hkv) * head_dim, with biases by attention_bias
    H, Hkv = config["num_attention_heads"], config["num_key_value_heads"]
    dh = config.get("head_dim", D // H)
    qkv = (H + 2 * Hkv) * dh
    assert rows["params", "attention/qkv"].transformers == L * (D * qkv + (qkv if config.get("attention_bias") else 0))


@pytest.mark.parametrize("key", ["mamba_conv_bias", "mamba_proj_bias", "projectors_bias", "mamba_rms_norm"])
def test_a_null_switch_is_built_as_false(tmp_path, key):
    # nn.Linear / nn.Conv1d(bias=None) build no bias; a null mamba_rms_norm builds nn.Identity
    config = {"model_type": "falcon_h1", "num_hidden_layers": 1, "hidden_size": 16, "mamba_d_ssm": 16,
              "mamba_n_heads": 2, "mamba_d_state": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
              "intermediate_size": 8, "vocab_size": 16, "mamba_conv_bias": True, "mamba_rms_norm": True, key: None}
    if key == "mamba_proj_bias":
        config["projectors_bias"] = None
    spec = read_hf_config(write(tmp_path, config)).spec
    assert count(spec).params.total == meta_params(config)


# tiiuae/Falcon-H1-7B's config.json: the sizes as three public quotations of it give them (they agree where they
# overlap), mamba_rms_norm true as TII states it (ggml-org/llama.cpp#14534: only the 0.5B lacks the mixer's norm), the
# biases at FalconH1Config's defaults; no verbatim copy of the file is held here (the preset's source says which is which)
FALCON_H1_7B = {"model_type": "falcon_h1", "hidden_size": 3072, "num_hidden_layers": 44, "num_attention_heads": 12,
                "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 130048,
                "tie_word_embeddings": False, "mamba_d_state": 256, "mamba_n_groups": 1, "mamba_n_heads": 24,
                "mamba_d_head": 128, "mamba_d_ssm": 3072, "mamba_expand": 2, "mamba_d_conv": 4,
                "mamba_chunk_size": 128, "max_position_embeddings": 262144, "mamba_rms_norm": True,
                "mamba_norm_before_gate": False}


def test_falcon_h1_7b_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = meta_params(FALCON_H1_7B)
    D, V, F = 3072, 130048, 12288
    # each of 44 blocks: input_layernorm D; the mixer: in_proj D * (2 * 3072 + 2 * 256 + 24), conv (3072 + 512) *
    # (4 + 1), A_log, D, dt_bias 3 * 24, the gated norm 3072, out_proj 3072 * D; attention: q and o 2 * D * 12 * 128, k
    # and v 2 * D * 2 * 128; pre_ff_layernorm D and the MLP 3 * D * F; embedding and head 2 * V * D, final norm D
    mixer = D * 6680 + 3584 * 5 + 3 * 24 + 3072 + 3072 * D
    attention = 2 * D * 1536 + 2 * D * 256
    assert n_params == 44 * (D + mixer + attention + D + 3 * D * F) + 2 * V * D + D == 7_585_648_736
    # 7,585,648,736: also the total two public reports measured from the published checkpoints' tensors
    preset = load_preset("falcon-h1-7b")
    assert count(preset).params.total == n_params
    assert f"{n_params:,}" in find_preset("falcon-h1-7b").source
    spec = read_hf_config(write(tmp_path, FALCON_H1_7B)).spec
    assert spec.replace(name=preset.name) == preset


def test_falcon_h1_7b_keeps_a_state_and_a_kv_cache_in_every_block():
    m = inference_memory(load_preset("falcon-h1-7b"), Workload(phase="decode", seq_len=1, context=131071))
    # 44 blocks: the conv's last 3 positions of 3072 + 512 channels in bf16, the SSM state [24, 128, 256] in fp32
    assert m.state.to_dict() == {"mamba2/conv": 44 * 3584 * 3 * 2, "mamba2/scan": 44 * 24 * 128 * 256 * 4}
    # and all 44 attention branches: 131,072 tokens x 2 key/value heads x (128 + 128) x 2 bytes
    assert m.kv_cache_bytes == 44 * 131_072 * 2 * 256 * 2 == 5_905_580_032
