"""Exact parameter and FLOP counts of a ModelSpec: pure integer arithmetic, no torch.

>>> from tfcalc import load_preset, count
>>> result = count(load_preset("gpt2"))
>>> result.params.total, result.flops.forward
(124439808, 291648307200)
>>> result.macs.forward * 2 == result.flops.forward
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..spec import ModelSpec
from . import estimates, flops, params
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
    forward_windowed: int | None = None  # with the spec's sliding window, when it has one

    @property
    def forward(self) -> int:
        return self.components.total

    @property
    def backward(self) -> int:
        return BACKWARD_FACTOR * self.forward

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

    @property
    def forward(self) -> int:
        return self.components.total

    def to_dict(self) -> dict:
        return {"forward": self.forward, "backward": BACKWARD_FACTOR * self.forward,
                "train_step": (1 + BACKWARD_FACTOR) * self.forward, "components": self.components.to_dict()}


@dataclass(frozen=True)
class CountResult:
    spec: ModelSpec
    params: ParamCounts
    flops: FlopCounts
    macs: MacCounts
    estimates: list[Estimate]
    non_matmul: Breakdown
    crossover: Crossover

    def to_dict(self) -> dict:
        return {
            "spec": self.spec.model_dump(),
            "params": self.params.to_dict(),
            "flops": self.flops.to_dict(),
            "macs": self.macs.to_dict(),
            "estimates": {e.name: e.to_dict() for e in self.estimates},
            "non_matmul_flops_estimate": {"forward": self.non_matmul.total, "components": self.non_matmul.to_dict()},
            "attention_vs_mlp": self.crossover.to_dict(),
        }


def _exact(q: Fraction) -> int | float:
    return q.numerator if q.denominator == 1 else float(q)


def count(spec: ModelSpec) -> CountResult:
    """Every count tfcalc reports for `spec`."""
    p = params.params(spec)
    active = p.total - params.inactive(spec)
    embedding = sum(p.get(name, 0) for name in params.EMBEDDING_COMPONENTS)
    fwd = flops.forward(spec)
    causal = flops.causal_attention(spec)
    forward_causal = fwd.total - sum(fwd[k] - causal[k] for k in causal)
    forward_windowed = None
    if spec.sliding_window is not None:
        windowed = flops.windowed_attention(spec)
        forward_windowed = fwd.total - sum(fwd[k] - windowed[k] for k in windowed)
    result_params = ParamCounts(p, active, embedding)
    result_flops = FlopCounts(fwd, forward_causal, spec.tokens, forward_windowed)
    published = estimates.published(
        spec,
        n_non_embedding=active - embedding,
        n_without_positions=active - p.get("embedding/position", 0),
        forward=result_flops.forward,
        train_step=result_flops.train_step,
    )
    return CountResult(spec, result_params, result_flops, MacCounts(fwd.halved()), published,
                       estimates.non_matmul(spec), estimates.crossover(spec, fwd))


__all__ = ["count", "CountResult", "ParamCounts", "FlopCounts", "MacCounts", "Breakdown", "Estimate", "Crossover"]
