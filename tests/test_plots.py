"""Figures (issue 13): the data behind each one, read off the Figure object (bars' values, lines' data), held to
the library's figures and to published numbers; the files; and one clear line when matplotlib is missing."""

import subprocess
import os
import sys
from fractions import Fraction

import pytest
from typer.testing import CliRunner

import matplotlib  # noqa: E402,F401  (the test extra has it: a missing one is an error, not a skip)

from tfcalc import TfcalcError, Workload, count, load_preset  # noqa: E402
from tfcalc import plot  # noqa: E402
from tfcalc.cli import app  # noqa: E402
from tfcalc.plan.gpus import lookup  # noqa: E402
from tfcalc.plan.roofline import inference_plan  # noqa: E402
from tfcalc.sweep import Model, count_points, expand  # noqa: E402

runner = CliRunner()
GiB = 2**30
INSTALL = "tfcalc: error: --plot needs matplotlib: pip install 'tfcalc[plot]'"


def counted(spec, fixed=None, **axes):
    return list(count_points(expand([Model(spec, "test")], fixed or {}, axes)))


def line(ax, gid):
    (found,) = [artist for artist in ax.lines if artist.get_gid() == gid]
    return found


def bars(ax) -> dict[str, list[float]]:
    return {c.get_label(): [float(v) for v in c.datavalues] for c in ax.containers}


def caption(fig) -> str:
    (text,) = [t for t in fig.texts if t.get_gid() == "caption"]
    return text.get_text().replace("\n", " ")


def captured(monkeypatch, *args):
    """Run the command and return the Figure it saved (and its result)."""
    figures = []
    real = plot.save

    def keep(fig, path):
        figures.append(fig)
        return real(fig, path)

    monkeypatch.setattr(plot, "save", keep)
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    (fig,) = figures
    return fig, r


# ---- FLOPs by component over a sweep --------------------------------------------------------------

def test_flops_per_token_by_component_over_the_length():
    spec = load_preset("llama2-7b")
    lengths = [1024, 2048, 4096, 8192, 16384, 32768]
    fig = plot.components_over(counted(spec, seq_len=lengths), "seq_len")
    (ax,) = fig.axes
    series = bars(ax)
    expected = {n: count(spec.replace(seq_len=n)) for n in lengths}
    # the components with FLOPs, in model order: the bars stacked from the bottom
    assert list(series) == [c for c in expected[1024].components() if expected[1024].flops.components.get(c)]
    for name, values in series.items():
        assert values == [float(Fraction(expected[n].flops.components[name], n)) for n in lengths]
    # the MLP's bands are flat per token: 2 x 3 x D x F per layer, 32 layers
    assert series["mlp/up"] == [2 * 4096 * 11008 * 32] * len(lengths)
    # the scores grow with N: 2 x N x D per layer and token
    assert series["attention/scores"] == [2 * n * 4096 * 32 for n in lengths]
    total = line(ax, "total")
    assert list(total.get_xdata()) == lengths
    assert list(total.get_ydata()) == [float(Fraction(expected[n].flops.forward, n)) for n in lengths]
    assert "FLOPs per token" in ax.get_ylabel() and "tokens" in ax.get_xlabel()
    assert ax.get_title().startswith("llama2-7b") and ax.get_xscale() == "log"
    assert "llama2-7b" in caption(fig) and "train: B=1, 1,024 new tokens" in caption(fig)


def test_the_crossover_marked_is_the_counts_own():
    spec = load_preset("llama2-7b")
    fig = plot.components_over(counted(spec, seq_len=[2048, 4096, 8192, 16384]), "seq_len")
    (ax,) = fig.axes
    marked = line(ax, "crossover").get_xdata()
    assert list(marked) == [count(spec).crossover.seq_len] * 2
    # per layer and token: attention 8 D^2 + 4 D N (q, k, v, out; scores and values), the gated MLP 6 D F:
    # equal at N = (6 F - 8 D) / 4 = (6 x 11008 - 8 x 4096) / 4
    assert marked[0] == (6 * 11008 - 8 * 4096) // 4 == 8320
    beyond = plot.components_over(counted(spec, seq_len=[256, 512, 1024]), "seq_len")
    assert not [a for a in beyond.axes[0].lines if a.get_gid() == "crossover"]
    assert "N ≥ 8,320, outside the range shown" in caption(beyond)


def test_a_batch_sweep_stacks_the_whole_step():
    spec = load_preset("gpt2")
    batches = [1, 8, 64]
    fig = plot.components_over(counted(spec, batch_size=batches), "batch_size")
    series = bars(fig.axes[0])
    assert series["head"] == [float(2 * b * 1024 * 768 * 50257) for b in batches]  # 2 B N D V
    assert "per step" in fig.axes[0].get_ylabel()


def test_a_family_shows_parameters_and_flops_per_token():
    names = ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"]
    pairs = [p for name in names for p in counted(load_preset(name))]
    fig = plot.family(pairs)
    ax_p, ax_f = fig.axes
    # Radford et al. 2019's four sizes, as GPT2LMHeadModel counts them
    assert bars(ax_p) == {"total": [124_439_808.0, 354_823_168.0, 774_030_080.0, 1_557_611_200.0]}
    assert bars(ax_f)["forward FLOPs per token"] == [
        float(Fraction(count(load_preset(n)).flops.forward, 1024)) for n in names]
    assert [t.get_text() for t in ax_p.get_xticklabels()] == names
    moe = plot.family([p for name in ("llama2-7b", "mixtral-8x7b") for p in counted(load_preset(name))])
    assert bars(moe.axes[0])["active (per token)"] == [6_738_415_616.0, 12_879_925_248.0]


def test_two_swept_flags_are_refused_before_any_counting():
    r = runner.invoke(app, ["count", "-p", "gpt2", "-N", "128,256", "-B", "1,2", "--plot", "x.png"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == ["tfcalc: error: --plot draws one sweep at a time: one model over one of "
                                             "--seq-len, --batch-size, --context, --src-len, --tgt-len, or several "
                                             "models (or sizes) at one workload; got lists on --batch-size, --seq-len"]
    r = runner.invoke(app, ["count", "-p", "gpt2", "--plot", "x.png"])
    assert r.exit_code == 2 and "--plot draws a sweep" in r.output


# ---- memory ---------------------------------------------------------------------------------------

def test_memory_stacked_over_the_context_against_the_gpu(monkeypatch, tmp_path):
    fig, _ = captured(monkeypatch, "memory", "-p", "llama3-8b", "--context", "1k..64kx2", "-B", "8", "--gpu",
                      "h100-sxm", "--plot", str(tmp_path / "m.png"))
    (ax,) = fig.axes
    contexts = [1024 * 2**k for k in range(7)]
    series = bars(ax)
    assert list(series) == ["weights", "KV cache"]
    # Llama 3 8B: 128 KiB of KV cache a token (2 x 32 layers x 8 kv heads x 128 x 2 bytes), 8 sequences, the
    # context and the new token; 8,030,261,248 weights in bf16
    assert series["KV cache"] == [8 * (c + 1) * 131072 / GiB for c in contexts]
    assert series["weights"] == [2 * 8_030_261_248 / GiB] * len(contexts)
    assert list(line(ax, "capacity").get_ydata()) == [80.0, 80.0]  # the H100 SXM's 80 GB
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{c:,}" for c in contexts]
    assert ax.get_ylabel() == "memory per GPU (GiB)" and "context" in ax.get_xlabel()
    assert "llama3-8b" in caption(fig) and "decode" in caption(fig)
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_training_memory_stacked_over_the_batch_with_its_peak(monkeypatch, tmp_path):
    from tfcalc.plan.training import training_memory

    fig, _ = captured(monkeypatch, "memory", "-p", "llama2-7b", "-B", "1,2,4", "--recompute", "selective",
                      "--plot", str(tmp_path / "t.svg"))
    (ax,) = fig.axes
    series = bars(ax)
    assert list(series) == ["weights", "gradients", "optimizer states", "master weights", "activations"]
    n = 6_738_415_616
    # bf16-mixed: 2 + 2 bytes of weights and gradients, 4 of fp32 master weights a parameter
    assert series["weights"] == series["gradients"] == [2 * n / GiB] * 3
    assert series["master weights"] == [4 * n / GiB] * 3
    plans = [training_memory(load_preset("llama2-7b").replace(batch_size=b), Workload(batch_size=b, seq_len=4096),
                             recompute="selective") for b in (1, 2, 4)]
    assert series["optimizer states"] == [m.optimizer_states / GiB for m in plans]
    assert series["activations"] == [m.activations / GiB for m in plans]
    assert list(line(ax, "peak").get_ydata()) == [m.peak / GiB for m in plans]
    assert "<svg" in (tmp_path / "t.svg").read_text()


# ---- roofline -------------------------------------------------------------------------------------

def test_the_roofline_places_prefill_and_decode(monkeypatch, tmp_path):
    fig, _ = captured(monkeypatch, "infer", "-p", "llama2-7b", "--gpu", "h100-sxm", "--context", "4096",
                      "--plot", str(tmp_path / "r.png"))
    (ax,) = fig.axes
    peak, bandwidth = 989.4e12, 3.35e12  # H100 SXM: dense bf16, HBM3 (NVIDIA's datasheet)
    roof = line(ax, "roof")
    assert all(y == min(peak, bandwidth * x) for x, y in zip(roof.get_xdata(), roof.get_ydata()))
    assert list(line(ax, "ridge").get_xdata()) == [peak / bandwidth] * 2  # 295 FLOPs per byte
    plan = inference_plan(load_preset("llama2-7b"), lookup("h100-sxm"), 4096)
    for phase in ("prefill", "decode"):
        step = line(ax, f"{phase}-step")
        cost = getattr(plan, phase)
        assert list(step.get_xdata()) == [cost.flops / cost.bytes]
        assert list(step.get_ydata()) == [cost.flops / cost.seconds]
        ops = line(ax, f"{phase}-ops")
        for x, y in zip(ops.get_xdata(), ops.get_ydata()):
            assert y <= min(peak, bandwidth * x) * (1 + 1e-12)  # nothing above the roof
    # decode at batch 1 reads every weight for one token: memory-bound, about 1 FLOP per byte in bf16
    assert line(ax, "decode-step").get_xdata()[0] < 2
    assert line(ax, "prefill-step").get_xdata()[0] > peak / bandwidth
    assert "intensity" in ax.get_xlabel() and "FLOP/s" in ax.get_ylabel()


def test_a_batch_sweep_on_the_roofline(monkeypatch, tmp_path):
    fig, _ = captured(monkeypatch, "infer", "-p", "llama3-8b", "--gpu", "h100", "-B", "1,16,256", "--context",
                      "4096", "--plot", str(tmp_path / "r.png"))
    (ax,) = fig.axes
    decode = line(ax, "decode-step")
    plans = [inference_plan(load_preset("llama3-8b").replace(batch_size=b), lookup("h100"), 4096, b)
             for b in (1, 16, 256)]
    assert list(decode.get_xdata()) == [p.decode.flops / p.decode.bytes for p in plans]
    assert list(decode.get_xdata()) == sorted(decode.get_xdata())  # a bigger batch: more FLOPs per byte
    assert {t.get_text() for t in ax.texts} >= {"B=1"}


# ---- files and the missing extra ------------------------------------------------------------------

def test_save_picks_the_format_by_suffix(tmp_path):
    fig = plot.components_over(counted(load_preset("gpt2"), seq_len=[128, 256, 512]), "seq_len")
    assert plot.save(fig, tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in plot.save(fig, tmp_path / "a.SVG").read_text()
    for bad, message in (("a.pdf", "give a .png or .svg file (got '.pdf')"), ("a", "(got no suffix)"),
                         ("missing/a.png", "no such folder")):
        with pytest.raises(TfcalcError) as e:
            plot.save(fig, tmp_path / bad)
        assert message in str(e.value)


def test_the_commands_write_small_pngs(tmp_path):
    for args in (["count", "-p", "llama2-7b", "-N", "1k..64kx2"], ["compare", "gpt2", "gpt2-medium", "gpt2-large"],
                 ["compare", "llama2-7b", "-N", "1k,4k,16k"]):
        out = tmp_path / "f.png"
        r = runner.invoke(app, [*args, "--plot", str(out)])
        assert r.exit_code == 0, r.output
        assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size < 150_000
        out.unlink()
    r = runner.invoke(app, ["count", "-p", "gpt2", "-N", "1,2", "--plot", str(tmp_path / "x.jpg")])
    assert r.exit_code == 2 and r.output.strip() == f"tfcalc: error: --plot '{tmp_path / 'x.jpg'}': give a .png or .svg file (got '.jpg')"


def test_a_missing_matplotlib_is_one_line_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    for args in (["count", "-p", "gpt2", "-N", "128,256"], ["memory", "-p", "gpt2"],
                 ["infer", "-p", "gpt2", "--gpu", "h100"], ["compare", "gpt2", "bert-base"]):
        r = runner.invoke(app, [*args, "--plot", str(tmp_path / "f.png")])
        assert r.exit_code == 2 and r.output.strip().splitlines() == [INSTALL], r.output
    assert not (tmp_path / "f.png").exists()


def test_a_missing_matplotlib_in_a_real_process():
    code = ("import sys\n"
            "sys.modules['matplotlib'] = None\n"
            "sys.argv = ['tfcalc', 'count', '-p', 'gpt2', '-N', '128,256', '--plot', 'never.png']\n"
            "from tfcalc.__main__ import main\n"
            "main()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.strip() == INSTALL


def test_profile_measured_against_predicted(tmp_path):
    # the series are the ProfileResults' own: median (min-max range) and FLOPs / measured GEMM peak
    from tfcalc import ModelSpec
    from tfcalc.profile import profile

    spec = ModelSpec(n_layers=1, d_model=64, n_heads=2, vocab_size=128, seq_len=16, max_positions=64)
    results = [profile(spec.replace(seq_len=n), device="cpu", warmup=1, repeat=2) for n in (16, 32)]
    fig = plot.profile_times(results)
    ax = fig.axes[0]
    assert list(line(ax, "predicted").get_ydata()) == [r.predicted_time_s * 1000 for r in results]
    assert list(line(ax, "predicted_by_shape").get_ydata()) == [r.predicted_by_shape_s * 1000 for r in results]
    ratio = next(x for x in fig.axes[1].lines if x.get_gid() == "ratio")
    assert list(ratio.get_ydata()) == [r.time.median / r.predicted_time_s for r in results]
    out = tmp_path / "p.png"
    r = runner.invoke(app, ["profile", "-L", "1", "-d", "64", "-H", "2", "-V", "128", "--max-positions", "64",
                            "--seq-len", "16,32", "--repeat", "2", "--warmup", "1", "--device", "cpu",
                            "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 10_000
    r = runner.invoke(app, ["profile", "-p", "gpt2", "--plot", str(out)])  # one N: nothing to draw over N
    assert r.exit_code == 2 and "give a list of lengths" in r.output



def test_a_target_that_cannot_be_written_is_refused_before_any_work(tmp_path, monkeypatch):
    """A FIFO (the write would block forever) or a folder: one line, exit 1 (an output error), before counting."""
    import os

    import tfcalc.sweep as sweep

    monkeypatch.setattr(sweep, "expand", lambda *a, **k: pytest.fail("counted before checking --plot"))
    fifo = tmp_path / "f.svg"
    os.mkfifo(fifo)
    (tmp_path / "d.png").mkdir()
    for target, what in ((fifo, "it is a FIFO"), (tmp_path / "d.png", "it is a folder")):
        r = runner.invoke(app, ["count", "-p", "gpt2", "-N", "128,256", "--plot", str(target)])
        assert r.exit_code == 1 and r.output.count("\n") == 1 and what in r.output, r.output


def test_a_figure_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """Written to a temporary file beside it and renamed: a failed write leaves the old figure and no temporary."""
    fig = plot.components_over(counted(load_preset("gpt2"), seq_len=[128, 256]), "seq_len")
    target = tmp_path / "a.svg"
    plot.save(fig, target)
    before = target.read_bytes()
    assert "<svg" in before.decode() and os.listdir(tmp_path) == ["a.svg"]

    def failing(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fig, "savefig", failing)
    with pytest.raises(TfcalcError, match="cannot write it: No space left on device") as e:
        plot.save(fig, target)
    assert e.value.exit_code == 1 and target.read_bytes() == before and os.listdir(tmp_path) == ["a.svg"]


def test_a_dense_sweep_is_one_band_per_component_not_one_bar_per_point():
    # 300 points (over plot.BARS_UP_TO): stepped bands, one artist per component, so 100,000 points draw in seconds
    fig = plot.components_over(counted(load_preset("llama3-8b"), seq_len=list(range(1, 301))), "seq_len")
    ax = fig.axes[0]
    components = len([n for n in counted(load_preset("llama3-8b"), seq_len=[300])[0][1].flops.components])
    assert len(ax.patches) == 0 and len(ax.collections) == components
    few = plot.components_over(counted(load_preset("llama3-8b"), seq_len=[128, 256]), "seq_len")
    assert len(few.axes[0].patches) == 2 * components  # a bar per point and component


def test_a_hybrids_memory_stacks_its_state_and_a_long_pattern_fits_the_caption():
    from tfcalc.plan.memory import inference_memory

    spec = load_preset("nemotron-h-8b")
    pairs = [(point, inference_memory(point.spec, Workload(phase="decode", seq_len=1, context=point.values["context"])))
             for point in expand([Model(spec, "nemotron-h-8b")], {}, {"context": [1024, 4096]})]
    fig = plot.memory_breakdown(pairs, "context")
    labels = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert {"weights", "KV cache", "state"} <= labels
    caption = next(t for t in fig.texts if t.get_gid() == "caption").get_text()
    assert "recurrent state" in caption and max(map(len, caption.split("\n"))) < 150
