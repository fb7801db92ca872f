"""A multimodal model (ModelSpec.towers, ModelSpec.connectors; tfcalc.arch.towers): each tower counted on its own
workload, the connectors between them, the whole model the sum; --tower picks one; what is refused.

The model here is GPT-2 (124,439,808 parameters, OpenAI's 124M) with ViT-B/16 as its vision tower (ViTModel without
its pooler: 86,389,248 - (768 * 768 + 768) = 85,798,656, tests/test_vit.py) and one linear projector 768 -> 768 with
a bias over each image's 196 patches (the class token dropped, as LLaVA's default feature selection does)."""

import json

import pytest
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.arch.towers import image_tokens, select
from tfcalc.cli import app
from tfcalc.spec import ModelSpec

runner = CliRunner()

GPT2 = 124_439_808
VIT_B16_NO_POOLER = 86_389_248 - (768 * 768 + 768)
PROJECTOR = 768 * 768 + 768

TOML = """
name = "toy-vlm"
description = "GPT-2 with a ViT-B/16 vision tower and a linear projector"
source = "tests/test_towers.py"
[model]
n_layers = 12
d_model = 768
n_heads = 12
vocab_size = 50257
seq_len = 1024
max_positions = 1024
[model.towers.vision]
n_layers = 12
d_model = 768
n_heads = 12
seq_len = 197
causal = false
lm_head = false
inputs = "images"
[model.towers.vision.kinds.patch_embedding]
image_size = 224
patch_size = 16
[[model.connectors]]
name = "projector"
widths = [768, 768]
bias = true
drop_class_token = true
"""


@pytest.fixture(scope="module")
def toml(tmp_path_factory):
    path = tmp_path_factory.mktemp("towers") / "toy.toml"
    path.write_text(TOML)
    return path


@pytest.fixture(scope="module")
def spec():
    gpt2, vit = load_preset("gpt2"), load_preset("vit-b16").replace(n_classes=None)
    return ModelSpec.model_validate({**gpt2.given(), "name": "toy-vlm", "towers": {"vision": vit.given()},
                                     "connectors": [{"name": "projector", "widths": [768, 768], "bias": True,
                                                     "drop_class_token": True}]})


def test_the_whole_model_is_its_towers_and_connectors(spec):
    result = count(spec)
    assert count(load_preset("gpt2")).params.total == GPT2
    assert result.towers == {
        "text": {"params": GPT2, "forward": count(load_preset("gpt2")).flops.forward},
        "vision": {"params": VIT_B16_NO_POOLER,
                   "forward": count(load_preset("vit-b16").replace(n_classes=None)).flops.forward},
        # each image's 196 patch tokens through one [768, 768] matmul
        "connectors": {"params": PROJECTOR, "forward": 2 * 196 * 768 * 768},
    }
    assert result.params.total == GPT2 + VIT_B16_NO_POOLER + PROJECTOR == 210_829_056
    assert result.flops.forward == sum(t["forward"] for t in result.towers.values())
    # the vision tower's records are named under it, the language model's keep their names
    assert result.params.components["vision/embedding/patch"] == 3 * 16 * 16 * 768 + 768
    assert result.params.components["attention/qkv"] == 12 * (768 * 3 * 768 + 3 * 768)
    assert result.params.components["projector"] == PROJECTOR
    # the images' patch embedding needs no input gradient: the train step leaves it out, as for ViT alone
    assert result.flops.input_leaf == 2 * 196 * (3 * 16 * 16) * 768


def test_images_and_their_size_scale_the_vision_tower(spec):
    one, big = count(spec), count(spec, Workload(seq_len=1024, images=1, image_size=(448, 448)))
    four = count(spec, Workload(seq_len=1024, images=4))
    vit = load_preset("vit-b16").replace(n_classes=None)
    at_448 = count(vit, Workload(batch_size=1, seq_len=(448 // 16) ** 2 + 1, image_size=(448, 448)))
    assert big.towers["vision"]["forward"] == at_448.flops.forward
    assert four.towers["vision"]["forward"] == 4 * one.towers["vision"]["forward"]
    assert big.towers["connectors"]["forward"] == 2 * 784 * 768 * 768  # 28 x 28 patches
    assert big.params.total == one.params.total  # parameters never depend on the workload
    assert image_tokens(spec, Workload(seq_len=1024, images=1, image_size=(448, 448))) == 784
    assert image_tokens(spec, Workload(seq_len=1024, images=4)) == 4 * 196


def test_decode_holds_the_towers_parameters_and_runs_none_of_them(spec):
    w = Workload(phase="decode", seq_len=1, context=1000)
    result = count(spec, w)
    assert result.params.total == GPT2 + VIT_B16_NO_POOLER + PROJECTOR
    assert result.flops.forward == count(load_preset("gpt2"), w).flops.forward
    assert result.towers["vision"] == {"params": VIT_B16_NO_POOLER, "forward": 0}


def test_the_image_tokens_must_fit_the_prompt(spec):
    with pytest.raises(TfcalcError, match=r"seq_len=100: the images' 196 tokens in the prompt do not fit"):
        count(spec, Workload(seq_len=100, images=1))


def test_tower_picks_one_model(spec):
    assert select(spec, "text") == load_preset("gpt2").replace(name="toy-vlm")
    assert count(select(spec, "vision")).params.total == VIT_B16_NO_POOLER
    assert select(spec, "all") is spec
    with pytest.raises(TfcalcError, match=r"--tower audio: toy-vlm has no audio tower \(it has text, vision\)"):
        select(spec, "audio")
    with pytest.raises(TfcalcError, match="--tower vision: gpt2 is a model of tokens with no other towers"):
        select(load_preset("gpt2"), "vision")
    with pytest.raises(TfcalcError, match="--tower words: expected one of text, vision, audio, all"):
        select(spec, "words")


def test_spec_checks_its_towers():
    gpt2, vit = load_preset("gpt2").given(), load_preset("vit-b16").given()
    with pytest.raises(ValueError, match="a vision tower reads images"):
        ModelSpec.model_validate({**gpt2, "towers": {"vision": gpt2}})
    with pytest.raises(ValueError, match="reads the audio tower, which the model does not have"):
        ModelSpec.model_validate({**gpt2, "towers": {"vision": vit},
                                  "connectors": [{"name": "p", "source": "audio", "widths": [768, 768]}]})
    with pytest.raises(ValueError, match=r"connectors: only for a model with towers"):
        ModelSpec.model_validate({**gpt2, "connectors": [{"name": "p", "widths": [768, 768]}]})


def test_cli_whole_model_and_one_tower(toml):
    out = runner.invoke(app, ["count", "--spec", str(toml), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["towers"]["vision"]["params"] == VIT_B16_NO_POOLER
    assert data["params"]["total"] == 210_829_056
    table = runner.invoke(app, ["count", "--spec", str(toml)], env={"COLUMNS": "120"})
    assert "Towers" in table.output and "1 image of 224x224 (196 of the tokens)" in table.output
    text = runner.invoke(app, ["count", "--spec", str(toml), "--tower", "text", "--json"])
    assert json.loads(text.output)["params"]["total"] == GPT2
    vision = runner.invoke(app, ["count", "--spec", str(toml), "--tower", "vision", "-L", "6", "--json"])
    assert json.loads(vision.output)["params"]["total"] == VIT_B16_NO_POOLER - 6 * 7_087_872  # 6 of 12 blocks


@pytest.mark.parametrize("args, message", [
    (["--tower", "audio"], "--tower audio: toy-vlm has no audio tower (it has text, vision)"),
    (["--image-size", "230"], "--image-size 230: not a multiple of toy-vlm's vision patch size 16"),
    (["--images", "6", "-N", "1024"], "seq_len=1024: the images' 1,176 tokens in the prompt do not fit"),
])
def test_cli_refusals(toml, args, message):
    out = runner.invoke(app, ["count", "--spec", str(toml), *args])
    assert out.exit_code == 2 and message in out.output, out.output


def test_profile_takes_one_tower(toml):  # train takes the whole model: tests/test_train_media.py
    out = runner.invoke(app, ["profile", "--spec", str(toml)])
    assert out.exit_code == 2 and "--tower text plans the language model" in out.output, out.output


def test_a_train_steps_memory_holds_every_tower_and_is_measured_one_at_a_time(toml):
    out = runner.invoke(app, ["memory", "--optimizer", "adamw", "--spec", str(toml), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["weights_bytes"] == 2 * (GPT2 + VIT_B16_NO_POOLER + PROJECTOR)  # bf16-mixed
    out = runner.invoke(app, ["check", "--memory", "--spec", str(toml)])
    assert out.exit_code == 2 and "measured one tower at a time (--tower text, --tower vision)" in out.output


def test_inference_plans_hold_every_tower(toml):
    out = runner.invoke(app, ["memory", "--spec", str(toml), "--context", "900", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["weights_bytes"] == 2 * (GPT2 + VIT_B16_NO_POOLER + PROJECTOR)  # bf16, every tower's weights
    text = json.loads(runner.invoke(app, ["memory", "--spec", str(toml), "--tower", "text", "--context", "900",
                                          "--json"]).output)
    assert data["kv_cache_bytes"] == text["kv_cache_bytes"]  # only the language model keeps keys and values
    infer = runner.invoke(app, ["infer", "--spec", str(toml), "--gpu", "h100-sxm", "--context", "800", "--json"])
    assert infer.exit_code == 0, infer.output
    plan = json.loads(infer.output)
    alone = json.loads(runner.invoke(app, ["infer", "--spec", str(toml), "--tower", "text", "--gpu", "h100-sxm",
                                           "--context", "800", "--json"]).output)
    vision = count(load_preset("vit-b16").replace(n_classes=None)).flops.forward
    # the image is encoded at the prefill (the tower and the projector over its 196 patches), not at the decode
    assert plan["prefill"]["flops"] == alone["prefill"]["flops"] + vision + 2 * 196 * 768 * 768
    assert plan["decode"]["flops"] == alone["decode"]["flops"]
    for args, message in ((["--tp", "2"], "tp=2: toy-vlm has a vision tower"),
                          (["--quant", "nf4"], "quant='nf4': toy-vlm has a vision tower")):
        out = runner.invoke(app, ["infer", "--spec", str(toml), "--gpu", "h100-sxm", *args])
        assert out.exit_code == 2 and message in out.output, out.output


def test_check_builds_every_tower_and_the_connectors(spec):
    from tfcalc.verify import check

    report = check(spec, train=True, workload=Workload(seq_len=1024, images=1, image_size=(448, 448)))
    assert report.match, [r for r in [*report.forward, *report.params] if not r.match]
    rows = {r.component: r for r in report.params}
    assert rows["vision/embedding/patch"].model == 3 * 16 * 16 * 768 + 768  # the tower's own Conv2d
    assert rows["projector"].model == PROJECTOR  # an nn.Linear(768, 768) of its own
    forward = {r.component: r for r in report.forward}
    assert forward["projector"].flop_counter == 2 * 784 * 768 * 768  # FlopCounterMode's addmm over 28 x 28 patches
    assert report.total(report.params, "model") == GPT2 + VIT_B16_NO_POOLER + PROJECTOR
    with pytest.raises(TfcalcError, match="towers did their work at the prefill"):
        check(spec, workload=Workload(phase="decode", seq_len=1, context=1000))  # holds the image's 196 tokens


def test_a_prompt_of_text_alone_runs_no_tower(spec, toml):
    result = count(spec, Workload(seq_len=1024, images=0))
    assert result.flops.forward == count(load_preset("gpt2")).flops.forward  # the language model's alone
    assert result.params.total == GPT2 + VIT_B16_NO_POOLER + PROJECTOR  # every tower's weights still there
    out = runner.invoke(app, ["count", "--spec", str(toml), "--images", "0"], env={"COLUMNS": "150"})
    assert out.exit_code == 0 and "no image (a prompt of text alone)" in out.output, out.output
    bad = runner.invoke(app, ["count", "--spec", str(toml), "--images", "-1"])
    assert bad.exit_code == 2 and "--images -1: expected 0 or more images" in bad.output, bad.output


def test_a_sweep_of_a_multimodal_model_writes_each_tower_as_columns(toml):
    out = runner.invoke(app, ["count", "--spec", str(toml), "-N", "512,1024", "--format", "csv"])
    assert out.exit_code == 0, out.output
    header, first, second = out.output.splitlines()[:3]
    columns = dict(zip(header.split(","), first.split(",")))
    assert columns["towers.vision.params"] == str(VIT_B16_NO_POOLER)
    assert columns["spec.towers.vision.n_layers"] == "12" and columns["spec.n_layers"] == "12"
    memory = runner.invoke(app, ["memory", "--spec", str(toml), "--context", "300,600", "--format", "csv"])
    assert memory.exit_code == 0 and "spec.towers.vision.d_model" in memory.output.splitlines()[0], memory.output
