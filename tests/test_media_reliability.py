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


# ---- --audio-seconds past Decimal's 28 digits: exact, never a traceback nor a rounded frame ----------------------

@pytest.mark.parametrize("typed, said", [
    # 10^30 s: Decimal's % on 10^32 frames raised InvalidOperation (DivisionImpossible) out of the command
    ("1" + "0" * 30, "1" + "0" * 30 + ": 100,000,000,000,000,000,000,000,000,000,000 mel frames are "
                     "50,000,000,000,000,000,000,000,000,000,000 encoder tokens, more than whisper-large-v3's 1,500 "
                     "positions"),
    ("1e400", "1e400: 1,000,000,000,"),
    ("1e600", "1e600: sizes have at most 500 digits"),
    # 3,000 frames and 2 x 10^-36 of one: not a whole number of frames (it was shown rounded as 3000)
    ("30.000000000000000000000000000000000002", "30.000000000000000000000000000000000002: "
                                                "3000.0000000000000000000000000000000002 mel frames"),
])
def test_whisper_audio_seconds_past_28_digits_is_refused_exactly(typed, said):
    assert _refused(["count", "-p", "whisper-large-v3", "--audio-seconds", typed]).startswith(
        f"tfcalc: error: --audio-seconds {said}")


def test_voxtral_audio_a_part_of_a_frame_past_one_window_takes_a_second_window():
    # 30 s and 2 x 10^-38 s: 3,000 mel frames and a part of one, which counts as one (3,001 frames: two windows of
    # 3,000, 2 x 375 tokens of the prompt); Decimal's 28 digits rounded it to 3,000 frames, one window
    from tfcalc.arch.towers import image_tokens
    from tfcalc.sources import workload_for

    spec = load_preset("voxtral-mini-3b")
    w = workload_for(spec, audio_seconds="30.000000000000000000000000000000000002")
    assert w.mel_frames == 3001
    assert image_tokens(spec, w) == 2 * 375


# ---- infer of a model with no KV cache: refused by the command, not by a phase it has no flag for ---------------

@pytest.mark.parametrize("preset, what", [("clip-vit-l14", "encodes texts and images (no LM head)"),
                                          ("siglip-so400m", "is a bidirectional encoder"),
                                          ("bert-base", "is a bidirectional encoder")])
def test_infer_refuses_a_model_without_a_kv_cache_in_one_line_naming_no_phase(preset, what):
    # was "phase='prefill': ..." (infer has no --phase), and two lines for SigLIP
    line = _refused(["infer", "-p", preset, "--gpu", "h100-sxm"])
    assert line == (f"tfcalc: error: tfcalc infer: {preset} {what}: it has no KV cache to prefill or decode; infer "
                    "plans a decoder's prefill and decode (count counts its forward, memory its train step)")


@pytest.mark.parametrize("args, said", [
    (["-p", "qwen2.5-vl-7b", "--context", "16"], "--context 16: the images' 256 tokens in the prompt do not fit "
                                                 "batch_size x context = 16 tokens"),
    (["-p", "voxtral-mini-3b", "--context", "100", "--audio-seconds", "5"],
     "--context 100: the audio's 375 tokens in the prompt do not fit batch_size x context = 100 tokens"),
])
def test_infer_names_the_context_typed_when_the_images_do_not_fit_the_prompt(args, said):
    # infer's prompt is --context; the refusal named seq_len=16, a flag infer's user did not type
    line = _refused(["infer", "--gpu", "h100-sxm", *args])
    assert line.startswith(f"tfcalc: error: {said}"), line


@pytest.mark.parametrize("model_type, vision, layer", [
    ("llava", {"model_type": "clip_vision_model", "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
               "num_attention_heads": 4, "image_size": 32, "patch_size": 8}, -4),
    ("llava", {"model_type": "clip_vision_model", "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
               "num_attention_heads": 4, "image_size": 32, "patch_size": 8}, 3),
    ("mistral3", {"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "head_dim": 8, "image_size": 32, "patch_size": 4}, -10),
])
def test_a_vision_feature_layer_past_the_towers_hidden_states_is_refused(tmp_path, model_type, vision, layer):
    # two blocks: three hidden states (the embeddings' and each block's), -3..2; get_image_features indexes
    # hidden_states[vision_feature_layer] (transformers 5.24, modeling_llava.py / modeling_mistral3.py): IndexError.
    # tfcalc counted the model as if the index were one.
    import json

    text = {**LLAVA_TEXT, "model_type": "mistral"} if model_type == "mistral3" else LLAVA_TEXT
    config = {"model_type": model_type, "text_config": text, "vision_config": vision,
              "vision_feature_layer": layer}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    line = _refused(["count", "--hf-config", str(path)])
    assert f"vision_feature_layer={layer} is not modelled: the vision tower has 3 hidden states" in line, line
    path.write_text(json.dumps({**config, "vision_feature_layer": -3}))  # the embeddings' output: taken
    ok = runner.invoke(app, ["count", "--hf-config", str(path), "-N", "512"])
    assert ok.exit_code == 0, ok.output


def test_audio_on_a_vision_language_model_is_one_problem_through_the_api():
    # mel_frames on Qwen2.5-VL (a text and a vision tower): "has no audio tower" and "reads tokens, not audio
    # (inputs='audio')", the same problem twice
    with pytest.raises(TfcalcError) as e:
        count(load_preset("qwen2.5-vl-7b"), Workload(seq_len=4096, mel_frames=3000))
    assert str(e.value) == "mel_frames=3000: qwen2.5-vl-7b has no audio tower"


# ---- Mistral 3: a Pixtral image_size that is not a whole number of merged blocks -----------------------------------

def _mistral3(tmp_path, image_size: int, patch_size: int, merge: int):
    import json

    config = {"model_type": "mistral3", "spatial_merge_size": merge,
              "text_config": {**LLAVA_TEXT, "model_type": "mistral"},
              "vision_config": {"model_type": "pixtral", "hidden_size": 32, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "intermediate_size": 37, "image_size": image_size,
                                "patch_size": patch_size}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_mistral3_tower_image_is_the_largest_of_whole_merged_blocks(tmp_path):
    # 48 pixels of 14-pixel patches merged 2 x 2: the largest image is 28 x 28 (2 x 2 patches, one token); the tower's
    # own seq_len was the 3 x 3 patches of 42 x 42, and the config was refused as "towers.vision={...487 characters}:
    # seq_len=9: ... runs on one image's 4 tokens", naming no field of the config
    from tfcalc.arch.towers import image_tokens
    from tfcalc.hf import read_hf_config
    from tfcalc.verify import hf_model

    path = _mistral3(tmp_path, 48, 14, 2)
    spec = read_hf_config(path).spec
    w = Workload(seq_len=64)
    assert count(spec, w).workload.images == 1 and image_tokens(spec, count(spec, w).workload) == 1
    report = hf_model.compare(path, spec, w)
    assert report.match, [r for r in report.rows if r.match is False]


def test_mistral3_merge_larger_than_the_tower_image_is_refused_by_name(tmp_path):
    line = _refused(["count", "--hf-config", str(_mistral3(tmp_path, 48, 6, 9))])
    assert "spatial_merge_size=9 is not modelled: the vision tower's image_size=48x48 holds no 9x9 block of 6-pixel " \
           "patches" in line, line


# ---- digits of other scripts: refused as --image-size refuses them, not read as ASCII ones -------------------------

@pytest.mark.parametrize("args, flag", [
    (["count", "-p", "qwen2.5-vl-7b", "--images", "१२"], "--images"),  # int() read it as 12
    (["count", "-p", "gpt2", "-N", "१२k"], "--seq-len"),  # the sweep's \d read it as 12k
    (["count", "-p", "whisper-large-v3", "--audio-seconds", "१०"], "--audio-seconds"),  # Decimal read it as 10
    (["count", "-p", "voxtral-mini-3b", "--audio-seconds", "١٠"], "--audio-seconds"),
    (["count", "-p", "qwen2.5-vl-7b", "--image-size", "４４８"], "--image-size"),  # (refused already)
])
def test_digits_of_other_scripts_are_refused_naming_the_flag(args, flag):
    line = _refused(args)
    assert flag in line and args[-1] in line, line


# ---- an image size with no image: used by nothing, refused ----------------------------------------------------------

@pytest.mark.parametrize("command", [["count"], ["memory"], ["infer", "--gpu", "h100-sxm"]])
def test_an_image_size_beside_images_0_is_refused_not_dropped(command):
    # --images 0 is a prompt of text alone: --image-size 448 sized nothing and the count went on without it
    line = _refused([*command, "-p", "qwen2.5-vl-7b", "--images", "0", "--image-size", "448"])
    assert line == "tfcalc: error: --image-size 448: --images 0 is a prompt of text alone, with no image to size " \
                   "(drop one)"


def test_an_image_size_beside_images_0_is_refused_through_the_api():
    with pytest.raises(TfcalcError, match=r"^image_size=448x448: images=0 is a prompt of text alone"):
        count(load_preset("qwen2.5-vl-7b"), Workload(seq_len=4096, images=0, image_size=(448, 448)))


# ---- a merger wider than the language model: said, as Qwen3-VL's is ---------------------------------------------

def test_a_qwen2_5_vl_merger_width_apart_from_the_text_width_is_said(tmp_path):
    # vision_config.out_hidden_size 40 beside text_config.hidden_size 32: transformers builds it, its forward fails
    # ("Image features and image tokens do not match", transformers 5.24); Qwen3-VL's reading said so in a note,
    # Qwen2-VL's, Qwen2.5-VL's and GLM-4.1V's (qwen_vl_tokens) said nothing
    import json

    config = {"model_type": "qwen2_5_vl", "image_token_id": 299, "video_token_id": 298,
              "vision_start_token_id": 297,
              "text_config": {"model_type": "qwen2_5_vl_text", "vocab_size": 300, "hidden_size": 32,
                              "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                              "num_key_value_heads": 2, "max_position_embeddings": 128,
                              "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}},
              "vision_config": {"model_type": "qwen2_5_vl_vision", "depth": 2, "hidden_size": 32,
                                "intermediate_size": 40, "out_hidden_size": 40, "num_heads": 2, "patch_size": 2,
                                "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 8,
                                "fullatt_block_indexes": [1]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = runner.invoke(app, ["count", "--hf-config", str(path), "--image-size", "16", "-N", "64"])
    assert r.exit_code == 0, r.output
    assert "the vision tower's merger puts out 40 channels, not the language model's hidden_size=32" in " ".join(
        r.output.split())  # the source line's notes, wrapped to the terminal


# ---- an audio tower alone: --seq-len is its tokens, not dropped for the window's -----------------------------------

def test_seq_len_on_an_audio_tower_alone_is_refused_not_dropped():
    # Voxtral's audio tower alone: -N 100 was replaced by the default window's 1,500 tokens, silently
    line = _refused(["count", "-p", "voxtral-mini-3b", "--tower", "audio", "-N", "100"])
    assert line.startswith("tfcalc: error: --seq-len 100: voxtral-mini-3b (audio)") and \
        "give --audio-seconds instead (2 s is 100 tokens)" in line, line
    agree = runner.invoke(app, ["count", "-p", "voxtral-mini-3b", "--tower", "audio", "-N", "500",
                                "--audio-seconds", "10", "--json"])
    assert agree.exit_code == 0, agree.output


@pytest.mark.parametrize("extra", [["--images", "5"], ["--image-size", "896"], ["--audio-seconds", "10"]])
def test_serve_refuses_the_media_flags_it_does_not_plan(extra):
    # memory --serve planned the same capacity whatever --images, --image-size or --audio-seconds said
    line = _refused(["memory", "-p", "qwen2.5-vl-7b", "--serve", "--gpu", "h100-sxm", *extra])
    assert line.startswith(f"tfcalc: error: {extra[0]} {extra[1]}: not planned with --serve"), line


@pytest.mark.parametrize("kwargs, said", [({"images": -1}, "images=-1: Input should be greater than or equal to 0"),
                                          ({"image_size": 224}, "image_size=224: Input should be a valid tuple"),
                                          ({"mel_frames": 0}, "mel_frames=0: Input should be greater than 0")])
def test_inference_plan_refuses_bad_media_arguments_as_tfcalc_errors_naming_them(kwargs, said):
    # they reached the caller as pydantic's ValidationError (its type, its URL, several lines), unlike
    # inference_plan's other arguments
    from tfcalc.plan.roofline import inference_plan

    with pytest.raises(TfcalcError) as e:
        inference_plan(load_preset("qwen2.5-vl-7b"), "h100-sxm", 4096, **kwargs)
    assert str(e.value) == said


# ---- -d on a whole multimodal model: its connectors are sized to the text tower's width ---------------------------

@pytest.mark.parametrize("preset, width", [("mistral-small-3.1-24b", 5120), ("qwen2.5-vl-7b", 3584),
                                           ("clip-vit-l14", 768)])
def test_a_new_text_width_on_a_whole_multimodal_model_is_refused(preset, width):
    # -d 1024 on Mistral Small 3.1 kept its projector putting out 5,120 channels into a 1,024-wide language model
    # (35,652,608 parameters, as at 5,120): a model transformers cannot build from any config
    line = _refused(["count", "-p", preset, "-d", "1024", "-H", "8"])
    assert line.startswith(f"tfcalc: error: --d-model 1024: {preset}'s towers and connectors are sized to its text "
                           f"tower's d_model={width}"), line
    alone = runner.invoke(app, ["count", "-p", preset, "--tower", "text", "-d", "1024", "-H", "8", "--json"])
    assert alone.exit_code == 0, alone.output


# ---- check --memory of a tower of tiles at batch 1: no class-token gradient view to expect -------------------------

def test_check_memory_of_a_tower_of_tiles_expects_no_class_token_view(tmp_path):
    # check -p llama3.2-11b-vision --memory --tower vision reported gradients 1,727,134,758 = 1,727,134,758 as a
    # MISMATCH: at batch 1 it expected the class token's .grad to keep a view of the embeddings' gradient, but Mllama
    # expands the class token over the batch's 4 tiles, whose backward sums into a tensor of its own (0 bytes more)
    import json

    from tfcalc.arch.inventory import default_workload
    from tfcalc.hf import read_hf_config
    from tfcalc.verify.memory_check import check_memory

    config = dict(model_type="mllama_vision_model", hidden_size=32, attention_heads=4, num_hidden_layers=4,
                  num_global_layers=2, intermediate_size=48, image_size=28, patch_size=7, max_num_tiles=4,
                  intermediate_layers_indices=[1, 3], vision_output_dim=96, num_channels=3)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = read_hf_config(path).spec
    workload = default_workload(spec)
    assert workload.batch_size == 1 and spec.sizes("patch_embedding").tiles == 4
    rows = {r.category: r for r in check_memory(spec, workload).rows}
    assert rows["gradients"].known == 0 and rows["gradients"].match, rows["gradients"]
    assert rows["gradients"].measured == rows["gradients"].analytic


def test_serve_capacity_of_short_sequences_is_not_refused_for_an_image_they_do_not_plan():
    # --serve plans sequences of --context tokens, whatever they encode: its decode step must not ask the default
    # image's 256 tokens to fit a 99-token cache (the decode check above)
    r = runner.invoke(app, ["memory", "-p", "qwen2.5-vl-7b", "--serve", "--gpu", "h100-sxm", "--context", "100",
                            "--json"])
    assert r.exit_code == 0, r.output
