"""Issue 24's fuzz round over the flags and functions that landed together (--quant, --lora-*, --serve and its
engine flags, --output-tokens/--efficiency, --attention, --precision fp8, --framework and the layouts, --image-size):
a fixed table of what the round found, one case per class, and a small derandomized property over the flags
together. The rule: exit 0 with exact integer bytes, or exit 2 with `tfcalc: error:` lines naming what the user
typed; the API raises TfcalcError naming the argument, never a TypeError or an OverflowError from inside."""

import json
import os
import shlex
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import tfcalc
from tfcalc import TfcalcError, Workload, load_preset
from tfcalc.cli import app
from tfcalc.plan.quant import weight_bytes
from tfcalc.plan.train import mfu_of_run, training_budget
from tfcalc.plan.training import training_memory

runner = CliRunner()


def _refused(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (args, r.exit_code, r.output, r.exception)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfcalc: error: "), r.output
    return lines[0]


# ---- flags silently dropped: --serve planned 16-bit weights and no adapters whatever was typed --------------

@pytest.mark.parametrize("extra, named", [
    (["--quant", "nf4"], "--quant nf4"),
    (["--lora-rank", "8"], "--lora-rank 8"),
    (["--lora-rank", "8", "--lora-targets", "q,v"], "--lora-rank 8"),
    (["--lora-targets", "q,v"], "--lora-targets q,v"),
    (["--dora"], "--dora"),
    (["--framework", "megatron"], "--framework megatron"),
    (["--zero", "1"], "--zero 1"),
])
def test_serve_refuses_the_flags_it_does_not_plan(extra, named):
    line = _refused(["memory", "-p", "gpt2", "--serve", "--gpu", "h100-sxm", *extra])
    assert named in line, line


def test_serve_takes_quant_none_as_the_16_bit_weights_it_plans():
    plain = runner.invoke(app, ["memory", "-p", "gpt2", "--serve", "--gpu", "h100-sxm", "--json"])
    none = runner.invoke(app, ["memory", "-p", "gpt2", "--serve", "--gpu", "h100-sxm", "--quant", "none", "--json"])
    assert plain.exit_code == none.exit_code == 0, none.output
    # GPT-2's 124,439,808 parameters (its card) in 2 bytes each, the tied head counted once
    assert json.loads(none.output)["weights_bytes"] == json.loads(plain.output)["weights_bytes"] == 2 * 124_439_808


# ---- flags silently coerced: --tp 0 planned one GPU ---------------------------------------------------------

@pytest.mark.parametrize("extra", [["--context", "100"], ["--quant", "nf4"], ["--phase", "decode"]])
def test_inference_tp_zero_is_refused_not_taken_as_one(extra):
    assert "tp=0" in _refused(["memory", "-p", "gpt2", "--tp", "0", *extra])


# ---- errors that named our fields rather than the user's ----------------------------------------------------

@pytest.mark.parametrize("flag, value", [("--context", "100"), ("--dtype", "fp16"), ("--quant", "nf4"),
                                         ("--kv-dtype", "fp8")])
def test_an_encoder_names_the_inference_flag_typed_not_the_phase_it_implied(flag, value):
    line = _refused(["memory", "-p", "bert-base", flag, value])
    assert line.startswith(f"tfcalc: error: {flag}:") and "phase=" not in line, line


def test_serve_profiling_pass_past_the_position_table_names_the_engine_flags():
    line = _refused(["memory", "-p", "gpt2", "--serve", "--gpu", "h100-sxm", "--max-num-seqs", "1"])
    # 8192 tokens (vllm serve's default on an H100) in one request: past GPT-2's 1,024 learned positions
    assert "max_num_batched_tokens=8192, max_num_seqs=1" in line, line


# ---- tracebacks: check --memory --tp on a vocabulary that does not split evenly -----------------------------

def test_parallel_check_refuses_a_vocabulary_tp_does_not_divide():
    line = _refused(["check", "-p", "gpt2", "--memory", "--tp", "2"])
    assert "--tp 2" in line and "vocab_size=50257" in line, line  # 50257 = 2 * 25128 + 1


# ---- the API: TfcalcError naming the argument, never a TypeError or an OverflowError ------------------------

GPT2 = load_preset("gpt2")
W = Workload(seq_len=128, batch_size=1, phase="train")
API_CASES = [
    ("tokens_per_second", lambda: mfu_of_run(GPT2, "8", 8, 10**15)),
    ("tokens_per_second", lambda: mfu_of_run(GPT2, [1], 8, 10**15)),
    ("tokens_per_second", lambda: mfu_of_run(GPT2, 10**400, 8, 10**15)),
    ("gpus", lambda: mfu_of_run(GPT2, 1e5, None, 10**15)),
    ("tokens_per_second", lambda: mfu_of_run(GPT2, 1e5, 8, 10**400)),  # an MFU past a float's range
    ("gpus", lambda: training_budget(GPT2, 10**9, gpus="8")),
    ("mfu", lambda: training_budget(GPT2, 10**9, mfu=[1])),
    ("price_per_gpu_hour", lambda: training_budget(GPT2, 10**9, price_per_gpu_hour=object())),
    ("precision", lambda: training_memory(GPT2, W, precision=["bf16"])),
    ("optimizer", lambda: training_memory(GPT2, W, optimizer=["adamw"])),
    ("base", lambda: weight_bytes(GPT2, "nf4", base="2")),
    ("base", lambda: weight_bytes(GPT2, "nf4", base=None)),
    ("src_len", lambda: tfcalc.request_life(load_preset("t5-small"), "h100", 64, 4, src_len=0)),
    ("src_len", lambda: tfcalc.request_life(load_preset("t5-small"), "h100", 64, 4, src_len="8")),
    ("dtype", lambda: tfcalc.request_life(GPT2, "h100", 64, 4, dtype=["bf16"])),
    ("kv_dtype", lambda: tfcalc.request_life(GPT2, "h100", 64, 4, kv_dtype=["fp8"])),
    ("batch_size", lambda: tfcalc.request_life(GPT2, "h100", 64, 4, batch_size=10**400)),
    ("kv_dtype", lambda: tfcalc.serving_capacity(GPT2, "h100", kv_dtype=["fp8"])),
    ("max_num_batched_tokens", lambda: tfcalc.serving_capacity(GPT2, "h100", max_num_batched_tokens=10**40)),
]


@pytest.mark.parametrize("argument, call", API_CASES, ids=[f"{a}-{i}" for i, (a, _) in enumerate(API_CASES)])
def test_api_refuses_by_argument_name(argument, call):
    with pytest.raises(TfcalcError) as e:
        call()
    assert f"{argument}=" in str(e.value), str(e.value)


def test_the_fixed_checks_still_take_good_values():
    """The new type checks refuse nothing they took before: a Fraction and an int are numbers."""
    run = mfu_of_run(GPT2, Fraction(10**5), 8, 10**15)
    assert 0 < run["mfu"] < 1
    assert training_budget(GPT2, 10**9, gpus=8, mfu=Fraction(2, 5), peak_flops_per_s=10**15).seconds > 0
    # GPT-2 in 2 bytes a parameter without a format: 2 * 124,439,808
    assert weight_bytes(GPT2, None, base=2).total == 2 * 124_439_808


# ---- the new flags together: a small derandomized property -------------------------------------------------

BAD = ["0", "-1", "1e400", "nan", "inf", "1.5", "abc", "1,2", ""]
NEW_FLAGS = {
    "memory": {"--quant": ["nf4", "int4-g128", "bogus"], "--lora-rank": ["8"], "--lora-targets": ["attention", "q"],
               "--dora": None, "--serve": None, "--gpu": ["h100-sxm", "a100-40gb"],
               "--gpu-memory-utilization": ["0.9", "1.0001"], "--block-size": ["16"],
               "--max-num-batched-tokens": ["2048"], "--max-num-seqs": ["8"], "--non-torch-gib": ["1"],
               "--activation-gib": ["2"], "--attention": ["fused", "eager"], "--precision": ["fp8", "bf16"],
               "--framework": ["torch", "megatron"], "--dp": ["2"], "--zero": ["1", "3"], "--tp": ["2", "3"],
               "--sp": None, "--pp": ["2"], "--phase": ["train", "decode"], "--context": ["100", "1k,2k"],
               "--image-size": ["224"]},
    "infer": {"--quant": ["nf4"], "--gpu": ["h100-sxm"], "--output-tokens": ["10"], "--efficiency": ["0.5"],
              "--tp": ["2", "1,2"], "--context": ["100"], "--attention": ["eager"], "--lora-rank": ["8"]},
    "count": {"--quant": ["nf4", "mxfp4"], "--lora-rank": ["8", "100000"], "--lora-targets": ["q,v", "gate"],
              "--dora": None, "--image-size": ["224", "384x512", "15"], "--images": ["2"]},
    "train": {"--lora-rank": ["8"], "--attention": ["eager"], "--precision": ["fp8"], "--gpu": ["h100-sxm", "v100"],
              "--gpus": ["8"], "--tokens": ["1T"], "--mfu": ["0.4"], "--tokens-per-second": ["1e6"],
              "--flops-budget": ["1e24"], "--quant": ["nf4"], "--framework": ["megatron"]},
}


@st.composite
def invocations(draw):
    command = draw(st.sampled_from(sorted(NEW_FLAGS)))
    args = [command, "-p", draw(st.sampled_from(["gpt2", "llama3-8b", "mixtral-8x7b", "vit-b16", "t5-small"]))]
    for flag in draw(st.lists(st.sampled_from(sorted(NEW_FLAGS[command])), min_size=1, max_size=4, unique=True)):
        values = NEW_FLAGS[command][flag]
        if values is None:
            args.append(flag)
        else:
            args += [flag, draw(st.sampled_from(values + BAD) if draw(st.integers(0, 4)) == 0 else
                                st.sampled_from(values))]
    return args


def _byte_figures(d, path=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _byte_figures(v, f"{path}.{k}")
    elif isinstance(d, list):
        for v in d:
            yield from _byte_figures(v, path)
    elif path.endswith("bytes") and d is not None:
        yield path, d


@settings(max_examples=60, deadline=None, derandomize=True)
@given(invocations())
def test_new_flags_together_count_or_refuse_in_lines(args):
    r = runner.invoke(app, [*args, "--json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), (args, repr(r.exception))
    assert "Traceback" not in r.output
    assert r.exit_code in (0, 2), (args, r.exit_code, r.output)
    if r.exit_code == 2:
        lines = r.output.strip().splitlines()
        assert lines and all(line.startswith("tfcalc: error: ") for line in lines), (args, lines)
        return
    for path, value in _byte_figures(json.loads(r.output)):
        assert isinstance(value, int) and not isinstance(value, bool) and value >= 0, (args, path, value)


# ---- tracebacks: started with stdout closed (`>&-`), Python's sys.stdout is None ----------------------------

@pytest.mark.parametrize("args", [["flags", "expert"], ["memory", "-p", "llama3-8b", "--serve", "--gpu", "h100-sxm"]])
def test_a_closed_stdout_is_one_line_and_exit_1(args):
    root = Path(__file__).resolve().parents[1]
    command = " ".join(map(shlex.quote, [sys.executable, "-m", "tfcalc", *args])) + " >&-"
    p = subprocess.run(["bash", "-c", command], stderr=subprocess.PIPE, text=True, cwd=root, check=False,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip().splitlines() == ["tfcalc: error: cannot write the output: stdout is closed"], p.stderr
