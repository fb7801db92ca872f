"""The `gated_deltanet` block kind (Qwen3-Next's linear attention): its own sizes under kinds.gated_deltanet, its
arithmetic by hand (the chunked delta rule as transformers' torch path pads and runs it), the reference model held to
FlopCounterMode and fvcore in train, prefill and decode, the state an inference step carries (what a train step keeps:
tests/test_training_memory_hybrid.py)."""

import pytest

from tfcalc import ModelSpec, Workload, count
from tfcalc.arch import build
from tfcalc.plan.memory import inference_memory
from tfcalc.verify import check
from tfcalc.verify.memory_check import check_memory

D, V = 64, 100
HK, HV, DK, DV, K, C = 2, 4, 8, 12, 4, 8
KEY, VALUE = HK * DK, HV * DV  # 16, 48
CHANNELS = 2 * KEY + VALUE  # the conv's: q, k, v


def hybrid(**changes) -> ModelSpec:
    """Blocks gated_deltanet, attention, gated_deltanet, attention (2 of each)."""
    fields = {"n_layers": 4, "d_model": D, "n_heads": 4, "n_kv_heads": 2, "vocab_size": V, "seq_len": 32, "positions": "rotary",
                  "mlp": "gated", "activation": "silu", "norm": "rmsnorm", "bias": False, "qk_norm": "head",
                  "block_pattern": ["gated_deltanet+mlp", "attention+mlp"],
                  "kinds": {"gated_deltanet": {"key_heads": HK, "value_heads": HV, "key_head_dim": DK,
                                            "value_head_dim": DV, "conv_kernel": K, "chunk": C}}}
    return ModelSpec(**{**fields, **changes})


def test_parameters_by_hand():
    p = count(hybrid()).params.components
    assert p["gated_deltanet/in_proj_qkvz"] == 2 * D * (2 * KEY + 2 * VALUE)  # Linear(D, 2 Hk dk + 2 Hv dv)
    assert p["gated_deltanet/in_proj_ba"] == 2 * D * 2 * HV  # Linear(D, 2 Hv)
    assert p["gated_deltanet/conv"] == 2 * CHANNELS * K  # Conv1d(C, C, K, groups=C), no bias
    assert p["gated_deltanet/delta_rule"] == 2 * 2 * HV  # A_log [Hv], dt_bias [Hv]
    assert p["gated_deltanet/out_norm"] == 2 * DV  # the gated RMSNorm's weight [dv]
    assert p["gated_deltanet/out_proj"] == 2 * VALUE * D
    assert p["gated_deltanet/norm"] == 2 * D  # the block's pre-norm


def chunked(b: int, s: int) -> int:
    """The chunked rule's bmm FLOPs per block: P = s padded to the chunk; per head 2 P (2 C dk + 3 dk dv + C dv)."""
    P = -(-s // C) * C
    return 2 * b * HV * P * (2 * C * DK + 3 * DK * DV + C * DV)


def test_forward_flops_by_hand_as_the_torch_path_pads_them():
    b, n = 2, 13  # 13 tokens: padded to 16, two chunks of 8
    f = count(hybrid(), Workload(seq_len=n, batch_size=b)).flops.components
    t = b * n
    assert f["gated_deltanet/in_proj_qkvz"] == 2 * 2 * t * D * (2 * KEY + 2 * VALUE)
    assert f["gated_deltanet/in_proj_ba"] == 2 * 2 * t * D * 2 * HV
    assert f["gated_deltanet/conv"] == 2 * 2 * b * (n + K - 1) * CHANNELS * K  # F.conv1d padded by K - 1
    # per head and chunk: k_beta k^T and q k^T [C, dk] @ [dk, C]; k_cumdecay S, q S [C, dk] @ [dk, dv];
    # intra @ v_new [C, C] @ [C, dv]; k^T v_new [dk, C] @ [C, dv]
    assert f["gated_deltanet/delta_rule"] == 2 * 2 * b * HV * 2 * C * (2 * C * DK + 3 * DK * DV + C * DV)
    assert f["gated_deltanet/delta_rule"] == 2 * chunked(b, n) == 2 * 2 * 2 * 4 * 16 * (128 + 288 + 96)
    assert f["gated_deltanet/out_proj"] == 2 * 2 * t * VALUE * D
    # decode: the recurrent form is elementwise (no matmul); the conv over K cached + 1 new position: 2 outputs
    d = count(hybrid(), Workload(phase="decode", seq_len=1, context=20, batch_size=b)).flops.components
    assert "gated_deltanet/delta_rule" not in d
    assert d["gated_deltanet/conv"] == 2 * 2 * b * 2 * CHANNELS * K
    # a prefill after a cache: chunked again (from the cached state), the conv over K cached + n new positions
    p = count(hybrid(), Workload(phase="prefill", seq_len=5, context=7, batch_size=b)).flops.components
    assert p["gated_deltanet/delta_rule"] == 2 * chunked(b, 5)
    assert p["gated_deltanet/conv"] == 2 * 2 * b * (5 + 2 * K - 1) * CHANNELS * K


def test_the_triangular_solves_and_the_recurrence_are_apart_and_labelled():
    # FlopCounterMode has no formula for linalg_solve_triangular: two unit-lower-triangular solves per chunk and head,
    # [C, C] \ [C, dv] and [C, C] \ [C, dk], C (C - 1) / 2 multiply-adds per column: C (C - 1) (dk + dv) FLOPs
    b, n = 2, 13
    rule = next(op for op, _ in build(hybrid(), Workload(seq_len=n, batch_size=b))
                if op.component == "gated_deltanet/delta_rule")
    assert rule.non_matmul() == {"gated_deltanet/solve_triangular": b * HV * 2 * C * (C - 1) * (DK + DV)}
    assert rule.useful() == chunked(b, n) * n // 16  # the s positions, unpadded
    step = next(op for op, _ in build(hybrid(), Workload(phase="decode", seq_len=1, context=9, batch_size=b))
                if op.component == "gated_deltanet/delta_rule")
    assert step.forward() == {} and step.non_matmul() == {"gated_deltanet/recurrence": b * HV * DK * DV * 7}


@pytest.mark.parametrize("workload", [None, Workload(phase="prefill", seq_len=13), Workload(phase="prefill", seq_len=2),
                                      Workload(phase="decode", seq_len=1, context=20, batch_size=2),
                                      Workload(phase="prefill", seq_len=5, context=7)], ids=str)
def test_the_reference_model_agrees_with_flop_counter_and_fvcore(workload):
    spec = hybrid()
    report = check(spec, "meta", workload=workload) if workload else check(spec, "meta")
    assert report.match, report
    assert "aten::linalg_solve_triangular" in report.uncounted_ops or (workload and workload.phase == "decode")


def test_equal_key_and_value_heads_and_one_chunk():
    spec = hybrid(kinds={"gated_deltanet": {"key_heads": 3, "value_heads": 3, "key_head_dim": 4,
                                            "value_head_dim": 4, "conv_kernel": 1, "chunk": 64}}, seq_len=10)
    assert check(spec, "meta").match


def test_the_state_is_a_constant_per_sequence_apart_from_the_kv_cache():
    spec, b = hybrid(), 3
    short = inference_memory(spec, Workload(phase="decode", seq_len=1, context=15, batch_size=b))
    long = inference_memory(spec, Workload(phase="decode", seq_len=1, context=31, batch_size=b))
    # 2 gated DeltaNet blocks x (the conv's last K - 1 inputs per channel in bf16, 2 bytes + the recurrent state
    # [Hv, dk, dv] in fp32, 4 bytes: transformers' torch path runs the rule in float32)
    per_sequence = 2 * (CHANNELS * (K - 1) * 2 + HV * DK * DV * 4)
    assert short.state_bytes == long.state_bytes == b * per_sequence == 3 * 2 * (80 * 3 * 2 + 384 * 4)
    assert long.state_dtypes == {"gated_deltanet/conv": "bf16", "gated_deltanet/delta_rule": "fp32"}
    assert long.state_bytes_per_sequence == per_sequence
    # the KV cache: 2 attention blocks x b x 32 tokens x 2 kv heads x (16 + 16) x 2 bytes
    assert long.kv_cache_bytes == 2 * b * 32 * 2 * 32 * 2
    # tensor parallelism splits the conv's channels and the value heads
    assert inference_memory(spec, Workload(phase="decode", seq_len=1, context=31, batch_size=b),
                            tp=2).state_bytes == long.state_bytes // 2


def test_sizes_are_the_kinds_own_with_qwen3_next_defaults():
    default = ModelSpec(n_layers=2, d_model=8, n_heads=2, vocab_size=16, seq_len=8, block_pattern=["gated_deltanet+mlp"])
    z = default.sizes("gated_deltanet")
    assert (z.key_heads, z.value_heads, z.key_head_dim, z.value_head_dim, z.conv_kernel, z.chunk) == \
        (16, 32, 128, 128, 4, 64)
    spec = hybrid()
    assert ModelSpec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize("changes, message", [
    ({"kinds": {"gated_deltanet": {"key_heads": 3, "value_heads": 4}}},
     "kinds.gated_deltanet.key_heads=3 does not divide kinds.gated_deltanet.value_heads=4"),
    ({"kinds": {"gated_deltanet": {"chunk": 0}}}, "kinds.gated_deltanet.chunk=0: Input should be greater than"),
    ({"kinds": {"gated_deltanet": {"heads": 3}}}, "kinds.gated_deltanet.heads=3: Extra inputs are not permitted"),
    ({"kinds": {"gated_deltanet": {"value_heads": "4"}}}, ("kinds.gated_deltanet.value_heads='4': Input should be a "
                                                           "valid integer")),
    ({"causal": False}, "block_pattern has 'gated_deltanet' blocks, a causal recurrence: set causal=true"),
])
def test_bad_sizes_are_refused_by_field_and_value(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        hybrid(**changes)


# ---- attention_gate (Qwen3-Next's gated attention: q_proj doubled, heads * sigmoid(gate) before out) -------------------

def gated(**changes) -> ModelSpec:
    fields = {"n_layers": 2, "d_model": D, "n_heads": 4, "n_kv_heads": 2, "vocab_size": V, "seq_len": 16, "positions": "rotary",
                  "rotary_dim": 8, "mlp": "gated", "activation": "silu", "norm": "rmsnorm", "bias": False, "qk_norm": "head",
                  "attention_gate": True}
    return ModelSpec(**{**fields, **changes})


def test_the_gate_doubles_the_query_projection_and_nothing_else():
    on, off = count(gated()), count(gated(attention_gate=False))
    dh = D // 4
    # q_proj [D, 2 H dh]: H dh more columns per block
    assert on.params.components["attention/qkv"] - off.params.components["attention/qkv"] == 2 * D * 4 * dh
    assert on.flops.components["attention/qkv"] - off.flops.components["attention/qkv"] == 2 * 2 * 16 * D * 4 * dh
    assert {k: v for k, v in on.flops.components.items() if k != "attention/qkv"} == \
        {k: v for k, v in off.flops.components.items() if k != "attention/qkv"}
    # the sigmoid and the multiply: non-matmul, with the activations
    assert on.non_matmul["activations"] - off.non_matmul["activations"] == 2 * 16 * 4 * dh * 5


@pytest.mark.parametrize("workload", [None, Workload(phase="decode", seq_len=1, context=9, batch_size=2)], ids=str)
def test_the_gated_attention_agrees_with_flop_counter_and_fvcore(workload):
    report = check(gated(), "meta", workload=workload) if workload else check(gated(), "meta")
    assert report.match, report


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_what_the_gate_keeps_is_what_memtracker_sees(recompute):
    # the sigmoid keeps its output and the multiply both operands (the heads and the sigmoid): 2 T H dh
    report = check_memory(gated(), Workload(seq_len=16, batch_size=2), "bf16-mixed", "adamw", recompute, "meta")
    rows = {r.category: r for r in report.rows}
    assert rows["activations (end of forward)"].difference == 0, rows["activations (end of forward)"]
    assert report.match


def test_the_gate_with_latent_attention_is_refused_by_name():
    def spec():  # refused when the spec is made (ModelSpec's MLA check), before any count
        return gated(kv_lora_rank=16, qk_nope_dim=8, qk_rope_dim=8, v_head_dim=8, rotary_dim=None, qk_norm="none",
                     n_kv_heads=4)
    with pytest.raises(ValueError, match="attention_gate=True is not modelled with kv_lora_rank=16"):
        spec()
