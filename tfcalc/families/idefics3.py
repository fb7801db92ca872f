"""Idefics3 and SmolVLM read whole: their vision towers as model types of their own (idefics3_vision: transformers'
Idefics3VisionTransformer; smolvlm_vision: SmolVLMVisionTransformer, the same modules under another name), the
connector between the tower and the language model, and the wrappers' whole-model fields (IDEFICS3_WHOLE, spread on
the idefics3 and smolvlm lines of tfcalc/families/wrappers.py).

Vision (Idefics3VisionEmbeddings, Idefics3VisionTransformer): SigLIP's tower without its pooling head. The patches'
Conv2d of kernel and stride patch_size WITH a bias, no class token, a learned position table of (image_size //
patch_size) ** 2 rows indexed by each patch's bucketed fractional position (a gather: no matmul; an image of another
grid still reads that table), pre-norm blocks (layer_norm1, q_proj, k_proj, v_proj, out_proj with biases,
layer_norm2, fc1, hidden_act, fc2 with biases; a bidirectional mask), post_layernorm over every patch. tfcalc's
`patch_embedding` kind with class_token false and SigLIP's block rules (tfcalc/families/clip.py `layers`).

Connector (Idefics3Connector): pixel_shuffle concatenates each scale_factor x scale_factor block of an image's patch
grid into one vector of hidden_size * scale_factor ** 2 (a reshape: no work), then modality_projection.proj, a Linear
of that width -> text_config.hidden_size WITHOUT a bias (Connector merge = scale_factor ** 2, widths [D * s ** 2,
D_text]). Each image becomes (patches / scale_factor ** 2) tokens of the prompt (Idefics3Model.image_seq_len).

Images: the generation class takes pixel_values [batch, tiles, C, image_size, image_size]: the processor cuts a large
image into tiles of the tower's image_size and adds a global view resized to it; each tile is encoded alone (the
vision tower's batch is every tile of the step). A workload's `images` are those tiles, each of the tower's
image_size (pixel_shuffle reads a square grid of patches: the connector reads no other size). Tiles that are all
zeros (the padding of a batch whose samples have fewer) are dropped before the tower: not modelled (every tile a real
one).

The forward of the whole class reads the pixels' values (it drops all-zero tiles by a boolean index) and its tower
builds its mask from the patch mask's values: on meta it is traced by parts (`idefics3_parts`), as transformers runs
them: the tower's embeddings, encoder and post_layernorm, the connector, the language model on the prompt's
embeddings, lm_head.
Keys that do not change a count are not read: layer_norm_eps, attention_dropout, initializer_range, image_token_id,
pad_token_id, use_cache.
"""

from __future__ import annotations

from ..hf import SEQ_LEN_CAP
from .clip import encoder, grid, layers
from .registry import Family, register

VISION_COMPONENTS = [  # transformers' module (and parameter) names -> tfcalc components (check --hf-config)
    (r"embeddings\.patch_embedding", "embedding/patch"),
    (r"embeddings\.position_embedding", "embedding/position"),
    *layers(""),
    (r"post_layernorm", "final_norm"),
]


def idefics3_vision(cfg: dict, notes: list[str]) -> dict:
    """Idefics3VisionTransformer (SmolVLMVisionTransformer): SigLIP's patches and blocks, post_layernorm, no head.
    An image_size that is not a multiple of patch_size (SmolVLM's 384 with patches of 14) is read as the pixels the
    convolution covers: its (image_size // patch_size) ** 2 patches and position rows, as transformers builds them."""
    side, p = cfg["image_size"], cfg["patch_size"]
    if isinstance(side, int) and isinstance(p, int) and 0 < p <= side and side % p:
        notes.append(f"{cfg.get('model_type', 'idefics3_vision')}: image_size={side} is not a multiple of "
                     f"patch_size={p}: its Conv2d (padding 'valid') reads {side // p}x{side // p} patches, "
                     f"{side // p * p}x{side // p * p} pixels (the last {side % p} of each side dropped); read as "
                     f"images of {side // p * p}x{side // p * p}")
        cfg = {**cfg, "image_size": side // p * p}
    side, p = grid(cfg)
    fields = dict(encoder(cfg), causal=False, inputs="images",
                  kinds={"patch_embedding": {"image_size": side, "patch_size": p, "channels": cfg["num_channels"],
                                             "class_token": False}})
    # the default workload: one image (tile) at image_size, its patches
    fields["seq_len"] = (side // p) ** 2
    fields["context"] = min(fields["seq_len"], SEQ_LEN_CAP)  # (the whole image, never capped: seq_len is set)
    return fields


def vision_parts(tower, sizes, n: int, hw: tuple[int, int], prefix: str = "") -> list:
    """Idefics3VisionTransformer traced by parts on meta (its forward builds its attention mask from the patch mask's
    values): the embeddings on `n` images of `hw` pixels and their patch mask (every patch real), the encoder on
    their output (no mask: every patch attends to every patch, as the all-ones mask lets it), post_layernorm."""
    import torch

    (H, W), p = hw, sizes.patch_size
    states = torch.empty(n, (H // p) * (W // p), tower.config.hidden_size, device="meta")
    return [(f"{prefix}embeddings", tower.embeddings,
             {"pixel_values": torch.empty(n, sizes.channels, H, W, device="meta"),
              "patch_attention_mask": torch.ones(n, H // p, W // p, dtype=torch.bool, device="meta")}),
            (f"{prefix}encoder", tower.encoder, {"inputs_embeds": states}),
            (f"{prefix}post_layernorm", tower.post_layernorm, {"input": states})]


def tower_parts(model, spec, workload) -> list:
    """The tower alone (idefics3_vision, smolvlm_vision; --tower vision): every image of the workload's batch."""
    sizes = spec.sizes("patch_embedding")
    return vision_parts(model, sizes, workload.batch_size, workload.image_size or (sizes.height, sizes.width))


def idefics3_parts(model, spec, workload) -> list:
    """Idefics3ForConditionalGeneration (SmolVLMForConditionalGeneration) by parts on meta: the vision tower on every
    tile (vision_parts), the connector on its output, the language model on the prompt's embeddings (the images'
    tokens merged in place: a masked_scatter, no work), lm_head on its output."""
    import torch

    from ..arch.towers import image_size, images

    parts = []
    n = images(workload)
    if n:
        sizes = spec.towers["vision"].sizes("patch_embedding")
        parts += vision_parts(model.model.vision_model, sizes, n, image_size(spec, workload), "model.vision_model.")
        states = parts[1][2]["inputs_embeds"]  # the tower's output, every tile's patches
        parts.append(("model.connector", model.model.connector, {"image_hidden_states": states}))
    B, N, D = workload.batch_size, workload.seq_len, spec.d_model
    parts.append(("model.text_model", model.model.text_model,
                  {"inputs_embeds": torch.empty(B, N, D, device="meta")}))
    parts.append(("lm_head", model.lm_head, {"input": torch.empty(B, N, D, device="meta")}))
    return parts


def idefics3_connector(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """Idefics3Connector: each scale_factor x scale_factor block of an image's patches concatenated into one vector
    (pixel_shuffle), then modality_projection.proj (no bias) into the language model's width; its tokens take the
    image's places in the prompt. It reads the tower's own image_size alone (a square grid of patches)."""
    s = cfg["scale_factor"]
    vision = towers["vision"]
    kinds = vision["kinds"]["patch_embedding"]
    side, p = kinds["image_size"], kinds["patch_size"]
    grid = side // p  # (a grid that does not divide into s x s blocks is refused with the workload: --tower text reads)
    tokens = f"{grid * grid // (s * s)} tokens" if grid % s == 0 else "tokens"
    notes.append(f"{cfg.get('model_type', 'idefics3')}: each image a tile of {side}x{side} (the processor cuts a "
                 f"large image into such tiles and a global view; --images counts tiles), its {grid * grid} patches "
                 f"shuffled {s}x{s} into {tokens} of the prompt")
    D_v, D_t = vision["d_model"], towers["text"]["d_model"]
    return [dict(name="modality_projection", source="vision", merge=s * s, widths=[D_v * s * s, D_t], bias=False,
                 image_size=side)]


IDEFICS3_WHOLE = dict(connectors=idefics3_connector,
                      prefixes={"text": r"model\.text_model\.", "vision": r"model\.vision_model\."},
                      components=[(r"lm_head", "head"),
                                  (r"model\.connector\.modality_projection\.proj", "modality_projection")],
                      defaults=dict(scale_factor=2), types=dict(scale_factor="size", model_type="str"),
                      hf_trace=idefics3_parts)

_TYPES = dict(hidden_size="size", intermediate_size="size", num_hidden_layers="size", num_attention_heads="size",
              hidden_act="str", num_channels="size", image_size="size|sizes", patch_size="size|sizes")

register(
    # Idefics3VisionConfig's defaults (SmolVLMVisionConfig's are the same)
    Family("idefics3_vision", mapper=idefics3_vision, components=VISION_COMPONENTS,
           defaults=dict(hidden_size=1152, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=16,
                         num_channels=3, image_size=224, patch_size=32, hidden_act="gelu_pytorch_tanh"),
           types=_TYPES, hf_trace=tower_parts),
    Family("smolvlm_vision", like="idefics3_vision"),
)


def idefics3_whole(vision_type: str) -> dict:
    """The whole-model fields of the idefics3 (smolvlm) wrapper: its vision tower's type, read from vision_config."""
    return dict(IDEFICS3_WHOLE, towers={"vision": (vision_type, "vision_config")})
