"""The `parallel_hybrid` block kind (Falcon-H1's mixer): attention and a Mamba2 mixer side by side on one normed input,
made of the `attention` and `mamba2` kinds; its arithmetic by hand, the reference model held to FlopCounterMode and
fvcore, what a train step keeps held to MemTracker to the byte, and the Mamba2 mixer without its gated norm."""

import pytest

from tfcalc import ModelSpec, Workload, count
from tfcalc.verify import check
from tfcalc.verify.memory_check import check_memory

D, V, F = 32, 50, 48
H, HKV, DH = 4, 2, 8  # attention heads, key/value heads, head width
MH, P, N, G, K, Q = 4, 12, 5, 2, 3, 4  # Mamba2 heads, head_dim, d_state, groups, conv taps, chunk
INNER = MH * P  # 48


def parallel(**sizes) -> ModelSpec:
    """Two blocks of parallel_hybrid (attention beside Mamba2) and a gated MLP."""
    mamba2 = {"n_heads": MH, "head_dim": P, "d_state": N, "n_groups": G, "conv_kernel": K, "chunk_size": Q} | sizes
    return ModelSpec(n_layers=2, d_model=D, n_heads=H, n_kv_heads=HKV, d_ff=F, vocab_size=V, seq_len=9,
                     positions="rotary", mlp="gated", activation="silu", norm="rmsnorm", bias=False,
                     tie_embeddings=False, block_pattern=["parallel_hybrid+mlp"], kinds={"mamba2": mamba2})


@pytest.mark.parametrize("gated_norm", [True, False])
def test_parameters_by_hand(gated_norm):
    p = count(parallel(gated_norm=gated_norm)).params.components
    assert p["parallel_hybrid/norm"] == 2 * D  # one norm before both branches
    assert p["mamba2/in_proj"] == 2 * D * (2 * INNER + 2 * G * N + MH)  # D -> z, x, B, C, dt
    assert p["mamba2/conv"] == 2 * (INNER + 2 * G * N) * (K + 1)  # depthwise, with a bias
    assert p["mamba2/scan"] == 2 * 3 * MH  # A_log, D, dt_bias
    assert p.get("mamba2/gated_norm", 0) == (2 * INNER if gated_norm else 0)
    assert p["mamba2/out_proj"] == 2 * INNER * D
    assert p["attention/qkv"] == 2 * D * (H + 2 * HKV) * DH
    assert p["attention/out"] == 2 * H * DH * D
    assert p["mlp/norm"] == 2 * D and p["mlp/up"] == p["mlp/gate"] == p["mlp/down"] == 2 * D * F
    assert "attention/norm" not in p and "mamba2/norm" not in p


def test_forward_flops_by_hand_are_the_two_branches_and_the_mlp():
    b, s = 2, 9
    f = count(parallel(), Workload(seq_len=s, batch_size=b)).flops.components
    t = b * s  # 2 blocks, 2 FLOPs per multiply-add
    assert f["attention/qkv"] == 2 * 2 * t * D * (H + 2 * HKV) * DH
    assert f["attention/scores"] == f["attention/values"] == 2 * 2 * b * H * s * s * DH  # every (query, key) pair
    assert f["mamba2/in_proj"] == 2 * 2 * t * D * (2 * INNER + 2 * G * N + MH)
    assert f["mamba2/out_proj"] == 2 * 2 * t * INNER * D
    # a Mamba2 block alone (mamba2+mlp) does the same Mamba2 work
    alone = parallel().replace(block_pattern=["mamba2+mlp"])
    a = count(alone, Workload(seq_len=s, batch_size=b)).flops.components
    assert all(f[c] == a[c] for c in a if c.startswith("mamba2/") and c != "mamba2/norm")


def test_the_records_keep_their_parts_family():
    from tfcalc.arch import build

    families = build(parallel()).families()
    assert families["attention/qkv"] == "attention" and families["mamba2/in_proj"] == "mixer"
    assert families["parallel_hybrid/norm"] == "mixer"


@pytest.mark.parametrize("workload", [None, Workload(phase="prefill", seq_len=7, batch_size=2, context=5),
                                      Workload(phase="decode", seq_len=1, batch_size=2, context=6)],
                         ids=["train", "prefill", "decode"])
@pytest.mark.parametrize("gated_norm", [True, False])
def test_the_reference_model_agrees_with_flop_counter_and_fvcore(workload, gated_norm):
    spec = parallel(gated_norm=gated_norm)
    report = check(spec, "meta", workload=workload) if workload else check(spec, "meta")
    assert report.match, report


def test_a_sliding_window_reaches_the_attention_branch():
    spec = parallel().replace(sliding_window=4)
    f = count(spec, Workload(seq_len=9)).flops
    assert f.forward_windowed < f.forward_causal < f.forward
    assert check(spec, "meta").match


EXACT = ("weights", "gradients", "optimizer states", "master weights", "activations (end of forward)")


@pytest.mark.parametrize("gated_norm, recompute", [(True, "none"), (False, "selective"), (False, "full")])
def test_training_memory_is_what_memtracker_sees(recompute, gated_norm):
    report = check_memory(parallel(gated_norm=gated_norm), Workload(seq_len=9, batch_size=2), "bf16-mixed", "adamw",
                          recompute, "meta")
    rows = {r.category: r for r in report.rows}
    for category in EXACT:
        assert rows[category].difference == 0, (category, rows[category])


def test_the_fused_gate_gives_eagers_gradients():
    import torch
    import torch.nn.functional as F

    from tfcalc.blocks.mamba2.reference import _gate

    torch.manual_seed(0)
    y, z = (torch.randn(2, 7, 6, dtype=torch.float64, requires_grad=True) for _ in range(2))
    dy = torch.randn(2, 7, 6, dtype=torch.float64)
    fused = torch.autograd.grad(_gate(y, z), (y, z), dy)
    eager = torch.autograd.grad(y * F.silu(z), (y, z), dy)
    for a, e in zip(fused, eager):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("changes, message", [
    ({"kinds": {"mamba2": {"n_heads": 3, "n_groups": 2}}}, "kinds.mamba2.n_groups=2 does not divide"),
    ({"kinds": {"mamba2": {"gated_norm": "no"}}}, "kinds.mamba2.gated_norm='no'"),
    ({"causal": False}, "block_pattern has 'mamba2' blocks, a causal scan: set causal=true"),
    ({"kinds": {"parallel_hybrid": {}}}, "kinds.parallel_hybrid: not a block kind with sizes of its own"),
])
def test_bad_sizes_are_refused_by_field_and_value(changes, message):
    fields = {"n_layers": 2, "d_model": D, "n_heads": 4, "vocab_size": V, "seq_len": 8,
              "block_pattern": ["parallel_hybrid+mlp"]}
    with pytest.raises(ValueError) as e:
        ModelSpec(**(fields | changes))
    assert message in str(e.value), str(e.value)
