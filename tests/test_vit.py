"""ViT (vit) and the patch embedding: exact against transformers' ViTModel and ViTForImageClassification (sum(numel)
on meta, FlopCounterMode over one eager forward, the convolution included, per component), the published ViT-B/16
figures, the reference model's patch embedding under `check`, the image workload (--image-size, --images) and its
refusals."""

import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.cli import app
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()

# ViT-B/16 as ViTModel (AutoModel, with its pooler) at 224x224: 196 patches + the class token = 197 tokens
D, F, L, T, P = 768, 3072, 12, 197, 196
VIT_B16_PARAMS = (
    (3 * 16 * 16 * D + D)  # the patches' Conv2d [768, 3, 16, 16] and its bias = 590,592
    + D  # the class token
    + T * D  # the position table, 197 rows = 151,296
    + L * (4 * D * D + 4 * D  # q, k, v, o with their biases
           + D * F + F + F * D + D  # fc1, fc2 with their biases
           + 2 * 2 * D)  # layernorm_before, layernorm_after (weight and bias)
    + 2 * D  # the final layernorm
    + D * D + D  # the pooler's dense
)
VIT_B16_FORWARD = 2 * (
    P * (3 * 16 * 16) * D  # the patches [196, 768] @ [768, 768]
    + L * (T * D * 3 * D + T * D * D + 2 * T * D * F  # q, k, v, o, fc1, fc2 over 197 tokens
           + 2 * 12 * T * T * 64)  # scores and values: 12 heads of 64 over 197 x 197 pairs
    + D * D  # the pooler, on the class token
)


def test_vit_b16_published_figures():
    assert VIT_B16_PARAMS == 86_389_248  # ViTModel's sum(p.numel()) (transformers; timm's vit_base_patch16_224 less
    assert VIT_B16_FORWARD == 35_127_300_096  # its 1,000-class head, plus the pooler)
    # fvcore's 17.58 GMACs of ViT-B/16 at 224 are these multiply-adds and the LayerNorm work fvcore also counts
    # (5 per element of 25 LayerNorms over 197 x 768: 18,912,000); FlopCounterMode, like tfcalc, counts no norm
    assert VIT_B16_FORWARD // 2 == 17_563_650_048
    assert round((VIT_B16_FORWARD // 2 + 5 * 25 * T * D) / 1e9, 2) == 17.58
    spec = load_preset("vit-b16").replace(n_classes=None, pooler=True)
    result = count(spec)
    assert (result.params.total, result.flops.forward) == (VIT_B16_PARAMS, VIT_B16_FORWARD)
    assert result.macs.forward == 17_563_650_048


def test_vit_presets_are_the_classifiers_of_the_published_configs():
    # ViTForImageClassification: ViTModel without its pooler, a classifier 768 -> 1,000 (ImageNet-1k) with a bias
    b16 = count(load_preset("vit-b16"))
    assert b16.params.total == VIT_B16_PARAMS - (D * D + D) + (D * 1000 + 1000) == 86_567_656  # 346 MB in fp32
    assert b16.flops.forward == VIT_B16_FORWARD - 2 * D * D + 2 * D * 1000
    # ViT-L/16: 24 blocks 1024 wide, MLP 4096, 16 heads of 64
    d, f = 1024, 4096
    l16 = (3 * 16 * 16 * d + d) + d + T * d + 24 * (4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d) + 2 * d \
        + d * 1000 + 1000
    assert count(load_preset("vit-l16")).params.total == l16 == 304_326_632  # the hub's 1.22 GB in fp32


def _meta(config: dict, cls):
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return cls._from_config(hf_config(config), attn_implementation="eager").eval()


def _flops(model, images: torch.Tensor, interpolate: bool) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(pixel_values=images, interpolate_pos_encoding=interpolate)
    return counter.get_total_flops()


def test_defaults_are_transformers_defaults():
    config = transformers.ViTConfig()
    for key, value in DEFAULTS["vit"].items():
        expected = None if key == "pooler_output_size" else getattr(config, key)  # None: hidden_size
        assert value == expected, key
    assert config.num_labels == 2 and config.pooler_output_size == config.hidden_size
    # without architectures: ViTModel with its pooler; with ViTForImageClassification and no labels: 2 classes
    assert transformers.AutoModel._model_mapping[type(config)] is transformers.ViTModel


def test_the_class_counted_is_the_one_architectures_names(tmp_path):
    plain = read_hf_config(write(tmp_path, {"model_type": "vit"})).spec
    assert (plain.pooler, plain.n_classes, plain.seq_len, plain.max_positions) == (True, None, 197, 197)
    named = read_hf_config(write(tmp_path, {"model_type": "vit", "architectures": ["ViTForImageClassification"]}))
    assert (named.spec.pooler, named.spec.n_classes) == (False, 2)  # PreTrainedConfig's num_labels
    assert count(named.spec).params.total == VIT_B16_PARAMS - (D * D + D) + (D * 2 + 2)


configs = st.fixed_dictionaries({
    "hidden_size": st.sampled_from([16, 32, 48]), "num_attention_heads": st.sampled_from([1, 2, 4]),
    "num_hidden_layers": st.integers(1, 3), "intermediate_size": st.integers(8, 80),
    "patch_size": st.sampled_from([2, 4, 8]), "grid": st.integers(1, 4), "num_channels": st.integers(1, 4),
    "qkv_bias": st.booleans(), "hidden_act": st.sampled_from(["gelu", "relu", "gelu_new"]),
    "labels": st.sampled_from([None, 0, 1, 7]), "pooler_output_size": st.sampled_from([None, 24]),
    "images": st.integers(1, 3), "scale": st.sampled_from([1, 2]),
})


@settings(max_examples=12, deadline=None)
@given(configs)
def test_vit_is_exact_against_transformers(tmp_path_factory, c):
    """Parameters (sum(numel) on meta) and forward FLOPs (FlopCounterMode over one eager forward on meta: the
    Conv2d, the projections, the attention and the pooler or classifier), at the config's image size and at another
    (the position table interpolated), for ViTModel and ViTForImageClassification."""
    p, side = c["patch_size"], c["patch_size"] * c["grid"]
    config = {"model_type": "vit", "hidden_size": c["hidden_size"], "num_attention_heads": c["num_attention_heads"],
              "num_hidden_layers": c["num_hidden_layers"], "intermediate_size": c["intermediate_size"],
              "image_size": side, "patch_size": p, "num_channels": c["num_channels"], "qkv_bias": c["qkv_bias"],
              "hidden_act": c["hidden_act"], "pooler_output_size": c["pooler_output_size"]}
    cls = transformers.ViTModel
    if c["labels"] is not None:
        config |= {"architectures": ["ViTForImageClassification"], "num_labels": c["labels"]}
        cls = transformers.ViTForImageClassification
    spec = read_hf_config(write(tmp_path_factory.mktemp("vit"), config)).spec
    model = _meta(config, cls)
    assert count(spec).params.total == sum(t.numel() for t in model.parameters())
    H = W = side * c["scale"]
    images = torch.empty(c["images"], c["num_channels"], H, W, device="meta")
    tokens = (H // p) * (W // p) + 1
    workload = Workload(batch_size=c["images"], seq_len=tokens, image_size=(H, W))
    assert count(spec, workload).flops.forward == _flops(model, images, c["scale"] != 1)


def test_check_hf_config_matches_every_component(tmp_path):
    config = {"model_type": "vit", "hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 2,
              "intermediate_size": 40, "image_size": 32, "patch_size": 8, "architectures":
              ["ViTForImageClassification"], "id2label": {"0": "cat", "1": "dog", "2": "bird"}}
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    assert spec.n_classes == 3 and not spec.pooler
    for image in (None, (48, 48)):
        workload = Workload(batch_size=2, seq_len=17 if image is None else 37, image_size=image)
        report = hf_model.compare(path, spec, workload)
        assert report.match, report.verdict()
        rows = {(r.figure, r.component) for r in report.rows if r.match}
        assert {("forward", "embedding/patch"), ("forward", "classifier"), ("params", "embedding/class_token"),
                ("params", "embedding/position")} <= rows


def test_reference_model_builds_the_patch_embedding_for_check():
    spec = load_preset("vit-b16").replace(n_layers=1)
    for workload in (None, Workload(batch_size=2, seq_len=15 * 20 + 1, image_size=(240, 320))):
        report = check(spec, "meta", workload=workload)
        assert report.match
        counted = {row.component: row.flop_counter for row in report.forward}
        assert counted["embedding/patch"] == 2 * (2 * 300 if workload else 196) * 768 * 768
        assert {"embedding/patch", "embedding/class_token", "embedding/position", "classifier"} <= {
            row.component for row in report.params}


def test_train_step_leaves_out_the_images_gradient():
    # FlopCounterMode over forward + backward: the patches' convolution computes its weight gradient, not the
    # images' (they are not trained), so backward = 2 x forward - the patch embedding's forward
    spec = load_preset("vit-b16").replace(n_layers=1)
    workload = Workload(batch_size=2, seq_len=4 * 6 + 1, image_size=(64, 96))
    result = count(spec, workload)
    patch = 2 * (2 * 24) * 768 * 768
    assert result.flops.components["embedding/patch"] == patch
    assert result.flops.backward == 2 * result.flops.forward - patch
    report = check(spec, "meta", train=True, workload=workload)
    assert report.train.match and report.train.flop_counter == result.flops.train_step
    assert result.to_dict()["macs"]["backward"] * 2 == result.flops.backward


@pytest.mark.parametrize("change, message", [
    ({"architectures": ["ViTForMaskedImageModeling"]}, "architectures=['ViTForMaskedImageModeling'] is not modelled"),
    ({"patch_size": [16, 8]}, "patch_size=[16, 8] is not modelled"),
    ({"image_size": 225}, "image_size=225 is not modelled: not a multiple of patch_size=16"),
    ({"image_size": "224"}, "image_size='224': expected a positive integer or a list of them"),
    ({"id2label": {"0": "a"}, "num_labels": 3, "architectures": ["ViTForImageClassification"]},
     "num_labels=3 is not modelled: id2label names 1 labels"),
])
def test_config_refusals_name_the_field(tmp_path, change, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "vit", **change}))
    assert message in str(e.value)


def test_image_workload_on_the_command_line():
    r = runner.invoke(app, ["count", "-p", "vit-b16", "--image-size", "384x224", "--images", "4", "--json"])
    assert r.exit_code == 0, r.output
    import json

    data = json.loads(r.output)
    assert data["workload"]["image_size"] == [384, 224] and data["workload"]["batch_size"] == 4
    assert data["workload"]["seq_len"] == 24 * 14 + 1  # 336 patches and the class token
    r = runner.invoke(app, ["count", "-p", "vit-b16"])
    assert "1 image of 224x224, 197 tokens each; no LM head (a classifier)" in r.output
    # a model of tokens dumps its workload as it always has
    data = json.loads(runner.invoke(app, ["count", "-p", "gpt2", "--json"]).output)
    assert "image_size" not in data["workload"]


@pytest.mark.parametrize("args, message", [
    (["count", "-p", "vit-b16", "--image-size", "225"], "--image-size 225: not a multiple of vit-b16's patch size 16"),
    (["count", "-p", "vit-b16", "--image-size", "22x"], "--image-size 22x: expected H or HxW"),
    (["count", "-p", "vit-b16", "--images", "0"], "--images 0: expected at least one image"),
    (["count", "-p", "gpt2", "--images", "2"], "--images 2: gpt2 reads tokens, not images"),
    (["count", "-p", "gpt2", "--image-size", "224"], "--image-size 224: gpt2 reads tokens, not images"),
    (["count", "-p", "vit-b16", "--seq-len", "100"], "seq_len=100: inputs='images'"),
    (["count", "-p", "vit-b16", "--phase", "decode"], "--phase decode: vit-b16 is a bidirectional encoder of images"),
    (["count", "-p", "vit-b16,vit-l16", "--images", "2"], "--images 2: not with a sweep"),
    (["memory", "-p", "vit-b16", "--tp", "2"], "tp=2: vit-b16 is a model of images; its train step is planned with data"),
    (["infer", "-p", "vit-b16", "--gpu", "h100"], "tfcalc infer: vit-b16 is a model of images"),
])
def test_bad_image_input_is_one_line_exit_2(args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], r.output


@pytest.mark.parametrize("preset, workload, message", [
    ("vit-b16", Workload(seq_len=10, image_size=(224, 224)),
     "seq_len=10: an image of 224x224 is 197 tokens for vit-b16 (196 patches of 16x16 and the class token)"),
    ("vit-b16", Workload(seq_len=10, image_size=(225, 224)), "image_size=225x224: not a multiple of vit-b16's patch"),
    ("vit-b16", Workload(seq_len=10), "seq_len=10: an image of 224x224 is 197 tokens"),
    ("gpt2", Workload(seq_len=10, image_size=(224, 224)), "image_size=224x224: gpt2 reads tokens"),
])
def test_library_workload_refusals(preset, workload, message):
    with pytest.raises(TfcalcError) as e:
        count(load_preset(preset), workload)
    assert str(e.value).startswith(message)
