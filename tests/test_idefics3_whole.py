"""Idefics3 and SmolVLM read whole (tfcalc/families/idefics3.py): the SigLIP-like vision tower (idefics3_vision,
smolvlm_vision), the pixel shuffle and modality_projection, the language model and lm_head, exact against
transformers' generation class on meta (parameters per component, FlopCounterMode over the class traced by parts) and
the tower alone against its own class; the images' tokens in the prompt against the model cards' published counts."""

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

TEXT = {"model_type": "llama", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}
# a tower of 4 x 4 patches of 8 pixels, 48 wide
VISION = {"hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
          "image_size": 32, "patch_size": 8}
CLASSES = {"idefics3": (transformers.Idefics3ForConditionalGeneration, transformers.Idefics3VisionTransformer,
                        "idefics3_vision"),
           "smolvlm": (transformers.SmolVLMForConditionalGeneration, transformers.SmolVLMVisionTransformer,
                       "smolvlm_vision")}
# the tower: the patches' Conv2d with its bias, the position table of 4 * 4 rows, two blocks (two LayerNorms, q, k, v
# and out with biases, fc1 and fc2 with biases), post_layernorm
TOWER = (3 * 8 * 8 * 48 + 48) + 16 * 48 + 2 * (4 * 48 + 4 * (48 * 48 + 48) + 48 * 96 + 96 + 96 * 48 + 48) + 2 * 48


def config(model_type: str, **outer) -> dict:
    vision = {**VISION, "model_type": CLASSES[model_type][2]}
    return {"model_type": model_type, "image_token_id": 299, "scale_factor": 2, "text_config": TEXT,
            "vision_config": vision, **outer}


@pytest.mark.parametrize("model_type", CLASSES)
def test_whole_equals_its_generation_class(tmp_path, model_type):
    whole, tower, tower_type = CLASSES[model_type]
    cfg = config(model_type)
    path = write(tmp_path, cfg)
    source = read_hf_config(path)
    spec = source.spec
    assert "each image a tile of 32x32" in source.source and "--images counts tiles" in source.source
    workload = Workload(batch_size=2, seq_len=20, images=2)
    result = count(spec, workload)
    assert TOWER == 48_048
    assert result.towers["vision"]["params"] == TOWER == meta_params(tower, cfg["vision_config"])
    # each image's 4 x 4 patches shuffled 2 x 2: 4 tokens of 4 * 48 = 192, modality_projection 192 -> 32, no bias
    assert result.towers["connectors"] == {"params": 192 * 32, "forward": 2 * (2 * 4) * 192 * 32}
    assert image_tokens(spec, workload) == 2 * 4
    assert result.params.total == meta_params(whole, cfg)
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    assert {"modality_projection", "vision/embedding/patch", "head"} <= {r.component for r in report.rows}
    assert check(spec, workload=workload, train=True).match
    # the tower alone (--tower vision) against its own class, traced by parts too
    vision = select(spec, "vision")
    alone = hf_model.compare(path, vision, Workload(batch_size=3, seq_len=16))
    assert alone.match and alone.model_class == tower.__name__, [r for r in alone.rows if r.match is False]


def test_the_cli_checks_the_whole_model_and_the_tower_of_its_own_type(tmp_path):
    path = write(tmp_path, config("idefics3"))
    whole = runner.invoke(app, ["check", "--hf-config", str(path), "--images", "2", "-N", "20"])
    assert whole.exit_code == 0 and "transformers: MATCH" in whole.output, whole.output
    # SmolVLM's image_size=384 with patches of 14: its Conv2d reads 27 x 27 patches (the last 6 pixels dropped);
    # here 36 with patches of 8: 4 x 4 patches, images of 32 x 32
    (tmp_path / "uneven").mkdir()
    uneven = config("smolvlm")
    uneven["vision_config"] = {**uneven["vision_config"], "image_size": 36}
    uneven_path = write(tmp_path / "uneven", uneven)
    assert "reads 4x4 patches, 32x32 pixels (the last 4 of each side dropped)" in read_hf_config(uneven_path).source
    checked = runner.invoke(app, ["check", "--hf-config", str(uneven_path), "--images", "3", "-N", "20"])
    assert checked.exit_code == 0 and "transformers: MATCH" in checked.output, checked.output
    (tmp_path / "tower").mkdir()
    tower = write(tmp_path / "tower", {**VISION, "model_type": "idefics3_vision"})
    # its own class at its own size and at another: the position table is read by bucketed positions (a gather)
    for extra in ([], ["--image-size", "16x24"]):
        alone = runner.invoke(app, ["check", "--hf-config", str(tower), "-B", "2", *extra])
        assert alone.exit_code == 0 and "transformers: MATCH" in alone.output, alone.output


def test_a_vision_config_of_the_older_spelling_and_a_foreign_tower(tmp_path):
    # SmolVLM-Instruct's vision_config names model_type "idefics3" (the outer type): read as idefics3_vision
    older = config("idefics3")
    older["vision_config"] = {**VISION, "model_type": "idefics3"}
    result = read_hf_config(write(tmp_path, older))
    assert "vision_config.model_type='idefics3' read as 'idefics3_vision'" in result.source
    (tmp_path / "foreign").mkdir()
    foreign = config("idefics3")
    foreign["vision_config"] = {**VISION, "model_type": "siglip_vision_model"}
    out = runner.invoke(app, ["count", "--hf-config", str(write(tmp_path / "foreign", foreign))])
    assert out.exit_code == 2 and "vision_config.model_type='siglip_vision_model' tower is not modelled yet; " \
                                  "--tower text counts its language model alone" in out.output, out.output


def test_an_image_the_connector_cannot_read_is_refused_by_name(tmp_path):
    path = write(tmp_path, config("idefics3"))
    # pixel_shuffle reshapes the tower's output to its own square grid: another image size is not read
    other = runner.invoke(app, ["count", "--hf-config", str(path), "--image-size", "64"])
    assert other.exit_code == 2 and "modality_projection reads images of 32x32 alone" in other.output, other.output
    # 4 x 4 patches do not divide into 3 x 3 blocks: the whole model refused, its language model still read
    (tmp_path / "three").mkdir()
    three = write(tmp_path / "three", config("idefics3", scale_factor=3))
    out = runner.invoke(app, ["count", "--hf-config", str(three)])
    assert out.exit_code == 2 and "4x4 vision patches do not divide into 3x3 blocks" in out.output, out.output
    assert "Traceback" not in out.output
    text = runner.invoke(app, ["count", "--hf-config", str(three), "--tower", "text"])
    assert text.exit_code == 0, text.output
    (tmp_path / "bad").mkdir()
    bad = runner.invoke(app, ["count", "--hf-config", str(write(tmp_path / "bad", config("smolvlm",
                                                                                        scale_factor=0)))])
    assert bad.exit_code == 2 and "scale_factor=0" in bad.output, bad.output


@pytest.mark.parametrize("model_type, side, patch, scale, tokens", [
    # HuggingFaceM4/Idefics3-8B-Llama3's model card: "169 visual tokens to encode a image of size 364x364"
    # (SigLIP so400m's 14-pixel patches: 26 x 26, shuffled 2 x 2)
    ("idefics3", 364, 14, 2, 169),
    # HuggingFaceTB/SmolVLM-Instruct's model card: "81 visual tokens to encode image patches of size 384*384"
    # (27 x 27 patches of 14, shuffled 3 x 3)
    ("idefics3", 384, 14, 3, 81),
])
def test_the_tokens_of_an_image_are_the_model_cards(tmp_path, model_type, side, patch, scale, tokens):
    cfg = config(model_type, scale_factor=scale)
    cfg["vision_config"] = {**cfg["vision_config"], "image_size": side, "patch_size": patch}
    spec = read_hf_config(write(tmp_path, cfg)).spec
    assert image_tokens(spec, Workload(batch_size=1, seq_len=1024, images=5)) == 5 * tokens
    assert (side // patch) ** 2 // scale ** 2 == tokens
    # the position table has a row per patch, as the class builds it (384 // 14 = 27 per side: 6 pixels dropped)
    assert count(spec, Workload(seq_len=1024)).towers["vision"]["params"] == meta_params(CLASSES[model_type][1], cfg["vision_config"])
