"""A spec's stack as a pattern of block kinds (block_pattern): what the flat fields say, said as a pattern, counts
the same; blocks of one kind alone (attention alone, an MLP alone: Nemotron-H's layers) are counted by their
arithmetic and held to FlopCounterMode, fvcore and MemTracker on the reference model."""

import pytest
from typer.testing import CliRunner

from tfcalc import ModelSpec, Workload, count, load_preset
from tfcalc.cli import app
from tfcalc.plan.training import training_memory
from tfcalc.verify import check
from tfcalc.verify.memory_check import check_memory

runner = CliRunner()
SMALL = dict(n_layers=6, d_model=64, n_heads=4, vocab_size=100, seq_len=16)


def figures(spec: ModelSpec) -> tuple:
    r = count(spec)
    m = training_memory(spec, Workload(seq_len=16, batch_size=2), recompute="selective")
    return r.params.components, r.flops.components, r.flops.forward_causal, m.to_dict()


def test_the_flat_fields_as_a_pattern_count_the_same():
    mixtral = load_preset("mixtral-8x7b").replace(n_layers=4, seq_len=16)
    assert figures(mixtral.replace(block_pattern=["attention+moe"])) == figures(mixtral)
    every_other = mixtral.replace(moe_every=2)  # Qwen2-MoE's decoder_sparse_step = 2: blocks 1, 3 MoE
    assert figures(mixtral.replace(block_pattern=["attention+mlp", "attention+moe"])) == figures(every_other)
    dense = ModelSpec(**SMALL)
    assert figures(dense.replace(block_pattern=["attention+mlp"])) == figures(dense)


def test_blocks_of_one_kind_alone():
    # Nemotron-H's layers are attention alone ('*') or an MLP alone ('-'): [attention, mlp, mlp] over 6 blocks is
    # 2 attention blocks and 4 MLP blocks, each with its own pre-norm (LayerNorm: weight and bias, 2 x 64)
    spec = ModelSpec(**SMALL, block_pattern=["attention", "mlp", "mlp"])
    p = count(spec).params.components
    D, F = 64, 256
    assert p["attention/qkv"] == 2 * (D * 3 * D + 3 * D) and p["attention/out"] == 2 * (D * D + D)
    assert p["mlp/up"] == 4 * (D * F + F) and p["mlp/down"] == 4 * (F * D + D)
    assert p["attention/norm"] == 2 * 2 * D and p["mlp/norm"] == 4 * 2 * D
    report = check(spec, "meta")  # FlopCounterMode and fvcore on the reference model, per component
    assert report.match, [r for r in [*report.forward, *report.params] if not r.match]


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_blocks_of_one_kind_alone_keep_what_memtracker_sees(recompute):
    spec = ModelSpec(**SMALL, block_pattern=["attention", "mlp", "attention+moe", "moe"], n_experts=4, top_k=2,
                     positions="rotary", norm="rmsnorm", mlp="gated", activation="silu")
    report = check_memory(spec, Workload(seq_len=16, batch_size=2), "bf16-mixed", "adamw", recompute, "meta")
    rows = {r.category: r for r in report.rows}
    for category in ("weights", "gradients", "optimizer states", "master weights", "activations (end of forward)"):
        assert rows[category].difference == 0, (category, rows[category])
    assert report.match


@pytest.mark.parametrize("flags, message", [
    (["--block-pattern", "attention+rwkv"], "block_pattern: 'attention+rwkv' has 'rwkv'; a block is made of"),
    (["--block-pattern", "mlp+moe", "-E", "4"], "block_pattern: 'mlp+moe': each kind at most once a block"),
    (["--block-pattern", "attention+moe"], "has 'moe' blocks: give n_experts > 1"),
    (["--block-pattern", "attention+mlp", "-E", "4"], "has no 'moe' block, and n_experts=4"),
    (["--block-pattern", "attention+moe", "-E", "4", "--moe-every", "2"], "is not modelled with moe_every=2"),
])
def test_a_pattern_it_cannot_count_is_refused_in_one_line(flags, message):
    r = runner.invoke(app, ["count", "-L", "4", "-d", "64", "-H", "4", "-V", "100", "-N", "16", "--max-positions",
                            "16", *flags])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
    assert all(line.startswith("tfcalc: error: ") for line in r.output.strip().splitlines())


def test_the_flag_is_kept_as_typed():
    r = runner.invoke(app, ["count", "-L", "4", "-d", "64", "-H", "4", "-V", "100", "-N", "16", "--max-positions",
                            "16", "--block-pattern", "attention,mlp", "--json"])
    assert r.exit_code == 0, r.output
    import json
    assert json.loads(r.output)["spec"]["block_pattern"] == ["attention", "mlp"]


def test_relative_positions_need_an_attention_block():
    # T5's bias table is added to attention scores: a stack without attention would hold a table nothing reads
    with pytest.raises(ValueError, match="positions='relative' is T5's bias on attention scores"):
        ModelSpec(**SMALL, positions="relative", block_pattern=["mlp"])
    assert count(ModelSpec(**SMALL, positions="relative", block_pattern=["mlp", "attention"])).params.total
    with pytest.raises(ValueError, match="no attention block"):  # one block: the pattern's attention never runs
        ModelSpec(**{**SMALL, "n_layers": 1}, positions="relative", block_pattern=["mlp", "attention"])
