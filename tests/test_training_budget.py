"""Training budgets and a run's MFU: published figures, or the arithmetic shown."""

import json
from fractions import Fraction

import pytest
from typer.testing import CliRunner

from tfcalc import ModelSpec, TfcalcError, count, load_preset
from tfcalc.arch.towers import select
from tfcalc.cli import app
from tfcalc.plan.gpus import lookup
from tfcalc.plan.train import mfu_of_run, training_budget

runner = CliRunner()
LLAMA3_TOKENS = 15_600_000_000_000


def test_llama3_405b_training_flops():
    # Llama Team 2024, sec. 3.4 (and Table 4's setting, 8,192-token sequences): 3.8e25 FLOPs for 405B on 15.6T
    b = training_budget(load_preset("llama3-405b").replace(seq_len=8192), LLAMA3_TOKENS)
    assert b.six_nd == 6 * 405_853_388_800 * LLAMA3_TOKENS and round(b.six_nd / 1e24) == 38
    assert abs(b.flops_causal / 3.8e25 - 1) < 0.05  # the exact count adds attention over 8K tokens: +3.6%


def gpt(l: int, h: int, s: int, V: int) -> ModelSpec:
    # Narayanan et al. 2021's GPT: 4h MLP, MHA, no biases (biases add no matmul FLOPs anyway), untied logits
    return ModelSpec(n_layers=l, d_model=h, n_heads=h // 64, vocab_size=V, seq_len=s, positions="rotary",
                     bias=False, tie_embeddings=False)


@pytest.mark.parametrize("l, h, s, V", [(24, 2048, 2048, 51200), (96, 12288, 2048, 51200), (2, 64, 16, 100)])
def test_megatron_lm_flops_per_iteration(l, h, s, V):
    # Narayanan et al. 2021 (Efficient Large-Scale Language Model Training on GPU Clusters), sec. 5.1:
    # with full recomputation 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs per iteration; without, 72 (.. + V/12lh).
    # Their backward is eager attention's (4 matmuls of the core; a fused kernel's has a fifth, the scores again)
    B = 1
    full = training_budget(gpt(l, h, s, V), B * s, recompute="full", attention="eager")
    assert full.hardware_flops == 96 * B * s * l * h**2 + 16 * B * s**2 * l * h + 6 * B * s * h * V
    assert full.hardware_flops == 96 * B * s * l * h**2 * (1 + Fraction(s, 6 * h) + Fraction(V, 16 * l * h))
    plain = training_budget(gpt(l, h, s, V), B * s, attention="eager")
    assert plain.flops == plain.hardware_flops == 72 * B * s * l * h**2 * (1 + Fraction(s, 6 * h)
                                                                          + Fraction(V, 12 * l * h))
    assert full.flops == plain.flops  # recomputation is hardware work, not model work
    # fused: the scores q k^T once more per layer in backward, 2 B s^2 h (the a heads of h/a: 2 s (h/a) s each)
    fused = training_budget(gpt(l, h, s, V), B * s)
    assert fused.hardware_flops - plain.hardware_flops == l * 2 * B * s * s * h and fused.flops == plain.flops


def test_the_fused_kernels_backward_is_torchs_sdpa_backward_formula():
    # torch's FlopCounterMode formulas for the fused kernels (flash, efficient): sdpa_flop_count is the forward's
    # 2 matmuls, sdpa_backward_flop_count the backward's 5 (dP, dV, dQ, dK and the scores again). Per layer the
    # backward is 2 x forward + the scores: the hardware FLOPs fused adds over eager. (On the CPU, FlopCounterMode
    # has no formula for _scaled_dot_product_flash_attention_for_cpu: the formulas are held here, not a trace.)
    flop_counter = pytest.importorskip("torch.utils.flop_counter")
    spec = load_preset("gpt2").replace(n_layers=2, d_model=64, n_heads=4, vocab_size=100, seq_len=32)
    q = k = v = (1, 4, 32, 16)  # [B, H, N, d_head]
    per_layer = flop_counter.sdpa_backward_flop_count(q, q, k, v) - 2 * flop_counter.sdpa_flop_count(q, k, v)
    fused, eager = training_budget(spec, 32), training_budget(spec, 32, attention="eager")
    assert fused.hardware_flops - eager.hardware_flops == spec.n_layers * per_layer == 2 * 2 * 4 * 32 * 16 * 32
    assert fused.flops == eager.flops  # model FLOPs: the same matmuls either way


def test_selective_recompute_adds_the_attention_cores_only():
    spec = load_preset("gpt2")
    plain, selective = training_budget(spec, 1024), training_budget(spec, 1024, recompute="selective")
    f = count(spec).flops.components
    assert selective.hardware_flops - plain.hardware_flops == f["attention/scores"] + f["attention/values"]
    eager = [training_budget(spec, 1024, r, attention="eager") for r in ("none", "selective")]
    assert eager[1].hardware_flops - eager[0].hardware_flops == f["attention/scores"] + f["attention/values"]
    assert plain.hardware_flops - eager[0].hardware_flops == f["attention/scores"]  # the fused backward's fifth


@pytest.mark.parametrize("preset", ["albert-base-v2", "gemma4-e2b"])
def test_full_recompute_runs_the_blocks_again_not_the_embedding_projections(preset):
    # Full recomputation runs every block's forward again in backward; the embeddings run once, their projections
    # too (ALBERT's E -> D embedding_hidden_mapping_in, Gemma 4's per-layer-input projection), and so do the
    # pooler and the head. Hardware FLOPs = 3 x forward + the blocks' forward, per sequence of N tokens.
    # (gemma4-e2b is whole: its language model, tests/test_gemma4_audio.py for the towers)
    spec = select(load_preset(preset), "text").replace(seq_len=512, batch_size=1)
    plain, full = training_budget(spec, 512), training_budget(spec, 512, recompute="full")
    f = count(spec).flops.components
    N, D = 512, spec.d_model
    if preset == "albert-base-v2":  # x [N, E] @ W [E, D], E = 128, D = 768
        outside = {"embedding/projection": 2 * N * 128 * D, "pooler": 2 * 1 * D * D}
    else:  # x [N, D] @ W [D, L * P]: Gemma 4 E2B's 35 blocks of 256-wide per-layer inputs; the head over N tokens
        outside = {"embedding/per_layer_projection": 2 * N * D * 35 * 256, "head": 2 * N * D * spec.vocab_size}
    assert {k: f[k] for k in outside} == outside
    assert full.hardware_flops - plain.hardware_flops == sum(f.values()) - sum(outside.values())


def test_time_gpu_hours_cost_and_mfu_round_trip():
    spec = load_preset("llama3-8b")
    h100 = lookup("h100-sxm").peak_flops["bf16"]
    b = training_budget(spec, 10**12, gpus=64, gpu_name="H100 SXM", peak_flops_per_s=h100, mfu=0.5,
                        price_per_gpu_hour=2.5)
    assert b.seconds == pytest.approx(b.flops_causal / (64 * h100 * 0.5))
    assert b.gpu_hours == pytest.approx(b.seconds * 64 / 3600) and b.cost == pytest.approx(2.5 * b.gpu_hours)
    tokens_per_s = 0.5 * 64 * h100 / float(b.flops_per_token_causal)  # what that MFU means in throughput
    run = mfu_of_run(spec, tokens_per_s, 64, h100)
    assert run["mfu_causal"] == pytest.approx(0.5) and run["mfu"] > run["mfu_causal"]


def test_the_train_command():
    r = runner.invoke(app, ["train", "-p", "llama3-405b", "-N", "8192", "--tokens", "15.6T", "--gpus", "16384",
                            "--gpu", "h100", "--mfu", "0.4", "--price", "2", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["tokens"] == LLAMA3_TOKENS and d["six_nd"] == 6 * 405_853_388_800 * LLAMA3_TOKENS
    assert d["seconds"] == pytest.approx(d["flops_causal"] / (16384 * 989.4e12 * 0.4))
    measured = json.loads(runner.invoke(app, ["train", "-p", "gpt2", "--tokens-per-second", "1e5", "--gpus", "1",
                                              "--gpu", "a100-80gb", "--json"]).output)
    assert measured["run"]["mfu"] == pytest.approx(1e5 * 3 * 291_648_307_200 / 1024 / 312e12)
    assert "tokens" not in measured  # no budget was asked for
    for args, message in ((["--tokens", "1.5"], "'1.5': expected a whole, positive number of tokens"),
                          (["--tokens", "lots"], "'lots' is not a number of tokens"),
                          (["--tokens", "1T", "--mfu", "0.4"], "--mfu: the time for --tokens needs --gpus, --gpu and "
                                                               "--mfu together; missing --gpus and --gpu"),
                          (["--tokens", "1T", "--gpus", "8"], "missing --gpu and --mfu"),  # not dropped silently
                          (["--tokens", "1T", "--price", "2"], "--price 2.0: the cost is the time of --tokens"),
                          (["--tokens", "1T", "--dtype", "fp8"], "--dtype fp8: it picks --gpu's peak; give --gpu"),
                          (["--flops-budget", "1e21", "--gpus", "8"], "--gpus is not used there"),
                          (["--tokens", "inf"], "'inf': expected a finite number of tokens"),
                          (["--tokens", "1e5000"], "'1e5000': expected a finite number of tokens, at most 500"),
                          (["--tokens", "1T", "--gpus", "8", "--gpu", "h100", "--mfu", "1e-320"], "--mfu 1e-320: "
                                                                                                 "expected a fraction"),
                          (["--tokens-per-second", "1e308", "--gpus", "8", "--gpu", "h100"], "its MFU is not a finite"),
                          (["--flops-budget", "9" * 400], "at most 1e300 FLOPs"),
                          (["--tokens", "1T", "--recompute", "some"], "recompute='some': expected one of"),
                          (["--tokens", "1T", "--gpus", "8", "--gpu", "h100", "--mfu", "40"], "mfu=40.0: expected a fraction"),
                          ([], "give --tokens D"),
                          (["--tokens-per-second", "1e5", "--gpus", "0", "--gpu", "h100"], "gpus=0: expected a positive"),
                          (["--tokens-per-second", "inf", "--gpus", "1", "--gpu", "h100"], "--tokens-per-second inf: "
                                                                                            "expected a positive, finite"),
                          (["--tokens", "1T", "--price", "nan"], "--price nan: expected a positive, finite number")):
        bad = runner.invoke(app, ["train", "-p", "gpt2", *args])
        (line,) = bad.output.strip().splitlines()
        assert bad.exit_code == 2 and line.startswith("tfcalc: error: ") and message in line, bad.output
    alone = runner.invoke(app, ["train", "--flops-budget", "1e21", "--recompute", "full"])  # no model to recompute
    assert alone.exit_code == 2 and "--recompute full: with --flops-budget alone there is no model" in alone.output


def test_training_budget_refuses_bad_values():
    with pytest.raises(TfcalcError, match="tokens=0: expected a positive integer"):
        training_budget(load_preset("gpt2"), 0)
    with pytest.raises(TfcalcError, match="gpus=-1: expected a positive number"):
        training_budget(load_preset("gpt2"), 1024, gpus=-1)


def test_cli_flops_budget():
    from tfcalc.plan.chinchilla import optimal_tokens_for_params

    flops, tokens = optimal_tokens_for_params(10**12)  # Table 3: 1T parameters -> 1.27e26 FLOPs, 21.2T tokens
    r = runner.invoke(app, ["train", "--flops-budget", repr(flops), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert round(data["params"] / 1e12, 3) == 1.0 and [a["approach"] for a in data["approaches"]][0] == "1"
    r = runner.invoke(app, ["train", "-p", "llama2-7b", "--flops-budget", "1e23", "--json"])
    model = json.loads(r.output)["model"]
    per_token = training_budget(load_preset("llama2-7b"), 1).flops_per_token_causal
    assert model["tokens"] == int(1e23 / float(per_token))
    for args, message in ((["--flops-budget", "0"], "positive"), (["--flops-budget", "nan"], "positive"),
                          (["--flops-budget", "x"], "not a number"),
                          (["-p", "gpt2", "--flops-budget", "1e20", "--tokens", "1B"], "give one")):
        r = runner.invoke(app, ["train", *args])
        assert r.exit_code == 2 and message in r.output, (args, r.output)


def test_a_short_runs_days_hours_and_cost_keep_three_figures():
    from typer.testing import CliRunner

    from tfcalc.cli import app
    from tfcalc.render import amount

    # below 100 three significant figures, from 100 whole units: a small run's GPU-hours were shown as 0
    assert [amount(x) for x in (0, 0.0956, 2.534, 43.14, 99.94, 100.4, 4_729_576.2)] == [
        "0", "0.0956", "2.53", "43.1", "99.9", "100", "4,729,576"]
    out = CliRunner().invoke(app, ["train", "-p", "gpt2", "--tokens", "1e6", "--gpus", "8", "--gpu", "h100-sxm",
                                   "--mfu", "0.4", "--price", "2"], env={"COLUMNS": "200"}).output
    hours = next(line for line in out.splitlines() if "GPU-hours" in line)
    shown = float(hours.split("│")[2].replace(",", ""))
    # 1e6 tokens x gpt2's train FLOPs per token over 8 x 989.4 TFLOP/s x 0.4, in hours, times 8 GPUs: about 0.0006
    assert 0.0004 < shown < 0.0008, out
