"""EXAONE 4.5 read whole (exaone4_5): its language model (EXAONE 4), lm_head and its vision tower (exaone4_5_vision:
Qwen2.5-VL's tower with grouped-query attention), exact against transformers' Exaone4_5_ForConditionalGeneration on
meta (parameters per component; FlopCounterMode part by part, as the whole forward reads image_grid_thw's values), the
tower against Exaone4_5_VisionModel, the reference model's check, and the 33B's sizes."""

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


def _tiny(heads: int = 4, kv: int = 2, full: list[int] | None = None) -> dict:
    return {"model_type": "exaone4_5", "image_token_id": 299, "video_token_id": 298,
            "text_config": {"model_type": "exaone4", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
                            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                            "max_position_embeddings": 128},
            "vision_config": {"model_type": "exaone4_5_vision", "depth": 2, "hidden_size": 32,
                              "intermediate_size": 40, "out_hidden_size": 32, "num_heads": heads,
                              "num_key_value_heads": kv, "patch_size": 2, "spatial_merge_size": 2,
                              "temporal_patch_size": 2, "window_size": 8,
                              "fullatt_block_indexes": [1] if full is None else full}}


@pytest.mark.parametrize("heads, kv", [(4, 2), (4, 1), (2, 2)])
def test_whole_exaone4_5_equals_its_generation_class(tmp_path, heads, kv):
    config = _tiny(heads, kv)
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    # two images of 16 x 24 pixels: 8 x 12 patches of 2, windows of 8 // 2 // 2 * 2 = 2 x 2 patches in block 0, the
    # whole image in block 1; each image merged 2 x 2 into 24 tokens of the prompt
    workload = Workload(batch_size=2, seq_len=40, images=2, image_size=(16, 24))
    assert image_tokens(spec, workload) == 2 * (8 * 12) // 4
    result = count(spec, workload)
    assert result.params.total == meta_params(transformers.Exaone4_5_ForConditionalGeneration, config)
    vision = config["vision_config"]
    assert result.towers["vision"]["params"] == meta_params(transformers.Exaone4_5_VisionModel, vision)
    # the fused qkv: D -> (H + 2 H_kv) * D / H, with its bias
    report = hf_model.compare(path, spec, workload)
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows[("params", "vision/attention/qkv")].transformers == 2 * (32 * (heads + 2 * kv) * (32 // heads)
                                                                         + (heads + 2 * kv) * (32 // heads))
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    assert check(spec, workload=workload, train=True).match


def test_the_vision_tower_alone_is_its_own_class(tmp_path):
    path = write(tmp_path, _tiny())
    out = runner.invoke(app, ["count", "--hf-config", str(path), "--tower", "vision", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["params"]["total"] == meta_params(transformers.Exaone4_5_VisionModel,
                                                                     _tiny()["vision_config"])
    checked = runner.invoke(app, ["check", "--hf-config", str(path), "--tower", "vision", "--image-size", "16x24"])
    assert checked.exit_code == 0 and "transformers: MATCH" in checked.output, checked.output


# EXAONE-4.5-33B's sizes. The hub's config.json was not found in the code index; these are the sizes of the copy of
# its config in NVIDIA TensorRT-LLM's tests (index ids 56213569018: every field, a beta's text_config model_type
# "exaone4_vl_text", read here as exaone4; and 56183568482: the same per-layer sizes, _name_or_path EXAONE-4.5-33B,
# transformers_version 5.8.0, depths shrunk for the test)
EXAONE4_5_33B = {
    "model_type": "exaone4_5", "image_token_id": 67, "video_token_id": 68,
    "text_config": {"model_type": "exaone4", "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 27392,
                    "layer_types": ["sliding_attention"] * 3 + ["full_attention"], "max_position_embeddings": 131072,
                    "num_attention_heads": 40, "num_hidden_layers": 64, "num_key_value_heads": 8,
                    "sliding_window": 4096, "vocab_size": 153600, "rope_theta": 1000000.0},
    "vision_config": {"model_type": "exaone4_5_vision", "depth": 28, "fullatt_block_indexes": [6, 13, 20, 27],
                      "hidden_act": "silu", "hidden_size": 2048, "in_channels": 3, "intermediate_size": 5120,
                      "num_heads": 32, "num_key_value_heads": 8, "out_hidden_size": 5120, "patch_size": 14,
                      "spatial_merge_size": 2, "temporal_patch_size": 2, "tokens_per_second": 2, "window_size": 112}}
EXAONE4_5_33B["text_config"]["layer_types"] *= 16  # LLLG, 64 blocks

# the vision tower: per block the fused qkv 2048 -> 2048 + 2 * 8 * 64 with a bias, proj with a bias, two RMSNorms and
# the gated MLP 2048 -> 5120 -> 2048 with biases; the Conv3d's 3 * 2 * 14 * 14 pixels per patch, no bias; the merger
# ln_q, 8192 -> 8192 and 8192 -> 5120 with biases
BLOCK = (2048 * 3072 + 3072) + (2048 * 2048 + 2048) + 2 * 2048 + (3 * 2048 * 5120 + 2 * 5120 + 2048)
VISION = 28 * BLOCK + 3 * 2 * 14 * 14 * 2048 + 2048 + (8192 * 8192 + 8192) + (8192 * 5120 + 5120)


def test_exaone4_5_33b_is_33_813_987_328_parameters_as_its_generation_class(tmp_path):
    assert VISION == 1_286_482_944
    spec = read_hf_config(write(tmp_path, EXAONE4_5_33B)).spec
    result = count(spec)
    assert result.towers["vision"]["params"] == VISION == meta_params(transformers.Exaone4_5_VisionModel,
                                                                       EXAONE4_5_33B["vision_config"])
    assert result.params.total == 33_813_987_328 == meta_params(transformers.Exaone4_5_ForConditionalGeneration,
                                                                 EXAONE4_5_33B)
    assert count(select(spec, "text")).params.total == 33_813_987_328 - VISION


def test_bad_vision_configs_are_refused_in_one_line(tmp_path):
    config = _tiny(4, 3)
    out = runner.invoke(app, ["count", "--hf-config", str(write(tmp_path, config))])
    assert out.exit_code == 2 and "num_key_value_heads=3" in out.output and "Traceback" not in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1, out.output
    path = write(tmp_path, _tiny())
    odd = runner.invoke(app, ["count", "--hf-config", str(path), "--image-size", "18", "-N", "400"])
    assert odd.exit_code == 2 and "--image-size 18: not a multiple of" in odd.output, odd.output
