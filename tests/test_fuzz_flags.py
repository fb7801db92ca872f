"""Random flags on top of presets and on their own: exit code 0 or 2, never a traceback, one `tfcalc: error:` line
per problem; on success every typed flag is in the counted spec as typed, and the counts are the library's for
that spec and workload."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tfcalc import ModelSpec, Workload, count, load_preset
from tfcalc.cli import app

runner = CliRunner()

PRESETS = ["gpt2", "llama3-8b", "mixtral-8x7b", "bert-base", "t5-small", "bart-base", "mistral-7b", None]
SIZE = st.one_of(st.integers(-2, 70), st.sampled_from([2**40, 10**30]))
WEIRD = st.sampled_from(["", "1.5", "1e3", "abc", "-0", "1_000", "0x10", " 7", "٣"])
INT_FLAGS = {"-L": "n_layers", "-d": "d_model", "-H": "n_heads", "--d-head": "d_head", "--n-kv-heads": "n_kv_heads",
             "--d-ff": "d_ff", "-V": "vocab_size", "-N": "seq_len", "-B": "batch_size",
             "--max-positions": "max_positions", "--sliding-window": "sliding_window", "-E": "n_experts",
             "--top-k": "top_k", "--first-dense-layers": "first_dense_layers", "--moe-every": "moe_every",
             "--n-encoder-layers": "n_encoder_layers", "--d-expert": "d_expert", "--rotary-dim": "rotary_dim"}
CHOICE_FLAGS = {"--positions": ("positions", ["learned", "rotary", "relative", "none", "alibi"]),
                "--mlp": ("mlp", ["standard", "gated", "swiglu"]),
                "--norm-position": ("norm_position", ["pre", "post", "sandwich", "output", "peri"]),
                "--qk-norm": ("qk_norm", ["none", "head", "full", "layer"]),
                "--parallel-block": ("parallel_block", ["none", "one_norm", "two_norms", "two"]),
                "--attention-pattern": ("attention_pattern", ["local,global", "local", "global,x", ""])}
WORKLOAD_FLAGS = {"--phase": st.sampled_from(["train", "prefill", "decode", "serve"]),
                  "--context": SIZE, "--src-len": SIZE, "--tgt-len": SIZE}


@st.composite
def invocations(draw):
    preset = draw(st.sampled_from(PRESETS))
    args, typed = [], {}
    if preset:
        args += ["-p", preset]
    for flag in draw(st.lists(st.sampled_from(sorted(INT_FLAGS)), max_size=5, unique=True)):
        value = draw(st.one_of(SIZE, WEIRD) if draw(st.integers(0, 9)) == 0 else SIZE)
        args += [flag, str(value)]
        try:  # what the flag means when it is an integer at all ('1_000' and ' 7' are, as int() reads them)
            typed[INT_FLAGS[flag]] = int(value)
        except ValueError:
            typed[INT_FLAGS[flag]] = value
    for flag in draw(st.lists(st.sampled_from(sorted(CHOICE_FLAGS)), max_size=2, unique=True)):
        field, choices = CHOICE_FLAGS[flag]
        value = draw(st.sampled_from(choices))
        args += [flag, value]
        typed[field] = value.split(",") if field == "attention_pattern" else value
    workload = {}
    for flag in draw(st.lists(st.sampled_from(sorted(WORKLOAD_FLAGS)), max_size=2, unique=True)):
        value = draw(WORKLOAD_FLAGS[flag])
        args += [flag, str(value)]
        workload[flag] = value
    if not preset and draw(st.booleans()):  # flags alone: give the required sizes most of the time
        for flag, value in (("-L", 2), ("-d", 32), ("-H", 4), ("-V", 50), ("-N", 8), ("--max-positions", 16)):
            if INT_FLAGS.get(flag, "max_positions") not in typed:
                args += [flag, str(value)]
                typed[INT_FLAGS[flag]] = value
    return args, typed, workload


@settings(max_examples=400, deadline=None)
@given(invocations())
def test_flags_either_count_exactly_or_fail_in_one_line_each(invocation):
    args, typed, workload = invocation
    r = runner.invoke(app, ["count", *args, "--json"])
    assert "Traceback" not in r.output
    assert r.exit_code in (0, 2), (args, r.exit_code, r.output, r.exception)
    if r.exit_code == 2:
        lines = r.output.strip().splitlines()
        assert lines and all(line.startswith("tfcalc: error: ") and len(line) > 16 for line in lines), lines
        return
    d = json.loads(r.output)
    for field, value in typed.items():  # every flag the user typed is kept as typed
        assert d["spec"][field] == value, (field, value, d["spec"][field])
    spec = ModelSpec.model_validate({k: v for k, v in d["spec"].items()})
    w = Workload.model_validate({k: v for k, v in d["workload"].items() if k != "keys"})
    expected = count(spec, w)
    assert d["params"]["total"] == expected.params.total
    assert d["flops"]["forward"] == expected.flops.forward
    if "-p" in args and not any(field in typed for field in ("max_positions", "n_layers", "d_model", "n_heads",
                                                             "d_head", "d_ff", "vocab_size", "n_kv_heads",
                                                             "positions", "mlp", "n_experts", "d_expert",
                                                             "n_encoder_layers", "first_dense_layers", "moe_every",
                                                             "norm_position", "qk_norm", "parallel_block")):
        # only the workload (and layout-free fields) changed: the parameters are the preset's
        assert d["params"]["total"] == count(load_preset(args[args.index("-p") + 1])).params.total


# ---- spec files: random values in random fields -------------------------------------------------------------

import tomllib  # noqa: E402

from tfcalc.loading import read_spec_file  # noqa: E402
from tfcalc import TfcalcError  # noqa: E402

TOML_VALUES = st.one_of(
    st.integers(-3, 2**70), st.sampled_from([10**499, 10**500]), st.booleans(), st.floats(allow_nan=False),
    st.text(max_size=20), st.lists(st.integers(0, 3), max_size=3), st.sampled_from(["false", "true", "12", "gated"]))
FIELDS = sorted(ModelSpec.model_fields)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else "0.5"
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return str(value)


@settings(max_examples=300, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(FIELDS + ["unknown_field"]), TOML_VALUES, max_size=4),
       preset_style=st.booleans())
def test_spec_files_either_count_or_fail_in_one_line_each(tmp_path_factory, fields, preset_style):
    base = {"n_layers": 2, "d_model": 32, "n_heads": 4, "vocab_size": 50, "seq_len": 8}
    body = "\n".join(f"{k} = {_toml(v)}" for k, v in {**base, **fields}.items())
    text = f'name = "fuzz"\n[model]\n{body}\n' if preset_style else body + "\n"
    path = tmp_path_factory.mktemp("spec") / "fuzz.toml"
    path.write_text(text)
    try:
        spec = read_spec_file(path).spec
    except TfcalcError as e:
        assert all(line.startswith(str(path)) for line in str(e).splitlines())
        spec = None
    r = runner.invoke(app, ["count", "--spec", str(path), "--json"])
    assert "Traceback" not in r.output and r.exit_code in (0, 2), (text, r.output, r.exception)
    if r.exit_code == 2:
        assert all(line.startswith("tfcalc: error: ") for line in r.output.strip().splitlines())
        return
    assert spec is not None
    written = tomllib.loads(text)
    written = written.get("model", written)
    d = json.loads(r.output)
    for field, value in written.items():  # kept as written: strict types, no coercion
        assert d["spec"][field] == value and type(d["spec"][field]) is type(value)
    assert d["params"]["total"] == count(spec).params.total
