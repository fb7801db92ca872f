"""GLM-4.1V read whole (model_type glm4v: transformers' Glm4vForConditionalGeneration): its language model (glm4v_text,
tfcalc/families/wrappers.py), lm_head, and its vision tower (glm4v_vision: a config.json's vision_config;
Glm4vVisionModel, its merger included).

The tower is Qwen2.5-VL's in outline (tfcalc/families/qwen_vl.py) with its own pieces:
- patch_embed: a Conv3d of kernel = stride = (temporal_patch_size, patch_size, patch_size) **with** a bias, then
  post_conv_layernorm (RMSNorm: `embedding_norm`);
- embeddings: a learned position table of (image_size // patch_size)^2 rows (nn.Embedding), resampled to each image's
  patch grid by a bicubic grid_sample (no matmul) and added (`patch_embedding.position_grid`); a 2-D rotary besides
  (no parameters);
- depth blocks: RMSNorm norm1, a fused qkv D -> 3D (a bias by attention_bias), proj without a bias, RMSNorm norm2, a
  gated MLP **D -> out_hidden_size** -> D without biases (Glm4VisionMlp reads out_hidden_size as its width, not
  intermediate_size), act(gate) * up (hidden_act); every block attends over the whole image;
- post_layernorm (RMSNorm) over every patch, downsample (a Conv2d of D -> out_hidden_size, kernel = stride =
  spatial_merge_size, a bias: one matmul over the m x m blocks), and Glm4vVisionPatchMerger: proj out -> out,
  post_projection_norm (LayerNorm), GELU, a gated MLP out -> intermediate_size -> out (context_dim), no biases
  (`patch_merger.glu`). Its output, out_hidden_size wide, is the prompt's image tokens: nothing else joins them.
The default workload is one image of the config's image_size (336: 24 x 24 patches of 14, 144 tokens after the merger),
the position table's own grid. The generation class's forward reads image_grid_thw's values: it is traced part by part
as Qwen2-VL's is (the vision tower on every image's patches and grid, the language model on the prompt's embeddings
with mrope's 3-D positions, lm_head).
Keys that do not change a count are not read: rms_norm_eps, attention_dropout, initializer_range, rope_parameters (the
rotary's frequencies).
"""

from __future__ import annotations

from ..hf import activation_of, refuse_if
from ..sizes import MAX_DIGITS
from .qwen_vl import ALIASES, SHARED_TYPES, _tower
from .registry import Family, register

COMPONENTS = [  # Glm4vVisionModel's module names -> tfcalc components (check --hf-config)
    (r"patch_embed\.proj", "embedding/patch"),
    (r"post_conv_layernorm", "embedding/norm"),
    (r"embeddings\.position_embedding", "embedding/position"),
    (r"blocks\.\d+\.norm1", "attention/norm"),
    (r"blocks\.\d+\.attn\.qkv", "attention/qkv"),
    (r"blocks\.\d+\.attn", "attention/core"),
    (r"blocks\.\d+\.attn\.proj", "attention/out"),
    (r"blocks\.\d+\.norm2", "mlp/norm"),
    (r"blocks\.\d+\.mlp\.gate_proj", "mlp/gate"),
    (r"blocks\.\d+\.mlp\.up_proj", "mlp/up"),
    (r"blocks\.\d+\.mlp\.down_proj", "mlp/down"),
    (r"post_layernorm", "merger/norm"),
    (r"downsample", "merger/downsample"),
    (r"merger\.proj", "merger/proj"),
    (r"merger\.post_projection_norm", "merger/proj_norm"),
    (r"merger\.gate_proj", "merger/gate"),
    (r"merger\.up_proj", "merger/up"),
    (r"merger\.down_proj", "merger/down"),
]


def glm4v_vision(cfg: dict, notes: list[str]) -> dict:
    image, p = cfg["image_size"], cfg["patch_size"]
    refuse_if(cfg, "image_size", isinstance(image, list), "one integer (Glm4vVisionEmbeddings' table is "
                                                          "(image_size // patch_size)^2 rows)")
    refuse_if(cfg, "patch_size", isinstance(p, list), "one integer (PatchEmbed's Conv3d kernel is (T, p, p))")
    refuse_if(cfg, "image_size", image >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    refuse_if(cfg, "image_size", image < p, f"under patch_size={p}: a position table of no row")
    fields = _tower(cfg, "hidden_size", notes, image=image)
    D = cfg["hidden_size"]
    refuse_if(cfg, "num_heads", D // cfg["num_heads"] % 4 != 0,
              f"heads of hidden_size // num_heads = {D // cfg['num_heads']}: the 2-D rotary's frequencies cover each "
              "half of a head for rows and columns (a multiple of 4)")
    fields |= dict(bias=False, qkv_bias=cfg["attention_bias"], mlp_bias=False, mlp="gated", d_ff=cfg["out_hidden_size"],
                   activation=activation_of(cfg, "hidden_act"), norm="rmsnorm", embedding_norm=True)
    fields["kinds"]["patch_embedding"] |= dict(bias=True, position_grid=image // p)
    fields["kinds"]["patch_merger"] = dict(d_out=cfg["out_hidden_size"], glu=cfg["intermediate_size"])
    notes.append(f"glm4v_vision: a position table of {(image // p) ** 2} rows ({image // p} x {image // p}) resampled "
                 f"to each image's grid (bicubic, not counted); the blocks' MLP {D} -> out_hidden_size="
                 f"{cfg['out_hidden_size']}, the merger's {cfg['out_hidden_size']} -> intermediate_size="
                 f"{cfg['intermediate_size']}")
    return fields


def merged_tokens(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """The images in the prompt: the merger's tokens, as Qwen2-VL's (wrappers.qwen_vl_tokens; imported here, as
    wrappers.py imports this module)."""
    from .wrappers import qwen_vl_tokens

    return qwen_vl_tokens(cfg, towers, notes)


def _table_added(embeddings, lengths, image_shapes, h_coords, w_coords):
    """Glm4vVisionEmbeddings' forward at its shapes on meta: the patches [T, D] plus the table resampled to each
    patch [T, D]. Its own finds each patch's image from the per-image lengths (kept on the CPU, as the attention's
    split reads them) against token positions on the patches' device, which meta cannot mix; grid_sample, the only op
    between, is none that FlopCounterMode counts."""
    return embeddings + embeddings.new_empty(embeddings.shape)


def glm4v_parts(model, spec, workload) -> list:
    """Glm4vForConditionalGeneration part by part, as Qwen2-VL's (wrappers.qwen_vl_parts): the same module paths
    (model.visual, model.language_model, lm_head) and mrope's 3-D positions; the vision embeddings' position lookup
    run at its shapes (`_table_added`) on this model built on meta for the trace alone."""
    from .wrappers import qwen_vl_parts

    model.model.visual.embeddings.forward = _table_added
    return qwen_vl_parts(model, spec, workload)


def glm4v_vision_parts(model, spec, workload) -> list:
    """Glm4vVisionModel alone (check --hf-config --tower vision) on every image's patches and grid, its embeddings'
    position lookup run at its shapes (`_table_added`)."""
    from ..verify.hf_model import _patch_inputs

    sizes = spec.sizes("patch_embedding")
    model.embeddings.forward = _table_added
    image = workload.image_size or (sizes.height, sizes.width)
    return [("", model, _patch_inputs(model, workload.batch_size, sizes.channels, sizes.temporal_patch_size,
                                      sizes.patch_size, image))]


# the wrapper's line in tfcalc/families/wrappers.py splats this: its vision tower, where the generation class keeps
# each part, and its part-by-part trace
GLM4V_WHOLE = dict(towers={"vision": ("glm4v_vision", "vision_config")}, connectors=merged_tokens,
                   prefixes={"text": r"model\.language_model\.", "vision": r"model\.visual\."},
                   components=[(r"lm_head", "head")], types=dict(model_type="str"), hf_trace=glm4v_parts)

# ---- Kimi K2.5 (kimi_k25): its MoonViT-like tower and Kimi_K25MultimodalProjection ----------------------------------

KIMI_COMPONENTS = [  # Kimi_K25VisionModel's module names -> tfcalc components
    (r"patch_embed\.proj", "embedding/patch"),
    (r"patch_embed\.pos_emb", "embedding/position"),
    (r"layers\.\d+\.norm1", "attention/norm"),
    (r"layers\.\d+\.attn\.(q|k|v)_proj", "attention/qkv"),
    (r"layers\.\d+\.attn", "attention/core"),
    (r"layers\.\d+\.attn\.proj", "attention/out"),
    (r"layers\.\d+\.norm2", "mlp/norm"),
    (r"layers\.\d+\.mlp\.fc1", "mlp/up"),
    (r"layers\.\d+\.mlp\.fc2", "mlp/down"),
    (r"final_layernorm", "final_norm"),
]
# Moonshot's remote code's names for the tower's sizes (Kimi-K2.5's published config.json) -> transformers' names
REMOTE_NAMES = {"vt_hidden_size": "hidden_size", "vt_num_hidden_layers": "num_hidden_layers",
                "vt_num_attention_heads": "num_attention_heads", "vt_intermediate_size": "intermediate_size",
                "init_pos_emb_height": "pos_emb_height", "init_pos_emb_width": "pos_emb_width",
                "mm_hidden_size": "hidden_size"}
KIMI_IMAGE = 448  # pixels a side: the default workload (the config gives no image size), 256 tokens of the prompt


def kimi_k25_vision(cfg: dict, notes: list[str]) -> dict:
    """Kimi_K25VisionModel: a Conv2d of kernel = stride = patch_size with a bias over 3 channels, a learned table of
    pos_emb_height x pos_emb_width rows resampled bicubically to each image's grid (embedding_bag: no matmul) plus a
    per-frame sinusoid (a buffer; none on an image), a 2-D rotary, pre-norm LayerNorm blocks (q, k, v and proj with
    biases; fc1, hidden_act, fc2 with biases), final_layernorm. Its tokens are merged by the projector (the
    connector), merge_kernel_size a block."""
    for remote, name in REMOTE_NAMES.items():  # Moonshot's remote code's names: transformers reads the others
        refuse_if(cfg, remote, cfg.get(remote) is not None and cfg[remote] != cfg[name],
                  f"the remote code's name, which transformers' Kimi_K25VisionConfig does not read (it builds "
                  f"{name}={cfg[name]}); give {name}")
    given = [remote for remote in REMOTE_NAMES if cfg.get(remote) is not None]
    if given:
        notes.append(f"kimi_k25_vision: {', '.join(given)} (the remote code's names) equal what transformers reads "
                     f"({', '.join(REMOTE_NAMES[r] for r in given)})")
    merge = cfg["merge_kernel_size"]
    refuse_if(cfg, "merge_kernel_size", len(merge) != 2 or min(merge) < 1, "two positive integers (a block's height "
                                                                          "and width in patches)")
    refuse_if(cfg, "merge_kernel_size", max(merge) >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    p, (kh, kw) = cfg["patch_size"], merge
    refuse_if(cfg, "patch_size", isinstance(p, list), "one integer (the patches' Conv2d is square in tfcalc)")
    refuse_if(cfg, "merge_kernel_size", kh != kw, "a square block (tfcalc merges m x m patches)")
    refuse_if(cfg, "pos_emb_width", cfg["pos_emb_width"] != cfg["pos_emb_height"],
              f"pos_emb_height={cfg['pos_emb_height']} (transformers resamples the table as a square grid of "
              "pos_emb_height a side)")
    D, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    refuse_if(cfg, "num_attention_heads", D % heads != 0 or D // heads % 4 != 0,
              f"hidden_size={D} is not 4 x a multiple of it (heads of hidden_size // num_attention_heads, a multiple "
              "of 4: the 2-D rotary's frequencies cover each half of a head for rows and columns)")
    for key in ("patch_size", "hidden_size", "pos_emb_height"):
        refuse_if(cfg, key, cfg[key] >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    side = KIMI_IMAGE if KIMI_IMAGE % (p * kh) == 0 else p * kh * max(1, KIMI_IMAGE // (p * kh))
    patches = (side // p) ** 2
    notes.append(f"the config gives no image size: one {side}x{side} image by default ({patches} patches, "
                 f"{patches // kh ** 2} tokens after the projector); --image-size HxW, --images N")
    return dict(n_layers=cfg["num_hidden_layers"], d_model=D, n_heads=heads, d_ff=cfg["intermediate_size"],
                mlp="standard", activation=activation_of(cfg, "hidden_act"), norm="layernorm", norm_position="pre",
                bias=True, causal=False, lm_head=False, final_norm=True, positions="rotary", inputs="images",
                seq_len=patches, context=patches,
                kinds={"patch_embedding": {"image_size": side, "patch_size": p, "channels": 3, "class_token": False,
                                           "bias": True, "merge_size": kh, "position_grid": cfg["pos_emb_height"]}})


def kimi_projector(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """Kimi_K25MultimodalProjection over each image's tokens, merge_kernel_size^2 a block: pre_norm (a LayerNorm
    over each token, projection_hidden_size wide: the tower's width), the block concatenated, in_proj D m^2 -> D m^2,
    GELU, out_proj D m^2 -> the language model's width, biases. Its tokens take the image's places in the prompt."""
    D, m = towers["vision"]["d_model"], towers["vision"]["kinds"]["patch_embedding"]["merge_size"]
    refuse_if(cfg, "projection_hidden_size", cfg["projection_hidden_size"] != D,
              f"the projector's pre_norm runs over each token of vision_config.hidden_size={D}")
    return [dict(name="mm_projector", source="vision", merge=m * m, norm="layernorm", norm_before_merge=True,
                 widths=[D * m * m, D * m * m, towers["text"]["d_model"]], bias=True, activation="gelu")]


def _kimi_vision_inputs(model, images: int, p: int, hw: tuple[int, int]) -> dict:
    """Kimi_K25VisionModel's inputs as its processor gives them: every image's patches [patches, 3, p, p] and
    grid_thw (1, H/p, W/p) on the CPU (the attention reads it with tolist()), and what its forward computes from
    the grid's values, computed as transformers does and handed in on meta: the rotary's positions, the table's
    interpolation indices and weights, the frame index, the merge's scatter index."""
    import torch
    from transformers.models.kimi_k25.modeling_kimi_k25 import get_vision_frame_index, get_vision_temporal_merge_index
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights, get_vision_position_ids

    rows, cols = hw[0] // p, hw[1] // p
    grid = torch.tensor([[1, rows, cols]] * images)
    embed = model.patch_embed.pos_emb
    indices, weights = get_vision_interpolation_indices_and_weights(
        grid, embed.num_grid_per_side, mode=embed.interpolation_mode, align_corners=embed.interpolation_align_corners)
    destination, weight, merged = get_vision_temporal_merge_index(grid, *model.merge_kernel_size)
    meta = (lambda t: t.to("meta"))
    return {"pixel_values": torch.empty(images * rows * cols, 3, p, p, device="meta"), "grid_thw": grid,
            "position_ids": meta(get_vision_position_ids(grid, 1)), "interp_indices": meta(indices),
            "interp_weights": meta(weights), "frame_index": meta(get_vision_frame_index(grid)),
            "temporal_merge_index": (meta(destination), meta(weight), merged)}


def kimi_k25_vision_parts(model, spec, workload) -> list:
    """Kimi_K25VisionModel alone (check --hf-config --tower vision) on every image's patches and grid."""
    sizes = spec.sizes("patch_embedding")
    image = workload.image_size or (sizes.height, sizes.width)
    return [("", model, _kimi_vision_inputs(model, workload.batch_size, sizes.patch_size, image))]


def kimi_k25_parts(model, spec, workload) -> list:
    """Kimi_K25ForConditionalGeneration part by part on meta (its vision tower reads image_grid_thw's values): the
    vision tower on every image's patches and grid, the projector on its merged blocks [tokens, m^2, D], the language
    model (DeepSeek-V3's, 1-D positions) on the prompt's embeddings, lm_head on its output."""
    import torch

    from ..arch.towers import image_size, images

    tower = spec.towers["vision"]
    sizes = tower.sizes("patch_embedding")
    parts = []
    n = images(workload)
    if n:
        (H, W), p, m = image_size(spec, workload), sizes.patch_size, sizes.merge_size
        parts.append(("model.vision_tower", model.model.vision_tower,
                      _kimi_vision_inputs(model.model.vision_tower, n, p, (H, W))))
        tokens = n * (H // p // m) * (W // p // m)
        parts.append(("model.mm_projector", model.model.mm_projector,
                      {"hidden_states": torch.empty(tokens, m * m, tower.d_model, device="meta")}))
    B, N, D = workload.batch_size, workload.seq_len, spec.d_model
    parts.append(("model.language_model", model.model.language_model,
                  {"inputs_embeds": torch.empty(B, N, D, device="meta"),
                   "position_ids": torch.zeros(B, N, dtype=torch.long, device="meta")}))
    parts.append(("lm_head", model.lm_head, {"input": torch.empty(B, N, D, device="meta")}))
    return parts


KIMI_K25_WHOLE = dict(towers={"vision": ("kimi_k25_vision", "vision_config")}, connectors=kimi_projector,
                      prefixes={"text": r"model\.language_model\.", "vision": r"model\.vision_tower\."},
                      components=[(r"lm_head", "head"), (r"model\.mm_projector\.pre_norm", "mm_projector/norm"),
                                  (r"model\.mm_projector\.in_proj", "mm_projector/linear_1"),
                                  (r"model\.mm_projector\.out_proj", "mm_projector/linear_2")],
                      defaults=dict(projection_hidden_size=1152), types=dict(projection_hidden_size="size?"),
                      hf_trace=kimi_k25_parts)

# Kimi_K25VisionConfig's defaults (transformers 5.24)
KIMI_DEFAULTS = dict(patch_size=14, pos_emb_height=64, pos_emb_width=64, num_attention_heads=16, num_hidden_layers=27,
                     hidden_size=1152, intermediate_size=4304, hidden_act="gelu_pytorch_tanh", merge_kernel_size=[2, 2])

# Glm4vVisionConfig's defaults (transformers 5.24)
DEFAULTS = dict(depth=24, hidden_size=1536, hidden_act="silu", attention_bias=False, num_heads=12, in_channels=3,
                image_size=336, patch_size=14, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=4096,
                intermediate_size=13696)

register(Family("glm4v_vision", mapper=glm4v_vision, components=COMPONENTS, aliases=ALIASES, defaults=DEFAULTS,
                layer_keys={"depth": "n_layers"}, hf_trace=glm4v_vision_parts,
                types=SHARED_TYPES | dict(attention_bias="bool", image_size="size|sizes", out_hidden_size="size",
                                          intermediate_size="size")),
         Family("kimi_k25_vision", mapper=kimi_k25_vision, components=KIMI_COMPONENTS, defaults=KIMI_DEFAULTS,
                hf_trace=kimi_k25_vision_parts,
                types=dict(patch_size="size", pos_emb_height="size", pos_emb_width="size",
                           num_attention_heads="size", num_hidden_layers="size", hidden_size="size",
                           intermediate_size="size", hidden_act="str", merge_kernel_size="integers",
                           **{remote: "size?" for remote in REMOTE_NAMES})))  # not read by transformers: null too
