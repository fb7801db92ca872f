"""Low-rank adapters (LoRA, DoRA) on a frozen model: which linears they adapt, refused where the model cannot take
them, and the inventory with each adapted Matmul record carrying its adapter (`tfcalc.arch.ops.Lora`). The
records answer the figures themselves (`adapter_params`, `adapter_flops`, `adapter_tensors`, `frozen_backward`);
nothing here tests a component's name. No torch.

    >>> from tfcalc import load_preset
    >>> from tfcalc.arch import build
    >>> inv = adapt(build(load_preset("llama3-8b")), Adapters(rank=16))
    >>> trainable_params(inv)   # 32 * 16 * (q 4096+4096, k 4096+1024, v 4096+1024, o 4096+4096, gate, up, down)
    41943040

Targets follow PEFT's `LoraConfig(target_modules=...)`: "all-linear" (PEFT's shorthand: every linear but the output
layer, a router included), "attention" (q, k, v, o), "mlp" (gate, up, down and routed experts), or a comma list of
q, k, v, o, gate, up, down, experts and the linears of the state-space and linear-attention mixers by transformers'
module names: in_proj, out_proj (LFM2's short convolution, Mamba, Mamba2), x_proj, dt_proj (Mamba), in_proj_qkvz,
in_proj_ba (Qwen3-Next's gated DeltaNet), in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (Qwen3.5's). docs/finetuning.md
has the arithmetic and the conventions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..arch.ops import Lora
from ..errors import TfcalcError

if TYPE_CHECKING:
    from ..arch import Inventory

NAMES = ("q", "k", "v", "o", "gate", "up", "down", "experts",
         # the mixers' linears, by transformers' module names (an attention's out_proj, LFM2's, is `o`)
         "in_proj", "out_proj", "x_proj", "dt_proj", "in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z",
         "in_proj_b", "in_proj_a")
GROUPS: dict[str, frozenset[str] | None] = {
    "all-linear": None,
    "attention": frozenset({"q", "k", "v", "o"}),
    "mlp": frozenset({"gate", "up", "down", "experts"}),
}


@dataclass(frozen=True)
class Adapters:
    """LoRA of `rank` on `targets` ("all-linear", "attention", "mlp" or a comma list of NAMES); `dora`: DoRA (a
    magnitude vector per adapted linear's outputs)."""

    rank: int
    targets: str = "all-linear"
    dora: bool = False

    def __post_init__(self):
        rank = self.rank
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise TfcalcError(f"lora_rank={rank!r}: expected a positive integer")
        if not isinstance(self.dora, bool):
            raise TfcalcError(f"dora={self.dora!r}: expected true or false")
        self.names()  # refuses an unknown target

    def names(self) -> frozenset[str] | None:
        """The target names (None: all-linear)."""
        text = self.targets
        if not isinstance(text, str) or not text.strip():
            raise TfcalcError(f"lora_targets={text!r}: expected all-linear, attention, mlp or a comma list of "
                              f"{', '.join(NAMES)}")
        if text in GROUPS:
            return GROUPS[text]
        names = [name.strip() for name in text.split(",")]
        unknown = [name for name in names if name not in NAMES]
        if unknown or not all(names):
            raise TfcalcError(f"lora_targets={text!r}: {', '.join(map(repr, unknown)) or 'an empty name'} is not a "
                              f"target (all-linear, attention, mlp or a comma list of {', '.join(NAMES)})")
        return frozenset(names)

    def lora(self) -> Lora:
        return Lora(self.rank, self.dora, self.names())

    def describe(self) -> str:
        return f"{'DoRA' if self.dora else 'LoRA'} rank {self.rank} on {self.targets}"

    def to_dict(self) -> dict:
        return {"rank": self.rank, "targets": self.targets, "dora": self.dora}


def adapters(rank: int | None, targets: str | None = None, dora: bool = False) -> Adapters | None:
    """The adapters the flags ask for, or None without a rank; a target list or --dora without a rank is refused
    (never dropped)."""
    if rank is None:
        if dora:
            raise TfcalcError("dora=True: DoRA needs a LoRA rank (--lora-rank R)")
        if targets is not None:
            raise TfcalcError(f"lora_targets={targets!r}: adapter targets need a LoRA rank (--lora-rank R)")
        return None
    return Adapters(rank, "all-linear" if targets is None else targets, dora)


def adapt_groups(groups, adapters: Adapters, label: str = "the model") -> list:
    """The groups with every Matmul record that has a target carrying its adapter; refused when a named target is
    not in the model, when the rank is past a named target's width, or when DoRA meets an update PEFT folds into a
    weight (its ParamWrapper does not take DoRA)."""
    lora = adapters.lora()
    wanted = lora.targets
    out, found, runs = [], set(), False
    for group in groups:
        ops = []
        for op in group.ops:
            adapted = op.adapt(lora)
            runs = runs or (adapted is not op and adapted.adapter_runs())
            for lin in adapted.adapted() if adapted is not op else ():
                found.add(lin.target)
                width = min(adapted.k, lin.out)
                # PEFT builds any rank; a rank past the width of a linear the user named is refused as a mistake
                # ("all-linear" takes Qwen3.5's in_proj_b, 16 outputs, at rank 32)
                if wanted is not None and lin.target in wanted and lin.rank * lora.rank > width:
                    raise TfcalcError(f"lora_rank={adapters.rank}: past the width of {label}'s {lin.target} linear "
                                      f"({adapted.k} -> {lin.out}: a rank-{lin.rank * lora.rank} update, at most "
                                      f"{width})")
                if lora.dora and lin.delta:
                    raise TfcalcError(f"dora=True: PEFT's DoRA does not adapt {label}'s "
                                      f"{lin.target or adapted.role} weights (held as a parameter and adapted by its "
                                      "ParamWrapper, which refuses DoRA); pick targets without them, e.g. "
                                      "lora_targets='attention'")
            ops.append(adapted)
        out.append(replace(group, ops=tuple(ops)))
    if wanted is None:
        if not found:
            raise TfcalcError(f"lora_targets='all-linear': {label} has no linear to adapt")
    else:
        named = [name for name in sorted(wanted, key=NAMES.index) if name not in found]
        if named and (adapters.targets not in GROUPS or not found):
            raise TfcalcError(f"lora_targets={adapters.targets!r}: {label} has no {', '.join(named)} linear"
                              f"{'s' if len(named) > 1 else ''}")
    if found and not runs:
        raise TfcalcError(f"lora_targets={adapters.targets!r}: no adapter of {label} runs (transformers multiplies by "
                          f"{', '.join(sorted(found))}.weight without calling the module, so PEFT's adapter there never "
                          "runs and nothing trains)")
    return out


def adapt(inv: Inventory, adapters: Adapters | None) -> Inventory:
    """The inventory with its adapters on (unchanged without)."""
    if adapters is None:
        return inv
    return replace(inv, groups=tuple(adapt_groups(inv.groups, adapters, inv.spec.label)))


def trainable_params(inv: Inventory) -> int:
    """Parameters the adapters train: every adapted record's, once per set of its weights."""
    return sum(repeat * op.adapter_params() for op, repeat in inv.parameters() if op.lora is not None)


def flow(ops, grad: bool):
    """Each op of one instance of `ops` entered with `grad` (a gradient flows into the block's input), with (`at`)
    whether its input carries a gradient and (`flowing`) whether one flows at it in model order. A gradient starts at
    the first adapter that runs; an op that shares its input with the op before it (a gate beside up, in_proj_ba beside
    in_proj_qkvz) reads that op's; a parallel branch (an op sharing the block's input under another sublayer:
    Falcon-H1's attention beside its Mamba2 mixer, a parallel block's MLP beside attention) starts from the block's
    input and joins the other at the next residual add."""
    start = before = grad
    prev, joined = None, None
    for op in ops:
        if op.shares_input and prev is not None and op.sublayer != prev.sublayer:  # a parallel branch
            joined, grad = grad, start
            at = start
        else:
            at = before if op.shares_input else grad
        if joined is not None and op.role == "residual":  # the branches' sum
            grad, joined = grad or joined, None
        before, prev = at, op
        yield op, at, grad
        if op.lora is not None and op.adapter_runs():
            grad = True


def cold_instances(groups) -> list[int]:
    """Per group, how many of its instances run with no gradient flowing into them: those before the model's first
    adapted block and that block itself (its gradient starts at its first adapter); the others receive one. Blocks
    are placed in model order by their stack (`Group.layer`): in a hybrid (Qwen3.5's three gated DeltaNet blocks, then
    attention) an attention adapter sends gradients into the DeltaNet blocks after it, not into those before. Groups
    that no stack places (embeddings, norms, heads) in the inventory's order. A multimodal model's other towers run
    before its connectors, and those before the language model (the inventory lists the text tower first): with
    adapters in the language model alone no gradient flows into a tower or a connector."""
    groups = list(groups)
    adapted = [any(op.lora is not None and op.adapter_runs() for op in g.ops) for g in groups]
    cold = [0] * len(groups)
    done: set[int] = set()
    grad = False
    rank = {"": 2, "text": 2, "connectors": 1}  # any other tower: 0, first
    order = sorted(range(len(groups)), key=lambda i: rank.get(groups[i].tower, 0))  # stable: each tower's own order
    for i in order:
        group = groups[i]
        if i in done:
            continue
        stack = group.stack
        mates = [j for j, g in enumerate(groups) if g.layer is not None and g.stack is stack and j not in done]
        placed = group.layer is not None and stack is not None and sum(groups[j].repeat for j in mates) \
            == stack.n_layers and all(groups[j].copies is None for j in mates)
        if not placed:
            done.add(i)
            cold[i] = 0 if grad else min(1 if adapted[i] else group.repeat, group.repeat)  # (an idle tower: 0)
            if adapted[i] and not grad:
                grad = True
                _starts_whole(group)
            continue
        # the stack's blocks in model order, up to its first adapted one (the walk stops there: at most n_layers)
        by_layer = {groups[j].layer: j for j in mates}
        done.update(mates)
        if grad:
            continue
        for index in range(stack.n_layers):
            j = by_layer[stack.layer(index)]
            cold[j] += 1
            if adapted[j]:
                grad = True
                _starts_whole(groups[j])
                break
    return cold


def _starts_whole(group) -> None:
    """Refuse a model whose first adapter starts a gradient in part of its block's scan only (`Linear.partial`: the
    gated DeltaNet's z, b and a projections): the scan's backward would then follow that part, which tfcalc does not
    count; one line naming the linear."""
    for op in group.ops:
        if op.lora is None or not op.adapter_runs():
            continue
        adapted = [lin for lin in op.adapted() if not lin.part and not lin.unused]
        if adapted and all(lin.partial for lin in adapted):
            names = ", ".join(lin.target for lin in adapted)
            targets = "all-linear" if op.lora.targets is None else ",".join(
                sorted(op.lora.targets, key=NAMES.index))
            raise TfcalcError(f"lora_targets={targets!r}: the model's first adapted linear is {op.component}'s "
                              f"{names}, which feeds only part of its block's scan (a backward tfcalc does not count);"
                              " add a target before it (in_proj_qkv or in_proj_qkvz) or one in an earlier block")
        return
