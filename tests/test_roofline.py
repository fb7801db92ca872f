"""Prefill and decode on a roofline: the arithmetic of the bounds, and the FLOPs equal to the exact count."""

import json

import pytest
from typer.testing import CliRunner

from tfcalc import Workload, count, load_preset
from tfcalc.cli import app
from tfcalc.plan.gpus import lookup
from tfcalc.plan.memory import weights_bytes
from tfcalc.plan.roofline import inference_plan, phase_cost

H100, A100 = lookup("h100-sxm"), lookup("a100-80gb")


def test_decode_at_batch_1_reads_every_weight_once():
    spec = load_preset("llama2-7b")
    plan = inference_plan(spec, A100, context=1024)
    floor = weights_bytes(spec, "bf16") / A100.bandwidth_bytes_per_s  # 13.5 GB at 2.04 TB/s: 6.6 ms
    assert plan.decode.bound == "memory"
    assert floor < plan.decode.seconds < 1.05 * floor  # the KV cache and activations add the rest
    assert plan.decode.bytes > weights_bytes(spec, "bf16")


def test_the_flops_are_the_exact_count_with_the_mask_kept_pairs():
    spec = load_preset("llama3-8b")
    for w in (Workload(phase="prefill", seq_len=2048), Workload(phase="decode", seq_len=1, context=2048, batch_size=8)):
        assert phase_cost(spec, w, H100).flops == count(spec, w).flops.forward_causal


def test_a_linear_layer_turns_compute_bound_past_the_ridge():
    # decode, mlp/up of llama3-8b: 2 B D F FLOPs over D F weights + B (D + F) activations, 2 bytes each:
    # intensity = B D F / (D F + B (D + F)); the H100's ridge is 989.4e12 / 3.35e12 = 295 FLOPs per byte
    spec, D, F = load_preset("llama3-8b"), 4096, 14336
    for B in (64, 512, 4096):
        op = next(o for o in phase_cost(spec, Workload(phase="decode", seq_len=1, context=128, batch_size=B),
                                         H100).ops if o.component == "mlp/up")
        assert op.flops == 32 * 2 * B * D * F and op.bytes == 32 * 2 * (D * F + B * (D + F))
        intensity = B * D * F / (D * F + B * (D + F))
        assert op.bound == ("compute" if intensity > 989.4e12 / 3.35e12 else "memory")
    assert [B for B in (64, 512) if B * D * F / (D * F + B * (D + F)) > 295] == [512]


def test_a_long_prefill_is_compute_bound_and_its_time_is_the_flops_over_the_peak():
    spec = load_preset("llama3-8b")
    plan = inference_plan(spec, H100, context=8192)
    assert plan.prefill.bound == "compute"
    ideal = count(spec, Workload(phase="prefill", seq_len=8192)).flops.forward_causal / H100.peak_flops["bf16"]
    assert ideal <= plan.prefill.seconds < 1.1 * ideal


def test_quantized_weights_shrink_the_decode_bound():
    spec = load_preset("llama3-70b")
    bf16 = inference_plan(spec, H100, context=4096)
    int4 = inference_plan(spec, H100, context=4096, dtype="int4")
    assert int4.decode.seconds < 0.4 * bf16.decode.seconds  # 4 bits against 16 for the matrices


def test_the_infer_command():
    runner = CliRunner()
    r = runner.invoke(app, ["infer", "-p", "llama3-8b", "--gpu", "h100-sxm", "--batch-size", "8", "--context",
                            "4096", "--dtype", "bf16", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["decode"]["workload"]["batch_size"] == 8 and d["decode"]["workload"]["context"] == 4096
    assert d["decode_tokens_per_s"] == pytest.approx(8 / d["decode_time_per_step_s"])
    assert d["ridge_flops_per_byte"] == pytest.approx(989.4e12 / 3.35e12)
    table = runner.invoke(app, ["infer", "-p", "llama3-8b", "--gpu", "h100", "--context", "4096"])
    assert table.exit_code == 0 and "time to first token" in table.output
    for args, message in (([], "give --gpu NAME"), (["--gpu", "v100", "--dtype", "bf16"], "V100"),
                          (["--gpu", "h100", "--context", "0"], "context=0")):
        bad = runner.invoke(app, ["infer", "-p", "gpt2", *args])
        (line,) = bad.output.strip().splitlines()
        assert bad.exit_code == 2 and line.startswith("tfcalc: error: ") and message in line, bad.output
