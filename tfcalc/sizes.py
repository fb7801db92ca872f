"""The integer types of specs and workloads: exact, positive (or non-negative), and bounded.

Counts are exact Python integers of any size, but a size with more than MAX_DIGITS digits is refused: every
count multiplies at most seven sizes, so the bound keeps each count under Python's 4,300-digit limit on
converting integers to text (beyond it json, tables and CSV would fail) and keeps the arithmetic instant.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

MAX_DIGITS = 500


def _bounded(value: int) -> int:
    if value >= 10**MAX_DIGITS:
        raise ValueError(f"has {len(str(value))} digits; sizes have at most {MAX_DIGITS}")
    return value


Size = Annotated[int, Field(gt=0), AfterValidator(_bounded)]
Count = Annotated[int, Field(ge=0), AfterValidator(_bounded)]
