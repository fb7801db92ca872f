"""DeepSeek-V2 and DeepSeek-V3 (multi-head latent attention, shared experts): exact against transformers' own classes,
and MLA's KV cache (the latent) pinned to the figure serving engines use."""

import json
import warnings

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import ModelSpec, TfcalcError, Workload, count, load_preset
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.plan.memory import inference_memory

MODEL_CLASSES = {"deepseek_v2": transformers.DeepseekV2ForCausalLM, "deepseek_v3": transformers.DeepseekV3ForCausalLM}

# deepseek-ai/DeepSeek-V3 config.json, the fields transformers reads (typed from memory: no network here)
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "tie_word_embeddings": False, "hidden_act": "silu",
    "max_position_embeddings": 163840, "num_nextn_predict_layers": 1, "attention_bias": False,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
}
V3_TOTAL = 671_026_404_352  # DeepseekV3ForCausalLM from that config on meta: sum(p.numel())


def write(tmp_path, config: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def hf_model(config: dict, device="meta", **kwargs):
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device(device):
            return MODEL_CLASSES[config["model_type"]]._from_config(hf_config, **kwargs)


def transformers_counts(config: dict, batch: int, seq_len: int) -> tuple[int, int]:
    """(sum(p.numel()) on meta, FlopCounterMode FLOPs of one eager forward, eager experts, on the CPU)."""
    n_params = sum(p.numel() for p in hf_model(config).parameters())
    model = hf_model(config, "cpu", attn_implementation="eager", experts_implementation="eager")
    ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids)
    return n_params, counter.get_total_flops()


@pytest.mark.parametrize("model_type", MODEL_CLASSES)
def test_defaults_are_transformers_defaults(model_type):
    config_class = transformers.AutoConfig.for_model(model_type).__class__
    for key, value in DEFAULTS[model_type].items():
        assert getattr(config_class, key) == value, key


@st.composite
def deepseek_configs(draw, model_type: str) -> dict:
    heads = draw(st.integers(1, 4))
    groups = draw(st.integers(1, 3))
    experts = groups * draw(st.integers(2, 3))  # V3's router needs at least 2 experts in each of n_group groups
    topk_group = draw(st.integers(1, groups))
    q_lora = draw(st.none() | st.integers(2, 12))
    layers = draw(st.integers(1, 3))
    config = dict(
        model_type=model_type, vocab_size=draw(st.integers(16, 64)), hidden_size=heads * draw(st.sampled_from([4, 8])),
        intermediate_size=draw(st.integers(4, 24)), moe_intermediate_size=draw(st.integers(2, 12)),
        num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=draw(st.sampled_from([None, heads])), n_shared_experts=draw(st.integers(0, 2)),
        n_routed_experts=experts, num_experts_per_tok=draw(st.integers(1, topk_group * (experts // groups))),
        first_k_dense_replace=draw(st.integers(0, layers + 1)), q_lora_rank=q_lora,
        # even: DeepSeek-V2's rotary views the rope key, at offset kv_lora_rank, as complex numbers
        kv_lora_rank=2 * draw(st.integers(1, 6)), qk_nope_head_dim=draw(st.sampled_from([2, 4, 6])),
        qk_rope_head_dim=draw(st.sampled_from([2, 4])), v_head_dim=draw(st.sampled_from([2, 3, 6])),
        n_group=groups, topk_group=topk_group, norm_topk_prob=draw(st.booleans()),
        routed_scaling_factor=draw(st.sampled_from([1.0, 2.5])), hidden_act=draw(st.sampled_from(["silu", "gelu"])),
        tie_word_embeddings=draw(st.booleans()), max_position_embeddings=draw(st.integers(8, 32)),
        attention_bias=draw(st.booleans()) if q_lora is not None else False, pad_token_id=0, bos_token_id=0,
        eos_token_id=0)
    if model_type == "deepseek_v2":
        config["topk_method"] = draw(st.sampled_from(["greedy", "group_limited_greedy"]))
    else:
        config["rope_interleave"] = draw(st.booleans())
    return config


@pytest.mark.parametrize("model_type", MODEL_CLASSES)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, model_type, data):
    config = data.draw(deepseek_configs(model_type))
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 6))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec.replace(batch_size=batch,
                                                                                     seq_len=seq_len)
    n_params, flops = transformers_counts(config, batch, seq_len)
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == n_params
    assert result.flops.forward == flops


def test_deepseek_v3_published_total(tmp_path):
    # transformers' DeepseekV3ForCausalLM from the published config on meta; the router's e_score_correction_bias is
    # a buffer there (not a parameter: not in the total), the MTP module is not built
    model = hf_model(DEEPSEEK_V3)
    assert sum(p.numel() for p in model.parameters()) == V3_TOTAL
    assert dict(model.named_buffers())["model.layers.3.mlp.gate.e_score_correction_bias"].shape == (256,)
    assert not any(n.endswith("e_score_correction_bias") for n, _ in model.named_parameters())
    read = read_hf_config(write(tmp_path, DEEPSEEK_V3))
    assert count(read.spec).params.total == V3_TOTAL
    preset = load_preset("deepseek-v3")
    assert count(preset).params.total == V3_TOTAL
    assert {k: getattr(preset, k) for k in ("kv_lora_rank", "q_lora_rank", "qk_nope_dim", "qk_rope_dim",
                                            "v_head_dim", "n_experts", "top_k", "d_expert", "first_dense_layers")} \
        == {k: getattr(read.spec, k) for k in ("kv_lora_rank", "q_lora_rank", "qk_nope_dim", "qk_rope_dim",
                                               "v_head_dim", "n_experts", "top_k", "d_expert", "first_dense_layers")}


_V2 = dict(model_type="deepseek_v2", vocab_size=102400, moe_layer_freq=1, kv_lora_rank=512, qk_nope_head_dim=128,
           qk_rope_head_dim=64, v_head_dim=128, n_shared_experts=2, num_experts_per_tok=6, first_k_dense_replace=1,
           tie_word_embeddings=False, max_position_embeddings=163840, hidden_act="silu", norm_topk_prob=False)
# deepseek-ai/DeepSeek-V2-Lite and DeepSeek-V2 config.json (typed from memory), their preset, transformers' total
PUBLISHED_V2 = {
    "deepseek-v2-lite": (_V2 | dict(hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
                                    num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16,
                                    n_routed_experts=64, q_lora_rank=None, topk_method="greedy", n_group=1,
                                    topk_group=1, routed_scaling_factor=1.0), 15_706_484_224),
    "deepseek-v2": (_V2 | dict(hidden_size=5120, intermediate_size=12288, moe_intermediate_size=1536,
                               num_hidden_layers=60, num_attention_heads=128, num_key_value_heads=128,
                               n_routed_experts=160, q_lora_rank=1536, topk_method="group_limited_greedy", n_group=8,
                               topk_group=3, routed_scaling_factor=16.0), 235_741_434_880),
}


@pytest.mark.parametrize("preset", PUBLISHED_V2)
def test_deepseek_v2_presets_are_transformers_totals(tmp_path, preset):
    config, total = PUBLISHED_V2[preset]
    assert sum(p.numel() for p in hf_model(config).parameters()) == total
    assert count(read_hf_config(write(tmp_path, config)).spec).params.total == total
    assert count(load_preset(preset)).params.total == total


def test_deepseek_v3_caches_the_latent_576_a_token_a_layer():
    # vLLM and SGLang (and transformers 5) cache MLA's latent (kv_lora_rank 512) and the shared rotary key (64)
    m = inference_memory(load_preset("deepseek-v3"), Workload(phase="decode", seq_len=1, context=4095))
    assert m.kv_bytes_per_token == 576 * 61 * 2 == 70_272
    assert m.kv_cache_bytes == 4096 * 70_272


def test_mla_spec_fields_are_checked_by_name():
    base = dict(n_layers=2, d_model=32, n_heads=4, vocab_size=50, seq_len=8, positions="rotary")
    mla = dict(kv_lora_rank=8, qk_nope_dim=4, qk_rope_dim=2, v_head_dim=4)
    spec = ModelSpec(**base, **mla)
    assert (spec.d_head, spec.rotary_dim, spec.n_kv_heads) == (6, 2, 4)
    assert ModelSpec(**spec.model_dump()) == spec  # a dump round-trips
    for extra, message in [
        (dict(q_lora_rank=4), "q_lora_rank=4 is a multi-head latent attention field: it needs kv_lora_rank"),
        (dict(kv_lora_rank=8), "kv_lora_rank=8 (multi-head latent attention) needs qk_nope_dim, qk_rope_dim, "
                               "v_head_dim"),
        (mla | dict(d_head=8), "d_head=8: with kv_lora_rank=8"),
        (mla | dict(n_kv_heads=2), "n_kv_heads=2: with kv_lora_rank=8"),
        (mla | dict(positions="learned"), "positions='learned': kv_lora_rank=8"),
        (mla | dict(rotary_dim=4), "rotary_dim=4: with kv_lora_rank=8"),
        (mla | dict(qk_norm="head"), "qk_norm='head' is not modelled with kv_lora_rank=8"),
        (mla | dict(n_encoder_layers=2), "n_encoder_layers=2 is not modelled with kv_lora_rank=8"),
    ]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            ModelSpec(**(base | extra))


BASE_V3 = dict(model_type="deepseek_v3", vocab_size=32, hidden_size=16, intermediate_size=8, moe_intermediate_size=4,
               num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4,
               num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1, q_lora_rank=4,
               kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2)


@pytest.mark.parametrize("change, message", [
    (dict(num_key_value_heads=1), "num_key_value_heads=1 is not modelled"),
    (dict(moe_layer_freq=2), "moe_layer_freq=2 is not modelled"),
    (dict(n_routed_experts=1), "n_routed_experts=1 is not modelled"),
    (dict(n_group=3), "n_group=3 is not modelled"),
    (dict(n_group=None), "n_group=None is not modelled"),
    (dict(n_group=4), "n_group=4 is not modelled: DeepSeek-V3's router scores each group by its top 2"),
    (dict(topk_group=3), "topk_group=3 is not modelled"),
    (dict(num_experts_per_tok=3), "num_experts_per_tok=3 is not modelled"),
    (dict(num_experts_per_tok=None), "num_experts_per_tok=None is not modelled"),
    (dict(first_k_dense_replace=None), "first_k_dense_replace=None is not modelled"),
    (dict(q_lora_rank=None, attention_bias=True), "attention_bias=True is not modelled"),
    (dict(model_type="deepseek_v2", mlp_bias=True), "mlp_bias=True is not modelled"),
    (dict(model_type="deepseek_v2", topk_method="noaux_tc"), "topk_method='noaux_tc' is not modelled"),
    (dict(model_type="deepseek_v2", hidden_size=15), "hidden_size=15 is not modelled"),
    (dict(kv_lora_rank=None), "kv_lora_rank=None: expected"),
    (dict(v_head_dim=2.0), "v_head_dim=2.0: expected"),
    (dict(v_head_dim=None), "v_head_dim=None is not modelled"),
])
def test_unmodelled_fields_are_refused_by_name(tmp_path, change, message):
    with pytest.raises(TfcalcError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_hf_config(write(tmp_path, BASE_V3 | change))


def test_shared_experts_are_one_mlp_of_n_widths(tmp_path):
    # transformers: one shared MLP of moe_intermediate_size * n_shared_experts: the same parameters and FLOPs as
    # n_shared_experts experts of moe_intermediate_size
    config = BASE_V3 | dict(model_type="deepseek_v2", n_shared_experts=3, topk_method="greedy")
    spec = read_hf_config(write(tmp_path, config)).spec
    assert (spec.n_shared_experts, spec.d_shared_expert) == (1, 12)
    three = spec.replace(n_shared_experts=3, d_shared_expert=4)
    assert count(three).params.total == count(spec).params.total
    assert count(three).flops.forward == count(spec).flops.forward


@pytest.mark.parametrize("q_lora_rank", [4, None])
def test_check_hf_config_matches_every_component(tmp_path, q_lora_rank):
    from tfcalc.verify.hf_model import compare

    path = write(tmp_path, BASE_V3 | dict(q_lora_rank=q_lora_rank, n_shared_experts=2))
    spec = read_hf_config(path).spec.replace(seq_len=5, batch_size=2)
    report = compare(path, spec, Workload(batch_size=2, seq_len=5))
    assert report.match, [r for r in report.rows if not r.match]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    components = {r.component for r in report.rows}
    assert {"attention/kv_a", "attention/kv_a_norm", "attention/kv_b", "moe/shared_experts"} <= components


@pytest.mark.parametrize("q_lora_rank, recomputes", [(6, ("none", "selective")), (None, ("none",))])
def test_check_spec_matches_both_counters_and_memory(q_lora_rank, recomputes):
    # the reference model's latent attention per component (a train step on the CPU, decode with a cache on meta);
    # the training memory of a dense MLA model to the byte
    from tfcalc.verify.checker import check
    from tfcalc.verify.memory_check import check_memory

    spec = ModelSpec(n_layers=2, d_model=32, n_heads=4, d_ff=48, vocab_size=61, seq_len=8, batch_size=2, mlp="gated",
                     activation="silu", norm="rmsnorm", positions="rotary", bias=False, tie_embeddings=False,
                     kv_lora_rank=12, q_lora_rank=q_lora_rank, qk_nope_dim=4, qk_rope_dim=4, v_head_dim=6)
    assert check(spec, "cpu", train=q_lora_rank is not None).match
    decode = check(spec, "meta", workload=Workload(batch_size=2, seq_len=1, context=7, phase="decode"))
    assert decode.match
    rows = {r.component for r in decode.forward}
    assert {"attention/kv_a", "attention/kv_b", "attention/core", "attention/out"} <= rows
    for recompute in recomputes:
        # eager attention: SDPA's CPU kernel cannot take MLA's keys and values of different widths (math fallback)
        report = check_memory(spec, Workload(batch_size=2, seq_len=8), recompute=recompute, attention="eager")
        row = next(r for r in report.rows if r.category.startswith("activations"))
        assert row.analytic == row.measured, recompute


def test_a_folded_check_is_the_unfolded_one():
    # `check` of a model with many expert modules builds one block of each kind (tfcalc.verify.folding): every figure
    # must be the unfolded build's
    from tfcalc.verify.checker import check
    from tfcalc.verify.folding import fold, should_fold

    assert should_fold(load_preset("deepseek-v3")) and not should_fold(load_preset("mixtral-8x7b"))
    assert fold(load_preset("deepseek-v3"))[1] == {"blocks.0": 3, "blocks.1": 58}
    specs = [ModelSpec(n_layers=5, d_model=32, n_heads=4, d_ff=48, vocab_size=61, seq_len=8, batch_size=2,
                       mlp="gated", activation="silu", norm="rmsnorm", positions="rotary", bias=False,
                       tie_embeddings=False, n_experts=4, top_k=2, n_shared_experts=1, d_expert=16,
                       first_dense_layers=1, moe_every=2, kv_lora_rank=12, q_lora_rank=6, qk_nope_dim=4,
                       qk_rope_dim=4, v_head_dim=6, sliding_window=4, attention_pattern=["local", "global", "global"]),
             ModelSpec(n_layers=3, n_encoder_layers=2, d_model=32, n_heads=4, vocab_size=61, seq_len=8, n_experts=3,
                       top_k=1)]
    for spec in specs:
        whole, folded = check(spec, train=True, fold=False), check(spec, train=True, fold=True)
        assert whole.match and folded.match
        for key in ("forward", "params", "train_step"):
            assert whole.to_dict()[key] == folded.to_dict()[key], key
        assert folded.notes[-2].startswith("folded:")


def test_blocks_that_read_their_place_in_the_stack_are_not_folded():
    # per-layer inputs (each block its slice of one table) and KV sharing (a block reads an earlier one's keys) tie a
    # block to its index: check builds such a model block by block, and a forced fold is refused by name
    from tfcalc import TfcalcError
    from tfcalc.verify.folding import fold, should_fold

    base = dict(n_layers=2, d_model=32, n_heads=4, vocab_size=61, seq_len=8, positions="rotary", n_experts=512,
                top_k=1)
    for extra in (dict(d_per_layer_input=4), dict(kv_shared_layers=1)):
        spec = ModelSpec(**base, **extra)
        assert not should_fold(spec)
        with pytest.raises(TfcalcError, match="fold=True: a model with per-layer inputs"):
            fold(spec)
    assert should_fold(ModelSpec(**base))
