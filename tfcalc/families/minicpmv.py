"""MiniCPM-V 4.6, MiniCPM-V 4.7 and MiniCPM-OCR (transformers' MiniCPMV4_6ForConditionalGeneration; minicpmv4_7 and
minicpm_ocr subclass it and build the same modules): what their image path is, as transformers 5.24 builds and runs
it, and how tfcalc reads them whole: the vision towers as model types of their own (minicpmv4_6_vision,
minicpmv4_7_vision, minicpm_ocr_vision: the same modules), the merger as a connector, and the wrappers' whole-model
fields (MINICPMV_WHOLE, spread on their lines of tfcalc/families/wrappers.py); the language model is Qwen3.5's text
model (qwen3_5_text). The generation class is traced part by part on meta (`minicpmv_parts`, `image_parts`).

Vision (MiniCPMV4_6VisionModel, vision_config): Idefics3VisionEmbeddings (the patches' Conv2d of kernel and stride
patch_size WITH a bias; a table of (image_size // patch_size) ** 2 rows indexed by each patch's bucketed fractional
position: a gather, no matmul), SigLIP's pre-norm blocks (layer_norm1, q_proj, k_proj, v_proj, out_proj with biases,
no rotary; layer_norm2, fc1, hidden_act, fc2 with biases), each image's patches attending to each other alone (the
processor packs every image into one row, pixel_values [1, C, p, patches * p], target_sizes [images, 2]; cu_seqlens
splits them). After block insert_layer_id (default 6), unless downsample_mode is "4x" (minicpm_ocr's default),
MiniCPMV4_6ViTWindowAttentionMerger: layer_norm1, the same attention within each 2x2 window of an image's grid (4 x 4
pairs), the residual, then each window's 4 patches concatenated (4D), pre_norm (LayerNorm 4D), linear_1 (4D -> 4F),
gelu_tanh, linear_2 (4F -> D), plus the window's mean: one token per window. The blocks after it and post_layernorm
run over a quarter of the patches. Its parameters exist in "4x" mode too (built, not run).

Merger (MiniCPMV4_6Merger, merger_times 1): each 2x2 block of the grid the tower outputs concatenated (4D), a
DownsampleMLP: LayerNorm(4D), linear_1 4D -> 4D, GELU (exact), linear_2 4D -> text hidden_size, biases. An image of
h x w patches is h * w / 16 tokens of the prompt ("16x"), h * w / 4 in "4x"; its sides are multiples of 4 (2) patches.

How tfcalc reads it. The tower: the `patch_embedding` kind (no class token, a biased Conv2d; the learned table's
rows those of vision image_size's grid, `table_size`; the default image the wrapper's image_size, the processor's
base resolution: 448, 32 x 32 patches) and SigLIP's blocks (tfcalc/families/clip.py), the `window_merger` kind after
block insert_layer_id (the wrapper's insert_layer_id, which its config class writes over vision_config's:
`into_towers`), so the blocks after it and post_layernorm run over a quarter of the patches (its `divisor`; in "4x"
`runs` is false: its parameters, no work). The merger: a Connector of merge 4 (2x2 of the tower's output grid), a
LayerNorm over 4D, linears 4D -> 4D -> text hidden_size with biases, GELU. An image's patch grid's sides are multiples
of 4 ("16x") or 2 ("4x"): others are refused.
Not modelled, refused by name: merger_times other than 1, merge_kernel_size or window_kernel_size other than [2, 2]
(transformers halves each grid per merge whatever the kernel), downsample_mode other than "16x" and "4x",
insert_layer_id outside the tower's blocks in "16x" (transformers then merges nothing yet halves the grid).
Videos are not modelled (images only). Keys that do not change a count are not read: layer_norm_eps,
attention_dropout, image_token_id, video_token_id, the slice and newline ids, drop_vision_last_layer (built and run
as ever in transformers 5.24).
"""

from __future__ import annotations

from ..hf import SEQ_LEN_CAP, refuse_if
from ..sizes import MAX_DIGITS
from .clip import encoder, grid, layers
from .registry import Family, register


def image_parts(model, grids: list[tuple[int, int]], downsample_mode: str | None = None) -> list:
    """The image path of MiniCPMV4_6ForConditionalGeneration (`model`) by parts on meta, as get_image_features runs it
    on images of `grids` patches (h, w) each, packed into one row: the embeddings, every encoder block, the window
    merger after block insert_layer_id (its attention, pre_norm, linear_1, linear_2), post_layernorm, the merger.
    The tower's cu_seqlens stay on the CPU (its attention splits q, k and v by their values: tolist()); the states
    are on meta. Each part: (its path in the model, the module, its forward's inputs)."""
    import torch

    config = model.config
    mode = downsample_mode or config.downsample_mode
    after = config.vision_config.insert_layer_id  # (the wrapper's: its config class writes it there)
    after = after if mode != "4x" and after >= 0 else None
    parts, sizes = vision_parts(model.model.vision_tower, grids, after, "model.vision_tower.")
    n = int((sizes[:, 0] * sizes[:, 1]).sum())
    D = config.vision_config.hidden_size
    parts.append(("model.merger", model.model.merger,
                  {"hidden_states": torch.empty(1, n, D, device="meta"), "target_sizes": sizes}))
    return parts


def vision_parts(tower, grids: list[tuple[int, int]], after: int | None, at: str = "") -> tuple[list, object]:
    """MiniCPMV4_6VisionModel (`tower`; 4.7's, OCR's) by parts on meta on images of `grids` patches packed into one
    row, its window merger run after block `after` (None: not run): (the parts, each image's grid at its output:
    target_sizes)."""
    import torch
    import torch.nn.functional as F

    vision = tower.config
    D, p, C = vision.hidden_size, vision.patch_size, vision.num_channels
    sizes = torch.tensor(grids)
    T = int((sizes[:, 0] * sizes[:, 1]).sum())

    def states(n: int, width: int = D):
        return torch.empty(1, n, width, device="meta")

    def cu(grid_sizes) -> torch.Tensor:
        return F.pad(torch.cumsum(grid_sizes[:, 0] * grid_sizes[:, 1], dim=0, dtype=torch.int32), (1, 0))

    parts = [(f"{at}embeddings", tower.embeddings,
              {"pixel_values": torch.empty(1, C, p, T * p, device="meta"), "target_sizes": sizes})]
    n, lengths = T, cu(sizes)
    for i, layer in enumerate(tower.encoder.layers):
        parts.append((f"{at}encoder.layers.{i}", layer,
                      {"hidden_states": states(n), "attention_mask": None, "cu_seqlens": lengths, "max_seqlen": None}))
        if i == after:
            vit = tower.vit_merger
            w = vit.window_kernel_size[0] * vit.window_kernel_size[1]
            _, windows, _ = vit.get_window_index(sizes)
            W = D * w  # each window's patches concatenated
            F_w = vit.linear_1.out_features
            parts += [(f"{at}vit_merger.layer_norm1", vit.layer_norm1, {"input": states(n)}),
                      (f"{at}vit_merger.self_attn", vit.self_attn,
                       {"hidden_states": states(n), "cu_seqlens": windows, "max_seqlen": None}),
                      (f"{at}vit_merger.pre_norm", vit.pre_norm, {"input": torch.empty(n // w, W, device="meta")}),
                      (f"{at}vit_merger.linear_1", vit.linear_1, {"input": torch.empty(n // w, W, device="meta")}),
                      (f"{at}vit_merger.linear_2", vit.linear_2, {"input": torch.empty(n // w, F_w, device="meta")})]
            sizes = sizes // 2  # get_downsampled_inputs: each side halved, one token per window
            n, lengths = int((sizes[:, 0] * sizes[:, 1]).sum()), cu(sizes)
    parts.append((f"{at}post_layernorm", tower.post_layernorm, {"input": states(n)}))
    return parts, sizes


def tower_parts(model, spec, workload) -> list:
    """The tower alone (minicpmv4_7_vision, minicpm_ocr_vision; --tower vision): every image of the workload's batch,
    its window merger run as the spec says (downsample_mode; after the wrapper's insert_layer_id, which its config
    class writes into vision_config: a vision_config built alone keeps its own)."""
    sizes = spec.sizes("patch_embedding")
    H, W = workload.image_size or (sizes.height, sizes.width)
    grids = [(H // sizes.patch_size, W // sizes.patch_size)] * workload.batch_size
    merger = spec.sizes("window_merger")
    return vision_parts(model, grids, merger.after if merger.runs else None)[0]

VISION_COMPONENTS = [  # transformers' module (and parameter) names -> tfcalc components (check --hf-config)
    (r"embeddings\.patch_embedding", "embedding/patch"),
    (r"embeddings\.position_embedding", "embedding/position"),
    *layers(""),
    (r"vit_merger\.layer_norm1", "window_merger/norm"),
    (r"vit_merger\.self_attn\.(q_proj|k_proj|v_proj)", "window_merger/qkv"),
    (r"vit_merger\.self_attn", "window_merger/core"),
    (r"vit_merger\.self_attn\.out_proj", "window_merger/out"),
    *((rf"vit_merger\.{name}", f"window_merger/{name}") for name in ("pre_norm", "linear_1", "linear_2")),
    (r"post_layernorm", "final_norm"),
]
MODES = ("16x", "4x")


def minicpmv_vision(cfg: dict, notes: list[str]) -> dict:
    """MiniCPMV4_6VisionModel (4.7's and OCR's the same modules): the patches, SigLIP's blocks, the window merger after
    block insert_layer_id (run unless downsample_mode is "4x"), post_layernorm. `processor_image_size` (the wrapper's
    image_size, laid in by it) is the default image; the table is vision image_size's grid either way."""
    where = "vision_config"
    side, p = grid(cfg)
    # (the tower alone runs its window merger: MiniCPMV4_6VisionModel's use_vit_merger defaults to true)
    L, mode, layer = cfg["num_hidden_layers"], cfg.get("downsample_mode", "16x"), cfg["insert_layer_id"]
    refuse_if(cfg, "downsample_mode", mode not in MODES, "expected '16x' (the window merger runs) or '4x' (it does "
                                                          "not)")
    runs = mode == "16x"
    refuse_if(cfg, "window_kernel_size", list(cfg["window_kernel_size"]) != [2, 2],
              "transformers halves each image's grid after the window merger whatever its kernel; [2, 2] is modelled")
    refuse_if(cfg, "insert_layer_id", abs(layer) >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    refuse_if(cfg, "insert_layer_id", runs and not 0 <= layer < L,
              f"the window merger runs after block insert_layer_id of num_hidden_layers={L} (0 to {L - 1}); outside "
              "them transformers merges nothing yet halves each image's grid for the merger")
    image = cfg.get("processor_image_size") or side
    refuse_if(cfg, "processor_image_size", image >= 10 ** MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    refuse_if(cfg, "processor_image_size", image % (p * (2 if runs else 1)),
              f"the wrapper's image_size, the default image, is a whole number of {'2x2 windows of ' if runs else ''}"
              f"patches of {p}")
    kinds = {"image_size": image, "patch_size": p, "channels": cfg["num_channels"], "class_token": False,
             "merge_size": 2 if runs else 1}
    if image != side:
        kinds["table_size"] = side
        notes.append(f"{where}: each image's patches read the {side // p}x{side // p} position table (image_size="
                     f"{side}) by bucketed positions; the default image is {image}x{image} (the wrapper's "
                     "image_size, its processor's base resolution)")
    fields = dict(encoder(cfg), causal=False, inputs="images", positions="learned",
                  kinds={"patch_embedding": kinds,
                         "window_merger": {"after": min(max(layer, 0), L - 1), "window": 2, "runs": runs}})
    if not runs:
        notes.append(f"{where}: downsample_mode='4x': the window merger is built (its parameters counted) and not run; "
                     "every block runs over every patch")
    fields["seq_len"] = (image // p) ** 2  # the default workload: one image, its patches
    fields["context"] = min(fields["seq_len"], SEQ_LEN_CAP)
    return fields


def minicpmv_merger(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """MiniCPMV4_6Merger (merger_times 1): each 2x2 block of the tower's output grid concatenated (4D), a DownsampleMLP:
    pre_norm (LayerNorm 4D), linear_1 4D -> 4D, GELU, linear_2 4D -> the language model's width, biases."""
    refuse_if(cfg, "merger_times", cfg["merger_times"] != 1, "one DownsampleMLP (merger_times 1) is modelled")
    refuse_if(cfg, "merge_kernel_size", list(cfg["merge_kernel_size"]) != [2, 2],
              "its DownsampleMLP reads 4 tokens' concatenation whatever the kernel; [2, 2] is modelled")
    D_v, D_t = towers["vision"]["d_model"], towers["text"]["d_model"]
    merged = towers["vision"]["kinds"]["window_merger"]["runs"]
    notes.append(f"{cfg.get('model_type', 'minicpmv4_6')}: downsample_mode={cfg['downsample_mode']!r}: each image's "
                 f"h x w patches are h*w/{16 if merged else 4} tokens of the prompt (its sides multiples of "
                 f"{4 if merged else 2} patches; videos not modelled)")
    return [dict(name="merger", source="vision", merge=4, norm="layernorm", widths=[4 * D_v, 4 * D_v, D_t], bias=True,
                 activation="gelu")]


def minicpmv_parts(model, spec, workload) -> list:
    """MiniCPMV4_6ForConditionalGeneration by parts on meta (its image path reads target_sizes' values): the image
    path on every image of the workload (`image_parts`), the language model on the prompt's embeddings (the images'
    tokens merged in place: no work), lm_head on its output."""
    import torch

    from ..arch.towers import image_size, images

    vision = spec.towers["vision"]
    p = vision.sizes("patch_embedding").patch_size
    H, W = image_size(spec, workload)
    n = images(workload)
    mode = "16x" if vision.sizes("window_merger").runs else "4x"
    parts = image_parts(model, [(H // p, W // p)] * n, mode) if n else []
    B, N, D = workload.batch_size, workload.seq_len, spec.d_model
    parts.append(("model.language_model", model.model.language_model,
                  {"inputs_embeds": torch.empty(B, N, D, device="meta")}))
    parts.append(("lm_head", model.lm_head, {"input": torch.empty(B, N, D, device="meta")}))
    return parts


MINICPMV_WHOLE = dict(
    connectors=minicpmv_merger,
    prefixes={"text": r"model\.language_model\.", "vision": r"model\.vision_tower\."},
    components=[(r"lm_head", "head"), (r"model\.merger\.mlp\.0\.pre_norm", "merger/norm"),
                (r"model\.merger\.mlp\.0\.linear_1", "merger/linear_1"),
                (r"model\.merger\.mlp\.0\.linear_2", "merger/linear_2")],
    defaults=dict(insert_layer_id=6, downsample_mode="16x", merge_kernel_size=[2, 2], merger_times=1),
    types=dict(insert_layer_id="int", downsample_mode="str", merge_kernel_size="integers", merger_times="int",
               model_type="str"),
    hf_trace=minicpmv_parts)


def minicpmv_whole(vision_type: str, image_size: int | None = 448, mode: str = "16x") -> dict:
    """A wrapper's whole-model fields: its vision tower's type, the outer fields laid into it (insert_layer_id,
    downsample_mode, and image_size where the wrapper has one: the processor's base resolution), its defaults."""
    lay = {"insert_layer_id": "insert_layer_id", "downsample_mode": "downsample_mode"}
    defaults = dict(MINICPMV_WHOLE["defaults"], downsample_mode=mode)
    types = dict(MINICPMV_WHOLE["types"])
    if image_size is not None:
        lay["image_size"] = "processor_image_size"
        defaults["image_size"], types["image_size"] = image_size, "size"
    return dict(MINICPMV_WHOLE, towers={"vision": (vision_type, "vision_config")}, into_towers={"vision": lay},
                defaults=defaults, types=types)


register(
    # MiniCPMV4_6VisionConfig's defaults (4.7's and OCR's are the same); downsample_mode and processor_image_size
    # are the wrapper's, laid in by it (into_towers): the tower alone runs its window merger (use_vit_merger)
    Family("minicpmv4_6_vision", mapper=minicpmv_vision, components=VISION_COMPONENTS, hf_trace=tower_parts,
           defaults=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                         num_channels=3, image_size=224, patch_size=16, hidden_act="gelu_pytorch_tanh",
                         insert_layer_id=6, window_kernel_size=[2, 2]),
           types=dict(hidden_size="size", intermediate_size="size", num_hidden_layers="size",
                      num_attention_heads="size", hidden_act="str", num_channels="size", image_size="size|sizes",
                      patch_size="size|sizes", insert_layer_id="int", window_kernel_size="integers",
                      downsample_mode="str", processor_image_size="size")),
    Family("minicpmv4_7_vision", like="minicpmv4_6_vision"),
    Family("minicpm_ocr_vision", like="minicpmv4_6_vision"),
)
