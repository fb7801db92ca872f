"""EXAONE 4.5 read whole (model_type exaone4_5: transformers' Exaone4_5_ForConditionalGeneration): its language model
(EXAONE 4's, text_config: tfcalc/families/exaone4.py), lm_head, and its vision tower (exaone4_5_vision: a config.json's
vision_config; Exaone4_5_VisionModel, the patch merger included).

The vision tower is Qwen2.5-VL's (tfcalc/families/qwen_vl.py, qwen2_5_vl_vision: the Conv3d patches without a bias, a
2-D rotary, RMSNorm blocks of windowed and global attention, a gated MLP with biases, the merger ln_q + Linear(D m^2,
D m^2) + GELU + Linear(D m^2, out_hidden_size)) but for its attention (Exaone4_5_VisionAttention): grouped-query, its
fused qkv Linear(D, (num_heads + 2 num_key_value_heads) * head_dim) with a bias, head_dim = hidden_size // num_heads,
each key/value head shared by num_heads // num_key_value_heads query heads (repeat_kv in the eager path). The
merger's output is out_hidden_size, the language model's width: nothing joins them (no projector of parameters).

The generation class's forward reads image_grid_thw's values (the tower's windows, its rotary's positions): it is
traced part by part (`exaone4_5_parts`), as Qwen2-VL's is; its language model takes 1-D positions (no mrope).
"""

from __future__ import annotations

from ..hf import refuse_if
from .qwen_vl import DEFAULTS, qwen2_5_vl_vision
from .registry import Family, register


def exaone4_5_vision(cfg: dict, notes: list[str]) -> dict:
    heads, kv = cfg["num_heads"], cfg["num_key_value_heads"]
    refuse_if(cfg, "num_key_value_heads", kv == 0 or heads % kv != 0,
              f"num_heads={heads} is not a multiple of it (each key/value head serves num_heads // "
              "num_key_value_heads query heads)")
    return qwen2_5_vl_vision(cfg, notes) | dict(n_kv_heads=kv)


def merged_tokens(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """The images in the prompt: the merger's tokens, as Qwen2-VL's (wrappers.qwen_vl_tokens; imported here, as
    wrappers.py imports this module)."""
    from .wrappers import qwen_vl_tokens

    return qwen_vl_tokens(cfg, towers, notes)


def exaone4_5_parts(model, spec, workload) -> list:
    """Exaone4_5_ForConditionalGeneration traced part by part on meta (its vision tower reads image_grid_thw's
    values): the vision tower on every image's patches and grid, the language model (EXAONE 4's, 1-D positions) on
    the prompt's embeddings, lm_head on its output."""
    import torch

    from ..arch.towers import image_size, images
    from ..verify.hf_model import _patch_inputs

    sizes = spec.towers["vision"].sizes("patch_embedding")
    parts = []
    if images(workload):
        inputs = _patch_inputs(model.model.visual, images(workload), sizes.channels, sizes.temporal_patch_size,
                               sizes.patch_size, image_size(spec, workload))
        parts.append(("model.visual", model.model.visual, inputs))
    B, N, D = workload.batch_size, workload.seq_len, spec.d_model
    positions = torch.zeros(B, N, dtype=torch.long, device="meta")
    parts.append(("model.language_model", model.model.language_model,
                  {"inputs_embeds": torch.empty(B, N, D, device="meta"), "position_ids": positions}))
    parts.append(("lm_head", model.lm_head, {"input": torch.empty(B, N, D, device="meta")}))
    return parts


# the wrapper's line in tfcalc/families/wrappers.py splats this: its vision tower, where the generation class keeps
# each part, and its part-by-part trace
EXAONE4_5_WHOLE = dict(towers={"vision": ("exaone4_5_vision", "vision_config")}, connectors=merged_tokens,
                       prefixes={"text": r"model\.language_model\.", "vision": r"model\.visual\."},
                       components=[(r"lm_head", "head")], types=dict(model_type="str"), hf_trace=exaone4_5_parts)

# Exaone4_5_VisionConfig's defaults: Qwen2_5_VLVisionConfig's (tokens_per_second dropped: not read either way) and
# num_key_value_heads=8
register(Family("exaone4_5_vision", like="qwen2_5_vl_vision", mapper=exaone4_5_vision,
                defaults=DEFAULTS["qwen2_5_vl_vision"] | dict(num_key_value_heads=8),
                types=dict(num_key_value_heads="size")))
