"""Prefill and decode on a roofline: the arithmetic of the bounds, and the FLOPs equal to the exact count."""

import json

import pytest
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.cli import app
from tfcalc.plan.gpus import lookup
from tfcalc.plan.memory import weights_bytes
from tfcalc.plan.roofline import inference_plan, phase_cost

H100, A100 = lookup("h100-sxm"), lookup("a100-80gb")
runner = CliRunner()


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


# ---- tensor parallelism -------------------------------------------------------------------------------------------

def _op(plan_phase, component):
    return next(o for o in plan_phase.ops if o.component == component)


def test_tensor_parallel_decode_splits_each_op_and_adds_the_all_reduces():
    # llama3-8b decode, B = 8 against 1,024 cached tokens, on each of 2 H100s: L = 32 blocks, D = 4096, F = 14336,
    # 32 query heads and 8 key/value heads of 128, bf16 (2 bytes)
    spec, B, tp, L, D, F = load_preset("llama3-8b"), 8, 2, 32, 4096, 14336
    w = Workload(phase="decode", seq_len=1, context=1024, batch_size=B)
    one, two = phase_cost(spec, w, H100), phase_cost(spec, w, H100, tp=tp)
    # column-parallel up: half its outputs, the whole input read
    assert _op(two, "mlp/up").bytes == L * 2 * (D * F // 2 + B * (D + F // 2))
    # row-parallel down: half its inputs, the whole [B, D] of partial sums written, then all-reduced:
    # a ring all-reduce sends 2 (tp - 1) / tp of those bytes from each GPU
    assert _op(two, "mlp/down").bytes == L * 2 * (F // 2 * D + B * (F // 2 + D))
    reduce = _op(two, "mlp/down all-reduce")
    assert reduce.link_bytes == L * (2 * (tp - 1) * (B * D * 2) // tp) and reduce.bound == "link"
    assert reduce.seconds == reduce.link_bytes / H100.link_bytes_per_s and H100.link_bytes_per_s == 450 * 10**9
    # attention: 16 query heads and 4 key/value heads per GPU, every cached key and value of those 4 read
    keys = 1024 + 1
    assert _op(two, "attention").bytes == L * (B * 16 * 1 * 256 * 2 + B * 4 * keys * 256 * 2)
    # every matmul's FLOPs are halved; the logits are all-gathered ([B, V] bf16, (tp - 1) / tp sent)
    assert two.flops * 2 == one.flops
    assert _op(two, "head all-gather").link_bytes == (B * 128_256 * 2) // 2
    assert two.link_bytes == sum(o.link_bytes for o in two.ops if o.bound == "link") > 0 == one.link_bytes


def test_more_gpus_than_key_value_heads_copy_them():
    # llama3-70b has 8 key/value heads: at tp = 16 each GPU keeps one (copied on two GPUs), as vLLM does
    spec, w = load_preset("llama3-70b"), Workload(phase="decode", seq_len=1, context=4095)
    sixteen = _op(phase_cost(spec, w, H100, tp=16), "attention")
    assert sixteen.bytes == 80 * (4 * 256 * 2 + 1 * 4096 * 256 * 2)  # 64 / 16 query heads, 1 key/value head


@pytest.mark.parametrize("tp, message", [
    (3, "tp=3: tensor parallelism splits the attention heads; it must divide n_heads=32"),
    (0, "tp=0: expected a positive integer"),
    (True, "tp=True: expected a positive integer"),
])
def test_tensor_parallel_sizes_the_heads_cannot_take_are_refused(tp, message):
    with pytest.raises(TfcalcError) as e:
        inference_plan(load_preset("llama3-8b"), H100, context=128, tp=tp)
    assert str(e.value).startswith(message)


def test_the_infer_command_with_tp():
    r = runner.invoke(app, ["infer", "-p", "llama3-70b", "--gpu", "h100", "--context", "4096", "-B", "8",
                            "--tp", "8", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["tp"] == 8 and data["link_bytes_per_s"] == 450 * 10**9
    assert any(op["component"] == "attention/out all-reduce" for op in data["decode"]["ops"])
    table = runner.invoke(app, ["infer", "-p", "llama3-70b", "--gpu", "h100", "--context", "4096", "--tp", "8"])
    assert "Roofline on each of 8 tensor-parallel H100 SXMs" in table.output
    # a sweep over tp: one row per size, each the plan at that size
    sweep = runner.invoke(app, ["infer", "-p", "llama3-70b", "--gpu", "h100", "--context", "4096", "--tp", "1,2,8",
                                "--json"])
    assert sweep.exit_code == 0, sweep.output
    rows = json.loads(sweep.output)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    spec = load_preset("llama3-70b")
    for row, tp in zip(rows, (1, 2, 8)):
        assert row["tp"] == tp
        assert row["decode.seconds"] == inference_plan(spec, H100, context=4096, tp=tp).decode.seconds
    refused = runner.invoke(app, ["infer", "-p", "llama3-70b", "--gpu", "h100", "--tp", "3,4"])
    assert refused.exit_code == 2 and "tp=3: tensor parallelism splits the attention heads" in refused.output
