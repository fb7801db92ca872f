"""Gemma 4's audio tower (gemma4_audio: transformers' Gemma4AudioModel, a conformer) and the gemma4 config read whole
with its three towers: exact against Gemma4ForConditionalGeneration on meta, part by part
(tfcalc/families/gemma4_audio.py), against one eager forward of the whole class on the CPU under FlopCounterMode, and
the clip's frames and prompt tokens against Gemma4AudioFeatureExtractor and the processor's own arithmetic."""

import json
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from hf_oracle import hf_config, meta_params, write
from torch.utils.flop_counter import FlopCounterMode
from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
from transformers.models.gemma4.processing_gemma4 import Gemma4Processor
from test_gemma4_whole import TEXT, VISION  # the whole-read test's tiny text and vision towers
from typer.testing import CliRunner

from tfcalc import Workload, count, load_preset
from tfcalc.arch.towers import select, tower_workload
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()
DATA = Path(__file__).parent / "data"

# channels [8, 4]: input_proj reads 8 // 4 = 2 frequency rows, so 8 mel bins (ceil(ceil(8 / 2) / 2) = 2)
AUDIO = {"model_type": "gemma4_audio", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "subsampling_conv_channels": [8, 4], "conv_kernel_size": 5, "attention_chunk_size": 4,
         "attention_context_left": 5, "attention_context_right": 0, "output_proj_dims": 24}
# a context reaching ahead (right 2), a chunk that does not divide the tokens, 3 taps, 16 mel bins, gelu
VARIANT = {**AUDIO, "hidden_size": 48, "num_attention_heads": 6, "subsampling_conv_channels": [16, 8],
           "conv_kernel_size": 3, "attention_chunk_size": 6, "attention_context_left": 4,
           "attention_context_right": 2, "hidden_act": "gelu_pytorch_tanh", "use_clipped_linears": False}
IDS = {"image_token_id": 297, "boi_token_id": 298, "eoi_token_id": 299, "audio_token_id": 296, "video_token_id": 295,
       "boa_token_id": 294, "eoa_token_index": 293}


def config(audio=AUDIO, vision=VISION, text=TEXT) -> dict:
    return {"model_type": "gemma4", "text_config": text, "vision_config": vision, "audio_config": audio, **IDS}


def tower_params(a: dict) -> int:
    """Gemma4AudioModel's parameters by hand: the two Conv2d (3 x 3, no bias) with their LayerNorms' weights,
    input_proj, per block two half feed-forwards (D -> 4D -> D and two norms), attention (q, k, v, post,
    relative_k_proj: 5 D^2; per_dim_scale [D / H]; two norms), the light convolution (2 D^2 + D^2, K taps per
    channel, two norms) and norm_out, then output_proj with its bias."""
    D, L, H = a["hidden_size"], a["num_hidden_layers"], a["num_attention_heads"]
    (c0, c1), K, O = a["subsampling_conv_channels"], a["conv_kernel_size"], a["output_proj_dims"]
    front = 9 * c0 + c0 + 9 * c0 * c1 + c1 + (c0 // 4) * c1 * D
    block = 2 * (8 * D * D + 2 * D) + (5 * D * D + D // H + 2 * D) + (3 * D * D + K * D + 2 * D) + D
    return front + L * block + D * O + O


def eager_whole_flops(cfg: dict, workload: Workload, frames: int) -> int:
    """FlopCounterMode over one eager forward of Gemma4ForConditionalGeneration on the CPU, as its processor feeds
    it: each sequence's clip of mel frames with its mask (every frame real), an image's patches and positions, the
    prompt's audio and image tokens in place."""
    v, a = cfg["vision_config"], cfg["audio_config"]
    mel = 4 * (a["subsampling_conv_channels"][0] // 4)
    p, k = v["patch_size"], v["pooling_kernel_size"]
    H, W = workload.image_size
    rows, cols = H // p, W // p
    B, n = workload.batch_size, workload.images
    tokens = -(-(-(-frames // 2)) // 2)  # the two stride-2 Conv2d
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = transformers.Gemma4ForConditionalGeneration._from_config(hf_config(cfg), attn_implementation="eager")
    y, x = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    positions = torch.stack([x.reshape(-1), y.reshape(-1)], -1).expand(n, -1, -1).clone()
    ids = torch.full((B, workload.seq_len), 5)
    ids[:, :tokens] = cfg["audio_token_id"]  # each sequence's clip first, then the images' tokens
    ids.view(-1)[B * workload.seq_len - n * rows * cols // k ** 2:] = cfg["image_token_id"]
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids, pixel_values=torch.rand(n, rows * cols, 3 * p * p), image_position_ids=positions,
              input_features=torch.rand(B, frames, mel), input_features_mask=torch.ones(B, frames, dtype=torch.bool))
    return counter.get_total_flops()


@pytest.mark.parametrize("audio", [AUDIO, VARIANT])
def test_whole_gemma4_with_audio_equals_its_generation_class(tmp_path, audio):
    cfg = config(audio)
    path = write(tmp_path, cfg)
    spec = read_hf_config(path).spec
    assert set(spec.towers) == {"vision", "audio"}
    # two sequences, each with a clip of 99 mel frames (1 s: 16,000 samples, (16,000 - 161) // 160 + 1 frames):
    # ceil(99 / 2) = 50, then 25 tokens; two images of 4 x 6 patches of 4, each pooled 2 x 2 into 6 tokens
    workload = Workload(batch_size=2, seq_len=40, images=2, image_size=(16, 24), mel_frames=99)
    tw = tower_workload(spec, "audio", workload)
    assert (tw.batch_size, tw.seq_len, tw.mel_frames) == (2, 25, 99)
    result = count(spec, workload)
    D, O, T = audio["hidden_size"], audio["output_proj_dims"], TEXT["hidden_size"]
    # embed_vision 48 x 32 on 12 tokens; embed_audio's weightless RMSNorm and O x 32 on every token of both clips
    assert result.towers["connectors"] == {"params": 48 * T + O * T, "forward": 2 * 12 * 48 * T + 2 * 50 * O * T}
    assert count(select(spec, "audio")).params.total == tower_params(audio) == meta_params(
        transformers.Gemma4AudioModel, audio)
    assert result.params.total == meta_params(transformers.Gemma4ForConditionalGeneration, cfg)
    # the chunked attention per block of each of the 2 sequences: nb = ceil(25 / chunk) blocks of chunk queries
    # against context keys, q k^T and p v, and the relative scores q r^T against P = context // 2 + 1 positions
    C, H = audio["attention_chunk_size"], audio["num_attention_heads"]
    context = C + audio["attention_context_left"] - 1 + audio["attention_context_right"]
    nb, P, dh, L = -(-25 // C), context // 2 + 1, D // H, audio["num_hidden_layers"]
    scores = result.flops.components["audio/attention/scores"] + result.flops.components["audio/attention/values"]
    assert scores == L * (2 * (2 * 2 * H * nb * C * context * dh) + 2 * 2 * H * nb * C * dh * P)
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if "unmapped" in r.component]
    assert {"audio/attention/core", "audio/lconv/conv", "audio/embedding/conv0", "embed_audio"} <= {
        r.component for r in report.rows}
    # the part-by-part trace on meta agrees with one eager forward of the whole class on the CPU
    assert result.flops.forward == eager_whole_flops(cfg, workload, 99)
    assert check(spec, workload=workload, train=True).match


def test_a_clip_is_what_the_feature_extractor_and_the_processor_make():
    # the mel frames of a clip (Gemma4AudioFeatureExtractor, defaults) and the audio tokens the processor puts in the
    # prompt (Gemma4Processor.replace_audio_token: the frames' mask subsampled as the two Conv2d subsample it)
    spec = select(load_preset("gemma4-e2b"), "audio")
    sizes = spec.sizes("audio_conv")
    extractor = Gemma4AudioFeatureExtractor()
    processor = types.SimpleNamespace(boa_token="<", audio_token="A", eoa_token=">")
    for samples in (1_000, 16_000, 112_005, 160_000, 480_000, 6_560):
        out = extractor([np.zeros(samples, dtype=np.float32)], return_tensors="np")
        frames, prompt = out["input_features"].shape[1], Gemma4Processor.replace_audio_token(processor, out, 0)
        assert sizes.frames(samples) == frames
        assert sizes.prompt_tokens(samples) == prompt.count("A")
    # 30 s: 480,000 samples, 2,999 frames, 750 tokens (the processor's audio_seq_length, 40 ms a token)
    assert (sizes.window, sizes.tokens(sizes.window)) == (2_999, 750)
    # 6,560 samples: padded to 6,656, 41 frames, 11 tokens of work, but the mask's last token is padding: 10
    assert (sizes.tokens(sizes.frames(6_560)), sizes.prompt_tokens(6_560)) == (11, 10)


def test_audio_seconds_sets_the_clip_and_bad_lengths_are_refused_in_one_line(tmp_path):
    path = write(tmp_path, config())
    out = runner.invoke(app, ["count", "--hf-config", str(path), "--audio-seconds", "2", "-N", "400", "--json"])
    assert out.exit_code == 0, out.output
    # 2 s: 32,000 samples, (32,000 - 161) // 160 + 1 = 199 frames, 100 then 50 tokens in the prompt
    assert json.loads(out.output)["workload"]["mel_frames"] == 199
    for seconds, why in (("31", "truncates a clip at 480,000 samples"), ("0.41", "0.408 or 0.416 s"),
                         ("1.00001", "whole number of samples"), ("-1", "positive number")):
        out = runner.invoke(app, ["count", "--hf-config", str(path), "--audio-seconds", seconds])
        assert out.exit_code == 2 and why in out.output and "Traceback" not in out.output, out.output
        assert len(out.output.strip().splitlines()) == 1, out.output
    # by default a 30-s clip (750 tokens) and a 128 x 128 image (32 x 32 patches pooled 2 x 2: 256 tokens) in the
    # prompt: they must fit seq_len
    out = runner.invoke(app, ["count", "--hf-config", str(path), "-N", "700"])
    assert out.exit_code == 2 and "1,006 tokens" in out.output, out.output


@pytest.mark.parametrize("field,value,why", [
    ("num_attention_heads", 5, "num_attention_heads=5"),
    ("subsampling_conv_channels", [8, 4, 2], "subsampling_conv_channels=[8, 4, 2]"),
    ("subsampling_conv_channels", [2, 4], "subsampling_conv_channels=[2, 4]"),
    ("hidden_act", "swish_x", "hidden_act='swish_x'"),
    ("attention_chunk_size", 10 ** 500, "attention_chunk_size"),
])
def test_unmodelled_audio_fields_are_refused_by_name(tmp_path, field, value, why):
    path = write(tmp_path, config({**AUDIO, field: value}))
    out = runner.invoke(app, ["count", "--hf-config", str(path)])
    assert out.exit_code == 2 and why in out.output and "Traceback" not in out.output, out.output


def test_the_audio_tower_alone_equals_its_own_class(tmp_path):
    # check --hf-config --tower audio: Gemma4AudioModel built from audio_config, one clip of 2 s on meta
    path = write(tmp_path, config(vision=None))
    out = runner.invoke(app, ["check", "--hf-config", str(path), "--tower", "audio", "--audio-seconds", "2"])
    assert out.exit_code == 0 and "Gemma4AudioModel" in out.output, out.output
    assert "MATCH: all" in out.output and "unmapped" not in out.output, out.output
    # without a vision tower the whole model is its language model, audio tower and embed_audio
    spec = read_hf_config(path).spec
    assert set(spec.towers) == {"audio"} and [c.name for c in spec.connectors] == ["embed_audio"]
    assert count(spec).params.total == meta_params(transformers.Gemma4ForConditionalGeneration, config(vision=None))


def test_published_e2b_whole_and_its_preset(tmp_path):
    # google/gemma-4-E2B-it: its text_config (tests/data/gemma4_text_configs.json) and its vision_config and
    # audio_config verbatim (tests/data/gemma4_e2b_towers.json says where from); Gemma4ForConditionalGeneration on
    # meta is the oracle
    towers = json.loads((DATA / "gemma4_e2b_towers.json").read_text())
    text = json.loads((DATA / "gemma4_text_configs.json").read_text())["gemma-4-e2b"]
    cfg = {"model_type": "gemma4", "text_config": text["text_config"], "tie_word_embeddings": True,
           "vision_config": towers["vision_config"], "audio_config": towers["audio_config"]}
    spec = read_hf_config(write(tmp_path, cfg)).spec
    total = meta_params(transformers.Gemma4ForConditionalGeneration, cfg)
    assert count(spec).params.total == total == 5_104_297_504
    # the audio tower: 12 conformer blocks of 1024, channels [128, 32], 5 taps, output_proj 1024 -> 1536
    audio = tower_params(towers["audio_config"])
    assert count(select(spec, "audio")).params.total == audio == 304_824_608
    # the language model (transformers' Gemma4ForCausalLM), the vision tower, embed_vision 768 x 1536 and
    # embed_audio 1536 x 1536
    vision = count(select(spec, "vision")).params.total
    assert total == text["transformers_params"] + vision + audio + 768 * 1536 + 1536 * 1536
    preset = load_preset("gemma4-e2b")
    assert count(preset).params.total == total
    assert count(preset).flops.components == count(spec.replace(seq_len=preset.seq_len)).flops.components


def test_train_memory_plans_the_audio_tower():
    out = runner.invoke(app, ["memory", "--phase", "train", "--preset", "gemma4-e2b", "-N", "4096"])
    assert out.exit_code == 0, out.output
    assert "audio/attention/core" in out.output or "audio/attention" in out.output, out.output
