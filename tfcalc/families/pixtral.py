"""Pixtral's vision tower (model_type pixtral: a config.json's vision_config; transformers' PixtralVisionModel) and the
two wrappers read whole around it: Mistral 3 (mistral3: Mistral Small 3.1 / 3.2, Devstral 2, Ministral 3; its
Mistral3MultiModalProjector) and LLaVA with a Pixtral tower (llava: Pixtral 12B; LLaVA's projector).

The tower: patch_conv, a Conv2d of kernel = stride = patch_size without a bias (tfcalc's `patch_embedding`, no class
token, no position table); ln_pre, an RMSNorm over the patches (`embedding_norm`); a 2-D rotary over each image's patch
grid (no parameters: `positions="rotary"`); pre-norm blocks of attention_norm / ffn_norm (RMSNorm), q, k, v, o without
biases (heads hidden_size // num_attention_heads wide: the config's head_dim is overwritten so) and a gated MLP
gate_proj, up_proj, down_proj without biases, act(gate) * up (hidden_act); no final norm. Images of any size up to
image_size (the processor resizes a larger one down; `up_to_image_size`), each side a multiple of patch_size. Every
image of the step is cut to its own patch grid and the grids are CONCATENATED into one sequence (`packed`): the eager
forward attends over all the images' patches at once, a block-diagonal mask keeping each image's own pairs, so
FlopCounterMode sees (images x patches)^2 pairs per head, and that is what forward counts (the masked figure too: a
mask added to the scores removes no product).

Mistral3MultiModalProjector: norm (RMSNorm over the tower's width) on every patch BEFORE the patch merger, then the
merger (each spatial_merge_size^2 block of an image's grid unfolded into one vector, Linear(D m^2, D) without a bias:
`merge_linear`), then linear_1 (D -> the language model's width, a bias by multimodal_projector_bias), the activation
(projector_hidden_act), linear_2. Each image gives (H / p / m) x (W / p / m) tokens of the prompt (the processor resizes
images to multiples of p * m, which tfcalc requires); the [IMG_BREAK] after each row and the [IMG_END] the processor
adds are text tokens (the token table's), among seq_len's text, not image tokens.
LLaVA with a Pixtral tower: LlavaMultiModalProjector (linear_1, act, linear_2) on every patch, no class token
(vision_feature_select_strategy "full": "default" would drop the first patch of the one sequence, and transformers'
split by image_sizes then fails): H / p x W / p tokens per image, [IMG_BREAK] / [IMG_END] again text tokens.
Keys not read (they change no count): head_dim (PixtralVisionConfig overwrites it with hidden_size //
num_attention_heads), rope_parameters / rope_theta (rotary frequencies), attention_dropout, initializer_range,
image_token_index.
"""

from __future__ import annotations

from ..hf import activation_of, refuse_if
from ..sizes import MAX_DIGITS
from .registry import Family, register

COMPONENTS = [  # PixtralVisionModel's module names -> tfcalc components (check --hf-config)
    (r"patch_conv", "embedding/patch"),
    (r"ln_pre", "embedding/norm"),
    (r"transformer\.layers\.\d+\.attention_norm", "attention/norm"),
    (r"transformer\.layers\.\d+\.attention\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (r"transformer\.layers\.\d+\.attention", "attention/core"),
    (r"transformer\.layers\.\d+\.attention\.o_proj", "attention/out"),
    (r"transformer\.layers\.\d+\.ffn_norm", "mlp/norm"),
    (r"transformer\.layers\.\d+\.feed_forward\.gate_proj", "mlp/gate"),
    (r"transformer\.layers\.\d+\.feed_forward\.up_proj", "mlp/up"),
    (r"transformer\.layers\.\d+\.feed_forward\.down_proj", "mlp/down"),
]


def pixtral(cfg: dict, notes: list[str]) -> dict:
    """PixtralVisionConfig -> the tower's ModelSpec fields (a pure function of the vision config)."""
    refuse_if(cfg, "patch_size", isinstance(cfg["patch_size"], list), "one integer (PixtralVisionModel divides each "
                                                                      "image's sides by it)")
    for key in ("patch_size", "hidden_size"):
        refuse_if(cfg, key, cfg[key] >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    D, heads, p = cfg["hidden_size"], cfg["num_attention_heads"], cfg["patch_size"]
    refuse_if(cfg, "num_attention_heads", D % heads != 0, f"hidden_size={D} is not a multiple of it (PixtralAttention "
                                                          "cuts q, k and v into heads hidden_size // heads wide)")
    size = cfg["image_size"]
    if isinstance(size, list):
        refuse_if(cfg, "image_size", len(size) != 2, "expected H or [H, W]")
    H, W = (size, size) if isinstance(size, int) else size
    refuse_if(cfg, "image_size", max(H, W) >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    refuse_if(cfg, "image_size", min(H, W) < p, f"under patch_size={p}: no patch")
    grid = (H // p) * (W // p)
    notes.append(f"pixtral: images of any size up to image_size={H}x{W}, each side a multiple of patch_size={p} "
                 f"(default: one of {H // p * p}x{W // p * p}, {grid} patches); every image's patches one sequence, "
                 "attended together under a block-diagonal mask (the eager model computes every pair: counted so)")
    return dict(n_layers=cfg["num_hidden_layers"], d_model=D, n_heads=heads, d_ff=cfg["intermediate_size"],
                mlp="gated", activation=activation_of(cfg, "hidden_act"), norm="rmsnorm", norm_position="pre",
                bias=False, mlp_bias=False, causal=False, lm_head=False, final_norm=False, embedding_norm=True,
                positions="rotary", inputs="images", seq_len=grid, context=grid,
                kinds={"patch_embedding": {"image_size": size, "patch_size": p, "channels": cfg["num_channels"],
                                           "class_token": False, "bias": False, "packed": True,
                                           "up_to_image_size": True}})


# PixtralVisionConfig's defaults (transformers 5.24)
DEFAULTS = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                num_channels=3, image_size=1024, patch_size=16, hidden_act="gelu")
TYPES = dict(hidden_size="size", intermediate_size="size", num_hidden_layers="size", num_attention_heads="size",
             num_channels="size", image_size="size|sizes", patch_size="size|sizes", hidden_act="str")

register(Family("pixtral", mapper=pixtral, components=COMPONENTS, defaults=DEFAULTS, types=TYPES))


# ---- Mistral 3 ------------------------------------------------------------------------------------------------------

# Mistral3Config's vision config when none is given (its SubConfigSpec init_kwargs: Mistral Small 3.1's tower)
MISTRAL3_VISION = {"model_type": "pixtral", "intermediate_size": 4096, "hidden_size": 1024, "patch_size": 14,
                   "image_size": 1540, "num_hidden_layers": 24, "num_attention_heads": 16, "head_dim": 64,
                   "hidden_act": "gelu"}


def feature_layer(cfg: dict, towers: dict[str, dict]) -> None:
    """vision_feature_layer: one index into the tower's hidden states (the embeddings' output and each block's: n_layers
    + 1 of them), as get_image_features indexes them; another is refused (transformers' forward fails: IndexError)."""
    refuse_if(cfg, "vision_feature_layer", not isinstance(cfg["vision_feature_layer"], int),
              "tfcalc reads one layer's features (a list concatenates several: not modelled)")
    states = towers["vision"]["n_layers"] + 1
    refuse_if(cfg, "vision_feature_layer", not -states <= cfg["vision_feature_layer"] < states,
              f"the vision tower has {states} hidden states (its embeddings' and {states - 1} blocks'), indexed "
              f"{-states} to {states - 1}")


def mistral3_projector(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """Mistral3MultiModalProjector over each image's patches of one layer of the Pixtral tower (vision_feature_layer;
    every block of the tower still runs): norm, the patch merger's spatial_merge_size^2 blocks and merging_layer,
    linear_1, the activation, linear_2. The tower's images come in m x m blocks of patches (its merge_size)."""
    feature_layer(cfg, towers)
    m = cfg["spatial_merge_size"]
    vision, D_t = towers["vision"], towers["text"]["d_model"]
    patches = vision["kinds"]["patch_embedding"]
    patches["merge_size"] = m  # the merger unfolds m x m blocks of each image's grid: images are multiples of p * m
    p = patches["patch_size"]
    # the tower's own image: the largest of whole m x m blocks up to image_size (not of whole patches: 48 pixels of
    # 14-pixel patches merged 2 x 2 is 28 x 28, 4 patches, not 42 x 42)
    size = patches["image_size"]
    H, W = (size, size) if isinstance(size, int) else size
    refuse_if(cfg, "spatial_merge_size", min(H, W) < p * m, f"the vision tower's image_size={H}x{W} holds no {m}x{m} "
                                                            f"block of {p}-pixel patches")
    vision["seq_len"] = (H // (p * m) * m) * (W // (p * m) * m)
    notes.append(f"mistral3: each image's patches normed, merged {m}x{m} by the patch merger into tokens of the prompt "
                 f"((H/{p * m}) x (W/{p * m}) per image; the [IMG_BREAK] and [IMG_END] tokens the processor adds are "
                 "text tokens of seq_len)")
    return [dict(name="multi_modal_projector", source="vision", merge=m * m, norm="rmsnorm", norm_before_merge=True,
                 merge_linear=True, widths=[vision["d_model"], D_t, D_t], bias=cfg["multimodal_projector_bias"],
                 activation=activation_of(cfg, "projector_hidden_act"))]


def mistral3_parts(model, spec, workload) -> list:
    """Mistral 3's generation class traced part by part on meta (its forward reads the image sizes' values with
    tolist()): the Pixtral tower on every image (pixel_values [images, C, H, W], image_sizes), the projector on the
    tower's patches [images x patches, D] and the image sizes, the language model on the prompt's embeddings (the
    images' tokens among them), lm_head on its output."""
    import torch

    from ..arch.towers import image_size, images

    sizes = spec.towers["vision"].sizes("patch_embedding")
    n = images(workload)
    parts = []
    if n:
        H, W = image_size(spec, workload)
        shapes = [(H, W)] * n
        pixels = torch.empty(n, sizes.channels, H, W, device="meta")
        parts.append(("model.vision_tower", model.model.vision_tower, {"pixel_values": pixels, "image_sizes": shapes}))
        features = torch.empty(n * sizes.patches(H, W), spec.towers["vision"].d_model, device="meta")
        parts.append(("model.multi_modal_projector", model.model.multi_modal_projector,
                      {"image_features": features, "image_sizes": shapes}))
    B, N, D = workload.batch_size, workload.seq_len, spec.d_model
    parts.append(("model.language_model", model.model.language_model,
                  {"inputs_embeds": torch.empty(B, N, D, device="meta")}))
    parts.append(("lm_head", model.lm_head, {"input": torch.empty(B, N, D, device="meta")}))
    return parts


MISTRAL3_WHOLE = dict(
    towers={"vision": ("pixtral", "vision_config", MISTRAL3_VISION)}, connectors=mistral3_projector,
    prefixes={"text": r"model\.language_model\.", "vision": r"model\.vision_tower\."},
    components=[(r"lm_head", "head"),
                (r"model\.multi_modal_projector\.norm", "multi_modal_projector/norm"),
                (r"model\.multi_modal_projector\.patch_merger\.merging_layer", "multi_modal_projector/merge"),
                (r"model\.multi_modal_projector\.linear_1", "multi_modal_projector/linear_1"),
                (r"model\.multi_modal_projector\.linear_2", "multi_modal_projector/linear_2")],
    defaults=dict(vision_feature_layer=-1, projector_hidden_act="gelu", multimodal_projector_bias=False,
                  spatial_merge_size=2),
    types=dict(vision_feature_layer="int", projector_hidden_act="str", multimodal_projector_bias="bool",
               spatial_merge_size="size"),
    hf_trace=mistral3_parts)


# ---- LLaVA with a Pixtral tower (Pixtral 12B) ------------------------------------------------------------------------

def llava_projector(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """LLaVA's projector over its CLIP tower (wrappers.llava_projector), or over a Pixtral tower's patches: no class
    token to drop (LlavaModel.get_image_features' "default" strategy would cut the first patch of the one sequence)."""
    from .wrappers import llava_projector as over_clip

    if towers["vision"]["kinds"]["patch_embedding"].get("packed"):
        strategy = cfg["vision_feature_select_strategy"]
        refuse_if(cfg, "vision_feature_select_strategy", strategy == "default",
                  "with a Pixtral tower (no class token) 'default' drops the first patch of every image's one "
                  "sequence, and transformers' split of the features by image_sizes then fails; expected full")
        notes.append("llava: every patch of each image a token of the prompt (a Pixtral tower: no class token; the "
                     "[IMG_BREAK] and [IMG_END] tokens the processor adds are text tokens of seq_len)")
    return over_clip(cfg, towers, notes)


# LLaVA's vision tower: CLIP's (LLaVA 1.5) or Pixtral's (Pixtral 12B), by vision_config.model_type; LlavaConfig's
# when vision_config is absent or null (its SubConfigSpec init_kwargs: CLIP ViT-L/14 at 336, not CLIPVisionConfig's
# own ViT-B/32 at 224; vocab_size, which the tower does not read, left out)
LLAVA_VISION = {"model_type": "clip_vision_model", "intermediate_size": 4096, "hidden_size": 1024, "patch_size": 14,
                "image_size": 336, "num_hidden_layers": 24, "num_attention_heads": 16, "projection_dim": 768}
LLAVA_PIXTRAL = dict(towers={"vision": (("clip_vision_model", "pixtral"), "vision_config", LLAVA_VISION)},
                     connectors=llava_projector)
