"""CLIP's and SigLIP's single towers (clip_vision_model, clip_text_model, siglip_vision_model, siglip_text_model):
exact against transformers' own classes (sum(numel) on meta; FlopCounterMode over one eager forward on meta, per
component through `check --hf-config`), the CLIP ViT-L/14 towers against the published whole-model figure, the
reference model's new pieces (quick_gelu, the attention-pooling head) under `check`, and the refusals."""

import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, meta_params, write
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count
from tfcalc.arch import build
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import check, hf_model

CLASSES = {  # model_type -> (its config class, the classes tfcalc counts, first the one built without architectures)
    "clip_vision_model": (transformers.CLIPVisionConfig,
                          (transformers.CLIPVisionModel, transformers.CLIPVisionModelWithProjection)),
    "clip_text_model": (transformers.CLIPTextConfig,
                        (transformers.CLIPTextModel, transformers.CLIPTextModelWithProjection)),
    "siglip_vision_model": (transformers.SiglipVisionConfig, (transformers.SiglipVisionModel,)),
    "siglip_text_model": (transformers.SiglipTextConfig, (transformers.SiglipTextModel,)),
}
VISION = ("clip_vision_model", "siglip_vision_model")


@pytest.mark.parametrize("model_type", [*CLASSES, "siglip2_vision_model"])
def test_defaults_are_transformers_defaults(model_type):
    config = (CLASSES[model_type][0] if model_type in CLASSES else transformers.Siglip2VisionConfig)()
    for key, value in DEFAULTS[model_type].items():
        # SiglipTextConfig turns projection_size None into hidden_size (tfcalc's mapper does the same)
        expected = None if (model_type, key) == ("siglip_text_model", "projection_size") else getattr(config, key)
        assert value == expected, key


def _model(config: dict, cls):
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return cls._from_config(hf_config(config), attn_implementation="eager").eval()


def _forward(model, config: dict, batch: int, side: int | None, seq: int) -> int:
    """FlopCounterMode over one eager forward on meta: images of side x side (the position table interpolated when
    that is not the config's), or `seq` token ids."""
    if side is not None:
        inputs = {"pixel_values": torch.empty(batch, config.get("num_channels", 3), side, side, device="meta"),
                  "interpolate_pos_encoding": side != config["image_size"]}
    else:
        inputs = {"input_ids": torch.zeros(batch, seq, dtype=torch.long, device="meta")}
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs)
    return counter.get_total_flops()


towers = st.fixed_dictionaries({
    "model_type": st.sampled_from(list(CLASSES)), "hidden_size": st.sampled_from([16, 32, 48]),
    "num_attention_heads": st.sampled_from([1, 2, 4]), "num_hidden_layers": st.integers(1, 2),
    "intermediate_size": st.integers(8, 64), "patch_size": st.sampled_from([2, 4]), "grid": st.integers(1, 3),
    "num_channels": st.integers(1, 3), "hidden_act": st.sampled_from(["quick_gelu", "gelu_pytorch_tanh", "gelu"]),
    "projection": st.sampled_from([None, 8, 24]), "positions": st.integers(4, 12), "batch": st.integers(1, 2),
    "scale": st.sampled_from([1, 2]), "use_head": st.booleans(), "named": st.booleans(),
})


@settings(max_examples=24, deadline=None)
@given(towers)
def test_towers_are_exact_against_transformers(tmp_path_factory, c):
    """Parameters (sum(numel) on meta) and forward FLOPs (FlopCounterMode over one eager forward on meta: the patch
    Conv2d, the projections, every (query, key) score of the causal CLIP text tower, the pooling head, the
    projections), of each tower and class tfcalc counts, a vision tower also at another image size."""
    model_type = c["model_type"]
    config = {"model_type": model_type, "hidden_size": c["hidden_size"], "hidden_act": c["hidden_act"],
              "num_attention_heads": c["num_attention_heads"], "num_hidden_layers": c["num_hidden_layers"],
              "intermediate_size": c["intermediate_size"]}
    classes = CLASSES[model_type][1]
    cls = classes[-1] if c["named"] else classes[0]
    if c["named"]:
        config["architectures"] = [cls.__name__]
    side = None
    if model_type in VISION:
        side = c["patch_size"] * c["grid"]
        config |= {"image_size": side, "patch_size": c["patch_size"], "num_channels": c["num_channels"]}
    else:
        config |= {"vocab_size": 50, "max_position_embeddings": c["positions"], "pad_token_id": 0,
                   "bos_token_id": 1, "eos_token_id": 2}
    if model_type.startswith("clip") and c["projection"] is not None:
        config["projection_dim"] = c["projection"]
    if model_type == "siglip_text_model":
        config["projection_size"] = c["projection"]
    if model_type == "siglip_vision_model":
        config["vision_use_head"] = c["use_head"]
    spec = read_hf_config(write(tmp_path_factory.mktemp("tower"), config)).spec
    model = _model(config, cls)
    assert count(spec).params.total == sum(p.numel() for p in model.parameters())
    if side is None:  # one text of the whole position table, and a shorter one
        for seq in (c["positions"], c["positions"] - 3):
            workload = Workload(batch_size=c["batch"], seq_len=seq)
            assert count(spec, workload).flops.forward == _forward(model, config, c["batch"], None, seq)
        return
    H = side * c["scale"]
    tokens = (H // c["patch_size"]) ** 2 + (model_type == "clip_vision_model")  # CLIP's class token
    workload = Workload(batch_size=c["batch"], seq_len=tokens, image_size=(H, H))
    assert count(spec, workload).flops.forward == _forward(model, config, c["batch"], H, 0)


SMALL = {"hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 2}
TEXT = {"vocab_size": 100, "max_position_embeddings": 16, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
IMAGE = {"image_size": 32, "patch_size": 8}


@pytest.mark.parametrize("config, rows", [
    ({"model_type": "clip_vision_model", **IMAGE, "architectures": ["CLIPVisionModelWithProjection"],
      "projection_dim": 24},
     {("params", "embedding/class_token"), ("params", "embedding/norm"), ("forward", "embedding/patch"),
      ("params", "final_norm"), ("forward", "projection"), ("params", "projection")}),
    ({"model_type": "clip_text_model", **TEXT, "architectures": ["CLIPTextModelWithProjection"]},
     {("forward", "attention/core"), ("params", "embedding/token"), ("forward", "projection")}),
    ({"model_type": "siglip_vision_model", **IMAGE},
     {("params", "attention_pool/probe"), ("params", "attention_pool/q+kv"), ("params", "attention_pool/out"),
      ("forward", "attention_pool/q+kv+core+out"), ("forward", "attention_pool/up"),
      ("params", "attention_pool/norm"), ("forward", "embedding/patch")}),
    ({"model_type": "siglip_text_model", **TEXT, "projection_size": 20},
     {("forward", "projection"), ("params", "projection"), ("params", "final_norm")}),
])
def test_check_hf_config_matches_every_component(tmp_path, config, rows):
    path = write(tmp_path, {**SMALL, **config})
    spec = read_hf_config(path).spec
    workloads = [Workload(batch_size=2, seq_len=spec.seq_len, image_size=None)]
    if spec.inputs == "images":  # another image size: the position table interpolated on both sides
        workloads.append(Workload(batch_size=2, seq_len=spec.seq_len, image_size=(48, 40)))
    for workload in workloads:
        report = hf_model.compare(path, spec, workload)
        assert report.match and not any(r.component.startswith("(unmapped)") for r in report.rows), report.verdict()
        assert report.model_class == (config.get("architectures") or [report.model_class])[0]
        assert rows <= {(r.figure, r.component) for r in report.rows if r.match}


def test_clip_text_counts_every_score_the_eager_causal_model_computes(tmp_path):
    # CLIPTextModel masks with create_causal_mask and still multiplies all N x N (query, key) pairs: forward has
    # them all, the causal figure the N (N + 1) / 2 the mask keeps. 2 blocks, 2 heads of 16, N = 16, B = 1:
    spec = read_hf_config(write(tmp_path, {"model_type": "clip_text_model", **SMALL, **TEXT})).spec
    assert spec.causal and not spec.lm_head and spec.seq_len == 16
    result = count(spec)
    full = 2 * 2 * (2 * 16 * 16 * 16 * 2)  # blocks * heads * (scores + values: 2 FLOPs * N * N * dh each)
    kept = 2 * 2 * (2 * 136 * 16 * 2)  # 136 = 16 * 17 / 2 pairs
    assert result.flops.components["attention/scores"] + result.flops.components["attention/values"] == full
    assert result.flops.forward - result.flops.forward_causal == full - kept


def test_clip_vision_post_layernorm_works_on_the_pooled_token_only(tmp_path):
    # post_layernorm [D] weight and bias, over the class token of each image: B rows, not B x 17 tokens
    spec = read_hf_config(write(tmp_path, {"model_type": "clip_vision_model", **SMALL, **IMAGE})).spec
    assert spec.pooled_final_norm and spec.embedding_norm and spec.seq_len == 4 * 4 + 1
    inv = build(spec, Workload(batch_size=3, seq_len=17))
    norms = {op.component: op.rows for op, _ in inv if op.role == "norm"}
    assert norms["final_norm"] == 3 and norms["embedding/norm"] == 3 * 17  # pre_layrnorm: every token
    assert count(spec).params.components["final_norm"] == 2 * 32


def test_clip_vit_l14_towers_make_the_published_whole_model(tmp_path):
    # openai/clip-vit-large-patch14: text tower as the hub's text encoder config (a copy in Yee334/diffusion-project,
    # clip-vit-large-patch14/config.json), vision tower as its vision_config (ViT-L/14: 1024 wide, 4096, 16 heads,
    # 24 blocks, 224 pixels, patches of 14; the Stable Diffusion safety checker's CLIPConfig in painebenjamin/taproot)
    text = {"model_type": "clip_text_model", "vocab_size": 49408, "hidden_size": 768, "intermediate_size": 3072,
            "num_attention_heads": 12, "num_hidden_layers": 12, "max_position_embeddings": 77,
            "hidden_act": "quick_gelu", "projection_dim": 768}
    vision = {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
              "num_attention_heads": 16, "num_hidden_layers": 24, "image_size": 224, "patch_size": 14,
              "num_channels": 3, "hidden_act": "quick_gelu", "projection_dim": 768}
    d, f = 768, 3072
    text_params = (49408 * d + 77 * d  # token and position tables
                   + 12 * (4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d)  # blocks
                   + 2 * d)  # final_layer_norm
    d, f = 1024, 4096
    vision_params = (3 * 14 * 14 * d  # the patches' Conv2d, no bias
                     + d + (16 * 16 + 1) * d  # class_embedding, the position table (256 patches + the class token)
                     + 2 * d  # pre_layrnorm
                     + 24 * (4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d)  # blocks
                     + 2 * d)  # post_layernorm
    for config, cls, expected in ((text, transformers.CLIPTextModel, text_params),
                                  (vision, transformers.CLIPVisionModel, vision_params)):
        spec = read_hf_config(write(tmp_path, config)).spec
        assert count(spec).params.total == meta_params(cls, config) == expected
    # CLIPModel = the two towers, visual_projection 1024 -> 768 and text_projection 768 -> 768 (no biases) and
    # logit_scale: the published 427,616,513
    assert text_params + vision_params + 1024 * 768 + 768 * 768 + 1 == 427_616_513


def test_siglip_base_pooling_head(tmp_path):
    # SiglipVisionConfig's defaults (google/siglip-base-patch16-224's tower): D = 768, F = 3,072, 12 heads, 196
    # patches. The head: probe D, in_proj [3D, D] + [3D], out_proj D*D + D, a LayerNorm 2D, fc1 and fc2 with biases
    D, F, H, N = 768, 3072, 12, 196
    params = D + 3 * D * D + 3 * D + D * D + D + 2 * D + D * F + F + F * D + D
    forward = 2 * (D * D + N * D * 2 * D  # q of the probe; k and v of the 196 patches at once
                   + 2 * H * 1 * N * (D // H)  # scores and values: one query per head
                   + D * D + D * F + F * D)  # out_proj, fc1, fc2 on the pooled row
    assert (params, forward) == (7_087_104, 474_820_608)  # docs/formulas.md, Attention pooling
    config = {"model_type": "siglip_vision_model"}
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = transformers.SiglipVisionModel(hf_config(config))
    assert sum(p.numel() for name, p in model.named_parameters() if name.startswith("head.")) == params
    result = count(read_hf_config(write(tmp_path, config)).spec)
    assert sum(v for k, v in result.params.components.items() if k.startswith("attention_pool")) == params
    assert sum(v for k, v in result.flops.components.items() if k.startswith("attention_pool")) == forward


@pytest.mark.parametrize("config", [
    {"model_type": "clip_vision_model", **SMALL, **IMAGE, "architectures": ["CLIPVisionModelWithProjection"]},
    {"model_type": "clip_text_model", **SMALL, **TEXT},
    {"model_type": "siglip_vision_model", **SMALL, **IMAGE},
    {"model_type": "siglip_text_model", **SMALL, **TEXT},
])
def test_reference_model_builds_each_tower_for_check(tmp_path, config):
    """`check` builds the reference model (quick_gelu, the attention-pooling head, the projection, the pooled final
    norm) and its FlopCounterMode forward, per component, and its train step equal the formulas."""
    spec = read_hf_config(write(tmp_path, config)).spec
    report = check(spec, "meta", train=True)
    assert report.match and report.train.match
    components = {row.component for row in report.params}
    if spec.attention_pool:
        assert {"attention_pool/probe", "attention_pool/q", "attention_pool/kv", "attention_pool/out",
                "attention_pool/norm", "attention_pool/up", "attention_pool/down"} <= components
        forward = {row.component: row.flop_counter for row in report.forward}
        # the probe's one query per image against the 16 patches: 2 heads of 16, scores and values, B = 1
        assert forward["attention_pool/core"] == 2 * (2 * 1 * 16 * 16) * 2
    if spec.d_projection:
        assert "projection" in components


def test_quick_gelu_runs_as_transformers_computes_it():
    from transformers.activations import ACT2FN

    from tfcalc.reference.layers import ACTIVATIONS

    x = torch.linspace(-4, 4, 41)
    assert torch.allclose(ACTIVATIONS["quick_gelu"](x), ACT2FN["quick_gelu"](x))


@pytest.mark.parametrize("change, message", [
    ({"model_type": "clip_vision_model", "architectures": ["CLIPForImageClassification"]},
     ("architectures=['CLIPForImageClassification'] is not modelled: CLIPForImageClassification: tfcalc counts "
      "CLIPVisionModel and CLIPVisionModelWithProjection")),
    ({"model_type": "clip_vision_model", "image_size": [224, 224]}, "image_size=[224, 224] is not modelled: one integer"),
    ({"model_type": "clip_vision_model", "image_size": 225},
     "image_size=225 is not modelled: not a multiple of patch_size=32"),
    # (siglip_vision_model reads 225 as the 224 pixels its Conv2d covers: tests/test_more_pins.py; an image smaller
    # than one patch has none)
    ({"model_type": "siglip_vision_model", "image_size": 8}, "image_size=8 is not modelled: not a multiple of "
                                                             "patch_size=16"),
    ({"model_type": "clip_text_model", "architectures": ["CLIPTextModelWithProjection"], "projection_dim": None},
     "projection_dim=None is not modelled"),
    ({"model_type": "siglip_text_model", "hidden_act": "gelu_10"}, "hidden_act='gelu_10' is not modelled"),
    ({"model_type": "siglip_vision_model", "vision_use_head": "true"}, "vision_use_head='true': expected a boolean"),
])
def test_config_refusals_name_the_field(tmp_path, change, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, change))
    assert message in str(e.value)


@pytest.mark.parametrize("args, message", [
    (["-p", "gpt2", "--d-projection", "10"], "d_projection=10 pools one token per sequence of an encoder-only model "
                                             "without an LM head; set lm_head=False"),
    (["-p", "gpt2", "--attention-pool"], "attention_pool=True pools one token per sequence"),
    (["-p", "bert-base", "--projection-bias"], "projection_bias=True needs d_projection"),
    (["-p", "bert-base", "--pooled-final-norm", "--no-final-norm"], "pooled_final_norm=True needs final_norm=True"),
])
def test_new_spec_fields_refused_by_name_on_the_command_line(args, message):
    from typer.testing import CliRunner

    from tfcalc.cli import app

    r = CliRunner().invoke(app, ["count", *args])
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and message in lines[0], r.output


def _siglip2_forward(config: dict, batch: int, grid: tuple[int, int]) -> int:
    """FlopCounterMode over one eager forward of Siglip2VisionModel on meta: patches flattened by the processor
    [B, h * w, C * p * p], their grid (spatial_shapes; its checks read data, switched off as transformers allows)."""
    import os

    model = _model(config, transformers.Siglip2VisionModel)
    p, C = config["patch_size"], config.get("num_channels", 3)
    inputs = {"pixel_values": torch.empty(batch, grid[0] * grid[1], C * p * p, device="meta"),
              "spatial_shapes": torch.empty(batch, 2, dtype=torch.long, device="meta"), "pixel_attention_mask": None}
    os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = "1"
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(**inputs)
    finally:
        del os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"]
    return counter.get_total_flops()


@settings(max_examples=10, deadline=None)
@given(st.fixed_dictionaries({
    "hidden_size": st.sampled_from([16, 32]), "num_attention_heads": st.sampled_from([1, 2, 4]),
    "num_hidden_layers": st.integers(1, 2), "intermediate_size": st.integers(8, 48),
    "patch_size": st.sampled_from([2, 4]), "side": st.integers(1, 4), "num_channels": st.integers(1, 3),
    "vision_use_head": st.booleans(), "batch": st.integers(1, 2), "grid": st.tuples(st.integers(1, 5),
                                                                                       st.integers(1, 5)),
}))
def test_siglip2_vision_is_exact_against_transformers(tmp_path_factory, c):
    """Siglip2VisionModel: parameters on meta, and forward FLOPs at the table's own square of patches and at another
    grid: the patches' Linear, the table's resampling matmul [B, patches, rows] @ [rows, D], the blocks, the head."""
    config = {"model_type": "siglip2_vision_model", "num_patches": c["side"] ** 2,
              **{k: c[k] for k in ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
                                   "patch_size", "num_channels", "vision_use_head")}}
    spec = read_hf_config(write(tmp_path_factory.mktemp("siglip2"), config)).spec
    assert spec.seq_len == c["side"] ** 2
    assert count(spec).params.total == sum(p.numel() for p in _model(config, transformers.Siglip2VisionModel)
                                           .parameters())
    p = c["patch_size"]
    for h, w in ((c["side"], c["side"]), c["grid"]):
        workload = Workload(batch_size=c["batch"], seq_len=h * w, image_size=(h * p, w * p))
        assert count(spec, workload).flops.forward == _siglip2_forward(config, c["batch"], (h, w))


def test_siglip2_check_hf_config_and_reference(tmp_path):
    config = {"model_type": "siglip2_vision_model", **SMALL, "patch_size": 4, "num_patches": 16}
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    for workload in (Workload(batch_size=2, seq_len=16), Workload(batch_size=2, seq_len=12, image_size=(12, 16))):
        report = hf_model.compare(path, spec, workload)
        assert report.match and not any(r.component.startswith("(unmapped)") for r in report.rows), report.verdict()
        rows = {(r.figure, r.component): r.transformers for r in report.rows if r.match}
        # the table [16, 32] resampled to the image's patches: [2 * patches, 16] @ [16, 32]
        assert rows[("forward", "embedding/position_resize")] == 2 * (2 * workload.seq_len) * 16 * 32
        assert rows[("params", "embedding/position")] == 16 * 32
        assert ("forward", "attention_pool/q+kv+core+out") in rows
    # the reference model builds the resampling (no gradient for its weights: backward = 2 x forward - the patch
    # embedding's and the resampling's forward, as FlopCounterMode's train step counts)
    report = check(spec, "meta", train=True)
    assert report.match and report.train.match
    result = count(spec)
    leaf = result.flops.components["embedding/patch"] + result.flops.components["embedding/position_resize"]
    assert result.flops.backward == 2 * result.flops.forward - leaf


@pytest.mark.parametrize("change, message", [
    ({"num_patches": 250}, "num_patches=250 is not modelled: a square number"),
    ({"patch_size": [16, 16]}, "patch_size=[16, 16] is not modelled: one integer"),
])
def test_siglip2_refusals_name_the_field(tmp_path, change, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "siglip2_vision_model", **change}))
    assert message in str(e.value)
