"""analytic == FlopCounterMode == 2 x fvcore, per component, exactly; and the check can fail."""

import dataclasses

import pytest
from hypothesis import given, settings

from strategies import specs
from tfcalc import ModelSpec, count, list_presets, load_preset
from tfcalc.counts.breakdown import Breakdown
from tfcalc.verify import check
from tfcalc.verify import checker as check_module
from tfcalc.verify.components import component_of_module, component_of_parameter
from tfcalc.verify.folding import foldable


def assert_all_rows_match(report):
    bad = [row for row in [*report.forward, *report.params, *([report.train] if report.train else [])]
           if not row.match]
    assert bad == []
    assert report.match


@pytest.mark.parametrize("preset", list_presets(), ids=lambda p: p.name)
def test_every_preset_on_meta(preset):
    # one block of each kind, counted once per block of that kind (check's folding, which
    # test_hf_deepseek.py::test_a_folded_check_is_the_unfolded_one holds to the unfolded check): every preset's block
    # kinds against FlopCounterMode and fvcore at its full depth, in seconds instead of minutes; a model whose blocks
    # read their place in the stack (per-layer inputs, KV sharing) is built block by block
    spec = preset.spec
    report = check(spec, "meta", fold=foldable(spec))
    assert_all_rows_match(report)
    assert report.to_dict()["forward"]["flop_counter"] == count(spec).flops.forward


def test_gpt2_forward_as_published():
    # nanoGPT transformer_sizing: 291,648,307,200 FLOPs at N = 1024; fvcore's multiply-adds are half of it
    d = check(load_preset("gpt2"), "meta").to_dict()
    assert d["forward"]["analytic"] == d["forward"]["flop_counter"] == 291_648_307_200
    assert d["forward"]["fvcore_macs"] == 145_824_153_600
    assert d["params"]["model"] == 124_439_808


@settings(max_examples=30, deadline=None)
@given(specs())
def test_generated_specs_on_meta(spec):
    assert_all_rows_match(check(spec, "meta"))


@settings(max_examples=15, deadline=None)
@given(specs())
def test_a_folded_check_is_the_unfolded_one_on_generated_specs(spec):
    # what lets test_every_preset_on_meta fold: one block of each kind, counted per block, gives every figure of the
    # model built block by block
    if not foldable(spec):
        return
    whole, folded = check(spec, "meta", fold=False).to_dict(), check(spec, "meta", fold=True).to_dict()
    for key in ("forward", "params"):
        assert whole[key] == folded[key], key


@settings(max_examples=15, deadline=None)
@given(specs(moe=True, max_seq=16))
def test_generated_moe_specs_on_cpu_with_real_routing(spec):
    report = check(spec, "cpu")
    assert report.routing.startswith("real")
    assert_all_rows_match(report)


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_train_step_is_three_forwards(device):
    spec = ModelSpec(n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, vocab_size=50, seq_len=12, batch_size=2,
                     mlp="gated", activation="silu", norm="rmsnorm", positions="rotary", bias=False,
                     tie_embeddings=False, n_experts=4, top_k=2, n_shared_experts=1, shared_expert_gate=True)
    report = check(spec, device, train=True)
    assert_all_rows_match(report)
    assert report.train.flop_counter == 3 * count(spec).flops.forward


def test_cpu_sdpa_is_counted_not_zero():
    spec = load_preset("gpt2").replace(n_layers=1, seq_len=64)
    core = {r.component: r for r in check(spec, "cpu").forward}["attention/core"]
    # scores + values: 2 bmm of B H N N d_head multiply-adds, 2 FLOPs each
    assert core.flop_counter == 2 * 2 * 12 * 64 * 64 * 64 == core.analytic


def test_a_wrong_analytic_count_is_a_mismatch(monkeypatch):
    spec = load_preset("gpt2").replace(n_layers=1, seq_len=16)
    real = count(spec)
    components = dict(real.params.components)
    components["attention/out"] -= 768  # forget one bias vector
    wrong = dataclasses.replace(real, params=dataclasses.replace(real.params, components=Breakdown(components)))
    monkeypatch.setattr(check_module, "count", lambda s, workload=None: wrong)
    report = check(spec, "meta")
    assert not report.match
    assert [r.component for r in report.params if not r.match] == ["attention/out"]


def test_component_names():
    assert component_of_module("blocks.11.attention.qkv") == "attention/qkv"
    assert component_of_module("blocks.0.moe.experts.7.gate") == "moe/experts"
    assert component_of_module("blocks.0.moe.shared.0.down") == "moe/shared_experts"
    assert component_of_module("blocks.0.attention") is None  # containers do not map: no double counting
    assert component_of_parameter("embedding.token.weight") == "embedding/token"
    assert component_of_parameter("pooler.bias") == "pooler"
