"""Map the reference model's module and parameter names onto tfcalc's components. No torch here.

A module path is its component's name with the block index (and an expert's index and matrix) in it, by the rules
each block kind registers with its builder (`tfcalc.arch.builders.BlockKind.components`):
`blocks.3.attention.qkv` is `attention/qkv`, `decoder.blocks.0.cross_attention.kv` is
`decoder/cross_attention/kv`, `blocks.1.moe.experts.5.up` is `moe/experts`.
"""

from __future__ import annotations

import re

from ..arch.builders import KINDS
from ..counts.breakdown import Breakdown

_STACK = r"(?:(encoder|decoder)\.)?"
_BLOCK = r"blocks\.\d+\."


def _rules() -> list[tuple[str, str]]:
    """Every block kind's rules (`BlockKind.components`), inside a block after `blocks.N.`, and the norms a block
    wraps each kind in (`<norm>_norm`, `<norm>_post_norm`)."""
    rules: list[tuple[str, str]] = []
    for prefix in dict.fromkeys(kind.norm for kind in KINDS.values() if kind.norm):
        rules += [(_BLOCK + f"{prefix}_norm", f"{prefix}/norm"), (_BLOCK + f"{prefix}_post_norm", f"{prefix}/post_norm")]
    for kind in KINDS.values():
        rules += [((_BLOCK if kind.in_block else "") + pattern, component) for pattern, component in kind.components]
    return rules


_COMPILED = [(re.compile(_STACK + pattern + "$"), replacement) for pattern, replacement in _rules()]


def component_of_module(name: str) -> str | None:
    """'blocks.3.attention.qkv' -> 'attention/qkv'. Only leaf modules map; containers give None."""
    for pattern, replacement in _COMPILED:
        match = pattern.match(name)
        if match:
            stack = match.group(1)
            component = match.expand(replacement.replace(r"\1", r"\2"))
            return f"{stack}/{component}" if stack else component
    return None


def component_of_parameter(name: str) -> str | None:
    """'blocks.3.attention.qkv.weight' -> 'attention/qkv'."""
    module, _, _ = name.rpartition(".")
    return component_of_module(module)


def comparable(analytic: Breakdown) -> Breakdown:
    """The analytic forward with scores and value mixing merged into `.../core`: a counter sees one SDPA call
    (or one module) for both."""
    merged: dict[str, int] = {}
    for name, value in analytic.items():
        stem, _, last = name.rpartition("/")
        key = f"{stem}/core" if last in ("scores", "values") else name
        merged[key] = merged.get(key, 0) + value
    return Breakdown(merged)
