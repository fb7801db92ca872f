"""Cohere 2 (Command R7B, Command A; model_type cohere2): transformers' Cohere2ForCausalLM.

Cohere's block (tfcalc/families/cohere.py): parallel with one norm (parallel_block one_norm), x +
attn(input_layernorm(x)) + mlp(input_layernorm(x)), Cohere2LayerNorm a LayerNorm with a weight and no bias (norm
layernorm_no_bias), also as the final norm; q_proj, k_proj, v_proj (grouped-query) and o_proj with biases by
attention_bias, a SwiGLU MLP without biases, the head tied by default. Blocks are local (sliding_attention, with
rotary positions) or global (full_attention, with no positions at all) by layer_types; by default every
sliding_window_pattern-th block (4, a key older configs still carry) is global. Rotary has no parameters and no matmul;
global blocks keep no cos/sin tables for training.

Not read, because they change no shape and no matmul: logit_scale (the logits are multiplied by it: elementwise),
rope_parameters (frequencies), layer_norm_eps, attention_dropout, the token ids.
"""

from __future__ import annotations

from ..hf import decoder_fields, layer_kinds, refuse_if, set_window, shortest_cycle
from .cohere import COMPONENTS as COHERE_COMPONENTS
from .registry import Family, register

DEFAULTS = dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
                num_attention_heads=64, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=8192,
                tie_word_embeddings=True, rope_parameters=None, attention_bias=False, sliding_window=4096,
                layer_types=None)
# Cohere2Config declares no head_dim (it sets hidden_size // num_attention_heads, which a config's own head_dim then
# replaces) and pops sliding_window_pattern from its kwargs when layer_types is not given
TYPES = dict(vocab_size="size", hidden_size="size", intermediate_size="size", num_hidden_layers="size",
             num_attention_heads="size", num_key_value_heads="size?", hidden_act="str",
             max_position_embeddings="size", tie_word_embeddings="bool", rope_parameters="object?",
             rope_scaling="object?", attention_bias="bool", sliding_window="int?", layer_types="strings?",
             head_dim="size", sliding_window_pattern="size")


def cohere2(cfg: dict, notes: list[str]) -> dict:
    L = cfg["num_hidden_layers"]
    types = cfg.get("layer_types")
    if types is not None:
        pattern = shortest_cycle(layer_kinds(cfg, L))
        if "sliding_window_pattern" in cfg:
            notes.append(f"sliding_window_pattern={cfg['sliding_window_pattern']} not read: layer_types is given")
    else:
        every = min(cfg.get("sliding_window_pattern", 4), L + 1)  # beyond L: no global block
        pattern = ["global" if (i + 1) % every == 0 else "local" for i in range(every)]
    local = "local" in (pattern if len(pattern) <= L else pattern[:L])
    window = cfg.get("sliding_window")
    refuse_if(cfg, "sliding_window", local and (window is None or window < 1),
              "sliding_attention blocks need a window of 1 or more: transformers builds their mask from it")
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim", D // H)
    refuse_if(cfg, "head_dim" if "head_dim" in cfg else "hidden_size", head_dim % 2 == 1 and local,
              f"an odd head ({head_dim} channels): transformers' rotary tables (in the sliding_attention blocks) are "
              f"{head_dim + 1} wide and fail to broadcast")
    fields = decoder_fields(cfg, notes) | dict(d_head=head_dim, norm="layernorm_no_bias", parallel_block="one_norm",
                                               bias=cfg["attention_bias"], mlp_bias=False)
    set_window(cfg, fields, notes, pattern)
    if "global" in pattern[:L]:
        notes.append("full_attention blocks have no rotary positions (no parameters, no matmul)")
    return fields


# Cohere's module names: one input norm, no post-attention norm
register(Family("cohere2", DEFAULTS, TYPES, cohere2, COHERE_COMPONENTS))
