"""Find, list and load the presets: one TOML file per model, shipped inside the package."""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path

from .errors import TfcalcError
from .loading import SpecFile, read_spec_file, read_text_file
from .spec import ModelSpec


def preset_dir() -> Path:
    """presets/ inside the installed wheel, or at the top of a source checkout (editable install)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "presets", here.parent / "presets"):
        if candidate.is_dir():
            return candidate
    raise TfcalcError(f"no presets folder found beside {here}; the installation is incomplete")


def _files() -> dict[str, Path]:
    return {p.stem: p for p in sorted(preset_dir().glob("*.toml"))}


@cache
def _read(path: Path) -> SpecFile:
    return read_spec_file(path)


def list_presets() -> list[SpecFile]:
    """Every preset, in name order."""
    return [_read(path) for path in _files().values()]


def find_preset(name: str) -> SpecFile:
    """The preset called `name` (or with `name` among its aliases); unknown names suggest the nearest ones."""
    if not isinstance(name, str):
        raise TfcalcError(f"preset name must be a string, got {type(name).__name__}")
    files = _files()
    key = name.lower()
    if key in files:
        return _read(files[key])
    for path in files.values():
        # Only a file that spells the alias as a quoted string can hold it: parse just those (start-up time).
        # tests/test_presets.py holds every alias of every preset to finding it this way.
        if f'"{key}"' in read_text_file(path, "preset file").lower() and key in _read(path).aliases:
            return _read(path)
    names = list(files) + [a for p in list_presets() for a in p.aliases]
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise TfcalcError(f"unknown preset {name!r}{hint} (`tfcalc presets` lists them all)")


def load_preset(name: str) -> ModelSpec:
    """The ModelSpec of a preset, e.g. `load_preset("gpt3")`."""
    return find_preset(name).spec
