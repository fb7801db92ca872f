"""Rich tables, CSV, Markdown and JSON: the only place numbers are scaled to readable units.

Builders return plain tables (a title, a header and rows of strings); `to_rich`, `to_markdown` and the CSV
writer draw the same tables, so every output format shows the same figures.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .counts import CountResult
from .spec import ModelSpec


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


# ---- numbers --------------------------------------------------------------------------------------

def human(n: int | float) -> str:
    """Parameters and other counts: 174.6B, 124.4M, 3.1K, 512."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{suffix}"
    return f"{n:,}" if isinstance(n, int) else f"{n:.3g}"


def sci(n: int | float) -> str:
    """FLOPs: 3.67e14 (three significant figures, exponent without padding)."""
    if n == 0:
        return "0"
    mantissa, exponent = f"{n:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def exact(n: int | float) -> str:
    return f"{n:,}" if isinstance(n, int) else f"{n:,.3f}"


def pct(x: float) -> str:
    return "<0.1%" if 0 < x < 0.0005 else f"{100 * x:.1f}%"


def bar(share: float, width: int = 12) -> str:
    eighths = round(share * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + ("" if part == 0 else " ▏▎▍▌▋▊▉"[part])


# ---- plain tables ---------------------------------------------------------------------------------

@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""
    right: set[int] = field(default_factory=set)  # right-aligned (numeric) columns


def describe(spec: ModelSpec) -> str:
    layers = [f"L={spec.n_encoder_layers}+{spec.n_layers} (encoder+decoder)"] if spec.is_encoder_decoder else [
        f"L={spec.n_layers}"]
    parts = [*layers, f"D={spec.d_model}", f"H={spec.n_heads}", f"d_head={spec.d_head}"]
    if spec.n_kv_heads != spec.n_heads:
        parts.append(f"kv_heads={spec.n_kv_heads}")
    parts += [f"d_ff={spec.d_ff}", f"V={spec.vocab_size}", f"N={spec.seq_len}", f"B={spec.batch_size}"]
    if spec.is_moe:
        parts.append(f"experts={spec.n_experts} top_k={spec.top_k}")
        if spec.n_shared_experts:
            parts.append(f"shared={spec.n_shared_experts}")
        if spec.first_dense_layers:
            parts.append(f"first {spec.first_dense_layers} dense")
        if spec.moe_every != 1:
            parts.append(f"MoE every {spec.moe_every}")
    if spec.sliding_window is not None:
        where = ("/".join(spec.attention_pattern) if spec.attention_pattern is not None
                 else f"last {spec.sliding_window_layers}" if spec.sliding_window_layers is not None else "all")
        parts.append(f"window={spec.sliding_window} ({where})")
    kind = ("encoder-decoder with cross-attention" if spec.is_encoder_decoder
            else "causal" if spec.causal else "bidirectional")
    parts.append(f"{spec.mlp} MLP ({spec.activation}), {spec.norm} {spec.norm_position}-norm, "
                 f"{spec.positions} positions, {kind}")
    return " ".join(parts[:-1]) + "; " + parts[-1]


def describe_workload(w) -> str:
    """'train: B=1 N=1024 tokens' / 'decode: B=1, 1 new token against 8,192 cached (8,193 keys)'."""
    src = f", encoder {w.src_len:,} tokens" if w.src_len is not None and w.phase != "decode" else (
        f", encoder output of {w.src_len:,} cached" if w.src_len is not None else "")
    new = f"{w.seq_len:,} new token{'s' if w.seq_len != 1 else ''}"
    if w.context:
        new += f" against {w.context:,} cached ({w.keys:,} keys)"
    scored = {"train": "head over every token", "prefill": "head over the last token",
              "decode": "head over the new token"}[w.phase]
    return f"{w.phase}: B={w.batch_size}, {new}{src}; {scored}"


def summary_table(result: CountResult) -> Table:
    p, f, m = result.params, result.flops, result.macs
    rows = [
        ["parameters", "total", exact(p.total), human(p.total)],
        ["", "active (per token)", exact(p.active), human(p.active)],
        ["", "embedding", exact(p.embedding), human(p.embedding)],
        ["", "non-embedding", exact(p.non_embedding), human(p.non_embedding)],
        ["FLOPs", "forward", exact(f.forward), sci(f.forward)],
        ["", "backward (2x)", exact(f.backward), sci(f.backward)],
        ["", "train step (3x)", exact(f.train_step), sci(f.train_step)],
        ["", "forward per token", exact(f.per_token), sci(f.per_token)],
        ["", "forward, causal attention", exact(f.forward_causal), sci(f.forward_causal)],
        ["MACs", "forward", exact(m.forward), sci(m.forward)],
    ]
    if result.workload.phase != "train":  # no backward pass in inference (--json keeps every figure)
        rows = [row for row in rows if row[1] not in ("backward (2x)", "train step (3x)")]
    if f.forward_windowed is not None:
        rows.insert(len(rows) - 1, ["", "forward, sliding windows", exact(f.forward_windowed),
                                    sci(f.forward_windowed)])
    w = result.workload
    caption = (f"FLOPs = 2 per multiply-add; MACs = multiply-adds (fvcore's 'flops'). Forward ({w.phase}): matmuls "
               f"over {w.batch_size} x {w.seq_len} new tokens, attention over every (query, key) pair "
               f"({w.seq_len:,} x {w.keys:,} per head); the causal figure counts the pairs the mask keeps.")
    return Table("Summary", ["", "figure", "exact", "readable"], rows, caption, right={2, 3})


def component_table(result: CountResult) -> Table:
    params, fwd, macs = result.params.components, result.flops.components, result.macs.components
    names = result.components()  # in model order, from the inventory
    total_p, total_f = params.total, fwd.total
    biggest = max(fwd.values())
    rows = []
    for name in names:
        p, f = params.get(name, 0), fwd.get(name, 0)
        rows.append([name, exact(p) if p else "-", pct(p / total_p) if p else "", sci(f) if f else "-",
                     exact(macs.get(name, 0)) if f else "-", pct(f / total_f) if f else "", bar(f / biggest)])
    rows.append(["total", exact(total_p), "100.0%", sci(total_f), exact(result.macs.forward), "100.0%", ""])
    caption = "params and FLOPs summed over all layers."
    if result.spec.lm_head and result.spec.tie_embeddings:
        caption += " The head is tied to the token embedding: its weights are counted there, its FLOPs here."
    return Table("Components", ["component", "params", "% params", "forward FLOPs", "forward MACs", "% FLOPs",
                                "FLOPs share"], rows, caption, right={1, 2, 3, 4, 5})


def estimates_table(result: CountResult) -> Table:
    rows = [[e.name, e.formula, sci(e.value), f"{e.compared_with} {sci(e.exact)}", f"{e.ratio:.4f}"]
            for e in result.estimates]
    return Table("Published estimates against the exact count", ["estimate", "formula", "estimate",
                 "exact", "ratio"], rows, "ratio = estimate / exact", right={2, 3, 4})


def non_matmul_table(result: CountResult) -> Table:
    nm, forward = result.non_matmul, result.flops.forward
    rows = [[name, sci(v), pct(v / forward)] for name, v in nm.items()]
    rows.append(["total", sci(nm.total), pct(nm.total / forward)])
    return Table("Non-matmul work (estimate; not in forward)", ["work", "FLOPs", "of forward"], rows,
                 "per-element costs are rough constants (docs/formulas.md); shown for scale only", right={1, 2})


def crossover_line(result: CountResult) -> str:
    c, w = result.crossover, result.workload
    new = f"{w.seq_len:,} new token{'s' if w.seq_len != 1 else ''}"
    at = f"N = {w.seq_len:,}" if not w.context else f"{new} against {w.keys:,} keys"
    return (f"Attention (projections + scores + values) overtakes the MLP at N >= {c.seq_len:,}. "
            f"At {at}: attention {pct(c.attention_share)} of block FLOPs (scores + values "
            f"{pct(c.quadratic_share)}), MLP {pct(c.mlp_share)}.")


def count_tables(result: CountResult) -> list[Table]:
    return [summary_table(result), component_table(result), estimates_table(result), non_matmul_table(result)]


COMPARE_ROWS: list[tuple[str, str, Any]] = [
    ("n_layers", "layers", lambda r: r.spec.n_layers),
    ("n_encoder_layers", "encoder layers", lambda r: r.spec.n_encoder_layers),
    ("d_model", "d_model", lambda r: r.spec.d_model),
    ("n_heads", "heads", lambda r: r.spec.n_heads),
    ("n_kv_heads", "kv heads", lambda r: r.spec.n_kv_heads),
    ("d_ff", "d_ff", lambda r: r.spec.d_ff),
    ("vocab_size", "vocab", lambda r: r.spec.vocab_size),
    ("phase", "phase", lambda r: r.workload.phase),
    ("seq_len", "seq_len (new tokens)", lambda r: r.workload.seq_len),
    ("context", "context (cached)", lambda r: r.workload.context),
    ("batch_size", "batch", lambda r: r.workload.batch_size),
    ("n_experts", "experts", lambda r: r.spec.n_experts),
    ("top_k", "top-k", lambda r: r.spec.top_k),
    ("params.total", "params total", lambda r: r.params.total),
    ("params.active", "params active", lambda r: r.params.active),
    ("params.embedding", "params embedding", lambda r: r.params.embedding),
    ("params.non_embedding", "params non-embedding", lambda r: r.params.non_embedding),
    ("flops.forward", "FLOPs forward", lambda r: r.flops.forward),
    ("flops.forward_causal", "FLOPs forward, causal", lambda r: r.flops.forward_causal),
    ("flops.train_step", "FLOPs train step", lambda r: r.flops.train_step),
    ("flops.per_token", "FLOPs per token (fwd)", lambda r: r.flops.per_token),
    ("macs.forward", "MACs forward", lambda r: r.macs.forward),
    ("attention_overtakes_mlp_at_seq_len", "attention > MLP from N", lambda r: r.crossover.seq_len),
    ("attention_share", "attention share", lambda r: r.crossover.attention_share),
]


def compare_table(results: list[CountResult], labels: list[str], readable: bool) -> Table:
    rows = []
    for key, title, get in COMPARE_ROWS:
        values = [get(r) for r in results]
        if not readable:
            rows.append([key, *map(str, values)])
        elif key.startswith(("flops", "macs")):
            rows.append([title, *map(sci, values)])
        elif key.startswith("params"):
            rows.append([title, *map(human, values)])
        elif key == "attention_share":
            rows.append([title, *map(pct, values)])
        else:
            rows.append([title, *(v if isinstance(v, str) else f"{v:,}" for v in values)])
    caption = ("FLOPs = 2 per multiply-add, matmuls only, attention over every (query, key) pair; exact integers: "
               "--format json or csv")
    return Table("Comparison", ["figure", *labels], rows, caption, right=set(range(1, len(labels) + 1)))


def presets_table(entries: list[tuple[str, str, CountResult, str]]) -> Table:
    rows = [[name, desc, human(r.params.total), human(r.params.active) if r.params.active != r.params.total else "",
             f"{r.spec.seq_len:,}", sci(r.flops.forward), source]
            for name, desc, r, source in entries]
    return Table("Presets", ["preset", "model", "params", "active", "seq_len", "forward FLOPs", "source"], rows,
                 "forward FLOPs at the preset's seq_len, batch 1; `tfcalc count --preset NAME` for the breakdown",
                 right={2, 3, 4, 5})


# ---- drawing --------------------------------------------------------------------------------------

def to_rich(table: Table):
    from rich.table import Table as RichTable

    t = RichTable(title=table.title, caption=table.caption or None, title_justify="left", caption_justify="left")
    for i, column in enumerate(table.columns):
        t.add_column(column, justify="right" if i in table.right else "left",
                     overflow="fold", no_wrap=column not in ("source", "formula", "model"))
    for row in table.rows:
        t.add_row(*row)
    return t


def to_markdown(table: Table) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    align = ["---:" if i in table.right else "---" for i in range(len(table.columns))]
    out = [f"**{table.title}**", "", line(table.columns), "| " + " | ".join(align) + " |"]
    out += [line(row) for row in table.rows]
    if table.caption:
        out += ["", f"_{table.caption}_"]
    return "\n".join(out)


def to_json(data: dict) -> str:
    return json.dumps(data, indent=2)


def flatten(data: dict, prefix: str = "") -> list[tuple[str, Any]]:
    """{"params": {"total": 1}} -> [("params.total", 1)]: the JSON's figures as rows, for CSV."""
    rows = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows += flatten(value, name + ".")
        else:
            rows.append((name, value))
    return rows


def to_csv(header: list[str], rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


# ---- check ----------------------------------------------------------------------------------------

def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def _difference(*values: int) -> str:
    spread = max(values) - min(values)
    return "0" if spread == 0 else f"{spread:,} ({spread / max(max(values), 1):.2%})"


def check_tables(report) -> list[Table]:
    """The forward and parameter comparisons of a verify.CheckReport (and the train step, if counted)."""
    forward = Table("Forward FLOPs: analytic | torch FlopCounterMode | fvcore x 2",
                    ["component", "analytic", "FlopCounterMode", "fvcore x 2", "", "difference"], right={1, 2, 3, 5})
    for r in report.forward:
        forward.rows.append([r.component, exact(r.analytic), exact(r.flop_counter), exact(2 * r.fvcore_macs),
                             _mark(r.match), _difference(r.analytic, r.flop_counter, 2 * r.fvcore_macs)])
    totals = [report.total(report.forward, a) for a in ("analytic", "flop_counter", "fvcore_macs")]
    forward.rows.append(["total", exact(totals[0]), exact(totals[1]), exact(2 * totals[2]),
                         _mark(all(r.match for r in report.forward)), _difference(totals[0], totals[1], 2 * totals[2])])
    forward.caption = ("FLOPs = 2 per multiply-add; fvcore counts multiply-adds, shown doubled. .../core = "
                       "scores + value mixing (one SDPA call), over every (query, key) pair.")
    params = Table("Parameters: analytic | sum(p.numel()) | fvcore parameter_count",
                   ["component", "analytic", "model", "fvcore", "", "difference"], right={1, 2, 3, 5})
    for r in report.params:
        params.rows.append([r.component, exact(r.analytic), exact(r.model), exact(r.fvcore), _mark(r.match),
                            _difference(r.analytic, r.model, r.fvcore)])
    p_totals = [report.total(report.params, a) for a in ("analytic", "model", "fvcore")]
    params.rows.append(["total", *map(exact, p_totals), _mark(all(r.match for r in report.params)),
                        _difference(*p_totals)])
    tables = [forward, params]
    if report.train is not None:
        t = report.train
        tables.append(Table("Train step (forward + backward): analytic 3 x forward | FlopCounterMode",
                            ["", "analytic", "FlopCounterMode", "", "difference"],
                            [["train step", exact(t.analytic), exact(t.flop_counter), _mark(t.match),
                              _difference(t.analytic, t.flop_counter)]], right={1, 2, 4}))
    return tables


def check_lines(report) -> list[str]:
    spec = report.spec
    lines = [f"{spec.label}: {describe(spec)}", f"workload: {describe_workload(report.workload)}",
             f"device: {report.device}"]
    if report.routing:
        lines.append(f"MoE routing: {report.routing}")
    lines += [f"note: {note}" for note in report.notes]
    if report.uncounted_ops:
        ops = ", ".join(f"{op} x{n}" for op, n in report.uncounted_ops.items())
        lines.append(f"counted by neither (non-matmul; FlopCounterMode counts only matmul, conv and attention "
                     f"kernels; fvcore reports these as unsupported): {ops}")
    return lines


def check_verdict(report) -> str:
    rows = [*report.forward, *report.params, *([report.train] if report.train else [])]
    bad = [getattr(r, "component", "train step") for r in rows if not r.match]
    if not bad:
        return f"MATCH: all {len(rows)} rows agree exactly."
    return f"MISMATCH in {len(bad)} of {len(rows)} rows: {', '.join(bad)}"


# ---- profile --------------------------------------------------------------------------------------

def seconds(s: float) -> str:
    return f"{s * 1000:.2f} ms" if s < 1 else f"{s:.3f} s"


def rate(flops_per_s: float | None) -> str:
    return "-" if flops_per_s is None else f"{flops_per_s / 1e12:.2f} TFLOP/s"


def profile_lines(result) -> list[str]:
    lines = [f"{result.spec.label}: {describe(result.spec)}",
             f"device: {result.device} ({result.device_name}), dtype {result.dtype}, mode {result.mode}"
             f"{', torch.compile' if result.compiled else ''}"]
    if result.cpu_allocator:
        lines.append(f"allocator: {result.cpu_allocator}")
    if result.layers_profiled:
        lines.append(f"extrapolated: blocks 1 and {result.layers_profiled} were timed; the full "
                     f"{result.spec.n_layers}-block time is t(1) + (L - 1) x per-block time")
    if result.interrupted:
        lines.append(f"interrupted: {result.time.repeats} timed steps")
    return lines


def profile_table(result) -> Table:
    t, m, k, n = result.time, *result.gemm.shape
    rows = [
        ["time per step", f"{seconds(t.median)} (min {seconds(t.min)}, max {seconds(t.max)}, {t.repeats} runs)"],
        ["tokens/s", f"{result.tokens_per_s:,.0f}"],
        ["FLOPs per step (analytic)", f"{exact(result.flops)} ({sci(result.flops)})"],
        ["achieved", rate(result.achieved_flops_per_s)],
    ]
    if result.flops_causal is not None:
        rows.append(["achieved, causal FLOPs", rate(result.achieved_causal_flops_per_s)])
    rows += [
        ["peak, measured GEMM", f"{rate(result.gemm.flops_per_s)} ([{m}, {k}] @ [{k}, {n}], the model's fastest)"],
        ["largest matmul, measured", f"{rate(result.gemm_largest.flops_per_s)} ([{result.gemm_largest.shape[0]}, "
                                     f"{result.gemm_largest.shape[1]}] @ [{result.gemm_largest.shape[1]}, "
                                     f"{result.gemm_largest.shape[2]}])"],
        ["MFU (measured peak)", pct(result.mfu)],
        ["predicted time (FLOPs / measured peak)",
         f"{seconds(result.predicted_time_s)} (measured / predicted = {t.median / result.predicted_time_s:.2f})"],
        ["predicted (matmuls at own rates)", f"{seconds(result.predicted_by_shape_s)} (measured / predicted"
                                             f" = {t.median / result.predicted_by_shape_s:.2f})"],
    ]
    if result.datasheet_peak is not None:
        rows += [
            ["peak, datasheet", f"{rate(result.datasheet_peak)} ({result.datasheet.source}, {result.dtype})"],
            ["MFU (datasheet peak)", pct(result.mfu_datasheet)],
            ["predicted time (FLOPs / datasheet peak)", seconds(result.predicted_time_datasheet_s)],
        ]
    else:
        rows.append(["peak, datasheet", "- (no datasheet figure for this device)"])
    rows.append(["peak memory", f"{human(result.peak_memory_bytes)}B" if result.device == "cpu"
                 else f"{result.peak_memory_bytes / 2**30:.2f} GiB"])
    caption = ("FLOPs = 2 per multiply-add, matmuls only, full N x N attention; MFU = achieved / peak, the GEMMs "
               "timed in turn with the steps. "
               + ("CPU memory: growth of the process's peak RSS." if result.device == "cpu"
                  else "GPU memory: torch.cuda.max_memory_allocated, less the GEMM buffers."))
    return Table(f"Profile at N = {result.spec.seq_len:,}", ["figure", "value"], rows, caption)


def profile_sweep_table(results) -> Table:
    rows = [[f"{r.spec.seq_len:,}", seconds(r.time.median), seconds(r.predicted_time_s),
             f"{r.time.median / r.predicted_time_s:.2f}", pct(r.mfu), f"{r.tokens_per_s:,.0f}"] for r in results]
    return Table("Measured against predicted, per N", ["N", "measured", "predicted", "measured / predicted", "MFU",
                                                       "tokens/s"], rows,
                 "predicted = analytic FLOPs / measured GEMM peak; the N^2 attention term shows as N grows",
                 right={0, 1, 2, 3, 4, 5})
