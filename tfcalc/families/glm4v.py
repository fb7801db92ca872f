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
    refuse_if(cfg, "image_size", image < p, f"under patch_size={p}: a position table of no row")
    fields = _tower(cfg, "hidden_size", notes, image=image)
    D = cfg["hidden_size"]
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

# Glm4vVisionConfig's defaults (transformers 5.24)
DEFAULTS = dict(depth=24, hidden_size=1536, hidden_act="silu", attention_bias=False, num_heads=12, in_channels=3,
                image_size=336, patch_size=14, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=4096,
                intermediate_size=13696)

register(Family("glm4v_vision", mapper=glm4v_vision, components=COMPONENTS, aliases=ALIASES, defaults=DEFAULTS,
                layer_keys={"depth": "n_layers"}, hf_trace=glm4v_vision_parts,
                types=SHARED_TYPES | dict(attention_bias="bool", image_size="size|sizes", out_hidden_size="size",
                                          intermediate_size="size")))
