"""Spec files, presets and Hugging Face config.json files with bad contents: every one gives one TfcalcError line per
problem naming the file, the field and the value (on the command line: `tfcalc: error:` lines and exit code 2), never
a traceback, a hang, an unbounded read or a silently coerced value."""

import contextlib
import functools
import json
import os
import resource
import signal
import warnings
from pathlib import Path

import pytest
import transformers
from huggingface_hub.errors import StrictDataclassFieldValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import tfcalc
from tfcalc import TfcalcError
from tfcalc.cli import app
from tfcalc.hf import COMMON_TYPES, DEFAULTS, SEQ_LEN_CAP, TYPES, read_hf_config
from tfcalc.loading import MAX_FILE_BYTES, read_spec_file

runner = CliRunner()
SPEC = {"n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 100, "seq_len": 8}
SPEC_TOML = "".join(f"{k} = {v}\n" for k, v in SPEC.items())


@contextlib.contextmanager
def bounded(seconds: float = 120, memory: int = 1 << 30):
    """Fail, instead of hanging or eating the machine, when the code inside blocks (a FIFO) or reads without
    bound (/dev/zero): SIGALRM interrupts a blocked open(), and address space beyond `memory` more than now is a
    MemoryError. A guard against a hang, not a timing: generous enough for a loaded machine (what is fast is
    asserted by counting operations, and measured in benchmarks/)."""
    def timeout(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:  # Linux: the address space in use now, in pages
        used = int(f.read().split()[0]) * resource.getpagesize()
    limit = used + memory if hard == resource.RLIM_INFINITY else min(hard, used + memory)
    previous = signal.signal(signal.SIGALRM, timeout)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, previous)


def cli(*args: str) -> list[str]:
    """Run the CLI; it must exit with 2 and print only `tfcalc: error:` lines, no traceback. Returns the lines."""
    with bounded():
        r = runner.invoke(app, list(args))
    assert isinstance(r.exception, SystemExit), r.exception  # CliRunner would swallow any other exception
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = r.output.splitlines()
    assert lines and all(line.startswith("tfcalc: error: ") for line in lines), r.output
    return lines


def refused(call, *args) -> str:
    """The TfcalcError message of call(*args), which must be one."""
    with bounded(), pytest.raises(TfcalcError) as info:
        call(*args)
    return str(info.value)


def write_json(path: Path, config) -> Path:
    path.write_text(json.dumps(config))
    return path


# ---- 1. special files and unbounded reads --------------------------------------------------------------------

def special_file(tmp_path: Path, kind: str, name: str) -> Path:
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(f"/dev/{kind}")
    return path


SPECIAL = [("fifo", "a named pipe (FIFO)"), ("zero", "a character device"), ("urandom", "a character device"),
           ("directory", "a directory")]


@pytest.mark.parametrize("kind, said", SPECIAL)
@pytest.mark.parametrize("name", ["x.toml", "x.json"])
def test_special_spec_files_are_refused_without_reading(tmp_path, kind, said, name):
    path = special_file(tmp_path, kind, name)
    message = refused(read_spec_file, path)
    assert message.startswith(f"{path}") and f"is {said}, not a spec file" in message
    assert (f"-> /dev/{kind}" in message) == (kind in ("zero", "urandom"))  # a symlink says where it leads
    assert cli("count", "--spec", str(path)) == [f"tfcalc: error: {message}"]


@pytest.mark.parametrize("kind, said", SPECIAL[:3])
def test_special_hf_configs_are_refused_without_reading(tmp_path, kind, said):
    as_file = special_file(tmp_path, kind, "x.json")
    folder = tmp_path / "model"
    folder.mkdir()
    in_folder = special_file(folder, kind, "config.json")  # --hf-config FOLDER reads FOLDER/config.json
    for path, argument in ((as_file, as_file), (in_folder, folder)):
        message = refused(read_hf_config, argument)
        assert message.startswith(f"{path}") and f"is {said}, not a Hugging Face config" in message
        assert cli("count", "--hf-config", str(argument)) == [f"tfcalc: error: {message}"]
    # compare takes a .json that is not a regular file as a spec file, and refuses it the same way
    # (the message names the file already: compare does not name it twice)
    assert cli("compare", "gpt2", str(as_file)) == [f"tfcalc: error: {refused(read_spec_file, as_file)}"]


def test_files_over_the_limit_are_refused_by_size(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps(SPEC) + " " * MAX_FILE_BYTES)
    size = big.stat().st_size
    message = refused(read_spec_file, big)
    assert f"{size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit for a spec file" in message
    config = write_json(tmp_path / "config.json", {"model_type": "gpt2", "pad": "x" * MAX_FILE_BYTES})
    message = refused(read_hf_config, config)
    assert "over the 16,777,216-byte limit for a Hugging Face config" in message
    assert cli("count", "--hf-config", str(tmp_path)) == [f"tfcalc: error: {message}"]
    # a file just at the limit is read
    at_limit = tmp_path / "at.json"
    text = json.dumps(SPEC)
    at_limit.write_text(text + " " * (MAX_FILE_BYTES - len(text)))
    assert read_spec_file(at_limit).spec.d_model == 64


def test_reading_stops_at_the_limit_if_the_file_grows(tmp_path, monkeypatch):
    # os.fstat says the file is small, but it holds more by the time it is read: at most limit + 1 bytes are read
    path = tmp_path / "m.toml"
    path.write_text(SPEC_TOML + "#" * 2000)
    real_fstat = os.fstat

    def fstat_before_growth(fd):
        info = real_fstat(fd)
        return os.stat_result((*info[:6], 10, *info[7:]))  # st_size = 10

    monkeypatch.setattr(os, "fstat", fstat_before_growth)
    from tfcalc import loading

    with pytest.raises(TfcalcError, match=r"more than 1,000 bytes, over the 1,000-byte limit"):
        loading.read_text_file(path, "spec file", limit=1000)


def test_missing_paths_and_bad_names(tmp_path):
    assert "no such file" in refused(read_spec_file, tmp_path / "nope.toml")
    assert "no such file (give a config.json" in refused(read_hf_config, tmp_path / "nope")
    assert "no such file (give a config.json" in refused(read_hf_config, tmp_path)  # a folder without one
    dangling = tmp_path / "dangling.toml"
    dangling.symlink_to(tmp_path / "gone.toml")
    assert "no such file" in refused(read_spec_file, dangling)
    assert "NUL character" in refused(read_spec_file, "a\0b.toml")
    assert "NUL character" in refused(read_hf_config, "a\0b")


# ---- 2. parser limits: huge integers, deep nesting, bytes that are not UTF-8 ---------------------------------

DIGITS = "9" * 5000


@pytest.mark.parametrize("name, text, line", [
    ("m.toml", SPEC_TOML + f"batch_size = {DIGITS}\n", 6),
    ("m.json", json.dumps(SPEC, indent=1)[:-2] + f',\n "batch_size": {DIGITS}\n}}', 7),
])
def test_an_integer_too_long_for_python_is_one_error_naming_the_line(tmp_path, name, text, line):
    path = tmp_path / name
    path.write_text(text)
    message = refused(read_spec_file, path)
    assert message == (f"{path}: line {line}: an integer of 5,000 digits, more than Python reads (4,300); no size "
                       f"in a {'TOML' if name.endswith('toml') else 'JSON'} spec is that long")
    assert cli("count", "--spec", str(path)) == [f"tfcalc: error: {message}"]


def test_an_integer_too_long_for_python_in_a_hf_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",\n "hidden_size": ' + DIGITS + "}")
    message = refused(read_hf_config, path)
    assert message.startswith(f"{path}: line 2: an integer of 5,000 digits")
    assert cli("count", "--hf-config", str(path)) == [f"tfcalc: error: {message}"]


@pytest.mark.parametrize("name, text, depth", [
    ("deep.json", '{"n_layers": ' + "[" * 100_000 + "]" * 100_000 + "}", "100,001"),  # the object, then the lists
    ("deep.toml", "n_layers = " + "[" * 100_000 + "]" * 100_000 + "\n", "100,000"),
    ("config.json", '{"model_type": "gpt2",\n "x": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001, "100,001"),
])
def test_deep_nesting_is_one_error_naming_the_file(tmp_path, name, text, depth):
    path = tmp_path / name
    path.write_text(text)
    read = read_hf_config if name == "config.json" else read_spec_file
    message = refused(read, path)
    line = 2 if name == "config.json" else 1
    assert message.startswith(f"{path}: line {line}: invalid ") and f"nested {depth} deep" in message
    assert cli("count", "--hf-config" if name == "config.json" else "--spec", str(path)) == [
        f"tfcalc: error: {message}"]


def test_nesting_python_can_parse_but_not_show_is_one_error(tmp_path):
    # json.loads manages some depth that repr() of the value, deeper in the stack, may not: the message still comes
    for depth in (200, 900, 990, 1100):
        path = tmp_path / f"d{depth}.json"
        path.write_text(json.dumps({**SPEC, "d_model": "deep"}).replace('"deep"', "[" * depth + "]" * depth))
        message = refused(read_spec_file, path)
        assert message.startswith(f"{path}: ") and ("d_model=[[[" in message or "nested" in message), message


@pytest.mark.parametrize("name, data, line", [
    ("m.toml", SPEC_TOML.encode() + b'name = "caf\xe9"\n', 6),  # Latin-1
    ("m.json", b'{"n_layers": 2,\n\n "name": "\xff\xfe"}', 3),
    ("config.json", b'{"model_type": "gpt2", "_name_or_path": "\xc3"}', 1),  # a cut-off sequence
])
def test_bytes_that_are_not_utf8_name_the_line(tmp_path, name, data, line):
    path = tmp_path / name
    path.write_bytes(data)
    read = read_hf_config if name == "config.json" else read_spec_file
    message = refused(read, path)
    assert message.startswith(f"{path}: line {line}: not UTF-8 text (byte 0x")
    assert cli("count", "--hf-config" if name == "config.json" else "--spec", str(path)) == [
        f"tfcalc: error: {message}"]


def test_many_bad_fields_take_one_pass(tmp_path, monkeypatch):
    # every unknown field is located by line; 100,000 of them must not take 100,000 passes over the file: counted,
    # not timed (a wall-clock limit fails on a loaded machine)
    import tfcalc.loading as loading

    passes = []

    class Counted:
        def __init__(self, pattern):
            self.pattern = pattern

        def finditer(self, text):
            passes.append(len(text))
            return self.pattern.finditer(text)

    monkeypatch.setattr(loading, "_KEY", Counted(loading._KEY))
    path = tmp_path / "many.json"
    path.write_text(json.dumps({**SPEC, **{f"k{i}": i for i in range(100_000)}}, indent=0))
    message = refused(read_spec_file, path)
    lines = message.splitlines()
    assert len(lines) == 100_000 and lines[-1] == f"{path}: line 100006: k99999=99999: unknown field"
    assert passes == [len(path.read_text())]  # one pass over the file for all 100,000


def test_metadata_of_a_preset_style_file_must_be_strings(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('name = 5\ndescription = ["x"]\nsource = false\n[model]\n' + SPEC_TOML)
    assert refused(read_spec_file, path).splitlines() == [
        f"{path}: line 1: name=5: expected a string", f"{path}: line 2: description=['x']: expected a string",
        f"{path}: line 3: source=False: expected a string"]
    assert len(cli("count", "--spec", str(path))) == 3


# ---- 3. Hugging Face config types, strictly, as transformers takes them ---------------------------------------

# A valid, small config of each type that reaches every branch its mapper has (windows on, experts, ...)
BASE = {
    "gpt2": dict(n_layer=2, n_embd=64, n_head=4, n_inner=96, n_positions=32, vocab_size=100),
    "bert": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=96,
                 max_position_embeddings=32, vocab_size=100, type_vocab_size=2, position_embedding_type="absolute"),
    "llama": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True,
                  rope_scaling={"type": "linear", "factor": 2.0}),
    "mistral": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=96, max_position_embeddings=32, vocab_size=100, sliding_window=8),
    "mixtral": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=96, max_position_embeddings=32, vocab_size=100, sliding_window=8,
                    num_local_experts=4, num_experts_per_tok=2),
    "qwen2": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=96, max_position_embeddings=32, vocab_size=100, use_sliding_window=True,
                  sliding_window=8, max_window_layers=2),
    "qwen2_moe": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=96, max_position_embeddings=32, vocab_size=100, use_sliding_window=True,
                      sliding_window=8, max_window_layers=3, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=32, shared_expert_intermediate_size=48, decoder_sparse_step=2,
                      mlp_only_layers=[]),
    "t5": dict(num_layers=2, num_decoder_layers=3, d_model=64, num_heads=4, d_kv=16, d_ff=96, vocab_size=100,
               feed_forward_proj="gated-gelu", tie_word_embeddings=False),
    "bart": dict(encoder_layers=2, decoder_layers=3, d_model=64, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96, max_position_embeddings=32,
                 vocab_size=100),
    "gemma": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                  intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True,
                  hidden_act="gelu", hidden_activation="gelu_pytorch_tanh"),
    "gpt_bigcode": dict(n_layer=2, n_embd=64, n_head=4, n_inner=96, n_positions=32, vocab_size=100,
                        multi_query=True),
    "roberta": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=96,
                    max_position_embeddings=34, vocab_size=100, type_vocab_size=1, position_embedding_type="absolute"),
    "xlm-roberta": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=96,
                        max_position_embeddings=34, vocab_size=100, type_vocab_size=1),
    "opt": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=96, max_position_embeddings=32,
                vocab_size=100, word_embed_proj_dim=64, do_layer_norm_before=True, _remove_final_layer_norm=False,
                enable_bias=False),
    "granite": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True,
                    mlp_bias=True),
    "phi3": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=96, max_position_embeddings=32, vocab_size=100, sliding_window=8,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    "qwen3": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True,
                  use_sliding_window=True, sliding_window=8, max_window_layers=2, tie_word_embeddings=False),
    "qwen3_moe": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=96, max_position_embeddings=32, vocab_size=100, num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1, mlp_only_layers=[0]),
    "olmo2": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True),
    "gemma2": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                   intermediate_size=96, max_position_embeddings=32, vocab_size=100, sliding_window=8,
                   query_pre_attn_scalar=24, final_logit_softcapping=30.0, attn_logit_softcapping=50.0),
    "smollm3": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True,
                    mlp_bias=True, use_sliding_window=True, sliding_window=8, no_rope_layer_interval=2,
                    pad_token_id=0, bos_token_id=0, eos_token_id=0),
    "cohere2": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True,
                    sliding_window=8, sliding_window_pattern=2, pad_token_id=0, bos_token_id=0, eos_token_id=0),
    "gemma4_text": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, global_head_dim=16, intermediate_size=96, max_position_embeddings=32,
                        vocab_size=100, sliding_window=8, hidden_size_per_layer_input=0, attention_bias=True,
                        final_logit_softcapping=30.0, use_bidirectional_attention="vision",
                        use_double_wide_mlp=True, num_global_key_value_heads=1),
    "gemma3_text": dict(num_hidden_layers=6, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=24, intermediate_size=96, max_position_embeddings=32, vocab_size=100,
                        sliding_window=8, sliding_window_pattern=3, query_pre_attn_scalar=24),
    "granitemoe": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True,
                       num_local_experts=4, num_experts_per_tok=2),
    "exaone4": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=96, max_position_embeddings=32, vocab_size=100, sliding_window=8,
                    sliding_window_pattern=2),
    "olmo3": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True,
                  sliding_window=8, layer_types=["sliding_attention", "full_attention"] * 2),
    "mbart": dict(encoder_layers=2, decoder_layers=3, d_model=64, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96, max_position_embeddings=32,
                  vocab_size=100),
    "marian": dict(encoder_layers=2, decoder_layers=3, d_model=64, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96, max_position_embeddings=32,
                   vocab_size=100, decoder_vocab_size=100, share_encoder_decoder_embeddings=False,
                   normalize_before=False),
    "distilbert": dict(n_layers=2, dim=64, n_heads=4, hidden_dim=96, max_position_embeddings=32, vocab_size=100,
                       sinusoidal_pos_embds=True, activation="gelu"),
    "albert": dict(num_hidden_layers=4, num_hidden_groups=2, hidden_size=64, embedding_size=16, num_attention_heads=4,
                   intermediate_size=96, max_position_embeddings=32, vocab_size=100, type_vocab_size=2),
    "gpt_oss": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=96, max_position_embeddings=32, vocab_size=100, sliding_window=8,
                    num_local_experts=4, num_experts_per_tok=2, attention_bias=False),
    "deepseek_v2": dict(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, intermediate_size=96,
                        moe_intermediate_size=32, max_position_embeddings=32, vocab_size=100, n_routed_experts=4,
                        num_experts_per_tok=2, n_shared_experts=2, first_k_dense_replace=1, q_lora_rank=16,
                        kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                        topk_method="group_limited_greedy", n_group=2, topk_group=1),
    "deepseek_v3": dict(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                        intermediate_size=96, moe_intermediate_size=32, max_position_embeddings=32, vocab_size=100,
                        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                        q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                        n_group=2, topk_group=1),
    "gpt_neox": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=96,
                     max_position_embeddings=32, vocab_size=100, rotary_pct=0.5, use_parallel_residual=True,
                     attention_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "gptj": dict(n_layer=2, n_embd=64, n_head=4, n_inner=96, n_positions=32, vocab_size=100, rotary_dim=8),
    "phi": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                intermediate_size=96, max_position_embeddings=32, vocab_size=100, partial_rotary_factor=0.5,
                qk_layernorm=True),
    "falcon": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=2,
                   new_decoder_architecture=True, parallel_attn=True, num_ln_in_parallel_attn=2, ffn_hidden_size=96,
                   max_position_embeddings=32, vocab_size=100, bias=True, alibi=False, activation="gelu"),
    "cohere": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True,
                   logit_scale=0.0625),
    "bloom": dict(n_layer=2, hidden_size=64, n_head=4, vocab_size=100, apply_residual_connection_post_layernorm=True,
                  pretraining_tp=2, slow_but_exact=True, tie_word_embeddings=False),
    "mpt": dict(n_layers=2, d_model=64, n_heads=4, vocab_size=100, max_seq_len=32, expansion_ratio=4, no_bias=True,
                norm_type="layernorm", tie_word_embeddings=False,
                attn_config={"clip_qkv": 6.0, "softmax_scale": 0.5, "alibi_bias_max": 4, "prefix_lm": True}),
}
BASE["deepseek_v32"] = BASE["deepseek_v3"] | dict(index_n_heads=2, index_head_dim=16, index_topk=8)
BASE["lfm2"] = dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=96, max_position_embeddings=32, vocab_size=100, block_multiple_of=16,
                    block_ffn_dim_multiplier=1.5, conv_bias=True, layer_types=["conv", "full_attention"] * 2)
BASE["lfm2_moe"] = dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        intermediate_size=96, moe_intermediate_size=32, max_position_embeddings=32, vocab_size=100,
                        num_experts=4, num_experts_per_tok=2, num_dense_layers=1,
                        layer_types=["conv", "full_attention"] * 2)
BASE["mamba2"] = dict(num_hidden_layers=2, hidden_size=32, expand=2, num_heads=8, head_dim=8, state_size=8, n_groups=2,
                      conv_kernel=3, chunk_size=4, vocab_size=100)
BASE["nemotron_h"] = dict(hybrid_override_pattern="M-*-", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, intermediate_size=96, max_position_embeddings=32, vocab_size=100,
                          mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=8, n_groups=2, conv_kernel=3,
                          chunk_size=4)
BASE["bamba"] = dict(num_hidden_layers=4, attn_layer_indices=[1, 3], hidden_size=64, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, intermediate_size=96, max_position_embeddings=32,
                     vocab_size=100, mamba_n_heads=8, mamba_d_state=8, mamba_n_groups=2, mamba_d_conv=3,
                     mamba_chunk_size=4)
_DELTANET = dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 max_position_embeddings=32, vocab_size=100, linear_num_key_heads=2, linear_num_value_heads=4,
                 linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4)
_QWEN_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
BASE["qwen3_next"] = _DELTANET | _QWEN_MOE | dict(intermediate_size=96)
BASE["qwen3_5_text"] = _DELTANET | dict(intermediate_size=96)
BASE["qwen3_5_moe_text"] = _DELTANET | _QWEN_MOE
BASE["granitemoehybrid"] = dict(num_hidden_layers=4, layer_types=["mamba", "attention"] * 2, hidden_size=64,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=32,
                                shared_intermediate_size=48, num_local_experts=4, num_experts_per_tok=2,
                                max_position_embeddings=32, vocab_size=100, mamba_n_heads=8, mamba_d_state=8,
                                mamba_n_groups=2, mamba_d_conv=3, mamba_chunk_size=4)
BASE["falcon_h1"] = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         intermediate_size=96, max_position_embeddings=32, vocab_size=100, mamba_d_ssm=64,
                         mamba_n_heads=8, mamba_d_state=8, mamba_n_groups=2, mamba_d_conv=3, mamba_chunk_size=4)
BASE["mamba"] = dict(num_hidden_layers=2, hidden_size=32, expand=2, state_size=8, conv_kernel=3, time_step_rank=4,
                     vocab_size=100)
BASE["jamba"] = dict(num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1, hidden_size=64,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
                     max_position_embeddings=32, vocab_size=100, num_experts=4, num_experts_per_tok=2,
                     mamba_d_state=8, mamba_d_conv=3, mamba_dt_rank=4)
BASE["ministral3"] = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, intermediate_size=96, max_position_embeddings=32, vocab_size=100,
                          sliding_window=8)
BASE["glm4"] = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=96, max_position_embeddings=32, vocab_size=100, attention_bias=True,
                    partial_rotary_factor=0.5)
BASE["glm4_moe"] = dict(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, intermediate_size=96, max_position_embeddings=32, vocab_size=100,
                        attention_bias=True, use_qk_norm=True, n_routed_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, n_shared_experts=1, n_group=2, topk_group=1,
                        first_k_dense_replace=1, partial_rotary_factor=0.5)
BASE["phimoe"] = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      intermediate_size=96, max_position_embeddings=32, vocab_size=100, sliding_window=8,
                      num_local_experts=4, num_experts_per_tok=2, attention_bias=True, lm_head_bias=True)
BASE["llama4_text"] = dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, intermediate_size=32, intermediate_size_mlp=96, max_position_embeddings=32,
                           vocab_size=100, num_local_experts=4, num_experts_per_tok=2, interleave_moe_layer_step=2,
                           attention_chunk_size=8, no_rope_layer_interval=2)
BASE["vit"] = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=96, image_size=32,
                   patch_size=8, num_channels=3, qkv_bias=True, architectures=["ViTForImageClassification"],
                   id2label={"0": "cat", "1": "dog"})
_TOWER = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=96)
BASE["clip_vision_model"] = _TOWER | dict(image_size=32, patch_size=8, num_channels=3, projection_dim=16)
BASE["clip_text_model"] = _TOWER | dict(vocab_size=100, max_position_embeddings=16, projection_dim=16)
BASE["siglip_vision_model"] = _TOWER | dict(image_size=32, patch_size=8, num_channels=3, vision_use_head=True)
BASE["siglip2_vision_model"] = _TOWER | dict(num_patches=16, patch_size=8, num_channels=3, vision_use_head=True)
BASE["siglip_text_model"] = _TOWER | dict(vocab_size=100, max_position_embeddings=16, projection_size=32)
BASE["qwen2_vl_vision"] = dict(depth=2, embed_dim=32, hidden_size=24, num_heads=2, mlp_ratio=2, patch_size=2,
                               spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
BASE["qwen2_5_vl_vision"] = dict(depth=2, hidden_size=32, intermediate_size=40, out_hidden_size=24, num_heads=2,
                                 patch_size=2, spatial_merge_size=2, temporal_patch_size=2, window_size=8,
                                 fullatt_block_indexes=[1], in_channels=3)
BASE["gemma4_vision"] = dict(num_hidden_layers=2, hidden_size=48, intermediate_size=96, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=12, patch_size=4, pooling_kernel_size=2,
                             position_embedding_size=64)
BASE["llama4_vision_model"] = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=128,
                                   image_size=32, patch_size=8, num_channels=3, pixel_shuffle_ratio=0.5,
                                   projector_input_dim=24, projector_output_dim=24, vision_output_dim=24)
# two cross-attention blocks of four, their keys one 28 x 28 tile of 14-pixel patches: (28 // 14)^2 + 1 = 5 tokens
BASE["mllama_text_model"] = dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                 intermediate_size=96, max_position_embeddings=32, vocab_size=100,
                                 cross_attention_layers=[1, 3],
                                 vision_config=dict(image_size=28, patch_size=14, max_num_tiles=1))
BASE["whisper"] = dict(encoder_layers=2, decoder_layers=3, d_model=64, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96, num_mel_bins=8,
                       max_source_positions=16, max_target_positions=32, vocab_size=100, tie_word_embeddings=False)
# Gemma 4's audio tower: channels [8, 4] (8 mel bins), chunks of 4 queries against 8 keys
BASE["gemma4_audio"] = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, subsampling_conv_channels=[8, 4],
                            attention_chunk_size=4, attention_context_left=5, output_proj_dims=24)
BASE["voxtral_encoder"] = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=96,
                               num_mel_bins=8, max_source_positions=16)
# the multimodal wrappers' towers read whole (each a family of its own), small
_QWEN3_TOWER = dict(depth=2, hidden_size=32, intermediate_size=40, out_hidden_size=24, num_heads=2, patch_size=2,
                    spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)
BASE["qwen3_vl_vision"] = BASE["qwen3_vl_moe_vision"] = _QWEN3_TOWER | dict(deepstack_visual_indexes=[0])
BASE["qwen3_5_vision"] = BASE["qwen3_5_moe_vision"] = _QWEN3_TOWER
BASE["exaone4_5_vision"] = dict(depth=2, hidden_size=32, intermediate_size=40, out_hidden_size=24, num_heads=2,
                                num_key_value_heads=1, patch_size=2, spatial_merge_size=2, temporal_patch_size=2,
                                window_size=8, fullatt_block_indexes=[1])
BASE["glm4v_vision"] = dict(depth=2, hidden_size=32, intermediate_size=40, out_hidden_size=24, num_heads=2,
                            image_size=16, patch_size=2, spatial_merge_size=2, temporal_patch_size=2)
BASE["idefics3_vision"] = BASE["smolvlm_vision"] = BASE["pixtral"] = _TOWER | dict(image_size=32, patch_size=8)
# MiniCPM-V's towers: the window merger after block 0, images of 8 x 8 patches
BASE["minicpmv4_6_vision"] = BASE["minicpmv4_7_vision"] = BASE["minicpm_ocr_vision"] = _TOWER | dict(
    image_size=32, patch_size=4, insert_layer_id=0)
BASE["kimi_k25_vision"] = _TOWER | dict(num_attention_heads=2, patch_size=2, pos_emb_height=8, pos_emb_width=8)
BASE["mllama_vision_model"] = dict(num_hidden_layers=4, num_global_layers=1, hidden_size=32, intermediate_size=64,
                                   attention_heads=4, image_size=16, patch_size=8, max_num_tiles=2,
                                   vision_output_dim=96, intermediate_layers_indices=[1, 3],
                                   supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]])
BASE = {t: {"model_type": t, "_name_or_path": f"tiny-{t}", **c} for t, c in BASE.items()}

# The JSON types a kind takes (written here apart from tfcalc.hf's pydantic adapters)
ACCEPTS = {
    "bool": lambda v: type(v) is bool, "bool?": lambda v: v is None or type(v) is bool,
    "int": lambda v: type(v) is int, "size": lambda v: type(v) is int, "count": lambda v: type(v) is int,
    "number": lambda v: type(v) in (int, float),
    "int?": lambda v: v is None or type(v) is int, "size?": lambda v: v is None or type(v) is int,
    "str": lambda v: type(v) is str, "str?": lambda v: v is None or type(v) is str,
    "integers?": lambda v: v is None or type(v) is list and all(type(x) is int for x in v),
    "integers": lambda v: type(v) is list and all(type(x) is int for x in v),
    "integer lists?": lambda v: v is None or type(v) is list and all(
        type(x) is list and all(type(y) is int for y in x) for x in v),
    "strings?": lambda v: v is None or type(v) is list and all(type(x) is str for x in v),
    "object?": lambda v: v is None or type(v) is dict,
    "float?": lambda v: v is None or type(v) is float,
    "float": lambda v: type(v) is float,
    "int|str?": lambda v: v is None or type(v) in (int, str),
    "int|str": lambda v: type(v) in (int, str),
    "all|vision?": lambda v: v in (None, "all", "vision") and type(v) in (type(None), str),
    "size|sizes": lambda v: type(v) is int or type(v) is list and all(type(x) is int for x in v),
}
WRONG = [None, True, False, 0, 1, 4096.7, 4096.0, "false", "true", "4096", "", ["gpt2"], [1], ["a"], {"a": 1},
         float("nan"), 10**30]


def test_every_default_has_its_type_and_every_base_config_reads(tmp_path):
    for t, defaults in DEFAULTS.items():
        for field, value in defaults.items():
            assert ACCEPTS[TYPES[t][field]](value), (t, field, value)
    for t, config in BASE.items():
        assert read_hf_config(write_json(tmp_path / f"{t}.json", config)).spec.name == f"tiny-{t}"


# Where tfcalc's types differ from transformers 5's declarations, on purpose
LENIENT = {("mistral", "num_key_value_heads"): "null means one kv head per head, as in transformers 4",
           ("mixtral", "num_key_value_heads"): "null means one kv head per head, as in transformers 4"}
STRICTER = {("bart", f): "declared int | None, but BartModel cannot be built with null" for f in
            ("encoder_layers", "encoder_ffn_dim", "encoder_attention_heads", "decoder_layers", "decoder_ffn_dim",
             "decoder_attention_heads", "d_model", "activation_function")}
STRICTER |= {("granitemoe", f): "declared int | None, but GraniteMoeModel cannot be built with null" for f in
             ("num_local_experts", "num_experts_per_tok")}
STRICTER |= {("clip_vision_model", f): "declared int | list | tuple | None, but CLIPVisionEmbeddings cannot be "
             "built with null (image_size // patch_size)" for f in ("image_size", "patch_size")}
SAMPLES = [True, 5, 5.5, "x", None, [1], ["x"], {"a": 1}]


def transformers_takes(model_type: str, field: str, value) -> bool:
    """Whether transformers' config class takes `value` for `field` by its declared type (its other checks aside)."""
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            transformers.AutoConfig.for_model(model_type, **{field: value})
    except StrictDataclassFieldValidationError as e:
        return f"field '{field}'" not in str(e)
    except Exception:  # noqa: BLE001 -- not a check of the field's type
        return True
    finally:
        transformers.logging.set_verbosity(verbosity)
    return True


@pytest.mark.parametrize("model_type", TYPES)
def test_types_are_the_ones_transformers_declares(model_type):
    config_class = transformers.AutoConfig.for_model(model_type).__class__
    declared = {k: v for cls in reversed(config_class.__mro__) for k, v in getattr(cls, "__annotations__", {}).items()}
    checked = 0
    for field, kind in TYPES[model_type].items():
        if field not in declared or field in PRETRAINED_UNTYPED or (model_type, field) in LENIENT | STRICTER:
            continue  # not declared in transformers 5 (read by getattr, or a transformers 4 field), not checked by its
            # config class, or on purpose
        checked += 1
        for value in SAMPLES:
            assert ACCEPTS[kind](value) == transformers_takes(model_type, field, value), (field, kind, value)
    for (t, field), why in (LENIENT | STRICTER).items():
        if t == model_type:  # the differences are real: transformers 5 takes what tfcalc refuses, or the reverse
            assert transformers_takes(t, field, None) != ACCEPTS[TYPES[t][field]](None), (field, why)
    assert checked >= len(DEFAULTS[model_type]) - sum(t == model_type for t, _ in STRICTER)


EXPECTED_PHRASE = {"bool": "a boolean (true or false)", "int": "an integer", "number": "a number", "size": "an integer",
                   "count": "an integer", "int?": "an integer or null", "size?": "an integer or null",
                   "str": "a string", "str?": "a string or null", "strings?": "a list of strings or null",
                   "integers?": "a list of integers or null", "integers": "a list of integers",
                   "integer lists?": "a list of lists of integers or null",
                   "object?": "an object or null",
                   "float?": "a float (50.0, not 50) or null", "float": "a float (0.5, not 1)",
                   "bool?": "a boolean (true or false) or null", "int|str?": "an integer, a string or null",
                   "int|str": "an integer or a string",
                   "all|vision?": "'all', 'vision' or null", "size|sizes": "a positive integer or a list of them"}
RANGE_PHRASE = {"size": "a positive integer", "size?": "a positive integer or null", "count": "an integer >= 0",
                "size|sizes": "a positive integer or a list of them"}
LOWEST = {"size": 1, "size?": 1, "count": 0, "size|sizes": 1}


@pytest.mark.parametrize("value", WRONG, ids=repr)
@pytest.mark.parametrize("model_type", TYPES)
def test_a_value_of_the_wrong_json_type_is_refused_by_name(tmp_path, model_type, value):
    # every field the mapper reads set to `value`: one line for each field that must not take it, naming both
    types = COMMON_TYPES | TYPES[model_type]
    path = write_json(tmp_path / "config.json", {**BASE[model_type], **dict.fromkeys(types, value)})
    expected = [f"{path}: {field}={value!r}: expected {EXPECTED_PHRASE[kind]}" if not ACCEPTS[kind](value) else
                f"{path}: {field}={value!r}: expected {RANGE_PHRASE[kind]}" for field, kind in types.items()
                if not ACCEPTS[kind](value) or type(value) is int and value < LOWEST.get(kind, value)]
    assert expected
    assert refused(read_hf_config, path).splitlines() == expected


@pytest.mark.parametrize("model_type, field, value, expected", [
    ("llama", "attention_bias", "false", "a boolean (true or false)"),
    ("llama", "tie_word_embeddings", "false", "a boolean (true or false)"),
    ("llama", "mlp_bias", 0, "a boolean (true or false)"),
    ("mistral", "sliding_window", True, "an integer or null"),
    ("llama", "hidden_size", 4096.7, "an integer"),
    ("llama", "hidden_size", 4096.0, "an integer"),
    ("llama", "num_hidden_layers", True, "an integer"),
    ("llama", "hidden_size", 0, "a positive integer"),
    ("gpt2", "n_inner", -5, "a positive integer or null"),
    ("bert", "type_vocab_size", -1, "an integer >= 0"),
    ("qwen2", "use_sliding_window", "false", "a boolean (true or false)"),
    ("qwen2", "layer_types", "sliding_attention", "a list of strings or null"),
    ("qwen2_moe", "mlp_only_layers", [1.0], "a list of integers or null"),
    ("t5", "tie_word_embeddings", "false", "a boolean (true or false)"),
    ("bart", "encoder_layers", None, "an integer"),
    ("llama", "rope_scaling", "linear", "an object or null"),
    ("gpt2", "_name_or_path", ["gpt2"], "a string or null"),
])
def test_known_coercions_are_refused_through_the_library_and_the_cli(tmp_path, model_type, field, value, expected):
    path = write_json(tmp_path / "config.json", {**BASE[model_type], field: value})
    message = refused(read_hf_config, path)
    assert message == f"{path}: {field}={value!r}: expected {expected}"
    assert cli("count", "--hf-config", str(path)) == [f"tfcalc: error: {message}"]


def test_each_problem_is_one_line(tmp_path):
    config = {**BASE["llama"], "attention_bias": "false", "tie_word_embeddings": 1, "hidden_size": 4096.7,
              "hidden_act": ["silu"], "num_key_value_heads": "2"}
    path = write_json(tmp_path / "config.json", config)
    lines = refused(read_hf_config, path).splitlines()
    assert sorted(lines) == sorted(f"{path}: {line}" for line in [
        "attention_bias='false': expected a boolean (true or false)", "tie_word_embeddings=1: expected a boolean "
        "(true or false)", "hidden_size=4096.7: expected an integer", "hidden_act=['silu']: expected a string",
        "num_key_value_heads='2': expected an integer or null"])
    assert sorted(cli("count", "--hf-config", str(path))) == sorted(f"tfcalc: error: {line}" for line in lines)


@pytest.mark.parametrize("model_type", [["gpt2"], {"t": 1}, 5, True])
def test_a_model_type_that_is_not_a_string(tmp_path, model_type):
    path = write_json(tmp_path / "config.json", {"model_type": model_type})
    message = refused(read_hf_config, path)
    assert message.startswith(f"{path}: model_type={model_type!r}: expected a string, one of: gpt2, bert")
    assert cli("count", "--hf-config", str(path)) == [f"tfcalc: error: {message}"]
    assert cli("compare", "gpt2", str(path)) == [f"tfcalc: error: {message}"]  # the file named once


def test_long_values_are_shown_cut(tmp_path):
    path = write_json(tmp_path / "config.json", {**BASE["gpt2"], "activation_function": ["x" * 10_000]})
    message = refused(read_hf_config, path)
    assert message.startswith(f"{path}: activation_function=['xxxx") and len(message) < len(str(path)) + 150


def test_a_single_mixtral_expert_has_a_router_and_is_refused(tmp_path):
    # transformers' MixtralSparseMoeBlock builds its router for any number of experts: tfcalc's n_experts=1 is a
    # dense MLP with none, so a one-expert config is refused by name rather than counted without the router
    import torch

    config = {**BASE["mixtral"], "num_local_experts": 1, "num_experts_per_tok": 1, "sliding_window": None}
    hf = transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k != "_name_or_path"})
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.MixtralForCausalLM(hf)
    routers = [name for name, _ in model.named_parameters() if name.endswith("mlp.gate.weight")]
    assert len(routers) == config["num_hidden_layers"]
    path = write_json(tmp_path / "config.json", config)
    message = refused(read_hf_config, path)
    assert message.startswith(f"{path}: num_local_experts=1 is not modelled: ") and "router" in message
    assert cli("count", "--hf-config", str(path)) == [f"tfcalc: error: {message}"]


@pytest.mark.parametrize("model_type, change, message", [
    ("qwen2_moe", {"num_experts": 1}, "num_experts=1 is not modelled: "),
    ("qwen2_moe", {"num_experts": 0}, "num_experts=0 is not modelled: "),
    ("qwen2_moe", {"mlp_only_layers": [1]}, "mlp_only_layers=[1] is not modelled: "),
    ("qwen2", {"layer_types": []}, "layer_types=[] is not modelled: expected a list of num_hidden_layers=4"),
    ("qwen2", {"layer_types": ["full_attention"] * 3 + ["chunked_attention"]},
     "layer_types=['full_attention', 'full_attention', 'full_attention', 'chunked_attention'] is not modelled: "
     "entries 'chunked_attention'"),
    ("qwen2", {"layer_types": ["sliding_attention"] * 4, "use_sliding_window": False},
     "sliding_attention blocks need use_sliding_window=true"),
    ("qwen2_moe", {"num_hidden_layers": 10**20, "max_window_layers": 3},
     "num_hidden_layers=100000000000000000000 is not modelled: "),
])
def test_shapes_transformers_builds_differently_are_refused_by_name(tmp_path, model_type, change, message):
    path = write_json(tmp_path / "config.json", {**BASE[model_type], **change})
    assert message in refused(read_hf_config, path)


def test_layer_types_and_windows_follow_transformers(tmp_path):
    def read(**change):
        return read_hf_config(write_json(tmp_path / "config.json", {**BASE["qwen2"], **change})).spec

    types = ["full_attention", "sliding_attention"] * 2
    assert read(layer_types=types).attention_pattern == ["global", "local"] * 2
    assert read(layer_types=["full_attention"] * 4, use_sliding_window=False).sliding_window is None
    assert read(use_sliding_window=False).sliding_window is None
    assert read(max_window_layers=-3).sliding_window_layers == 4  # every block i >= -3: all of them
    # Qwen2-MoE with a huge stack below max_window_layers: every other block, as a cycle of two
    moe = read_hf_config(write_json(tmp_path / "config.json", {**BASE["qwen2_moe"], "num_hidden_layers": 10**20,
                                                                "max_window_layers": 10**21})).spec
    assert moe.attention_pattern == ["local", "global"] and moe.n_layers == 10**20


# ---- 4. wrong types through the API ---------------------------------------------------------------------------

@pytest.mark.parametrize("call, arg, message", [
    (tfcalc.load_preset, 5, "preset name must be a string, got int"),
    (tfcalc.find_preset, None, "preset name must be a string, got NoneType"),
    (tfcalc.find_preset, b"gpt2", "preset name must be a string, got bytes"),
    (read_spec_file, 5, "the path of a spec file must be a string or a path, got int"),
    (read_hf_config, None, "the path of a Hugging Face config must be a string or a path, got NoneType"),
])
def test_wrong_types_through_the_api(call, arg, message):
    assert refused(call, arg) == message


# ---- the property: any JSON value in any field is a spec or a TfcalcError, never a coerced one ---------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-(10**4000), 10**4000) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)

# values of a kind's own JSON type, small enough to make a valid config often (the values above rarely are)
_names = st.sampled_from(["silu", "gelu", "gelu_new", "relu", "relu6", "gated-gelu", "gated-silu", "absolute",
                          "relative_key", "full_attention", "sliding_attention"]) | st.text(max_size=8)
_sizes = st.integers(1, 64) | st.integers(-2, 2) | st.integers(10**20, 10**4000)
OWN_TYPE = {
    "bool": st.booleans(), "int": _sizes, "number": st.floats(0.1, 4) | st.integers(-2, 4), "size": _sizes, "count": _sizes, "int?": st.none() | _sizes,
    "size?": st.none() | _sizes, "str": _names, "str?": st.none() | _names,
    "integers?": st.none() | st.lists(_sizes, max_size=4),
    "integers": st.lists(_sizes, max_size=4),
    "strings?": st.none() | st.lists(_names, min_size=4, max_size=4) | st.lists(_names, max_size=5),
    "object?": st.none() | st.dictionaries(st.text(max_size=8), json_values, max_size=3),
    "bool?": st.none() | st.booleans(), "float?": st.none() | st.floats(1, 100),
    "float": st.sampled_from([0.5, 0.25, 1.0]) | st.floats(0, 2),
    "int|str?": st.none() | _sizes | _names,
    "int|str": _sizes | _names,
    "all|vision?": st.sampled_from([None, "all", "vision"]) | _names,
    "size|sizes": _sizes | st.lists(_sizes, max_size=3),
    "integer lists?": st.none() | st.lists(st.lists(_sizes, max_size=3), max_size=3),
}

# transformers' own validation is the oracle when tfcalc reads a config, except for fields it does not type
# (transformers 5 dropped them, reads them with getattr, or T5 pops tie_word_embeddings from its kwargs untyped), and
# where tfcalc takes null as transformers 4 did (LENIENT)
# PreTrainedConfig's, declared but taken as anything (tfcalc types them: vit)
PRETRAINED_UNTYPED = {"architectures", "id2label", "num_labels"}
NOT_TYPED_BY_TRANSFORMERS = {"_name_or_path", "position_embedding_type", "rope_scaling",
                             "rope_parameters"} | PRETRAINED_UNTYPED
UNTYPED_HERE = {("t5", "tie_word_embeddings"), ("qwen2", "head_dim"), ("qwen2_moe", "head_dim"),
                ("qwen3_moe", "head_dim"), ("olmo2", "head_dim")}

# Fields that land in one ModelSpec field as they are (hf field -> spec field): the value read must be the value
# given, of the same type, and no other field the config gave may change
DIRECT = {
    "gpt2": dict(n_layer="n_layers", n_embd="d_model", n_head="n_heads", n_inner="d_ff", vocab_size="vocab_size",
                 n_positions="max_positions", tie_word_embeddings="tie_embeddings"),
    "bert": dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads",
                 intermediate_size="d_ff", vocab_size="vocab_size", max_position_embeddings="max_positions",
                 type_vocab_size="n_token_types", is_decoder="causal"),
    "t5": dict(num_layers="n_encoder_layers", num_decoder_layers="n_layers", d_model="d_model", num_heads="n_heads",
               d_kv="d_head", d_ff="d_ff", vocab_size="vocab_size", relative_attention_num_buckets=
               "relative_attention_buckets", tie_word_embeddings="tie_embeddings"),
    "bart": dict(encoder_layers="n_encoder_layers", decoder_layers="n_layers", d_model="d_model",
                 vocab_size="vocab_size"),
}
_DECODER_DIRECT = dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads",
                       num_key_value_heads="n_kv_heads", head_dim="d_head", intermediate_size="d_ff",
                       vocab_size="vocab_size", tie_word_embeddings="tie_embeddings")
DIRECT |= {
    "llama": _DECODER_DIRECT | dict(attention_bias="bias", mlp_bias="mlp_bias"),
    "mistral": _DECODER_DIRECT | dict(sliding_window="sliding_window"),
    "mixtral": _DECODER_DIRECT | dict(sliding_window="sliding_window", num_local_experts="n_experts",
                                      num_experts_per_tok="top_k"),
    "qwen2": _DECODER_DIRECT,
    "qwen2_moe": _DECODER_DIRECT | dict(num_experts="n_experts", num_experts_per_tok="top_k",
                                        moe_intermediate_size="d_expert", qkv_bias="qkv_bias",
                                        shared_expert_intermediate_size="d_shared_expert",
                                        decoder_sparse_step="moe_every"),
    "gemma": _DECODER_DIRECT | dict(attention_bias="bias"),
    # GPTBigCodeConfig's attribute_map: the common names land where its own do
    "gpt_bigcode": DIRECT["gpt2"] | dict(hidden_size="d_model", num_hidden_layers="n_layers",
                                         num_attention_heads="n_heads", max_position_embeddings="max_positions"),
    "roberta": DIRECT["bert"],
    "xlm-roberta": DIRECT["bert"],
    "opt": dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads", ffn_dim="d_ff",
                vocab_size="vocab_size", enable_bias="bias", tie_word_embeddings="tie_embeddings"),
    "granite": _DECODER_DIRECT | dict(attention_bias="bias", mlp_bias="mlp_bias"),
    "phi3": _DECODER_DIRECT | dict(sliding_window="sliding_window"),
    "qwen3": _DECODER_DIRECT,
    "qwen3_moe": _DECODER_DIRECT | dict(num_experts="n_experts", num_experts_per_tok="top_k",
                                        moe_intermediate_size="d_expert", decoder_sparse_step="moe_every"),
    "olmo2": _DECODER_DIRECT,
    "gemma2": _DECODER_DIRECT,
    "gemma3_text": _DECODER_DIRECT,
    "gemma4_text": _DECODER_DIRECT | dict(attention_bias="bias", global_head_dim="global_d_head"),
    "smollm3": _DECODER_DIRECT | dict(attention_bias="bias", mlp_bias="mlp_bias", sliding_window="sliding_window"),
    "cohere2": _DECODER_DIRECT | dict(attention_bias="bias", sliding_window="sliding_window"),
    "granitemoe": _DECODER_DIRECT | dict(attention_bias="bias", num_local_experts="n_experts",
                                         num_experts_per_tok="top_k"),
    "exaone4": _DECODER_DIRECT | dict(sliding_window="sliding_window"),
    "olmo3": _DECODER_DIRECT | dict(attention_bias="bias", sliding_window="sliding_window"),
    "mbart": DIRECT["bart"] | dict(hidden_size="d_model", num_hidden_layers="n_encoder_layers"),
    "marian": DIRECT["bart"] | dict(hidden_size="d_model", num_hidden_layers="n_encoder_layers",
                                    max_position_embeddings="max_positions", tie_word_embeddings="tie_embeddings",
                                    share_encoder_decoder_embeddings="shared_embeddings"),
    "albert": dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads",
                   intermediate_size="d_ff", vocab_size="vocab_size", max_position_embeddings="max_positions",
                   type_vocab_size="n_token_types", embedding_size="d_embedding", num_hidden_groups="shared_blocks"),
    "distilbert": dict(n_layers="n_layers", dim="d_model", n_heads="n_heads", hidden_dim="d_ff",
                       vocab_size="vocab_size", max_position_embeddings="max_positions", hidden_size="d_model",
                       num_attention_heads="n_heads", num_hidden_layers="n_layers"),
    "gpt_oss": _DECODER_DIRECT | dict(attention_bias="bias", sliding_window="sliding_window",
                                      num_local_experts="n_experts", num_experts="n_experts",
                                      num_experts_per_tok="top_k"),
    **dict.fromkeys(("deepseek_v2", "deepseek_v3", "deepseek_v32"), dict(
        num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads", intermediate_size="d_ff",
        vocab_size="vocab_size", tie_word_embeddings="tie_embeddings", kv_lora_rank="kv_lora_rank",
        q_lora_rank="q_lora_rank", qk_nope_head_dim="qk_nope_dim", qk_rope_head_dim="qk_rope_dim",
        v_head_dim="v_head_dim", num_experts_per_tok="top_k")),
    # the parallel-block families (tests/test_hf_parallel.py); GPT-NeoX's and Phi's rotary width follows the head
    "gpt_neox": dict(num_hidden_layers="n_layers", intermediate_size="d_ff", vocab_size="vocab_size",
                     tie_word_embeddings="tie_embeddings", attention_bias="bias"),
    "gptj": dict(n_layer="n_layers", n_embd="d_model", n_head="n_heads", n_inner="d_ff", vocab_size="vocab_size",
                 rotary_dim="rotary_dim", tie_word_embeddings="tie_embeddings", hidden_size="d_model",
                 num_hidden_layers="n_layers", num_attention_heads="n_heads"),
    "phi": dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads",
                num_key_value_heads="n_kv_heads", intermediate_size="d_ff", vocab_size="vocab_size"),
    "falcon": dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads",
                   num_kv_heads="n_kv_heads", ffn_hidden_size="d_ff", vocab_size="vocab_size",
                   tie_word_embeddings="tie_embeddings", bias="bias"),
    "cohere": dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads",
                   num_key_value_heads="n_kv_heads", head_dim="d_head", intermediate_size="d_ff",
                   vocab_size="vocab_size", tie_word_embeddings="tie_embeddings", attention_bias="bias"),
    # BloomConfig's attribute_map and its n_embed kwarg: those names land where its own do
    "bloom": dict(n_layer="n_layers", n_head="n_heads", hidden_size="d_model", vocab_size="vocab_size",
                  tie_word_embeddings="tie_embeddings", num_hidden_layers="n_layers", num_attention_heads="n_heads",
                  n_embed="d_model"),
    "mpt": dict(n_layers="n_layers", n_heads="n_heads", d_model="d_model", vocab_size="vocab_size",
                tie_word_embeddings="tie_embeddings", num_hidden_layers="n_layers", num_attention_heads="n_heads",
                hidden_size="d_model"),
}
_LFM2_DIRECT = dict(hidden_size="d_model", num_attention_heads="n_heads", num_key_value_heads="n_kv_heads",
                    head_dim="d_head", vocab_size="vocab_size", tie_word_embeddings="tie_embeddings",
                    tie_embedding="tie_embeddings")
DIRECT["lfm2"] = _LFM2_DIRECT  # intermediate_size is not direct: Lfm2MLP's width rule
DIRECT["mamba2"] = dict(num_hidden_layers="n_layers", vocab_size="vocab_size", tie_word_embeddings="tie_embeddings")
DIRECT["nemotron_h"] = dict(hidden_size="d_model", num_attention_heads="n_heads", num_key_value_heads="n_kv_heads",
                            head_dim="d_head", intermediate_size="d_ff", vocab_size="vocab_size")  # never tied
DIRECT["qwen3_next"] = dict(hidden_size="d_model", num_attention_heads="n_heads", num_key_value_heads="n_kv_heads",
                            intermediate_size="d_ff", vocab_size="vocab_size", tie_word_embeddings="tie_embeddings",
                            attention_bias="bias", moe_intermediate_size="d_expert", num_experts_per_tok="top_k",
                            shared_expert_intermediate_size="d_shared_expert")
DIRECT["qwen3_5_text"] = {k: v for k, v in DIRECT["qwen3_next"].items()
                          if k not in ("moe_intermediate_size", "num_experts_per_tok", "shared_expert_intermediate_size")}
DIRECT["qwen3_5_moe_text"] = {k: v for k, v in DIRECT["qwen3_next"].items()  # moe_intermediate_size: d_expert, d_ff
                              if k not in ("intermediate_size", "moe_intermediate_size")}
DIRECT["granitemoehybrid"] = dict(num_attention_heads="n_heads", num_key_value_heads="n_kv_heads",
                                  vocab_size="vocab_size", tie_word_embeddings="tie_embeddings", attention_bias="bias",
                                  num_experts_per_tok="top_k", shared_intermediate_size="d_shared_expert")
DIRECT["ministral3"] = _DECODER_DIRECT | dict(sliding_window="sliding_window")
# GLM-4's rotary width follows head_dim, and GLM-4.5's shared expert's width moe_intermediate_size: not direct
DIRECT["glm4"] = {k: v for k, v in _DECODER_DIRECT.items() if k != "head_dim"} | dict(attention_bias="qkv_bias")
DIRECT["glm4_moe"] = DIRECT["glm4"] | dict(n_routed_experts="n_experts", num_local_experts="n_experts",
                                           num_experts_per_tok="top_k")
DIRECT["phimoe"] = _DECODER_DIRECT | dict(sliding_window="sliding_window", num_local_experts="n_experts",
                                          num_experts_per_tok="top_k", attention_bias="bias",
                                          lm_head_bias="head_bias")
DIRECT["mamba"] = dict(num_hidden_layers="n_layers", vocab_size="vocab_size", tie_word_embeddings="tie_embeddings")
DIRECT["jamba"] = dict(num_attention_heads="n_heads", num_key_value_heads="n_kv_heads", num_experts_per_tok="top_k",
                       vocab_size="vocab_size", tie_word_embeddings="tie_embeddings")
DIRECT["bamba"] = dict(num_attention_heads="n_heads", num_key_value_heads="n_kv_heads", intermediate_size="d_ff",
                       vocab_size="vocab_size", tie_word_embeddings="tie_embeddings")
DIRECT["falcon_h1"] = dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads",
                           num_key_value_heads="n_kv_heads", intermediate_size="d_ff", vocab_size="vocab_size",
                           tie_word_embeddings="tie_embeddings", mlp_bias="mlp_bias", attention_bias="bias",
                           head_dim="d_head")
DIRECT["vit"] = dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads",
                     intermediate_size="d_ff", qkv_bias="qkv_bias")
# (embed_dim also sizes Qwen2-VL's MLP, depth Qwen2.5-VL's pattern of windowed blocks)
DIRECT["qwen2_vl_vision"] = dict(depth="n_layers", num_heads="n_heads")
DIRECT["qwen2_5_vl_vision"] = dict(hidden_size="d_model", num_heads="n_heads", intermediate_size="d_ff")
# Llama 4's vision tower: intermediate_size is also its adapter's input (4 x hidden_size at ratio 0.5)
DIRECT["llama4_vision_model"] = dict(num_hidden_layers="n_layers", num_attention_heads="n_heads")
DIRECT["gemma4_vision"] = dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads",
                               num_key_value_heads="n_kv_heads", intermediate_size="d_ff", head_dim="d_head")
DIRECT["lfm2_moe"] = _LFM2_DIRECT | dict(intermediate_size="d_ff", moe_intermediate_size="d_expert",
                                         num_experts_per_tok="top_k", num_experts="n_experts")
# Llama 4's MoE and NoPE blocks are rules over the layers (num_hidden_layers is not direct); intermediate_size
# sets both the routed and the shared experts' width
DIRECT["llama4_text"] = {k: v for k, v in _DECODER_DIRECT.items() if k not in ("num_hidden_layers",
                                                                          "intermediate_size")}
DIRECT["llama4_text"] |= dict(intermediate_size_mlp="d_ff", attention_bias="bias", num_local_experts="n_experts",
                              num_experts_per_tok="top_k", attention_chunk_size="attention_chunk_size")
# CLIP's and SigLIP's towers: the encoder's sizes (a vision tower's image and patch sizes set the kinds' grid and
# seq_len, not one field; projection_dim is read only when architectures names CLIP's *WithProjection class)
_TOWER_DIRECT = dict(num_hidden_layers="n_layers", hidden_size="d_model", num_attention_heads="n_heads",
                     intermediate_size="d_ff")
DIRECT["clip_vision_model"] = _TOWER_DIRECT
DIRECT["clip_text_model"] = _TOWER_DIRECT | dict(vocab_size="vocab_size", max_position_embeddings="max_positions")
DIRECT["siglip_vision_model"] = _TOWER_DIRECT | dict(vision_use_head="attention_pool")
DIRECT["siglip2_vision_model"] = _TOWER_DIRECT | dict(vision_use_head="attention_pool")
DIRECT["siglip_text_model"] = DIRECT["clip_text_model"] | dict(projection_size="d_projection")
# Mllama's head is never tied, its token table vocab_size + 8 rows (embedding_rows moves with vocab_size), its heads
# hidden_size / num_attention_heads wide (head_dim not read), its cross-attention blocks a rule over the layers
DIRECT["mllama_text_model"] = {k: v for k, v in _DECODER_DIRECT.items()
                               if k not in ("num_hidden_layers", "head_dim", "vocab_size", "tie_word_embeddings")}
# WhisperConfig's attribute_map: the common names land where its own do (the two stacks' heads and MLP widths are one
# spec field each: a decoder's that differs from the encoder's is refused)
DIRECT["whisper"] = dict(encoder_layers="n_encoder_layers", decoder_layers="n_layers", d_model="d_model",
                         encoder_attention_heads="n_heads", decoder_attention_heads="n_heads",
                         encoder_ffn_dim="d_ff", decoder_ffn_dim="d_ff", vocab_size="vocab_size",
                         max_target_positions="max_positions", tie_word_embeddings="tie_embeddings",
                         hidden_size="d_model", num_attention_heads="n_heads", num_key_value_heads="n_heads",
                         num_hidden_layers="n_encoder_layers")
# Voxtral's audio tower: VoxtralEncoderConfig's attribute_map (d_model, encoder_layers, ...) lands on its own names
# (hidden_size and num_attention_heads move d_head, d_ff and n_kv_heads too: not direct)
DIRECT["gemma4_audio"] = dict(num_hidden_layers="n_layers")
DIRECT["voxtral_encoder"] = _TOWER_DIRECT | dict(d_model="d_model", encoder_layers="n_layers",
                                                 encoder_attention_heads="n_heads", encoder_ffn_dim="d_ff")
TRIED = {"examples": 0, "read": 0, "refused": 0}
# the wrappers' towers read whole: their fields move the kinds' sizes and the tower's workload together (a patch
# grid, a merger's width), so none is asserted direct here; their exact counts are held in their own test files
DIRECT |= {t: {} for t in ("qwen3_vl_vision", "qwen3_vl_moe_vision", "qwen3_5_vision", "qwen3_5_moe_vision",
                           "exaone4_5_vision", "glm4v_vision", "idefics3_vision", "smolvlm_vision", "pixtral",
                           "kimi_k25_vision", "mllama_vision_model", "minicpmv4_6_vision", "minicpmv4_7_vision",
                           "minicpm_ocr_vision")}


def transformers_accepts(config: dict) -> bool:
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # its warnings about token ids outside a tiny vocabulary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k != "_name_or_path"})
        except StrictDataclassFieldValidationError:  # a field of the wrong type (not a check across fields)
            return False
        except Exception:  # noqa: BLE001 -- another of transformers' checks: not about the field's type
            return True
        finally:
            transformers.logging.set_verbosity(verbosity)
    return True


def small(value) -> bool:
    """No integer so big that transformers' own config code (a list per layer) would run for ever."""
    if isinstance(value, list):
        return all(map(small, value))
    if isinstance(value, dict):
        return all(map(small, value.values()))
    return not isinstance(value, int) or abs(value) <= 10_000


@functools.cache
def base_spec(model_type: str, folder: Path):
    return read_hf_config(write_json(folder / f"base-{model_type}.json", BASE[model_type])).spec


@pytest.mark.parametrize("model_type", TYPES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_json_value_in_any_field_gives_a_spec_or_one_named_error(tmp_path, model_type, data):
    types = COMMON_TYPES | TYPES[model_type]
    field = data.draw(st.sampled_from(sorted(types)), label="field")
    value = data.draw(json_values | OWN_TYPE[types[field]], label="value")
    config = {**BASE[model_type], field: value}
    path = write_json(tmp_path / "config.json", config)
    right_type = ACCEPTS[types[field]](value)
    TRIED["examples"] += 1
    try:
        with bounded():
            spec = read_hf_config(path).spec
    except TfcalcError as e:
        TRIED["refused"] += 1
        if not right_type:  # refused, by name, with the value
            assert f"{path}: {field}={repr(value)[:40]}" in str(e)
        return
    TRIED["read"] += 1
    assert right_type, f"{field}={value!r} was read into {spec!r}"
    untyped = field in NOT_TYPED_BY_TRANSFORMERS or (model_type, field) in UNTYPED_HERE | set(LENIENT)
    if not untyped and small(config):
        assert transformers_accepts(config), f"transformers refuses {field}={value!r}; tfcalc read it"
    base = base_spec(model_type, tmp_path)
    target = DIRECT[model_type].get(field)
    if target is None or value is None:
        return
    got = getattr(spec, target)
    assert got == value and type(got) is type(value), (field, value, got)
    moved = {target, "name"} | ({"seq_len"} if target == "max_positions" else set())
    if field == "num_hidden_layers":  # the windowed blocks are a rule over the layers
        moved |= {"sliding_window", "sliding_window_layers", "attention_pattern"}
    if model_type == "gpt2" and field == "n_positions":
        assert spec.seq_len == min(value, SEQ_LEN_CAP)
    same = {k: v for k, v in base.given().items() if k not in moved}
    assert {k: v for k, v in spec.given().items() if k not in moved} == same


def test_the_property_tried_enough():
    # runs after the property test in file order; says how many generated inputs were tried
    if TRIED["examples"] == 0:
        pytest.skip("the property test did not run in this session")
    print(f"\nproperty test: {TRIED}")
    assert TRIED["read"] > 100 and TRIED["refused"] > 100
