"""CLIP's two towers, each a model type of its own: clip_vision_model (transformers' CLIPVisionModel, and
CLIPVisionModelWithProjection when `architectures` names it) and clip_text_model (CLIPTextModel,
CLIPTextModelWithProjection). Each mapper is a pure function of its tower's config (a whole CLIP config's
vision_config or text_config reads the same way); the whole `clip` type is not registered here.

Vision (CLIPVisionEmbeddings, CLIPVisionModel): the patches' Conv2d of kernel and stride patch_size WITHOUT a bias,
the class token class_embedding [D], the position table [patches + 1, D] (tfcalc's `patch_embedding` kind, bias
false), pre_layrnorm over every token (`embedding_norm`), pre-norm blocks (layer_norm1, q_proj, k_proj, v_proj,
out_proj with biases, layer_norm2, fc1, the activation (hidden_act, quick_gelu by default), fc2 with biases), and
post_layernorm over the pooled class token alone (`pooled_final_norm`: 2D parameters, work over B rows).
CLIPVisionModelWithProjection adds visual_projection D -> projection_dim without a bias on the pooled token.

Text (CLIPTextEmbeddings, CLIPTextModel): the token table, learned positions [max_position_embeddings, D], the same
blocks under a CAUSAL mask (create_causal_mask: the eager model still computes every (query, key) score and adds
-inf above the diagonal, so forward counts all N x N pairs, the causal figure beside it), final_layer_norm over every
token, the pooled output the EOS token's state (an index, no matmul), no LM head. CLIPTextModelWithProjection adds
text_projection D -> projection_dim without a bias.
Keys that do not change a count are not read: layer_norm_eps, attention_dropout, initializer_range,
initializer_factor, pad/bos/eos_token_id (eos_token_id picks the pooled position, one row per text either way).
"""

from __future__ import annotations

from ..hf import SEQ_LEN_CAP, Unmodelled, activation_of, refuse_if, show
from ..sizes import MAX_DIGITS
from .registry import Family, register

_LAYERS = [  # the encoder's blocks, as both towers name them (CLIPEncoderLayer)
    (r"{p}encoder\.layers\.\d+\.layer_norm1", "attention/norm"),
    (r"{p}encoder\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (r"{p}encoder\.layers\.\d+\.self_attn", "attention/core"),
    (r"{p}encoder\.layers\.\d+\.self_attn\.out_proj", "attention/out"),
    (r"{p}encoder\.layers\.\d+\.layer_norm2", "mlp/norm"),
    (r"{p}encoder\.layers\.\d+\.mlp\.fc1", "mlp/up"),
    (r"{p}encoder\.layers\.\d+\.mlp\.fc2", "mlp/down"),
]


def layers(prefix: str) -> list[tuple[str, str]]:
    """The blocks' rules under `prefix` (a regex: the tower's attribute in a class that wraps it)."""
    return [(pattern.format(p=prefix), component) for pattern, component in _LAYERS]


VISION = r"(?:vision_model\.)?"  # CLIPVisionModelWithProjection holds the CLIPVisionModel as vision_model
TEXT = r"(?:text_model\.)?"
VISION_COMPONENTS = [  # transformers' module (and parameter) names -> tfcalc components (check --hf-config)
    (VISION + r"embeddings\.patch_embedding", "embedding/patch"),
    (VISION + r"embeddings\.class_embedding", "embedding/class_token"),  # a parameter of CLIPVisionEmbeddings
    (VISION + r"embeddings\.position_embedding", "embedding/position"),
    (VISION + r"pre_layrnorm", "embedding/norm"),
    *layers(VISION),
    (VISION + r"post_layernorm", "final_norm"),
    (r"visual_projection", "projection"),
]
TEXT_COMPONENTS = [
    (TEXT + r"embeddings\.token_embedding", "embedding/token"),
    (TEXT + r"embeddings\.position_embedding", "embedding/position"),
    *layers(TEXT),
    (TEXT + r"final_layer_norm", "final_norm"),
    (r"text_projection", "projection"),
]


def architecture(cfg: dict, classes: tuple[str, ...]) -> str:
    """The one class `architectures` names, of `classes` (the first, the plain tower, when it names none)."""
    architectures = cfg.get("architectures") or [classes[0]]
    unknown = [a for a in architectures if a not in classes]
    refuse_if(cfg, "architectures", bool(unknown), f"{', '.join(unknown)}: tfcalc counts {' and '.join(classes)}")
    refuse_if(cfg, "architectures", len(set(architectures)) > 1, "name one class")
    return architectures[0]


def grid(cfg: dict) -> tuple[int, int]:
    """(image side, patch side): one integer each (the towers' embeddings square them: (image_size // patch_size)
    ** 2 patches), the image a whole number of patches."""
    for key in ("image_size", "patch_size"):
        refuse_if(cfg, key, not isinstance(cfg[key], int), "one integer (transformers' embeddings square it: "
                                                           "(image_size // patch_size) ** 2 patches)")
        refuse_if(cfg, key, cfg[key] >= 10**MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    side, p = cfg["image_size"], cfg["patch_size"]
    if side % p:
        raise Unmodelled(f"image_size={show(side)} is not modelled: not a multiple of patch_size={p} (the "
                         "convolution would drop the last pixels)")
    return side, p


def encoder(cfg: dict) -> dict:
    """The blocks both towers share: pre-norm LayerNorms, q/k/v/out and fc1/fc2 with biases, hidden_act."""
    return dict(n_layers=cfg["num_hidden_layers"], d_model=cfg["hidden_size"], n_heads=cfg["num_attention_heads"],
                d_ff=cfg["intermediate_size"], activation=activation_of(cfg, "hidden_act"), norm="layernorm",
                norm_position="pre", bias=True, lm_head=False)


def clip_vision(cfg: dict, notes: list[str]) -> dict:
    named = architecture(cfg, ("CLIPVisionModel", "CLIPVisionModelWithProjection"))
    side, p = grid(cfg)
    fields = dict(encoder(cfg), causal=False, inputs="images", embedding_norm=True, pooled_final_norm=True,
                  kinds={"patch_embedding": {"image_size": side, "patch_size": p, "channels": cfg["num_channels"],
                                             "bias": False}})
    if named == "CLIPVisionModelWithProjection":
        fields["d_projection"] = cfg["projection_dim"]
        notes.append(f"CLIPVisionModelWithProjection: visual_projection {cfg['hidden_size']} -> "
                     f"{cfg['projection_dim']} (no bias) on the pooled class token")
    # the default workload: one image at image_size, its patches and the class token
    fields["seq_len"] = (side // p) ** 2 + 1
    fields["context"] = min(fields["seq_len"], SEQ_LEN_CAP)  # (the whole image, never capped: seq_len is set)
    return fields


def clip_text(cfg: dict, notes: list[str]) -> dict:
    named = architecture(cfg, ("CLIPTextModel", "CLIPTextModelWithProjection"))
    fields = dict(encoder(cfg), causal=True, vocab_size=cfg["vocab_size"], positions="learned",
                  max_positions=cfg["max_position_embeddings"], context=cfg["max_position_embeddings"])
    notes.append("clip_text_model: an encoder under a causal mask (the eager model computes every score and masks "
                 "those above the diagonal: forward counts N x N pairs, the causal figure beside it); the pooled "
                 "output is the EOS token's state, no LM head")
    if named == "CLIPTextModelWithProjection":
        refuse_if(cfg, "projection_dim", cfg["projection_dim"] is None, "CLIPTextModelWithProjection's "
                                                                          "text_projection needs a width")
        fields["d_projection"] = cfg["projection_dim"]
        notes.append(f"CLIPTextModelWithProjection: text_projection {cfg['hidden_size']} -> {cfg['projection_dim']} "
                     "(no bias) on the pooled EOS token")
    return fields


_ENCODER_TYPES = dict(hidden_size="size", intermediate_size="size", num_hidden_layers="size",
                      num_attention_heads="size", hidden_act="str", projection_dim="size", architectures="strings?")

register(
    Family("clip_vision_model", mapper=clip_vision, components=VISION_COMPONENTS,
           defaults=dict(hidden_size=768, intermediate_size=3072, projection_dim=512, num_hidden_layers=12,
                         num_attention_heads=12, num_channels=3, image_size=224, patch_size=32,
                         hidden_act="quick_gelu"),
           types=dict(_ENCODER_TYPES, num_channels="size", image_size="size|sizes", patch_size="size|sizes")),
    Family("clip_text_model", mapper=clip_text, components=TEXT_COMPONENTS,
           defaults=dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, projection_dim=512,
                         num_hidden_layers=12, num_attention_heads=8, max_position_embeddings=77,
                         hidden_act="quick_gelu"),
           types=dict(_ENCODER_TYPES, vocab_size="size", max_position_embeddings="size", projection_dim="size?")),
)


def clip_connectors(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """CLIPModel's pieces between its towers: visual_projection and text_projection (no biases) on each image's
    pooled class token and each text's pooled EOS token, and the logits, every image against every text
    ([images, projection_dim] @ [projection_dim, texts]) scaled by logit_scale (one parameter)."""
    P = cfg["projection_dim"]
    return [dict(name="visual_projection", source="vision", pooled=True, widths=[towers["vision"]["d_model"], P]),
            dict(name="text_projection", source="text", pooled=True, widths=[towers["text"]["d_model"], P]),
            dict(name="logits", source="vision", pooled=True, similarity=P, scalars=1)]


WHOLE_COMPONENTS = [  # CLIPModel's own modules and parameters; its towers' by their tables (Family.prefixes)
    (r"visual_projection", "visual_projection"),
    (r"text_projection", "text_projection"),
    (r"logit_scale", "logits"),
    (r"", "logits"),  # the logits' matmul runs in CLIPModel.forward itself
]

register(Family("clip", nested=("clip_text_model", "text_config"), towers={"vision": ("clip_vision_model",
                                                                                    "vision_config")},
                connectors=clip_connectors, prefixes={"text": r"text_model\.", "vision": r"vision_model\."},
                components=WHOLE_COMPONENTS, defaults=dict(projection_dim=512),
                types=dict(projection_dim="size", architectures="strings?")))
