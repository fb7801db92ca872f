"""The hybrid presets read from published config.json files (Qwen3.5 0.8B, Qwen3.5 35B-A3B), each pinned to
transformers' class built from that config on the meta device, to the arithmetic in its comment, and to the preset
tfcalc reads from the same file."""

import warnings

import torch
import transformers
from hf_oracle import hf_config, write

from tfcalc import count, find_preset, load_preset
from tfcalc.hf import read_hf_config


def text_params(text: dict, causal_lm: str) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in getattr(transformers, causal_lm)(hf_config(text)).parameters())


# Qwen/Qwen3.5-0.8B's config.json, verbatim from a public copy (the whole file as curl printed it; no network here to
# the hub), less vision_config (the vision tower is not counted) and its token ids
QWEN3_5_0_8B_TEXT = {
    "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "dtype": "bfloat16",
    "eos_token_id": 248044, "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3584,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 6, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 16,
    "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [],
    "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
    "num_attention_heads": 8, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": True, "use_cache": True, "vocab_size": 248320, "mamba_ssm_dtype": "float32",
    "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default",
                        "rope_theta": 10000000, "partial_rotary_factor": 0.25}}
QWEN3_5_0_8B = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                "text_config": QWEN3_5_0_8B_TEXT, "tie_word_embeddings": True}


def test_qwen3_5_0_8b_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = text_params(QWEN3_5_0_8B_TEXT, "Qwen3_5ForCausalLM")
    D, V, F = 1024, 248320, 3584
    # 18 gated DeltaNet blocks: in_proj_qkv + in_proj_z D * (2 * 16 * 128 + 16 * 128 + 16 * 128), in_proj_b + in_proj_a
    # D * 32, conv 6144 * 4, A_log and dt_bias 2 * 16, the gated norm 128, out_proj 2048 * D; 6 attention blocks: q
    # (doubled) D * 2 * 8 * 256, k and v D * 2 * 2 * 256, o 8 * 256 * D, q/k norms 2 * 256; every block 2 norms of D
    # and the SwiGLU MLP 3 * D * F; the tied table once, the final norm
    linear = D * 8192 + D * 32 + 6144 * 4 + 32 + 128 + 2048 * D
    attention = D * 4096 + D * 1024 + 2048 * D + 2 * 256
    assert n_params == 18 * linear + 6 * attention + 24 * (2 * D + 3 * D * F) + V * D + D == 752_393_024
    preset = load_preset("qwen3.5-0.8b")
    assert count(preset).params.total == n_params
    assert f"{n_params:,}" in find_preset("qwen3.5-0.8b").source
    spec = read_hf_config(write(tmp_path, QWEN3_5_0_8B)).spec
    assert spec.replace(name=preset.name) == preset


# Qwen/Qwen3.5-35B-A3B's config.json text_config: the fields as public quotations of it give them (a checkpoint
# validator's full text_config fixture for this geometry; a model inventory of Qwen3.5-35B-A3B's config), which agree
# field by field; no verbatim copy of the file is held here
QWEN3_5_35B_A3B_TEXT = {
    "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "full_attention_interval": 4,
    "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_value_head_dim": 128, "max_position_embeddings": 262144, "model_type": "qwen3_5_moe_text",
    "moe_intermediate_size": 512, "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
    "num_attention_heads": 16, "num_experts": 256, "num_experts_per_tok": 8, "num_hidden_layers": 40,
    "num_key_value_heads": 2, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-6,
    "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "partial_rotary_factor": 0.25,
                        "rope_theta": 10000000, "rope_type": "default"},
    "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "vocab_size": 248320}


def test_qwen3_5_35b_a3b_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = text_params(QWEN3_5_35B_A3B_TEXT, "Qwen3_5MoeForCausalLM")
    D, V, E = 2048, 248320, 256
    expert = 3 * D * 512  # gate, up, down of 512
    moe = D * E + E * expert + expert + D  # router, 256 experts, the shared expert, its gate
    # 30 gated DeltaNet blocks: in_proj_qkv + in_proj_z D * (2 * 16 * 128 + 32 * 128 + 32 * 128), in_proj_b + in_proj_a
    # D * 64, conv 8192 * 4, A_log and dt_bias 2 * 32, the gated norm 128, out_proj 4096 * D; 10 attention blocks: q
    # (doubled) D * 2 * 16 * 256, k and v D * 2 * 2 * 256, o 16 * 256 * D, q/k norms 2 * 256; every block 2 norms of D
    # and the experts; embedding, final norm, untied head
    linear = D * 12288 + D * 64 + 8192 * 4 + 64 + 128 + 4096 * D
    attention = D * (2 * 4096 + 2 * 512) + 4096 * D + 2 * 256
    # 34,660,610,688: also the text-parameter total a public document states for this config
    assert n_params == 30 * linear + 10 * attention + 40 * (2 * D + moe) + 2 * V * D + D == 34_660_610_688
    preset = load_preset("qwen3.5-35b-a3b")
    result = count(preset)
    assert result.params.total == n_params
    # the name's A3B: 8 routed experts and the shared one per token
    assert result.params.active == n_params - 40 * (E - 8) * expert == 3_454_988_928
    assert f"{n_params:,}" in find_preset("qwen3.5-35b-a3b").source
    spec = read_hf_config(write(tmp_path, {"model_type": "qwen3_5_moe", "text_config": QWEN3_5_35B_A3B_TEXT,
                                           "tie_word_embeddings": False})).spec
    assert spec.replace(name=preset.name) == preset
