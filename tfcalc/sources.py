"""Where a model comes from (a preset, a spec file, a Hugging Face config, flags alone) and how the user's flags
are laid on top of it: library code, so that the CLI only parses and prints.

Every flag the user typed is kept as typed: an override is applied even when it equals the value the spec had
derived (`-p gpt2 -d 1024 -H 16 --d-ff 3072` keeps d_ff 3072 instead of re-deriving 4 x 1024).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .arch import Workload, default_workload
from .errors import TfcalcError, validation_lines
from .loading import parse_json, read_spec_file, read_text_file
from .presets import find_preset
from .sizes import MAX_DIGITS
from .spec import ModelSpec


def apply_overrides(spec: ModelSpec, overrides: dict[str, Any]) -> ModelSpec:
    """The spec with the user's flags applied, every one of them; a changed spec is labelled with what changed.
    `--kinds conv.kernel=4` changes that size and keeps the kind's others (and the other kinds') as the spec has
    them. `tower` (--tower text|vision|audio|all) picks a multimodal model's tower first; the other flags then
    change that tower."""
    if "tower" in overrides:
        from .arch.towers import select

        tower, overrides = overrides["tower"], {k: v for k, v in overrides.items() if k != "tower"}
        spec = spec if tower is None else select(spec, tower)
    if overrides.get("kinds") is not None:
        merged = {name: dict(sizes) for name, sizes in spec.kinds.items()}
        for name, sizes in overrides["kinds"].items():
            merged.setdefault(name, {}).update(sizes)
        overrides = {**overrides, "kinds": merged}
    changed = {k: v for k, v in overrides.items() if k != "name" and getattr(spec, k) != v}
    if spec.towers and "d_model" in changed:  # the connectors (a merger) were sized to the language model's width
        raise TfcalcError(f"--d-model {changed['d_model']}: {spec.label}'s towers and connectors are sized to its "
                          f"text tower's d_model={spec.d_model} (its config's); --tower text counts the text tower "
                          "alone at another width")
    kept = {k: v for k, v in overrides.items() if k in changed or k == "name" or k not in spec.model_fields_set}
    if not kept:
        return spec
    if "name" not in kept and spec.name and changed:
        kept["name"] = f"{spec.name} ({', '.join(f'{k}={v}' for k, v in changed.items())})"
    return spec.replace(**kept)


def resolve(model: str | None, spec_file: Path | None, overrides: dict[str, Any],
            hf_config: Path | None = None) -> tuple[ModelSpec, str]:
    """(spec, source) from a preset name, a spec file or a Hugging Face config, with overrides; or from the
    flags alone."""
    given = [f"{flag} {value}" for flag, value in (("--preset", model), ("--spec", spec_file),
                                                    ("--hf-config", hf_config)) if value is not None]
    if len(given) > 1:
        raise TfcalcError(f"give one of --preset, --spec or --hf-config, not several (got {', '.join(given)})")
    if model is not None:
        base = find_preset(model)
    elif spec_file is not None:
        base = read_spec_file(spec_file)
    elif hf_config is not None:
        from .hf import read_hf_config

        base = read_hf_config(hf_config)
    else:
        if overrides.get("tower") is not None:
            from .arch.towers import select

            spec = _from_flags({k: v for k, v in overrides.items() if k != "tower"})
            return select(spec, overrides["tower"]), "flags"
        return _from_flags({k: v for k, v in overrides.items() if k != "tower"}), "flags"
    text_only(base, overrides.get("tower"))
    return apply_overrides(base.spec, overrides), base.source


def text_only(base, tower: str | None) -> None:
    """A multimodal config of which only the language model is read (`SpecFile.text_only`: its other towers are not
    modelled yet) is counted as that, by --tower text alone: the whole model is refused by name, never silently
    counted short."""
    if base.text_only and tower != "text" and tower not in base.spec.towers:
        towers = "".join(f", --tower {t} its {t} tower" for t in base.spec.towers)  # those it reads (Gemma 4's vision)
        raise TfcalcError(f"--tower {tower or 'all'}: {base.name}: {base.text_only}; --tower text counts its "
                          f"language model alone{towers}")


def checkpoint_quant(flag: str | None, hf_config: Path | None = None, base=None):
    """The weights' quantized format (tfcalc.plan.quant.Quant), or None: `--quant NAME` when given (`none`: none),
    else a Hugging Face config's quantization_config (refused by name when its method is not modelled). `base`:
    the SpecFile already read, if any."""
    if flag is None and hf_config is None:
        return None
    from .plan.quant import from_config, named

    if flag is not None:
        return named(flag)
    if base is None:
        from .hf import read_hf_config

        base = read_hf_config(hf_config)
    if base.quant_config is None:
        return None
    from .hf import find_config

    return from_config(base.quant_config, str(find_config(hf_config)))


def _from_flags(overrides: dict[str, Any]) -> ModelSpec:
    lines = []
    if (overrides.get("positions", "learned") == "learned" and "max_positions" not in overrides
            and overrides.get("inputs") != "images"):  # a model of images: its patches size the table
        # from flags alone, --seq-len is the workload: it must not size the model's position table
        lines.append("max_positions is required with learned positions (the default): give --max-positions (the "
                     "table's rows, part of the model; --seq-len is the workload) or --positions "
                     "rotary|sinusoidal|relative|none")
    try:
        spec = ModelSpec.model_validate(overrides)
    except ValidationError as e:
        missing = [err["loc"][0] for err in e.errors() if err["type"] == "missing"]
        hint = ["give --preset NAME, --spec FILE, --hf-config PATH, or at least " + ", ".join(
            f"--{m.replace('_', '-')}" for m in missing)] if missing else []
        raise TfcalcError("\n".join(validation_lines(e) + lines + hint)) from None
    if lines:
        raise TfcalcError("\n".join(lines))
    return spec


def model_arg(name: str) -> tuple[str | None, Path | None, Path | None]:
    """A model on the command line: (preset, spec file, Hugging Face config). A folder, a Hugging Face id
    (ORG/NAME where no such path exists), or a JSON file with a model_type, is a Hugging Face config; another .toml or .json file is a spec file; anything else a preset."""
    from . import hub

    path = Path(name)
    if path.is_dir() or hub.is_id(name):  # a folder, or ORG/NAME on the hub (read through its cached config.json)
        return None, None, path
    if name.lower().endswith(".json") and path.is_file():
        try:
            doc = parse_json(path, read_text_file(path, "spec file or config.json"))
            is_hf = isinstance(doc, dict) and "model_type" in doc
        except TfcalcError:
            is_hf = False  # read_spec_file reports what is wrong with it
        return (None, None, path) if is_hf else (None, path, None)
    if name.lower().endswith((".toml", ".json")) or path.is_file():
        return None, path, None
    return name, None, None


def workload_for(spec: ModelSpec, phase: str | None = None, context: int | None = None,
                 src_len: int | None = None, tgt_len: int | None = None, seq_len: int | None = None,
                 image_size: str | None = None, images: int | None = None,
                 audio_seconds: str | None = None) -> Workload:
    """The workload the user asked for, on top of the spec's own (batch_size sequences of seq_len tokens).

    `seq_len`: the --seq-len the user typed (already the spec's); `tgt_len` is the same for a decoder. In
    decode, each sequence processes one new token, and the cache holds `context` tokens (default: seq_len - 1,
    the last token of a seq_len-long sequence).

    `image_size` ("H" or "HxW" pixels, as typed) and `images`: a model of images' workload (--image-size, --images),
    default one image at the model's size: its tokens are the image's patches and the class token.

    `audio_seconds` (as typed): a model of audio's (--audio-seconds), default its window (Whisper's 30 s): 100 mel
    frames a second, an even number of them, half of them the encoder's tokens (src_len)."""
    image = _images(spec, image_size, images, phase or "train")
    frames = _mel_frames(spec, audio_seconds, src_len)
    if tgt_len is not None and seq_len is not None and tgt_len != seq_len:
        raise TfcalcError(f"tgt_len={tgt_len} and seq_len={seq_len}: the decoder's tokens are given twice; give one")
    base = default_workload(spec)
    phase = phase or "train"
    fields: dict[str, Any] = {"phase": phase, "batch_size": base.batch_size, "src_len": base.src_len}
    new = tgt_len if tgt_len is not None else seq_len
    if phase == "decode":
        fields["seq_len"] = 1 if new is None else new
        fields["context"] = spec.seq_len - 1 if context is None else context
    else:
        fields["seq_len"] = spec.seq_len if new is None else new
        fields["context"] = context or 0
    if src_len is not None:
        fields["src_len"] = src_len
    if image is not None:  # (batch_size, (H, W), tokens)
        fields["batch_size"], fields["image_size"], fields["seq_len"] = image
    if spec.towers:
        fields.update(_tower_images(spec, image_size, images))
    if frames is not None and spec.is_encoder_decoder:
        fields["mel_frames"], fields["src_len"] = frames, frames // 2
    elif frames is not None and spec.inputs == "audio":  # an audio encoder alone: its tokens are half the frames
        tokens = spec.sizes("audio_conv").tokens(frames)  # (its front end's)
        if seq_len is not None and seq_len != tokens:  # (--seq-len was dropped for the clip's tokens)
            hint = f" ({seq_len / 50:g} s is {seq_len:,} tokens)" if tokens == frames // 2 else ""  # 2 frames a token
            raise TfcalcError(f"--seq-len {seq_len}: {spec.label} reads audio, its tokens its front end's "
                              f"({frames:,} mel frames, {tokens:,} tokens); give --audio-seconds instead{hint}")
        fields["mel_frames"], fields["seq_len"] = frames, tokens
    elif frames is not None:  # a model with an audio tower: each sequence's audio
        fields["mel_frames"] = frames
    return Workload.model_validate(fields)


def _tower_images(spec: ModelSpec, image_size: str | None, images: int | None) -> dict[str, Any]:
    """A multimodal model's images: how many (default one) and their size (default the vision tower's), each side a
    multiple of its patch; the flags named as typed."""
    vision = spec.towers.get("vision")
    if vision is None:
        given = [f"--{flag} {value}" for flag, value in (("image-size", image_size), ("images", images))
                 if value is not None]
        if given:
            raise TfcalcError(f"{given[0]}: {spec.label} has no vision tower (it has "
                              f"{', '.join(['text', *spec.towers])})")
        return {}
    if images is not None and images < 0:
        raise TfcalcError(f"--images {images}: expected 0 or more images (0: a prompt of text alone)")
    out: dict[str, Any] = {"images": 1 if images is None else images}
    if image_size is not None and images == 0:  # no image to size: the flag would go unused
        raise TfcalcError(f"--image-size {image_size}: --images 0 is a prompt of text alone, with no image to size "
                          "(drop one)")
    if image_size is not None:
        H, W = parse_image_size(image_size)
        sizes = vision.sizes("patch_embedding")
        p = sizes.multiple  # the patch, times the blocks a merger concatenates (Qwen2-VL's 2 x 2)
        what = "patch size" if p == sizes.patch_size else "patch size x merge size"
        if H % p or W % p:
            raise TfcalcError(f"--image-size {image_size}: not a multiple of {spec.label}'s vision {what} {p} (the "
                              f"patches would not cover the image; {H // p * p}x{W // p * p} or "
                              f"{-(-H // p) * p}x{-(-W // p) * p} would)")
        out["image_size"] = (H, W)
    return out


def _mel_frames(spec: ModelSpec, audio_seconds: str | None, src_len: int | None) -> int | None:
    """A model of audio's mel frames: `audio_seconds` (--audio-seconds, as typed) x 100, an even number whose half
    fits the encoder's positions; default the model's window. None for a model of tokens or images (which refuse the
    flag); --src-len is refused for a model of audio (its encoder's tokens are the audio's)."""
    from decimal import Context, Decimal, InvalidOperation

    if "audio" in spec.towers:
        return _tower_audio(spec, audio_seconds)
    if spec.inputs != "audio":
        if audio_seconds is not None:
            raise TfcalcError(f"--audio-seconds {audio_seconds}: {spec.label} reads {spec.inputs}, not audio "
                              "(--audio-seconds is for a model of audio, Whisper, or with an audio tower, Voxtral)")
        return None
    sizes = spec.sizes("audio_conv")
    if src_len is not None:
        raise TfcalcError(f"--src-len {src_len}: {spec.label}'s encoder reads audio, its tokens half the mel frames "
                          "(give --audio-seconds)")
    if audio_seconds is None:
        return sizes.window
    if sizes.frame_length is not None:  # a feature extractor of its own (Gemma 4's tower alone)
        seconds = _seconds(audio_seconds)
        if seconds is None or seconds.adjusted() >= MAX_DIGITS - 3:
            raise TfcalcError(f"--audio-seconds {audio_seconds}: expected a positive number of seconds (30, 10.5)")
        return _clip_frames(spec, sizes, seconds, audio_seconds)
    try:
        seconds = Decimal(audio_seconds.strip().replace("_", "")) if audio_seconds.isascii() else None  # (not "१०")
    except InvalidOperation:
        seconds = None
    if seconds is None or not seconds.is_finite() or seconds <= 0:
        raise TfcalcError(f"--audio-seconds {audio_seconds}: expected a positive number of seconds (30, 10.5)")
    frames = _hundredths(seconds, audio_seconds)  # Whisper's feature extractor: a frame every 10 ms (hop 160 at 16 kHz)
    if frames != frames.to_integral_value() or int(frames) % 2:
        exact = Context(prec=2 * MAX_DIGITS + 10)  # (normalize rounds to the context's digits)
        raise TfcalcError(f"--audio-seconds {audio_seconds}: {frames.normalize(exact):f} mel frames (100 a second); "
                          "conv2's stride 2 takes an even number of whole frames (hundredths of a second: 10.5, "
                          "10.52)")
    if int(frames) // 2 > sizes.positions:
        raise TfcalcError(f"--audio-seconds {audio_seconds}: {int(frames):,} mel frames are {int(frames) // 2:,} "
                          f"encoder tokens, more than {spec.label}'s {sizes.positions:,} positions (at most "
                          f"{sizes.window / 100:g} s)")
    return int(frames)


def _hundredths(seconds, audio_seconds: str):
    """seconds x 100 (mel frames) exactly: Decimal's default context keeps 28 digits, rounding 30.000...01 s (a part
    of a frame past one window) down to 3,000 frames, and its % refuses a value past them."""
    from decimal import localcontext

    if seconds.adjusted() >= MAX_DIGITS - 3 or len(seconds.as_tuple().digits) > MAX_DIGITS:
        raise TfcalcError(f"--audio-seconds {audio_seconds}: sizes have at most {MAX_DIGITS} digits")
    with localcontext() as ctx:
        ctx.prec = 2 * MAX_DIGITS + 10
        return seconds * 100


def _seconds(audio_seconds: str):
    """--audio-seconds as typed: a positive Decimal, else None."""
    from decimal import Decimal, InvalidOperation

    if not audio_seconds.isascii():  # Decimal reads other scripts' digits ("१०" as 10)
        return None
    try:
        seconds = Decimal(audio_seconds.strip().replace("_", ""))
    except InvalidOperation:
        return None
    return seconds if seconds.is_finite() and seconds > 0 else None


def _tower_audio(spec: ModelSpec, audio_seconds: str | None) -> int:
    """A model with an audio tower (Voxtral): each sequence's mel frames, `audio_seconds` x 100 (a part of a frame
    counts as one), default one window of the tower (30 s). The tower runs whole windows: the processor pads the audio
    to them (towers.audio_windows)."""
    import math

    window = spec.towers["audio"].sizes("audio_conv").window
    if audio_seconds is None:
        return window
    seconds = _seconds(audio_seconds)
    if seconds is None:
        raise TfcalcError(f"--audio-seconds {audio_seconds}: expected a positive number of seconds (30, 10.5)")
    if seconds.adjusted() >= MAX_DIGITS - 3:
        raise TfcalcError(f"--audio-seconds {audio_seconds}: sizes have at most {MAX_DIGITS} digits")
    sizes = spec.towers["audio"].sizes("audio_conv")
    if sizes.frame_length is not None:  # a feature extractor of its own (Gemma 4's): from the clip's samples
        return _clip_frames(spec, sizes, seconds, audio_seconds)
    return math.ceil(_hundredths(seconds, audio_seconds))  # a frame every 10 ms (hop 160 at 16 kHz)


def _clip_frames(spec: ModelSpec, sizes, seconds, typed: str) -> int:
    """A clip's mel frames by its tower's feature extractor (Gemma 4's): its samples at 16 kHz, at most max_samples
    (longer audio is truncated: refused here), the tower's tokens what the processor puts in the prompt (a clip whose
    padding to pad_to samples adds a token the prompt has not: refused, the nearest lengths named)."""
    from .blocks.audio_conv import SAMPLE_RATE

    samples = seconds * SAMPLE_RATE
    if samples != samples.to_integral_value():
        raise TfcalcError(f"--audio-seconds {typed}: {samples.normalize():f} samples at 16 kHz; give a whole number "
                          "of samples (multiples of 1/16,000 s)")
    samples = int(samples)
    if samples > sizes.max_samples:
        raise TfcalcError(f"--audio-seconds {typed}: {spec.label}'s feature extractor truncates a clip at "
                          f"{sizes.max_samples:,} samples ({sizes.max_samples / SAMPLE_RATE:g} s); at most that")
    frames = sizes.frames(samples)
    if sizes.tokens(frames) != sizes.prompt_tokens(samples) or not frames:
        step = sizes.pad_to
        near = [n for n in (samples // step * step, -(-samples // step) * step) if 0 < n <= sizes.max_samples]
        raise TfcalcError(f"--audio-seconds {typed}: the tower computes {sizes.tokens(frames)} tokens of the clip, its "
                          f"processor puts {sizes.prompt_tokens(samples)} in the prompt (the padding to {step} samples "
                          f"adds one): not modelled; "
                          f"{' or '.join(f'{n / SAMPLE_RATE:g}' for n in near) or 'a longer clip'} s would do")
    return frames


def parse_image_size(text: str) -> tuple[int, int]:
    """'224' -> (224, 224), '384x512' -> (384, 512): an image's height and width in pixels (--image-size)."""
    import re

    match = re.fullmatch(r"\s*([0-9_]+)\s*(?:[xX]\s*([0-9_]+)\s*)?", text)
    try:
        hw = (int(match.group(1)), int(match.group(2) or match.group(1))) if match else None
    except ValueError:
        hw = None
    if hw is None or min(hw) < 1 or max(hw) >= 10**9:
        raise TfcalcError(f"--image-size {text}: expected H or HxW, positive pixels (224, 384x512)")
    return hw


def _images(spec: ModelSpec, image_size: str | None, images: int | None,
            phase: str) -> tuple[int, tuple[int, int], int] | None:
    """(images, (H, W), tokens per image) of a model of images; None for a model of tokens (which refuses both
    flags). The flags are named as typed."""
    if spec.towers:
        return None  # the images go to the vision tower (_tower_images); 0: a prompt of text alone
    if images is not None and images < 1:
        raise TfcalcError(f"--images {images}: expected at least one image")
    if spec.inputs != "images":
        given = [f"--{flag} {value}" for flag, value in (("image-size", image_size), ("images", images))
                 if value is not None]
        if given:
            raise TfcalcError(f"{given[0]}: {spec.label} reads {spec.inputs}, not images (--image-size and --images "
                              "are for a model of images: ViT)")
        return None
    if phase != "train":
        raise TfcalcError(f"--phase {phase}: {spec.label} is a bidirectional encoder of images; it has no KV cache to "
                          "prefill or decode (a forward over whole images is --phase train, the default)")
    sizes = spec.sizes("patch_embedding")
    H, W = (sizes.height, sizes.width) if image_size is None else parse_image_size(image_size)
    p = sizes.multiple
    if H % p or W % p:
        what = (f"patch size {p}" if sizes.merge_size == 1 else
                f"patch size {sizes.patch_size} x merge size {sizes.merge_size} = {p}")
        blocks = "" if sizes.merge_size == 1 else f" in {sizes.merge_size}x{sizes.merge_size} blocks"
        raise TfcalcError(f"--image-size {image_size}: not a multiple of {spec.label}'s {what} (the patches "
                          f"would not cover the image{blocks}; {H // p * p}x{W // p * p} or "
                          f"{-(-H // p) * p}x{-(-W // p) * p} would)")
    if images is not None and spec.batch_size not in (1, images):
        raise TfcalcError(f"--images {images} and batch_size={spec.batch_size}: the images are the batch; give one")
    return (spec.batch_size if images is None else images), (H, W), sizes.tokens(H, W)
