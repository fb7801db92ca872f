"""Sweeps (issue 13): lists and ranges of values, the grid, tidy rows equal to the library's figures at each point,
the commands' tidy formats, and bad input refused by name."""

import csv
import io
import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.cli import app
from tfcalc.plan.gpus import lookup
from tfcalc.plan.memory import inference_memory
from tfcalc.plan.roofline import inference_plan
from tfcalc.plan.training import training_memory
from tfcalc.sweep import MAX_POINTS, Model, expand, parse_values, sweep, tidy

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def tidy_csv(output: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(output)))


# ---- values ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, values", [
    ("1024", [1024]),
    ("1024,4096,16384", [1024, 4096, 16384]),
    ("4k", [4096]),  # binary k, as context lengths are quoted: 4k = 4 x 1,024
    ("128K", [131072]),
    ("1m", [2**20]),
    ("1_000", [1000]),
    ("1k..128kx2", [2**k for k in range(10, 18)]),
    ("1024..131072x2", [1024 * 2**k for k in range(8)]),
    ("1000..10000x3", [1000, 3000, 9000]),  # up to b: 27,000 is past it
    ("1024..4096+1024", [1024, 2048, 3072, 4096]),
    ("0..10+4", [0, 4, 8]),
    ("1..5", [1, 2, 3, 4, 5]),
    ("512, 1k..4kx2 ,512", [512, 1024, 2048, 4096, 512]),  # mixed, in order, repeats kept
    ("8..8", [8]),
])
def test_parse_values(text, values):
    assert parse_values(text) == values


@pytest.mark.parametrize("text, message", [
    ("1,000", "'000' has a leading zero; a comma separates values"),
    ("4096..1024", "runs downwards"),
    ("1..8x1", "a whole factor of at least 2"),
    ("0..8x2", "starts above 0"),
    ("1..8+0", "the step of '1..8+0' must be at least 1"),
    ("1..1000000", "1,000,000 values; a sweep takes at most 100,000 points"),
    ("1..1000000+1", "1,000,000 values"),
    ("abc", "'abc' is not a whole number"),
    ("1e3,2", "'1e3' is not a whole number"),
    ("1.5,2", "'1.5' is not a whole number"),
    ("-1,2", "'-1' is not a whole number"),
    ("1,,2", "'' is not a whole number"),
    ("", "expected a whole number"),
])
def test_bad_values_are_refused_by_name(text, message):
    with pytest.raises(TfcalcError) as e:
        parse_values(text)
    assert message in str(e.value)


@given(st.lists(st.integers(1, 10**12), min_size=1, max_size=30))
def test_a_comma_list_reads_back_as_written(values):
    assert parse_values(",".join(map(str, values))) == values


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 10**5))
def test_a_stepped_range_is_pythons_range(a, span, step):
    if (span // step) + 1 > MAX_POINTS:
        return
    assert parse_values(f"{a}..{a + span}+{step}") == list(range(a, a + span + 1, step))


@given(st.integers(1, 10**6), st.integers(2, 10), st.integers(0, 20))
def test_a_range_by_a_factor_is_geometric(a, f, k):
    hi = a * f**k
    assert parse_values(f"{a}..{hi}x{f}") == [a * f**i for i in range(k + 1)]


# ---- the grid and the API -------------------------------------------------------------------------

def test_the_grid_is_every_combination_last_axis_fastest():
    points = list(expand([Model(load_preset("gpt2"))], {}, {"seq_len": [128, 256], "batch_size": [1, 8, 64]}))
    # batch before length: the length varies fastest, whatever the order the flags were given in
    assert [(p.values["batch_size"], p.values["seq_len"]) for p in points] == [
        (1, 128), (1, 256), (8, 128), (8, 256), (64, 128), (64, 256)]
    assert [(p.spec.batch_size, p.spec.seq_len) for p in points][3] == (8, 256)


def test_a_grid_past_the_limit_is_refused_before_any_counting():
    with pytest.raises(TfcalcError, match=r"a sweep of 1,000,000 points \(--batch-size 1,000 values x --seq-len "
                                          r"1,000 values\); at most 100,000"):
        expand([Model(load_preset("gpt2"))], {}, {"seq_len": list(range(1, 1001)),
                                                  "batch_size": list(range(1, 1001))})


def test_each_row_is_the_count_of_the_spec_with_that_length():
    spec = load_preset("llama2-7b")
    lengths = [1024, 4096, 16384]
    rows = sweep(spec, seq_len=lengths)
    assert [r["seq_len"] for r in rows] == lengths
    for n, row in zip(lengths, rows):
        r = count(spec.replace(seq_len=n))
        assert row["workload.seq_len"] == n and row["spec.seq_len"] == n and row["model"] == "llama2-7b"
        assert row["params.total"] == r.params.total == 6_738_415_616  # HF LlamaForCausalLM sum(p.numel())
        assert row["flops.forward"] == r.flops.forward and row["flops.forward_causal"] == r.flops.forward_causal
        assert row["flops.train_step"] == 3 * r.flops.forward
        assert row["macs.forward"] * 2 == row["flops.forward"]
        for name, value in r.flops.components.items():
            assert row[f"flops.components.{name}"] == value
        assert row["attention_vs_mlp.attention_overtakes_mlp_at_seq_len"] == r.crossover.seq_len
    # the scores grow as N^2: 2 x B x H x N x N x d_head per layer, 32 layers
    assert rows[2]["flops.components.attention/scores"] == 32 * 2 * 32 * 16384 * 16384 * 128


def test_a_family_and_a_decode_sweep():
    rows = sweep(["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"])
    # Radford et al. 2019's 117M, 345M, 762M, 1542M, counted exactly by HF's GPT2LMHeadModel
    assert [r["params.total"] for r in rows] == [124_439_808, 354_823_168, 774_030_080, 1_557_611_200]
    spec = load_preset("llama3-8b")
    rows = sweep(spec, phase="decode", context=[1024, 8192], batch_size=[1, 16])
    assert [(r["batch_size"], r["context"]) for r in rows] == [(1, 1024), (1, 8192), (16, 1024), (16, 8192)]
    for row in rows:
        w = Workload(phase="decode", seq_len=1, context=row["context"], batch_size=row["batch_size"])
        assert row["flops.forward"] == count(spec.replace(batch_size=row["batch_size"]), w).flops.forward
        assert row["workload.keys"] == row["context"] + 1


def test_tidy_rows_of_different_models_share_one_set_of_columns():
    rows = [{"model": "a", "x": 1}, {"model": "b", "y": 2}]
    columns, values = tidy(iter(rows))
    assert (columns, list(values)) == (["model", "x", "y"], [["a", 1, None], ["b", None, 2]])
    dense, moe = sweep(["llama2-7b", "mixtral-8x7b"], seq_len=512)
    assert dense.keys() == moe.keys()
    assert dense["params.active"] == dense["params.total"] and moe["params.active"] == 12_879_925_248


# ---- the commands ---------------------------------------------------------------------------------

def test_count_csv_is_one_row_per_point_with_every_exact_integer():
    r = run("count", "-p", "llama2-7b", "--seq-len", "1k..16kx2", "-B", "1,8", "--format", "csv")
    assert r.exit_code == 0, r.output
    rows = tidy_csv(r.output)
    assert [(int(x["batch_size"]), int(x["seq_len"])) for x in rows] == [
        (b, n) for b in (1, 8) for n in (1024, 2048, 4096, 8192, 16384)]
    spec = load_preset("llama2-7b")
    for row in rows:
        b, n = int(row["batch_size"]), int(row["seq_len"])
        expected = count(spec.replace(seq_len=n, batch_size=b))
        assert int(row["params.total"]) == expected.params.total
        assert int(row["flops.forward"]) == expected.flops.forward
        assert int(row["flops.backward"]) == 2 * expected.flops.forward
        assert int(row["flops.forward_causal"]) == expected.flops.forward_causal
        assert int(row["macs.forward"]) == expected.macs.forward
        for name, value in expected.flops.components.items():
            assert int(row[f"flops.components.{name}"]) == value
        # the head: 2 x B x N x D x V
        assert int(row["flops.components.head"]) == 2 * b * n * 4096 * 32000
        figures = [v for k, v in row.items() if k.startswith(("params.", "flops.", "macs."))]
        assert all(v == "" or v.isdigit() for v in figures), "every count an exact integer"


def test_count_json_and_markdown_are_tidy_too():
    r = run("count", "-p", "gpt2,gpt2-medium", "-N", "256,512", "--json")
    assert r.exit_code == 0, r.output
    records = json.loads(r.output)
    assert isinstance(records, list) and len(records) == 4  # pandas.read_json reads a list of records as is
    assert [(x["model"], x["seq_len"]) for x in records] == [("gpt2", 256), ("gpt2", 512), ("gpt2-medium", 256),
                                                             ("gpt2-medium", 512)]
    assert records[3]["flops.forward"] == count(load_preset("gpt2-medium").replace(seq_len=512)).flops.forward
    md = run("count", "-p", "gpt2", "-N", "256,512", "--format", "markdown").output
    lines = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    assert len(lines) == 1 + 2 and lines[0].startswith("| model | seq_len | workload.phase")
    assert f"| {count(load_preset('gpt2').replace(seq_len=512)).flops.forward} |" in lines[2]


def test_count_table_shows_each_point_and_the_crossover():
    r = run("count", "-p", "llama2-7b", "-N", "1k,4k,16k")
    assert r.exit_code == 0, r.output
    for n in (1024, 4096, 16384):
        assert f"{count(load_preset('llama2-7b').replace(seq_len=n)).flops.forward:,}" in r.output
    assert "Sweep: 3 points" in r.output
    assert f"overtakes the MLP at N >= {count(load_preset('llama2-7b')).crossover.seq_len:,}" in r.output


def test_one_value_keeps_the_single_count_output():
    single = json.loads(run("count", "-p", "gpt2", "-N", "512", "--json").output)
    assert single["spec"]["seq_len"] == 512 and "params" in single  # not a list of rows
    assert json.loads(run("count", "-p", "gpt2", "-N", "512", "--json").output) == single
    assert json.loads(run("count", "-p", "gpt3", "-N", "2k", "--json").output)["workload"]["seq_len"] == 2048
    one = json.loads(run("count", "-p", "gpt2", "-N", "512..512", "--json").output)
    assert isinstance(one, list) and len(one) == 1  # a range, even of one value, is a sweep


def test_flags_alone_sweep_the_sizes():
    r = run("count", "-L", "2,4", "-d", "64", "-H", "4", "-V", "100", "-N", "8", "--max-positions", "8", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    # 2 x 100 x 64 (tied head once) + 8 x 64 positions + L x block + final norm; block = 12D^2 + 13D
    block = 12 * 64**2 + 13 * 64
    assert [x["params.total"] for x in rows] == [100 * 64 + 8 * 64 + L * block + 2 * 64 for L in (2, 4)]


@pytest.mark.parametrize("args, message", [
    (["count", "-p", "gpt2", "--seq-len", "1024,4096"], "seq_len=4096 exceeds max_positions=1024"),
    (["count", "-p", "gpt2", "-N", "1..1000000"], "'1..1000000': 1,000,000 values; a sweep takes at most 100,000"),
    (["count", "-p", "gpt2", "-N", "1..1000", "-B", "1..1000"], "a sweep of 1,000,000 points"),
    (["count", "-p", "gpt2", "-N", "1,000"], "'000' has a leading zero"),
    (["count", "-p", "gpt2", "-L", "12,twelve"], "'twelve' is not a whole number"),
    (["count", "-p", "gpt2", "--phase", "train,decode"], "'train,decode' is not one of"),
    (["count", "-p", "gpt2", "--mlp", "standard,gated"], "'standard,gated' is not one of"),
    (["count", "-p", "gpt2,gpt5", "-N", "1,2"], "unknown preset 'gpt5'"),
    (["count", "-p", "gpt2,", "-N", "1,2"], "--preset 'gpt2,': an empty name in the list"),
    (["count", "-L", "2,4", "-d", "64", "-H", "4", "-V", "100", "-N", "8"], "max_positions is required"),
    (["memory", "-p", "llama2-7b", "--tp", "1,2"], "'1,2': one value only"),
    (["memory", "-p", "llama2-7b", "--zero", "0..3"], "'0..3': one value only"),
    (["memory", "-p", "llama2-7b", "--dtype", "bf16,fp8"], "--dtype 'bf16,fp8': one value only"),
    (["infer", "-p", "llama2-7b", "--gpu", "h100,a100"], "--gpu 'h100,a100': one value only"),
    (["compare", "gpt2", "llama2-7b", "-N", "512,2048"], "gpt2: seq_len=2048 exceeds max_positions=1024"),
    (["infer", "-p", "gpt2", "--gpu", "h100", "--context", "512,2048"], "exceeds max_positions=1024"),
])
def test_bad_sweeps_are_one_line_and_exit_2(args, message):
    r = run(*args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfcalc: error: ") and message in lines[0], lines


def test_compare_one_model_at_several_lengths_side_by_side():
    r = run("compare", "llama2-7b", "-N", "1k,4k,16k")
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if "figure" in line)
    assert all(f"seq_len={n:,}" in header for n in (1024, 4096, 16384))
    rows = tidy_csv(run("compare", "llama2-7b", "llama3-8b", "-N", "1k,4k", "--format", "csv").output)
    assert [(x["model"], x["seq_len"]) for x in rows] == [("llama2-7b", "1024"), ("llama2-7b", "4096"),
                                                          ("llama3-8b", "1024"), ("llama3-8b", "4096")]
    assert int(rows[3]["flops.forward"]) == count(load_preset("llama3-8b").replace(seq_len=4096)).flops.forward


def test_compare_says_when_the_models_run_at_different_lengths():
    r = run("compare", "llama2-7b", "llama3-8b")
    note = [line for line in r.output.splitlines() if line.startswith("note:")]
    assert note and "llama2-7b at 4,096" in note[0] and "llama3-8b at 8,192" in note[0]  # their contexts
    assert "note:" not in run("compare", "llama2-7b", "llama3-8b", "-N", "4096").output
    assert "note:" not in run("compare", "llama2-7b", "llama2-13b").output  # both 4,096
    assert "note:" not in run("compare", "llama2-7b", "llama3-8b", "--format", "csv").output


def test_memory_sweeps_over_the_context_and_the_batch():
    spec = load_preset("llama3-8b")
    rows = tidy_csv(run("memory", "-p", "llama3-8b", "--context", "1k..8kx2", "--gpu", "h100", "--format",
                        "csv").output)
    assert [int(x["context"]) for x in rows] == [1024, 2048, 4096, 8192]
    for row in rows:
        c = int(row["context"])
        assert int(row["kv_cache_bytes"]) == 131072 * (c + 1)  # 128 KiB a token (GQA: 8 kv heads), + the new one
        assert int(row["weights_bytes"]) == 2 * 8_030_261_248  # bf16
        assert int(row["capacity_bytes"]) == 80 * 2**30
    train = tidy_csv(run("memory", "-p", "llama2-7b", "-B", "1,2", "--recompute", "selective", "--format",
                         "csv").output)
    for row in train:
        b = int(row["batch_size"])
        w = Workload(batch_size=b, seq_len=4096)
        m = training_memory(load_preset("llama2-7b").replace(batch_size=b), w, recompute="selective")
        assert int(row["activations_bytes"]) == m.activations and int(row["peak_bytes"]) == m.peak
        assert int(row["weights_bytes"]) == 2 * 6_738_415_616  # bf16-mixed: 16-bit weights
    table = run("memory", "-p", "llama3-8b", "--context", "1k,4k", "-B", "8")
    assert table.exit_code == 0 and "Inference memory sweep: 2 points" in table.output
    decode = Workload(phase="decode", seq_len=1, context=4096, batch_size=8)
    assert f"{inference_memory(spec.replace(batch_size=8), decode).total_bytes:,}" in table.output


def test_infer_sweeps_over_the_batch():
    r = run("infer", "-p", "llama3-8b", "--gpu", "h100", "--context", "4096", "-B", "1,8,64", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    for row in rows:
        b = row["batch_size"]
        plan = inference_plan(load_preset("llama3-8b").replace(batch_size=b), lookup("h100"), 4096, b)
        assert row["decode.flops"] == plan.decode.flops and row["prefill.bytes"] == plan.prefill.bytes
        assert row["decode_tokens_per_s"] == plan.decode.tokens_per_s
    assert "Roofline sweep: 3 points" in run("infer", "-p", "llama3-8b", "--gpu", "h100", "-B", "1,8,64").output


def test_a_sweep_without_plot_never_imports_matplotlib():
    code = ("import sys, io, contextlib\n"
            "from tfcalc.__main__ import main\n"
            "sys.argv = ['tfcalc', 'count', '-p', 'gpt2', '-N', '128,256', '--format', 'csv']\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit as e:\n        assert e.code == 0, e.code\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"


def test_spool_gives_back_every_row_with_every_column_as_often_as_asked():
    from tfcalc.sweep import tidy
    rows = [{"a": 1, "b": 2**200}, {"a": 3, "c": None, "d": "x|y"}, {"a": 5, "b": 1.5}]
    columns, spool = tidy(iter(rows))
    assert columns == ["a", "b", "c", "d"]
    expected = [[1, 2**200, None, None], [3, None, None, "x|y"], [5, 1.5, None, None]]
    assert list(spool) == expected and list(spool) == expected and len(spool) == 3


def test_a_long_sweep_holds_one_row_at_a_time():
    # the rows go to disk as they come: at most the row being written is alive (counted, not timed)
    from tfcalc.sweep import tidy

    class Row(dict):
        alive = 0

        def __init__(self, *args):
            super().__init__(*args)
            Row.alive += 1

        def __del__(self):
            Row.alive -= 1

    most = 0

    def rows():
        nonlocal most
        for i in range(10_000):
            most = max(most, Row.alive)
            yield Row({"i": i, "square": i * i})

    columns, spool = tidy(rows())
    assert most <= 1 and len(spool) == 10_000 and list(spool)[-1] == [9_999, 9_999**2]


def test_streamed_tidy_outputs_are_the_whole_documents():
    # JSON, CSV and Markdown written a chunk at a time are what the whole-document writers give
    from tfcalc import render
    from tfcalc.sweep import fill, tidy
    rows = [{"model": "a", "n": 1, "x": 2**70}, {"model": "b|c", "n": 2, "y": None, "z": 0.25}]
    columns, spool = tidy(rows)
    assert "".join(render.tidy_json(columns, spool)) == render.to_json(fill(rows))
    assert "".join(render.tidy_json(columns, [])) == render.to_json([])
    assert "".join(render.tidy_csv(columns, spool)) == render.to_csv(columns, list(spool))
    cells = [["" if v is None else str(v) for v in row] for row in spool]
    assert "\n".join(render.tidy_markdown(columns, spool)) == render.to_markdown(
        render.Table("Sweep", columns, cells, right={1, 2}))


def test_a_long_sweep_shows_its_progress_on_a_terminal_and_passes_every_point(monkeypatch):
    from tfcalc import cli

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    points = list(range(cli.SWEEP_PROGRESS))
    assert list(cli._counting(iter(points), len(points))) == points  # not a terminal here: no bar
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert list(cli._counting(iter(points), len(points))) == points
    assert f"{len(points):,} points" in terminal.getvalue()  # the bar was drawn (and cleared: transient)
    short = Terminal()
    monkeypatch.setattr(sys, "stderr", short)
    assert list(cli._counting(iter(points[:3]), 3)) == points[:3] and short.getvalue() == ""
