"""Map the reference model's module and parameter names onto tfcalc's components. No torch here.

A module path is its component's name with the block index (and an expert's index and matrix) in it:
`blocks.3.attention.qkv` is `attention/qkv`, `decoder.blocks.0.cross_attention.kv` is
`decoder/cross_attention/kv`, `blocks.1.moe.experts.5.up` is `moe/experts`.
"""

from __future__ import annotations

import re

from ..counts.breakdown import Breakdown

_STACK = r"(?:(encoder|decoder)\.)?"
_RULES = [
    (r"embedding\.(token|position|token_type|norm|projection|per_layer|per_layer_projection|per_layer_norm)",
     r"embedding/\1"),
    (r"blocks\.\d+\.per_layer\.(gate|projection|norm)", r"per_layer/\1"),
    (r"relative_bias\.table", "attention/relative_bias"),
    (r"blocks\.\d+\.(attention|cross_attention|mlp)_norm", r"\1/norm"),
    (r"blocks\.\d+\.(attention|cross_attention|mlp)_post_norm", r"\1/post_norm"),
    (r"blocks\.\d+\.mlp_branch_norm", "mlp/branch_norm"),
    (r"blocks\.\d+\.moe\.(norm|post_norm|router_norm|expert_scale)", r"moe/\1"),
    (r"blocks\.\d+\.attention\.(qkv|q_norm|k_norm|core|out|sinks)", r"attention/\1"),
    (r"blocks\.\d+\.attention\.(q_a|q_a_norm|q_b|q|kv_a|kv_a_norm|kv_b)", r"attention/\1"),  # latent attention
    (r"blocks\.\d+\.cross_attention\.(q|kv|core|out)", r"cross_attention/\1"),
    (r"blocks\.\d+\.mlp\.(up|gate|down)", r"mlp/\1"),
    (r"blocks\.\d+\.moe\.router", "moe/router"),
    (r"blocks\.\d+\.moe\.experts\.\d+\.(up|gate|down)", "moe/experts"),
    (r"blocks\.\d+\.moe\.shared\.\d+\.(up|gate|down)", "moe/shared_experts"),
    (r"blocks\.\d+\.moe\.shared_gate", "moe/shared_gate"),
    (r"(final_norm|pooler|head)", r"\1"),
]
_COMPILED = [(re.compile(_STACK + pattern + "$"), replacement) for pattern, replacement in _RULES]


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
