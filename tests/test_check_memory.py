"""`tfcalc check --memory`: the training-memory plan against torch's MemTracker on the reference model's train step
(FakeTensorMode: nothing allocated). Model states agree to the byte; so do the activations kept for backward,
for every block kind built so far; the peak, an estimate, within 10%."""

import json
import re

import pytest
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, load_preset
from tfcalc.arch.towers import select
from tfcalc.cli import app
from tfcalc.verify.memory import fused_problem
from tfcalc.verify.memory_check import check_memory

runner = CliRunner()

SMALL = {  # every block kind: learned/rotary/relative positions, MHA/GQA, dense/gated/ReLU, MoE, enc-dec, post-norm
    "gpt2": dict(n_layers=2),
    # Gemma 4: global blocks of their own head width and key heads, values = keys; the experts beside the MLP
    "gemma4-31b": dict(n_layers=3, d_model=64, n_heads=4, n_kv_heads=2, d_head=16, global_d_head=32,
                       global_n_kv_heads=1, d_ff=96, vocab_size=1000, sliding_window=8,
                       attention_pattern=["local", "local", "global"]),
    # Gemma 4 E2B: per-layer embeddings, the last blocks sharing keys and values (and twice as wide MLPs)
    "gemma4-e2b": dict(n_layers=4, d_model=64, n_heads=4, n_kv_heads=1, d_head=16, global_d_head=32, d_ff=48,
                       vocab_size=1000, sliding_window=8, attention_pattern=["local", "global"], d_per_layer_input=8,
                       kv_shared_layers=2, kv_shared_d_ff=96),
    "gemma4-26b-a4b": dict(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_head=16, global_d_head=32,
                           global_n_kv_heads=1, d_ff=48, d_expert=24, n_experts=4, top_k=2, vocab_size=1000,
                           sliding_window=8, attention_pattern=["local", "global"]),
    "llama2-7b": dict(n_layers=2, d_model=256, n_heads=8, n_kv_heads=2, d_ff=512, vocab_size=1000),
    "mixtral-8x7b": dict(n_layers=2, d_model=256, n_heads=8, n_kv_heads=2, d_ff=512, vocab_size=1000),
    "t5-small": dict(n_layers=2, n_encoder_layers=2, vocab_size=1000),
    "bart-base": dict(n_layers=2, n_encoder_layers=2, vocab_size=1000),
    "bert-base": dict(n_layers=2, vocab_size=1000),
    # q/k norms per head (Qwen3), sandwich norms with local/global blocks (Gemma 2), output norms and q/k norms over
    # all heads (OLMo 2)
    "qwen3-8b": dict(n_layers=2, d_model=256, n_heads=8, n_kv_heads=2, d_head=48, d_ff=512, vocab_size=1000),
    "gemma2-9b": dict(n_layers=2, d_model=256, n_heads=8, n_kv_heads=4, d_head=48, d_ff=512, vocab_size=1000,
                      sliding_window=16),
    "olmo2-7b": dict(n_layers=2, d_model=256, n_heads=8, n_kv_heads=4, d_ff=512, vocab_size=1000),
    # a factorised embedding and blocks sharing one set of parameters (ALBERT)
    "albert-base-v2": dict(n_layers=2, vocab_size=1000),
    # parallel blocks: two norms with partial rotary (GPT-NeoX), one shared norm with partial rotary, q/k norms and a
    # biased head (Phi), one norm with MQA and ALiBi (Falcon's alibi option); bias-free LayerNorms with ALiBi (MPT)
    "pythia-6.9b": dict(n_layers=2, d_model=256, n_heads=8, d_ff=512, vocab_size=1000, rotary_dim=8),
    "phi-2": dict(n_layers=2, d_model=256, n_heads=8, n_kv_heads=4, d_ff=512, vocab_size=1000, rotary_dim=12,
                  qk_norm="head"),
    "falcon-7b": dict(n_layers=2, d_model=256, n_heads=8, d_ff=512, vocab_size=1000, positions="alibi"),
    "mpt-7b": dict(n_layers=2, d_model=256, n_heads=8, d_ff=512, vocab_size=1000),
    # q/k LayerNorms (no bias) with a weight per head and channel (Cohere's use_qk_norm)
    "command-r-plus": dict(n_layers=2, d_model=256, n_heads=8, n_kv_heads=2, d_ff=512, vocab_size=1000),
    # multi-head latent attention, a first dense block, routed and shared experts (DeepSeek)
    "deepseek-v2-lite": dict(n_layers=2, d_model=256, n_heads=4, d_ff=512, vocab_size=1000, n_experts=8,
                             d_expert=64),
}


def small(name: str):
    # a whole preset's language model (gemma4-31b is whole; these sizes are its language model's)
    spec = select(load_preset(name), "text").replace(seq_len=32, **SMALL[name])
    return spec, Workload(seq_len=32, batch_size=2, src_len=32 if spec.is_encoder_decoder else None)


# fused under full recomputation is the same kernel in each block's recomputed forward: two models are enough
RUNS = [(name, recompute, attention) for name in SMALL for recompute in ("none", "selective", "full")
        for attention in ("eager", "fused")
        if attention == "eager" or recompute != "full" or name in ("gpt2", "llama2-7b")]


@pytest.mark.parametrize("name, recompute, attention", RUNS)
def test_every_category_agrees(name, recompute, attention):
    # eager: the explicit two-matmul path; fused: torch SDPA (its CPU flash kernel: q, k, v, output, logsumexp)
    spec, w = small(name)
    problem = fused_problem(spec) if attention == "fused" else None
    if problem:  # what SDPA cannot run as the fused kernel the plan models: refused by name, not measured wrong
        with pytest.raises(TfcalcError, match=re.escape(problem)):
            check_memory(spec, w, "bf16-mixed", "adamw", recompute, "meta", attention)
        return
    report = check_memory(spec, w, "bf16-mixed", "adamw", recompute, "meta", attention)
    rows = {r.category: r for r in report.rows}
    for category in ("weights", "gradients", "optimizer states", "master weights",
                     "activations (end of forward)"):
        assert rows[category].difference == 0, (category, rows[category])
    assert rows["peak (MemTracker)"].match and report.match


@pytest.mark.parametrize("precision, optimizer", [("fp32", "sgd"), ("bf16", "adamw"), ("fp16-mixed", "sgd")])
def test_other_recipes(precision, optimizer):
    spec, w = small("llama2-7b")
    report = check_memory(spec, w, precision, optimizer, "selective", "meta")
    assert all(r.difference == 0 for r in report.rows if not r.category.startswith("peak")), report.rows
    assert report.match


def test_cli(tmp_path):
    args = ["check", "-p", "gpt2", "-L", "2", "-N", "32", "-B", "2", "--memory"]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["match"] and {row["category"] for row in data["rows"]} >= {"weights", "activations (end of forward)"}
    assert data["attention"] == "fused"  # the default
    r = runner.invoke(app, [*args, "--recompute", "full"])
    assert r.exit_code == 0 and "every category agrees" in r.output
    r = runner.invoke(app, [*args, "--attention", "eager"])
    assert r.exit_code == 0 and "every category agrees" in r.output and "eager attention" in r.output
    for extra, message in ((["--optimizer", "adam8bit"], "cannot be measured"),
                           (["--precision", "fp8"], "precision='fp8'"),
                           (["--attention", "flash"], "attention='flash': expected one of fused, eager"),
                           (["--sliding-window", "8"], "--attention fused: "),
                           (["--train"], "--train: --memory checks a train step")):
        r = runner.invoke(app, [*args, *extra])
        assert r.exit_code == 2 and message in r.output, (extra, r.output)
    r = runner.invoke(app, ["check", "-p", "gpt2", "--precision", "fp32"])
    assert r.exit_code == 2 and "add --memory" in r.output
    r = runner.invoke(app, ["check", "-p", "gpt2", "--attention", "eager"])
    assert r.exit_code == 2 and "--attention: a training-memory flag; add --memory" in r.output


def test_exact_rows_allow_cudas_512_byte_blocks_and_nothing_else():
    from tfcalc.verify.memory_check import MemoryRow

    # 148 AdamW step counters of 4 B each take 512 B each on CUDA: 148 x 508 = 75,184 B over the plan
    assert MemoryRow("optimizer states", 995_519_056, 995_519_056 + 148 * 508, 0, slack=511 * 3 * 148).match
    assert not MemoryRow("optimizer states", 995_519_056, 995_519_056 + 148 * 508, 0).match  # not off CUDA
    assert not MemoryRow("weights", 100, 99, 0, slack=511).match  # under the plan is never rounding


def test_a_batch_of_one_keeps_one_pooled_row():
    # x[:, 0] of a [1, N, D] output is already contiguous: the reference model clones it, so that the pooler keeps
    # one row and not the whole output (what the plan counts)
    spec, _ = small("bert-base")
    report = check_memory(spec, Workload(seq_len=32, batch_size=1), "bf16-mixed", "adamw", "full", "meta")
    rows = {r.category: r for r in report.rows}
    assert rows["activations (end of forward)"].difference == 0


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_shared_experts_and_their_gate_keep_the_routers_input_once(recompute):
    # Qwen2-MoE's layout: shared experts and a sigmoid gate read the router's x (kept once); the gate keeps its
    # sigmoid output and the shared experts' sum, which the multiply reads
    spec = load_preset("mixtral-8x7b").replace(n_layers=2, d_model=64, n_heads=4, n_kv_heads=4, d_ff=128,
                                               vocab_size=100, seq_len=16, n_experts=4, n_shared_experts=2,
                                               d_shared_expert=96, shared_expert_gate=True)
    report = check_memory(spec, Workload(seq_len=16, batch_size=2), "bf16-mixed", "adamw", recompute, "meta")
    rows = {r.category: r for r in report.rows}
    assert rows["activations (end of forward)"].difference == 0, rows["activations (end of forward)"]


def test_a_cpu_step_the_machine_cannot_hold_is_refused_before_allocating(monkeypatch):
    import tfcalc.profile.memory as profile_memory
    from tfcalc import TfcalcError
    from tfcalc.verify import memory as measuring

    spec, w = small("llama2-7b")
    monkeypatch.setattr(profile_memory, "available_bytes", lambda device: 1024)  # a machine with 1 KiB free
    monkeypatch.setattr(measuring, "measure_training_memory", lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(TfcalcError, match=r"device='cpu': a train step of .* peaks at about .* GiB by the plan"):
        check_memory(spec, w, "bf16-mixed", "adamw", "none", "cpu")
    runner = CliRunner()
    r = runner.invoke(app, ["check", "--memory", "-p", "gpt2-xl", "--device", "cpu"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "use --device meta" in r.output
