"""A reliability pass over the multimodal command line and API (count, compare, check, memory, infer with --tower,
--image-size, --images, --audio-seconds; tfcalc.count and the plans with a Workload of images or audio): each case
here is one a fuzz round found. The rule: exit 0, or exit 2 with one `tfcalc: error:` line naming the flag (or the
API's field) and the value as typed; never a traceback, never a flag silently dropped."""

import pytest
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.cli import app

runner = CliRunner()


def _refused(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (args, r.exit_code, r.output, r.exception)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfcalc: error: "), r.output
    return lines[0]


# ---- the API: images on a model with an audio tower and no vision tower ------------------------------------------

def test_images_on_a_model_without_a_vision_tower_name_images_not_a_missing_image_size():
    # Voxtral has a text and an audio tower: images=2 with no image_size was a TypeError (None[0]) in the message
    with pytest.raises(TfcalcError, match=r"^images=2: voxtral-mini-3b has no vision tower"):
        count(load_preset("voxtral-mini-3b"), Workload(seq_len=4096, images=2))


# ---- decode: the images' tokens are among the cached ones ---------------------------------------------------------

@pytest.mark.parametrize("args", [["count", "-p", "qwen2.5-vl-7b", "--phase", "decode", "--context", "16"],
                                  ["memory", "-p", "qwen2.5-vl-7b", "--context", "16"],
                                  ["count", "-p", "qwen2.5-vl-7b", "--phase", "decode", "--context", "300",
                                   "--images", "2"]])
def test_decode_refuses_images_whose_tokens_the_cache_cannot_hold(args):
    # one 448 x 448 image of Qwen2.5-VL: 32 x 32 patches of 14, merged 2 x 2 into 256 tokens of the prompt; a
    # prefill of them was refused (seq_len), a decode against a 16-token cache "encoded at the prefill" was counted
    line = _refused(args)
    context = args[args.index("--context") + 1]
    tokens = 256 * (2 if "--images" in args else 1)
    assert line.startswith(f"tfcalc: error: context={context}: the images' {tokens} tokens, prefilled into the KV "
                           "cache, do not fit"), line


def test_decode_takes_images_the_cache_holds_and_a_prompt_of_text_alone():
    fits = runner.invoke(app, ["count", "-p", "qwen2.5-vl-7b", "--phase", "decode", "--context", "256", "--json"])
    text = runner.invoke(app, ["count", "-p", "qwen2.5-vl-7b", "--phase", "decode", "--context", "16", "--images",
                               "0", "--json"])
    assert fits.exit_code == 0 and text.exit_code == 0, (fits.output, text.output)


def test_decode_of_audio_the_cache_cannot_hold_names_context():
    # Voxtral Mini: one 30 s window is 1,500 encoder positions, 4 to a projector row: 375 tokens of the prompt
    with pytest.raises(TfcalcError, match=r"^context=100: the audio's 375 tokens, prefilled into the KV cache"):
        count(load_preset("voxtral-mini-3b"), Workload(phase="decode", seq_len=1, context=100))


# ---- memory of a dual encoder (CLIP): no KV cache to plan, a train step's memory as an encoder's -----------------

@pytest.mark.parametrize("extra", [[], ["--images", "2"], ["--image-size", "336"]])
def test_memory_of_clip_plans_a_train_step_not_a_decode_the_user_never_asked_for(extra):
    # CLIP's text tower is causal but has no LM head: memory took it for a decoder (default: decode) and refused
    # "phase='decode'", a phase never typed; SigLIP (bidirectional) and BERT plan their train step
    r = runner.invoke(app, ["memory", "-p", "clip-vit-l14", *extra], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "workload: train: B=1, 77 new tokens, " in r.output, r.output


def test_an_inference_flag_on_clip_is_refused_by_the_flag_typed():
    line = _refused(["memory", "-p", "clip-vit-l14", "--context", "10"])
    assert line.startswith("tfcalc: error: --context: an inference flag; clip-vit-l14 is an encoder of texts and "
                           "images with no KV cache"), line


def test_a_bidirectional_dual_encoder_in_decode_is_one_line():
    # SigLIP's text tower is bidirectional and has no LM head: the phase was refused twice, in two lines
    line = _refused(["memory", "-p", "siglip-so400m", "--phase", "decode"])
    assert "phase='decode': siglip-so400m is a bidirectional encoder" in line, line


# ---- a whole config whose tower's config is absent: the tower its config class builds ----------------------------

LLAVA_TEXT = {"model_type": "llama", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 1024}


@pytest.mark.parametrize("vision", ["absent", None])
def test_llava_without_vision_config_counts_the_tower_llavaconfig_builds(tmp_path, vision):
    # LlavaConfig builds CLIP ViT-L/14 at 336 (its SubConfigSpec init_kwargs) when vision_config is absent or null;
    # tfcalc counted CLIPVisionConfig's own defaults (ViT-B/32 at 224): 87,519,456 parameters instead of 303,579,104
    import json

    import torch
    import transformers

    from tfcalc.hf import read_hf_config

    config = {"model_type": "llava", "image_token_index": 299, "text_config": LLAVA_TEXT}
    if vision is None:
        config["vision_config"] = None
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with torch.device("meta"):
        model = transformers.LlavaForConditionalGeneration(transformers.AutoConfig.for_model(**config))
    expected = sum(p.numel() for p in model.parameters())
    spec = read_hf_config(path).spec
    assert spec.towers["vision"].d_model == 1024 and spec.towers["vision"].n_layers == 24
    # one 336 x 336 image: 24 x 24 patches of 14, the class token dropped ("default"), 576 tokens of the prompt
    assert count(spec).params.total == expected
