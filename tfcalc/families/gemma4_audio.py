"""Gemma 4's audio tower (model_type gemma4_audio: a gemma4 config.json's audio_config; transformers'
Gemma4AudioModel), the connector into its language model (embed_audio) and the gemma4 config read whole with its
three towers (GEMMA4_WHOLE: tfcalc/families/gemma4.py's `gemma4` line).

transformers' Gemma4AudioModel, a conformer (Universal Speech Model):
  * Gemma4AudioSubSampleConvProjection: the log-mel frames [B, F, 128] through two Conv2d (kernel 3 x 3, stride 2,
    padding 1, no bias; 1 -> c0 -> c1 = subsampling_conv_channels), each with a LayerNorm over its channels (a weight,
    no bias) and ReLU, then input_proj_linear, Linear((c0 // 4) * c1, D) without a bias: ceil(ceil(F / 2) / 2)
    tokens. `kinds.audio_conv` with `subsample` (tfcalc/blocks/audio_conv/). input_proj reads c0 // 4 frequency rows
    after the two strides: the feature extractor's 128 mel bins for c0 = 128; tfcalc takes 4 * (c0 // 4) mel bins
    (128 for the published configs; the audio_config does not name them);
  * num_hidden_layers Gemma4AudioLayer: the `conformer` kind (tfcalc/blocks/conformer/): two half feed-forwards
    (D -> 4D -> D, hidden_act), chunked local attention with relative positions (attention_chunk_size,
    attention_context_left/right; the positions' sinusoids through relative_k_proj; per_dim_scale; the logit cap),
    the light convolution module (linear_start D -> 2D, GLU, a depthwise causal Conv1d of conv_kernel_size taps,
    conv_norm, the activation, linear_end), norm_out; every linear without a bias, every norm an RMSNorm with a
    weight; Gemma4AudioRelPositionalEncoding's sinusoids are buffers (no parameters);
  * output_proj, Linear(D, output_proj_dims) with a bias, over every token: `kinds.token_projection`.
Gemma4MultimodalEmbedder (embed_audio): a weightless RMSNorm over output_proj_dims, then embedding_projection
Linear(output_proj_dims, the language model's hidden_size) without a bias, on every token of the tower's output; the
clip's tokens take its places in the prompt.

The workload is clips of audio (--audio-seconds S, one clip per sequence; default 30 s, the feature extractor's
max_length of 480,000 samples, which truncates longer audio): the feature extractor pads the 16 kHz samples to a
multiple of 128, prepends 160 zeros and frames them (windows of 321 samples every 160: (N - 161) // 160 + 1 frames,
2,999 for 30 s), the tower runs every frame (750 tokens for 30 s); the processor puts in the prompt the tokens of its
mask (a frame is real when its last sample is), as many as the tower computes for a clip of whole 128-sample blocks.
The clamps of use_clipped_linears and gradient_clipping, residual_weight, the logit cap: elementwise, not counted.
"""

from __future__ import annotations

from ..hf import activation_of, refuse_if
from ..sizes import MAX_DIGITS
from .gemma4_vision import GEMMA4_WHOLE as VISION_WHOLE
from .gemma4_vision import embed_vision, gemma4_parts
from .registry import Family, register

MAX_SAMPLES = 480_000  # Gemma4AudioFeatureExtractor's max_length (30 s at 16 kHz): it truncates a longer clip
FRAME_LENGTH, PAD_TO = 320, 128  # its frame_length (20 ms at 16 kHz) and pad_to_multiple_of

DEFAULTS = dict(hidden_size=1024, num_hidden_layers=12, num_attention_heads=8, hidden_act="silu",
                subsampling_conv_channels=[128, 32], conv_kernel_size=5, residual_weight=0.5,
                attention_chunk_size=12, attention_context_left=13, attention_context_right=0,
                attention_logit_cap=50.0, attention_invalid_logits_value=-1.0e9, use_clipped_linears=True,
                rms_norm_eps=1e-6, gradient_clipping=1e10, output_proj_dims=1536)
TYPES = dict(hidden_size="size", num_hidden_layers="size", num_attention_heads="size", hidden_act="str",
             subsampling_conv_channels="integers", conv_kernel_size="size", residual_weight="float",
             attention_chunk_size="size", attention_context_left="size", attention_context_right="count",
             attention_logit_cap="float", attention_invalid_logits_value="float", use_clipped_linears="bool",
             rms_norm_eps="float", gradient_clipping="float", output_proj_dims="size")

SUB = r"subsample_conv_projection"
LAYER = r"layers\.\d+"
FF = r"(?:\.linear)?"
COMPONENTS = [  # Gemma4AudioModel's module names -> tfcalc components (check --hf-config)
    (rf"{SUB}\.layer0\.conv", "embedding/conv0"),
    (rf"{SUB}\.layer0\.norm", "embedding/norm0"),
    (rf"{SUB}\.layer1\.conv", "embedding/conv1"),
    (rf"{SUB}\.layer1\.norm", "embedding/norm1"),
    (rf"{SUB}\.input_proj_linear", "embedding/proj"),
    *[(rf"{LAYER}\.feed_forward{i}\.{hf}", f"ff{i}/{ours}") for i in (1, 2) for hf, ours in (
        ("pre_layer_norm", "norm"), (f"ffw_layer_1{FF}", "up"), (f"ffw_layer_2{FF}", "down"),
        ("post_layer_norm", "post_norm"))],
    (rf"{LAYER}\.norm_pre_attn", "attention/norm"),
    (rf"{LAYER}\.norm_post_attn", "attention/post_norm"),
    (rf"{LAYER}\.self_attn\.(q_proj|k_proj|v_proj){FF}", "attention/qkv"),
    (rf"{LAYER}\.self_attn\.post{FF}", "attention/out"),
    (rf"{LAYER}\.self_attn\.relative_k_proj", "attention/relative"),
    (rf"{LAYER}\.self_attn\.per_dim_scale", "attention/scale"),
    (rf"{LAYER}\.self_attn", "attention/core"),
    (rf"{LAYER}\.lconv1d\.pre_layer_norm", "lconv/norm"),
    (rf"{LAYER}\.lconv1d\.linear_start{FF}", "lconv/start"),
    (rf"{LAYER}\.lconv1d\.depthwise_conv1d", "lconv/conv"),
    (rf"{LAYER}\.lconv1d\.conv_norm", "lconv/conv_norm"),
    (rf"{LAYER}\.lconv1d\.linear_end{FF}", "lconv/end"),
    (rf"{LAYER}\.norm_out", "conformer/norm"),
    (r"output_proj", "output_proj"),
]


def gemma4_audio(cfg: dict, notes: list[str]) -> dict:
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    refuse_if(cfg, "num_attention_heads", D % H != 0, f"hidden_size={D} is not a multiple of it (the attention's "
              "heads are hidden_size // num_attention_heads wide and its output projection reads hidden_size)")
    channels = cfg["subsampling_conv_channels"]
    refuse_if(cfg, "subsampling_conv_channels", len(channels) != 2 or min(channels) < 1,
              "two positive Conv2d channel counts (Gemma4AudioSubSampleConvProjection builds layer0 and layer1)")
    refuse_if(cfg, "subsampling_conv_channels", channels[0] < 4, "input_proj reads subsampling_conv_channels[0] // 4 "
              "frequency rows: at least 4")
    for key in ("attention_chunk_size", "attention_context_left", "attention_context_right", "conv_kernel_size"):
        refuse_if(cfg, key, cfg[key] >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    refuse_if(cfg, "subsampling_conv_channels", max(channels) >= 10 ** MAX_DIGITS,
              f"sizes have at most {MAX_DIGITS} digits")
    mel = 4 * (channels[0] // 4)
    audio = {"mel_bins": mel, "subsample": channels, "frame_length": FRAME_LENGTH, "pad_to": PAD_TO,
             "max_samples": MAX_SAMPLES}
    from ..blocks.audio_conv import AudioSizes

    sizes = AudioSizes.model_validate(audio)
    window = sizes.window
    audio["positions"] = tokens = sizes.tokens(window)  # the longest clip's tokens (750: audio_seq_length)
    notes.append(f"the audio tower's input: {mel} mel bins (input_proj reads subsampling_conv_channels[0] // 4 = "
                 f"{channels[0] // 4} frequency rows after the two stride-2 Conv2d); a clip of at most 30 s "
                 f"({window:,} mel frames, {tokens} tokens; the feature extractor truncates longer audio), one clip "
                 "per sequence by default, --audio-seconds S sets its length")
    notes.append("the conformer's clamps (gradient_clipping, use_clipped_linears' buffers), residual_weight, "
                 "per_dim_scale's softplus and the attention logit cap: elementwise (not counted); its relative "
                 "positions' sinusoids are buffers (no parameters)")
    return dict(n_layers=cfg["num_hidden_layers"], d_model=D, n_heads=H, n_kv_heads=H, d_head=D // H, d_ff=4 * D,
                mlp="standard", activation=activation_of(cfg, "hidden_act"), norm="rmsnorm", bias=False,
                mlp_bias=False, causal=False, lm_head=False, final_norm=False, positions="none", inputs="audio",
                seq_len=tokens, context=tokens, block_pattern=["conformer"],
                kinds={"audio_conv": audio,
                       "conformer": {"chunk": cfg["attention_chunk_size"], "left": cfg["attention_context_left"],
                                     "right": cfg["attention_context_right"], "kernel": cfg["conv_kernel_size"]},
                       "token_projection": {"d_out": cfg["output_proj_dims"], "bias": True}})


def embed_audio(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """Gemma4MultimodalEmbedder over every token of the audio tower's output (output_proj_dims wide): a weightless
    RMSNorm, then one matmul to the language model's width without a bias; with embed_vision where there is a vision
    tower."""
    out = embed_vision(cfg, towers, notes)
    if "audio" in towers:
        audio, text = towers["audio"], towers["text"]
        notes.append("gemma4: every token of each clip through embed_audio's weightless RMSNorm and projection into "
                     "the prompt")
        out.append(dict(name="embed_audio", source="audio", norm="rmsnorm", norm_weight=False,
                        widths=[audio["kinds"]["token_projection"]["d_out"], text["d_model"]]))
    return out


def audio_parts(tower, prefix: str, clips: int, frames: int) -> list:
    """Gemma4AudioModel (`tower`, at `prefix` in the whole model) on `clips` clips of `frames` mel frames each, on
    meta, without a mask (every frame real: the mask's values would be read)."""
    import torch

    mel = 4 * (tower.config.subsampling_conv_channels[0] // 4)
    return [(prefix, tower,
             {"input_features": torch.empty(clips, frames, mel, device="meta"), "attention_mask": None})]


def gemma4_audio_parts(model, spec, workload) -> list:
    """Gemma4AudioModel alone (check --hf-config --tower audio): its batch is the clips."""
    return audio_parts(model, "", workload.batch_size, workload.mel_frames)


def gemma4_whole_parts(model, spec, workload) -> list:
    """Gemma4ForConditionalGeneration traced part by part: the vision tower, embed_vision, the language model and
    lm_head as gemma4_vision.gemma4_parts traces them, and the audio tower on every clip's frames, embed_audio on its
    every output token (the forward strips the padding by a boolean mask: no values on meta)."""
    import torch

    from ..arch.towers import audio_windows, tower_workload

    parts = gemma4_parts(model, spec, workload)
    if "audio" in spec.towers:
        tw = tower_workload(spec, "audio", workload)
        clips = audio_windows(spec, workload)
        parts[-2:-2] = [*audio_parts(model.model.audio_tower, "model.audio_tower", clips, tw.mel_frames),
                        ("model.embed_audio", model.model.embed_audio,
                         {"inputs_embeds": torch.empty(clips * tw.seq_len, model.config.audio_config.output_proj_dims,
                                                       device="meta")})]
    return parts


# vision_config and audio_config absent or null: no such tower (SubConfigSpec optional)
GEMMA4_WHOLE = dict(VISION_WHOLE, towers={"vision": ("gemma4_vision", "vision_config", None),
                                          "audio": ("gemma4_audio", "audio_config", None)},
                    connectors=embed_audio,
                    prefixes={**VISION_WHOLE["prefixes"], "audio": r"model\.audio_tower\."},
                    components=[*VISION_WHOLE["components"],
                                (r"model\.embed_audio\.embedding_pre_projection_norm", "embed_audio/norm"),
                                (r"model\.embed_audio\.embedding_projection", "embed_audio")],
                    hf_trace=gemma4_whole_parts)

register(Family("gemma4_audio", DEFAULTS, TYPES, gemma4_audio, COMPONENTS, hf_trace=gemma4_audio_parts))
