"""benchmarks/accuracy.py (docs/accuracy.md) kept runnable: its --quick path in-process, every figure kind present,
no row missing its oracle without saying why, the exact rows exact."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script():
    if "benchmarks_accuracy" not in sys.modules:  # registered before it runs: its dataclasses look it up
        spec = importlib.util.spec_from_file_location("benchmarks_accuracy", ROOT / "benchmarks" / "accuracy.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["benchmarks_accuracy"]


@pytest.fixture(scope="module")
def quick():
    accuracy = _script()
    return accuracy, accuracy.run(quick=True)


def test_every_figure_kind_is_there(quick):
    accuracy, res = quick
    assert {r.kind for r in res.rows} == set(accuracy.KINDS)
    compared = {r.kind for r in res.rows if r.oracle is not None}
    # serving capacity has no logged vLLM figure to compare with; every other kind has rows with an oracle
    assert compared == set(accuracy.KINDS) - {"serving capacity"}


def test_no_row_is_silently_without_its_oracle(quick):
    _, res = quick
    for r in res.rows:
        assert r.tfcalc is not None or r.note.startswith("not compared") or r.oracle_name == "none", r
        if r.oracle is None:
            assert r.note and r.kept is None, r  # the reason is in the row
        else:
            assert r.tfcalc is not None and r.difference == r.oracle - r.tfcalc
    # the quick subset's comparisons all ran: a failure is a row saying so, and there is none here
    assert not [r for r in res.rows if r.note.startswith("not compared:")]


def test_the_exact_rows_are_exact_and_the_others_within_their_promise(quick):
    _, res = quick
    exact = [r for r in res.rows if r.oracle is not None and r.promise == 0]
    assert len(exact) > 20  # parameters, FLOPs per phase, a KV cache, memory categories, ranks
    for r in exact:
        assert r.difference == r.explained, r  # equal, or off by the bytes of a cause the check names
    assert all(r.kept for r in res.rows if r.oracle is not None)
    # the gpt2 preset against GPT2LMHeadModel: 124,439,808 (12 * (12 * 768**2 + 13 * 768) + 50257 * 768 +
    # 1024 * 768 + 2 * 768, the head tied)
    (gpt2,) = [r for r in res.rows if r.kind == "params" and r.model == "gpt2" and r.case == "total"]
    assert gpt2.tfcalc == gpt2.oracle == 124_439_808


def test_the_document_has_its_summary_environment_and_sections(quick, tmp_path):
    accuracy, res = quick
    text = accuracy.render(res, accuracy.environment(), True, 1.0)
    assert "`PYTHONPATH=. python benchmarks/accuracy.py --quick`" in text
    assert "tfcalc commit" in text and "torch " in text and "transformers " in text and "fvcore " in text
    assert "GPU rows: none yet" in text or "GPU " in text
    for kind in accuracy.KINDS:
        assert f"\n## {kind}\n" in text
        assert f"\n| {kind} | {sum(r.kind == kind for r in res.rows)} |" in text  # its summary row


def test_the_published_document_is_the_scripts():
    text = (ROOT / "docs" / "accuracy.md").read_text()
    assert text.startswith("# Accuracy: every figure against its oracle")
    assert "`PYTHONPATH=. python benchmarks/accuracy.py`" in text  # the full run, not --quick
    accuracy = _script()
    for kind in accuracy.KINDS:
        assert f"\n## {kind}\n" in text
