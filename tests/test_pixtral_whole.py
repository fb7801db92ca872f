"""Pixtral's vision tower (pixtral) and the wrappers read whole around it: Mistral 3 (mistral3, its
Mistral3MultiModalProjector: a norm before the patch merger, a merging linear) and LLaVA with a Pixtral tower (Pixtral
12B's layout). Exact against transformers on meta (parameters per component, FlopCounterMode over the eager forward:
every image's patches one sequence, attended under a block-diagonal mask the eager model adds to the scores), the
reference model's check, the published Mistral Small 3.1 24B, and the refusals."""

import json
from pathlib import Path

import pytest
import transformers
from hf_oracle import meta_params, write
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.arch.towers import image_tokens, select
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()

TEXT = {"model_type": "mistral", "vocab_size": 99, "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 512,
        "sliding_window": None}
# D = 32, 4 heads of 8, 2 blocks, gated MLP of 37, 6 x 6 patches, images up to 48 x 48
VISION = {"model_type": "pixtral", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 37, "image_size": 48, "patch_size": 6, "num_channels": 3, "hidden_act": "gelu"}
MISTRAL3 = {"model_type": "mistral3", "text_config": TEXT, "vision_config": VISION, "spatial_merge_size": 2,
            "vision_feature_layer": -1, "image_token_index": 1}
LLAVA = {"model_type": "llava", "text_config": TEXT, "vision_config": VISION, "vision_feature_layer": -1,
         "vision_feature_select_strategy": "full", "image_token_index": 1}
# two images of 24 x 36: 4 x 6 = 24 patches each, one sequence of 48
TWO = Workload(batch_size=1, seq_len=64, images=2, image_size=(24, 36))

# the tower: patch_conv 3*6*6 -> 32 (no bias), ln_pre, 2 blocks of two norms, q k v o 32 x 32, gate up down 32 x 37
TOWER_PARAMS = 108 * 32 + 32 + 2 * (2 * 32 + 4 * 32 * 32 + 3 * 32 * 37)
# its forward on the one sequence of 48 patches: the conv, then per block q k v o, scores and values over all
# 48 x 48 pairs (4 heads of 8), the gated MLP
TOWER_FORWARD = 2 * 48 * 108 * 32 + 2 * (2 * 48 * 32 * 4 * 32 + 2 * 2 * 4 * 48 * 48 * 8 + 2 * 48 * 3 * 32 * 37)


def _compare(path, spec, workload):
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if "unmapped" in r.component], report.rows
    return report


def test_pixtral_tower_is_one_sequence_of_every_images_patches(tmp_path):
    assert (TOWER_PARAMS, TOWER_FORWARD) == (18_912, 2_390_016)
    path = write(tmp_path, VISION)
    spec = read_hf_config(path).spec
    assert count(spec).params.total == TOWER_PARAMS == meta_params(transformers.PixtralVisionModel, VISION)
    # the tower alone on two 24 x 36 images: batch 1, one sequence of 2 x 24 patches
    two = Workload(batch_size=1, seq_len=48, image_size=(24, 36))
    assert count(spec, two).flops.forward == TOWER_FORWARD
    report = _compare(path, spec, two)
    assert {r.component: r.transformers for r in report.rows if r.figure == "forward"}["attention/core"] == \
        2 * 2 * 2 * 4 * 48 * 48 * 8  # (2 images x 24 patches)^2 pairs per head: what the eager model computes
    assert check(spec, workload=two, train=True).match
    # the default: one image of the largest size, 48 x 48 = 64 patches
    assert count(spec).workload.seq_len == 64


def test_mistral3_whole_equals_its_generation_class(tmp_path):
    path = write(tmp_path, MISTRAL3)
    spec = read_hf_config(path).spec
    result = count(spec, TWO)
    # the projector: norm [32], merging_layer 4*32 -> 32, linear_1 32 -> 32, linear_2 32 -> 32 (no biases); on the
    # 2 images' (24/12) x (36/12) = 6 merged tokens each: the merge over 12 rows, the linears too
    assert result.towers["connectors"] == {"params": 32 + 128 * 32 + 32 * 32 + 32 * 32,
                                           "forward": 2 * 12 * (128 * 32 + 32 * 32 + 32 * 32)}
    assert image_tokens(spec, TWO) == 2 * 2 * 3
    assert result.towers["vision"] == {"params": TOWER_PARAMS, "forward": TOWER_FORWARD}
    assert result.params.total == meta_params(transformers.Mistral3ForConditionalGeneration, MISTRAL3)
    assert count(select(spec, "vision")).params.total == meta_params(transformers.PixtralVisionModel, VISION)
    _compare(path, spec, TWO)
    assert check(spec, workload=TWO, train=True).match
    # the CLI, whole: transformers' class and the reference model
    checked = runner.invoke(app, ["check", "--hf-config", str(path), "--images", "2", "--image-size", "24x36",
                                  "-N", "64"])
    assert checked.exit_code == 0 and "transformers: MATCH" in checked.output, checked.output
    # its tower alone (--tower vision), against PixtralVisionModel
    alone = runner.invoke(app, ["check", "--hf-config", str(path), "--tower", "vision"])
    assert alone.exit_code == 0 and "transformers: MATCH" in alone.output, alone.output


def test_mistral3_with_a_ministral3_language_model_is_whole_too(tmp_path):
    # Ministral 3 / Devstral 2: the same tower and projector around a ministral3 text_config
    config = {**MISTRAL3, "text_config": {**TEXT, "model_type": "ministral3"}}
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    assert count(spec, TWO).params.total == meta_params(transformers.Mistral3ForConditionalGeneration, config)
    _compare(path, spec, TWO)


def test_mistral3_without_a_vision_config_reads_mistral_small_s_tower(tmp_path):
    config = {k: v for k, v in MISTRAL3.items() if k != "vision_config"}
    spec = read_hf_config(write(tmp_path, config)).spec
    # Mistral3Config's own Pixtral sizes (its SubConfigSpec): 24 blocks of 1024, 14 x 14 patches, images to 1540
    assert count(select(spec, "vision")).params.total == 403_305_472
    small = Workload(seq_len=64, images=1, image_size=(56, 56))  # (the default 1540 x 1540 image: 3,025 tokens)
    assert count(spec, small).params.total == meta_params(transformers.Mistral3ForConditionalGeneration, config)


def test_llava_with_a_pixtral_tower_equals_its_generation_class(tmp_path):
    path = write(tmp_path, LLAVA)
    spec = read_hf_config(path).spec
    result = count(spec, TWO)
    # LLaVA's projector on every patch (no class token): linear_1 32 -> 32, GELU, linear_2 32 -> 32, with biases
    assert result.towers["connectors"] == {"params": 2 * (32 * 32 + 32), "forward": 2 * 48 * 2 * 32 * 32}
    assert image_tokens(spec, TWO) == 48
    assert result.params.total == meta_params(transformers.LlavaForConditionalGeneration, LLAVA)
    _compare(path, spec, TWO)
    assert check(spec, workload=TWO, train=True).match
    # "default" would cut the first patch of the one sequence: refused by name
    (tmp_path / "default").mkdir()
    bad = write(tmp_path / "default", {**LLAVA, "vision_feature_select_strategy": "default"})
    out = runner.invoke(app, ["count", "--hf-config", str(bad)])
    assert out.exit_code == 2 and "vision_feature_select_strategy='default' is not modelled" in out.output, out.output


MISTRAL_SMALL_31_VISION = {  # its vision_config, as in both copies the preset's source names
    "attention_dropout": 0.0, "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024, "image_size": 1540,
    "initializer_range": 0.02, "intermediate_size": 4096, "model_type": "pixtral", "num_attention_heads": 16,
    "num_channels": 3, "num_hidden_layers": 24, "patch_size": 14, "rope_theta": 10000.0}


def test_mistral_small_3_1_24b_is_23_340_272_640_parameters_as_its_generation_class(tmp_path):
    outer = json.loads((Path(__file__).parent / "data" / "wrapper_configs.json").read_text())
    config = {**outer["mistral-small-3-24b"]["config"], "vision_config": MISTRAL_SMALL_31_VISION}
    spec = read_hf_config(write(tmp_path, config)).spec
    result = count(spec)
    # a block: two norms, q 5120 -> 4096, k and v 5120 -> 1024, o, SwiGLU 32768; the token table (the head tied to it)
    text = 40 * (2 * 5120 + 5120 * 4096 + 2 * 5120 * 1024 + 4096 * 5120 + 3 * 5120 * 32768) + 131072 * 5120 + 5120
    vision = 3 * 14 * 14 * 1024 + 1024 + 24 * (2 * 1024 + 4 * 1024 * 1024 + 3 * 1024 * 4096)
    projector = 1024 + 4096 * 1024 + 1024 * 5120 + 5120 * 5120
    assert (text, vision, projector) == (22_901_314_560, 403_305_472, 35_652_608)
    assert [result.towers[t]["params"] for t in ("text", "vision", "connectors")] == [text, vision, projector]
    assert result.params.total == text + vision + projector == 23_340_272_640 == meta_params(
        transformers.Mistral3ForConditionalGeneration, config)
    assert meta_params(transformers.PixtralVisionModel, MISTRAL_SMALL_31_VISION) == vision
    preset = load_preset("mistral-small-3.1-24b")
    assert preset.replace(name=None) == spec.replace(name=None)
    # one 1540 x 1540 image by default: 110 x 110 patches of 14, merged 2 x 2 into 55 x 55 = 3,025 tokens
    out = runner.invoke(app, ["count", "-p", "mistral-small-3.1-24b", "-N", "4096"], env={"COLUMNS": "200"})
    assert "1 image of 1540x1540 (3,025 of the tokens)" in out.output, out.output


@pytest.mark.parametrize("args, message", [
    (["--image-size", "30"], "--image-size 30: not a multiple of"),  # 30 = 5 patches: not 2 x 2 blocks of 6
    (["--image-size", "60"], "larger than"),  # over image_size 48
])
def test_an_image_mistral3_cannot_take_is_refused_in_one_line(tmp_path, args, message):
    path = write(tmp_path, MISTRAL3)
    out = runner.invoke(app, ["count", "--hf-config", str(path), "-N", "256", *args])
    assert out.exit_code == 2 and message in out.output and "Traceback" not in out.output, out.output


@pytest.mark.parametrize("change, message", [
    ({"vision_feature_layer": [-1, -2]}, "vision_feature_layer=[-1, -2]"),
    ({"vision_config": {**VISION, "patch_size": [6, 6]}}, "patch_size=[6, 6] is not modelled"),
    ({"vision_config": {**VISION, "num_attention_heads": 5}}, "num_attention_heads=5 is not modelled"),
    ({"vision_config": {**VISION, "model_type": "clip_vision_model"}},
     "vision_config.model_type='clip_vision_model' tower is not modelled yet"),
])
def test_a_mistral3_config_not_modelled_is_refused_by_name(tmp_path, change, message):
    out = runner.invoke(app, ["count", "--hf-config", str(write(tmp_path, {**MISTRAL3, **change}))])
    assert out.exit_code == 2 and message in out.output and "Traceback" not in out.output, out.output


def test_a_packed_tower_reads_its_images_as_one_sequence():
    spec = load_preset("mistral-small-3.1-24b")
    vision = select(spec, "vision")
    with pytest.raises(TfcalcError, match="batch_size=2: .* one sequence"):
        count(vision, Workload(batch_size=2, seq_len=12100))
    with pytest.raises(TfcalcError, match="seq_len=100: .* a multiple of"):
        count(vision, Workload(batch_size=1, seq_len=100))
