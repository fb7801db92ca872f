"""Whisper (model_type whisper): transformers' WhisperForConditionalGeneration, or WhisperModel when `architectures`
names it.

An encoder-decoder of audio. The encoder (WhisperEncoder) reads a log-mel spectrogram [B, num_mel_bins, 2 x
max_source_positions]: conv1 (a Conv1d of num_mel_bins -> d_model, kernel 3, padding 1, a bias), GELU, conv2 (d_model
-> d_model, kernel 3, stride 2, padding 1, a bias), GELU, then the sinusoidal position table embed_positions
[max_source_positions, d_model] added (an nn.Embedding frozen with requires_grad False, a parameter all the same:
sum(p.numel()) counts it); tfcalc's `audio_conv` kind. The decoder reads tokens: embed_tokens [vocab_size, d_model] and
learned positions embed_positions [max_target_positions, d_model]. Each block is pre-norm (LayerNorms with biases):
self-attention with biases on q, v and out but none on k (k_bias False), in the decoder cross-attention alike, and a
GELU MLP fc1, fc2 with biases; a final layer_norm on each stack. WhisperForConditionalGeneration's proj_out (no bias)
is tied to the decoder's embed_tokens (tie_word_embeddings, default true; false: its own [vocab_size, d_model]).

WhisperConfig's attribute_map (hidden_size, num_attention_heads, num_key_value_heads, num_hidden_layers read into
d_model, encoder_attention_heads and encoder_layers) is `aliases`. The two stacks may have their own numbers of layers
(distil-whisper's 2 decoder layers); their heads and MLP widths must agree (the spec gives both stacks one), refused
by name otherwise. Keys that change no count are not read: the dropouts and layerdrops, scale_embedding (transformers
5 computes embed_scale and never applies it), SpecAugment's mask_* and apply_spec_augment (a training-time mask, no
parameters), use_weighted_layer_sum and classifier_proj_size (WhisperForAudioClassification only, a class tfcalc
refuses), median_filter_width, the token ids and suppress lists.
"""

from __future__ import annotations

from ..hf import activation_of, refuse_if, show
from .bart import block_rules
from .registry import Family, register

ALIASES = dict(hidden_size="d_model", num_attention_heads="encoder_attention_heads",
               num_key_value_heads="encoder_attention_heads", num_hidden_layers="encoder_layers")

_TOP = r"(?:model\.)?"  # WhisperForConditionalGeneration's model.; WhisperModel's own
_LAYER = _TOP + r"(?P<stack>encoder|decoder)\.layers\.\d+\."
COMPONENTS = [
    (_TOP + r"encoder\.conv1", "encoder/embedding/conv1"),
    (_TOP + r"encoder\.conv2", "encoder/embedding/conv2"),
    (_TOP + r"(?P<stack>encoder|decoder)\.embed_positions", "{stack}/embedding/position"),
    (_TOP + r"decoder\.embed_tokens", "decoder/embedding/token"),
    *block_rules(_LAYER),  # BART's blocks, as WhisperEncoderLayer and WhisperDecoderLayer name them
    (_TOP + r"(?P<stack>encoder|decoder)\.layer_norm", "{stack}/final_norm"),
    (r"proj_out", "head"),
]

CLASSES = ("WhisperForConditionalGeneration", "WhisperModel")  # the classes tfcalc counts


def whisper(cfg: dict, notes: list[str]) -> dict:
    architectures = cfg.get("architectures") or [CLASSES[0]]
    unknown = [a for a in architectures if a not in CLASSES]
    refuse_if(cfg, "architectures", bool(unknown), f"{', '.join(unknown)}: tfcalc counts {' and '.join(CLASSES)}")
    refuse_if(cfg, "architectures", len(set(architectures)) > 1, "name one class")
    for field in ("attention_heads", "ffn_dim"):
        refuse_if(cfg, f"decoder_{field}", cfg[f"encoder_{field}"] != cfg[f"decoder_{field}"],
                  f"encoder_{field}={show(cfg[f'encoder_{field}'])} differs; tfcalc gives both stacks one width")
    generation = architectures[0] == CLASSES[0]
    if not generation:
        notes.append("WhisperModel: the encoder and the decoder, no proj_out")
    notes.append(f"the encoder's input: {2 * cfg['max_source_positions']:,} mel frames (2 x max_source_positions, "
                 "30 s), its position table frozen (requires_grad False; counted, as sum(p.numel()) counts it)")
    target = cfg["max_target_positions"]
    return dict(n_encoder_layers=cfg["encoder_layers"], n_layers=cfg["decoder_layers"], d_model=cfg["d_model"],
                n_heads=cfg["encoder_attention_heads"], d_ff=cfg["encoder_ffn_dim"], vocab_size=cfg["vocab_size"],
                positions="learned", max_positions=target, norm="layernorm", norm_position="pre", final_norm=True,
                bias=True, k_bias=False, activation=activation_of(cfg, "activation_function"),
                shared_embeddings=False, tie_embeddings=cfg["tie_word_embeddings"], lm_head=generation,
                inputs="audio", kinds={"audio_conv": {"mel_bins": cfg["num_mel_bins"],
                                                      "positions": cfg["max_source_positions"]}},
                context=target)


register(Family(
    "whisper", mapper=whisper, components=COMPONENTS, aliases=ALIASES, encoder_decoder=True,
    layer_keys={"encoder_layers": "n_encoder_layers", "decoder_layers": "n_layers"},
    defaults=dict(vocab_size=51865, num_mel_bins=80, encoder_layers=4, encoder_attention_heads=6, decoder_layers=4,
                  decoder_attention_heads=6, decoder_ffn_dim=1536, encoder_ffn_dim=1536, activation_function="gelu",
                  d_model=384, max_source_positions=1500, max_target_positions=448, tie_word_embeddings=True),
    types=dict(vocab_size="size", num_mel_bins="size", encoder_layers="size", encoder_attention_heads="size",
               decoder_layers="size", decoder_attention_heads="size", decoder_ffn_dim="size",
               encoder_ffn_dim="size", activation_function="str", d_model="size", max_source_positions="size",
               max_target_positions="size", tie_word_embeddings="bool", architectures="strings?",
               hidden_size="size", num_attention_heads="size", num_key_value_heads="size",
               num_hidden_layers="size")))
