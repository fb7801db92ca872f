"""Map the reference model's module and parameter names onto tfcalc's components. No torch here."""

from __future__ import annotations

import re

from ..counts.breakdown import Breakdown

_RULES = [
    (r"embedding\.(token|position|token_type|norm)", r"embedding/\1"),
    (r"blocks\.\d+\.attention_norm", "attention/norm"),
    (r"blocks\.\d+\.attention\.(qkv|core|out)", r"attention/\1"),
    (r"blocks\.\d+\.mlp_norm", "mlp/norm"),
    (r"blocks\.\d+\.mlp\.(up|gate|down)", r"mlp/\1"),
    (r"blocks\.\d+\.moe\.router", "moe/router"),
    (r"blocks\.\d+\.moe\.experts\.\d+\.(up|gate|down)", "moe/experts"),
    (r"blocks\.\d+\.moe\.shared\.\d+\.(up|gate|down)", "moe/shared_experts"),
    (r"blocks\.\d+\.moe\.shared_gate", "moe/shared_gate"),
    (r"(final_norm|pooler|head)", r"\1"),
]
_COMPILED = [(re.compile(pattern + "$"), replacement) for pattern, replacement in _RULES]


def component_of_module(name: str) -> str | None:
    """'blocks.3.attention.qkv' -> 'attention/qkv'. Only leaf modules map; containers give None."""
    for pattern, replacement in _COMPILED:
        if pattern.match(name):
            return pattern.sub(replacement, name)
    return None


def component_of_parameter(name: str) -> str | None:
    """'blocks.3.attention.qkv.weight' -> 'attention/qkv'."""
    module, _, _ = name.rpartition(".")
    return component_of_module(module)


def comparable(analytic: Breakdown) -> Breakdown:
    """The analytic forward with scores and value mixing merged into `attention/core`: a counter sees one SDPA
    call (or one module) for both."""
    merged: dict[str, int] = {}
    for name, value in analytic.items():
        key = "attention/core" if name in ("attention/scores", "attention/values") else name
        merged[key] = merged.get(key, 0) + value
    return Breakdown(merged)
