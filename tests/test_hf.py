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

from tfcalc import TfcalcError, Workload, count, find_preset, load_preset
from tfcalc.cli import app
from tfcalc.arch.towers import select
from tfcalc.hf import DEFAULTS, SEQ_LEN_CAP, read_hf_config

MODEL_CLASSES = {
    "gpt2": transformers.GPT2LMHeadModel, "bert": transformers.BertModel, "llama": transformers.LlamaForCausalLM,
    "mistral": transformers.MistralForCausalLM, "mixtral": transformers.MixtralForCausalLM,
    "qwen2": transformers.Qwen2ForCausalLM, "qwen2_moe": transformers.Qwen2MoeForCausalLM,
    "t5": transformers.T5ForConditionalGeneration, "bart": transformers.BartForConditionalGeneration,
    "gemma": transformers.GemmaForCausalLM, "gpt_bigcode": transformers.GPTBigCodeForCausalLM,
    "roberta": transformers.RobertaModel, "xlm-roberta": transformers.XLMRobertaModel,
    "opt": transformers.OPTForCausalLM, "granite": transformers.GraniteForCausalLM,
    "phi3": transformers.Phi3ForCausalLM, "qwen3": transformers.Qwen3ForCausalLM,
    "qwen3_moe": transformers.Qwen3MoeForCausalLM, "olmo2": transformers.Olmo2ForCausalLM,
    "gemma2": transformers.Gemma2ForCausalLM, "gemma3_text": transformers.Gemma3ForCausalLM,
    "gemma3": transformers.Gemma3ForConditionalGeneration,
}
from tfcalc.hf import ENCODER_DECODER  # noqa: E402
MOE = {"mixtral", "qwen2_moe", "qwen3_moe"}


def write(tmp_path, config: dict, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("model_type", DEFAULTS)
def test_defaults_are_transformers_defaults(model_type):
    config_class = transformers.AutoConfig.for_model(model_type).__class__
    for key, value in DEFAULTS[model_type].items():
        declared = getattr(config_class, key)  # a tuple where JSON writes a list (Qwen2.5-VL's fullatt_block_indexes)
        assert (list(declared) if isinstance(declared, tuple) else declared) == value, key


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
    if model_type == "gpt_bigcode":  # sometimes with the common names of its attribute_map (hidden_size, ...)
        sizes = dict(n_layer=draw(st.integers(1, 2)), n_embd=hidden, n_head=heads, n_positions=n_pos)
        aliases = {"n_layer": "num_hidden_layers", "n_embd": "hidden_size", "n_head": "num_attention_heads",
                   "n_positions": "max_position_embeddings"}
        renamed = draw(st.sets(st.sampled_from(sorted(aliases))))
        sizes = {aliases[k] if k in renamed else k: v for k, v in sizes.items()}
        return common | sizes | dict(n_inner=draw(st.none() | st.integers(4, 40)), multi_query=draw(st.booleans()),
                                     activation_function=draw(st.sampled_from(["gelu_pytorch_tanh", "gelu", "relu"])),
                                     bos_token_id=0, eos_token_id=0)
    if model_type == "opt":
        return common | dict(num_hidden_layers=draw(st.integers(1, 2)), hidden_size=hidden, num_attention_heads=heads,
                             ffn_dim=draw(st.integers(4, 40)), max_position_embeddings=n_pos,
                             do_layer_norm_before=draw(st.booleans()), _remove_final_layer_norm=draw(st.booleans()),
                             enable_bias=draw(st.booleans()), word_embed_proj_dim=draw(st.sampled_from([None, hidden])),
                             activation_function=draw(st.sampled_from(["relu", "gelu"])),
                             pad_token_id=1, bos_token_id=0, eos_token_id=0)
    if model_type in ("bert", "roberta", "xlm-roberta"):
        # RoBERTa numbers positions from padding_idx + 1 = 2: its table needs 2 rows more than the longest input
        positions = n_pos + 2 if model_type != "bert" else n_pos
        return common | dict(num_hidden_layers=draw(st.integers(1, 2)), hidden_size=hidden, num_attention_heads=heads,
                             intermediate_size=draw(st.integers(4, 40)), max_position_embeddings=positions,
                             type_vocab_size=draw(st.integers(1, 3)),
                             hidden_act=draw(st.sampled_from(["gelu", "relu", "gelu_new"])))
    config = common | dict(num_hidden_layers=draw(st.integers(1, 2)), hidden_size=hidden, num_attention_heads=heads,
                           num_key_value_heads=kv, intermediate_size=draw(st.integers(4, 40)),
                           max_position_embeddings=n_pos, bos_token_id=0, eos_token_id=0,
                           hidden_act=draw(st.sampled_from(["silu", "gelu", "gelu_pytorch_tanh", "relu"])))
    if model_type in ("llama", "mistral", "mixtral", "granite", "phi3") and draw(st.booleans()):
        config["head_dim"] = draw(st.sampled_from([2, 4, 6]))
    if model_type == "gemma":  # head_dim independent of hidden_size / heads, always given (the default is 256)
        config |= dict(head_dim=draw(st.sampled_from([2, 4, 6, 8])), attention_bias=draw(st.booleans()),
                       hidden_act=draw(st.sampled_from(["gelu_pytorch_tanh", "gelu", "silu", "relu"])), pad_token_id=0)
        if draw(st.booleans()):
            config["hidden_activation"] = draw(st.sampled_from(["gelu_pytorch_tanh", "gelu", "relu"]))
    if model_type in ("llama", "granite"):
        config |= dict(attention_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()))
    if model_type == "granite":  # elementwise scales: no parameters, no matmul
        config |= {key: draw(st.sampled_from([1.0, 0.5, 12.0])) for key in
                   ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling")}
    if model_type == "phi3":  # partial rotary changes which channels rotate, not shapes
        config |= dict(pad_token_id=0, sliding_window=draw(st.none() | st.integers(1, 8)))
        if "head_dim" not in config and head_dim >= 4 and draw(st.booleans()):
            config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    if model_type in ("qwen3", "qwen3_moe", "olmo2"):
        config["attention_bias"] = draw(st.booleans())
        if model_type == "qwen3" or draw(st.booleans()):  # Qwen3Config always has one (default 128)
            config["head_dim"] = draw(st.sampled_from([2, 4, 6]))
    if model_type in ("qwen3", "qwen3_moe") and draw(st.booleans()):
        config |= dict(use_sliding_window=True, sliding_window=draw(st.integers(1, 8)))
        if model_type == "qwen3":
            config["max_window_layers"] = draw(st.integers(0, 2))
    if model_type == "qwen3_moe":
        experts = draw(st.integers(2, 4))
        config |= dict(num_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)),
                       moe_intermediate_size=draw(st.integers(2, 24)), decoder_sparse_step=draw(st.integers(1, 2)),
                       mlp_only_layers=draw(st.sampled_from([None, [], [0]])), norm_topk_prob=draw(st.booleans()))
    if model_type in ("gemma2", "gemma3_text"):  # hidden_activation is what they run; head_dim their own
        del config["hidden_act"]
        config |= dict(head_dim=draw(st.sampled_from([2, 4, 6, 8])), attention_bias=draw(st.booleans()),
                       hidden_activation=draw(st.sampled_from(["gelu_pytorch_tanh", "silu"])),
                       sliding_window=draw(st.integers(1, 8)), pad_token_id=0,
                       attn_logit_softcapping=draw(st.sampled_from([None, 50.0])),
                       final_logit_softcapping=draw(st.sampled_from([None, 30.0])))
        L = config["num_hidden_layers"]
        if draw(st.booleans()):
            config["layer_types"] = draw(st.lists(st.sampled_from(["sliding_attention", "full_attention"]),
                                                  min_size=L, max_size=L))
        elif model_type == "gemma3_text" and draw(st.booleans()):
            config["sliding_window_pattern"] = draw(st.integers(1, 3))
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


# the families in tfcalc/families/ have their strategies and this test in their own files (tests/test_hf_*.py)
@pytest.mark.parametrize("model_type", [t for t in DEFAULTS if t in MODEL_CLASSES])
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
_LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                 "original_max_position_embeddings": 8192, "rope_type": "llama3"}
_LLAMA32_ROPE = _LLAMA31_ROPE | {"factor": 32.0}


def _llama31(hidden: int, intermediate: int, layers: int, heads: int) -> dict:
    return {"model_type": "llama", "hidden_act": "silu", "hidden_size": hidden, "intermediate_size": intermediate,
            "max_position_embeddings": 131072, "num_attention_heads": heads, "num_hidden_layers": layers,
            "num_key_value_heads": 8, "rope_scaling": _LLAMA31_ROPE, "rope_theta": 500000.0,
            "tie_word_embeddings": False, "vocab_size": 128256, "attention_bias": False, "mlp_bias": False}


def _qwen25(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int) -> dict:
    return {"model_type": "qwen2", "hidden_act": "silu", "hidden_size": hidden, "intermediate_size": intermediate,
            "max_position_embeddings": 131072, "max_window_layers": layers, "num_attention_heads": heads,
            "num_hidden_layers": layers, "num_key_value_heads": kv_heads, "rope_theta": 1000000.0,
            "sliding_window": 131072, "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 152064}


def _gemma(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int) -> dict:
    # the official configs say hidden_act "gelu", which GemmaConfig reads as gelu_pytorch_tanh
    return {"model_type": "gemma", "hidden_act": "gelu", "hidden_size": hidden, "intermediate_size": intermediate,
            "head_dim": 256, "max_position_embeddings": 8192, "num_attention_heads": heads, "num_hidden_layers": layers,
            "num_key_value_heads": kv_heads, "rope_scaling": None, "rope_theta": 10000.0, "vocab_size": 256000,
            "attention_bias": False, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}


PUBLISHED |= {
    "Llama-3.1-8B": (_llama31(4096, 14336, 32, 32), "llama3.1-8b"),
    "Llama-3.1-70B": (_llama31(8192, 28672, 80, 64), "llama3.1-70b"),
    "Llama-3.1-405B": (_llama31(16384, 53248, 126, 128), "llama3.1-405b"),
    "Llama-3.2-1B": (_llama31(2048, 8192, 16, 32) | {"head_dim": 64, "tie_word_embeddings": True,
                                                     "rope_scaling": _LLAMA32_ROPE}, "llama3.2-1b"),
    "Llama-3.2-3B": (_llama31(3072, 8192, 28, 24) | {"head_dim": 128, "tie_word_embeddings": True,
                                                     "rope_scaling": _LLAMA32_ROPE}, "llama3.2-3b"),
    "Qwen2.5-7B": (_qwen25(3584, 18944, 28, 28, 4), "qwen2.5-7b"),
    "Qwen2.5-72B": (_qwen25(8192, 29568, 80, 64, 8), "qwen2.5-72b"),
    "Phi-3-mini-4k-instruct": ({"model_type": "phi3", "hidden_act": "silu", "hidden_size": 3072,
                                "intermediate_size": 8192, "max_position_embeddings": 4096,
                                "original_max_position_embeddings": 4096, "num_attention_heads": 32,
                                "num_hidden_layers": 32, "num_key_value_heads": 32, "rope_scaling": None,
                                "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
                                "vocab_size": 32064, "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000},
                               "phi3-mini"),
    "phi-4": ({"model_type": "phi3", "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 17920,
               "max_position_embeddings": 16384, "original_max_position_embeddings": 16384,
               "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 10, "rope_scaling": None,
               "rope_theta": 250000, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 100352,
               "bos_token_id": 100257, "eos_token_id": 100265, "pad_token_id": 100349}, "phi4"),
    "gemma-2b": (_gemma(2048, 16384, 18, 8, 1), "gemma-2b"),
    "gemma-7b": (_gemma(3072, 24576, 28, 16, 16), "gemma-7b"),
    "starcoder": ({"model_type": "gpt_bigcode", "activation_function": "gelu_pytorch_tanh", "multi_query": True,
                   "n_embd": 6144, "n_head": 48, "n_inner": 24576, "n_layer": 40, "n_positions": 8192,
                   "vocab_size": 49152, "bos_token_id": 0, "eos_token_id": 0}, "starcoder"),
}


def _qwen3(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int) -> dict:
    return {"model_type": "qwen3", "attention_bias": False, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": hidden, "intermediate_size": intermediate, "max_position_embeddings": 40960,
            "max_window_layers": layers, "num_attention_heads": heads, "num_hidden_layers": layers,
            "num_key_value_heads": kv_heads, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
            "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936}


def _gemma2(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, head_dim: int,
            scalar: int) -> dict:
    return {"model_type": "gemma2", "attention_bias": False, "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0, "head_dim": head_dim, "hidden_act": "gelu_pytorch_tanh",
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size": hidden, "intermediate_size": intermediate,
            "max_position_embeddings": 8192, "num_attention_heads": heads, "num_hidden_layers": layers,
            "num_key_value_heads": kv_heads, "query_pre_attn_scalar": scalar, "rope_theta": 10000.0,
            "sliding_window": 4096, "vocab_size": 256000, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}


PUBLISHED |= {
    "Qwen3-8B": (_qwen3(4096, 12288, 36, 32, 8), "qwen3-8b"),
    "Qwen3-32B": (_qwen3(5120, 25600, 64, 64, 8), "qwen3-32b"),
    "Qwen3-235B-A22B": ({"model_type": "qwen3_moe", "attention_bias": False, "decoder_sparse_step": 1,
                         "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288,
                         "max_position_embeddings": 40960, "mlp_only_layers": [], "moe_intermediate_size": 1536,
                         "norm_topk_prob": True, "num_attention_heads": 64, "num_experts": 128,
                         "num_experts_per_tok": 8, "num_hidden_layers": 94, "num_key_value_heads": 4,
                         "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
                         "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936},
                        "qwen3-235b-a22b"),
    "gemma-2-9b": (_gemma2(3584, 14336, 42, 16, 8, 256, 256), "gemma2-9b"),
    "gemma-2-27b": (_gemma2(4608, 36864, 46, 32, 16, 128, 144), "gemma2-27b"),
    # the multimodal config: its text_config is the language model (the vision tower is not counted)
    "gemma-3-27b-pt": ({"model_type": "gemma3", "text_config": {
        "model_type": "gemma3_text", "head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
        "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024, "sliding_window_pattern": 6},
        "mm_tokens_per_image": 256,
        "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                          "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                          "patch_size": 14, "vision_use_head": False}}, "gemma3-27b"),
    "OLMo-2-1124-7B": ({"model_type": "olmo2", "attention_bias": False, "hidden_act": "silu", "hidden_size": 4096,
                        "intermediate_size": 11008, "max_position_embeddings": 4096, "num_attention_heads": 32,
                        "num_hidden_layers": 32, "num_key_value_heads": 32, "rope_scaling": None,
                        "rope_theta": 500000, "tie_word_embeddings": False, "vocab_size": 100352,
                        "pad_token_id": 100277, "eos_token_id": 100257}, "olmo2-7b"),
}
# Totals published beside the model (model cards, the brief's figures), held against the presets
PUBLISHED_TOTALS = {"qwen3-8b": 8_190_735_360, "gemma2-9b": 9_241_705_984, "gemma2-27b": 27_227_128_320}
OTHER_TOWERS = ("model.vision_tower.", "model.multi_modal_projector.")  # a multimodal model's, not counted


def language_model_params(model) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if not name.startswith(OTHER_TOWERS))


@pytest.mark.parametrize("preset", PUBLISHED_TOTALS)
def test_presets_equal_published_totals(preset):
    # Qwen3-8B: 36 * (q 4096*4096 + k, v 2 * 4096*1024 + o 4096*4096 + MLP 3 * 4096*12288 + norms 2*4096 + q/k
    # norms 2*128) + final norm 4096 + untied token table and head 2 * 151936*4096
    assert count(load_preset(preset)).params.total == PUBLISHED_TOTALS[preset]


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


@pytest.mark.parametrize("name", PUBLISHED)
def test_presets_equal_transformers_built_from_the_published_config(name):
    # the count each preset's source states: transformers' own class, built on meta from the published config.json
    config, preset = PUBLISHED[name]
    hf_config = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MODEL_CLASSES[config["model_type"]](hf_config)
    # a whole multimodal preset (gemma3-27b) is the whole class, a language model's its language model
    whole = bool(load_preset(preset).towers)
    n_params = sum(p.numel() for p in model.parameters()) if whole else language_model_params(model)
    assert count(load_preset(preset)).params.total == n_params
    assert f"{n_params:,}" in find_preset(preset).source  # the source says it

# Totals a paper states, as (stated, half of its last digit): the exact count must round to the stated figure
PAPER_TOTALS = {
    "starcoder": (15.5e9, 0.05e9),  # Li et al. 2023: "15.5B parameter models"
    "phi3-mini": (3.8e9, 0.05e9),  # Abdin et al. 2024: "phi-3-mini, a 3.8 billion parameter language model"
}
# Gemma's paper (Table 2) states its non-embedding parameters exactly; its embedding parameters count 256,128 rows
# where the config's vocab is 256,000
PAPER_NON_EMBEDDING = {"gemma-2b": 1_981_884_416, "gemma-7b": 7_751_248_896}


@pytest.mark.parametrize("preset", PAPER_TOTALS)
def test_presets_round_to_the_totals_their_papers_state(preset):
    stated, half = PAPER_TOTALS[preset]
    assert abs(count(load_preset(preset)).params.total - stated) <= half


@pytest.mark.parametrize("preset", PAPER_NON_EMBEDDING)
def test_gemma_non_embedding_parameters_are_the_papers(preset):
    params = count(load_preset(preset)).params
    assert params.non_embedding == PAPER_NON_EMBEDDING[preset]
    assert params.embedding + 128 * load_preset(preset).d_model == {"gemma-2b": 524_550_144,
                                                                     "gemma-7b": 786_825_216}[preset]


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
        ({"model_type": "biogpt"}, "model_type='biogpt' is not supported; supported: gpt2, bert, llama"),
        ({"model_type": "gpt2", "add_cross_attention": True}, "add_cross_attention=True is not modelled"),
        ({"model_type": "bert", "position_embedding_type": "relative_key"},
         "position_embedding_type='relative_key' is not modelled"),
        ({"model_type": "qwen2_moe", "mlp_only_layers": [0, 3]}, "mlp_only_layers=[0, 3] is not modelled"),
        ({"model_type": "bart", "decoder_ffn_dim": 8}, "decoder_ffn_dim=8 is not modelled"),
        ({"model_type": "bart", "tie_word_embeddings": False}, "tie_word_embeddings=False is not modelled"),
        ({"model_type": "t5", "feed_forward_proj": "gated-swish"}, "feed_forward_proj='gated-swish' is not modelled"),
        ({"model_type": "llama", "hidden_act": "gelu_10"}, "hidden_act='gelu_10' is not modelled"),
        ({"model_type": "llama", "hidden_size": "4096"}, "hidden_size='4096': expected an integer"),
        ({"model_type": "llama", "num_attention_heads": 5}, "hidden_size=4096 is not divisible by num_attention_heads=5; give head_dim"),
        ({"model_type": "opt", "word_embed_proj_dim": 512}, "word_embed_proj_dim=512 is not modelled: it differs "
                                                            "from hidden_size=768"),
        ({"model_type": "opt", "layer_norm_elementwise_affine": False},
         "layer_norm_elementwise_affine=False is not modelled"),
        ({"model_type": "opt", "activation_function": "gelu_10"}, "activation_function='gelu_10' is not modelled"),
        ({"model_type": "gpt_bigcode", "add_cross_attention": True}, "add_cross_attention=True is not modelled"),
        ({"model_type": "roberta", "position_embedding_type": "relative_key_query"},
         "position_embedding_type='relative_key_query' is not modelled"),
        ({"model_type": "xlm-roberta", "add_cross_attention": True}, "add_cross_attention=True is not modelled"),
        ({"model_type": "gemma", "hidden_act": "gelu_10"}, "hidden_act='gelu_10' is not modelled"),
        ({"model_type": "gemma", "head_dim": None}, "head_dim=None: expected an integer"),
        ({"model_type": "phi3", "sliding_window": "2047"}, "sliding_window='2047': expected an integer or null"),
        ({"model_type": "qwen3", "head_dim": None}, "head_dim=None: expected an integer"),
        ({"model_type": "qwen3", "hidden_act": "gelu_10"}, "hidden_act='gelu_10' is not modelled"),
        ({"model_type": "qwen3_moe", "mlp_only_layers": [1, 3]}, "mlp_only_layers=[1, 3] is not modelled"),
        ({"model_type": "qwen3_moe", "num_experts": 1}, "num_experts=1 is not modelled"),
        ({"model_type": "qwen3_moe", "norm_topk_prob": "true"}, "norm_topk_prob='true': expected a boolean"),
        ({"model_type": "olmo2", "attention_bias": 1}, "attention_bias=1: expected a boolean"),
        ({"model_type": "gemma2", "hidden_activation": "gelu_10"}, "hidden_activation='gelu_10' is not modelled"),
        ({"model_type": "gemma2", "use_bidirectional_attention": True},
         "use_bidirectional_attention=True is not modelled"),
        ({"model_type": "gemma2", "num_hidden_layers": 2, "layer_types": ["full_attention"]},
         "layer_types=['full_attention'] is not modelled: expected a list of num_hidden_layers=2 entries"),
        ({"model_type": "gemma2", "attn_logit_softcapping": 50}, "attn_logit_softcapping=50: expected a float"),
        ({"model_type": "gemma3_text", "layer_types": ["chunked_attention"] * 26},
         "entries 'chunked_attention'; known: full_attention, sliding_attention"),
        ({"model_type": "gemma3", "text_config": [1]}, "text_config=[1]: expected an object or null"),
        ({"model_type": "gemma3", "text_config": {"model_type": "llama"}},
         "text_config.model_type='llama': expected 'gemma3_text'"),
    ],
)
def test_unmodelled_or_bad_fields_are_refused_by_name(tmp_path, config, message):
    with pytest.raises(TfcalcError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_hf_config(write(tmp_path, config))


@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_gemma3_multimodal_configs_read_their_text_config(tmp_path_factory, data):
    # Gemma 3's multimodal config: the language model is its text_config (gemma3_text), the head tied by the outer
    # tie_word_embeddings; its text tower (--tower text) is that language model alone, and the whole model adds the
    # SigLIP tower and the projector as Gemma3ForConditionalGeneration holds them
    text = data.draw(hf_configs("gemma3_text"))
    tie = text.pop("tie_word_embeddings")
    config = {"model_type": "gemma3", "text_config": text, "tie_word_embeddings": tie, "mm_tokens_per_image": 4,
              "vision_config": {"hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
                                "num_attention_heads": 2, "image_size": 28, "patch_size": 14}}
    folder = tmp_path_factory.mktemp("hf")
    source = read_hf_config(write(folder, config))
    assert "gemma3: the language model read from text_config (gemma3_text)" in source.source
    alone = read_hf_config(write(folder, text | {"tie_word_embeddings": tie}, "text.json")).spec
    assert select(source.spec, "text").replace(name="x") == alone.replace(name="x")
    hf_config = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.Gemma3ForConditionalGeneration(hf_config)
    assert count(select(source.spec, "text")).params.total == language_model_params(model)
    assert count(source.spec).params.total == sum(p.numel() for p in model.parameters())


def test_roberta_positions_include_the_padding_offset(tmp_path):
    # roberta-base: 514 rows, numbered from padding_idx + 1 = 2, so 512 tokens at most
    config = {"model_type": "roberta", "max_position_embeddings": 514, "type_vocab_size": 1, "vocab_size": 50265}
    for model_type in ("roberta", "xlm-roberta"):
        source = read_hf_config(write(tmp_path, config | {"model_type": model_type}))
        assert (source.spec.max_positions, source.spec.seq_len, source.spec.n_token_types) == (514, 512, 1)
        assert "numbered from padding_idx + 1" in source.source


def test_gemma_reads_hidden_act_as_transformers_5_does(tmp_path):
    # the official configs' legacy hidden_act "gelu" is the tanh form (GemmaConfig turns it into gelu_pytorch_tanh);
    # hidden_activation, which transformers 4.38-4.4x read instead, is not read by transformers 5: noted only
    source = read_hf_config(write(tmp_path, {"model_type": "gemma", "hidden_act": "gelu", "hidden_activation": "relu"}))
    assert source.spec.activation == "gelu_tanh" and source.spec.d_head == 256 and source.spec.tie_embeddings
    assert "hidden_act='gelu' read as gelu_pytorch_tanh" in source.source
    assert "hidden_activation='relu' not read" in source.source
    quiet = read_hf_config(write(tmp_path, {"model_type": "gemma", "hidden_activation": "gelu_pytorch_tanh"}))
    assert "hidden_activation" not in quiet.source and "hidden_act=" not in quiet.source


def test_gpt2_and_gpt_bigcode_read_the_common_names_of_their_fields(tmp_path):
    # GPT2Config and GPTBigCodeConfig map hidden_size, num_hidden_layers, ... onto n_embd, n_layer, ...; the common
    # name wins when both are given, in transformers and here
    for model_type in ("gpt2", "gpt_bigcode"):
        config = {"model_type": model_type, "n_embd": 512, "hidden_size": 256, "num_attention_heads": 4,
                  "num_hidden_layers": 3, "max_position_embeddings": 64, "vocab_size": 100}
        hf = transformers.AutoConfig.for_model(**config)
        spec = read_hf_config(write(tmp_path, config)).spec
        assert (spec.d_model, spec.n_heads, spec.n_layers, spec.max_positions) == (hf.n_embd, hf.n_head, hf.n_layer,
                                                                                    hf.n_positions) == (256, 4, 3, 64)


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


def test_bart_reads_its_attribute_map_names(tmp_path):
    # BartConfig's attribute_map: hidden_size, num_attention_heads and num_hidden_layers set d_model,
    # encoder_attention_heads and encoder_layers (over their own values), as transformers builds it
    config = {"model_type": "bart", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
              "decoder_attention_heads": 4, "encoder_ffn_dim": 96, "decoder_ffn_dim": 96, "decoder_layers": 2,
              "vocab_size": 100, "max_position_embeddings": 32, "d_model": 1024}
    spec = read_hf_config(write(tmp_path, config)).spec
    assert (spec.d_model, spec.n_heads, spec.n_encoder_layers, spec.n_layers) == (64, 4, 1, 2)
    n_params, _ = transformers_counts(config, 1, 4, 4)
    assert count(spec).params.total == n_params


@pytest.mark.parametrize("size, d_model, d_ff, heads, layers", [
    ("small", 512, 1024, 6, 8), ("base", 768, 2048, 12, 12), ("large", 1024, 2816, 16, 24), ("xl", 2048, 5120, 32, 24),
    ("xxl", 4096, 10240, 64, 24)])
def test_flan_t5_presets_are_transformers_plus_the_untied_head(size, d_model, d_ff, heads, layers):
    # FLAN-T5's checkpoints hold an untied head (tie_word_embeddings false); transformers 5 builds T5 from a config
    # with a tied one, so the preset is its sum(numel) plus the head's V x D
    config = transformers.T5Config(d_model=d_model, d_ff=d_ff, d_kv=64, num_heads=heads, num_layers=layers,
                                   num_decoder_layers=layers, vocab_size=32128, feed_forward_proj="gated-gelu",
                                   tie_word_embeddings=False)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tied = sum(p.numel() for p in transformers.T5ForConditionalGeneration(config).parameters())
    name = f"flan-t5-{size}"
    total = count(load_preset(name)).params.total
    assert total == tied + 32128 * d_model
    assert f"{total:,}" in find_preset(name).source and f"{tied:,}" in find_preset(name).source


@pytest.mark.parametrize("config, message", [
    ({"model_type": "gpt2", "n_embd": 50, "n_head": 6, "n_layer": 1, "vocab_size": 10},
     "n_embd=50 is not divisible by n_head=6"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 12, "num_key_value_heads": 5,
      "num_hidden_layers": 1, "vocab_size": 10, "intermediate_size": 8}, "num_key_value_heads=5 does not divide "
                                                                         "num_attention_heads=12"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 12, "num_hidden_layers": 1,
      "vocab_size": 10, "intermediate_size": 8}, "hidden_size=64 is not divisible by num_attention_heads=12; give "
                                                 "head_dim"),
])
def test_a_refusal_of_a_config_quotes_its_own_field_names(tmp_path, config, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(TfcalcError) as e:
        read_hf_config(path)
    assert message in str(e.value) and "n_kv_heads" not in str(e.value) and "d_model" not in str(e.value)
