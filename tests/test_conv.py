"""The `conv` block kind (LFM2's short convolution): its own sizes under kinds.conv, its arithmetic by hand, the
reference model held to FlopCounterMode, fvcore and MemTracker, and the state an inference step carries."""

import json

import pytest
from typer.testing import CliRunner

from tfcalc import ModelSpec, TfcalcError, Workload, count
from tfcalc.cli import app
from tfcalc.plan.memory import inference_memory
from tfcalc.verify import check
from tfcalc.verify.memory_check import check_memory

runner = CliRunner()
D, K, V = 64, 4, 100


def hybrid(kernel: int = K, bias: bool = False, **changes) -> ModelSpec:
    """Blocks conv, conv, attention, conv, conv, attention (4 conv blocks, 2 attention blocks)."""
    fields = dict(n_layers=6, d_model=D, n_heads=4, n_kv_heads=2, vocab_size=V, seq_len=32, positions="rotary",
                  mlp="gated", activation="silu", norm="rmsnorm", bias=False, qk_norm="head",
                  block_pattern=["conv+mlp", "conv+mlp", "attention+mlp"],
                  kinds={"conv": {"kernel": kernel, "bias": bias}})
    return ModelSpec(**{**fields, **changes})


@pytest.mark.parametrize("bias", [False, True])
def test_a_conv_blocks_parameters_by_hand(bias):
    p = count(hybrid(bias=bias)).params.components
    # in_proj: Linear(D, 3D); the convolution: Conv1d(D, D, K, groups=D), weight [D, 1, K]; out_proj: Linear(D, D)
    assert p["conv/in_proj"] == 4 * (D * 3 * D + (3 * D if bias else 0))
    assert p["conv/conv"] == 4 * (D * K + (D if bias else 0))
    assert p["conv/out_proj"] == 4 * (D * D + (D if bias else 0))
    assert p["conv/norm"] == 4 * D  # one RMSNorm before each conv block
    assert p["attention/norm"] == 2 * D


def test_forward_flops_by_hand_as_eager_torch_pads_them():
    b, n = 2, 32
    f = count(hybrid(), Workload(seq_len=n, batch_size=b)).flops.components
    t = b * n
    assert f["conv/in_proj"] == 4 * 2 * t * D * 3 * D
    # F.conv1d(padding=K-1) computes n + K - 1 positions per sequence, the first n kept: 2 x b x positions x D x K
    assert f["conv/conv"] == 4 * 2 * b * (n + K - 1) * D * K
    assert f["conv/out_proj"] == 4 * 2 * t * D * D
    # decode after a cache of K positions (transformers' causal_conv1d_update): K + 1 in, 2 positions out
    d = count(hybrid(), Workload(phase="decode", seq_len=1, context=20, batch_size=b)).flops.components
    assert d["conv/conv"] == 4 * 2 * b * 2 * D * K
    # a prefill after a cache: the padded form over K cached + n new positions, n + 2K - 1 out
    p = count(hybrid(), Workload(phase="prefill", seq_len=5, context=7, batch_size=b)).flops.components
    assert p["conv/conv"] == 4 * 2 * b * (5 + 2 * K - 1) * D * K


@pytest.mark.parametrize("workload", [None, Workload(phase="prefill", seq_len=16), Workload(phase="prefill", seq_len=2),
                                      Workload(phase="decode", seq_len=1, context=20, batch_size=2),
                                      Workload(phase="prefill", seq_len=5, context=7)], ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_the_reference_model_agrees_with_flop_counter_and_fvcore(workload, bias):
    spec = hybrid(bias=bias)
    report = check(spec, "meta", workload=workload) if workload else check(spec, "meta")
    assert report.match, report


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("kernel, bias", [(4, False), (1, True)])
def test_training_memory_is_what_memtracker_sees(recompute, kernel, bias):
    report = check_memory(hybrid(kernel, bias), Workload(seq_len=16, batch_size=2), "bf16-mixed", "adamw", recompute,
                          "meta")
    rows = {r.category: r for r in report.rows}
    for category in ("weights", "gradients", "optimizer states", "master weights", "activations (end of forward)"):
        assert rows[category].difference == 0, (category, rows[category])
    assert report.match


def test_the_state_is_a_constant_per_sequence_apart_from_the_kv_cache():
    spec = hybrid()
    b = 3
    short = inference_memory(spec, Workload(phase="decode", seq_len=1, context=15, batch_size=b))
    long = inference_memory(spec, Workload(phase="decode", seq_len=1, context=31, batch_size=b))
    # 4 conv blocks x b sequences x D channels x (K - 1) positions x 2 bytes (bf16)
    assert short.state_bytes == long.state_bytes == 4 * b * D * (K - 1) * 2
    assert short.state_bytes_per_sequence == 4 * D * (K - 1) * 2
    # the KV cache: 2 attention blocks x b x tokens x 2 kv heads x (16 + 16) x 2 bytes
    assert long.kv_cache_bytes == 2 * b * 32 * 2 * 32 * 2
    assert long.total_bytes == long.weights_bytes + long.kv_cache_bytes + long.state_bytes
    # tensor parallelism splits the channels
    assert inference_memory(spec, Workload(phase="decode", seq_len=1, context=31, batch_size=b),
                            tp=2).state_bytes == long.state_bytes // 2
    # a quantized model keeps its state in bf16, an fp32 one in fp32
    assert inference_memory(spec, Workload(phase="decode", seq_len=1, context=31, batch_size=b),
                            dtype="int4").state_bytes == long.state_bytes
    assert inference_memory(spec, Workload(phase="decode", seq_len=1, context=31, batch_size=b),
                            dtype="fp32").state_bytes == 2 * long.state_bytes


def test_sequences_that_fit_count_their_state():
    spec = hybrid()
    m = inference_memory(spec, Workload(phase="decode", seq_len=1, context=31), capacity_bytes=10_000_000,
                         gpu_name="small")
    assert m.max_sequences == (10_000_000 - m.weights_bytes) // (m.kv_cache_bytes + m.state_bytes)


def test_memory_json_and_table_show_the_state():
    r = runner.invoke(app, ["memory", "-L", "3", "-d", "64", "-H", "4", "-V", "100", "-N", "1", "--context", "31",
                            "--phase", "decode", "--positions", "rotary", "--block-pattern",
                            "conv+mlp,conv+mlp,attention+mlp", "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["state_bytes"] == 2 * 64 * (3 - 1) * 2  # two conv blocks, the default kernel 3
    assert out["state_components"] == {"conv/conv": out["state_bytes"]}
    table = runner.invoke(app, ["memory", "-L", "3", "-d", "64", "-H", "4", "-V", "100", "-N", "1", "--context",
                                "31", "--phase", "decode", "--positions", "rotary", "--block-pattern",
                                "conv+mlp,conv+mlp,attention+mlp"], env={"COLUMNS": "200"})
    assert "state per sequence" in table.output and "total (weights + KV cache + state)" in table.output


def test_sizes_are_the_kinds_own_with_its_defaults():
    spec = hybrid()
    assert spec.sizes("conv").kernel == K and spec.sizes("conv").bias is False
    default = ModelSpec(n_layers=2, d_model=8, n_heads=2, vocab_size=16, seq_len=8, block_pattern=["conv+mlp"])
    assert default.sizes("conv").kernel == 3  # transformers' conv_L_cache default
    again = ModelSpec.model_validate_json(spec.model_dump_json())
    assert again == spec and again.kinds == {"conv": {"kernel": K, "bias": False}}


@pytest.mark.parametrize("changes, message", [
    (dict(kinds={"conv": {"kernel": 0}}), "kinds.conv.kernel=0: Input should be greater than or equal to 1"),
    (dict(kinds={"conv": {"kernels": 3}}), "kinds.conv.kernels=3: Extra inputs are not permitted"),
    (dict(kinds={"conv": {"kernel": "3"}}), "kinds.conv.kernel='3': Input should be a valid integer"),
    (dict(kinds={"conv": {"kernel": 3}}, block_pattern=["attention+mlp"]),
     "kinds.conv={'kernel': 3}: no block of the block_pattern is 'conv'"),
    (dict(kinds={"rwkv": {"d_state": 16}}), "kinds.rwkv: not a block kind with sizes of its own (those are: cross_attention, conv"),
    (dict(causal=False), "block_pattern has 'conv' blocks, a causal convolution: set causal=true"),
])
def test_bad_sizes_are_refused_by_field_and_value(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("{", r"\{").replace("}", r"\}")):
        hybrid(**changes)


def test_a_spec_file_groups_the_kinds_sizes(tmp_path):
    path = tmp_path / "hybrid.toml"
    path.write_text('n_layers = 3\nd_model = 64\nn_heads = 4\nvocab_size = 100\nseq_len = 16\npositions = "rotary"\n'
                    'block_pattern = ["conv+mlp", "conv+mlp", "attention+mlp"]\n[kinds.conv]\nkernel = 5\n')
    r = runner.invoke(app, ["count", "--spec", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["spec"]["kinds"] == {"conv": {"kernel": 5}}
    assert out["params"]["components"]["conv/conv"] == 2 * 64 * 5
    path.write_text(path.read_text().replace("kernel = 5", "kernel = -1"))
    bad = runner.invoke(app, ["count", "--spec", str(path)])
    assert bad.exit_code == 2 and "kinds.conv.kernel=-1" in bad.output and "Traceback" not in bad.output


def test_an_api_error_is_the_projects():
    with pytest.raises((TfcalcError, ValueError), match="kinds.conv.bias=1"):
        hybrid(kinds={"conv": {"bias": 1}})


def test_a_size_typed_twice_is_refused_not_dropped():
    r = runner.invoke(app, ["count", "-p", "lfm2-1.2b", "--kinds", "conv.kernel=4,conv.kernel=5"])
    assert r.exit_code == 2 and "conv.kernel given twice (4 and 5): give it once" in r.output
    assert r.output.count("\n") == 1
