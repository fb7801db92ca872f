"""The `mamba2` block kind (Mamba2's SSD mixer): its own sizes under kinds.mamba2, its arithmetic by hand, the
reference model held to FlopCounterMode and fvcore over train, prefill and decode, the state an inference step
carries, and training memory refused by name (what the scan keeps for backward is not modelled yet)."""

import pytest

from tfcalc import ModelSpec, Workload, count
from tfcalc.arch.ops import UnsupportedFigure
from tfcalc.blocks.mamba2 import Mamba2Sizes
from tfcalc.blocks.mamba2.records import SSDScan
from tfcalc.plan.memory import inference_memory
from tfcalc.plan.training import training_memory
from tfcalc.verify import check

D, V = 32, 50
H, P, N, G, K, Q = 4, 16, 8, 2, 4, 4  # heads, head_dim, d_state, groups, conv taps, chunk
INNER, CHANNELS = H * P, H * P + 2 * G * N  # 64, 96


def hybrid(**sizes) -> ModelSpec:
    """Blocks mamba2, mamba2, attention+mlp (2 Mamba2 blocks, 1 attention block)."""
    kinds = {"n_heads": H, "head_dim": P, "d_state": N, "n_groups": G, "conv_kernel": K, "chunk_size": Q} | sizes
    return ModelSpec(n_layers=3, d_model=D, n_heads=4, vocab_size=V, seq_len=10, positions="rotary", mlp="gated",
                     activation="silu", norm="rmsnorm", bias=False, block_pattern=["mamba2", "mamba2", "attention+mlp"],
                     kinds={"mamba2": kinds})


@pytest.mark.parametrize("bias, conv_bias", [(False, True), (True, False)])
def test_parameters_by_hand(bias, conv_bias):
    p = count(hybrid(bias=bias, conv_bias=conv_bias)).params.components
    # in_proj: Linear(D, 2 d_inner + 2 g n + h) = Linear(32, 64 + 96 + 4)
    assert p["mamba2/in_proj"] == 2 * (D * (2 * INNER + 2 * G * N + H) + (164 if bias else 0))
    # Conv1d(96, 96, K, groups=96): weight [96, 1, K] (+ bias [96])
    assert p["mamba2/conv"] == 2 * (CHANNELS * K + (CHANNELS if conv_bias else 0))
    assert p["mamba2/scan"] == 2 * 3 * H  # A_log, D, dt_bias [h]
    assert p["mamba2/gated_norm"] == 2 * INNER  # MambaRMSNormGated weight [d_inner]
    assert p["mamba2/out_proj"] == 2 * (INNER * D + (D if bias else 0))
    assert p["mamba2/norm"] == 2 * D


def test_forward_flops_by_hand_as_the_eager_scan_pads_them():
    b, s = 2, 10  # c = ceil(10 / 4) = 3 chunks: the sequence padded to 12
    f = count(hybrid(), Workload(seq_len=s, batch_size=b)).flops.components
    t, c = b * s, 3
    assert f["mamba2/in_proj"] == 2 * 2 * t * D * 164
    assert f["mamba2/conv"] == 2 * 2 * b * (s + K - 1) * CHANNELS * K  # F.conv1d(padding=K-1): s + K - 1 outputs
    scan = (2 * b * c * H * Q * Q * N  # G = C B^T per chunk
            + 2 * b * c * H * Q * Q * P  # Y_diag = (G * L) x
            + 2 * b * c * H * Q * P * N  # each chunk's state
            + 2 * b * H * (c + 1) ** 2 * P * N  # the inter-chunk recurrence over c + 1 states
            + 2 * b * c * H * Q * P * N)  # Y_off = C state
    assert f["mamba2/scan"] == 2 * scan
    assert f["mamba2/out_proj"] == 2 * 2 * t * INNER * D
    # one token after a state (decode): the recurrent form, one bmm [b h, p, n] @ [b h, n, 1]; the conv over K + 1
    d = count(hybrid(), Workload(phase="decode", seq_len=1, context=20, batch_size=b)).flops.components
    assert d["mamba2/scan"] == 2 * 2 * b * H * P * N
    assert d["mamba2/conv"] == 2 * 2 * b * 2 * CHANNELS * K
    # the unpadded figure beside the padded one: 10 positions as 2 chunks of 4 and one of 2
    op = next(op for op, _ in count(hybrid(), Workload(seq_len=s, batch_size=b)).inventory
              if op.component == "mamba2/scan")
    pairs = 2 * Q * Q + 2 * 2
    assert op.useful() == 2 * b * H * (pairs * (N + P) + 2 * s * P * N + (c + 1) ** 2 * P * N) < op.forward()[
        "mamba2/scan"]


def test_a_contraction_of_size_one_is_a_multiply():
    # torch's einsum contracts a dimension of size 1 by a multiply, no bmm: FlopCounterMode counts those terms 0
    one = SSDScan("mamba2/scan", 1, 8, 2, 4, 1, 1, 4)  # d_state 1: G and Y_off are multiplies
    assert one.forward()["mamba2/scan"] == 2 * 2 * 2 * 16 * 4 + 2 * 2 * 2 * 4 * 4 + 2 * 2 * 9 * 4
    chunk_one = SSDScan("mamba2/scan", 1, 3, 1, 2, 2, 1, 1)  # chunk 1: Y_diag and the chunk states are multiplies
    # G: 3 chunks of [1, 2] @ [2, 1]; the recurrence [4, 4] @ [4, 2 * 2]; Y_off: 3 of [1, 2] @ [2, 2]
    assert chunk_one.forward()["mamba2/scan"] == 2 * 3 * 2 + 2 * 16 * 2 * 2 + 2 * 3 * 2 * 2 == 164


WORKLOADS = [None, Workload(phase="prefill", seq_len=7), Workload(phase="prefill", seq_len=1),
             Workload(phase="decode", seq_len=1, context=9, batch_size=2),
             Workload(phase="prefill", seq_len=5, context=7),
             Workload(seq_len=8, batch_size=2)]


@pytest.mark.parametrize("workload", WORKLOADS, ids=str)
def test_the_reference_model_agrees_with_flop_counter_and_fvcore(workload):
    report = check(hybrid(), "meta", workload=workload) if workload else check(hybrid(), "meta")
    assert report.match, report
    rows = {r.component: r for r in report.forward}
    assert rows["mamba2/scan"].flop_counter > 0


@pytest.mark.parametrize("sizes", [
    {"n_heads": 2, "head_dim": 1, "d_state": 1, "n_groups": 2, "conv_kernel": 1, "chunk_size": 1, "bias": True,
     "conv_bias": False},
    {"n_heads": 4, "head_dim": 2, "d_state": 3, "n_groups": 1, "conv_kernel": 2, "chunk_size": 16},
    {"n_heads": 1, "head_dim": 8, "d_state": 2, "n_groups": 1, "conv_kernel": 3, "chunk_size": 3},
], ids=["ones", "one-group-long-chunk", "one-head"])
@pytest.mark.parametrize("workload", [Workload(seq_len=9, batch_size=2), Workload(phase="decode", seq_len=1,
                                                                                   context=4)], ids=str)
def test_odd_sizes_agree_too(sizes, workload):
    assert check(hybrid(**sizes), "meta", workload=workload).match


def test_the_state_is_a_constant_per_sequence_apart_from_the_kv_cache():
    b = 3
    short = inference_memory(hybrid(), Workload(phase="decode", seq_len=1, context=15, batch_size=b))
    long = inference_memory(hybrid(), Workload(phase="decode", seq_len=1, context=63, batch_size=b))
    # per Mamba2 block: the conv's last K - 1 positions of its 96 channels (bf16, 2 bytes) and the SSM state
    # [h, p, n] in fp32 (4 bytes), as transformers keeps it
    conv, ssm = CHANNELS * (K - 1), H * P * N
    assert short.state_bytes == long.state_bytes == 2 * b * (conv * 2 + ssm * 4)
    assert long.state.to_dict() == {"mamba2/conv": 2 * b * conv * 2, "mamba2/scan": 2 * b * ssm * 4}
    assert long.state_dtypes == {"mamba2/conv": "bf16", "mamba2/scan": "fp32"}
    # the KV cache: the attention block, b x 64 tokens x 4 kv heads x (8 + 8) x 2 bytes
    assert long.kv_cache_bytes == b * 64 * 4 * 16 * 2
    # tensor parallelism splits the heads and the conv's channels
    assert inference_memory(hybrid(), Workload(phase="decode", seq_len=1, context=63, batch_size=b),
                            tp=2).state_bytes == long.state_bytes // 2
    assert not inference_memory(hybrid(), Workload(phase="decode", seq_len=1, context=63),
                                dtype="fp32").state_bytes % (4 * (conv + ssm))


def test_training_memory_is_refused_by_name():
    with pytest.raises(UnsupportedFigure, match="SSDScan 'mamba2/scan' does not define saved"):
        training_memory(hybrid(), Workload(seq_len=8, batch_size=2))


def test_defaults_are_mamba2configs():
    z = Mamba2Sizes()
    # transformers' Mamba2Config: num_heads 128, head_dim 64, state_size 128, n_groups 8, conv_kernel 4,
    # chunk_size 256, use_conv_bias true, use_bias false
    assert (z.n_heads, z.head_dim, z.d_state, z.n_groups, z.conv_kernel, z.chunk_size, z.conv_bias, z.bias) == (
        128, 64, 128, 8, 4, 256, True, False)
    assert (z.d_inner, z.conv_channels, z.in_width) == (8192, 8192 + 2048, 8192 + 10240 + 128)


@pytest.mark.parametrize("changes, message", [
    ({"kinds": {"mamba2": {"n_heads": 4, "n_groups": 3}}},
     "kinds.mamba2.n_groups=3 does not divide kinds.mamba2.n_heads=4"),
    ({"kinds": {"mamba2": {"d_state": 0}}}, "kinds.mamba2.d_state=0: Input should be greater than or equal to 1"),
    ({"kinds": {"mamba2": {"chunk_size": "4"}}}, "kinds.mamba2.chunk_size='4': Input should be a valid integer"),
    ({"kinds": {"mamba2": {"expand": 2}}}, "kinds.mamba2.expand=2: Extra inputs are not permitted"),
    ({"causal": False}, "block_pattern has 'mamba2' blocks, a causal scan: set causal=true"),
])
def test_bad_sizes_are_refused_by_field_and_value(changes, message):
    fields = {"n_layers": 2, "d_model": D, "n_heads": 4, "vocab_size": V, "seq_len": 8,
              "block_pattern": ["mamba2", "attention+mlp"]}
    with pytest.raises(ValueError) as e:
        ModelSpec(**(fields | changes))
    assert message in str(e.value), str(e.value)
