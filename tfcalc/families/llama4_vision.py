"""Llama 4's vision tower (model_type llama4_vision_model: a whole llama4 config's vision_config, transformers'
Llama4VisionModel) and what joins it to the language model (Llama4MultiModalProjector), so that a `llama4` config is
read whole as Llama4ForConditionalGeneration.

The tower (Llama4VisionModel), for each tile of image_size x image_size pixels:
- Llama4UnfoldConvolution: the tile unfolded into patch_size x patch_size patches and one Linear(C p^2, D) without a
  bias: a matmul over the patches (tfcalc's `patch_embedding`, bias false);
- class_embedding [D], appended AFTER the patches (where it sits changes no count), and positional_embedding_vlm
  [(image_size / patch_size)^2 + 1, D] added as it is: the config's grid alone, never interpolated (so are the 2-D
  rotary's tables, Llama4VisionRotaryEmbedding, built from image_size: `fixed_size`);
- layernorm_pre over every token (`embedding_norm`), then num_hidden_layers pre-norm blocks: LayerNorm, q/k/v/o_proj
  with biases (heads hidden_size / num_attention_heads wide, a 2-D rotary on q and k: elementwise, no parameters),
  LayerNorm, fc1 and fc2 with biases around nn.GELU (exact, whatever hidden_act says); layernorm_post over every token
  (`final_norm`);
- the class token dropped, then the vision adapter (Llama4VisionPixelShuffleMLP, tfcalc's `patch_merger` without a
  norm): a pixel shuffle of pixel_shuffle_ratio r concatenates each (1/r) x (1/r) block of patches into one token of
  D / r^2, then Llama4VisionMLP2: fc1 (D / r^2 -> projector_input_dim, no bias), GELU, fc2 (projector_output_dim ->
  projector_output_dim, no bias), GELU.
Then Llama4MultiModalProjector's linear_1 (vision_output_dim -> the language model's hidden_size, no bias) on every
token of every tile: those tokens take the tiles' places in the prompt (Llama4ForConditionalGeneration scatters them
into the image tokens' embeddings). With Scout's 336 x 336 tiles of 14 x 14 patches: 576 patches, 144 tokens a tile.

Images are tiles: Llama 4's processor cuts each image into tiles of image_size (and adds a global tile of the whole
image), and the tower runs each tile alone; `--images` counts tiles, `--image-size` other than image_size is refused.

Not read, because they change no shape, no parameter and no matmul: norm_eps, initializer_range, attention_dropout,
projector_dropout, rope_parameters (rope_theta: rotary frequencies), vision_feature_layer and
vision_feature_select_strategy (Llama4ForConditionalGeneration reads neither: every block runs, the last one's output
goes on), multi_modal_projector_bias (Llama4MultiModalProjector's linear_1 has no bias whatever it says: noted),
hidden_act (the blocks' MLP runs nn.GELU: noted when it names another).
"""

from __future__ import annotations

from ..hf import SEQ_LEN_CAP, Unmodelled, refuse_if, show
from .clip import grid
from .registry import Family, register

MODEL_TYPE = "llama4_vision_model"

# Llama4VisionConfig's defaults (transformers 5.24) for the fields read here
DEFAULTS = dict(hidden_size=768, hidden_act="gelu", num_hidden_layers=34, num_attention_heads=16, num_channels=3,
                intermediate_size=5632, vision_output_dim=7680, image_size=448, patch_size=14,
                pixel_shuffle_ratio=0.5, projector_input_dim=4096, projector_output_dim=4096,
                multi_modal_projector_bias=False)
TYPES = dict(hidden_size="size", hidden_act="str", num_hidden_layers="size", num_attention_heads="size",
             num_channels="size", intermediate_size="size", vision_output_dim="size", image_size="size|sizes",
             patch_size="size|sizes", pixel_shuffle_ratio="float", projector_input_dim="size",
             projector_output_dim="size", multi_modal_projector_bias="bool")

_LAYER = r"model\.layers\.\d+\."
COMPONENTS = [  # Llama4VisionModel's module (and parameter) names -> tfcalc components (check --hf-config)
    (r"patch_embedding\.linear", "embedding/patch"),
    (r"class_embedding", "embedding/class_token"),
    (r"positional_embedding_vlm", "embedding/position"),
    (r"layernorm_pre", "embedding/norm"),
    (_LAYER + r"input_layernorm", "attention/norm"),
    (_LAYER + r"self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (_LAYER + r"self_attn", "attention/core"),
    (_LAYER + r"self_attn\.o_proj", "attention/out"),
    (_LAYER + r"post_attention_layernorm", "mlp/norm"),
    (_LAYER + r"mlp\.fc1", "mlp/up"),
    (_LAYER + r"mlp\.fc2", "mlp/down"),
    (r"layernorm_post", "final_norm"),
    (r"vision_adapter\.mlp\.fc1", "merger/up"),
    (r"vision_adapter\.mlp\.fc2", "merger/down"),
]


def shuffle(cfg: dict) -> int:
    """The pixel shuffle's block side 1 / pixel_shuffle_ratio: a whole number, as transformers' views need."""
    r = cfg["pixel_shuffle_ratio"]
    n = round(1 / r) if 1e-6 <= r <= 1 else 0  # (a smaller ratio shuffles no grid transformers builds)
    refuse_if(cfg, "pixel_shuffle_ratio", n < 1 or n * r != 1, "tfcalc reads a ratio of 1 / n (0.5: each 2 x 2 "
              "block of patches one token), as transformers' pixel_shuffle views the grid")
    return n


def llama4_vision(cfg: dict, notes: list[str]) -> dict:
    """Llama4VisionConfig's fields -> ModelSpec fields of the tower (its vision adapter included)."""
    side, p = grid(cfg)
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    refuse_if(cfg, "num_attention_heads", D % H != 0 or (D // H) % 4 != 0,
              f"hidden_size={D} is not a multiple of 4 x num_attention_heads: the 2-D rotary splits each head "
              "into x and y halves of complex pairs")
    n = shuffle(cfg)
    refuse_if(cfg, "pixel_shuffle_ratio", (side // p) % n != 0,
              f"a grid of {side // p} x {side // p} patches does not divide into {n} x {n} blocks")
    refuse_if(cfg, "intermediate_size", cfg["intermediate_size"] != D * n * n,
              f"the vision adapter's fc1 is intermediate_size wide and reads the pixel-shuffled tokens, "
              f"hidden_size / pixel_shuffle_ratio^2 = {D * n * n} wide (transformers' forward fails)")
    refuse_if(cfg, "projector_output_dim", cfg["projector_output_dim"] != cfg["projector_input_dim"],
              f"the vision adapter's fc2 is projector_output_dim wide and reads fc1's projector_input_dim="
              f"{cfg['projector_input_dim']} (transformers' forward fails)")
    if cfg["hidden_act"] != "gelu":
        notes.append(f"{MODEL_TYPE}: hidden_act={show(cfg['hidden_act'])} not read: Llama4VisionMLP runs nn.GELU")
    patches = (side // p) ** 2
    notes.append(f"{MODEL_TYPE}: images are tiles of {side}x{side} (the processor's; --images counts tiles): "
                 f"{patches} patches and a class token each, {patches // n ** 2} tokens after the pixel shuffle")
    return dict(n_layers=cfg["num_hidden_layers"], d_model=D, n_heads=H, d_ff=cfg["intermediate_size"],
                activation="gelu", mlp="standard", norm="layernorm", norm_position="pre", bias=True, mlp_bias=True,
                causal=False, lm_head=False, inputs="images", positions="learned", embedding_norm=True,
                final_norm=True, seq_len=patches + 1, context=min(patches + 1, SEQ_LEN_CAP),
                kinds={"patch_embedding": {"image_size": side, "patch_size": p, "channels": cfg["num_channels"],
                                           "bias": False, "merge_size": n, "fixed_size": True},
                       "patch_merger": {"d_out": cfg["projector_output_dim"],
                                        "d_hidden": cfg["projector_input_dim"], "norm": False, "bias": False,
                                        "out_activation": True}})


register(Family(MODEL_TYPE, DEFAULTS, TYPES, llama4_vision, COMPONENTS))


def llama4_projector(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """Llama4MultiModalProjector: linear_1 (vision_output_dim -> the language model's hidden_size, no bias) on every
    token the vision adapter gives (each tile's patches, its class token dropped, merged 1/r x 1/r): those tokens
    take the tiles' places in the prompt. It reads the adapter's output, so vision_output_dim must be
    projector_output_dim."""
    vision = cfg.get("vision_config") or {}
    adapter = towers["vision"]["kinds"]["patch_merger"]
    width = vision.get("vision_output_dim", DEFAULTS["vision_output_dim"])
    if width != adapter["d_out"]:
        raise Unmodelled(f"vision_config.vision_output_dim={show(width)} is not modelled with projector_output_dim="
                         f"{adapter['d_out']}: Llama4MultiModalProjector's linear_1 (vision_output_dim wide) reads the "
                         "vision adapter's output (projector_output_dim wide; transformers' forward fails)")
    if vision.get("multi_modal_projector_bias") is True:
        notes.append("vision_config.multi_modal_projector_bias=true not read: Llama4MultiModalProjector's linear_1 "
                     "has no bias")
    sizes = towers["vision"]["kinds"]["patch_embedding"]
    m = sizes["merge_size"]
    return [dict(name="multi_modal_projector", source="vision", drop_class_token=True, merge=m * m,
                 widths=[width, towers["text"]["d_model"]], image_size=sizes["image_size"])]


def llama4_parts(model, spec, workload) -> list:
    """Llama4ForConditionalGeneration traced part by part on meta, as its forward runs them (transformers 5.24's
    forward fails after its work, reading `image_outputs` off the language model's output): the vision tower on every
    tile, the projector on every tile's tokens, the language model (its head included) on the prompt's embeddings
    (the tiles' tokens among them, scattered in place: no FLOPs)."""
    import torch

    from ..arch.towers import image_size, images

    parts = []
    n = images(workload)
    if n:
        sizes = spec.towers["vision"].sizes("patch_embedding")
        H, W = image_size(spec, workload)
        pixels = torch.empty(n, sizes.channels, H, W, device="meta")
        parts.append(("vision_model", model.vision_model, {"pixel_values": pixels}))
        merged = (H // sizes.patch_size) * (W // sizes.patch_size) // sizes.merge_size ** 2
        width = model.multi_modal_projector.linear_1.in_features
        parts.append(("multi_modal_projector", model.multi_modal_projector,
                      {"image_features": torch.empty(n * merged, width, device="meta")}))
    B, N, D = workload.batch_size, workload.seq_len, spec.d_model
    parts.append(("language_model", model.language_model,
                  {"inputs_embeds": torch.empty(B, N, D, device="meta")}))
    return parts


# how `llama4` (tfcalc/families/llama4.py) reads a whole config: the tower, the projector, where transformers keeps
# each part (Llama4ForConditionalGeneration: vision_model, multi_modal_projector, language_model, a whole
# Llama4ForCausalLM whose lm_head the text table names)
LLAMA4_WHOLE = dict(towers={"vision": (MODEL_TYPE, "vision_config")}, connectors=llama4_projector,
                    prefixes={"text": r"language_model\.(?:model\.)?", "vision": r"vision_model\."},
                    components=[(r"multi_modal_projector\.linear_1", "multi_modal_projector")],
                    types=dict(vision_config="object?"), hf_trace=llama4_parts)
