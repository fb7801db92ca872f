"""`tfcalc check --hf-config`: the analytic counts held against transformers' own class built from the config."""

import json
import subprocess
import sys
import warnings

import pytest
import torch
import transformers
from typer.testing import CliRunner

from tfcalc import Workload, count
from tfcalc.cli import app
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
