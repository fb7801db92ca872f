"""Whole multimodal configs read with their towers (clip, siglip): exact against transformers' whole class (CLIPModel,
SiglipModel on meta: parameters per component, FlopCounterMode over one eager forward on texts and images, the
dual encoder's logits matmul included), per tower against the tower's own class, and the CLIP ViT-L/14 pin."""

import json

import pytest
import transformers
from hf_oracle import meta_params, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.arch.towers import select
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()

# openai/clip-vit-large-patch14's sizes (the preset's source says where each was read)
CLIP_L14 = {"model_type": "clip", "architectures": ["CLIPModel"], "projection_dim": 768,
            "text_config": {"model_type": "clip_text_model", "hidden_act": "quick_gelu", "hidden_size": 768,
                            "intermediate_size": 3072, "max_position_embeddings": 77, "num_attention_heads": 12,
                            "num_hidden_layers": 12, "projection_dim": 768, "vocab_size": 49408},
            "vision_config": {"model_type": "clip_vision_model", "hidden_act": "quick_gelu", "hidden_size": 1024,
                              "image_size": 224, "intermediate_size": 4096, "num_attention_heads": 16,
                              "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768}}
L14_TEXT = 49408 * 768 + 77 * 768 + 12 * (4 * (768 * 768 + 768) + 2 * 768 * 3072 + 3072 + 768 + 4 * 768) + 2 * 768
L14_VISION = (3 * 14 * 14 * 1024 + 1024 + 257 * 1024 + 2 * 1024  # patches (no bias), class token, table, pre-norm
              + 24 * (4 * (1024 * 1024 + 1024) + 2 * 1024 * 4096 + 4096 + 1024 + 4 * 1024) + 2 * 1024)


def test_clip_vit_l14_is_427_616_513_parameters_as_clipmodel(tmp_path):
    assert (L14_TEXT, L14_VISION) == (123_060_480, 303_179_776)
    total = L14_TEXT + L14_VISION + 1024 * 768 + 768 * 768 + 1  # the projections (no biases) and logit_scale
    assert total == 427_616_513
    spec = read_hf_config(write(tmp_path, CLIP_L14)).spec
    assert count(spec).params.total == total == meta_params(transformers.CLIPModel, CLIP_L14)
    assert count(load_preset("clip-vit-l14")).params.total == total
    assert load_preset("clip-vit-l14").replace(name=None) == spec.replace(name=None)
    result = count(spec)
    assert result.towers["text"]["params"] == L14_TEXT == meta_params(transformers.CLIPTextModel,
                                                                         CLIP_L14["text_config"])
    assert result.towers["vision"]["params"] == L14_VISION
    assert count(select(spec, "vision")).params.total == meta_params(transformers.CLIPVisionModel,
                                                                     CLIP_L14["vision_config"])
    # the logits: one image's 768-wide embedding against one text's
    assert result.flops.components["logits"] == 2 * 1 * 768 * 1


def _tiny(kind: str, D_t: int, D_v: int, heads: int, layers: int, side: int, patch: int, P: int) -> dict:
    text = {"vocab_size": 97, "hidden_size": D_t, "intermediate_size": 2 * D_t, "num_hidden_layers": layers,
            "num_attention_heads": heads, "max_position_embeddings": 12}
    vision = {"hidden_size": D_v, "intermediate_size": 2 * D_v, "num_hidden_layers": layers,
              "num_attention_heads": heads, "image_size": side, "patch_size": patch}
    if kind == "clip":
        return {"model_type": "clip", "projection_dim": P,
                "text_config": {"model_type": "clip_text_model", **text},
                "vision_config": {"model_type": "clip_vision_model", **vision}}
    return {"model_type": "siglip", "text_config": {"model_type": "siglip_text_model", **text, "projection_size": D_v},
            "vision_config": {"model_type": "siglip_vision_model", **vision}}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["clip", "siglip"]), heads=st.sampled_from([1, 2, 4]), layers=st.integers(1, 2),
       grid=st.integers(1, 3), patch=st.sampled_from([4, 8]), texts=st.integers(1, 2), images=st.integers(1, 3),
       P=st.sampled_from([8, 24]))
def test_whole_dual_encoders_equal_transformers(tmp_path, kind, heads, layers, grid, patch, texts, images, P):
    config = _tiny(kind, 8 * heads, 12 * heads, heads, layers, grid * patch, patch, P)
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    workload = Workload(batch_size=texts, seq_len=12, images=images)
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows[("forward", "logits")].transformers == 2 * texts * images * (P if kind == "clip" else 12 * heads)
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    assert check(spec, workload=workload, train=True).match


def test_siglip_projection_must_meet_the_vision_width(tmp_path):
    config = _tiny("siglip", 16, 24, 2, 1, 16, 8, 8)
    config["text_config"]["projection_size"] = 16
    with pytest.raises(TfcalcError, match=r"text_config.projection_size=16 is not modelled beside "
                                          r"vision_config.hidden_size=24"):
        read_hf_config(write(tmp_path, config))


def test_one_tower_of_a_whole_config_is_its_own_class(tmp_path):
    config = _tiny("clip", 16, 24, 2, 2, 16, 8, 8)
    path = write(tmp_path, config)
    for tower, cls, inner in (("text", transformers.CLIPTextModel, "text_config"),
                              ("vision", transformers.CLIPVisionModel, "vision_config")):
        out = runner.invoke(app, ["count", "--hf-config", str(path), "--tower", tower, "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.output)["params"]["total"] == meta_params(cls, config[inner])
        checked = runner.invoke(app, ["check", "--hf-config", str(path), "--tower", tower, "-L", "1"])
        assert checked.exit_code == 0 and "transformers: MATCH" in checked.output, checked.output
    whole = runner.invoke(app, ["check", "--hf-config", str(path), "--images", "2", "-B", "3", "--image-size", "24"])
    assert whole.exit_code == 0 and "transformers: MATCH" in whole.output, whole.output
    bad = runner.invoke(app, ["count", "--hf-config", str(path), "--tower", "audio"])
    assert bad.exit_code == 2 and "has no audio tower (it has text, vision)" in bad.output
    decode = runner.invoke(app, ["count", "--hf-config", str(path), "--phase", "decode"])
    assert decode.exit_code == 2 and "encodes texts and images" in decode.output, decode.output


def _wrapper_config(name: str) -> dict:
    from pathlib import Path

    return json.loads((Path(__file__).parent / "data" / "wrapper_configs.json").read_text())[name]["config"]


def test_qwen2_5_vl_7b_is_8_292_166_656_parameters_as_its_generation_class(tmp_path):
    # the language model and head (tests/test_hf_wrappers.py: 28 * 233,057,792 + 2 * 152064 * 3584 + 3584) and the
    # vision tower with its merger (tests/test_qwen_vl_vision.py)
    config = _wrapper_config("qwen2.5-vl-7b-instruct")
    spec = read_hf_config(write(tmp_path, config)).spec
    result = count(spec)
    assert result.towers["text"]["params"] == 28 * 233_057_792 + 2 * 152064 * 3584 + 3584 == 7_615_616_512
    assert result.towers["vision"]["params"] == 676_550_144
    assert result.params.total == 8_292_166_656 == meta_params(transformers.Qwen2_5_VLForConditionalGeneration,
                                                                 config)
    assert count(load_preset("qwen2.5-vl-7b")).params.total == 8_292_166_656
    assert load_preset("qwen2.5-vl-7b").replace(name=None) == spec.replace(name=None)
    # one 448 x 448 image: 32 x 32 patches of 14, merged 2 x 2 into 256 tokens of the prompt
    assert "1 image of 448x448 (256 of the tokens)" in runner.invoke(
        app, ["count", "-p", "qwen2.5-vl-7b", "-N", "1024"], env={"COLUMNS": "200"}).output


QWEN_VL = {
    "qwen2_vl": ({"model_type": "qwen2_vl_text"},
                 {"model_type": "qwen2_vl_vision", "depth": 2, "embed_dim": 24, "hidden_size": 32, "num_heads": 2,
                  "mlp_ratio": 2, "patch_size": 2, "spatial_merge_size": 2, "temporal_patch_size": 2}),
    "qwen2_5_vl": ({"model_type": "qwen2_5_vl_text"},
                   {"model_type": "qwen2_5_vl_vision", "depth": 2, "hidden_size": 32, "intermediate_size": 40,
                    "out_hidden_size": 32, "num_heads": 2, "patch_size": 2, "spatial_merge_size": 2,
                    "temporal_patch_size": 2, "window_size": 8, "fullatt_block_indexes": [1]}),
}


@pytest.mark.parametrize("model_type", QWEN_VL)
def test_whole_qwen_vl_equals_its_generation_class(tmp_path, model_type):
    text, vision = QWEN_VL[model_type]
    config = {"model_type": model_type, "text_config": {**text, "vocab_size": 300, "hidden_size": 32,
                                                         "intermediate_size": 64, "num_hidden_layers": 2,
                                                         "num_attention_heads": 4, "num_key_value_heads": 2,
                                                         "max_position_embeddings": 128,
                                                         "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}},
              "vision_config": vision, "image_token_id": 299, "video_token_id": 298, "vision_start_token_id": 297}
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    # two images of 16 x 24 pixels: 8 x 12 patches of 2 each, merged 2 x 2 into 24 tokens of the prompt each
    workload = Workload(batch_size=2, seq_len=40, images=2, image_size=(16, 24))
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    assert check(spec, workload=workload, train=True).match
    assert count(spec, workload).workload.images == 2
    from tfcalc.arch.towers import image_tokens

    assert image_tokens(spec, workload) == 2 * (8 * 12) // 4


def test_whole_gemma3_equals_its_generation_class(tmp_path):
    # a SigLIP tower of 4 x 4 patches pooled 2 x 2 into 4 tokens of the prompt, RMSNorm, one matmul 48 -> 32
    config = {"model_type": "gemma3", "mm_tokens_per_image": 4, "image_token_index": 299, "boi_token_index": 297,
              "eoi_token_index": 298,
              "text_config": {"model_type": "gemma3_text", "vocab_size": 300, "hidden_size": 32,
                              "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                              "num_key_value_heads": 2, "head_dim": 8, "sliding_window": 8,
                              "max_position_embeddings": 64},
              "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 48, "intermediate_size": 96,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8,
                                "vision_use_head": False}}
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    result = count(spec)
    assert result.towers["connectors"]["params"] == 48 + 48 * 32  # mm_soft_emb_norm, mm_input_projection_weight
    assert result.flops.components["multi_modal_projector"] == 2 * 4 * 48 * 32  # 4 pooled tokens of one image
    assert result.params.total == meta_params(transformers.Gemma3ForConditionalGeneration, config)
    report = hf_model.compare(path, spec, Workload(batch_size=1, seq_len=16, images=1))
    assert report.match, [r for r in report.rows if r.match is False]
    assert check(spec, workload=Workload(batch_size=1, seq_len=16, images=1), train=True).match
    other = runner.invoke(app, ["count", "--hf-config", str(path), "--image-size", "64"])
    assert other.exit_code == 2 and "multi_modal_projector reads images of 32x32 alone" in other.output, other.output


def test_whole_llava_equals_its_generation_class_and_another_tower_is_its_language_model(tmp_path):
    config = {"model_type": "llava", "image_token_index": 299,
              "text_config": {"model_type": "llama", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
                              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                              "max_position_embeddings": 128},
              "vision_config": {"model_type": "clip_vision_model", "hidden_size": 48, "intermediate_size": 96,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8}}
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    workload = Workload(batch_size=2, seq_len=40, images=2)
    result = count(spec, workload)
    # each image's 16 patches (its class token dropped, "default"): linear_1 48 -> 32, GELU, linear_2 32 -> 32
    assert result.towers["connectors"] == {"params": 48 * 32 + 32 + 32 * 32 + 32,
                                           "forward": 2 * (2 * 16) * (48 * 32 + 32 * 32)}
    assert result.params.total == meta_params(transformers.LlavaForConditionalGeneration, config)
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert check(spec, workload=workload, train=True).match
    # LLaVA with a tower tfcalc does not read as its vision tower (SigLIP's; CLIP's and Pixtral's it reads:
    # tests/test_pixtral_whole.py): its language model, by --tower text
    (tmp_path / "siglip").mkdir()
    other = write(tmp_path / "siglip", {**config, "vision_config": {"model_type": "siglip_vision_model"}})
    whole = runner.invoke(app, ["count", "--hf-config", str(other)])
    assert whole.exit_code == 2 and "vision_config.model_type='siglip_vision_model' tower is not modelled yet" \
        in whole.output, whole.output
    text = runner.invoke(app, ["count", "--hf-config", str(other), "--tower", "text", "--json"])
    assert json.loads(text.output)["params"]["total"] == count(select(spec, "text")).params.total
