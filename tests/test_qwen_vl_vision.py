"""Qwen2-VL's and Qwen2.5-VL's vision towers (qwen2_vl_vision, qwen2_5_vl_vision), merger included: exact against
transformers' Qwen2VisionTransformerPretrainedModel and Qwen2_5_VisionTransformerPretrainedModel (sum(numel) on meta,
FlopCounterMode over one eager forward of pixel rows and grid_thw as the processor lays them out, per component
through check --hf-config), Qwen2.5-VL-7B-Instruct's published vision_config pinned, the reference model's 3-D
patches, windows and merger under `check`, the image workload and its refusals."""

import json
import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count
from tfcalc.cli import app
from tfcalc.families.qwen_vl import image_tokens
from tfcalc.hf import DEFAULTS, Unmodelled, read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()

# Qwen2.5-VL-7B-Instruct's vision_config as its config.json gives it (the hub's file, quoted verbatim in stored public
# files: a README quoting /data/share/Qwen2.5-VL-7B-Instruct/config.json, and a QWEN2_5_VL_CONFIG_JSON string of the
# hub's later revision, identical in these fields); model_type written as transformers rewrites the old "qwen2_5_vl"
QWEN25_VL_7B_VISION = {
    "model_type": "qwen2_5_vl_vision", "depth": 32, "hidden_act": "silu", "hidden_size": 1280,
    "intermediate_size": 3420, "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14,
    "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31],
    "tokens_per_second": 2, "temporal_patch_size": 2,
}
D, F, L, O, K = 1280, 3420, 32, 3584, 3 * 2 * 14 * 14  # K: a patch's pixels, C x T x p x p = 1,176
QWEN25_VL_7B_PARAMS = (
    K * D  # the Conv3d [1280, 3, 2, 14, 14], no bias
    + L * (D * 3 * D + 3 * D + D * D + D  # qkv, proj with biases
           + 2 * (D * F + F) + F * D + D  # gate_proj, up_proj, down_proj with biases
           + 2 * D)  # norm1, norm2 (RMSNorm: a weight)
    + D  # the merger's ln_q
    + 4 * D * 4 * D + 4 * D + 4 * D * O + O  # merger mlp.0 [5120 -> 5120], mlp.2 [5120 -> 3584]
)
N = 32 * 32  # one 448x448 image: 32 x 32 patches of 14
QWEN25_VL_7B_FORWARD = 2 * (
    N * K * D  # the patches [1024, 1176] @ [1176, 1280]
    + L * N * (3 * D * D + D * D + 3 * D * F)  # qkv, proj, gate, up, down
    + 4 * 2 * 16 * N * N * 80  # 4 global blocks: scores and values, 16 heads of 80 over 1,024 x 1,024 pairs
    + 28 * 2 * 16 * 16 * 64 * 64 * 80  # 28 windowed blocks: 16 windows of 8 x 8 patches, 64 x 64 pairs each
    + (N // 4) * (4 * D * 4 * D + 4 * D * O)  # the merger over 256 merged tokens
)


def test_qwen25_vl_7b_vision_tower_pinned(tmp_path):
    assert QWEN25_VL_7B_PARAMS == 676_550_144
    assert QWEN25_VL_7B_FORWARD == 1_346_937_815_040
    spec = read_hf_config(write(tmp_path, QWEN25_VL_7B_VISION)).spec
    result = count(spec)  # the default workload: one 448x448 image
    assert (result.params.total, result.flops.forward) == (QWEN25_VL_7B_PARAMS, QWEN25_VL_7B_FORWARD)
    assert result.params.components["merger/up"] == 4 * D * 4 * D + 4 * D
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = transformers.Qwen2_5_VisionTransformerPretrainedModel._from_config(hf_config(QWEN25_VL_7B_VISION))
    assert sum(p.numel() for p in model.parameters()) == QWEN25_VL_7B_PARAMS
    assert image_tokens(QWEN25_VL_7B_VISION, 448, 448) == 256  # what the language model reads per image


def test_defaults_are_transformers_defaults():
    for model_type, cls in (("qwen2_vl_vision", transformers.Qwen2VLVisionConfig),
                            ("qwen2_5_vl_vision", transformers.Qwen2_5_VLVisionConfig)):
        config = cls()
        for key, value in DEFAULTS[model_type].items():
            expected = getattr(config, key)
            assert value == (list(expected) if isinstance(expected, tuple) else expected), (model_type, key)


def _meta_model(config: dict):
    cls = hf_model._model_class(transformers, hf_config(config), False, False)
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return cls._from_config(hf_config(config), attn_implementation="eager").eval()


def _eager_flops(model, images: int, hw: tuple[int, int]) -> int:
    c = model.config
    inputs = hf_model._patch_inputs(model, images, c.in_channels, c.temporal_patch_size, c.patch_size, hw)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs)
    return counter.get_total_flops()


configs = st.fixed_dictionaries({
    "v25": st.booleans(), "width": st.sampled_from([16, 32, 48]), "heads": st.sampled_from([1, 2, 4]),
    "depth": st.integers(1, 4), "ff": st.integers(8, 72), "mlp_ratio": st.integers(1, 4), "out": st.integers(8, 40),
    "patch": st.sampled_from([1, 2, 3]), "merge": st.sampled_from([1, 2]), "frames": st.sampled_from([1, 2]),
    "channels": st.integers(1, 3), "window": st.integers(1, 4), "full": st.sets(st.integers(0, 5), max_size=3),
    "act": st.sampled_from(["silu", "gelu", "quick_gelu"]), "rows": st.integers(1, 7), "cols": st.integers(1, 7),
    "images": st.integers(1, 3),
})


@settings(max_examples=10, deadline=None)
@given(configs)
def test_towers_are_exact_against_transformers(tmp_path_factory, c):
    """Parameters (sum(numel) on meta) and forward FLOPs (FlopCounterMode over one eager forward on meta: the Conv3d,
    the blocks, each window's attention, the merger) of random small towers on images of random grids (merge blocks
    a side), windows that do and do not divide the grid, blocks out of range in fullatt_block_indexes."""
    p, m = c["patch"], c["merge"]
    config = {"depth": c["depth"], "num_heads": c["heads"], "hidden_act": c["act"], "patch_size": p,
              "spatial_merge_size": m, "temporal_patch_size": c["frames"], "in_channels": c["channels"]}
    if c["v25"]:
        config |= {"model_type": "qwen2_5_vl_vision", "hidden_size": c["width"], "intermediate_size": c["ff"],
                   "out_hidden_size": c["out"], "window_size": c["window"] * m * p, "fullatt_block_indexes":
                   sorted(c["full"])}
    else:
        config |= {"model_type": "qwen2_vl_vision", "embed_dim": c["width"], "hidden_size": c["out"],
                   "mlp_ratio": c["mlp_ratio"]}
    spec = read_hf_config(write(tmp_path_factory.mktemp("qwen_vl"), config)).spec
    model = _meta_model(config)
    assert count(spec).params.total == sum(t.numel() for t in model.parameters())
    hw = (c["rows"] * m * p, c["cols"] * m * p)
    workload = Workload(batch_size=c["images"], seq_len=c["rows"] * c["cols"] * m * m, image_size=hw)
    assert count(spec, workload).flops.forward == _eager_flops(model, c["images"], hw)


def test_windows_are_the_pairs_the_eager_model_computes(tmp_path):
    # a 12 x 20 patch grid (image 24x40, patch 2) in windows of 8: rows 8 + 4, columns 8 + 8 + 4, so the windows are
    # 8x8 (2), 8x4 (1), 4x8 (2), 4x4 (1) patches: (64^2 * 2 + 32^2 + 32^2 * 2 + 16^2) = 11,520 pairs per image
    config = {"model_type": "qwen2_5_vl_vision", "depth": 1, "hidden_size": 8, "num_heads": 2, "intermediate_size": 8,
              "out_hidden_size": 8, "patch_size": 2, "spatial_merge_size": 2, "window_size": 16,
              "fullatt_block_indexes": []}
    spec = read_hf_config(write(tmp_path, config)).spec
    result = count(spec, Workload(batch_size=3, seq_len=240, image_size=(24, 40)))
    pairs = 64 ** 2 * 2 + 32 ** 2 + 32 ** 2 * 2 + 16 ** 2
    assert pairs == 11_520
    assert result.flops.components["attention/scores"] == 2 * 3 * pairs * 8  # 3 images, 2 heads of 4: 8 channels
    assert result.flops.forward == _eager_flops(_meta_model(config), 3, (24, 40))


def test_check_hf_config_matches_every_component(tmp_path):
    towers = [
        {"model_type": "qwen2_5_vl_vision", "depth": 3, "hidden_size": 32, "num_heads": 2, "intermediate_size": 40,
         "out_hidden_size": 24, "fullatt_block_indexes": [1], "patch_size": 2, "window_size": 8,
         "spatial_merge_size": 2},
        {"model_type": "qwen2_vl_vision", "depth": 2, "embed_dim": 32, "hidden_size": 24, "num_heads": 2,
         "mlp_ratio": 3, "patch_size": 2, "spatial_merge_size": 2},
    ]
    for config in towers:
        path = write(tmp_path, config)
        spec = read_hf_config(path).spec
        report = hf_model.compare(path, spec, Workload(batch_size=2, seq_len=60, image_size=(12, 20)))
        assert report.match, report.verdict()
        rows = {(r.figure, r.component) for r in report.rows if r.match}
        assert {("forward", "embedding/patch"), ("forward", "attention/core"), ("forward", "merger/up"),
                ("forward", "merger/down"), ("params", "merger/norm"), ("params", "mlp/up")} <= rows
        assert not [r for r in report.rows if r.component.startswith("(unmapped)")]


def test_reference_model_builds_the_patches_windows_and_merger(tmp_path):
    config = {"model_type": "qwen2_5_vl_vision", "depth": 2, "hidden_size": 16, "num_heads": 2,
              "intermediate_size": 24, "out_hidden_size": 12, "fullatt_block_indexes": [1], "patch_size": 2,
              "window_size": 8, "spatial_merge_size": 2}
    spec = read_hf_config(write(tmp_path, config)).spec
    workload = Workload(batch_size=2, seq_len=60, image_size=(12, 20))
    report = check(spec, "meta", workload=workload)
    assert report.match
    counted = {row.component: row.flop_counter for row in report.forward}
    assert counted["embedding/patch"] == 2 * (2 * 60) * (3 * 2 * 2 * 2) * 16  # the Conv3d over 120 patches
    assert counted["merger/down"] == 2 * (2 * 15) * (4 * 16) * 12  # 30 merged tokens
    assert {"merger/norm", "merger/up", "attention/qkv"} <= {row.component for row in report.params}
    # a train step: the Conv3d computes its weight gradient, not the images'
    result = count(spec, workload)
    assert result.flops.backward == 2 * result.flops.forward - result.flops.components["embedding/patch"]
    train = check(spec, "meta", train=True, workload=workload)
    assert train.train.match and train.train.flop_counter == result.flops.train_step


def test_quick_gelu_is_transformers():
    from tfcalc.reference.layers import ACTIVATIONS

    x = torch.linspace(-4, 4, 17)
    assert torch.equal(ACTIVATIONS["quick_gelu"](x), transformers.activations.ACT2FN["quick_gelu"](x))


def test_image_workload_on_the_command_line(tmp_path):
    path = str(write(tmp_path, QWEN25_VL_7B_VISION))
    r = runner.invoke(app, ["count", "--hf-config", path])
    assert r.exit_code == 0, r.output
    assert "1 image of 448x448, 1,024 tokens each; no LM head" in r.output
    r = runner.invoke(app, ["count", "--hf-config", path, "--image-size", "280x504", "--images", "3", "--json"])
    data = json.loads(r.output)
    assert data["workload"]["image_size"] == [280, 504] and data["workload"]["seq_len"] == 20 * 36
    assert data["workload"]["batch_size"] == 3


@pytest.mark.parametrize("args, message", [
    (["--image-size", "448x434"], "--image-size 448x434: not a multiple of q7b's patch size 14 x merge size 2 = 28"),
    (["--image-size", "14"], "--image-size 14: not a multiple of q7b's patch size 14 x merge size 2 = 28"),
    (["--images", "0"], "--images 0: expected at least one image"),
    (["--seq-len", "100"], "seq_len=100"),
])
def test_bad_image_input_is_one_line_exit_2(tmp_path, args, message):
    path = str(write(tmp_path, QWEN25_VL_7B_VISION, "q7b.json"))
    r = runner.invoke(app, ["count", "--hf-config", path, *args])
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], r.output


@pytest.mark.parametrize("change, message", [
    ({"num_heads": 3}, "num_heads=3 is not modelled: hidden_size=1280 is not a multiple of it"),
    ({"window_size": 20}, "window_size=20 is not modelled: under spatial_merge_size * patch_size = 28"),
    ({"fullatt_block_indexes": None}, "fullatt_block_indexes=None: expected a list of integers"),
    ({"hidden_act": "tanh"}, "hidden_act='tanh' is not modelled"),
    ({"patch_size": [14, 14]}, "patch_size=[14, 14] is not modelled: one integer"),
    ({"temporal_patch_size": "2"}, "temporal_patch_size='2': expected a positive integer or a list of them"),
    ({"out_hidden_size": 0}, "out_hidden_size=0: expected a positive integer"),
])
def test_config_refusals_name_the_field(tmp_path, change, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {**QWEN25_VL_7B_VISION, **change}))
    assert message in str(e.value)


def test_library_workload_refusal_and_image_tokens(tmp_path):
    spec = read_hf_config(write(tmp_path, QWEN25_VL_7B_VISION, "q7b.json")).spec
    with pytest.raises(TfcalcError) as e:
        count(spec, Workload(seq_len=10 * 11, image_size=(140, 154)))
    assert str(e.value).startswith("image_size=140x154: not a multiple of q7b's patch_size * merge_size = 28")
    assert image_tokens({"model_type": "qwen2_vl_vision"}, 1008, 672) == 36 * 24
    with pytest.raises(Unmodelled, match="image 100x112 is not modelled"):
        image_tokens(QWEN25_VL_7B_VISION, 100, 112)


def test_every_block_global_has_no_windows(tmp_path):
    spec = read_hf_config(write(tmp_path, {**QWEN25_VL_7B_VISION, "fullatt_block_indexes": list(range(32))})).spec
    assert spec.block_pattern is None and "window_attention" not in spec.kinds
    # 32 blocks over the whole image: 1,024^2 pairs each, no window
    assert count(spec).flops.components["attention/scores"] == 32 * 16 * 2 * N * N * 80
