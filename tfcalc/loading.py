"""Read a spec from a TOML or JSON file: a flat table of ModelSpec fields, or a preset-style file with
metadata (name, description, source, aliases) and the spec under [model]."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .errors import TfcalcError, validation_lines
from .spec import ModelSpec

METADATA = {"name", "description", "source", "aliases"}


@dataclass(frozen=True)
class SpecFile:
    spec: ModelSpec
    name: str
    description: str = ""
    source: str = ""
    aliases: tuple[str, ...] = field(default=())


def read_spec_file(path: str | Path) -> SpecFile:
    """Parse and validate a spec file; every problem becomes a TfcalcError naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TfcalcError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TfcalcError(f"{path}: is a directory, not a spec file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TfcalcError(f"{path}: cannot read: {e}") from None
    doc = _parse(path, text)
    return _spec_file(path, text, doc)


def _parse(path: Path, text: str) -> dict[str, Any]:
    if path.suffix.lower() == ".json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise TfcalcError(f"{path}: line {e.lineno}, column {e.colno}: invalid JSON: {e.msg}") from None
        if not isinstance(doc, dict):
            raise TfcalcError(f"{path}: expected a JSON object of spec fields, got {type(doc).__name__}")
        return doc
    if path.suffix.lower() != ".toml":
        raise TfcalcError(f"{path}: unknown spec file type {path.suffix!r}; use .toml or .json")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TfcalcError(f"{path}: invalid TOML: {e}") from None


def _spec_file(path: Path, text: str, doc: dict[str, Any]) -> SpecFile:
    if "model" in doc:
        unknown = sorted(set(doc) - METADATA - {"model"})
        if unknown:
            lines = [f"{_where(path, text, k)}{k}: unknown top-level field (beside [model], only "
                     f"{', '.join(sorted(METADATA))})" for k in unknown]
            raise TfcalcError("\n".join(lines))
        meta, fields = {k: doc[k] for k in METADATA & set(doc)}, doc["model"]
        if not isinstance(fields, dict):
            raise TfcalcError(f"{_where(path, text, 'model')}model: expected a table of spec fields")
        fields = {"name": meta.get("name"), **fields} if meta.get("name") else fields
    else:
        meta, fields = {}, doc
    try:
        spec = ModelSpec.model_validate(fields)
    except ValidationError as e:
        raise TfcalcError("\n".join(validation_lines(e, lambda f: _where(path, text, f)))) from None
    aliases = meta.get("aliases", [])
    if not (isinstance(aliases, list) and all(isinstance(a, str) for a in aliases)):
        raise TfcalcError(f"{_where(path, text, 'aliases')}aliases={aliases!r}: expected a list of names")
    return SpecFile(spec, str(spec.name or path.stem), str(meta.get("description", "")),
                    str(meta.get("source", "")), tuple(aliases))


def _where(path: Path, text: str, field: str) -> str:
    """'file: line N: ' for the line that sets `field` (TOML `field =` or JSON `"field":`), else 'file: '."""
    key = re.escape(field.split(".")[-1])
    pattern = re.compile(rf'^\s*(?:{key}\s*=|"{key}"\s*:)|[{{,]\s*"{key}"\s*:')
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.search(line):
            return f"{path}: line {number}: "
    return f"{path}: "
