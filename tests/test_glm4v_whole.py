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


@pytest.mark.parametrize("field, value, says", [
    ("image_size", [8, 8], "vision_config.image_size=[8, 8]"),
    ("patch_size", [2, 2], "vision_config.patch_size=[2, 2]"),
    ("image_size", 1, "vision_config.image_size=1"),
    ("num_heads", 5, "vision_config.num_heads=5")])
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
