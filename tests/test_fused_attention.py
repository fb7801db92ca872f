"""The training plan's attention kernel: fused (FlashAttention, torch SDPA's flash and memory-efficient kernels) by
default, eager on request; what each keeps, written out as arithmetic; the flag; and the smallest-layout search's
preference for the simplest layout among those with the fewest GPUs, with its reason."""

import json
from fractions import Fraction

import pytest
from typer.testing import CliRunner

from tfcalc import ModelSpec, TfcalcError, Workload, load_preset
from tfcalc.cli import app
from tfcalc.plan.training import Layout, _simplest, training_memory

runner = CliRunner()
H100 = 80 * 2**30  # bytes (the H100 SXM's 80 GB are GiB: 85,899,345,920 B, tfcalc gpus)


def gpt(layers: int = 2, h: int = 256, a: int = 4, s: int = 128, V: int = 1000, **kw) -> ModelSpec:
    # a GPT block as Korthikanti et al. model it: MHA, 4h MLP with GeLU, LayerNorm, learned positions
    return ModelSpec(n_layers=layers, d_model=h, n_heads=a, vocab_size=V, seq_len=s, max_positions=s, **kw)


def cores(m) -> int:
    """The bytes the attention cores keep, one microbatch (the component "attention": the core)."""
    return m.stage.activation_components["attention"]


@pytest.mark.parametrize("t", [1, 2, 4])
def test_fused_keeps_q_k_v_the_output_and_an_fp32_logsumexp_per_row(t):
    # per layer, bf16 (a = 2 bytes), b sequences of s tokens, a_h heads of d_h = h / a_h:
    # q, k, v 3 x sbh x 2; the output [b, a_h, s, d_h] sbh x 2; the logsumexp [b, a_h, s] in fp32: b a_h s x 4;
    # all split over the t tensor-parallel GPUs (by heads). Eager keeps the probabilities b a_h s^2 x 2 instead.
    s, b, h, a_h, L = 128, 2, 256, 4, 2
    spec, w = gpt(L, h, a_h, s), Workload(batch_size=b, seq_len=s)
    fused = training_memory(spec, w, layout=Layout(tp=t))  # the default
    eager = training_memory(spec, w, layout=Layout(tp=t), attention="eager")
    sbh = s * b * h
    assert fused.attention == "fused" and eager.attention == "eager"
    assert cores(fused) == L * Fraction(3 * sbh * 2 + sbh * 2 + b * a_h * s * 4, t)
    assert cores(eager) == L * Fraction(3 * sbh * 2 + b * a_h * s * s * 2, t)
    # nothing else changes
    rest = lambda m: {k: v for k, v in m.stage.activation_components.items() if k != "attention"}  # noqa: E731
    assert rest(fused) == rest(eager)
    # Korthikanti et al.'s published figure without the 5as/h term: sbh(10 + 24/t) per layer
    assert fused.korthikanti == L * sbh * (10 + Fraction(24, t))


def test_fused_with_grouped_query_attention_keeps_k_and_v_at_the_kv_heads():
    # Llama 3 70B (meta-llama/Meta-Llama-3-70B config.json: 64 heads of 128, 8 key/value heads) at 8,192 tokens,
    # B = 1, bf16: q [1, 64, 8192, 128], k and v [1, 8, 8192, 128], the output like q, the logsumexp [1, 64, 8192]
    spec = load_preset("llama3-70b")
    m = training_memory(spec, Workload(seq_len=8192))
    s, H, Hkv, d = 8192, 64, 8, 128
    per_layer = (s * H * d + 2 * s * Hkv * d) * 2 + s * H * d * 2 + H * s * 4
    assert cores(m) == spec.n_layers * per_layer
    eager = training_memory(spec, Workload(seq_len=8192), attention="eager")
    assert cores(eager) == spec.n_layers * ((s * H * d + 2 * s * Hkv * d) * 2 + H * s * s * 2)


def test_selective_recomputation_under_fused_keeps_only_q_k_v_and_brings_one_cores_output_back():
    # Korthikanti et al.'s selective recomputation reruns the attention core in backward (Megatron checkpoints the
    # fused core too): what the kernel keeps beyond its inputs (the output and the logsumexp) is not kept; in
    # backward one layer's comes back at a time
    s, b, h, a_h, L = 128, 2, 256, 4, 3
    spec, w = gpt(L, h, a_h, s), Workload(batch_size=b, seq_len=s)
    none = training_memory(spec, w)
    sel = training_memory(spec, w, recompute="selective")
    sbh = s * b * h
    assert cores(sel) == L * 3 * sbh * 2
    assert none.activations - sel.activations == L * (sbh * 2 + b * a_h * s * 4)
    assert sel.stage.block_transient - none.stage.block_transient == sbh * 2 + b * a_h * s * 4
    # full recomputation keeps each block's input whatever the kernel
    full = [training_memory(spec, w, recompute="full", attention=k).activations for k in ("fused", "eager")]
    assert full[0] == full[1]


def test_the_default_trains_a_70b_at_8k_on_h100s_without_context_parallelism():
    # with eager attention's probabilities (64 heads x 8192^2 x 2 B = 8 GiB per layer) nothing fits without
    # context parallelism; the fused kernel keeps none
    spec, w = load_preset("llama3-70b"), Workload(seq_len=8192)
    fused = training_memory(spec, w, capacity_bytes=H100, gpu_name="H100 SXM", search={})
    assert fused.smallest.layout.cp == 1 and fused.smallest.peak <= H100
    assert "context" not in fused.smallest.reason
    eager = training_memory(spec, w, capacity_bytes=H100, gpu_name="H100 SXM", search={}, attention="eager")
    assert eager.smallest.layout.cp > 1
    assert "nothing fits without context or sequence parallelism" in eager.smallest.reason


def _fitting_on(spec, w, gpus: int, recompute: str = "none") -> list[Layout]:
    """Every layout of exactly `gpus` GPUs (cp 1, no sp, tp 1-8, pp and dp powers of two, ZeRO 0-3) that fits."""
    out = []
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8, 16, 32):
            dp, rest = divmod(gpus, tp * pp)
            if rest or dp < 1:
                continue
            for zero in range(4):
                layout = Layout(dp=dp, zero=zero, tp=tp, pp=pp)
                if training_memory(spec, w, recompute=recompute, layout=layout, capacity_bytes=H100).fits:
                    out.append(layout)
    return out


@pytest.mark.parametrize("preset, seq_len", [("llama2-7b", 4096), ("llama3-8b", 8192)])
def test_the_search_prefers_data_parallel_then_zero_then_tensor_then_pipeline(preset, seq_len):
    spec, w = load_preset(preset), Workload(seq_len=seq_len)
    m = training_memory(spec, w, capacity_bytes=H100, gpu_name="H100 SXM", search={})
    best = m.smallest.layout
    fitting = _fitting_on(spec, w, best.gpus)
    assert best in fitting
    # the simplest of them: no pipeline before pipeline, less tensor parallelism, then the lowest ZeRO stage
    assert min(fitting, key=_simplest) == best
    # and none fits on fewer GPUs
    assert not any(_fitting_on(spec, w, n) for n in (1, 2, 4) if n < best.gpus)
    assert m.smallest.reason.startswith(f"the fewest GPUs that fit ({best.gpus:,} GPU")


def test_a_zero_stage_is_preferred_to_tensor_parallelism_on_as_many_gpus():
    # Llama 2 7B (6.74B parameters) at 4,096 tokens (B = 1) on 80 GiB: plain data parallelism keeps 16 bytes a
    # parameter (108 GB) and does not fit on one GPU; on 2 GPUs both ZeRO-1 over dp 2 and tp 2 (no ZeRO) fit. The
    # simpler one, data parallel with ZeRO, wins (before, the lower ZeRO stage won: tp 2)
    spec, w = load_preset("llama2-7b"), Workload(seq_len=4096)
    m = training_memory(spec, w, capacity_bytes=H100, gpu_name="H100 SXM", search={})
    assert m.smallest.layout == Layout(dp=2, zero=1)
    assert training_memory(spec, w, layout=Layout(tp=2), capacity_bytes=H100).fits
    assert not training_memory(spec, w, layout=Layout(dp=2), capacity_bytes=H100).fits
    assert m.smallest.reason == ("the fewest GPUs that fit (2 GPUs); plain data parallelism does not fit on 2 GPUs; "
                                 "ZeRO-1 is the lowest stage that does")


def test_the_reason_names_the_fields_given():
    spec, w = load_preset("llama2-7b"), Workload(seq_len=4096)
    m = training_memory(spec, w, capacity_bytes=H100, search={"tp": 2})
    assert m.smallest.layout.tp == 2 and m.smallest.reason.endswith("(tp 2 as given)")


def test_attention_is_validated_like_the_other_choices():
    spec, w = gpt(), Workload(seq_len=128)
    with pytest.raises(TfcalcError, match=r"^attention='flash': expected one of fused, eager$"):
        training_memory(spec, w, attention="flash")


def test_cli_memory_attention_flag():
    args = ["memory", "-p", "llama3-70b", "--phase", "train", "--seq-len", "8192", "--gpu", "h100-sxm"]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["attention"] == "fused" and data["smallest_layout"]["cp"] == 1
    assert data["smallest_layout"]["reason"].startswith("the fewest GPUs that fit")
    eager = json.loads(runner.invoke(app, [*args, "--attention", "eager", "--json"]).output)
    assert eager["attention"] == "eager" and eager["activations_bytes"] > data["activations_bytes"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "fused attention" in r.output and "Smallest layout: the fewest GPUs" in r.output
    for extra, message in ((["--attention", "flash"], "attention='flash': expected one of fused, eager"),
                           (["--attention", "fused,eager"], "--attention 'fused,eager': one value only")):
        r = runner.invoke(app, [*args, *extra])
        assert r.exit_code == 2 and message in r.output and r.output.count("\n") == 1, (extra, r.output)
    r = runner.invoke(app, ["memory", "-p", "llama3-70b", "--attention", "eager", "--context", "4096"])
    assert r.exit_code == 2 and "--context: an inference flag; --attention plans a train step" in r.output
    r = runner.invoke(app, ["memory", "-p", "llama3-70b", "--attention", "eager", "--phase", "decode"])
    assert r.exit_code == 2 and "--attention: a training flag" in r.output


def test_cli_train_attention_flag():
    # the kernel changes the hardware FLOPs (a fused backward computes the scores again), not the model FLOPs
    args = ["train", "-p", "gpt2", "--tokens", "1M", "--json"]
    fused = json.loads(runner.invoke(app, args).output)
    eager = json.loads(runner.invoke(app, [*args, "--attention", "eager"]).output)
    assert (fused["attention"], eager["attention"]) == ("fused", "eager")
    assert fused["flops"] == eager["flops"] and fused["hardware_flops"] > eager["hardware_flops"]
    for extra, message in ((["--attention", "flash"], "attention='flash': expected one of fused, eager"),
                           (["--flops-budget", "1e21", "--attention", "eager"], "--attention eager: with "
                                                                                 "--flops-budget")):
        r = runner.invoke(app, ["train", "-p", "gpt2", *([] if "--flops-budget" in extra else ["--tokens", "1M"]),
                                *extra])
        assert r.exit_code == 2 and message in r.output and r.output.count("\n") == 1, (extra, r.output)
