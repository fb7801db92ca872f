"""Read a spec from a TOML or JSON file: a flat table of ModelSpec fields, or a preset-style file with
metadata (name, description, source, aliases) and the spec under [model].

`read_text_file` and `parse_json` are the one way tfcalc reads an input file (spec files, presets, Hugging Face
config.json): a regular file of at most MAX_FILE_BYTES of UTF-8, every failure a TfcalcError naming the file.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .errors import TfcalcError, validation_lines
from .spec import ModelSpec

METADATA = {"name", "description", "source", "aliases"}
MAX_FILE_BYTES = 16 * 1024 * 1024  # a spec file or a config.json is a few KB

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)


@dataclass(frozen=True)
class SpecFile:
    spec: ModelSpec
    name: str
    description: str = ""
    source: str = ""
    aliases: tuple[str, ...] = field(default=())
    quant_config: Any = None  # a Hugging Face config's quantization_config, as given (tfcalc.plan.quant reads it)
    text_only: str = ""  # a multimodal config of which only the language model is read: what is not (its towers)


def as_path(path: Any, what: str) -> Path:
    """`path` as a Path, or a TfcalcError saying what was given instead."""
    if not isinstance(path, (str, os.PathLike)):
        raise TfcalcError(f"the path of a {what} must be a string or a path, got {type(path).__name__}")
    try:
        path = Path(path)
    except TypeError:  # an os.PathLike of bytes
        raise TfcalcError(f"the path of a {what} must be text, got {path!r}") from None
    if "\0" in str(path):
        raise TfcalcError(f"{str(path)!r}: not a file name (it holds a NUL character)")
    return path


def read_text_file(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """The text of a regular UTF-8 file of at most `limit` bytes (newlines read as '\\n', as open() does).

    Anything else is a TfcalcError naming the file and `what` it should be: a missing file, a directory, a FIFO or a
    device (refused from its status, before it is opened: a FIFO never blocks and /dev/zero is never read), a file
    over the limit (at most limit + 1 bytes are read, so a file that grows meanwhile cannot make it unbounded),
    bytes that are not UTF-8.
    """
    path = as_path(path, what)
    try:
        kind = _kind(os.stat(path).st_mode)
        if kind:
            raise TfcalcError(f"{_shown(path)}: is {kind}, not a {what} (a regular file)")
        # O_NONBLOCK: should the path become a FIFO after the check above, opening it does not wait for a writer
        fd = os.open(path, _OPEN_FLAGS)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            kind = _kind(info.st_mode)
            if kind:
                raise TfcalcError(f"{_shown(path)}: is {kind}, not a {what} (a regular file)")
            if info.st_size > limit:
                raise TfcalcError(_too_big(path, what, info.st_size, limit))
            data = f.read(limit + 1)
    except (FileNotFoundError, NotADirectoryError):
        raise TfcalcError(f"{path}: no such file") from None
    except PermissionError:
        raise TfcalcError(f"{path}: cannot read: permission denied") from None
    except OSError as e:
        raise TfcalcError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(data) > limit:
        raise TfcalcError(_too_big(path, what, len(data), limit, grew=True))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TfcalcError(f"{path}: line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start:,}); "
                          f"a {what} must be UTF-8") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _kind(mode: int) -> str | None:
    """What a file that is not a regular file is ('a directory', 'a named pipe (FIFO)', ...), else None."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _shown(path: Path) -> str:
    """The path, and where it leads when that is somewhere else (a symlink)."""
    try:
        target = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return str(path)
    return f"{path} (-> {target})" if target != Path(os.path.abspath(path)) else str(path)


def _too_big(path: Path, what: str, size: int, limit: int, grew: bool = False) -> str:
    size_text = f"more than {limit:,} bytes" if grew else f"{size:,} bytes"
    return f"{path}: {size_text}, over the {limit:,}-byte limit for a {what} (a real one is a few KB)"


def parse_json(path: Path, text: str) -> Any:
    """json.loads, with every failure (syntax, Python's integer-digit limit, nesting too deep) a TfcalcError naming
    the file and, where it can be found, the line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TfcalcError(f"{path}: line {e.lineno}, column {e.colno}: invalid JSON: {e.msg}") from None
    except ValueError as e:  # Python's limit on the digits of an integer
        raise TfcalcError(_parse_limit(path, text, "JSON", e)) from None
    except RecursionError:
        raise TfcalcError(_too_deep(path, text, "JSON")) from None


def parse_toml(path: Path, text: str) -> dict[str, Any]:
    """tomllib.loads, with every failure a TfcalcError naming the file (and the line, where it can be found)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TfcalcError(f"{path}: invalid TOML: {e}") from None
    except ValueError as e:  # Python's limit on the digits of an integer
        raise TfcalcError(_parse_limit(path, text, "TOML", e)) from None
    except RecursionError:
        raise TfcalcError(_too_deep(path, text, "TOML")) from None


_LONG_INTEGER = re.compile(r"(?<![\w.])[+-]?(\d[\d_]*)")


def _parse_limit(path: Path, text: str, language: str, err: ValueError) -> str:
    limit = sys.get_int_max_str_digits()
    if limit:
        for match in _LONG_INTEGER.finditer(text):
            digits = len(match.group(1).replace("_", ""))
            if digits > limit:
                line = text.count("\n", 0, match.start()) + 1
                return (f"{path}: line {line}: an integer of {digits:,} digits, more than Python reads "
                        f"({limit:,}); no size in a {language} spec is that long")
    return f"{path}: invalid {language}: {err}"


def _too_deep(path: Path, text: str, language: str) -> str:
    depth, line = _deepest(text)
    where = f"line {line}: " if depth else ""
    return (f"{path}: {where}invalid {language}: lists or tables nested {depth:,} deep, more than Python's parser "
            f"can follow (about {sys.getrecursionlimit():,})")


def _deepest(text: str) -> tuple[int, int]:
    """(the deepest nesting of brackets and braces outside strings and comments, the line first reaching it)."""
    depth = deepest = 0
    line = deepest_line = 1
    quote, escaped, comment = "", False, False
    for ch in text:
        if ch == "\n":
            line += 1
            comment = False
        elif comment:
            continue
        elif quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            comment = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest, deepest_line = depth, line
        elif ch in "]}":
            depth -= 1
    return deepest, deepest_line


def read_spec_file(path: str | Path) -> SpecFile:
    """Parse and validate a spec file; every problem becomes a TfcalcError naming the file and line."""
    path = as_path(path, "spec file")
    text = read_text_file(path, "spec file")
    doc = _parse(path, text)
    try:
        return _spec_file(path, text, doc)
    except RecursionError:  # a value nested within Python's parser's reach, but too deep to show in a message
        raise TfcalcError(_too_deep(path, text, "spec file")) from None


def _parse(path: Path, text: str) -> dict[str, Any]:
    if path.suffix.lower() == ".json":
        doc = parse_json(path, text)
        if not isinstance(doc, dict):
            raise TfcalcError(f"{path}: expected a JSON object of spec fields, got {type(doc).__name__}")
        return doc
    if path.suffix.lower() != ".toml":
        raise TfcalcError(f"{path}: unknown spec file type {path.suffix!r}; use .toml or .json")
    return parse_toml(path, text)


def _spec_file(path: Path, text: str, doc: dict[str, Any]) -> SpecFile:
    where = _Where(path, text)
    if "model" in doc:
        unknown = sorted(set(doc) - METADATA - {"model"})
        if unknown:
            lines = [f"{where(k)}{k}: unknown top-level field (beside [model], only "
                     f"{', '.join(sorted(METADATA))})" for k in unknown]
            raise TfcalcError("\n".join(lines))
        meta, fields = {k: doc[k] for k in METADATA & set(doc)}, doc["model"]
        if not isinstance(fields, dict):
            raise TfcalcError(f"{where('model')}model: expected a table of spec fields")
        problems = [f"{where(k)}{k}={_short(meta[k])}: expected a string" for k in ("name", "description", "source")
                    if k in meta and not isinstance(meta[k], str)]
        aliases = meta.get("aliases", [])
        if not (isinstance(aliases, list) and all(isinstance(a, str) for a in aliases)):
            problems.append(f"{where('aliases')}aliases={_short(aliases)}: expected a list of names")
        if problems:
            raise TfcalcError("\n".join(problems))
        fields = {"name": meta["name"], **fields} if meta.get("name") else fields
    else:
        meta, fields = {}, doc
    try:
        spec = ModelSpec.model_validate(fields)
    except ValidationError as e:
        raise TfcalcError("\n".join(validation_lines(e, where))) from None
    return SpecFile(spec, spec.name or path.stem, meta.get("description", ""), meta.get("source", ""),
                    tuple(meta.get("aliases", [])))


def _short(value: Any, width: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


# A key that opens a line (TOML `key =`, JSON `"key":`) or follows `{` or `,` on its line (JSON `"key":`)
_KEY = re.compile(r'^[ \t]*(?:([A-Za-z0-9_-]+)[ \t]*=|"([^"\\\n]*)"[ \t]*:)|[{,][ \t]*"([^"\\\n]*)"[ \t]*:',
                  re.MULTILINE)


class _Where:
    """'file: line N: ' for the first line that sets a field (TOML `field =` or JSON `"field":`), else 'file: '.

    The lines of all keys are found in one pass, so that a file with many bad fields takes linear time."""

    def __init__(self, path: Path, text: str):
        self.path, self.text, self._lines = path, text, None

    def __call__(self, field: str) -> str:
        if self._lines is None:
            self._lines, line, seen = {}, 1, 0
            for match in _KEY.finditer(self.text):
                group = next(i for i in (1, 2, 3) if match.group(i) is not None)
                line += self.text.count("\n", seen, match.start(group))
                seen = match.start(group)
                self._lines.setdefault(match.group(group), line)
        line = self._lines.get(field.split(".")[-1])
        return f"{self.path}: line {line}: " if line else f"{self.path}: "
