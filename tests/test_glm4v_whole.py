"""GLM-4.1V read whole (glm4v): its language model (glm4v_text), lm_head and its vision tower (glm4v_vision: patches
with a position table beside a 2-D rotary, RMSNorm blocks, post_layernorm, the downsample Conv2d and the gated
merger), exact against transformers' Glm4vForConditionalGeneration on meta (parameters per component; FlopCounterMode
part by part, as the whole forward reads image_grid_thw's values), the tower against Glm4vVisionModel, the reference
model's check, and GLM-4.1V-9B-Thinking's sizes."""

import json

import pytest
import transformers
from hf_oracle import meta_params, write
from typer.testing import CliRunner

from tfcalc import Workload, count
from tfcalc.arch.towers import image_tokens, select
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()


def _tiny(bias: bool = False, image_size: int = 8) -> dict:
    # heads of 16 in the language model: rotary on half of each (8 channels, 4 frequencies = sum(mrope_section))
    return {"model_type": "glm4v", "image_token_id": 299, "video_token_id": 298, "image_start_token_id": 297,
            "image_end_token_id": 296, "video_start_token_id": 295, "video_end_token_id": 294,
            "text_config": {"model_type": "glm4v_text", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
                            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                            "max_position_embeddings": 128,
                            "rope_parameters": {"rope_type": "default", "mrope_section": [1, 1, 2],
                                                "partial_rotary_factor": 0.5, "rope_theta": 10000.0}},
            "vision_config": {"model_type": "glm4v_vision", "depth": 2, "hidden_size": 24, "intermediate_size": 40,
                              "attention_bias": bias, "out_hidden_size": 32, "num_heads": 2, "patch_size": 2,
                              "spatial_merge_size": 2, "image_size": image_size, "temporal_patch_size": 2}}


@pytest.mark.parametrize("bias, images, size", [(False, 2, (16, 24)), (True, 1, (8, 8)), (True, 2, (12, 4))])
def test_whole_glm4v_equals_its_generation_class(tmp_path, bias, images, size):
    config = _tiny(bias)
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    # images of H x W pixels: H/2 x W/2 patches, the 4 x 4 table resampled to them; merged 2 x 2 into the prompt
    workload = Workload(batch_size=2, seq_len=40, images=images, image_size=size)
    tokens = size[0] // 2 * (size[1] // 2) // 4
    assert image_tokens(spec, workload) == images * tokens
    result = count(spec, workload)
    assert result.params.total == meta_params(transformers.Glm4vForConditionalGeneration, config)
    assert result.towers["vision"]["params"] == meta_params(transformers.Glm4vVisionModel, config["vision_config"])
    # the merger's rows: each image's tokens; downsample [rows, 24 * 4] @ [96, 32], proj 32 -> 32, the GLU 32 -> 40
    assert result.flops.components["vision/merger/downsample"] == 2 * images * tokens * 96 * 32
    assert result.flops.components["vision/merger/gate"] == 2 * images * tokens * 32 * 40
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    rows = {(r.figure, r.component): r for r in report.rows}
    # the blocks' MLP is D -> out_hidden_size (Glm4VisionMlp), not intermediate_size; no biases
    assert rows[("params", "vision/mlp/up")].transformers == 2 * 24 * 32
    assert rows[("params", "vision/attention/qkv")].transformers == 2 * (24 * 72 + (72 if bias else 0))
    assert rows[("params", "vision/embedding/position")].transformers == 16 * 24  # (8 // 2)^2 rows
    assert check(spec, workload=workload, train=True).match


def test_the_vision_tower_alone_is_its_own_class(tmp_path):
    config = _tiny()
    path = write(tmp_path, config)
    out = runner.invoke(app, ["count", "--hf-config", str(path), "--tower", "vision", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["params"]["total"] == meta_params(transformers.Glm4vVisionModel,
                                                                     config["vision_config"])
    for args in (["--image-size", "16x24"], ["-B", "2"]):
        checked = runner.invoke(app, ["check", "--hf-config", str(path), "--tower", "vision", *args])
        assert checked.exit_code == 0 and "transformers: MATCH" in checked.output, checked.output
    # the default image is the config's image_size (the table's own grid): 8 x 8 pixels, 16 patches, 4 tokens
    assert count(select(read_hf_config(path).spec, "vision")).workload.seq_len == 16


# GLM-4.1V-9B-Thinking's sizes. The hub's config.json was not found in the code index; its sizes come from copies in
# public code naming that checkpoint: the vision config in mlxcel's GLM-4.1V-9B-Thinking parity test (index id
# 54872200264: depth 24, hidden_size 1536, intermediate_size 13696, num_heads 12, patch_size 14, out_hidden_size 4096,
# spatial_merge_size 2, temporal_patch_size 2, image_size 336, in_channels 3; attention_bias not given: false), the
# text config in its unit test of the GLM-4V text backbone (54636794657: 4096 wide, 40 blocks, intermediate_size
# 13696, 32 heads, 2 key/value heads, vocab 151552, partial_rotary_factor 0.5, mrope_section [8, 12, 12]), untied
# (tie_embeddings False in a GLM-4.1V-9B-Thinking table, 55996032253)
GLM4_1V_9B = {
    "model_type": "glm4v", "tie_word_embeddings": False,
    "text_config": {"model_type": "glm4v_text", "hidden_size": 4096, "num_hidden_layers": 40,
                    "intermediate_size": 13696, "num_attention_heads": 32, "num_key_value_heads": 2,
                    "vocab_size": 151552, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                              "partial_rotary_factor": 0.5,
                                                              "mrope_section": [8, 12, 12]}},
    "vision_config": {"model_type": "glm4v_vision", "depth": 24, "hidden_size": 1536, "intermediate_size": 13696,
                      "num_heads": 12, "patch_size": 14, "out_hidden_size": 4096, "spatial_merge_size": 2,
                      "temporal_patch_size": 2, "image_size": 336, "in_channels": 3}}

# the vision tower: the Conv3d's 3 * 2 * 14 * 14 pixels per patch with a bias, post_conv_layernorm, the table of
# (336 // 14)^2 rows; per block two RMSNorms, qkv 1536 -> 4608 and proj without biases, the gated MLP 1536 -> 4096 ->
# 1536 without biases; post_layernorm, downsample 1536 * 2 * 2 -> 4096 with a bias, the merger's proj 4096 -> 4096,
# its LayerNorm, gate/up 4096 -> 13696 and down 13696 -> 4096
BLOCK = 2 * 1536 + 1536 * 4608 + 1536 * 1536 + 3 * 1536 * 4096
VISION = ((3 * 2 * 14 * 14 * 1536 + 1536) + 1536 + 24 * 24 * 1536 + 24 * BLOCK + 1536 + (1536 * 4 * 4096 + 4096)
          + 4096 * 4096 + 2 * 4096 + 3 * 4096 * 13696)


def test_glm_4_1v_9b_is_10_292_777_472_parameters_as_its_generation_class(tmp_path):
    assert VISION == 892_498_432
    spec = read_hf_config(write(tmp_path, GLM4_1V_9B)).spec
    result = count(spec)
    assert result.towers["vision"]["params"] == VISION == meta_params(transformers.Glm4vVisionModel,
                                                                       GLM4_1V_9B["vision_config"])
    assert result.params.total == 10_292_777_472 == meta_params(transformers.Glm4vForConditionalGeneration,
                                                                 GLM4_1V_9B)
    # one 336 x 336 image by default: 24 x 24 patches, 144 tokens of the prompt
    assert image_tokens(spec, result.workload) == 144
    # at full size against the whole class on meta: one 448 x 336 image (32 x 24 patches resampled from the 24 x 24
    # table, 192 tokens) in a prompt of 400 tokens
    report = hf_model.compare(write(tmp_path, GLM4_1V_9B), spec, Workload(seq_len=400, images=1, image_size=(448, 336)))
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]


@pytest.mark.parametrize("field, value, says", [
    ("image_size", [8, 8], "vision_config.image_size=[8, 8]"),
    ("patch_size", [2, 2], "vision_config.patch_size=[2, 2]"),
    ("image_size", 1, "vision_config.image_size=1"),
    ("num_heads", 5, "vision_config.num_heads=5"),
    ("num_heads", 4, "vision_config.num_heads=4")])  # heads of 6: the 2-D rotary needs a multiple of 4
def test_bad_vision_configs_are_refused_in_one_line(tmp_path, field, value, says):
    config = _tiny()
    config["vision_config"][field] = value
    out = runner.invoke(app, ["count", "--hf-config", str(write(tmp_path, config))])
    assert out.exit_code == 2 and says in out.output and "Traceback" not in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1, out.output


def test_an_image_the_patches_do_not_cover_is_refused(tmp_path):
    path = write(tmp_path, _tiny())
    odd = runner.invoke(app, ["count", "--hf-config", str(path), "--image-size", "18"])
    assert odd.exit_code == 2 and "--image-size 18: not a multiple of" in odd.output, odd.output


# ---- Kimi K2.5 (kimi_k25): its MoonViT-like tower (kimi_k25_vision) and Kimi_K25MultimodalProjection -------------

def _kimi(heads: int = 2, merge: int = 2) -> dict:
    return {"model_type": "kimi_k25", "image_token_id": 299, "video_token_id": 298, "projection_hidden_size": 24,
            "text_config": {"model_type": "deepseek_v3", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
                            "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
                            "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 4,
                            "num_experts_per_tok": 2, "first_k_dense_replace": 1, "kv_lora_rank": 8, "q_lora_rank": 8,
                            "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 8, "n_group": 1,
                            "topk_group": 1, "max_position_embeddings": 128},
            "vision_config": {"model_type": "kimi_k25_vision", "num_hidden_layers": 2, "hidden_size": 24,
                              "intermediate_size": 40, "num_attention_heads": heads, "patch_size": 2,
                              "pos_emb_height": 4, "pos_emb_width": 4, "merge_kernel_size": [merge, merge]}}


@pytest.mark.parametrize("heads, merge, images, size", [(2, 2, 2, (16, 24)), (3, 1, 1, (6, 10))])
def test_whole_kimi_k25_equals_its_generation_class(tmp_path, heads, merge, images, size):
    config = _kimi(heads, merge)
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    workload = Workload(batch_size=2, seq_len=40, images=images, image_size=size)
    patches = size[0] // 2 * (size[1] // 2)
    assert image_tokens(spec, workload) == images * patches // merge ** 2
    result = count(spec, workload)
    assert result.params.total == meta_params(transformers.Kimi_K25ForConditionalGeneration, config)
    assert result.towers["vision"]["params"] == meta_params(transformers.Kimi_K25VisionModel,
                                                            config["vision_config"])
    # the projector: pre_norm over each 24-wide token, in_proj 24 m^2 -> 24 m^2, out_proj -> 32, biases
    w = 24 * merge ** 2
    assert result.towers["connectors"] == {"params": 2 * 24 + w * w + w + w * 32 + 32,
                                           "forward": 2 * images * (patches // merge ** 2) * (w * w + w * 32)}
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    assert check(spec, workload=workload, train=True).match


def test_kimi_k25_vision_tower_alone_is_its_own_class(tmp_path):
    config = _kimi()
    path = write(tmp_path, config)
    out = runner.invoke(app, ["count", "--hf-config", str(path), "--tower", "vision", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["params"]["total"] == meta_params(transformers.Kimi_K25VisionModel,
                                                                     config["vision_config"])
    checked = runner.invoke(app, ["check", "--hf-config", str(path), "--tower", "vision", "--image-size", "16x24"])
    assert checked.exit_code == 0 and "transformers: MATCH" in checked.output, checked.output


# moonshotai/Kimi-K2.5's config.json as a model report dumps it whole (index id 62530201892: "模型路径
# /nfs/ofs-llab-cold/model/moonshotai/Kimi-K2.5", transformers_version 5.7.0; its weight table lists the tower's and
# the projector's shapes), the fields that size the model copied; quantization_config and auto_map left out. Its
# vision_config gives the remote code's names (vt_*, init_pos_emb_*, mm_hidden_size) and model_type "": transformers'
# Kimi_K25VisionConfig reads its own names, whose defaults are those sizes.
KIMI_K25_TEXT = {
    "model_type": "deepseek_v3", "attention_bias": False, "first_k_dense_replace": 1, "hidden_act": "silu",
    "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 262144,
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 384, "n_shared_experts": 1,
    "norm_topk_prob": True, "num_attention_heads": 64, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 64, "num_nextn_predict_layers": 0, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "rms_norm_eps": 1e-05, "rope_theta": 50000.0, "routed_scaling_factor": 2.827,
    "rope_parameters": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                        "original_max_position_embeddings": 4096, "rope_theta": 50000.0, "rope_type": "yarn",
                        "type": "yarn"},
    "scoring_func": "sigmoid", "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc",
    "v_head_dim": 128, "vocab_size": 163840}
KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "tie_word_embeddings": False,
    "media_placeholder_token_id": 163605, "text_config": KIMI_K25_TEXT,
    "vision_config": {"init_pos_emb_height": 64, "init_pos_emb_time": 4, "init_pos_emb_width": 64,
                      "merge_kernel_size": [2, 2], "merge_type": "sd2_tpool", "mm_hidden_size": 1152,
                      "mm_projector_type": "patchmerger", "model_type": "", "patch_size": 14,
                      "pos_emb_type": "divided_fixed", "projector_hidden_act": "gelu", "projector_ln_eps": 1e-05,
                      "text_hidden_size": 7168, "video_attn_type": "spatial_temporal", "vt_hidden_size": 1152,
                      "vt_intermediate_size": 4304, "vt_num_attention_heads": 16, "vt_num_hidden_layers": 27}}
# the tower: the Conv2d 3 * 14 * 14 -> 1152 with a bias, the 64 x 64 table; per block two LayerNorms, q, k, v, proj
# with biases, fc1 1152 -> 4304 and fc2 with biases; final_layernorm. The projector: pre_norm [1152], in_proj 4608 ->
# 4608, out_proj 4608 -> 7168, biases (the report's weight table: proj.0 [4608, 4608], proj.2 [7168, 4608])
KIMI_BLOCK = 2 * 2 * 1152 + 4 * (1152 * 1152 + 1152) + (1152 * 4304 + 4304) + (4304 * 1152 + 1152)
KIMI_VISION = 3 * 14 * 14 * 1152 + 1152 + 64 * 64 * 1152 + 27 * KIMI_BLOCK + 2 * 1152
KIMI_PROJECTOR = 2 * 1152 + 4608 * 4608 + 4608 + 4608 * 7168 + 7168


def test_kimi_k25_is_1_026_879_353_328_parameters_as_its_generation_class(tmp_path):
    assert (KIMI_VISION, KIMI_PROJECTOR) == (416_866_032, 54_277_888)
    spec = read_hf_config(write(tmp_path, KIMI_K25)).spec
    result = count(spec)
    assert result.towers["vision"]["params"] == KIMI_VISION
    assert result.towers["connectors"]["params"] == KIMI_PROJECTOR
    assert result.params.total == 1_026_879_353_328 == meta_params(transformers.Kimi_K25ForConditionalGeneration,
                                                                    KIMI_K25)
    assert count(select(spec, "text")).params.total == 1_026_879_353_328 - KIMI_VISION - KIMI_PROJECTOR


@pytest.mark.parametrize("field, value, says", [
    ("vt_hidden_size", 2048, "vision_config.vt_hidden_size=2048 is not modelled: the remote code's name"),
    ("merge_kernel_size", [2, 3], "vision_config.merge_kernel_size=[2, 3]"),
    ("pos_emb_width", 8, "vision_config.pos_emb_width=8"),
    ("patch_size", [2, 2], "vision_config.patch_size=[2, 2]"),
    ("num_attention_heads", 4, "vision_config.num_attention_heads=4")])  # heads of 6: the 2-D rotary needs 4k
def test_bad_kimi_configs_are_refused_in_one_line(tmp_path, field, value, says):
    config = _kimi()
    config["vision_config"][field] = value
    out = runner.invoke(app, ["count", "--hf-config", str(write(tmp_path, config))])
    assert out.exit_code == 2 and says in out.output and "Traceback" not in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1, out.output
    config = _kimi()
    config["projection_hidden_size"] = 32
    out = runner.invoke(app, ["count", "--hf-config", str(write(tmp_path, config))])
    assert out.exit_code == 2 and "projection_hidden_size=32 is not modelled" in out.output, out.output
