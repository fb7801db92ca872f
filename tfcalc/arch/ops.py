"""The op records an inventory is made of: shapes and integers, nothing else (no torch, no config objects).

Each record answers every figure for itself, from its own shapes (torch's flop_counter keeps one formula per op;
here the formula lives on the record): its parameters, forward FLOPs, the FLOPs over the (query, key) pairs a mask
keeps, its non-matmul work, the bytes it moves on a roofline, its tensors on one of `tp` tensor-parallel GPUs, what
it keeps for backward and what it adds to an inference cache. A fold (`tfcalc.counts.folds`, the plans) is a sum
over records; it never asks what type a record is. A record type that does not define a figure raises
`UnsupportedFigure` naming the record and the figure (fvcore's loud `unsupported_ops()`): never a silent 0.

- `Matmul`: x [m, k] @ W [k, n], with the weight matrices it owns (0 when tied or when W is an activation).
- `AttentionCore`: softmax(q k^T) v for b x h heads, s_q queries against s_k keys, and which pairs the mask keeps.
- `Table`: a lookup table (token, position, token-type or relative-bias embedding): parameters, no matmul.
- `Norm`: a LayerNorm or RMSNorm over `rows` vectors of `width`: parameters and non-matmul work.
- `Elementwise`: activations, gates, residual adds, routing: non-matmul work only.

A kind may bring a record type of its own, in its package (the hybrids' `Conv`, `SSDScan`, `DeltaRule`): imported
with the kind, when a spec names it.

A record's `role` says what it is for, so that no consumer tests a component's name: a matmul's is "" (a plain
projection), "head", "pooler", "router", "shared_gate" (the shared experts' sigmoid gate), "encoder_kv" (the
keys and values of cross-attention, read off the encoder's output), "patch" or "features" (a patch embedding's or
an audio front end's first convolution: it reads the model's input, which needs no gradient), "constant" (a product
of constants, no backward at all: Mllama's tile mask) or "conv" (the audio front end's second convolution); an attention core's "core"; a norm's "norm";
a table's is its kind; an elementwise op's its kind. `sublayer` is the block kind that made it ("attention", "mlp",
"moe", "embedding", "head", ...), set when the inventory composes a block.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import TfcalcError

# Rough FLOPs per element of non-matmul work, stated once (the activation constants live with the builders).
SOFTMAX_PER_SCORE = 6  # scale, max, subtract, exp, sum, divide
# mean/var (or mean square), normalise, affine (a layer norm without bias: no add)
NORM_PER_ELEMENT = {"layernorm": 8, "layernorm_no_bias": 7, "rmsnorm": 4}
NON_MATMUL_KIND = {"activation": "activations", "gate": "activations", "scalar_gate": "activations",
                   "residual": "residual",
                   "routing": "moe/routing"}
STAT_BYTES = 4  # a norm's per-row statistics, the loss and a fused attention's logsumexp are fp32
# how the attention cores run in a train step: "fused" (FlashAttention, torch SDPA's flash and memory-efficient
# kernels: q, k, v, the output and an fp32 logsumexp per query row kept, no N x N tensor) or "eager" (two matmuls
# and a softmax: its probabilities kept)
ATTENTION = ("fused", "eager")


def matmul(m: int, k: int, n: int) -> int:
    """FLOPs of [m, k] @ [k, n]: m * n dot products of length k, 2 FLOPs per multiply-add. The only place
    that multiplies by 2."""
    return 2 * m * k * n


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def kept_up_to(n: int, window: int | None) -> int:
    """sum over p = 1..n of min(p, window): the keys kept by queries at positions 0..n-1 under a causal mask."""
    if window is None or n <= window:
        return n * (n + 1) // 2
    return window * (window + 1) // 2 + (n - window) * window


def kept_in_chunks(n: int, chunk: int) -> int:
    """sum over p = 0..n-1 of (p mod chunk) + 1: the keys kept by queries at positions 0..n-1 under a chunked causal
    mask (Llama 4's chunked attention: query p sees keys floor(p / chunk) * chunk .. p). Each whole chunk keeps
    1 + 2 + ... + chunk pairs, the part-filled last one 1 + ... + (n mod chunk)."""
    whole, rest = divmod(n, chunk)
    return whole * (chunk * (chunk + 1) // 2) + rest * (rest + 1) // 2


class UnsupportedFigure(TfcalcError):
    """A record that does not define a figure a fold asks of it."""


@dataclass(frozen=True, slots=True)
class Parallel:
    """Where one GPU stands in a parallel layout, as a record's saved activations need it: tensor and context
    parallel sizes and whether sequence parallelism splits what tensor parallelism keeps whole; and which attention
    kernel runs the cores (`ATTENTION`: "fused", FlashAttention or torch SDPA's flash and memory-efficient
    kernels, or "eager", two matmuls and a softmax)."""

    tp: int = 1
    cp: int = 1
    sp: bool = False
    attention: str = "fused"

    @property
    def whole(self) -> int:
        """How many ways what tensor parallelism replicates is split: tp under sequence parallelism, else 1."""
        return self.tp if self.sp and self.tp > 1 else 1

    def part(self, n: int, split: int) -> int:
        """One GPU's share of n split `split` ways and over the context-parallel GPUs."""
        return _ceil(n, split * self.cp)


@dataclass(frozen=True, slots=True)
class Linear:
    """One linear module of the implementation behind a Matmul record, as a LoRA adapter (PEFT) sees it.

    `target`: the name a user adapts it by (q, k, v, o, gate, up, down, experts; "" for a linear only "all-linear"
    adapts: a router, a mixer's projection). `out`: its output width. `rank`: its adapter's rank as a multiple of the
    adapter rank (PEFT gives the routed experts' fused gate_up projection twice the rank: the w1 and w3 it stands
    for). `delta`: PEFT folds the update B·A into the weight at each forward (its ParamWrapper over a parameter: the
    experts, the router) instead of running x·A·B beside the frozen matmul. `part`: this record's matrix is part of
    the module of the record before it (the routed experts' gate is half of gate_up, whose adapter the up record
    holds): adapted with it, its adapter counted there. `partial`: its output reaches only some inputs of the scan
    after it (the gated DeltaNet's b, a and z projections): as the model's first adapter it would
    start a gradient that the scan's backward follows only in part, which tfcalc does not count (refused).
    `unused`: the implementation multiplies by the module's weight without calling the module (transformers' Mamba and
    Jamba: dt_proj.weight @ dt): PEFT's adapter on it holds trainable parameters that never run (no FLOPs, no
    gradient, nothing kept)."""

    target: str
    out: int
    rank: int = 1
    delta: bool = False
    part: bool = False
    partial: bool = False
    unused: bool = False


@dataclass(frozen=True, slots=True)
class Lora:
    """A low-rank adapter on a Matmul record: rank r, DoRA's magnitude vector or not, and the targets it adapts
    (None: every linear but the head, PEFT's "all-linear")."""

    rank: int
    dora: bool = False
    targets: frozenset[str] | None = None


class Record:
    """What every op record answers. Each figure here raises until a record type defines it. A record type is a
    frozen dataclass (slots) with a `component`, a `role` (a field or a class attribute) and a `sublayer` field,
    which the inventory sets to the kind that made it."""

    __slots__ = ()
    component: str

    windowed = False  # a sliding-window mask (AttentionCore's own)
    expert = False  # routed experts' weights (Matmul's own): sharded over expert-parallel GPUs
    state_bytes = 0  # bytes per element of its `state`; 0: the activations' dtype (an SSM state is fp32: 4)
    lora = None  # its low-rank adapter (Matmul's own, set by tfcalc.plan.adapters)
    shares_input = False  # its input is an earlier op's (Matmul's and Norm's own)

    def _missing(self, figure: str):
        raise UnsupportedFigure(f"{type(self).__name__} {self.component!r} does not define {figure}: tfcalc "
                                f"does not count this figure for a {self.sublayer or 'such'} block yet, rather than "
                                "count it wrong (add the figure to the record type)")

    # ---- counting
    def params(self) -> int:
        """Parameters of one set of this op's weights."""
        return self._missing("params")

    def parameters(self) -> dict[str, int]:
        """Parameters per component: a record that may hold weights reports its row, even at 0 (a tied head)."""
        return self._missing("parameters")

    def inactive_params(self) -> int:
        """Parameters one token does not touch (the routed experts it is not sent to)."""
        return self._missing("inactive_params")

    def matrix_params(self, tp: int = 1) -> int:
        """Parameters in weight matrices of linear layers (what a weight-only scheme quantizes), on one of `tp`
        tensor-parallel GPUs."""
        return self._missing("matrix_params")

    def matrices(self, tp: int = 1) -> list[tuple[int, int, int]]:
        """The linear layers' weight matrices as a checkpoint stores them, on one of `tp` tensor-parallel GPUs:
        (k inputs, n outputs, how many), one entry per distinct shape. A record with no matrix has none."""
        if self.matrix_params(tp) == 0:
            return []
        return self._missing("matrices")

    def forward(self) -> dict[str, int]:
        """Forward matmul FLOPs per component."""
        return self._missing("forward")

    def masked(self, windows: bool) -> dict[str, int]:
        """Forward FLOPs over the pairs the mask keeps, for the components a mask changes."""
        return self._missing("masked")

    def non_matmul(self) -> dict[str, int]:
        """An estimate of non-matmul forward FLOPs, per kind of work."""
        return self._missing("non_matmul")

    def names(self) -> list[str]:
        """The components this record reports under, in order."""
        return self._missing("names")

    # ---- inference
    def cache(self, tp: int = 1) -> dict[str, int]:
        """Elements this op keeps in an inference cache after the step, on one of `tp` GPUs, per component."""
        return self._missing("cache")

    def cache_per_token(self, tp: int = 1) -> int:
        """Cache elements one more token of one sequence adds (a window caps the total, not this)."""
        return self._missing("cache_per_token")

    def state(self, tp: int = 1) -> dict[str, int]:
        """Elements of recurrent state (a convolution's last positions) this op keeps for the next inference step,
        on one of `tp` GPUs, per component: a constant per sequence, whatever the context."""
        return self._missing("state")

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        """(FLOPs, bytes moved) of one run on one of `tp` GPUs; None when it moves nothing."""
        return self._missing("cost")

    def collective(self, act: int, tp: int) -> tuple[str, int, str] | None:
        """(name, bytes one GPU sends, what) of the tensor-parallel collective that ends this op, or None."""
        return self._missing("collective")

    # ---- training
    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        """The sizes of the parameter tensors one GPU holds (copy_tied: a later pipeline stage's own copy of a
        tied head's matrix)."""
        return self._missing("tensors")

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        """Bytes this op keeps for its backward on one GPU (one microbatch), per what; `a` bytes per activation."""
        return self._missing("saved")

    def backward_extra(self) -> int:
        """FLOPs its backward spends beyond 2 x its forward (the input's and the weight's gradients of each matmul):
        0 for every op whose matmuls all need both; a record whose backward runs products its forward does not (the
        gated delta rule's triangular solves) or skips some (a product of a constant) says so here."""
        return 0

    def gemm(self) -> tuple[int, int, int] | None:
        """The (m, k, n) of the GEMM one weight matrix runs (a timed profile's shape), or None: no weight GEMM."""
        return self._missing("gemm")

    def scores(self) -> int:
        """Score elements a recomputed attention core materialises again."""
        return self._missing("scores")

    # ---- fine-tuning with adapters (frozen weights)
    def saved_frozen(self, a: int, recompute: str, par: Parallel, grad: bool) -> dict[str, int]:
        """What it keeps for backward when the model's weights are frozen and adapters train: `grad`, whether its
        input carries a gradient (an adapter runs before it). Without one, autograd records nothing."""
        return self._missing("saved_frozen")

    def idle(self):
        """This record over no rows: its parameters, none of its work (a kind built but not run, MiniCPM-OCR's
        window merger in "4x" mode)."""
        return self._missing("idle")

    def adapt(self, lora: Lora):
        """This record with `lora` on the linears it targets: itself when it has none (no linear module of its own:
        an attention core, a norm, a table, a convolution, a scan)."""
        return self

    def frozen_backward(self, grad: bool = True) -> int:
        """Backward FLOPs of this op when its own weights are frozen: its input's gradient when `grad` (something
        before it trains: torch computes no gradient for an input that needs none), and a weight's where an adapter
        folded into it makes one needed; not its adapter's own backward (adapter_backward)."""
        return self._missing("frozen_backward")

    def transient(self, par: Parallel) -> int:
        """Bytes this op materialises again in its own backward whatever the recompute mode (a scan run under
        checkpoint brings back its intermediates): on top of what is kept, at the peak. 0: it recomputes nothing."""
        return self._missing("transient")


@dataclass(frozen=True, slots=True)
class Matmul(Record):
    """x: [m, k] @ W: [k, n]. `weights` matrices of [k, n] (and biases [n]) belong to this op: 1 for a linear,
    E for E routed experts (m is then all the rows sent to any of them), 0 for a tied or activation operand.
    `active`: the weight matrices one token touches (top_k of E); None means all of them.
    `split`: how tensor parallelism (Megatron-LM) splits W: "column" (the n outputs; x is whole on every GPU),
    "row" (the k inputs; x arrives split), "" (not split: every GPU holds all of W).
    `shares_input`: x is an input an earlier op already keeps (a gate beside its up projection, a parallel block's
    MLP beside attention on one normalised x): kept once.
    `linears`: the implementation's linear modules behind it (q, k and v of a fused projection), which are also the
    separate tensors a checkpoint stores (`parts`).
    `unbiased`: outputs of a biased record that have no bias (Whisper's k_proj inside a fused q/k/v: its bias is
    [n - unbiased])."""

    component: str
    m: int
    k: int
    n: int
    weights: int = 1
    bias: bool = False
    active: int | None = None
    split: str = ""
    shares_input: bool = False
    role: str = ""
    sublayer: str = ""
    # the implementation's linear modules behind this record (None: one [k, n] linear, or none when it owns no
    # matrix; (): none of its own, its matrix is part of another record's module) and its adapter, if any
    linears: tuple[Linear, ...] | None = field(default=None, repr=False)
    lora: Lora | None = field(default=None, repr=False)
    unbiased: int = 0
    # elements of the input it keeps for its weight's gradient when not m x k: a convolution keeps its input, not its
    # windows (Whisper's conv2 over [B, D, F] at stride 2 reads windows of [B * F/2, 3 D]); 0: m x k
    input_kept: int = field(default=0, repr=False)

    @property
    def biases(self) -> int:
        """Elements of one bias: n, less the outputs without one (0 without a bias)."""
        return self.n - self.unbiased if self.bias else 0

    @property
    def parts(self) -> tuple[int, ...]:
        """The output widths of the separate tensors a checkpoint stores for this record: its own linears'
        (q, k and v of a fused projection); () when it has none of its own."""
        return tuple(linear.out for linear in self.linears or () if not linear.part)

    @property
    def params_each(self) -> int:
        """One weight matrix and its bias: nn.Linear(k, n) has weight [n, k] and bias [n]."""
        return self.k * self.n + self.biases

    @property
    def expert(self) -> bool:
        """Routed experts: each token through `active` of the `weights` matrices."""
        return self.active is not None

    def params(self) -> int:
        return self.weights * self.params_each

    def parameters(self) -> dict[str, int]:
        return {self.component: self.params()}

    def inactive_params(self) -> int:
        return 0 if self.active is None else (self.weights - self.active) * self.params_each

    def matrix_params(self, tp: int = 1) -> int:
        k, n = self._shape_on(tp)
        return self.weights * k * n

    def matrices(self, tp: int = 1) -> list[tuple[int, int, int]]:
        if not self.weights:
            return []
        k, n = self._shape_on(tp)
        if not self.parts or sum(self.parts) != self.n:
            return [(k, n, self.weights)]
        widths: dict[int, int] = {}
        for part in self.parts:  # each stored tensor split as its fused record is (column-parallel: n / tp each)
            width = _ceil(part, tp) if self.split == "column" else part
            widths[width] = widths.get(width, 0) + self.weights
        return [(k, width, count) for width, count in widths.items()]

    def forward(self) -> dict[str, int]:
        return {self.component: matmul(self.m, self.k, self.n)}

    def masked(self, windows: bool) -> dict[str, int]:
        return {}

    def non_matmul(self) -> dict[str, int]:
        return {"bias": self.m * self.biases} if self.bias and self.weights else {}

    def names(self) -> list[str]:
        return [self.component]

    def cache(self, tp: int = 1) -> dict[str, int]:
        return {}

    def cache_per_token(self, tp: int = 1) -> int:
        return 0

    def state(self, tp: int = 1) -> dict[str, int]:
        return {}

    def _shape_on(self, tp: int) -> tuple[int, int]:
        """(k, n) of one GPU's share of W."""
        if self.split == "column":
            return self.k, _ceil(self.n, tp)
        if self.split == "row":
            return _ceil(self.k, tp), self.n
        return self.k, self.n

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        """`weight_bytes`: bytes per weight, or a function of (record, matrices read) to their bytes (a quantized
        format's, tfcalc.plan.quant)."""
        if not self.m:
            return None
        k, n = self._shape_on(tp)
        read = min(self.weights, self.m) if self.expert else self.weights  # routed: experts touched
        if not read:
            weights = k * n * act  # tied head: the table
        elif callable(weight_bytes):
            weights = weight_bytes(self, read)
        else:
            weights = int(read * k * n * weight_bytes)
        return matmul(self.m, k, n), weights + self.m * (k + n) * act

    def collective(self, act: int, tp: int) -> tuple[str, int, str] | None:
        if not self.m:
            return None
        if self.split == "row":
            size = self.m * self.n * act  # [m, n] partial sums
            return f"{self.component} all-reduce", 2 * (tp - 1) * size // tp, "all-reduce"
        if self.role == "head":
            size = self.m * self.n * act  # the logits, [m, V]
            return "head all-gather", (tp - 1) * size // tp, "all-gather"
        return None

    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        # a tied head owns no matrix (the token table is counted), unless a later pipeline stage keeps a copy
        matrices = _ceil(self.weights, ep) if self.expert else self.weights or int(copy_tied)
        k, n = self._shape_on(tp)
        bias = _ceil(self.biases, tp) if self.split == "column" else self.biases
        return ([k * n] + ([bias] if self.bias else [])) * matrices

    def gemm(self) -> tuple[int, int, int] | None:
        if not self.m:
            return None
        # routed experts: an even share of the rows each
        return max(1, self.m // self.weights) if self.weights > 1 else self.m, self.k, self.n

    def modules(self) -> tuple[Linear, ...]:
        """The linear modules an adapter may target: the builder's, else one [k, n] linear when the record owns a
        matrix and is not the head (PEFT's "all-linear" leaves the output layer out)."""
        if self.linears is not None:
            return self.linears
        return (Linear("", self.n),) if self.weights and self.role != "head" else ()

    def idle(self) -> Matmul:
        return replace(self, m=0)

    def adapt(self, lora: Lora) -> Matmul:
        if not any(lora.targets is None or lin.target in lora.targets for lin in self.modules()):
            return self
        return replace(self, lora=lora)

    def adapted(self) -> tuple[Linear, ...]:
        """The modules its adapter adapts."""
        if self.lora is None:
            return ()
        targets = self.lora.targets
        return tuple(lin for lin in self.modules() if targets is None or lin.target in targets)

    def adapter_runs(self) -> bool:
        """Its adapter runs in the forward (some adapted module is called): from here on a gradient flows."""
        return any(not lin.unused for lin in self.adapted())

    def adapter_params(self) -> int:
        """Trainable parameters of its adapter: per weight matrix (E for routed experts) and adapted linear, A [k, r]
        and B [r, out] (r times the linear's rank multiple); DoRA adds a magnitude vector [out]."""
        lora = self.lora
        if lora is None:
            return 0
        return self.weights * sum(lin.rank * lora.rank * (self.k + lin.out) + (lin.out if lora.dora else 0)
                                  for lin in self.adapted() if not lin.part)

    def adapter_tensors(self) -> list[int]:
        """The sizes of its adapter's parameter tensors: A, B (and DoRA's magnitude) per module; PEFT's ParamWrapper
        stacks the experts' in one A [E r, k] and one B [out, E r]."""
        lora, out = self.lora, []
        for lin in self.adapted():
            if not lin.part:
                r = lin.rank * lora.rank
                out += [self.weights * r * self.k, self.weights * r * lin.out] + (
                    [lin.out] * self.weights if lora.dora else [])
        return out

    def adapter_flops(self) -> dict[str, int]:
        """Forward FLOPs of its adapter. x·A·B beside the frozen matmul: [m, k] @ [k, r] and [m, r] @ [r, out];
        a folded update (delta): B [out, r] @ A [r, k] once per weight matrix per step; DoRA also forms B·A for
        its weight norm (detached: no backward, as PEFT and the DoRA paper, sec. 4.3)."""
        lora = self.lora
        if lora is None:
            return {}
        update = dora = 0
        for lin in self.adapted():
            r = lin.rank * lora.rank
            if lin.part or lin.unused:
                continue
            if lin.delta:
                update += self.weights * matmul(lin.out, r, self.k)
            else:
                update += matmul(self.m, self.k, r) + matmul(self.m, r, lin.out)
            if lora.dora:
                dora += self.weights * matmul(lin.out, r, self.k)
        return {"adapters": update, "dora norm": dora} if lora.dora else {"adapters": update}

    def saved_frozen(self, a: int, recompute: str, par: Parallel, grad: bool) -> dict[str, int]:
        """A frozen linear keeps nothing of its own (torch saves x only for the weight's gradient, which a frozen
        weight does not have; its input's gradient needs W alone). Its adapter keeps x (for A's gradient) and
        x·A [m, r] per x·A·B (for B's); an update folded into the weight keeps x and the merged weight W + B·A
        (an activation now: the matmul needs it for x's gradient). The head's loss, a pooler's tanh output, an
        activation operand (W = 0 matrices of its own) keep what they keep in full training."""
        if self.role in ("head", "pooler", "shared_gate") or (self.weights == 0 and self.role == ""):
            kept = self.saved(a, recompute, par) if grad or self.role == "head" else {}
            if self.role == "head":
                kept = {k: v for k, v in kept.items() if k != "input"}
            return kept
        adapted = [lin for lin in self.adapted() if not lin.part and not lin.unused]
        if not adapted or self.m == 0:
            return {}
        split = par.tp if self.split == "row" else par.whole
        # an input shared with the linear before it (a gate beside up) is kept once, by whichever keeps it first
        kept = {"shared input" if self.shares_input else "input": par.part(self.m * self.k * a, split)}
        rank = self.lora.rank
        low = sum(self.m * lin.rank * rank for lin in adapted if not lin.delta)
        merged = sum(self.weights * self.k * lin.out for lin in adapted if lin.delta)
        if low:
            kept["adapter"] = par.part(low * a, par.whole)
        if merged:
            kept["merged weight"] = merged * a
        return kept

    def frozen_backward(self, grad: bool = True) -> int:
        # the input's gradient, [m, n] @ W^T, when the input needs one; the weight's where W is an activation (both
        # operands need a gradient) or an adapter's update is folded into W (W + B·A needs its gradient to reach A
        # and B)
        delta = any(lin.delta for lin in self.adapted())
        weight_grad = delta or (self.weights == 0 and self.role != "head" and grad)
        return matmul(self.m, self.k, self.n) * (int(grad) + int(weight_grad))

    def adapter_backward(self, grad: bool = True) -> int:
        """Backward FLOPs of its adapter. x·A·B: B's gradient (xA)^T dy and the gradient of xA, dy B^T, A's x^T d(xA),
        and x's d(xA) A^T only when x needs a gradient (2 x forward with it); a folded update: A's and B's gradients
        from W's, two matmuls of B·A's size (2 x its forward). DoRA's weight norm is detached: none."""
        lora = self.lora
        if lora is None:
            return 0
        total = 0
        for lin in self.adapted():
            r = lin.rank * lora.rank
            if lin.part or lin.unused:
                continue
            if lin.delta:
                total += 2 * self.weights * matmul(lin.out, r, self.k)
            else:
                total += 2 * matmul(self.m, r, lin.out) + matmul(self.m, self.k, r) * (1 + int(grad))
        return total

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        if self.role == "shared_gate":  # sigmoid(x W) * shared: the sigmoid's output [T, 1] and the shared
            # experts' sum [T, D], which the multiply keeps (x is the router's)
            return {"gate": par.part((self.m * self.n + self.m * self.k) * a, par.whole)}
        if self.shares_input or self.m == 0:
            return {}
        if self.role in ("patch", "features") and self.weights:  # it reads the step's input (images, mel frames):
            return {}  # kept, but no activation of the step, as token ids are not
        split = par.tp if self.split == "row" else par.whole
        saved = {"input": par.part((self.input_kept or self.m * self.k) * a, split)}
        if self.role == "head":  # the loss: the fp32 log-softmax of the logits (vocabulary-parallel), the loss
            # value and nll_loss's total weight (fp32 scalars)
            saved["loss"] = par.part(self.m * self.n * STAT_BYTES, par.tp) + 2 * STAT_BYTES
        if self.role == "pooler":  # tanh keeps its output
            saved["input"] *= 2
        return saved

    def scores(self) -> int:
        return 0

    def transient(self, par: Parallel) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class Mask:
    """Which (query, key) pairs attention keeps. Query i sits at key position `offset + i` (offset = cached
    tokens before the queries). causal: keys at or before the query; window: also within the last `window`; chunk:
    also in the query's own chunk of positions (Llama 4's chunked attention: positions c * chunk .. (c + 1) * chunk - 1
    form chunk c)."""

    causal: bool
    window: int | None = None
    chunk: int | None = None


@dataclass(frozen=True, slots=True)
class AttentionCore(Record):
    """scores = q [b, h, s_q, d_qk] @ k^T [b, h, d_qk, s_k]; out = probs [b, h, s_q, s_k] @ v [b, h, s_k, d_v].

    The keys and values come from `h_kv` heads (GQA, MQA: h_kv < h). `cached`: an inference step keeps them in a
    KV cache (a decoder's self-attention and its cross-attention; not an encoder's)."""

    component: str
    b: int
    h: int
    s_q: int
    s_k: int
    d_qk: int
    d_v: int
    mask: Mask
    h_kv: int = 0  # 0: h (one key/value head per query head)
    cached: bool = False
    sinks: int = 0  # logit columns the softmax has beside the keys' (gpt-oss's attention sinks: 1), no value
    # elements the KV cache keeps per token (all heads); 0: kv_heads * (d_qk + d_v), the keys and values themselves.
    # Multi-head latent attention caches its latent and shared rotary key instead: kv_lora_rank + qk_rope_dim
    cache_width: int = 0
    # its keys and values are an earlier block's (Gemma 4's KV sharing): not its own to cache or keep for backward
    shares_kv: bool = False
    sublayer: str = ""

    role = "core"  # the scores and value mixing (recomputed under selective recomputation)

    def idle(self) -> AttentionCore:
        return replace(self, b=0)

    @property  # type: ignore[misc]
    def windowed(self) -> bool:
        """A local mask (a sliding window or chunks): the windowed figure differs from the causal one."""
        return self.mask.window is not None or self.mask.chunk is not None

    def _keys_cached(self) -> int:
        """Keys a cache keeps for this attention: all of them, at most the window (a ring buffer keeps the last
        `window`) or at most a chunk (transformers' cache keeps a chunked layer as a sliding window of chunk keys:
        DynamicSlidingWindowLayer with sliding_window=attention_chunk_size)."""
        local = self.mask.window if self.mask.window is not None else self.mask.chunk
        return self.s_k if local is None else min(self.s_k, local)

    @property
    def kv_heads(self) -> int:
        return self.h_kv or self.h

    def cached_per_token_on(self, tp: int) -> int:
        """Elements one token adds to this attention's KV cache (`cache_width`, else keys and values) on one of `tp`
        tensor-parallel GPUs: its share of the key/value heads (one, copied, when tp is more than the heads, as vLLM
        does); a latent (`cache_width`) is not split by heads: whole on every GPU."""
        return self.cache_width or max(1, self.kv_heads // tp) * (self.d_qk + self.d_v)

    def pairs(self, windows: bool) -> int:
        """(query, key) pairs the mask keeps. Query i is at key position (s_k - s_q) + i and sees the keys at or
        before it (causal), within the last `window` of them when `windows`."""
        if not self.mask.causal:
            return self.s_q * self.s_k
        if windows and self.mask.chunk is not None:  # queries at positions s_k - s_q .. s_k - 1, each in its chunk
            return kept_in_chunks(self.s_k, self.mask.chunk) - kept_in_chunks(self.s_k - self.s_q, self.mask.chunk)
        window = self.mask.window if windows else None
        return kept_up_to(self.s_k, window) - kept_up_to(self.s_k - self.s_q, window)

    def params(self) -> int:
        return 0

    def parameters(self) -> dict[str, int]:
        return {}

    def inactive_params(self) -> int:
        return 0

    def matrix_params(self, tp: int = 1) -> int:
        return 0

    def forward(self) -> dict[str, int]:
        return {self.component + "/scores": self.b * self.h * matmul(self.s_q, self.d_qk, self.s_k),
                self.component + "/values": self.b * self.h * matmul(self.s_q, self.s_k, self.d_v)}

    def masked(self, windows: bool) -> dict[str, int]:
        """Scores and value mixing over the pairs the mask keeps (what a causal or sliding-window kernel such as
        FlashAttention needs)."""
        kept = self.pairs(windows)
        return {self.component + "/scores": self.b * self.h * matmul(kept, self.d_qk, 1),
                self.component + "/values": self.b * self.h * matmul(kept, 1, self.d_v)}

    def non_matmul(self) -> dict[str, int]:
        # a sink (gpt-oss) is one more logit in each softmax row
        return {"attention/softmax": self.b * self.h * self.s_q * (self.s_k + self.sinks) * SOFTMAX_PER_SCORE}

    def names(self) -> list[str]:
        return [self.component + "/scores", self.component + "/values"]

    def cache(self, tp: int = 1) -> dict[str, int]:
        """Keys [b, kv heads, tokens, d_qk] and values [b, kv heads, tokens, d_v] of the keys attended to (at most
        the window: a ring buffer keeps the last `window`; at most a chunk: `_keys_cached`), or MLA's latent
        (cache_width)."""
        if not self.cached:
            return {}
        return {self.component: self.b * self._keys_cached() * self.cached_per_token_on(tp)}

    def cache_per_token(self, tp: int = 1) -> int:
        # cross-attention caches the encoder's tokens, not the decoder's
        return self.cached_per_token_on(tp) if self.cached and self.mask.causal else 0

    def state(self, tp: int = 1) -> dict[str, int]:
        return {}

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        if not self.s_q:
            return None
        kept = self.pairs(windows=True)
        h, kv_heads = self.h // tp, max(1, self.kv_heads // tp)  # key/value heads copied when tp > Hkv
        flops = self.b * h * (matmul(kept, self.d_qk, 1) + matmul(kept, 1, self.d_v))
        if self.mask.chunk is not None:  # from the first query's chunk start to the last key
            keys = self.s_k - (self.s_k - self.s_q) // self.mask.chunk * self.mask.chunk
        else:
            keys = self.s_k if self.mask.window is None else min(self.s_k, self.mask.window + self.s_q - 1)
        moved = (self.b * h * self.s_q * (self.d_qk + self.d_v) * act  # q in, out
                 + int(self.b * kv_heads * keys * (self.d_qk + self.d_v) * kv))  # every key and value read
        return flops, moved

    def collective(self, act: int, tp: int) -> tuple[str, int, str] | None:
        return None

    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        return []

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        """q, k and v (k and v at the key/value heads) whatever the kernel. Eager: its softmax probabilities
        [b, h, s_q, s_k (+ a sink's column)]. Fused (torch's `_scaled_dot_product_flash_attention` and its CPU
        twin, FlashAttention): its output [b, h, s_q, d_v] in the activation dtype and the logsumexp of each row
        [b, h, s_q] in fp32, no N x N tensor. Selective recomputation runs the core again in backward: it keeps
        neither (its inputs q, k, v are kept anyway)."""
        q = self.b * self.h * self.s_q * self.d_qk
        # shared keys and values are kept by the block that made them
        kv = 0 if self.shares_kv else self.b * self.kv_heads * self.s_k * (self.d_qk + self.d_v)
        saved = {"qkv": par.part(q * a, par.tp) + par.part(kv * a, par.tp)}
        if recompute != "none":
            return saved
        if par.attention == "fused":
            rows = self.b * self.h * self.s_q
            saved["output"] = par.part(rows * self.d_v * a, par.tp)
            saved["logsumexp"] = par.part(rows * STAT_BYTES, par.tp)
        else:  # with a sink's column
            saved["probabilities"] = par.part(self.b * self.h * self.s_q * (self.s_k + self.sinks) * a, par.tp)
        return saved

    def gemm(self) -> tuple[int, int, int] | None:
        return None  # batched matmuls of activations: no weights

    def frozen_backward(self, grad: bool = True) -> int:
        # no weights: the gradients of q, k and v, as in full training, when they need one
        return 2 * sum(self.forward().values()) if grad else 0

    def saved_frozen(self, a: int, recompute: str, par: Parallel, grad: bool) -> dict[str, int]:
        return self.saved(a, recompute, par) if grad else {}

    def backward_recompute(self) -> int:
        """FLOPs a fused kernel's backward (FlashAttention, torch SDPA) spends computing the scores q k^T again
        from the q, k and v it kept: its fifth matmul, beside the four of the gradients (torch's
        `sdpa_backward_flop`)."""
        return self.b * self.h * matmul(self.s_q, self.d_qk, self.s_k)

    def scores(self) -> int:
        return self.b * self.h * self.s_q * self.s_k

    def transient(self, par: Parallel) -> int:
        return 0  # what selective recomputation brings back is scores(), by recompute mode


class _NoMatmul:
    """The figures of a record that does no matmul and caches nothing."""

    __slots__ = ()

    def frozen_backward(self, grad: bool = True) -> int:
        return 0

    def saved_frozen(self, a: int, recompute: str, par: Parallel, grad: bool) -> dict[str, int]:
        # a norm, an activation, a table keep for their input's gradient what they keep in full training
        return self.saved(a, recompute, par) if grad else {}

    def inactive_params(self) -> int:
        return 0

    def matrix_params(self, tp: int = 1) -> int:
        return 0

    def forward(self) -> dict[str, int]:
        return {}

    def masked(self, windows: bool) -> dict[str, int]:
        return {}

    def cache(self, tp: int = 1) -> dict[str, int]:
        return {}

    def cache_per_token(self, tp: int = 1) -> int:
        return 0

    def state(self, tp: int = 1) -> dict[str, int]:
        return {}

    def collective(self, act: int, tp: int) -> tuple[str, int, str] | None:
        return None

    def gemm(self) -> tuple[int, int, int] | None:
        return None

    def scores(self) -> int:
        return 0

    def transient(self, par: Parallel) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class Table(_NoMatmul, Record):
    """A lookup table of `rows` x `dim` parameters (an embedding); a lookup is not a matmul. `tokens`: the tokens
    a token table looks up in the step (its vocabulary-parallel all-reduce sums their rows)."""

    component: str
    rows: int
    dim: int
    kind: str = "token"  # "token", "position" (learned or relative-bias), "token_type", "per_layer", "sinks" ([1, H])
    tokens: int = 0
    sublayer: str = ""
    frozen: bool = False  # a parameter that does not train (requires_grad False: Whisper's sinusoidal positions)

    @property
    def role(self) -> str:
        return self.kind

    def params(self) -> int:
        return self.rows * self.dim

    def parameters(self) -> dict[str, int]:
        return {self.component: self.params()}

    def non_matmul(self) -> dict[str, int]:
        return {}

    def names(self) -> list[str]:
        return [self.component]

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        return None

    def collective(self, act: int, tp: int) -> tuple[str, int, str] | None:
        if self.kind != "token" or not self.tokens:
            return None
        size = self.tokens * self.dim * act  # [tokens, D] partial sums
        return f"{self.component} all-reduce", 2 * (tp - 1) * size // tp, "all-reduce"

    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        if self.kind == "sinks":  # one logit per query head: split with the heads
            return [self.rows * _ceil(self.dim, tp)]
        return [(_ceil(self.rows, tp) if self.kind == "token" else self.rows) * self.dim]  # vocabulary-parallel

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        return {}  # token ids are inputs; position ids are the stack's (training plan)


@dataclass(frozen=True, slots=True)
class Norm(_NoMatmul, Record):
    """A norm over `rows` vectors of `width`: LayerNorm has weight and bias [width], RMSNorm a weight.
    `split`: "heads" when its input is the queries or keys, which tensor parallelism splits by heads (q/k norms);
    "" when it is the residual stream (whole on every GPU unless sequence-parallel).
    `shares_input`: its input is one an earlier op already keeps (a parallel block's MLP norm, on the block's input,
    beside attention's norm): kept once."""

    component: str
    kind: str  # "layernorm" | "rmsnorm" | "layernorm_no_bias"
    rows: int
    width: int
    split: str = ""
    shares_input: bool = False
    sets: int = 1  # sets of weights: a per-head q/k norm has one per head (each row uses its head's)
    sublayer: str = ""
    # elements of the storage its input is a view of, when more than rows x width (0: none): a pooled token's norm
    # (CLIP's post_layernorm over x[:, 0]) keeps a view that keeps the whole last hidden state alive
    input_kept: int = field(default=0, repr=False)

    role = "norm"

    def idle(self) -> Norm:
        return replace(self, rows=0)

    def params(self) -> int:
        return self.sets * self.width * (2 if self.kind == "layernorm" else 1)

    def parameters(self) -> dict[str, int]:
        return {self.component: self.params()}

    def non_matmul(self) -> dict[str, int]:
        return {"norms": self.rows * self.width * NORM_PER_ELEMENT[self.kind]}

    def names(self) -> list[str]:
        return [self.component]

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        rows = _ceil(self.rows, tp) if self.split == "heads" else self.rows  # q/k norms: this GPU's heads
        return (0, 2 * rows * self.width * act) if self.rows else None

    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        if not self.params():  # a norm without weight (Gemma 4's router norm)
            return []
        sets = _ceil(self.sets, tp) if self.split == "heads" else self.sets  # per-head weights split with them
        return [sets * self.width] * (2 if self.kind == "layernorm" else 1)

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        stats = 1 if self.kind == "rmsnorm" else 2  # a layer norm's mean and rstd, an RMS norm's rstd
        split = par.tp if self.split == "heads" else par.whole  # q/k norms: the heads are split
        return {"input": 0 if self.shares_input else par.part((self.input_kept or self.rows * self.width) * a, split),
                "statistics": par.part(self.rows * stats * STAT_BYTES, split)}


@dataclass(frozen=True, slots=True)
class Elementwise(_NoMatmul, Record):
    """Non-matmul work: `elements` elements at an estimated `flops_each` FLOPs each. `function`: an activation's
    (gelu, silu, relu, ...): what it keeps for backward differs (relu its output, the others their input).
    `multiplies`: tensors the multiply after an activation keeps (a gated MLP's act(gate) * up: 2; a per-layer
    input's act(gate) * its slice: 1). `kept`: the elements a gate's multiplies keep (kind "gate")."""

    component: str
    # "activation", "gate" (a multiply by a gate: LFM2's short convolution), "scalar_gate" (a whole [T, D] output
    # times one learned scalar's tanh: Llama 3.2 Vision's gated cross-attention), "residual", "routing"
    kind: str
    elements: int
    flops_each: int
    function: str = ""
    multiplies: int = 0
    kept: int = 0  # elements a gate multiply keeps for backward (its operands), split over tensor-parallel GPUs
    sublayer: str = ""

    def idle(self) -> Elementwise:
        return replace(self, elements=0)

    @property
    def role(self) -> str:
        return self.kind

    def params(self) -> int:
        return 0

    def parameters(self) -> dict[str, int]:
        return {}

    def non_matmul(self) -> dict[str, int]:
        return {NON_MATMUL_KIND[self.kind]: self.elements * self.flops_each}

    def names(self) -> list[str]:
        return []

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        # the split MLP width, a convolution's split channels
        elements = _ceil(self.elements, tp) if self.kind in ("activation", "gate") else self.elements
        return (0, 2 * elements * act) if self.elements else None

    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        return []

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        if self.kind == "gate":  # what its multiplies keep (LFM2's: the input projection's output B, C, x)
            return {"gates": par.part(self.kept * a, par.tp)} if self.kept else {}
        if self.kind == "scalar_gate":  # tanh(g) * h keeps h (for g's gradient), whole on every tensor-parallel GPU
            # unless sequence-parallel, and tanh(g), one element (for h's)
            return {"gates": par.part(self.kept * a, par.whole) + a} if self.kept else {}
        if self.kind != "activation":
            return {}
        # the activation keeps its input (relu: its output, which the next op keeps anyway), and the multiply
        # after it what it multiplies
        # (quick_gelu, x * sigmoid(1.702 x): its multiply keeps x and the sigmoid's output)
        kept = {"relu": 0, "quick_gelu": 2}.get(self.function, 1) + self.multiplies
        return {"mlp": par.part(self.elements * a * kept, par.tp)} if kept else {}


# the records of the frame and the common kinds; a kind may add a type of its own (tfcalc/blocks/<kind>/records.py)
Op = Matmul | AttentionCore | Table | Norm | Elementwise | Record
