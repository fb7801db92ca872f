"""Llama 3.2 Vision's language model (mllama_text_model, and the language model of a multimodal mllama config) from
its config.json: exact against transformers' MllamaForCausalLM (sum(numel) on meta; FlopCounterMode over eager CPU
forwards with cross_attention_states of the right shape, a prefill and a decode step; the cache transformers keeps),
the check against transformers per component, the reference model's gated cross-attention blocks, refusals by field
name, and the llama3.2-11b-vision preset pinned to the class built from the published text_config."""

import re
import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.counts import folds
from tfcalc.arch import build
from tfcalc.arch.towers import select
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model

CausalLM = transformers.models.mllama.modeling_mllama.MllamaForCausalLM


def tiny(**changes) -> dict:
    config = dict(model_type="mllama_text_model", vocab_size=96, hidden_size=64, intermediate_size=96,
                  num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2, cross_attention_layers=[1, 3],
                  max_position_embeddings=512, pad_token_id=None, bos_token_id=0, eos_token_id=1)
    return config | changes


def meta_params(config: dict) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in CausalLM._from_config(hf_config(config)).parameters())


def model(config: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        return CausalLM._from_config(hf_config(config), attn_implementation="eager").eval()


@pytest.mark.parametrize("changes", [
    {},  # blocks 1 and 3 of 5: a pattern of 2
    {"cross_attention_layers": [0, 2, 3], "num_hidden_layers": 4},  # no period shorter than the 4 blocks
    {"cross_attention_layers": [1, 9]},  # 9 is beyond the 5 blocks: no such block (transformers builds none)
    {"cross_attention_layers": [], "tie_word_embeddings": True},  # a plain llama; the flag ties nothing
    {"num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 96},
])
def test_parameters_are_transformers_on_meta(tmp_path, changes):
    config = tiny(**changes)
    spec = read_hf_config(write(tmp_path, config)).spec
    assert count(spec).params.total == meta_params(config)


def test_the_arithmetic_of_one_gated_cross_attention_block(tmp_path):
    spec = read_hf_config(write(tmp_path, tiny())).spec
    params = count(spec).params.components
    # token table [96 + 8, 64]; head [64, 96]
    assert params["embedding/token"] == 104 * 64 and params["head"] == 64 * 96
    # two cross blocks: q [64, 64], k and v [64, 2 * 16] each, o [64, 64], q_norm and k_norm [16], two gates [1]
    assert params["cross_attention/q"] == 2 * 64 * 64 and params["cross_attention/kv"] == 2 * 2 * 64 * 32
    assert params["cross_attention/q_norm"] == params["cross_attention/k_norm"] == 2 * 16
    assert params["cross_attention/gate"] == params["cross_attention/mlp_gate"] == 2
    assert spec.block_pattern == ["attention+mlp", "cross_attention+mlp"]


def vision(batch: int, tokens: int, width: int) -> torch.Tensor:
    return torch.randn(batch, tokens, width, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("batch,seq_len,src_len", [(1, 7, 10), (2, 5, 33)])
def test_forward_flops_are_transformers_eager(tmp_path, batch, seq_len, src_len):
    config = tiny()
    spec = read_hf_config(write(tmp_path, config)).spec
    lm = model(config)
    ids = torch.randint(96, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        lm(input_ids=ids, cross_attention_states=vision(batch, src_len, 64), use_cache=False)
    ours = count(spec, Workload(batch_size=batch, seq_len=seq_len, src_len=src_len)).flops.forward
    assert ours == counter.get_total_flops()


def test_prefill_caches_the_vision_keys_once_and_decode_reads_them(tmp_path):
    """transformers' cache after a prefill: the self-attention blocks' text keys and values, the cross-attention
    blocks' vision keys and values (src_len of them); a decode step projects no vision keys (FLOPs and cache)."""
    config, batch, prompt, src_len = tiny(), 2, 6, 12
    spec = read_hf_config(write(tmp_path, config)).spec
    lm = model(config)
    ids = torch.randint(96, (batch, prompt + 1), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), FlopCounterMode(display=False) as prefill_counter:
        out = lm(input_ids=ids[:, :prompt], cross_attention_states=vision(batch, src_len, 64), use_cache=True)
    cache = out.cache
    kept = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers)
    prefill = Workload(phase="prefill", batch_size=batch, seq_len=prompt, src_len=src_len)
    # 3 self blocks: 2 * 6 tokens * 2 kv heads * 16 * 2 (k, v); 2 cross blocks: 2 * 12 vision tokens * 2 * 16 * 2
    assert kept == sum(folds.kv_cache(build(spec, prefill)).values()) == 3 * 2 * 6 * 64 + 2 * 2 * 12 * 64
    # the prefill's forward scores every position (logits_to_keep is generate's): tfcalc's head scores the last
    head = 2 * batch * (prompt - 1) * 64 * 96
    assert count(spec, prefill).flops.forward + head == prefill_counter.get_total_flops()
    with torch.no_grad(), FlopCounterMode(display=False) as decode_counter:
        lm(input_ids=ids[:, prompt:], cache=cache, use_cache=True)
    decode = Workload(phase="decode", batch_size=batch, seq_len=1, context=prompt, src_len=src_len)
    assert count(spec, decode).flops.forward == decode_counter.get_total_flops()


def test_check_against_transformers_matches_every_component(tmp_path):
    path = write(tmp_path, tiny())
    spec = read_hf_config(path).spec
    for workload in (Workload(batch_size=2, seq_len=8), Workload(batch_size=1, seq_len=4, src_len=50)):
        report = hf_model.compare(path, spec, workload)
        assert report.match and report.model_class == "MllamaForCausalLM"
        rows = {(r.figure, r.component): r for r in report.rows}
        assert rows["params", "attention/norm+cross_attention/norm"].match
        assert rows["forward", "cross_attention/kv"].transformers > 0


def test_the_reference_model_builds_the_gated_blocks(tmp_path):
    spec = read_hf_config(write(tmp_path, tiny())).spec
    for workload in (Workload(seq_len=8, src_len=20), Workload(phase="decode", seq_len=1, context=8, src_len=20)):
        report = check(spec.replace(seq_len=8), workload=workload)
        assert report.match
        names = {row.component for row in report.params}
        assert {"cross_attention/gate", "cross_attention/mlp_gate", "cross_attention/q_norm"} <= names


def test_a_multimodal_config_counts_its_language_model_with_its_vision_tokens(tmp_path):
    vision_config = {"image_size": 56, "patch_size": 14, "max_num_tiles": 2, "hidden_size": 32, "attention_heads": 2,
                     "intermediate_size": 64, "num_hidden_layers": 2, "num_global_layers": 1,
                     "vision_output_dim": 64, "intermediate_layers_indices": [0],
                     "supported_aspect_ratios": [[1, 1], [1, 2], [2, 1]]}
    text = {k: v for k, v in tiny().items() if k != "model_type"}
    # tie_word_embeddings: MllamaConfig has no such field and no class of it ties the head: read as untied
    config = {"model_type": "mllama", "text_config": text | {"tie_word_embeddings": True},
              "vision_config": vision_config, "tie_word_embeddings": True}
    read = read_hf_config(write(tmp_path, config))
    # read whole (tests/test_mllama_whole.py); its language model alone is --tower text
    text = select(read.spec, "text")
    # 2 tiles of (56 / 14)^2 + 1 = 17 tokens
    assert text.sizes("cross_attention").keys == 2 * 17
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        full = transformers.MllamaForConditionalGeneration(hf_config(config))
    language = sum(p.numel() for name, p in full.named_parameters()
                   if not name.startswith(("model.vision_model.", "model.multi_modal_projector.")))
    assert count(text).params.total == language
    report = hf_model.compare(tmp_path / "config.json", text, Workload(seq_len=8))
    assert report.match and report.workload.src_len == 34


@pytest.mark.parametrize("changes,message", [
    ({"cross_attention_layers": [1, -2]}, "cross_attention_layers=[1, -2] is not modelled"),
    ({"cross_attention_layers": [1.0]}, "cross_attention_layers=[1.0]: expected a list of integers or null"),
    ({"vision_config": {"image_size": [56, 56]}}, "vision_config.image_size=[56, 56] is not modelled"),
    ({"hidden_act": "tanh"}, "hidden_act='tanh' is not modelled"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        read_hf_config(write(tmp_path, tiny(**changes)))


def test_src_len_is_refused_for_a_model_without_cross_attention():
    with pytest.raises(TfcalcError, match="src_len=10: only an encoder-decoder"):
        count(load_preset("llama3.2-1b"), Workload(seq_len=8, src_len=10))


# meta-llama/Llama-3.2-11B-Vision(-Instruct)'s text_config, every key transformers reads (presets/llama3.2-11b-vision.toml
# says where it was read)
LLAMA_32_11B_VISION_TEXT = {"model_type": "mllama_text_model", "vocab_size": 128256, "hidden_size": 4096,
                            "intermediate_size": 14336, "num_hidden_layers": 40, "num_attention_heads": 32,
                            "num_key_value_heads": 8, "hidden_act": "silu", "max_position_embeddings": 131072,
                            "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38], "tie_word_embeddings": False,
                            "pad_token_id": 128004}


def test_the_preset_is_the_published_language_model(tmp_path):
    spec = select(load_preset("llama3.2-11b-vision"), "text")  # (read whole: tests/test_mllama_whole.py)
    assert count(spec).params.total == meta_params(LLAMA_32_11B_VISION_TEXT) == 9_775_192_080
    read = read_hf_config(write(tmp_path, LLAMA_32_11B_VISION_TEXT | {
        "vision_config": {"image_size": 560, "patch_size": 14, "max_num_tiles": 4}})).spec
    assert read.replace(name=spec.name, seq_len=spec.seq_len) == spec.replace(name=spec.name)
    # one image: 4 tiles of (560 / 14)^2 + 1 = 1601 vision tokens
    assert spec.sizes("cross_attention").keys == 6404


@pytest.mark.parametrize("recompute, attention", [("none", "fused")])  # (selective, eager; full: agree too, slower)
def test_training_memory_is_memtracker_on_the_reference_model(tmp_path, recompute, attention):
    """What the gated blocks keep: the vision states once (the kv projection's input), the normed keys, each gate's
    [T, D] operand and tanh(g); the measured peak too, with as many vision tokens as text tokens."""
    from tfcalc.verify.memory_check import check_memory

    spec = read_hf_config(write(tmp_path, tiny())).spec
    report = check_memory(spec, Workload(seq_len=32, src_len=32), "bf16-mixed", "adamw", recompute, "meta", attention)
    rows = {r.category: r for r in report.rows}
    for category in ("weights", "gradients", "optimizer states", "master weights", "activations (end of forward)"):
        assert rows[category].difference == 0, (category, rows[category])
    assert report.match


def test_serving_capacity_is_refused_not_planned_without_the_vision_cache():
    from tfcalc.plan.serve import serving_capacity

    with pytest.raises(TfcalcError, match="Llama 3.2 Vision's vision tokens', is not modelled"):
        serving_capacity(load_preset("llama3.2-11b-vision"), "h100")


def test_inference_memory_keeps_the_vision_keys_once_per_sequence():
    from tfcalc.plan.memory import inference_memory

    spec = load_preset("llama3.2-11b-vision")
    plan = inference_memory(spec, Workload(phase="decode", batch_size=4, seq_len=1, context=8192))
    # bf16: 32 self-attention blocks of 4 x 8,193 tokens and 8 cross-attention blocks of 4 x 6,404 vision tokens,
    # 8 key/value heads of 128, keys and values
    assert plan.kv_cache["attention"] == 32 * 4 * 8193 * 8 * 256 * 2
    assert plan.kv_cache["cross_attention"] == 8 * 4 * 6404 * 8 * 256 * 2
    assert plan.kv_bytes_per_token == 32 * 8 * 256 * 2


def test_the_parallel_check_refuses_what_it_cannot_shard(tmp_path):
    # (--dp 2 --zero 2 is measured and agrees: `tfcalc check --hf-config ... --memory --dp 2 --zero 2`)
    from tfcalc.plan.training import Layout
    from tfcalc.verify.memory_check import check_memory

    spec = read_hf_config(write(tmp_path, tiny())).spec
    work = Workload(seq_len=16, src_len=16)
    for layout, flag in ((Layout(tp=2), "--tp 2"), (Layout(pp=2), "--pp 2")):
        with pytest.raises(TfcalcError, match=f"{flag}: the parallel check shards"):
            check_memory(spec, work, "bf16-mixed", "adamw", "none", "meta", "eager", layout=layout)


@pytest.mark.parametrize("kinds, pattern, message", [
    ({}, ["attention+mlp", "cross_attention+mlp"], "give kinds.cross_attention.keys"),
    ({"cross_attention": {"keys": 8, "gated": True}}, ["attention+mlp", "cross_attention"],
     "kinds.cross_attention.gated=True gates the block's MLP too"),
    ({"cross_attention": {"keys": 0}}, ["cross_attention+mlp"], "kinds.cross_attention.keys=0"),
])
def test_a_spec_with_cross_attention_blocks_is_refused_by_field(kinds, pattern, message):
    from tfcalc import ModelSpec

    with pytest.raises(ValueError, match=re.escape(message)):
        ModelSpec(n_layers=2, d_model=64, n_heads=4, vocab_size=96, seq_len=8, block_pattern=pattern, kinds=kinds)


def test_embedding_rows_need_an_untied_head():
    from tfcalc import ModelSpec

    with pytest.raises(ValueError, match="embedding_rows=104 .* not modelled with tie_embeddings=True"):
        ModelSpec(n_layers=2, d_model=64, n_heads=4, vocab_size=96, seq_len=8, embedding_rows=104)
