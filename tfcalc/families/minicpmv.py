"""MiniCPM-V 4.6, MiniCPM-V 4.7 and MiniCPM-OCR (transformers' MiniCPMV4_6ForConditionalGeneration; minicpmv4_7 and
minicpm_ocr subclass it and build the same modules): what their image path is, as transformers 5.24 builds and runs
it, and the generation class traced part by part on meta (`image_parts`: its image path), the oracle a whole read is held against.
tfcalc reads their language model alone today (Qwen3.5's text model, tfcalc/families/wrappers.py): the whole model is
refused by name (issue 21).

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
"""

from __future__ import annotations


def image_parts(model, grids: list[tuple[int, int]], downsample_mode: str | None = None) -> list:
    """The image path of MiniCPMV4_6ForConditionalGeneration (`model`) by parts on meta, as get_image_features runs it
    on images of `grids` patches (h, w) each, packed into one row: the embeddings, every encoder block, the window
    merger after block insert_layer_id (its attention, pre_norm, linear_1, linear_2), post_layernorm, the merger.
    The tower's cu_seqlens stay on the CPU (its attention splits q, k and v by their values: tolist()); the states
    are on meta. Each part: (its path in the model, the module, its forward's inputs)."""
    import torch
    import torch.nn.functional as F

    tower, config = model.model.vision_tower, model.config
    vision = config.vision_config
    D, p, C = vision.hidden_size, vision.patch_size, vision.num_channels
    sizes = torch.tensor(grids)
    T = int((sizes[:, 0] * sizes[:, 1]).sum())
    mode = downsample_mode or config.downsample_mode
    merged = mode != "4x" and vision.insert_layer_id >= 0

    def states(n: int, width: int = D):
        return torch.empty(1, n, width, device="meta")

    def cu(grid_sizes) -> torch.Tensor:
        return F.pad(torch.cumsum(grid_sizes[:, 0] * grid_sizes[:, 1], dim=0, dtype=torch.int32), (1, 0))

    at = "model.vision_tower."
    parts = [(f"{at}embeddings", tower.embeddings,
              {"pixel_values": torch.empty(1, C, p, T * p, device="meta"), "target_sizes": sizes})]
    n, lengths = T, cu(sizes)
    for i, layer in enumerate(tower.encoder.layers):
        parts.append((f"{at}encoder.layers.{i}", layer,
                      {"hidden_states": states(n), "attention_mask": None, "cu_seqlens": lengths, "max_seqlen": None}))
        if merged and i == vision.insert_layer_id:
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
    parts.append(("model.merger", model.model.merger, {"hidden_states": states(n), "target_sizes": sizes}))
    return parts
