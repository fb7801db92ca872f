"""infer's prompt of a multimodal model: its images and audio, encoded at the prefill."""

import json

from typer.testing import CliRunner

from tfcalc import Workload, count, load_preset
from tfcalc.cli import app
from tfcalc.plan.roofline import inference_plan

runner = CliRunner()


def test_the_prefill_encodes_the_images_it_is_given():
    spec = load_preset("qwen2.5-vl-7b")
    one = inference_plan(spec, "h100", 4096)
    four = inference_plan(spec, "h100", 4096, images=4)
    # the prefill's FLOPs are the whole model's causal forward on the prompt with its images, as count gives them
    assert four.prefill.flops == count(spec, Workload(phase="prefill", seq_len=4096, images=4)).flops.forward_causal
    assert one.prefill.flops == count(spec, Workload(phase="prefill", seq_len=4096, images=1)).flops.forward_causal
    assert four.prefill.flops > one.prefill.flops
    # decode: the images were encoded at the prefill; only the language model runs
    assert four.decode.flops == one.decode.flops


def test_the_cli_reads_them_as_count_does():
    out = runner.invoke(app, ["infer", "-p", "qwen2.5-vl-7b", "--gpu", "h100", "--images", "4", "--image-size", "896",
                              "--context", "8192", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    flops = count(load_preset("qwen2.5-vl-7b"), Workload(phase="prefill", seq_len=8192, images=4,
                                                         image_size=(896, 896))).flops.forward_causal
    assert data["prefill"]["flops"] == flops
    for args, message in ((["--images", "4", "--output-tokens", "10"], "--images 4: a request's life"),
                          (["-p", "gpt2", "--images", "2"], "--images 2: gpt2 reads tokens, not images")):
        preset = [] if "-p" in args else ["-p", "qwen2.5-vl-7b"]
        out = runner.invoke(app, ["infer", *preset, "--gpu", "h100", *args])
        assert out.exit_code == 2 and out.output.startswith(f"tfcalc: error: {message}"), out.output
