"""Qwen3-Next (qwen3_next) from its config.json: exact against transformers' Qwen3NextForCausalLM (sum(numel) on meta,
FlopCounterMode forward FLOPs of an eager CPU forward on its pure-torch path: the chunked gated delta rule, the padded
causal conv, real routing), in train, prefill and decode, with transformers' defaults, refusals by field name and the
check against transformers per component."""

import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count, find_preset, load_preset
from tfcalc.arch.towers import select
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.plan.memory import inference_memory
from tfcalc.verify import hf_model

TINY = {"model_type": "qwen3_next", "num_hidden_layers": 4, "hidden_size": 32, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 24, "vocab_size": 50, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 6, "linear_conv_kernel_dim": 3,
        "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 12, "shared_expert_intermediate_size": 10,
        "mlp_only_layers": [1], "max_position_embeddings": 256}


def meta_params(config: dict) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in transformers.Qwen3NextForCausalLM(hf_config(config)).parameters())


def eager(config: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        return transformers.Qwen3NextForCausalLM._from_config(hf_config(config), attn_implementation="eager",
                                                              experts_implementation="eager")


def forward_flops(model, ids, **kwargs) -> int:
    with warnings.catch_warnings(), torch.no_grad(), FlopCounterMode(display=False) as counter:
        warnings.simplefilter("ignore")
        model(input_ids=ids, **kwargs)
    return counter.get_total_flops()


def ids(vocab: int, batch: int, seq_len: int):
    return torch.randint(vocab, (batch, seq_len), generator=torch.Generator().manual_seed(0))


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["qwen3_next"].items():
        assert getattr(transformers.Qwen3NextConfig, key) == value, key


def test_the_default_config(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "qwen3_next"})).spec
    # every 4th block attention (full_attention_interval 4), every block with experts (decoder_sparse_step 1)
    assert spec.block_pattern == ["gated_deltanet+moe"] * 3 + ["attention+moe"]
    assert spec.kinds == {"gated_deltanet": {"key_heads": 16, "value_heads": 32, "key_head_dim": 128,
                                             "value_head_dim": 128, "conv_kernel": 4}}
    assert (spec.attention_gate, spec.qk_norm, spec.d_head, spec.rotary_dim) == (True, "head", 256, 64)
    assert (spec.n_experts, spec.top_k, spec.d_expert, spec.d_shared_expert, spec.shared_expert_gate) == \
        (512, 10, 512, 512, True)
    assert count(spec).params.total == meta_params({"model_type": "qwen3_next"})


@st.composite
def configs(draw) -> dict:
    layers = draw(st.integers(1, 5))
    kv = draw(st.integers(1, 2))
    hk = draw(st.integers(1, 2))
    config = {"model_type": "qwen3_next", "num_hidden_layers": layers, "num_key_value_heads": kv,
              "num_attention_heads": kv * draw(st.integers(1, 2)), "hidden_size": draw(st.sampled_from([8, 16, 24])),
              "head_dim": draw(st.sampled_from([4, 8])), "intermediate_size": draw(st.integers(1, 24)),
              "vocab_size": draw(st.integers(16, 40)), "linear_num_key_heads": hk,
              "linear_num_value_heads": hk * draw(st.integers(1, 3)), "linear_key_head_dim": draw(st.integers(1, 8)),
              "linear_value_head_dim": draw(st.integers(1, 8)), "linear_conv_kernel_dim": draw(st.integers(1, 4)),
              "attention_bias": draw(st.booleans()), "tie_word_embeddings": draw(st.booleans()),
              "max_position_embeddings": 256}
    experts = draw(st.sampled_from([0, 2, 4]))
    config |= {"num_experts": experts, "num_experts_per_tok": draw(st.integers(1, max(experts, 1))),
               "moe_intermediate_size": draw(st.integers(1, 12)),
               "shared_expert_intermediate_size": draw(st.integers(1, 12)),
               "decoder_sparse_step": draw(st.integers(1, 2))}
    if draw(st.booleans()):
        config["mlp_only_layers"] = draw(st.lists(st.integers(0, layers), max_size=2))
    how = draw(st.sampled_from(["layer_types", "interval", "default"]))
    if how == "layer_types":
        config["layer_types"] = draw(st.lists(st.sampled_from(["linear_attention", "full_attention"]),
                                              min_size=layers, max_size=layers))
    elif how == "interval":
        config["full_attention_interval"] = draw(st.integers(1, 3))
    if draw(st.booleans()):
        config["partial_rotary_factor"] = draw(st.sampled_from([0.5, 1.0]))
    return config


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(configs())
    K = config["linear_conv_kernel_dim"]
    # s >= K: with a cache and fewer tokens than taps transformers pads the conv's input (test below); past 64 tokens
    # the delta rule runs two chunks, the second padded
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(K, 8) | st.integers(62, 70))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    # transformers' cached forward needs an attention block (get_seq_length); an all-linear model runs without one
    built = hf_config(config)
    use_cache = "full_attention" in built.layer_types
    assert result.flops.forward == forward_flops(eager(config), ids(config["vocab_size"], batch, seq_len),
                                                 use_cache=use_cache)
    # block i is what transformers builds: its mixer and its MLP
    ours = [spec.block_pattern[i % len(spec.block_pattern)] for i in range(spec.n_layers)]
    dense = set(built.mlp_only_layers)
    theirs = [("gated_deltanet" if t == "linear_attention" else "attention") + "+"
              + ("moe" if i not in dense and built.num_experts > 0 and (i + 1) % built.decoder_sparse_step == 0
                 else "mlp") for i, t in enumerate(built.layer_types)]
    assert ours == theirs


@pytest.mark.parametrize("batch, context, new", [(2, 7, 1), (2, 7, 5), (1, 60, 9)])
def test_decode_and_prefill_after_a_cache_match_transformers(tmp_path, batch, context, new):
    # one token after a cache: the recurrent delta rule (no matmul), the conv over K cached + 1 new positions; more
    # tokens after a cache: the chunked rule from the cached state, the conv over K cached + new positions.
    # transformers' head scores every new position (tfcalc's prefill: the last one): compared without the head
    spec = read_hf_config(write(tmp_path, TINY)).spec
    model = eager(TINY)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cache = model(input_ids=ids(50, batch, context), use_cache=True).past_key_values
    theirs = forward_flops(model, ids(50, batch, new), past_key_values=cache, use_cache=True)
    phase = "decode" if new == 1 else "prefill"
    ours = count(spec, Workload(phase=phase, batch_size=batch, seq_len=new, context=context)).flops.components
    head = 2 * batch * new * TINY["hidden_size"] * TINY["vocab_size"]
    assert sum(v for k, v in ours.items() if k != "head") + head == theirs


def test_check_hf_config_is_all_match(tmp_path):
    path = write(tmp_path, TINY)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=6))
    assert report.match and all(row.match for row in report.rows), [r for r in report.rows if not r.match]
    components = {row.component for row in report.rows}
    assert {"gated_deltanet/conv+delta_rule", "attention/norm+gated_deltanet/norm", "moe/shared_gate"} <= components


def test_check_hf_config_knows_the_padded_conv(tmp_path):
    # with a cache (check --hf-config runs one) and s = 2 < K = 3, transformers pads each conv's input to K positions
    path = write(tmp_path, TINY)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=2))
    assert report.match
    differ = {(r.figure, r.component): r for r in report.rows if not r.match}
    assert set(differ) == {("forward", "gated_deltanet/conv+delta_rule"), ("forward", "total")}
    channels = 2 * 2 * 8 + 4 * 6
    for row in differ.values():  # 3 gated DeltaNet blocks x 2 b C K (K - s)
        assert row.known and row.transformers - row.analytic == 3 * 2 * 2 * channels * 3 * (3 - 2)


def test_dense_blocks_and_no_experts(tmp_path):
    # num_experts=0: every block a dense MLP of intermediate_size; decoder_sparse_step=2: every other block has experts
    dense = read_hf_config(write(tmp_path, {**TINY, "num_experts": 0})).spec
    assert dense.block_pattern == ["gated_deltanet+mlp"] * 3 + ["attention+mlp"] and dense.n_experts == 1
    assert count(dense).params.total == meta_params({**TINY, "num_experts": 0})
    step = read_hf_config(write(tmp_path, {**TINY, "decoder_sparse_step": 2, "mlp_only_layers": []})).spec
    assert step.block_pattern == ["gated_deltanet+mlp", "gated_deltanet+moe", "gated_deltanet+mlp", "attention+moe"]
    # all attention: no gated DeltaNet sizes
    attention = read_hf_config(write(tmp_path, {**TINY, "full_attention_interval": 1})).spec
    assert not attention.kinds and set(attention.block_pattern) <= {"attention+moe", "attention+mlp"}


@pytest.mark.parametrize("changes, message", [
    ({"linear_num_key_heads": 3}, "linear_num_key_heads=3 is not modelled: does not divide linear_num_value_heads=4"),
    ({"num_key_value_heads": 3}, "num_key_value_heads=3 is not modelled: does not divide num_attention_heads=4"),
    ({"layer_types": ["linear_attention"] * 3}, ("layer_types=['linear_attention', 'linear_attention', "
                                                 "'linear_attention'] is not modelled: expected a list of "
                                                 "num_hidden_layers=4")),
    ({"layer_types": ["linear_attention", "mamba", "full_attention", "full_attention"]}, "entries 'mamba'"),
    ({"full_attention_interval": 0}, "full_attention_interval=0 is not modelled"),
    ({"num_experts": 1}, "num_experts=1 is not modelled: "),
    ({"num_experts_per_tok": 5}, "num_experts_per_tok=5 is not modelled: more than num_experts=4"),
    ({"shared_expert_intermediate_size": 0}, "shared_expert_intermediate_size=0 is not modelled"),
    ({"partial_rotary_factor": 2.0}, "partial_rotary_factor=2.0 is not modelled"),
    ({"linear_conv_kernel_dim": 0}, "linear_conv_kernel_dim=0"),
])
def test_refusals_name_the_field_and_value(tmp_path, changes, message):
    with pytest.raises(TfcalcError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        read_hf_config(write(tmp_path, {**TINY, **changes}))


# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json: every key transformers reads, verbatim from a public copy (no network
# here to the hub); keys transformers does not read for shapes (token ids, init, dtype, router_aux_loss_coef, ...) left out
QWEN3_NEXT_80B_A3B = {"model_type": "qwen3_next", "decoder_sparse_step": 1, "full_attention_interval": 4, "head_dim": 256,
                      "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5120, "linear_conv_kernel_dim": 4,
                      "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                      "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [],
                      "moe_intermediate_size": 512, "norm_topk_prob": True, "num_attention_heads": 16,
                      "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
                      "partial_rotary_factor": 0.25, "rope_scaling": None, "rope_theta": 10000000,
                      "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "vocab_size": 151936}


def test_qwen3_next_80b_a3b_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = meta_params(QWEN3_NEXT_80B_A3B)
    D, V, E = 2048, 151936, 512
    expert = 3 * D * 512  # gate, up, down of 512
    moe = D * E + E * expert + expert + D  # router, 512 experts, the shared expert, its gate
    # 36 gated DeltaNet blocks: in_proj_qkvz D * 12288, in_proj_ba D * 64, conv 8192 * 4, A_log and dt_bias 2 * 32,
    # the gated norm 128, out_proj 4096 * D; 12 attention blocks: q 2 * 16 * 256, k and v 2 * 2 * 256, o 16 * 256,
    # q/k norms 2 * 256; every block 2 norms of D and the experts; embedding, final norm, untied head
    linear = D * 12288 + D * 64 + 8192 * 4 + 64 + 128 + 4096 * D
    attention = D * (2 * 4096 + 2 * 512) + 4096 * D + 2 * 256
    assert n_params == 36 * linear + 12 * attention + 48 * (2 * D + moe) + 2 * V * D + D == 79_674_391_296
    preset = load_preset("qwen3-next-80b-a3b")
    result = count(preset)
    assert result.params.total == n_params
    # the card's 3B activated: 10 routed experts and the shared one per token
    assert result.params.active == n_params - 48 * (E - 10) * expert == 3_874_929_408
    assert f"{n_params:,}" in find_preset("qwen3-next-80b-a3b").source
    spec = read_hf_config(write(tmp_path, QWEN3_NEXT_80B_A3B)).spec
    assert spec.replace(name=preset.name) == preset


def test_qwen3_next_decode_memory_has_the_state_apart_from_the_kv_cache():
    m = inference_memory(load_preset("qwen3-next-80b-a3b"), Workload(phase="decode", seq_len=1, context=131072))
    # 36 gated DeltaNet blocks x (conv state 8192 channels x 3 positions in bf16 + recurrent state 32 x 128 x 128 in
    # fp32, as transformers' torch path keeps it)
    assert m.state_bytes_per_sequence == 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 4) == 77_266_944
    # 12 attention blocks x 131,073 tokens x 2 key/value heads x (256 + 256) x 2 bytes
    assert m.kv_cache_bytes == 12 * 131073 * 2 * 512 * 2 == 3_221_250_048


# ---- Qwen3.5 (qwen3_5_text) and Qwen3.5-MoE (qwen3_5_moe_text), and their multimodal configs (qwen3_5, qwen3_5_moe) --

CLASSES = {"qwen3_5_text": "Qwen3_5ForCausalLM", "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM"}
CONFIGS = {"qwen3_5_text": "Qwen3_5TextConfig", "qwen3_5_moe_text": "Qwen3_5MoeTextConfig"}


def qwen3_5_params(config: dict) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in getattr(transformers, CLASSES[config["model_type"]])(hf_config(config))
                   .parameters())


@pytest.mark.parametrize("model_type", CLASSES)
def test_qwen3_5_defaults_are_transformers_defaults(model_type):
    for key, value in DEFAULTS[model_type].items():
        assert getattr(getattr(transformers, CONFIGS[model_type]), key) == value, key


@st.composite
def qwen3_5_configs(draw) -> dict:
    model_type = draw(st.sampled_from(list(CLASSES)))
    layers, kv, hk = draw(st.integers(1, 5)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    config = {"model_type": model_type, "num_hidden_layers": layers, "num_key_value_heads": kv,
              "num_attention_heads": kv * draw(st.integers(1, 2)), "hidden_size": draw(st.sampled_from([8, 16])),
              "head_dim": draw(st.sampled_from([4, 8])), "vocab_size": draw(st.integers(16, 40)),
              "linear_num_key_heads": hk, "linear_num_value_heads": hk * draw(st.integers(1, 2)),
              "linear_key_head_dim": draw(st.integers(1, 6)), "linear_value_head_dim": draw(st.integers(1, 6)),
              "linear_conv_kernel_dim": draw(st.integers(1, 4)), "attention_bias": draw(st.booleans()),
              "tie_word_embeddings": draw(st.booleans())}
    if model_type == "qwen3_5_text":
        config["intermediate_size"] = draw(st.integers(1, 16))
    else:
        experts = draw(st.sampled_from([2, 4]))
        config |= {"num_experts": experts, "num_experts_per_tok": draw(st.integers(1, experts)),
                   "moe_intermediate_size": draw(st.integers(1, 8)),
                   "shared_expert_intermediate_size": draw(st.integers(1, 8))}
    if draw(st.booleans()):
        config["layer_types"] = draw(st.lists(st.sampled_from(["linear_attention", "full_attention"]),
                                              min_size=layers, max_size=layers))
    return config


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_qwen3_5_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(qwen3_5_configs())
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(config["linear_conv_kernel_dim"], 8))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == qwen3_5_params(config)
    use_cache = "full_attention" in hf_config(config).layer_types
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(transformers, CLASSES[config["model_type"]])._from_config(
            hf_config(config), attn_implementation="eager", experts_implementation="eager")
    assert result.flops.forward == forward_flops(model, ids(config["vocab_size"], batch, seq_len), use_cache=use_cache)


QWEN3_5_TINY = {k: v for k, v in TINY.items() if k not in ("mlp_only_layers", "num_experts", "num_experts_per_tok",
                                                           "moe_intermediate_size", "shared_expert_intermediate_size")}
QWEN3_5_MOE_TINY = {k: v for k, v in TINY.items() if k not in ("mlp_only_layers", "intermediate_size")}


@pytest.mark.parametrize("model_type, text", [("qwen3_5_text", QWEN3_5_TINY), ("qwen3_5_moe_text", QWEN3_5_MOE_TINY)])
def test_qwen3_5_text_and_its_multimodal_config_check_all_match(tmp_path, model_type, text):
    config = {**text, "model_type": model_type}
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    expected = "moe" if model_type == "qwen3_5_moe_text" else "mlp"
    assert spec.block_pattern == [f"gated_deltanet+{expected}"] * 3 + [f"attention+{expected}"]
    report = hf_model.compare(path, spec, Workload(batch_size=2, seq_len=6))
    assert report.match and all(row.match for row in report.rows), [r for r in report.rows if not r.match]
    # the split projections: in_proj_qkv and in_proj_z, in_proj_b and in_proj_a, compared as the fused ones
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "gated_deltanet/in_proj_qkvz"].transformers == 3 * 32 * (2 * 2 * 8 + 2 * 4 * 6)
    assert rows["params", "gated_deltanet/in_proj_ba"].transformers == 3 * 32 * 2 * 4
    # the multimodal config: the same language model from its text_config
    outer = {"model_type": model_type.removesuffix("_text"), "text_config": config, "tie_word_embeddings": False,
             "vision_config": {"depth": 1}}
    nested_path = write(tmp_path, outer)
    source = read_hf_config(nested_path)  # read whole (its vision tower: tests/test_qwen3_vl_whole.py)
    assert select(source.spec, "text").replace(name=spec.name) == spec
    assert hf_model.compare(nested_path, select(source.spec, "text"), Workload(batch_size=2, seq_len=6)).match


def test_qwen3_5_refusals_name_the_field_and_value(tmp_path):
    with pytest.raises(TfcalcError, match="linear_num_key_heads=3 is not modelled"):
        read_hf_config(write(tmp_path, {**QWEN3_5_TINY, "model_type": "qwen3_5_text", "linear_num_key_heads": 3}))
    with pytest.raises(TfcalcError, match="num_experts=1 is not modelled"):
        read_hf_config(write(tmp_path, {**QWEN3_5_MOE_TINY, "model_type": "qwen3_5_moe_text", "num_experts": 1}))
