"""Training memory per GPU: published figures (the ZeRO paper, Korthikanti et al.) or the arithmetic shown."""

import json
from fractions import Fraction

import pytest
from typer.testing import CliRunner

from tfcalc import ModelSpec, TfcalcError, Workload, count, load_preset
from tfcalc.cli import app
from tfcalc.plan.training import Layout, model_states, state_bytes, PRECISIONS, training_memory

runner = CliRunner()
GB = 10**9


@pytest.mark.parametrize("zero, gb", [(0, "120"), (1, "31.4"), (2, "16.6"), (3, "1.9")])
def test_zero_paper_figure_1(zero, gb):
    # Rajbhandari et al. 2020 (ZeRO), Figure 1: 7.5B parameters, 64 GPUs, mixed-precision Adam (K = 12):
    # (2 + 2 + K) x 7.5B = 120 GB; P_os 31.4 GB; P_os+g 16.6 GB; P_os+g+p 1.9 GB per GPU
    psi, nd = 7_500_000_000, 64
    m = model_states(psi, "bf16-mixed", "adamw", zero=zero, dp=nd)
    expected = {0: (2 + 2 + 12) * psi, 1: 2 * psi + 2 * psi + Fraction(12 * psi, nd),
                2: 2 * psi + Fraction(14 * psi, nd), 3: Fraction(16 * psi, nd)}[zero]
    assert m.total == expected
    assert f"{m.total / GB:.{len(gb.split('.')[1]) if '.' in gb else 0}f}" == gb


def gpt(l: int = 2, h: int = 256, a: int = 4, s: int = 128, V: int = 1000, **kw) -> ModelSpec:
    # a GPT block as Korthikanti et al. model it: MHA, 4h MLP with GeLU, LayerNorm, learned positions
    return ModelSpec(n_layers=l, d_model=h, n_heads=a, vocab_size=V, seq_len=s, max_positions=s, **kw)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_activations_are_korthikanti_without_dropout(t):
    # Korthikanti et al. 2022, sec. 4.1: per layer sbh(34 + 5as/h) bytes in 16 bits, of which dropout is 2sbh
    # (two masks) + 3as^2b (the attention mask and its output); LayerNorm's fp32 statistics (mean, rstd per
    # row: 2 x 4 x sb each) are not in the paper. With tensor parallelism (no sequence parallelism) 10sbh of it
    # stays whole on every GPU: sbh(10 + 24/t + 5as/(ht)).
    s, b, h, a, L = 128, 2, 256, 4, 2
    spec = gpt(L, h, a, s, batch_size=b)
    # eager attention: its softmax probabilities kept, as in the paper (the 2as^2b of 5as^2b beside dropout's)
    m = training_memory(spec, Workload(batch_size=b, seq_len=s), "bf16-mixed", "adamw", "none", Layout(tp=t),
                        attention="eager")
    layers = sum(v for k, v in m.stage.activation_components.items() if k.startswith(("attention", "mlp")))
    sbh = s * b * h
    per_layer = 8 * sbh + Fraction(24 * sbh, t) + Fraction(2 * a * s * s * b, t) + 2 * (2 * 4 * s * b)
    assert layers == L * per_layer
    assert m.korthikanti == L * sbh * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t))


def test_sequence_parallel_and_recompute_forms():
    # with sequence parallelism everything is split: sbh/t (34 + 5as/h); selective drops 5as/h; full keeps 2sbh
    s, b, h, a, L, t = 128, 1, 256, 4, 4, 4
    spec = gpt(L, h, a, s)
    w = Workload(seq_len=s)
    sbh = s * b * h
    layers = lambda m: sum(v for k, v in m.stage.activation_components.items()  # noqa: E731
                           if k.startswith(("attention", "mlp", "block")))
    # Korthikanti et al.'s (Megatron-LM's) convention: a column-parallel linear keeps its input sequence-sharded
    sp = training_memory(spec, w, recompute="none", layout=Layout(tp=t, sp=True, framework="megatron"),
                         attention="eager")
    assert layers(sp) == L * (Fraction(32 * sbh + 2 * a * s * s * b, t) + Fraction(2 * 2 * 4 * s * b, t))
    # torch's (DTensor's): q/k/v and the MLP's up projection keep their all-gathered input, 2 bytes * sbh each
    # instead of its 1/t share
    torch_sp = training_memory(spec, w, recompute="none", layout=Layout(tp=t, sp=True), attention="eager")
    assert layers(torch_sp) - layers(sp) == L * 2 * (2 * sbh - Fraction(2 * sbh, t))
    assert sp.korthikanti == L * Fraction(sbh, t) * (34 + Fraction(5 * a * s, h))
    sel = training_memory(spec, w, recompute="selective", layout=Layout(tp=t, sp=True, framework="megatron"),
                          attention="eager")
    assert layers(sel) == L * (Fraction(32 * sbh, t) + Fraction(2 * 2 * 4 * s * b, t))
    assert sel.korthikanti == L * Fraction(34 * sbh, t)
    full = training_memory(spec, w, recompute="full", layout=Layout(tp=t, sp=True), attention="eager")
    assert layers(full) == L * Fraction(2 * sbh, t) == full.korthikanti


def test_pipeline_first_stage_keeps_l_layers_of_activations():
    # Korthikanti et al. sec. 4.2.3: under 1F1B the first stage keeps pp microbatches of L/pp layers
    spec = gpt(l=8)
    w = Workload(seq_len=128)
    one = training_memory(spec, w, recompute="selective")
    for pp in (2, 4, 8):
        m = training_memory(spec, w, recompute="selective", layout=Layout(pp=pp))
        first = [x for x in (m,) if x.stage.stage == 0]
        if first:
            blocks = lambda r: sum(v for k, v in r.stage.activation_components.items()  # noqa: E731
                                   if k.startswith(("attention", "mlp")))
            assert blocks(m) * pp == blocks(one) * 1  # per microbatch L/pp layers; pp of them in flight
            assert m.stage.microbatches == pp


def test_parameters_per_gpu_add_up_to_the_model():
    for name in ("llama2-7b", "mixtral-8x7b", "t5-small", "bert-base", "gpt2"):
        spec = load_preset(name)
        w = Workload(seq_len=spec.seq_len, src_len=spec.seq_len if spec.is_encoder_decoder else None)
        total = count(spec).params.total
        assert training_memory(spec, w).stage.params == total
        for pp in (2, 3):  # every stage's parameters add up to the model's (gpt2's tied head: a copy on the last)
            m = training_memory(spec, w, layout=Layout(pp=pp))
            copy = spec.vocab_size * spec.d_model if spec.tie_embeddings and spec.lm_head else 0
            assert sum(m.n_stages_params) == total + copy


def test_tensor_parallel_splits_what_megatron_splits():
    # llama2-7b at tp = 2: every linear and the vocabulary split in two; the 65 RMSNorm weights (4096 each) whole
    spec = load_preset("llama2-7b")
    total = count(spec).params.total
    norms = (2 * 32 + 1) * 4096
    m = training_memory(spec, Workload(seq_len=4096), layout=Layout(tp=2))
    assert m.stage.params == (total - norms) // 2 + norms


def test_recipes_bytes_per_parameter():
    spec = load_preset("gpt2")
    n = count(spec).params.total
    w = Workload(seq_len=1024)
    for precision, per in (("fp32", (4, 4, 8, 0)), ("bf16-mixed", (2, 2, 8, 4)), ("fp16-mixed", (2, 2, 8, 4)),
                           ("bf16", (2, 2, 4, 0))):
        m = training_memory(spec, w, precision, "adamw")
        tensors = 2 + 12 * 12 + 2  # token and position tables; per block 4 linears + 2 LayerNorms (w, b each); ln_f
        counters = 4 * tensors  # torch's AdamW: one fp32 step count per tensor
        assert (m.weights, m.gradients, m.optimizer_states - counters, m.master_weights) == tuple(n * x for x in per)
    assert training_memory(spec, w, "fp32", "sgd").optimizer_states == 4 * n  # one momentum buffer
    # bitsandbytes: 2 x (1 byte + an fp32 absmax per 256) for tensors of >= 4096 values, else 2 x fp32
    assert state_bytes(4096, "adam8bit", PRECISIONS["fp32"]) == 2 * (4096 + 4 * 16)
    assert state_bytes(4095, "adam8bit", PRECISIONS["fp32"]) == 2 * 4 * 4095
    assert state_bytes(4097, "adam8bit", PRECISIONS["bf16"]) == 2 * (4097 + 4 * 17)


def test_experts_are_split_by_ep_and_sharded_over_their_data_parallel_group():
    spec = load_preset("mixtral-8x7b")
    w = Workload(seq_len=4096)
    experts = 32 * 8 * 3 * 4096 * 14336
    m1 = training_memory(spec, w, optimizer="sgd", layout=Layout(dp=8, zero=1))
    m8 = training_memory(spec, w, optimizer="sgd", layout=Layout(dp=8, zero=1, ep=8))
    assert m1.stage.params - m8.stage.params == experts - experts // 8
    # ZeRO-1 over dp = 8; the experts' optimizer states (one fp32 momentum) over dp / ep = 1 GPU
    dense = m8.stage.params - experts // 8
    assert m8.optimizer_states == -(-dense * 4 // 8) + experts // 8 * 4


def test_smallest_layout_keeps_the_flags_given():
    spec = load_preset("llama2-7b")
    w = Workload(seq_len=4096)
    h100 = 80 * 2**30
    m = training_memory(spec, w, recompute="selective", capacity_bytes=h100, search={"tp": 2})
    assert m.smallest.layout.tp == 2 and m.smallest.peak <= h100
    assert all(training_memory(spec, w, recompute="selective", layout=Layout(dp=d, zero=z, tp=2)).peak > h100
               for d in (1, 2, 4, 8, 16) for z in range(4) if 2 * d < m.smallest.layout.gpus)


def test_errors_name_the_field():
    spec = load_preset("llama2-7b")
    w = Workload(seq_len=4096)
    for layout, field in ((Layout(tp=3), "tp=3"), (Layout(ep=2, dp=2), "ep=2"), (Layout(pp=33), "pp=33"),
                          (Layout(cp=3), "cp=3"), (Layout(zero=4), "zero=4"), (Layout(dp=0), "dp=0")):
        with pytest.raises(TfcalcError, match=field):
            training_memory(spec, w, layout=layout)
    with pytest.raises(TfcalcError, match="precision='fp4'"):
        training_memory(spec, w, "fp4")
    with pytest.raises(TfcalcError, match="phase 'train'"):
        training_memory(spec, Workload(phase="decode", seq_len=1, context=10))


def test_cli_training_flags():
    r = runner.invoke(app, ["memory", "-p", "llama2-7b", "--zero", "3", "--dp", "8", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    n = count(load_preset("llama2-7b")).params.total
    assert data["weights_bytes"] == -(-2 * n // 8) and data["layout"]["gpus"] == 8
    r = runner.invoke(app, ["memory", "-p", "llama2-7b", "--gpu", "h100-sxm", "--recompute", "full"])
    assert r.exit_code == 0 and "smallest layout that fits" in r.output
    for args, message in ((["--dp", "2", "--phase", "decode"], "--dp: a training flag"),
                          (["--zero", "1", "--dtype", "int8"], "--dtype: an inference flag"),
                          (["--precision", "fp64"], "precision='fp64'"), (["--tp", "5"], "tp=5")):
        r = runner.invoke(app, ["memory", "-p", "llama2-7b", *args])
        assert r.exit_code == 2 and message in r.output, (args, r.output)


def test_a_long_context_that_fits_nowhere_without_cp_gets_cp_and_sp():
    # Llama 3.1 405B at its 131,072-token context, full recomputation, on 80 GiB H100s: with cp = 1 even a block's
    # input per stage is too much at every tp, pp and dp tried; the search then tries context and sequence
    # parallelism, and the layout it gives fits, with no layout of fewer GPUs among those it stands for
    spec, w, h100 = load_preset("llama3.1-405b"), Workload(seq_len=131_072), 80 * 2**30
    m = training_memory(spec, w, recompute="full", capacity_bytes=h100, search={})
    best = m.smallest.layout
    # (sequence parallelism is searched on, and only means something with tp > 1)
    assert best.cp > 1 and (best.sp or best.tp == 1) and m.smallest.peak <= h100
    assert training_memory(spec, w, recompute="full", layout=best).peak == m.smallest.peak
    # the same sizes with cp 1 (the GPUs it saves given to data parallelism) do not fit
    assert training_memory(spec, w, recompute="full", layout=Layout(dp=best.dp * best.cp, zero=best.zero, tp=best.tp,
                                                                    pp=best.pp, sp=True)).peak > h100
    # a cp given is kept
    assert training_memory(spec, w, recompute="full", capacity_bytes=h100, search={"cp": 8}).smallest.layout.cp == 8
