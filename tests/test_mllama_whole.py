"""Llama 3.2 Vision read whole (model_type mllama: MllamaForConditionalGeneration): the language model, the vision
tower (mllama_vision_model: tiles, padding, gated tables, a local and a gated global encoder) and the projector whose
output the cross-attention blocks attend to. Exact against transformers' classes on meta (parameters, per component
and per tower) and FlopCounterMode per component (hf_model.compare, part by part); the reference model's check; the
cross-attended tokens following the images; refusals by name; the preset pinned to the published config."""

import json

import pytest
import transformers
from hf_oracle import meta_params, write
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.arch.towers import select
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()


def vision(**changes) -> dict:
    config = dict(model_type="mllama_vision_model", hidden_size=32, attention_heads=4, num_hidden_layers=4,
                  num_global_layers=2, intermediate_size=48, image_size=28, patch_size=7, max_num_tiles=4,
                  intermediate_layers_indices=[1, 3], vision_output_dim=96, num_channels=3)
    return config | changes


def whole(**changes) -> dict:
    text = dict(model_type="mllama_text_model", vocab_size=120, hidden_size=64, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, intermediate_size=96, cross_attention_layers=[1, 3],
                max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return {"model_type": "mllama", "text_config": text, "vision_config": vision(**changes)}


def test_whole_mllama_equals_its_generation_class(tmp_path):
    config = whole()
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    # two images per sequence, two sequences
    workload = Workload(batch_size=2, seq_len=32, images=4)
    result = count(spec, workload)
    assert result.params.total == meta_params(transformers.MllamaForConditionalGeneration, config)
    assert result.towers["vision"]["params"] == meta_params(transformers.MllamaVisionModel, vision())
    # each tile (28 / 7)^2 + 1 = 17 tokens, padded to 24; 4 tiles: 96 tokens per image in the blocks, 68 out; the
    # projector 96 -> 64 over 4 images' 68 tokens; the mask's bmm [96, 1] @ [1, 96] per image
    assert result.towers["connectors"] == {"params": 96 * 64 + 64, "forward": 2 * (4 * 68) * 96 * 64}
    assert result.flops.components["vision/embedding/tile_mask"] == 4 * 2 * 96 * 96
    # the cross-attention blocks' keys: each sequence its 2 images' 68 tokens, projected to 2 heads of 16, k and v
    assert result.flops.components["cross_attention/kv"] == 2 * 2 * (2 * 2 * 68) * 64 * (2 * 2 * 16)
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if "(unmapped)" in r.component]
    assert check(spec, workload=workload, train=True).match


def test_the_cross_attended_tokens_follow_the_images(tmp_path):
    spec = read_hf_config(write(tmp_path, whole())).spec
    one, two = (count(spec, Workload(batch_size=2, seq_len=32, images=n)).flops.components for n in (2, 4))
    assert two["cross_attention/kv"] == 2 * one["cross_attention/kv"]
    assert two["cross_attention/scores"] == 2 * one["cross_attention/scores"]
    # no --images: one image per sequence
    assert count(spec, Workload(batch_size=2, seq_len=32)).flops.components == one
    # the language model alone keeps its default: one image's 4 x 17 tokens
    assert select(spec, "text").sizes("cross_attention").keys == 68


def test_the_vision_tower_alone_equals_its_class(tmp_path):
    path = write(tmp_path, whole())
    tower = select(read_hf_config(path).spec, "vision")
    assert count(tower).params.total == meta_params(transformers.MllamaVisionModel, vision())
    report = hf_model.compare(path, tower, Workload(batch_size=2, seq_len=96))
    assert report.match, [r for r in report.rows if r.match is False]
    # -L: no one config field holds the tower's 4 local + 2 global blocks; said, and the config's own compared
    cut = hf_model.compare(path, tower.replace(n_layers=5), Workload(batch_size=2, seq_len=96))
    assert cut.match and any("n_layers=5; both sides count the config's own n_layers=6" in n for n in cut.notes)


@pytest.mark.parametrize("changes, message", [
    ({"vision_output_dim": 64}, "vision_config.vision_output_dim=64 is not modelled"),
    ({"max_num_tiles": 2}, "vision_config.max_num_tiles=2 is not modelled"),
    ({"num_global_layers": 0}, "vision_config.num_global_layers=0 is not modelled"),
    ({"intermediate_layers_indices": [1, 4]}, r"vision_config.intermediate_layers_indices=\[1, 4\] is not modelled"),
    ({"image_size": 30}, "vision_config.image_size=30 is not modelled"),
    ({"supported_aspect_ratios": [1, 2]}, "expected a list of lists of integers or null"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError, match=message):
        read_hf_config(write(tmp_path, whole(**changes)))


@pytest.mark.parametrize("workload, message", [
    (Workload(batch_size=2, seq_len=32, images=3), "images=3: .* a multiple of batch_size=2"),
    (Workload(batch_size=2, seq_len=32, images=2, image_size=(56, 56)), "reads tiles of 28x28 alone"),
    (Workload(batch_size=2, seq_len=32, images=2, src_len=10), "src_len=10: .* give the images"),
    (Workload(batch_size=2, seq_len=32, images=0), "images=0: .* skips its cross-attention blocks"),
])
def test_workloads_it_cannot_run_are_refused(tmp_path, workload, message):
    spec = read_hf_config(write(tmp_path, whole())).spec
    with pytest.raises(TfcalcError, match=message):
        count(spec, workload)


def test_the_cli_refuses_an_image_size_in_one_line(tmp_path):
    path = write(tmp_path, whole())
    result = runner.invoke(app, ["count", "--hf-config", str(path), "--image-size", "56"])
    assert result.exit_code == 2 and "reads tiles of 28x28 alone" in result.output
    assert "Traceback" not in result.output


# meta-llama/Llama-3.2-11B-Vision-Instruct's config.json, every key transformers reads (presets/llama3.2-11b-vision.toml
# says where each part was read); intermediate_layers_indices: MllamaVisionConfig's default
PUBLISHED = {
    "model_type": "mllama",
    "text_config": {"model_type": "mllama_text_model", "vocab_size": 128256, "hidden_size": 4096,
                    "intermediate_size": 14336, "num_hidden_layers": 40, "num_attention_heads": 32,
                    "num_key_value_heads": 8, "hidden_act": "silu", "max_position_embeddings": 131072,
                    "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38], "tie_word_embeddings": False,
                    "pad_token_id": 128004},
    "vision_config": {"model_type": "mllama_vision_model", "attention_heads": 16, "hidden_act": "gelu",
                      "hidden_size": 1280, "image_size": 560, "intermediate_size": 5120, "max_num_tiles": 4,
                      "num_channels": 3, "num_global_layers": 8, "num_hidden_layers": 32, "patch_size": 14,
                      "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]],
                      "vision_output_dim": 7680},
}


def test_the_preset_is_the_published_model_whole(tmp_path):
    spec = load_preset("llama3.2-11b-vision")
    result = count(spec)
    # Meta's model card: 10.6B
    assert result.params.total == meta_params(transformers.MllamaForConditionalGeneration, PUBLISHED) \
        == 10_670_220_835
    assert result.towers["vision"]["params"] == meta_params(transformers.MllamaVisionModel,
                                                            PUBLISHED["vision_config"]) == 863_567_379
    assert result.towers["connectors"]["params"] == 7680 * 4096 + 4096
    read = read_hf_config(write(tmp_path, PUBLISHED)).spec
    assert read.replace(name=spec.name, seq_len=spec.seq_len) == spec
    # one image per sequence: 4 tiles of (560 / 14)^2 + 1 = 1601 tokens, each padded to 1608 in the tower
    assert spec.towers["vision"].seq_len == 4 * 1608
    work = Workload(batch_size=1, seq_len=64)
    assert count(spec, work).flops.components["cross_attention/kv"] == 8 * 2 * 6404 * 4096 * 2 * 8 * 128
    out = runner.invoke(app, ["count", "--preset", "llama3.2-11b-vision", "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["params"]["total"] == 10_670_220_835
