"""Figures: FLOPs by component over a sweep, a family's parameters and FLOPs, memory stacked over a sweep against a
GPU's capacity, and prefill and decode on a roofline. Each builder takes the results the tables show and returns
a matplotlib Figure (no pyplot, no display: `save` writes it through the Agg or SVG canvas).

matplotlib is an optional extra (`pip install 'tfcalc[plot]'`), imported here only, inside the builders: the
commands import this module only when `--plot` is given, so that `count` never pays for it.

Conventions, stated once: FLOPs are 2 per multiply-add, matmuls only, attention over every (query, key) pair,
as in the tables; memory in binary units (GiB = 2^30 bytes); a roofline is a bound, not a measurement. Every
figure says its model and workload in its caption.
"""

from __future__ import annotations

import functools
import math
import re
import textwrap
from fractions import Fraction
from pathlib import Path
from typing import Any

from .errors import OutputError, TfcalcError

INSTALL = "--plot needs matplotlib: pip install 'tfcalc[plot]'"
FORMATS = {".png": "png", ".svg": "svg"}
BARS_UP_TO = 200  # points of a sweep drawn as bars; more are drawn as stepped bands (one artist per component)
DPI = 110
GiB = 2**30
LENGTHS = ("seq_len", "tgt_len", "context", "src_len")
WORKLOAD = ("batch_size", *LENGTHS)
AXIS_LABELS = {
    "seq_len": "sequence length N (new tokens per sequence)",
    "tgt_len": "decoder length (tokens per sequence)",
    "context": "context (tokens cached per sequence)",
    "src_len": "encoder length (tokens per sequence)",
    "batch_size": "batch size (sequences)",
}
STYLE = {
    "font.size": 9, "axes.titlesize": 10.5, "axes.titleweight": "bold", "axes.labelsize": 9,
    "legend.fontsize": 7.5, "legend.frameon": False, "xtick.labelsize": 8, "ytick.labelsize": 8,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
    "grid.linewidth": 0.6, "axes.axisbelow": True, "svg.fonttype": "none", "svg.hashsalt": "tfcalc",
}


def check_path(path: str | Path) -> Path:
    """The figure's file: .png or .svg, in a folder that exists and can be written to, and not something that is
    not a regular file (a FIFO would block the write forever, a folder cannot be replaced): all checked before any
    counting, so that a sweep never runs to fail at its end."""
    import os
    import stat

    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise TfcalcError(f"--plot {str(path)!r}: give a .png or .svg file (got "
                          f"{repr(path.suffix) if path.suffix else 'no suffix'})")
    if not path.parent.is_dir():
        raise TfcalcError(f"--plot {str(path)!r}: no such folder {str(path.parent)!r}")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise OutputError(f"--plot {str(path)!r}: cannot use it: {e.strerror or e}") from None
    if mode is not None and not stat.S_ISREG(mode):
        what = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise OutputError(f"--plot {str(path)!r}: it is {what}; give a .png or .svg file to write")
    if not os.access(path.parent, os.W_OK | os.X_OK) or (mode is not None and not os.access(path, os.W_OK)):
        raise OutputError(f"--plot {str(path)!r}: not writable here")
    return path


def require() -> None:
    """One clear line, not a traceback, when the extra is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise TfcalcError(INSTALL) from None


def save(fig, path: str | Path) -> Path:
    """Write `fig` as PNG (at DPI) or SVG, by the file's suffix; any other suffix is refused."""
    import os
    import tempfile

    path = check_path(path)
    fmt = FORMATS[path.suffix.lower()]
    # written whole to a temporary file beside it, then renamed over it: a reader (or a second tfcalc writing the
    # same file) never sees half a figure, and a failed write leaves the old file as it was
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format=fmt, dpi=DPI, metadata={"Date": None} if fmt == "svg" else {"Software": None})
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"--plot {str(path)!r}: cannot write it: {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def _styled(build):
    """Runs a builder under the figures' style (rcParams are read when each artist is made)."""
    @functools.wraps(build)
    def wrapper(*args, **kwargs):
        require()
        import matplotlib

        with matplotlib.rc_context(STYLE):
            return build(*args, **kwargs)
    return wrapper


def _figure(ncols: int = 1, width: float = 9.0, height: float = 5.0):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _caption(fig, text: str) -> None:
    """The caption under the axes: the model, the workload, the conventions; the layout leaves room for it."""
    width_in, height_in = fig.get_size_inches()
    chars = int(width_in * 72 / (7.5 * 0.58))
    # a long token (a hybrid's block pattern, conv+mlp/attention+mlp/...) may break after its slashes: letters are
    # wider than the average the line length assumes, so cutting it at `chars` would run past the figure's edge
    text = re.sub(r"\S{40,}", lambda m: m[0].replace("/", "/ "), text)
    lines = [line for paragraph in text.split("\n") for line in textwrap.wrap(paragraph, chars)]
    room = (len(lines) * 7.5 * 1.3 + 10) / 72 / height_in
    fig.get_layout_engine().set(rect=(0, room, 1, 1 - room))
    fig.text(0.012, 0.012, "\n".join(lines), ha="left", va="bottom", fontsize=7.5, color="0.25", gid="caption")


def short(n: int) -> str:
    """Tick labels: 131072 -> '128k', 1048576 -> '1M', 1000 -> '1,000' (binary k and M, as lengths are quoted)."""
    if n >= 2**20 and n % 2**20 == 0:
        return f"{n >> 20:,}M"
    if n >= 2**10 and n % 2**10 == 0:
        return f"{n >> 10:,}k"
    return f"{n:,}"


def _human(value: float, _pos=None) -> str:
    from .render import human

    return human(float(value)) if value else "0"


def _flops_axis(ax, label: str) -> None:
    from matplotlib.ticker import EngFormatter

    ax.yaxis.set_major_formatter(EngFormatter(unit="FLOP", sep=" "))
    ax.set_ylabel(label)


def _x_axis(ax, xs: list[int], axis: str) -> bool:
    """A numeric x axis for a sweep: log (base 2) when the values span 8x or more and start above 0."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    log = min(xs) > 0 and max(xs) >= 8 * min(xs)
    if log:
        ax.set_xscale("log", base=2)
    distinct = sorted(set(xs))
    if len(distinct) <= 14:
        ax.xaxis.set_major_locator(FixedLocator(distinct))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: short(int(round(v))) if v >= 1 or v == 0 else ""))
    ax.set_xlabel(AXIS_LABELS[axis])
    return log


def _edges(xs: list[int], log: bool) -> list[tuple[float, float]]:
    """(left, width) of a bar at each x: from halfway to its neighbours (in log space on a log axis), with a gap."""
    f = (lambda v: math.log(v)) if log else float
    g = (lambda v: math.exp(v)) if log else (lambda v: v)
    distinct = sorted(set(xs))
    pos = [f(v) for v in distinct]
    half = {}
    for i, v in enumerate(distinct):
        left = (pos[i] - pos[i - 1]) / 2 if i else None
        right = (pos[i + 1] - pos[i]) / 2 if i + 1 < len(pos) else None
        a = left if left is not None else right if right is not None else (0.35 if log else max(0.35 * v, 0.5))
        b = right if right is not None else a
        half[v] = (0.8 * a, 0.8 * b)
    out = []
    for x in xs:
        a, b = half[x]
        lo, hi = g(f(x) - a), g(f(x) + b)
        out.append((lo, hi - lo))
    return out


def _legend(ax) -> None:
    """The legend beside the axes: the lines first, then the stack in its order on the page (top first)."""
    handles, names = ax.get_legend_handles_labels()
    lines = [i for i, h in enumerate(handles) if not hasattr(h, "patches")]
    bars = [i for i, h in enumerate(handles) if hasattr(h, "patches")][::-1]
    ax.legend([handles[i] for i in lines + bars], [names[i] for i in lines + bars], loc="upper left",
              bbox_to_anchor=(1.01, 1.0))


# ---- colours: one family of hues per kind of component --------------------------------------------------------

_MAPS = {"attention": "Blues", "mlp": "Oranges", "cross_attention": "Purples", "mixer": "Greens", "other": "Greys"}


def _colours(names: list[str], families: dict[str, str]) -> dict[str, Any]:
    """A colour per component: one family of hues per builder family (Inventory.families)."""
    from matplotlib import colormaps

    by_kind: dict[str, list[str]] = {}
    for name in names:
        by_kind.setdefault(families.get(name, "other"), []).append(name)
    out = {}
    for kind, members in by_kind.items():
        cmap = colormaps[_MAPS.get(kind, "Greys")]
        for i, name in enumerate(members):
            out[name] = cmap(0.45 + 0.45 * (i / max(1, len(members) - 1)) if len(members) > 1 else 0.65)
    return out


# ---- count and compare ----------------------------------------------------------------------------------------

def _tick(point) -> str:
    """A model's label on a category axis: its name (the flags given to every model are in the caption) and the
    point's swept values, folded onto short lines."""
    text = point.name or point.model
    lines = textwrap.wrap(text, 16, break_on_hyphens=False) or [text]
    return "\n".join(lines + ([point.describe()] if point.values else []))


def _flags_words(point) -> str:
    fixed = {k: v for k, v in point.overrides.items() if k not in point.values and k != "name"}
    return "; flags on every model: " + ", ".join(f"{k}={v}" for k, v in fixed.items()) if fixed else ""


def _workload_words(result) -> str:
    from .render import describe_workload

    return describe_workload(result.workload)


@_styled
def components_over(pairs: list, axis: str):
    """Forward FLOPs by component, stacked, over one swept workload value (one model): per token over a length
    (the N^2 of attention shows as a growing band), per step over the batch. Over seq_len, a dashed line marks
    where attention (projections + scores + values) overtakes the MLP: CountResult.crossover.seq_len.

    pairs: [(sweep.Point, CountResult)] in sweep order."""
    results = [r for _, r in pairs]
    xs = [p.values[axis] for p, _ in pairs]
    per_token = axis != "batch_size"
    names: list[str] = []
    for r in results:
        names += [n for n in r.components() if r.flops.components.get(n, 0) and n not in names]

    def scaled(value: int, r) -> float:
        return float(Fraction(value, r.workload.tokens)) if per_token else float(value)

    fig, (ax,) = _figure()
    log = _x_axis(ax, xs, axis)
    edges = _edges(xs, log)
    lefts, widths = [e[0] for e in edges], [e[1] for e in edges]
    bottom = [0.0] * len(xs)
    families: dict[str, str] = {}
    for r in results:
        families.update(r.inventory.families())
    colours = _colours(names, families)
    for name in names:
        heights = [scaled(r.flops.components.get(name, 0), r) for r in results]
        top = [b + h for b, h in zip(bottom, heights)]
        if len(xs) <= BARS_UP_TO:  # a bar per point
            ax.bar(lefts, heights, widths, bottom=bottom, align="edge", label=name, color=colours[name],
                   edgecolor="white", linewidth=0.3)
        else:  # a dense sweep: one stepped band per component (one artist, not one per point: 100,000 in seconds)
            ax.fill_between(xs, bottom, top, step="mid", label=name, color=colours[name], linewidth=0)
        bottom = top
    totals = [scaled(r.flops.forward, r) for r in results]
    dense = len(xs) > BARS_UP_TO
    ax.plot(xs, totals, color="0.15", linewidth=0.8, marker=None if dense else ".", markersize=3, label="total",
            gid="total")
    r0 = results[0]
    model = pairs[0][0].model
    what = "per token" if per_token else "per step"
    ax.set_title(f"{model}: forward FLOPs {what}, by component")
    _flops_axis(ax, f"forward FLOPs {what}")
    notes = []
    crossover = r0.crossover.seq_len
    marks = axis in ("seq_len", "tgt_len") and all(r.workload.context == 0 and r.workload.phase != "decode"
                                                   for r in results)
    if marks and crossover is not None and min(xs) <= crossover <= max(xs):
        ax.axvline(crossover, color="0.1", linestyle="--", linewidth=1.0, gid="crossover",
                   label=f"attention ≥ MLP from N = {crossover:,}")
        ax.annotate(f"attention ≥ MLP\nfrom N = {crossover:,}", xy=(crossover, 1), xycoords=("data", "axes fraction"),
                    xytext=(-4, -4), textcoords="offset points", ha="right", va="top", fontsize=8)
    elif marks:
        notes.append(f"Attention (projections + scores + values) overtakes the MLP at N ≥ {crossover:,}, outside "
                     "the range shown.")
    _legend(ax)
    from .render import describe

    varying = f"{axis} {short(min(xs))} to {short(max(xs))}, {len(xs):,} points"
    caption = (f"{r0.spec.label if len(set(p.spec.label for p, _ in pairs)) == 1 else model}: {describe(r0.spec)}.\n"
               f"Workload at the first point: {_workload_words(r0)}; {varying}. FLOPs = 2 per multiply-add, matmuls "
               f"only, attention over every (query, key) pair (the causal mask's saving not taken); "
               f"{'divided by the tokens of the step' if per_token else 'the whole step'}. "
               + "".join(f"{note} " for note in notes) + "tfcalc count.")
    _caption(fig, caption)
    return fig


@_styled
def family(pairs: list, title: str | None = None):
    """Parameters (total, and active where a token uses fewer) and forward FLOPs per token of each model or point:
    a family, a list of presets, a comparison. pairs: [(sweep.Point, CountResult)]."""
    results = [r for _, r in pairs]
    labels = [_tick(p) for p, _ in pairs]
    lengths = {r.workload.seq_len for r in results}
    if len(lengths) > 1 and not any("seq_len" in p.values or "tgt_len" in p.values for p, _ in pairs):
        labels = [f"{label}\nN={r.workload.seq_len:,}" for label, r in zip(labels, results)]
    width = max(9.0, min(16.0, 1.2 + 0.75 * len(pairs) * 2))
    fig, (ax_p, ax_f) = _figure(2, width, 5.0)
    x = list(range(len(pairs)))
    moe = any(r.params.active != r.params.total for r in results)
    w = 0.38 if moe else 0.7
    ax_p.bar([i - w / 2 if moe else i for i in x], [r.params.total for r in results], w, label="total",
             color="#3b6ea5")
    if moe:
        ax_p.bar([i + w / 2 for i in x], [r.params.active for r in results], w, label="active (per token)",
                 color="#9cc3e4")
        ax_p.legend(loc="upper left")
    per_token = [float(Fraction(r.flops.forward, r.workload.tokens)) for r in results]
    ax_f.bar(x, per_token, 0.7, label="forward FLOPs per token", color="#d9822b")
    from matplotlib.ticker import FuncFormatter

    from .render import sci

    for ax, values in ((ax_p, [r.params.total for r in results]), (ax_f, per_token)):
        positive = [v for v in values if v > 0]
        if positive and max(positive) > 30 * min(positive):
            ax.set_yscale("log")
        ax.set_xticks(x, labels, rotation=30 if len(pairs) > 4 else 0, ha="right" if len(pairs) > 4 else "center",
                      fontsize=7.5 if len(pairs) > 6 else 8)
        ax.xaxis.grid(False)
    ax_p.yaxis.set_major_formatter(FuncFormatter(_human))
    ax_p.set_ylabel("parameters")
    ax_p.set_title("Parameters")
    _flops_axis(ax_f, "forward FLOPs per token")
    ax_f.set_title("Forward FLOPs per token")
    for ax, values, fmt in ((ax_p, [r.params.total for r in results], _human), (ax_f, per_token, None)):
        for i, v in enumerate(values):
            text = _human(v) if fmt else sci(v)
            ax.annotate(text, (i - (w / 2 if ax is ax_p and moe else 0), v), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7)
    fig.suptitle(title or f"{len(pairs)} models: parameters and forward FLOPs", fontweight="bold", fontsize=10.5)
    phases = {r.workload.phase for r in results}
    same = "at its own default length" if len(lengths) > 1 else f"at N = {next(iter(lengths)):,}"
    caption = (f"Each model {same}; workload of the first: {_workload_words(results[0])}"
               f"{'' if len(phases) == 1 else ' (phases differ)'}{_flags_words(pairs[0][0])}. Parameters: every "
               "trainable tensor, tied "
               "weights once; active: what one token touches. FLOPs = 2 per multiply-add, matmuls only, "
               "attention over every (query, key) pair, divided by the tokens of the step. tfcalc count / compare.")
    _caption(fig, caption)
    return fig


def counts_kind(n_models: int, axes: dict[str, list[int]]) -> str:
    """Which figure a count or compare sweep makes: 'components' (one model over one swept workload value) or
    'family' (several models, or swept sizes, at one workload); anything else is refused, before any counting."""
    work = [k for k in axes if k in WORKLOAD]
    sizes = [k for k in axes if k not in WORKLOAD]
    if n_models == 1 and not sizes and len(work) == 1:
        return "components"
    if not work:
        return "family"
    given = ", ".join("--" + k.replace("_", "-") for k in axes)
    raise TfcalcError(f"--plot draws one sweep at a time: one model over one of --seq-len, --batch-size, --context, "
                      f"--src-len, --tgt-len, or several models (or sizes) at one workload; got lists on {given}"
                      + (f" for {n_models} models" if n_models > 1 else ""))


def counts_figure(pairs: list, axes: dict[str, list[int]], title: str | None = None):
    """The figure of a count or compare sweep (`counts_kind`): FLOPs by component over the swept value, or the
    family's parameters and FLOPs."""
    if counts_kind(len({p.index for p, _ in pairs}), axes) == "components":
        return components_over(pairs, next(k for k in axes if k in WORKLOAD))
    return family(pairs, title)


# ---- memory ---------------------------------------------------------------------------------------------------

def _memory_parts(m) -> list[tuple[str, int]]:
    if hasattr(m, "kv_cache_bytes"):  # a hybrid's recurrent state beside the KV cache, where it has one
        return [("weights", m.weights_bytes), ("KV cache", m.kv_cache_bytes)] + (
            [("state", m.state_bytes)] if getattr(m, "state_bytes", 0) else [])
    parts = [("weights", m.weights), ("gradients", m.gradients), ("optimizer states", m.optimizer_states)]
    if m.master_weights:
        parts.append(("master weights", m.master_weights))
    if m.fp8_weights:
        parts.append(("FP8 copies + scaling", m.fp8_weights + m.fp8_scaling))
    return parts + [("activations", m.activations)]


_MEMORY_COLOURS = {"weights": "#3b6ea5", "gradients": "#7fa7cf", "optimizer states": "#d9822b",
                   "master weights": "#f0b97a", "FP8 copies + scaling": "#c2a83e",
                   "activations": "#5a9e5a", "KV cache": "#b5524a", "state": "#8e6bb8"}


@_styled
def memory_breakdown(pairs: list, axis: str | None):
    """Memory per GPU stacked by category (weights, gradients, optimizer states, master weights, activations;
    or weights and the KV cache), over one swept value (or across models, axis None), with the GPU's capacity as
    a line and, for training, the peak (estimate) as markers. pairs: [(sweep.Point, plan)], plan an
    InferenceMemory or a TrainingMemory. Heights in GiB."""
    plans = [m for _, m in pairs]
    training = not hasattr(plans[0], "kv_cache_bytes")
    if axis is None:
        labels = [_tick(p) for p, _ in pairs]
    else:
        labels = [f"{p.values[axis]:,}" for p, _ in pairs]
    fig, (ax,) = _figure(1, max(8.0, min(15.0, 3.0 + 0.55 * len(pairs))), 5.0)
    x = list(range(len(pairs)))
    names = [name for name, _ in _memory_parts(plans[0])]
    for m in plans[1:]:
        names += [name for name, _ in _memory_parts(m) if name not in names]
    bottom = [0.0] * len(x)
    for name in names:
        heights = [dict(_memory_parts(m)).get(name, 0) / GiB for m in plans]
        ax.bar(x, heights, 0.7, bottom=bottom, label=name, color=_MEMORY_COLOURS[name], edgecolor="white",
               linewidth=0.4)
        bottom = [b + h for b, h in zip(bottom, heights)]
    if training:
        ax.plot(x, [m.peak / GiB for m in plans], linestyle="none", marker="_", markersize=18, markeredgewidth=2,
                color="0.1", label="peak (estimate: + the step's transients)", gid="peak")
    capacity = plans[0].capacity_bytes
    if capacity is not None:
        gpu = plans[0].gpu_name
        ax.axhline(capacity / GiB, color="#c0392b", linestyle="--", linewidth=1.2, gid="capacity",
                   label=f"{gpu}: {capacity / GiB:,.0f} GiB")
    ax.set_xticks(x, labels, fontsize=8 if len(x) <= 12 else 7, rotation=0 if len(x) <= 12 or axis is None else 45)
    ax.xaxis.grid(False)
    ax.set_xlabel(AXIS_LABELS[axis] if axis else "")
    ax.set_ylabel("memory per GPU (GiB)")
    model = pairs[0][0].model
    m0 = plans[0]
    what = "training, per GPU" if training else f"inference ({m0.workload.phase})"
    ax.set_title(f"{model}: memory, {what}" if axis else f"Memory, {what}")
    _legend(ax)
    from .render import describe, describe_workload

    if training:
        recipe = (f"{m0.precision}, {m0.optimizer}, recompute {m0.recompute}, {m0.layout.describe()}; micro batch "
                  f"B={m0.workload.batch_size} of {m0.workload.seq_len:,} tokens at the first point")
        scope = ("Activations are what each op keeps for backward; the peak adds the backward's and the step's "
                 "transients; the runtime's own memory is not counted.")
    else:
        recipe = (f"weights {m0.dtype}, KV cache {m0.kv_dtype}; first point {describe_workload(m0.workload)}, "
                  f"{m0.workload.keys:,} tokens per sequence in the cache")
        scope = ("Weights and KV cache" + (" and recurrent state (a constant per sequence)"
                                            if any(getattr(m, "state_bytes", 0) for _, m in pairs) else "")
                 + " only: activations and the runtime's own memory are not counted.")
    models = list(dict.fromkeys(p.model for p, _ in pairs))
    first = (f"{m0.spec.label}: {describe(m0.spec)}" if len(models) == 1 else
             f"{', '.join(models)}; the first: {describe(m0.spec)}")
    caption = f"{first}.\n{recipe}. {scope} GiB = 2^30 bytes. tfcalc memory."
    _caption(fig, caption)
    return fig


# ---- roofline -------------------------------------------------------------------------------------------------

def _by_component(phase) -> list[tuple[str, int, int, float]]:
    """(component, FLOPs, bytes, seconds) of a phase's ops, summed by component; ops with no FLOPs left out."""
    sums: dict[str, list] = {}
    for op in phase.ops:
        entry = sums.setdefault(op.component, [0, 0, 0.0])
        entry[0] += op.flops
        entry[1] += op.bytes
        entry[2] += op.seconds
    return [(name, f, b, s) for name, (f, b, s) in sums.items() if f > 0 and b > 0 and s > 0]


def _label_points(ax, points: list[tuple[str, float, float]], colour, span: tuple[float, float],
                  used: dict[int, int]) -> None:
    """Names beside points, with leader lines, off the roof's line: below and to the right of a point in the left
    third of the (log) x range, above and to the left in the right third, alternately in between, each further
    out than the last on its side (`used`: labels already on each side). Points within 12% of each other share
    one label."""
    clusters: list[list] = []
    for name, x, y in sorted(points, key=lambda p: (p[1], p[2])):
        for c in clusters:
            if abs(math.log10(c[1] / x)) < 0.05 and abs(math.log10(c[2] / y)) < 0.05:
                c[0].append(name)
                break
        else:
            clusters.append([[name], x, y])
    lo, hi = (math.log10(v) for v in span)
    for i, (names, x, y) in enumerate(clusters):
        where = (math.log10(x) - lo) / (hi - lo)
        sign = 1 if where < 1 / 3 else -1 if where > 2 / 3 else (1 if i % 2 == 0 else -1)
        step, used[sign] = used[sign], used[sign] + 1
        text = "\n".join(textwrap.wrap(", ".join(names), 30))
        ax.annotate(text, (x, y), xytext=(sign * 8, -sign * (14 + 12 * (step % 4))), textcoords="offset points",
                    fontsize=6.5, color=colour, ha="left" if sign > 0 else "right", va="center",
                    arrowprops={"arrowstyle": "-", "lw": 0.5, "color": colour, "alpha": 0.6})


_SHORT_NAMES = {"batch_size": "B", "seq_len": "N", "context": "context", "src_len": "src_len", "tgt_len": "tgt_len"}


def _point_label(point, axis: str | None) -> str:
    if axis is not None:
        return f"{_SHORT_NAMES.get(axis, axis)}={short(point.values[axis])}"
    return point.model + (f" {point.describe()}" if point.values else "")


@_styled
def roofline(pairs: list, axis: str | None = None):
    """The GPU's roofline (attainable FLOP/s against arithmetic intensity: min(peak, bandwidth x intensity)) with
    the model's prefill and decode placed on it: each component's ops (one point) at a single workload, or each
    phase's whole step at every point of a sweep. pairs: [(sweep.Point, InferencePlan)]."""
    plans = [plan for _, plan in pairs]
    p0 = plans[0]
    peak, bandwidth = p0.peak, p0.gpu.bandwidth_bytes_per_s
    ridge = peak / bandwidth
    points: list[tuple[str, float, float, str]] = []  # (label, intensity, FLOP/s, phase)
    if len(plans) == 1:
        for phase in (p0.prefill, p0.decode):
            for name, f, b, s in _by_component(phase):
                points.append((name, f / b, f / s, phase.phase))
    fig, (ax,) = _figure(1, 9.0, 5.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = [p[1] for p in points] + [ph.flops / ph.bytes for pl in plans for ph in (pl.prefill, pl.decode)]
    lo = min(min(xs) / 4, ridge / 100)
    hi = max(max(xs) * 4, ridge * 20)
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(peak, bandwidth * i) for i in grid], color="0.15", linewidth=1.6, gid="roof",
            label=f"roof: {peak / 1e12:,.0f} TFLOP/s, {bandwidth / 1e12:,.2f} TB/s")
    ax.axvline(ridge, color="0.5", linestyle=":", linewidth=1.0, gid="ridge", label=f"ridge: {ridge:,.0f} FLOPs/byte")
    styles = {"prefill": ("#3b6ea5", "o"), "decode": ("#c0392b", "s")}
    used = {1: 0, -1: 0}  # labels on each side of the points, both phases together
    for phase in ("prefill", "decode"):
        colour, marker = styles[phase]
        ops = [p for p in points if p[3] == phase]
        if ops:
            ax.plot([p[1] for p in ops], [p[2] for p in ops], linestyle="none", marker=marker, markersize=5,
                    color=colour, alpha=0.75, label=f"{phase}: ops by component", gid=f"{phase}-ops")
            _label_points(ax, [(name, x, y) for name, x, y, _ in ops], colour, (lo, hi), used)
        steps = [getattr(pl, phase) for pl in plans]
        ax.plot([s.flops / s.bytes for s in steps], [s.flops / s.seconds for s in steps], linestyle="-" if
                axis is not None else "none", linewidth=0.8, marker=marker, markersize=9, markerfacecolor="white",
                markeredgewidth=1.8, color=colour, label=f"{phase}: whole step", gid=f"{phase}-step")
        if len(plans) > 1:
            _label_points(ax, [(_point_label(pt, axis), s.flops / s.bytes, s.flops / s.seconds)
                               for (pt, _), s in zip(pairs, steps)], colour, (lo, hi), used)
    ax.set_xlim(lo, hi)
    ymin = min([p[2] for p in points] + [s.flops / s.seconds for pl in plans for s in (pl.prefill, pl.decode)])
    ax.set_ylim(min(ymin / 3, bandwidth * lo), peak * 10)  # room above the roof for labels
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    from matplotlib.ticker import EngFormatter

    ax.yaxis.set_major_formatter(EngFormatter(unit="FLOP/s", places=0, sep=" "))
    ax.set_ylabel("attainable FLOP/s")
    models = list(dict.fromkeys(p.model for p, _ in pairs))
    model = models[0] if len(models) == 1 else f"{len(models)} models"
    gpus = sorted({getattr(plan, "tp", 1) for plan in plans})
    where = p0.gpu.name if gpus == [1] else (f"each of {gpus[0]} tensor-parallel {p0.gpu.name}s" if len(gpus) == 1
                                             else f"one {p0.gpu.name} of each tensor-parallel group")
    title = f"{model} on {where} ({p0.dtype}): prefill and decode on the roofline"
    ax.set_title(title if len(title) <= 90 else title.replace(": ", ":\n", 1))  # two lines rather than cut
    ax.legend(loc="lower right")
    from .render import describe

    pre, dec = p0.prefill.workload, p0.decode.workload
    sweep = f"; labels: {axis} at each point" if axis else ""
    first = (f"{p0.spec.label if axis is None else model}: {describe(p0.spec)}" if len(models) == 1 else
             f"{', '.join(models)}; the first: {describe(p0.spec)}")
    several = " (first point)" if len(plans) > 1 else ""
    caption = (f"{first}.\n"
               f"Prefill: B={pre.batch_size} x {pre.seq_len:,} prompt tokens; decode: B={dec.batch_size} x 1 token "
               f"against {dec.context:,} cached{several}{sweep}. Each op's time is "
               f"max(FLOPs / peak, bytes / bandwidth) against the dense datasheet peak ({p0.dtype}) and bandwidth, "
               "so every op sits on the roof; a component's point sums its ops (an activation counts with its matmul's "
               "component) and a step's point sums them all, so either may sit under it. Norms and residual adds (no "
               "matmul FLOPs) are off the chart. A bound, not a measurement. tfcalc infer.")
    _caption(fig, caption)
    return fig


@_styled
def profile_times(results: list):
    """profile's measured step time (median, with the fastest and slowest steps as a range) against the predicted
    time (analytic FLOPs over the measured GEMM peak; and each matmul at its own shape's rate) over N, one model.

    results: [profile.ProfileResult] in sweep order."""
    xs = [r.spec.seq_len for r in results]
    fig, (ax, ratio_ax) = _figure(ncols=2, width=10.0, height=4.6)
    log = _x_axis(ax, xs, "seq_len")
    _x_axis(ratio_ax, xs, "seq_len")
    ms = [r.time.median * 1000 for r in results]
    low = [m - r.time.min * 1000 for m, r in zip(ms, results)]
    high = [r.time.max * 1000 - m for m, r in zip(ms, results)]
    ax.errorbar(xs, ms, yerr=[low, high], color="C0", marker="o", markersize=4, linewidth=1.2, capsize=3,
                label="measured (median; min to max)", gid="measured")
    ax.plot(xs, [r.predicted_time_s * 1000 for r in results], color="0.2", linestyle="--", marker=".",
            linewidth=1.0, label="predicted: FLOPs / measured GEMM peak", gid="predicted")
    ax.plot(xs, [r.predicted_by_shape_s * 1000 for r in results], color="C1", linestyle=":", marker=".",
            linewidth=1.0, label="predicted: each matmul at its shape's rate", gid="predicted_by_shape")
    if log:
        from matplotlib.ticker import FuncFormatter

        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _pos: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
    ax.set_ylabel("time per step (ms)")
    r0 = results[0]
    model = (r0.spec.name or "model").split(" (")[0]
    fig.suptitle(f"{model}: measured against predicted step time over N", fontweight="bold", fontsize=10.5)
    ax.set_title("time per step")
    ratio_ax.plot(xs, [r.time.median / r.predicted_time_s for r in results], color="C0", marker="o", markersize=4,
                  linewidth=1.2, gid="ratio")
    ratio_ax.axhline(1.0, color="0.3", linewidth=0.8)
    ratio_ax.set_ylabel("measured / predicted")
    ratio_ax.set_title("measured / predicted (1: the FLOPs explain it)")
    ax.legend(loc="upper left")
    from .render import describe

    where = f"{r0.device_name} ({r0.device}), {r0.dtype}, {r0.mode}{', torch.compile' if r0.compiled else ''}"
    caption = (f"{r0.spec.label}: {describe(r0.spec)}.\nMeasured on {where}, B={r0.spec.batch_size}, "
               f"N {short(min(xs))} to {short(max(xs))}, {len(xs)} points. Predicted time = analytic FLOPs of the "
               "step (2 per multiply-add) / the fastest of the model's GEMM shapes timed on the same device. "
               "tfcalc profile.")
    _caption(fig, caption)
    return fig

