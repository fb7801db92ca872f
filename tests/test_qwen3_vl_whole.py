"""Qwen3-VL (qwen3_vl, qwen3_vl_moe) and Qwen3.5 (qwen3_5, qwen3_5_moe) read whole: the language model, the vision
tower (Conv3d with a bias, a learned position table resampled to each image's grid, LayerNorm blocks with a fused qkv
and a gelu_pytorch_tanh MLP, the merger) and Qwen3-VL's DeepStack mergers. Exact against transformers' generation
classes (sum(numel) on meta; FlopCounterMode per component through check --hf-config), the vision tower against its
own class (Qwen3VLVisionModel, Qwen3_5VisionModel: one eager forward on CPU of real pixels and grid_thw, so that
transformers' own position-table resampling runs), `check` of the reference model, the published Qwen3-VL-8B-Instruct
and Qwen3-VL-30B-A3B-Instruct configs pinned (their checkpoints' own totals), the preset, and the refusals."""

import json
import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, meta_params, write
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.arch.towers import image_tokens, select
from tfcalc.cli import app
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()

# Qwen/Qwen3-VL-8B-Instruct's config.json, verbatim as a public model report quotes it beside the checkpoint's tensor
# list and total (/nfs/ofs-llm-ssd/models/opensource/Qwen3-VL-8B-Instruct; index id 62543607479)
QWEN3_VL_8B = {
    "architectures": ["Qwen3VLForConditionalGeneration"], "image_token_id": 151655, "model_type": "qwen3_vl",
    "text_config": {
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "dtype": "bfloat16",
        "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 12288, "max_position_embeddings": 262144, "model_type": "qwen3_vl_text",
        "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000, "use_cache": True, "vocab_size": 151936},
    "tie_word_embeddings": False, "transformers_version": "4.57.0.dev0", "video_token_id": 151656,
    "vision_config": {
        "deepstack_visual_indexes": [8, 16, 24], "depth": 27, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152,
        "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 4304, "model_type": "qwen3_vl",
        "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 4096, "patch_size": 16,
        "spatial_merge_size": 2, "temporal_patch_size": 2},
    "vision_end_token_id": 151653, "vision_start_token_id": 151652,
}
# Qwen/Qwen3-VL-30B-A3B-Instruct's, the same report's sibling (/nfs/ofs-llm-ssd/.../Qwen3-VL-30B-A3B-Instruct; index
# id 62501178117): the 8B's outer fields, a Qwen3-MoE language model, the same tower to a 2048-wide output
QWEN3_VL_30B_A3B = {
    **QWEN3_VL_8B, "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
    "text_config": {
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
        "dtype": "bfloat16", "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 262144, "mlp_only_layers": [],
        "model_type": "qwen3_vl_moe_text", "moe_intermediate_size": 768, "norm_topk_prob": True,
        "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
        "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000, "use_cache": True, "vocab_size": 151936},
    "vision_config": {**QWEN3_VL_8B["vision_config"], "model_type": "qwen3_vl_moe", "out_hidden_size": 2048},
}


def _vision_params(O: int) -> int:
    """The published tower's parameters: D = 1152, 27 blocks, an MLP of 4304, 2 x 2 merges (4608 wide), out O."""
    D, F, L, M, K = 1152, 4304, 27, 4 * 1152, 3 * 2 * 16 * 16  # K: a patch's pixels, C x T x p x p = 1,536
    merger = M * M + M + M * O + O  # linear_fc1 [4608 -> 4608], linear_fc2 [4608 -> O], biases
    return (K * D + D  # the Conv3d [1152, 3, 2, 16, 16] with its bias
            + 2304 * D  # pos_embed
            + L * (D * 3 * D + 3 * D + D * D + D  # qkv, proj with biases
                   + D * F + F + F * D + D  # linear_fc1, linear_fc2 with biases
                   + 4 * D)  # norm1, norm2: LayerNorm weight and bias
            + 2 * D + merger  # the merger: its LayerNorm over 1152 before the concatenation
            + 3 * (2 * M + merger))  # 3 DeepStack mergers: their LayerNorm over 4608 after it


def test_qwen3_vl_8b_is_8_767_123_696_parameters_as_its_generation_class_and_checkpoint(tmp_path):
    D, V, L, F = 4096, 151936, 36, 12288
    text = L * (D * 32 * 128 + 2 * D * 8 * 128 + 32 * 128 * D + 2 * 128  # q, k, v, o; q_norm, k_norm
                + 3 * D * F + 2 * D) + D + 2 * V * D  # the SwiGLU MLP, two RMSNorms; the final norm; table and head
    assert (text, _vision_params(4096)) == (8_190_735_360, 576_388_336)
    spec = read_hf_config(write(tmp_path, QWEN3_VL_8B)).spec
    result = count(spec)
    assert result.towers["text"]["params"] == text and result.towers["vision"]["params"] == _vision_params(4096)
    # the checkpoint's own total in the report that quotes the config (its safetensors' 750 tensors)
    assert result.params.total == 8_767_123_696 == meta_params(transformers.Qwen3VLForConditionalGeneration,
                                                                QWEN3_VL_8B)
    vision = {**QWEN3_VL_8B["vision_config"], "model_type": "qwen3_vl_vision"}
    assert count(select(spec, "vision")).params.total == meta_params(transformers.Qwen3VLVisionModel, vision)
    assert load_preset("qwen3-vl-8b").replace(name=None) == spec.replace(name=None)
    # one 448 x 448 image: 28 x 28 patches of 16, merged 2 x 2 into 196 tokens of the prompt; each of the 3 DeepStack
    # mergers runs over the same 196 rows: 4608 -> 4608 -> 4096
    assert result.flops.components["vision/deepstack/up"] + result.flops.components["vision/deepstack/down"] == \
        3 * 2 * 196 * (4608 * 4608 + 4608 * 4096)
    out = runner.invoke(app, ["count", "-p", "qwen3-vl-8b", "-N", "1024"], env={"COLUMNS": "200"}).output
    assert "1 image of 448x448 (196 of the tokens)" in out and "vision/deepstack/up" in out


def test_qwen3_vl_30b_a3b_is_31_070_754_032_parameters_as_its_generation_class_and_checkpoint(tmp_path):
    D, V, L, E, F = 2048, 151936, 48, 128, 768
    text = L * (D * 32 * 128 + 2 * D * 4 * 128 + 32 * 128 * D + 2 * 128  # q, k, v, o; q_norm, k_norm
                + D * E + E * 3 * D * F + 2 * D) + D + 2 * V * D  # router, 128 SwiGLU experts, norms; table, head
    assert (text, _vision_params(2048)) == (30_532_122_624, 538_631_408)
    spec = read_hf_config(write(tmp_path, QWEN3_VL_30B_A3B)).spec
    result = count(spec)
    assert (result.towers["text"]["params"], result.towers["vision"]["params"]) == (text, _vision_params(2048))
    assert result.params.total == 31_070_754_032 == meta_params(transformers.Qwen3VLMoeForConditionalGeneration,
                                                                 QWEN3_VL_30B_A3B)


def test_defaults_are_transformers_defaults():
    for model_type, cls in (("qwen3_vl_vision", transformers.Qwen3VLVisionConfig),
                            ("qwen3_vl_moe_vision", transformers.Qwen3VLMoeVisionConfig),
                            ("qwen3_5_vision", transformers.Qwen3_5VisionConfig),
                            ("qwen3_5_moe_vision", transformers.Qwen3_5MoeVisionConfig)):
        config = cls()
        for key, value in DEFAULTS[model_type].items():
            expected = getattr(config, key, [])  # Qwen3.5's config declares no deepstack_visual_indexes: none
            assert value == (list(expected) if isinstance(expected, tuple) else expected), (model_type, key)


TEXT = {"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 128}
MROPE = {"rope_scaling": {"rope_type": "default", "mrope_section": [1, 1, 2]}}
HYBRID = {"layer_types": ["linear_attention", "full_attention"], "linear_key_head_dim": 8, "linear_value_head_dim": 8,
          "linear_num_key_heads": 2, "linear_num_value_heads": 4,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000, "partial_rotary_factor": 0.5,
                              "mrope_section": [1, 1, 0], "mrope_interleaved": True}}
EXPERTS = {"moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}
WHOLE = {  # model_type: (its text_config, its vision_config's own fields, transformers' generation class)
    "qwen3_vl": ({**TEXT, **MROPE, "model_type": "qwen3_vl_text"},
                 {"model_type": "qwen3_vl_vision", "deepstack_visual_indexes": [0, 2]},
                 transformers.Qwen3VLForConditionalGeneration),
    "qwen3_vl_moe": ({**TEXT, **MROPE, **EXPERTS, "model_type": "qwen3_vl_moe_text"},
                     {"model_type": "qwen3_vl_moe_vision", "deepstack_visual_indexes": [1]},
                     transformers.Qwen3VLMoeForConditionalGeneration),
    "qwen3_5": ({**TEXT, **HYBRID, "model_type": "qwen3_5_text"}, {"model_type": "qwen3_5_vision"},
                transformers.Qwen3_5ForConditionalGeneration),
    "qwen3_5_moe": ({**{k: v for k, v in TEXT.items() if k != "intermediate_size"}, **HYBRID, **EXPERTS,
                     "shared_expert_intermediate_size": 16, "model_type": "qwen3_5_moe_text"},
                    {"model_type": "qwen3_5_moe_vision"}, transformers.Qwen3_5MoeForConditionalGeneration),
}
VISION = {"depth": 3, "hidden_size": 24, "intermediate_size": 40, "num_heads": 2, "out_hidden_size": 32,
          "patch_size": 2, "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 16}


@pytest.mark.parametrize("model_type", WHOLE)
def test_whole_equals_its_generation_class(tmp_path, model_type):
    text, vision, cls = WHOLE[model_type]
    config = {"model_type": model_type, "text_config": text, "vision_config": {**VISION, **vision},
              "image_token_id": 299, "video_token_id": 298, "vision_start_token_id": 297}
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    # two images of 16 x 24 pixels: 8 x 12 patches of 2 each, merged 2 x 2 into 24 tokens of the prompt each
    workload = Workload(batch_size=2, seq_len=40, images=2, image_size=(16, 24))
    assert image_tokens(spec, workload) == 2 * (8 * 12) // 4
    assert count(spec, workload).params.total == meta_params(cls, config)
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if r.component.startswith("(unmapped)")]
    rows = {(r.figure, r.component): r.transformers for r in report.rows}
    listed = len(vision.get("deepstack_visual_indexes", []))
    # each DeepStack merger over the 2 x 24 merged rows: 96 -> 96 -> 32
    assert rows.get(("forward", "vision/deepstack/up"), 0) == listed * 2 * 48 * 96 * 96
    # the position table: 16 rows of 24, resampled by gathers (no FLOPs of its own)
    assert rows[("params", "vision/embedding/position")] == 16 * 24
    assert ("forward", "vision/embedding/position") not in rows
    # Qwen3.5's gated DeltaNet blocks: the train step is not yet exact for the language model alone (a gap of its own,
    # outside these towers), so its check is of the forward
    assert check(spec, workload=workload, train=not model_type.startswith("qwen3_5")).match


def _eager_tower_flops(config: dict, images: int, grid: tuple[int, int]) -> int:
    """FlopCounterMode over one eager forward on CPU of transformers' vision tower: real pixel rows and grid_thw, as
    the processor lays them out, so its position-table resampling runs as it does on a real image."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = hf_config(config)
        cls = hf_model._model_class(transformers, c, False, False)
        model = cls._from_config(c, attn_implementation="eager").eval()
    rows, cols = grid
    pixels = torch.randn(images * rows * cols, c.in_channels * c.temporal_patch_size * c.patch_size ** 2)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(pixels, grid_thw=torch.tensor([[1, rows, cols]] * images))
    return counter.get_total_flops()


@settings(max_examples=6, deadline=None)
@given(st.fixed_dictionaries({
    "v35": st.booleans(), "width_heads": st.sampled_from([(8, 1), (8, 2), (16, 4), (24, 2), (24, 1)]),
    "depth": st.integers(1, 4), "ff": st.integers(4, 40), "out": st.integers(4, 24), "patch": st.sampled_from([1, 2]),
    "merge": st.sampled_from([1, 2]), "frames": st.sampled_from([1, 2]), "channels": st.integers(1, 3),
    "table": st.sampled_from([4, 9, 16, 20]), "deepstack": st.sets(st.integers(0, 3), max_size=3),
    "rows": st.integers(1, 5), "cols": st.integers(1, 5), "images": st.integers(1, 3)}))
def test_towers_are_exact_against_their_own_class(tmp_path_factory, c):
    """Parameters (sum(numel) on meta) and forward FLOPs (one eager forward on CPU) of random small towers on images
    of random grids; a position table that is not a square (20 rows: transformers resamples its 4 x 4 grid, the
    parameters are all 20). Heads of a multiple of 4 wide: the 2-D rotary's halves (refused otherwise)."""
    p, m = c["patch"], c["merge"]
    config = {"model_type": "qwen3_5_vision" if c["v35"] else "qwen3_vl_vision", "depth": c["depth"],
              "hidden_size": c["width_heads"][0], "num_heads": c["width_heads"][1], "intermediate_size": c["ff"],
              "out_hidden_size": c["out"], "patch_size": p, "spatial_merge_size": m, "temporal_patch_size": c["frames"],
              "in_channels": c["channels"], "num_position_embeddings": c["table"]}
    if not c["v35"]:
        config["deepstack_visual_indexes"] = sorted(i for i in c["deepstack"] if i < c["depth"])
    spec = read_hf_config(write(tmp_path_factory.mktemp("qwen3_vl"), config)).spec
    cls = transformers.Qwen3_5VisionModel if c["v35"] else transformers.Qwen3VLVisionModel
    assert count(spec).params.total == meta_params(cls, config)
    grid = (c["rows"] * m, c["cols"] * m)
    workload = Workload(batch_size=c["images"], seq_len=grid[0] * grid[1], image_size=(grid[0] * p, grid[1] * p))
    assert count(spec, workload).flops.forward == _eager_tower_flops(config, c["images"], grid)


def test_a_qwen3_5_config_s_empty_deepstack_list_is_what_transformers_reads(tmp_path):
    # the published Qwen3.5 configs write "deepstack_visual_indexes": []; Qwen3_5VisionModel has no DeepStack at all
    vision = {**VISION, "model_type": "qwen3_5_vision", "deepstack_visual_indexes": [1]}
    spec = read_hf_config(write(tmp_path, vision)).spec
    assert spec.sizes("patch_merger").deepstack == []
    assert count(spec, Workload(seq_len=16, image_size=(8, 8))).params.total == meta_params(
        transformers.Qwen3_5VisionModel, vision)


@pytest.mark.parametrize("args, message", [
    (["--image-size", "448x440"], "--image-size 448x440: not a multiple of q8b's vision patch size x merge size 32 "
                                  "(the patches would not cover the image; 448x416 or 448x448 would)"),
    (["--image-size", "16"], "--image-size 16: not a multiple of q8b's vision patch size x merge size 32"),
    (["--seq-len", "100"], "seq_len=100"),
])
def test_bad_image_input_is_one_line_exit_2(tmp_path, args, message):
    path = str(write(tmp_path, QWEN3_VL_8B, "q8b.json"))
    r = runner.invoke(app, ["count", "--hf-config", path, *args])
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], r.output


@pytest.mark.parametrize("change, message", [
    ({"deepstack_visual_indexes": [8, 8]}, "deepstack_visual_indexes=[8, 8] is not modelled: a block listed twice"),
    ({"deepstack_visual_indexes": [8, 27]}, "deepstack_visual_indexes=[8, 27] is not modelled: 27 name no block of "
                                            "depth=27"),
    ({"deepstack_visual_indexes": [-1]}, "deepstack_visual_indexes=[-1] is not modelled: -1 name no block"),
    ({"deepstack_visual_indexes": None}, "deepstack_visual_indexes=None: expected a list of integers"),
    ({"hidden_act": "tanh"}, "hidden_act='tanh' is not modelled"),
    ({"num_heads": 5}, "num_heads=5 is not modelled: hidden_size=1152 is not a multiple of it"),
    ({"num_heads": 128}, "num_heads=128 is not modelled: heads of hidden_size / num_heads = 9 are not a multiple of 4"),
    ({"patch_size": [16, 16]}, "patch_size=[16, 16] is not modelled: one integer"),
    ({"num_position_embeddings": 0}, "num_position_embeddings=0: expected a positive integer"),
])
def test_config_refusals_name_the_field(tmp_path, change, message):
    config = {**QWEN3_VL_8B, "vision_config": {**QWEN3_VL_8B["vision_config"], **change}}
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, config))
    assert message in str(e.value)


def test_one_tower_of_the_whole_config(tmp_path):
    path = str(write(tmp_path, QWEN3_VL_8B))
    out = runner.invoke(app, ["count", "--hf-config", path, "--tower", "vision", "--json"])
    assert out.exit_code == 0, out.output
    vision = {**QWEN3_VL_8B["vision_config"], "model_type": "qwen3_vl_vision"}
    assert json.loads(out.output)["params"]["total"] == meta_params(transformers.Qwen3VLVisionModel, vision)
    text = runner.invoke(app, ["count", "--hf-config", path, "--tower", "text", "--json"])
    assert json.loads(text.output)["params"]["total"] == 8_190_735_360


def test_a_merger_narrower_than_the_language_model_is_counted_as_built_and_noted(tmp_path):
    # transformers builds it (Qwen3-VL-4B's text_config beside the tower's default 3584-wide output, a config whose
    # vision_config is left out); its forward could not put the merger's 2048-wide tokens in a 4096-wide prompt
    config = {**QWEN3_VL_8B, "vision_config": {**QWEN3_VL_8B["vision_config"], "out_hidden_size": 2048}}
    source = read_hf_config(write(tmp_path, config))
    assert "vision_config.out_hidden_size=2048 is not the language model's hidden_size=4096" in source.source
    assert count(source.spec).params.total == meta_params(transformers.Qwen3VLForConditionalGeneration, config)
