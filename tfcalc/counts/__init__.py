"""Exact parameter and FLOP counts of a model on a workload: folds over the op inventory, no torch.

>>> from tfcalc import load_preset, count, Workload
>>> result = count(load_preset("gpt2"))
>>> result.params.total, result.flops.forward
(124439808, 291648307200)
>>> result.macs.forward * 2 == result.flops.forward
True
>>> count(load_preset("gpt2"), Workload(phase="decode", seq_len=1, context=1023)).params.total
124439808
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..arch import Inventory, Workload, build, validate
from ..errors import TfcalcError
from ..spec import ModelSpec
from . import estimates, folds
from .breakdown import Breakdown
from .estimates import Crossover, Estimate

BACKWARD_FACTOR = 2  # backward = 2 x forward for matmuls (input and weight gradients); no recomputation


@dataclass(frozen=True)
class ParamCounts:
    components: Breakdown
    active: int
    embedding: int

    @property
    def total(self) -> int:
        return self.components.total

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding

    def to_dict(self) -> dict:
        return {
            "total": self.total,
            "active": self.active,
            "embedding": self.embedding,
            "non_embedding": self.non_embedding,
            "components": self.components.to_dict(),
        }


@dataclass(frozen=True)
class FlopCounts:
    """Matmul FLOPs (2 per multiply-add) of one step over the whole batch."""

    components: Breakdown
    forward_causal: int
    tokens: int
    forward_windowed: int | None = None  # with the model's sliding windows, when it has any
    # forward FLOPs of the matmuls whose input is the model's input itself (a patch embedding's images): their backward
    # is the weight gradient alone, the images needing none
    input_leaf: int = 0
    # FLOPs the records' backward runs beyond 2 x their forward (Record.backward_extra: the gated delta rule's solves)
    backward_extra: int = 0

    @property
    def forward(self) -> int:
        return self.components.total

    @property
    def backward(self) -> int:
        return BACKWARD_FACTOR * self.forward - self.input_leaf + self.backward_extra

    @property
    def train_step(self) -> int:
        return self.forward + self.backward

    @property
    def per_token(self) -> int | float:
        """Forward FLOPs per token: an integer, except with a pooler (a once-per-sequence matmul)."""
        return _exact(Fraction(self.forward, self.tokens))

    @property
    def train_per_token(self) -> int | float:
        return _exact(Fraction(self.train_step, self.tokens))

    def to_dict(self) -> dict:
        return {
            "forward": self.forward,
            "backward": self.backward,
            "train_step": self.train_step,
            "per_token": self.per_token,
            "train_per_token": self.train_per_token,
            "forward_causal": self.forward_causal,
            "forward_windowed": self.forward_windowed,
            "components": self.components.to_dict(),
        }


@dataclass(frozen=True)
class MacCounts:
    """Multiply-adds (what fvcore calls flops): exactly half the FLOPs."""

    components: Breakdown
    input_leaf: int = 0  # as FlopCounts.input_leaf, in multiply-adds
    backward_extra: int = 0  # as FlopCounts.backward_extra, in multiply-adds

    @property
    def forward(self) -> int:
        return self.components.total

    def to_dict(self) -> dict:
        backward = BACKWARD_FACTOR * self.forward - self.input_leaf + self.backward_extra
        return {"forward": self.forward, "backward": backward, "train_step": self.forward + backward,
                "components": self.components.to_dict()}


@dataclass(frozen=True)
class FinetuneCounts:
    """A fine-tuning step with low-rank adapters on the frozen model: the parameters they train and the step's
    matmul FLOPs. The frozen linears' backward is their input's gradient alone (1 x forward), the adapters' is
    2 x theirs, an attention core's 2 x (docs/finetuning.md)."""

    adapters: object  # tfcalc.plan.adapters.Adapters
    trainable: int
    frozen: int
    adapter_forward: int  # x·A·B (or B·A folded into a weight) of every adapted linear
    dora_norm: int  # DoRA's B·A for its weight norm (forward only: detached)
    base_forward: int
    frozen_backward: int  # the frozen ops' input gradients (where something before them trains)
    adapter_backward: int
    tokens: int

    @property
    def forward(self) -> int:
        return self.base_forward + self.adapter_forward + self.dora_norm

    @property
    def backward(self) -> int:
        return self.frozen_backward + self.adapter_backward

    @property
    def train_step(self) -> int:
        return self.forward + self.backward

    @property
    def train_per_token(self) -> int | float:
        return _exact(Fraction(self.train_step, self.tokens))

    def to_dict(self) -> dict:
        return {"adapters": self.adapters.to_dict(), "trainable_params": self.trainable,
                "frozen_params": self.frozen, "adapter_forward": self.adapter_forward,
                "dora_norm_forward": self.dora_norm, "forward": self.forward, "backward": self.backward,
                "frozen_backward": self.frozen_backward, "adapter_backward": self.adapter_backward,
                "train_step": self.train_step, "train_per_token": self.train_per_token}


def finetune(inv: Inventory, adapters, frozen: int) -> FinetuneCounts:
    """The fine-tuning figures of an inventory whose records carry their adapters. Backward in model order: before
    the first adapter no input needs a gradient (torch computes none), after it every frozen op passes one on. The
    instances of a block that run before the model's first adapted block (and that block itself) start with none
    (`cold_instances`: a hybrid's blocks in model order), the others with one."""
    from ..plan.adapters import cold_instances, flow, trainable_params

    flops = folds._sum((op.adapter_flops(), repeat) for op, repeat in inv if op.lora is not None)
    frozen_bwd = adapter_bwd = 0
    for group, cold in zip(inv.groups, cold_instances(inv.groups)):
        for times, grad in ((cold, False), (group.repeat - cold, True)):
            for op, at, _ in flow(group.ops, grad) if times else ():  # a gate reads up's input, beside up
                frozen_bwd += times * op.frozen_backward(at)
                if op.lora is not None:
                    adapter_bwd += times * op.adapter_backward(at)
    return FinetuneCounts(adapters, trainable_params(inv), frozen, flops.get("adapters", 0),
                          flops.get("dora norm", 0), folds.forward(inv).total, frozen_bwd, adapter_bwd,
                          inv.workload.tokens)


@dataclass(frozen=True)
class CountResult:
    spec: ModelSpec
    params: ParamCounts
    flops: FlopCounts
    macs: MacCounts
    estimates: list[Estimate]
    non_matmul: Breakdown
    crossover: Crossover
    inventory: Inventory
    finetune: FinetuneCounts | None = None  # with adapters

    @property
    def workload(self) -> Workload:
        return self.inventory.workload

    @property
    def towers(self) -> dict[str, dict[str, int]]:
        """A multimodal model's parameters and forward FLOPs per tower (text, vision, audio) and of its connectors, in
        model order; {} for a model of one tower. They sum to the totals."""
        inv = self.inventory
        return {name: {"params": sum(n * sum(op.parameters().values()) for op, n in inv.tower_parameters(name)),
                       "forward": sum(n * sum(op.forward().values()) for op, n in inv.tower(name))}
                for name in inv.towers()}

    def components(self) -> list[str]:
        """Every component with parameters or FLOPs, in model order."""
        present = set(self.params.components) | set(self.flops.components)
        return [name for name in self.inventory.components() if name in present]

    def to_dict(self) -> dict:
        return {
            "spec": self.spec.model_dump(),
            "workload": {**self.workload.model_dump(), "keys": self.workload.keys},
            **({"towers": self.towers} if self.inventory.towers() else {}),
            "params": self.params.to_dict(),
            "flops": self.flops.to_dict(),
            "macs": self.macs.to_dict(),
            "estimates": {e.name: e.to_dict() for e in self.estimates},
            "non_matmul_flops_estimate": {"forward": self.non_matmul.total, "components": self.non_matmul.to_dict()},
            "attention_vs_mlp": self.crossover.to_dict(),
            **({"finetune": self.finetune.to_dict()} if self.finetune else {}),
        }


def _exact(q: Fraction) -> int | float | str:
    """An integer when the quotient is whole, else a float; a fraction 'n/d' where a float cannot hold it
    (past 1.8e308, sizes of hundreds of digits)."""
    if q.denominator == 1:
        return q.numerator
    try:
        return float(q)
    except OverflowError:
        return str(q)


def count(spec: ModelSpec, workload: Workload | None = None, adapters=None) -> CountResult:
    """Every count tfcalc reports for `spec` on `workload` (default: the spec's own train step of batch_size
    sequences of seq_len tokens). Parameters do not depend on the workload. With `adapters`
    (`tfcalc.Adapters(rank, targets, dora)`), also a fine-tuning step's figures (`finetune`)."""
    inv = build(spec, workload)
    validate(spec, inv.workload)
    if adapters is not None:
        from ..plan.adapters import Adapters, adapt

        if not isinstance(adapters, Adapters):
            raise TfcalcError(f"adapters: expected a tfcalc.Adapters or None, got {type(adapters).__name__}")
        if inv.workload.phase != "train":
            raise TfcalcError(f"lora_rank={adapters.rank}: adapters are counted on a fine-tuning step, phase 'train' "
                              f"(got phase={inv.workload.phase!r})")
        inv = adapt(inv, adapters)
    p = folds.params(inv)
    active = p.total - folds.inactive_params(inv)
    # Kaplan's "vocabulary and positional embeddings": the input tables and an untied unembedding
    embedding = folds.role_params(inv, "token", "position", "token_type", "per_layer", "head")
    fwd = folds.forward(inv)
    causal = folds.masked_attention(inv, windows=False)
    forward_causal = fwd.total - sum(fwd[k] - causal[k] for k in causal)
    forward_windowed = None
    if folds.has_window(inv):
        windowed = folds.masked_attention(inv, windows=True)
        forward_windowed = fwd.total - sum(fwd[k] - windowed[k] for k in windowed)
    result_params = ParamCounts(p, active, embedding)
    # a patch embedding reads the images, an audio front end's first convolution the mel frames ("features"): the
    # inputs need no gradient, so their backward is the weight gradient alone
    # a matmul of constants (role "constant": Mllama's tile mask) has no backward at all
    leaf = sum(n * sum(op.forward().values()) * (2 if op.role == "constant" else 1)
               for op, n in inv if op.role in ("patch", "features", "constant"))
    extra = sum(n * op.backward_extra() for op, n in inv)
    result_flops = FlopCounts(fwd, forward_causal, inv.workload.tokens, forward_windowed, leaf, extra)
    published = estimates.published(
        spec, inv.workload,
        n_non_embedding=active - embedding,
        n_without_positions=active - folds.role_params(inv, "position"),
        forward=result_flops.forward,
        train_step=result_flops.train_step,
    )
    tuned = None if adapters is None else finetune(inv, adapters, p.total)
    return CountResult(spec, result_params, result_flops, MacCounts(fwd.halved(), leaf // 2, extra // 2), published,
                       folds.non_matmul(inv), estimates.crossover(spec, inv), inv, tuned)


__all__ = ["count", "CountResult", "FinetuneCounts", "Workload", "ParamCounts", "FlopCounts", "MacCounts", "Breakdown",
           "Estimate", "Crossover"]
