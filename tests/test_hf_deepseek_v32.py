"""DeepSeek-V3.2 (deepseek_v32): MLA with its sparse-attention indexer and DeepSeek's MoE, exact against transformers'
DeepseekV32ForCausalLM (sum(numel) on meta, FlopCounterMode forward FLOPs of an eager CPU forward, a decode step after
a cache too), per component by `check --hf-config`, tfcalc's own reference model against FlopCounterMode and fvcore,
refusals by field name, and the deepseek-v3.2 preset pinned to the class built from DeepSeek's published shapes."""

import pytest
import transformers
import hf_oracle as oracle
from hf_oracle import write
from hypothesis import given, settings
from hypothesis import strategies as st

from tfcalc import ModelSpec, TfcalcError, Workload, count, find_preset, load_preset
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.plan.memory import inference_memory
from tfcalc.verify import check, hf_model

CLASS = transformers.DeepseekV32ForCausalLM


def meta_params(config: dict) -> int:
    return oracle.meta_params(CLASS, config)


def eager_flops(config: dict, batch: int, seq_len: int, context: int = 0, use_cache: bool = False) -> int:
    """FlopCounterMode over one forward of `seq_len` tokens after a prefill of `context` (not counted)."""
    return oracle.eager_flops(CLASS, config, batch, seq_len, context, use_cache, attn_implementation="eager",
                              experts_implementation="eager")


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["deepseek_v32"].items():
        assert getattr(transformers.DeepseekV32Config, key) == value, key


@st.composite
def configs(draw) -> dict:
    groups = draw(st.integers(1, 2))
    experts = groups * draw(st.integers(2, 3))  # the router scores each group by its top 2
    topk_group = draw(st.integers(1, groups))
    rope = 2 * draw(st.integers(1, 2))
    heads = draw(st.integers(1, 3))
    return {"model_type": "deepseek_v32", "vocab_size": draw(st.integers(8, 32)),
            "hidden_size": heads * draw(st.sampled_from([4, 8])), "intermediate_size": draw(st.integers(2, 16)),
            "moe_intermediate_size": draw(st.integers(2, 8)), "num_hidden_layers": draw(st.integers(1, 3)),
            "num_attention_heads": heads, "num_key_value_heads": heads, "n_shared_experts": draw(st.integers(0, 2)),
            "n_routed_experts": experts, "n_group": groups, "topk_group": topk_group,
            "num_experts_per_tok": draw(st.integers(1, topk_group * experts // groups)),
            "first_k_dense_replace": draw(st.integers(0, 2)), "q_lora_rank": draw(st.integers(2, 8)),
            "kv_lora_rank": draw(st.integers(2, 8)), "qk_rope_head_dim": rope, "qk_nope_head_dim": draw(st.integers(1, 4)),
            "v_head_dim": draw(st.integers(1, 6)), "index_n_heads": draw(st.integers(1, 3)),
            "index_head_dim": rope + draw(st.integers(0, 4)), "index_topk": draw(st.integers(1, 6)),
            "attention_bias": draw(st.booleans()), "max_position_embeddings": 64}


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(configs())
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 8))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_flops(config, batch, seq_len)


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_a_decode_step_after_a_cache_matches_transformers(tmp_path_factory, data):
    config = data.draw(configs())
    batch, context = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 7))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    decode = count(spec, Workload(phase="decode", batch_size=batch, seq_len=1, context=context))
    # the indexer scores the new token against every cached key too: its keys are cached beside the latent
    assert decode.flops.forward == eager_flops(config, batch, 1, context)


SMALL = {"model_type": "deepseek_v32", "hidden_size": 16, "intermediate_size": 24, "moe_intermediate_size": 8,
         "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 2, "n_routed_experts": 4,
         "n_group": 2, "topk_group": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "kv_lora_rank": 6,
         "q_lora_rank": 5, "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 6, "index_n_heads": 3,
         "index_head_dim": 8, "index_topk": 3, "vocab_size": 32, "max_position_embeddings": 64}


def test_check_hf_config_matches_every_component(tmp_path):
    path = write(tmp_path, SMALL)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=9))
    assert report.match and all(r.match for r in report.rows), report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    # 3 blocks: wq_b 5 -> 3 * 8, wk 16 -> 8, k_norm (weight and bias) 8, weights_proj 16 -> 3
    assert rows["params", "attention/indexer_q"].transformers == 3 * 5 * 24
    assert rows["params", "attention/indexer_k_norm"].transformers == 3 * 2 * 8
    assert rows["params", "attention/indexer_weights"].transformers == 3 * 16 * 3
    # every (query, key) pair of 2 sequences of 9: 3 heads of q . k (8 channels), then the 3 heads weighted
    assert rows["forward", "attention/indexer_scores"].transformers == 3 * 2 * (3 * 2 * 9 * 8 * 9 + 2 * 9 * 3 * 9)


def test_the_reference_model_agrees_with_flop_counter_and_fvcore(tmp_path):
    spec = read_hf_config(write(tmp_path, SMALL)).spec.replace(seq_len=9, batch_size=2)
    assert (spec.index_n_heads, spec.index_head_dim, spec.index_topk) == (3, 8, 3)
    report = check(spec, "meta")
    assert report.match and all(row.match for row in [*report.forward, *report.params])
    assert report.to_dict()["forward"]["flop_counter"] == count(spec).flops.forward == eager_flops(SMALL, 2, 9)


def test_mlp_layer_types_over_first_k_dense_replace(tmp_path):
    config = {**SMALL, "mlp_layer_types": ["dense", "dense", "sparse"]}
    source = read_hf_config(write(tmp_path, config))
    assert source.spec.first_dense_layers == 2
    assert "first_k_dense_replace=1 not read: mlp_layer_types gives 2 dense blocks" in source.source
    assert count(source.spec).params.total == meta_params(config)


@pytest.mark.parametrize("changes, message", [
    ({"q_lora_rank": None}, "q_lora_rank=None: expected an integer"),  # DeepseekV32Config refuses it too
    ({"index_head_dim": 3}, "index_head_dim=3 is not modelled: the indexer turns the first qk_rope_head_dim=4"),
    ({"mlp_layer_types": ["sparse", "dense", "sparse"]},
     "mlp_layer_types=['sparse', 'dense', 'sparse'] is not modelled: tfcalc models the dense blocks first"),
    ({"mlp_layer_types": ["dense"]}, "mlp_layer_types=['dense'] is not modelled: expected num_hidden_layers=3"),
    ({"layer_types": ["full_attention"] * 3}, "is not modelled: every DeepSeek-V3.2 block is indexed_attention"),
    ({"index_n_heads": 0}, "index_n_heads=0"),
    ({"index_topk": "2048"}, "index_topk='2048': expected an integer"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {**SMALL, **changes}))
    assert message in str(e.value), str(e.value)


def test_the_spec_fields_go_together():
    mla = {"n_layers": 2, "d_model": 16, "n_heads": 2, "vocab_size": 32, "seq_len": 8, "positions": "rotary",
           "kv_lora_rank": 6, "q_lora_rank": 5, "qk_nope_dim": 4, "qk_rope_dim": 4, "v_head_dim": 6}
    with pytest.raises(ValueError, match="index_n_heads=3: the indexer needs both index_n_heads and index_head_dim"):
        ModelSpec(**mla, index_n_heads=3)
    with pytest.raises(ValueError, match="index_n_heads=3: the indexer's queries read the query latent"):
        ModelSpec(**{**mla, "q_lora_rank": None}, index_n_heads=3, index_head_dim=8)
    with pytest.raises(ValueError, match="index_topk=4 is the indexer's"):
        ModelSpec(**mla, index_topk=4)
    assert ModelSpec(**mla, index_n_heads=3, index_head_dim=8).index_topk == 2048  # DeepSeek-V3.2's


# DeepSeek's own inference config of DeepSeek-V3.2-Exp (inference/config_671B_v3.2.json in deepseek-ai's repository,
# read from a public verbatim copy: awesome-mini-project/DeepSeek-V3.2-Exp; no network here), its fields under the
# names DeepseekV32Config gives them: dim, inter_dim, moe_inter_dim, n_layers, n_dense_layers, n_heads,
# n_routed_experts, n_shared_experts, n_activated_experts, n_expert_groups, n_limited_groups, route_scale, the MLA
# widths, index_n_heads, index_head_dim, index_topk, vocab_size, max_seq_len.
DEEPSEEK_V32 = {"model_type": "deepseek_v32", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
                "moe_intermediate_size": 2048, "num_hidden_layers": 61, "first_k_dense_replace": 3,
                "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256,
                "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
                "routed_scaling_factor": 2.5, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                "qk_rope_head_dim": 64, "v_head_dim": 128, "index_n_heads": 64, "index_head_dim": 128,
                "index_topk": 2048, "max_position_embeddings": 163840}


def test_deepseek_v32_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = meta_params(DEEPSEEK_V32)
    # DeepSeek-V3's 671,026,404,352 (tests/test_hf_deepseek.py) and in each of 61 blocks an indexer: wq_b 1536 * 64 *
    # 128, wk 7168 * 128, k_norm 2 * 128, weights_proj 7168 * 64
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert indexer == 13_959_424
    assert n_params == 671_026_404_352 + 61 * indexer == 671_877_929_216
    preset = load_preset("deepseek-v3.2")
    assert count(preset).params.total == n_params
    assert f"{n_params:,}" in find_preset("deepseek-v3.2").source
    spec = read_hf_config(write(tmp_path, DEEPSEEK_V32)).spec
    assert spec.replace(name=preset.name) == preset


def test_deepseek_v32_forward_counts_every_pair_and_caches_the_indexer_keys():
    spec = load_preset("deepseek-v3.2")
    flops = count(spec, Workload(seq_len=4096)).flops.components
    # 61 blocks, 64 indexer heads: q . k over 4096 x 4096 pairs of 128 channels, then the heads weighted
    assert flops["attention/indexer_scores"] == 61 * (64 * 2 * 4096 * 4096 * 128 + 2 * 4096 * 4096 * 64)
    # the attention core over every pair too, as the eager path runs it (it masks, not skips, what is not picked)
    assert flops["attention/scores"] == 61 * 128 * 2 * 4096 * 4096 * 192
    m = inference_memory(spec, Workload(phase="decode", seq_len=1, context=8191))
    # per token and block: the latent and rotary key (512 + 64) and the indexer's key (128), bf16
    assert m.kv_cache_bytes == 61 * 8192 * (512 + 64 + 128) * 2


def test_training_memory_against_mem_tracker_and_what_no_grad_leaves_out(tmp_path):
    from tfcalc.verify.memory_check import check_memory

    spec = read_hf_config(write(tmp_path, {**SMALL, "first_k_dense_replace": 3})).spec
    for recompute in ("none", "selective"):  # selective: the core's checkpoint keeps the mask of picked keys
        rows = {r.category: r for r in check_memory(spec, Workload(batch_size=2, seq_len=16), recompute=recompute,
                                                     attention="eager").rows}  # MLA: SDPA's CPU kernel cannot
        assert all(r.match for c, r in rows.items() if c not in ("gradients", "optimizer states")), rows
        # the reference runs the indexer under no_grad, as transformers does: its 3 * (5 * 24 + 16 * 8 + 2 * 8 +
        # 16 * 3) = 936 weights in 15 tensors get no gradient from the model's loss, and AdamW no state; the plan
        # counts them trained (DeepSeek trains the indexer by a loss of its own): bf16 gradients, fp32 moments
        # and a 4-byte step counter a tensor
        assert rows["gradients"].analytic - rows["gradients"].measured == 936 * 2
        assert rows["optimizer states"].analytic - rows["optimizer states"].measured == 936 * 8 + 15 * 4
