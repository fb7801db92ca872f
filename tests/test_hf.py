"""Hugging Face config.json: exact against transformers' own model classes (a test dependency only)."""

import json
import warnings

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.cli import app
from tfcalc.hf import DEFAULTS, SEQ_LEN_CAP, read_hf_config

MODEL_CLASSES = {
    "gpt2": transformers.GPT2LMHeadModel, "bert": transformers.BertModel, "llama": transformers.LlamaForCausalLM,
    "mistral": transformers.MistralForCausalLM, "mixtral": transformers.MixtralForCausalLM,
    "qwen2": transformers.Qwen2ForCausalLM, "qwen2_moe": transformers.Qwen2MoeForCausalLM,
    "t5": transformers.T5ForConditionalGeneration, "bart": transformers.BartForConditionalGeneration,
}
ENCODER_DECODER = {"t5", "bart"}
MOE = {"mixtral", "qwen2_moe"}


def write(tmp_path, config: dict, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("model_type", DEFAULTS)
def test_defaults_are_transformers_defaults(model_type):
    config_class = transformers.AutoConfig.for_model(model_type).__class__
    for key, value in DEFAULTS[model_type].items():
        assert getattr(config_class, key) == value, key


@st.composite
def hf_configs(draw, model_type: str) -> dict:
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    head_dim = draw(st.sampled_from([2, 4, 8]))
    hidden = heads * head_dim
    n_pos = draw(st.integers(8, 24))
    common = dict(model_type=model_type, vocab_size=draw(st.integers(16, 80)), tie_word_embeddings=draw(st.booleans()))
    if model_type == "gpt2":
        return common | dict(n_layer=draw(st.integers(1, 2)), n_embd=hidden, n_head=heads, n_positions=n_pos,
                             n_inner=draw(st.none() | st.integers(4, 40)),
                             activation_function=draw(st.sampled_from(["gelu_new", "gelu", "relu"])),
                             bos_token_id=0, eos_token_id=0)
    if model_type == "t5":  # transformers 5 builds T5 with a tied head whatever the config says: tied here
        return common | dict(tie_word_embeddings=True, num_layers=draw(st.integers(1, 2)),
                             num_decoder_layers=draw(st.none() | st.integers(1, 2)), d_model=hidden,
                             num_heads=heads, d_kv=draw(st.sampled_from([2, 4, 8])), d_ff=draw(st.integers(4, 40)),
                             relative_attention_num_buckets=draw(st.sampled_from([4, 8, 32])),
                             feed_forward_proj=draw(st.sampled_from(["relu", "gated-gelu"])),
                             decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    if model_type == "bart":
        ffn = draw(st.integers(4, 40))
        return common | dict(tie_word_embeddings=True, encoder_layers=draw(st.integers(1, 2)),
                             decoder_layers=draw(st.integers(1, 2)), d_model=hidden, encoder_attention_heads=heads,
                             decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
                             max_position_embeddings=n_pos, activation_function=draw(st.sampled_from(["gelu", "relu"])),
                             decoder_start_token_id=2, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                             forced_eos_token_id=2)
    if model_type == "bert":
        return common | dict(num_hidden_layers=draw(st.integers(1, 2)), hidden_size=hidden, num_attention_heads=heads,
                             intermediate_size=draw(st.integers(4, 40)), max_position_embeddings=n_pos,
                             type_vocab_size=draw(st.integers(1, 3)),
                             hidden_act=draw(st.sampled_from(["gelu", "relu", "gelu_new"])))
    config = common | dict(num_hidden_layers=draw(st.integers(1, 2)), hidden_size=hidden, num_attention_heads=heads,
                           num_key_value_heads=kv, intermediate_size=draw(st.integers(4, 40)),
                           max_position_embeddings=n_pos, bos_token_id=0, eos_token_id=0,
                           hidden_act=draw(st.sampled_from(["silu", "gelu", "gelu_pytorch_tanh", "relu"])))
    if model_type in ("llama", "mistral", "mixtral") and draw(st.booleans()):
        config["head_dim"] = draw(st.sampled_from([2, 4, 6]))
    if model_type == "llama":
        config |= dict(attention_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()))
    if model_type in ("mistral", "mixtral"):
        config["sliding_window"] = draw(st.none() | st.integers(1, 8))
    if model_type == "mixtral":
        experts = draw(st.integers(2, 5))
        config |= dict(num_local_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)))
    if model_type == "qwen2_moe":
        experts = draw(st.integers(2, 5))
        config |= dict(num_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)),
                       moe_intermediate_size=draw(st.integers(2, 24)),
                       shared_expert_intermediate_size=draw(st.integers(2, 24)), qkv_bias=draw(st.booleans()),
                       decoder_sparse_step=draw(st.integers(1, 3)))
    return config


def transformers_counts(config: dict, batch: int, seq_len: int, src_len: int | None = None) -> tuple[int, int]:
    """(sum(p.numel()) on the meta device, FlopCounterMode FLOPs of one eager forward on the CPU). An
    encoder-decoder reads src_len source tokens and seq_len decoder tokens."""
    hf_config = transformers.AutoConfig.for_model(**config)
    cls = MODEL_CLASSES[config["model_type"]]
    with torch.device("meta"):
        n_params = sum(p.numel() for p in cls(hf_config).parameters())
    # eager attention (full N x N matmuls) and eager experts: transformers 5 defaults to grouped_mm experts, for
    # which FlopCounterMode has no formula and counts 0
    extra = {"experts_implementation": "eager"} if config["model_type"] in MOE else {}
    model = cls._from_config(hf_config, attn_implementation="eager", **extra)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=generator)
    inputs = {"input_ids": ids}
    if src_len is not None:
        src = torch.randint(config["vocab_size"], (batch, src_len), generator=generator)
        inputs = {"input_ids": src, "decoder_input_ids": ids}
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs)
    return n_params, counter.get_total_flops()


@pytest.mark.parametrize("model_type", DEFAULTS)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, model_type, data):
    config = data.draw(hf_configs(model_type))
    path = write(tmp_path_factory.mktemp("hf"), config)
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 8))
    src_len = data.draw(st.integers(1, 8)) if model_type in ENCODER_DECODER else None
    spec = read_hf_config(path).spec.replace(batch_size=batch, seq_len=seq_len)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n_params, flops = transformers_counts(config, batch, seq_len, src_len)
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len, src_len=src_len))
    assert result.params.total == n_params
    assert result.flops.forward == flops


# Published config.json files (the fields that matter), and the preset of the same model.
PUBLISHED = {
    "gpt2": ({"model_type": "gpt2", "activation_function": "gelu_new", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
              "n_layer": 12, "n_positions": 1024, "vocab_size": 50257}, "gpt2"),
    "bert-base-uncased": ({"model_type": "bert", "hidden_act": "gelu", "hidden_size": 768, "intermediate_size": 3072,
                           "max_position_embeddings": 512, "num_attention_heads": 12, "num_hidden_layers": 12,
                           "type_vocab_size": 2, "vocab_size": 30522, "position_embedding_type": "absolute"},
                          "bert-base"),
    "Llama-2-7b-hf": ({"model_type": "llama", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 11008,
                       "max_position_embeddings": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
                       "num_key_value_heads": 32, "rope_scaling": None, "tie_word_embeddings": False,
                       "vocab_size": 32000}, "llama2-7b"),
    "Meta-Llama-3-8B": ({"model_type": "llama", "hidden_act": "silu", "hidden_size": 4096,
                         "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 32,
                         "num_hidden_layers": 32, "num_key_value_heads": 8, "rope_theta": 500000.0,
                         "tie_word_embeddings": False, "vocab_size": 128256}, "llama3-8b"),
    "Mistral-7B-v0.1": ({"model_type": "mistral", "hidden_act": "silu", "hidden_size": 4096,
                         "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
                         "num_hidden_layers": 32, "num_key_value_heads": 8, "sliding_window": 4096,
                         "tie_word_embeddings": False, "vocab_size": 32000}, "mistral-7b"),
    "Mixtral-8x7B-v0.1": ({"model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096,
                           "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
                           "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
                           "num_local_experts": 8, "sliding_window": None, "tie_word_embeddings": False,
                           "vocab_size": 32000}, "mixtral-8x7b"),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_configs_agree_with_presets(tmp_path, name):
    config, preset = PUBLISHED[name]
    spec = read_hf_config(write(tmp_path, config)).spec
    base = load_preset(preset)
    spec = spec.replace(seq_len=base.seq_len)
    ours, theirs = count(spec), count(base)
    assert ours.params.total == theirs.params.total and ours.params.active == theirs.params.active
    assert ours.flops.forward == theirs.flops.forward
    assert ours.flops.components == theirs.flops.components


def test_sliding_window_is_read_and_reported(tmp_path):
    config, _ = PUBLISHED["Mistral-7B-v0.1"]
    source = read_hf_config(write(tmp_path, config))
    r = count(source.spec.replace(seq_len=8192))
    assert "sliding_window=4096 in 32 of 32 blocks" in source.source
    # per head and block: 4096*4097/2 pairs inside the first window, then 4096 per query for the other 4096
    pairs = 4096 * 4097 // 2 + (8192 - 4096) * 4096
    full = 8192 * 8192
    per_pair = 2 * 2 * 32 * 32 * 128  # scores + values, 2 FLOPs, L, H, d_head
    assert r.flops.forward - r.flops.forward_windowed == per_pair * (full - pairs)


def test_default_seq_len_is_the_context_capped(tmp_path):
    config, _ = PUBLISHED["Mixtral-8x7B-v0.1"]
    assert read_hf_config(write(tmp_path, config)).spec.seq_len == 32768
    long = read_hf_config(write(tmp_path, {**config, "max_position_embeddings": 1_048_576}))
    assert long.spec.seq_len == SEQ_LEN_CAP and "seq_len capped at 131,072" in long.source


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "falcon"}, "model_type='falcon' is not supported; supported: gpt2, bert, llama"),
        ({"model_type": "gpt2", "add_cross_attention": True}, "add_cross_attention=True is not modelled"),
        ({"model_type": "bert", "position_embedding_type": "relative_key"},
         "position_embedding_type='relative_key' is not modelled"),
        ({"model_type": "qwen2_moe", "mlp_only_layers": [0, 3]}, "mlp_only_layers=[0, 3] is not modelled"),
        ({"model_type": "bart", "decoder_ffn_dim": 8}, "decoder_ffn_dim=8 is not modelled"),
        ({"model_type": "bart", "tie_word_embeddings": False}, "tie_word_embeddings=False is not modelled"),
        ({"model_type": "t5", "feed_forward_proj": "gated-swish"}, "feed_forward_proj='gated-swish' is not modelled"),
        ({"model_type": "llama", "hidden_act": "gelu_10"}, "hidden_act='gelu_10' is not modelled"),
        ({"model_type": "llama", "hidden_size": "4096"}, "hidden_size='4096': expected an integer"),
        ({"model_type": "llama", "num_attention_heads": 5}, "d_model=4096 is not divisible by n_heads=5"),
    ],
)
def test_unmodelled_or_bad_fields_are_refused_by_name(tmp_path, config, message):
    with pytest.raises(TfcalcError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_hf_config(write(tmp_path, config))


def test_folder_and_cli(tmp_path):
    config, _ = PUBLISHED["Llama-2-7b-hf"]
    folder = tmp_path / "Llama-2-7b-hf"
    folder.mkdir()
    write(folder, config)
    runner = CliRunner()
    r = runner.invoke(app, ["count", "--hf-config", str(folder), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["params"]["total"] == 6_738_415_616 and d["spec"]["name"] == "Llama-2-7b-hf"
    assert set(d) == set(json.loads(runner.invoke(app, ["count", "-p", "llama2-7b", "--json"]).output))
    mixed = runner.invoke(app, ["compare", "llama2-7b", str(folder / "config.json"), "--format", "csv"])
    assert mixed.exit_code == 0, mixed.output
    assert "params.total,6738415616,6738415616" in mixed.output
    checked = runner.invoke(app, ["check", "--hf-config", str(folder), "-L", "1", "-N", "64", "--json"])
    assert checked.exit_code == 0 and json.loads(checked.output)["match"] is True
    missing = runner.invoke(app, ["count", "--hf-config", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no such file" in missing.output
