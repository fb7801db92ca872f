"""A LoRA fine-tuning step's memory: the plan (tfcalc.plan.training with adapters) held against torch's MemTracker on
the frozen reference model with adapters (tfcalc.verify.adapters; FakeTensorMode, nothing allocated), every category
to the byte but the peak (an estimate, within 10%); the published Llama-3-8B pin; the commands' flags and refusals."""

import json

import pytest
from typer.testing import CliRunner

from tfcalc import Adapters, TfcalcError, Workload, load_preset
from tfcalc.cli import app
from tfcalc.plan.train import mfu_of_run
from tfcalc.plan.training import training_memory
from tfcalc.verify.memory_check import check_memory

runner = CliRunner()

SMALL = {
    "llama2-7b": dict(n_layers=2, d_model=128, n_heads=4, n_kv_heads=2, d_ff=192, vocab_size=500),
    "qwen3-8b": dict(n_layers=2, d_model=128, n_heads=4, n_kv_heads=2, d_head=48, d_ff=192, vocab_size=500),
    "gemma2-9b": dict(n_layers=2, d_model=128, n_heads=4, n_kv_heads=2, d_head=48, d_ff=192, vocab_size=500,
                      sliding_window=16),
    "gpt2": dict(n_layers=2, vocab_size=500),
}


def small(name: str):
    return load_preset(name).replace(seq_len=32, **SMALL[name]), Workload(seq_len=32, batch_size=2)


CASES = [
    ("llama2-7b", "all-linear", "none"), ("llama2-7b", "all-linear", "selective"), ("llama2-7b", "all-linear", "full"),
    ("llama2-7b", "attention", "none"), ("llama2-7b", "q,v", "none"), ("llama2-7b", "mlp", "none"),
    ("qwen3-8b", "all-linear", "none"), ("gemma2-9b", "attention", "none"), ("gpt2", "all-linear", "none"),
]


@pytest.mark.parametrize("name,targets,recompute", CASES)
def test_lora_step_against_memtracker(name, targets, recompute):
    spec, workload = small(name)
    # fused attention (the default) where torch's SDPA runs the kernel the plan models; Gemma 2's sliding windows
    # only as a mask it keeps: eager there
    attention = "eager" if spec.sliding_window else "fused"
    report = check_memory(spec, workload, recompute=recompute, adapters=Adapters(8, targets), attention=attention)
    rows = {r.category: r for r in report.rows}
    for category in ("weights", "gradients", "optimizer states", "master weights", "activations (end of forward)"):
        assert rows[category].difference == 0, (category, rows[category])
    assert report.match, [r for r in report.rows if not r.match]


def test_adapters_train_alone_in_the_measured_step():
    # rank 8 on q and v of 2 blocks of D=128, 2 kv heads of 32: 2 * 8 * ((128+128) + (128+64)) trainable
    spec, workload = small("llama2-7b")
    trainable = 2 * 8 * ((128 + 128) + (128 + 64))
    report = check_memory(spec, workload, adapters=Adapters(8, "q,v"))
    rows = {r.category: r for r in report.rows}
    assert rows["gradients"].measured == 2 * trainable  # bf16 gradients of the adapters alone
    assert rows["master weights"].measured == 4 * trainable
    # AdamW: two fp32 states each, and a 4-byte step counter per tensor (an A and a B per adapted linear)
    assert rows["optimizer states"].measured == 8 * trainable + 4 * 2 * 2 * 2


def test_llama3_8b_lora_states_are_the_adapters_alone():
    # 41,943,040 trainable (32 x 16 x (q 4096+4096, k 4096+1024, v 4096+1024, o 4096+4096, gate, up 4096+14336,
    # down 14336+4096)); bf16-mixed: 2 bytes of weight and gradient, 4 of master, 8 of AdamW states each, and 4 per
    # tensor for AdamW's step counter (32 layers x 7 linears x A and B = 448 tensors)
    n = 41_943_040
    m = training_memory(load_preset("llama3-8b"), Workload(seq_len=8192), adapters=Adapters(16))
    assert m.gradients == 2 * n
    assert m.master_weights == 4 * n
    assert m.optimizer_states == 8 * n + 4 * 448
    assert m.weights == 2 * (8_030_261_248 + n)  # the frozen model (LlamaForCausalLM's 8,030,261,248) and adapters
    assert m.to_dict()["trainable_params_per_gpu"] == n


def test_mfu_of_a_lora_run():
    # MFU = the fine-tuning step's FLOPs per token x tokens/s over the peak (count's finetune figures)
    from tfcalc import count

    spec = load_preset("llama3-8b")
    tuned = count(spec, adapters=Adapters(16)).finetune
    run = mfu_of_run(spec, 3000.0, 1, 989_000_000_000_000, adapters=Adapters(16))
    assert run["mfu"] == pytest.approx(tuned.train_step / tuned.tokens * 3000 / 989e12, rel=1e-12)


def test_refusals():
    spec, workload = small("llama2-7b")
    with pytest.raises(TfcalcError, match=r"^tp=2: adapters are planned with data parallelism and ZeRO only"):
        training_memory(spec, workload, layout={"tp": 2}, adapters=Adapters(8))
    mixtral = load_preset("mixtral-8x7b").replace(n_layers=2, d_model=128, n_heads=4, n_kv_heads=2, d_ff=192,
                                                  vocab_size=500, seq_len=32)
    with pytest.raises(TfcalcError, match=r"moe/router is adapted as a parameter"):
        check_memory(mixtral, workload, adapters=Adapters(8))
    with pytest.raises(TfcalcError, match=r"^dora=True: DoRA's memory is not modelled"):
        training_memory(spec, workload, adapters=Adapters(8, dora=True))
    with pytest.raises(TfcalcError, match=r"^dora=True: DoRA's memory is not modelled"):
        check_memory(spec, workload, adapters=Adapters(8, dora=True))


@pytest.mark.parametrize("args,message", [
    (["count", "-p", "llama3-8b", "--lora-rank", "0"], "lora_rank=0: expected a positive integer"),
    (["count", "-p", "llama3-8b", "--lora-rank", "-4"], "lora_rank=-4: expected a positive integer"),
    (["count", "-p", "gpt2", "--lora-rank", "8", "--lora-targets", "gate"], "lora_targets='gate': gpt2 has no gate"),
    (["count", "-p", "gpt2", "--lora-rank", "8", "--lora-targets", "q,qq"], "lora_targets='q,qq': 'qq' is not a"),
    (["count", "-p", "llama3-8b", "--lora-rank", "2048", "--lora-targets", "v"], "lora_rank=2048: past the width"),
    (["count", "-p", "gpt2", "--dora"], "dora=True: DoRA needs a LoRA rank"),
    (["memory", "-p", "gpt2", "--lora-targets", "q"], "lora_targets='q': adapter targets need a LoRA rank"),
    (["count", "-p", "gpt2", "-N", "64,128", "--lora-rank", "8"], "--lora-rank=8: adapters are counted for one"),
    (["memory", "-p", "gpt2", "--lora-rank", "8", "--context", "100"], "--context: an inference flag"),
    (["check", "-p", "gpt2", "--lora-rank", "8"], "--lora-rank=8: a training-memory flag; add --memory"),
    (["train", "-p", "gpt2", "--flops-budget", "1e20", "--lora-rank", "8"], "--lora-rank=8: --flops-budget sizes"),
])
def test_cli_refusals(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"tfcalc: error: {message}" or result.output.startswith(
        f"tfcalc: error: {message}"), result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cli_count_and_memory_json():
    result = runner.invoke(app, ["count", "-p", "llama3-8b", "--lora-rank", "16", "--json"])
    assert result.exit_code == 0, result.output
    tuned = json.loads(result.output)["finetune"]
    assert tuned["trainable_params"] == 41_943_040 and tuned["frozen_params"] == 8_030_261_248
    result = runner.invoke(app, ["memory", "-p", "llama3-8b", "--lora-rank", "16", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["gradients_bytes"] == 2 * 41_943_040 and plan["adapters"]["rank"] == 16


def test_cli_check_memory_lora():
    result = runner.invoke(app, ["check", "--memory", "-p", "llama2-7b", "--n-layers", "2", "--d-model", "128",
                                 "--n-heads", "4", "--n-kv-heads", "2", "--d-ff", "192", "--vocab-size", "500",
                                 "--seq-len", "32", "--lora-rank", "8", "--lora-targets", "attention", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["match"] and all(r["difference"] == 0 for r in report["rows"][:5])


def test_qlora_freezes_the_model_as_the_quantized_checkpoint_stores_it():
    # QLoRA: Llama-2-7B's frozen weights as bitsandbytes stores them in NF4 with double quantization
    # (tests/test_quant.py shows the arithmetic: 32 x (4 x 8,655,936 + 3 x 23,260,992) quantized + 524,820,480 of
    # bf16 tables, norms and head = 3,865,835,520); the adapters' gradients, states and masters are LoRA's
    spec, w = load_preset("llama2-7b"), Workload(seq_len=512)
    qlora = training_memory(spec, w, adapters=Adapters(16), quant="nf4")
    lora = training_memory(spec, w, adapters=Adapters(16))
    assert qlora.to_dict()["frozen_weights_bytes"] == 3_865_835_520
    assert lora.to_dict()["frozen_weights_bytes"] == 2 * 6_738_415_616  # LlamaForCausalLM's parameters in bf16
    same = ("gradients", "optimizer_states", "master_weights", "activations")
    assert [getattr(qlora, f) for f in same] == [getattr(lora, f) for f in same]
    # bitsandbytes dequantizes one weight to bf16 for each matmul: the largest, 4096 x 11008, is a transient more
    assert qlora.stage.block_transient - lora.stage.block_transient == 4096 * 11008 * 2
    assert qlora.to_dict()["quant"]["format"] == "nf4"


def test_a_quantized_model_trains_only_adapters():
    spec, w = small("llama2-7b")
    with pytest.raises(TfcalcError, match=r"quant='nf4': a quantized model trains adapters on its frozen weights"):
        training_memory(spec, w, quant="nf4")
    r = CliRunner().invoke(app, ["memory", "-p", "llama2-7b", "--phase", "train", "--quant", "nf4"])
    assert r.exit_code == 2 and "--quant: an inference flag" in r.output
    r = CliRunner().invoke(app, ["memory", "-p", "llama2-7b", "--lora-rank", "16", "--quant", "nf4", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["frozen_weights_bytes"] == 3_865_835_520
