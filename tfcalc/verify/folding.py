"""Folding a big reference model's repeated blocks for `tfcalc check`.

A mixture of experts builds one module per expert: DeepSeek-V3's 58 MoE blocks of 256 experts are 44,544 linear
modules, and tracing them (FlopCounterMode, then fvcore's jit trace) takes minutes. Blocks of one kind (the same
`Layer`: MoE or dense, its window, cross-attention) are the same module with the same shapes, so `check` can build
and trace one block of each kind and count it as many times as the stack has blocks of that kind.

What stays independent of the formulas: the kinds and how many blocks each has are enumerated block by block here
(`Stack.layer(i)` for every i), not taken from the inventory's arithmetic over the pattern's period
(`Stack.distinct`); every count of a block (FLOPs per module of both counters, parameters per tensor) is measured on
the block built; the rest of the model (embeddings, final norm, head) is built and traced as it is. Folding is used
only where the model is big (FOLD_EXPERTS); `check(..., fold=True)` forces it, and tests hold a folded check to the
unfolded one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..arch import Layer, Stack, stacks
from ..errors import TfcalcError
from ..spec import ModelSpec

FOLD_EXPERTS = 512  # fold when the model has more expert modules than this (n_experts x MoE blocks)


@dataclass(frozen=True)
class FoldedStack(Stack):
    """A stack of one block per kind: block j is `kinds[j]`."""

    kinds: tuple[Layer, ...] = ()

    def layer(self, i: int) -> Layer:
        return self.kinds[i]


def foldable(spec: ModelSpec) -> bool:
    """Blocks that read nothing from their place in the stack and own their parameters: not with per-layer inputs
    (each block reads its own slice of one table as long as the stack), KV sharing (the sharing blocks read the last
    earlier block of their kind, and come last) or shared blocks (ALBERT: one set of parameters for many blocks)."""
    return not spec.d_per_layer_input and not spec.kv_shared_layers and spec.shared_blocks is None


def should_fold(spec: ModelSpec) -> bool:
    """The model builds more than FOLD_EXPERTS expert modules (and its blocks can be folded)."""
    if not spec.is_moe or not foldable(spec):
        return False
    moe_blocks = sum(stack.layer(i).moe for stack in stacks(spec) for i in range(stack.n_layers))
    return spec.n_experts * moe_blocks > FOLD_EXPERTS


def fold(spec: ModelSpec) -> tuple[list[Stack], dict[str, int]]:
    """(the stacks with one block of each kind, how many blocks each built block stands for, by its module path:
    `blocks.1`, `decoder.blocks.0`)."""
    if not foldable(spec):
        raise TfcalcError("fold=True: a model with per-layer inputs (d_per_layer_input), KV sharing "
                          "(kv_shared_layers) or shared blocks (shared_blocks) is checked block by block, unfolded")
    layout: list[Stack] = []
    repeats: dict[str, int] = {}
    for stack in stacks(spec):
        counts = Counter(stack.layer(i) for i in range(stack.n_layers))  # block by block
        kinds = tuple(counts)
        layout.append(FoldedStack(stack.name, stack.spec, len(kinds), stack.causal, stack.cross, kinds))
        prefix = f"{stack.name}.blocks" if stack.name else "blocks"
        for j, kind in enumerate(kinds):
            repeats[f"{prefix}.{j}"] = counts[kind]
    return layout, repeats


def times(name: str, repeats: dict[str, int] | None) -> int:
    """How many blocks the module or parameter `name` stands for (1 outside the folded blocks)."""
    if repeats:
        parts = name.split(".")
        for end in (2, 3):  # blocks.j..., encoder.blocks.j...
            prefix = ".".join(parts[:end])
            if prefix in repeats:
                return repeats[prefix]
    return 1


def scaled(per_module: dict[str, int], total: int, repeats: dict[str, int] | None) -> tuple[dict[str, int], int]:
    """Per-module counts (inclusive: a module's count holds its submodules') and the total, each folded block
    counted as many times as it stands for."""
    if not repeats:
        return per_module, total
    total += sum((n - 1) * per_module.get(block, 0) for block, n in repeats.items())
    return {name: value * times(name, repeats) for name, value in per_module.items()}, total


def note(spec: ModelSpec, repeats: dict[str, int]) -> str:
    built = ", ".join(f"{block} x {n}" for block, n in repeats.items())
    return (f"folded: {spec.label} builds one block of each kind and counts it once per block of that kind ({built}; "
            f"kinds enumerated block by block); see tfcalc/verify/folding.py")
