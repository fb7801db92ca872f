"""SmolLM3 (model_type smollm3): transformers' SmolLM3ForCausalLM.

The llama layout (pre-norm RMSNorm, q_proj/k_proj/v_proj/o_proj with grouped-query key/value heads and biases by
attention_bias, a SwiGLU MLP with biases by mlp_bias, a final RMSNorm), a tied head by default. Some blocks have no
rotary positions (NoPE): no_rope_layers (1: rotary, 0: none; default every no_rope_layer_interval-th block, 4, without)
- rotary has no parameters and no matmul, so the counts are the same; only what training keeps of rotary (its
cos/sin tables) is less in those blocks. With use_sliding_window and a sliding_window, the windowed blocks are the
layer_types' sliding_attention ones (by default the NoPE blocks).
"""

from __future__ import annotations

from ..hf import DECODER_TYPES, decoder_fields, layer_kinds, refuse_if, set_window, shortest_cycle, show
from .llama import LLAMA_COMPONENTS
from .registry import Family, register

DEFAULTS = dict(vocab_size=128256, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                num_attention_heads=16, num_key_value_heads=4, hidden_act="silu", max_position_embeddings=32768,
                tie_word_embeddings=True, rope_parameters=None, use_sliding_window=False, sliding_window=None,
                no_rope_layers=None, no_rope_layer_interval=4, layer_types=None, attention_bias=False,
                mlp_bias=False)
# SmolLM3Config declares no head_dim, but its attention reads one (getattr) when a config gives it: then not null
TYPES = DECODER_TYPES | dict(head_dim="size", use_sliding_window="bool", sliding_window="int?",
                             no_rope_layers="integers?", no_rope_layer_interval="int", layer_types="strings?",
                             attention_bias="bool", mlp_bias="bool")

PATTERN_LIMIT = 65_536  # blocks a per-block rule is written out for


def _rotary_blocks(cfg: dict, L: int) -> list[bool]:
    """Whether each block applies rotary, as SmolLM3Config sets no_rope_layers."""
    given = cfg.get("no_rope_layers")
    if given is not None:
        refuse_if(cfg, "no_rope_layers", len(given) < L, f"expected at least num_hidden_layers={L} entries "
                  "(transformers reads entry i for block i)")
        return [value != 0 for value in given[:L]]
    every = cfg["no_rope_layer_interval"]
    refuse_if(cfg, "no_rope_layer_interval", every == 0, "transformers divides by it (no_rope_layers not given)")
    refuse_if(cfg, "num_hidden_layers", L > PATTERN_LIMIT, f"tfcalc writes the NoPE blocks per block, for at most "
              f"{PATTERN_LIMIT:,} blocks")
    return [(i + 1) % every != 0 for i in range(L)]


def smollm3(cfg: dict, notes: list[str]) -> dict:
    fields = decoder_fields(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=cfg["mlp_bias"])
    L = fields["n_layers"]
    rotary = _rotary_blocks(cfg, L)
    head_dim = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    refuse_if(cfg, "head_dim" if "head_dim" in cfg else "hidden_size", head_dim % 2 == 1 and any(rotary),
              f"an odd head ({head_dim} channels): transformers' rotary tables are {head_dim + 1} wide and fail to "
              "broadcast")
    if not all(rotary):
        notes.append(f"{rotary.count(False)} of {L} blocks without rotary positions (NoPE): no parameters, no "
                     "matmul (training keeps no cos/sin tables there)")
    window_on = cfg["use_sliding_window"] is True and cfg.get("sliding_window") is not None
    types = cfg.get("layer_types")
    if types is not None:
        layer_kinds(cfg, L)
        refuse_if(cfg, "layer_types", "sliding_attention" in types and not window_on,
                  f"sliding_attention blocks need use_sliding_window=true and a sliding_window (got "
                  f"use_sliding_window={show(cfg['use_sliding_window'])}, sliding_window="
                  f"{show(cfg.get('sliding_window'))}): transformers' attention then has no window, its mask one")
        local = [t == "sliding_attention" for t in types]
    else:
        local = [window_on and not r for r in rotary]
    if any(local):
        refuse_if(cfg, "sliding_window", cfg["sliding_window"] < 1, "a window of 1 or more")
        set_window(cfg, fields, notes, shortest_cycle(["local" if x else "global" for x in local]))
    return fields


register(Family("smollm3", DEFAULTS, TYPES, smollm3, LLAMA_COMPONENTS))  # the LLaMA layout's module names
