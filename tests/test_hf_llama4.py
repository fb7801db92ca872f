"""Llama 4's language model (model_type llama4_text, and a whole llama4 config's text_config): exact against
transformers' Llama4ForCausalLM (parameters on meta, FlopCounterMode over an eager CPU forward, per component through
check --hf-config), the chunked attention mask against transformers' own mask function, its KV cache against
transformers' cache, and the presets against the published configs."""

import json
import re

import pytest
import torch
import transformers
from hf_oracle import eager_flops, hf_config, meta_params, write
from hypothesis import given, settings
from hypothesis import strategies as st

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.arch.ops import AttentionCore, Mask
from tfcalc.arch.towers import select
from tfcalc.families.registry import family
from tfcalc.hf import read_hf_config
from tfcalc.plan.memory import inference_memory
from tfcalc.spec import ModelSpec
from tfcalc.verify import hf_model
from tfcalc.verify.checker import check
from tfcalc.verify.memory_check import check_memory

LM = transformers.Llama4ForCausalLM


def test_defaults_are_transformers_defaults():
    for key, value in family("llama4_text").defaults.items():
        assert getattr(transformers.Llama4TextConfig, key) == value, key


# ---- generated configs against transformers -------------------------------------------------------------------

@st.composite
def llama4_configs(draw) -> dict:
    """Small configs over every field the family reads."""
    kv = draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 3))
    layers = draw(st.integers(1, 5))
    experts = draw(st.integers(2, 4))
    config = dict(model_type="llama4_text", num_hidden_layers=layers, hidden_size=draw(st.sampled_from([8, 16])),
                  intermediate_size=draw(st.integers(2, 12)), intermediate_size_mlp=draw(st.integers(2, 12)),
                  num_attention_heads=heads, num_key_value_heads=kv, head_dim=draw(st.sampled_from([2, 4, 8])),
                  num_local_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)),
                  vocab_size=draw(st.integers(16, 48)), tie_word_embeddings=draw(st.booleans()),
                  attention_bias=draw(st.booleans()), use_qk_norm=draw(st.booleans()),
                  attention_chunk_size=draw(st.sampled_from([None, 1, 2, 3, 5])),
                  max_position_embeddings=64, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    if draw(st.booleans()):
        config["no_rope_layers"] = draw(st.lists(st.integers(0, 1), min_size=layers, max_size=layers + 1))
    else:
        config["no_rope_layer_interval"] = draw(st.integers(1, 4))
    step = draw(st.integers(1, 3))
    if draw(st.booleans()):
        config["moe_layers"] = list(range(step - 1, layers, step))
    else:
        config["interleave_moe_layer_step"] = step
    if config["attention_chunk_size"] is not None and draw(st.booleans()):
        config["layer_types"] = draw(st.lists(st.sampled_from(["chunked_attention", "full_attention"]),
                                              min_size=layers, max_size=layers))
    elif "no_rope_layers" in config:  # without layer_types transformers derives them from it: one per block
        config["no_rope_layers"] = config["no_rope_layers"][:layers]
    return config


def all_experts_flops(config: dict, tokens: int) -> int:
    """What transformers' Llama4TextMoe computes beyond the routed experts: every token through the E - k experts it
    did not pick too (their input scaled by 0), gate_up [D, 2F] and down [F, D] each, in every MoE block."""
    c = hf_config(config)
    moe_blocks = len([i for i in c.moe_layers if i < c.num_hidden_layers])
    E, k, D, F = c.num_local_experts, c.num_experts_per_tok, c.hidden_size, c.intermediate_size
    return moe_blocks * tokens * (E - k) * (2 * D * 2 * F + 2 * F * D)


@settings(max_examples=12, deadline=None)
@given(config=llama4_configs(), batch=st.integers(1, 2), seq_len=st.integers(1, 9))
def test_generated_configs_match_transformers_exactly(tmp_path_factory, config, batch, seq_len):
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(LM, config)
    measured = eager_flops(LM, config, batch, seq_len, attn_implementation="eager")
    assert result.flops.forward + all_experts_flops(config, batch * seq_len) == measured


SMALL = dict(model_type="llama4_text", vocab_size=96, hidden_size=32, intermediate_size=24, intermediate_size_mlp=40,
             num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=4,
             num_experts_per_tok=2, interleave_moe_layer_step=2, attention_chunk_size=5, max_position_embeddings=64)


def test_check_hf_config_matches_every_component(tmp_path):
    path = write(tmp_path, SMALL)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=12))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert all(r.match for (figure, _), r in rows.items() if figure == "params")
    # 4 MoE blocks of 8: E D F (gate_up [E, D, 2F] + down [E, F, D]) = 3 * 4 * 32 * 24 each, and a shared expert
    assert rows["params", "moe/experts"].transformers == 4 * 3 * 4 * 32 * 24
    assert rows["params", "moe/shared_experts"].transformers == 4 * 3 * 32 * 24
    assert rows["params", "moe/router"].transformers == 4 * 32 * 4  # no bias
    assert rows["params", "mlp/up"].transformers == 4 * 32 * 40  # the dense blocks: intermediate_size_mlp
    # the routed experts differ as documented: transformers runs all 4 over the 24 tokens, tfcalc the top 2
    experts = rows["forward", "moe/experts"]
    assert experts.known and experts.transformers * 2 == experts.analytic * 4
    assert rows["forward", "total"].known and all(
        r.match for (figure, c), r in rows.items() if figure == "forward" and c not in ("moe/experts", "total"))


def test_nested_llama4_config_reads_its_text_config(tmp_path):
    # read whole (tests/test_llama4_whole.py); its text tower is the text_config read alone
    outer = {"model_type": "llama4", "tie_word_embeddings": False, "text_config": SMALL,
             "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 16, "num_attention_heads": 2,
                               "intermediate_size": 64, "image_size": 32, "patch_size": 8, "vision_output_dim": 24,
                               "projector_input_dim": 24, "projector_output_dim": 24}}
    nested = read_hf_config(write(tmp_path, outer))
    text = select(nested.spec, "text")
    assert text.replace(name="x") == read_hf_config(write(tmp_path, SMALL, "text.json")).spec.replace(name="x")
    assert "llama4: the language model read from text_config (llama4_text)" in nested.source
    report = hf_model.compare(tmp_path / "config.json", text, Workload(batch_size=1, seq_len=7))
    # check builds the generation class (Llama4ForConditionalGeneration) and compares its language model and head
    assert report.match and report.model_class == "LanguageModel"
    assert any("llama4: transformers' generation class built from the whole config" in n for n in report.notes)


def test_defaults_read_as_scout(tmp_path):
    spec = read_hf_config(write(tmp_path, {"model_type": "llama4_text"})).spec
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.d_head, spec.n_experts, spec.top_k,
            spec.d_expert, spec.n_shared_experts, spec.d_ff, spec.moe_every) == (
        48, 5120, 40, 8, 128, 16, 1, 8192, 1, 16384, 1)
    assert spec.attention_chunk_size == 8192 and spec.attention_pattern == ["chunked", "chunked", "chunked", "global"]
    assert spec.rotary_layers == [True, True, True, False]


@pytest.mark.parametrize("changes, message", [
    ({"num_hidden_layers": 4, "no_rope_layers": [1, 0, 1]}, "no_rope_layers=[1, 0, 1] is not modelled"),
    ({"num_hidden_layers": 2, "no_rope_layers": [1, 0, 1]}, "transformers derives layer_types from it"),
    ({"no_rope_layer_interval": 0}, "no_rope_layer_interval=0 is not modelled"),
    ({"num_hidden_layers": 4, "moe_layers": [0, 2, 3]}, "moe_layers=[0, 2, 3] is not modelled"),
    ({"interleave_moe_layer_step": 0}, "interleave_moe_layer_step=0 is not modelled"),
    ({"num_local_experts": 1}, "num_local_experts=1 is not modelled"),
    ({"num_local_experts": 4, "num_experts_per_tok": 5}, "num_experts_per_tok=5 is not modelled"),
    ({"num_hidden_layers": 1, "layer_types": ["sliding_attention"]}, "entries 'sliding_attention'"),
    ({"num_hidden_layers": 2, "layer_types": ["full_attention"]}, "expected a list of num_hidden_layers=2"),
    ({"num_hidden_layers": 1, "attention_chunk_size": None, "layer_types": ["chunked_attention"]},
     "attention_chunk_size=None is not modelled"),
    ({"attention_chunk_size": 0}, "attention_chunk_size=0 is not modelled"),
    ({"head_dim": 7}, "head_dim=7 is not modelled"),
    ({"use_qk_norm": "true"}, "use_qk_norm='true': expected a boolean"),
    ({"intermediate_size_mlp": 0}, "intermediate_size_mlp=0: expected a positive integer"),
    ({"attention_chunk_size": 81.5}, "attention_chunk_size=81.5: expected an integer or null"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "llama4_text", **changes}))
    assert message in str(e.value), str(e.value)


def test_nested_text_config_of_another_type_is_refused(tmp_path):
    with pytest.raises(TfcalcError, match="text_config.model_type='llama': expected 'llama4_text'"):
        read_hf_config(write(tmp_path, {"model_type": "llama4", "text_config": {"model_type": "llama"}}))


# ---- the chunked mask ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("s_q, s_k, chunk", [(12, 12, 5), (1, 12, 5), (3, 17, 4), (7, 7, 7), (9, 9, 1), (4, 30, 8)])
def test_chunked_pairs_are_transformers_mask(s_q, s_k, chunk):
    from transformers.masking_utils import chunked_causal_mask_function

    from tfcalc.reference.layers import keep_mask

    keeps = chunked_causal_mask_function(chunk, torch.zeros(1, dtype=torch.long))
    q = torch.arange(s_k - s_q, s_k)[:, None]  # queries at the last s_q positions (after s_k - s_q cached)
    kv = torch.arange(s_k)[None, :]
    theirs = keeps(0, 0, q, kv)
    assert torch.equal(keep_mask(s_q, s_k, True, None, "cpu", chunk), theirs)
    core = AttentionCore("attention", 1, 1, s_q, s_k, 8, 8, Mask(True, chunk=chunk))
    assert core.pairs(windows=True) == int(theirs.sum())
    assert core.pairs(windows=False) == int((kv <= q).sum())  # the causal figure ignores the chunks


def test_chunked_pair_count_arithmetic():
    # 20 queries, chunks of 8: two whole chunks (1 + ... + 8 = 36 each) and one of 4 (1 + 2 + 3 + 4 = 10)
    assert AttentionCore("a", 1, 1, 20, 20, 1, 1, Mask(True, chunk=8)).pairs(True) == 2 * 36 + 10
    # decode at position 19 (19 cached): its chunk 16..19 holds 4 keys
    assert AttentionCore("a", 1, 1, 1, 20, 1, 1, Mask(True, chunk=8)).pairs(True) == 4


def test_kv_cache_keeps_one_chunk_as_transformers_cache_does():
    config = dict(SMALL, num_hidden_layers=4, interleave_moe_layer_step=1)  # 3 chunked blocks, 1 global (NoPE)
    model = LM._from_config(hf_config(config), attn_implementation="eager")
    with torch.no_grad():
        cache = model(input_ids=torch.zeros(1, 13, dtype=torch.long), use_cache=True).cache
    stored = [layer.keys.shape[-2] for layer in cache.layers]
    # transformers keeps chunk - 1 = 4 keys of a chunked layer between steps (the new one joins them), all 13 of
    # the global one
    assert stored == [4, 4, 4, 13]
    spec = read_hf_config(write_tmp(config)).spec
    m = inference_memory(spec, Workload(phase="decode", seq_len=1, context=13), dtype="fp32")
    # one decode step's keys and values: 5 (= 4 kept + the new one) in each chunked block, 14 in the global one;
    # 2 kv heads * 8 * 2 (keys, values) * 4 bytes per token
    assert m.kv_cache.total == (3 * 5 + 14) * 2 * 8 * 2 * 4


def write_tmp(config: dict):
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    return write(folder, config)


# ---- the reference model builds the chunked mask and the NoPE blocks --------------------------------------------

SPEC = ModelSpec(n_layers=4, d_model=32, n_heads=4, n_kv_heads=2, vocab_size=64, seq_len=19, batch_size=2,
                 mlp="gated", activation="silu", norm="rmsnorm", positions="rotary", tie_embeddings=False,
                 n_experts=4, top_k=1, d_expert=16, n_shared_experts=1, moe_every=2, attention_chunk_size=5,
                 attention_pattern=["chunked", "chunked", "chunked", "global"],
                 rotary_layers=[True, True, True, False])


@pytest.mark.parametrize("workload", [None, Workload(phase="decode", batch_size=2, seq_len=1, context=11)])
def test_check_matches_with_chunks_and_nope(workload):
    report = check(SPEC, workload=workload)
    assert report.match, [r for r in [*report.forward, *report.params] if not r.match]


def test_reference_blocks_have_chunks_and_nope():
    from tfcalc.reference import build_model

    attention = [m for m in build_model(SPEC).modules() if type(m).__name__ == "Attention"]
    assert [a.core.chunk for a in attention] == [5, 5, 5, None]
    assert [a.rotary for a in attention] == [True, True, True, False]


def test_check_memory_is_exact_with_chunks():
    report = check_memory(SPEC, Workload(batch_size=1, seq_len=11), "bf16-mixed", "adamw", "none", "meta", "eager")
    assert report.match, report.rows


def test_nope_blocks_keep_no_rotary_tables():
    from tfcalc.arch.architecture import stacks

    assert stacks(SPEC)[0].rotary_widths() == [8]
    assert stacks(SPEC.replace(rotary_layers=[False]))[0].rotary_widths() == []


def test_windowed_figure_counts_the_chunks():
    result = count(SPEC)
    # 3 chunked blocks of 4: per sequence and head the causal mask keeps 19 * 20 / 2 = 190 pairs, the chunks
    # 3 * 15 + 10 = 55 (three whole chunks of 5, then 4); scores and values each 2 * pairs * d_head FLOPs
    dropped = 3 * 2 * 4 * (190 - 55) * 2 * 2 * 8  # blocks * B * H * pairs * (scores + values) * 2 * d_head
    assert result.flops.forward_causal - result.flops.forward_windowed == dropped


@pytest.mark.parametrize("fields, message", [
    (dict(attention_pattern=["chunked", "global"]), "has chunked blocks: give attention_chunk_size"),
    (dict(attention_chunk_size=4, attention_pattern=["global"]), "has no chunked block to use it"),
    (dict(attention_chunk_size=4, causal=False), "attention_chunk_size=4 is not modelled with causal=False"),
    (dict(rotary_layers=[True, False], positions="learned"), "rotary_layers is only for rotary positions"),
    (dict(rotary_layers=[]), "rotary_layers=[]"),
])
def test_spec_refusals(fields, message):
    base = dict(n_layers=2, d_model=8, n_heads=2, vocab_size=10, seq_len=4, positions="rotary")
    with pytest.raises(ValueError, match=re.escape(message)):
        ModelSpec(**{**base, **fields})


def test_decode_sum_is_exact_over_chunk_boundaries():
    from tfcalc.plan.gpus import lookup
    from tfcalc.plan.request import decode_workload, request_life
    from tfcalc.plan.roofline import phase_cost

    gpu = lookup("a100-80gb")
    life = request_life(SPEC, gpu, prompt=3, output_tokens=30)  # contexts 3 .. 31: chunk starts 5, 10, ... crossed
    steps = [phase_cost(SPEC, decode_workload(1, c), gpu) for c in range(3, 32)]
    assert life.decode.flops == sum(s.flops for s in steps) and life.decode.bytes == sum(s.bytes for s in steps)


# ---- the presets ---------------------------------------------------------------------------------------------------

# The published text_config fields that shape the model (read from mirrors of the Hugging Face config.json: see the
# presets' source); NoPE every 4th block is Llama4TextConfig's default, which Scout's no_rope_layers spells out
SCOUT = dict(model_type="llama4_text", attention_bias=False, attention_chunk_size=8192, head_dim=128, hidden_act="silu",
             hidden_size=5120, interleave_moe_layer_step=1, intermediate_size=8192, intermediate_size_mlp=16384,
             max_position_embeddings=10485760, moe_layers=list(range(48)), no_rope_layers=[1, 1, 1, 0] * 12,
             num_attention_heads=40, num_experts_per_tok=1, num_hidden_layers=48, num_key_value_heads=8,
             num_local_experts=16, use_qk_norm=True, vocab_size=202048, tie_word_embeddings=False)
# its vision_config as published (the Llama4Config dump of Llama-4-Scout-17B-16E's config.json in a public GitHub
# markdown, find_string id 41112263523): tests/test_llama4_whole.py reads it whole
SCOUT_VISION = {"attention_dropout": 0.0, "hidden_act": "gelu", "hidden_size": 1408, "image_size": 336,
                "initializer_range": 0.02, "intermediate_size": 5632, "model_type": "llama4_vision_model",
                "multi_modal_projector_bias": False, "norm_eps": 1e-05, "num_attention_heads": 16, "num_channels": 3,
                "num_hidden_layers": 34, "patch_size": 14, "pixel_shuffle_ratio": 0.5, "projector_dropout": 0.0,
                "projector_input_dim": 4096, "projector_output_dim": 4096, "rope_theta": 10000,
                "vision_feature_layer": -1, "vision_feature_select_strategy": "default", "vision_output_dim": 4096}
MAVERICK = dict(SCOUT, interleave_moe_layer_step=2, max_position_embeddings=1048576, num_local_experts=128,
                use_qk_norm=False, moe_layers=None, no_rope_layers=None)


@pytest.mark.parametrize("preset, config, total", [
    ("llama4-scout", SCOUT, 107_769_861_120),  # Llama4ForCausalLM on meta (Meta: 109B with the vision tower)
    ("llama4-maverick", MAVERICK, 400_711_848_960),  # Meta: ~400B
])
def test_presets_are_the_published_configs(tmp_path, preset, config, total):
    spec = select(load_preset(preset), "text")  # Scout's preset is whole: its language model
    read = read_hf_config(write(tmp_path, config)).spec
    assert read.replace(name=spec.name, seq_len=spec.seq_len) == spec
    assert count(spec).params.total == meta_params(LM, config) == total


def test_presets_active_parameters_are_17b():
    # top-1 of 16 (Scout, every block) or 128 (Maverick, every other block) experts plus the shared one: both near
    # Meta's 17B active
    scout, maverick = (count(select(load_preset(p), "text")).params.active for p in ("llama4-scout", "llama4-maverick"))
    # Scout: the total less 15 of 16 experts in 48 blocks, 3 * 5120 * 8192 each
    assert scout == 107_769_861_120 - 48 * 15 * 3 * 5120 * 8192 == 17_172_894_720
    # Maverick: the total less 127 of 128 experts in 24 blocks
    assert maverick == 400_711_848_960 - 24 * 127 * 3 * 5120 * 8192 == 17_184_691_200


def test_json_round_trip_of_the_published_nested_config(tmp_path):
    outer = {"model_type": "llama4", "tie_word_embeddings": False, "text_config": SCOUT, "vision_config": SCOUT_VISION}
    spec = read_hf_config(write(tmp_path, outer)).spec
    assert count(select(spec, "text")).params.total == 107_769_861_120
    json.dumps(spec.model_dump())


def test_check_hf_config_with_fewer_layers_cuts_the_per_block_lists(tmp_path):
    # -L 4 on the published Scout config: its no_rope_layers (48 entries) is cut to 4 for transformers, which
    # derives one layer type per entry; moe_layers' indices past the blocks are ignored (transformers tests
    # `layer_idx in moe_layers`)
    path = write(tmp_path, {"model_type": "llama4", "tie_word_embeddings": False, "text_config": SCOUT,
                            "vision_config": SCOUT_VISION})
    spec = select(read_hf_config(path).spec, "text").replace(n_layers=4)
    report = hf_model.compare(path, spec, Workload(batch_size=1, seq_len=5))
    assert report.match, report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "total"].transformers == count(spec).params.total
