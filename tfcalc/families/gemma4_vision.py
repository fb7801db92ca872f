"""Gemma 4's vision tower (model_type gemma4_vision: a gemma4 config.json's vision_config) and the projector into its
language model, and the gemma4 config's vision part (GEMMA4_WHOLE, which tfcalc/families/gemma4_audio.py extends with the
audio tower for tfcalc/families/gemma4.py's `gemma4` line).

transformers' Gemma4VisionModel:
  * Gemma4VisionPatchEmbedder: each patch (3 p^2 pixels, the processor patchifies) through input_proj, a Linear(3 p^2,
    D) without a bias; a factorised position table position_embedding_table [2, position_embedding_size, D], each
    patch's x row and y row looked up and summed (no matmul): `kinds.patch_embedding.axis_table`;
  * Gemma4VisionEncoder: Gemma 3's block, bidirectional: sandwich RMSNorms, q_proj/k_proj/v_proj/o_proj without
    biases (Gemma4ClippableLinear: attention_bias is not read), an RMSNorm on each query and key head (weight
    [head_dim]), a weightless RMSNorm on each value head and the 2-D (axial) rotary (elementwise, no parameters),
    attention scaling 1.0, and a gated MLP gate_proj/up_proj (D -> intermediate_size), down_proj, by
    hidden_activation; no final norm;
  * Gemma4VisionPooler: each pooling_kernel_size^2 block of the patch grid averaged into one token by a matmul of
    one-hot weights (`patch_pooler`: counted as FlopCounterMode counts it), scaled by sqrt(D); `standardize`'s
    std_bias and std_scale are buffers (no parameters), use_clipped_linears' clamps buffers and elementwise.
Gemma4MultimodalEmbedder (embed_vision): a weightless RMSNorm over D, then embedding_projection Linear(D, the language
model's hidden_size) without a bias: its tokens take the image's places in the prompt.

The workload is images (--image-size, --images), each its own patches: an image's sides are multiples of patch_size *
pooling_kernel_size (the processor resizes it so). The default is the largest square image the processor's default
max_soft_tokens (280) gives: 768x768 at patch 16, kernel 3 (48 x 48 patches, 256 tokens). The processor pads every
image's patches to max_soft_tokens * kernel^2 (2,520) and the tower computes the padding too: tfcalc counts an image's
own patches, as a processor call with a budget of exactly them gives (said in a note).
The audio tower (audio_config: a conformer) and the gemma4 config read whole with all three towers:
tfcalc/families/gemma4_audio.py (its GEMMA4_WHOLE extends this module's).
"""

from __future__ import annotations

import math

from ..hf import activation_of, refuse_if
from ..sizes import MAX_DIGITS
from .registry import Family, register

MAX_SOFT_TOKENS = 280  # Gemma4ImageProcessor's default budget of tokens per image

DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=16, num_attention_heads=12,
                num_key_value_heads=12, head_dim=64, hidden_activation="gelu_pytorch_tanh", attention_bias=False,
                pooling_kernel_size=3, patch_size=16, position_embedding_size=10 * 1024, use_clipped_linears=False,
                standardize=False)
TYPES = dict(hidden_size="size", intermediate_size="size", num_hidden_layers="size", num_attention_heads="size",
             num_key_value_heads="size", head_dim="size", hidden_activation="str", attention_bias="bool?",
             pooling_kernel_size="size", patch_size="size", position_embedding_size="size",
             use_clipped_linears="bool", standardize="bool")

LAYER = r"encoder\.layers\.\d+"
COMPONENTS = [  # Gemma4VisionModel's module names -> tfcalc components (check --hf-config)
    (r"patch_embedder\.input_proj", "embedding/patch"),
    (r"patch_embedder\.position_embedding_table", "embedding/position"),
    (rf"{LAYER}\.input_layernorm", "attention/norm"),
    (rf"{LAYER}\.post_attention_layernorm", "attention/post_norm"),
    (rf"{LAYER}\.pre_feedforward_layernorm", "mlp/norm"),
    (rf"{LAYER}\.post_feedforward_layernorm", "mlp/post_norm"),
    (rf"{LAYER}\.self_attn\.(q_proj|k_proj|v_proj)(?:\.linear)?", "attention/qkv"),
    (rf"{LAYER}\.self_attn\.q_norm", "attention/q_norm"),
    (rf"{LAYER}\.self_attn\.k_norm", "attention/k_norm"),
    (rf"{LAYER}\.self_attn", "attention/core"),
    (rf"{LAYER}\.self_attn\.o_proj(?:\.linear)?", "attention/out"),
    (rf"{LAYER}\.mlp\.gate_proj(?:\.linear)?", "mlp/gate"),
    (rf"{LAYER}\.mlp\.up_proj(?:\.linear)?", "mlp/up"),
    (rf"{LAYER}\.mlp\.down_proj(?:\.linear)?", "mlp/down"),
    (r"pooler", "pooler"),
]


def gemma4_vision(cfg: dict, notes: list[str]) -> dict:
    D, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    refuse_if(cfg, "num_key_value_heads", heads % kv != 0,
              f"it does not divide num_attention_heads={heads} (each key head serves a whole group of query heads)")
    dh = cfg["head_dim"]
    refuse_if(cfg, "head_dim", dh % 4 != 0, "the axial rotary cuts each head into 4 equal quarters (x and y halves)")
    for key in ("patch_size", "pooling_kernel_size", "position_embedding_size"):
        refuse_if(cfg, key, cfg[key] >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    p, k = cfg["patch_size"], cfg["pooling_kernel_size"]
    side = p * k * math.isqrt(MAX_SOFT_TOKENS)
    patches = (side // p) ** 2
    notes.append(f"the config gives no image size: one {side}x{side} image by default ({patches} patches of {p}, "
                 f"{patches // k ** 2} tokens after the {k}x{k} pooling); --image-size HxW (multiples of "
                 f"{p * k}), --images N. The processor pads each image's patches to max_soft_tokens * {k * k}: "
                 "counted are the image's own patches (the padding's work is not)")
    if cfg["attention_bias"] is True:
        notes.append("attention_bias=true not read: Gemma 4's vision projections have no bias (transformers "
                     "ignores it)")
    if cfg["use_clipped_linears"] is True:
        notes.append("use_clipped_linears=true: each projection's input and output clamped to buffers (no "
                     "parameters; elementwise, not counted)")
    if cfg["standardize"] is True:
        notes.append("standardize=true: the pooled tokens shifted and scaled by the buffers std_bias and std_scale "
                     "(no parameters; elementwise, not counted)")
    notes.append("value norm (RMSNorm without weight on each value head), the 2-D rotary, attention scaling 1.0 and "
                 "the pooler's sqrt(hidden_size) scale: elementwise, no parameters (not counted)")
    return dict(n_layers=cfg["num_hidden_layers"], d_model=D, n_heads=heads, n_kv_heads=kv, d_head=dh,
                d_ff=cfg["intermediate_size"], mlp="gated", activation=activation_of(cfg, "hidden_activation"),
                norm="rmsnorm", norm_position="sandwich", qk_norm="head", bias=False, mlp_bias=False, causal=False,
                lm_head=False, final_norm=False, positions="rotary", inputs="images", seq_len=patches,
                context=patches,
                kinds={"patch_embedding": {"image_size": side, "patch_size": p, "channels": 3, "class_token": False,
                                           "bias": False, "merge_size": k,
                                           "axis_table": cfg["position_embedding_size"]},
                       "patch_pooler": {"kernel": k}})


def embed_vision(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """Gemma4MultimodalEmbedder over each image's pooled tokens (the vision tower's pooler averages each k x k block
    of patches into one): a weightless RMSNorm over the vision width, then one matmul to the language model's width
    without a bias. Its tokens take the image's places in the prompt."""
    if "vision" not in towers:  # vision_config null: no tower, no embed_vision
        return []
    vision, text = towers["vision"], towers["text"]
    k = vision["kinds"]["patch_pooler"]["kernel"]
    notes.append(f"gemma4: each image's patches pooled {k}x{k} by the vision tower into tokens of the prompt, "
                 "embed_vision's weightless RMSNorm and projection on each")
    return [dict(name="embed_vision", source="vision", pool=k * k, norm="rmsnorm", norm_weight=False,
                 widths=[vision["d_model"], text["d_model"]])]


def vision_parts(tower, prefix: str, n: int, image: tuple[int, int]) -> list:
    """Gemma4VisionModel (`tower`, at `prefix` in the whole model) traced part by part on n images of image pixels:
    its forward strips the pooler's padding by a boolean mask (no values on meta). The patch embedder and encoder on
    every image's patches and (x, y) positions, on meta; the pooler (no parameters) on the CPU, a fresh
    Gemma4VisionPooler on the positions the processor gives (its one-hot weights read them)."""
    import torch

    config = tower.config
    p, k2, D = config.patch_size, config.pooling_kernel_size ** 2, config.hidden_size
    rows, cols = image[0] // p, image[1] // p
    P = rows * cols
    y, x = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    positions = torch.stack([x.reshape(-1), y.reshape(-1)], -1).expand(n, -1, -1)  # (x, y), as the processor
    on_meta = positions.to("meta")
    at = f"{prefix}." if prefix else ""
    return [
        (f"{at}patch_embedder", tower.patch_embedder,
         {"pixel_values": torch.empty(n, P, 3 * p * p, device="meta"), "pixel_position_ids": on_meta,
          "padding_positions": torch.zeros(n, P, dtype=torch.bool, device="meta")}),
        # no padding: no mask (create_bidirectional_mask reads a given one's values: .item() on meta)
        (f"{at}encoder", tower.encoder,
         {"inputs_embeds": torch.empty(n, P, D, device="meta"), "attention_mask": None,
          "pixel_position_ids": on_meta}),
        (f"{at}pooler", type(tower.pooler)(config),
         {"hidden_states": torch.zeros(n, P, D), "pixel_position_ids": positions.clone(),
          "padding_positions": torch.zeros(n, P, dtype=torch.bool), "output_length": P // k2}),
    ]


def gemma4_vision_parts(model, spec, workload) -> list:
    """Gemma4VisionModel alone (check --hf-config --tower vision): its batch is the images."""
    return vision_parts(model, "", workload.batch_size, workload.image_size)


def gemma4_parts(model, spec, workload) -> list:
    """Gemma4ForConditionalGeneration traced part by part (its forward strips the pooler's padding by a boolean mask
    and splits the images with tolist(): no values on meta): the vision tower (`vision_parts`), embed_vision on the
    pooled tokens, the language model on the prompt's token ids (the images' embeddings take their places: the same
    work), lm_head on its output."""
    import torch

    from ..arch.towers import image_size, images

    tower = model.model.vision_tower
    n = images(workload)
    parts = []
    if n and "vision" in spec.towers:  # (vision_config null: no vision tower)
        (H, W), k2 = image_size(spec, workload), tower.config.pooling_kernel_size ** 2
        P = (H // tower.config.patch_size) * (W // tower.config.patch_size)
        parts += vision_parts(tower, "model.vision_tower", n, (H, W))
        parts.append(("model.embed_vision", model.model.embed_vision,
                      {"inputs_embeds": torch.empty(n * (P // k2), tower.config.hidden_size, device="meta")}))
    B, N = workload.batch_size, workload.seq_len
    parts.append(("model.language_model", model.model.language_model,
                  {"input_ids": torch.zeros(B, N, dtype=torch.long, device="meta")}))
    parts.append(("lm_head", model.lm_head, {"input": torch.empty(B, N, spec.d_model, device="meta")}))
    return parts


# vision_config absent or null: no such tower (SubConfigSpec optional); the audio tower: gemma4_audio.GEMMA4_WHOLE
GEMMA4_WHOLE = dict(towers={"vision": ("gemma4_vision", "vision_config", None),
                            "audio": (None, "audio_config", None)}, connectors=embed_vision,
                    prefixes={"text": r"model\.language_model\.", "vision": r"model\.vision_tower\."},
                    components=[(r"lm_head", "head"),
                                (r"model\.embed_vision\.embedding_pre_projection_norm", "embed_vision/norm"),
                                (r"model\.embed_vision\.embedding_projection", "embed_vision")],
                    hf_trace=gemma4_parts)

register(Family("gemma4_vision", DEFAULTS, TYPES, gemma4_vision, COMPONENTS, hf_trace=gemma4_vision_parts))
