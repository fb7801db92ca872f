"""SigLIP's two towers, each a model type of its own: siglip_vision_model (transformers' SiglipVisionModel) and
siglip_text_model (SiglipTextModel). Each mapper is a pure function of its tower's config (a whole SigLIP config's
vision_config or text_config reads the same way); the whole `siglip` type is not registered here.

Vision (SiglipVisionEmbeddings, SiglipVisionModel): the patches' Conv2d of kernel and stride patch_size WITH a bias,
no class token, the position table [patches, D] (tfcalc's `patch_embedding` kind, class_token false), pre-norm blocks
as ViT's (layer_norm1, q_proj, k_proj, v_proj, out_proj with biases, layer_norm2, fc1, hidden_act
(gelu_pytorch_tanh by default), fc2 with biases), post_layernorm over every token and, with vision_use_head (default
true), the attention-pooling head SiglipMultiheadAttentionPoolingHead (tfcalc's `attention_pool` kind: a probe
[1, 1, D], torch's MultiheadAttention with in_proj [3D, D] and out_proj D -> D with biases, a LayerNorm, an MLP
fc1/fc2 with biases), its query one row per image, its keys the patches.

Text (SiglipTextEmbeddings, SiglipTextModel): the token table, learned positions [max_position_embeddings, D], the
same blocks under a BIDIRECTIONAL mask (create_bidirectional_mask), final_layer_norm over every token and the head
Linear(D, projection_size) with a bias on the last token's state (projection_size default hidden_size).
Keys that do not change a count are not read: layer_norm_eps, attention_dropout, pad/bos/eos_token_id.
"""

from __future__ import annotations

import math

from ..hf import SEQ_LEN_CAP, Unmodelled, refuse_if
from ..sizes import MAX_DIGITS
from .clip import architecture, encoder, grid, layers
from .registry import Family, register

VISION_COMPONENTS = [  # transformers' module (and parameter) names -> tfcalc components (check --hf-config)
    (r"embeddings\.patch_embedding", "embedding/patch"),
    (r"embeddings\.position_embedding", "embedding/position"),
    *layers(""),
    (r"post_layernorm", "final_norm"),
    # the pooling head: torch's MultiheadAttention keeps q, k and v in one in_proj (parameters of its own module)
    # and runs them, the scores, the values and out_proj (F.linear) inside its own forward
    (r"head\.probe", "attention_pool/probe"),
    (r"head\.attention\.in_proj_(?:weight|bias)", "attention_pool/q+kv"),
    (r"head\.attention", "attention_pool/q+kv+core+out"),
    (r"head\.attention\.out_proj", "attention_pool/out"),
    (r"head\.layernorm", "attention_pool/norm"),
    (r"head\.mlp\.fc1", "attention_pool/up"),
    (r"head\.mlp\.fc2", "attention_pool/down"),
]
SIGLIP2_VISION_COMPONENTS = [
    (r"embeddings\.patch_embedding", "embedding/patch"),
    (r"embeddings\.position_embedding", "embedding/position"),
    (r"embeddings", "embedding/position_resize"),  # resize_positional_embeddings' matmul, in the module's own forward
    *VISION_COMPONENTS[2:],
]
TEXT_COMPONENTS = [
    (r"embeddings\.token_embedding", "embedding/token"),
    (r"embeddings\.position_embedding", "embedding/position"),
    *layers(""),
    (r"final_layer_norm", "final_norm"),
    (r"head", "projection"),
]


def covered(cfg: dict, notes: list[str]) -> dict:
    """An image_size that is not a multiple of patch_size (SigLIP so400m-patch14-384: 384 with patches of 14) read as
    the pixels the Conv2d (padding 'valid') covers: SiglipVisionEmbeddings builds (image_size // patch_size) ** 2
    patches and position rows, and an image of image_size pixels gives exactly those patches."""
    side, p = cfg["image_size"], cfg["patch_size"]
    if isinstance(side, int) and isinstance(p, int) and 0 < p <= side and side % p:
        n = side // p
        notes.append(f"{cfg.get('model_type', 'siglip_vision_model')}: image_size={side} is not a multiple of "
                     f"patch_size={p}: its Conv2d reads {n}x{n} patches, {n * p}x{n * p} pixels (the last {side % p} "
                     f"of each side dropped); read as images of {n * p}x{n * p}")
        return {**cfg, "image_size": n * p}
    return cfg


def siglip_vision(cfg: dict, notes: list[str]) -> dict:
    architecture(cfg, ("SiglipVisionModel",))
    cfg = covered(cfg, notes)
    side, p = grid(cfg)
    fields = dict(encoder(cfg), causal=False, inputs="images", attention_pool=cfg["vision_use_head"],
                  kinds={"patch_embedding": {"image_size": side, "patch_size": p, "channels": cfg["num_channels"],
                                             "class_token": False}})
    if cfg["vision_use_head"]:
        notes.append("vision_use_head: the attention-pooling head (a probe attending to the patches, a LayerNorm, "
                     "an MLP) pools each image")
    # the default workload: one image at image_size, its patches (no class token)
    fields["seq_len"] = (side // p) ** 2
    fields["context"] = min(fields["seq_len"], SEQ_LEN_CAP)  # (the whole image, never capped: seq_len is set)
    return fields


def siglip2_vision(cfg: dict, notes: list[str]) -> dict:
    """SigLIP2's NaFlex tower: patches flattened by the processor, then a Linear over their C * p * p pixels (the
    same products as ViT's convolution), a position table of num_patches rows (a square grid) resampled by a matmul
    to each image's patches; its blocks, post_layernorm and pooling head as SigLIP's."""
    architecture(cfg, ("Siglip2VisionModel",))
    p, rows = cfg["patch_size"], cfg["num_patches"]
    refuse_if(cfg, "patch_size", not isinstance(p, int), "one integer (Siglip2VisionEmbeddings' Linear reads "
                                                         "num_channels * patch_size * patch_size pixels)")
    grid = math.isqrt(rows)
    refuse_if(cfg, "num_patches", grid * grid != rows, "a square number (transformers reshapes the position table "
                                                       "to a square grid)")
    refuse_if(cfg, "patch_size", p * grid >= 10**MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    fields = dict(encoder(cfg), causal=False, inputs="images", attention_pool=cfg["vision_use_head"],
                  kinds={"patch_embedding": {"image_size": p * grid, "patch_size": p, "channels": cfg["num_channels"],
                                             "class_token": False, "resized_positions": True}})
    notes.append(f"siglip2_vision_model: the default workload is one image of num_patches={rows} patches "
                 f"({p * grid}x{p * grid} pixels; the processor's max_num_patches, no padding); another image size "
                 "(--image-size) is that image's patches, the table resampled to them by a matmul every forward")
    fields["seq_len"] = rows
    fields["context"] = min(rows, SEQ_LEN_CAP)
    return fields


def siglip_text(cfg: dict, notes: list[str]) -> dict:
    architecture(cfg, ("SiglipTextModel",))
    projection = cfg["projection_size"]
    return dict(encoder(cfg), causal=False, vocab_size=cfg["vocab_size"], positions="learned",
                max_positions=cfg["max_position_embeddings"], context=cfg["max_position_embeddings"],
                d_projection=cfg["hidden_size"] if projection is None else projection, projection_bias=True)


_ENCODER_TYPES = dict(hidden_size="size", intermediate_size="size", num_hidden_layers="size",
                      num_attention_heads="size", hidden_act="str", architectures="strings?")

register(
    Family("siglip_vision_model", mapper=siglip_vision, components=VISION_COMPONENTS,
           defaults=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                         num_channels=3, image_size=224, patch_size=16, hidden_act="gelu_pytorch_tanh",
                         vision_use_head=True),
           types=dict(_ENCODER_TYPES, num_channels="size", image_size="size|sizes", patch_size="size|sizes",
                      vision_use_head="bool")),
    Family("siglip2_vision_model", mapper=siglip2_vision, components=SIGLIP2_VISION_COMPONENTS,
           defaults=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                         num_channels=3, patch_size=16, hidden_act="gelu_pytorch_tanh", vision_use_head=True,
                         num_patches=256),
           types=dict(_ENCODER_TYPES, num_channels="size", patch_size="size|sizes", vision_use_head="bool",
                      num_patches="size")),
    Family("siglip_text_model", mapper=siglip_text, components=TEXT_COMPONENTS,
           defaults=dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                         num_attention_heads=12, max_position_embeddings=64, hidden_act="gelu_pytorch_tanh",
                         projection_size=None),
           types=dict(_ENCODER_TYPES, vocab_size="size", max_position_embeddings="size", projection_size="size?")),
)


def siglip_connectors(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """SiglipModel's logits: every text's pooled embedding (its head's output, projection_size) against every image's
    (the pooling head's, hidden_size), [texts, P] @ [P, images], with logit_scale and logit_bias (one parameter
    each); the two widths must agree."""
    text, vision = towers["text"]["d_projection"], towers["vision"]["d_model"]
    if text != vision:
        raise Unmodelled(f"text_config.projection_size={text} is not modelled beside vision_config.hidden_size="
                         f"{vision} (the logits multiply the two embeddings: their widths must agree)")
    return [dict(name="logits", source="vision", pooled=True, similarity=vision, scalars=2)]


register(Family("siglip", nested=("siglip_text_model", "text_config"),
                towers={"vision": ("siglip_vision_model", "vision_config")}, connectors=siglip_connectors,
                prefixes={"text": r"text_model\.", "vision": r"vision_model\."},
                components=[(r"logit_(?:scale|bias)", "logits"), (r"", "logits")],  # the logits' matmul: in forward
                types=dict(architectures="strings?")))
