"""The inventory: per distinct layer, its ordered op records, times how many layers are like it.

    >>> from tfcalc import load_preset
    >>> inv = build(load_preset("gpt2"))
    >>> [(g.label, g.repeat, len(g.ops)) for g in inv.groups]
    [('embedding', 1, 2), ('block (dense, global)', 12, 10), ('final_norm', 1, 1), ('head', 1, 1)]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from ..errors import TfcalcError
from ..spec import ModelSpec
from .architecture import Layer, Stack, stacks
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
    tower: str = ""  # a multimodal model's tower ("text", "vision", "audio") or "connectors"; "" in a model of one
    layer: Layer | None = None  # the block it stands for (a block group's), which places its instances in the stack

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

    def towers(self) -> list[str]:
        """A multimodal model's towers and connectors, in model order ([] for a model of one tower)."""
        return list(dict.fromkeys(g.tower for g in self.groups if g.tower))

    def tower(self, name: str) -> Iterator[tuple[Op, int]]:
        """The records of one tower (or of the connectors), with the times the model performs each."""
        for group in self.groups:
            if group.tower == name:
                for op in group.ops:
                    yield op, group.repeat

    def tower_parameters(self, name: str) -> Iterator[tuple[Op, int]]:
        for group in self.groups:
            if group.tower == name:
                for op in group.ops:
                    yield op, group.parameter_sets

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
    image = frames = None
    src_len = spec.seq_len if spec.is_encoder_decoder else None
    if spec.inputs == "images":  # one image at the model's size
        sizes = spec.sizes("patch_embedding")
        image = (sizes.height, sizes.width)
    if spec.inputs == "audio" and spec.is_encoder_decoder:  # the model's window of mel frames, its encoder's positions
        frames = spec.sizes("audio_conv").window
        src_len = frames // 2
    elif spec.inputs == "audio":  # an audio encoder alone: its tokens are half the mel frames (its front end's)
        frames = spec.sizes("audio_conv").frames_for(spec.seq_len)
    elif "audio" in spec.towers:  # a model with an audio tower: one window (30 s) of audio per sequence
        frames = spec.towers["audio"].sizes("audio_conv").window
    from .towers import with_images

    work = Workload(batch_size=spec.batch_size, seq_len=spec.seq_len, src_len=src_len, image_size=image,
                    mel_frames=frames)
    return with_images(spec, work)  # one image at the tower's size (one per sequence that cross-attends to it)


def validate(spec: ModelSpec, workload: Workload) -> None:
    """Refuse a workload the model cannot run, naming the field and the value."""
    problems = []
    if workload.src_len is not None and not spec.cross_attends:
        problems.append(f"src_len={workload.src_len}: only an encoder-decoder (or a model with cross_attention "
                        f"blocks) has an encoder input ({spec.label} has n_encoder_layers=0)")
    if not spec.causal and workload.phase != "train":
        problems.append(f"phase={workload.phase!r}: {spec.label} is a bidirectional encoder; it has no KV cache "
                        "to prefill or decode (use phase='train' for a forward over whole sequences)")
    if spec.towers:
        problems += _tower_problems(spec, workload)
    elif workload.images is not None:
        problems.append(f"images={workload.images}: only a model with a vision tower takes images beside its tokens"
                        + (" (a model of images alone runs batch_size images)" if spec.inputs == "images" else
                           f" ({spec.label} has none)"))
    if spec.inputs == "audio" or (workload.mel_frames is not None and not spec.towers):  # (towers': said there)
        problems += _audio_problems(spec, workload)
    if not spec.towers and (spec.inputs == "images" or workload.image_size is not None):
        problems += _image_problems(spec, workload)
    elif spec.positions == "learned":
        if workload.keys > spec.max_positions:
            what = f"context + seq_len = {workload.keys}" if workload.context else f"seq_len={workload.seq_len}"
            problems.append(f"{what} exceeds max_positions={spec.max_positions} (learned positions have no row "
                            "for the extra tokens)")
        if spec.is_encoder_decoder and workload.src_len and workload.src_len > spec.max_positions \
                and spec.inputs != "audio":  # (a model of audio: the encoder's own table, _audio_problems)
            problems.append(f"src_len={workload.src_len} exceeds max_positions={spec.max_positions} (learned "
                            "positions have no row for the extra tokens)")
    if problems:
        raise TfcalcError("\n".join(problems))


def _audio_problems(spec: ModelSpec, workload: Workload) -> list[str]:
    """A model of audio runs on mel frames (an even number, half of them the encoder's tokens, src_len, at most its
    position table's rows); a model of tokens or images on none."""
    if spec.inputs != "audio":
        return [f"mel_frames={workload.mel_frames}: {spec.label} reads {spec.inputs}, not audio (inputs='audio')"]
    if not spec.is_encoder_decoder:  # an audio encoder alone: seq_len is its tokens, half the mel frames
        sizes = spec.sizes("audio_conv")
        if workload.mel_frames is not None and sizes.tokens(workload.mel_frames) != workload.seq_len:
            return [f"mel_frames={workload.mel_frames}: {spec.label}'s {workload.seq_len} tokens (seq_len) are "
                    f"{sizes.frames_for(workload.seq_len)} mel frames (its front end's stride {sizes.stride})"]
        return []
    sizes = spec.sizes("audio_conv")
    frames = sizes.window if workload.mel_frames is None else workload.mel_frames
    if frames % 2:
        return [f"mel_frames={frames}: an odd number of mel frames (conv2's stride 2 takes two frames per encoder "
                "token)"]
    if frames // 2 > sizes.positions:
        return [f"mel_frames={frames}: {frames // 2} encoder tokens exceed {spec.label}'s {sizes.positions} positions "
                f"(kinds.audio_conv.positions: at most {sizes.window} frames, {sizes.window / 100:g} s)"]
    if workload.src_len is not None and workload.src_len != frames // 2:
        return [f"src_len={workload.src_len}: {frames} mel frames are {frames // 2} encoder tokens for {spec.label} "
                "(conv2's stride 2)"]
    return []


def _image_problems(spec: ModelSpec, workload: Workload) -> list[str]:
    """A model of images runs on images (image_size, each side a multiple of the patch), its tokens (seq_len) their
    patches and the class token; a model of tokens on no image. Another image size than the model's interpolates the
    position table: no row is missing."""
    if spec.inputs != "images":
        return [f"image_size={_shown(workload.image_size)}: {spec.label} reads tokens (inputs='tokens'), not images"]
    sizes = spec.sizes("patch_embedding")
    H, W = workload.image_size or (sizes.height, sizes.width)
    p = sizes.patch_size
    if H % sizes.multiple or W % sizes.multiple:
        return [f"image_size={_shown((H, W))}: not a multiple of {spec.label}'s {sizes.covers()}"]
    if sizes.refusal(H, W):  # a tower of tiles (Llama 4)
        return [f"image_size={_shown((H, W))}: {spec.label} {sizes.refusal(H, W)}"]
    if sizes.up_to_image_size and (H > sizes.height or W > sizes.width):
        return [f"image_size={_shown((H, W))}: larger than {spec.label}'s largest image, "
                f"{_shown((sizes.height, sizes.width))} (its processor resizes a larger one down to it)"]
    if sizes.tiles > 1 and (H, W) != (sizes.height, sizes.width):
        return [f"image_size={_shown((H, W))}: {spec.label} reads tiles of {_shown((sizes.height, sizes.width))} "
                f"alone, {sizes.tiles} per image (kinds.patch_embedding.tiles: its processor cuts and pads every image "
                "into them)"]
    tokens = sizes.tokens(H, W)
    if sizes.packed:  # every image's patches one sequence (Pixtral): k images, k x tokens
        if workload.batch_size != 1:
            return [f"batch_size={workload.batch_size}: {spec.label} reads every image of the step as one sequence "
                    f"of their patches; batch_size 1, seq_len images x {tokens}"]
        if workload.seq_len % tokens:
            return [f"seq_len={workload.seq_len}: {spec.label} reads its images as one sequence, a multiple of an "
                    f"image of {_shown((H, W))}'s {tokens} patches of {p}x{p}"]
        return []
    if workload.seq_len != tokens:
        cls = " and the class token" if sizes.class_token else ""
        return [(f"seq_len={workload.seq_len}: an image of {_shown((H, W))} is {tokens} tokens for {spec.label} "
                 f"({sizes.patches(H, W)} patches of {p}x{p}{cls})")]
    return []


def _tower_problems(spec: ModelSpec, workload: Workload) -> list[str]:
    """A multimodal model: its vision tower's images, its connectors' token groups, the image tokens in the prompt;
    a model whose text tower has no LM head (a dual encoder: CLIP) has no cache."""
    from . import towers

    if workload.phase != "train" and not spec.lm_head and spec.causal:  # (a bidirectional one: said by validate)
        return [f"phase={workload.phase!r}: {spec.label} encodes texts and images (its text tower has no LM head); it "
                "has no KV cache to prefill or decode (use phase='train' for a forward)"]
    problems = []
    if "vision" not in spec.towers:
        if workload.image_size is not None:
            problems.append(f"image_size={_shown(workload.image_size)}: {spec.label} has no vision tower")
        elif workload.images is not None:  # images alone: named, not an image size it does not have
            problems.append(f"images={workload.images}: {spec.label} has no vision tower")
    elif workload.images == 0 and workload.image_size is not None:  # no image to size: the field would go unused
        problems.append(f"image_size={_shown(workload.image_size)}: images=0 is a prompt of text alone, with no image "
                        "to size")
    else:
        vision = spec.towers["vision"]
        workload = towers.with_images(spec, workload)
        problems += [p.replace(vision.label, f"{spec.label}'s vision tower", 1)
                     for p in _image_problems(vision, towers.tower_workload(spec, "vision", workload))]
    if "audio" not in spec.towers and workload.mel_frames is not None:
        problems.append(f"mel_frames={workload.mel_frames}: {spec.label} has no audio tower")
    elif "audio" in spec.towers and workload.mel_frames is not None:
        sizes = spec.towers["audio"].sizes("audio_conv")
        if not sizes.whole_windows and workload.mel_frames > sizes.window:  # its feature extractor truncates the clip
            problems.append(f"mel_frames={workload.mel_frames}: {spec.label}'s audio tower reads a clip of at most "
                            f"{sizes.window:,} mel frames (its feature extractor truncates longer audio)")
    return problems or towers.connector_problems(spec, workload)


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
    if spec.towers:
        return _multimodal(spec, workload)
    if spec.inputs == "audio" and not spec.is_encoder_decoder:  # an audio encoder alone: seq_len its tokens
        if workload.mel_frames is None:
            workload = workload.model_copy(update={"mel_frames": spec.sizes("audio_conv").frames_for(workload.seq_len)})
    elif spec.inputs == "audio" and None in (workload.src_len, workload.mel_frames):
        # the mel frames and the encoder's tokens, half of them, each from the other (default: the model's window)
        frames = workload.mel_frames or 2 * (workload.src_len or spec.sizes("audio_conv").positions)
        workload = workload.model_copy(update={"src_len": workload.src_len or frames // 2, "mel_frames": frames})
    elif spec.is_encoder_decoder and workload.src_len is None:
        workload = workload.model_copy(update={"src_len": workload.seq_len})
    (groups,) = stages(spec, workload, 1)
    return Inventory(spec, workload, tuple(g for g in groups if g.ops))


def _multimodal(spec: ModelSpec, workload: Workload) -> Inventory:
    """The text tower's groups, each other tower's on its own workload (records named under it) and the connectors'
    (tfcalc.arch.towers). In decode, or with no image, the towers and connectors hold their parameters and do no
    work (repeat 0)."""
    from . import towers

    workload = towers.with_images(spec, workload)
    if workload.mel_frames is None and "audio" in spec.towers:  # one window of audio per sequence
        workload = workload.model_copy(update={"mel_frames": spec.towers["audio"].sizes("audio_conv").window})
    # in decode the images (audio) were encoded at the prefill; with no image (a prompt of text alone) the vision
    # tower does not run
    decode = workload.phase == "decode"
    text = build(towers.text_tower(spec), towers.text_workload(spec, workload))
    groups = [replace(g, tower="text") for g in text.groups]
    idle_towers = []
    for name in spec.towers:
        own = build(spec.towers[name], towers.tower_workload(spec, name, workload))
        idle = decode or towers.units(spec, name, workload) == 0
        idle_towers.append(idle)
        groups += [replace(g, label=f"{name} {g.label}", ops=tuple(towers.prefixed(op, name) for op in g.ops),
                           tower=name, **({"repeat": 0, "copies": g.parameter_sets} if idle else {}))
                   for g in own.groups]
    ops = tuple(op for c in spec.connectors for op in towers.connector_ops(spec, c, workload))
    if ops:  # they run when some tower runs
        idle = all(idle_towers)
        groups.append(Group("connectors", 0 if idle else 1, ops, copies=1 if idle else None, kind="connector",
                            tower="connectors"))
    return Inventory(spec, workload, tuple(groups))


def stages(spec: ModelSpec, workload: Workload, pp: int) -> list[list[Group]]:
    """The inventory's groups on each of `pp` pipeline stages: contiguous blocks, split as evenly as can be (the
    first stage also holds the embeddings, the last the final norm and the head; a stack's embedding goes with
    its first block and its final norm with its last). With pp = 1, the whole inventory. A multimodal model
    (towers) on one stage only: its towers' split across stages is not modelled."""
    if spec.towers:
        if pp > 1:
            raise TfcalcError(f"pp={pp}: {spec.label} has a {' and '.join(spec.towers)} tower beside its language "
                              "model; its pipeline split is not planned yet (pp=1, or --tower text)")
        return [list(build(spec, workload).groups)]
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
        inputs = run(spec.stack_input(stack.name), ctx)  # tokens, or a kind's own input (images, mel frames)
        out[stage(offset)].append(Group(f"{where}embedding", 1, tuple(inputs), kind="embedding", stack=stack))
        for s in range(pp):
            lo, hi = max(bounds[s] - offset, 0), min(bounds[s + 1] - offset, stack.n_layers)
            # shared_blocks: one kind of block (the spec checks it)
            out[s] += [Group(f"{where}block ({layer.label})", repeat, tuple(block(Ctx(spec, workload, stack, layer))),
                             spec.shared_blocks, stack=stack, layer=layer)
                       for layer, repeat in (stack.distinct(lo, hi).items() if lo < hi else ())]
        out[stage(offset + stack.n_layers - 1)].append(
            Group(f"{where}final_norm", 1, tuple(run("final_norm", ctx)), kind="final_norm", stack=stack))
        offset += stack.n_layers
    for name in spec.output_kinds:  # after the stack, before the head (a patch merger)
        out[pp - 1].append(Group(name, 1, tuple(run(name, top)), kind="head"))
    out[pp - 1].append(Group("head", 1, tuple(run("head", top)), kind="head"))
    return out


from .. import blocks  # noqa: E402,F401  (registers the block kinds)
