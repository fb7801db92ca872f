"""Voxtral read whole: its audio tower (model_type voxtral_encoder, a config.json's audio_config: transformers'
VoxtralEncoder), the projector that joins it to the language model (VoxtralMultiModalProjector) and where
VoxtralForConditionalGeneration keeps each part (`VOXTRAL_WHOLE`, splatted on the voxtral line of wrappers.py).

The audio tower is Whisper's encoder alone: conv1 (a Conv1d of num_mel_bins -> hidden_size, kernel 3, padding 1, a
bias), GELU, conv2 (hidden_size -> hidden_size, kernel 3, stride 2, padding 1, a bias), GELU, the sinusoidal position
table embed_positions [max_source_positions, hidden_size] added (an nn.Embedding frozen with requires_grad False, a
parameter all the same: sum(p.numel()) counts it); tfcalc's `audio_conv` kind. Then num_hidden_layers pre-norm blocks
(LayerNorms with biases; self-attention with biases on q, v and out, none on k; a fc1, activation, fc2 MLP of
intermediate_size with biases) and a final layer_norm. avg_pooler (an AvgPool1d) is built and never run; it has no
parameters. The encoder takes exactly 2 x max_source_positions mel frames (3,000: 30 s), refusing any other length:
the processor pads the audio to a multiple of 30 s and cuts it into such windows, each a row of the tower's batch; a
window is max_source_positions tokens (1,500).

The projector reads the tower's last hidden states of every window reshaped to rows of audio_config.intermediate_size
(intermediate_size / hidden_size consecutive frames concatenated: 4 for the published configs, 375 tokens a window),
then linear_1 (intermediate_size -> text hidden_size), projector_hidden_act, linear_2 (text hidden_size -> text
hidden_size), no biases; its rows take the audio tokens' places in the prompt (tfcalc's Connector with `merge`).
Refused by name: an intermediate_size that is not a multiple of hidden_size (the reshape would cut a frame), a window
whose tokens do not split into whole groups (the groups would straddle two windows).

Keys that change no count are not read: the dropouts and layerdrop, initializer_range, scale_embedding (VoxtralEncoder
computes embed_scale and never applies it), vocab_size (the encoder has no token table), audio_token_id.
"""

from __future__ import annotations

from ..hf import Unmodelled, activation_of, refuse_if, show
from .bart import block_rules
from .registry import Family, register

ALIASES = dict(d_model="hidden_size", encoder_layers="num_hidden_layers", encoder_attention_heads="num_attention_heads",
               encoder_ffn_dim="intermediate_size")

COMPONENTS = [  # VoxtralEncoder's module names -> tfcalc components (check --hf-config)
    (r"conv1", "embedding/conv1"),
    (r"conv2", "embedding/conv2"),
    (r"embed_positions", "embedding/position"),
    # Whisper's (BART's) encoder block, one stack: no stack in the component's name, no cross-attention
    *[(pattern, component.removeprefix("{stack}/")) for pattern, component in block_rules(r"layers\.\d+\.")
      if "encoder_attn" not in pattern],
    (r"layer_norm", "final_norm"),
]


def _seconds(frames: int) -> str:
    """Mel frames as seconds (100 a second), exactly, however many: 3000 -> '30', 1050 -> '10.5'."""
    whole, hundredths = divmod(frames, 100)
    return f"{whole}" if not hundredths else f"{whole}.{hundredths:02d}".rstrip("0")


def voxtral_encoder(cfg: dict, notes: list[str]) -> dict:
    D, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    refuse_if(cfg, "num_attention_heads", D % heads != 0,
              f"hidden_size={D} is not a multiple of it (VoxtralAttention refuses it)")
    positions = cfg["max_source_positions"]
    notes.append(f"the audio encoder's input: windows of {2 * positions:,} mel frames (2 x max_source_positions, "
                 f"{_seconds(2 * positions)} s), {positions:,} tokens each; its position table frozen (requires_grad "
                 "False; counted, as sum(p.numel()) counts it)")
    return dict(n_layers=cfg["num_hidden_layers"], d_model=D, n_heads=heads, d_ff=cfg["intermediate_size"],
                norm="layernorm", norm_position="pre", final_norm=True, bias=True, k_bias=False,
                activation=activation_of(cfg, "activation_function"), causal=False, lm_head=False,
                positions="learned", inputs="audio", seq_len=positions, context=positions,
                kinds={"audio_conv": {"mel_bins": cfg["num_mel_bins"], "positions": positions}})


register(Family(
    "voxtral_encoder", mapper=voxtral_encoder, components=COMPONENTS, aliases=ALIASES,
    # VoxtralEncoderConfig's defaults (Voxtral-Mini-3B-2507's encoder: Whisper large-v3's)
    defaults=dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=20,
                  activation_function="gelu", num_mel_bins=128, max_source_positions=1500),
    types=dict(hidden_size="size", intermediate_size="size", num_hidden_layers="size", num_attention_heads="size",
               activation_function="str", num_mel_bins="size", max_source_positions="size")))


def voxtral_projector(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """VoxtralMultiModalProjector over every window's tokens, merge = intermediate_size / hidden_size of them
    concatenated into one row: linear_1 (intermediate_size -> text width), the activation, linear_2 (text width ->
    text width), no biases. Its rows take the audio's places in the prompt."""
    audio, text = towers["audio"], towers["text"]
    D_a, I, D_t = audio["d_model"], audio["d_ff"], text["d_model"]
    positions = audio["kinds"]["audio_conv"]["positions"]
    if I % D_a:
        raise Unmodelled(f"audio_config.intermediate_size={show(I)} is not modelled: the projector reads the audio "
                         f"tower's states reshaped to rows of it, a whole number of frames of hidden_size={D_a}")
    merge = I // D_a
    if positions % merge:
        raise Unmodelled(f"audio_config.max_source_positions={show(positions)} is not modelled: a window's "
                         f"{positions} tokens do not split into groups of {merge} (intermediate_size / hidden_size; a "
                         "group would straddle two windows)")
    notes.append(f"voxtral: every {merge} audio tokens concatenated into one row of the projector ({positions // merge:,} "
                 f"tokens of the prompt a window of {_seconds(2 * positions)} s)")
    return [dict(name="multi_modal_projector", source="audio", merge=merge, widths=[I, D_t, D_t], bias=False,
                 activation=activation_of(cfg, "projector_hidden_act"))]


def voxtral_parts(model, spec, workload) -> list:
    """VoxtralForConditionalGeneration traced part by part on meta (its forward finds the audio tokens' places by the
    token ids' values): the audio tower on every window's mel frames, the projector on their rows, the language
    model on the prompt's embeddings (the audio's tokens among them), lm_head on its output."""
    import torch

    from ..arch.towers import audio_windows

    sizes = spec.towers["audio"].sizes("audio_conv")
    (c,) = [c for c in spec.connectors if c.source == "audio"]
    windows = audio_windows(spec, workload)
    features = torch.empty(windows, sizes.mel_bins, sizes.window, device="meta")
    rows = torch.empty(windows * sizes.positions // c.merge, c.widths[0], device="meta")
    B, N, D = workload.batch_size, workload.seq_len, spec.d_model
    return [("model.audio_tower", model.model.audio_tower, {"input_features": features}),
            ("model.multi_modal_projector", model.model.multi_modal_projector, {"audio_features": rows}),
            ("model.language_model", model.model.language_model,
             {"inputs_embeds": torch.empty(B, N, D, device="meta")}),
            ("lm_head", model.lm_head, {"input": torch.empty(B, N, D, device="meta")})]


VOXTRAL_WHOLE = dict(towers={"audio": ("voxtral_encoder", "audio_config")}, connectors=voxtral_projector,
                     prefixes={"text": r"model\.language_model\.", "audio": r"model\.audio_tower\."},
                     components=[(r"lm_head", "head"),
                                 (r"model\.multi_modal_projector\.linear_1", "multi_modal_projector/linear_1"),
                                 (r"model\.multi_modal_projector\.linear_2", "multi_modal_projector/linear_2")],
                     defaults=dict(projector_hidden_act="gelu"), types=dict(projector_hidden_act="str"),
                     hf_trace=voxtral_parts)
