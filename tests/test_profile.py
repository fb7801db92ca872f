"""tfcalc profile on the CPU with tiny specs: consistency of the figures, both modes, the fit check, bad options.
No timing thresholds here: speed belongs in benchmarks/profile_targets.py."""

import ctypes
import json
import platform
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from tfcalc import ModelSpec, TfcalcError, count
from tfcalc.cli import app
from tfcalc.profile import allocator, profile
from tfcalc.profile import runner as profile_runner
from tfcalc.profile.memory import estimate_bytes
from tfcalc.profile.peak import GemmBench, datasheet_for, gemm_bytes
from tfcalc.profile.runner import matmul_shapes
from tfcalc.profile.timing import time_interleaved

TINY = ModelSpec(n_layers=2, d_model=32, n_heads=4, vocab_size=64, seq_len=16, batch_size=2)
runner = CliRunner()


@pytest.mark.parametrize("mode", ["forward", "train"])
def test_figures_are_consistent(mode):
    r = profile(TINY, device="cpu", mode=mode, warmup=1, repeat=3)
    d = r.to_dict()
    forward = count(TINY).flops.forward
    assert d["flops"] == (forward if mode == "forward" else 3 * forward)
    assert d["time_s"]["min"] <= d["time_s"]["median"] <= d["time_s"]["max"]
    assert d["achieved_flops_per_s"] == pytest.approx(d["flops"] / d["time_s"]["median"])
    assert d["mfu"] == pytest.approx(d["achieved_flops_per_s"] / d["peak_flops_per_s"])
    assert d["predicted_time_s"] == pytest.approx(d["flops"] / d["peak_flops_per_s"])
    assert d["tokens_per_s"] == pytest.approx(TINY.tokens / d["time_s"]["median"])
    assert d["device"] == "cpu" and d["dtype"] == "fp32" and d["mode"] == mode
    assert d["datasheet_peak_flops_per_s"] is None and d["repeats"] == 3
    for key in ("peak_memory_bytes", "predicted_time_by_shape_s", "achieved_causal_flops_per_s", "cpu_allocator"):
        assert key in d


def test_peak_is_measured_on_the_models_own_shapes():
    T, D, V = TINY.tokens, 32, 64
    shapes = matmul_shapes(TINY)  # qkv, out, up, down, head; largest first
    assert set(shapes) == {(T, D, 3 * D), (T, D, D), (T, D, 4 * D), (T, 4 * D, D), (T, D, V)}
    assert shapes[0] in {(T, D, 4 * D), (T, 4 * D, D)} and shapes[-1] == (T, D, D)
    r = profile(TINY, device="cpu", warmup=0, repeat=2)
    assert r.gemm.shape in shapes and r.gemm_largest.shape == shapes[0]


def test_fit_check_refuses_and_suggests_layers():
    spec = TINY.replace(n_layers=8)
    need_two = estimate_bytes(spec.replace(n_layers=2), 4, "train")
    need_all = estimate_bytes(spec, 4, "train")
    assert need_two < need_all
    with pytest.raises(TfcalcError, match=r"needs about .* GiB .*try --layers \d"):
        profile(spec, device="cpu", mode="train", memory_budget=(need_two + need_all) // 2)
    with pytest.raises(TfcalcError, match="try a smaller --seq-len or --batch-size"):
        profile(spec, device="cpu", memory_budget=1000)


def test_layers_extrapolates():
    r = profile(TINY.replace(n_layers=6), device="cpu", layers=2, warmup=1, repeat=2)
    assert r.layers_profiled == 2 and r.to_dict()["extrapolated_from_layers"] == 2
    assert r.flops == count(TINY.replace(n_layers=6)).flops.forward


def test_ctrl_c_keeps_what_was_measured():
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt

    (times,), interrupted = time_interleaved([step], torch.device("cpu"), warmup=1, repeat=10)
    assert interrupted and len(times) == 2


def test_interleaved_steps_take_turns_and_keep_whole_rounds():
    calls = []

    def step(name):
        def run():
            calls.append(name)
            if len(calls) == 9:  # warm-up round (2 calls), timed rounds 1-3, interrupted inside round 4
                raise KeyboardInterrupt
        return run

    (a, b), interrupted = time_interleaved([step("a"), step("b")], torch.device("cpu"), warmup=1, repeat=10)
    assert calls == ["a", "b"] * 4 + ["a"]
    assert interrupted and len(a) == len(b) == 3


def test_gemm_bench_shares_buffers_between_shapes():
    shapes = [(4, 8, 16), (4, 16, 8), (2, 8, 100)]
    bench = GemmBench(shapes, torch.device("cpu"), torch.float32)
    assert bench.nbytes == 4 * (4 * 16 + 100 * 8)  # the largest input and weight, not their sum
    assert gemm_bytes(shapes, 4) == bench.nbytes + 4 * 200  # and the largest output: [2, 100]
    assert [tuple(bench.step(s)().shape) for s in shapes] == [(4, 16), (4, 8), (2, 100)]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not hasattr(ctypes.CDLL(None), "mallinfo2"),
                    reason="mallopt is glibc's (elsewhere tune() changes nothing); mallinfo2 needs glibc >= 2.33")
def test_tuned_allocator_keeps_large_blocks_out_of_mmap():
    # In a fresh process, so that the setting of this test process (profile() tunes it) does not matter:
    # mallinfo2's hblkhd is the bytes malloc holds in mmap'd blocks; a 64 MiB block is mmap'd by default only.
    code = """
import ctypes
from tfcalc.profile import allocator

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype, libc.malloc.restype = Info, ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)

def mmapped_while_holding(size):
    block = libc.malloc(size)
    held = libc.mallinfo2().hblkhd
    libc.free(block)
    return held >= size

print(allocator.state(), mmapped_while_holding(64 << 20))
state = allocator.tune()
print(state == allocator.state(), mmapped_while_holding(64 << 20))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "default True"
    assert out[1] == "True False"


def test_default_allocator_flag_leaves_malloc_alone(monkeypatch):
    def fail():
        raise AssertionError("tune() called with --default-allocator")

    monkeypatch.setattr(allocator, "tune", fail)
    args = ["profile", "-L", "1", "-d", "32", "-H", "4", "-V", "64", "-N", "8", "--max-positions", "8", "--warmup", "0",
            "--repeat", "1"]
    r = runner.invoke(app, [*args, "--device", "cpu", "--default-allocator", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["cpu_allocator"] == allocator.state()


def test_datasheet_lookup_uses_dense_figures():
    h100 = datasheet_for("NVIDIA H100 80GB HBM3")
    assert h100.name == "H100 SXM" and h100.peaks["bf16"] == 989.4e12  # 1979 TFLOP/s is the sparsity figure
    assert datasheet_for("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert datasheet_for("NVIDIA A100-SXM4-80GB").peaks["bf16"] == 312e12
    assert datasheet_for("NVIDIA L40S").name == "L40S" and datasheet_for("NVIDIA L4").name == "L4"
    assert datasheet_for("Some Other GPU") is None


def test_cli_json_and_sweep():
    args = ["profile", "-L", "1", "-d", "32", "-H", "4", "-V", "64", "--max-positions", "16", "--warmup", "0",
            "--repeat", "2"]
    r = runner.invoke(app, [*args, "-N", "8", "--device", "cpu", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for key in ("device", "dtype", "mode", "time_s", "tokens_per_s", "achieved_flops_per_s", "peak_flops_per_s",
                "datasheet_peak_flops_per_s", "mfu", "predicted_time_s", "peak_memory_bytes"):
        assert key in d
    sweep = json.loads(runner.invoke(app, [*args, "-N", "8,16", "--device", "cpu", "--json"]).output)
    assert [run["spec"]["seq_len"] for run in sweep["runs"]] == [8, 16]
    table = runner.invoke(app, [*args, "-N", "8,16", "--device", "cpu", "--mode", "train"])
    assert table.exit_code == 0 and "Measured against predicted, per N" in table.output


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--device", "tpu"], "device='tpu': expected cpu, cuda or cuda:N"),
        (["--device", "cuda"], "device='cuda': CUDA is not available here"),
        (["--dtype", "fp8"], "dtype='fp8': expected one of fp32, bf16, fp16"),
        (["--mode", "inference"], "mode='inference': expected forward or train"),
        (["--repeat", "0"], "repeat=0: need warmup >= 0 and repeat >= 1"),
        (["--layers", "1"], "layers=1: needs 2 <= layers <= n_layers=2"),
        (["-N", "8,x"], "seq_len='8,x': expected an integer or a comma-separated list"),
        (["--memory-budget", "1000"], "try a smaller --seq-len or --batch-size"),
    ],
)
def test_bad_options_exit_2_with_one_line(extra, message):
    device = [] if "--device" in extra else ["--device", "cpu"]
    r = runner.invoke(app, ["profile", "-L", "2", "-d", "32", "-H", "4", "-V", "64", "-N", "8", "--max-positions", "8",
                            *device, *extra])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_out_of_memory_becomes_a_message(monkeypatch):
    def oom(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(profile_runner, "time_interleaved", oom)
    with pytest.raises(TfcalcError, match="CUDA ran out of memory in a forward step although the estimate"):
        profile(TINY, device="cpu", warmup=0, repeat=1)


# A model of images: a ViT of 2 blocks, D = 32, on 2 images of 32 x 32 (4 x 4 patches of 8, and the class token)
VIT = ModelSpec(n_layers=2, d_model=32, n_heads=4, seq_len=17, batch_size=2, causal=False, lm_head=False,
                inputs="images", kinds={"patch_embedding": {"image_size": 32, "patch_size": 8}})


@pytest.mark.parametrize("mode", ["forward", "train"])
def test_a_model_of_images_is_timed_on_its_images(mode):
    from torch.utils.flop_counter import FlopCounterMode

    from tfcalc.reference import build_model, example_inputs

    r = profile(VIT, device="cpu", mode=mode, warmup=0, repeat=2)
    d = r.to_dict()
    forward = count(VIT).flops.forward
    # the patch embedding: matmul(2 images x 16 patches, 3 x 8 x 8, 32); in a train step its backward is the weight
    # gradient alone, the images needing none
    patch = 2 * (2 * 16) * 192 * 32
    assert d["flops"] == (forward if mode == "forward" else 3 * forward - patch)
    # what the timed step runs: the reference model's step, under FlopCounterMode, on its explicit-matmul attention
    # path (the timed model calls SDPA, whose CPU kernel FlopCounterMode has no formula for: the same model FLOPs)
    model = build_model(VIT, "cpu", torch.float32, explicit_attention=True)
    with FlopCounterMode(display=False) as counter:
        profile_runner._step(model, example_inputs(VIT, "cpu"), mode)()
    assert counter.get_total_flops() == d["flops"]
    assert d["images_per_s"] == pytest.approx(2 / d["time_s"]["median"])
    assert d["tokens_per_s"] == pytest.approx(2 * 17 / d["time_s"]["median"])
    assert d["achieved_flops_per_s"] == pytest.approx(d["flops"] / d["time_s"]["median"])
    assert d["flops_causal"] is None  # bidirectional
    # the matmuls at their own rates: forward's prediction scaled by the step's FLOPs (not 3 x for a ViT's train step)
    assert d["predicted_time_by_shape_s"] > 0


def test_profile_of_a_model_of_images_on_the_command_line(tmp_path):
    path = tmp_path / "vit.toml"
    path.write_text('name = "tiny-vit"\n[model]\nn_layers = 2\nd_model = 32\nn_heads = 4\nseq_len = 17\n'
                    'causal = false\nlm_head = false\ninputs = "images"\n[model.kinds.patch_embedding]\n'
                    'image_size = 32\npatch_size = 8\n')
    r = runner.invoke(app, ["profile", "--spec", str(path), "--device", "cpu", "--repeat", "1", "--warmup", "0",
                            "-B", "3", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["images_per_s"] == pytest.approx(3 / d["time_s"]["median"])
    table = runner.invoke(app, ["profile", "--spec", str(path), "--device", "cpu", "--repeat", "1", "--warmup", "0"],
                          env={"COLUMNS": "160"})
    assert table.exit_code == 0 and "workload: train: 1 image of 32x32, 17 tokens each" in table.output
    assert "images/s" in table.output
    audio = runner.invoke(app, ["profile", "-p", "whisper-large-v3", "--device", "cpu"])
    assert audio.exit_code == 2 and "profile plans models of tokens and of images for now" in audio.output
