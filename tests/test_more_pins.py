"""Pins of published configs read whole (issue 21): SigLIP so400m/14 at 384 (google/siglip-so400m-patch14-384) as
SiglipModel, its parameters per tower and in total against transformers' classes on meta and against the count
published beside the checkpoint, its forward FLOPs per component against FlopCounterMode over SiglipModel's eager
forward on meta; and SigLIP's image_size that is not a multiple of its patch (384 with patches of 14), read as the
pixels the Conv2d covers, as transformers builds it."""

import pytest
import transformers
from hf_oracle import meta_params, write
from typer.testing import CliRunner

from tfcalc import Workload, count, load_preset
from tfcalc.arch.towers import select
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()

# google/siglip-so400m-patch14-384's config.json, every key that changes a count (the preset's source says where it
# was read); the rest are SiglipTextConfig's and SiglipVisionConfig's defaults (vocab_size 32000,
# max_position_embeddings 64, projection_size = hidden_size, num_channels 3, vision_use_head true, gelu_pytorch_tanh)
SO400M = {"architectures": ["SiglipModel"], "model_type": "siglip",
          "text_config": {"hidden_size": 1152, "intermediate_size": 4304, "model_type": "siglip_text_model",
                          "num_attention_heads": 16, "num_hidden_layers": 27},
          "vision_config": {"hidden_size": 1152, "image_size": 384, "intermediate_size": 4304,
                            "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                            "patch_size": 14}}
D, F, L, V, T = 1152, 4304, 27, 32000, 64
BLOCK = 4 * (D * D + D) + (D * F + F) + (F * D + D) + 2 * 2 * D  # q, k, v, out; fc1, fc2; two LayerNorms
P = (384 // 14) ** 2  # 27 x 27 = 729 patches: the Conv2d (stride 14, no padding) drops the last 6 pixels of a side
SO400M_TEXT = V * D + T * D + L * BLOCK + 2 * D + (D * D + D)  # tokens, positions, blocks, final_layer_norm, head
SO400M_VISION = (3 * 14 * 14 * D + D + P * D + L * BLOCK + 2 * D  # patches with a bias, positions, post_layernorm
                 + D + (3 * D * D + 3 * D) + (D * D + D) + 2 * D + (D * F + F) + (F * D + D))  # the pooling head


def test_siglip_so400m_is_877_960_498_parameters_as_siglipmodel(tmp_path):
    assert (SO400M_TEXT, SO400M_VISION) == (449_734_896, 428_225_600)
    total = SO400M_TEXT + SO400M_VISION + 2  # logit_scale and logit_bias
    # published: embeddings-benchmark/mteb (mteb/models/model_implementations/siglip_models.py) gives
    # google/siglip-so400m-patch14-384 n_parameters=877960498 and n_embedding_parameters=36864000 (= V x D)
    assert total == 877_960_498 and V * D == 36_864_000
    read = read_hf_config(write(tmp_path, SO400M))
    spec = read.spec
    assert count(spec).params.total == total == meta_params(transformers.SiglipModel, SO400M)
    preset = load_preset("siglip-so400m")
    assert preset.replace(name=None) == spec.replace(name=None)
    assert count(preset).params.total == total
    result = count(spec)
    assert result.towers["text"]["params"] == SO400M_TEXT == meta_params(transformers.SiglipTextModel,
                                                                            SO400M["text_config"])
    assert result.towers["vision"]["params"] == SO400M_VISION == meta_params(transformers.SiglipVisionModel,
                                                                                SO400M["vision_config"])
    assert count(select(spec, "vision")).params.total == SO400M_VISION
    # the default workload: one text of 64 tokens, one image of the 378 x 378 pixels the Conv2d reads
    assert spec.towers["vision"].seq_len == P == 729
    assert spec.towers["vision"].kinds["patch_embedding"]["image_size"] == 378


def test_siglip_so400m_forward_equals_transformers_per_component(tmp_path):
    """FlopCounterMode over SiglipModel's eager forward on meta (every matmul of both towers, the pooling head, the
    logits), per component, for two texts and two images."""
    path = write(tmp_path, SO400M)
    spec = read_hf_config(path).spec
    workload = Workload(batch_size=2, seq_len=64, images=2)
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows[("forward", "logits")].transformers == 2 * 2 * 2 * D  # [2 texts, D] @ [D, 2 images]
    # the patches: [2 images x 729, 3 x 14 x 14] @ [588, 1152]
    assert rows[("forward", "vision/embedding/patch")].transformers == 2 * 2 * P * 3 * 14 * 14 * D


@pytest.mark.parametrize("side, patch", [(10, 4), (23, 8)])
def test_siglip_image_size_not_a_multiple_of_the_patch_is_the_pixels_the_conv_reads(tmp_path, side, patch):
    """transformers' SiglipVisionEmbeddings builds (image_size // patch_size) ** 2 patches and position rows; an image
    of image_size pixels gives exactly those patches (the Conv2d drops the rest). Read as images of the covered side,
    noted, exact against SiglipModel per component and under check."""
    config = {"model_type": "siglip",
              "text_config": {"model_type": "siglip_text_model", "vocab_size": 97, "hidden_size": 16,
                              "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                              "max_position_embeddings": 12, "projection_size": 24},
              "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 24, "intermediate_size": 48,
                                "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": side,
                                "patch_size": patch}}
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    covered = side // patch * patch
    assert spec.towers["vision"].kinds["patch_embedding"]["image_size"] == covered
    assert spec.towers["vision"].seq_len == (side // patch) ** 2
    assert count(spec).params.total == meta_params(transformers.SiglipModel, config)
    workload = Workload(batch_size=2, seq_len=12, images=2)
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    assert check(spec, workload=workload, train=True).match
    out = runner.invoke(app, ["count", "--hf-config", str(path)])
    assert out.exit_code == 0, out.output
    assert (f"image_size={side} is not a multiple of patch_size={patch}: its Conv2d reads "
            f"{side // patch}x{side // patch} patches") in " ".join(out.output.split())


# google/vit-base-patch16-224's and google/vit-large-patch16-224's config.json (presets/vit-b16.toml and vit-l16.toml
# say where each was read): every key that changes a count; the 1,000 ImageNet-1k labels of id2label (their names do
# not change a count) as 1,000 entries
LABELS = {str(i): f"LABEL_{i}" for i in range(1000)}
VIT_B16 = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 768,
           "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
           "image_size": 224, "patch_size": 16, "num_channels": 3, "qkv_bias": True, "id2label": LABELS}
VIT_L16 = dict(VIT_B16, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)


def _vit_forward(cls, config: dict) -> int:
    """FlopCounterMode over one eager forward of one 224 x 224 image through transformers' `cls` built on meta."""
    import warnings

    import torch
    from hf_oracle import hf_config
    from torch.utils.flop_counter import FlopCounterMode

    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = cls._from_config(hf_config(config), attn_implementation="eager").eval()
        images = torch.empty(1, 3, 224, 224)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(pixel_values=images)
    return counter.get_total_flops()


def test_vit_b16_is_86_389_248_parameters_and_35_127_300_096_flops_as_vitmodel(tmp_path):
    # issue 21's figures of ViT-B/16 at 224 as ViTModel (AutoModel: no architectures, its pooler), built by
    # transformers: the arithmetic is in tests/test_vit.py (VIT_B16_PARAMS, VIT_B16_FORWARD)
    plain = {k: v for k, v in VIT_B16.items() if k not in ("architectures", "id2label")}
    assert meta_params(transformers.ViTModel, plain) == 86_389_248
    assert _vit_forward(transformers.ViTModel, plain) == 35_127_300_096
    spec = read_hf_config(write(tmp_path, plain)).spec
    assert (count(spec).params.total, count(spec).flops.forward) == (86_389_248, 35_127_300_096)
    # the preset: ViTForImageClassification, the pooler replaced by the 768 -> 1,000 classifier with a bias
    preset = load_preset("vit-b16")
    classifier = read_hf_config(write(tmp_path, VIT_B16)).spec
    assert preset.replace(name=None) == classifier.replace(name=None)
    total = 86_389_248 - (768 * 768 + 768) + (768 * 1000 + 1000)
    assert count(preset).params.total == total == meta_params(transformers.ViTForImageClassification, VIT_B16)
    assert count(preset).flops.forward == _vit_forward(transformers.ViTForImageClassification, VIT_B16) \
        == 35_127_300_096 - 2 * 768 * 768 + 2 * 768 * 1000


def test_vit_l16_preset_is_its_published_config_as_transformers_builds_it(tmp_path):
    preset = load_preset("vit-l16")
    assert preset.replace(name=None) == read_hf_config(write(tmp_path, VIT_L16)).spec.replace(name=None)
    # 304,326,632 x 4 bytes: the hub's pytorch_model.bin of 1.22 GB (the arithmetic: tests/test_vit.py)
    assert count(preset).params.total == meta_params(transformers.ViTForImageClassification, VIT_L16) \
        == 304_326_632
    assert count(preset).flops.forward == _vit_forward(transformers.ViTForImageClassification, VIT_L16)


# meta-llama/Llama-4-Maverick-17B-128E-Instruct's config.json as ai-dynamo/aiconfigurator vendors it
# (aic-core/src/aiconfigurator_core/model_configs/meta-llama--Llama-4-Maverick-17B-128E-Instruct_config.json, commit
# 64c5ddb), every key but torch_dtype, transformers_version and the text config's rope_scaling (null)
MAVERICK_WHOLE = {
    "architectures": ["Llama4ForConditionalGeneration"], "boi_token_index": 200080, "eoi_token_index": 200081,
    "image_token_index": 200092, "model_type": "llama4",
    "text_config": {"attention_bias": False, "attention_chunk_size": 8192, "attention_dropout": 0.0, "head_dim": 128,
                    "hidden_act": "silu", "hidden_size": 5120, "interleave_moe_layer_step": 2,
                    "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 1048576,
                    "model_type": "llama4_text", "num_attention_heads": 40, "num_experts_per_tok": 1,
                    "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 128,
                    "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
                    "router_aux_loss_coef": 0.001, "use_cache": True, "use_qk_norm": False, "vocab_size": 202048},
    "vision_config": {"attention_dropout": 0.0, "hidden_act": "gelu", "hidden_size": 1408, "image_size": 336,
                      "initializer_range": 0.02, "intermediate_size": 5632, "model_type": "llama4_vision_model",
                      "multi_modal_projector_bias": False, "norm_eps": 0.00001, "num_attention_heads": 16,
                      "num_channels": 3, "num_hidden_layers": 34, "patch_size": 14, "pixel_shuffle_ratio": 0.5,
                      "projector_dropout": 0.0, "projector_input_dim": 4096, "projector_output_dim": 4096,
                      "rope_theta": 10000, "vision_feature_layer": -1, "vision_feature_select_strategy": "default",
                      "vision_output_dim": 4096}}


def test_llama4_maverick_is_401_583_781_376_parameters_as_its_generation_class(tmp_path):
    from tfcalc.arch.towers import image_tokens

    d, f, p = 1408, 5632, 4096
    # the vision tower (Scout's: tests/test_llama4_whole.py): patches without a bias, class token, 577 positions,
    # layernorm_pre; 34 blocks of two LayerNorms, q/k/v/o and fc1/fc2 with biases; layernorm_post; the adapter
    vision = (3 * 14 * 14 * d + d + (24 * 24 + 1) * d + 2 * d
              + 34 * (2 * 2 * d + 4 * (d * d + d) + d * f + f + f * d + d) + 2 * d + f * p + p * p)
    projector = p * 5120  # linear_1, no bias
    language_model = 400_711_848_960  # Llama4ForCausalLM on meta (tests/test_hf_llama4.py; Meta: ~400B)
    total = language_model + vision + projector
    assert (vision, total) == (850_960_896, 401_583_781_376)
    spec = read_hf_config(write(tmp_path, MAVERICK_WHOLE)).spec
    result = count(spec)
    assert result.params.total == total == meta_params(transformers.Llama4ForConditionalGeneration, MAVERICK_WHOLE)
    assert result.towers["vision"]["params"] == vision == meta_params(transformers.Llama4VisionModel,
                                                                        MAVERICK_WHOLE["vision_config"])
    assert result.towers["connectors"]["params"] == projector
    assert count(select(spec, "text")).params.total == language_model
    assert count(select(spec, "text")).params.active == 17_184_691_200  # Meta: 17B active
    # the preset is the published config, whole
    preset = load_preset("llama4-maverick")
    assert preset.replace(name=None) == spec.replace(name=None, seq_len=preset.seq_len)
    assert count(preset).params.total == total
    # one 336 x 336 tile: 576 patches, the class token dropped, 2 x 2 shuffled into 144 tokens of the prompt
    assert image_tokens(preset, Workload(seq_len=1024, images=1)) == 144
    assert result.flops.components["multi_modal_projector"] == 2 * 144 * p * 5120


# Pixtral 12B as LLaVA with a Pixtral tower (mistral-community/pixtral-12b: LlavaForConditionalGeneration). Its hub
# config.json was not found verbatim in the stored repositories; its text_config and vision_config are read from
# transformers' own tests/models/llava/test_configuration_llava.py (huggingface/transformers, test_pixtral_reload: the
# Pixtral 12B shapes, a Mistral NeMo language model and a vision tower of PixtralVisionConfig's defaults with silu), the
# outer keys LlavaConfig's defaults (multimodal_projector_bias true: Pixtral 12B's projector has biases) but for the
# feature layer and strategy, which change no parameter ("full": every patch, as Pixtral takes them)
PIXTRAL_12B = {
    "model_type": "llava", "architectures": ["LlavaForConditionalGeneration"], "image_token_index": 10,
    "vision_feature_layer": -1, "vision_feature_select_strategy": "full",
    "vision_config": {"model_type": "pixtral", "head_dim": 64, "hidden_act": "silu", "image_size": 1024,
                      "patch_size": 16, "rope_theta": 10000.0},
    "text_config": {"model_type": "mistral", "hidden_size": 5120, "head_dim": 128, "num_attention_heads": 32,
                    "intermediate_size": 14336, "max_position_embeddings": 1024000, "num_hidden_layers": 40,
                    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0,
                    "sliding_window": None, "vocab_size": 131072}}


def test_pixtral_12b_whole_equals_llava_for_conditional_generation(tmp_path):
    # a block: two norms, q 5120 -> 32 x 128, k and v 5120 -> 8 x 128, o, SwiGLU 14336; the token table and an
    # untied head of 131,072 rows, the final norm
    text = 40 * (2 * 5120 + 2 * 5120 * 4096 + 2 * 5120 * 1024 + 3 * 5120 * 14336) + 2 * 131072 * 5120 + 5120
    # patch_conv 3 x 16 x 16 -> 1024 (no bias), ln_pre; 24 blocks of two RMSNorms, q k v o 1024 x 1024, gate up down
    # 1024 x 4096 (PixtralVisionConfig's defaults): Mistral's "400M parameter vision encoder"
    vision = 3 * 16 * 16 * 1024 + 1024 + 24 * (2 * 1024 + 4 * 1024 * 1024 + 3 * 1024 * 4096)
    projector = 1024 * 5120 + 5120 + 5120 * 5120 + 5120  # linear_1, linear_2, with biases
    assert (text, vision, projector) == (12_247_782_400, 403_489_792, 31_467_520)
    spec = read_hf_config(write(tmp_path, PIXTRAL_12B)).spec
    result = count(spec)
    assert [result.towers[t]["params"] for t in ("text", "vision", "connectors")] == [text, vision, projector]
    assert result.params.total == text + vision + projector == 12_682_739_712 == meta_params(
        transformers.LlavaForConditionalGeneration, PIXTRAL_12B)
    assert meta_params(transformers.PixtralVisionModel, PIXTRAL_12B["vision_config"]) == vision
    assert count(select(spec, "text")).params.total == text == meta_params(transformers.MistralForCausalLM,
                                                                            PIXTRAL_12B["text_config"])
