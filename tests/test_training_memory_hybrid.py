"""Training memory of the gated DeltaNet (Qwen3-Next, Qwen3.5): what a train step keeps for backward, record by
record, by hand, and held to torch's MemTracker to the byte on the reference model (which keeps what FLA's fused
chunk_gated_delta_rule and FusedRMSNormGated keep), in bf16-mixed and fp32, recompute none / selective / full;
Qwen3.5's and Qwen3-Next's text models read from their config.json, their parameters against transformers' classes
on meta; and the command line on the published presets."""

import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from typer.testing import CliRunner

from tfcalc import ModelSpec, Workload, load_preset
from tfcalc.arch.ops import Parallel, UnsupportedFigure
from tfcalc.blocks.gated_deltanet.records import DeltaNetConv, DeltaRule
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.plan.training import Layout, training_memory
from tfcalc.verify.memory_check import check_memory

D, V = 32, 50
HK, HV, DK, DV, K, C = 2, 4, 8, 6, 4, 8  # key heads, value heads, their widths, conv taps, chunk
KEY, VALUE = HK * DK, HV * DV  # 16, 24
CHANNELS = 2 * KEY + VALUE  # the conv's: q, k, v (56)
EXACT = ("weights", "gradients", "optimizer states", "master weights", "activations (end of forward)")


def deltanet(n_layers: int = 2, **sizes) -> ModelSpec:
    """Blocks gated_deltanet+mlp, attention+mlp."""
    kinds = {"key_heads": HK, "value_heads": HV, "key_head_dim": DK, "value_head_dim": DV, "conv_kernel": K,
             "chunk": C} | sizes
    return ModelSpec(n_layers=n_layers, d_model=D, n_heads=4, n_kv_heads=2, vocab_size=V, seq_len=32,
                     positions="rotary", mlp="gated", activation="silu", norm="rmsnorm", bias=False, qk_norm="head",
                     block_pattern=["gated_deltanet+mlp", "attention+mlp"], kinds={"gated_deltanet": kinds})


def test_what_a_gated_deltanet_block_keeps_by_hand():
    b, s, a = 2, 10, 2  # bf16 activations; 10 positions: the rule pads to 16 (2 chunks of 8) and keeps none of them
    t = b * s
    kept = training_memory(deltanet(), Workload(seq_len=s, batch_size=b)).stage.activation_components
    assert kept["gated_deltanet/norm"] == t * D * a + t * 4  # the block's input and the fp32 rstd per row
    assert kept["gated_deltanet/in_proj_qkvz"] == t * D * a  # the normalised x (in_proj_ba reads the same)
    # the conv's input [b, 56, s] (a view of in_proj_qkvz's output) and its padded output [b, 56, s + K - 1], which
    # the silu reads a slice of; the silu's output is not kept (the rule's fused form copies what it keeps)
    assert kept["gated_deltanet/conv"] == (t * CHANNELS + b * (s + K - 1) * CHANNELS) * a == 5152
    # FLA's rule: q and k normalised and repeated to Hv heads [t, 4, 8], v contiguous [t, 4, 6], beta [t, 4] and A
    # [t, 4, C]; fp32 [t, 4]: q's and k's rstd, g's local cumsum, softplus's input and output; -exp(A_log) and
    # exp(A_log) [4] fp32
    rows = t * HV
    assert kept["gated_deltanet/delta_rule"] == rows * (2 * DK + DV + 1 + C) * a + rows * 5 * 4 + 2 * HV * 4 == 6592
    # the fused gated norm: o [t, 4, 6], z [t, 24] (the rest of in_proj_qkvz's output) and the fp32 rstd per head
    assert kept["gated_deltanet/out_norm"] == t * VALUE * a + t * VALUE * a + rows * 4 == 2240
    assert kept["gated_deltanet/out_proj"] == t * VALUE * a
    assert t * CHANNELS + t * VALUE == t * (2 * KEY + 2 * VALUE)  # in_proj_qkvz's output, once: conv's and z


def test_tensor_and_context_parallelism_split_what_the_rule_keeps():
    rule = DeltaRule("gated_deltanet/delta_rule", 2, 10, HK, HV, DK, DV, C)
    whole = rule.saved(2, "none", Parallel())
    assert whole == {"q, k, v": 80 * 22 * 2, "beta, A": 80 * 9 * 2, "statistics": 80 * 5 * 4, "decay": 2 * 4 * 4}
    # tensor parallelism splits the heads; context parallelism the positions, not the [Hv] vectors
    assert rule.saved(2, "none", Parallel(tp=2)) == {k: v // 2 for k, v in whole.items()}
    assert rule.saved(2, "selective", Parallel(cp=2))["decay"] == 2 * 4 * 4
    assert rule.saved(2, "full", Parallel(tp=2, cp=2))["q, k, v"] == 80 * 22 * 2 // 4
    conv = DeltaNetConv("gated_deltanet/conv", 2, 10, CHANNELS, K, 10 + K - 1)
    assert conv.saved(2, "none", Parallel(tp=2)) == {"conv": 2 * 13 * CHANNELS * 2 // 2}
    with pytest.raises(UnsupportedFigure, match="DeltaRule 'gated_deltanet/delta_rule' does not define saved"):
        DeltaRule("gated_deltanet/delta_rule", 2, 1, HK, HV, DK, DV, C, recurrent=True).saved(2, "none", Parallel())
    one = training_memory(deltanet(), Workload(seq_len=8, batch_size=2)).stage.activation_components
    two = training_memory(deltanet(), Workload(seq_len=8, batch_size=2), layout=Layout(tp=2)).stage.activation_components
    for component in ("gated_deltanet/conv", "gated_deltanet/out_proj"):
        assert two[component] * 2 == one[component], component  # channels, value heads: split 2 ways


SIZES = {
    "default": {},
    "equal-heads": {"key_heads": 4},  # q and k are views of the silu's output, not repeated copies
    "one-chunk-long": {"chunk": 64, "conv_kernel": 1},
    "chunk-of-one": {"chunk": 1, "key_head_dim": 3, "value_head_dim": 1, "conv_kernel": 2},
}
# b = 1 with a padded last chunk: g's cumsum and A sliced from a padded tensor must not keep it whole
CASES = [("default", Workload(seq_len=10, batch_size=2)), ("default", Workload(seq_len=9)),
         ("equal-heads", Workload(seq_len=16, batch_size=2)), ("one-chunk-long", Workload(seq_len=9, batch_size=2)),
         ("chunk-of-one", Workload(seq_len=5, batch_size=3))]


# every recompute mode on the first case (the rule keeps the same under each; full keeps the blocks' inputs)
RUNS = [(n, w, r) for i, (n, w) in enumerate(CASES) for r in (("none", "selective", "full") if i == 0 else ("none",))]


@pytest.mark.parametrize("sizes, workload, recompute", RUNS,
                         ids=[f"{n}-b{w.batch_size}-s{w.seq_len}-{r}" for n, w, r in RUNS])
def test_training_memory_is_what_memtracker_sees(sizes, workload, recompute):
    report = check_memory(deltanet(**SIZES[sizes]), workload, "bf16-mixed", "adamw", recompute, "meta")
    rows = {r.category: r for r in report.rows}
    for category in EXACT:
        assert rows[category].difference == 0, (category, rows[category])
    assert report.match


@pytest.mark.parametrize("precision, optimizer", [("fp32", "sgd"), ("bf16", "adamw")])
def test_every_recipe_agrees_to_the_byte(precision, optimizer):
    report = check_memory(deltanet(), Workload(seq_len=9, batch_size=2), precision, optimizer, "none", "meta")
    assert [r.difference for r in report.rows if r.category in EXACT] == [0] * 5


def test_a_real_cpu_step_agrees():  # real data: the fused rule's and gated norm's backward run
    report = check_memory(deltanet(), Workload(seq_len=9, batch_size=2), "bf16-mixed", "adamw", "selective", "cpu")
    assert [r.difference for r in report.rows if r.category in EXACT] == [0] * 5


def test_the_fused_functions_give_eagers_gradients():
    from tfcalc.blocks.gated_deltanet.reference import GatedRMSNorm, _ChunkRuleFunction, _gated_rms_norm, chunked

    torch.manual_seed(0)
    b, s, H, dk, dv, chunk = 2, 11, 3, 5, 4, 4
    q, k = torch.randn(b, s, H, dk), torch.randn(b, s, H, dk)
    v, beta = torch.randn(b, s, H, dv), torch.rand(b, s, H)
    g = -torch.rand(b, s, H)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, g, beta)]
    fused = _ChunkRuleFunction.apply(*leaves, chunk)
    eager_leaves = [t.clone().requires_grad_() for t in (q, k, v, g, beta)]
    eager = chunked(*eager_leaves, chunk, None)
    assert torch.allclose(fused, eager, atol=1e-5)
    dout = torch.randn_like(eager)
    fused_grads = torch.autograd.grad(fused, leaves, dout)
    eager_grads = torch.autograd.grad(eager, eager_leaves, dout)
    for name, x, y in zip("q k v g beta".split(), fused_grads, eager_grads):
        assert torch.allclose(x, y, atol=1e-4, rtol=1e-4), name
    norm = GatedRMSNorm(dv)
    x, z = torch.randn(b, s, H, dv, requires_grad=True), torch.randn(b, s, H, dv, requires_grad=True)
    out = norm(x, z)
    ref = _gated_rms_norm(x, z, norm.weight, norm.eps)
    assert torch.allclose(out, ref)
    for p, r in zip(torch.autograd.grad(out.sum(), (x, z, norm.weight)),
                    torch.autograd.grad(ref.sum(), (x, z, norm.weight))):
        assert torch.allclose(p, r, atol=1e-5)


def _text_params(model_class: str, config: dict) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in getattr(transformers, model_class)(hf_config(config)).parameters())


TINY_NEXT = {"model_type": "qwen3_next", "num_hidden_layers": 4, "hidden_size": 32, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 24, "vocab_size": 50,
             "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
             "linear_value_head_dim": 6, "linear_conv_kernel_dim": 3, "num_experts": 4, "num_experts_per_tok": 2,
             "moe_intermediate_size": 12, "shared_expert_intermediate_size": 10, "mlp_only_layers": [1],
             "max_position_embeddings": 256}
TINY_35 = {k: v for k, v in TINY_NEXT.items() if k not in ("mlp_only_layers", "num_experts", "num_experts_per_tok",
                                                          "moe_intermediate_size", "shared_expert_intermediate_size")}


@pytest.mark.parametrize("model_class, config", [
    ("Qwen3_5ForCausalLM", {**TINY_35, "model_type": "qwen3_5_text"}),
    ("Qwen3NextForCausalLM", TINY_NEXT)], ids=["qwen3_5_text", "qwen3_next"])
def test_qwen3_5_and_qwen3_next_from_their_configs(tmp_path, model_class, config):
    spec = read_hf_config(write(tmp_path, config)).spec
    # the parameters the plan holds weights, gradients and states for: transformers' own class on meta
    plan = training_memory(spec, Workload(seq_len=9, batch_size=2))
    assert plan.weights == 2 * _text_params(model_class, config)  # bf16 weights
    # the activations: the reference model under MemTracker, the rule's default chunk of 64 padding 9 positions
    report = check_memory(spec, Workload(seq_len=9, batch_size=2), "bf16-mixed", "adamw", "none", "meta")
    assert [r.difference for r in report.rows if r.category in EXACT] == [0] * 5


def test_qwen3_5_0_8b_on_the_command_line():
    r = CliRunner().invoke(app, ["memory", "--phase", "train", "-p", "qwen3.5-0.8b", "-N", "4096", "--json"])
    assert r.exit_code == 0, r.output
    import json
    kept = json.loads(r.output)["activation_components"]
    spec = load_preset("qwen3.5-0.8b")
    z = spec.sizes("gated_deltanet")
    assert (z.value_heads, z.key_head_dim, z.value_head_dim, z.chunk) == (16, 128, 128, 64)
    layers = spec.block_pattern.count("gated_deltanet+mlp") * spec.n_layers // len(spec.block_pattern)  # 18 of 24
    rows = 4096 * 16  # tokens x value heads
    per_layer = rows * (2 * 128 + 128 + 1 + 64) * 2 + rows * 5 * 4 + 2 * 16 * 4
    assert layers == 18 and kept["gated_deltanet/delta_rule"] == 18 * per_layer


@pytest.mark.parametrize("preset", ["qwen3-next-80b-a3b", "qwen3.5-35b-a3b"])
def test_the_moe_presets_plan(preset):
    r = CliRunner().invoke(app, ["memory", "--phase", "train", "-p", preset, "-N", "2048"])
    assert r.exit_code == 0, r.output
    assert "gated_deltanet/delta_rule" in r.output


# ------------------------------------------------------------------------------------------ Mamba v1 (Jamba)
MN, MK, MR, INNER = 4, 3, 3, 64  # d_state, conv taps, dt_rank, d_inner (expand 2)


def mamba(**sizes) -> ModelSpec:
    """Blocks mamba, mamba, attention+mlp."""
    kinds = {"d_state": MN, "d_conv": MK, "dt_rank": MR} | sizes
    return ModelSpec(n_layers=3, d_model=D, n_heads=4, vocab_size=V, seq_len=6, positions="rotary", mlp="gated",
                     activation="silu", norm="rmsnorm", bias=False, block_pattern=["mamba", "mamba", "attention+mlp"],
                     kinds={"mamba": kinds})


@pytest.mark.parametrize("b", [2, 1])
def test_what_a_mamba_block_keeps_by_hand(b):
    s, a = 6, 2
    t = b * s
    kept = training_memory(mamba(), Workload(seq_len=s, batch_size=b)).stage.activation_components
    # 2 Mamba blocks, each:
    assert kept["mamba/in_proj"] == 2 * t * D * a  # its input, the normalised x
    # in_proj's output [t, 2 d_inner] whole (the conv's input is a view of its first half) and the conv's padded
    # output [b, 64, s + K - 1], which the silu reads a slice of
    assert kept["mamba/conv"] == 2 * (2 * t * INNER + b * (s + MK - 1) * INNER) * a
    # x_proj: its input [t, 64] (a copy of the transposed activation when b > 1, a view of it when b = 1)
    assert kept["mamba/x_proj"] == 2 * t * INNER * a
    # dt_proj: dt, a view of x_proj's output [t, r + 2n], which stays whole
    assert kept["mamba/dt_proj"] == 2 * t * (MR + 2 * MN) * a
    # selective_scan_fn: u (b > 1 only: x_proj's is a copy), delta, z and out [b, 64, s]; B and C [b, 4, s]; the
    # fp32 states at the chunk's end [b, 64, 1, 2 * 4]; A and exp(A_log) [64, 4] fp32
    u = 1 if b > 1 else 0
    assert kept["mamba/scan"] == 2 * ((3 + u) * t * INNER * a + 2 * t * MN * a + b * INNER * 2 * MN * 4
                                      + 2 * INNER * MN * 4)
    assert kept["mamba/out_proj"] == 2 * t * INNER * a


def test_the_scan_splits_by_channels_and_its_states_by_chunks_of_2048():
    from tfcalc.blocks.mamba.records import SelectiveScan

    scan = SelectiveScan("mamba/scan", 2, 4097, 64, 4)  # 3 chunks of 2048
    assert scan.saved(2, "none", Parallel()) == {"u, delta, z, out": 4 * 2 * 4097 * 64 * 2,
                                                 "B, C": 2 * 2 * 4097 * 4 * 2, "states": 2 * 64 * 3 * 8 * 4,
                                                 "A": 2 * 64 * 4 * 4}
    two = scan.saved(2, "none", Parallel(tp=2))
    assert two["u, delta, z, out"] * 2 == 4 * 2 * 4097 * 64 * 2 and two["A"] == 64 * 4 * 4
    assert two["B, C"] == 2 * 2 * 4097 * 4 * 2  # made by the row-parallel x_proj: whole on each GPU


MAMBA_CASES = [({}, Workload(seq_len=6, batch_size=2)), ({}, Workload(seq_len=7)),
               ({"inner_norms": True, "bias": True, "conv_bias": False}, Workload(seq_len=5, batch_size=3)),
               ({"d_state": 1, "d_conv": 1, "dt_rank": 1, "expand": 1, "inner_norms": True}, Workload(seq_len=4))]
MAMBA_RUNS = [(z, w, r) for i, (z, w) in enumerate(MAMBA_CASES)
              for r in (("none", "selective", "full") if i == 0 else ("none",))]


@pytest.mark.parametrize("sizes, workload, recompute", MAMBA_RUNS,
                         ids=[f"{i}-b{w.batch_size}-s{w.seq_len}-{r}" for i, (_, w, r) in enumerate(MAMBA_RUNS)])
def test_mamba_training_memory_is_what_memtracker_sees(sizes, workload, recompute):
    report = check_memory(mamba(**sizes), workload, "bf16-mixed", "adamw", recompute, "meta")
    rows = {r.category: r for r in report.rows}
    for category in EXACT:
        assert rows[category].difference == 0, (category, rows[category])
    assert report.match


def test_mamba_fp32_and_a_real_cpu_step_agree():
    report = check_memory(mamba(inner_norms=True), Workload(seq_len=6, batch_size=2), "fp32", "sgd", "none", "meta")
    assert [r.difference for r in report.rows if r.category in EXACT] == [0] * 5
    report = check_memory(mamba(), Workload(seq_len=6, batch_size=2), "bf16-mixed", "adamw", "none", "cpu")
    assert [r.difference for r in report.rows if r.category in EXACT] == [0] * 5


def test_the_fused_scan_gives_eagers_gradients():
    from tfcalc.blocks.mamba.reference import _scan, _SelectiveScanFunction

    torch.manual_seed(0)
    b, d, s, n = 2, 5, 7, 3
    given = [torch.randn(b, d, s), torch.randn(b, d, s), -torch.rand(d, n), torch.randn(b, s, n),
             torch.randn(b, s, n), torch.randn(d), torch.randn(b, d, s), torch.randn(d)]
    fused_leaves = [t.clone().requires_grad_() for t in given]
    eager_leaves = [t.clone().requires_grad_() for t in given]
    fused, eager = _SelectiveScanFunction.apply(*fused_leaves), _scan(*eager_leaves)
    assert torch.allclose(fused, eager, atol=1e-6)
    dy = torch.randn_like(eager)
    names = "u delta A B C D z delta_bias".split()
    for name, x, y in zip(names, torch.autograd.grad(fused, fused_leaves, dy), torch.autograd.grad(eager, eager_leaves, dy)):
        assert torch.allclose(x, y, atol=1e-5, rtol=1e-5), name


JAMBA = {"model_type": "jamba", "num_hidden_layers": 4, "hidden_size": 16, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 24, "num_experts": 4, "attn_layer_period": 4,
         "attn_layer_offset": 2, "mamba_d_state": 3, "mamba_d_conv": 3, "vocab_size": 30,
         "max_position_embeddings": 64}


def test_jamba_from_its_config(tmp_path):
    spec = read_hf_config(write(tmp_path, JAMBA)).spec
    assert training_memory(spec, Workload(seq_len=6, batch_size=2)).weights == 2 * _text_params("JambaForCausalLM",
                                                                                                JAMBA)
    report = check_memory(spec, Workload(seq_len=6, batch_size=2), "bf16-mixed", "adamw", "none", "meta")
    assert [r.difference for r in report.rows if r.category in EXACT] == [0] * 5


def test_jamba_1_5_mini_on_the_command_line():
    import json

    r = CliRunner().invoke(app, ["memory", "--phase", "train", "-p", "jamba-1.5-mini", "-N", "4096", "--json"])
    assert r.exit_code == 0, r.output
    kept = json.loads(r.output)["activation_components"]
    z = load_preset("jamba-1.5-mini").sizes("mamba")
    assert (z.d_state, z.inner(4096)) == (16, 8192)
    # 28 Mamba blocks, one sequence: delta, z, out [4096, 8192] (u is x_proj's, a view at b = 1) and B, C
    # [4096, 16] in bf16; the states of 2 chunks of 2048 [8192, 2, 32] and A, exp(A_log) [8192, 16], fp32
    per_block = 3 * 4096 * 8192 * 2 + 2 * 4096 * 16 * 2 + 8192 * 2 * 32 * 4 + 2 * 8192 * 16 * 4
    assert kept["mamba/scan"] == 28 * per_block
