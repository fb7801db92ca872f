"""The frame every block kind is built in: what a builder sees (`Ctx`), the one registry of block kinds (`KINDS`),
the helpers kinds share (a norm, an attention core, a sublayer's norms and residual add) and the composition of a
block from the kinds its `Layer` lists (`Layer.kinds`), which the inventory and the reference model both loop over.

Each kind is one module of `tfcalc.blocks`: its builder (spec, workload, stack, layer -> op records), the names its
reference modules carry and its reference torch module; it registers itself here with `register`. Shapes follow
torch's nn.Linear (weight [out, in], bias [out]); a shape comment is on each record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..spec import ModelSpec
from .architecture import Layer, Stack
from .ops import AttentionCore, Elementwise, Mask, Norm, Op
from .workload import Workload

# Estimated FLOPs per element of the work that is not a matmul: rough, stated once, only ever reported apart.
# quick_gelu (CLIP's x * sigmoid(1.702 x)): silu's four and the scale's multiply
ACTIVATION_FLOPS = {"gelu": 8, "gelu_tanh": 8, "silu": 4, "relu": 1, "quick_gelu": 5}
GATE_MULTIPLY = 1  # act(gate) * up
RESIDUAL_ADD = 1


@dataclass(frozen=True)
class Ctx:
    """What a builder sees: the model, the workload, the stack and block, and the token counts they imply."""

    spec: ModelSpec
    workload: Workload
    stack: Stack
    layer: Layer | None = None
    final: bool = False  # the stack's final norm (after its last block)

    @property
    def b(self) -> int:
        return self.workload.batch_size

    @property
    def s(self) -> int:
        """Tokens per sequence this stack (this block) processes in the step (0: it does not run, e.g. the encoder
        in decode). In a prefill, the blocks from the first that shares keys and values on (Gemma 4) run only
        over the positions the head scores: their outputs elsewhere feed nothing (they add nothing to the cache),
        so transformers' generate slices them away (_maybe_slice_kv_shared_inputs), and so does tfcalc."""
        w = self.workload
        if self.stack.name == "encoder":
            return 0 if w.phase == "decode" else (w.src_len or w.seq_len)
        if self.past_shared_kv:
            return w.scored
        return w.seq_len // self.divisor

    @property
    def divisor(self) -> int:
        """What this block's (the final norm's) tokens are the stack's input tokens divided by: 1 but after a kind
        inserted between blocks that merges tokens (`BlockKind.inserted`)."""
        if self.layer is not None:
            return self.layer.divisor
        return self.stack.divisor(self.stack.n_layers) if self.final and self.spec.kinds else 1

    @property
    def past_shared_kv(self) -> bool:
        """A prefill's block that shares keys and values, or the final norm after them: over the scored positions."""
        w, spec = self.workload, self.spec
        if w.phase != "prefill" or not spec.kv_shared_layers or self.stack.name == "encoder":
            return False
        return self.layer.kv_shared if self.layer is not None else self.final


    @property
    def t(self) -> int:
        return self.b * self.s

    @property
    def keys(self) -> int:
        """Keys of this stack's self-attention: the cache and the new tokens (the encoder has no cache)."""
        return self.s if self.stack.name == "encoder" else self.workload.keys // self.divisor

    @property
    def src(self) -> int:
        """The keys of cross-attention per sequence: the encoder's tokens, or a decoder-only model's cross-attended
        tokens (Llama 3.2 Vision's vision tokens): `cross_keys`."""
        return cross_keys(self.spec, self.workload)

    def name(self, component: str) -> str:
        return self.stack.prefix(component)

    @property
    def heads(self) -> tuple[int, int, bool]:
        """This block's self-attention: (d_head, key/value heads, values are the keys); a global block's may
        differ (Gemma 4)."""
        return self.spec.attention_shape(self.layer is not None and self.layer.window is not None)


def cross_keys(spec: ModelSpec, workload: Workload) -> int:
    """Tokens per sequence cross-attention attends to: the workload's src_len, else an encoder-decoder's encoder runs
    over seq_len tokens and a decoder-only model's blocks attend to its `kinds.cross_attention.keys`."""
    if workload.src_len is not None:
        return workload.src_len
    if spec.is_encoder_decoder:
        return workload.seq_len
    return spec.sizes("cross_attention").keys


Builder = Callable[[Ctx], list[Op]]


@dataclass(frozen=True)
class BlockKind:
    """One kind of block (or of the model's frame: embedding, final norm, head), as its module registers it.

    - `build`: its builder, Ctx -> op records.
    - `family`: the kind of work its records do, for what classifies components (the attention/MLP crossover, a
      plot's colours): "attention", "cross_attention", "mlp", "mixer" (a sequence mixer other than attention:
      a short convolution) or "other".
    - `norm`: the prefix of the norms a block wraps it in (`<norm>/norm`, `<norm>/post_norm`; the reference block's
      `<norm>_norm`, `<norm>_post_norm`), or "" when it places its own.
    - `components`: (regex over a reference module's path, component) rules: inside a block (after `blocks.N.`)
      when `in_block`, else inside a stack. `check` maps counters' per-module figures onto components with them.
    - `reference`: the module holding its torch implementation, imported only when a model is built (counting
      never imports torch): it defines `attach(block, site)`, `forward(block, x, env)` and, for a sublayer a
      parallel block runs beside attention, `call(block, h, env)`.
    - `in_pattern`: a spec's `block_pattern` may name it (the kinds a block is made of; the others a model type
      adds: cross-attention, Gemma 4's per-layer input).
    - `parts`: the kinds a kind is made of (a parallel mixer's attention and Mamba2), whose sizes (`kinds.<part>`)
      it reads and whose records it marks with their own sublayer (and family).
    - `sizes`: its own sizes, a pydantic model (frozen, strict, extra forbidden) read from the spec's
      `kinds.<name>` (`spec.sizes(name)`), with a `problems(spec) -> list[str]` method for what the rest of the
      spec must be beside it; None: the kind reads only the spec's common fields.
    - `kept_once(ctx, recompute, attention)`, `kept_per_stage(ctx)`: what a stack with this kind keeps for
      backward once per step (attention: "fused" or "eager", how the cores run), whatever its depth (on its
      embedding's pipeline stage; on every stage that holds some of its blocks), as (what, elements, bytes each;
      0: the activation dtype's), for the training memory plan.
    """

    name: str
    build: Builder
    family: str = "other"
    norm: str = ""
    components: tuple[tuple[str, str], ...] = ()
    in_block: bool = True
    in_pattern: bool = False
    reference: str = ""
    kept_once: Callable[[Ctx, str, str], list[tuple[str, int, int]]] | None = None
    kept_per_stage: Callable[[Ctx], list[tuple[str, int, int]]] | None = None
    sizes: type | None = None
    parts: tuple[str, ...] = ()
    # runs once between two blocks of a stack, not in every block: its sizes' `after` names the block it follows
    # (Stack.layer adds it to that block's kinds) and `divisor` what it divides the tokens of every block after it and
    # of the final norm by (MiniCPM-V's window merger: 4)
    inserted: bool = False


class _Kinds(dict):
    """name -> BlockKind. A kind registered `lazily` (its module's path) is imported the first time it is named
    (`KINDS["mamba2"]`, `"mamba2" in KINDS`, `KINDS.get`) or the registry is listed: a count of a model without it
    never imports it (start-up: benchmarks/startup.py)."""

    def __init__(self):
        super().__init__()
        self.lazy: dict[str, str] = {}  # name -> the module that registers it

    def _load(self, name: str) -> None:
        module = self.lazy.pop(name, None)
        if module is not None:
            import importlib

            importlib.import_module(module)

    def _load_all(self) -> None:
        for name in list(self.lazy):
            self._load(name)

    def __getitem__(self, name):
        self._load(name)
        return super().__getitem__(name)

    def __contains__(self, name) -> bool:
        self._load(name)
        return super().__contains__(name)

    def get(self, name, default=None):
        self._load(name)
        return super().get(name, default)

    def __iter__(self):
        self._load_all()
        return super().__iter__()

    def __len__(self) -> int:
        self._load_all()
        return super().__len__()

    def keys(self):
        self._load_all()
        return super().keys()

    def values(self):
        self._load_all()
        return super().values()

    def items(self):
        self._load_all()
        return super().items()


KINDS: dict[str, BlockKind] = _Kinds()


def register(kind: BlockKind) -> BlockKind:
    """Add a block kind (one place per kind, like torch's register_flop_formula)."""
    assert not dict.__contains__(KINDS, kind.name), kind.name
    KINDS.lazy.pop(kind.name, None)
    dict.__setitem__(KINDS, kind.name, kind)
    return kind


def register_lazily(name: str, module: str) -> None:
    """A kind whose module registers it when it is first named: the mixers most models do not have."""
    KINDS.lazy[name] = module


def norm(ctx: Ctx, component: str, rows: int) -> Norm:
    """The spec's norm over `rows` vectors of d_model (a residual stream's)."""
    return Norm(ctx.name(component), ctx.spec.norm, rows, ctx.spec.d_model)


def attention_core(ctx: Ctx, component: str, s_q: int, s_k: int, mask: Mask, sinks: int = 0,
                    d_head: int | None = None, kv_heads: int | None = None) -> AttentionCore:
    spec = ctx.spec
    d_head, kv_heads = d_head or spec.d_head, kv_heads or spec.n_kv_heads
    cached = ctx.stack.name != "encoder" and spec.causal  # a decoder keeps its keys and values for the next step
    # q: [B, H, s_q, dh] @ k^T: [B, H, dh, s_k]; probs: [B, H, s_q, s_k] @ v: [B, H, s_k, dh]; k, v from Hkv heads
    return AttentionCore(ctx.name(component), ctx.b, spec.n_heads, s_q, s_k, d_head, d_head, mask, kv_heads, cached,
                         sinks)


def sublayer(ctx: Ctx, sublayer: str, ops: list[Op], beside_attention: bool = False) -> list[Op]:
    """A sublayer's ops with its norms (by `norm_position`) and the residual add: pre and post have one norm
    (`<sublayer>/norm`; post's normalises the sum, after the residual add), output one on the sublayer's output
    (`<sublayer>/post_norm`, before the residual add), sandwich both.

    `beside_attention`: the MLP (or the experts) of a parallel block, x + attn(norm(x)) + mlp(norm'(x)), with its own
    residual add (two adds, as sequential blocks have). With two norms its norm reads the block's input, which
    attention's norm keeps; with one it has no norm of its own, and its first projection (the up projection, or the
    router) reads attention's normalised x: kept once."""
    position, t = ctx.spec.norm_position, ctx.t
    before = [] if position == "output" else [norm(ctx, f"{sublayer}/norm", t)]
    after = [norm(ctx, f"{sublayer}/post_norm", t)] if position in ("sandwich", "output") else []
    if beside_attention and ctx.spec.parallel_block == "two_norms":
        before = [replace(norm, shares_input=True) for norm in before]
    elif beside_attention and ctx.spec.parallel_block == "one_norm":
        before, ops = [], [replace(ops[0], shares_input=True), *ops[1:]]
    return [*before, *ops, *after, Elementwise(ctx.name("residual"), "residual", t * ctx.spec.d_model, RESIDUAL_ADD)]


def run(name: str, ctx: Ctx) -> list[Op]:
    """The ops of the kind registered as `name`, each marked with the sublayer that made it (unless the kind marked
    it already: a kind made of others, `BlockKind.parts`, marks each part's ops with the part's name)."""
    return [replace(op, sublayer=op.sublayer or name) for op in KINDS[name].build(ctx)]


def block(ctx: Ctx) -> list[Op]:
    """One block: the ops of its kinds (`Layer.kinds`) in order; the reference model's Block loops over the same
    list (a parallel block's MLP reads the block's input: `sublayer`)."""
    return [op for name in ctx.layer.kinds for op in run(name, ctx)]
