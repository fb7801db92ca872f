"""Llama 4 read whole (model_type llama4: Llama4ForConditionalGeneration): its vision tower (llama4_vision_model,
Llama4VisionModel with its pixel-shuffle adapter) and its projector beside the language model, exact against
transformers' whole class (parameters on meta per component, FlopCounterMode per component through check --hf-config),
the tower against Llama4VisionModel alone (also over an eager CPU forward), tfcalc's reference model (check), the
refusals by name, and the Scout pin from its published config.json."""

import json
import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, meta_params, write
from test_hf_llama4 import SCOUT, SCOUT_VISION
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.arch.towers import image_tokens, select
from tfcalc.cli import app
from tfcalc.families.registry import family
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()
WHOLE = transformers.Llama4ForConditionalGeneration

# Llama-4-Scout-17B-16E's config.json whole (its text_config and vision_config as tests/test_hf_llama4.py keeps them,
# read from public mirrors: the Llama4Config dump in a public GitHub markdown, find_string id 41112263523; the text
# config without the published attn_temperature_tuning: 4, which transformers 5.24 refuses and which changes no count)
SCOUT_WHOLE = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"], "boi_token_index": 200080,
               "eoi_token_index": 200081, "image_token_index": 200092, "tie_word_embeddings": False,
               "text_config": SCOUT, "vision_config": SCOUT_VISION}

D, F, P = 1408, 5632, 4096
# patches (3 x 14 x 14 -> D, no bias), class token, 24 x 24 + 1 positions, layernorm_pre; 34 blocks of two LayerNorms,
# q/k/v/o with biases, fc1/fc2 with biases; layernorm_post; the adapter's fc1 (4 D = F -> P) and fc2 (P -> P), no biases
SCOUT_VISION_PARAMS = (3 * 14 * 14 * D + D + (24 * 24 + 1) * D + 2 * D
                       + 34 * (2 * 2 * D + 4 * (D * D + D) + D * F + F + F * D + D) + 2 * D
                       + F * P + P * P)


def test_scout_is_108_641_793_536_parameters_as_its_generation_class(tmp_path):
    assert SCOUT_VISION_PARAMS == 850_960_896
    projector = P * 5120  # linear_1, no bias
    language_model = 107_769_861_120  # Llama4ForCausalLM on meta (tests/test_hf_llama4.py)
    total = language_model + SCOUT_VISION_PARAMS + projector
    assert total == 108_641_793_536  # Meta: 109B
    spec = read_hf_config(write(tmp_path, SCOUT_WHOLE)).spec
    result = count(spec)
    assert result.params.total == total == meta_params(WHOLE, SCOUT_WHOLE)
    assert result.towers["vision"]["params"] == SCOUT_VISION_PARAMS == meta_params(transformers.Llama4VisionModel,
                                                                                 SCOUT_VISION)
    assert result.towers["connectors"]["params"] == projector
    assert count(select(spec, "text")).params.total == language_model
    # the preset is the published config, whole
    preset = load_preset("llama4-scout")
    assert preset.replace(name=None) == spec.replace(name=None, seq_len=preset.seq_len)
    assert count(preset).params.total == total
    # one 336 x 336 tile: 576 patches, the class token dropped, 2 x 2 shuffled into 144 tokens of the prompt
    assert image_tokens(preset, Workload(seq_len=1024, images=1)) == 144
    assert result.flops.components["multi_modal_projector"] == 2 * 144 * P * 5120


def _tiny(ratio: float = 0.5, **vision) -> dict:
    """A small whole config: a 2-block text tower of 2 experts (both picked: transformers' Llama4TextMoe runs every
    expert, which tfcalc's top-k then matches) and a 2-block vision tower of 32 x 32 tiles."""
    text = dict(model_type="llama4_text", vocab_size=300, hidden_size=32, intermediate_size=16,
                intermediate_size_mlp=24, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                head_dim=8, num_local_experts=2, num_experts_per_tok=2, max_position_embeddings=128,
                attention_chunk_size=8, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    n = round(1 / ratio)
    tower = dict(model_type="llama4_vision_model", hidden_size=16, num_attention_heads=2, num_hidden_layers=2,
                 intermediate_size=16 * n * n, image_size=32, patch_size=8 if n < 4 else 4, vision_output_dim=24,
                 projector_input_dim=24, projector_output_dim=24, pixel_shuffle_ratio=ratio) | vision
    return {"model_type": "llama4", "image_token_index": 299, "boi_token_index": 297, "eoi_token_index": 298,
            "text_config": text, "vision_config": tower}


@pytest.mark.parametrize("ratio, images, batch", [(0.5, 2, 2), (0.25, 1, 1), (1.0, 3, 1)])
def test_whole_llama4_equals_its_generation_class(tmp_path, ratio, images, batch):
    config = _tiny(ratio)
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    workload = Workload(batch_size=batch, seq_len=64, images=images)
    result = count(spec, workload)
    n = round(1 / ratio)
    patches = (32 // config["vision_config"]["patch_size"]) ** 2
    tokens = patches // n ** 2  # per tile: the class token dropped, n x n patches shuffled into one
    assert image_tokens(spec, workload) == images * tokens
    # the adapter: fc1 (16 n^2 -> 24), GELU, fc2 (24 -> 24), GELU, no biases; linear_1 24 -> 32, no bias
    assert result.towers["connectors"] == {"params": 24 * 32, "forward": 2 * images * tokens * 24 * 32}
    assert result.params.components["vision/merger/up"] == 16 * n * n * 24
    assert result.flops.components["vision/merger/down"] == 2 * images * tokens * 24 * 24
    assert result.params.total == meta_params(WHOLE, config)
    report = hf_model.compare(path, spec, workload)
    assert report.match, [r for r in report.rows if r.match is False]
    assert not [r for r in report.rows if "(unmapped)" in r.component or r.analytic is None]
    assert check(spec, workload=workload, train=True).match


def test_moe_rows_differ_as_documented_with_top_1(tmp_path):
    config = _tiny()
    config["text_config"]["num_experts_per_tok"] = 1
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    report = hf_model.compare(path, spec, Workload(batch_size=1, seq_len=16, images=1))
    off = [r for r in report.rows if r.match is False]
    # transformers' Llama4TextMoe runs both experts over every token: twice tfcalc's routed experts
    assert {r.component for r in off} == {"moe/experts", "total"} and all(r.known for r in off)


def test_vision_tower_alone_is_llama4_vision_model(tmp_path):
    config = _tiny()
    path = write(tmp_path, config)
    vision = select(read_hf_config(path).spec, "vision")
    assert count(vision).params.total == meta_params(transformers.Llama4VisionModel, config["vision_config"])
    report = hf_model.compare(path, vision, Workload(batch_size=3, seq_len=17))
    assert report.match, [r for r in report.rows if r.match is False]
    assert check(vision, workload=Workload(batch_size=3, seq_len=17), train=True).match
    # an eager forward on the CPU: three tiles of 32 x 32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.Llama4VisionModel._from_config(hf_config(config["vision_config"]),
                                                            attn_implementation="eager").eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(torch.randn(3, 3, 32, 32)).last_hidden_state
    assert out.shape == (3, 4, 24)  # 16 patches a tile, 2 x 2 shuffled: 4 tokens of projector_output_dim
    assert count(vision, Workload(batch_size=3, seq_len=17)).flops.forward == counter.get_total_flops()


def test_read_json_round_trip_and_text_tower(tmp_path):
    path = write(tmp_path, _tiny())
    spec = read_hf_config(path).spec
    assert spec.towers["vision"].sizes("patch_embedding").fixed_size
    assert type(spec).model_validate(json.loads(spec.model_dump_json())) == spec
    text = runner.invoke(app, ["count", "--hf-config", str(path), "--tower", "text", "--json"])
    assert text.exit_code == 0, text.output
    assert json.loads(text.output)["params"]["total"] == meta_params(transformers.Llama4ForCausalLM,
                                                                     _tiny()["text_config"])
    assert family("llama4_vision_model").defaults["vision_output_dim"] == transformers.Llama4VisionConfig.vision_output_dim


def test_defaults_are_transformers_defaults():
    for key, value in family("llama4_vision_model").defaults.items():
        assert getattr(transformers.Llama4VisionConfig, key) == value, key


@pytest.mark.parametrize("args, message", [
    (["--image-size", "64"], "image_size=64x64: tiny's vision tower reads tiles of 32x32 alone"),
    (["--tower", "vision", "--image-size", "64"], "reads tiles of 32x32 alone"),
    (["--images", "11", "--seq-len", "40"], "the images' 44 tokens in the prompt do not fit"),
])
def test_workloads_it_cannot_take_are_refused(tmp_path, args, message):
    (tmp_path / "tiny").mkdir()
    path = write(tmp_path / "tiny", _tiny())
    out = runner.invoke(app, ["count", "--hf-config", str(path), *args])
    assert out.exit_code == 2 and message in out.output, out.output
    assert "Traceback" not in out.output


@pytest.mark.parametrize("vision, message", [
    (dict(vision_output_dim=32), "vision_config.vision_output_dim=32 is not modelled with projector_output_dim=24"),
    (dict(intermediate_size=32), "intermediate_size=32"),
    (dict(projector_output_dim=20, vision_output_dim=20), "projector_output_dim=20"),
    (dict(pixel_shuffle_ratio=0.3), "pixel_shuffle_ratio=0.3"),
    (dict(pixel_shuffle_ratio=2.5e-309), "pixel_shuffle_ratio=2.5e-309"),  # 1 / r overflows: refused first
    (dict(num_attention_heads=3), "num_attention_heads=3"),
    (dict(num_attention_heads=8), "num_attention_heads=8"),  # heads of 2: no x and y halves of complex pairs
    (dict(image_size=36), "image_size=36 is not modelled: not a multiple of patch_size=8"),
    (dict(image_size=[32, 32]), "image_size=[32, 32]"),
])
def test_vision_configs_it_cannot_read_are_refused_by_name(tmp_path, vision, message):
    with pytest.raises(TfcalcError, match="vision_config") as e:
        read_hf_config(write(tmp_path, _tiny(**vision)))
    assert message in str(e.value)


def test_without_a_vision_config_the_defaults_cannot_run(tmp_path):
    # Llama4VisionConfig's defaults: hidden_size 768 shuffled 2 x 2 is 3072 wide, the adapter's fc1 reads 5632 (and
    # linear_1 reads vision_output_dim 7680 from an adapter of 4096): transformers' forward fails
    with pytest.raises(TfcalcError, match="vision_config.intermediate_size=5632 is not modelled"):
        read_hf_config(write(tmp_path, {"model_type": "llama4", "text_config": _tiny()["text_config"]}))
