"""A multimodal model (`ModelSpec.towers`): its text tower, each other tower run on its own workload, and the
connectors between them, folded as one inventory.

The spec itself is the text tower (the language model, or CLIP's text encoder); `towers` holds the others, each a
ModelSpec of its own (a vision encoder reads images: inputs='images'). A workload of such a model is the text
tower's (batch_size sequences of seq_len tokens) with `images` images of `image_size` in the step: the vision tower
runs once over every image (batch = images), and a connector that feeds the language model (`Connector.into_text`)
turns each image's tokens into tokens of the prompt, which are among the text tower's seq_len. In decode the images
were encoded at the prefill: the towers and connectors hold their parameters and do no work.

Every record of a tower is named under it (`vision/attention/qkv`, `vision/embedding/patch`); the text tower's keep
their own names (`attention/qkv`), so `--tower text` counts them as a language model alone does.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..errors import TfcalcError
from ..spec import Connector, ModelSpec
from .builders import ACTIVATION_FLOPS
from .ops import Elementwise, Matmul, Norm, Op, Table
from .workload import Workload

TOWERS = ("text", "vision", "audio")


def text_tower(spec: ModelSpec) -> ModelSpec:
    """The text tower alone: the spec without its other towers and connectors."""
    return spec.replace(towers={}, connectors=[])


def select(spec: ModelSpec, tower: str) -> ModelSpec:
    """The tower `tower` ("text", "vision", "audio") of `spec` as a model of its own, or the whole model ("all")."""
    if tower == "all":
        return spec
    if tower not in TOWERS:
        raise TfcalcError(f"--tower {tower}: expected one of text, vision, audio, all")
    if not spec.towers:
        if tower == "text" and spec.inputs == "tokens":
            return spec
        what = f"a model of {spec.inputs}"  # tokens, images (ViT) or audio (Whisper)
        raise TfcalcError(f"--tower {tower}: {spec.label} is {what} with no other towers (--tower all counts it)")
    if tower == "text":
        return text_tower(spec)
    if tower not in spec.towers:
        raise TfcalcError(f"--tower {tower}: {spec.label} has no {tower} tower (it has "
                          f"{', '.join(['text', *spec.towers])})")
    own = spec.towers[tower]
    return own if own.name else own.replace(name=f"{spec.label} ({tower})")


def tokens_per_image(spec: ModelSpec, height: int, width: int) -> int:
    """The vision tower's tokens per image of height x width pixels (its patches, and a class token where it has
    one)."""
    sizes = spec.towers["vision"].sizes("patch_embedding")
    return sizes.tokens(height, width)


def image_size(spec: ModelSpec, workload: Workload) -> tuple[int, int]:
    """The workload's image size, else the vision tower's own."""
    if workload.image_size is not None:
        return workload.image_size
    sizes = spec.towers["vision"].sizes("patch_embedding")
    return sizes.height, sizes.width


def images(workload: Workload) -> int:
    """Images in the step: the workload's, else one."""
    return 1 if workload.images is None else workload.images


def audio_windows(spec: ModelSpec, workload: Workload) -> int:
    """Windows of audio in the step: each sequence's mel frames (default one window) padded up to whole windows of
    the audio tower (2 x kinds.audio_conv.positions frames; Voxtral's processor pads the audio to a multiple of 30 s
    and cuts it into windows of 3,000 frames, each a row of the tower's batch). A tower that runs each clip as long
    as it is (`AudioSizes.whole_windows` false: Gemma 4's) runs one clip per sequence, of at most one window."""
    window = spec.towers["audio"].sizes("audio_conv").window
    frames = window if workload.mel_frames is None else workload.mel_frames
    return workload.batch_size * -(-frames // window)


def units(spec: ModelSpec, name: str, workload: Workload) -> int:
    """What tower `name` encodes one at a time in the step: images (a tower of images), windows of audio (a tower of
    audio)."""
    return images(workload) if spec.towers[name].inputs == "images" else audio_windows(spec, workload)


def with_images(spec: ModelSpec, workload: Workload) -> Workload:
    """The workload with its images given: one (at the vision tower's size) when it gives none, or one per sequence
    where the language model cross-attends to its own images (Llama 3.2 Vision)."""
    if workload.images is not None or "vision" not in spec.towers:
        return workload
    per_sequence = any(c.cross_attended for c in spec.connectors)
    return workload.model_copy(update={"images": workload.batch_size if per_sequence else 1})


def tower_workload(spec: ModelSpec, name: str, workload: Workload) -> Workload:
    """What tower `name` runs on: every image of the step, each its patches (and class token), a packed tower's
    (Pixtral's, `kinds.patch_embedding.packed`) one sequence of every image's patches; every window of audio, each
    its mel frames (the tower's positions are its tokens; a tower that runs a clip as long as it is, the clip's frames
    and the tokens its front end makes of them: `AudioSizes.tokens`)."""
    own = spec.towers[name]
    if own.inputs == "audio":
        sizes = own.sizes("audio_conv")
        frames = sizes.window if sizes.whole_windows or workload.mel_frames is None else workload.mel_frames
        return Workload(batch_size=audio_windows(spec, workload), seq_len=sizes.tokens(frames), mel_frames=frames)
    if own.inputs != "images":
        raise TfcalcError(f"towers.{name}: a tower of {own.inputs} is not modelled (a tower of images or audio is)")
    H, W = image_size(spec, workload)
    # with no image the tower does no work (the inventory runs it 0 times): its records are shaped for one
    n, tokens = max(images(workload), 1), tokens_per_image(spec, H, W)
    if own.sizes("patch_embedding").packed:
        return Workload(batch_size=1, seq_len=n * tokens, image_size=(H, W))
    return Workload(batch_size=n, seq_len=tokens, image_size=(H, W))


def unit_tokens(spec: ModelSpec, name: str, workload: Workload) -> int:
    """Each unit's tokens in tower `name`'s output (an image's, a window of audio's): its sequence's less the padding
    it drops after its blocks (Mllama's tiles), or its share of a packed tower's one sequence."""
    own, tw = spec.towers[name], tower_workload(spec, name, workload)
    if own.inputs == "images":  # (a kind between its blocks may merge them: MiniCPM-V's window merger)
        return own.sizes("patch_embedding").kept(*tw.image_size) // merged(own)
    return tw.tokens // max(units(spec, name, workload), 1)


def merged(tower: ModelSpec) -> int:
    """What a tower's output tokens are its input tokens divided by: 1 but after a kind inserted between its blocks
    that merges them (`BlockKind.inserted`: MiniCPM-V's window merger, 4)."""
    if not tower.kinds:
        return 1
    from .architecture import stacks

    stack = stacks(tower)[-1]
    return stack.divisor(stack.n_layers)


def _input(tw: Workload) -> str:
    """A tower's workload as the field that sets it: its images' size or its windows' mel frames."""
    if tw.image_size is not None:
        return f"image_size={tw.image_size[0]}x{tw.image_size[1]}"
    return f"mel_frames={tw.mel_frames}"


def cross_tokens(spec: ModelSpec, workload: Workload) -> int | None:
    """Tokens per sequence the language model's cross-attention attends to: the rows of its connectors that feed it
    (`Connector.cross_attended`) of the sequence's images (images / batch_size); None when no connector does."""
    fed = [c for c in spec.connectors if c.cross_attended]
    if not fed:
        return None
    per_sequence = images(workload) // workload.batch_size
    return sum(per_sequence * connector_rows(spec, c, workload)[1] for c in fed)


def text_workload(spec: ModelSpec, workload: Workload) -> Workload:
    """The text tower's workload: the step's without its images, its cross-attended tokens (src_len) those of the
    images where a connector feeds cross-attention."""
    update = {"images": None, "image_size": None, "mel_frames": None}
    cross = cross_tokens(spec, workload)
    if cross is not None and workload.src_len is None:
        update["src_len"] = cross
    return workload.model_copy(update=update)


def connector_rows(spec: ModelSpec, c: Connector, workload: Workload) -> tuple[int, int]:
    """(units, rows per unit) a connector reads: images (texts) and, per image, its pooled vector or its tokens after
    the class token is dropped, `pool` averaged and `merge` concatenated into one."""
    if c.source == "text":
        n, tokens = workload.batch_size, workload.seq_len
    else:
        n = units(spec, c.source, workload)
        tokens = unit_tokens(spec, c.source, workload)
    if c.pooled:
        return n, 1
    return n, (tokens - int(c.drop_class_token)) // (c.pool * c.merge)


def connector_problems(spec: ModelSpec, workload: Workload) -> list[str]:
    """A connector's pool and merge must divide each image's tokens; the image tokens a connector puts into the
    prompt must fit the text tower's tokens."""
    problems = []
    into = 0
    for c in spec.connectors:
        if c.cross_attended:
            problems += _cross_problems(spec, c, workload)
        if not c.into_text:
            continue
        tw = tower_workload(spec, c.source, workload)
        per = "image" if tw.image_size is not None else "window of audio"
        if c.image_size is not None and tw.image_size != (c.image_size, c.image_size):
            problems.append(f"image_size={tw.image_size[0]}x{tw.image_size[1]}: {spec.label}'s {c.name} reads images "
                            f"of {c.image_size}x{c.image_size} alone (it reshapes the tower's output to that grid)")
            continue
        tokens = unit_tokens(spec, c.source, workload) - int(c.drop_class_token)
        side, tower = math.isqrt(c.merge), spec.towers[c.source]
        if tower.inputs == "images" and c.merge > 1 and side * side == c.merge:
            p = tower.sizes("patch_embedding").patch_size
            # the grid the tower puts out: its patches', each side over a window merger's windows (MiniCPM-V's)
            rows, cols = (n // p // math.isqrt(merged(tower)) for n in tw.image_size)
            p *= math.isqrt(merged(tower))
        if tower.inputs == "images" and c.merge > 1 and side * side == c.merge and (rows % side or cols % side):
            # a square merge of an image's patches is a pixel shuffle of its grid: s x s blocks
            problems.append(f"image_size={tw.image_size[0]}x{tw.image_size[1]}: {rows}x{cols} {c.source} patches do "
                            f"not divide into {side}x{side} blocks ({spec.label}'s {c.name} concatenates each block: "
                            f"the image's sides are multiples of {p * side})")
        elif tokens % (c.pool * c.merge):
            problems.append(f"{_input(tw)}: {tokens} {c.source} tokens per {per} do not divide into "
                            f"{c.pool * c.merge}-token groups ({spec.label}'s {c.name})")
        elif c.into_text:
            into += units(spec, c.source, workload) * (tokens // (c.pool * c.merge))
    images = [spec.towers[c.source].inputs == "images" for c in spec.connectors if c.into_text]
    what = " and ".join(dict.fromkeys("images'" if i else "audio's" for i in images))
    nouns = " and ".join(dict.fromkeys("image" if i else "audio" for i in images))
    if into and workload.phase != "decode" and into > workload.tokens:
        problems.append(f"seq_len={workload.seq_len}: the {what} {into:,} tokens in the prompt do not fit "
                        f"batch_size x seq_len = {workload.tokens:,} tokens of {spec.label}'s language model "
                        f"(seq_len counts the text and the {nouns} tokens)")
    elif into and workload.phase == "decode" and into > workload.batch_size * workload.context:
        # decode: the images were encoded at the prefill, their tokens are among the cached ones
        alone = "images=0: a prompt of text alone" if any(images) else "tower text: the language model alone"
        problems.append(f"context={workload.context}: the {what} {into:,} tokens, prefilled into the KV cache, do "
                        f"not fit batch_size x context = {workload.batch_size * workload.context:,} cached tokens of "
                        f"{spec.label}'s language model (context counts the text and the {nouns} tokens; "
                        f"{alone})")
    return problems


def _cross_problems(spec: ModelSpec, c: Connector, workload: Workload) -> list[str]:
    """A connector feeding cross-attention: each sequence reads images / batch_size images, of the one size it reads;
    the cross-attended tokens follow from the images (src_len is not given beside them)."""
    out = []
    tw = tower_workload(spec, c.source, workload)
    if c.image_size is not None and tw.image_size != (c.image_size, c.image_size):
        out.append(f"image_size={tw.image_size[0]}x{tw.image_size[1]}: {spec.label}'s {c.source} tower reads tiles of "
                   f"{c.image_size}x{c.image_size} alone (its processor cuts and pads every image into them)")
    n = images(workload)
    if n == 0:
        out.append(f"images=0: {spec.label}'s language model skips its cross-attention blocks on a prompt of text "
                   "alone (not modelled whole; --tower text counts the language model)")
    elif n % workload.batch_size:
        out.append(f"images={n}: {spec.label}'s cross-attention reads each sequence's own images: a multiple of "
                   f"batch_size={workload.batch_size}")
    if workload.src_len is not None:
        out.append(f"src_len={workload.src_len}: {spec.label}'s cross-attention reads its images' tokens; give the "
                   "images (--images) instead")
    return out


def image_tokens(spec: ModelSpec, workload: Workload, source: str | None = None) -> int:
    """The tokens the step's images (and audio) become in the language model's prompt (0 for a dual encoder:
    CLIP); `source`: those of one tower alone ("vision", "audio")."""
    total = 0
    for c in spec.connectors:
        if c.into_text and source in (None, c.source):
            units, rows = connector_rows(spec, c, workload)
            total += units * rows
    return total


def connector_ops(spec: ModelSpec, c: Connector, workload: Workload) -> list[Op]:
    """A connector's records: its norm (before the merge, over each token of the tower, or after it, over widths[0]),
    its merging linear, its linears with the activations between them, its scalars."""
    units, per = connector_rows(spec, c, workload)
    rows = units * per
    ops: list[Op] = []
    if c.norm != "none" and c.norm_before_merge:  # over each of the tower's tokens: rows x merge of them
        ops.append(Norm(f"{c.name}/norm", c.norm, rows * c.merge, c.tower_width, sets=int(c.norm_weight)))
    if c.merge_linear:  # the merged vectors x: [rows, merge * D] @ W: [merge * D, D], no bias
        ops.append(Matmul(f"{c.name}/merge", rows, c.merge * c.tower_width, c.tower_width, bias=False,
                          role="connector"))
    if c.norm != "none" and not c.norm_before_merge:  # over widths[0]: the pooled or merged vectors
        ops.append(Norm(f"{c.name}/norm", c.norm, rows, c.widths[0], sets=int(c.norm_weight)))  # sets 0: weightless
    pairs = list(zip(c.widths, c.widths[1:]))
    for i, (k, n) in enumerate(pairs):
        name = c.name if len(pairs) == 1 else f"{c.name}/linear_{i + 1}"
        ops.append(Matmul(name, rows, k, n, bias=c.bias, role="connector"))  # x: [rows, k] @ W: [k, n]
        if i + 1 < len(pairs):
            ops.append(Elementwise(f"{c.name}/act", "activation", rows * n, ACTIVATION_FLOPS[c.activation],
                                      c.activation))
    if c.similarity is not None:  # image embeddings [images, P] @ text embeddings^T [P, texts]: no weights
        ops.append(Matmul(c.name, images(workload), c.similarity, workload.batch_size, weights=0, role="connector"))
    if c.scalars:
        ops.append(Table(c.name, 1, c.scalars, "scalar"))  # logit_scale (logit_bias): [1] each
    return [replace(op, sublayer="connector") for op in ops]


def prefixed(op: Op, tower: str) -> Op:
    """A tower's record, named under the tower."""
    return replace(op, component=f"{tower}/{op.component}")
