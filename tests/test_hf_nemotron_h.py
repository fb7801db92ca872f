"""Nemotron-H (nemotron_h) from its config.json: exact against transformers' NemotronHForCausalLM (sum(numel) on meta,
FlopCounterMode forward FLOPs of an eager CPU forward over its pure-torch path, a decode step after a cache too), with
transformers' defaults, its pattern string and legacy keys, its MoE blocks (gateless experts, a shared MLP, latent
projections), refusals by field name, the check against transformers per component, and the nemotron-h-8b and
nemotron-3-nano presets pinned to the class built from the published configs."""

import pytest
import transformers
import hf_oracle as oracle
from hf_oracle import hf_config, write
from hypothesis import assume, given, settings
from hypothesis import strategies as st

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
    return oracle.meta_params(transformers.NemotronHForCausalLM, config)


def eager_flops(config: dict, batch: int, seq_len: int, context: int = 0, use_cache: bool = False) -> int:
    """FlopCounterMode over one forward of `seq_len` tokens after a prefill of `context` (not counted)."""
    return oracle.eager_flops(transformers.NemotronHForCausalLM, config, batch, seq_len, context, use_cache,
                              attn_implementation="eager", experts_implementation="eager")


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["nemotron_h"].items():
        assert getattr(transformers.NemotronHConfig, key) == value, key


def test_the_default_config_with_its_moe_block(tmp_path):
    # NemotronHConfig's default blocks: linear_attention, moe, full_attention, mlp
    source = read_hf_config(write(tmp_path, {"model_type": "nemotron_h"}))
    spec = source.spec
    assert spec.block_pattern == ["mamba2", "moe", "attention", "mlp"]
    assert (spec.n_experts, spec.top_k, spec.d_expert, spec.n_shared_experts, spec.d_shared_expert) == (
        8, 2, 7688, 1, 7688)
    # one MoE block: router 8 * 4096, 8 experts of 2 * 4096 * 7688 (no gate, no bias), a shared MLP of the same width
    parts = count(spec).params.components
    assert (parts["moe/router"], parts["moe/experts"], parts["moe/shared_experts"]) == (
        8 * 4096, 8 * 2 * 4096 * 7688, 2 * 4096 * 7688) == (32_768, 503_840_768, 62_980_096)
    assert count(spec).params.total == meta_params({"model_type": "nemotron_h"})
    assert "1 MoE" in source.source and "e_score_correction_bias, a buffer" in source.source


@st.composite
def configs(draw) -> dict:
    groups = draw(st.integers(1, 2))
    kv = draw(st.integers(1, 2))
    pattern = draw(st.text(alphabet="M*-E", min_size=1, max_size=6))
    config = {"model_type": "nemotron_h", "hidden_size": draw(st.sampled_from([8, 12, 16])),
              "num_attention_heads": kv * draw(st.integers(1, 2)), "num_key_value_heads": kv,
              "head_dim": draw(st.integers(1, 6)), "intermediate_size": draw(st.integers(1, 24)),
              "mlp_bias": draw(st.booleans()), "mamba_num_heads": groups * draw(st.integers(1, 3)),
              "mamba_head_dim": draw(st.integers(1, 4)), "ssm_state_size": draw(st.integers(1, 5)),
              "n_groups": groups, "conv_kernel": draw(st.integers(1, 4)), "chunk_size": draw(st.integers(1, 6)),
              "use_conv_bias": draw(st.booleans()), "use_bias": draw(st.booleans()),
              "tie_word_embeddings": draw(st.booleans()), "vocab_size": draw(st.integers(8, 32)),
              "max_position_embeddings": 64}
    if "E" in pattern:  # the experts: groups of 2 or more, top-k within the kept groups; no mlp_bias (refused)
        n_group = draw(st.integers(1, 2))
        experts = n_group * draw(st.integers(2, 3))
        topk_group = draw(st.integers(1, n_group))
        config |= {"mlp_bias": False, "n_routed_experts": experts, "n_group": n_group, "topk_group": topk_group,
                   "num_experts_per_tok": draw(st.integers(1, topk_group * experts // n_group)),
                   "moe_intermediate_size": draw(st.integers(1, 12)),
                   "moe_shared_expert_intermediate_size": draw(st.integers(0, 12)),
                   "moe_latent_size": draw(st.one_of(st.none(), st.integers(1, 10)))}
    if draw(st.booleans()):
        config["hybrid_override_pattern"] = pattern
    else:
        config["layers_block_type"] = [{"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}[c]
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
    ({"hybrid_override_pattern": "E", "n_routed_experts": 1, "num_experts_per_tok": 1},
     "n_routed_experts=1 is not modelled: tfcalc models a mixture of 2 or more experts"),
    ({"hybrid_override_pattern": "E", "n_group": 3},
     "n_group=3 is not modelled: the group-limited router needs n_group dividing n_routed_experts=8 into groups of 2"),
    ({"hybrid_override_pattern": "E", "n_group": 8}, "n_group=8 is not modelled"),
    ({"hybrid_override_pattern": "E", "n_group": 2, "topk_group": 3},
     "topk_group=3 is not modelled: the group-limited router keeps topk_group of the n_group=2 groups"),
    ({"hybrid_override_pattern": "E", "n_group": 4, "topk_group": 1, "num_experts_per_tok": 3},
     "num_experts_per_tok=3 is not modelled: more than the topk_group * n_routed_experts / n_group = 2 experts"),
    ({"hybrid_override_pattern": "E-", "mlp_bias": True},
     "mlp_bias=True is not modelled: with 'moe' blocks transformers biases the shared expert and the latent"),
    ({"hybrid_override_pattern": "E", "moe_latent_size": 0}, "moe_latent_size=0"),
    ({"hybrid_override_pattern": "E", "num_local_experts": "8"}, "num_local_experts='8': expected an integer"),
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
    {"hybrid_override_pattern": "ME*E-", "hidden_size": 16, "mamba_num_heads": 4, "mamba_head_dim": 4,
     "ssm_state_size": 4, "n_groups": 2, "vocab_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
     "head_dim": 8, "intermediate_size": 24, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2,
     "moe_intermediate_size": 10, "moe_shared_expert_intermediate_size": 12, "moe_latent_size": 6},
], ids=["every-kind", "biases-tied-one-chunk", "moe-latent"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    path = write(tmp_path, {"model_type": "nemotron_h", "max_position_embeddings": 64, **config})
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=9))
    assert report.match and all(r.match for r in report.rows), report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    blocks = len(config.get("hybrid_override_pattern") or config["layers_block_type"])
    assert rows["params", "mamba2/norm+attention/norm+mlp/norm"].transformers == blocks * config["hidden_size"]
    if "moe_latent_size" in config:  # 2 MoE blocks: fc1_latent_proj 16 -> 6 and fc2_latent_proj 6 -> 16, no bias
        assert rows["params", "moe/latent_in"].transformers == 2 * 16 * 6 == rows["params", "moe/latent_out"].analytic
        # 4 experts of up 6 -> 10 and down 10 -> 6 in each; 2 * 9 tokens * 2 experts each through them
        assert rows["params", "moe/experts"].transformers == 2 * 4 * 2 * 6 * 10
        assert rows["forward", "moe/experts"].transformers == 2 * (2 * 9 * 2) * 2 * (2 * 6 * 10)


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


# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16's config.json, the keys transformers reads, verbatim from a public copy
# (no network here to the hub): mehulbafnaa/jax-llm-examples, nemotron3/tests/test_model.py (NEMOTRON3_30B_JSON, the
# whole file with its auto_map, transformers_version 4.55.4); its values agree with two other public quotations.
NEMOTRON_3_NANO = {"model_type": "nemotron_h", "attention_bias": False, "chunk_size": 128, "conv_kernel": 4,
                   "head_dim": 128, "hidden_size": 2688,
                   "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
                   "intermediate_size": 1856, "mamba_head_dim": 64, "mamba_hidden_act": "silu", "mamba_num_heads": 64,
                   "mamba_proj_bias": False, "max_position_embeddings": 262144, "mlp_bias": False,
                   "mlp_hidden_act": "relu2", "moe_intermediate_size": 1856,
                   "moe_shared_expert_intermediate_size": 3712, "n_group": 1, "n_groups": 8, "n_routed_experts": 128,
                   "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 32, "num_experts_per_tok": 6,
                   "num_hidden_layers": 52, "num_key_value_heads": 2, "routed_scaling_factor": 2.5,
                   "sliding_window": None, "ssm_state_size": 128, "tie_word_embeddings": False, "topk_group": 1,
                   "use_bias": False, "use_conv_bias": True, "vocab_size": 131072}


def test_nemotron_3_nano_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = meta_params(NEMOTRON_3_NANO)
    # embedding and head 2 * 131072 * 2688 = 704,643,072; 23 Mamba2 blocks: in_proj 2688 * 10304 + conv 6144 * 5 +
    # 3 * 64 + gated norm 4096 + out_proj 4096 * 2688 + norm 2688 = 38,744,896; 6 attention blocks: 2688 * (4096 +
    # 2 * 256) + 4096 * 2688 + 2688 = 23,399,040; 23 MoE blocks: router 128 * 2688 + 128 experts of 2 * 2688 * 1856 +
    # shared 2 * 2688 * 3712 + norm 2688 = 1,297,468,032; final norm 2688
    assert 2688 * 10304 + 6144 * 5 + 3 * 64 + 4096 + 4096 * 2688 + 2688 == 38_744_896
    assert 2688 * (4096 + 2 * 256) + 4096 * 2688 + 2688 == 23_399_040
    assert 128 * 2688 + 128 * 2 * 2688 * 1856 + 2 * 2688 * 3712 + 2688 == 1_297_468_032
    total = 704_643_072 + 23 * 38_744_896 + 6 * 23_399_040 + 23 * 1_297_468_032 + 2688
    assert n_params == total == 31_577_937_344  # the card's 31.6B
    preset = load_preset("nemotron-3-nano-30b-a3b")  # an alias of nemotron-3-nano
    result = count(preset)
    assert result.params.total == n_params
    # active: 122 of the 128 experts' 2 * 2688 * 1856 untouched in each of 23 blocks
    assert result.params.active == n_params - 23 * 122 * 2 * 2688 * 1856 == 3_580_073_408
    assert f"{n_params:,}" in find_preset("nemotron-3-nano").source
    source = read_hf_config(write(tmp_path, NEMOTRON_3_NANO))
    assert source.spec.replace(name=preset.name, seq_len=preset.seq_len) == preset
    assert "23 Mamba2, 6 attention, 0 MLP, 23 MoE" in source.source


def test_what_nemotron_h_moe_reads_apart(tmp_path):
    base = {"model_type": "nemotron_h", "hybrid_override_pattern": "E", "hidden_size": 16, "vocab_size": 32,
            "intermediate_size": 20, "n_routed_experts": 4, "moe_intermediate_size": 8}
    # a shared width of 0: NemotronHMLP's `intermediate_size or config.intermediate_size`
    zero = {**base, "moe_shared_expert_intermediate_size": 0, "n_shared_experts": 3, "num_nextn_predict_layers": 1,
            "mtp_layers_block_type": ["full_attention", "moe"]}
    source = read_hf_config(write(tmp_path, zero))
    assert source.spec.d_shared_expert == 20 and source.spec.n_shared_experts == 1
    assert "falls back to intermediate_size=20" in source.source
    assert "n_shared_experts=3 not read" in source.source
    assert "num_nextn_predict_layers=1: the multi-token-prediction layers are not built" in source.source
    assert count(source.spec).params.total == meta_params(zero)


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


def test_a_latent_moe_on_the_reference_model_agrees_with_flop_counter_and_fvcore(tmp_path):
    # the MoE-latent config of the check above, read by tfcalc, then its own reference model on meta
    config = {"model_type": "nemotron_h", "hybrid_override_pattern": "ME*E", "hidden_size": 16, "mamba_num_heads": 4,
              "mamba_head_dim": 4, "ssm_state_size": 4, "n_groups": 2, "vocab_size": 32, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 8, "n_routed_experts": 4, "num_experts_per_tok": 2,
              "moe_intermediate_size": 10, "moe_shared_expert_intermediate_size": 12, "moe_latent_size": 6,
              "max_position_embeddings": 64}
    spec = read_hf_config(write(tmp_path, config)).spec
    assert spec.d_moe_latent == 6
    report = check(spec, "meta")
    assert report.match and all(row.match for row in [*report.forward, *report.params])
    assert report.to_dict()["forward"]["flop_counter"] == count(spec).flops.forward == eager_flops(config, 1, 64)
    with pytest.raises(ValueError, match="d_moe_latent=6 needs a mixture of experts"):
        spec.replace(n_experts=1, top_k=1, n_shared_experts=0, d_expert=None, d_shared_expert=None,
                     block_pattern=["mamba2", "mlp", "attention", "mlp"])
