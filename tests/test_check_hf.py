"""`tfcalc check --hf-config`: the analytic counts held against transformers' own class built from the config."""

import json
import subprocess
import sys
import warnings
from dataclasses import replace

import pytest
import torch
import transformers
from typer.testing import CliRunner

from tfcalc import Workload, count
from tfcalc.cli import app
from tfcalc.families import registry
from tfcalc.hf import SUPPORTED, read_hf_config
from tfcalc.verify import hf_model

runner = CliRunner()
_DECODER = dict(num_hidden_layers=2, hidden_size=16, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=24, vocab_size=50, max_position_embeddings=16, pad_token_id=0, bos_token_id=0,
                eos_token_id=0)
CONFIGS = {
    "gpt2": dict(n_layer=2, n_embd=16, n_head=2, n_positions=16, vocab_size=50, bos_token_id=0, eos_token_id=0),
    "gpt_bigcode": dict(n_layer=2, n_embd=16, n_head=4, n_positions=16, vocab_size=50, multi_query=True,
                        bos_token_id=0, eos_token_id=0),
    "llama": _DECODER | dict(attention_bias=True, mlp_bias=True, head_dim=6),
    "mistral": _DECODER | dict(sliding_window=4),
    "mixtral": _DECODER | dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2": _DECODER,
    "qwen2_moe": _DECODER | dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8,
                                 shared_expert_intermediate_size=12, decoder_sparse_step=2),
    "gemma": _DECODER | dict(head_dim=6),
    "granite": _DECODER,
    "phi3": _DECODER | dict(sliding_window=4),
    "opt": dict(num_hidden_layers=2, hidden_size=16, num_attention_heads=4, ffn_dim=24, vocab_size=50,
                max_position_embeddings=16, pad_token_id=1, bos_token_id=0, eos_token_id=0),
    "bert": dict(num_hidden_layers=2, hidden_size=16, num_attention_heads=2, intermediate_size=24, vocab_size=50,
                 max_position_embeddings=16, type_vocab_size=2),
    "roberta": dict(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=24, vocab_size=50,
                    max_position_embeddings=18),
    "t5": dict(num_layers=2, num_decoder_layers=1, d_model=16, num_heads=2, d_kv=8, d_ff=24, vocab_size=50,
               feed_forward_proj="gated-gelu", decoder_start_token_id=0, pad_token_id=0, eos_token_id=1),
    "bart": dict(encoder_layers=2, decoder_layers=1, d_model=16, encoder_attention_heads=2,
                 decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, vocab_size=50,
                 max_position_embeddings=16, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                 decoder_start_token_id=2, forced_eos_token_id=2),
    # families being added to tfcalc/hf.py: checked once they are there
    "qwen3": _DECODER | dict(head_dim=8),
    "qwen3_moe": _DECODER | dict(head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8),
    "olmo2": _DECODER,
    "gemma2": _DECODER | dict(head_dim=8, sliding_window=4),
}


def write(folder, config: dict):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("model_type", [t for t in CONFIGS if t in SUPPORTED])
def test_every_component_matches_transformers_exactly(tmp_path, model_type):
    folder = write(tmp_path / model_type, {"model_type": model_type, **CONFIGS[model_type]})
    encdec = model_type in ("t5", "bart")
    workload = Workload(batch_size=2, seq_len=8, src_len=6 if encdec else None)
    spec = read_hf_config(folder).spec.replace(batch_size=2, seq_len=8)
    report = hf_model.compare(folder, spec, workload)
    assert report.match and not report.traced, [r for r in report.rows if not r.match]
    assert all(r.match is True for r in report.rows)  # every row compared: no unmapped module, none explained
    ours = count(spec, workload)
    totals = {r.figure: r for r in report.rows if r.component == "total"}
    assert totals["params"].analytic == totals["params"].transformers == ours.params.total
    assert totals["forward"].analytic == totals["forward"].transformers == ours.flops.forward
    assert len(report.rows) > 6  # per component, not totals alone


def test_the_parameter_total_is_transformers_own(tmp_path):
    # the report's transformers column is sum(numel) of the class itself, tied weights once (GPT-2 ties its head)
    config = {"model_type": "gpt2", **CONFIGS["gpt2"]}
    spec = read_hf_config(write(tmp_path, config)).spec
    report = hf_model.compare(tmp_path, spec, Workload(seq_len=8))
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.GPT2LMHeadModel(transformers.AutoConfig.for_model(**config))
    # 2 * (12 * 16**2 + 13 * 16) + 50 * 16 + 16 * 16 + 2 * 16: blocks, token and position tables, final norm
    assert sum(p.numel() for p in model.parameters()) == 7_648 == report.to_dict()["params"]["transformers"]


def test_untied_t5_head_is_a_documented_difference(tmp_path):
    folder = write(tmp_path, {"model_type": "t5", **CONFIGS["t5"], "tie_word_embeddings": False})
    result = runner.invoke(app, ["check", "--hf-config", str(folder), "-N", "8", "--json"])
    assert result.exit_code == 0, result.output
    hf = json.loads(result.output)["transformers"]
    head = next(r for r in hf["rows"] if r["figure"] == "params" and r["component"] == "head")
    assert head["analytic"] - head["transformers"] == 50 * 16 and head["known"] and hf["match"]
    assert "transformers 5 ties T5's head" in head["note"]


def test_cli_table_json_and_layer_override(tmp_path):
    folder = write(tmp_path, {"model_type": "mixtral", **CONFIGS["mixtral"], "num_hidden_layers": 3})
    table = runner.invoke(app, ["check", "--hf-config", str(folder), "-N", "8", "-L", "1"])
    assert table.exit_code == 0, table.output
    assert "transformers: analytic | transformers MixtralForCausalLM" in table.output
    assert "transformers' model built with num_hidden_layers=1" in table.output
    assert "round robin" in table.output and "transformers: MATCH: all" in table.output
    data = json.loads(runner.invoke(app, ["check", "--hf-config", str(folder), "-N", "8", "-L", "1",
                                          "--json"]).output)
    assert data["match"] and data["transformers"]["match"]
    assert data["transformers"]["params"]["analytic"] == data["params"]["analytic"]
    assert data["transformers"]["forward"]["transformers"] == data["forward"]["analytic"]
    skipped = runner.invoke(app, ["check", "--hf-config", str(folder), "-N", "8", "--no-transformers", "--json"])
    assert skipped.exit_code == 0 and "transformers" not in json.loads(skipped.output)


def test_a_difference_exits_1_and_is_named(tmp_path, monkeypatch):
    folder = write(tmp_path, {"model_type": "llama", **CONFIGS["llama"]})
    real = hf_model.parameters
    monkeypatch.setattr(hf_model, "parameters", lambda model: {**real(model), "model.layers.0.mlp.up_proj.x": 3})
    result = runner.invoke(app, ["check", "--hf-config", str(folder), "-N", "8"])
    assert result.exit_code == 1
    assert "transformers: MISMATCH in 2 of" in result.output and "params mlp/up, params total" in result.output
    assert "transformers has 3 more" in result.output


def test_a_type_tfcalc_does_not_model_is_traced(tmp_path):
    config = {"model_type": "biogpt", "num_hidden_layers": 2, "hidden_size": 16, "num_attention_heads": 2,
              "intermediate_size": 24, "vocab_size": 50, "max_position_embeddings": 16}
    assert "biogpt" not in SUPPORTED
    folder = write(tmp_path, config)
    table = runner.invoke(app, ["check", "--hf-config", str(folder), "-N", "8"])
    assert table.exit_code == 0, table.output
    assert "traced by transformers (tfcalc does not model biogpt yet)" in table.output
    assert "nothing to compare" in table.output
    data = json.loads(runner.invoke(app, ["check", "--hf-config", str(folder), "-N", "8", "--json"]).output)
    hf = data["transformers"]
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.BioGptForCausalLM(transformers.AutoConfig.for_model(**config))
    assert hf["traced"] and hf["params"] == {"analytic": None, "transformers": sum(p.numel() for p in
                                                                                    model.parameters())}
    assert hf["forward"]["transformers"] > 0 and hf["model_class"] == "BioGptForCausalLM"


def test_without_transformers_the_rest_is_checked(tmp_path):
    folder = write(tmp_path, {"model_type": "llama", **CONFIGS["llama"]})
    code = ("import sys; sys.modules['transformers'] = None\n"
            "from tfcalc.cli import main; sys.argv = ['tfcalc', 'check', '--hf-config', sys.argv[1], '-N', '8']"
            " + sys.argv[2:]; main()")
    result = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "pip install 'tfcalc[hf]'" in result.stderr
    assert "MATCH: all 17 rows agree exactly." in result.stdout and "transformers:" not in result.stdout
    as_json = subprocess.run([sys.executable, "-c", code, str(folder), "--json"], capture_output=True, text=True)
    data = json.loads(as_json.stdout)
    assert data["match"] and "pip install 'tfcalc[hf]'" in data["transformers"]["skipped"]


@pytest.mark.parametrize(("analytic", "fused"), [
    ({"embedding/token": 500, "attention/norm": 16, "conv/norm": 32, "mlp/norm": 48}, 48),  # both parts counted
    ({"embedding/token": 500, "conv/norm": 48, "mlp/norm": 48}, 48),  # only conv blocks
    ({"embedding/token": 500, "attention/norm": 48, "mlp/norm": 48}, 48),  # only attention blocks
])
def test_a_fused_module_is_compared_with_the_sum_of_the_parts_tfcalc_counts(monkeypatch, analytic, fused):
    # LFM2-like: one operator_norm per block, before either an attention or a convolution: transformers' one module
    # is held against tfcalc's attention/norm + conv/norm, whichever of them the blocks have
    rules = ((r"model\.embed_tokens", "embedding/token"), (r"model\.layers\.\d+\.operator_norm",
                                                           "attention/norm+conv/norm"),
             (r"model\.layers\.\d+\.ffn_norm", "mlp/norm"))
    monkeypatch.setitem(registry.REGISTRY, "tfcalc-test-fused", registry.Family("tfcalc-test-fused", components=rules))
    measured = {"model.embed_tokens": 500, "model.layers.0.operator_norm": 16, "model.layers.1.operator_norm": 16,
                "model.layers.2.operator_norm": 16, **{f"model.layers.{i}.ffn_norm": 16 for i in range(3)}}
    rows = hf_model._rows("params", "tfcalc-test-fused", analytic, measured, 596, 596, lambda row: row)
    assert [(r.component, r.analytic, r.transformers, r.match) for r in rows] == [
        ("embedding/token", 500, 500, True), ("attention/norm+conv/norm", fused, 48, True),
        ("mlp/norm", 48, 48, True), ("total", 596, 596, True)]


def test_a_fused_module_with_no_part_counted_is_a_row_of_its_own(monkeypatch):
    rules = ((r"model\.layers\.\d+\.operator_norm", "attention/norm+conv/norm"), (r"model\.layers\.\d+\.w1", "mlp/up"))
    monkeypatch.setitem(registry.REGISTRY, "tfcalc-test-fused", registry.Family("tfcalc-test-fused", components=rules))
    rows = hf_model._rows("params", "tfcalc-test-fused", {"mlp/up": 64}, {"model.layers.0.operator_norm": 16,
                                                                          "model.layers.0.w1": 64}, 64, 80,
                          hf_model._explainer(registry.family("llama"), {}, None))
    assert [(r.component, r.analytic, r.transformers, r.match) for r in rows] == [
        ("mlp/up", 64, 64, True), ("attention/norm+conv/norm", 0, 16, False), ("total", 64, 80, False)]
    assert rows[1].note == "transformers has 16 more: the formula or the name mapping is wrong here"


@pytest.mark.parametrize(("model_type", "config", "layers", "written"), [
    ("gpt2", CONFIGS["gpt2"], {"n_layers": 1}, "n_layer=1"),
    ("gpt_bigcode", {**CONFIGS["gpt_bigcode"], "num_hidden_layers": 2}, {"n_layers": 1}, "num_hidden_layers=1"),
    ("t5", CONFIGS["t5"], {"n_encoder_layers": 1, "n_layers": 2}, "num_layers=1, num_decoder_layers=2"),
    ("bart", CONFIGS["bart"], {"n_encoder_layers": 1, "n_layers": 2}, "encoder_layers=1, decoder_layers=2"),
    ("bart", {**CONFIGS["bart"], "num_hidden_layers": 2}, {"n_encoder_layers": 1}, "num_hidden_layers=1"),
    ("llama", CONFIGS["llama"], {"n_layers": 1}, "num_hidden_layers=1"),
])
def test_block_counts_are_written_where_each_family_keeps_them(tmp_path, model_type, config, layers, written):
    # the family's layer_keys, or a field's alias when the config gives it (transformers reads it over the field)
    folder = write(tmp_path, {"model_type": model_type, **config})
    spec = read_hf_config(folder).spec.replace(**layers)
    encdec = model_type in ("t5", "bart")
    report = hf_model.compare(folder, spec, Workload(batch_size=1, seq_len=8, src_len=6 if encdec else None),
                              overrides=layers)
    assert f"transformers' model built with {written} (from the layer override)" in report.notes
    assert report.match and all(r.match for r in report.rows), [r for r in report.rows if not r.match]


def test_a_family_hook_marks_its_documented_difference(tmp_path, monkeypatch):
    # a family's `known` sees the differing row, the config, the spec and the workload; its note marks the row known
    folder = write(tmp_path, {"model_type": "llama", **CONFIGS["llama"]})
    seen = []

    def known(d: registry.Difference) -> str | None:
        seen.append(d)
        return f"{d.excess} more, as documented" if d.figure == "params" and d.excess == 3 else None

    monkeypatch.setitem(registry.REGISTRY, "llama", replace(registry.REGISTRY["llama"], known=known))
    real = hf_model.parameters
    monkeypatch.setattr(hf_model, "parameters", lambda model: {**real(model), "model.layers.0.mlp.up_proj.x": 3})
    report = hf_model.compare(folder, read_hf_config(folder).spec, Workload(batch_size=2, seq_len=8))
    assert report.match and "MATCH" in report.verdict() and "2 differ as documented" in report.verdict()
    assert [(r.figure, r.component, r.note) for r in report.rows if r.known] == [
        ("params", "mlp/up", "known: 3 more, as documented"), ("params", "total", "known: 3 more, as documented")]
    assert [(d.component, d.analytic + 3 == d.transformers) for d in seen] == [("mlp/up", True), ("total", True)]
    assert all(d.workload == report.workload and d.config["model_type"] == "llama" and d.spec.seq_len == 8
               and d.spec.batch_size == 2 for d in seen)


def test_a_fused_name_says_its_parts():
    # a family's table names a module transformers fuses by the components it holds: no list of them in hf_model
    assert hf_model.fused_parts("mlp/gate+up") == ("mlp/gate", "mlp/up")
    assert hf_model.fused_parts("attention/norm+conv/norm") == ("attention/norm", "conv/norm")
    assert hf_model.fused_parts("mamba2/conv+scan+attention/core") == ("mamba2/conv", "mamba2/scan", "attention/core")
    assert hf_model.fused_parts("gated_deltanet/conv+delta_rule") == ("gated_deltanet/conv", "gated_deltanet/delta_rule")
    assert not hasattr(hf_model, "MERGED")
