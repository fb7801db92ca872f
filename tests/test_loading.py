import json

import pytest

from tfcalc import TfcalcError
from tfcalc.loading import read_spec_file

GOOD = {"n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 100, "seq_len": 8}


def test_flat_toml_and_json(tmp_path):
    toml = tmp_path / "m.toml"
    toml.write_text("\n".join(f"{k} = {v}" for k, v in GOOD.items()))
    js = tmp_path / "m.json"
    js.write_text(json.dumps(GOOD))
    assert read_spec_file(toml).spec == read_spec_file(js).spec
    assert read_spec_file(toml).name == "m"


def test_preset_style_file(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text('name = "tiny"\nsource = "made up"\n\n[model]\n' + "\n".join(f"{k} = {v}" for k, v in GOOD.items()))
    f = read_spec_file(path)
    assert (f.name, f.source, f.spec.name) == ("tiny", "made up", "tiny")


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("a.toml", "n_layers = 2\nd_model = \n", r"a.toml: invalid TOML: .*line 2"),
        ("b.json", '{"n_layers": 2,\n "d_model": }', r"b.json: line 2, column \d+: invalid JSON"),
        ("c.toml", "n_layers = 2\nd_model = 64\nn_heads = 4\nvocab_size = 9\nseq_len = 8\nwidth = 3\n",
         r"c.toml: line 6: width=3: unknown field"),
        ("d.json", json.dumps({**GOOD, "d_model": 64.5}, indent=1), r"d.json: line 3: d_model=64.5: Input should be"),
        ("e.toml", "n_layers = 2\n", r"e.toml: d_model is required"),
        ("f.yaml", "n_layers: 2\n", r"f.yaml: unknown spec file type '.yaml'"),
        ("g.json", "[1, 2]", r"g.json: expected a JSON object"),
        ("h.toml", 'name = "x"\nsize = 3\n[model]\nn_layers = 2\n', r"h.toml: line 2: size: unknown top-level field"),
    ],
)
def test_bad_files_name_the_file_line_and_field(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TfcalcError, match=message):
        read_spec_file(path)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TfcalcError, match="no such file"):
        read_spec_file(tmp_path / "nope.toml")
    with pytest.raises(TfcalcError, match="is a directory"):
        read_spec_file(tmp_path)
