"""Llama 3.2 Vision's vision tower (model_type mllama_vision_model: a config.json's vision_config; transformers'
MllamaVisionModel) and what joins it to the language model (tfcalc/families/mllama.py): Mllama read whole, as
MllamaForConditionalGeneration.

The tower reads each image as max_num_tiles tiles of image_size (its processor cuts and pads every image into them;
the pixel values always hold max_num_tiles tiles): per tile a Conv2d of kernel = stride = patch_size without a bias,
a gated pre-tile table (per aspect ratio, [max_aspect_ratio_id + 1, tiles * D]), the class token, the gated position
table ((1 - tanh g) * [patches + 1, D] + tanh g * a tile position table [max_aspect_ratio_id + 1, tiles * (patches + 1)
* D]), layernorm_pre; each tile's tokens padded with zeros to a multiple of 8; then one sequence per image of tiles x
padded tokens (the attention mask, built as an outer product [S, 1] @ [1, S], is a bmm FlopCounterMode counts: 2 S^2
FLOPs per image) through num_hidden_layers local blocks (pre-LayerNorm, q/k/v/o without biases, fc1 + GELU + fc2 with
biases), layernorm_post, a gated post-tile table, num_global_layers global blocks (the same, with tanh gates gate_attn
and gate_ffn on their outputs), no final norm. The padding is dropped; the last output and the local blocks'
intermediate_layers_indices outputs are concatenated: vision_output_dim = hidden_size * (1 + len(indices)) wide, the
multi_modal_projector's input (Linear(vision_output_dim, text hidden_size) with a bias) over max_num_tiles * (patches
+ 1) tokens per image. Those are what the language model's cross-attention blocks attend to: each sequence its own
images' tokens (images / batch_size images per sequence), projected to keys and values in each cross-attention block.

In tfcalc: `patch_embedding` with tiles, pad_to=8 and tile_tables, blocks "attention+mlp" (local), then
"tile_position+attention+mlp+layer_gates" (layernorm_post and the post-tile table at the head of the first global
block) and "attention+mlp+layer_gates"; the projector a Connector with cross_attended=True (its rows are the text
tower's src_len: tfcalc.arch.towers.text_workload).

Keys that change no count are not read: norm_eps, initializer_range; the vision_config's max_length, min_length
and other generation keys of old saves are not declared by MllamaVisionConfig.
"""

from __future__ import annotations

from ..hf import PATTERN_LIMIT, activation_of, refuse_if, shortest_cycle
from ..sizes import MAX_DIGITS
from .registry import Family, register

PAD_TO = 8  # MllamaVisionModel pads each tile's tokens to a multiple of 8
DEFAULT_RATIOS = [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]]  # MllamaVisionConfig's
LOCAL, ENTRY, GLOBAL = "attention+mlp", "tile_position+attention+mlp+layer_gates", "attention+mlp+layer_gates"

_L = r"(?:transformer|global_transformer)\.layers\.\d+\."
COMPONENTS = [  # transformers' module (and parameter) names in MllamaVisionModel -> tfcalc components
    (r"patch_embedding", "embedding/patch"),
    (r"class_embedding", "embedding/class_token"),  # a parameter of the model itself
    (r"gated_positional_embedding\.(embedding|gate)", "embedding/position"),  # parameters: the table and its gate
    (r"gated_positional_embedding\.tile_embedding", "embedding/tile_position"),
    (r"pre_tile_positional_embedding(?:\.embedding|\.gate)?", "embedding/pre_tile"),
    (r"layernorm_pre", "embedding/norm"),
    (r"", "embedding/tile_mask"),  # the model's own work: the attention mask's bmm
    (_L + r"input_layernorm", "attention/norm"),
    (_L + r"self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (_L + r"self_attn", "attention/core"),
    (_L + r"self_attn\.o_proj", "attention/out"),
    (_L + r"post_attention_layernorm", "mlp/norm"),
    (_L + r"mlp\.fc1", "mlp/up"),
    (_L + r"mlp\.fc2", "mlp/down"),
    (r"global_transformer\.layers\.\d+\.gate_attn", "layer_gates/attention"),
    (r"global_transformer\.layers\.\d+\.gate_ffn", "layer_gates/mlp"),
    (r"layernorm_post", "tile_position/norm"),
    (r"post_tile_positional_embedding(?:\.embedding|\.gate)?", "tile_position/table"),
]


def indices(cfg: dict) -> list[int]:
    """intermediate_layers_indices, MllamaVisionConfig's default when null."""
    given = cfg["intermediate_layers_indices"]
    return [3, 7, 15, 23, 30] if given is None else given


def output_width(cfg: dict) -> int:
    """The tower's output width: hidden_size * (its last output and each intermediate layer's)."""
    return cfg["hidden_size"] * (1 + len(indices(cfg)))


def mllama_vision(cfg: dict, notes: list[str]) -> dict:
    """MllamaVisionModel: tiles, the local and the gated global encoder (see the module's docstring)."""
    for key in ("image_size", "patch_size"):
        refuse_if(cfg, key, isinstance(cfg[key], list), "one integer (MllamaVisionModel computes (image_size // "
                                                        "patch_size) ** 2 patches per tile)")
    for key in ("image_size", "patch_size", "hidden_size", "max_num_tiles", "intermediate_size"):
        refuse_if(cfg, key, cfg[key] >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    side, p, D, heads = cfg["image_size"], cfg["patch_size"], cfg["hidden_size"], cfg["attention_heads"]
    refuse_if(cfg, "image_size", side % p != 0, f"not a multiple of patch_size={p} (the convolution would drop the "
                                                "last pixels of each tile)")
    refuse_if(cfg, "attention_heads", D % heads != 0, f"hidden_size={D} is not a multiple of it")
    L, G, T = cfg["num_hidden_layers"], cfg["num_global_layers"], cfg["max_num_tiles"]
    refuse_if(cfg, "num_hidden_layers", L + G > PATTERN_LIMIT, f"tfcalc writes the blocks' kinds (local or global) "
                                                               f"per block, for at most {PATTERN_LIMIT:,} blocks")
    ratios = cfg["supported_aspect_ratios"]
    if ratios is None:
        ratios = DEFAULT_RATIOS
    refuse_if(cfg, "max_num_tiles", ratios == DEFAULT_RATIOS and T != 4,
              "max_num_tiles must be 4 for the default supported_aspect_ratios (MllamaVisionConfig refuses it)")
    listed = indices(cfg)
    refuse_if(cfg, "intermediate_layers_indices", any(not -L <= i < L for i in listed),
              f"an index outside the num_hidden_layers={L} local blocks (transformers indexes their outputs)")
    width = output_width(cfg)
    if cfg["vision_output_dim"] != width:  # (refused in a whole config: mllama_projector)
        notes.append(f"vision_config: vision_output_dim={cfg['vision_output_dim']:,} is the projector's input, not "
                     f"read by the tower, which puts out hidden_size * (1 + len(intermediate_layers_indices)) = "
                     f"{width:,} channels")
    per_tile = (side // p) ** 2 + 1
    padded = -(-per_tile // PAD_TO) * PAD_TO
    tokens = T * padded
    notes.append(f"vision_config: each image {T} tiles of {side}x{side}, ({side} // {p})^2 + 1 = {per_tile:,} tokens "
                 f"each, padded to {padded:,}: {tokens:,} tokens per image in the blocks, {T * per_tile:,} out")
    pattern = [LOCAL] * L + [ENTRY] * min(G, 1) + [GLOBAL] * max(G - 1, 0)
    refuse_if(cfg, "num_global_layers", G == 0, "the gated post-tile table runs before the first global block "
                                                "(not modelled without one)")
    return dict(n_layers=L + G, d_model=D, n_heads=heads, d_ff=cfg["intermediate_size"], mlp="standard",
                activation=activation_of(cfg, "hidden_act"), norm="layernorm", norm_position="pre", bias=False,
                qkv_bias=False, mlp_bias=True, causal=False, lm_head=False, final_norm=False, positions="learned",
                embedding_norm=True, inputs="images", seq_len=tokens, context=tokens,
                block_pattern=shortest_cycle(pattern),
                kinds={"patch_embedding": {"image_size": side, "patch_size": p, "channels": cfg["num_channels"],
                                           "class_token": True, "bias": False, "tiles": T, "pad_to": PAD_TO,
                                           "tile_tables": len(ratios) + 1}})


def mllama_projector(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """multi_modal_projector: Linear(vision_output_dim, text hidden_size) with a bias over every output token of each
    image (its tiles' patches and class tokens, unpadded), feeding the cross-attention blocks' keys and values."""
    from ..hf import Unmodelled

    vision = towers["vision"]
    sizes = vision["kinds"]["patch_embedding"]
    given = {**DEFAULTS, **(cfg.get("vision_config") or {})}  # (its fields' kinds checked by the tower's family)
    width, out = given["vision_output_dim"], output_width(given)
    if width != out:
        raise Unmodelled(f"vision_config.vision_output_dim={width} is not modelled: the tower puts out hidden_size * "
                         f"(1 + len(intermediate_layers_indices)) = {out:,} channels, which the multi_modal_projector "
                         "reads (transformers' forward fails on another width)")
    per_tile = (sizes["image_size"] // sizes["patch_size"]) ** 2 + 1
    notes.append(f"multi_modal_projector: {width:,} -> {towers['text']['d_model']:,} over each image's "
                 f"{sizes['tiles'] * per_tile:,} vision tokens, the cross-attention blocks' keys and values (each "
                 "sequence its own images')")
    return [dict(name="multi_modal_projector", source="vision", widths=[width, towers["text"]["d_model"]], bias=True,
                 cross_attended=True, image_size=sizes["image_size"])]


def mllama_parts(model, spec, workload) -> list:
    """MllamaForConditionalGeneration traced part by part on meta: the vision tower on pixel values [batch, images per
    sequence, tiles, C, H, W] with every tile present (aspect ratio id 1), the projector on its output, the language
    model on the prompt's tokens and the projected vision states (each sequence its own images' tokens), lm_head on
    its output."""
    import torch

    from ..arch.towers import cross_tokens, with_images

    workload = with_images(spec, workload)
    vision = spec.towers["vision"]
    sizes = vision.sizes("patch_embedding")
    B, N = workload.batch_size, workload.seq_len
    media = workload.images // B
    meta = dict(device="meta")
    width, D = spec.connectors[0].widths
    tile = sizes.tile_tokens(sizes.height, sizes.width)
    return [
        ("model.vision_model", model.model.vision_model, tiled_inputs(sizes, B, media)),
        ("model.multi_modal_projector", model.model.multi_modal_projector,
         {"input": torch.empty(B, media, sizes.tiles, tile, width, **meta)}),
        ("model.language_model", model.model.language_model,
         {"input_ids": torch.zeros(B, N, dtype=torch.long, **meta),
          "cross_attention_states": torch.empty(B, cross_tokens(spec, workload), D, **meta)}),
        ("lm_head", model.lm_head, {"input": torch.empty(B, N, D, **meta)}),
    ]


def tiled_inputs(sizes, batch: int, media: int) -> dict:
    """MllamaVisionModel's inputs on meta: pixel values [batch, images per sequence, tiles, C, H, W], every tile present
    (aspect ratio id 1, the mask all ones)."""
    import torch

    meta = dict(device="meta")
    return {"pixel_values": torch.empty(batch, media, sizes.tiles, sizes.channels, sizes.height, sizes.width, **meta),
            "aspect_ratio_ids": torch.ones(batch, media, dtype=torch.long, **meta),
            "aspect_ratio_mask": torch.ones(batch, media, sizes.tiles, dtype=torch.long, **meta)}


def tower_parts(model, spec, workload) -> list:
    """MllamaVisionModel alone (check --hf-config --tower vision): one trace of its batch_size images, its own work
    (the mask's bmm) under the empty path."""
    return [("", model, tiled_inputs(spec.sizes("patch_embedding"), workload.batch_size, 1))]


MLLAMA_WHOLE = dict(towers={"vision": ("mllama_vision_model", "vision_config")}, connectors=mllama_projector,
                    prefixes={"text": r"model\.language_model\.", "vision": r"model\.vision_model\."},
                    components=[(r"lm_head", "head"), (r"model\.multi_modal_projector", "multi_modal_projector"),
                                (r"model\.vision_model", "vision/embedding/tile_mask")],  # the tower's own bmm
                    types=dict(vision_config="object?"), hf_trace=mllama_parts)

# MllamaVisionConfig's defaults
DEFAULTS = dict(hidden_size=1280, hidden_act="gelu", num_hidden_layers=32, num_global_layers=8, attention_heads=16,
                num_channels=3, intermediate_size=5120, vision_output_dim=7680, image_size=448, patch_size=14,
                max_num_tiles=4, intermediate_layers_indices=None, supported_aspect_ratios=None)

register(
    Family("mllama_vision_model", mapper=mllama_vision, components=COMPONENTS, defaults=DEFAULTS, hf_trace=tower_parts,
           aliases=dict(num_attention_heads="attention_heads"),  # MllamaVisionConfig's attribute_map
           layer_keys={},  # n_layers is num_hidden_layers + num_global_layers: -L is not written into the config
           types=dict(hidden_size="size", hidden_act="str", num_hidden_layers="size", num_global_layers="count",
                      attention_heads="size", num_channels="size", intermediate_size="size", vision_output_dim="size",
                      image_size="size|sizes", patch_size="size|sizes", max_num_tiles="size",
                      intermediate_layers_indices="integers?", supported_aspect_ratios="integer lists?")),
)
