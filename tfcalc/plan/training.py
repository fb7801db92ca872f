"""Training memory per GPU: weights, gradients, optimizer states and master weights by recipe, the activations a
train step keeps for its backward (folded from the op inventory), on a parallel layout; what fits, and the
smallest layout that does. No torch.

    >>> model_states(7_500_000_000, "bf16-mixed", "adamw", zero=0, dp=64).total   # ZeRO paper, Figure 1
    120000000000

Conventions, stated once (docs/planning.md has the derivations):
- Recipes (bytes per parameter: weights, gradients, fp32 master weights, each optimizer state):
  `fp32` 4, 4, -, 4; `bf16-mixed` and `fp16-mixed` 2, 2, 4, 4 (the ZeRO paper's mixed-precision Adam: 16 bytes
  with AdamW's two states); `bf16` (pure) 2, 2, -, 2. AdamW keeps 2 states (and torch's AdamW a 4-byte step
  count per parameter tensor), SGD with momentum 1; 8-bit Adam
  (bitsandbytes) keeps 2 states of 1 byte plus an fp32 absmax per 256-value block each, and 32-bit states for
  tensors under 4,096 values (its `min_8bit_size`).
- FP8 (`fp8-delayed`, alias `fp8`; `fp8-current`; `fp8-mxfp8`): bf16-mixed's states, with the blocks' linears run
  in FP8 as TransformerEngine runs them: each keeps an FP8 copy of its weight (rowwise and transposed; MXFP8 rowwise
  and columnwise with their block scales) across the step, delayed scaling 5 quantizers per GEMM (an fp32 scale and
  a 1,024-long fp32 amax history each), and saves its input for backward as one FP8 copy (1 byte a value) and its
  scale instead of 16-bit. Embeddings, the head, routers, norms and attention stay 16-bit.
- Activations are what each op keeps for its backward, in the activation dtype (fp32 for `fp32`, else 16-bit):
  a norm its input (and its fp32 statistics per row: mean and rstd, or rstd), a linear its input (a gate shares
  its up projection's), the attention core its q, k and v (k and v at the kv heads) and, with no recomputation,
  by `attention`: "fused" (default; FlashAttention, torch SDPA's flash and memory-efficient kernels) its output
  and an fp32 logsumexp per (batch, head, query row), no N x N tensor; "eager" (two matmuls and a softmax) the
  softmax probabilities. The MLP's activation its input (gated: the gate's output, its activation and the up
  projection's output), the loss the fp32 log-softmax of the logits. Token ids are inputs, not counted. No
  dropout (no spec has it).
- `selective` recomputes the attention cores in backward (Korthikanti et al. 2022): eager keeps no
  probabilities, fused neither its output nor its logsumexp (one core's come back in backward). `full` keeps each
  block's input and recomputes the block in backward (one block's activations come back at a time).
- Parallelism (Megatron-LM): tensor parallel splits the attention heads, the MLP width, the vocabulary of the
  embedding and of the head (column-parallel linears split their outputs, row-parallel their inputs; norms,
  routers and row-parallel biases are whole on every GPU); with sequence parallelism the norms' and the
  column-parallel linears' inputs are split too. Pipeline stages hold contiguous blocks (the first the
  embedding, the last the final norm and the head, and a tied head's own copy of the token table); under 1F1B
  stage i keeps the activations of pp - i microbatches. Expert parallelism puts n_experts/ep experts on a GPU
  (tokens spread evenly across experts). Context parallelism splits every sequence's tokens over cp GPUs.
  ZeRO shards over the data-parallel GPUs (dp x cp; experts over dp x cp / ep): stage 1 the optimizer states
  and master weights, 2 also the gradients, 3 also the weights. GPUs: dp x tp x pp x cp.
- The worst pipeline stage is reported. `workload.batch_size` is the micro batch of one data-parallel rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction

from ..arch import Workload, validate
from ..arch.architecture import stacks
from ..arch.builders import KINDS, Ctx
from ..arch.inventory import stages as inventory_stages
from ..arch.ops import ATTENTION, STAT_BYTES, Matmul, Op, Parallel
from ..errors import TfcalcError, check_capacity
from ..spec import ModelSpec
from .adapters import Adapters, adapt_groups, cold_instances, flow


@dataclass(frozen=True)
class Recipe:
    weights: int  # bytes per parameter
    grads: int
    master: int  # fp32 master copy (0: none)
    state: int  # bytes per optimizer-state value (32-bit-style optimizers)
    activations: int  # bytes per activation value
    fp8: str = ""  # TransformerEngine's FP8 scaling for the blocks' linears: "delayed", "current", "mxfp8"; "": none


PRECISIONS: dict[str, Recipe] = {
    "fp32": Recipe(4, 4, 0, 4, 4),
    "bf16-mixed": Recipe(2, 2, 4, 4, 2),
    "fp16-mixed": Recipe(2, 2, 4, 4, 2),
    "bf16": Recipe(2, 2, 0, 2, 2),
    # bf16-mixed, with the blocks' linears in FP8 as TransformerEngine runs them (fp8_states, fp8_activations;
    # docs/planning.md). fp8-delayed and fp8-current on Hopper's layout (a transposed copy), fp8-mxfp8 on Blackwell's
    "fp8-delayed": Recipe(2, 2, 4, 4, 2, "delayed"),
    "fp8-current": Recipe(2, 2, 4, 4, 2, "current"),
    "fp8-mxfp8": Recipe(2, 2, 4, 4, 2, "mxfp8"),
}
PRECISIONS["fp8"] = PRECISIONS["fp8-delayed"]  # the alias: TE's default recipe on Hopper
PRECISION_ALIASES = {"fp8": "fp8-delayed"}
FP8_UNMEASURABLE = ("an FP8 train step needs TransformerEngine and an FP8 GEMM (Hopper or newer), neither of which "
                    "is here; it cannot be measured (bf16-mixed can)")
OPTIMIZERS: dict[str, int] = {"adamw": 2, "sgd": 1, "adam8bit": 2}  # states per parameter
RECOMPUTE = ("none", "selective", "full")
ADAM8BIT_BLOCK = 256  # bitsandbytes: one fp32 absmax per 256 values of each state
ADAM8BIT_MIN_SIZE = 4096  # bitsandbytes' min_8bit_size: smaller tensors keep 32-bit states


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _choice(value: str, field_name: str, allowed) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise TfcalcError(f"{field_name}={value!r}: expected one of {', '.join(allowed)}")
    return value


INDEX_BYTES = 8  # int64 ids (learned positions', relative buckets'): kept by a lookup for its table's gradient
STEP_COUNTER = 4  # torch's AdamW keeps its step count as one fp32 tensor per parameter tensor


def state_bytes(numel: int, optimizer: str, recipe: Recipe) -> int:
    """Optimizer-state bytes of one tensor of `numel` parameters (not AdamW's 4-byte step counter per tensor,
    which the plan adds per tensor it holds)."""
    states = OPTIMIZERS[optimizer]
    if optimizer == "adam8bit" and numel >= ADAM8BIT_MIN_SIZE:
        return states * (numel + STAT_BYTES * _ceil(numel, ADAM8BIT_BLOCK))
    return states * numel * (4 if optimizer == "adam8bit" else recipe.state)


# ---------------------------------------------------------------------------------------------------- layout


FRAMEWORKS = ("torch", "megatron")


@dataclass(frozen=True)
class Layout:
    """A parallel layout: data parallel (with a ZeRO stage), tensor (with or without sequence parallelism),
    pipeline, expert and context parallel sizes."""

    dp: int = 1
    zero: int = 0
    tp: int = 1
    pp: int = 1
    ep: int = 1
    cp: int = 1
    sp: bool = False
    # whose conventions: "torch" (torch.distributed: what `tfcalc check --memory` measures) or "megatron"
    # (Megatron-LM: sequence parallelism keeps the column-parallel linears' inputs sharded, the distributed
    # optimizer splits every tensor evenly, the vocab-parallel table's gradient is sharded)
    framework: str = "torch"

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def describe(self) -> str:
        parts = [f"dp {self.dp}" + (f" (ZeRO-{self.zero})" if self.zero else ""),
                 f"tp {self.tp}" + (" + sp" if self.sp and self.tp > 1 else "")]
        parts += [f"{k} {v}" for k, v in (("pp", self.pp), ("ep", self.ep), ("cp", self.cp)) if v > 1]
        return (", ".join(parts) + f": {self.gpus:,} GPU" + ("s" if self.gpus > 1 else "")
                + (f" ({self.framework})" if self.framework != "torch" else ""))

    def to_dict(self) -> dict:
        return {"dp": self.dp, "zero": self.zero, "tp": self.tp, "pp": self.pp, "ep": self.ep, "cp": self.cp,
                "sp": self.sp, "framework": self.framework, "gpus": self.gpus}


def check_layout(spec: ModelSpec, workload: Workload, layout: Layout) -> None:
    """Refuse a layout the model cannot be split into, naming the field and the value."""
    problems = []
    for name in ("dp", "tp", "pp", "ep", "cp"):
        value = getattr(layout, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name}={value!r}: expected a positive integer")
    if isinstance(layout.zero, bool) or layout.zero not in (0, 1, 2, 3):
        problems.append(f"zero={layout.zero!r}: expected 0, 1, 2 or 3")
    if layout.framework not in FRAMEWORKS:
        problems.append(f"framework={layout.framework!r}: expected one of {', '.join(FRAMEWORKS)}")
    if problems:
        raise TfcalcError("\n".join(problems))
    if spec.towers or spec.inputs != "tokens":  # planned whole on each GPU: data parallelism and ZeRO only
        what = (f"has a {' and '.join(spec.towers)} tower beside its language model" if spec.towers
                else f"is a model of {spec.inputs}")
        split = [f"{name}={getattr(layout, name)}" for name in ("tp", "pp", "ep", "cp") if getattr(layout, name) > 1]
        split += ["sp=True"] if layout.sp else []
        if split:
            raise TfcalcError(f"{split[0]}: {spec.label} {what}; its train step is planned with data parallelism "
                              "and ZeRO only for now (the model whole on each GPU)")
    tp = layout.tp
    if any(heads % tp for heads in _head_counts(spec)):
        problems.append(f"tp={tp}: tensor parallelism splits the attention heads; it must divide n_heads="
                        f"{spec.n_heads} and n_kv_heads={spec.n_kv_heads}" + (
                            f" and global_n_kv_heads={spec.global_n_kv_heads}"
                            if spec.global_n_kv_heads is not None else ""))
    blocks = sum(s.n_layers for s in stacks(spec))
    if layout.pp > 1 and spec.shared_blocks is not None:
        problems.append(f"pp={layout.pp}: blocks that share parameters (shared_blocks={spec.shared_blocks}) are not "
                        "split into pipeline stages")
    if layout.pp > blocks:
        problems.append(f"pp={layout.pp}: more pipeline stages than the model's {blocks} blocks")
    if layout.ep > 1:
        if not spec.is_moe:
            problems.append(f"ep={layout.ep}: expert parallelism needs a mixture of experts ({spec.label} has "
                            "n_experts=1)")
        elif spec.n_experts % layout.ep:
            problems.append(f"ep={layout.ep}: must divide n_experts={spec.n_experts}")
        if (layout.dp * layout.cp) % layout.ep:
            problems.append(f"ep={layout.ep}: expert-parallel groups are made of data-parallel GPUs; it must "
                            f"divide dp x cp = {layout.dp * layout.cp}")
    for name, length in (("seq_len", workload.seq_len), ("src_len", workload.src_len)):
        if length is not None and length % layout.cp:
            problems.append(f"cp={layout.cp}: context parallelism splits each sequence; it must divide "
                            f"{name}={length}")
    if problems:
        raise TfcalcError("\n".join(problems))


# ------------------------------------------------------------------------------------------- model states


@dataclass(frozen=True)
class ModelStates:
    """Bytes per GPU of the weights, gradients, optimizer states and master weights."""

    weights: int
    gradients: int
    optimizer_states: int
    master_weights: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer_states + self.master_weights


def model_states(n_params: int, precision: str = "bf16-mixed", optimizer: str = "adamw", zero: int = 0,
                 dp: int = 1) -> ModelStates:
    """The ZeRO paper's arithmetic for `n_params` parameters held as one tensor per GPU replica, sharded over
    `dp` GPUs by ZeRO stage `zero` (1: optimizer states and master weights, 2: + gradients, 3: + weights)."""
    recipe = PRECISIONS[_choice(precision, "precision", PRECISIONS)]
    if recipe.fp8:
        raise TfcalcError(f"precision={precision!r}: FP8's extra tensors follow each linear's shape; use "
                          "training_memory (model_states counts one flat tensor)")
    _choice(optimizer, "optimizer", OPTIMIZERS)
    return _shard(n_params * recipe.weights, n_params * recipe.grads, state_bytes(n_params, optimizer, recipe),
                  n_params * recipe.master, zero, dp)


def _shard(w: int, g: int, o: int, m: int, zero: int, dp: int) -> ModelStates:
    return ModelStates(_ceil(w, dp) if zero >= 3 else w, _ceil(g, dp) if zero >= 2 else g,
                       _ceil(o, dp) if zero >= 1 else o, _ceil(m, dp) if zero >= 1 else m)


def _head_counts(spec: ModelSpec) -> list[int]:
    """The head counts tensor parallelism splits: query heads, key/value heads (and a global block's own)."""
    return [spec.n_heads, spec.n_kv_heads] + ([spec.global_n_kv_heads] if spec.global_n_kv_heads else [])


# ------------------------------------------------------------------------------------------------ activations


def _routing(router: Matmul, experts: Matmul, a: int, layout: Layout, expert_scale: bool = False) -> int:
    """What routing keeps, for t tokens to k of E experts of width D: the router's softmax (t E), the top-k
    indices (int64) and values and their sum, each expert's token and slot indices (2 int64 per pair), the routing
    weight per pair (twice with a scale per expert, Gemma 4: the weight before and after its expert's scale), and
    each expert's output (kept by the multiply by its weight): whole on every tensor-parallel GPU unless
    sequence-parallel."""
    t, E, pairs, D = router.m, router.n, experts.m, experts.k
    whole = layout.tp if layout.sp and layout.tp > 1 else 1
    weights = pairs * a * (2 if expert_scale else 1)
    kept = t * E * a + pairs * 8 + pairs * a + t * a + 2 * pairs * 8 + weights + pairs * D * a
    return _ceil(kept, whole * layout.cp)


def _ops_activations(ops: tuple[Op, ...], a: int, recompute: str, layout: Layout,
                     grad: bool | None = None, attention: str = "fused") -> tuple[dict[str, int], int]:
    """Per component, the bytes one instance of `ops` keeps for backward (one microbatch), and apart from them the
    encoder output its cross-attentions read (one tensor, kept once however many read it). `grad`: None in full
    training; with adapters on frozen weights, whether a gradient flows into the ops (an adapter ran before them):
    each op keeps what it needs for its input's gradient and its adapter's (`saved_frozen`)."""
    out: dict[str, int] = {}
    par = Parallel(layout.tp, layout.cp, layout.sp, attention)
    encoder_output = 0
    router = routing = None
    expert_scale = any(op.role == "scale" for op in ops)
    input_kept = False  # by the last linear that does not share its input
    for op, _, flowing in flow(ops, bool(grad)):
        if grad is None:
            saved = op.saved(a, recompute, par)
        else:
            grad = flowing  # a parallel branch starts from the block's input (tfcalc.plan.adapters.flow)
            saved = op.saved_frozen(a, recompute, par, grad)
            if "shared input" in saved:
                shared = saved.pop("shared input")
                if not input_kept:
                    saved["input"] = shared
                    input_kept = True
            elif op.names() and op.forward():  # a linear (or core) that reads an input of its own
                input_kept = "input" in saved
            grad = grad or (op.lora is not None and op.adapter_runs())  # (for the routing below)
        if op.role == "router":
            router = op
        elif op.role == "routing":
            routing = op.component
        elif router is not None and op.expert:
            if grad is None or grad:
                out[routing] = out.get(routing, 0) + _routing(router, op, a, layout, expert_scale)
            router = None
        if op.role == "encoder_kv":
            encoder_output = sum(saved.values())
        elif saved:
            out[op.component] = out.get(op.component, 0) + sum(saved.values())
            if "loss" in saved:
                out[op.component] -= saved["loss"]
                out["loss"] = out.get("loss", 0) + saved["loss"]
    return out, encoder_output


# ------------------------------------------------------------------------------------ FP8 (TransformerEngine)
# What TE keeps beyond bf16-mixed when the blocks' linears run in FP8 (docs/planning.md, "FP8 training
# (TransformerEngine)", cites TE's source for each term). Embeddings, the head, the router, norms and attention
# stay 16-bit (Megatron-LM builds only the blocks' linears from TE).

AMAX_HISTORY_LEN = 1024  # TE DelayedScaling.amax_history_len's default (common/recipe/__init__.py)
FP8_QUANTIZERS_PER_GEMM = 5  # TE module/base.py: 3 forward (input, weight, output) + 2 backward (grad output,
# grad input) per GEMM, each with an fp32 scale and an fp32 amax history under delayed scaling
MXFP8_BLOCK = 32  # MXFP8: one 1-byte E8M0 scale per 32 values (TE tensor/mxfp8_tensor.py)
FP8_ROLES = ("", "encoder_kv")  # the blocks' projections: TE Linear / LayerNormLinear / LayerNormMLP / GroupedLinear


def _round_up(a: int, b: int) -> int:
    return _ceil(a, b) * b


def mxfp8_scale_bytes(rows: int, cols: int, rowwise: bool) -> int:
    """The E8M0 scales of an MXFP8 [rows, cols] tensor, padded as TE's MXFP8Quantizer.get_scale_shape pads them:
    rowwise [rows to a multiple of 128, cols/32 to a multiple of 4], columnwise [rows/32 to a multiple of 4, cols
    to a multiple of 128]."""
    if rowwise:
        return _round_up(rows, 128) * _round_up(_ceil(cols, MXFP8_BLOCK), 4)
    return _round_up(_ceil(rows, MXFP8_BLOCK), 4) * _round_up(cols, 128)


def _fp8_gemms(ops: tuple[Op, ...]) -> list[list[Matmul]]:
    """The linears TE runs in FP8, grouped by GEMM: a projection that shares its input with the one before it in
    the same sublayer (a gate beside its up projection: Megatron's linear_fc1) is one weight and one GEMM with it."""
    gemms: list[list[Matmul]] = []
    for op in ops:
        if op.gemm() is None or op.role not in FP8_ROLES or not op.weights:  # a weight GEMM that runs
            continue
        if op.shares_input and gemms and gemms[-1][-1].sublayer == op.sublayer and \
                gemms[-1][-1].expert == op.expert:
            gemms[-1].append(op)
        else:
            gemms.append([op])
    return gemms


def fp8_states(ops: tuple[Op, ...], scaling: str, layout: Layout) -> tuple[int, int]:
    """(the FP8 copies of one instance of `ops`' weights with their scales, the scaling state) on one GPU: bytes
    TE keeps across the step beside the bf16 weights (Megatron passes is_first_microbatch, so each linear's FP8
    weight is cached in its _fp8_workspaces across microbatches). Per GEMM of a [n, k] weight (TE's layout):
    delayed/current on Hopper: rowwise k*n + transpose k*n bytes + one fp32 scale_inv; mxfp8 (Blackwell): rowwise
    and columnwise k*n each, each with its E8M0 scales. Delayed scaling's state: 5 quantizers per GEMM, each an fp32
    scale and an fp32 amax history of 1,024."""
    copies = meta = 0
    for gemm in _fp8_gemms(ops):
        first = gemm[0]
        matrices = _ceil(first.weights, layout.ep) if first.expert else first.weights  # one GEMM each
        k = first._shape_on(layout.tp)[0]
        n = sum(op._shape_on(layout.tp)[1] for op in gemm)
        if scaling == "mxfp8":
            each = 2 * k * n + mxfp8_scale_bytes(n, k, True) + mxfp8_scale_bytes(n, k, False)
        else:
            each = 2 * k * n + STAT_BYTES  # rowwise + transpose (Hopper's FP8 GEMM is TN only), scale_inv
        copies += matrices * each
        if scaling == "delayed":
            meta += matrices * FP8_QUANTIZERS_PER_GEMM * (1 + AMAX_HISTORY_LEN) * STAT_BYTES
    return copies, meta


def fp8_activations(ops: tuple[Op, ...], scaling: str, recompute: str, layout: Layout, a: int) -> dict[str, int]:
    """Per component, what FP8 changes in what one instance of `ops` keeps for backward (one microbatch): each FP8
    linear keeps its input as the FP8 columnwise copy its wgrad GEMM reads (TE linear.py discards the rowwise data:
    1 byte a value, the transpose on Hopper) and its fp32 scale_inv (mxfp8: the E8M0 scales), instead of the
    16-bit input. A linear whose input another op keeps (a parallel block's MLP beside attention, shared experts
    beside the router) or that reads the encoder's output (kept once, 16-bit) keeps its FP8 copy besides: each TE
    module quantizes and saves its own."""
    par = Parallel(layout.tp, layout.cp, layout.sp)
    out: dict[str, int] = {}
    for gemm in _fp8_gemms(ops):
        op = gemm[0]
        split = par.tp if op.split == "row" else par.whole
        data = par.part(op.m * op.k, split)  # the input's values on this GPU, 1 byte each (Matmul.saved's share)
        kept_16bit = not op.shares_input and op.role != "encoder_kv"  # the 16-bit input this linear kept
        bf16 = op.saved(a, recompute, par).get("input", 0) if kept_16bit else 0
        gemms = _ceil(op.weights, layout.ep) if op.expert else 1  # routed experts: one GEMM (and scale) each
        if scaling == "mxfp8":  # each GEMM's [rows, cols] input: its columnwise scales
            cols = _ceil(op.k, layout.tp) if op.split == "row" else op.k
            scales = gemms * mxfp8_scale_bytes(_ceil(data, cols * gemms), cols, False)
        else:
            scales = gemms * STAT_BYTES  # scale_inv
        out[op.component] = out.get(op.component, 0) + data + scales - bf16
    return out


LOOKUPS = ("token", "position", "token_type", "per_layer")  # an embedding's tables (`Table.kind`)


def _sp_gathered(ops: tuple[Op, ...], a: int, layout: Layout) -> dict[str, int]:
    """Sequence parallelism as DTensor runs it (torch's convention): each column-parallel linear all-gathers its
    sequence-sharded input itself and keeps the gathered [T, k] for backward (a gate beside its up projection
    gathers its own copy); Megatron keeps the sharded input and gathers it again in backward, which is what
    `Op.saved` counts. The bytes beyond that, per component."""
    if not (layout.sp and layout.tp > 1):
        return {}
    out: dict[str, int] = {}
    for op in ops:
        if op.gemm() is not None and op.split == "column" and not op.expert:  # a column-parallel linear that runs
            whole = _ceil(op.m * op.k * a, layout.cp)
            sharded = 0 if op.shares_input else _ceil(op.m * op.k * a, layout.tp * layout.cp)
            out[op.component] = out.get(op.component, 0) + whole - sharded
    return out


# --------------------------------------------------------------------------------------------------- stages


@dataclass(frozen=True)
class _Part:
    ops: tuple[Op, ...]
    repeat: int
    block: bool  # a transformer block (recomputed under `full`)
    # kept once for the stack, not per op: (what, elements, bytes each; 0 = the activation dtype's)
    extras: tuple[tuple[str, int, int], ...] = ()
    copies: int | None = None  # sets of parameters when blocks share them (ALBERT); None: one per repeat
    cold: int = 0  # with adapters: instances no gradient flows into (tfcalc.plan.adapters.cold_instances)


Kept = tuple[tuple[str, int, int], ...]  # (what, elements, bytes each; 0: the activation dtype's)


def _stack_extras(ctx: Ctx, recompute: str, attention: str) -> tuple[Kept, Kept]:
    """What a stack keeps for backward once per step whatever its depth, as its kinds say (`BlockKind.kept_once`:
    on its embedding's stage; `kept_per_stage`: on every stage that holds some of its blocks)."""
    present = [KINDS["embedding"], *(KINDS[name] for name in dict.fromkeys(
        name for layer in ctx.stack.distinct() for name in layer.kinds))]
    once = tuple(kept for kind in present if kind.kept_once for kept in kind.kept_once(ctx, recompute, attention))
    per_stage = tuple(kept for kind in present if kind.kept_per_stage for kept in kind.kept_per_stage(ctx))
    return once, per_stage


def _towers(spec: ModelSpec, workload: Workload) -> list[tuple[str, ModelSpec, Workload]]:
    """(the inventory's tower name, the spec, its workload) of each tower: the model itself ("") in a model of one;
    a multimodal model's text tower and each other tower on its own workload (tfcalc.arch.towers)."""
    if not spec.towers:
        return [("", spec, workload)]
    from ..arch.towers import images, text_tower, tower_workload

    if workload.images is None:
        workload = workload.model_copy(update={"images": images(workload)})
    text = ("text", text_tower(spec), workload.model_copy(update={"images": None, "image_size": None}))
    return [text, *((name, own, tower_workload(spec, name, workload)) for name, own in spec.towers.items())]


def _stages(spec: ModelSpec, workload: Workload, pp: int, recompute: str, attention: str,
            adapters=None) -> list[list[_Part]]:
    """The parts of the model on each pipeline stage: the inventory's groups on it (contiguous blocks, split as
    evenly as can be), with what each stack keeps once (on its embedding's stage) and its rotary tables (on every
    stage that holds some of its blocks)."""
    def named(kept: Kept, tower: str) -> Kept:  # a tower's, named under it as its records are
        return tuple((f"{tower}/{what}" if tower not in ("", "text") else what, n, size) for what, n, size in kept)

    extras = {(tower, stack.name): tuple(named(k, tower) for k in _stack_extras(Ctx(own, w, stack), recompute,
                                                                                attention))
              for tower, own, w in _towers(spec, workload) for stack in stacks(own)}
    out: list[list[_Part]] = []
    for groups in inventory_stages(spec, workload, pp):
        cold = [0] * len(groups)
        if adapters is not None:
            groups = adapt_groups(groups, adapters, spec.label)
            cold = cold_instances(groups)
        parts: list[_Part] = []
        with_stage_extras: set[str] = set()
        for g, g_cold in zip(groups, cold):
            kept: tuple[tuple[str, int, int], ...] = ()
            if g.stack is not None:
                once, per_stage = extras[g.tower, g.stack.name]
                if g.kind == "embedding":
                    kept = once
                elif g.block and per_stage and (g.tower, g.stack.name) not in with_stage_extras:
                    with_stage_extras.add((g.tower, g.stack.name))
                    parts.append(_Part((), 1, False, per_stage))
            parts.append(_Part(g.ops, g.repeat, g.block, kept, g.copies, g_cold))
        out.append(parts)
    return out


# ----------------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class StageMemory:
    stage: int
    params: int  # parameters on one GPU of this stage
    states: ModelStates
    activations: int  # kept for backward, all microbatches in flight
    activation_components: dict[str, int]  # one microbatch, per component
    microbatches: int  # in flight (1F1B)
    transient: int  # the backward's largest extra at once (estimate)
    transient_step: int  # the end of backward's (a tied table's gradients summed) or the step's extra
    tensors: int = 0  # parameter tensors on one GPU of this stage (each a weight, a gradient, its states)
    trainable: int | None = None  # with adapters: the parameters they train on one GPU of this stage
    frozen_bytes: int = 0  # with adapters: the frozen model's weights on one GPU of this stage (QLoRA: quantized)
    fp8_weights: int = 0  # FP8 recipes: the weights' FP8 copies TE caches across the step, with their scales
    fp8_scaling: int = 0  # FP8 delayed scaling: each quantizer's scale and amax history
    # ZeRO-1 (torch's partition of whole tensors): each data-parallel rank's states, rank 0 first; () otherwise
    rank_states: tuple[ModelStates, ...] = ()
    rank_steps: tuple[int, ...] = ()  # and each one's step transient (its own largest tensor's fp32 gradient)
    loss_transient: int = 0  # the loss's backward: fp32 [tokens, V] tensors
    block_transient: int = 0  # a block's backward: what it recomputes or brings back (`transient`: the larger)
    # FSDP2: weights gathered beyond this GPU's shard from forward to the end of backward (the root's, which it
    # does not reshard after forward; under ZeRO-2 every block's too) and the root's unsharded gradients (the
    # head's, the final norm's) from the loss's backward on
    gathered: int = 0
    # the gradients exist while the activations do: DDP's buckets live through the step; under pipelining the
    # gradients accumulate over the microbatches while later ones' activations are kept
    grads_with_activations: bool = False
    recv_buffers: int = 0  # pipelining's receive buffers, alive the whole step

    def for_rank(self, dp_rank: int) -> StageMemory:
        """This stage on one data-parallel rank: the same but under ZeRO-1, where each rank has its own states."""
        if not self.rank_states:
            return self
        return replace(self, states=self.rank_states[dp_rank], transient_step=self.rank_steps[dp_rank])

    def peak_items(self) -> tuple[str, dict[str, int]]:
        """The moment of the peak and what is alive then, in bytes (they sum to `peak`)."""
        s = self.states
        states = {"weights": s.weights, "optimizer states": s.optimizer_states, "master weights": s.master_weights,
                  "FP8 weight copies": self.fp8_weights, "FP8 scaling state": self.fp8_scaling,
                  "receive buffers": self.recv_buffers}
        backward = {**states, "gathered weights": self.gathered, "activations": self.activations,
                    "gradients": s.gradients if self.grads_with_activations else 0,
                    "backward transients": self.transient}
        step = {**states, "gradients": s.gradients, "step transient": self.transient_step}
        if sum(backward.values()) >= sum(step.values()):
            return "start of backward", backward
        return "end of backward, optimizer step", step

    @property
    def peak(self) -> int:
        return sum(self.peak_items()[1].values())


@dataclass(frozen=True)
class TrainingMemory:
    spec: ModelSpec
    workload: Workload
    precision: str
    optimizer: str
    recompute: str
    layout: Layout
    stage: StageMemory  # the worst stage's
    n_stages_params: tuple[int, ...]
    korthikanti: int | None  # the published estimate of the same activations (GPT-style blocks), bytes
    capacity_bytes: int | None = None
    gpu_name: str | None = None
    smallest: TrainingMemory | None = field(default=None, compare=False)
    adapters: Adapters | None = None  # a fine-tuning step of adapters on the frozen model
    quant: object = None  # with adapters: the frozen model's quantized format (QLoRA), a tfcalc.plan.quant.Quant
    attention: str = "fused"
    reason: str = ""  # the smallest layout's: why this one among those with as few GPUs

    @property
    def weights(self) -> int:
        return self.stage.states.weights

    @property
    def gradients(self) -> int:
        return self.stage.states.gradients

    @property
    def optimizer_states(self) -> int:
        return self.stage.states.optimizer_states

    @property
    def master_weights(self) -> int:
        return self.stage.states.master_weights

    @property
    def activations(self) -> int:
        return self.stage.activations

    @property
    def fp8_weights(self) -> int:
        return self.stage.fp8_weights

    @property
    def fp8_scaling(self) -> int:
        return self.stage.fp8_scaling

    @property
    def total(self) -> int:
        """Everything at once: weights, gradients, optimizer states, master weights, (FP8: the weights' FP8
        copies and the scaling state) and activations."""
        return self.stage.states.total + self.fp8_weights + self.fp8_scaling + self.activations

    @property
    def peak(self) -> int:
        """The step's high-water mark (estimate): the activations and the backward's transients, or the
        gradients and the step's, whichever is larger, on top of the weights and optimizer states."""
        return self.stage.peak

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_bytes is None else self.peak <= self.capacity_bytes

    def to_dict(self) -> dict:
        s = self.stage
        return {
            "workload": {**self.workload.model_dump(), "keys": self.workload.keys},
            "precision": self.precision, "optimizer": self.optimizer, "recompute": self.recompute,
            "attention": self.attention, "layout": self.layout.to_dict(), "stage": s.stage, "params_per_gpu": s.params,
            "weights_bytes": self.weights, "gradients_bytes": self.gradients,
            "optimizer_states_bytes": self.optimizer_states, "master_weights_bytes": self.master_weights,
            "fp8_weights_bytes": self.fp8_weights, "fp8_scaling_bytes": self.fp8_scaling,
            "activations_bytes": self.activations, "microbatches_in_flight": s.microbatches,
            "activation_components": dict(s.activation_components),
            "transient_bytes": s.transient, "step_transient_bytes": s.transient_step,
            "gathered_weights_bytes": s.gathered, "peak_moment": s.peak_items()[0],
            "peak_items": dict(s.peak_items()[1]),
            "total_bytes": self.total, "peak_bytes": self.peak,
            "korthikanti_activations_bytes": self.korthikanti,
            "gpu": self.gpu_name, "capacity_bytes": self.capacity_bytes, "fits": self.fits,
            "smallest_layout": None if self.smallest is None else {
                **self.smallest.layout.to_dict(), "peak_bytes": self.smallest.peak, "reason": self.smallest.reason},
            **({"adapters": self.adapters.to_dict(), "trainable_params_per_gpu": s.trainable,
                "frozen_weights_bytes": s.frozen_bytes,
                "quant": None if self.quant is None else self.quant.to_dict()}
               if self.adapters is not None else {}),
        }


def _stage_memory(index: int, parts: list[_Part], spec: ModelSpec, recipe: Recipe, optimizer: str,
                  recompute: str, layout: Layout, last: bool, tuned: bool = False,
                  attention: str = "fused", quant=None) -> StageMemory:
    """One stage's memory. `tuned`: adapters train on frozen weights (the parts' records carry them): the model's
    weights are frozen bytes alone, the adapters' tensors get the recipe's gradients, states and masters, and each
    op keeps what the adapters' backward needs (no gradient flows before the first adapter); `quant`: the frozen
    weights stored quantized (QLoRA: bitsandbytes dequantizes one linear's weight at a time, forward and backward).
    `attention`: the kernel the attention cores run (fused or eager)."""
    from .quant import record_bytes

    pp = layout.pp
    frozen = frozen_bytes = dequantized = 0
    dense = expert = 0
    weights_numel: list[tuple[int, bool, int]] = []  # (size, a routed expert's?, how many)
    a = recipe.activations
    per_mb: dict[str, int] = {}
    recompute_extra = 0
    gather = 0
    largest_tensor = 0
    cross_input = 0
    fp8 = [0, 0]  # FP8 recipes: the weights' FP8 copies, the scaling state
    block_total = 0  # parameters of the blocks (the rest, FSDP2's root, is gathered from forward to backward)
    for part in parts:
        block_params = 0
        for op in part.ops:
            copy_tied = last and pp > 1 and op.role == "head"
            sizes = op.tensors(layout.tp, layout.ep, copy_tied)  # this GPU's share of each parameter tensor
            sets = part.repeat if part.copies is None else part.copies
            block_params += sum(sizes)
            if tuned:
                frozen += sum(sizes) * sets
                _, stored, quantized, _ = record_bytes(op, quant, layout.tp, layout.ep, copy_tied, recipe.weights)
                frozen_bytes += stored * sets
                if quantized:  # one matrix dequantized to the activation dtype while its matmul runs
                    dequantized = max(dequantized, max(k * n for k, n, _ in op.matrices(layout.tp)) * a)
                sizes = op.adapter_tensors() if op.lora is not None else []
                block_params += sum(sizes)
            elif getattr(op, "frozen", False):  # a parameter that does not train: its weights alone
                frozen += sum(sizes) * sets
                frozen_bytes += sum(sizes) * sets * recipe.weights
                continue
            for n in sizes:
                weights_numel.append((n, op.expert, sets))
                largest_tensor = max(largest_tensor, n)
        repeat = part.repeat
        if tuned:
            # the instances before the first adapted block (and that block) run with no gradient flowing in, the
            # others with one (cold_instances: a hybrid's blocks in model order)
            first, kv = _ops_activations(part.ops, a, recompute, layout, grad=False, attention=attention)
            full = (_ops_activations(part.ops, a, recompute, layout, grad=True, attention=attention)[0]
                    if repeat > part.cold else first)
            totals = {k: first.get(k, 0) * part.cold + full.get(k, 0) * (repeat - part.cold)
                      for k in dict.fromkeys([*first, *full])}
        else:
            full, kv = _ops_activations(part.ops, a, recompute, layout, attention=attention)
            totals = {k: v * repeat for k, v in full.items()}
        if recipe.fp8 and part.block:  # the blocks' linears in FP8 (TransformerEngine)
            for k, v in fp8_activations(part.ops, recipe.fp8, recompute, layout, a).items():
                full[k] = full.get(k, 0) + v
                totals[k] = totals.get(k, 0) + v * repeat
            copies, meta = fp8_states(part.ops, recipe.fp8, layout)
            sets = part.repeat if part.copies is None else part.copies
            fp8 = [fp8[0] + copies * sets, fp8[1] + meta * sets]
        for component, extra in (_sp_gathered(part.ops, a, layout) if layout.framework == "torch" else {}).items():
            full[component] = full.get(component, 0) + extra
            totals[component] = totals.get(component, 0) + extra * repeat
        if kv:  # an encoder-decoder's encoder output: one tensor, kept once however many cross-attentions read it
            cross_input = kv
        # what an op brings back in its own backward whatever the mode (a checkpointed scan's intermediates)
        par = Parallel(layout.tp, layout.cp, layout.sp, attention)
        own = max((op.transient(par) for op in part.ops), default=0) if part.block else 0
        if part.block and recompute == "full":
            # the block's input is [T, D], as each residual add's (a block without input norms has no norm of it)
            first = next(op for op in part.ops if op.role == "residual")
            kept = {"block input": _ceil(first.elements * a, (layout.tp if layout.sp and layout.tp > 1
                                                              else 1) * layout.cp)}
            recompute_extra = max(recompute_extra, sum(full.values()) + own)
            kept = {k: v * repeat for k, v in kept.items()}
        else:
            kept = totals
            recompute_extra = max(recompute_extra, own)
            if recompute == "selective" and part.block and attention == "eager":  # one core's probabilities back
                recompute_extra = max(recompute_extra, max(
                    (_ceil(op.scores() * a, layout.tp * layout.cp) for op in part.ops), default=0))
            elif recompute == "selective" and part.block:  # one fused core's output and logsumexp back
                recompute_extra = max(recompute_extra, max(
                    (sum(op.saved(a, "none", par).values()) - sum(op.saved(a, recompute, par).values())
                     for op in part.ops if op.scores()), default=0))
        for k, v in kept.items():
            per_mb[k] = per_mb.get(k, 0) + v
        for what, elements, size in part.extras:
            if tuned and size == INDEX_BYTES:  # ids a lookup keeps for its table's gradient: none when frozen
                continue
            per_mb[what] = per_mb.get(what, 0) + _ceil(elements * (size or a), layout.cp)
        if part.block:
            gather = max(gather, block_params * recipe.weights)
            block_total += block_params * (part.repeat if part.copies is None else part.copies)
    if cross_input:
        per_mb["encoder output"] = cross_input
    if last and not spec.lm_head:  # a bare encoder's loss: a scalar
        per_mb["loss"] = STAT_BYTES
    residual = next((op for part in parts if part.block for op in part.ops if op.role == "residual"), None)
    head_op = next((op for part in parts for op in part.ops if op.role == "head"), None)
    torch_way = layout.framework == "torch"
    if torch_way and head_op is not None and layout.tp > 1:
        # loss_parallel's cross-entropy keeps two int64 tensors a scored token for its backward (the targets' mask
        # and the targets local to this GPU's vocabulary)
        per_mb["loss"] = per_mb.get("loss", 0) + 2 * 8 * _ceil(head_op.m, layout.cp)
    recv_buffers = 0
    if pp > 1 and residual is not None:
        # torch.distributed.pipelining keeps each microbatch's stage output until its backward (to send it and to
        # run the backward from it): [T, D], the last stage's the logits [T, V / tp]; once per microbatch in flight
        seq = (layout.tp if layout.sp and layout.tp > 1 else 1) * layout.cp
        hidden = _ceil(residual.elements * a, seq)
        per_mb["stage output"] = hidden if not last or head_op is None else _ceil(
            head_op.m * head_op.n * a, layout.tp * layout.cp)
        # and a receive buffer per microbatch ([T, D]: activations from the stage before, gradients from the one
        # after), made when the stage is built: pp microbatches here
        recv_buffers = pp * hidden * ((index > 0) + (not last))
        if torch_way:  # the schedule's own int64 copies: each microbatch's token ids (first stage), every
            # microbatch's targets (last stage, which scores them)
            if index == 0:
                per_mb["pipeline ids"] = 8 * (residual.elements // spec.d_model)
            if last and head_op is not None:
                per_mb["pipeline targets"] = 8 * head_op.m * pp
    dense = sum(n * r for n, e, r in weights_numel if not e)
    expert = sum(n * r for n, e, r in weights_numel if e)
    counter = STEP_COUNTER if optimizer == "adamw" else 0
    raw = [ModelStates(n * recipe.weights + (frozen_bytes if not is_expert else 0),
                       n * recipe.grads,
                       sum(state_bytes(size, optimizer, recipe) * r for size, e, r in weights_numel
                           if e == is_expert), n * recipe.master)
           for n, is_expert in ((dense, False), (expert, True))]
    # torch's own conventions beside the sharded figures (_Raw): AdamW's step counters are one per parameter
    # tensor on every rank that steps it (ZeRO-3/FSDP2 shards each tensor: every rank keeps all its counters);
    # DTensor's vocab-parallel token table gets its gradient whole (an untied table; a tied one is the head's,
    # sharded by the column-parallel head)
    token = next((op for part in parts for op in part.ops if op.role == "token"), None)
    head_op = next((op for part in parts for op in part.ops if op.role == "head"), None)
    untied = (token is not None and not (head_op is not None and head_op.weights == 0)
              and layout.framework == "torch")
    table_grad = (token.rows - _ceil(token.rows, layout.tp)) * token.dim * recipe.grads if untied else 0
    # a mixed step casts the whole table gradient to fp32 and DTensor reshards it onto the master's shard
    table_step = (token.rows + _ceil(token.rows, layout.tp)) * token.dim * 4 if table_grad and recipe.master else 0
    dense_sizes = tuple(size for size, e, r in weights_numel if not e for _ in range(r))
    expert_tensors = sum(r for _, e, r in weights_numel if e)
    tied = next((op for part in parts for op in part.ops if op.role == "token"), None)
    shared = tied is not None and head_op is not None and head_op.weights == 0 and not tuned  # frozen: no gradient
    tied_step = 2 * _ceil(tied.rows, layout.tp) * tied.dim * recipe.grads if shared else 0
    raw = _Raw(raw, counter, dense_sizes, expert_tensors, table_grad, table_step, tied_step, optimizer, recipe)
    states = _sharded(raw, layout)
    microbatches = pp - index
    activations = sum(per_mb.values()) * microbatches
    head = next((op for part in parts for op in part.ops if op.role == "head"), None)
    # the loss's backward: two fp32 [tokens, V] tensors (the logits' gradient in fp32 and the log-softmax's), three
    # of [tokens, V/tp] under loss_parallel
    loss_grad = 0 if head is None else _ceil(head.m * head.n, layout.tp * layout.cp) * STAT_BYTES * (
        3 if layout.tp > 1 else 2)
    # the loss's backward is done (its tensors freed) before the first block's backward recomputes or brings back
    # anything: the larger of the two; with ZeRO-3, two blocks' gathered weights more (_plan); a quantized frozen
    # model, one dequantized matrix
    block_transient = recompute_extra + dequantized
    transient = max(block_transient, loss_grad)
    # the end of backward: a token table the head shares gets its two gradients summed (the new one and the sum
    # exist beside the gradients: tied_step); the mixed-precision step: one parameter's fp32 gradient at a time
    step = max(largest_tensor * 4 if recipe.master else 0, tied_step)
    tensors = sum(r for _, _, r in weights_numel)
    stage = StageMemory(index, dense + expert + frozen, states, activations, per_mb, microbatches, transient, step,
                        tensors, dense + expert if tuned else None, frozen_bytes=frozen_bytes,
                        fp8_weights=fp8[0], fp8_scaling=fp8[1],
                        loss_transient=loss_grad, block_transient=block_transient, recv_buffers=recv_buffers)
    root = dense + expert + frozen - block_total
    # the embedding's tables get their gradients last in backward; the rest of the root's (the head's, the final
    # norm's) exist from the loss's backward on, unsharded under FSDP2 until the root reduce-scatters them
    tables = sum(sum(op.tensors(layout.tp, layout.ep, False)) for part in parts if not part.block
                 for op in part.ops if op.role in LOOKUPS)
    return stage, raw, 2 * gather, (root * recipe.weights, (root - tables) * recipe.grads)


@dataclass(frozen=True)
class _Raw:
    """A stage's states before ZeRO: the dense and the experts' ModelStates (optimizer states without AdamW's step
    counters), the counter's bytes per tensor, the dense tensors' sizes (this GPU's share of each, one entry per
    tensor), and the vocab-parallel table's gradient beyond its shard."""

    states: list[ModelStates]
    counter: int
    dense_sizes: tuple[int, ...]
    expert_tensors: int
    table_grad: int
    table_step: int  # the mixed step's fp32 copies of that whole gradient and its shard
    tied_step: int  # the end of backward's sum of a tied table's two gradients
    optimizer: str
    recipe: Recipe


def zero1_partition(sizes: tuple[int, ...], dp: int) -> list[list[int]]:
    """torch's ZeroRedundancyOptimizer partition: whole tensors, largest first, each to the rank holding the fewest
    values so far (the lowest rank on a tie)."""
    ranks: list[list[int]] = [[] for _ in range(dp)]
    totals = [0] * dp
    for size in sorted(sizes, reverse=True):
        r = totals.index(min(totals))
        ranks[r].append(size)
        totals[r] += size
    return ranks


def _zero1_rank(raw: _Raw, sizes: list[int]) -> tuple[int, int, int]:
    """(optimizer states, step counters, master weights) of one ZeRO-1 rank holding whole tensors of `sizes`."""
    return (sum(state_bytes(n, raw.optimizer, raw.recipe) for n in sizes), raw.counter * len(sizes),
            sum(sizes) * raw.recipe.master)


def zero1_ranks(raw: _Raw, dp: int) -> list[tuple[int, int, int]]:
    return [_zero1_rank(raw, sizes) for sizes in zero1_partition(raw.dense_sizes, dp)]


def _rank_states(raw: _Raw, layout: Layout) -> tuple[ModelStates, ...]:
    """Under ZeRO-1 of a dense model, every data-parallel rank's states (they differ: whole tensors each)."""
    shard = layout.dp * layout.cp
    if layout.zero != 1 or shard == 1 or raw.states[1].weights or layout.framework != "torch":
        return ()
    whole = _sharded(raw, replace(layout, zero=0))
    return tuple(replace(whole, optimizer_states=o + c, master_weights=m) for o, c, m in zero1_ranks(raw, shard))


def _rank_steps(raw: _Raw, layout: Layout) -> tuple[int, ...]:
    """Under ZeRO-1 (as `_rank_states`), each rank's step transient: a mixed step casts one of its own tensors'
    gradient to fp32 at a time."""
    if not _rank_states(raw, layout):
        return ()
    return tuple(max(4 * max(sizes, default=0) if raw.recipe.master else 0, raw.tied_step)
                 for sizes in zero1_partition(raw.dense_sizes, layout.dp * layout.cp))


def _sharded(raw: _Raw, layout: Layout) -> ModelStates:
    """The dense and the experts' states (unsharded) on one GPU of `layout`: ZeRO over dp x cp, the experts' over
    dp x cp / ep. ZeRO-1 without experts gives whole tensors to ranks as torch's ZeroRedundancyOptimizer does
    (the rank with the most optimizer bytes is reported); AdamW's step counters are never split."""
    shard = layout.dp * layout.cp
    # ZeRO-2 as FSDP2 runs it: the weights are resharded after backward (gathered in between: StageMemory.gathered)
    zero = 3 if layout.zero == 2 else layout.zero
    (dense, experts) = (_shard(r.weights, r.gradients, r.optimizer_states, r.master_weights, zero, n)
                        for r, n in zip(raw.states, (shard, shard // layout.ep)))
    counters = raw.counter * (len(raw.dense_sizes) + raw.expert_tensors)
    if layout.zero == 1 and shard > 1 and not raw.states[1].weights and layout.framework == "torch":
        optimizer, counters, master = max(zero1_ranks(raw, shard), key=lambda t: (t[0] + t[1] + t[2]))
        dense = replace(dense, optimizer_states=optimizer, master_weights=master)
    grads = dense.gradients + experts.gradients + (raw.table_grad if layout.zero < 2 else 0)
    return ModelStates(dense.weights + experts.weights, grads,
                       dense.optimizer_states + experts.optimizer_states + counters,
                       dense.master_weights + experts.master_weights)



def _korthikanti(spec: ModelSpec, workload: Workload, recompute: str, layout: Layout,
                 stage: StageMemory, parts: list[_Part], attention: str = "eager") -> int | None:
    """Korthikanti et al. 2022 (Reducing Activation Recomputation in Large Transformer Models, sec. 4 and
    Table 2): per layer sbh(34 + 5as/h) bytes (16-bit, with dropout), with tensor parallelism
    sbh(10 + 24/t + 5as/(ht)), with sequence parallelism sbh/t (34 + 5as/h); selective recomputation drops the
    5as/h term, and so does a fused attention kernel (it keeps no N x N tensor either); full keeps 2sbh (/t with
    sequence parallelism). For the blocks on the stage, with its microbatches in flight. Only for blocks of
    self-attention and an MLP (no cross-attention; not a block_pattern's blocks of one kind alone) in one stack of one
    width (not a multimodal model's towers)."""
    if spec.towers or spec.is_encoder_decoder or any(not {"attention", "mlp"} <= {KINDS[name].family for name in layer.kinds}
                                      for stack in stacks(spec) for layer in stack.distinct()):
        return None
    s, b, h, a_heads, t = workload.seq_len // layout.cp, workload.batch_size, spec.d_model, spec.n_heads, layout.tp
    sp = layout.sp and t > 1
    sbh = Fraction(s * b * h)
    if attention == "fused":  # no N x N tensor kept: the paper's selective figure
        recompute = "selective" if recompute == "none" else recompute
    scores = Fraction(5 * a_heads * s, h)  # the 5as/h term: the softmax's output, its dropout mask and output
    if recompute == "full":
        per_layer = 2 * sbh / (t if sp else 1)
    elif sp:
        per_layer = sbh / t * (34 + (scores if recompute == "none" else 0))
    else:
        per_layer = sbh * (10 + Fraction(24, t) + (scores / t if recompute == "none" else 0))
    layers = sum(p.repeat for p in parts if p.block)
    return round(per_layer * layers * stage.microbatches)


def training_memory(spec: ModelSpec, workload: Workload, precision: str = "bf16-mixed", optimizer: str = "adamw",
                    recompute: str = "none", layout: Layout | None = None, capacity_bytes: int | None = None,
                    gpu_name: str | None = None, search: dict | None = None,
                    adapters: Adapters | None = None, attention: str = "fused",
                    stage: int | None = None, quant=None) -> TrainingMemory:
    """Training memory per GPU of `spec` on a train `workload` (its batch_size the micro batch), with a recipe,
    an optimizer, a recomputation policy, an attention kernel ("fused": FlashAttention or torch SDPA's fused
    kernels, no N x N tensor kept; "eager": two matmuls and a softmax, its probabilities kept) and a parallel
    layout; the worst pipeline stage. With a GPU's capacity, whether it fits; with `search` (the layout fields the
    user fixed), also the smallest layout that fits. With `adapters` (`tfcalc.Adapters`): a fine-tuning step of
    LoRA/DoRA adapters on the frozen model (data parallel and ZeRO only); with `quant` too (a format's name or a
    `tfcalc.plan.quant.Quant`), the frozen model stored quantized: QLoRA."""
    if adapters is not None and not isinstance(adapters, Adapters):
        raise TfcalcError(f"adapters: expected a tfcalc.Adapters or None, got {type(adapters).__name__}")
    if quant is not None:
        from .quant import as_quant

        quant = as_quant(quant)
    if quant is not None and adapters is None:
        raise TfcalcError(f"quant={quant.name!r}: a quantized model trains adapters on its frozen weights (QLoRA); "
                          "give adapters (--lora-rank)")
    if not isinstance(workload, Workload) or workload.phase != "train":
        raise TfcalcError("workload: training memory is for phase 'train' (inference memory is "
                          "tfcalc.plan.memory.inference_memory)")
    recipe = PRECISIONS[_choice(precision, "precision", PRECISIONS)]
    precision = PRECISION_ALIASES.get(precision, precision)
    _choice(optimizer, "optimizer", OPTIMIZERS)
    _choice(recompute, "recompute", RECOMPUTE)
    _choice(attention, "attention", ATTENTION)
    check_capacity(capacity_bytes, gpu_name)
    if isinstance(layout, dict):  # {"tp": 2, "pp": 4}: the layout's fields
        unknown = sorted(set(layout) - set(Layout.__dataclass_fields__))
        if unknown:
            raise TfcalcError(f"layout: {', '.join(map(repr, unknown))} not a field of Layout (dp, zero, tp, sp, pp, "
                              "ep, cp)")
        layout = Layout(**layout)
    elif layout is not None and not isinstance(layout, Layout):
        raise TfcalcError(f"layout={layout!r}: expected a tfcalc.plan.training.Layout, a dict of its fields, or None")
    layout = layout or Layout()
    if spec.is_encoder_decoder and workload.src_len is None:
        workload = workload.model_copy(update={"src_len": workload.seq_len})
    validate(spec, workload)
    check_layout(spec, workload, layout)
    if adapters is not None:
        if adapters.dora:
            raise TfcalcError("dora=True: DoRA's memory is not modelled (its magnitude's multiplies keep the base "
                              "output and the adapter's output of every adapted linear, unmeasured here); plan LoRA, "
                              "or count DoRA's parameters and FLOPs with tfcalc count")
        split = [f"{k}={getattr(layout, k)}" for k in ("tp", "pp", "ep", "cp") if getattr(layout, k) > 1]
        if split:
            raise TfcalcError(f"{split[0]}: adapters are planned with data parallelism and ZeRO only (the model "
                              "whole on each GPU)")
        if spec.parallel_block != "none":
            raise TfcalcError(f"lora_rank={adapters.rank}: adapters' memory is not modelled for a parallel block "
                              f"(parallel_block={spec.parallel_block!r}: attention and MLP read one input)")
    if quant is not None and recipe.fp8:
        raise TfcalcError(f"quant={quant.name!r}: an FP8 recipe's frozen weights are not modelled quantized")
    cache: dict = {"adapters": adapters, "quant": quant}
    if stage is not None and (isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < layout.pp):
        raise TfcalcError(f"stage={stage!r}: expected a pipeline stage from 0 to {layout.pp - 1}")
    result = _plan(spec, workload, recipe, precision, optimizer, recompute, layout, capacity_bytes, gpu_name, cache,
                   attention=attention, only=stage)
    if search is not None and capacity_bytes is not None:
        if adapters is not None or spec.towers or spec.inputs != "tokens":  # the model whole on each GPU
            search = {"tp": 1, "pp": 1, "ep": 1, "cp": 1, "sp": False, **search}
        result = replace(result, smallest=smallest_layout(spec, workload, precision, optimizer, recompute,
                                                          capacity_bytes, search, adapters, attention, quant))
    return replace(result, adapters=adapters, quant=quant)


def _plan(spec, workload, recipe, precision, optimizer, recompute, layout, capacity_bytes, gpu_name,
          cache: dict, estimate: bool = True, attention: str = "fused", only: int | None = None) -> TrainingMemory:
    key = layout.pp, recompute, attention
    adapters, quant = cache.get("adapters"), cache.get("quant")
    if key not in cache:
        cache[key] = _stages(spec, workload, layout.pp, recompute, attention, adapters)
    all_parts = cache[key]
    stages = []
    for i, parts in enumerate(all_parts):  # a stage's figures once per shape; ZeRO and dp only reshard them
        shape = ("stage", i, layout.pp, layout.tp, layout.ep, layout.cp, layout.sp, layout.framework, recompute,
                 precision, optimizer, attention, quant and quant.name)
        if shape not in cache:
            cache[shape] = _stage_memory(i, parts, spec, recipe, optimizer, recompute, replace(layout, dp=1, zero=0),
                                         i == layout.pp - 1, adapters is not None, attention, quant)
        base, raw, gather, (root, root_grads) = cache[shape]
        states = _sharded(raw, layout)
        transient, gathered = base.transient, 0
        shard = layout.dp * layout.cp
        if layout.zero >= 3:  # a block's backward: its gathered weights, its unsharded gradients and their
            # reduce-scattered shard (`gather` is two blocks' weights), never at the same moment as the loss's
            # backward; the root's weights stay gathered (a copy beside the shard) from forward to backward
            transient = max(base.loss_transient, base.block_transient + gather + _ceil(gather // 2, shard))
            gathered = root + root_grads
        elif layout.zero == 2:  # reshard_after_forward=False: every weight gathered from forward to backward
            gathered = sum(r.weights for r in raw.states) + root_grads
        coexist = (layout.dp * layout.cp > 1 and layout.zero == 0) or layout.pp > 1
        step = max(base.transient_step, raw.table_step if layout.zero < 2 else 0)
        stages.append(replace(base, states=states, rank_states=_rank_states(raw, layout),
                              rank_steps=_rank_steps(raw, layout), transient=transient,
                              transient_step=step, gathered=gathered, grads_with_activations=coexist))
    worst = max(stages, key=lambda s: (s.peak, -s.stage)) if only is None else stages[only]
    published = (_korthikanti(spec, workload, recompute, layout, worst, all_parts[worst.stage], attention)
                 if estimate and adapters is None and not recipe.fp8 else None)  # full 16-bit training's figure
    return TrainingMemory(spec, workload, precision, optimizer, recompute, layout, worst,
                          tuple(s.params for s in stages), published, capacity_bytes, gpu_name, attention=attention)


def _powers(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


MAX_GPUS = 65536


def _beyond(spec, workload, recipe, precision, optimizer, recompute, layout, capacity_bytes, caches,
            attention: str = "fused") -> bool:
    """No data-parallel size or ZeRO stage can fit this shape: a stage's activations and the backward's transients
    alone (neither shrinks with dp) are over the capacity."""
    try:
        check_layout(spec, workload, layout)
    except TfcalcError:
        return False  # left to the search, which skips it by its own check
    stage = _plan(spec, workload, recipe, precision, optimizer, recompute, layout, capacity_bytes, None, caches,
                  estimate=False, attention=attention).stage
    return stage.activations + stage.transient > capacity_bytes


def smallest_layout(spec: ModelSpec, workload: Workload, precision: str, optimizer: str, recompute: str,
                    capacity_bytes: int, fixed: dict, adapters: Adapters | None = None,
                    attention: str = "fused", quant=None) -> TrainingMemory | None:
    """The layout with the fewest GPUs whose worst stage's peak fits in `capacity_bytes`, keeping the layout
    fields in `fixed` as given. Searched: tp 1-8 (one node), pp and dp powers of two, ZeRO 0-3, ep powers of two
    dividing n_experts. Among the layouts with the fewest GPUs the simplest wins (`_simplest`): plain data
    parallel, then ZeRO-1, 2, 3 (FSDP), then tensor parallel, then pipeline stages. Context parallelism (powers of
    two up to MAX_CP dividing the length) and sequence parallelism are the last resort: searched only when nothing
    fits without them (a long context). The plan's `reason` says why this layout. None when nothing up to 65,536
    GPUs fits."""
    recipe = PRECISIONS[precision]
    caches: dict = {"adapters": adapters, "quant": quant}
    best = _search(spec, workload, recipe, precision, optimizer, recompute, capacity_bytes, fixed, caches,
                   [fixed.get("cp", 1)], [fixed.get("sp", False)], attention)
    widened = False
    if best is None and not ("cp" in fixed and "sp" in fixed):
        # context parallelism over the lengths it divides; sequence parallelism on wherever tp > 1 (it only
        # splits what tensor parallelism keeps whole: never more memory)
        cps = [fixed["cp"]] if "cp" in fixed else [c for c in _powers(MAX_CP) if workload.seq_len % c == 0]
        sps = [fixed["sp"]] if "sp" in fixed else [True]
        best = _search(spec, workload, recipe, precision, optimizer, recompute, capacity_bytes, fixed, caches, cps,
                       sps, attention)
        widened = True
    if best is None:
        return None
    plan = _plan(spec, workload, recipe, precision, optimizer, recompute, best, capacity_bytes, None, caches,
                 attention=attention)
    return replace(plan, reason=_reason(best, fixed, widened))


def _simplest(layout: Layout) -> tuple:
    """The search's order among layouts with as many GPUs: the least context parallelism first, then no pipeline,
    then the least tensor parallelism, the least expert parallelism, the lowest ZeRO stage (plain data parallel
    first), sequence parallelism off."""
    return layout.gpus, layout.cp, layout.pp, layout.tp, layout.ep, layout.zero, int(layout.sp), layout.dp


def _reason(layout: Layout, fixed: dict, widened: bool) -> str:
    """Why the search chose `layout`: it has the fewest GPUs that fit, and each way it departs from plain data
    parallelism is there because the simpler layouts on as many GPUs do not fit (or the user fixed it)."""
    n = f"{layout.gpus:,} GPU" + ("s" if layout.gpus > 1 else "")
    given = [("sp" if fixed[k] else "no sp") if k == "sp" else f"{k} {fixed[k]}"
             for k in ("dp", "zero", "tp", "sp", "pp", "ep", "cp") if k in fixed]
    why = []
    if widened and (layout.cp > 1 or layout.sp) and not ({"cp", "sp"} <= set(fixed)):
        searched = " or ".join(w for k, w in (("cp", "context"), ("sp", "sequence")) if k not in fixed)
        why.append(f"nothing fits without {searched} parallelism")
    if layout.pp > 1 and "pp" not in fixed:
        why.append(f"no layout without pipeline stages fits on {n}")
    if layout.tp > 1 and "tp" not in fixed:
        why.append(f"data parallelism with any ZeRO stage does not fit on {n}")
    elif layout.zero and "zero" not in fixed:
        why.append(f"plain data parallelism does not fit on {n}; ZeRO-{layout.zero} is the lowest stage that does")
    if not why:
        why.append("plain data parallelism fits" if layout.gpus == layout.dp else "the simplest layout that fits")
    return (f"the fewest GPUs that fit ({n}); " + "; ".join(why)
            + (f" ({', '.join(given)} as given)" if given else ""))


MAX_CP = 64  # the largest context-parallel size the fit search tries


def _search(spec: ModelSpec, workload: Workload, recipe: Recipe, precision: str, optimizer: str, recompute: str,
            capacity_bytes: int, fixed: dict, caches: dict, cps: list[int], sps: list[bool],
            attention: str = "fused") -> Layout | None:
    """smallest_layout's search over the layouts with cp in `cps` and sp in `sps`."""
    blocks = sum(s.n_layers for s in stacks(spec))
    tps = [fixed["tp"]] if "tp" in fixed else [t for t in (1, 2, 4, 8)
                                                if not any(heads % t for heads in _head_counts(spec))]
    pps = [fixed["pp"]] if "pp" in fixed else _powers(blocks)
    eps = [fixed["ep"]] if "ep" in fixed else ([e for e in _powers(spec.n_experts) if spec.n_experts % e == 0]
                                               if spec.is_moe else [1])
    zeros = [fixed["zero"]] if "zero" in fixed else [0, 1, 2, 3]
    dps = [fixed["dp"]] if "dp" in fixed else _powers(MAX_GPUS)
    framework = fixed.get("framework", "torch")
    best, best_key = None, None
    # the sizes with the fewest GPUs first (dp * cp must be a multiple of ep): once one fits, no size that needs
    # more GPUs than it is looked at
    sizes = sorted({(tp * pp * cp * max(1, ep // cp), pp, tp, cp, sp and tp > 1, ep)
                    for pp in pps for tp in tps for cp in cps for sp in sps for ep in eps})
    for fewest, pp, tp, cp, sp, ep in sizes:
        if best_key is not None and fewest > best_key[0]:
            break
        if _beyond(spec, workload, recipe, precision, optimizer, recompute,
                   Layout(1, 0, tp, pp, ep, cp, sp, framework), capacity_bytes, caches, attention):
            continue
        for zero in zeros:
            for dp in dps:
                layout = Layout(dp, zero, tp, pp, ep, cp, sp, framework)
                if layout.gpus > MAX_GPUS or (dp * cp) % ep:
                    continue
                if best_key is not None and layout.gpus > best_key[0]:
                    break
                try:
                    check_layout(spec, workload, layout)
                except TfcalcError:
                    continue
                plan = _plan(spec, workload, recipe, precision, optimizer, recompute, layout, capacity_bytes,
                             None, caches, estimate=False, attention=attention)
                if plan.peak <= capacity_bytes:
                    key = _simplest(layout)
                    if best_key is None or key < best_key:
                        best, best_key = layout, key
                    break  # a larger dp only adds GPUs
    return best
