"""The train step's memory of models of images and audio (ViT, CLIP's and SigLIP's vision towers, Whisper) against
torch's MemTracker on the reference model, and of a multimodal model whole (every tower and the connectors)."""

import pytest
from hf_oracle import write
from typer.testing import CliRunner

from tfcalc import count
from tfcalc.arch import default_workload
from tfcalc.arch.towers import select, text_workload, tower_workload
from tfcalc.cli import app
from tfcalc.errors import TfcalcError
from tfcalc.hf import read_hf_config
from tfcalc.plan.training import Layout, training_memory
from tfcalc.verify.memory_check import check_memory

runner = CliRunner()

VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "image_size": 32, "patch_size": 8}
CONFIGS = {
    "vit": {"model_type": "vit", **VISION},
    "clip_vision_model": {"model_type": "clip_vision_model", **VISION},  # quick_gelu, post_layernorm on the class token
    "siglip_vision_model": {"model_type": "siglip_vision_model", **VISION},  # the attention-pooling head
    "whisper": {"model_type": "whisper", "d_model": 32, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
                "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
                "vocab_size": 100, "max_source_positions": 16, "max_target_positions": 32, "num_mel_bins": 8},
}


def _spec(tmp_path, name):
    return read_hf_config(write(tmp_path, CONFIGS[name])).spec


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("precision,recompute,attention", [("bf16-mixed", "none", "fused"), ("fp32", "none", "eager"),
                                                           ("bf16-mixed", "full", "fused"),
                                                           ("bf16-mixed", "selective", "eager")])
def test_train_step_of_a_model_of_images_or_audio_is_what_memtracker_measures(tmp_path, name, precision, recompute,
                                                                              attention):
    spec = _spec(tmp_path, name)
    workload = default_workload(spec).model_copy(update={"phase": "train", "batch_size": 2})
    report = check_memory(spec, workload, precision, recompute=recompute, attention=attention, device="meta")
    rows = {r.category: r for r in report.rows}
    for category in ("weights", "gradients", "optimizer states", "master weights", "activations (end of forward)"):
        assert rows[category].analytic == rows[category].measured, (category, rows[category])
    assert report.match


def test_whispers_frozen_position_table_has_weights_and_no_gradient(tmp_path):
    spec = _spec(tmp_path, "whisper")
    plan = training_memory(spec, default_workload(spec).model_copy(update={"phase": "train"}), "fp32")
    # embed_positions [max_source_positions, d_model] = [16, 32], requires_grad False in transformers' WhisperEncoder
    frozen = 16 * 32
    assert plan.stage.params == count(spec).params.total
    assert plan.weights == 4 * count(spec).params.total
    assert plan.gradients == 4 * (count(spec).params.total - frozen)


def test_at_batch_1_the_class_tokens_gradient_keeps_the_embeddings_gradient(tmp_path):
    spec = _spec(tmp_path, "vit")
    report = check_memory(spec, default_workload(spec).model_copy(update={"phase": "train"}), device="meta")
    gradients = next(r for r in report.rows if r.category == "gradients")
    # expand's backward at batch 1 returns the [1, 17, 32] gradient as it is: the class token's .grad is a view of it,
    # its storage 17 x 32 bf16 values where the plan counts 32 (the other 16 x 32 named on the row)
    assert gradients.difference == gradients.known == 16 * 32 * 2
    assert "class token" in gradients.note and report.match


QWEN_VL = {"model_type": "qwen2_5_vl",
           "text_config": {"model_type": "qwen2_5_vl_text", "vocab_size": 300, "hidden_size": 32,
                           "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "max_position_embeddings": 128,
                           "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}},
           "vision_config": {"model_type": "qwen2_5_vl_vision", "depth": 2, "hidden_size": 32, "intermediate_size": 40,
                             "out_hidden_size": 32, "num_heads": 2, "patch_size": 2, "spatial_merge_size": 2,
                             "temporal_patch_size": 2, "window_size": 8, "fullatt_block_indexes": [1]},
           "image_token_id": 299, "video_token_id": 298, "vision_start_token_id": 297}


def test_a_multimodal_train_step_is_every_towers_and_the_connectors(tmp_path):
    spec = read_hf_config(write(tmp_path, QWEN_VL)).spec
    # two images of 16 x 24 pixels: 8 x 12 patches each, merged 2 x 2 into 24 tokens of the prompt each
    workload = default_workload(spec).model_copy(update={"phase": "train", "batch_size": 2, "seq_len": 40,
                                                         "images": 2, "image_size": (16, 24)})
    whole = training_memory(spec, workload)
    text = training_memory(select(spec, "text"), text_workload(spec, workload))
    vision = training_memory(select(spec, "vision"), tower_workload(spec, "vision", workload).model_copy(
        update={"phase": "train"}))
    assert whole.stage.params == count(spec, workload).params.total == text.stage.params + vision.stage.params
    assert whole.weights == text.weights + vision.weights  # bf16-mixed: 2 bytes a parameter
    assert whole.gradients == text.gradients + vision.gradients
    assert whole.master_weights == text.master_weights + vision.master_weights
    # every record of the vision tower keeps what it keeps alone, named under the tower; the language model's its own
    components = whole.stage.activation_components
    assert {k.removeprefix("vision/"): v for k, v in components.items() if k.startswith("vision/")} \
        == {k: v for k, v in vision.stage.activation_components.items() if k != "loss"}
    assert {k: v for k, v in components.items() if not k.startswith("vision/")} == text.stage.activation_components
    assert whole.stage.activations == text.stage.activations + vision.stage.activations - \
        vision.stage.activation_components["loss"]  # the tower's output feeds the prompt: no loss of its own
    for layout, flag in (({"tp": 2}, "tp=2"), ({"pp": 2}, "pp=2"), ({"cp": 2}, "cp=2")):
        with pytest.raises(TfcalcError, match=f"^{flag}: .* tower beside its language model"):
            training_memory(spec, workload, layout=Layout(**layout))


def test_the_cli_plans_and_checks_them(tmp_path):
    vit = runner.invoke(app, ["memory", "-p", "vit-b16", "--phase", "train", "--images", "4", "--json"])
    assert vit.exit_code == 0, vit.output
    path = write(tmp_path, QWEN_VL)
    planned = runner.invoke(app, ["memory", "--hf-config", str(path), "--phase", "train", "-N", "64", "--images",
                                  "2", "--image-size", "16x24"])
    assert planned.exit_code == 0 and "vision/attention" in planned.output, planned.output
    split = runner.invoke(app, ["memory", "--hf-config", str(path), "--phase", "train", "--tp", "2", "-N", "64",
                                "--image-size", "16x24"])
    assert split.exit_code == 2 and split.output.startswith("tfcalc: error: tp=2: ") \
        and len(split.output.strip().splitlines()) == 1, split.output
    measured = runner.invoke(app, ["check", "--memory", "--hf-config", str(path)])
    assert measured.exit_code == 2 and "one tower at a time (--tower text, --tower vision)" in measured.output
