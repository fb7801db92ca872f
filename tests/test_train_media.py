"""`tfcalc train` (tfcalc.plan.train) for a model of images (ViT: a budget of images), a dual encoder (CLIP, SigLIP:
image-text pairs), a model of audio (Whisper: clips) and a multimodal language model whole (text tokens, each sequence
carrying its images and audio): the step's FLOPs against transformers' classes under FlopCounterMode (forward and
backward, eager attention, fp32 CPU, tiny configs), the published ViT-B/16 pin, and the arithmetic of tfcalc's own
per-tower counts; what is refused, by flag or by argument."""

import json
import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from hypothesis import given, settings
from hypothesis import strategies as st
from test_towers import TOML
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.arch.towers import select, tower_workload
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.plan.train import budget_unit, mfu_of_run, training_budget

runner = CliRunner()

H100_BF16 = 989_400_000_000_000  # tfcalc/plan/gpus.py: H100 SXM, dense bf16

# ViT-B/16 as ViTModel at 224 x 224 (issue 21's pin; tests/test_vit.py): 35,127,300,096 forward FLOPs. Its patch
# embedding reads the pixels, which need no gradient: its backward is the weight gradient alone, 1 x its forward,
# matmul(196 patches, 3 x 16 x 16, 768) = 2 x 196 x 768 x 768 FLOPs.
VIT_B16_FORWARD = 35_127_300_096
VIT_B16_PATCH = 2 * 196 * 768 * 768
VIT_B16_TRAIN = 3 * VIT_B16_FORWARD - VIT_B16_PATCH  # 105,150,689,280
VIT_B16_PARAMS = 86_389_248  # ViTModel with its pooler (tests/test_vit.py)


def _vit_model():
    return load_preset("vit-b16").replace(n_classes=None, pooler=True)


def test_vit_b16_budget_is_images_times_the_published_step():
    spec = _vit_model()
    assert budget_unit(spec) == "image"
    images = 300 * 1_281_167  # 300 epochs of ImageNet-1k's training set
    b = training_budget(spec, samples=images, gpus=64, peak_flops_per_s=H100_BF16, mfu=0.4, price_per_gpu_hour=2)
    assert b.flops_per_token == VIT_B16_TRAIN == 105_150_689_280
    assert b.flops == b.flops_causal == images * VIT_B16_TRAIN  # bidirectional: no causal saving
    assert b.six_nd == 6 * VIT_B16_PARAMS * 197 * images  # D: the images' tokens, 196 patches and the class token
    assert b.seconds == pytest.approx(images * VIT_B16_TRAIN / (64 * H100_BF16 * 0.4))
    assert b.cost == pytest.approx(b.seconds * 64 / 3600 * 2)
    d = b.to_dict()
    assert (d["samples"], d["sample"], d["flops_per_sample"], d["workload"]["image_size"]) == (
        images, "image", VIT_B16_TRAIN, [224, 224])
    assert "tokens" not in d and "flops_per_token" not in d


def test_vit_b16_at_384_and_a_run_in_images_per_second():
    spec = _vit_model()
    big = Workload(batch_size=1, seq_len=577, image_size=(384, 384))  # 24 x 24 patches + the class token
    b = training_budget(spec, samples=1, workload=big)
    assert b.flops_per_token == count(spec, big).flops.train_step
    assert count(spec, big).flops.input_leaf == 2 * 576 * 768 * 768  # the patches' weight gradient alone
    run = mfu_of_run(spec, None, 8, H100_BF16, samples_per_s=3000.0)
    assert run["samples_per_second"] == 3000.0 and run["sample"] == "image"
    assert run["mfu"] == pytest.approx(VIT_B16_TRAIN * 3000 / (8 * H100_BF16))


TINY_VIT = {"model_type": "vit", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "image_size": 32, "patch_size": 8, "num_channels": 3}


def _train_flops(model, **inputs) -> int:
    """FlopCounterMode over one forward and its backward (loss: the sum of every floating output), inputs without
    gradients: what a training step of the model computes."""
    with FlopCounterMode(display=False) as counter:
        out = model(**inputs)
        tensors = [v for v in out.values() if isinstance(v, torch.Tensor) and v.is_floating_point()]
        sum(t.sum() for t in tensors).backward()
    return counter.get_total_flops()


def _eager(cls, config: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        return cls._from_config(hf_config(config), attn_implementation="eager")


@pytest.mark.parametrize("images", [1, 3])
def test_a_tiny_vits_step_is_what_flopcountermode_counts_on_transformers(tmp_path, images):
    spec = read_hf_config(write(tmp_path, TINY_VIT)).spec  # no architectures: ViTModel with its pooler
    measured = _train_flops(_eager(transformers.ViTModel, TINY_VIT), pixel_values=torch.randn(images, 3, 32, 32))
    b = training_budget(spec, samples=1000)
    assert images * b.flops_per_token == measured
    assert b.flops == 1000 * measured // images


TINY_WHISPER = {"model_type": "whisper", "d_model": 32, "encoder_layers": 2, "decoder_layers": 3,
                "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 48,
                "decoder_ffn_dim": 48, "vocab_size": 97, "num_mel_bins": 8, "max_source_positions": 12,
                "max_target_positions": 20, "pad_token_id": 1, "bos_token_id": 1, "eos_token_id": 2,
                "decoder_start_token_id": 3}


def test_a_tiny_whispers_clip_is_what_flopcountermode_counts_on_transformers(tmp_path):
    spec = read_hf_config(write(tmp_path, TINY_WHISPER)).spec
    model = _eager(transformers.WhisperForConditionalGeneration, TINY_WHISPER)
    # one clip: the window's 2 x 12 mel frames, the decoder's max_target_positions (20) tokens
    measured = _train_flops(model, input_features=torch.randn(1, 8, 24),
                            decoder_input_ids=torch.randint(97, (1, 20)), use_cache=False)
    b = training_budget(spec, samples=5)
    assert b.unit == "clip" and b.flops_per_token == measured and b.flops == 5 * measured
    assert b.six_nd is None and b.to_dict()["six_nd"] is None  # two stacks on different tokens: no one D


def test_whisper_large_v3_budget_in_clips_and_audio_hours():
    spec = load_preset("whisper-large-v3")
    b = training_budget(spec, samples=81_600_000)  # 680,000 hours of 30-second clips (Radford et al. 2022)
    assert b.to_dict()["audio_hours"] == 680_000
    step = count(spec, Workload(seq_len=448, src_len=1500, mel_frames=3000)).flops
    assert b.flops_per_token == step.train_step == 3 * step.forward - step.input_leaf
    ten = Workload(seq_len=100, src_len=500, mel_frames=1000)  # --audio-seconds 10 -N 100
    assert training_budget(spec, samples=1, workload=ten).flops == count(spec, ten).flops.train_step


TOY_VLM = TOML.replace("tests/test_towers.py", "tests/test_train_media.py")  # GPT-2 + ViT-B/16 + a projector


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    path = tmp_path_factory.mktemp("vlm") / "toy.toml"
    path.write_text(TOY_VLM)
    return path


@pytest.mark.parametrize("images", [1, 4])
def test_a_multimodal_models_token_carries_its_towers_and_projector(vlm, images):
    from tfcalc.loading import read_spec_file

    spec = read_spec_file(vlm).spec
    step = Workload(seq_len=1024, images=images)
    b = training_budget(spec, tokens=10**12, workload=step)
    text = count(select(spec, "text"), Workload(seq_len=1024)).flops  # GPT-2 on 1,024 tokens, the images' among them
    vision = count(select(spec, "vision"), tower_workload(spec, "vision", step)).flops  # every image's 197 tokens
    projector = 2 * images * 196 * 768 * 768  # matmul(196 patches per image, 768, 768), the class token dropped
    assert text.train_step == 3 * text.forward  # token ids need no input gradient to skip
    # ViTModel less its pooler's matmul(1, 768, 768)
    assert vision.forward == images * (VIT_B16_FORWARD - 2 * 768 * 768)
    assert vision.train_step == 3 * vision.forward - images * VIT_B16_PATCH
    assert b.flops_per_token * 1024 == text.train_step + vision.train_step + 3 * projector
    causal = 3 * (text.forward - text.forward_causal)  # the language model's triangle; the tower sees every pair
    assert b.flops_per_token_causal * 1024 == b.flops_per_token * 1024 - causal
    # --tower text: the language model alone, as today
    assert training_budget(select(spec, "text"), 10**12).flops_per_token * 1024 == text.train_step


def test_clip_per_pair_carries_its_share_of_the_contrastive_logits():
    spec = load_preset("clip-vit-l14")
    assert budget_unit(spec) == "pair"
    one = training_budget(spec, samples=10**9)
    big = training_budget(spec.replace(batch_size=32_768), samples=10**9)
    # logits: matmul(B images, 768, B texts) forward, its backward 2 x: 3 x 2 x 768 x B^2 a batch, 6 x 768 x B a pair
    assert big.flops_per_token - one.flops_per_token == 6 * 768 * (32_768 - 1)
    assert big.workload.images == big.workload.batch_size == 32_768
    with pytest.raises(TfcalcError, match=r"images=1: .* one image per text: images = batch_size \(4\)"):
        training_budget(spec, samples=1, workload=Workload(batch_size=4, seq_len=77, images=1))


TINY_CLIP = {"model_type": "clip", "projection_dim": 24,
             "text_config": {"model_type": "clip_text_model", "vocab_size": 97, "hidden_size": 16,
                             "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                             "max_position_embeddings": 12},
             "vision_config": {"model_type": "clip_vision_model", "hidden_size": 24, "intermediate_size": 48,
                               "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 16, "patch_size": 8}}


def test_a_tiny_clips_contrastive_batch_is_what_flopcountermode_counts_on_transformers(tmp_path):
    spec = read_hf_config(write(tmp_path, TINY_CLIP)).spec
    model = _eager(transformers.CLIPModel, TINY_CLIP)
    # a contrastive batch of 3 pairs: 3 texts of 12 tokens, 3 images of 16 x 16 (2 x 2 patches and the class token)
    with FlopCounterMode(display=False) as counter:
        out = model(input_ids=torch.randint(97, (3, 12)), pixel_values=torch.randn(3, 3, 16, 16))
        out.logits_per_image.sum().backward()  # every tower's output reaches the logits: the whole backward
    b = training_budget(spec, samples=10**6, workload=Workload(batch_size=3, seq_len=12, images=3))
    assert b.unit == "pair" and 3 * b.flops_per_token == counter.get_total_flops()


QWEN2_5_VL = {"model_type": "qwen2_5_vl",
              "text_config": {"model_type": "qwen2_5_vl_text", "vocab_size": 300, "hidden_size": 32,
                              "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                              "num_key_value_heads": 2, "max_position_embeddings": 128,
                              "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}},
              "vision_config": {"model_type": "qwen2_5_vl_vision", "depth": 2, "hidden_size": 32,
                                "intermediate_size": 40, "out_hidden_size": 32, "num_heads": 2, "patch_size": 2,
                                "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 8,
                                "fullatt_block_indexes": [1]},
              "image_token_id": 299, "video_token_id": 298, "vision_start_token_id": 297}


def test_a_tiny_qwen2_5_vls_sequence_is_what_flopcountermode_counts_on_transformers(tmp_path):
    spec = read_hf_config(write(tmp_path, QWEN2_5_VL)).spec
    model = _eager(transformers.Qwen2_5_VLForConditionalGeneration, QWEN2_5_VL)
    # one sequence of 40 tokens with one 16 x 24 image: 8 x 12 patches of 2 (the processor's rows of C x T x p x p =
    # 3 x 2 x 2 x 2 pixels), merged 2 x 2 into 24 image tokens of the prompt
    ids = torch.randint(290, (1, 40))
    ids[0, 4], ids[0, 5:29] = 297, 299  # vision_start, then the image's 24 tokens
    with FlopCounterMode(display=False) as counter:
        out = model(input_ids=ids, pixel_values=torch.randn(96, 24), image_grid_thw=torch.tensor([[1, 8, 12]]),
                    use_cache=False)
        out.logits.sum().backward()
    b = training_budget(spec, tokens=10**9, workload=Workload(seq_len=40, images=1, image_size=(16, 24)))
    assert b.unit == "token" and 40 * b.flops_per_token == counter.get_total_flops()
    assert b.flops == 10**9 * counter.get_total_flops() // 40


def _json(args):
    out = runner.invoke(app, ["train", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_cli_a_model_of_images():
    data = _json(["-p", "vit-b16", "--samples", "384M", "--gpus", "64", "--gpu", "h100", "--mfu", "0.4"])
    # the preset is ViTForImageClassification: no pooler, a 1,000-class head on the class token
    forward = VIT_B16_FORWARD - 2 * 768 * 768 + 2 * 768 * 1000
    assert data["flops_per_sample"] == 3 * forward - VIT_B16_PATCH
    assert data["flops"] == 384_000_000 * data["flops_per_sample"] and data["sample"] == "image"
    assert data["seconds"] == pytest.approx(data["flops"] / (64 * H100_BF16 * 0.4))
    big = _json(["-p", "vit-b16", "--samples", "1", "--image-size", "384"])
    assert big["workload"]["image_size"] == [384, 384] and big["workload"]["seq_len"] == 577
    run = _json(["-p", "vit-b16", "--samples-per-second", "3000", "--gpus", "8", "--gpu", "h100"])["run"]
    assert run["mfu"] == pytest.approx(data["flops_per_sample"] * 3000 / (8 * H100_BF16))


def test_cli_audio_and_multimodal(vlm):
    whisper = _json(["-p", "whisper-large-v3", "--samples", "1000", "--audio-seconds", "10", "-N", "100"])
    assert whisper["workload"]["mel_frames"] == 1000 and whisper["audio_hours"] == pytest.approx(1000 * 10 / 3600)
    spec = load_preset("whisper-large-v3")
    assert whisper["flops"] == 1000 * count(spec.replace(seq_len=100),
                                            Workload(seq_len=100, src_len=500, mel_frames=1000)).flops.train_step
    whole = _json(["--spec", str(vlm), "--tokens", "1e12", "--images", "4"])
    assert whole["workload"]["images"] == 4 and whole["tokens"] == 10**12
    text = _json(["--spec", str(vlm), "--tokens", "1e12", "--tower", "text"])
    assert "workload" not in text and text["flops_per_token"] < whole["flops_per_token"]
    pairs = _json(["-p", "clip-vit-l14", "--samples", "1e9", "-B", "32768"])
    assert pairs["workload"]["batch_size"] == pairs["workload"]["images"] == 32_768 and pairs["six_nd"] is None


@pytest.mark.parametrize("args, message", [
    (["-p", "vit-b16", "--tokens", "1e9"], "--tokens 1000000000: vit-b16 is a model of images; its budget is in images: "
                                           "--samples N"),
    (["-p", "vit-b16", "--tokens", "9" * 400], "--tokens " + "9" * 400 + ": vit-b16 is a model of images"),
    (["-p", "vit-b16", "--samples-per-second", "3e3", "--gpus", "8"], "--mfu and --samples-per-second need --gpu"),
    (["-p", "vit-b16", "--samples", "1e9", "--gpus", "8"], "--gpus: the time for --samples needs --gpus, --gpu and "
                                                          "--mfu together"),
    (["-p", "vit-b16", "--samples", "1e9", "--images", "8"], "--images 8: vit-b16's --samples N are its images"),
    (["-p", "vit-b16", "--samples", "1e9", "-B", "8"], "--batch-size 8: train counts --samples N images"),
    (["-p", "vit-b16", "--samples", "1e9", "--image-size", "230"], "--image-size 230: not a multiple of vit-b16's"),
    (["-p", "vit-b16", "--samples", "1e9", "--audio-seconds", "10"], "--audio-seconds 10: vit-b16 reads images"),
    (["-p", "vit-b16", "--tokens-per-second", "5", "--gpus", "1", "--gpu", "h100"], "--tokens-per-second 5: vit-b16"),
    (["-p", "vit-b16"], "give --samples N (a training budget), --samples-per-second X"),
    (["-p", "vit-b16", "--flops-budget", "1e21"], "--flops-budget 1e+21: the compute-optimal size (Hoffmann et al. "
                                                  "2022) is fitted on language models of tokens; vit-b16 is a model "
                                                  "of images"),
    (["-p", "whisper-large-v3", "--samples", "1e6", "-B", "2"], "--batch-size 2: train counts --samples N clips"),
    (["-p", "whisper-large-v3", "--samples", "1e6", "--image-size", "224"], "--image-size 224: whisper-large-v3 "
                                                                           "reads audio"),
    (["-p", "clip-vit-l14", "--samples", "1e6", "--images", "2"], "--images 2: clip-vit-l14's --samples N are its "
                                                                  "image-text pairs"),
    (["-p", "clip-vit-l14", "--tokens", "1e6"], "--tokens 1000000: clip-vit-l14 is a dual encoder"),
    (["-p", "qwen2.5-vl-7b", "--flops-budget", "1e23"], "qwen2.5-vl-7b has vision tower beside its language model "
                                                        "(--tower text sizes the language model alone)"),
    (["-p", "qwen2.5-vl-7b", "--samples", "1e6"], "--samples 1000000: qwen2.5-vl-7b is a model of tokens"),
    (["-p", "qwen2.5-vl-7b", "--tower", "text", "--tokens", "1e9", "--images", "2"], "--images 2: qwen2.5-vl-7b"),
    (["-p", "gpt2", "--tokens", "1e9", "--image-size", "224"], "--image-size 224: gpt2 reads tokens, not images"),
    (["-p", "gpt2", "--tokens", "1e9", "--audio-seconds", "3"], "--audio-seconds 3: gpt2 reads tokens, not audio"),
    (["-p", "gpt2", "--samples", "1e9"], "--samples 1000000000: gpt2 is a model of tokens; its budget is --tokens D"),
    (["--flops-budget", "1e21", "--images", "2"], "--images is not used there"),
])
def test_cli_refusals(args, message):
    out = runner.invoke(app, ["train", *args])
    (line,) = out.output.strip().splitlines()
    assert out.exit_code == 2 and line.startswith("tfcalc: error: ") and message in line, out.output


def test_chinchilla_still_sizes_a_multimodal_models_language_model():
    out = runner.invoke(app, ["train", "-p", "qwen2.5-vl-7b", "--tower", "text", "--flops-budget", "1e23", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["model"]["params_active"] == count(select(load_preset("qwen2.5-vl-7b"),
                                                                          "text")).params.active


@pytest.mark.parametrize("call, message", [
    (lambda: training_budget(_vit_model(), 1000), r"tokens=1000: vit-b16.s budget is in images \(samples=N\)"),
    (lambda: training_budget(load_preset("gpt2"), samples=10), "samples=10: gpt2 is a model of tokens"),
    (lambda: training_budget(_vit_model(), samples=0), "samples=0: expected a positive integer"),
    (lambda: training_budget(_vit_model(), samples=1, workload=Workload(phase="prefill", seq_len=197)),
     "workload.phase='prefill': a training budget counts train steps"),
    (lambda: training_budget(_vit_model(), samples=1, workload="224"), "workload='224': expected a tfcalc.Workload"),
    (lambda: mfu_of_run(_vit_model(), 100.0, 8, H100_BF16),
     r"tokens_per_second=100.0: vit-b16.s throughput .* \(samples_per_second\)"),
    (lambda: mfu_of_run(load_preset("gpt2"), None, 8, H100_BF16, samples_per_s=1.0), "samples_per_second=1.0: gpt2"),
    (lambda: mfu_of_run(_vit_model(), None, 8, H100_BF16), "samples_per_second=None: expected a positive number"),
])
def test_api_refusals(call, message):
    with pytest.raises(TfcalcError, match=message):
        call()


MEDIA_FLAGS = {"--samples": ["1M", "0", "1.5", "abc"], "--tokens": ["1T"], "--samples-per-second": ["3000", "-1"],
               "--tokens-per-second": ["1e6"], "--image-size": ["224", "448", "230", "0"], "--images": ["0", "2"],
               "--audio-seconds": ["10", "0.005", "x"], "--gpus": ["8"], "--gpu": ["h100-sxm"], "--mfu": ["0.4"],
               "--price": ["2"], "--flops-budget": ["1e23"], "--tower": ["text", "vision"], "-B": ["2"],
               "-N": ["512"], "--recompute": ["full"], "--lora-rank": ["8"]}


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.sampled_from(["vit-b16", "whisper-large-v3", "clip-vit-l14", "qwen2.5-vl-7b", "voxtral-mini-3b", "gpt2"]),
       st.lists(st.sampled_from(sorted(MEDIA_FLAGS)), min_size=1, max_size=4, unique=True), st.randoms())
def test_train_media_flags_together_budget_or_refuse_in_one_line(preset, flags, rnd):
    args = ["train", "-p", preset]
    for flag in flags:
        args += [flag, rnd.choice(MEDIA_FLAGS[flag])]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), (args, repr(r.exception))
    assert r.exit_code in (0, 2), (args, r.exit_code, r.output)
    if r.exit_code == 2:
        (line,) = r.output.strip().splitlines()
        assert line.startswith("tfcalc: error: "), (args, line)
        return
    data = json.loads(r.output)
    for key in ("flops", "flops_causal", "hardware_flops"):
        if key in data:
            assert isinstance(data[key], int) and data[key] > 0, (args, key, data[key])


def test_a_long_count_keeps_every_digit():
    # decimal's default context keeps 28 digits: 12345678901234567890123456789012 read as ...6790000 before
    assert _json(["-p", "gpt2", "--tokens", "12345678901234567890123456789012"])["tokens"] == \
        12345678901234567890123456789012
    assert _json(["-p", "vit-b16", "--samples", "1234567890123456789012345678901.2K"])["samples"] == \
        1234567890123456789012345678901200
    for flag, preset in (("--tokens", "gpt2"), ("--samples", "vit-b16")):
        out = runner.invoke(app, ["train", "-p", preset, flag, "1e999999T"])  # was decimal.Overflow's traceback
        assert out.exit_code == 2 and "expected a finite number of" in out.output and "Traceback" not in out.output
