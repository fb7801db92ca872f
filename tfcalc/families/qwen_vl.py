"""Qwen2-VL's and Qwen2.5-VL's vision towers (model_type qwen2_vl_vision, qwen2_5_vl_vision: a config.json's
vision_config): transformers' Qwen2VisionTransformerPretrainedModel and Qwen2_5_VisionTransformerPretrainedModel, the
patch merger included (its output is what reaches the language model).

Both: the patches' Conv3d of kernel = stride = (temporal_patch_size, patch_size, patch_size) without a bias (an
image repeated to temporal_patch_size frames; tfcalc's `patch_embedding` with no class token and no position table),
a 2-D rotary over the patch grid (no parameters), pre-norm blocks of a fused qkv (D -> 3D, a bias) and proj (a bias),
and the merger (`patch_merger`): ln_q over D, each spatial_merge_size^2 block of patches concatenated, Linear(D m^2,
D m^2) + GELU + Linear(D m^2, out) with biases. No final norm but ln_q.
- Qwen2-VL: D = embed_dim; LayerNorm (weight and bias) norm1, norm2, ln_q; MLP fc1 D -> embed_dim * mlp_ratio, the
  activation (hidden_act, QuickGELU by default), fc2, with biases; the merger's output is hidden_size (the language
  model's width). Every block attends over the whole image.
- Qwen2.5-VL: D = hidden_size; RMSNorm norm1, norm2, ln_q; a gated MLP gate_proj, up_proj (D -> intermediate_size),
  down_proj, with biases, act(gate) * up (hidden_act, SiLU); the merger's output is out_hidden_size. The blocks of
  fullatt_block_indexes attend over the whole image; the others within windows of window_size // spatial_merge_size //
  patch_size merged tokens a side (`window_attention`: the eager model runs each window on its own, so that is
  what forward counts).
The workload is images (--image-size, --images): the configs give no image size. The default is one 448x448 image: 32
x 32 patches of 14, 256 tokens to the language model after the merger, inside both processors' pixel bounds
(min_pixels 56*56, max_pixels 28*28*1280 for Qwen2-VL; 12,845,056 for Qwen2.5-VL).
Keys that do not change a count are not read: initializer_range, rope_parameters (rotary frequencies), tokens_per_second
(video time positions), spatial_patch_size and in_chans (old names transformers does not read; patch_size and
in_channels are), model_type's old spelling aside.
"""

from __future__ import annotations

from ..hf import PATTERN_LIMIT, Unmodelled, activation_of, refuse_if, shortest_cycle
from ..sizes import MAX_DIGITS
from .registry import Family, register

DEFAULT_IMAGE = 448  # pixels a side: the default workload, one image (the configs give none)

COMPONENTS = [  # transformers' module names -> tfcalc components (check --hf-config)
    (r"patch_embed\.proj", "embedding/patch"),
    (r"blocks\.\d+\.norm1", "attention/norm"),
    (r"blocks\.\d+\.attn\.qkv", "attention/qkv"),
    (r"blocks\.\d+\.attn", "attention/core"),
    (r"blocks\.\d+\.attn\.proj", "attention/out"),
    (r"blocks\.\d+\.norm2", "mlp/norm"),
    (r"blocks\.\d+\.mlp\.(fc1|up_proj)", "mlp/up"),
    (r"blocks\.\d+\.mlp\.gate_proj", "mlp/gate"),
    (r"blocks\.\d+\.mlp\.(fc2|down_proj)", "mlp/down"),
    (r"merger\.ln_q", "merger/norm"),
    (r"merger\.mlp\.0", "merger/up"),
    (r"merger\.mlp\.2", "merger/down"),
]


def _tower(cfg: dict, width: str, notes: list[str], image: int = DEFAULT_IMAGE) -> dict:
    """What the two towers share: the sizes, the patches, the merger, the default image (`image` pixels a side, else
    the nearest multiple of patch_size * spatial_merge_size under it)."""
    for key in ("patch_size", "temporal_patch_size"):  # transformers declares a list too: its Conv3d takes none
        refuse_if(cfg, key, isinstance(cfg[key], list), "one integer (PatchEmbed's Conv3d kernel is (T, p, p))")
    for key in ("patch_size", "temporal_patch_size", "spatial_merge_size", width):
        refuse_if(cfg, key, cfg[key] >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    D, heads = cfg[width], cfg["num_heads"]
    refuse_if(cfg, "num_heads", D % heads != 0, f"{width}={D} is not a multiple of it (the fused qkv is cut into "
                                                "num_heads heads of equal width)")
    p, m = cfg["patch_size"], cfg["spatial_merge_size"]
    side = image if image % (p * m) == 0 else p * m * max(1, image // (p * m))
    notes.append(f"the config gives no image size: one {side}x{side} image by default ({(side // p) ** 2} patches, "
                 f"{(side // p // m) ** 2} tokens after the merger); --image-size HxW, --images N")
    patches = (side // p) ** 2
    return dict(n_layers=cfg["depth"], d_model=D, n_heads=heads, norm_position="pre", bias=True, qkv_bias=True,
                mlp_bias=True, causal=False, lm_head=False, final_norm=False, positions="rotary", inputs="images",
                seq_len=patches, context=patches,
                kinds={"patch_embedding": {"image_size": side, "patch_size": p, "channels": cfg["in_channels"],
                                           "class_token": False, "temporal_patch_size": cfg["temporal_patch_size"],
                                           "bias": False, "merge_size": m}})


def qwen2_vl_vision(cfg: dict, notes: list[str]) -> dict:
    fields = _tower(cfg, "embed_dim", notes)
    D = cfg["embed_dim"]
    fields |= dict(d_ff=D * cfg["mlp_ratio"], mlp="standard", activation=activation_of(cfg, "hidden_act"),
                   norm="layernorm")
    fields["kinds"]["patch_merger"] = {"d_out": cfg["hidden_size"]}
    return fields


def qwen2_5_vl_vision(cfg: dict, notes: list[str]) -> dict:
    fields = _tower(cfg, "hidden_size", notes)
    L, p, m = cfg["depth"], cfg["patch_size"], cfg["spatial_merge_size"]
    merged = cfg["window_size"] // m // p  # merged tokens a side of a window (get_vision_window_index)
    full = set(cfg["fullatt_block_indexes"])
    refuse_if(cfg, "depth", L > PATTERN_LIMIT, f"tfcalc writes the blocks' kinds (windowed or global) per block, for "
                                               f"at most {PATTERN_LIMIT:,} blocks")
    outside = sorted({i for i in full if not 0 <= i < L})
    if outside:
        notes.append(f"fullatt_block_indexes: {', '.join(map(str, outside))} name no block of depth={L} "
                     "(transformers' `layer_num in fullatt_block_indexes` matches none of them)")
    windowed = [i not in full for i in range(L)]
    if any(windowed):
        refuse_if(cfg, "window_size", merged == 0, f"under spatial_merge_size * patch_size = {m * p}: a window of no "
                                                   "merged token (transformers divides by it)")
        fields["kinds"]["window_attention"] = {"window": merged * m}
        pattern = ["window_attention+mlp" if w else "attention+mlp" for w in windowed]
        fields["block_pattern"] = shortest_cycle(pattern)
        notes.append(f"{sum(windowed)} of {L} blocks attend within windows of {merged * m}x{merged * m} patches "
                     f"(window_size={cfg['window_size']}), each window on its own as the eager model runs it")
    fields |= dict(d_ff=cfg["intermediate_size"], mlp="gated", activation=activation_of(cfg, "hidden_act"),
                   norm="rmsnorm")
    fields["kinds"]["patch_merger"] = {"d_out": cfg["out_hidden_size"]}
    return fields


def image_tokens(vision_config: dict, height: int, width: int) -> int:
    """Tokens an image of height x width pixels gives the language model: its patches / spatial_merge_size^2, as
    Qwen2-VL's and Qwen2.5-VL's merger output them (the lead sizes the text tower's workload with it). The image's
    sides are multiples of patch_size * spatial_merge_size (the processor resizes it so)."""
    model_type = vision_config.get("model_type", "qwen2_5_vl_vision")
    defaults = DEFAULTS.get(model_type, DEFAULTS["qwen2_5_vl_vision"])
    p, m = (vision_config.get(k, defaults[k]) for k in ("patch_size", "spatial_merge_size"))
    if height % (p * m) or width % (p * m):
        raise Unmodelled(f"image {height}x{width} is not modelled: not a multiple of patch_size * spatial_merge_size "
                         f"= {p * m} (the processor resizes images to multiples of it)")
    return (height // p) * (width // p) // m ** 2


SHARED_TYPES = dict(depth="size", num_heads="size", hidden_size="size", hidden_act="str", in_channels="size",
                    patch_size="size|sizes", spatial_merge_size="size", temporal_patch_size="size|sizes")
ALIASES = dict(num_hidden_layers="depth", num_attention_heads="num_heads")  # the config classes' attribute_map
DEFAULTS = {
    "qwen2_vl_vision": dict(depth=32, embed_dim=1280, hidden_size=3584, hidden_act="quick_gelu", mlp_ratio=4,
                            num_heads=16, in_channels=3, patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
    "qwen2_5_vl_vision": dict(depth=32, hidden_size=3584, hidden_act="silu", intermediate_size=3420, num_heads=16,
                              in_channels=3, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                              window_size=112, out_hidden_size=3584, fullatt_block_indexes=[7, 15, 23, 31]),
}

register(
    Family("qwen2_vl_vision", mapper=qwen2_vl_vision, components=COMPONENTS, aliases=ALIASES,
           defaults=DEFAULTS["qwen2_vl_vision"], layer_keys={"depth": "n_layers"},
           types=SHARED_TYPES | dict(embed_dim="size", mlp_ratio="size")),
    Family("qwen2_5_vl_vision", mapper=qwen2_5_vl_vision, components=COMPONENTS, aliases=ALIASES,
           defaults=DEFAULTS["qwen2_5_vl_vision"], layer_keys={"depth": "n_layers"},
           types=SHARED_TYPES | dict(intermediate_size="size", window_size="size", out_hidden_size="size",
                                     fullatt_block_indexes="integers")),
)
