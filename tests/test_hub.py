"""Models by Hugging Face id: config.json from a cache in huggingface_hub's own layout, built here (no network:
HF_HUB_OFFLINE is set), at a revision; every failure one line, exit 2."""

import json
from pathlib import Path

import pytest
from huggingface_hub import errors
from typer.testing import CliRunner

from tfcalc import TfcalcError, count
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.hub import config_path, is_id, repo_of

runner = CliRunner()
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 64}
MAIN, V1 = "a" * 40, "b" * 40  # commit hashes


def snapshot(cache: Path, repo: str, commit: str, config: dict, ref: str | None = None) -> Path:
    """What huggingface_hub leaves after downloading config.json: models--ORG--NAME/{refs/REF, snapshots/COMMIT/}."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    if ref is not None:
        (folder / "refs" / ref).write_text(commit)
    (folder / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
    path = folder / "snapshots" / commit / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    snapshot(hub, "Org/Tiny", MAIN, TINY, "main")
    snapshot(hub, "Org/Tiny", V1, {**TINY, "num_hidden_layers": 4}, "v1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return hub


def cli(*args: str):
    r = runner.invoke(app, list(args))
    return r.exit_code, r.output


def test_an_id_reads_the_cached_config_at_main_or_a_revision(cache):
    code, out = cli("count", "--hf-config", "Org/Tiny", "--format", "json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["spec"]["name"] == "Org/Tiny" and doc["spec"]["n_layers"] == 2  # named by its id, not a hash
    code, out = cli("count", "--hf-config", "Org/Tiny", "--revision", "v1", "--format", "json")
    assert code == 0 and json.loads(out)["spec"]["n_layers"] == 4
    code, out = cli("count", "--hf-config", "Org/Tiny", "--revision", V1, "--format", "json")  # a commit
    assert code == 0 and json.loads(out)["spec"]["n_layers"] == 4
    # the same count as the file itself
    direct = count(read_hf_config(cache / "models--Org--Tiny" / "snapshots" / MAIN / "config.json").spec)
    assert doc["params"]["total"] == direct.params.total


def test_every_command_and_the_api_take_an_id(cache):
    for command in (["memory", "--context", "31"], ["infer", "--context", "31", "--gpu", "h100"],
                    ["train", "--tokens", "1e9"]):
        code, out = cli(command[0], "--hf-config", "Org/Tiny", *command[1:])
        assert code == 0, (command, out)
    code, out = cli("compare", "Org/Tiny", "gpt2", "--revision", "v1", "--format", "json")
    assert code == 0, out
    assert [m["spec"]["n_layers"] for m in json.loads(out)["models"]][0] == 4
    assert read_hf_config("Org/Tiny").spec.name == "Org/Tiny"
    assert repo_of(config_path("Org/Tiny", "v1")) == "Org/Tiny"


@pytest.mark.parametrize("args, message", [
    (("--hf-config", "Org/Missing"), "Org/Missing: its config.json is not in the Hugging Face cache"),
    (("--hf-config", "Org/Tiny", "--revision", "v2"), "Org/Tiny (revision 'v2'): its config.json is not in the"),
    (("--preset", "gpt2", "--revision", "v1"), "--revision v1: a revision picks the config.json of a Hugging Face "
                                               "id (--hf-config ORG/NAME); got no --hf-config"),
])
def test_what_cannot_be_read_is_one_line(cache, args, message):
    code, out = cli("count", *args)
    assert code == 2 and out.count("\n") == 1 and message in out and "Traceback" not in out, out
    if "Missing" in message:
        assert "HF_HUB_OFFLINE is set" in out


def test_a_path_that_exists_is_a_path(cache, tmp_path):
    local = tmp_path / "Org" / "Tiny"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps({**TINY, "num_hidden_layers": 3}))
    assert not is_id("Org/Tiny") and is_id("Org/Other")
    code, out = cli("count", "--hf-config", "Org/Tiny", "--format", "json")
    assert code == 0 and json.loads(out)["spec"]["n_layers"] == 3
    code, out = cli("count", "--hf-config", "Org/Tiny", "--revision", "v1")
    assert code == 2 and "--revision v1" in out  # a path has no revision: refused, not dropped


def test_the_hubs_refusals_are_one_line(cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    import huggingface_hub

    def failing(kind):
        def download(*args, **kwargs):
            e = kind.__new__(kind)
            Exception.__init__(e, "401 Client Error")
            raise e
        return download

    for kind, said in [(errors.GatedRepoError, "a gated repository: accept its terms"),
                       (errors.RepositoryNotFoundError, "no such repository on the Hugging Face hub"),
                       (errors.RevisionNotFoundError, "the repository has no such revision"),
                       (errors.EntryNotFoundError, "the repository has no config.json"),
                       (errors.LocalEntryNotFoundError, "the hub cannot be reached")]:
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", failing(kind))
        with pytest.raises(TfcalcError, match=said):
            config_path("Org/Gated")
        code, out = cli("count", "--hf-config", "Org/Gated")
        assert code == 2 and said in out and out.count("\n") == 1, out
