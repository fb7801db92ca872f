"""The `mamba` block kind (Mamba v1's selective-scan mixer): its own sizes under kinds.mamba, its arithmetic by hand,
the reference model held to FlopCounterMode and fvcore over train, prefill and decode, the state an inference step
carries (what a train step keeps: tests/test_training_memory_hybrid.py)."""

import math

import pytest

from tfcalc import ModelSpec, Workload, count
from tfcalc.blocks.mamba import MambaSizes
from tfcalc.blocks.mamba.records import SelectiveScan
from tfcalc.plan.memory import inference_memory
from tfcalc.verify import check

D, V = 32, 50
N, K, R, INNER = 4, 3, 3, 64  # d_state, conv taps, dt_rank, d_inner (expand 2)


def hybrid(**sizes) -> ModelSpec:
    """Blocks mamba, mamba, attention+mlp (2 Mamba blocks, 1 attention block)."""
    kinds = {"d_state": N, "d_conv": K, "dt_rank": R} | sizes
    return ModelSpec(n_layers=3, d_model=D, n_heads=4, vocab_size=V, seq_len=6, positions="rotary", mlp="gated",
                     activation="silu", norm="rmsnorm", bias=False, block_pattern=["mamba", "mamba", "attention+mlp"],
                     kinds={"mamba": kinds})


@pytest.mark.parametrize("bias, conv_bias, norms", [(False, True, False), (True, False, True)])
def test_parameters_by_hand(bias, conv_bias, norms):
    p = count(hybrid(bias=bias, conv_bias=conv_bias, inner_norms=norms)).params.components
    assert p["mamba/in_proj"] == 2 * (D * 2 * INNER + (2 * INNER if bias else 0))  # Linear(D, 2 d_inner)
    assert p["mamba/conv"] == 2 * (INNER * K + (INNER if conv_bias else 0))  # Conv1d(64, 64, K, groups=64)
    assert p["mamba/x_proj"] == 2 * INNER * (R + 2 * N)  # Linear(d_inner, r + 2n, bias=False)
    assert p["mamba/dt_proj"] == 2 * (R * INNER + INNER)  # Linear(r, d_inner), its bias always
    assert p["mamba/scan"] == 2 * (INNER * N + INNER)  # A_log [d_inner, n], D [d_inner]
    assert p["mamba/out_proj"] == 2 * (INNER * D + (D if bias else 0))
    assert p["mamba/norm"] == 2 * D
    # Jamba's RMSNorms on dt, B and C
    assert {k: p.get(k, 0) for k in ("mamba/dt_norm", "mamba/b_norm", "mamba/c_norm")} == (
        {"mamba/dt_norm": 2 * R, "mamba/b_norm": 2 * N, "mamba/c_norm": 2 * N} if norms else
        {"mamba/dt_norm": 0, "mamba/b_norm": 0, "mamba/c_norm": 0})


def test_forward_flops_by_hand():
    b, s = 2, 10
    t = b * s
    f = count(hybrid(), Workload(seq_len=s, batch_size=b)).flops.components
    assert f["mamba/in_proj"] == 2 * 2 * t * D * 2 * INNER
    assert f["mamba/conv"] == 2 * 2 * b * (s + K - 1) * INNER * K  # F.conv1d(padding=K-1): s + K - 1 outputs
    assert f["mamba/x_proj"] == 2 * 2 * t * INNER * (R + 2 * N)
    assert f["mamba/dt_proj"] == 2 * 2 * t * R * INNER
    assert f["mamba/scan"] == 2 * 2 * b * s * INNER * N  # a bmm [b, d_inner, n] @ [b, n, 1] per token
    assert f["mamba/out_proj"] == 2 * 2 * t * INNER * D
    # one token after a state (decode): the same bmm once; the conv over K + 1 positions computes 2
    d = count(hybrid(), Workload(phase="decode", seq_len=1, context=20, batch_size=b)).flops.components
    assert d["mamba/scan"] == 2 * 2 * b * INNER * N
    assert d["mamba/conv"] == 2 * 2 * b * 2 * INNER * K
    # nothing is padded in the scan: its unpadded figure is its figure
    scan = SelectiveScan("mamba/scan", b, s, INNER, N)
    assert scan.useful() == scan.forward()["mamba/scan"] == 2 * b * s * INNER * N


WORKLOADS = [None, Workload(phase="prefill", seq_len=5), Workload(phase="prefill", seq_len=1),
             Workload(phase="decode", seq_len=1, context=9, batch_size=2),
             Workload(phase="prefill", seq_len=4, context=7),
             Workload(seq_len=6, batch_size=2)]


@pytest.mark.parametrize("workload", WORKLOADS, ids=str)
def test_the_reference_model_agrees_with_flop_counter_and_fvcore(workload):
    report = check(hybrid(), "meta", workload=workload) if workload else check(hybrid(), "meta")
    assert report.match, report
    rows = {r.component: r for r in report.forward}
    assert rows["mamba/scan"].flop_counter > 0 and rows["mamba/dt_proj"].fvcore_macs > 0


@pytest.mark.parametrize("sizes", [
    {"d_state": 1, "d_conv": 1, "dt_rank": 1, "expand": 1, "bias": True, "conv_bias": False, "inner_norms": True},
    {"d_state": 3, "d_conv": 2, "d_inner": 24, "activation": "gelu"},
    {"d_state": 2, "d_conv": 4, "inner_norms": True},  # dt_rank ceil(32 / 16) = 2
], ids=["ones-norms", "d_inner-gelu", "default-rank-norms"])
@pytest.mark.parametrize("workload", [Workload(seq_len=5, batch_size=2), Workload(phase="decode", seq_len=1,
                                                                                   context=4)], ids=str)
def test_odd_sizes_agree_too(sizes, workload):
    assert check(hybrid(**sizes), "meta", workload=workload).match


def test_the_per_token_loop_on_the_cpu_counts_what_the_batched_form_on_meta_counts():
    # with data the reference runs transformers' loop (s bmm calls), on meta one batched bmm: the same FLOPs
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tfcalc.blocks.mamba.reference import Mamba

    b, s = 2, 5
    counted = {}
    for device in ("cpu", "meta"):
        with torch.device(device):
            mixer, h = Mamba(hybrid()), torch.randn(b, s, D)
        with FlopCounterMode(display=False) as counter:
            y = mixer(h)
        assert y.shape == (b, s, D) and (device == "meta" or torch.isfinite(y).all())
        counted[device] = counter.get_flop_counts()["Mamba"]
    f = count(hybrid(), Workload(seq_len=s, batch_size=b)).flops.components
    assert counted["cpu"] == counted["meta"]
    assert sum(counted["cpu"].values()) == sum(f[c] for c in f if c.startswith("mamba/")) // 2  # one of 2 blocks


def test_a_long_sequence_on_meta():
    assert check(hybrid().replace(seq_len=4096), "meta").match


def test_the_state_is_a_constant_per_sequence_apart_from_the_kv_cache():
    b = 3
    short = inference_memory(hybrid(), Workload(phase="decode", seq_len=1, context=15, batch_size=b))
    long = inference_memory(hybrid(), Workload(phase="decode", seq_len=1, context=63, batch_size=b))
    # per Mamba block: the conv's last K - 1 positions of its d_inner channels (bf16, 2 bytes) and the SSM state
    # [d_inner, n] in fp32 (4 bytes), as transformers keeps it
    conv, ssm = INNER * (K - 1), INNER * N
    assert short.state_bytes == long.state_bytes == 2 * b * (conv * 2 + ssm * 4)
    assert long.state.to_dict() == {"mamba/conv": 2 * b * conv * 2, "mamba/scan": 2 * b * ssm * 4}
    assert long.state_dtypes == {"mamba/conv": "bf16", "mamba/scan": "fp32"}
    assert long.kv_cache_bytes == b * 64 * 4 * 16 * 2  # the attention block: 64 tokens x 4 kv heads x (8 + 8)
    assert inference_memory(hybrid(), Workload(phase="decode", seq_len=1, context=63, batch_size=b),
                            tp=2).state_bytes == long.state_bytes // 2  # the channels split


def test_transformers_keeps_the_ssm_state_in_fp32_and_the_conv_state_in_the_activations_dtype():
    import torch
    import transformers

    config = transformers.MambaConfig(num_hidden_layers=1, hidden_size=8, state_size=2, vocab_size=16)
    model = transformers.MambaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        cache = model(input_ids=torch.zeros(1, 3, dtype=torch.long), use_cache=True).cache
    layer = cache.layers[0]
    assert layer.recurrent_states[0].dtype == torch.float32 and layer.recurrent_states[0].shape == (1, 16, 2)
    assert layer.conv_states[0].dtype == torch.bfloat16


def test_defaults_are_mambaconfigs():
    z = MambaSizes()
    # transformers' MambaConfig: state_size 16, conv_kernel 4, expand 2, time_step_rank "auto" (ceil(D / 16)),
    # use_conv_bias true, use_bias false
    assert (z.d_state, z.d_conv, z.expand, z.conv_bias, z.bias, z.inner_norms) == (16, 4, 2, True, False, False)
    assert (z.inner(768), z.rank(768), z.rank(770)) == (1536, 48, math.ceil(770 / 16))


@pytest.mark.parametrize("changes, message", [
    ({"kinds": {"mamba": {"d_state": 0}}}, "kinds.mamba.d_state=0: Input should be greater than or equal to 1"),
    ({"kinds": {"mamba": {"d_conv": "4"}}}, "kinds.mamba.d_conv='4': Input should be a valid integer"),
    ({"kinds": {"mamba": {"n_groups": 2}}}, "kinds.mamba.n_groups=2: Extra inputs are not permitted"),
    ({"kinds": {"mamba": {"activation": "tanh"}}}, "kinds.mamba.activation='tanh': expected one of"),
    ({"causal": False}, "block_pattern has 'mamba' blocks, a causal scan: set causal=true"),
])
def test_bad_sizes_are_refused_by_field_and_value(changes, message):
    fields = {"n_layers": 2, "d_model": D, "n_heads": 4, "vocab_size": V, "seq_len": 8,
              "block_pattern": ["mamba", "attention+mlp"]}
    with pytest.raises(ValueError) as e:
        ModelSpec(**(fields | changes))
    assert message in str(e.value), str(e.value)
