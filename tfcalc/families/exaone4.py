"""EXAONE 4.0: the llama layout without biases, with an RMSNorm on each query and key head (weight [head_dim] each)
and its norms on each sublayer's output, before the residual add (post_attention_layernorm,
post_feedforward_layernorm; no input norms, as OLMo 2). Local (sliding-window) and global blocks by layer_types, else
by sliding_window_pattern (Exaone4Config: block i is global when (i + 1) % sliding_window_pattern == 0). Rotary is
applied in the local blocks only when a window is set: elementwise, not counted."""

from __future__ import annotations

from ..hf import DECODER_TYPES, PATTERN_LIMIT, decoder_fields, refuse_if
from .llama import OLMO2_COMPONENTS
from .olmo3 import layer_windows
from .registry import Family, register

DEFAULTS = dict(vocab_size=102400, hidden_size=4096, intermediate_size=16384, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=2048,
                tie_word_embeddings=False, sliding_window=4096, sliding_window_pattern=4, layer_types=None)
# sliding_window_pattern is declared str | int | None (the published configs say "LLLG" beside layer_types, which
# transformers then reads instead); without layer_types, Exaone4Config's rule ((i + 1) % pattern) needs a nonzero int
TYPES = DECODER_TYPES | dict(num_key_value_heads="size", sliding_window="int?", sliding_window_pattern="int|str?",
                             layer_types="strings?")


def exaone4(cfg: dict, notes: list[str]) -> dict:
    fields = decoder_fields(cfg, notes) | dict(bias=False, qk_norm="head", norm_position="output")
    L = fields["n_layers"]
    if cfg.get("layer_types") is not None:
        layer_windows(cfg, fields, notes, ["local"])
        return fields
    window, every = cfg["sliding_window"], cfg["sliding_window_pattern"]
    refuse_if(cfg, "sliding_window", window is None, "with layer_types null, Exaone4Config then takes "
              "sliding_window_pattern=0 and its rule (i + 1) % 0 fails: give layer_types")
    refuse_if(cfg, "sliding_window_pattern", type(every) is not int or every == 0,
              "Exaone4Config's rule (i + 1) % sliding_window_pattern needs a nonzero integer: give one, or "
              "layer_types")
    every = abs(every)  # (i + 1) % p is 0 exactly when (i + 1) % |p| is
    if every > L:  # no block i < L has (i + 1) % every == 0: all local
        pattern = ["local"]
    else:
        refuse_if(cfg, "sliding_window_pattern", every > PATTERN_LIMIT,
                  f"tfcalc writes the attention pattern per block, for at most {PATTERN_LIMIT:,} blocks")
        pattern = ["local"] * (every - 1) + ["global"]
    layer_windows(cfg, fields, notes, pattern)
    return fields


# OLMo 2's (and 3's) module names and norms
register(Family("exaone4", DEFAULTS, TYPES, exaone4, OLMO2_COMPONENTS))
