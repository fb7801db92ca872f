"""The inventory: per distinct layer, its ordered op records, times how many layers are like it.

    >>> from tfcalc import load_preset
    >>> inv = build(load_preset("gpt2"))
    >>> [(g.label, g.repeat, len(g.ops)) for g in inv.groups]
    [('embedding', 1, 2), ('block (dense, global)', 12, 10), ('final_norm', 1, 1), ('head', 1, 1)]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import TfcalcError
from ..spec import ModelSpec
from .architecture import Stack, stacks
from .builders import KINDS, Ctx, block, run
from .ops import Op
from .workload import Workload


@dataclass(frozen=True)
class Group:
    """Ops the model performs `repeat` times, with `copies` sets of their parameters (fewer than `repeat` when
    blocks share parameters: ALBERT; None: one set each time)."""

    label: str
    repeat: int
    ops: tuple[Op, ...]
    copies: int | None = None
    kind: str = "block"  # "embedding", "block", "final_norm" or "head"
    stack: Stack | None = None  # the stack it belongs to (None: the model's shared table and its head)

    @property
    def block(self) -> bool:
        """Transformer blocks (what full recomputation runs again), not embeddings, norms or heads."""
        return self.kind == "block"

    @property
    def parameter_sets(self) -> int:
        return self.repeat if self.copies is None else self.copies


@dataclass(frozen=True)
class Inventory:
    spec: ModelSpec
    workload: Workload
    groups: tuple[Group, ...]

    def __iter__(self) -> Iterator[tuple[Op, int]]:
        """Every op record with the number of times the model performs it."""
        for group in self.groups:
            for op in group.ops:
                yield op, group.repeat

    def parameters(self) -> Iterator[tuple[Op, int]]:
        """Every op record with the number of sets of its parameters the model holds (the times it performs it,
        unless blocks share parameters)."""
        for group in self.groups:
            for op in group.ops:
                yield op, group.parameter_sets

    def families(self) -> dict[str, str]:
        """Each component's builder family ("attention", "cross_attention", "mlp", "mixer" or "other"; an attention core's
        scores and values are its sublayer's)."""
        return {name: _family(op) for op, _ in self for name in op.names()}

    def components(self) -> list[str]:
        """Component names in model order (an attention core gives `.../scores` and `.../values`)."""
        names: dict[str, None] = {}
        for op, _ in self:
            names.update(dict.fromkeys(op.names()))
        return list(names)


def family(op: Op) -> str:
    """The kind of work a record does: "quadratic" for an attention core's scores and values and a sparse-attention
    indexer's scores (every query against every key), else its builder's family ("attention", "cross_attention",
    "mlp", "mixer", "other")."""
    return "quadratic" if op.role in ("core", "indexer") else _family(op)


def _family(op: Op) -> str:
    kind = KINDS.get(op.sublayer)
    return "other" if kind is None else kind.family


def default_workload(spec: ModelSpec) -> Workload:
    """The spec's own workload: a train step of batch_size sequences of seq_len tokens."""
    image = None
    if spec.inputs == "images":  # one image at the model's size
        sizes = spec.sizes("patch_embedding")
        image = (sizes.height, sizes.width)
    return Workload(batch_size=spec.batch_size, seq_len=spec.seq_len,
                    src_len=spec.seq_len if spec.is_encoder_decoder else None, image_size=image)


def validate(spec: ModelSpec, workload: Workload) -> None:
    """Refuse a workload the model cannot run, naming the field and the value."""
    problems = []
    if workload.src_len is not None and not spec.cross_attends:
        problems.append(f"src_len={workload.src_len}: only an encoder-decoder (or a model with cross_attention "
                        f"blocks) has an encoder input ({spec.label} has n_encoder_layers=0)")
    if not spec.causal and workload.phase != "train":
        problems.append(f"phase={workload.phase!r}: {spec.label} is a bidirectional encoder; it has no KV cache "
                        "to prefill or decode (use phase='train' for a forward over whole sequences)")
    if spec.inputs == "images" or workload.image_size is not None:
        problems += _image_problems(spec, workload)
    elif spec.positions == "learned":
        if workload.keys > spec.max_positions:
            what = f"context + seq_len = {workload.keys}" if workload.context else f"seq_len={workload.seq_len}"
            problems.append(f"{what} exceeds max_positions={spec.max_positions} (learned positions have no row "
                            "for the extra tokens)")
        if spec.is_encoder_decoder and workload.src_len and workload.src_len > spec.max_positions:
            problems.append(f"src_len={workload.src_len} exceeds max_positions={spec.max_positions} (learned "
                            "positions have no row for the extra tokens)")
    if problems:
        raise TfcalcError("\n".join(problems))


def _image_problems(spec: ModelSpec, workload: Workload) -> list[str]:
    """A model of images runs on images (image_size, each side a multiple of the patch), its tokens (seq_len) their
    patches and the class token; a model of tokens on no image. Another image size than the model's interpolates the
    position table: no row is missing."""
    if spec.inputs != "images":
        return [f"image_size={_shown(workload.image_size)}: {spec.label} reads tokens (inputs='tokens'), not images"]
    sizes = spec.sizes("patch_embedding")
    H, W = workload.image_size or (sizes.height, sizes.width)
    p = sizes.patch_size
    if H % p or W % p:
        return [(f"image_size={_shown((H, W))}: not a multiple of {spec.label}'s patch_size={p} (the patches would "
                 "not cover the image)")]
    tokens = sizes.tokens(H, W)
    if workload.seq_len != tokens:
        cls = " and the class token" if sizes.class_token else ""
        return [(f"seq_len={workload.seq_len}: an image of {_shown((H, W))} is {tokens} tokens for {spec.label} "
                 f"({sizes.patches(H, W)} patches of {p}x{p}{cls})")]
    return []


def _shown(hw: tuple[int, int]) -> str:
    return f"{hw[0]}x{hw[1]}"


def build(spec: ModelSpec, workload: Workload | None = None) -> Inventory:
    """The op inventory of `spec` on `workload` (default: the spec's own train step). Pure integers, no torch;
    the work grows with the number of distinct layers, not with n_layers."""
    if not isinstance(spec, ModelSpec):
        raise TfcalcError(f"spec: expected a tfcalc.ModelSpec, got {type(spec).__name__}")
    if workload is not None and not isinstance(workload, Workload):
        raise TfcalcError(f"workload: expected a tfcalc.Workload or None, got {type(workload).__name__}")
    workload = workload or default_workload(spec)
    if spec.is_encoder_decoder and workload.src_len is None:
        workload = workload.model_copy(update={"src_len": workload.seq_len})
    (groups,) = stages(spec, workload, 1)
    return Inventory(spec, workload, tuple(g for g in groups if g.ops))


def stages(spec: ModelSpec, workload: Workload, pp: int) -> list[list[Group]]:
    """The inventory's groups on each of `pp` pipeline stages: contiguous blocks, split as evenly as can be (the
    first stage also holds the embeddings, the last the final norm and the head; a stack's embedding goes with
    its first block and its final norm with its last). With pp = 1, the whole inventory."""
    all_stacks = stacks(spec)
    total = sum(s.n_layers for s in all_stacks)
    bounds = [i * total // pp for i in range(pp + 1)]
    out: list[list[Group]] = [[] for _ in range(pp)]

    def stage(layer: int) -> int:  # of the model's layer index, by arithmetic
        if pp == 1:
            return 0
        s = layer * pp // total
        while bounds[s + 1] <= layer:
            s += 1
        while bounds[s] > layer:
            s -= 1
        return s

    top = Ctx(spec, workload, all_stacks[-1])
    if spec.is_encoder_decoder:
        out[0].append(Group("embedding", 1, tuple(run("shared_embedding", top)), kind="embedding"))
    offset = 0
    for stack in all_stacks:
        ctx = Ctx(spec, workload, stack)
        where = f"{stack.name} " if stack.name else ""
        out[stage(offset)].append(Group(f"{where}embedding", 1, tuple(run(spec.input_kind, ctx)), kind="embedding",
                                        stack=stack))
        for s in range(pp):
            lo, hi = max(bounds[s] - offset, 0), min(bounds[s + 1] - offset, stack.n_layers)
            # shared_blocks: one kind of block (the spec checks it)
            out[s] += [Group(f"{where}block ({layer.label})", repeat, tuple(block(Ctx(spec, workload, stack, layer))),
                             spec.shared_blocks, stack=stack)
                       for layer, repeat in (stack.distinct(lo, hi).items() if lo < hi else ())]
        out[stage(offset + stack.n_layers - 1)].append(
            Group(f"{where}final_norm", 1, tuple(run("final_norm", ctx)), kind="final_norm", stack=stack))
        offset += stack.n_layers
    out[pp - 1].append(Group("head", 1, tuple(run("head", top)), kind="head"))
    return out


from .. import blocks  # noqa: E402,F401  (registers the block kinds)
