"""Gemma, Gemma 2 and Gemma 3 (its language model, `gemma3_text`, read alone or from a multimodal `gemma3` config's
text_config): the llama layout with GeGLU, a head_dim of its own, a tied head by default and RMSNorm in its (1 + w)
form (one weight per channel, as RMSNorm); from Gemma 2 on, sandwich norms and local (sliding-window) and global
blocks. Gemma 2's module-name table (GEMMA2_COMPONENTS) is Gemma 4's too.
"""

from __future__ import annotations

import math

from ..hf import (ACTIVATIONS, DECODER_TYPES, Unmodelled, activation_of, decoder_fields, layer_kinds, refuse_if,
                  set_window, show)
from .llama import DECODER_COMPONENTS, LLAMA_COMPONENTS
from .registry import Family, register

GEMMA2_COMPONENTS = [  # sandwich norms: before and after attention, before and after the MLP
    (r"model\.layers\.\d+\.input_layernorm", "attention/norm"),
    (r"model\.layers\.\d+\.post_attention_layernorm", "attention/post_norm"),
    (r"model\.layers\.\d+\.pre_feedforward_layernorm", "mlp/norm"),
    (r"model\.layers\.\d+\.post_feedforward_layernorm", "mlp/post_norm"),
    *DECODER_COMPONENTS,
]

# Gemma 2 and 3 run hidden_activation (hidden_act, which their published configs also carry, is not read: null is
# taken, as their config classes take it); the kinds are transformers 5's declarations (query_pre_attn_scalar an int,
# the soft-caps floats or null)
GEMMA2_TYPES = DECODER_TYPES | dict(hidden_act="str?", num_key_value_heads="size", head_dim="size",
                                    hidden_activation="str", attention_bias="bool", query_pre_attn_scalar="int",
                                    sliding_window="int?",
                                    layer_types="strings?", final_logit_softcapping="float?",
                                    attn_logit_softcapping="float?", use_bidirectional_attention="bool?")


def gemma(cfg: dict, notes: list[str]) -> dict:
    """Gemma: the llama layout with GeGLU, a head_dim of its own, a tied head by default, RMSNorm in its (1 + w) form
    (one weight per channel, as RMSNorm) and the token embedding scaled by sqrt(hidden_size) (elementwise: no
    parameters, no matmul)."""
    if cfg["hidden_act"] == "gelu":  # GemmaConfig turns the official releases' legacy "gelu" into the tanh form
        notes.append("hidden_act='gelu' read as gelu_pytorch_tanh, as transformers' GemmaConfig does")
        cfg = cfg | {"hidden_act": "gelu_pytorch_tanh"}
    fields = decoder_fields(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False)
    legacy = cfg.get("hidden_activation")
    if legacy is not None and ACTIVATIONS.get(legacy) != fields["activation"]:
        notes.append(f"hidden_activation={show(legacy)} not read: transformers 5's GemmaMLP runs hidden_act "
                     "(activations have no parameters and no matmul)")
    return fields


def gemma2(cfg: dict, notes: list[str], pattern: list[str] | None = None) -> dict:
    """Gemma 2: sandwich norms (input_layernorm and post_attention_layernorm around attention,
    pre_feedforward_layernorm and post_feedforward_layernorm around the MLP), GeGLU by hidden_activation, a
    head_dim of its own, local (sliding) and global blocks by layer_types (default: alternating, local first).
    RMSNorm's (1 + w) form has one weight per channel. The embedding scale sqrt(hidden_size), query_pre_attn_scalar
    and the soft-capping of attention scores and final logits (tanh) are elementwise, with no parameters: not in
    forward FLOPs (not matmuls), nor in the non-matmul estimate or the training-memory plan."""
    refuse_if(cfg, "use_bidirectional_attention", cfg.get("use_bidirectional_attention") is True,
              "tfcalc's windows are causal")
    activation = activation_of(cfg, "hidden_activation")  # first: a refusal names the field the file gave
    fields = decoder_fields(cfg | {"hidden_act": cfg["hidden_activation"]}, notes)
    fields |= dict(activation=activation, bias=cfg["attention_bias"], mlp_bias=False, norm_position="sandwich")
    act = cfg.get("hidden_act")
    if act is not None and act != cfg["hidden_activation"]:
        notes.append(f"hidden_act={show(act)} not read: transformers runs hidden_activation")
    L = fields["n_layers"]
    types = cfg.get("layer_types")
    if types is not None:
        pattern = layer_kinds(cfg, L)
    set_window(cfg, fields, notes, pattern or ["local", "global"])
    caps = [f"{key}={cfg[key]}" for key in ("attn_logit_softcapping", "final_logit_softcapping")
            if cfg.get(key) is not None]
    if caps:
        notes.append(f"{' and '.join(caps)}: tanh soft-capping, elementwise (no parameters, not counted)")
    return fields


def gemma3_text(cfg: dict, notes: list[str]) -> dict:
    """Gemma 3's language model: Gemma 2's sandwich norms plus an RMSNorm on each query and key head (weight
    [head_dim] each); blocks local except every sliding_window_pattern-th (default 6: five local, one global)
    unless layer_types says. Its local and global rotary bases change frequencies, not shapes."""
    every = min(cfg.get("sliding_window_pattern", 6), cfg["num_hidden_layers"] + 1)  # beyond L: no global block
    pattern = ["global" if (i + 1) % every == 0 else "local" for i in range(every)]
    return gemma2(cfg, notes, pattern) | dict(qk_norm="head")


def gemma3_projector(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """Gemma3MultiModalProjector: the vision tower's patches reshaped to their grid (image_size // patch_size a side),
    average-pooled to mm_tokens_per_image tokens (a kernel of grid / sqrt(mm_tokens_per_image) a side, no
    parameters), Gemma's RMSNorm over the vision width, one matmul to the language model's width (no bias): those
    tokens take the image's places in the prompt. It reshapes to the config's grid, so images of that size alone."""
    vision, text = towers["vision"], towers["text"]
    sizes = vision["kinds"]["patch_embedding"]
    grid = sizes["image_size"] // sizes["patch_size"]
    side = math.isqrt(cfg["mm_tokens_per_image"])
    if side * side != cfg["mm_tokens_per_image"] or grid % side:
        raise Unmodelled(f"mm_tokens_per_image={cfg['mm_tokens_per_image']} is not modelled with a patch grid of "
                         f"{grid} x {grid}: the projector pools the grid into a square of whole kernels")
    kernel = grid // side
    notes.append(f"gemma3: each image's {grid * grid} patches average-pooled {kernel}x{kernel} into "
                 f"{cfg['mm_tokens_per_image']} tokens of the prompt")
    return [dict(name="multi_modal_projector", source="vision", pool=kernel * kernel, norm="rmsnorm",
                 widths=[vision["d_model"], text["d_model"]], image_size=sizes["image_size"])]


register(
    Family("gemma", mapper=gemma, components=LLAMA_COMPONENTS,
           defaults=dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                         num_attention_heads=16, num_key_value_heads=16, head_dim=256, hidden_act="gelu_pytorch_tanh",
                         max_position_embeddings=8192, tie_word_embeddings=True, attention_bias=False),
           # GemmaConfig declares head_dim and num_key_value_heads as int (no null); hidden_activation is the field
           # transformers 4.38-4.4x read instead of hidden_act (transformers 5 does not read it: it is only noted)
           types=DECODER_TYPES | dict(num_key_value_heads="size", head_dim="size", attention_bias="bool",
                                      hidden_activation="str?")),
    Family("gemma2", mapper=gemma2, types=GEMMA2_TYPES, components=GEMMA2_COMPONENTS,
           defaults=dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                         hidden_activation="gelu_pytorch_tanh", max_position_embeddings=8192, tie_word_embeddings=True,
                         attention_bias=False, query_pre_attn_scalar=256, sliding_window=4096, layer_types=None,
                         final_logit_softcapping=30.0, attn_logit_softcapping=50.0, use_bidirectional_attention=None)),
    Family("gemma3_text", like="gemma2", mapper=gemma3_text, types=dict(sliding_window_pattern="size"),
           defaults=dict(vocab_size=262_208, max_position_embeddings=131_072, final_logit_softcapping=None,
                         attn_logit_softcapping=None, use_bidirectional_attention=False)),
    # the multimodal config, whole: its language model from text_config, its SigLIP tower from vision_config
    Family("gemma3", nested=("gemma3_text", "text_config"),
           towers={"vision": ("siglip_vision_model", "vision_config")}, connectors=gemma3_projector,
           prefixes={"text": r"model\.language_model\.", "vision": r"model\.vision_tower\.(?:vision_model\.)?"},
           components=[(r"lm_head", "head"),
                       (r"model\.multi_modal_projector\.mm_soft_emb_norm", "multi_modal_projector/norm"),
                       (r"model\.multi_modal_projector(?:\.mm_input_projection_weight)?", "multi_modal_projector")],
           defaults=dict(mm_tokens_per_image=256), types=dict(mm_tokens_per_image="size")),
)
