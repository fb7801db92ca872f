"""A request's life on the roofline: the prefill of its prompt (time to first token), then one decode step per
further output token, each at its own context length, summed exactly. No torch.

    >>> from tfcalc import load_preset
    >>> from tfcalc.plan.gpus import lookup
    >>> life = request_life(load_preset("llama2-7b"), lookup("a100-80gb"), prompt=1000, output_tokens=4)
    >>> life.decode.steps, life.decode.contexts     # tokens 2..4 decoded against 1000, 1001, 1002 cached
    (3, (1000, 1002))
    >>> steps = [phase_cost(load_preset("llama2-7b"), decode_workload(1, c), lookup("a100-80gb")) for c in
    ...          range(1000, 1003)]
    >>> life.decode.flops == sum(s.flops for s in steps), life.decode.bytes == sum(s.bytes for s in steps)
    (True, True)

Conventions (tfcalc.plan.roofline's, stated once there): every time is a roofline bound, each op at
max(FLOPs / peak, bytes / bandwidth), ops in sequence; with `efficiency` F < 1 every op runs at F x the peak, the
bandwidth and the link (time / F): an assumption the caller states, still not a measurement.
- The prefill of P prompt tokens yields the first output token: its time is the time to first token.
- Output token j (2 <= j <= T) is decoded in one step against the P + j - 2 tokens then cached: T - 1 decode steps
  over contexts P .. P + T - 2.
- End to end = prefill + the decode steps; tokens/s per request = T / end to end; for the batch, B x T / end to end
  (every sequence of the batch runs in lockstep).

The exact sum without a loop (`decode_sum`): in a decode step only an attention core's cost depends on the context
c, through its keys min(c + 1, window) (AttentionCore.cost: FLOPs and bytes affine in that count; every other op's
cost is the same at every c). So each op's FLOPs and bytes are concave, piecewise-affine functions of c. On a range
[a, b] an op's function is affine iff f(b) - f(a) = (b - a)(f(a + 1) - f(a)) (concave: f lies under its tangent at
a and over its chord, which here are one line). `decode_sum` checks that for every op and halves any range where it
fails; on an affine range it sums FLOPs and bytes as arithmetic series, and each op's time max(FLOPs / peak,
bytes / bandwidth) by splitting the range where FLOPs x bandwidth - bytes x peak (affine too) changes sign.
A chunked attention core (Llama 4) reads (c mod chunk) + 1 keys: a sawtooth, not concave, but the test is still
exact for it: with slope 1 at a, f(b) - f(a) = (b - a) - chunk x (chunk starts crossed), equal to (b - a) only when
none is crossed; with the drop at a (slope 1 - chunk) only when b = a + 1.
tests/test_serve.py checks it against a step-by-step loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..arch import Workload
from ..errors import TfcalcError, check_positive_int
from ..spec import ModelSpec
from .gpus import Gpu
from .memory import QUANTIZED
from .roofline import PEAK_DTYPE, PhaseCost, phase_cost


def decode_workload(batch_size: int, context: int, src_len: int | None = None) -> Workload:
    return Workload(phase="decode", batch_size=batch_size, seq_len=1, context=context, src_len=src_len)


@dataclass(frozen=True)
class DecodeSum:
    """The decode steps of a request, summed: FLOPs and bytes exact, seconds at `efficiency` of the roofline."""
    steps: int
    contexts: tuple[int, int] | None  # first and last context (cached tokens); None without a step
    flops: int
    bytes: int
    link_bytes: int
    roofline_seconds: float  # the bound
    efficiency: Fraction

    @property
    def seconds(self) -> float:
        return float(Fraction(self.roofline_seconds) / self.efficiency)

    def to_dict(self) -> dict:
        return {"steps": self.steps, "contexts": list(self.contexts) if self.contexts else None,
                "flops": self.flops, "bytes": self.bytes, "link_bytes": self.link_bytes,
                "roofline_seconds": self.roofline_seconds, "seconds": self.seconds}


@dataclass(frozen=True)
class RequestLife:
    spec: ModelSpec
    gpu: Gpu
    dtype: str
    kv_dtype: str
    tp: int
    batch_size: int
    prompt: int
    output_tokens: int
    efficiency: Fraction
    prefill: PhaseCost  # the batch's prefill
    prefill_one: PhaseCost  # one request's prefill alone (batch 1)
    decode: DecodeSum

    @property
    def bound(self) -> bool:
        """True: every time is the roofline's bound (efficiency 1)."""
        return self.efficiency == 1

    def _scaled(self, seconds: float) -> float:
        return float(Fraction(seconds) / self.efficiency)

    @property
    def ttft_s(self) -> float:
        """Time to first token of every request of the batch: the batch's prefill."""
        return self._scaled(self.prefill.seconds)

    @property
    def ttft_one_s(self) -> float:
        """Time to first token of one request prefilled alone."""
        return self._scaled(self.prefill_one.seconds)

    @property
    def end_to_end_s(self) -> float:
        return self.ttft_s + self.decode.seconds

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of one request, end to end."""
        return self.output_tokens / self.end_to_end_s

    @property
    def batch_tokens_per_s(self) -> float:
        return self.batch_size * self.output_tokens / self.end_to_end_s

    @property
    def decode_tokens_per_s(self) -> float | None:
        """One request's decode rate (tokens 2..T over the decode time); None without a decode step."""
        return self.decode.steps / self.decode.seconds if self.decode.steps else None

    def to_dict(self) -> dict:
        return {"roofline_bound": self.bound, "efficiency": float(self.efficiency), "batch_size": self.batch_size,
                "prompt_tokens": self.prompt, "output_tokens": self.output_tokens,
                "time_to_first_token_s": self.ttft_s, "time_to_first_token_one_request_s": self.ttft_one_s,
                "prefill_flops": self.prefill.flops, "prefill_bytes": self.prefill.bytes,
                "decode": self.decode.to_dict(), "end_to_end_s": self.end_to_end_s,
                "tokens_per_s_per_request": self.tokens_per_s, "tokens_per_s_batch": self.batch_tokens_per_s,
                "decode_tokens_per_s_per_request": self.decode_tokens_per_s}


def _costs(spec, gpu, dtype, kv_dtype, tp, batch, src_len, context) -> list[tuple[int, int, int, str]]:
    ops = phase_cost(spec, decode_workload(batch, context, src_len), gpu, dtype, kv_dtype, tp).ops
    return [(op.flops, op.bytes, op.link_bytes, op.bound) for op in ops]


def _series(v0: int, slope: int, x1: int, x2: int) -> int:
    """sum of v0 + slope * x for x = x1 .. x2 (x1 <= x2)."""
    n = x2 - x1 + 1
    return n * v0 + slope * (x1 + x2) * n // 2


def _affine_time(f0: int, fs: int, b0: int, bs: int, n: int, peak: int, bandwidth: int) -> Fraction:
    """sum over x = 0 .. n-1 of max((f0 + fs x) / peak, (b0 + bs x) / bandwidth), exactly."""
    u0, us = f0 * bandwidth - b0 * peak, fs * bandwidth - bs * peak  # >= 0: compute-bound (as phase_cost decides)
    if us == 0:
        split = n if u0 >= 0 else 0  # x < split: compute-bound
        compute_first = True
    else:
        # the x where u0 + us x >= 0: x >= -u0/us (us > 0) or x <= -u0/us (us < 0)
        edge = -u0 / Fraction(us)
        if us > 0:
            first = max(0, min(n, -(-edge.numerator // edge.denominator)))  # ceil(edge)
            split, compute_first = first, False  # x < first: memory; x >= first: compute
        else:
            last = edge.numerator // edge.denominator  # floor(edge)
            split, compute_first = max(0, min(n, last + 1)), True
    total = Fraction(0)
    ranges = ((0, split - 1), (split, n - 1))
    for i, (x1, x2) in enumerate(ranges):
        if x1 > x2:
            continue
        compute = (i == 0) == compute_first
        total += (Fraction(_series(f0, fs, x1, x2), peak) if compute
                  else Fraction(_series(b0, bs, x1, x2), bandwidth))
    return total


def decode_sum(spec: ModelSpec, gpu: Gpu, first: int, steps: int, batch_size: int = 1, dtype: str = "bf16",
               kv_dtype: str | None = None, tp: int = 1, src_len: int | None = None,
               efficiency: Fraction = Fraction(1)) -> DecodeSum:
    """`steps` decode steps against first, first + 1, ... cached tokens, summed exactly (module docstring)."""
    if steps == 0:
        return DecodeSum(0, None, 0, 0, 0, 0.0, efficiency)
    peak, bandwidth = gpu.peak_flops[PEAK_DTYPE[dtype]], gpu.bandwidth_bytes_per_s
    cache = {}

    def at(c):
        if c not in cache:
            cache[c] = _costs(spec, gpu, dtype, kv_dtype, tp, batch_size, src_len, c)
        return cache[c]

    flops = moved = link = 0
    seconds = Fraction(0)
    pending = [(first, first + steps - 1)]
    while pending:
        a, b = pending.pop()
        lo, nxt, hi = at(a), at(a + 1) if b > a else at(a), at(b)
        if len(lo) != len(hi) or len(lo) != len(nxt):
            raise TfcalcError("decode steps at different contexts have different ops")  # an invariant
        affine = all(h[j] - l_[j] == (b - a) * (m[j] - l_[j]) for l_, m, h in zip(lo, nxt, hi) for j in (0, 1, 2))
        if not affine:
            mid = (a + b) // 2
            pending += [(a, mid), (mid + 1, b)]
            continue
        n = b - a + 1
        for (f0, b0, k0, bound), (f1, b1, k1, _) in zip(lo, nxt):
            fs, bs, ks = f1 - f0, b1 - b0, k1 - k0
            flops += _series(f0, fs, 0, n - 1)
            moved += _series(b0, bs, 0, n - 1)
            sent = _series(k0, ks, 0, n - 1)
            link += sent
            if bound == "link":
                seconds += Fraction(sent, gpu.link_bytes_per_s)
            else:
                seconds += _affine_time(f0, fs, b0, bs, n, peak, bandwidth)
    return DecodeSum(steps, (first, first + steps - 1), flops, moved, link, float(seconds), efficiency)


def request_life(spec: ModelSpec, gpu: Gpu | str, prompt: int, output_tokens: int, batch_size: int = 1,
                 dtype: str = "bf16", kv_dtype: str | None = None, tp: int = 1, src_len: int | None = None,
                 efficiency=1) -> RequestLife:
    """Prefill of `prompt` tokens, then `output_tokens` - 1 decode steps, for `batch_size` sequences in lockstep
    on `gpu` (one of `tp` tensor-parallel GPUs). `efficiency` in (0, 1]: the fraction of the peak, bandwidth and
    link every op reaches (1: the roofline bound)."""
    if isinstance(gpu, str):
        from .gpus import lookup

        gpu = lookup(gpu)
    elif not isinstance(gpu, Gpu):
        raise TfcalcError(f"gpu={gpu!r}: expected a tfcalc.plan.gpus.Gpu or a GPU's name ('h100', 'mi300x')")
    check_positive_int("prompt", prompt)
    check_positive_int("output_tokens", output_tokens)
    check_positive_int("batch_size", batch_size)
    check_positive_int("src_len", src_len, optional=True)
    for name, value in (("dtype", dtype), ("kv_dtype", kv_dtype)):
        if value is not None and not isinstance(value, str):
            raise TfcalcError(f"{name}={value!r}: expected a dtype's name ('bf16', 'fp8')")
    if isinstance(efficiency, bool) or not isinstance(efficiency, (int, float, str, Fraction)):
        raise TfcalcError(f"efficiency={efficiency!r}: expected a fraction in (0, 1]")
    try:
        eff = Fraction(efficiency)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise TfcalcError(f"efficiency={efficiency!r}: expected a fraction in (0, 1]") from None
    if not 0 < eff <= 1:
        raise TfcalcError(f"efficiency={efficiency!r}: expected a fraction in (0, 1]")
    if spec.positions == "learned" and spec.max_positions is not None and prompt + output_tokens - 1 > \
            spec.max_positions:
        raise TfcalcError(f"output_tokens={output_tokens}: a prompt of {prompt:,} tokens and {output_tokens - 1:,} "
                          f"decode steps need {prompt + output_tokens - 1:,} positions; the learned position table "
                          f"has {spec.max_positions:,}")
    kv = kv_dtype or ("bf16" if dtype in QUANTIZED else dtype)
    prefill = Workload(phase="prefill", batch_size=batch_size, seq_len=prompt, src_len=src_len)
    one = Workload(phase="prefill", batch_size=1, seq_len=prompt, src_len=src_len)
    try:  # sizes past a float's range (a batch of 10**40) have no time in seconds
        pre = phase_cost(spec, prefill, gpu, dtype, kv, tp)
        pre_one = pre if batch_size == 1 else phase_cost(spec, one, gpu, dtype, kv, tp)
        decode = decode_sum(spec, gpu, prompt, output_tokens - 1, batch_size, dtype, kv, tp, src_len, eff)
    except OverflowError:
        raise TfcalcError(f"prompt={prompt!r}, output_tokens={output_tokens!r}, batch_size={batch_size!r}: the "
                          "request's time is past a float's range") from None
    return RequestLife(spec, gpu, dtype, kv, tp, batch_size, prompt, output_tokens, eff, pre, pre_one, decode)
