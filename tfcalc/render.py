"""Rich tables, CSV, Markdown and JSON: the only place numbers are scaled to readable units.

Builders return plain tables (a title, a header and rows of strings); `to_rich`, `to_markdown` and the CSV
writer draw the same tables, so every output format shows the same figures. `layout` fits a table to a
terminal's width without ever cutting a number: it leaves columns out, shows readable units or stacks the rows,
and says so under the table. Integers of any size are scaled with integer arithmetic, never through float.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction
from collections.abc import Iterable, Iterator
from typing import Any, Callable

from .counts import CountResult
from .spec import ModelSpec


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


# ---- numbers --------------------------------------------------------------------------------------
# Counts are exact integers of any size (10^300 is a valid size): integers are scaled with integer arithmetic,
# never through float, which overflows past 1.8e308.

def _round_half_even(numerator: int, denominator: int) -> int:
    """numerator / denominator to the nearest integer, ties to even (as Python formats floats); denominator > 0."""
    q, r = divmod(numerator, denominator)
    return q + (1 if 2 * r > denominator or (2 * r == denominator and q % 2) else 0)


def _significant(n: int, figures: int) -> tuple[int, int]:
    """n > 0 -> (m, e) with n ~ m * 10**(e - figures + 1) and 10**(figures - 1) <= m < 10**figures."""
    e = len(str(n)) - 1
    shift = e - figures + 1
    m = n * 10**-shift if shift < 0 else _round_half_even(n, 10**shift)
    if m >= 10**figures:  # 9995 -> 1000 (x 10): the mantissa rolled over
        m, e = m // 10, e + 1
    return m, e


def sci(n: int | float) -> str:
    """FLOPs: 3.67e14 (three significant figures, exponent without padding); exact integers of any size."""
    if n == 0:
        return "0"
    if isinstance(n, float):
        mantissa, exponent = f"{n:.2e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    m, e = _significant(abs(n), 3)
    return f"{'-' if n < 0 else ''}{m // 100}.{m % 100:02d}e{e}"


def human(n: int | float) -> str:
    """Parameters and other counts: 174.6B, 124.4M, 3.1K, 512; from 1000T on, 1.00e15."""
    if isinstance(n, int) and abs(n) >= 10**15:
        return sci(n)
    units = ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K"))
    for i, (scale, suffix) in enumerate(units):
        if abs(n) >= scale:
            if isinstance(n, float):
                return f"{n / scale:.1f}{suffix}"
            tenths = _round_half_even(abs(n) * 10, scale)
            if tenths >= 10_000:  # 999,960 rounds to 1000.0K: say 1.0M
                return sci(n) if i == 0 else f"{'-' if n < 0 else ''}1.0{units[i - 1][1]}"
            return f"{'-' if n < 0 else ''}{tenths // 10}.{tenths % 10}{suffix}"
    return f"{n:,}" if isinstance(n, int) else f"{n:.3g}"


def exact(n: int | float) -> str:
    return f"{n:,}" if isinstance(n, int) else f"{n:,.3f}"


def amount(x: float | Fraction) -> str:
    """Days, GPU-hours, a cost: whole units with thousands separators from 100 up, three significant figures below
    (0.0956, 2.53, 43.1), never a small figure shown as 0."""
    x = float(x)
    if x == 0 or abs(x) >= 100:
        return f"{x:,.0f}"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def pct(x: float | Fraction) -> str:
    """A share as a percentage; pass Fraction(part, whole) for counts (no float division of huge integers)."""
    return "<0.1%" if 0 < x < Fraction(1, 2000) else f"{float(100 * x):.1f}%"


def share(part: int, whole: int) -> Fraction:
    """part / whole, exactly (both may be far beyond a float's range)."""
    return Fraction(part, whole) if whole else Fraction(0)


def ratio(q: Fraction) -> str:
    """A ratio to 4 decimals; past 10^15, in scientific form (a float cannot hold every ratio of huge counts)."""
    return f"{float(q):.4f}" if q < 10**15 else sci(round(q))


def bar(share: float | Fraction, width: int = 12) -> str:
    eighths = round(share * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + ("" if part == 0 else " ▏▎▍▌▋▊▉"[part])


def binary_bytes(n: int) -> str:
    """Memory: 1.07 GiB, 12.35 MiB, 512 B (binary units: GiB = 2^30 bytes)."""
    for power, unit in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 2**power:
            hundredths = _round_half_even(100 * n, 2**power)
            return f"{hundredths // 100}.{hundredths % 100:02d} {unit}"
    return f"{n} B"


# ---- plain tables ---------------------------------------------------------------------------------

@dataclass
class Table:
    """A title, a header, rows of strings and a caption, and what a narrow terminal may do with them (`layout`)."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""
    right: set[int] = field(default_factory=set)  # right-aligned columns
    numeric: set[int] | None = None  # numbers (and bars): never wrapped nor cut; None: the right-aligned columns
    optional: list[int] = field(default_factory=list)  # columns a narrow terminal may leave out, first to go first
    units: dict[int, Callable[[int], str]] = field(default_factory=dict)  # exact-integer columns: readable form
    aside: int | None = None  # a long text column a narrow terminal prints under the table, "label: text" per row
    by_column: str = ""  # what a column is ("model"): split or stacked, one block per column, not per row
    label_columns: int = 1  # leading columns that name a row (a blank first cell repeats the one above)

    def numeric_columns(self) -> set[int]:
        return self.right if self.numeric is None else self.numeric


def describe(spec: ModelSpec, workload: bool = True) -> str:
    """The model in one line; `workload=False` leaves out its default workload (N, B) where another workload is
    counted and described below it (memory, infer): the header shows what was counted, not the preset's length."""
    layers = [f"L={spec.n_encoder_layers}+{spec.n_layers} (encoder+decoder)"] if spec.is_encoder_decoder else [
        f"L={spec.n_layers}"]
    parts = [*layers, f"D={spec.d_model}", f"H={spec.n_heads}", f"d_head={spec.d_head}"]
    if spec.n_kv_heads != spec.n_heads:
        parts.append(f"kv_heads={spec.n_kv_heads}")
    global_parts = [f"d_head={spec.global_d_head}"] if spec.global_d_head not in (None, spec.d_head) else []
    if spec.global_n_kv_heads not in (None, spec.n_kv_heads):
        global_parts.append(f"kv_heads={spec.global_n_kv_heads}")
    if spec.global_k_eq_v:
        global_parts.append("k=v")
    if global_parts:  # Gemma 4: the global blocks' own attention shape
        parts.append(f"(global blocks: {' '.join(global_parts)})")
    if getattr(spec, "is_mla", False):  # multi-head latent attention: d_head = qk_nope + qk_rope
        parts.append(f"MLA(kv_lora={spec.kv_lora_rank} q_lora={spec.q_lora_rank} qk={spec.qk_nope_dim}+"
                     f"{spec.qk_rope_dim} v={spec.v_head_dim})")
    parts += [f"d_ff={spec.d_ff}"] + ([f"V={spec.vocab_size}"] if spec.vocab_size is not None else [])
    if getattr(spec, "inputs", "tokens") == "images":  # ViT: its patches
        patches = spec.sizes("patch_embedding")
        parts.append(f"images {patches.height}x{patches.width}x{patches.channels} patch={patches.patch_size}")
    if getattr(spec, "inputs", "tokens") == "audio":  # Whisper: its encoder's mel frames and positions
        audio = spec.sizes("audio_conv")
        parts.append(f"audio mel={audio.mel_bins} encoder positions={audio.positions}")
    if workload:
        parts += [f"N={spec.seq_len}", f"B={spec.batch_size}"]
    elif spec.positions == "learned" and spec.max_positions is not None:
        parts.append(f"positions={spec.max_positions}")
    if spec.is_moe:
        parts.append(f"experts={spec.n_experts} top_k={spec.top_k}"
                     + (" beside the MLP" if getattr(spec, "moe_beside_mlp", False) else ""))
        if spec.n_shared_experts:
            parts.append(f"shared={spec.n_shared_experts}")
        if spec.first_dense_layers:
            parts.append(f"first {spec.first_dense_layers} dense")
        if spec.moe_every != 1:
            parts.append(f"MoE every {spec.moe_every}")
    if spec.block_pattern is not None:
        parts.append(f"blocks {'/'.join(spec.block_pattern)}")
        for name, sizes in spec.used_sizes().items():
            parts.append(f"{name} " + " ".join(f"{k}={v}" for k, v in sizes.model_dump().items() if v is not None))
    if spec.sliding_window is not None:
        where = ("/".join(spec.attention_pattern) if spec.attention_pattern is not None
                 else f"last {spec.sliding_window_layers}" if spec.sliding_window_layers is not None else "all")
        parts.append(f"window={spec.sliding_window} ({where})")
    if getattr(spec, "attention_chunk_size", None) is not None:
        where = "/".join(spec.attention_pattern) if spec.attention_pattern is not None else "all"
        parts.append(f"chunks={spec.attention_chunk_size} ({where})")
    if getattr(spec, "rotary_layers", None) is not None:
        parts.append("rotary " + "/".join("rope" if r else "nope" for r in spec.rotary_layers))
    kind = ("encoder-decoder with cross-attention" if spec.is_encoder_decoder
            else "causal" if spec.causal else "bidirectional")
    qk = {"head": ", q/k norms per head", "full": ", q/k norms"}.get(spec.qk_norm, "")
    parts.append(f"{spec.mlp} MLP ({spec.activation}), {spec.norm} {spec.norm_position}-norm{qk}, "
                 f"{spec.positions} positions, {kind}")
    return " ".join(parts[:-1]) + "; " + parts[-1]


def describe_workload(w, spec=None) -> str:
    """'train: B=1 N=1024 tokens' / 'decode: B=1, 1 new token against 8,192 cached (8,193 keys)'; with the spec, a
    model without an LM head says so instead of where the head scores."""
    src = f", encoder {w.src_len:,} tokens" if w.src_len is not None and w.phase != "decode" else (
        f", encoder output of {w.src_len:,} cached" if w.src_len is not None else "")
    if spec is not None and spec.cross_attends and not spec.is_encoder_decoder:  # Llama 3.2 Vision's vision tokens
        from .arch.builders import cross_keys
        from .arch.towers import text_workload, with_images

        keys = cross_keys(spec, text_workload(spec, with_images(spec, w)) if spec.towers else w)  # (its images')
        src = f", {keys:,} cross-attended tokens" + (" (their keys and values cached)" if w.phase == "decode" else "")
    new = f"{w.seq_len:,} new token{'s' if w.seq_len != 1 else ''}"
    if w.context:
        new += f" against {w.context:,} cached ({w.keys:,} keys)"
    scored = {"train": "head over every token", "prefill": "head over the last token",
              "decode": "head over the new token"}[w.phase]
    if spec is not None and not spec.lm_head:
        heads = [what for what, has in (("a pooler", spec.pooler), ("a classifier", getattr(spec, "n_classes", None)))
                 if has]
        scored = "no LM head" + (f" ({' and '.join(heads)})" if heads else "")
    if spec is not None and spec.towers:  # a multimodal model: its language model's tokens and its images
        from .arch.towers import image_size, image_tokens, with_images

        parts = [f"{w.phase}: B={w.batch_size}, {new}{src}"]
        if "vision" in spec.towers:
            H, W = image_size(spec, w)
            n = with_images(spec, w).images
            into = image_tokens(spec, w, "vision")
            parts.append("no image (a prompt of text alone)" if n == 0 else
                         f"{n:,} image{'s' if n != 1 else ''} of {H}x{W}" + (
                             f" ({into:,} of the tokens)" if into and w.phase != "decode" else
                             " (encoded at the prefill)" if w.phase == "decode" else ""))
        if "audio" in spec.towers:  # each sequence's audio, in whole windows
            from .arch.towers import audio_windows

            sizes = spec.towers["audio"].sizes("audio_conv")
            frames = w.mel_frames or sizes.window
            n, into = audio_windows(spec, w), image_tokens(spec, w, "audio")
            clip = f"a clip of {frames:,} mel frames a sequence ({n:,} clip{'s' if n != 1 else ''} of up to " \
                   f"{sizes.window:,}" if not sizes.whole_windows else \
                   f"{_seconds(frames)} s of audio a sequence ({n:,} window{'s' if n != 1 else ''} of {sizes.window:,}"
            parts.append(f"{clip} mel frames" + (
                             f"; {into:,} of the tokens)" if into and w.phase != "decode" else
                             "; encoded at the prefill)" if w.phase == "decode" else ")"))
        return ", ".join(parts) + f"; {scored}"
    if getattr(w, "image_size", None) is not None:  # a model of images: B images, their patches and class token
        H, W = w.image_size
        return (f"{w.phase}: {w.batch_size:,} image{'s' if w.batch_size != 1 else ''} of {H}x{W}, {w.seq_len:,} "
                f"tokens each; {scored}")
    if getattr(w, "mel_frames", None) is not None and w.phase != "decode":  # a model of audio: the encoder's input
        tokens = f", {w.src_len:,} encoder tokens" if w.src_len is not None else ""  # (an audio encoder alone: N)
        src = f", {_seconds(w.mel_frames)} s of audio ({w.mel_frames:,} mel frames{tokens})"
        if spec is not None and spec.inputs == "audio" and not spec.sizes("audio_conv").whole_windows:
            src = f", a clip of {w.mel_frames:,} mel frames{tokens}"  # (Gemma 4's: not 100 frames a second exactly)
    return f"{w.phase}: B={w.batch_size}, {new}{src}; {scored}"


def _seconds(frames: int) -> str:
    """Mel frames as seconds (100 a second), exactly, however many: 3000 -> '30', 1050 -> '10.5'."""
    whole, hundredths = divmod(frames, 100)
    return f"{whole}" if not hundredths else f"{whole}.{hundredths:02d}".rstrip("0")


def summary_table(result: CountResult) -> Table:
    p, f, m = result.params, result.flops, result.macs
    # the inputs with no gradient: mel frames (a model of audio, an audio tower) or images
    spec = result.spec
    reads = [getattr(spec, "inputs", "tokens"), *(t.inputs for t in getattr(spec, "towers", {}).values())]
    audio, images = "audio" in reads, "images" in reads
    inputs = " and ".join(what for what, has in (("images", images or not audio), ("audio", audio)) if has)
    first = " and ".join(what for what, has in (("patch embedding", images or not audio),
                                                ("first convolution", audio)) if has)
    frames = " and ".join(what for what, has in (("images", images or not audio), ("mel frames", audio)) if has)
    rows = [
        ["parameters", "total", exact(p.total), human(p.total)],
        ["", "active (per token)", exact(p.active), human(p.active)],
        ["", "embedding", exact(p.embedding), human(p.embedding)],
        ["", "non-embedding", exact(p.non_embedding), human(p.non_embedding)],
        ["FLOPs", "forward", exact(f.forward), sci(f.forward)],
        ["", "backward (2x" + (f"; {inputs}: none" if f.input_leaf else "") + ("; delta rule" if f.backward_extra
                                                                                 else "") + ")",
         exact(f.backward), sci(f.backward)],
        ["", "train step (3x)" if not (f.input_leaf or f.backward_extra) else "train step (fwd + bwd)",
         exact(f.train_step), sci(f.train_step)],
        ["", "forward per token", exact(f.per_token), sci(f.per_token)],
        ["", "forward, causal attention", exact(f.forward_causal), sci(f.forward_causal)],
        ["MACs", "forward", exact(m.forward), sci(m.forward)],
    ]
    if result.workload.phase != "train":  # no backward pass in inference (--json keeps every figure)
        rows = [row for row in rows if not row[1].startswith(("backward (", "train step ("))]
    if f.forward_windowed is not None:
        local = [what for what, has in (("sliding windows", result.spec.sliding_window is not None),
                                        ("chunks", getattr(result.spec, "attention_chunk_size", None) is not None))
                 if has]
        rows.insert(len(rows) - 1, ["", f"forward, {' and '.join(local)}", exact(f.forward_windowed),
                                    sci(f.forward_windowed)])
    w = result.workload
    caption = (f"FLOPs = 2 per multiply-add; MACs = multiply-adds (fvcore's 'flops'). Forward ({w.phase}): matmuls "
               f"over {w.batch_size} x {w.seq_len} new tokens, attention over every (query, key) pair "
               f"({w.seq_len:,} x {w.keys:,} per head"
               + ("; in windowed blocks each window's pairs, as the eager model runs them"
                  if not getattr(result.crossover, "modelled", True) else "")
               + "); the causal figure counts the pairs the mask keeps.")
    if f.input_leaf and w.phase == "train":
        caption += (f" Backward: 2 x forward less the {first}'s input gradient ({f.input_leaf:,} FLOPs): the "
                    f"{frames} need none.")
    if f.backward_extra and w.phase == "train":
        caption += (f" Backward: 2 x forward {f.backward_extra:+,} FLOPs where autograd runs other products "
                    "than twice the forward's (the gated delta rule: its triangular solves' gradients, less the "
                    "first chunk's zero state and the last chunk's unread state update).")
    return Table("Summary", ["", "figure", "exact", "readable"], rows, caption, right={2, 3}, optional=[2],
                 label_columns=2)


def component_table(result: CountResult) -> Table:
    params, fwd, macs = result.params.components, result.flops.components, result.macs.components
    names = result.components()  # in model order, from the inventory
    total_p, total_f = params.total, fwd.total
    biggest = max(fwd.values())
    rows = []
    for name in names:
        p, f = params.get(name, 0), fwd.get(name, 0)
        rows.append([name, exact(p) if p else "-", pct(share(p, total_p)) if p else "", sci(f) if f else "-",
                     exact(macs.get(name, 0)) if f else "-", pct(share(f, total_f)) if f else "",
                     bar(share(f, biggest))])
    rows.append(["total", exact(total_p), "100.0%", sci(total_f), exact(result.macs.forward), "100.0%", ""])
    caption = "params and FLOPs summed over all layers."
    if result.spec.lm_head and result.spec.tie_embeddings:
        caption += " The head is tied to the token embedding: its weights are counted there, its FLOPs here."
    return Table("Components", ["component", "params", "% params", "forward FLOPs", "forward MACs", "% FLOPs",
                                "FLOPs share"], rows, caption, right={1, 2, 3, 4, 5}, numeric={1, 2, 3, 4, 5, 6},
                 optional=[6, 4, 5, 2], units={1: human, 4: sci})  # bars, exact MACs (FLOPs beside), shares


def estimates_table(result: CountResult) -> Table:
    rows = [[e.name, e.formula, sci(e.value), f"{e.compared_with} {sci(e.exact)}",
             ratio(share(e.value, e.exact))]
            for e in result.estimates]
    return Table("Published estimates against the exact count", ["estimate", "formula", "estimate",
                 "exact", "ratio"], rows, "ratio = estimate / exact", right={2, 3, 4})


def non_matmul_table(result: CountResult) -> Table:
    nm, forward = result.non_matmul, result.flops.forward
    rows = [[name, sci(v), pct(share(v, forward))] for name, v in nm.items()]
    rows.append(["total", sci(nm.total), pct(share(nm.total, forward))])
    return Table("Non-matmul work (estimate; not in forward)", ["work", "FLOPs", "of forward"], rows,
                 "per-element costs are rough constants (docs/formulas.md); shown for scale only", right={1, 2},
                 optional=[2])


def crossover_line(result: CountResult) -> str:
    c, w = result.crossover, result.workload
    new = f"{w.seq_len:,} new token{'s' if w.seq_len != 1 else ''}"
    at = f"N = {w.seq_len:,}" if not w.context else f"{new} against {w.keys:,} keys"
    where = f"at N >= {c.seq_len:,}" if c.seq_len is not None else "at no N"
    if not getattr(c, "modelled", True):  # attention within windows of an image's grid: no a N + b N^2
        where = ("at an N not modelled (attention within windows of the image's grid)" if result.spec.inputs == "images"
                 else "at an N not modelled (attention within blocks of a fixed context: not a N + b N^2)")
    return (f"Attention (projections + scores + values) overtakes the MLP {where}. "
            f"At {at}: attention {pct(c.attention_share)} of block FLOPs (scores + values "
            f"{pct(c.quadratic_share)}), MLP {pct(c.mlp_share)}"
            + (f", other sequence mixers {pct(c.mixer_share)}." if c.mixer_share else "."))


def finetune_table(result: CountResult) -> Table:
    """A fine-tuning step with adapters: what they train beside the frozen model, and the step's FLOPs."""
    t = result.finetune
    rows = [
        ["parameters", "trainable (adapters)", exact(t.trainable), human(t.trainable)],
        ["", "frozen (the model)", exact(t.frozen), human(t.frozen)],
        ["FLOPs", "adapters' forward", exact(t.adapter_forward), sci(t.adapter_forward)],
        ["", "forward", exact(t.forward), sci(t.forward)],
        ["", "backward", exact(t.backward), sci(t.backward)],
        ["", "fine-tuning step", exact(t.train_step), sci(t.train_step)],
        ["", "step per token", exact(t.train_per_token), sci(t.train_per_token)],
    ]
    if t.dora_norm:
        rows.insert(3, ["", "DoRA's weight norm (B·A)", exact(t.dora_norm), sci(t.dora_norm)])
    caption = (f"{t.adapters.describe()}: trainable {pct(share(t.trainable, t.frozen))} of the frozen model. "
               "Frozen linears' backward = their forward (input gradients only), the adapters' 2x theirs, attention "
               "cores' 2x (docs/finetuning.md).")
    return Table("Fine-tuning with adapters", ["", "figure", "exact", "readable"], rows, caption, right={2, 3},
                 optional=[2], label_columns=2)


def towers_table(result: CountResult) -> Table:
    """A multimodal model's parameters and forward FLOPs per tower and of its connectors."""
    towers, p, f = result.towers, result.params.total, result.flops.forward
    rows = [[name, exact(t["params"]), human(t["params"]), pct(share(t["params"], p)), exact(t["forward"]),
             sci(t["forward"])] for name, t in towers.items()]
    rows.append(["total", exact(p), human(p), pct(1.0), exact(f), sci(f)])
    w = result.workload
    from .arch.towers import audio_windows

    own = getattr(result.spec, "towers", {})
    runs = [f"the vision tower's {w.images or 0} image(s)" if t.inputs == "images" else
            f"the {name} tower's {audio_windows(result.spec, w)} window(s) of audio" for name, t in own.items()]
    tokens = ("its cross-attention blocks read the images' tokens" if any(
        c.cross_attended for c in result.spec.connectors) else "seq_len counts the image tokens among them")
    caption = (f"Each tower counted on its own workload: the language model's tokens ({tokens}), {', '.join(runs)}; "
               f"--tower {'|'.join(['text', *own])} picks one.")
    return Table("Towers", ["tower", "params", "readable", "share", "forward FLOPs", "readable"], rows, caption,
                 right={1, 2, 3, 4, 5}, optional=[1, 4])


def count_tables(result: CountResult) -> list[Table]:
    tables = [summary_table(result), component_table(result), estimates_table(result), non_matmul_table(result)]
    if result.towers:
        tables.insert(1, towers_table(result))
    return tables[:1] + [finetune_table(result)] + tables[1:] if result.finetune is not None else tables


COMPARE_ROWS: list[tuple[str, str, Any]] = [
    ("n_layers", "layers", lambda r: r.spec.n_layers),
    ("n_encoder_layers", "encoder layers", lambda r: r.spec.n_encoder_layers),
    ("d_model", "d_model", lambda r: r.spec.d_model),
    ("n_heads", "heads", lambda r: r.spec.n_heads),
    ("n_kv_heads", "kv heads", lambda r: r.spec.n_kv_heads),
    ("d_ff", "d_ff", lambda r: r.spec.d_ff),
    ("vocab_size", "vocab", lambda r: "-" if r.spec.vocab_size is None else r.spec.vocab_size),  # images: none
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
    ("attention_overtakes_mlp_at_seq_len", "attention > MLP from N",
     lambda r: "never" if r.crossover.seq_len is None else r.crossover.seq_len),
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
    return Table("Comparison", ["figure", *labels], rows, caption, right=set(range(1, len(labels) + 1)),
                 by_column="model")


def memory_table(m) -> Table:
    """A plan.memory.InferenceMemory: bytes exact, and in binary units (GiB = 2^30 bytes)."""
    w = m.workload
    quant = getattr(m, "quant", None)
    weights_dtype = f"{quant.name}, rest {m.dtype}" if quant is not None else f"{m.dtype}"
    rows = [["weights", weights_dtype, exact(m.weights_bytes), binary_bytes(m.weights_bytes)]]
    for name, value in m.kv_cache.items():
        rows.append([f"KV cache: {name}", m.kv_dtype, exact(value), binary_bytes(value)])
    scales = getattr(m, "kv_scale_bytes", 0)
    if scales:
        rows.append(["KV cache scales", "fp32 k/v per layer", exact(scales), binary_bytes(scales)])
    rows.append(["KV cache per token", f"{m.kv_dtype}, one sequence", exact(m.kv_bytes_per_token),
                 binary_bytes(m.kv_bytes_per_token)])
    state = getattr(m, "state", {})
    act = "bf16" if m.dtype in ("fp8", "int8", "int4") else m.dtype
    dtypes = getattr(m, "state_dtypes", {})
    for name, value in state.items():
        rows.append([f"state: {name}", dtypes.get(name, act), exact(value), binary_bytes(value)])
    if state:
        rows.append(["state per sequence", "any context", exact(m.state_bytes_per_sequence),
                     binary_bytes(m.state_bytes_per_sequence)])
    rows.append([f"total (weights + KV cache{' + state' if state else ''})", "", exact(m.total_bytes),
                 binary_bytes(m.total_bytes)])
    if m.capacity_bytes is not None:
        rows += [[f"GPU: {m.gpu_name}", "memory", exact(m.capacity_bytes), binary_bytes(m.capacity_bytes)],
                 ["fits", "", "yes" if m.fits else "no", ""],
                 [f"sequences of {w.keys:,} tokens", "beside the weights", exact(m.max_sequences or 0), ""]]
        if not m.fits:
            smallest = getattr(m, "smallest_tp", None)
            rows.append(["fits with", "tensor parallel (--tp)", f"tp {smallest}" if smallest else "none up to tp 64",
                         ""])
    caption = (f"{w.phase}: B={w.batch_size}, {w.keys:,} tokens per sequence in the cache after the step. Weights and "
               f"KV cache{' and recurrent state (a constant per sequence)' if state else ''} only: activations and "
               "the runtime's own memory are not counted (docs/planning.md).")
    tp = getattr(m, "tp", 1)
    if tp > 1:
        caption += (f" Per GPU of {tp} tensor-parallel GPUs: its share of the split weights, the replicated ones "
                    "whole; its key/value heads' share of the cache.")
    title = "Inference memory" + (f", per GPU (tensor parallel over {tp})" if tp > 1 else "")
    return Table(title, ["", "dtype", "bytes", "readable"], rows, caption, right={2, 3},
                 optional=[3], label_columns=1)


def quant_weights_table(w, quant, dtype: str = "bf16") -> Table:
    """A plan.quant.WeightBytes: each component's parameters and bytes under `quant`, and bits per weight."""
    rows = []
    for name, (params, size) in w.components.items():
        q = w.quantized.get(name)
        how = f"{quant.name} ({8 * q[1] / q[0]:.3f} bits)" if q else dtype
        rows.append([name, how, exact(params), exact(size), binary_bytes(size)])
    rows.append(["total", "", exact(sum(p for p, _ in w.components.values())), exact(w.total), binary_bytes(w.total)])
    caption = (f"Weights as stored: {quant.format.description}; source: {quant.source}. Bits per weight of a quantized "
               "component: all its tensors (values, scales, zeros, code books) over its matrices' weights; its "
               f"biases and everything else {dtype}. Exact integers: --format json or csv (docs/planning.md).")
    return Table("Weights, quantized", ["component", "stored as", "params", "bytes", "readable"], rows, caption,
                 right={2, 3, 4}, optional=[4], label_columns=1)


def training_memory_table(m) -> Table:
    """A plan.training.TrainingMemory: per GPU of the worst pipeline stage, bytes exact and binary."""
    w, s, lay = m.workload, m.stage, m.layout
    recipe = f"bf16 ({m.precision})" if m.fp8_weights else m.precision  # FP8 recipes keep bf16 weights
    rows = [["weights", recipe, exact(m.weights), binary_bytes(m.weights)],
            ["gradients", recipe, exact(m.gradients), binary_bytes(m.gradients)],
            ["optimizer states", m.optimizer, exact(m.optimizer_states), binary_bytes(m.optimizer_states)]]
    if m.adapters is not None:  # the frozen model's weights and the adapters' apart; the rest is the adapters'
        d = m.to_dict()
        frozen, trainable = d["frozen_weights_bytes"], m.weights - d["frozen_weights_bytes"]
        stored = "" if m.quant is None else f", {m.quant.name}"  # QLoRA: the frozen model quantized
        rows[1:1] = [["· frozen model", f"{s.params - s.trainable:,} params{stored}", exact(frozen),
                      binary_bytes(frozen)],
                     ["· adapters", f"{s.trainable:,} params", exact(trainable), binary_bytes(trainable)]]
        rows[3][1] = f"{recipe}, adapters only"
        rows[4][1] = f"{m.optimizer}, adapters only"
    if m.master_weights:
        rows.append(["master weights", "fp32", exact(m.master_weights), binary_bytes(m.master_weights)])
    if m.fp8_weights:  # an FP8 recipe (TransformerEngine): the linears' FP8 weight copies and their scaling state
        rows.append(["FP8 weight copies", "rowwise + transposed", exact(m.fp8_weights), binary_bytes(m.fp8_weights)])
    if m.fp8_scaling:
        rows.append(["FP8 scaling state", "scales, amax history", exact(m.fp8_scaling), binary_bytes(m.fp8_scaling)])
    what = (f"{m.attention} attention, recompute {m.recompute}"
            + (f", {s.microbatches} microbatches" if s.microbatches > 1 else ""))
    rows.append(["activations", what, exact(m.activations), binary_bytes(m.activations)])
    for name, value in s.activation_components.items():
        value *= s.microbatches
        rows.append([f"· {name}", "", exact(value), binary_bytes(value)])
    rows += [["total (all of the above)", "", exact(m.total), binary_bytes(m.total)],
             ["peak (estimate)", "with the step's transients", exact(m.peak), binary_bytes(m.peak)]]
    moment, items = s.peak_items()
    rows.append(["peak at", moment, "", ""])
    rows += [[f"· {name}", "", exact(value), binary_bytes(value)] for name, value in items.items() if value]
    if m.korthikanti is not None:
        rows.append(["activations, Korthikanti et al.", "published estimate", exact(m.korthikanti),
                     binary_bytes(m.korthikanti)])
    if m.capacity_bytes is not None:
        rows += [[f"GPU: {m.gpu_name}", "memory", exact(m.capacity_bytes), binary_bytes(m.capacity_bytes)],
                 ["fits", "peak <= memory", "yes" if m.fits else "no", ""]]
        small = m.smallest
        rows.append(["smallest layout that fits", "" if small is None else small.layout.describe(),
                     "none up to 65,536 GPUs" if small is None else exact(small.peak),
                     "" if small is None else binary_bytes(small.peak)])
    stage = f"; stage {s.stage + 1} of {lay.pp} (the largest)" if lay.pp > 1 else ""
    kernel = ("fused attention (FlashAttention, torch SDPA) keeps q, k, v, its output and an fp32 logsumexp per row"
              if m.attention == "fused" else "eager attention keeps its softmax probabilities")
    why = f" Smallest layout: {m.smallest.reason}." if m.capacity_bytes is not None and m.smallest else ""
    caption = (f"per GPU, {lay.describe()}{stage}; micro batch B={w.batch_size} of {w.seq_len:,} tokens. "
               f"Activations are what each op keeps for backward, no dropout ({kernel}); peak adds the backward's "
               f"and the step's transients (docs/planning.md).{why}")
    if m.adapters is not None:
        caption += (f" {m.adapters.describe()} on the frozen model: gradients, optimizer states and master weights "
                    "for the adapters alone; a frozen linear keeps no input (docs/finetuning.md).")
    title = "Training memory" + (" (fine-tuning with adapters)" if m.adapters is not None else "")
    return Table(title, ["", "what", "bytes", "readable"], rows, caption, right={2, 3},
                 optional=[3], label_columns=1)


def compute_optimal_table(result, fit: dict | None = None, label: str | None = None) -> Table:
    """plan.chinchilla.ComputeOptimal: each approach's parameters and tokens for the budget; with `fit`, what the
    budget buys one model."""
    rows = [[e.label, sci(e.params), human(e.params), sci(e.tokens), human(e.tokens), f"{e.tokens_per_param:.1f}"]
            for e in result.approaches]
    if fit is not None:
        rows.append([f"{label}: the tokens C buys it (exact train FLOPs)", sci(fit["params_active"]),
                     human(fit["params_active"]), sci(fit["tokens"]), human(fit["tokens"]),
                     f"{fit['tokens_per_param']:.1f}"])
    caption = (f"C = {sci(result.flops)} FLOPs; C = 6ND for the approaches (Hoffmann et al. 2022: approach 1 is "
               "Table 3's projection, the headline; docs/planning.md)"
               + ("; the model's row divides C by its exact causal train-step FLOPs per token." if fit else "."))
    return Table("Compute-optimal size", ["", "parameters", "", "tokens", "", "tokens/param"], rows, caption,
                 right={1, 2, 3, 4, 5}, optional=[2, 4], label_columns=1)


def train_table(b, run: dict | None = None, tuned: bool = False) -> Table:
    """A plan.train.TrainingBudget, and/or, with `run`, the MFU of a measured run; `tuned`: of a fine-tuning step
    with adapters on the frozen model."""
    from .plan.train import UNITS

    spec = b.spec if b is not None else None
    media = spec is not None and (spec.inputs != "tokens" or bool(spec.towers))
    fed = [what for what, has in (("images'", spec and (spec.inputs == "images" or "vision" in spec.towers)),
                                  ("audio's", spec and (spec.inputs == "audio" or "audio" in spec.towers))) if has]
    leaf = f" less the {' and '.join(fed)} input gradient (none is computed)" if media and fed else ""
    step = ("a fine-tuning step: frozen linears' backward 1 x their forward, adapters' and attention cores' 2 x"
            if tuned else f"a train step, 3 x forward{leaf}")
    unit = "token" if b is None else b.unit
    rows = [] if b is None else [[UNITS[unit], exact(b.tokens), human(b.tokens)]]
    if b is not None and unit == "clip":  # each clip's mel frames, 100 a second
        seconds = Fraction(b.workload.mel_frames, 100)
        rows.append([f"audio, {float(seconds):g} s a clip", f"{float(b.tokens * seconds / 3600):,.1f} hours", ""])
    if b is not None:
        six = ("6ND (N = active parameters, D = the images' tokens)" if unit == "image" else
               "6ND (N = active parameters)")
        rows += [[f"FLOPs per {unit} (train step)", exact(b.flops_per_token.numerator)
                  if b.flops_per_token.denominator == 1 else f"{float(b.flops_per_token):,.1f}",
                  sci(round(b.flops_per_token))],
                 ["FLOPs, attention over every pair", exact(b.flops), sci(b.flops)],
                 ["FLOPs, causal attention", exact(b.flops_causal), sci(b.flops_causal)]]
        rows += [[six, exact(b.six_nd), sci(b.six_nd)]] if b.six_nd is not None else []
        rows += [[f"hardware FLOPs (recompute {b.recompute}, {b.attention} attention)", exact(b.hardware_flops),
                  sci(b.hardware_flops)]]
    if b is not None and b.seconds is not None:
        rows += [[f"peak per GPU, dense {b.peak_dtype or 'bf16'}" + (f" ({b.precision})" if b.precision else ""),
                  exact(b.peak_flops_per_s), sci(b.peak_flops_per_s)],
                 [f"time on {b.gpus:,} x {b.gpu_name} at MFU {float(b.mfu):.0%}", f"{amount(b.seconds / 86400)} days",
                  f"{b.seconds:,.0f} s"],
                 ["GPU-hours", amount(b.gpu_hours), ""]]
        if b.cost is not None:
            rows.append([f"cost at {float(b.price_per_gpu_hour):,.2f} per GPU-hour", amount(b.cost), ""])
    if run is not None:
        at = f", dense {run.get('peak_dtype') or 'bf16'} peak"  # an FP8 recipe's MFU is at the fp8 peak
        per_s = run.get("tokens_per_second", run.get("samples_per_second"))
        what = UNITS[run.get("sample", "token")]
        rows += [[f"measured: {per_s:,.0f} {what}/s on {run['gpus']:,} GPUs", "", ""],
                 [f"peak per GPU, dense {run.get('peak_dtype') or 'bf16'}"
                  + (f" ({run['precision']})" if run.get("precision") else ""),
                  exact(run["peak_flops_per_s"]), sci(run["peak_flops_per_s"])],
                 [f"MFU (every pair{at})", pct(Fraction(run["mfu"])), ""],
                 [f"MFU (causal attention{at})", pct(Fraction(run["mfu_causal"])), ""],
                 [f"HFU (recompute {run['recompute']}, {run['attention']} attention{at})", pct(Fraction(run["hfu"])),
                  ""]]
    if b is None:
        per = run.get("sample", "token")
        return Table("MFU of a run", ["figure", "exact", "readable"], rows,
                     f"model FLOPs per {per} ({step}) x {per}s/s over the GPUs' dense datasheet peak",
                     right={1, 2}, optional=[2])
    on = {"token": f"sequences of {b.spec.seq_len:,} tokens", "image": "each image",
          "pair": (f"contrastive batches of {b.workload.batch_size:,} pair{'s' if b.workload.batch_size != 1 else ''}"
                   " (--batch-size; the batch x batch logits)"), "clip": "each clip"}[unit]
    caption = (f"{step if tuned else 'train step = 3 x forward' + leaf} on {on}; time from the causal figure "
               "(what a fused attention kernel computes) at the MFU given, against the GPU's dense datasheet peak"
               + ("; 6ND beside it" if b.six_nd is not None else "") + " (docs/planning.md).")
    return Table("Training budget", ["figure", "exact", "readable"], rows, caption, right={1, 2}, optional=[2])


def infer_tables(plan) -> list[Table]:
    """A plan.roofline.InferencePlan: the two phases, then decode's ops by time."""
    p, d = plan.prefill, plan.decode

    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:,.3f} ms"

    rows = [["prefill", f"{p.workload.batch_size} x {p.workload.seq_len:,} tokens", ms(p.seconds),
             f"{p.tokens_per_s:,.0f}", sci(p.flops), binary_bytes(p.bytes), p.bound],
            ["decode", f"{d.workload.batch_size} x 1 token, {d.workload.context:,} cached", ms(d.seconds),
             f"{d.tokens_per_s:,.0f}", sci(d.flops), binary_bytes(d.bytes), d.bound]]
    tp = getattr(plan, "tp", 1)
    where = f"each of {tp} tensor-parallel {plan.gpu.name}s" if tp > 1 else plan.gpu.name
    link = (f" Per GPU: its share of the weights, heads and MLP width; all-reduces and the logits' all-gather over "
            f"{plan.gpu.link_bytes_per_s / 1e9:,.0f} GB/s each way ({plan.gpu.link}), their latency not counted."
            if tp > 1 else "")
    quant = getattr(plan, "quant", None)
    dtypes = plan.dtype if quant is None else f"{quant.name} weights, {plan.dtype}"
    summary = Table(f"Roofline on {where} ({dtypes})", ["phase", "workload", "time", "tokens/s",
                    "FLOPs", "bytes moved", "bound"], rows,
                    f"time to first token = prefill; decode tokens/s = sequences / step time. Peak "
                    f"{sci(plan.peak)} FLOP/s dense, {plan.gpu.bandwidth_bytes_per_s / 1e12:,.2f} TB/s: ridge "
                    f"{plan.peak / plan.gpu.bandwidth_bytes_per_s:,.0f} FLOPs per byte.{link} A bound, not a "
                    "measurement (docs/planning.md).", right={2, 3, 4, 5})
    by_component: dict[str, list] = {}
    for op in d.ops:
        entry = by_component.setdefault(op.component, [0, 0, 0.0, set()])
        entry[0] += op.flops
        entry[1] += op.bytes or op.link_bytes  # a collective: the bytes it sends over the link
        entry[2] += op.seconds
        entry[3].add(op.bound)
    ranked = sorted(by_component.items(), key=lambda kv: -kv[1][2])[:12]
    ops = Table("Decode step by component (slowest first)", ["component", "time", "share", "FLOPs", "bytes",
                "FLOPs/byte", "bound"],
                [[name, ms(t), pct(Fraction(t / d.seconds).limit_denominator(10**9)), sci(f) if f else "0",
                  binary_bytes(b), f"{f / b:,.1f}" if b and bound != {"link"} else "-", "/".join(sorted(bound))]
                 for name, (f, b, t, bound) in ranked],
                "norms, activations and residual adds read and write their elements; the attention core reads every "
                "cached key and value" + ("; a collective's bytes are those one GPU sends over the link" if tp > 1
                                          else ""), right={1, 2, 3, 4, 5}, optional=[5, 2])
    return [summary, ops]


def presets_table(entries: list[tuple[str, str, CountResult, str]]) -> Table:
    rows = [[name, desc, human(r.params.total), human(r.params.active) if r.params.active != r.params.total else "",
             f"{r.spec.seq_len:,}", sci(r.flops.forward), source]
            for name, desc, r, source in entries]
    return Table("Presets", ["preset", "model", "params", "active", "seq_len", "forward FLOPs", "source"], rows,
                 "forward FLOPs at the preset's seq_len, batch 1; `tfcalc count --preset NAME` for the breakdown",
                 right={2, 3, 4, 5}, aside=6)


def _decimal(n: int, unit: int) -> str:
    """n / unit written exactly (no rounding), with thousands separators: 1978900000000000 / 1e12 -> 1,978.9."""
    from decimal import Decimal

    q = (Decimal(n) / Decimal(unit)).normalize()
    return f"{q:,f}"


def flags_table(panel: str, flags: list[tuple[str, str, str]]) -> Table:
    """One panel of `tfcalc flags` (markdown): each model flag, what it takes and what it sets."""
    return Table(panel, ["flag", "takes", "what it sets"], [list(f) for f in flags])


def flags_text(panels: dict[str, list[tuple[str, str, str]]], width: int | None) -> str:
    """`tfcalc flags` as a man page lists options: per panel, each flag and what it takes on a line, what it sets
    indented under it, wrapped at `width` (None: unwrapped) between words, never inside one."""
    import textwrap

    out = []
    for panel, flags in panels.items():
        out += ["", panel]
        for names, takes, text in flags:
            out.append(f"  {names}  {takes}")
            lines = textwrap.wrap(text, max(width - 6, 20), break_long_words=False, break_on_hyphens=False) \
                if width else [text]
            out += ["      " + line for line in lines if line]
    return "\n".join(out[1:])


def gpus_table(gpus) -> Table:
    """The datasheet table `--gpu` reads: memory, bandwidth, dense peaks per dtype, the link, each row's source."""
    dtypes = ("bf16", "fp8", "fp32", "fp16", "tf32", "int8")
    rows = []
    for g in gpus:
        peaks = [_decimal(g.peak_flops[d], 10**12) if g.peak_flops.get(d) else "-" for d in dtypes]
        link = _decimal(g.link_bytes_per_s, 10**9) if g.link_bytes_per_s else "-"
        rows.append([", ".join(g.aliases), g.name, binary_bytes(g.memory_bytes),
                     _decimal(g.bandwidth_bytes_per_s, 10**12), *peaks, link,
                     g.source + (f"; link: {g.link}" if g.link else "")])
    return Table("GPUs (--gpu NAME)", ["--gpu", "GPU", "memory", "TB/s", *(f"{d} TFLOP/s" for d in dtypes),
                                       "link GB/s", "source"], rows,
                 "dense peak FLOP/s from the datasheets (int8: TOP/s); memory bandwidth in TB/s, the GPU-to-GPU "
                 "link one way in GB/s; --format json gives exact integers",
                 right=set(range(2, 11)), aside=11, optional=[7, 8, 9])


# ---- fitting a table to a terminal ----------------------------------------------------------------
# A number is never cut, folded or wrapped. A table wider than the terminal is drawn, in this order: with its
# long `aside` column under it; without its optional columns; with exact integers in readable units; split
# into several tables (by_column); one block of lines per row or column. One line under it says which.

_NUMBER = re.compile(r"\d[\d,.]*(?:e[+-]?\d+)?")  # 43,490,082,816  1.78e14  24.9  2,048.
_EXACT = re.compile(r"\d{1,3}(?:,\d{3})*")
_BREAK_AFTER = "/-_.,;:)]"
TEXT_MIN = 20  # a text column may fold words longer than this (never a number); shorter words stay whole
ASIDE_MIN = 60  # an aside column narrower than this goes under the table


def _cell_len(text: str) -> int:
    from rich.cells import cell_len

    return max(map(cell_len, text.split("\n")))


def _fold(word: str, width: int) -> list[str]:
    """A word wider than `width` in pieces that fit, cut outside numbers, after / - _ . , ; : where possible.
    A number wider than `width` stays whole, a piece of its own."""
    if _cell_len(word) <= width:
        return [word]
    inside = {i for m in _NUMBER.finditer(word) for i in range(m.start() + 1, m.end())}
    pieces, start = [], 0
    while _cell_len(word[start:]) > width:
        cuts = [i for i in range(start + 1, min(start + width, len(word) - 1) + 1) if i not in inside]
        if cuts:
            nice = [i for i in cuts if word[i - 1] in _BREAK_AFTER and i - start >= width // 2]
            cut = (nice or cuts)[-1]
        else:  # a number wider than the width: whole, to its end
            cut = next((i for i in range(start + width + 1, len(word)) if i not in inside), len(word))
        pieces.append(word[start:cut])
        start = cut
    return pieces + ([word[start:]] if start < len(word) else [])


def wrap(text: str, width: int | None) -> str:
    """Text wrapped at spaces to `width` (None: not wrapped); a word wider than that is folded outside its
    numbers, and a number wider than the whole width is left whole on its own line for the terminal to wrap."""
    if width is None:
        return text
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split():
            pieces = _fold(word, width)
            for i, piece in enumerate(pieces):
                if line and i == 0 and _cell_len(line) + 1 + _cell_len(piece) <= width:
                    line += " " + piece
                else:
                    if line:
                        lines.append(line)
                    line = piece
        lines.append(line)
    return "\n".join(lines)


def _readable(cell: str, unit: Callable[[int], str] | None) -> str:
    return unit(int(cell.replace(",", ""))) if unit and _EXACT.fullmatch(cell) else cell


def _measure(table: Table, j: int, cells: list[str], aside: bool) -> tuple[int, int]:
    """(natural, minimum) content width of column j: numbers at full width, text wrapped down to its numbers
    and words (or TEXT_MIN), headers wrapped at spaces."""
    header = table.columns[j]
    natural = max(_cell_len(c) for c in [header, *cells])
    header_word = max((_cell_len(w) for w in header.split()), default=0)
    if j in table.numeric_columns():
        return natural, max(header_word, *map(_cell_len, cells)) if cells else header_word
    numbers = max((len(m.group()) for c in cells for m in _NUMBER.finditer(c)), default=0)
    words = max((_cell_len(w) for c in [header, *cells] for w in c.split()), default=0)
    minimum = max(numbers, min(words, TEXT_MIN), min(header_word, TEXT_MIN))
    return natural, max(minimum, min(natural, ASIDE_MIN)) if aside else minimum


def _widths(naturals: list[int], minimums: list[int], width: int) -> list[int] | None:
    """Content widths of columns that fit a `width`-wide grid (borders and padding: 3 per column + 1), the
    narrow columns at natural width and the wide text ones wrapped evenly; None if even the minimums don't."""
    budget = width - 1 - 3 * len(naturals)
    if sum(minimums) > budget:
        return None
    if sum(naturals) <= budget:
        return list(naturals)

    def at(level: int) -> list[int]:
        return [max(lo, min(level, hi)) for lo, hi in zip(minimums, naturals)]

    lo, hi = 0, max(naturals)
    while lo < hi:  # the highest level at which every column fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if sum(at(mid)) <= budget else (lo, mid - 1)
    widths, spare = at(lo), budget - sum(at(lo))
    for i, (w, natural) in enumerate(zip(widths, naturals)):
        if spare and w < natural:
            widths[i], spare = w + 1, spare - 1
    return widths


def grid_width(widths: list[int]) -> int:
    return 1 + sum(w + 3 for w in widths)


@dataclass
class Layout:
    """How a table is drawn in a terminal of a given width."""

    grids: list[tuple[list[int], list[int]]]  # the grids drawn: (columns, their content widths); [] when stacked
    readable: bool = False  # exact integers shown in readable units
    dropped: list[int] = field(default_factory=list)  # optional columns left out
    aside: int | None = None  # the column printed under the grid, "label: text" per row
    stacked: bool = False  # lines, one block per row (or per column, by_column)
    note: str = ""  # the one line that says what a narrow terminal changed


def layout(table: Table, width: int | None) -> Layout:
    """The first layout, in the order above, that fits `width` columns (None: the table at its natural width)."""
    n = len(table.columns)

    def cells(j: int, readable: bool) -> list[str]:
        return [_readable(row[j], table.units.get(j)) if readable else row[j] for row in table.rows]

    def grid(columns: list[int], readable: bool, aside_in: bool, limit: int | None) -> list[int] | None:
        measured = [_measure(table, j, cells(j, readable), aside_in and j == table.aside) for j in columns]
        naturals, minimums = [m[0] for m in measured], [m[1] for m in measured]
        return naturals if limit is None else _widths(naturals, minimums, limit)

    every = list(range(n))
    if width is None:
        return Layout([(every, grid(every, False, True, None))])
    widths = grid(every, False, True, width)
    if widths is not None:
        return Layout([(every, widths)])
    aside = table.aside
    tries = [(readable, k) for readable in ((False, True) if table.units else (False,))
             for k in range(len(table.optional) + 1)]
    for readable, k in tries:
        dropped = table.optional[:k]
        columns = [j for j in every if j not in dropped and j != aside]
        widths = grid(columns, readable, False, width)
        if widths is not None:
            return _noted(table, Layout([(columns, widths)], readable, dropped, aside))
    readable, dropped = tries[-1][0], table.optional
    columns = [j for j in every if j not in dropped and j != aside]
    if table.by_column:  # split the columns evenly over the fewest grids that fit, each repeating the first
        first, rest = columns[:table.label_columns], columns[table.label_columns:]
        for count in range(2, len(rest) + 1):
            size, extra = divmod(len(rest), count)
            bounds = [i * size + min(i, extra) for i in range(count + 1)]
            groups = [first + rest[a:b] for a, b in zip(bounds, bounds[1:])]
            grids = [(g, grid(g, readable, False, width)) for g in groups]
            if all(w is not None for _, w in grids):
                return _noted(table, Layout(grids, readable, dropped, aside))
    return _noted(table, Layout([], stacked=True, aside=None))


def _noted(table: Table, fit: Layout) -> Layout:
    def names(columns: list[int]) -> str:
        return ", ".join(table.columns[j] or "mark" for j in columns)

    parts = []
    if fit.dropped:
        parts.append(f"{names(fit.dropped)} column{'s' if len(fit.dropped) > 1 else ''} left out")
    if fit.readable:
        parts.append("readable units")
    if fit.aside is not None:
        parts.append(f"{table.columns[fit.aside]} under the table")
    if len(fit.grids) > 1:
        parts.append(f"{table.by_column}s split over {len(fit.grids)} tables")
    if fit.stacked:
        parts.append(f"one block per {table.by_column or 'row'}")
    lossy = fit.dropped or fit.readable
    fit.note = f"(narrow terminal: {'; '.join(parts)}" + ("; all in --json)" if lossy else ")")
    return fit


def _stacked_lines(table: Table, width: int) -> list[str]:
    """One block per row: 'label: header value  header value', continued on indented lines; or, by_column,
    one block per column: its header, then '  label: value' per row. A value wider than a line gets its own."""
    out: list[str] = []

    def fill(head: str, items: list[str]) -> None:
        line = head
        for item in items:
            joined = f"{line} {item}" if line == head and head else f"{line}  {item}" if line else f"  {item}"
            if _cell_len(joined) <= width:
                line = joined
                continue
            if line:
                out.append(line)
            pieces = wrap(item, width - 2).split("\n")
            out.extend("  " + piece for piece in pieces[:-1])
            line = "  " + pieces[-1]
        if line:
            out.append(line)

    labels, group = [], ""
    for row in table.rows:
        names = list(row[:table.label_columns])
        group = names[0] = names[0] or group
        labels.append(" ".join(name for name in names if name))
    if table.by_column:
        for j in range(table.label_columns, len(table.columns)):
            out.append(table.columns[j])
            for label, row in zip(labels, table.rows):
                fill("", [f"{label}: {row[j]}"])
        return out
    for label, row in zip(labels, table.rows):
        items = [f"{table.columns[j]} {row[j]}".strip() for j in range(table.label_columns, len(table.columns))
                 if row[j] not in ("", "-")]  # blank and none: nothing to say
        head = f"{label}:"
        if _cell_len(head) > width:
            out.extend(wrap(head, width).split("\n"))
            head = ""
        fill(head, items)
    return out


def _justify(text: str, width: int, right: bool) -> str:
    """Right-aligned lines padded here (rich aligns nothing with overflow "ignore")."""
    return "\n".join(" " * (width - _cell_len(line)) + line for line in text.split("\n")) if right else text


def natural_width(table: Table) -> int:
    """The width of the table drawn whole: what a pipe gets."""
    ((_, widths),) = layout(table, None).grids
    return max(grid_width(widths), _cell_len(table.title))


def to_rich(table: Table, width: int | None = None) -> list:
    """Renderables that draw the table in `width` terminal columns (None: at its natural width, for a pipe):
    its title, its grid or grids (or stacked lines), its aside column, its caption and the narrow-terminal note.
    Print them with soft_wrap=True: every line already fits, but for a number wider than the terminal."""
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    width = None if width is None else max(width, 20)  # below that, nothing reads well anyway
    fit = layout(table, width)
    numeric = table.numeric_columns()
    out: list = [Text(wrap(table.title, width), style="table.title")]
    widest = 0
    for g, (columns, widths) in enumerate(fit.grids):
        if g:
            out.append(Text(""))
        grid = RichTable(box=box.HEAVY_HEAD)
        for j, w in zip(columns, widths):  # overflow "ignore": rich never cuts; the widths fit, so nothing spills
            grid.add_column(Text(_justify(wrap(table.columns[j], w), w, j in table.right)), width=w, no_wrap=True,
                            overflow="ignore")
        for row in table.rows:
            cells = [_readable(row[j], table.units.get(j)) if fit.readable else row[j] for j in columns]
            grid.add_row(*(Text(_justify(c if j in numeric else wrap(c, w), w, j in table.right))
                           for j, w, c in zip(columns, widths, cells)))
        out.append(grid)
        widest = max(widest, grid_width(widths), 40)
    if fit.stacked:
        out.append(Text("\n".join(_stacked_lines(table, width))))
    if table.caption:  # as wide as the grid above it
        out.append(Text(wrap(table.caption, width if not widest else min(widest, width or widest)),
                        style="table.caption"))
    if fit.aside is not None:  # "label: text", continued on indented lines
        paragraphs = [wrap(f"{row[0]}: {row[fit.aside]}", width - 2).replace("\n", "\n  ") for row in table.rows]
        out += [Text(""), Text(table.columns[fit.aside], style="table.header"), Text("\n".join(paragraphs))]
    if fit.note:
        out.append(Text(wrap(fit.note, width), style="table.caption"))
    return out


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
    return "0" if spread == 0 else f"{spread:,} ({float(share(spread, max(max(values), 1))):.2%})"


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
    for table in tables:
        table.numeric = table.right | {table.columns.index("", 1)}  # the numbers and the ✓ column
        difference = len(table.columns) - 1
        if all(row[difference] == "0" for row in table.rows):  # every row agrees: the ✓ says as much
            table.optional = [difference]
    return tables


def memory_check_table(report) -> Table:
    """A verify.memory_check.MemoryReport: the plan against MemTracker (and the CUDA allocator), per category."""
    rows = []
    for r in report.rows:
        within = (f"exact (+{r.slack:,} B)" if r.slack else "exact") if r.tolerance == 0 else f"±{r.tolerance:.0%}"
        rows.append([r.category, exact(r.analytic), exact(r.measured), _mark(r.match),
                     f"{r.difference:+,}" if r.difference else "0",
                     "" if r.measured == 0 else f"{r.relative:+.3%}", within, r.note])
    caption = (f"{report.precision}, {report.optimizer}, recompute {report.recompute}, {report.attention} "
               "attention; MemTracker "
               f"(torch.distributed._tools.mem_tracker) on the reference model's second train step, "
               f"{report.device}; difference = measured - analytic.")
    return Table("Training memory: analytic | measured", ["category", "analytic", "measured", "", "difference",
                 "relative", "tolerance", "note"], rows, caption, right={1, 2, 4, 5}, optional=[7, 5],
                 label_columns=1)


def hf_check_table(report) -> Table:
    """A verify.hf_model.HfReport: the analytic counts against transformers' own class (or its traced totals).
    Each row's note (why it differs) is the report's `explanations()`, printed under the table."""
    columns = ["figure", "component", "analytic", "transformers", "", "difference"]
    rows = []
    for r in report.rows:
        mark = "" if r.match is None else "explained" if r.known else _mark(r.match)
        difference = "" if r.analytic is None else "0" if r.match else f"{r.transformers - r.analytic:+,}"
        rows.append([r.figure, r.component, "" if r.analytic is None else exact(r.analytic), exact(r.transformers),
                     mark, difference])
    keep = [0, 1, 3] if report.traced else [j for j in range(len(columns))
                                            if j != 5 or any(row[5] not in ("", "0") for row in rows)]
    w = report.workload
    from .hf import ENCODER_DECODER, SUPPORTED

    # a decoder-only model tfcalc reads that cross-attends (Llama 3.2 Vision: its vision tokens); else an encoder's
    decoder_only = report.model_type in SUPPORTED and report.model_type not in ENCODER_DECODER
    source = "cross-attended" if decoder_only else "encoder"
    tokens = f"B={w.batch_size}, {w.seq_len:,} tokens" + (f", {w.src_len:,} {source} tokens" if w.src_len else "")
    caption = (f"{report.model_class} built from the config on the meta device; parameters: sum(numel), tied "
               f"weights once; forward: FlopCounterMode over one eager forward ({tokens}), 2 FLOPs per "
               "multiply-add" + ("; difference = transformers - analytic." if 5 in keep else "."))
    table = Table(f"transformers: {report.label}", [columns[j] for j in keep], [[row[j] for j in keep] for row in rows],
                  caption, right={keep.index(j) for j in (2, 3, 5) if j in keep}, label_columns=2)
    table.numeric = table.right | ({keep.index(4)} if 4 in keep else set())
    return table


def check_lines(report) -> list[str]:
    spec = report.spec
    lines = [f"{spec.label}: {describe(spec)}", f"workload: {describe_workload(report.workload, spec)}",
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
    if result.spec.inputs == "images":  # the model's own image size, the batch its images
        from .arch import default_workload

        lines.append(f"workload: {describe_workload(default_workload(result.spec), result.spec)}")
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
        *([["images/s", f"{result.images_per_s:,.1f}"]] if result.images_per_s is not None else []),
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
    memory = result.peak_memory_bytes
    rows.append(["peak memory", f"{binary_bytes(memory)} ({memory:,} bytes)" if memory >= 1024 else f"{memory} B"])
    caption = ("FLOPs = 2 per multiply-add, matmuls only, full N x N attention; MFU = achieved / peak, the GEMMs "
               "timed in turn with the steps. Memory in binary units (GiB = 2^30 bytes). "
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


# ---- sweeps (tfcalc.sweep) ------------------------------------------------------------------------

def _sweep_head(points, axes: list[str]) -> tuple[list[str], list[list[str]]]:
    """The leading columns of a sweep table: the model (when there are several) and each swept value."""
    several = len({p.index for p in points}) > 1
    columns = (["model"] if several else []) + list(axes)
    rows = [([p.model] if several else []) + [f"{p.values[a]:,}" for a in axes] for p in points]
    return columns, rows


def count_sweep_table(pairs, axes: list[str]) -> Table:
    """One row per point of a count sweep: the swept values, parameters, forward FLOPs (every pair and causal),
    the train step, FLOPs per token, attention's share of block FLOPs. pairs: [(sweep.Point, CountResult)]."""
    points, results = [p for p, _ in pairs], [r for _, r in pairs]
    columns, rows = _sweep_head(points, axes)
    lead = len(columns)
    moe = any(r.params.active != r.params.total for r in results)
    train = all(r.workload.phase == "train" for r in results)
    columns += ["params", *(["active"] if moe else []), "forward FLOPs", "forward, causal",
                *(["train step"] if train else []), "FLOPs per token", "attention share"]
    for row, r in zip(rows, results):
        f = r.flops
        per_token = f"{f.per_token:,}" if isinstance(f.per_token, int) else sci(float(f.per_token)) \
            if isinstance(f.per_token, float) else str(f.per_token)
        row += [exact(r.params.total), *([exact(r.params.active)] if moe else []), exact(f.forward),
                exact(f.forward_causal), *([exact(f.train_step)] if train else []), per_token,
                pct(r.crossover.attention_share)]
    n = len(columns)
    units = {j: (human if columns[j] in ("params", "active") else sci) for j in range(lead, n - 1)}
    optional = [columns.index(c) for c in ("forward, causal", "train step", "attention share", "FLOPs per token")
                if c in columns]
    caption = ("FLOPs = 2 per multiply-add, matmuls only; forward over every (query, key) pair, causal over the pairs "
               "the mask keeps; attention share = attention's share of block FLOPs (projections + scores + values "
               "against the MLP). Every figure exact: --format csv, json or markdown (one row per point).")
    return Table(f"Sweep: {len(rows):,} point{'s' if len(rows) != 1 else ''}", columns, rows, caption,
                 right=set(range(lead - len(axes), n)), optional=optional, units=units, label_columns=max(1, lead))


def crossover_lines(pairs) -> list[str]:
    """Where attention overtakes the MLP, once per model of a sweep."""
    seen, lines = set(), []
    for p, r in pairs:
        if p.index not in seen:
            seen.add(p.index)
            n = r.crossover.seq_len
            lines.append(f"{p.model}: attention (projections + scores + values) overtakes the MLP "
                         + (f"at N >= {n:,}." if n is not None else "at no N."))
    return lines


def different_lengths_line(labels: list[str], results) -> str | None:
    """compare's note when the models run at different sequence lengths (each preset's own default)."""
    lengths = [r.workload.seq_len for r in results]
    keys = [r.workload.keys for r in results]
    if len(set(lengths)) <= 1 and len(set(keys)) <= 1:
        return None
    runs = ", ".join(f"{label} at {n:,}" + (f" ({k:,} keys)" if k != n else "")
                     for label, n, k in zip(labels, lengths, keys))
    return (f"note: the models run at different lengths, each its own default: {runs} tokens per sequence. FLOPs "
            "and shares are not at one length: give --seq-len N to compare at one length (or a list of "
            "lengths, for each model at each).")


def memory_sweep_table(pairs, axes: list[str]) -> Table:
    """One row per point of a memory sweep: each category of bytes, the total (training: and the peak), and what
    fits. pairs: [(sweep.Point, InferenceMemory | TrainingMemory)]."""
    points, plans = [p for p, _ in pairs], [m for _, m in pairs]
    columns, rows = _sweep_head(points, axes)
    lead = len(columns)
    training = not hasattr(plans[0], "kv_cache_bytes")
    gpu = plans[0].capacity_bytes is not None
    if training:
        master = any(m.master_weights for m in plans)
        fp8 = any(m.fp8_weights for m in plans)  # FP8 (TransformerEngine): its copies and scaling state, one column
        columns += ["weights", "gradients", "optimizer states", *(["master weights"] if master else []),
                    *(["FP8 copies + scaling"] if fp8 else []),
                    "activations", "total", "peak (estimate)", *(["fits"] if gpu else [])]
        for row, m in zip(rows, plans):
            row += [exact(m.weights), exact(m.gradients), exact(m.optimizer_states),
                    *([exact(m.master_weights)] if master else []),
                    *([exact(m.fp8_weights + m.fp8_scaling)] if fp8 else []), exact(m.activations), exact(m.total),
                    exact(m.peak), *(["yes" if m.fits else "no"] if gpu else [])]
    else:
        columns += ["weights", "KV cache", "total", *(["fits", "sequences"] if gpu else [])]
        for row, m in zip(rows, plans):
            row += [exact(m.weights_bytes), exact(m.kv_cache_bytes), exact(m.total_bytes),
                    *(["yes" if m.fits else "no", exact(m.max_sequences or 0)] if gpu else [])]
    n = len(columns)
    byte_columns = [j for j in range(lead, n) if columns[j] not in ("fits", "sequences")]
    m0 = plans[0]
    if training:
        caption = (f"bytes per GPU of the worst pipeline stage; {m0.precision}, {m0.optimizer}, recompute "
                   f"{m0.recompute}, {m0.attention} attention, {m0.layout.describe()}. Peak adds the backward's and "
                   "the step's transients.")
    else:
        quant = getattr(m0, "quant", None)
        weights = m0.dtype if quant is None else f"{quant.name} (rest {m0.dtype})"
        caption = (f"bytes; weights {weights}, KV cache {m0.kv_dtype}; weights and KV cache only (activations and "
                   "the runtime's own memory are not counted).")
    if gpu:
        caption += f" GPU: {m0.gpu_name}, {exact(m0.capacity_bytes)} bytes ({binary_bytes(m0.capacity_bytes)})."
    caption += " Readable units: binary (GiB = 2^30 bytes); every figure exact in --format csv or json."
    return Table(f"{'Training' if training else 'Inference'} memory sweep: {len(rows):,} points", columns, rows,
                 caption, right=set(range(lead - len(axes), n)), units={j: binary_bytes for j in byte_columns},
                 label_columns=max(1, lead))


def infer_sweep_table(pairs, axes: list[str]) -> Table:
    """One row per point of an infer sweep: time to first token, the decode step and its tokens/s, and what
    bounds each phase. pairs: [(sweep.Point, InferencePlan)]."""
    points, plans = [p for p, _ in pairs], [plan for _, plan in pairs]
    columns, rows = _sweep_head(points, axes)
    lead = len(columns)
    columns += ["time to first token", "prefill bound", "decode step", "decode tokens/s", "decode bound"]
    for row, plan in zip(rows, plans):
        p, d = plan.prefill, plan.decode
        row += [f"{p.seconds * 1e3:,.3f} ms", p.bound, f"{d.seconds * 1e3:,.3f} ms", f"{d.tokens_per_s:,.0f}",
                d.bound]
    p0 = plans[0]
    caption = (f"{p0.gpu.name}, {p0.dtype} (KV cache {p0.kv_dtype}): dense datasheet peak {sci(p0.peak)} FLOP/s, "
               f"{p0.gpu.bandwidth_bytes_per_s / 1e12:,.2f} TB/s. Prefill of the context (the time to first token), "
               "then one decode step against it. A bound, not a measurement (docs/planning.md).")
    n = len(columns)
    return Table(f"Roofline sweep: {len(rows):,} points", columns, rows, caption,
                 right=set(range(lead - len(axes), n)) - {n - 1, n - 4}, label_columns=max(1, lead))


def tidy_markdown(columns: list[str], rows: Iterable[list[Any]]) -> Iterator[str]:
    """A tidy table in Markdown, a line at a time: one row per point, every figure as in the CSV (exact integers,
    no separators); a column of numbers (as the first row has it) right-aligned."""
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    rows = iter(rows)
    first = next(rows, None)
    right = {j for j, c in enumerate(columns) if first is not None and isinstance(first[j], (int, float))
             and not isinstance(first[j], bool)}
    yield from ("**Sweep**", "", line(columns), "| " + " | ".join("---:" if j in right else "---"
                                                                     for j in range(len(columns))) + " |")
    for row in () if first is None else itertools.chain([first], rows):
        yield line(["" if v is None else str(v) for v in row])


def tidy_csv(columns: list[str], rows: Iterable[list[Any]]) -> Iterator[str]:
    """The tidy CSV, a line at a time: the header, then one row per point."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in itertools.chain([columns], rows):
        writer.writerow(row)
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()


def tidy_json(columns: list[str], rows: Iterable[list[Any]]) -> Iterator[str]:
    """The tidy JSON, a record at a time: exactly what to_json gives for the list of records."""
    first = True
    for row in rows:
        yield ("[\n  " if first else ",\n  ") + json.dumps(dict(zip(columns, row)), indent=2).replace("\n", "\n  ")
        first = False
    yield "[]" if first else "\n]"


# ---- serving: capacity (plan.serve) and a request's life (plan.request) ------------------------------------------

def serve_table(c) -> Table:
    """A plan.serve.ServingCapacity: vLLM's KV cache arithmetic, one term a row, each with its source."""
    def row(name, how, value, source):
        return [name, how, exact(value), binary_bytes(value) if value >= 0 else "-" + binary_bytes(-value), source]

    util = c.gpu_memory_utilization
    util_text = f"{util.numerator}/{util.denominator}" if util.denominator > 10**6 else f"{float(util):g}"
    rows = [row(f"GPU: {c.gpu.name}", "datasheet memory", c.card_bytes, "tfcalc gpus"),
            row("budget", f"x gpu_memory_utilization {util_text}", c.budget_bytes,
                "Worker.determine_available_memory"),
            row("- weights", c.dtype + (f", 1/{c.tp} share" if c.tp > 1 else ""), c.weights_bytes,
                "tfcalc memory"),
            row("- activation peak", ("estimate: " if c.activation_estimated else "given: ")
                + f"{c.max_num_batched_tokens:,} tokens, {min(c.max_num_seqs, c.max_num_batched_tokens):,} requests",
                c.activation_bytes, "GPUModelRunner.profile_run"),
            row("- non-torch memory", "assumed (vLLM log)" if c.non_torch_assumed else "given",
                c.non_torch_bytes, "determine_available_memory"),
            row("= available for KV cache", "", c.available_bytes, "determine_available_memory"),
            row("KV cache per token", f"{c.kv_dtype}, every cached layer", c.kv_bytes_per_token, "tfcalc memory"),
            row("block", f"{c.block_size} tokens", c.block_bytes, "CacheConfig.block_size")]
    rows.append(["GPU blocks", "available // block", exact(c.num_blocks), "", "kv_cache_utils.get_num_blocks"])
    rows.append(["KV cache tokens", "blocks x block_size", exact(c.kv_tokens), "", "GPU KV cache size"])
    if c.state_bytes_per_sequence:
        rows.append(row("recurrent state per sequence", "counted per sequence", c.state_bytes_per_sequence,
                        "tfcalc memory"))
    if c.bytes_per_sequence:
        rows.append([f"sequences of {c.context:,} tokens", f"{c.blocks_per_sequence:,} blocks each"
                     + (" + state" if c.state_bytes_per_sequence else ""), exact(c.max_sequences), "",
                     "get_max_concurrency_for_kv_cache_config"])
    if c.longest_context is not None:
        bound = ("the model's position table" if c.model_max_context is not None
                 and c.model_max_context <= (c.longest_context_by_memory or 0) else "memory")
        rows.append(["longest context, one sequence", f"bounded by {bound}", exact(c.longest_context), "",
                     "estimate_max_model_len"])
    caption = ("vLLM's arithmetic (docs/serving.md cites each function). The card's bytes are the datasheet's: the "
               "driver reports a little less. The activation peak is an estimate (--activation-gib overrides it), "
               "non-torch memory an assumed figure (--non-torch-gib). Sliding-window and chunked layers are paged as full ones.")
    if c.state_bytes_per_sequence:
        caption += (" Recurrent state is counted per sequence beside the blocks (vLLM pages it with its hybrid "
                    "allocator: not reproduced).")
    if c.shortfall_bytes:
        caption += (f" Nothing is left for the KV cache: the weights and the engine's own memory exceed the budget by "
                    f"{exact(c.shortfall_bytes)} bytes ({binary_bytes(c.shortfall_bytes)}); vLLM would not start.")
    title = f"Serving capacity (vLLM) on {c.gpu.name}" + (f", per GPU of {c.tp} (tensor parallel)" if c.tp > 1
                                                          else "")
    return Table(title, ["", "how", "bytes", "readable", "source"], rows, caption, right={2, 3},
                 optional=[4, 3], aside=4, label_columns=1)


def request_table(life) -> Table:
    """A plan.request.RequestLife: time to first token, the decode steps summed, end to end, tokens/s."""
    kind = "roofline bound" if life.bound else f"estimate at {float(life.efficiency):g} of the roofline"
    d = life.decode

    def s(x: float) -> str:
        return f"{x * 1e3:,.3f} ms" if x < 1 else f"{x:,.3f} s"

    rows = [["time to first token", f"prefill {life.batch_size} x {life.prompt:,} tokens", s(life.ttft_s),
             sci(life.prefill.flops), binary_bytes(life.prefill.bytes)]]
    if life.batch_size > 1:
        rows.append(["  one request alone", f"prefill 1 x {life.prompt:,} tokens", s(life.ttft_one_s),
                     sci(life.prefill_one.flops), binary_bytes(life.prefill_one.bytes)])
    rows.append(["decode", f"{d.steps:,} steps" + (f", {d.contexts[0]:,}..{d.contexts[1]:,} cached"
                                                     if d.steps else ""),
                 s(d.seconds), sci(d.flops) if d.flops else "0", binary_bytes(d.bytes)])
    rows.append(["end to end", f"{life.output_tokens:,} output tokens", s(life.end_to_end_s), "", ""])
    rows.append(["tokens/s, one request", "output tokens / end to end", f"{life.tokens_per_s:,.1f}", "", ""])
    rows.append(["tokens/s, the batch", f"{life.batch_size} request{'s' if life.batch_size > 1 else ''}", f"{life.batch_tokens_per_s:,.1f}", "", ""])
    if d.steps:
        rows.append(["decode tokens/s, one request", "steps / decode time", f"{life.decode_tokens_per_s:,.1f}",
                     "", ""])
    caption = (f"Every time is {'a' if life.bound else 'an'} {kind}: each op at max(FLOPs / peak, bytes / bandwidth)"
               + ("" if life.bound else f" / {float(life.efficiency):g} (an assumed efficiency)")
               + ". Token 1 comes from the prefill; each further token is one decode step at its own context, "
                 "summed exactly. The batch runs in lockstep (docs/serving.md).")
    where = f"{life.gpu.name}" + (f", per GPU of {life.tp}" if life.tp > 1 else "")
    return Table(f"A request's life ({kind}) on {where}", ["", "what", "time", "FLOPs", "bytes moved"], rows,
                 caption, right={2, 3, 4}, optional=[4, 3], label_columns=1)
