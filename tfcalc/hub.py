"""Models by Hugging Face id (`--hf-config Qwen/Qwen3-8B`, `compare meta-llama/Llama-3.1-8B gpt2`): the repository's
config.json through huggingface_hub, from the local cache first. Only config.json is fetched, never weights.

huggingface_hub's own rules hold: the cache is `HF_HUB_CACHE`, else `$HF_HOME/hub` (default ~/.cache/huggingface/
hub), read when a model is asked for; `HF_HUB_OFFLINE=1` never touches the network (a model not in the cache is then
one line); `HF_TOKEN` (or a saved login) opens gated and private repositories. A revision (`--revision`: a branch,
a tag or a commit) picks which config.json. A path that exists is always a path: `Qwen/Qwen3-8B` is an id only
when no such file or folder is there. huggingface_hub is imported only when an id is given.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import TfcalcError

# ORG/NAME, as the hub names repositories (letters, digits, '-', '_', '.'; no '--' or '..' at the ends)
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_SNAPSHOT = re.compile(r"models--(?P<org>[^/\\]+?)--(?P<name>[^/\\]+)[/\\]snapshots[/\\][^/\\]+[/\\]config\.json$")


def is_id(text: str | Path) -> bool:
    """`text` names a hub repository (ORG/NAME) and no file or folder of that name exists here."""
    text = str(text)
    return bool(_ID.fullmatch(text)) and ".." not in text and not Path(text).exists()


def cache_dir() -> Path:
    """The hub cache huggingface_hub uses, from the environment as it is now."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "yes", "true")


def repo_of(path: str | Path) -> str | None:
    """'ORG/NAME' when `path` is a config.json in a hub cache snapshot (models--ORG--NAME/snapshots/REV/), else None:
    the model's name, where the folder is only a commit hash."""
    m = _SNAPSHOT.search(str(path))
    return f"{m['org']}/{m['name']}" if m else None


def config_path(repo_id: str, revision: str | None = None) -> Path:
    """The local path of `repo_id`'s config.json: the cached one, else downloaded into the cache (not offline)."""
    where = repo_id + (f" (revision {revision!r})" if revision is not None else "")
    try:
        from huggingface_hub import errors, hf_hub_download, try_to_load_from_cache
    except ImportError:
        raise TfcalcError(f"{where}: reading a model by Hugging Face id needs huggingface_hub "
                          "(pip install huggingface_hub); or give the path of its config.json") from None
    cache = cache_dir()
    try:
        cached = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache, revision=revision)
    except errors.HFValidationError as e:
        raise TfcalcError(f"{where}: not a Hugging Face id ({str(e).splitlines()[0]})") from None
    if isinstance(cached, str):
        return Path(cached)
    if offline():
        raise TfcalcError(f"{where}: its config.json is not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE "
                          "is set: run once online, or give the path of a config.json")
    try:
        return Path(hf_hub_download(repo_id, "config.json", revision=revision, cache_dir=cache, library_name="tfcalc"))
    except errors.GatedRepoError:
        raise TfcalcError(f"{where}: a gated repository: accept its terms on huggingface.co and set HF_TOKEN (or "
                          "`hf auth login`)") from None
    except errors.RepositoryNotFoundError:
        raise TfcalcError(f"{where}: no such repository on the Hugging Face hub (a private one needs HF_TOKEN)") \
            from None
    except errors.RevisionNotFoundError:
        raise TfcalcError(f"{where}: the repository has no such revision") from None
    except errors.LocalEntryNotFoundError:
        raise TfcalcError(f"{where}: its config.json is not in the Hugging Face cache ({cache}) and the hub cannot "
                          "be reached (no network?)") from None
    except errors.EntryNotFoundError:  # (after the local one, a subclass of it)
        raise TfcalcError(f"{where}: the repository has no config.json") from None
    except (errors.HfHubHTTPError, OSError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise TfcalcError(f"{where}: could not fetch its config.json: {type(e).__name__}: {first}") from None


def resolve(value: str | Path | None, revision: str | None = None) -> Path | None:
    """A command's --hf-config value: a hub id becomes its cached config.json; a path stays. `revision` is refused
    unless the value is an id (a flag typed is used or refused, never dropped)."""
    if value is not None and is_id(value):
        return config_path(str(value), revision)
    if revision is not None:
        given = f"--hf-config {value}" if value is not None else "no --hf-config"
        raise TfcalcError(f"--revision {revision}: a revision picks the config.json of a Hugging Face id "
                          f"(--hf-config ORG/NAME); got {given}")
    return None if value is None else Path(value)
