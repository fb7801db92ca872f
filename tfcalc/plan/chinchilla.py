"""Compute-optimal model size and training tokens for a FLOP budget, after Hoffmann et al. 2022, "Training
Compute-Optimal Large Language Models" (arXiv:2203.15556, the Chinchilla paper). Standard library only.

    >>> r = compute_optimal(5.76e23)      # Gopher's budget, the paper's unit of compute
    >>> f"{r.params:.3g} parameters, {r.tokens:.3g} tokens, {r.tokens_per_param:.1f} tokens per parameter"
    '6.79e+10 parameters, 1.41e+12 tokens, 20.8 tokens per parameter'
    >>> [(e.approach, f"{e.params:.3g}") for e in r.approaches]
    [('1', '6.79e+10'), ('2', '6.37e+10'), ('3', '3.22e+10'), ('20-tokens', '6.93e+10')]
    >>> flops, tokens = optimal_tokens_for_params(10**12)   # Table 3: 1 Trillion -> 1.27e+26 FLOPs, 21.2 Trillion
    >>> f"{flops:.2e} {tokens / 1e12:.1f}"
    '1.27e+26 21.2'

Conventions, stated once:
- Compute is C = 6 N D FLOPs (N parameters, embeddings included; D training tokens), the relation the paper
  projects with (Section 3.3; Appendix F and Table A4 compare it with a detailed count, within 10%). Every
  estimate here satisfies it: D = C / (6 N).
- Four rows, headline first. Approach 1 (training-curve envelope, Section 3.1) is the headline: the paper's
  Table 3 is its projection. Approach 2 (IsoFLOP profiles, Section 3.2) is tabulated in Table A3. Both are
  power laws N = k C^a whose constants the paper does not print (it prints a to two digits, Table 2): the
  (a, k) here are solved from the tables so that eight of the nine rows of each table come back at the
  printed precision (docs/planning.md: how, and the ninth row). Approach 3 (Section 3.3) is the closed-form
  efficient frontier of the parametric loss with the constants as published (Appendix D.2); those constants
  are rounded and do not reproduce the paper's own Approach-3 numbers (Table A3, Figure 4). The fourth row is
  the practitioners' rule of thumb, 20 tokens per parameter, not a result of the paper.
- Values are floats; a budget may be an int of any size (10**30) or a float.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from decimal import Decimal

from ..errors import TfcalcError, _shown

FLOPS_PER_PARAM_TOKEN = 6  # C = 6 N D
GOPHER_FLOPS = 5.76e23  # the paper's unit of compute (Table 3's "Gopher unit"); Chinchilla's budget too
TOKENS_PER_PARAM_RULE = 20  # the rule of thumb: D = 20 N, so C = 120 N^2


@dataclass(frozen=True)
class PowerLaw:
    """N_opt = k C^a, and D_opt = C / (6 N_opt) (so D_opt is proportional to C^(1-a))."""

    a: float
    k: float

    def log_params(self, log_flops: float) -> float:
        return math.log(self.k) + self.a * log_flops

    def log_flops(self, log_params: float) -> float:
        """The inverse: the budget at which a model of exp(log_params) parameters is compute-optimal."""
        return (log_params - math.log(self.k)) / self.a


@dataclass(frozen=True)
class ParametricLoss:
    """L(N, D) = E + A / N^alpha + B / D^beta (nats per token), the paper's Approach 3 (Section 3.3)."""

    e: float
    a: float
    b: float
    alpha: float
    beta: float

    def loss(self, n_params: float, tokens: float) -> float:
        return self.e + self.a / n_params ** self.alpha + self.b / tokens ** self.beta

    @property
    def g(self) -> float:
        """G = (alpha A / (beta B))^(1/(alpha+beta)): N_opt = G (C/6)^a, D_opt = G^-1 (C/6)^b (Section 3.3)."""
        return (self.alpha * self.a / (self.beta * self.b)) ** (1 / (self.alpha + self.beta))

    def frontier(self) -> PowerLaw:
        """The efficient frontier as N = k C^a: a = beta / (alpha + beta), k = G 6^-a."""
        a = self.beta / (self.alpha + self.beta)
        return PowerLaw(a=a, k=self.g * FLOPS_PER_PARAM_TOKEN ** -a)


# Approach 1. Published: a = 0.50 (Table 2, bootstrap 10th-90th percentiles 0.488-0.502). Solved here from
# Table 3: every (a, k) that returns its rows other than 67B at the printed precision has a in
# [0.49809, 0.49812]; a = 0.4981 and the middle of its interval of k. With a = 0.50 exactly the best k
# still misses some row's FLOPs by 4% (the k each row implies spans 4%, its square 8%).
APPROACH_1 = PowerLaw(a=0.4981, k=0.099289)
# Approach 2. Published: a = 0.49 (Table 2, 0.462-0.534). Solved from Table A3's Approach-2 columns the same
# way: a in [0.489868, 0.489887]; a = 0.48988 and the middle of its interval of k.
APPROACH_2 = PowerLaw(a=0.48988, k=0.145907)
# Approach 3. Published in Appendix D.2: E = 1.69, A = 406.4, B = 410.7, alpha = 0.34, beta = 0.28.
PARAMETRIC_LOSS = ParametricLoss(e=1.69, a=406.4, b=410.7, alpha=0.34, beta=0.28)
APPROACH_3 = PARAMETRIC_LOSS.frontier()  # a = 0.28/0.62 = 0.4516; G = 1.3447

LABELS = {
    "1": "Approach 1: training-curve envelope (Table 3)",
    "2": "Approach 2: IsoFLOP profiles (Table A3)",
    "3": "Approach 3: parametric loss, published constants",
    "20-tokens": "Rule of thumb: 20 tokens per parameter",
}
_LAWS = {"1": APPROACH_1, "2": APPROACH_2, "3": APPROACH_3}


@dataclass(frozen=True)
class Estimate:
    approach: str  # "1", "2", "3" or "20-tokens"
    label: str
    params: float  # N_opt
    tokens: float  # D_opt = C / (6 N_opt)

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params

    def to_dict(self) -> dict:
        return {"approach": self.approach, "label": self.label, "params": self.params, "tokens": self.tokens,
                "tokens_per_param": self.tokens_per_param}


@dataclass(frozen=True)
class ComputeOptimal:
    flops: int | float  # the budget C, as given
    approaches: tuple[Estimate, ...]  # Approach 1 (the headline), 2, 3, then the 20-tokens rule

    @property
    def headline(self) -> Estimate:
        return self.approaches[0]

    @property
    def params(self) -> float:
        return self.headline.params

    @property
    def tokens(self) -> float:
        return self.headline.tokens

    @property
    def tokens_per_param(self) -> float:
        return self.headline.tokens_per_param

    def estimate(self, approach: str) -> Estimate:
        for e in self.approaches:
            if e.approach == approach:
                return e
        raise TfcalcError(f"approach={approach!r}: expected one of {', '.join(LABELS)}")

    def to_dict(self) -> dict:
        return {"flops": self.flops, "relation": "C = 6 N D", "params": self.params, "tokens": self.tokens,
                "tokens_per_param": self.tokens_per_param,
                "approaches": [e.to_dict() for e in self.approaches]}


def compute_optimal(flops: int | float) -> ComputeOptimal:
    """The compute-optimal parameters N and tokens D for a budget of `flops` FLOPs (C = 6 N D), by Approaches 1,
    2 and 3 of the Chinchilla paper and by the 20-tokens-per-parameter rule."""
    log_c = _log_positive(flops, "flops_budget", "FLOPs")
    rows = [_estimate(key, law.log_params(log_c), log_c, flops) for key, law in _LAWS.items()]
    rule_log_n = (log_c - math.log(FLOPS_PER_PARAM_TOKEN * TOKENS_PER_PARAM_RULE)) / 2  # N = sqrt(C / 120)
    rows.append(_estimate("20-tokens", rule_log_n, log_c, flops))
    return ComputeOptimal(_plain(flops), tuple(rows))


def optimal_tokens_for_params(n_params: int | float, approach: str = "1") -> tuple[float, float]:
    """(FLOPs, tokens) at which a model of `n_params` parameters is compute-optimal: Table 3's direction (model
    size -> FLOPs, tokens), by Approach 1 unless `approach` names another row ("2", "3", "20-tokens")."""
    log_n = _log_positive(n_params, "n_params", "parameters")
    if approach == "20-tokens":
        log_c = math.log(FLOPS_PER_PARAM_TOKEN * TOKENS_PER_PARAM_RULE) + 2 * log_n
    elif approach in _LAWS:
        log_c = _LAWS[approach].log_flops(log_n)
    else:
        raise TfcalcError(f"approach={approach!r}: expected one of {', '.join(LABELS)}")
    log_d = log_c - math.log(FLOPS_PER_PARAM_TOKEN) - log_n
    return _exp(log_c, "n_params", n_params), _exp(log_d, "n_params", n_params)


def _estimate(key: str, log_n: float, log_c: float, flops) -> Estimate:
    log_d = log_c - math.log(FLOPS_PER_PARAM_TOKEN) - log_n
    return Estimate(key, LABELS[key], _exp(log_n, "flops_budget", flops), _exp(log_d, "flops_budget", flops))


def _log_positive(value, field: str, unit: str) -> float:
    """ln(value) for a finite number above 0 (an int of any size, a float, a Fraction, a Decimal); else one line
    naming the field and the value."""
    bad = TfcalcError(f"{field}={_shown(value)}: expected a positive number of {unit}")
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, Decimal)):
        raise bad
    if isinstance(value, Decimal):
        if not (value.is_finite() and value > 0):
            raise bad
        return float(value.ln())
    if isinstance(value, numbers.Integral):
        if value <= 0:
            raise bad
        return math.log(int(value))  # exact for ints of any size
    if isinstance(value, numbers.Rational):
        if value <= 0:
            raise bad
        return math.log(int(value.numerator)) - math.log(int(value.denominator))
    x = float(value)
    if not 0 < x < math.inf:  # also nan
        raise bad
    return math.log(x)


def _plain(value) -> int | float:
    """The budget as JSON can hold it: an int when whole (a Fraction, a Decimal, a numpy int), else a float."""
    if isinstance(value, float):
        return value
    if isinstance(value, numbers.Integral) or value == int(value):
        return int(value)
    return float(value)


def _exp(log_x: float, field: str, value) -> float:
    try:
        return math.exp(log_x)
    except OverflowError:
        raise TfcalcError(f"{field}={_shown(value)}: too large, the estimate overflows a float") from None
