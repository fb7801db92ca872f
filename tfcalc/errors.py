"""The one family of exceptions the library raises for bad input; the CLI turns them into exit code 2."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class TfcalcError(Exception):
    """Bad input: an unknown preset, an unreadable or invalid spec file, an option out of range.

    The message may hold several lines, one per problem.
    """


class OutputError(TfcalcError):
    """An output tfcalc cannot write (a figure's file: a FIFO, a folder, not writable, a failed write): exit 1, as a
    failed write of the tables is, not 2 (bad input)."""

    exit_code = 1


SHOWN = 200  # characters of a value that is not a number, in a message


def _shown(value) -> str:
    """repr(value), a long text or list cut to its first SHOWN characters and its length; a number whole."""
    text = repr(value)
    if isinstance(value, int) or len(text) <= SHOWN:
        return text
    return f"{text[:SHOWN]}... ({len(text):,} characters)"


def validation_lines(err: ValidationError, where: Callable[[str], str] = lambda field: "") -> list[str]:
    """One line per problem in a pydantic ValidationError, each naming the field and the value given.

    `where(field)` may return a prefix that locates the field (a file name and line).
    """
    lines = []
    for e in err.errors(include_url=False):
        msg = e["msg"].removeprefix("Value error, ")
        if not e["loc"]:  # a check across fields: its message names the fields and values itself
            lines.extend(f"{where('')}{line}" for line in msg.splitlines())
            continue
        field = ".".join(str(part) for part in e["loc"])
        value = "(missing)" if e["type"] == "missing" else _shown(e["input"])
        if e["type"] == "missing":
            lines.append(f"{where(field)}{field} is required")
        elif e["type"] == "extra_forbidden":
            lines.append(f"{where(field)}{field}={value}: unknown field")
        else:
            lines.append(f"{where(field)}{field}={value}: {msg}")
    return lines


def check_capacity(capacity_bytes, gpu_name=None) -> None:
    """A GPU's memory as the planning functions take it: None, or a positive integer of bytes; its name a string."""
    if capacity_bytes is not None and (isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int)
                                       or capacity_bytes < 1):
        raise TfcalcError(f"capacity_bytes={capacity_bytes!r}: expected a positive integer of bytes (or None)")
    if gpu_name is not None and not isinstance(gpu_name, str):
        raise TfcalcError(f"gpu_name={gpu_name!r}: expected a string (or None)")


def check_positive_int(name: str, value, optional: bool = False) -> None:
    """A count the planning functions take (GPUs, a batch, a peak in FLOP/s): a positive integer, not a bool."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TfcalcError(f"{name}={value!r}: expected a positive integer")
