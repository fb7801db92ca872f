"""MiniCPM-V 4.6, 4.7 and MiniCPM-OCR read whole against transformers (issue 21): the language model (Qwen3.5's
text model and lm_head, `--tower text`), the vision tower with its window merger between blocks (the blocks after it
over a quarter of the patches), the merger; parameters on meta and the image path's FLOPs (FlopCounterMode, eager),
per component by `check --hf-config`, and the reference model `check` builds, in both downsample modes.

tests/data/minicpm_v_4_6_config.json is openbmb/MiniCPM-V-4.6's config.json as vendored in the GitHub repository
moderately-ai/lmbrrr (docs/research/models/minicpm-v-4.6/hf-model/config.json, commit f04df6dd), byte for byte. No
published config of MiniCPM-V 4.7 or MiniCPM-OCR was found (the stored GitHub index and docs hold none): they are
held on generated configs.
"""

import warnings
from pathlib import Path

import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import Workload, count
from tfcalc.arch.towers import image_size, image_tokens, select
from tfcalc.cli import app
from tfcalc.families.minicpmv import image_parts
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model
from tfcalc.verify.hf_model import trace_parts

PUBLISHED = Path(__file__).parent / "data" / "minicpm_v_4_6_config.json"


CLASSES = {"minicpmv4_6": "MiniCPMV4_6ForConditionalGeneration", "minicpmv4_7": "MiniCPMV4_7ForConditionalGeneration",
           "minicpm_ocr": "MiniCPMOcrForConditionalGeneration"}


def built(config):
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        config = transformers.AutoConfig.from_pretrained(config)
        return getattr(transformers, CLASSES[config.model_type])(config)


def params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_the_released_minicpm_v_4_6_language_model_is_counted_exactly():
    model = built(PUBLISHED)
    spec = select(read_hf_config(PUBLISHED).spec, "text")
    # the released config ties lm_head to the token embedding (tie_word_embeddings true; the class's default is false)
    assert spec.tie_embeddings and model.lm_head.weight is model.model.language_model.embed_tokens.weight
    assert count(spec).params.total == params(model.model.language_model) == 752_161_600


def test_the_released_whole_model_is_counted_exactly():
    # the whole class, on meta: the language model (tied head), the vision tower, the merger
    model = built(PUBLISHED)
    vision, merger = model.model.vision_tower, model.model.merger
    D, F, L, p, rows = 1152, 4304, 27, 14, (980 // 14) ** 2  # vision_config; its position table: 70 x 70 rows
    layer = 2 * 2 * D + 4 * (D * D + D) + (D * F + F) + (F * D + D)  # 2 LayerNorms, q k v out, fc1 fc2 (biases)
    embeddings = (3 * p * p * D + D) + rows * D  # Conv2d with a bias, the bucketed position table
    # MiniCPMV4_6ViTWindowAttentionMerger after block insert_layer_id: layer_norm1, q k v out, pre_norm over 2x2
    # concatenated patches (4D), linear_1 4D -> 4F, linear_2 4F -> D (biases)
    window_merger = 2 * D + 4 * (D * D + D) + 2 * 4 * D + (4 * D * 4 * F + 4 * F) + (4 * F * D + D)
    assert params(vision.encoder.layers[0]) == layer == 15_239_504
    assert params(vision.vit_merger) == window_merger == 104_507_072
    assert params(vision) == embeddings + L * layer + window_merger + 2 * D == 522_299_312  # + post_layernorm
    # MiniCPMV4_6Merger (merger_times 1): one DownsampleMLP: a LayerNorm over 4D, 4D -> 4D, GELU, 4D -> 1024
    assert params(merger) == 2 * 4 * D + (4 * D * 4 * D + 4 * D) + (4 * D * 1024 + 1024) == 25_967_104
    assert params(model) == 752_161_600 + 522_299_312 + 25_967_104 == 1_300_428_016
    result = count(read_hf_config(PUBLISHED).spec)
    assert result.params.total == params(model)
    assert [result.towers[t]["params"] for t in ("text", "vision", "connectors")] == [
        params(model.model.language_model), params(vision), params(merger)]
    # its default image: the config's image_size 1120 (the processor's), 80 x 80 patches, 400 tokens of the prompt
    assert image_size(result.spec, result.workload) == (1120, 1120)
    assert image_tokens(result.spec, result.workload) == 80 * 80 // 16
    whole = CliRunner().invoke(app, ["count", "--hf-config", str(PUBLISHED), "--seq-len", "4096"])
    assert whole.exit_code == 0 and "1,300,428,016" in whole.output, whole.output


D, F, L, H, p, k = 32, 64, 3, 2, 4, 1  # a tiny tower: the window merger after block k = insert_layer_id
TINY = dict(model_type="minicpmv4_6", insert_layer_id=k, image_token_id=299,
            text_config=dict(model_type="qwen3_5_text", vocab_size=300, hidden_size=24, intermediate_size=48,
                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=12,
                             layer_types=["full_attention"]),
            vision_config=dict(model_type="minicpmv4_6_vision", hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                               num_attention_heads=H, patch_size=p, image_size=32))
GRIDS = [(4, 4), (8, 4)]  # two images of 4x4 and 8x4 patches
T = sum(h * w for h, w in GRIDS)  # 48 patches


def eager_image_flops(downsample_mode: str | None = None):
    """FlopCounterMode over get_image_features (fp32 CPU, eager) of the tiny config on GRIDS, NaViT-packed into one
    row as the processor packs them: (total FLOPs, each image's tokens for the language model)."""
    torch.manual_seed(0)
    model = transformers.MiniCPMV4_6ForConditionalGeneration._from_config(hf_config(TINY),
                                                                          attn_implementation="eager").eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model.model.get_image_features(torch.randn(1, 3, p, T * p), torch.tensor(GRIDS),
                                             downsample_mode=downsample_mode)
    return counter.get_total_flops(), [o.shape[0] for o in out.pooler_output]


def test_the_image_path_flops_a_whole_read_must_meet():
    flops, tokens = eager_image_flops()
    # each image's tokens for the language model: its patches / 16 (2x2 by the window merger, 2x2 by the merger)
    assert tokens == [h * w // 16 for h, w in GRIDS] == [1, 2]
    pairs = sum((h * w) ** 2 for h, w in GRIDS)  # blocks 0..k: every image's patches attend to each other alone
    block = lambda t, n2: 2 * t * (4 * D * D + 2 * D * F) + 2 * 2 * D * n2  # q k v out, fc1 fc2; QK^T and AV
    conv = 2 * T * 3 * p * p * D
    # the window merger: q k v out over every patch, attention within each 2x2 window (4 x 4 pairs), then each
    # window's 4 patches concatenated: linear_1 4D -> 4F, linear_2 4F -> D
    window = 2 * T * 4 * D * D + 2 * 2 * D * (T // 4) * 16 + 2 * (T // 4) * (4 * D * 4 * F + 4 * F * D)
    after = (L - k - 1) * block(T // 4, sum((h * w // 4) ** 2 for h, w in GRIDS))  # the rest on a quarter of them
    merger = 2 * (T // 16) * (4 * D * 4 * D + 4 * D * 24)  # 2x2 of the merged grid concatenated: 4D -> 4D -> 24
    assert flops == conv + (k + 1) * block(T, pairs) + window + after + merger == 3_772_416
    # "4x" (minicpm_ocr's default): the window merger skipped (its parameters still built), every block over every
    # patch, the merger on 2x2 blocks of the patches: h * w / 4 tokens an image
    flops, tokens = eager_image_flops("4x")
    assert tokens == [h * w // 4 for h, w in GRIDS] == [4, 8]
    assert flops == conv + L * block(T, pairs) + 2 * (T // 4) * (4 * D * 4 * D + 4 * D * 24) == 3_465_216


@pytest.mark.parametrize("mode", [None, "4x"])
def test_the_class_traced_by_parts_on_meta_is_its_eager_forward(mode):
    # image_parts: the image path on meta (its cu_seqlens on the CPU) sees exactly what the eager forward does
    with torch.device("meta"):
        model = transformers.MiniCPMV4_6ForConditionalGeneration._from_config(hf_config(TINY),
                                                                              attn_implementation="eager")
    total, own, outside = trace_parts(image_parts(model, GRIDS, mode))
    assert (total, outside) == (eager_image_flops(mode)[0], 0)
    at = "model.vision_tower."
    if mode is None:  # the window merger's attention core: 12 windows of 4 x 4 pairs, QK^T and AV, 2 heads of 16
        assert own[f"{at}vit_merger.self_attn"] == 2 * 2 * D * (T // 4) * 16 == 24_576
        assert own[f"{at}encoder.layers.2.self_attn.q_proj"] == 2 * (T // 4) * D * D  # after it: a quarter
    else:
        assert not any(name.startswith(f"{at}vit_merger") and v for name, v in own.items())
        assert own[f"{at}encoder.layers.2.self_attn.q_proj"] == 2 * T * D * D


def tiny(tmp_path, model_type: str = "minicpmv4_6", **outer):
    """TINY as a config.json of `model_type` (4.7's, OCR's: the same fields), the wrapper's fields `outer` laid over."""
    vision = dict(TINY["vision_config"], model_type=f"{model_type}_vision")
    return write(tmp_path, {**TINY, "model_type": model_type, "vision_config": vision, **outer})


@pytest.mark.parametrize("mode", [None, "4x"])
def test_tfcalc_counts_the_image_path_flops_of_the_eager_forward(tmp_path, mode):
    # each image's patches attend to each other alone, so the packed row of GRIDS is the sum of each image alone
    spec = read_hf_config(tiny(tmp_path, **({"downsample_mode": mode} if mode else {}))).spec
    flops, tokens = eager_image_flops(mode)
    ours, prompt = 0, []
    for h, w in GRIDS:
        work = Workload(batch_size=1, seq_len=64, images=1, image_size=(h * p, w * p))
        towers = count(spec, work).towers
        ours += towers["vision"]["forward"] + towers["connectors"]["forward"]
        prompt.append(image_tokens(spec, work))
    assert (ours, prompt) == (flops, tokens)


@pytest.mark.parametrize("model_type, mode", [("minicpmv4_6", None), ("minicpmv4_6", "4x"), ("minicpmv4_7", None),
                                              ("minicpmv4_7", "4x"), ("minicpm_ocr", None), ("minicpm_ocr", "16x")])
def test_whole_parameters_equal_the_generation_class_on_meta(tmp_path, model_type, mode):
    # "4x" (MiniCPM-OCR's default) builds the window merger too: the same parameters, whatever the mode
    path = tiny(tmp_path, model_type, **({"downsample_mode": mode} if mode else {}))
    model = built(path)
    result = count(read_hf_config(path).spec)
    assert result.params.total == params(model)
    assert result.towers["vision"]["params"] == params(model.model.vision_tower)
    assert result.towers["connectors"]["params"] == params(model.model.merger)
    # q k v out (biases) and layer_norm1, pre_norm over 4D, linear_1 4D -> 4F, linear_2 4F -> D: built in both modes
    merger = 2 * D + 4 * (D * D + D) + 2 * 4 * D + (4 * D * 4 * F + 4 * F) + (4 * F * D + D)
    assert result.params.components["vision/window_merger/linear_1"] + result.params.components[
        "vision/window_merger/linear_2"] == (4 * D * 4 * F + 4 * F) + (4 * F * D + D) and \
        params(model.model.vision_tower.vit_merger) == merger


@pytest.mark.parametrize("model_type", ["minicpmv4_6", "minicpm_ocr"])  # "16x", and OCR's default "4x"
def test_whole_equals_its_generation_class_per_component_and_checks(tmp_path, model_type):
    path = tiny(tmp_path, model_type)
    spec = read_hf_config(path).spec
    # two images of 32 x 16 pixels: 8 x 4 patches of 4 each, 2 tokens each ("16x") or 8 ("4x")
    workload = Workload(batch_size=2, seq_len=40, images=2, image_size=(32, 16))
    assert image_tokens(spec, workload) == 2 * 32 // (4 if model_type == "minicpm_ocr" else 16)
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    forward = {r.component: r.transformers for r in report.rows if r.figure == "forward"}
    if model_type == "minicpm_ocr":  # built, not run
        assert not [c for c, v in forward.items() if c.startswith("vision/window_merger") and v]
    else:  # 8 windows of 2 x 2 patches per image: 16 windows of 4 x 4 pairs, QK^T and AV, 2 heads of 16
        assert forward["vision/window_merger/core"] == 2 * 2 * D * 16 * (4 * 4) == 32_768
    assert check(spec, workload=workload, train=True).match


@pytest.mark.parametrize("outer, vision, phrase", [
    ({"downsample_mode": "8x"}, {}, "downsample_mode='8x' is not modelled"),
    ({"merger_times": 2}, {}, "merger_times=2 is not modelled"),
    ({"merge_kernel_size": [1, 1]}, {}, "merge_kernel_size=[1, 1] is not modelled"),
    ({}, {"window_kernel_size": [3, 3]}, "window_kernel_size=[3, 3] is not modelled"),
    # the wrapper's insert_layer_id is the one transformers reads (its __post_init__ writes it into vision_config)
    ({"insert_layer_id": L}, {"insert_layer_id": 0}, f"insert_layer_id={L} is not modelled"),
    ({"insert_layer_id": -1}, {}, "insert_layer_id=-1 is not modelled"),
])
def test_what_is_not_modelled_is_refused_by_name(tmp_path, outer, vision, phrase):
    config = {**TINY, **outer, "vision_config": {**TINY["vision_config"], **vision}}
    r = CliRunner().invoke(app, ["count", "--hf-config", str(write(tmp_path, config))])
    assert r.exit_code == 2 and phrase in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_an_image_the_merges_cannot_tile_is_refused_with_its_size(tmp_path):
    path = str(tiny(tmp_path))
    # 24 x 24 pixels: 6 x 6 patches, 3 x 3 after the window merger: no 2 x 2 blocks for the merger ("16x": 16 px)
    r = CliRunner().invoke(app, ["count", "--hf-config", path, "--image-size", "24"])
    assert r.exit_code == 2 and "image_size=24x24" in r.output and "multiples of 16" in r.output, r.output
    # 20 x 20: 5 x 5 patches, not whole windows of the window merger (8 px)
    r = CliRunner().invoke(app, ["count", "--hf-config", path, "--image-size", "20"])
    assert r.exit_code == 2 and "--image-size 20" in r.output and "Traceback" not in r.output, r.output
    # "4x": 24 x 24 is 6 x 6 patches, 3 x 3 = 9 tokens for the merger's 2 x 2 blocks: read
    ocr = CliRunner().invoke(app, ["count", "--hf-config", str(tiny(tmp_path, "minicpm_ocr")), "--image-size", "24"])
    assert ocr.exit_code == 0, ocr.output


@pytest.mark.parametrize("model_type", ["minicpmv4_7", "minicpm_ocr"])  # (4.6's tower class is not exported)
def test_the_tower_alone_equals_its_class_per_component(tmp_path, model_type):
    # --tower vision: transformers' tower built from vision_config, traced by parts (`tower_parts`), its window merger
    # after the wrapper's insert_layer_id (1: its config class writes it over vision_config's default 6) in "16x"
    path = tiny(tmp_path, model_type)
    vision = select(read_hf_config(path).spec, "vision")
    report = hf_model.compare(path, vision, Workload(batch_size=2, seq_len=64, image_size=(32, 32)))
    assert report.match, [r for r in report.rows if r.match is False]
    forward = {r.component: r.transformers for r in report.rows if r.figure == "forward"}
    # every block over 64 patches of each image ("4x"), or 2 of them, then 1 over 16 ("16x"): q k v out, 2 images
    assert forward["attention/qkv"] == 2 * 2 * D * 3 * D * (3 * 64 if model_type == "minicpm_ocr" else 2 * 64 + 16)


def test_a_kind_between_blocks_divides_the_tokens_of_the_blocks_after_it():
    # the mechanism on a spec of its own (no config): a window merger after block 0 of 3, images of 8 x 8 patches
    from tfcalc import ModelSpec, TfcalcError
    from tfcalc.arch import stacks

    fields = dict(name="merged", n_layers=3, d_model=D, n_heads=H, d_ff=F, seq_len=64, inputs="images", causal=False,
                  positions="learned", norm="layernorm", bias=True, activation="gelu_tanh", lm_head=False)
    kinds = {"patch_embedding": {"image_size": 32, "patch_size": 4, "class_token": False, "merge_size": 2}}
    spec = ModelSpec(**fields, kinds=kinds | {"window_merger": {"after": 0}})
    (stack,) = stacks(spec)
    layers = list(stack.distinct().items())
    assert [(layer.kinds, layer.divisor, n) for layer, n in layers] == [
        (("attention", "mlp", "window_merger"), 1, 1), (("attention", "mlp"), 4, 2)]
    result = count(spec, Workload(batch_size=2, seq_len=64, image_size=(32, 32)))
    # fc1: block 0 over 64 patches of each of 2 images, blocks 1 and 2 over 16; the final norm over 16 of each
    assert result.flops.components["mlp/up"] == 2 * 2 * (64 + 2 * 16) * D * F
    assert result.inventory.groups[-1].ops[0].rows == 2 * 16  # (final_norm: the last group of a model of images)
    # "4x": built, not run: the same parameters, no work, every block over every patch
    idle = ModelSpec(**fields, kinds=kinds | {"window_merger": {"after": 0, "runs": False}})
    assert count(idle).params.total == result.params.total
    assert "window_merger/linear_1" in count(idle).params.components
    assert count(idle).flops.components["mlp/up"] == 2 * 3 * 64 * D * F  # (batch_size 1: the spec's own image)
    assert not [c for c in count(idle).flops.components if c.startswith("window_merger")]
    for bad, phrase in ((dict(fields, n_layers=1, kinds=kinds | {"window_merger": {"after": 1}}),
                         "kinds.window_merger.after=1: names no block of n_layers=1"),
                        (dict(fields, kinds={**kinds, "patch_embedding": {**kinds["patch_embedding"], "merge_size": 1},
                                             "window_merger": {"after": 0}}), "kinds.window_merger.window=2")):
        with pytest.raises((TfcalcError, ValueError), match=phrase):
            ModelSpec(**bad)
