"""LFM2-VL read whole (transformers' Lfm2VlForConditionalGeneration): its language model LFM2 (tfcalc/families/lfm2.py,
from text_config), its vision tower SigLIP2's NaFlex tower (siglip2_vision_model, tfcalc/families/siglip.py, from
vision_config: AutoModel builds Siglip2VisionModel, the pooling head too when vision_use_head), and the projector
between them (LFM2_VL_WHOLE, spread on the lfm2_vl line of tfcalc/families/wrappers.py).

Projector (Lfm2VlMultiModalProjector): pixel_unshuffle concatenates each downsample_factor x downsample_factor block
of an image's patch grid into one vector of hidden_size * factor ** 2 (a gather and reshapes: no work), a LayerNorm
over it (weight and bias; with projector_use_layernorm), linear_1 (-> projector_hidden_size), projector_hidden_act,
linear_2 (-> text_config.hidden_size), biases by projector_bias: Connector merge = factor ** 2, widths [D * f ** 2,
projector_hidden_size, D_text]. Each image of h x w patches becomes (h / f) * (w / f) tokens of the prompt: its sides
are multiples of patch_size * factor (the processor's encoder_patch_size * downsample_factor = 32 pixels).

Images: each image (each tile of a large one, and its thumbnail) is encoded alone at its own size; the default
workload is one image of the tower's num_patches patches (a square of patch_size * sqrt(num_patches) pixels: its
position table's grid; LFM2-VL's 256 patches, 256 x 256 pixels, 64 tokens: the processor's min_image_tokens); its
largest tile, 512 x 512 pixels (tile_size: 1024 patches, 256 tokens, max_image_tokens), is --image-size 512.

Its forward reads spatial_shapes' values (the tokens per image, a split by them): on meta it is traced by parts
(`lfm2_vl_parts`): the vision tower on every image's patches, the projector on their blocks, the language model on
the prompt's embeddings, lm_head.
Keys that do not change a count are not read: image_token_id, and the processor's keys an older config carries
(max_image_tokens, tile_size, ...).
"""

from __future__ import annotations

from ..hf import activation_of
from .lfm2 import padded_short_conv

PROJECTOR = "multi_modal_projector"


def lfm2_vl_projector(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """Lfm2VlMultiModalProjector over each image's patches unshuffled downsample_factor x downsample_factor: its
    LayerNorm (projector_use_layernorm), linear_1, the activation, linear_2 (biases by projector_bias); its tokens take
    the image's places in the prompt."""
    f = cfg["downsample_factor"]
    D_v, D_t = towers["vision"]["d_model"], towers["text"]["d_model"]
    kinds = towers["vision"]["kinds"]["patch_embedding"]
    side, p = kinds["image_size"], kinds["patch_size"]
    notes.append(f"lfm2_vl: each image's patches unshuffled {f}x{f} into tokens of the prompt (an image's sides "
                 f"multiples of {p * f} pixels); the default image is the tower's table, {side}x{side} pixels, "
                 f"{(side // p) ** 2 // (f * f)} tokens (the processor's largest tile, 512x512, is --image-size 512); "
                 "--images counts every image the processor makes (tiles and thumbnail)")
    return [dict(name=PROJECTOR, source="vision", merge=f * f,
                 norm="layernorm" if cfg["projector_use_layernorm"] else "none",
                 widths=[D_v * f * f, cfg["projector_hidden_size"], D_t], bias=cfg["projector_bias"],
                 activation=activation_of(cfg, "projector_hidden_act"))]


def lfm2_vl_parts(model, spec, workload) -> list:
    """Lfm2VlForConditionalGeneration by parts on meta: the vision tower on every image's patches (pixel_values
    [images, patches, C * p * p], spatial_shapes, no padding), the projector on their blocks as get_image_features lays
    them out ([1, f, tokens * f, D]: its pixel_unshuffle makes tokens rows of D * f * f), the language model on the
    prompt's embeddings (the images' tokens merged in place: no work), lm_head on its output."""
    import torch

    from ..arch.towers import image_size, images

    parts = []
    n = images(workload)
    if n:
        vision = spec.towers["vision"]
        sizes = vision.sizes("patch_embedding")
        (H, W), p = image_size(spec, workload), sizes.patch_size
        patches = (H // p) * (W // p)
        tower = model.model.vision_tower
        parts.append(("model.vision_tower", tower,
                      {"pixel_values": torch.empty(n, patches, sizes.patch_pixels, device="meta"),
                       "spatial_shapes": torch.empty(n, 2, dtype=torch.long, device="meta"),
                       "pixel_attention_mask": None}))
        f = model.config.downsample_factor
        tokens = n * patches // (f * f)
        parts.append(("model.multi_modal_projector", model.model.multi_modal_projector,
                      {"image_features": torch.empty(1, f, tokens * f, vision.d_model, device="meta")}))
    B, N, D = workload.batch_size, workload.seq_len, spec.d_model
    parts.append(("model.language_model", model.model.language_model,
                  {"inputs_embeds": torch.empty(B, N, D, device="meta")}))
    parts.append(("lm_head", model.lm_head, {"input": torch.empty(B, N, D, device="meta")}))
    return parts


# Lfm2VlConfig's defaults for the fields the projector reads
LFM2_VL_WHOLE = dict(towers={"vision": ("siglip2_vision_model", "vision_config")}, connectors=lfm2_vl_projector,
                     prefixes={"text": r"model\.language_model\.",
                               "vision": r"model\.vision_tower\.(?:vision_model\.)?"},
                     components=[(r"lm_head", "head"),
                                 (rf"model\.{PROJECTOR}\.layer_norm", f"{PROJECTOR}/norm"),
                                 (rf"model\.{PROJECTOR}\.linear_1", f"{PROJECTOR}/linear_1"),
                                 (rf"model\.{PROJECTOR}\.linear_2", f"{PROJECTOR}/linear_2")],
                     defaults=dict(downsample_factor=2, projector_hidden_size=2560, projector_bias=True,
                                   projector_use_layernorm=True, projector_hidden_act="gelu"),
                     types=dict(downsample_factor="size", projector_hidden_size="size", projector_bias="bool",
                                projector_use_layernorm="bool", projector_hidden_act="str"),
                     hf_trace=lfm2_vl_parts,
                     known=padded_short_conv)  # LFM2's conv under a cache, as its language model alone
