"""The model as stacks of layers, compiled from a ModelSpec: which blocks are alike and how many there are.

A decoder- or encoder-only model is one stack (its components are named without a prefix: `attention/qkv`);
an encoder-decoder has an `encoder` and a `decoder` stack (`encoder/attention/qkv`, `decoder/cross_attention/q`).
Layers of a stack may differ (dense then MoE, every other block MoE, local and global attention). Counting
folds over the distinct layers with their repeat counts, found by arithmetic over the pattern's period, so its
cost does not grow with the number of layers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from math import gcd, lcm

from ..spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Layer:
    """What makes one block differ from another: the block kinds it is made of, in order (the names registered in
    tfcalc.arch.builders.KINDS; the inventory and the reference model compose the block from them), and its
    attention's mask and keys."""

    kinds: tuple[str, ...]  # e.g. ("attention", "mlp"); ("attention", "cross_attention", "moe")
    window: int | None  # the sliding window of its self-attention; None sees every key it may
    kv_shared: bool = False  # attends with an earlier block's keys and values (Gemma 4's KV sharing)
    chunk: int | None = None  # its self-attention sees only its query's chunk of positions (Llama 4)
    rotary: bool = True  # rotary turns its queries and keys (False: a NoPE block; only with rotary positions)
    # its tokens are the stack's input tokens / divisor: it runs after a kind inserted between blocks that merges
    # tokens (MiniCPM-V's window merger: 4, one token per 2 x 2 window of patches)
    divisor: int = 1

    @property
    def moe(self) -> bool:
        """A mixture of experts in place of the dense MLP."""
        return "moe" in self.kinds

    @property
    def cross(self) -> bool:
        """Cross-attention to the encoder's output (a decoder block of an encoder-decoder)."""
        return "cross_attention" in self.kinds

    @property
    def label(self) -> str:
        parts = ["moe" if self.moe else "dense",
                 f"window {self.window:,}" if self.window is not None
                 else f"chunks of {self.chunk:,}" if self.chunk is not None else "global"]
        return ", ".join(parts + (["cross-attention"] if self.cross else [])
                         + (["shared keys and values"] if self.kv_shared else []) + ([] if self.rotary else ["NoPE"])
                         + ([f"tokens / {self.divisor}"] if self.divisor != 1 else []))


@dataclass(frozen=True)
class Stack:
    name: str  # the component prefix: "" (one stack), "encoder" or "decoder"
    spec: ModelSpec
    n_layers: int
    causal: bool
    cross: bool  # its blocks attend to the encoder

    def prefix(self, component: str) -> str:
        return f"{self.name}/{component}" if self.name else component

    @property
    def _residues(self) -> int:
        """The patterns' period: block i's window is the attention pattern's entry i mod its length, its kinds the
        block pattern's."""
        spec = self.spec
        windows = len(spec.attention_pattern) if self.causal and spec.attention_pattern else 1
        rotary = len(spec.rotary_layers) if spec.rotary_layers else 1
        return lcm(windows, len(spec.block_pattern) if spec.block_pattern else 1, rotary)

    @property
    def _moe_every(self) -> int:
        return self.spec.moe_every if self.spec.is_moe else 1

    @property
    def _period(self) -> int:
        return lcm(self._residues, self._moe_every)

    def _boundaries(self) -> list[int]:
        """Layer indices where a rule that is not periodic changes: the first dense blocks, the windowed tail."""
        spec, points = self.spec, {0, self.n_layers}
        if spec.is_moe:
            points.add(min(spec.first_dense_layers, self.n_layers))
        if self.causal and spec.sliding_window is not None and spec.sliding_window_layers is not None:
            points.add(self.n_layers - spec.sliding_window_layers)
        if spec.kv_shared_layers:
            points.add(self.n_layers - spec.kv_shared_layers)
        for after, _, _ in self.inserted():  # the block a kind follows, and the blocks after it
            points |= {p for p in (after, after + 1) if 0 < p < self.n_layers}
        return sorted(points)

    def inserted(self) -> list[tuple[int, str, int]]:
        """The kinds the spec inserts once between two blocks of the stack (`BlockKind.inserted`: MiniCPM-V's window
        merger), each (the block it follows, its name, what it divides the tokens of the blocks after it by), by
        their sizes' `after` and `divisor`; those after the last block are left out."""
        from .builders import KINDS

        out = []
        for name in self.spec.kinds:
            kind = KINDS.get(name)
            if kind is not None and kind.inserted:
                sizes = self.spec.sizes(name)
                if 0 <= sizes.after < self.n_layers:
                    out.append((sizes.after, name, sizes.divisor))
        return out

    def divisor(self, i: int) -> int:
        """What the tokens of block i (of the final norm: i = n_layers) are the stack's input tokens divided by."""
        out = 1
        for after, _, by in self.inserted():
            out *= by if i > after else 1
        return out

    def layer(self, i: int) -> Layer:
        """The i-th block (from 0)."""
        spec = self.spec
        moe = spec.is_moe and i >= spec.first_dense_layers and (i + 1) % spec.moe_every == 0
        window = chunk = None
        kind = spec.attention_pattern[i % len(spec.attention_pattern)] if spec.attention_pattern else None
        if self.causal and spec.sliding_window is not None:
            if kind is not None:
                local = kind == "local"
            else:
                layers = self.n_layers if spec.sliding_window_layers is None else spec.sliding_window_layers
                local = i >= self.n_layers - layers
            window = spec.sliding_window if local else None
        if self.causal and spec.attention_chunk_size is not None and kind in (None, "chunked"):
            chunk = spec.attention_chunk_size
        rotary = spec.rotary_layers is None or spec.rotary_layers[i % len(spec.rotary_layers)]
        kv_shared = spec.kv_shared_layers > 0 and i >= self.n_layers - spec.kv_shared_layers
        inserted = tuple(name for after, name, _ in self.inserted() if after == i) if spec.kinds else ()
        divisor = self.divisor(i) if spec.kinds else 1
        if spec.block_pattern:  # the kinds as the pattern lists them (a window only where there is attention)
            from .builders import KINDS

            kinds = tuple(spec.block_pattern[i % len(spec.block_pattern)].split("+"))
            attends = any(k == "attention" or "attention" in KINDS[k].parts for k in kinds)
            return Layer((*kinds, *inserted), window if attends else None, kv_shared, rotary=rotary or not attends,
                         divisor=divisor)
        kinds = ("attention", *(("cross_attention",) if self.cross else ()), "moe" if moe else "mlp",
                 *(("per_layer_input",) if spec.d_per_layer_input and spec.parallel_block == "none" else ()))
        return Layer((*kinds, *inserted), window, kv_shared, chunk, rotary, divisor)

    def rotary_width(self, layer: Layer) -> int:
        """Channels of each query and key head that rotary turns in this block: rotary_dim or the block's d_head
        (a global block's may be its own, Gemma 4), rounded down to even."""
        spec = self.spec
        if spec.global_d_head is None:
            return spec.rotated
        d_head = spec.attention_shape(layer.window is not None)[0]
        return d_head - d_head % 2

    def rotary_widths(self) -> list[int]:
        """The distinct rotary widths of the stack's blocks with rotary (NoPE blocks have none): one pair of cos/sin
        tables each."""
        return sorted({self.rotary_width(layer) for layer in self.distinct() if layer.rotary})

    def distinct(self, lo: int = 0, hi: int | None = None) -> dict[Layer, int]:
        """Each distinct block and how many of the stack's blocks (of those from `lo` up to `hi`: a pipeline
        stage's) are like it, in order of first appearance.

        Between two boundaries a block depends only on its index modulo the pattern's length and on whether it is
        a multiple of moe_every, so it is looked at once per class of such blocks: each residue of the period once
        when the period is short, else each residue of the pattern twice (the MoE blocks among them found by the
        Chinese remainder theorem). The cost is independent of n_layers and of moe_every."""
        hi = self.n_layers if hi is None else hi
        bounds = sorted({lo, hi, *(p for p in self._boundaries() if lo < p < hi)})
        counts: Counter[Layer] = Counter()
        first: dict[Layer, int] = {}
        for lo, hi in zip(bounds, bounds[1:]):
            for i, n in self._classes(lo, hi):
                layer = self.layer(i)
                counts[layer] += n
                first[layer] = min(first.get(layer, i), i)
        return {layer: counts[layer] for layer in sorted(counts, key=first.__getitem__)}

    def _classes(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """(first index, blocks) of each class of alike blocks in [lo, hi), an interval between boundaries."""
        p, m = self._residues, self._moe_every
        period = lcm(p, m)
        if min(hi - lo, period) <= SHORT_PERIOD:  # i, i + period, ... < hi for each residue of the period
            return [(i, (hi - 1 - i) // period + 1) for i in range(lo, min(hi, lo + period))]
        out = []
        for r in range(min(p, hi - lo)):
            start = lo + r  # the blocks start, start + p, ... < hi: one residue of the pattern
            members = (hi - 1 - start) // p + 1
            moe = _first_multiple(start, p, m)  # the first of them with (i + 1) % m == 0: then every period-th
            n_moe = 0 if moe is None or moe >= hi else (hi - 1 - moe) // period + 1
            if n_moe:
                out.append((moe, n_moe))
            if members > n_moe:  # start or the next: two members in a row at multiples would make all of them so
                out.append((start if (start + 1) % m else start + p, members - n_moe))
        return out


SHORT_PERIOD = 4096  # up to this many residues of the period are looked at one by one


def _first_multiple(start: int, step: int, m: int) -> int | None:
    """The least i = start + step * t (t >= 0) with (i + 1) % m == 0, or None when there is none."""
    g = gcd(step, m)
    if (start + 1) % g:
        return None
    t = (-(start + 1) // g) * pow(step // g, -1, m // g) % (m // g)
    return start + step * t


def stacks(spec: ModelSpec) -> list[Stack]:
    if spec.is_encoder_decoder:
        return [Stack("encoder", spec, spec.n_encoder_layers, causal=False, cross=False),
                Stack("decoder", spec, spec.n_layers, causal=True, cross=True)]
    return [Stack("", spec, spec.n_layers, causal=spec.causal, cross=False)]
