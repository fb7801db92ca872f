"""Sweeps: models over lists of sizes and workloads, counted at every point, as tidy rows (one row per point,
every exact integer a column) that pandas or a spreadsheet reads as is.

    >>> from tfcalc import count, load_preset
    >>> llama = load_preset("llama2-7b")
    >>> rows = sweep(llama, seq_len=[1024, 4096])
    >>> [r["seq_len"] for r in rows], rows[0]["flops.forward"] == count(llama.replace(seq_len=1024)).flops.forward
    ([1024, 4096], True)
    >>> parse_values("1k..8kx2"), parse_values("512,2048"), parse_values("0..6+3")
    ([1024, 2048, 4096, 8192], [512, 2048], [0, 3, 6])

Conventions, stated once:
- A value is a whole number, `1_000` or with a binary suffix: `k` = 1,024 and `m` = 1,048,576, as context lengths
  are quoted (`128k` is 131,072). A list is comma-separated; a range `a..b` runs from a up to b, by 1, by a
  factor (`a..bx2`) or by a step (`a..b+512`); b is included when the steps reach it. A list may mix values and
  ranges (`512,1k..8kx2`) and keeps them as given, in order, repeats included.
- Several lists make a grid: every combination, models first, then the spec's sizes, then the batch, the
  length, the context and the encoder's length, the last one varying fastest. At most MAX_POINTS points.
- Each point is the spec with that point's values applied as flags (`apply_overrides`: every value kept as
  given, a value the model cannot take refused by name), counted on its workload (`workload_for`).
"""

from __future__ import annotations

import itertools
import marshal
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

from .counts import CountResult, count
from .errors import TfcalcError
from .sizes import MAX_DIGITS
from .sources import apply_overrides, resolve, workload_for
from .spec import ModelSpec

MAX_POINTS = 100_000
SUFFIXES = {"": 1, "k": 2**10, "m": 2**20}
WORKLOAD_AXES = ("context", "src_len", "tgt_len", "tp")  # flags that are no spec field (tp: infer's GPUs)
# a grid's order: the spec's sizes first, then the workload, the last varying fastest
_LAST = ("tp", "batch_size", "seq_len", "tgt_len", "context", "src_len")
_VALUE = re.compile(r"(\d[\d_]*)([kKmM]?)", re.ASCII)  # ASCII digits: int() would read "१२" as 12


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


# ---- values ---------------------------------------------------------------------------------------

def is_list(text: str) -> bool:
    """A list or a range (even of one value) makes a sweep; a single value does not."""
    return "," in text or ".." in text


def _value(text: str, whole: str) -> int:
    item = text.strip()
    if len(item) > MAX_DIGITS + 10:
        raise TfcalcError(f"{item[:12]}... ({len(item)} characters): sizes have at most {MAX_DIGITS} digits")
    match = _VALUE.fullmatch(item)
    if not match:
        raise TfcalcError(f"{whole!r}: {item!r} is not a whole number (1024, 4k, 1_000; ranges 1k..32kx2)")
    digits, suffix = match.groups()
    if len(digits) > 1 and digits[0] == "0":
        raise TfcalcError(f"{whole!r}: {item!r} has a leading zero; a comma separates values (write 1000 or "
                          "1_000 for one thousand)")
    return int(digits) * SUFFIXES[suffix.lower()]


def _range(item: str, whole: str) -> list[int]:
    low, rest = item.split("..", 1)
    by, step_text = "+", "1"
    for sign in ("x", "X", "+"):
        if sign in rest:
            rest, step_text = rest.split(sign, 1)
            by = "x" if sign in "xX" else "+"
            break
    lo, hi, step = _value(low, whole), _value(rest, whole), _value(step_text, whole)
    if lo > hi:
        raise TfcalcError(f"{whole!r}: the range {item.strip()!r} runs downwards (write it from the smaller end)")
    if by == "+":
        if step < 1:
            raise TfcalcError(f"{whole!r}: the step of {item.strip()!r} must be at least 1")
        n = (hi - lo) // step + 1
        _check_count(n, whole)
        return list(range(lo, hi + 1, step))
    if step < 2 or lo < 1:
        raise TfcalcError(f"{whole!r}: a range by a factor ({item.strip()!r}) starts above 0 and grows by a whole "
                          "factor of at least 2")
    values, v = [], lo
    while v <= hi:
        values.append(v)
        v *= step
    return values


def _check_count(n: int, whole: str) -> None:
    if n > MAX_POINTS:
        shown = whole if len(whole) <= 40 else whole[:37] + "..."
        raise TfcalcError(f"{shown!r}: {n:,} values; a sweep takes at most {MAX_POINTS:,} points (a larger "
                          "step, or a range by a factor: 1k..128kx2)")


def parse_values(text: str) -> list[int]:
    """'1024,4096,16384' / '1k..128kx2' / '1024..8192+1024' / '512,1k..4kx2' / '4k' -> the values, in order."""
    if not isinstance(text, str) or not text.strip():
        raise TfcalcError(f"{text!r}: expected a whole number, a comma-separated list or a range (1k..32kx2)")
    values: list[int] = []
    for item in text.split(","):
        values += _range(item, text) if ".." in item else [_value(item, text)]
        _check_count(len(values), text)
    return values


# ---- points ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Model:
    """A model a sweep runs: a resolved spec (a preset, a file, a config), or None: flags alone, resolved at each
    point (the sizes may be the swept ones)."""

    base: ModelSpec | None
    source: str = "flags"

    @classmethod
    def resolve(cls, preset: str | None, spec_file: Path | None = None, hf_config: Path | None = None,
                tower: str | None = None) -> Model:
        if preset is None and spec_file is None and hf_config is None:
            return cls(None, "flags")
        spec, source = resolve(preset, spec_file, {} if tower is None else {"tower": tower}, hf_config)
        return cls(spec, source)

    def at(self, overrides: dict[str, Any]) -> ModelSpec:
        """The spec with these flags, as `tfcalc.sources.resolve` makes it."""
        return resolve(None, None, overrides)[0] if self.base is None else apply_overrides(self.base, overrides)

    def label(self, fixed: dict[str, Any]) -> str:
        """The model's name with the fixed flags (not the swept ones), without validating them alone."""
        if "name" in fixed:
            return fixed["name"]
        if self.base is None:
            return "spec from flags"
        changed = {k: v for k, v in fixed.items() if getattr(self.base, k) != v}
        if self.base.name and changed:
            return f"{self.base.name} ({', '.join(f'{k}={v}' for k, v in changed.items())})"
        return self.base.label


@dataclass(frozen=True)
class Point:
    index: int  # the model's place in the sweep's list of models
    model: str  # its label with the fixed flags (the swept values apart)
    source: str
    spec: ModelSpec  # with this point's values
    overrides: dict[str, Any]  # every spec flag at this point, fixed and swept
    values: dict[str, int]  # the swept values at this point, by field
    name: str = ""  # the model's own name, without the flags (a short label for a figure)

    def describe(self) -> str:
        """'seq_len=1,024 batch_size=8': the swept values."""
        return " ".join(f"{k}={v:,}" for k, v in self.values.items())


def order(axes: dict[str, list[int]]) -> dict[str, list[int]]:
    """The axes in grid order: the spec's sizes in ModelSpec's order, then batch, length, context, encoder."""
    fields = [f for f in ModelSpec.model_fields if f not in _LAST]
    rank = {name: i for i, name in enumerate([*fields, *_LAST])}
    unknown = [name for name in axes if name not in rank]
    if unknown:
        raise TfcalcError(f"{unknown[0]}: not a size or workload field one can sweep")
    return dict(sorted(axes.items(), key=lambda kv: rank[kv[0]]))


def check_size(n_models: int, axes: dict[str, list[int]]) -> int:
    n = n_models * prod(len(v) for v in axes.values())
    if n > MAX_POINTS:
        parts = ([f"{n_models:,} models"] if n_models > 1 else []) + [
            f"{flag(k)} {len(v):,} values" for k, v in axes.items()]
        raise TfcalcError(f"a sweep of {n:,} points ({' x '.join(parts)}); at most {MAX_POINTS:,}")
    return n


def expand(models: Sequence[Model], fixed: dict[str, Any], axes: dict[str, list[int]]) -> Iterator[Point]:
    """Every point of the grid, one at a time: each model at each combination of the axes' values (last axis
    fastest). The grid's size is checked at once."""
    axes = order(axes)
    check_size(len(models), axes)
    names = list(axes)

    def points() -> Iterator[Point]:
        for i, model in enumerate(models):
            label = model.label(fixed)
            name = fixed.get("name") or (model.base.label if model.base is not None else label)
            for combo in itertools.product(*axes.values()):
                values = dict(zip(names, combo))
                overrides = {**fixed, **{k: v for k, v in values.items() if k not in WORKLOAD_AXES}}
                yield Point(i, label, model.source, model.at(overrides), overrides, values, name)
    return points()


def count_points(points: Iterable[Point], phase: str | None = None, context: int | None = None,
                 src_len: int | None = None, tgt_len: int | None = None) -> Iterator[tuple[Point, CountResult]]:
    """count() at every point, on the workload the flags ask for (the point's own values first), one at a time."""
    for p in points:
        v = p.values
        workload = workload_for(p.spec, phase, v.get("context", context), v.get("src_len", src_len),
                                v.get("tgt_len", tgt_len), p.overrides.get("seq_len"))
        yield p, count(p.spec, workload)


# ---- tidy rows ------------------------------------------------------------------------------------

_ESTIMATE_TEXT = ("formula", "source", "compared_with", "exact")  # constant text, or a figure already a column


def _flat(data: dict, prefix: str, out: dict) -> dict:
    for key, value in data.items():
        if isinstance(value, dict):
            _flat(value, f"{prefix}{key}.", out)
        else:
            out[f"{prefix}{key}"] = value
    return out


def spec_columns(spec: ModelSpec) -> dict[str, Any]:
    """Every spec field as a `spec.` column (derived defaults filled in; a list joined by commas)."""
    return _spec_columns(spec.model_dump())


def _spec_columns(spec: dict[str, Any], prefix: str = "spec.") -> dict[str, Any]:
    """A dumped spec's fields as columns: a list of words joined by commas; a multimodal model's towers each as
    columns of its own (`spec.towers.vision.n_layers`), its connectors as one JSON column."""
    import json

    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "towers":
            for name, tower in value.items():
                out.update(_spec_columns(tower, f"{prefix}towers.{name}."))
        elif key == "connectors":
            out[f"{prefix}connectors"] = json.dumps(value) if value else ""
        else:
            out[f"{prefix}{key}"] = ",".join(value) if isinstance(value, list) else value
    return out


def head(point: Point) -> dict[str, Any]:
    """A row's first columns: the model, and the point's swept values as given."""
    return {"model": point.model, **point.values}


def count_row(point: Point, result: CountResult) -> dict[str, Any]:
    """One tidy row: the model, the swept values, then every figure of `tfcalc count --json` flattened
    (workload.*, params.*, flops.*, macs.*, estimates.*.value and .ratio, non_matmul_flops_estimate.*,
    attention_vs_mlp.*) and the spec's fields (spec.*)."""
    data = result.to_dict()
    spec = data.pop("spec")
    estimates = data.pop("estimates")
    row = head(point)
    _flat(data, "", row)
    for name, e in estimates.items():
        row.update({f"estimates.{name}.{k}": v for k, v in e.items() if k not in _ESTIMATE_TEXT})
    row.update(_spec_columns(spec))
    return row


def plan_row(point: Point, data: dict) -> dict[str, Any]:
    """A planning command's figures (its to_dict) as one tidy row, with the point and the spec."""
    row = head(point)
    _flat(data, "", row)
    row.update(spec_columns(point.spec))
    return row


class Spool:
    """Tidy rows kept on disk as they come, so that a sweep of 100,000 points holds one row in memory at a time;
    iterated (as often as wanted), every row with every column, None where a row lacks a figure. Values are what
    JSON carries (exact integers of any size, floats, text, None), written with `marshal`, which keeps each as it
    is."""

    def __init__(self, rows: Iterable[dict[str, Any]]):
        self._file = tempfile.TemporaryFile()
        self._layouts: dict[tuple[str, ...], int] = {}
        self.n = 0
        for row in rows:
            keys = tuple(row)
            marshal.dump((self._layouts.setdefault(keys, len(self._layouts)), list(row.values())), self._file)
            self.n += 1
        self.columns = list(dict.fromkeys(k for keys in self._layouts for k in keys))

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[list[Any]]:
        index = {c: j for j, c in enumerate(self.columns)}
        places = [[index[k] for k in keys] for keys in self._layouts]  # a layout's id is its place in the dict
        self._file.seek(0)
        for _ in range(self.n):
            layout, values = marshal.load(self._file)
            if len(places) == 1:
                yield values
                continue
            full: list[Any] = [None] * len(self.columns)
            for j, v in zip(places[layout], values):
                full[j] = v
            yield full


def tidy(rows: Iterable[dict[str, Any]]) -> tuple[list[str], Spool]:
    """(columns, rows): the union of the rows' keys in first-seen order, and the rows (a Spool: on disk, read back
    one at a time) with a value per column, None where a row lacks it."""
    spool = Spool(rows)
    return spool.columns, spool


def fill(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with every column (None where a row lacks it): a JSON list of records with one set of keys."""
    columns, values = tidy(rows)
    return [dict(zip(columns, v)) for v in values]


# ---- the API --------------------------------------------------------------------------------------

def _models(spec: ModelSpec | str | Sequence[ModelSpec | str]) -> list[Model]:
    from .presets import find_preset

    items = [spec] if isinstance(spec, (ModelSpec, str)) else list(spec)
    models = []
    for item in items:
        if isinstance(item, str):
            found = find_preset(item)
            models.append(Model(found.spec, found.source))
        elif isinstance(item, ModelSpec):
            models.append(Model(item, item.label))
        else:
            raise TfcalcError(f"spec: expected a tfcalc.ModelSpec or a preset name, got {type(item).__name__}")
    return models


def split(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """(fixed, axes): a list, tuple or range is an axis; anything else a single value."""
    fixed, axes = {}, {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple, range)):
            axes[name] = list(value)
            if not axes[name]:
                raise TfcalcError(f"{name}=[]: an empty list; give at least one value")
        else:
            fixed[name] = value
    return fixed, axes


def sweep(spec: ModelSpec | str | Sequence[ModelSpec | str], *, phase: str | None = None,
          **values: Any) -> list[dict[str, Any]]:
    """Tidy rows of `count` over every combination of the values given: `spec` is a ModelSpec, a preset name or
    a list of them (a family); each keyword is a ModelSpec field (seq_len, batch_size, n_layers, ...) or a
    workload field (context, src_len, tgt_len), one value or a list (or range) of them.

    >>> rows = sweep(["gpt2", "gpt2-medium"], seq_len=[256, 1024], batch_size=8)
    >>> [(r["model"], r["seq_len"], r["workload.batch_size"]) for r in rows]  # doctest: +NORMALIZE_WHITESPACE
    [('gpt2 (batch_size=8)', 256, 8), ('gpt2 (batch_size=8)', 1024, 8),
     ('gpt2-medium (batch_size=8)', 256, 8), ('gpt2-medium (batch_size=8)', 1024, 8)]
    """
    fixed, axes = split(values)
    workload = {k: fixed.pop(k) for k in WORKLOAD_AXES if k in fixed}
    points = expand(_models(spec), fixed, axes)
    return fill([count_row(p, r) for p, r in count_points(points, phase, **workload)])
