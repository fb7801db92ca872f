"""No displayed number is ever cut: the real CLI in a real pseudo-terminal at 80 and 120 columns, piped output
at natural width, sizes past a float's range in every format, NO_COLOR.

The oracle for "not cut": every number on the screen must be a true value, whole. Truth is every integer of the
same command's --json (and the preset sources' own text); a comma-grouped integer must be one of them, a
readable figure (174.6B, 7.35e14) the readable form of one. A number folded across lines ("43,490,082" +
"816") or cropped ("1.40e1" for 1.40e16) is no true value and fails."""

import concurrent.futures
import csv
import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from decimal import Decimal
from fractions import Fraction
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from tfcalc import cli, render
from tfcalc.counts import count
from tfcalc.presets import list_presets, load_preset

HUGE = 10**160  # d_model; d_model**2 is past the largest float (1.8e308)
HUGE_SPEC = ["-L", "10", "-d", str(HUGE), "-H", "10", "-V", "1000", "-N", "1000", "--positions", "rotary"]
FIVE = ["gpt2", "llama2-7b", "mixtral-8x7b", "llama3-405b", "bert-base"]
CHECK = ["-p", "gpt2", "-L", "1", "-N", "8"]
COMMANDS = {
    "gpt3": ["count", "--preset", "gpt3"],
    "t5": ["count", "--preset", "t5-small"],
    "compare": ["compare", *FIVE],
    "presets": ["presets"],
    "huge": ["count", *HUGE_SPEC],
    "check": ["check", *CHECK],  # imports torch: the only check runs here (80 and 120 columns)
}
WIDTHS = (80, 120)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
NUMBER = re.compile(r"\d(?:[\d,]*\d)?(?:\.\d+)?(?:e\d+)?")
runner = CliRunner()


def _env(**extra: str) -> dict:
    drop = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "TERM": "xterm", **extra}


def in_terminal(args: list[str], columns: int, **env: str) -> tuple[int, str]:
    """`python -m tfcalc ARGS` with a pseudo-terminal of `columns` x 50 as stdin, stdout and stderr: its exit
    code and what the terminal receives, CR LF made LF."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "tfcalc", *args], stdin=slave, stdout=slave, stderr=slave,
                               env=_env(**env), close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return process.wait(timeout=120), b"".join(chunks).decode().replace("\r\n", "\n")


def piped(args: list[str]) -> str:
    p = subprocess.run([sys.executable, "-m", "tfcalc", *args], capture_output=True, text=True, env=_env(),
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def json_of(args: list[str]):
    r = runner.invoke(cli.app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.fixture(scope="module")
def screens() -> dict:
    """Every (command, width) in a terminal, and count -p gpt2 with and without NO_COLOR, run side by side."""
    jobs = {(name, width): (args, width, {}) for name, args in COMMANDS.items() for width in WIDTHS}
    jobs[("no_color", 80)] = (["count", "-p", "gpt2"], 80, {"NO_COLOR": "1"})
    jobs[("color", 80)] = (["count", "-p", "gpt2"], 80, {})
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        futures = {key: pool.submit(in_terminal, args, width, **env) for key, (args, width, env) in jobs.items()}
        results = {key: future.result() for key, future in futures.items()}
    return {key: ok(*result) for key, result in results.items()}


def ok(code: int, screen: str) -> str:
    """The screen of a run that succeeded; a failed run's gets its exit code on top, which every test refuses."""
    return screen if code == 0 else f"exit code {code}\n{screen}"


# ---- the oracle -----------------------------------------------------------------------------------

def integers(data) -> set[int]:
    if isinstance(data, dict):
        return set().union(*map(integers, data.values())) if data else set()
    if isinstance(data, list):
        return set().union(*map(integers, data)) if data else set()
    return {data} if isinstance(data, int) and not isinstance(data, bool) else set()


def strings(data) -> list[str]:
    if isinstance(data, dict):
        return [s for v in data.values() for s in strings(v)]
    if isinstance(data, list):
        return [s for v in data for s in strings(v)]
    return [data] if isinstance(data, str) else []


def tokens(text: str):
    """(token, suffix) for each number that stands on its own: not inside a word (gpt2, fp32, 8x7b)."""
    for m in NUMBER.finditer(text):
        before, after = text[m.start() - 1:m.start()], text[m.end():m.end() + 2]
        if before and (before.isalnum() or before in "_^~."):
            continue
        suffix = after[:1] if after[:1] in ("K", "M", "B", "T") and not after[1:2].isalpha() else ""
        if after[:1].isalpha() and not suffix or after[:1] in "%":
            continue  # 405b, 2x, percentages
        yield m.group(), suffix


def sci(n: int) -> str:
    """The oracle's 3.67e14, through Decimal (exact at any size), not render's."""
    mantissa, exponent = format(Decimal(n), ".2e").split("e")
    return "0" if n == 0 else f"{mantissa}e{int(exponent)}"


def human(n: int) -> str:
    """The oracle's 174.6B; from 1000T on, 1.00e15."""
    if n >= 10**15:
        return sci(n)
    units = [(10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")]
    for i, (scale, suffix) in enumerate(units):
        if n >= scale:
            shown = f"{Decimal(n) / scale:.1f}"
            if shown.startswith("1000."):
                return sci(n) if i == 0 else f"1.0{units[i - 1][1]}"
            return shown + suffix
    return f"{n:,}"


class Truth:
    def __init__(self, *documents):
        self.values = set().union(*map(integers, documents))
        self.readable = {human(v) for v in self.values} | {sci(v) for v in self.values}
        self.verbatim = {t + s for d in documents for text in strings(d) for t, s in tokens(text)}

    def bad_numbers(self, screen: str) -> list[str]:
        """Numbers on the screen that are no true value: cut, folded, or cropped."""
        bad = []
        for token, suffix in tokens(screen):
            shown = token + suffix
            if shown in self.verbatim:
                continue
            if suffix or "e" in token:
                ok = shown in self.readable
            elif "." in token:
                ok = True  # ratios, times, "Table 2.1"
            elif "," in token:
                ok = re.fullmatch(r"\d{1,3}(,\d{3})*", token) is not None and int(token.replace(",", "")) in self.values
            else:
                ok = int(token) < 10_000 or int(token) in self.values  # small constants: "6 N", "2x", "x4"
            if not ok:
                bad.append(shown)
        return bad


def shown(screen: str) -> str:
    """What the terminal shows of each line: a carriage return (a spinner redrawing its line) starts it again."""
    return "\n".join(line.rpartition("\r")[2] for line in screen.split("\n"))


def too_wide(screen: str, width: int) -> list[str]:
    """Lines wider than the terminal, but for a single number (or word) wider than the terminal itself."""
    return [line for line in shown(screen).split("\n") if len(line) > width and " " in line.strip()]


@pytest.fixture(scope="module")
def truths() -> dict:
    presets = json_of(["presets"])  # the sources' text: numbers the header lines quote ("n_params 175.0B")
    check_counts = json_of(["count", *CHECK])
    flops = check_counts["flops"]["components"]
    core = {"core": flops["attention/scores"] + flops["attention/values"]}  # check's attention/core: one SDPA call
    data = {name: json_of(COMMANDS[name]) for name in ("gpt3", "t5", "compare", "huge")}
    truths = {name: (Truth(d, presets), d) for name, d in data.items()}
    return {**truths, "presets": (Truth(presets), presets), "check": (Truth(check_counts, core, presets), check_counts)}


def required(name: str, data, width: int, screen: str) -> list[str]:
    """The figures that table shows exactly (or in readable units) at this width: each must appear whole."""
    if name in ("gpt3", "t5"):
        shown = [data["params"]["total"], data["flops"]["forward"], data["macs"]["forward"],
                 *data["params"]["components"].values()]
        if "forward MACs" not in screen.split("Components", 1)[1].split("\n")[2]:  # the column was left out
            assert "forward MACs columns left out" in screen or "forward MACs column left out" in screen
        else:
            shown += [v for k, v in data["macs"]["components"].items() if k != "total"]
        return [f"{v:,}" for v in shown]
    if name == "compare":
        return [x for m in data["models"] for x in (f"{m['spec']['d_model']:,}", f"{m['spec']['vocab_size']:,}",
                                                    human(m["params"]["total"]), sci(m["flops"]["forward"]))]
    if name == "presets":
        return [x for p in data.values() for x in (human(p["params"]["total"]), sci(p["flops"]["forward"]),
                                                   *re.findall(r"\d{1,3}(?:,\d{3})+", p["source"]))]
    if name == "huge":
        return [str(HUGE), human(data["params"]["total"]), sci(data["flops"]["forward"])]
    flops, params = data["flops"]["components"], data["params"]["components"]
    forward = {k: v for k, v in flops.items() if k not in ("attention/scores", "attention/values")}
    forward["attention/core"] = flops["attention/scores"] + flops["attention/values"]
    return [f"{v:,}" for v in [*forward.values(), *params.values(), data["flops"]["forward"], data["params"]["total"]]]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", COMMANDS)
def test_no_number_is_cut_in_a_terminal(screens, truths, name, width):
    screen = ANSI.sub("", screens[(name, width)])
    assert not screen.startswith("exit code"), screen[-3000:]
    truth, data = truths[name]
    assert truth.bad_numbers(screen) == []
    assert too_wide(screen, width) == []
    missing = [x for x in required(name, data, width, screen)
               if not re.search(rf"(?<!\d)(?<!\d,){re.escape(x)}(?!\d|,\d)", screen)]  # whole, not inside another
    assert missing == []
    if name == "check":
        assert "MATCH: all 15 rows agree exactly." in screen


def test_the_layouts_chosen(screens):
    """80 columns: the gpt3 components lose the bars and exact MACs, nothing else; 120: all of it."""
    narrow, wide = (ANSI.sub("", screens[("gpt3", w)]) for w in WIDTHS)
    assert "(narrow terminal: FLOPs share, forward MACs columns left out; all in --json)" in narrow
    assert "narrow terminal" not in wide and "89,060,441,849,856" in wide and "█" in wide
    assert "│ attention/qkv      │  43,490,082,816 │    24.9% │       1.78e14 │   24.2% │" in narrow
    presets = ANSI.sub("", screens[("presets", 80)])
    # the longest preset name (llama3.2-11b-vision, 19 characters) and the longest word of a description
    # (DeepSeek-V3.2-Exp) leave the table, its source under it, one column too wide for 80: one block per row
    assert "(narrow terminal: one block per row)" in presets
    assert "bart-base: model BART base  params 139.4M  seq_len 1,024  forward FLOPs 3.40e11" in presets
    assert "  source Lewis et al. 2020; Hugging Face facebook/bart-base config.json;" in presets


def test_no_color_means_no_ansi_codes(screens):
    assert "\x1b[" in screens[("color", 80)]  # a terminal gets styles...
    assert "\x1b" not in screens[("no_color", 80)]  # ...but not with NO_COLOR: no bold or italic either
    assert ANSI.sub("", screens[("color", 80)]) == screens[("no_color", 80)]


# ---- piped: natural width -------------------------------------------------------------------------

def test_piped_output_draws_every_table_whole():
    presets = json_of(["presets"])
    out = piped(["presets"])
    for name, p in presets.items():  # each preset on one line, its whole source at the end of it
        (line,) = [line for line in out.split("\n") if line.startswith(f"│ {name} ")]
        assert line.rstrip(" │").endswith(p["source"])
    gpt3 = json_of(["count", "-p", "gpt3"])
    out = piped(["count", "-p", "gpt3"])
    assert out.split("\n")[0].startswith("gpt3-175b: L=96 D=12288") and out.split("\n")[0].endswith("causal")
    for name, params in gpt3["params"]["components"].items():
        if name != "total" and params:
            (line,) = [line for line in out.split("\n") if line.startswith(f"│ {name} ")]
            assert f" {params:,} " in line and line.count("│") == 8


# ---- sizes past a float ---------------------------------------------------------------------------

def test_huge_sizes_in_every_format(tmp_path):
    data = json_of(["count", *HUGE_SPEC])
    total, forward = data["params"]["total"], data["flops"]["forward"]
    assert total > 10**308 and forward > 10**308
    rows = dict(csv.reader(io.StringIO(runner.invoke(cli.app, ["count", *HUGE_SPEC, "-f", "csv"]).output)))
    assert rows["params.total"] == str(total) and rows["flops.forward"] == str(forward)
    md = runner.invoke(cli.app, ["count", *HUGE_SPEC, "-f", "markdown"])
    assert md.exit_code == 0, md.output
    assert f"| parameters | total | {total:,} | {render.human(total)} |" in md.output
    table = runner.invoke(cli.app, ["count", *HUGE_SPEC])
    assert table.exit_code == 0, table.output
    assert f" {total:,} " in table.output and f" {render.sci(forward)} " in table.output

    spec = tmp_path / "huge.json"
    spec.write_text(json.dumps({"n_layers": 10, "d_model": HUGE, "n_heads": 10, "vocab_size": 1000, "seq_len": 1000,
                                "positions": "rotary", "name": "huge"}))
    for fmt in ("table", "csv", "markdown", "json"):
        r = runner.invoke(cli.app, ["compare", "gpt2", str(spec), "-f", fmt])
        assert r.exit_code == 0, r.output
        assert (str(total) if fmt in ("csv", "json") else render.human(total)) in r.output


def test_readable_forms_of_any_integer():
    """Digits and exponent from the integer itself, rounded half to even as Python formats a float."""
    assert render.sci(10**400) == "1.00e400" and render.sci(-(2 * 10**309)) == "-2.00e309"
    assert render.sci(9_995) == "1.00e4" and render.sci(12_350) == "1.24e4" and render.sci(12_351) == "1.24e4"
    for n in (7 * 3**700, 10**310 - 1, 123_456_789 * 10**300 + 5 * 10**300):
        mantissa, exponent = format(Decimal(n), ".2e").split("e")
        assert render.sci(n) == f"{mantissa}e{int(exponent)}"
    for n in (2_048, 367_402_130_866_176, 2**53 - 1, 1_155, 1_145):
        mantissa, exponent = f"{n:.2e}".split("e")
        assert render.sci(n) == f"{mantissa}e{int(exponent)}"
    assert render.human(10**400) == "1.00e400" and render.human(999_950_000_000_000) == "1.00e15"
    assert render.human(999_960) == "1.0M" and render.human(174_604_259_328) == "174.6B"
    assert render.pct(render.share(1, 10**400)) == "<0.1%" and render.pct(render.share(10**400, 3 * 10**400)) == "33.3%"


def test_profile_memory_reads_in_binary_units():
    fake = SimpleNamespace(
        time=SimpleNamespace(median=0.5, min=0.4, max=0.6, repeats=3), gemm=SimpleNamespace(shape=(8, 8, 8),
        flops_per_s=1e12), gemm_largest=SimpleNamespace(shape=(8, 8, 8), flops_per_s=1e12), tokens_per_s=100.0, images_per_s=None,
        flops=10**12, achieved_flops_per_s=2e12, flops_causal=None, mfu=0.5, predicted_time_s=0.25,
        predicted_by_shape_s=0.3, datasheet_peak=None, device="cuda", spec=SimpleNamespace(seq_len=8))
    for device in ("cpu", "cuda"):
        fake.device, fake.peak_memory_bytes = device, 1_148_903_424
        rows = dict(render.profile_table(fake).rows)
        assert rows["peak memory"] == "1.07 GiB (1,148,903,424 bytes)"
    assert render.binary_bytes(512) == "512 B" and render.binary_bytes(3 * 2**20 // 2) == "1.50 MiB"


# ---- every width, in process ----------------------------------------------------------------------

def test_every_width_from_20_to_140(monkeypatch, capsys):
    """The CLI's own printer at COLUMNS=20..140 on the count, compare and presets tables: numbers whole, no
    line wider than the terminal (but a lone number wider than it), a note whenever something was left out."""
    gpt3 = count(load_preset("gpt3"))
    results = [count(load_preset(m)) for m in FIVE]
    truth = Truth(gpt3.to_dict(), [r.to_dict() for r in results], json_of(["presets"]))
    entries = [(p.name, p.description, count(p.spec), p.source) for p in list_presets()]
    tables = [*render.count_tables(gpt3), render.compare_table(results, FIVE, readable=True),
              render.presets_table(entries)]
    for width in range(20, 141, 6):
        monkeypatch.setenv("COLUMNS", str(width))
        cli._print_tables(tables, render.Format.table)
        screen = capsys.readouterr().out
        assert truth.bad_numbers(screen) == [], width
        assert too_wide(screen, width) == [], width
        assert f"{gpt3.params.total:,}" in screen or "exact column left out" in screen or "one block" in screen
        for table in tables:
            fit = render.layout(table, width)
            changed = bool(fit.dropped) or fit.readable or fit.stacked or fit.aside is not None or len(fit.grids) > 1
            assert bool(fit.note) == changed
            assert fit.note in screen.replace("\n", " ")


def test_a_number_wider_than_the_terminal_is_whole_on_its_own_line(monkeypatch, capsys):
    table = render.Table("T", ["name", "value"], [["x", f"{7**200:,}"]], right={1})
    monkeypatch.setenv("COLUMNS", "60")
    cli._print_tables([table], render.Format.table, [f"spec: D={7**200} rest of the line"])
    lines = capsys.readouterr().out.split("\n")
    assert f"{7**200:,}" in [line.strip() for line in lines]  # stacked: the value alone on its line
    assert str(7**200) in lines and "spec: D=" in lines


def test_share_is_exact():
    assert render.share(2, 3) == Fraction(2, 3) and render.share(1, 0) == 0
