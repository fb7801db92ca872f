"""MiniCPM-V 4.6 (minicpmv4_6; minicpmv4_7 and minicpm_ocr build the same modules) against transformers: what tfcalc
reads today (the language model and lm_head, `--tower text`), pinned on the released config, and the whole model
refused by name rather than counted short; the whole class's parameters and its image path's FLOPs written out as the
arithmetic a whole read must meet (issue 21: the vision tower is not read yet).

tests/data/minicpm_v_4_6_config.json is openbmb/MiniCPM-V-4.6's config.json as vendored in the GitHub repository
moderately-ai/lmbrrr (docs/research/models/minicpm-v-4.6/hf-model/config.json, commit f04df6dd), byte for byte.
"""

import warnings
from pathlib import Path

import pytest
import torch
import transformers
from hf_oracle import hf_config
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import count
from tfcalc.cli import app
from tfcalc.families.minicpmv import image_parts
from tfcalc.hf import read_hf_config
from tfcalc.verify.hf_model import trace_parts

PUBLISHED = Path(__file__).parent / "data" / "minicpm_v_4_6_config.json"


def built(config):
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        return transformers.MiniCPMV4_6ForConditionalGeneration(transformers.AutoConfig.from_pretrained(config))


def params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_the_released_minicpm_v_4_6_language_model_is_counted_exactly():
    model = built(PUBLISHED)
    spec = read_hf_config(PUBLISHED).spec
    # the released config ties lm_head to the token embedding (tie_word_embeddings true; the class's default is false)
    assert spec.tie_embeddings and model.lm_head.weight is model.model.language_model.embed_tokens.weight
    assert count(spec).params.total == params(model.model.language_model) == 752_161_600


def test_the_released_whole_model_is_refused_by_name_not_counted_short():
    # the whole class, on meta: the language model (tied head), the vision tower, the merger
    model = built(PUBLISHED)
    vision, merger = model.model.vision_tower, model.model.merger
    D, F, L, p, rows = 1152, 4304, 27, 14, (980 // 14) ** 2  # vision_config; its position table: 70 x 70 rows
    layer = 2 * 2 * D + 4 * (D * D + D) + (D * F + F) + (F * D + D)  # 2 LayerNorms, q k v out, fc1 fc2 (biases)
    embeddings = (3 * p * p * D + D) + rows * D  # Conv2d with a bias, the bucketed position table
    # MiniCPMV4_6ViTWindowAttentionMerger after block insert_layer_id: layer_norm1, q k v out, pre_norm over 2x2
    # concatenated patches (4D), linear_1 4D -> 4F, linear_2 4F -> D (biases)
    window_merger = 2 * D + 4 * (D * D + D) + 2 * 4 * D + (4 * D * 4 * F + 4 * F) + (4 * F * D + D)
    assert params(vision.encoder.layers[0]) == layer == 15_239_504
    assert params(vision.vit_merger) == window_merger == 104_507_072
    assert params(vision) == embeddings + L * layer + window_merger + 2 * D == 522_299_312  # + post_layernorm
    # MiniCPMV4_6Merger (merger_times 1): one DownsampleMLP: a LayerNorm over 4D, 4D -> 4D, GELU, 4D -> 1024
    assert params(merger) == 2 * 4 * D + (4 * D * 4 * D + 4 * D) + (4 * D * 1024 + 1024) == 25_967_104
    assert params(model) == 752_161_600 + 522_299_312 + 25_967_104 == 1_300_428_016
    # tfcalc reads the language model alone: the whole model is refused with one line, never 752M called the total
    whole = CliRunner().invoke(app, ["count", "--hf-config", str(PUBLISHED)])
    assert whole.exit_code == 2 and "only the language model of minicpmv4_6 is read" in whole.output \
        and "--tower text counts its language model alone" in whole.output and "Traceback" not in whole.output, \
        whole.output


D, F, L, H, p, k = 32, 64, 3, 2, 4, 1  # a tiny tower: the window merger after block k = insert_layer_id
TINY = dict(model_type="minicpmv4_6", insert_layer_id=k, image_token_id=299,
            text_config=dict(model_type="qwen3_5_text", vocab_size=300, hidden_size=24, intermediate_size=48,
                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=12,
                             layer_types=["full_attention"]),
            vision_config=dict(model_type="minicpmv4_6_vision", hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                               num_attention_heads=H, patch_size=p, image_size=32))
GRIDS = [(4, 4), (8, 4)]  # two images of 4x4 and 8x4 patches
T = sum(h * w for h, w in GRIDS)  # 48 patches


def eager_image_flops(downsample_mode: str | None = None):
    """FlopCounterMode over get_image_features (fp32 CPU, eager) of the tiny config on GRIDS, NaViT-packed into one
    row as the processor packs them: (total FLOPs, each image's tokens for the language model)."""
    torch.manual_seed(0)
    model = transformers.MiniCPMV4_6ForConditionalGeneration._from_config(hf_config(TINY),
                                                                          attn_implementation="eager").eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model.model.get_image_features(torch.randn(1, 3, p, T * p), torch.tensor(GRIDS),
                                             downsample_mode=downsample_mode)
    return counter.get_total_flops(), [o.shape[0] for o in out.pooler_output]


def test_the_image_path_flops_a_whole_read_must_meet():
    flops, tokens = eager_image_flops()
    # each image's tokens for the language model: its patches / 16 (2x2 by the window merger, 2x2 by the merger)
    assert tokens == [h * w // 16 for h, w in GRIDS] == [1, 2]
    pairs = sum((h * w) ** 2 for h, w in GRIDS)  # blocks 0..k: every image's patches attend to each other alone
    block = lambda t, n2: 2 * t * (4 * D * D + 2 * D * F) + 2 * 2 * D * n2  # q k v out, fc1 fc2; QK^T and AV
    conv = 2 * T * 3 * p * p * D
    # the window merger: q k v out over every patch, attention within each 2x2 window (4 x 4 pairs), then each
    # window's 4 patches concatenated: linear_1 4D -> 4F, linear_2 4F -> D
    window = 2 * T * 4 * D * D + 2 * 2 * D * (T // 4) * 16 + 2 * (T // 4) * (4 * D * 4 * F + 4 * F * D)
    after = (L - k - 1) * block(T // 4, sum((h * w // 4) ** 2 for h, w in GRIDS))  # the rest on a quarter of them
    merger = 2 * (T // 16) * (4 * D * 4 * D + 4 * D * 24)  # 2x2 of the merged grid concatenated: 4D -> 4D -> 24
    assert flops == conv + (k + 1) * block(T, pairs) + window + after + merger == 3_772_416
    # "4x" (minicpm_ocr's default): the window merger skipped (its parameters still built), every block over every
    # patch, the merger on 2x2 blocks of the patches: h * w / 4 tokens an image
    flops, tokens = eager_image_flops("4x")
    assert tokens == [h * w // 4 for h, w in GRIDS] == [4, 8]
    assert flops == conv + L * block(T, pairs) + 2 * (T // 4) * (4 * D * 4 * D + 4 * D * 24) == 3_465_216


@pytest.mark.parametrize("mode", [None, "4x"])
def test_the_class_traced_by_parts_on_meta_is_its_eager_forward(mode):
    # image_parts: the image path on meta (its cu_seqlens on the CPU) sees exactly what the eager forward does
    with torch.device("meta"):
        model = transformers.MiniCPMV4_6ForConditionalGeneration._from_config(hf_config(TINY),
                                                                              attn_implementation="eager")
    total, own, outside = trace_parts(image_parts(model, GRIDS, mode))
    assert (total, outside) == (eager_image_flops(mode)[0], 0)
    at = "model.vision_tower."
    if mode is None:  # the window merger's attention core: 12 windows of 4 x 4 pairs, QK^T and AV, 2 heads of 16
        assert own[f"{at}vit_merger.self_attn"] == 2 * 2 * D * (T // 4) * 16 == 24_576
        assert own[f"{at}encoder.layers.2.self_attn.q_proj"] == 2 * (T // 4) * D * D  # after it: a quarter
    else:
        assert not any(name.startswith(f"{at}vit_merger") and v for name, v in own.items())
        assert own[f"{at}encoder.layers.2.self_attn.q_proj"] == 2 * T * D * D
