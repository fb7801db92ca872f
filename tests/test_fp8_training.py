"""FP8 training as TransformerEngine runs it (docs/planning.md, "FP8 training (TransformerEngine)"): the FP8
weight copies, the scaling state and the FP8 inputs the linears keep, term by term on a small spec; the MFU of an
FP8 run at the GPU's dense FP8 peak; the refusals. TransformerEngine cannot be installed here (no CUDA), so no
oracle runs: each figure shows its arithmetic, each term citing TE's source in the docs."""

import json
from fractions import Fraction

import pytest
from typer.testing import CliRunner

from tfcalc import ModelSpec, TfcalcError, Workload
from tfcalc.cli import app
from tfcalc.plan.train import mfu_of_run, training_budget, training_peak
from tfcalc.plan.training import PRECISIONS, Layout, model_states, training_memory

runner = CliRunner()
H100_FP8 = 1_978_900_000_000_000  # NVIDIA H100 datasheet: 1,978.9 TFLOP/s dense FP8 (SXM), as plan/gpus.py has it
H100_BF16 = 989_400_000_000_000  # 989.4 TFLOP/s dense BF16

# 2 blocks, d_model 64, 4 heads, a 4x MLP (256), no biases; B=2 sequences of 16 tokens: T = 32 rows
SPEC = {"n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 100, "seq_len": 16, "max_positions": 16,
        "batch_size": 2, "bias": False}
T = 32


def plan(precision: str, **kw):
    return training_memory(ModelSpec(**{**SPEC, **kw}), Workload(seq_len=16, batch_size=2, phase="train"), precision)


def test_delayed_scaling_term_by_term():
    bf16, fp8 = plan("bf16-mixed"), plan("fp8-delayed")
    # per block, the four linears' [k, n]: qkv 64x192, out 64x64, up 64x256, down 256x64 = 49,152 weights
    per_block_weights = 64 * 192 + 64 * 64 + 64 * 256 + 256 * 64
    assert per_block_weights == 49_152
    # per linear: weight fp8 rowwise k*n + transpose k*n + one fp32 scale_inv (4 bytes); 2 blocks
    assert fp8.fp8_weights == 2 * (2 * per_block_weights + 4 * 4) == 196_640
    # per linear (one GEMM): 5 quantizers (input, weight, output; grad output, grad input), each an fp32 scale
    # and an fp32 amax history of 1,024: 4 linears x 5 x (1 + 1024) x 4 bytes = 82,000 per block
    assert fp8.fp8_scaling == 2 * 4 * 5 * (1 + 1024) * 4 == 164_000
    # the embeddings and the head stay bf16: nothing of the 100 x 64 table is in the FP8 copies (above); the
    # model states are bf16-mixed's
    assert (fp8.weights, fp8.gradients, fp8.optimizer_states, fp8.master_weights) == \
        (bf16.weights, bf16.gradients, bf16.optimizer_states, bf16.master_weights)
    # activations: each linear keeps its input as 1 byte (the FP8 transpose) + a 4-byte scale_inv instead of 2
    # bytes: inputs qkv, out, up [T, 64] and down [T, 256] = T x 448 values per block
    per_block = T * (3 * 64 + 256) * (2 - 1) - 4 * 4
    assert bf16.activations - fp8.activations == 2 * per_block == 28_640
    assert fp8.total - bf16.total == 196_640 + 164_000 - 28_640
    # the down projection's input, per component (both blocks): 2 x (T x 256 x 2) bytes less 2 x (T x 256 - 4)
    assert bf16.stage.activation_components["mlp/down"] == 2 * T * 256 * 2
    assert fp8.stage.activation_components["mlp/down"] == 2 * (T * 256 * 1 + 4) == 16_392


def test_current_scaling_keeps_no_history_and_the_alias():
    current, delayed, alias = plan("fp8-current"), plan("fp8-delayed"), plan("fp8")
    assert current.fp8_scaling == 0  # the scale comes from each tensor's own amax at cast time
    assert current.fp8_weights == delayed.fp8_weights and current.activations == delayed.activations
    assert alias.precision == "fp8-delayed" and alias.to_dict() == delayed.to_dict()


def test_mxfp8_block_scales():
    bf16, mx = plan("bf16-mixed"), plan("fp8-mxfp8")

    def scales(rows, cols, rowwise):  # TE MXFP8Quantizer.get_scale_shape: 1 byte per 32 values, padded
        def up(a, b):
            return -(-a // b) * b

        return up(rows, 128) * up(-(-cols // 32), 4) if rowwise else up(-(-rows // 32), 4) * up(cols, 128)

    # a weight [n, k] keeps rowwise and columnwise data (k*n each) and both scales:
    # qkv [192, 64]: 256*4 + 8*128 = 2,048; out [64, 64]: 128*4 + 4*128 = 1,024; up [256, 64]: 256*4 + 8*128
    # = 2,048; down [64, 256]: 128*8 + 4*256 = 2,048 -> 7,168 bytes of scales per block
    assert sum(scales(n, k, True) + scales(n, k, False) for n, k in ((192, 64), (64, 64), (256, 64), (64, 256))) \
        == 7_168
    assert mx.fp8_weights == 2 * (2 * 49_152 + 7_168) == 210_944
    assert mx.fp8_scaling == 0
    # inputs kept columnwise with their scales: [32, 64] x 3: 4*128 = 512 each; [32, 256]: 4*256 = 1,024
    per_block = T * 448 - (3 * 512 + 1024)
    assert bf16.activations - mx.activations == 2 * per_block == 23_552


def test_gated_mlp_gate_and_up_are_one_gemm():
    fp8 = plan("fp8-delayed", mlp="gated", d_ff=256)
    # Megatron's linear_fc1 holds gate and up as one weight [2 x 256, 64]: one GEMM, one scale_inv, one set of
    # 5 quantizers; 4 GEMMs per block: qkv, out, fc1 (gate + up), down
    weights = 64 * 192 + 64 * 64 + 2 * 64 * 256 + 256 * 64
    assert fp8.fp8_weights == 2 * (2 * weights + 4 * 4) == 262_176
    assert fp8.fp8_scaling == 2 * 4 * 5 * 1025 * 4 == 164_000


def test_tensor_parallel_splits_the_copies():
    spec = ModelSpec(**SPEC)
    fp8 = training_memory(spec, Workload(seq_len=16, batch_size=2, phase="train"), "fp8", layout=Layout(tp=2))
    # each GPU holds half of each weight (column-parallel qkv and up, row-parallel out and down), its own
    # scale_inv and quantizers per GEMM
    assert fp8.fp8_weights == 2 * (2 * 49_152 // 2 + 4 * 4) == 98_336
    assert fp8.fp8_scaling == 164_000


def test_refusals_name_the_value():
    spec = ModelSpec(**SPEC)
    with pytest.raises(TfcalcError, match=r"precision='fp9': expected one of .*fp8-delayed"):
        training_memory(spec, Workload(seq_len=16, phase="train"), "fp9")
    with pytest.raises(TfcalcError, match=r"precision='fp8': FP8's extra tensors follow each linear's shape"):
        model_states(10**9, "fp8")
    with pytest.raises(TfcalcError, match=r"precision='fp8': A100 80GB SXM has no dense fp8 peak"):
        training_peak("a100-80gb", "fp8")
    assert set(PRECISIONS) >= {"fp8", "fp8-delayed", "fp8-current", "fp8-mxfp8"}


@pytest.mark.parametrize("args, message", [
    (["check", "--preset", "gpt2", "--memory", "--precision", "fp8"], "needs TransformerEngine and an FP8 GEMM"),
    (["train", "--preset", "gpt2", "--tokens-per-second", "1e5", "--gpus", "8", "--gpu", "a100-80gb",
      "--precision", "fp8"], "A100 80GB SXM has no dense fp8 peak"),
    (["train", "--preset", "gpt2", "--tokens-per-second", "1e5", "--gpus", "8", "--precision", "fp8"],
     "--precision fp8: it picks --gpu's peak; give --gpu"),
    (["train", "--flops-budget", "1e23", "--precision", "fp8"], "--precision"),
])
def test_cli_refusals_are_one_line(args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_mfu_at_the_dense_fp8_peak():
    spec = ModelSpec(**SPEC)
    card, dtype, peak = training_peak("h100-sxm", "fp8")
    assert (card.name, dtype, peak) == ("H100 SXM", "fp8", H100_FP8)
    assert training_peak("h100-sxm", "bf16-mixed")[1:] == ("bf16", H100_BF16)  # other recipes: as before
    assert training_peak("h100-sxm", "fp8", "bf16")[1:] == ("bf16", H100_BF16)  # --dtype, when given, wins
    r = runner.invoke(app, ["train", "--n-layers", "2", "--d-model", "64", "--n-heads", "4", "--vocab-size", "100",
                            "--seq-len", "16", "--max-positions", "16", "--tokens-per-second", "1e6", "--gpus", "8", "--gpu", "h100-sxm",
                            "--precision", "fp8", "--json"])
    assert r.exit_code == 0, r.output
    run = json.loads(r.output)["run"]
    per_token = training_budget(spec, 1).flops_per_token  # model FLOPs per token of a train step
    assert (run["peak_flops_per_s"], run["peak_dtype"], run["precision"]) == (H100_FP8, "fp8", "fp8-delayed")
    assert run["mfu"] == pytest.approx(float(per_token * Fraction(10**6) / (8 * H100_FP8)), rel=1e-12)
    # the same run held against the bf16 peak: 1,978.9 / 989.4 (about twice) the MFU
    bf16 = mfu_of_run(spec, 1e6, 8, H100_BF16)
    assert bf16["mfu"] == pytest.approx(run["mfu"] * H100_FP8 / H100_BF16, rel=1e-12)
    table = runner.invoke(app, ["train", "--preset", "gpt2", "--tokens-per-second", "1e5", "--gpus", "8", "--gpu",
                                "h100-sxm", "--precision", "fp8"], env={"COLUMNS": "80"})
    assert "MFU (every pair, dense fp8 peak)" in table.output and "1,978,900,000,000,000" in table.output


def test_memory_cli_fp8_json_carries_the_fp8_terms():
    r = runner.invoke(app, ["memory", "--n-layers", "2", "--d-model", "64", "--n-heads", "4", "--vocab-size", "100",
                            "--seq-len", "16", "--max-positions", "16", "--batch-size", "2", "--no-bias", "--phase", "train", "--precision",
                            "fp8", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert (data["precision"], data["fp8_weights_bytes"], data["fp8_scaling_bytes"]) == ("fp8-delayed", 196_640,
                                                                                         164_000)


def test_check_memory_api_refuses_fp8_with_the_reason():
    from tfcalc.verify.memory_check import check_memory  # torch: the measuring side

    with pytest.raises(TfcalcError, match=r"precision='fp8-mxfp8': an FP8 train step needs TransformerEngine"):
        check_memory(ModelSpec(**SPEC), Workload(seq_len=16, batch_size=2, phase="train"), "fp8-mxfp8")


def test_a_parallel_blocks_mlp_keeps_its_own_fp8_copy():
    bf16, fp8 = plan("bf16-mixed", parallel_block="one_norm"), plan("fp8-delayed", parallel_block="one_norm")
    # GPT-J: attention and the MLP read one normalised x [T, 64]; in 16 bits it is kept once (qkv's). In FP8 each
    # TE module quantizes and saves its own copy: qkv's and fc1's, 1 byte + a 4-byte scale_inv each; out's and
    # down's inputs as before: per block 2 x (T*64 + 4) + (T*64 + 4) + (T*256 + 4) instead of 2 x T*64 + 2 x T*64
    # + 2 x T*256
    per_block_fp8 = 2 * (T * 64 + 4) + (T * 64 + 4) + (T * 256 + 4)
    per_block_bf16 = 2 * (T * 64 + T * 64 + T * 256)
    assert bf16.activations - fp8.activations == 2 * (per_block_bf16 - per_block_fp8) == 2 * 10_224
