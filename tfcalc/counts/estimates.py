"""The well-known approximations, non-matmul work, and where attention overtakes the MLP.

Everything here is an estimate or a derived figure, reported beside the exact counts, never inside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..arch import Inventory, Workload, build
from ..arch.inventory import family
from ..spec import ModelSpec


@dataclass(frozen=True)
class Estimate:
    name: str
    formula: str
    source: str
    value: int
    exact: int
    compared_with: str

    @property
    def ratio(self) -> float | str:
        """estimate / exact; where a float cannot hold it (a spec of hundreds of digits), the fraction 'n/d'."""
        try:
            return self.value / self.exact
        except OverflowError:
            return str(Fraction(self.value, self.exact))

    def to_dict(self) -> dict:
        return {
            "formula": self.formula,
            "source": self.source,
            "value": self.value,
            "compared_with": self.compared_with,
            "exact": self.exact,
            "ratio": self.ratio,
        }


def published(spec: ModelSpec, workload: Workload, *, n_non_embedding: int, n_without_positions: int,
              forward: int, train_step: int) -> list[Estimate]:
    """Kaplan's 6N and C_forward, and PaLM's 6N + 12LHQT, for the whole step, against the exact counts.

    n_non_embedding: active parameters less vocabulary and position embeddings (Kaplan's N).
    n_without_positions: active parameters less the position table (nanoGPT's get_num_params, used for PaLM).
    T is the step's new tokens, n_ctx (Q) the keys each attends to, L every block of every stack.
    """
    T, L, N = workload.tokens, spec.n_layers + spec.n_encoder_layers, workload.keys
    return [
        Estimate("kaplan_6n", "6 N per token, N = non-embedding params", "Kaplan et al. 2020, sec. 2.1",
                 6 * n_non_embedding * T, train_step, "train_step"),
        Estimate("kaplan_forward", "2 N + 2 L n_ctx d_attn per token", "Kaplan et al. 2020, Table 1",
                 (2 * n_non_embedding + 2 * L * N * spec.d_attn) * T, forward, "forward"),
        Estimate("palm", "6 N + 12 L H Q T per token, N = params less positions",
                 "Chowdhery et al. 2022, appendix B (as in nanoGPT)",
                 (6 * n_without_positions + 12 * L * spec.n_heads * spec.d_head * N) * T, train_step,
                 "train_step"),
    ]


@dataclass(frozen=True)
class Crossover:
    """Attention (projections + scores + values) against the MLP, per block, as N grows."""

    seq_len: int | None  # the smallest N at which attention FLOPs >= MLP FLOPs; None: at no N (no scores)
    attention_share: float  # attention's share of block FLOPs at the spec's N
    mlp_share: float
    quadratic_share: float  # scores + values' share of block FLOPs at the spec's N
    mixer_share: float = 0.0  # other sequence mixers' (a short convolution's block: family "mixer")
    # False: attention is not a N + b N^2 in a sequence's tokens (windows of an image's patch grid: Qwen2.5-VL), so no
    # crossover N is given (seq_len None), only the shares at the workload counted
    modelled: bool = True

    def to_dict(self) -> dict:
        return {
            "attention_overtakes_mlp_at_seq_len": self.seq_len,
            "attention_share": self.attention_share,
            "mlp_share": self.mlp_share,
            "quadratic_share": self.quadratic_share,
            "mixer_share": self.mixer_share,
        }


def _families(inv: Inventory) -> tuple[int, int, int]:
    """(attention projections, attention scores + values, MLP and experts) of an inventory's forward FLOPs, by the
    sublayer that made each record (an attention core's are the scores and values)."""
    sums = _sums(inv)
    return sums["linear"], sums["quadratic"], sums["mlp"]


def _sums(inv: Inventory) -> dict[str, int]:
    sums = {"linear": 0, "quadratic": 0, "mlp": 0, "mixer": 0, "other": 0}
    for op, repeat in inv:
        kind = family(op)
        bucket = "linear" if kind in ("attention", "cross_attention") else kind if kind in sums else "other"
        sums[bucket] += repeat * sum(op.forward().values())
    return sums


_COEFFICIENTS: dict[tuple, tuple[int, int, int]] = {}


def _frozen(value):
    """A field's value as a dict key (lists and the kinds' dicts of sizes made hashable)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def _coefficients(spec: ModelSpec) -> tuple[int, int, int] | None:
    """(a, b, m): attention's linear and quadratic FLOPs per sequence and the MLP's, per token; remembered per
    architecture (every field but the spec's own length, batch and name), so that a sweep computes them once."""
    key = tuple((k, _frozen(v)) for k, v in spec.__dict__.items() if k not in ("seq_len", "batch_size", "name"))
    if key not in _COEFFICIENTS:
        if len(_COEFFICIENTS) >= 256:
            _COEFFICIENTS.clear()
        _COEFFICIENTS[key] = _measure(spec)
    return _COEFFICIENTS[key]


def _measure(spec: ModelSpec) -> tuple[int, int, int] | None:
    """None for attention within windows of an image's grid (`window_attention`): its pairs follow the image's
    windows, not N^2; None too for any other attention whose work is not a N + b N^2 with the MLP's m N (Gemma 4's
    conformer: chunks of queries against a fixed context, relative keys once per forward)."""
    if any(block.split("+")[0] == "window_attention" for block in spec.block_pattern or ()):
        return None

    def at(n: int) -> tuple[int, int, int]:
        # N source tokens too where blocks cross-attend (an encoder's, or Llama 3.2 Vision's vision tokens)
        workload = Workload(seq_len=n, src_len=n if spec.cross_attends else None)
        return _families(build(spec, workload))

    (lin1, quad1, m), (lin2, quad2, m2) = at(1), at(2)
    assert m2 == 2 * m, "the MLP is m N"
    if not (lin2 == 2 * lin1 and quad2 == 4 * quad1):
        return None  # attention within blocks of a fixed context (Gemma 4's conformer): not a N + b N^2
    return lin1, quad1, m


def crossover(spec: ModelSpec, inv: Inventory) -> Crossover:
    """Per sequence of N tokens (and, in an encoder-decoder or where blocks cross-attend, N source tokens): attention(N) = a N + b N^2 and
    MLP(N) = m N, so attention >= MLP from N = (m - a) / b. a, b and m are read off the exact counts of one
    sequence at N = 1 and N = 2 (of a multimodal model's text tower: the language model's tokens); the shares are
    those of `inv`'s forward, the workload counted (every tower's)."""
    if spec.towers:
        from ..arch.towers import text_tower

        spec = text_tower(spec)
    coefficients = _coefficients(spec)
    a, b, m = coefficients or (0, 0, 0)
    if coefficients is None:
        n_cross = None
    elif b:
        n_cross: int | None = max(1, -((a - m) // b))  # ceil((m - a) / b), at least one token
    else:  # no scores and values (blocks without attention: a block_pattern): linear against linear
        n_cross = 1 if a >= m else None
    sums = _sums(inv)
    linear_attention, quadratic, mlp, mixer = sums["linear"], sums["quadratic"], sums["mlp"], sums["mixer"]
    block = linear_attention + quadratic + mlp + mixer

    def share(n: int) -> float:
        return float(Fraction(n, block)) if block else 0.0

    return Crossover(n_cross, share(linear_attention + quadratic), share(mlp), share(quadratic), share(mixer),
                     coefficients is not None)
