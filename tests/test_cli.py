"""The commands, through typer's CliRunner and, for start-up and imports, as real processes."""

import csv
import io
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tfcalc.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def test_count_table_shows_exact_totals_and_units():
    r = run("count", "--preset", "gpt3")
    assert r.exit_code == 0, r.output
    assert "174,604,259,328" in r.output and "174.6B" in r.output
    assert "FLOPs = 2 per multiply-add" in r.output
    for component in ("attention/qkv", "attention/scores", "attention/values", "attention/out", "mlp/up", "head"):
        assert component in r.output


def test_count_json_has_the_promised_fields():
    r = run("count", "--preset", "gpt2", "--json")
    assert r.exit_code == 0
    d = json.loads(r.output)
    assert d["params"]["total"] == 124_439_808 and d["flops"]["forward"] == 291_648_307_200
    for key in ("total", "active", "embedding", "non_embedding", "components"):
        assert key in d["params"]
    for key in ("forward", "backward", "train_step", "per_token", "forward_causal", "components"):
        assert key in d["flops"]
    assert d["macs"]["forward"] * 2 == d["flops"]["forward"]
    assert d["spec"]["n_layers"] == 12
    assert run("count", "-p", "gpt2", "--format", "json").output == r.output


def test_flags_override_the_preset_and_stay_exact():
    r = run("count", "-p", "gpt2", "-N", "512", "-B", "8", "--json")
    d = json.loads(r.output)
    assert d["spec"]["seq_len"] == 512 and d["spec"]["batch_size"] == 8
    assert d["spec"]["name"] == "gpt2 (seq_len=512, batch_size=8)"
    huge = json.loads(run("count", "-L", "10000", "-d", "1024", "-H", "16", "-V", "1000000", "-N", "10000000",
                          "--max-positions", "10000000", "--json").output)
    assert huge["flops"]["components"]["attention/scores"] == 10_000 * 16 * 2 * 10**7 * 64 * 10**7


def test_spec_from_flags_and_from_file(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text("n_layers = 2\nd_model = 64\nn_heads = 4\nvocab_size = 100\nseq_len = 8\n")
    a = json.loads(run("count", "--spec", str(path), "--json").output)
    b = json.loads(run("count", "-L", "2", "-d", "64", "-H", "4", "-V", "100", "-N", "8", "--max-positions", "8",
                       "--json").output)
    assert a["params"] == b["params"] and a["flops"] == b["flops"]


def test_csv_and_markdown():
    rows = dict(csv.reader(io.StringIO(run("count", "-p", "gpt2", "--format", "csv").output)))
    assert rows["params.total"] == "124439808" and rows["flops.components.head"] == str(2 * 1024 * 768 * 50257)
    md = run("count", "-p", "gpt2", "--format", "markdown").output
    assert "| parameters | total | 124,439,808 | 124.4M |" in md


def test_compare():
    r = run("compare", "gpt2", "llama2-7b", "mixtral-8x7b", "--format", "csv")
    assert r.exit_code == 0, r.output
    rows = {row[0]: row[1:] for row in csv.reader(io.StringIO(r.output))}
    assert rows["figure"] == ["gpt2", "llama2-7b", "mixtral-8x7b"]
    assert rows["params.total"] == ["124439808", "6738415616", "46702792704"]
    assert rows["params.active"][2] == "12879925248"
    table = run("compare", "gpt2", "llama2-7b")
    assert table.exit_code == 0 and "124.4M" in table.output and "6.7B" in table.output
    same_n = json.loads(run("compare", "gpt2", "bert-base", "--seq-len", "256", "--json").output)
    assert [m["spec"]["seq_len"] for m in same_n["models"]] == [256, 256]


def test_compare_mixes_presets_and_files(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 100, "seq_len": 8}))
    r = run("compare", "gpt2", str(path), "--json")
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output)["models"]) == 2


def test_presets_command():
    r = run("presets", "--json")
    d = json.loads(r.output)
    assert d["gpt3-175b"]["params"]["total"] == 174_604_259_328 and d["gpt3-175b"]["aliases"] == ["gpt3"]
    assert d["mixtral-8x7b"]["params"]["active"] == 12_879_925_248
    assert run("presets").exit_code == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["count", "-p", "gpt5"], "unknown preset 'gpt5'; did you mean"),
        (["count", "-p", "gpt2", "-N", "2048"], "seq_len=2048 exceeds max_positions=1024"),
        (["count", "-p", "gpt2", "-L", "0"], "n_layers=0: Input should be greater than 0"),
        (["count", "-p", "gpt2", "-L", "twelve"], "'twelve' is not an integer"),
        (["count", "-p", "gpt2", "--n-kv-heads", "5"], "n_kv_heads=5 does not divide n_heads=12"),
        (["count", "-p", "gpt2", "-d", "770"], "d_model=770 is not divisible by n_heads=12; give d_head"),
        (["count", "-p", "gpt2", "--top-k", "2"], "top_k=2 is greater than n_experts=1"),
        (["count", "-p", "gpt2", "--mlp", "swiglu"], "'swiglu' is not one of 'standard', 'gated'"),
        (["count", "-p", "gpt2", "--spec", "x.toml"], "give one of --preset, --spec or --hf-config, not several"),
        (["count", "--spec", "/nonexistent/x.toml"], "/nonexistent/x.toml: no such file"),
        (["compare", "gpt2", "nope"], "unknown preset 'nope'"),
        (["compare", "llama2-7b", "gpt2", "-N", "2048"], "gpt2: seq_len=2048 exceeds max_positions=1024"),
        (["count", "--bogus"], "No such option: --bogus"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = run(*args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, lines
    assert message in lines[0] and lines[0].startswith("tfcalc: error: ")
    assert "Traceback" not in r.output


def test_missing_sizes_are_each_named():
    r = run("count", "-L", "2")
    assert r.exit_code == 2
    assert "d_model is required" in r.output and "give --preset NAME, --spec FILE" in r.output


def test_version_and_module_entry():
    assert run("--version").output.strip().startswith("tfcalc ")
    p = subprocess.run([sys.executable, "-m", "tfcalc", "count", "-p", "gpt2", "--json"], capture_output=True,
                       text=True, check=True)
    assert json.loads(p.stdout)["params"]["total"] == 124_439_808


def test_entry_point_builds_only_the_command_it_runs(monkeypatch, capsys):
    import typer.main

    from tfcalc import cli

    built = []
    real = typer.main.get_command

    def spy(app):
        built.append([c.name for c in app.registered_commands])
        return real(app)

    monkeypatch.setattr(typer.main, "get_command", spy)
    for argv in (["tfcalc", "count", "-p", "gpt2", "--json"], ["tfcalc", "--help"]):
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exit_:
            cli.main()
        assert exit_.value.code == 0
    assert built == [["count"], ["count", "compare", "check", "profile", "memory", "infer", "train", "presets",
                                 "gpus", "flags"]]
    help_text = capsys.readouterr().out
    assert all(name in help_text for name in ("count", "compare", "check", "profile", "memory", "infer", "train", "presets"))
    assert [c.name for c in cli.app.registered_commands] == built[1]  # restored


def test_the_pure_python_commands_import_neither_torch_nor_fvcore():
    code = ("import sys, io, contextlib\n"
            "from tfcalc.__main__ import main\n"
            "sys.argv = ['tfcalc', 'count', '--preset', 'gpt3']\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit as e:\n        assert e.code == 0, e.code\n"
            "for cmd in (['compare', 'gpt2', 'llama2-7b'], ['presets'], ['memory', '-p', 'llama3-8b', '--gpu', 'h100'],\n"
            "            ['train', '-p', 'gpt2', '--tokens', '1T', '--gpus', '8', '--gpu', 'h100', '--mfu', '0.4'],\n"
            "            ['infer', '-p', 'llama3-8b', '--gpu', 'h100', '--context', '4096']):\n"
            "    sys.argv = ['tfcalc', *cmd]\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try:\n            main()\n        except SystemExit as e:\n            assert e.code == 0\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'fvcore')))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"


def test_check_json_and_exit_codes():
    r = run("check", "-p", "gpt2", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["match"] is True
    assert d["forward"]["analytic"] == d["forward"]["flop_counter"] == 2 * d["forward"]["fvcore_macs"] == 291_648_307_200
    assert d["params"]["analytic"] == d["params"]["model"] == 124_439_808
    assert {row["component"] for row in d["forward"]["components"]} >= {"attention/qkv", "attention/core", "head"}


def test_check_table_and_train_on_cpu():
    r = run("check", "-p", "llama2-7b", "-L", "1", "-d", "64", "-H", "4", "--n-kv-heads", "2", "--d-ff", "96", "-V", "100", "-N", "16",
            "--device", "cpu", "--train")
    assert r.exit_code == 0, r.output
    assert "MATCH: all" in r.output and "Train step" in r.output and "✗" not in r.output


def test_check_mismatch_exits_1(monkeypatch):
    import dataclasses

    from tfcalc.counts import Breakdown, count
    from tfcalc.verify import checker

    def off_by_one_forward(spec, workload=None):
        real = count(spec, workload)
        wrong = Breakdown({**real.flops.components, "head": real.flops.components["head"] + 1})
        return dataclasses.replace(real, flops=dataclasses.replace(real.flops, components=wrong))

    monkeypatch.setattr(checker, "count", off_by_one_forward)
    r = run("check", "-p", "gpt2", "-L", "1", "-N", "8")
    assert r.exit_code == 1
    assert "MISMATCH in 1 of 15 rows: head" in r.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["check", "-p", "gpt2", "--device", "tpu"], "device='tpu': expected one of meta, cpu, cuda"),
        (["check", "-p", "gpt3", "--device", "cpu"], "device='cpu': gpt3-175b needs about"),
    ],
)
def test_check_bad_device(args, message):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert message in r.output and len(r.output.strip().splitlines()) == 1


def test_flags_keep_the_brackets_of_field_descriptions():
    # rich reads "[d_head]" as markup and drops it unless escaped; every bracketed shape a description gives must
    # show as written, in `tfcalc flags` and in --help's own panel (the sizes)
    import re

    from tfcalc import ModelSpec
    from tfcalc.cli import _hidden
    env = {"COLUMNS": "300", "TERMINAL_WIDTH": "300"}
    listed = CliRunner().invoke(app, ["flags"], env=env)
    helped = CliRunner().invoke(app, ["count", "--help"], env=env)
    assert listed.exit_code == 0 and helped.exit_code == 0
    for result, fields in ((listed, ModelSpec.model_fields),
                           (helped, {k: f for k, f in ModelSpec.model_fields.items() if not _hidden(k)})):
        text = " ".join(result.output.replace("│", " ").split())
        shapes = {s for f in fields.values() for s in re.findall(r"\[[^\]]+\]", f.description or "")}
        missing = [s for s in shapes if " ".join(s.split()) not in text]
        assert not missing, missing
    assert "[d_head]" in listed.output


@pytest.mark.parametrize("command", ["count", "compare", "memory", "infer", "train", "check", "profile", "presets",
                                     "gpus", "flags"])
def test_help_at_80_columns_cuts_no_name_or_word(command):
    # rich's option tables end a name or a word that does not fit with "…": at 80 columns none may (a process of
    # its own: typer reads the terminal's width when it is imported)
    import os
    result = subprocess.run([sys.executable, "-m", "tfcalc", command, "--help"], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}, encoding="utf-8")
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    assert max(map(len, result.stdout.splitlines())) <= 80


def test_flags_lists_every_spec_field_and_the_hidden_ones_still_work():
    import json

    from tfcalc import ModelSpec
    listed = json.loads(CliRunner().invoke(app, ["flags", "--json"]).output)
    # a multimodal model's towers and connectors come from a spec file, a preset or a config (--tower picks one)
    fields = [name for name in ModelSpec.model_fields if name not in ("towers", "connectors")]
    assert list(listed) == sorted(fields, key=list(listed).index)
    assert set(listed) == set(fields)
    assert listed["tie_embeddings"]["flag"] == "--tie-embeddings / --no-tie-embeddings"
    assert listed["n_layers"]["flag"] == "-L, --n-layers" and listed["n_layers"]["takes"] == "INT|LIST"
    # a flag --help leaves out is still taken
    assert "--qk-norm" not in CliRunner().invoke(app, ["count", "--help"], env={"COLUMNS": "300"}).output
    r = run("count", "-p", "gpt2", "--qk-norm", "head", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["spec"]["qk_norm"] == "head"


def test_flags_filters_by_a_word_and_refuses_one_that_matches_nothing():
    r = CliRunner().invoke(app, ["flags", "EXPERT"], env={"COLUMNS": "80"})
    assert r.exit_code == 0 and "--n-experts" in r.output and "--n-layers" not in r.output
    r = run("flags", "zzz")
    assert r.exit_code == 2 and "'zzz': no model flag" in r.output and len(r.output.strip().splitlines()) == 1


def test_every_spec_field_has_its_flag_in_docs_cli():
    from pathlib import Path

    from tfcalc import ModelSpec
    doc = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    flags = {name: "--" + name.replace("_", "-") for name in ModelSpec.model_fields
             if name not in ("towers", "connectors")}  # no flags: a spec file's, a preset's, a config's
    assert "--tower text\\|vision\\|audio\\|all" in doc  # the flag that picks one of them
    missing = [f for f, flag in flags.items() if flag not in doc and flag.replace("--", "--[no-]") not in doc]
    assert not missing, missing


def test_long_steps_show_progress_on_a_terminal_only(monkeypatch):
    import io

    from tfcalc import cli

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with cli._progress("checking on meta ..."):
        pass
    assert "checking on meta" in terminal.getvalue()
    piped = io.StringIO()  # not a terminal: nothing written
    monkeypatch.setattr(sys, "stderr", piped)
    with cli._progress("checking on meta ..."):
        pass
    assert piped.getvalue() == ""


def test_entry_point_coerces_only_the_options_given_or_defaulted(monkeypatch):
    # typer builds a pydantic adapter to coerce each option; the 80-odd options `count` leaves out (None) need
    # none (counted, not timed: it was a fifth of the command's time)
    import typer.core

    from tfcalc import cli
    built = []
    real = typer.core.build_runtime_param
    monkeypatch.setattr(typer.core, "build_runtime_param", lambda desc: built.append(desc) or real(desc))
    monkeypatch.setattr(sys, "argv", ["tfcalc", "count", "-p", "gpt2", "-L", "3", "--json"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 0
    # --preset, -L and the defaulted --format, and three flags with a default of False (--version and two of
    # count's): nothing for the options left out
    assert len(built) == 6, built
    monkeypatch.setattr(sys, "argv", ["tfcalc", "count", "-p", "gpt2", "-L", "x"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2  # a value given is still checked
