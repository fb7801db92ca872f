"""The reference model: its parameters are the analytic count, and it runs forward and backward."""

import pytest
import torch
from hypothesis import given, settings

from strategies import specs
from tfcalc import TfcalcError, Workload, count, list_presets
from tfcalc.reference import build_model, example_inputs


@pytest.mark.parametrize("preset", list_presets(), ids=lambda p: p.name)
def test_every_preset_has_the_analytic_parameter_count(preset):
    if preset.spec.towers:  # a multimodal preset: each tower's reference model and the connectors' torch modules
        from tfcalc.verify import check

        from tfcalc.arch.towers import select
        from tfcalc.verify.folding import foldable

        # a language model with KV sharing or per-layer inputs (gemma4-e2b) is checked block by block, unfolded, on a
        # prompt of 2,048 tokens (the parameters do not depend on it)
        text = select(preset.spec, "text")
        report = check(preset.spec, fold=True) if foldable(text) else check(
            preset.spec, workload=Workload(batch_size=1, seq_len=2048))
        assert report.total(report.params, "model") == count(preset.spec).params.total
        with pytest.raises(TfcalcError, match="built one tower at a time"):
            build_model(preset.spec, "meta")
        return
    model = build_model(preset.spec, "meta")
    assert sum(p.numel() for p in model.parameters()) == count(preset.spec).params.total


@settings(max_examples=300)
@given(specs(qk_and_sandwich_norms=True))
def test_generated_specs_have_the_analytic_parameter_count(spec):
    model = build_model(spec, "meta")
    assert sum(p.numel() for p in model.parameters()) == count(spec).params.total


def _outputs(out):
    return out if isinstance(out, tuple) else (out,)


@settings(max_examples=40)
@given(specs(qk_and_sandwich_norms=True))
def test_cpu_forward_and_backward(spec):
    torch.manual_seed(0)
    model = build_model(spec, "cpu")
    outputs = _outputs(model(*example_inputs(spec, "cpu")))
    width = spec.vocab_size if spec.lm_head else spec.d_model
    assert outputs[0].shape == (spec.batch_size, spec.seq_len, width)
    if spec.pooler:
        assert outputs[1].shape == (spec.batch_size, spec.d_model)
    assert all(torch.isfinite(o).all() for o in outputs)
    sum(o.sum() for o in outputs).backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    # A routed expert that no token chose gets no gradient: that is routing, not a bug; every other tensor must.
    assert [m for m in missing if ".moe.experts." not in m] == []


def test_tied_head_is_the_token_embedding():
    spec = next(p.spec for p in list_presets() if p.name == "gpt2")
    model = build_model(spec, "meta")
    assert model.head.weight is model.embedding.token.weight
    assert [n for n, _ in model.named_parameters()].count("head.weight") == 0


def test_real_routing_sends_each_token_to_exactly_top_k_experts():
    spec = next(p.spec for p in list_presets() if p.name == "mixtral-8x7b").replace(
        n_layers=1, d_model=16, n_heads=4, n_kv_heads=2, d_ff=8, vocab_size=32, seq_len=50, batch_size=3)
    torch.manual_seed(1)
    model = build_model(spec, "cpu")
    seen = []
    for e, expert in enumerate(model.blocks[0].moe.experts):
        expert.up.register_forward_hook(lambda m, args, out, e=e: seen.append((e, args[0].shape[0])))
    model(*example_inputs(spec, "cpu"))
    assert sum(n for _, n in seen) == spec.tokens * spec.top_k  # 150 tokens x 2 experts
    assert len({n for _, n in seen}) > 1  # real routing is uneven; round robin would be even
