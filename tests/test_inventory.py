"""The inventory redesign: workloads (decode, prefill), layers that differ, encoder-decoders, each shown by its
arithmetic or held against someone else's implementation (transformers, FlopCounterMode, fvcore)."""

import json

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from strategies import specs, workloads
from tfcalc import ModelSpec, TfcalcError, Workload, build, count, load_preset
from tfcalc.cli import app
from tfcalc.reference import build_model, example_inputs
from tfcalc.verify import check

runner = CliRunner()


def assert_all_rows_match(report):
    assert [r for r in [*report.forward, *report.params] if not r.match] == []
    assert report.match


# ---- the workload apart from the model -----------------------------------------------------------

@settings(max_examples=150)
@given(st.data())
def test_parameters_never_depend_on_the_workload(data):
    spec = data.draw(specs())
    assert count(spec, data.draw(workloads(spec))).params.total == count(spec).params.total


def test_decode_llama3_8b_one_token_against_8192_cached():
    r = count(load_preset("llama3-8b"), Workload(phase="decode", seq_len=1, context=8192))
    L, D, H, Hkv, dh, F, V = 32, 4096, 32, 8, 128, 14336, 128256
    keys = 8192 + 1  # the cache and the new token itself
    f = r.flops.components
    assert f["attention/qkv"] == L * 2 * 1 * D * (H * dh + 2 * Hkv * dh)  # projections: one token
    assert f["attention/scores"] == f["attention/values"] == L * H * 2 * 1 * keys * dh  # core: the context
    assert f["mlp/up"] == f["mlp/gate"] == f["mlp/down"] == L * 2 * D * F
    assert f["head"] == 2 * D * V
    assert r.flops.forward_causal == r.flops.forward  # one query sees every cached key
    assert r.params.total == 8_030_261_248  # LlamaForCausalLM, as in the preset's source


def test_prefill_scores_the_last_token_and_a_cached_prefix_shifts_the_triangle():
    spec = load_preset("gpt2")
    train, prefill = count(spec, Workload(seq_len=512)), count(spec, Workload(seq_len=512, phase="prefill"))
    assert train.flops.components["head"] == 2 * 512 * 768 * 50257
    assert prefill.flops.components["head"] == 2 * 1 * 768 * 50257
    chunk = count(spec, Workload(seq_len=100, context=400, phase="prefill"))
    # queries at positions 400..499: each sees 401..500 keys
    kept = sum(range(401, 501))
    assert chunk.flops.components["attention/scores"] - (chunk.flops.forward - chunk.flops.forward_causal) // 2 \
        == 12 * 12 * 2 * kept * 64
    assert chunk.flops.components["attention/scores"] == 12 * 12 * 2 * 100 * 500 * 64  # the eager 100 x 500


def test_a_workload_the_model_cannot_run_is_refused_by_field():
    with pytest.raises(TfcalcError, match="context \\+ seq_len = 1025 exceeds max_positions=1024"):
        count(load_preset("gpt2"), Workload(phase="decode", seq_len=1, context=1024))
    with pytest.raises(TfcalcError, match="phase='decode': bert-base is a bidirectional encoder"):
        count(load_preset("bert-base"), Workload(phase="decode", seq_len=1, context=3))
    with pytest.raises(ValueError, match="seq_len=4: decode processes one new token"):
        Workload(phase="decode", seq_len=4)
    with pytest.raises(ValueError, match="context=5: a train step has no KV cache"):
        Workload(seq_len=4, context=5)


# ---- layers that differ --------------------------------------------------------------------------

def _moe_spec(**extra) -> ModelSpec:
    return ModelSpec(n_layers=6, d_model=16, n_heads=2, d_ff=40, vocab_size=10, seq_len=4, positions="rotary",
                     mlp="gated", bias=False, n_experts=4, top_k=2, d_expert=8, **extra)


def test_first_dense_then_moe_and_every_other_moe():
    D, F, Fe, E, k, T = 16, 40, 8, 4, 2, 4
    dense, expert = 3 * D * F, 3 * D * Fe
    first = count(_moe_spec(first_dense_layers=2))  # blocks 0, 1 dense; 2..5 MoE
    assert first.params.components["mlp/up"] == 2 * D * F
    assert first.params.components["moe/experts"] == 4 * E * expert
    assert first.params.components["moe/router"] == 4 * D * E
    assert first.params.active == first.params.total - 4 * (E - k) * expert
    every = count(_moe_spec(moe_every=2))  # blocks 1, 3, 5 MoE (Qwen2-MoE's decoder_sparse_step)
    assert every.params.components["mlp/down"] == 3 * D * F
    assert every.flops.components["moe/experts"] == 3 * 2 * T * k * expert
    assert every.flops.components["mlp/up"] == 3 * 2 * T * D * F
    assert every.params.components["mlp/up"] + every.params.components["mlp/gate"] \
        + every.params.components["mlp/down"] == 3 * dense


def test_local_and_global_windows():
    spec = ModelSpec(n_layers=12, d_model=32, n_heads=4, vocab_size=10, seq_len=100, positions="rotary",
                     sliding_window=10, attention_pattern=["local"] * 5 + ["global"])
    r = count(spec)
    local = 10 * 11 // 2 + 90 * 10  # pairs in a 10-token window over 100 queries
    full_causal = 100 * 101 // 2
    per_pair = 2 * 2 * 4 * 8  # scores + values, 2 FLOPs, heads, d_head
    windowed_core = per_pair * (10 * local + 2 * full_causal)  # 10 local blocks, 2 global
    core = r.flops.components["attention/scores"] + r.flops.components["attention/values"]
    assert r.flops.forward - r.flops.forward_windowed == core - windowed_core
    assert r.flops.forward - r.flops.forward_causal == core - per_pair * 12 * full_causal


def test_distinct_layers_not_n_layers_set_the_cost():
    # 3 distinct kinds (dense, MoE global, MoE local) whether there are 12 or 1,260 blocks
    def groups(L: int) -> int:
        spec = _moe_spec(first_dense_layers=3).replace(n_layers=L, sliding_window=8,
                                                       attention_pattern=["local", "global"])
        return len(build(spec).groups)

    assert groups(12) == groups(126) == groups(1260)
    blocks = [g for g in build(_moe_spec(first_dense_layers=3).replace(n_layers=126)).groups
              if g.label.startswith("block")]
    assert [g.repeat for g in blocks] == [3, 123]


def test_window_flags_follow_n_layers():
    # a window in every block stays in every block when -L changes (was: refused at -L 2, 32 of 40 at -L 40)
    mistral = load_preset("mistral-7b")
    for L in (2, 40):
        r = count(mistral.replace(n_layers=L))
        windowed = sum(g.repeat for g in r.inventory.groups
                       if any(getattr(op, "mask", None) and op.mask.window == 4096 for op in g.ops))
        assert windowed == L


# ---- encoder-decoders ----------------------------------------------------------------------------

def test_transformer_base_and_big_within_3_percent_of_the_paper():
    # Vaswani et al. 2017, Table 3: 65M and 213M. V = 37,000 shared and tied; biases; post-norm LayerNorm.
    for name, D, F, published in (("transformer-base", 512, 2048, 65e6), ("transformer-big", 1024, 4096, 213e6)):
        attention, mlp, norm = 4 * D * D + 4 * D, 2 * D * F + F + D, 2 * D
        encoder = 6 * (attention + mlp + 2 * norm)
        decoder = 6 * (2 * attention + mlp + 3 * norm)
        total = count(load_preset(name)).params.total
        assert total == 37_000 * D + encoder + decoder
        assert abs(total / published - 1) < 0.03


@pytest.mark.parametrize("name, cls, config", [
    ("t5-small", transformers.T5ForConditionalGeneration, dict(d_model=512, d_ff=2048, num_heads=8, num_layers=6)),
    ("t5-base", transformers.T5ForConditionalGeneration, dict(d_model=768, d_ff=3072, num_heads=12, num_layers=12)),
    ("t5-large", transformers.T5ForConditionalGeneration,
     dict(d_model=1024, d_ff=4096, num_heads=16, num_layers=24)),
    ("bart-base", transformers.BartForConditionalGeneration,
     dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12, decoder_attention_heads=12,
          encoder_ffn_dim=3072, decoder_ffn_dim=3072)),
    ("bart-large", transformers.BartForConditionalGeneration, dict()),
])
def test_encoder_decoder_presets_are_transformers_counts(name, cls, config):
    # published: T5ForConditionalGeneration 60,506,624 / 222,903,552 / 737,668,096; the rest built here on meta
    hf_config = cls.config_class(**config)
    with torch.device("meta"):
        expected = sum(p.numel() for p in cls(hf_config).parameters())
    assert count(load_preset(name)).params.total == expected
    published = {"t5-small": 60_506_624, "t5-base": 222_903_552, "t5-large": 737_668_096}
    if name in published:
        assert expected == published[name]


def test_cross_attention_arithmetic():
    # per decoder block: q and out over the decoder's tokens, k and v over the encoder's, scores over T x S
    B, S, T, D, H, dh = 2, 13, 7, 512, 8, 64
    r = count(load_preset("transformer-base"), Workload(batch_size=B, seq_len=T, src_len=S))
    f = r.flops.components
    assert f["decoder/cross_attention/q"] == 6 * 2 * B * T * D * D
    assert f["decoder/cross_attention/kv"] == 6 * 2 * B * S * D * 2 * D
    assert f["decoder/cross_attention/scores"] == 6 * B * H * 2 * T * S * dh
    assert f["encoder/attention/scores"] == 6 * B * H * 2 * S * S * dh
    assert f["head"] == 2 * B * T * D * 37_000
    # decode: the encoder is cached, and so are the cross-attention keys and values
    d = count(load_preset("transformer-base"), Workload(phase="decode", seq_len=1, context=9, src_len=S)).flops
    assert not any(k.startswith("encoder/") for k in d.components) and "decoder/cross_attention/kv" not in d.components
    assert d.components["decoder/cross_attention/scores"] == 6 * H * 2 * 1 * S * dh
    assert d.components["decoder/attention/scores"] == 6 * H * 2 * 1 * 10 * dh


def test_t5_decode_matches_transformers_with_its_kv_cache():
    # transformers' own T5: a prefill into the cache, then one token; FlopCounterMode on the second call
    config = transformers.T5Config(d_model=32, d_ff=48, d_kv=8, num_heads=4, num_layers=2, vocab_size=50,
                                   decoder_start_token_id=0)
    model = transformers.T5ForConditionalGeneration._from_config(config, attn_implementation="eager").eval()
    src, prompt = torch.randint(50, (2, 5)), torch.randint(50, (2, 3))
    with torch.no_grad():
        out = model(input_ids=src, decoder_input_ids=prompt, use_cache=True)
        with torch.utils.flop_counter.FlopCounterMode(display=False) as counter:
            model(encoder_outputs=(out.encoder_last_hidden_state,), decoder_input_ids=prompt[:, -1:],
                  past_key_values=out.past_key_values, use_cache=True)
    spec = ModelSpec(n_encoder_layers=2, n_layers=2, d_model=32, n_heads=4, d_head=8, d_ff=48, vocab_size=50,
                     seq_len=3, positions="relative", norm="rmsnorm", bias=False, activation="relu")
    ours = count(spec, Workload(phase="decode", seq_len=1, context=3, batch_size=2, src_len=5))
    assert ours.flops.forward == counter.get_total_flops()


# ---- check: every new block against FlopCounterMode and fvcore -----------------------------------

@pytest.mark.parametrize("name, workload", [
    ("t5-small", Workload(batch_size=2, seq_len=16, src_len=24)),
    ("bart-base", Workload(phase="decode", seq_len=1, context=40, src_len=32)),
    ("transformer-base", Workload(phase="prefill", seq_len=8, context=8, src_len=8)),
    ("llama3-8b", Workload(phase="decode", seq_len=1, context=8192)),
    ("mistral-7b", Workload(seq_len=64)),
])
def test_check_on_meta(name, workload):
    report = check(load_preset(name), "meta", workload=workload)
    assert_all_rows_match(report)
    assert report.to_dict()["forward"]["flop_counter"] == count(load_preset(name), workload).flops.forward


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_generated_specs_and_workloads_on_meta(data):
    spec = data.draw(specs())
    assert_all_rows_match(check(spec, "meta", workload=data.draw(workloads(spec))))


@settings(max_examples=10, deadline=None)
@given(st.data())
def test_generated_encoder_decoders_and_mixed_moe_on_cpu(data):
    spec = data.draw(specs(max_seq=10, moe=data.draw(st.booleans()), encoder_decoder=True))
    assert_all_rows_match(check(spec, "cpu", workload=data.draw(workloads(spec))))


def test_reference_model_runs_decode_on_cpu():
    spec = load_preset("t5-small").replace(n_layers=1, n_encoder_layers=1, d_model=32, n_heads=4, d_head=8,
                                           d_ff=16, vocab_size=40)
    w = Workload(phase="decode", seq_len=1, context=6, batch_size=2, src_len=5)
    model = build_model(spec, "cpu", workload=w)
    logits = model(*example_inputs(spec, "cpu", w))
    assert logits.shape == (2, 1, 40) and torch.isfinite(logits).all()


# ---- the command line ----------------------------------------------------------------------------

def test_cli_encoder_decoder_and_decode():
    r = runner.invoke(app, ["count", "--preset", "transformer-base", "--src-len", "64", "--tgt-len", "64",
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["workload"]["src_len"] == 64 and d["workload"]["seq_len"] == 64
    assert {"encoder/attention/qkv", "decoder/cross_attention/kv", "decoder/cross_attention/scores"} <= set(
        d["flops"]["components"])
    table = runner.invoke(app, ["count", "--preset", "transformer-base", "--src-len", "64", "--tgt-len", "64"])
    assert "decoder/cross_attention/q" in table.output and "encoder/mlp/up" in table.output
    dec = json.loads(runner.invoke(app, ["count", "--preset", "llama3-8b", "--phase", "decode", "--context", "8192",
                                         "--json"]).output)
    assert dec["workload"] == {"phase": "decode", "batch_size": 1, "seq_len": 1, "context": 8192, "src_len": None,
                               "keys": 8193}
    cmp = runner.invoke(app, ["compare", "t5-small", "bart-base", "--phase", "decode", "--context", "100"])
    assert cmp.exit_code == 0, cmp.output
    chk = runner.invoke(app, ["check", "-p", "t5-small", "-L", "1", "--n-encoder-layers", "1", "--src-len", "8",
                              "--tgt-len", "4", "--json"])
    assert chk.exit_code == 0 and json.loads(chk.output)["match"] is True


def test_every_typed_flag_is_kept():
    # d_ff 3072 equals GPT-2's derived 4 x 768 but is typed: it stays when d_model changes
    d = json.loads(runner.invoke(app, ["count", "-p", "gpt2", "--d-ff", "3072", "-d", "1024", "-H", "16",
                                       "--json"]).output)
    D, F, L, V, P = 1024, 3072, 12, 50257, 1024
    block = (3 * D * D + 3 * D) + (D * D + D) + (D * F + F) + (F * D + D) + 4 * D
    assert d["params"]["total"] == V * D + P * D + L * block + 2 * D == 178_490_368
    bad = runner.invoke(app, ["count", "-p", "gpt2", "-d", "1024", "-H", "16", "--n-kv-heads", "12"])
    assert bad.exit_code == 2 and "n_kv_heads=12 does not divide n_heads=16" in bad.output
    named = json.loads(runner.invoke(app, ["compare", "gpt2", "--name", "x", "--json"]).output)
    assert named["models"][0]["spec"]["name"] == "x"


def test_flags_alone_need_the_position_table_size():
    r = runner.invoke(app, ["count", "-L", "2", "-d", "64", "-H", "4", "-V", "100", "-N", "512"])
    assert r.exit_code == 2 and "max_positions is required with learned positions" in r.output
    a, b = (json.loads(runner.invoke(app, ["count", "-L", "2", "-d", "64", "-H", "4", "-V", "100", "-N", n,
                                           "--max-positions", "1024", "--json"]).output) for n in ("512", "1024"))
    assert a["params"]["total"] == b["params"]["total"]


def test_counting_looks_at_each_distinct_layer_not_each_block(monkeypatch):
    # the floor (1 ms a call) is measured in benchmarks/count_scale.py; here: the work does not grow with L
    from tfcalc.arch.architecture import Stack

    calls = []
    original = Stack.layer
    monkeypatch.setattr(Stack, "layer", lambda self, i: calls.append(i) or original(self, i))
    spec = _moe_spec(first_dense_layers=3).replace(sliding_window=8, attention_pattern=["local", "global"])
    looked = {}
    for L in (12, 126, 1260):
        calls.clear()
        count(spec.replace(n_layers=L))
        looked[L] = len(calls)
    assert looked[12] == looked[126] == looked[1260]
