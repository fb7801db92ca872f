"""The hybrid presets read from published config.json files (Qwen3.5 0.8B and 35B-A3B, Granite 4.0-H Small and Tiny),
each pinned to transformers' class built from that config on the meta device, to the arithmetic in its comment, and to
the preset tfcalc reads from the same file."""

import warnings

import torch
import transformers
from hf_oracle import hf_config, write

from tfcalc import count, find_preset, load_preset
from tfcalc.arch.towers import select
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
    # the config is read whole (its vision tower too); the preset is its language model, --tower text
    spec = select(read_hf_config(write(tmp_path, QWEN3_5_0_8B)).spec, "text")
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
    # read whole (its class's default vision tower too); the preset is its language model, --tower text
    spec = select(read_hf_config(write(tmp_path, {"model_type": "qwen3_5_moe", "text_config": QWEN3_5_35B_A3B_TEXT,
                                                  "tie_word_embeddings": False})).spec, "text")
    assert spec.replace(name=preset.name) == preset


# ibm-granite/granite-4.0-h-small's config.json: the fields public quotations of it give (a hybrid-memory calculator's
# worked example; a transformers audit's checkpoint table and shapes), which agree where both give a field; no verbatim
# copy of the file is held here. mamba_chunk_size, not quoted, is left at the class's default (no parameter reads it)
ATTENTION_AT = {5, 15, 25, 35}
GRANITE_4_0_H_SMALL = {
    "model_type": "granitemoehybrid", "hidden_size": 4096, "num_hidden_layers": 40, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_local_experts": 72, "num_experts_per_tok": 10, "shared_intermediate_size": 1536,
    "intermediate_size": 768, "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_n_heads": 128,
    "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_conv_bias": True, "mamba_proj_bias": False,
    "attention_bias": False, "tie_word_embeddings": True, "vocab_size": 100352, "max_position_embeddings": 131072,
    "position_embedding_type": "nope",
    "layer_types": ["attention" if i in ATTENTION_AT else "mamba" for i in range(40)]}
# ibm-granite/granite-4.0-h-tiny's: the fields a performance model's fixture quotes (GRANITE_H_TINY_HF); the rest at the
# class's defaults, as H-Small's config states them
GRANITE_4_0_H_TINY = {
    "model_type": "granitemoehybrid", "hidden_size": 1536, "num_hidden_layers": 40, "num_attention_heads": 12,
    "num_key_value_heads": 4, "intermediate_size": 512, "shared_intermediate_size": 1024, "num_local_experts": 64,
    "num_experts_per_tok": 6, "vocab_size": 100352, "tie_word_embeddings": True, "mamba_d_state": 128,
    "mamba_n_groups": 1, "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_expand": 2, "mamba_d_conv": 4,
    "mamba_chunk_size": 256, "max_position_embeddings": 131072, "position_embedding_type": "nope",
    "layer_types": ["mamba"] * 5 + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 9 + ["attention"]
    + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4}


def test_granite_4_0_h_small_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = text_params(GRANITE_4_0_H_SMALL, "GraniteMoeHybridForCausalLM")
    D, V, E, F = 4096, 100352, 72, 768
    # 36 Mamba2 blocks: in_proj D * (2 * 8192 + 2 * 128 + 128), conv (8192 + 256) * (4 + 1), A_log, D, dt_bias 3 * 128,
    # the gated norm 8192, out_proj 8192 * D, the norm D; 4 attention blocks: q and o 2 * D * 4096, k and v D * 2 * 1024,
    # the norm D; every block: router D * E, E experts of 3 * D * F, the shared MLP 3 * D * 1536, the norm D; the tied
    # table once, the final norm
    mamba = D * 16768 + 8448 * 5 + 3 * 128 + 8192 + 8192 * D + D
    attention = 2 * D * 4096 + D * 2048 + D
    moe = D * E + E * 3 * D * F + 3 * D * 1536 + D
    assert n_params == 36 * mamba + 4 * attention + 40 * moe + V * D + D == 32_207_337_984
    preset = load_preset("granite-4.0-h-small")
    result = count(preset)
    assert result.params.total == n_params
    assert result.params.active == n_params - 40 * (E - 10) * 3 * D * F == 8_803_121_664
    assert round(n_params / 1e9) == 32 and round(result.params.active / 1e9) == 9  # IBM's 32B total, ~9B active
    assert f"{n_params:,}" in find_preset("granite-4.0-h-small").source
    spec = read_hf_config(write(tmp_path, GRANITE_4_0_H_SMALL)).spec
    assert spec.replace(name=preset.name) == preset


def test_granite_4_0_h_tiny_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = text_params(GRANITE_4_0_H_TINY, "GraniteMoeHybridForCausalLM")
    D, V, E, F = 1536, 100352, 64, 512
    # 36 Mamba2 blocks: in_proj D * (2 * 3072 + 2 * 128 + 48), conv (3072 + 256) * (4 + 1), 3 * 48, the gated norm
    # 3072, out_proj 3072 * D, the norm D; 4 attention blocks: q and o 2 * D * 1536, k and v D * 2 * 512, the norm D;
    # every block: router D * E, E experts of 3 * D * F, the shared MLP 3 * D * 1024, the norm D; tied table, final norm
    mamba = D * 6448 + 3328 * 5 + 3 * 48 + 3072 + 3072 * D + D
    attention = 2 * D * 1536 + D * 1024 + D
    moe = D * E + E * 3 * D * F + 3 * D * 1024 + D
    assert n_params == 36 * mamba + 4 * attention + 40 * moe + V * D + D == 6_939_037_248
    preset = load_preset("granite-4.0-h-tiny")
    result = count(preset)
    assert result.params.total == n_params
    assert result.params.active == n_params - 40 * (E - 6) * 3 * D * F == 1_465_470_528
    assert round(n_params / 1e9) == 7  # IBM's 7B total
    assert f"{n_params:,}" in find_preset("granite-4.0-h-tiny").source
    spec = read_hf_config(write(tmp_path, GRANITE_4_0_H_TINY)).spec
    assert spec.replace(name=preset.name) == preset
