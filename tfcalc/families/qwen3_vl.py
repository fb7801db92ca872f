"""Qwen3-VL's and Qwen3.5's vision towers (model_type qwen3_vl_vision, qwen3_vl_moe_vision, qwen3_5_vision,
qwen3_5_moe_vision: a config.json's vision_config) and the wrappers read whole with them (qwen3_vl, qwen3_vl_moe here;
qwen3_5, qwen3_5_moe on their lines in qwen3_next.py): transformers' Qwen3VLVisionModel (Qwen3VLMoeVisionModel the
same class) and Qwen3_5VisionModel (Qwen3_5MoeVisionModel the same), merger included.

The tower, D = hidden_size:
- patch_embed: a Conv3d of kernel = stride = (temporal_patch_size, patch_size, patch_size) WITH a bias (each image
  repeated to temporal_patch_size frames): `patch_embedding`, bias=True;
- pos_embed: a learned table of num_position_embeddings rows (a square grid of positions) resampled bilinearly to each
  image's grid in every forward, 4 gathered rows per patch weighted and summed: parameters [rows, D], no matmul
  (FlopCounterMode counts nothing of it): `patch_embedding.position_table`;
- a 2-D rotary over the patch grid in every block (no parameters);
- depth pre-norm blocks: LayerNorm norm1, a fused qkv (D -> 3D, a bias), proj (a bias), LayerNorm norm2, MLP
  linear_fc1 (D -> intermediate_size) + hidden_act (gelu_pytorch_tanh) + linear_fc2, biases; every block attends over
  its whole image (the eager model runs each image on its own);
- merger (`patch_merger`): LayerNorm over D, each spatial_merge_size^2 block of patches concatenated, linear_fc1
  (D m^2 -> D m^2) + GELU (exact) + linear_fc2 (-> out_hidden_size), biases; no final norm but it;
- Qwen3-VL only, DeepStack: after each block of deepstack_visual_indexes a merger of its own (deepstack_merger_list,
  use_postshuffle_norm: its LayerNorm over D m^2, after the concatenation) on that block's output; its rows are added
  to the language model's hidden states at the image's tokens after the language model's first blocks (an add: no
  matmul). Qwen3.5's tower has none (a deepstack_visual_indexes in its vision_config is not read by transformers).
The image's tokens (patches / m^2, out_hidden_size wide) take the image's places in the prompt: the language model's
width (noted otherwise: transformers builds such a model, its forward fails). The language model's multimodal rotary is positions only (no parameters, no matmul).
The workload is images (--image-size, --images): the configs give no image size. The default is one 448x448 image: 28
x 28 patches of 16, 196 tokens to the language model after the merger.
Keys that do not change a count are not read: initializer_range, rope_parameters (the rotary's frequencies).
"""

from __future__ import annotations

from ..hf import activation_of, refuse_if
from .qwen_vl import _tower
from .registry import Family, register

COMPONENTS = [  # transformers' module names -> tfcalc components (check --hf-config)
    (r"patch_embed\.proj", "embedding/patch"),
    (r"pos_embed", "embedding/position"),
    (r"blocks\.\d+\.norm1", "attention/norm"),
    (r"blocks\.\d+\.attn\.qkv", "attention/qkv"),
    (r"blocks\.\d+\.attn", "attention/core"),
    (r"blocks\.\d+\.attn\.proj", "attention/out"),
    (r"blocks\.\d+\.norm2", "mlp/norm"),
    (r"blocks\.\d+\.mlp\.linear_fc1", "mlp/up"),
    (r"blocks\.\d+\.mlp\.linear_fc2", "mlp/down"),
    (r"merger\.norm", "merger/norm"),
    (r"merger\.linear_fc1", "merger/up"),
    (r"merger\.linear_fc2", "merger/down"),
    (r"deepstack_merger_list\.\d+\.norm", "deepstack/norm"),
    (r"deepstack_merger_list\.\d+\.linear_fc1", "deepstack/up"),
    (r"deepstack_merger_list\.\d+\.linear_fc2", "deepstack/down"),
]


def _tower3(cfg: dict, notes: list[str]) -> dict:
    """What Qwen3-VL's and Qwen3.5's towers share: all but DeepStack."""
    fields = _tower(cfg, "hidden_size", notes)
    d_head = cfg["hidden_size"] // cfg["num_heads"]
    refuse_if(cfg, "num_heads", d_head % 4 != 0, f"heads of hidden_size / num_heads = {d_head} are not a multiple of 4 "
                                                 "(the 2-D rotary rotates a height half and a width half, each in "
                                                 "pairs: transformers' tables would not fit the heads)")
    fields["kinds"]["patch_embedding"] |= {"bias": True, "position_table": cfg["num_position_embeddings"]}
    fields |= dict(d_ff=cfg["intermediate_size"], mlp="standard", activation=activation_of(cfg, "hidden_act"),
                   norm="layernorm")
    fields["kinds"]["patch_merger"] = {"d_out": cfg["out_hidden_size"]}
    return fields


def qwen3_5_vision(cfg: dict, notes: list[str]) -> dict:
    """Qwen3.5's tower (Qwen3_5VisionModel): Qwen3-VL's without DeepStack (a deepstack_visual_indexes in its config,
    which Qwen3_5VisionConfig does not declare, is not read)."""
    return _tower3(cfg, notes)


def qwen3_vl_vision(cfg: dict, notes: list[str]) -> dict:
    fields = _tower3(cfg, notes)
    listed, L = cfg["deepstack_visual_indexes"], cfg["depth"]
    refuse_if(cfg, "deepstack_visual_indexes", len(set(listed)) != len(listed),
              "a block listed twice (transformers builds a merger per entry and runs the first of them only)")
    outside = [i for i in listed if not 0 <= i < L]
    refuse_if(cfg, "deepstack_visual_indexes", bool(outside),
              f"{', '.join(map(str, outside))} name no block of depth={L} (its merger would hold parameters and "
              "never run)")
    fields["kinds"]["patch_merger"]["deepstack"] = list(listed)
    if listed:
        notes.append(f"DeepStack: a merger of its own after blocks {', '.join(map(str, listed))} of the vision tower, "
                     f"its tokens added to the language model's hidden states after its first {len(listed)} blocks "
                     "(an add: no matmul)")
    return fields


def qwen3_vl_tokens(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """The images in the prompt: the vision tower's merger already outputs the language model's width, one token per
    spatial_merge_size^2 patches; nothing of its own joins them (no parameters). Its DeepStack mergers' tokens are
    added to the same places."""
    vision, text = towers["vision"], towers["text"]
    d_out = vision["kinds"]["patch_merger"]["d_out"]
    if d_out != text["d_model"]:  # transformers builds it (its parameters are counted), its forward cannot run
        notes.append(f"vision_config.out_hidden_size={d_out} is not the language model's hidden_size="
                     f"{text['d_model']}: transformers builds this model, but its forward cannot put the merger's "
                     "tokens in the prompt (counted as if it could)")
    m = vision["kinds"]["patch_embedding"]["merge_size"]
    notes.append(f"{cfg.get('model_type', 'qwen3_vl')}: each image's patches merged {m}x{m} by the vision tower's "
                 "merger into tokens of the prompt")
    return [dict(name="image_tokens", source="vision", merge=m * m)]


def qwen3_vl_parts(model, spec, workload) -> list:
    """The whole class traced part by part on meta, as Qwen2-VL's (wrappers.qwen_vl_parts), the vision tower handed
    its position table's gather indices and weights too (transformers computes them from grid_thw's values, on its
    device: here the CPU, then moved to meta beside the model)."""
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights

    from .wrappers import qwen_vl_parts

    parts = qwen_vl_parts(model, spec, workload)
    for prefix, module, inputs in parts:
        if prefix == "model.visual":
            index, weight = get_vision_interpolation_indices_and_weights(
                inputs["grid_thw"], num_grid_per_side=module.num_grid_per_side, mode=module.interpolation_mode,
                align_corners=module.interpolation_align_corners, spatial_merge_size=module.spatial_merge_size)
            inputs |= {"interp_indices": index.to("meta"), "interp_weights": weight.to("meta")}
    return parts


def whole(vision_type: str) -> dict:
    """A wrapper read whole (its Family line splats this): its vision tower from vision_config, and where
    transformers' generation class keeps each part (model.visual, model.language_model, lm_head)."""
    return dict(towers={"vision": (vision_type, "vision_config")}, connectors=qwen3_vl_tokens,
                prefixes={"text": r"model\.language_model\.", "vision": r"model\.visual\."},
                components=[(r"lm_head", "head")], types=dict(model_type="str"), hf_trace=qwen3_vl_parts)


QWEN3_VL_WHOLE = whole("qwen3_vl_vision")
QWEN3_VL_MOE_WHOLE = whole("qwen3_vl_moe_vision")
QWEN3_5_WHOLE = whole("qwen3_5_vision")
QWEN3_5_MOE_WHOLE = whole("qwen3_5_moe_vision")

# transformers' Qwen3_5VisionConfig defaults (Qwen3VLVisionConfig's add deepstack_visual_indexes; Qwen3.5's published
# configs write [] there, a field its class does not declare: not read)
QWEN3_5_VISION_DEFAULTS = dict(depth=27, hidden_size=1152, hidden_act="gelu_pytorch_tanh", intermediate_size=4304,
                               num_heads=16, in_channels=3, patch_size=16, spatial_merge_size=2,
                               temporal_patch_size=2, out_hidden_size=3584, num_position_embeddings=2304)
QWEN3_VL_VISION_DEFAULTS = QWEN3_5_VISION_DEFAULTS | dict(deepstack_visual_indexes=[8, 16, 24])
QWEN3_5_VISION_TYPES = dict(depth="size", hidden_size="size", hidden_act="str", intermediate_size="size",
                            num_heads="size", in_channels="size", patch_size="size|sizes", spatial_merge_size="size",
                            temporal_patch_size="size|sizes", out_hidden_size="size", num_position_embeddings="size")
QWEN3_VL_VISION_TYPES = QWEN3_5_VISION_TYPES | dict(deepstack_visual_indexes="integers")
ALIASES = dict(num_hidden_layers="depth", num_attention_heads="num_heads")  # the config classes' attribute_map

register(
    Family("qwen3_vl_vision", mapper=qwen3_vl_vision, components=COMPONENTS, aliases=ALIASES,
           defaults=QWEN3_VL_VISION_DEFAULTS, layer_keys={"depth": "n_layers"}, types=QWEN3_VL_VISION_TYPES),
    Family("qwen3_vl_moe_vision", like="qwen3_vl_vision"),
    Family("qwen3_5_vision", mapper=qwen3_5_vision, components=COMPONENTS, aliases=ALIASES,
           defaults=QWEN3_5_VISION_DEFAULTS, layer_keys={"depth": "n_layers"}, types=QWEN3_5_VISION_TYPES),
    Family("qwen3_5_moe_vision", like="qwen3_5_vision"),
)
