"""The tfcalc command line: a thin shell over the library. The only place that prints, exits, or turns errors
into messages (one line per problem on stderr, exit code 2)."""


import contextlib
import enum
from fractions import Fraction
import functools
import inspect
import itertools
import math
import os
import shutil
import sys
import types
import typing
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from pydantic import ValidationError
from rich.markup import escape
from typer.core import TyperGroup

from . import __version__, render
from .counts import count
from .errors import TfcalcError, validation_lines
from .interrupts import EXIT_INTERRUPTED, import_torch
from .presets import list_presets
from .render import Format
from .sizes import MAX_DIGITS
from .sources import model_arg, resolve, workload_for
from .spec import ModelSpec

EXIT_BAD_INPUT = 2

try:  # typer >= 0.26 vendors click; its usage errors derive from TyperException
    from typer import TyperException as _CliError
except ImportError:  # older typer on top of click
    from click import ClickException as _CliError


class _Group(TyperGroup):
    """Runs commands with click's standalone mode off, so that every error is reported here, as one line per
    problem: click's usage errors, TfcalcError and pydantic's ValidationError."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # noqa: D102
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort:  # click's Ctrl-C (typer's is below)
            _fail(["interrupted"], EXIT_INTERRUPTED)
        except _CliError as e:  # click's usage errors: bad flag, bad value, missing argument
            # a bare `tfcalc` raises one with an empty message, after printing the help
            names = [c.name for c in app.registered_commands]
            message = e.format_message().replace("Value error, ", "") or (
                f"give a command: {', '.join(names[:-1])} or {names[-1]} (tfcalc --help)")
            _fail(message.splitlines(), getattr(e, "exit_code", EXIT_BAD_INPUT))
        except (TfcalcError, ValidationError) as e:  # bad input: 2; an output that cannot be written: its own (1)
            _fail(validation_lines(e) if isinstance(e, ValidationError) else str(e).splitlines(),
                  getattr(e, "exit_code", EXIT_BAD_INPUT))
        if rv == EXIT_INTERRUPTED:  # typer turns Ctrl-C in a command into a silent Exit(130)
            _fail(["interrupted"], EXIT_INTERRUPTED)
        sys.exit(rv if isinstance(rv, int) else 0)


def _fail(lines: list[str], code: int) -> typing.NoReturn:
    for line in lines:
        typer.echo(f"tfcalc: error: {line}", err=True)
    sys.exit(code)


if os.environ.get("NO_COLOR"):  # https://no-color.org: typer's help has its own console
    import typer.rich_utils

    typer.rich_utils.COLOR_SYSTEM = None

app = typer.Typer(
    cls=_Group,
    help="Exact parameter and FLOP counts of transformers (FLOPs = 2 per multiply-add; MACs shown beside).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tfcalc {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
) -> None:
    """Exact parameter and FLOP counts of transformers."""


# ---- spec flags, generated from ModelSpec's fields ------------------------------------------------

_SHORT = {"n_layers": "-L", "d_model": "-d", "n_heads": "-H", "vocab_size": "-V", "seq_len": "-N",
          "batch_size": "-B", "n_experts": "-E"}
# the spec flags in panels by how often they are needed, so that --help reads top-down: the sizes first, the
# choices of a block, then experts and windows, the rarer architectures last (docs/cli.md lists them all)
_PANELS = {
    "Model: sizes (override a preset or spec; the rest: tfcalc flags)": (
        "name", "n_layers", "n_encoder_layers", "d_model", "n_heads", "d_head", "n_kv_heads", "d_ff", "vocab_size",
        "seq_len", "batch_size", "max_positions"),
    "Model: the block": (
        "mlp", "activation", "norm", "norm_position", "qk_norm", "parallel_block", "final_norm", "bias", "qkv_bias",
        "mlp_bias", "tie_embeddings", "lm_head", "head_bias", "positions", "rotary_dim", "causal", "block_pattern",
        "kinds"),
    "Model: experts and windows": (
        "n_experts", "top_k", "n_shared_experts", "d_expert", "d_shared_expert", "shared_expert_gate", "router_bias",
        "first_dense_layers", "moe_every", "moe_beside_mlp", "sliding_window", "sliding_window_layers",
        "attention_pattern", "attention_chunk_size", "rotary_layers"),
}
_RARE = "Model: rarer architectures (MLA, Gemma 4, ALBERT, BERT, T5, gpt-oss, Qwen3-Next)"
_SHOWN = next(iter(_PANELS))  # --help shows the sizes; the other model flags are listed by `tfcalc flags`


def _panel(field: str) -> str:
    return next((panel for panel, fields in _PANELS.items() if field in fields), _RARE)


def _hidden(field: str) -> bool:
    """A model flag left out of --help (still taken): all but the sizes, which `tfcalc flags` lists, never cut at
    any width (rich's option tables cut long flag names and words at 80 columns)."""
    return _panel(field) != _SHOWN


def _unwrap(annotation: Any) -> Any:
    """int | None -> int; Annotated[int, ...] -> int; Literal['a', 'b'] stays."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        (annotation,) = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _spec_parameter(name: str, field: Any) -> inspect.Parameter:
    flag = "--" + name.replace("_", "-")
    kind = _unwrap(field.annotation)
    decls = [flag, *([_SHORT[name]] if name in _SHORT else [])]
    extra: dict[str, Any] = {"parser": _integer, "metavar": "INT"} if kind is int else {}
    if kind is bool:
        decls, kind = [f"{flag}/--no-{flag[2:]}"], bool
    elif typing.get_origin(kind) is typing.Literal:
        kind = enum.Enum(name, {v: v for v in typing.get_args(kind)}, type=str)
    elif typing.get_args(kind) == (bool,):  # rotary_layers: true,true,true,false
        kind, extra = str, {"parser": _booleans, "metavar": "true,false,..."}
    elif typing.get_origin(kind) is list:  # attention_pattern: local,local,global
        kind, extra = str, {"parser": _words, "metavar": "A,B,..."}
    elif typing.get_origin(kind) is dict:  # kinds: conv.kernel=4,conv.bias=true
        kind, extra = str, {"parser": _kind_sizes, "metavar": "KIND.FIELD=VALUE,..."}
    # escaped: rich reads [d_head] in a description as markup and drops it from --help
    option = typer.Option(*decls, help=escape(field.description or ""), rich_help_panel=_panel(name),
                          show_default=False, hidden=_hidden(name), **extra)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[Optional[kind], option])


def _words(text: str) -> list[str]:
    """'local,local,global' -> ['local', 'local', 'global'] (validated by ModelSpec)."""
    return [word.strip() for word in text.split(",")]


def _booleans(text: str) -> list[bool]:
    """'true,true,false' -> [True, True, False]; any other word refused by name."""
    words = _words(text)
    bad = [w for w in words if w not in ("true", "false")]
    if bad:
        raise typer.BadParameter(f"{bad[0]!r} is not true or false")
    return [w == "true" for w in words]


def _kind_sizes(text: str) -> dict[str, dict[str, Any]]:
    """'conv.kernel=4,conv.bias=true' -> {'conv': {'kernel': 4, 'bias': True}} (validated by the kind's sizes):
    integers and true/false as such, anything else as typed."""
    out: dict[str, dict[str, Any]] = {}
    for item in (part.strip() for part in text.split(",")):
        key, eq, value = item.partition("=")
        kind, dot, field = key.strip().partition(".")
        if not (eq and dot and kind and field.strip()):
            raise typer.BadParameter(f"{item!r}: expected KIND.FIELD=VALUE (conv.kernel=4)")
        value = value.strip()
        parsed: Any = {"true": True, "false": False}.get(value.lower(), value)
        if parsed is value:
            try:
                parsed = _integer(value)
            except typer.BadParameter:
                parsed = value
        sizes = out.setdefault(kind, {})
        if field.strip() in sizes:  # the same size twice: which one was meant? (a value typed is never dropped)
            raise typer.BadParameter(f"{key.strip()} given twice ({sizes[field.strip()]!r} and {parsed!r}): give it "
                                     "once")
        sizes[field.strip()] = parsed
    return out


def _integer(text: str) -> int:
    """Sizes are exact integers: '1_000_000' and '1000000' are fine, '1e6' and '12.5' are not."""
    if len(text) > MAX_DIGITS + 10:  # before int(): Python refuses 4,300 digits, and long ones take time
        raise typer.BadParameter(f"{text[:12]}... ({len(text)} characters): sizes have at most {MAX_DIGITS} digits")
    if not text.isascii():  # int() reads other scripts' digits ('१२' as 12); --image-size and the spec files do not
        raise typer.BadParameter(f"{text!r} is not an integer (ASCII digits: 12)")
    try:
        return int(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an integer") from None


# a multimodal model's towers and connectors are given by a spec file, a preset or a config (--tower picks one)
_NOT_FLAGS = ("towers", "connectors")
SPEC_FIELDS = [name for name in ModelSpec.model_fields if name not in _NOT_FLAGS]
_RANK = {panel: i for i, panel in enumerate([*_PANELS, _RARE])}
# in --help's order: the panels' (rich lists a panel where its first option is), the fields' within each
_SPEC_PARAMETERS = sorted((_spec_parameter(name, field) for name, field in ModelSpec.model_fields.items()
                           if name not in _NOT_FLAGS),
                          key=lambda p: _RANK[_panel(p.name)])
# --revision, with every command that takes a model: the revision of a Hugging Face id (--hf-config ORG/NAME)
_REVISION = inspect.Parameter("revision", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
    Optional[str], typer.Option("--revision", show_default=False, help=(
        "With a Hugging Face id (--hf-config ORG/NAME, or compare's ORG/NAME arguments): its branch, tag or "
        "commit (default: main)."))])

_TOWER = inspect.Parameter("tower", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
    Optional[str], typer.Option("--tower", metavar="text|vision|audio|all", show_default=False, help=(
        "A multimodal model's tower: text (the language model with its head), vision, audio, or all (the default: "
        "every tower and the projectors between them, and a table per tower). The model flags then change that "
        "tower."))])


def _hub_models(kwargs: dict) -> None:
    """--hf-config ORG/NAME (and compare's ORG/NAME arguments) -> the cached config.json, at --revision."""
    revision = kwargs.pop("revision", None)
    if revision is None and kwargs.get("hf_config") is None and not kwargs.get("models"):
        return  # nothing to resolve (tfcalc.hub not imported)
    from . import hub

    if "models" in kwargs:
        ids = [m for m in kwargs["models"] or () if hub.is_id(m)]
        if revision is not None and not ids:
            raise TfcalcError(f"--revision {revision}: a revision picks the config.json of a Hugging Face id "
                              "(ORG/NAME); no model given is one")
        kwargs["models"] = [str(hub.config_path(m, revision)) if hub.is_id(m) else m for m in kwargs["models"]]
    elif "hf_config" in kwargs:
        kwargs["hf_config"] = hub.resolve(kwargs["hf_config"], revision)
    elif revision is not None:
        raise TfcalcError(f"--revision {revision}: this command takes no Hugging Face id")


def spec_flags(func=None, *, exclude: tuple[str, ...] = ()):
    """Add one option per ModelSpec field to a command; the command receives the given ones as `overrides`.
    Fields in `exclude` are left to the command to define (profile's --seq-len takes a list)."""
    if func is None:
        return functools.partial(spec_flags, exclude=exclude)
    signature = inspect.signature(func)
    kept = [p for p in signature.parameters.values() if p.name != "overrides"]
    fields = [name for name in SPEC_FIELDS if name not in exclude]

    @functools.wraps(func)
    def wrapper(**kwargs):
        _hub_models(kwargs)
        tower = kwargs.pop("tower", None)
        overrides = {} if tower is None else {"tower": tower}  # resolved first (tfcalc.sources.apply_overrides)
        for name in fields:
            value = kwargs.pop(name)
            if value is not None:
                overrides[name] = value.value if isinstance(value, enum.Enum) else value
        return func(overrides=overrides, **kwargs)

    added = [p for p in _SPEC_PARAMETERS if p.name in fields] + [_REVISION, _TOWER]
    wrapper.__signature__ = signature.replace(parameters=kept + added)
    return wrapper


# ---- output ---------------------------------------------------------------------------------------

FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Same as --format json: one object of exact integers.")]
PresetOpt = Annotated[Optional[str], typer.Option("--preset", "-p", help="A preset name (`tfcalc presets`).")]
SpecOpt = Annotated[Optional[Path], typer.Option("--spec", "-s", help="A spec file, TOML or JSON.")]
HfOpt = Annotated[Optional[Path], typer.Option("--hf-config", help="A Hugging Face config.json, a folder "
                                                                   "holding one, or a model's id on the hub "
                                                                   "(ORG/NAME: its config.json only, from the local "
                                                                   "cache first; --revision).")]


class Phase(str, enum.Enum):
    train = "train"
    prefill = "prefill"
    decode = "decode"


_WORKLOAD = "Workload (what the model runs on; parameters never depend on it)"
PhaseOpt = Annotated[Optional[Phase], typer.Option("--phase", rich_help_panel=_WORKLOAD, show_default=False, help=(
    "train (default: every token, the head over all of them), prefill (the prompt into the KV cache; the head "
    "scores the last token), decode (one new token per sequence against --context cached ones)."))]
ContextOpt = Annotated[Optional[int], typer.Option("--context", parser=_integer, metavar="INT",
                                                   rich_help_panel=_WORKLOAD, help=(
    "Tokens per sequence already in the KV cache (decode default: seq_len - 1; prefill: 0)."))]
SrcLenOpt = Annotated[Optional[int], typer.Option("--src-len", parser=_integer, metavar="INT",
                                                  rich_help_panel=_WORKLOAD, help=(
    "Encoder tokens per sequence (encoder-decoder; default seq_len), or the tokens a decoder-only model's "
    "cross_attention blocks attend to (Llama 3.2 Vision's vision tokens; default kinds.cross_attention.keys)."))]
TgtLenOpt = Annotated[Optional[int], typer.Option("--tgt-len", parser=_integer, metavar="INT",
                                                  rich_help_panel=_WORKLOAD, help=(
    "Decoder tokens per sequence (encoder-decoder; the same as --seq-len)."))]


ImageSizeOpt = Annotated[Optional[str], typer.Option("--image-size", metavar="H[xW]", rich_help_panel=_WORKLOAD,
                                                     show_default=False, help=(
    "A model of images (ViT) or with a vision tower: each image's height and width in pixels, H (square) or HxW, "
    "multiples of the patch size (default: the model's image_size). Its tokens are its patches and the class "
    "token."))]
ImagesOpt = Annotated[Optional[int], typer.Option("--images", parser=_integer, metavar="INT",
                                                  rich_help_panel=_WORKLOAD, show_default=False, help=(
    "A model of images: images in the step, the batch (default 1). A model with a vision tower: images in the "
    "step, each encoded once, their tokens among the language model's --seq-len (default 1)."))]


AudioSecondsOpt = Annotated[Optional[str], typer.Option("--audio-seconds", metavar="S", rich_help_panel=_WORKLOAD,
                                                       show_default=False, help=(
    "A model of audio (Whisper): seconds of audio per sequence, 100 log-mel frames a second, an even number of "
    "them (default: the model's window, 30 s = 3,000 frames). The encoder's tokens are half the frames. A model "
    "with an audio tower (Voxtral): each sequence's audio (default 30 s), padded to whole windows of the tower's "
    "(30 s), each window's tokens, merged by its projector, among the language model's --seq-len."))]


def _tokens_only(spec: ModelSpec, command: str, towers: bool = False, step: bool = False,
                 images: bool = False) -> None:
    """The plans (memory, infer, train, profile) take models of tokens for now: a model of images or of audio is
    refused by name; a multimodal model (towers) only where `towers` says the plan takes it (inference on one GPU).
    `step`: a train step's memory, which takes them all (data parallelism and ZeRO); `images`: a plan that takes a
    model of images (profile: the reference model on the model's own image size)."""
    if step:
        return
    if spec.towers and not towers:
        if command == "memory":
            command = "memory (a train step)"
        named = " and ".join(spec.towers)
        raise TfcalcError(f"tfcalc {command}: {spec.label} has {'an' if named[0] in 'aeiou' else 'a'} {named} tower "
                          "beside its language "
                          f"model; {command} plans one tower for now: --tower text plans the language model (count, "
                          "check, inference memory and infer take the whole model)")
    if spec.inputs != "tokens" and not (images and spec.inputs == "images"):
        flags = "--image-size and --images" if spec.inputs == "images" else "--audio-seconds"
        train = " (memory --phase train plans its train step)" if command == "memory" else ""
        what = "models of tokens and of images" if images else "models of tokens"
        raise TfcalcError(f"tfcalc {command}: {spec.label} is a model of {spec.inputs} (inputs='{spec.inputs}'); "
                          f"{command} plans {what} for now{train} (count and check take {flags})")


_TRAINING = "Training (any of these plans a train step: memory per GPU)"


def adapters(rank, targets, dora):
    """--lora-rank/--lora-targets/--dora -> tfcalc.Adapters (checked there), or None when none is given (the plan's
    module is not imported then: count's start-up)."""
    if rank is None and targets is None and not dora:
        return None
    from .plan.adapters import adapters as checked

    return checked(rank, targets, dora)


def _training_opt(flag: str, text: str, **kw):
    return typer.Option(flag, rich_help_panel=_TRAINING, show_default=False, help=text, **kw)


_ADAPTERS = "Adapters (LoRA, DoRA)"
LoraRankOpt = Annotated[Optional[int], typer.Option("--lora-rank", parser=_integer, metavar="R",
                                                    rich_help_panel=_ADAPTERS, show_default=False, help=(
    "Fine-tune with LoRA adapters of rank R on a frozen model: trainable parameters, the step's FLOPs (and, in "
    "memory's train phase, its bytes)."))]
LoraTargetsOpt = Annotated[Optional[str], typer.Option("--lora-targets", metavar="all-linear|attention|mlp|LIST",
                                                       rich_help_panel=_ADAPTERS, show_default=False, help=(
    "The linears adapted: all-linear (default: PEFT's, every linear but the head), attention (q,k,v,o), mlp "
    "(gate,up,down,experts) or a comma list of q, k, v, o, gate, up, down, experts."))]
DoraOpt = Annotated[bool, typer.Option("--dora", rich_help_panel=_ADAPTERS, help=(
    "DoRA: a magnitude vector per adapted linear's outputs beside LoRA's A and B (needs --lora-rank)."))]


def _print_tables(tables: list[render.Table], fmt: Format, lines: list[str] = ()) -> None:
    """Tables fitted to the terminal's width, never a number cut (render.layout); piped without COLUMNS, every
    table at its natural width and the header lines unwrapped. NO_COLOR: no ANSI codes at all."""
    if fmt is Format.markdown:
        typer.echo("\n\n".join([*(f"{line}" for line in lines), *map(render.to_markdown, tables)]))
        return
    from rich.console import Console

    # Our text is plain: no markup, emoji codes or highlighting (a "[bold]" or ":x:" in a spec name stays as typed)
    console = Console(markup=False, emoji=False, highlight=False,
                      color_system=None if os.environ.get("NO_COLOR") else "auto")
    width = console.width if console.is_terminal or "COLUMNS" in os.environ else None
    if width is None:  # a pipe: nothing to fit; room for the widest table (rich would shrink it to fit)
        console.width = max([console.width, *map(render.natural_width, tables)])
    for line in lines:
        console.print(render.wrap(line, width), soft_wrap=True)
    for table in tables:
        console.print()
        for block in render.to_rich(table, width):
            console.print(block, soft_wrap=True)


# ---- commands -------------------------------------------------------------------------------------

# ---- sweeps and plots: a list or a range on a size or workload flag (tfcalc.sweep), --plot (tfcalc.plot) --------

class _Sweep(list):
    """The values of a flag given as a list or a range (even of one value): a sweep over them."""


def _sizes(text: str) -> int | _Sweep:
    """'4096' and '4k' are one size; '1k,4k,16k', '1k..128kx2' and '1024..8192+1024' are a sweep (tfcalc.sweep).
    A plain number is read as every integer flag reads it (`_integer`)."""
    from .sweep import is_list, parse_values

    stripped = text.strip()
    if not is_list(text) and not (stripped[-1:] in ("k", "K", "m", "M") and stripped[:1].isdigit()):
        return _integer(text)
    try:
        values = parse_values(text)
    except TfcalcError as e:
        raise typer.BadParameter(str(e)) from None
    return _Sweep(values) if is_list(text) else values[0]


def _one(text: str) -> int:
    """An integer flag that takes one value: a list is refused by name."""
    if "," in text or ".." in text:
        raise typer.BadParameter(f"{text!r}: one value only (lists and ranges are for the sizes and the workload: "
                                 "--seq-len, --batch-size, --context, ...)")
    return _integer(text)


def _single(**flags) -> None:
    """Flags that name one thing (a dtype, a GPU, a recipe): a list is refused by name."""
    for name, value in flags.items():
        if isinstance(value, str) and ("," in value or ".." in value):
            raise TfcalcError(f"--{name.replace('_', '-')} {value!r}: one value only (lists and ranges are for the "
                              "sizes and the workload: --seq-len, --batch-size, --context, ...)")


_SWEEPS = " A list or a range sweeps (1k,4k or 1k..128kx2)."
_INT_FIELDS = [name for name, field in ModelSpec.model_fields.items() if _unwrap(field.annotation) is int]


@functools.cache
def _sweep_parameter(name: str) -> inspect.Parameter:
    """The spec flag of an integer field, taking one value or a list or range of them: made once and shared by the
    commands that sweep (typer copies a parameter's info before changing it)."""
    decls = ["--" + name.replace("_", "-"), *([_SHORT[name]] if name in _SHORT else [])]
    option = typer.Option(*decls, help=escape(ModelSpec.model_fields[name].description or ""),
                          rich_help_panel=_panel(name), show_default=False, parser=_sizes, metavar="INT|LIST",
                          hidden=_hidden(name))
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[Optional[str], option])


def sweep_flags(func):
    """spec_flags, with every integer field taking a list or a range: the command receives the single values as
    `overrides` and the swept ones as `axes` ({field: [values]})."""
    signature = inspect.signature(func)
    kept = [p for p in signature.parameters.values() if p.name not in ("overrides", "axes")]

    @functools.wraps(func)
    def wrapper(**kwargs):
        _hub_models(kwargs)
        tower = kwargs.pop("tower", None)
        overrides, axes = ({} if tower is None else {"tower": tower}), {}
        for name in SPEC_FIELDS:
            value = kwargs.pop(name)
            if isinstance(value, _Sweep):
                axes[name] = list(value)
            elif value is not None:
                overrides[name] = value.value if isinstance(value, enum.Enum) else value
        return func(overrides=overrides, axes=axes, **kwargs)

    added = [_sweep_parameter(p.name) if p.name in _INT_FIELDS else p for p in _SPEC_PARAMETERS] + [_REVISION,
                                                                                                      _TOWER]
    wrapper.__signature__ = signature.replace(parameters=kept + added)
    return wrapper


SweepPresetOpt = Annotated[Optional[str], typer.Option("--preset", "-p", help=(
    "A preset name (`tfcalc presets`), or a list of them (gpt2,gpt2-xl): one row each."))]
SweepContextOpt = Annotated[Optional[str], typer.Option("--context", parser=_sizes, metavar="INT|LIST",
                                                        rich_help_panel=_WORKLOAD, help=(
    "Tokens per sequence already in the KV cache (decode default: seq_len - 1; prefill: 0)." + _SWEEPS))]
SweepSrcLenOpt = Annotated[Optional[str], typer.Option("--src-len", parser=_sizes, metavar="INT|LIST",
                                                       rich_help_panel=_WORKLOAD, help=(
    "Encoder tokens per sequence (encoder-decoder; default seq_len), or the tokens a decoder-only model's "
    "cross_attention blocks attend to (Llama 3.2 Vision's vision tokens; default kinds.cross_attention.keys)." + _SWEEPS))]
SweepTgtLenOpt = Annotated[Optional[str], typer.Option("--tgt-len", parser=_sizes, metavar="INT|LIST",
                                                       rich_help_panel=_WORKLOAD, help=(
    "Decoder tokens per sequence (encoder-decoder; the same as --seq-len)." + _SWEEPS))]
QuantOpt = Annotated[Optional[str], typer.Option("--quant", show_default=False, help=(
    "Weights stored quantized, tensor by tensor with their scales and zeros (tfcalc.plan.quant): nf4 (QLoRA), "
    "nf4-nodq, fp4, int8 (LLM.int8), int4-g128, int4-g64 (GPTQ), awq-g128, fp8, fp8-block, mxfp4; none: 16-bit. "
    "Default: a --hf-config's quantization_config."))]


def _quant(flag: str | None, hf_config: Path | None, dtype: str | None):
    """The weights' quantized format: --quant, or the config's quantization_config; refused beside a --dtype
    that quantizes too."""
    from .sources import checkpoint_quant

    _single(quant=flag)
    q = checkpoint_quant(flag, hf_config)
    if q is not None and dtype in ("fp8", "int8", "int4"):
        if flag is not None:
            raise TfcalcError(f"--dtype {dtype}: --quant {flag} stores the linear layers; --dtype is then the other "
                              "tensors' (fp32, bf16, fp16): give one or the other")
        raise TfcalcError(f"--dtype {dtype}: the config's quantization_config stores the weights as {q.name}; give "
                          f"--quant none to count them as --dtype {dtype}")
    return q


PlotOpt = Annotated[Optional[Path], typer.Option("--plot", metavar="FILE.png|FILE.svg", help=(
    "Also draw a figure of the result into FILE (.png or .svg; needs matplotlib: pip install 'tfcalc\\[plot]')."))]


def _workload_axes(axes: dict, **flags) -> dict:
    """The workload flags' single values; their swept ones go into `axes`."""
    single = {}
    for name, value in flags.items():
        if isinstance(value, _Sweep):
            axes[name] = list(value)
        single[name] = None if isinstance(value, _Sweep) else value
    return single


def _presets(preset: str | None) -> list[str | None]:
    """-p gpt2,gpt2-medium: a list of presets (a sweep over models); one name or none: as given."""
    if preset is None or "," not in preset:
        return [preset]
    names = [name.strip() for name in preset.split(",")]
    if not all(names):
        raise TfcalcError(f"--preset {preset!r}: an empty name in the list")
    return names


@contextlib.contextmanager
def _progress(message: str):
    """A spinner with `message` on stderr while a long step runs, only where stderr is a terminal (off when piped
    or captured: the output stays the tables alone)."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console
    from rich.text import Text

    # one line whatever the width: a spinner line that wrapped would leave its first half on the screen
    with Console(stderr=True).status(Text(message, no_wrap=True, overflow="ellipsis"), spinner="dots"):
        yield


def _plot_start(plot: Path | None) -> Path | None:
    """--plot's file checked, and matplotlib found, before any counting."""
    if plot is None:
        return None
    from . import plot as plotting

    path = plotting.check_path(plot)
    plotting.require()
    return path


def _plot_save(fig, path: Path) -> None:
    from .plot import save

    save(fig, path)
    sys.stdout.flush()
    typer.echo(f"tfcalc: figure written to {path}", err=True)


def _sweep_points(presets: list[str | None], spec: Path | None, hf_config: Path | None, overrides: dict,
                  axes: dict) -> list:
    """Every point of a sweep over the presets (or the one spec, config or set of flags) and the axes."""
    from .sweep import Model, check_size, expand, order

    total = check_size(len(presets), order(axes))
    tower, overrides = _tower_apart(overrides)
    models = [Model.resolve(p, spec, hf_config, tower) for p in presets]
    return _counting(expand(models, overrides, axes), total)


def _tower_apart(overrides: dict) -> tuple[str | None, dict]:
    """(--tower, the other flags): a sweep picks the tower once per model, then applies the flags at each point."""
    return overrides.get("tower"), {k: v for k, v in overrides.items() if k != "tower"}


SWEEP_PROGRESS = 100  # points from which a sweep shows its progress (about a second of counting)


def _counting(points, total: int):
    """The points of a sweep, with a progress bar on stderr while they are worked through: from SWEEP_PROGRESS
    points on, and only where stderr is a terminal (transient: nothing of it stays, nothing reaches stdout)."""
    if total < SWEEP_PROGRESS or not sys.stderr.isatty():
        yield from points
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"{total:,} points", total=total)
        for point in points:
            yield point
            progress.advance(task)


def _sweep_header(pairs: list, workload=None) -> list[str]:
    """The lines above a sweep's table: each model at its first point, and that point's workload."""
    firsts: dict = {}
    for p, _ in pairs:
        firsts.setdefault(p.index, p)
    lines = [line for p in firsts.values() for line in (f"{p.model}: {render.describe(p.spec)}",
                                                         f"source: {p.source}")]
    if workload is not None:
        lines.append(f"workload (first point): {render.describe_workload(workload)}")
    return lines


def _emit_tidy(rows, fmt: Format) -> None:
    """A sweep's tidy table: one row per point, every exact integer a column. The rows go to disk as they are
    counted (sweep.Spool) and are written out in chunks: a sweep of 100,000 points holds one in memory."""
    from .sweep import tidy

    columns, spool = tidy(rows)
    if fmt is Format.json:
        chunks, end = render.tidy_json(columns, spool), "\n"
    elif fmt is Format.csv:
        chunks, end = render.tidy_csv(columns, spool), ""
    else:
        chunks, end = (line + "\n" for line in render.tidy_markdown(columns, spool)), ""
    pending: list[str] = []
    size = 0
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size > 1 << 16:
            typer.echo("".join(pending), nl=False)
            pending, size = [], 0
    typer.echo("".join(pending) + end, nl=False)


def _single_axis(axes: dict, n_models: int, what: str) -> str | None:
    """The one workload value a figure runs over (None: across models, or sizes); several: refused."""
    from .plot import WORKLOAD

    work = [k for k in axes if k in WORKLOAD]
    if not work:
        return None
    if len(work) == 1 and len(axes) == 1 and n_models == 1:
        return work[0]
    given = ", ".join("--" + k.replace("_", "-") for k in axes)
    raise TfcalcError(f"--plot draws {what} over one flag at a time, for one model (or across models at one "
                      f"workload); got lists on {given}" + (f" for {n_models} models" if n_models > 1 else ""))


@app.command("count", epilog=(
    "Examples: tfcalc count --preset llama3-8b  |  tfcalc count --hf-config Qwen/Qwen3-8B  |  tfcalc count -p "
    "gpt2 -N 1k..32kx2 --format csv  |  tfcalc count -L 12 -d 768 -H 12 -V 50257 -N 1024 --max-positions 1024. "
    "Every flag: docs/cli.md; presets: tfcalc presets; GPUs: tfcalc gpus."))
@sweep_flags
def count_cmd(overrides: dict, axes: dict, preset: SweepPresetOpt = None, spec: SpecOpt = None,
              hf_config: HfOpt = None, phase: PhaseOpt = None, context: SweepContextOpt = None,
              src_len: SweepSrcLenOpt = None, tgt_len: SweepTgtLenOpt = None, image_size: ImageSizeOpt = None,
              images: ImagesOpt = None, audio_seconds: AudioSecondsOpt = None, quant: QuantOpt = None,
              plot: PlotOpt = None,
              lora_rank: LoraRankOpt = None, lora_targets: LoraTargetsOpt = None, dora: DoraOpt = False,
              fmt: FormatOpt = Format.table, as_json: JsonOpt = False) -> None:
    """Exact parameters and FLOPs of one model on one workload, by component; with lists or ranges (--seq-len
    1k..32kx2, -p gpt2,gpt2-medium), one row per point. With --quant (or a config's quantization_config): the
    weights' bytes as stored."""
    tuned = adapters(lora_rank, lora_targets, dora)
    single = _workload_axes(axes, context=context, src_len=src_len, tgt_len=tgt_len)
    context, src_len, tgt_len = single["context"], single["src_len"], single["tgt_len"]
    presets = _presets(preset)
    fmt = Format.json if as_json else fmt
    if not axes and len(presets) == 1:
        if plot is not None:
            raise TfcalcError("--plot draws a sweep: give a list or a range (--seq-len 1k..32kx2, --batch-size "
                              "1,8,64) or several presets (-p gpt2,gpt2-medium,gpt2-large)")
        model_spec, source = resolve(preset, spec, overrides, hf_config)
        q = _quant(quant, hf_config, None)
        workload = workload_for(model_spec, phase and phase.value, context, src_len, tgt_len,
                                overrides.get("seq_len"), image_size, images, audio_seconds)
        result = count(model_spec, workload, adapters=tuned)
        stored = None
        if q is not None:
            from .plan.quant import weight_bytes

            stored = weight_bytes(model_spec, q)
        data = result.to_dict()
        if stored is not None:
            data = {**data, "quant": q.to_dict(), "weights": stored.to_dict()}
        if fmt is Format.json:
            typer.echo(render.to_json(data))
        elif fmt is Format.csv:
            typer.echo(render.to_csv(["figure", "value"], render.flatten(data)), nl=False)
        else:
            header = [f"{model_spec.label}: {render.describe(model_spec)}", f"source: {source}",
                      f"workload: {render.describe_workload(result.workload, result.spec)}",
                      render.crossover_line(result)]
            tables = render.count_tables(result)
            if stored is not None:
                tables.append(render.quant_weights_table(stored, q))
            _print_tables(tables, fmt, header)
        return
    if quant is not None:
        raise TfcalcError(f"--quant {quant}: the weights' bytes are counted for one model at one size; drop the "
                          "list (or use tfcalc memory, which takes --quant over a sweep)")
    from .sweep import count_points, count_row, order

    if tuned is not None:
        raise TfcalcError(f"--lora-rank={lora_rank}: adapters are counted for one model at one workload, not over a "
                          "sweep (give single values)")
    given = [f"--{flag} {value}" for flag, value in (("image-size", image_size), ("images", images),
                                                     ("audio-seconds", audio_seconds)) if value is not None]
    if given:
        raise TfcalcError(f"{given[0]}: not with a sweep (lists, ranges or several presets) yet; count one model at "
                          f"one {'audio length' if audio_seconds is not None else 'image size'}")
    axes = order(axes)
    path = _plot_start(plot)
    if path is not None:
        from .plot import counts_kind

        counts_kind(len(presets), axes)
    counted = count_points(_sweep_points(presets, spec, hf_config, overrides, axes), phase and phase.value,
                           context, src_len, tgt_len)
    if fmt is not Format.table and path is None:  # one point at a time: a long sweep keeps no results
        _emit_tidy((count_row(p, r) for p, r in counted), fmt)
        return
    pairs = list(counted)
    if fmt is Format.table:
        header = _sweep_header(pairs, pairs[0][1].workload) + render.crossover_lines(pairs)
        _print_tables([render.count_sweep_table(pairs, list(axes))], fmt, header)
    else:
        _emit_tidy([count_row(p, r) for p, r in pairs], fmt)
    if path is not None:
        from .plot import counts_figure

        _plot_save(counts_figure(pairs, axes), path)


@app.command("compare")
@sweep_flags
def compare_cmd(
    overrides: dict,
    axes: dict,
    models: Annotated[list[str], typer.Argument(help="Preset names, spec files (.toml/.json) or Hugging Face "
                                                     "configs (config.json, its folder, or an id ORG/NAME).")],
    phase: PhaseOpt = None,
    context: SweepContextOpt = None,
    src_len: SweepSrcLenOpt = None,
    tgt_len: SweepTgtLenOpt = None,
    plot: PlotOpt = None,
    fmt: FormatOpt = Format.table,
    as_json: JsonOpt = False,
) -> None:
    """Several models side by side, a column per model (and point of a sweep: --seq-len 1k,4k,16k); spec and
    workload flags apply to every model."""
    from .sweep import Model, check_size, count_points, count_row, expand, order

    single = _workload_axes(axes, context=context, src_len=src_len, tgt_len=tgt_len)
    axes = order(axes)
    check_size(len(models), axes)
    path = _plot_start(plot)
    if path is not None:
        from .plot import counts_kind

        counts_kind(len(models), axes)
    pairs = []
    tower, overrides = _tower_apart(overrides)
    for i, model in enumerate(models):
        try:
            points = [replace(p, index=i) for p in expand([Model.resolve(*model_arg(model), tower=tower)], overrides,
                                                          axes)]
            pairs += count_points(points, phase and phase.value, single["context"], single["src_len"],
                                  single["tgt_len"])
        except ValidationError as e:  # an override that does not fit this model: say which model
            raise TfcalcError("\n".join(f"{model}: {line}" for line in validation_lines(e))) from None
        except TfcalcError as e:  # say which model, unless the message names its file already
            raise TfcalcError("\n".join(line if line.startswith(model) else f"{model}: {line}"
                                         for line in str(e).splitlines())) from None
    results = [r for _, r in pairs]
    fmt = Format.json if as_json else fmt
    if axes:
        labels = [f"{p.model} {p.describe()}" for p, _ in pairs]
    else:
        labels = [r.spec.label for r in results]
    lengths_given = ("seq_len" in overrides or "seq_len" in axes or "tgt_len" in axes
                     or single["tgt_len"] is not None)
    note = None if lengths_given else render.different_lengths_line(labels, results)
    if axes and fmt is not Format.table:
        _emit_tidy([count_row(p, r) for p, r in pairs], fmt)
    elif fmt is Format.json:
        typer.echo(render.to_json({"models": [r.to_dict() for r in results]}))
    elif fmt is Format.csv:
        table = render.compare_table(results, labels, readable=False)
        typer.echo(render.to_csv(table.columns, table.rows), nl=False)
    else:
        _print_tables([render.compare_table(results, labels, readable=True)], fmt, [note] if note else [])
    if path is not None:
        from .plot import counts_figure

        _plot_save(counts_figure(pairs, axes, None if axes else "Comparison: parameters and forward FLOPs"), path)


DeviceOpt = Annotated[str, typer.Option("--device", help="meta (no memory: any size), cpu, cuda or cuda:N.")]
TrainOpt = Annotated[bool, typer.Option("--train", help="Also count forward + backward against the train step.")]


@app.command("check")
@spec_flags
def check_cmd(overrides: dict, preset: PresetOpt = None, spec: SpecOpt = None, hf_config: HfOpt = None,
              phase: PhaseOpt = None, context: ContextOpt = None, src_len: SrcLenOpt = None,
              tgt_len: TgtLenOpt = None, image_size: ImageSizeOpt = None, images: ImagesOpt = None,
              audio_seconds: AudioSecondsOpt = None, device: DeviceOpt = "meta", train: TrainOpt = False,
              memory: Annotated[bool, typer.Option("--memory", rich_help_panel=_TRAINING, help=(
                  "Hold the training-memory plan against torch's MemTracker on the reference model's train step "
                  "(on meta: FakeTensorMode, nothing allocated), and on cuda against max_memory_allocated."))]
              = False,
              precision: Annotated[Optional[str], _training_opt("--precision", (
                  "With --memory: fp32, bf16-mixed (default), fp16-mixed, bf16 (FP8 recipes cannot be measured here)."))] = None,
              optimizer: Annotated[Optional[str], _training_opt("--optimizer", (
                  "With --memory: adamw (default) or sgd (adam8bit cannot be measured)."))] = None,
              recompute: Annotated[Optional[str], _training_opt("--recompute", (
                  "With --memory: none (default), selective or full."))] = None,
              attention: Annotated[Optional[str], _training_opt("--attention", (
                  "With --memory: fused (default: torch's scaled_dot_product_attention, which keeps q, k, v, its "
                  "output and a logsumexp per row) or eager (two matmuls and a softmax: its probabilities kept)."))]
              = None,
              dp: Annotated[Optional[int], _training_opt("--dp", (
                  "With --memory: data-parallel GPUs (DDP, or ZeRO by --zero), measured on torch's fake process "
                  "group."), parser=_one, metavar="N")] = None,
              zero: Annotated[Optional[int], _training_opt("--zero", (
                  "With --memory: 1 ZeroRedundancyOptimizer, 2 or 3 FSDP2 (reshard_after_forward off or on)."),
                  parser=_one, metavar="0-3")] = None,
              tp: Annotated[Optional[int], _training_opt("--tp", (
                  "With --memory: tensor-parallel GPUs (DTensor, loss_parallel)."), parser=_one, metavar="N")] = None,
              sp: Annotated[Optional[bool], _training_opt("--sp", (
                  "With --memory and --tp: sequence parallelism (SequenceParallel norms)."))] = None,
              pp: Annotated[Optional[int], _training_opt("--pp", (
                  "With --memory: pipeline stages (torch.distributed.pipelining, Schedule1F1B)."),
                  parser=_one, metavar="N")] = None,
              ep: Annotated[Optional[int], _training_opt("--ep", "With --memory: refused above 1 (no CPU path).",
                                                         parser=_one, metavar="N")] = None,
              cp: Annotated[Optional[int], _training_opt("--cp", "With --memory: refused above 1 (no CPU path).",
                                                         parser=_one, metavar="N")] = None,
              no_transformers: Annotated[bool, typer.Option("--no-transformers", help=(
                  "With --hf-config: skip the check against transformers' own model class built from the "
                  "config."))] = False,
              lora_rank: LoraRankOpt = None, lora_targets: LoraTargetsOpt = None, dora: DoraOpt = False,
              fmt: FormatOpt = Format.table, as_json: JsonOpt = False) -> None:
    """Hold the counts against FlopCounterMode and fvcore on the real PyTorch model, built for the workload;
    with --memory, the training memory against torch's MemTracker. With --hf-config, also against transformers'
    own model class built from the config on the meta device (parameters and forward FLOPs, per component);
    for a model_type tfcalc does not model yet, transformers' traced totals.

    With a context (prefill, decode) the model keeps a KV cache. Exit code 0 when every row matches, 1 on a
    mismatch, 2 on bad input."""
    layout_flags = {k: v for k, v in (("dp", dp), ("zero", zero), ("tp", tp), ("sp", sp), ("pp", pp), ("ep", ep),
                                      ("cp", cp)) if v is not None}
    given = [f"--{k}" for k, v in (("precision", precision), ("optimizer", optimizer), ("recompute", recompute),
                                   ("attention", attention), *layout_flags.items()) if v is not None]
    tuned = adapters(lora_rank, lora_targets, dora)
    if tuned is not None:
        given.append(f"--lora-rank={lora_rank}")
    if given and not memory:
        raise TfcalcError(f"{given[0]}: a training-memory flag; add --memory")
    if memory and (train or (phase is not None and phase is not Phase.train) or context is not None):
        what = "--train" if train else ("--context" if context is not None else f"--phase {phase.value}")
        raise TfcalcError(f"{what}: --memory checks a train step (drop one)")
    if memory:
        _check_memory(preset, spec, overrides, hf_config, src_len, tgt_len, device, precision, optimizer,
                      recompute, fmt, as_json, tuned, attention, layout_flags, (image_size, images, audio_seconds))
        return
    import_torch("tfcalc check")
    from .verify import check

    fmt = Format.json if as_json else fmt
    hf = skipped = None  # transformers' side of --hf-config: its report, or why it was not run
    if hf_config is not None and not no_transformers:
        from .hf import SUPPORTED
        from .verify import hf_model

        if not hf_model.transformers_available():
            skipped = hf_model.INSTALL_HINT
            if fmt is not Format.json:
                typer.echo(skipped, err=True)
        elif ((kind := hf_model.model_type_of(hf_config)) not in SUPPORTED and kind not in hf_model.registry.REGISTRY
              and hf_model.known_to_transformers(kind)):  # (a wrapper's own text type: refused by name below)
            with _progress("tracing transformers' own model (meta) ..."):
                hf = hf_model.traced(hf_config, overrides)  # a type tfcalc refuses: transformers' totals alone
    if hf is not None and hf.traced:
        csv = [[f"transformers_{r.figure}", r.component, "", r.transformers, "", ""] for r in hf.rows]
    else:
        model_spec, _ = resolve(preset, spec, overrides, hf_config)
        workload = workload_for(model_spec, phase and phase.value, context, src_len, tgt_len,
                                overrides.get("seq_len"), image_size, images, audio_seconds)
        with _progress(f"checking on {device}: FlopCounterMode, fvcore, the module tree ..."):
            report = check(model_spec, device=device, train=train, workload=workload)
        if hf_config is not None and not no_transformers and skipped is None:
            with _progress("building and tracing transformers' own model (meta) ..."):
                hf = hf_model.compare(hf_config, model_spec, workload, overrides)
        csv = [["forward", r.component, r.analytic, r.flop_counter, 2 * r.fvcore_macs, r.match] for r in report.forward]
        csv += [["params", r.component, r.analytic, r.model, r.fvcore, r.match] for r in report.params]
        if report.train is not None:
            csv.append(["train_step", "total", report.train.analytic, report.train.flop_counter, "", report.train.match])
        csv += [[f"transformers_{r.figure}", r.component, r.analytic, r.transformers, "", r.match]
                for r in (hf.rows if hf is not None else [])]
    if fmt is Format.json:
        data = {"match": True} if hf is not None and hf.traced else report.to_dict()
        if hf_config is not None and not no_transformers:
            data["transformers"] = hf.to_dict() if hf is not None else {"skipped": skipped}
        typer.echo(render.to_json(data))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(["figure", "component", "analytic", "flop_counter_or_model", "fvcore", "match"],
                                 csv), nl=False)
    else:
        if hf is None or not hf.traced:
            _print_tables(render.check_tables(report), fmt, render.check_lines(report))
            typer.echo("\n" + render.check_verdict(report))
        if hf is not None:
            lines = [f"transformers' own class: {hf.model_class}, built from {hf_config} (model_type "
                     f"{hf.model_type}) on the meta device"]
            lines += [f"note: {n}" for n in hf.notes]
            _print_tables([render.hf_check_table(hf)], fmt, ["", *lines] if not hf.traced else lines)
            typer.echo("\n" + "\n".join([*hf.explanations(), "", hf.verdict()]).lstrip("\n"))
    if (hf is None or not hf.traced) and not report.match or hf is not None and not hf.match:
        raise typer.Exit(1)


def _check_memory(preset, spec, overrides, hf_config, src_len, tgt_len, device, precision, optimizer, recompute,
                  fmt, as_json, tuned=None, attention=None, layout_flags: dict | None = None,
                  media: tuple = (None, None, None)) -> None:
    from .plan.training import ATTENTION, OPTIMIZERS, PRECISIONS, RECOMPUTE, Layout

    layout_flags = layout_flags or {}
    for name in ("ep", "cp"):
        if layout_flags.get(name, 1) > 1:
            from .verify.parallel import UNMEASURED

            raise TfcalcError(f"--{name} {layout_flags[name]}: cannot be measured: {UNMEASURED[name]}")
    if layout_flags.get("sp") and layout_flags.get("tp", 1) == 1:
        raise TfcalcError("--sp: sequence parallelism needs --tp 2 or more")
    layout = Layout(**layout_flags) if layout_flags else None

    model_spec, _ = resolve(preset, spec, overrides, hf_config)
    if model_spec.towers:  # each tower's reference model is built alone: measured one tower at a time
        raise TfcalcError(f"tfcalc check --memory: {model_spec.label} has a {' and '.join(model_spec.towers)} tower "
                          "beside its language model; its train step is measured one tower at a time (--tower text, "
                          f"--tower {next(iter(model_spec.towers))}): memory --phase train plans the whole model")
    if model_spec.inputs != "tokens" and layout is not None and layout != Layout():
        raise TfcalcError(f"tfcalc check --memory: {model_spec.label} is a model of {model_spec.inputs}; its train "
                          "step is planned and measured on one GPU (drop the layout flags)")
    workload = workload_for(model_spec, "train", None, src_len, tgt_len, overrides.get("seq_len"), *media)
    precision, optimizer, recompute = precision or "bf16-mixed", optimizer or "adamw", recompute or "none"
    # a parallel layout is measured with eager attention (DTensor has no rule for torch's CPU flash kernel)
    attention = attention or ("eager" if layout is not None and layout != Layout() else "fused")
    for name, value, allowed in (("precision", precision, PRECISIONS), ("optimizer", optimizer, OPTIMIZERS),
                                 ("recompute", recompute, RECOMPUTE), ("attention", attention, ATTENTION)):
        if value not in allowed:
            raise TfcalcError(f"{name}={value!r}: expected one of {', '.join(allowed)}")
    if optimizer == "adam8bit":
        raise TfcalcError("optimizer='adam8bit': bitsandbytes' 8-bit Adam cannot be measured here (adamw or sgd)")
    if PRECISIONS[precision].fp8:
        from .plan.training import FP8_UNMEASURABLE

        raise TfcalcError(f"precision={precision!r}: {FP8_UNMEASURABLE}")
    import_torch("tfcalc check --memory")
    from .verify.checker import DEVICES
    from .verify.memory_check import check_memory

    if device.split(":")[0] not in DEVICES:
        raise TfcalcError(f"device={device!r}: expected one of {', '.join(DEVICES)} (or cuda:N)")
    if attention == "fused":
        from .verify.memory import fused_problem

        problem = fused_problem(model_spec)
        if problem:
            raise TfcalcError(f"--attention fused: {model_spec.label} cannot be measured with torch's fused kernel "
                              f"here: {problem}; measure it with --attention eager")
    with _progress(f"measuring a train step with MemTracker on {device} ..."):
        report = check_memory(model_spec, workload, precision, optimizer, recompute, device, attention, tuned,
                              layout)
    fmt = Format.json if as_json else fmt
    if fmt is Format.json:
        typer.echo(render.to_json(report.to_dict()))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(["category", "analytic", "measured", "difference", "tolerance", "match"],
                                 [[r.category, r.analytic, r.measured, r.difference, r.tolerance, r.match]
                                  for r in report.rows]), nl=False)
    else:
        lines = [f"{model_spec.label}: {render.describe(model_spec)}",
                 f"workload: {render.describe_workload(workload, model_spec)}", f"device: {report.device}",
                 *([f"layout: {report.layout.describe()}"] if report.layout is not None else []),
                 f"measured in {report.seconds:.1f} s"] + [f"note: {n}" for n in report.notes]
        _print_tables([render.memory_check_table(report)], fmt, lines)
        typer.echo("\n" + ("every category agrees" if report.match else "MISMATCH: see the rows without ✓"))
    if not report.match:
        raise typer.Exit(1)


def _seq_lens(text: str) -> list[int]:
    """'256,512,1024' -> [256, 512, 1024]."""
    values = [part.strip() for part in text.split(",")]
    try:
        lens = [int(v) for v in values]
    except ValueError:
        raise TfcalcError(f"seq_len={text!r}: expected an integer or a comma-separated list of integers") from None
    return lens


@app.command("profile")
@spec_flags(exclude=("seq_len",))
def profile_cmd(
    overrides: dict,
    preset: PresetOpt = None,
    spec: SpecOpt = None,
    hf_config: HfOpt = None,
    seq_len: Annotated[Optional[str], typer.Option("--seq-len", "-N", rich_help_panel=_panel("seq_len"), help=(
        "Tokens per sequence; a list (256,512,1024) profiles each and shows measured against predicted per N."
    ))] = None,
    device: Annotated[Optional[str], typer.Option("--device", help="cpu, cuda or cuda:N (default: cuda when "
                                                                   "present, else cpu).")] = None,
    dtype: Annotated[Optional[str], typer.Option("--dtype", help="fp32, bf16 or fp16 (default: bf16 on CUDA, "
                                                                 "fp32 on CPU).")] = None,
    mode: Annotated[str, typer.Option("--mode", help="forward, or train (forward + backward, no optimizer).")]
    = "forward",
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed steps first.")] = 2,
    repeat: Annotated[int, typer.Option("--repeat", help="Timed steps.")] = 5,
    compile_: Annotated[bool, typer.Option("--compile", help="torch.compile the model first.")] = False,
    layers: Annotated[Optional[int], typer.Option("--layers", help="Profile 1 and K blocks and extrapolate to all "
                                                                   "(for models that do not fit).")] = None,
    memory_budget: Annotated[Optional[int], typer.Option("--memory-budget", help="Bytes the step may use "
                                                         "(default: what the device has free).")] = None,
    tune_allocator: Annotated[bool, typer.Option("--tune-allocator/--default-allocator", rich_help_panel=(
        "The CPU's allocator"), help=(
        "CPU: keep freed blocks in glibc's heap so that steps do not pay for page faults (mallopt; see "
        "docs/profiling.md), or leave malloc as it is."))] = True,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="FILE.png|FILE.svg", help=(
        "With a list of N: measured against predicted time over N, drawn into FILE (.png or .svg; needs "
        "matplotlib: pip install 'tfcalc\\[plot]')."))] = None,
    fmt: FormatOpt = Format.table,
    as_json: JsonOpt = False,
) -> None:
    """Time the real model on the local GPU (or CPU): achieved FLOP/s, MFU, predicted against measured time.

    Ctrl-C while timing shows the rounds completed, then exits with 130."""
    lens = _seq_lens(seq_len) if seq_len is not None else [None]
    if plot is not None and len(lens) < 2:
        raise TfcalcError(f"--plot {str(plot)!r}: profile draws measured against predicted time over N; give a "
                          "list of lengths (--seq-len 256,512,1024)")
    plot_path = _plot_start(plot)
    import_torch("tfcalc profile")
    from .profile.runner import resolve_device

    specs = [resolve(preset, spec, overrides if n is None else {**overrides, "seq_len": n}, hf_config)[0]
             for n in lens]
    _tokens_only(specs[0], "profile", images=True)  # one model at several lengths
    if device is None and resolve_device(None).type == "cpu":
        typer.echo("tfcalc: no CUDA device found; profiling on the CPU", err=True)
    results = []
    for s in specs:
        results.append(_profile_with_progress(s, device, dtype, mode, warmup, repeat, compile_, layers, memory_budget,
                                              tune_allocator))
        if results[-1].interrupted:
            break
    fmt = Format.json if as_json else fmt
    if fmt is Format.json:
        data = [r.to_dict() for r in results]
        typer.echo(render.to_json(data[0] if len(data) == 1 else {"runs": data}))
    elif fmt is Format.csv:
        flat = [render.flatten({k: v for k, v in r.to_dict().items() if k != "spec"}) for r in results]
        header = ["seq_len", *(k for k, _ in flat[0])]
        rows = [[r.spec.seq_len, *(v for _, v in f)] for r, f in zip(results, flat)]
        typer.echo(render.to_csv(header, rows), nl=False)
    else:
        tables = [render.profile_table(r) for r in results]
        if len(results) > 1:
            tables.append(render.profile_sweep_table(results))
        _print_tables(tables, fmt, render.profile_lines(results[0]))
    if plot_path is not None and len(results) > 1:
        from .plot import profile_times

        _plot_save(profile_times(results), plot_path)
    if results[-1].interrupted:  # what was measured is shown; the interrupt is still honoured
        timed = results[-1].time.repeats
        _fail([f"interrupted: shown above are the {timed} timed round{'s' if timed != 1 else ''} completed"],
              EXIT_INTERRUPTED)


def _profile_with_progress(spec, device, dtype, mode, warmup, repeat, compile_, layers, memory_budget,
                           tune_allocator):
    """profile() under a progress bar on stderr (transient, so that --json output stays clean)."""
    from rich.console import Console
    from rich.progress import Progress

    from .profile import profile

    steps = (warmup + repeat) * (2 if layers else 1)
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"{spec.label} {mode}", total=steps)
        return profile(spec, device=device, dtype=dtype, mode=mode, warmup=warmup, repeat=repeat, compile=compile_,
                       layers=layers, memory_budget=memory_budget, tune_allocator=tune_allocator,
                       on_step=lambda kind: progress.advance(task))


_SERVE = "Serving capacity (--serve: vLLM's arithmetic)"


def _serve_opt(flag: str, text: str, **kw):
    return typer.Option(flag, rich_help_panel=_SERVE, show_default=False, help=text, **kw)


class _TypedFraction(Fraction):
    """An exact number that remembers how it was typed."""

    typed: str


def _fraction_text(text: str) -> Fraction:
    """A decimal number as typed ('0.9', '1.79', '5e-1'), kept exact; the range is the command's to check."""
    from decimal import Decimal, InvalidOperation

    if len(text) > 100:
        raise typer.BadParameter(f"{text[:12]}... ({len(text)} characters): expected a number")
    try:
        value = Decimal(text.strip().replace("_", ""))
    except InvalidOperation:
        raise typer.BadParameter(f"{text!r} is not a number") from None
    if not value.is_finite() or abs(value.adjusted()) > 30:
        raise typer.BadParameter(f"{text!r}: expected a finite number of reasonable size")
    fraction = _TypedFraction(value)
    fraction.typed = text  # echoed in messages as the user typed it
    return fraction


def _typed(value: Fraction) -> str:
    return getattr(value, "typed", str(value))


# the planning commands' dtypes (tfcalc.plan.memory)
WeightsDtypeOpt = Annotated[str, typer.Option("--dtype", help="Weights: fp32, bf16, fp16, or weight-only fp8, int8, "
                                                             "int4.")]
KvDtypeOpt = Annotated[Optional[str], typer.Option("--kv-dtype", help=(
    "KV cache: fp32, bf16, fp16, fp8 or int8 (default: the weights' for fp32/bf16/fp16, else bf16)."))]


@app.command("memory")
@sweep_flags
def memory_cmd(overrides: dict, axes: dict, preset: SweepPresetOpt = None, spec: SpecOpt = None,
               hf_config: HfOpt = None,
               phase: PhaseOpt = None, context: SweepContextOpt = None, src_len: SweepSrcLenOpt = None,
               tgt_len: SweepTgtLenOpt = None, image_size: ImageSizeOpt = None, images: ImagesOpt = None,
               audio_seconds: AudioSecondsOpt = None,
               dtype: Annotated[Optional[str], typer.Option("--dtype", show_default=False, help=(
                   "Inference weights: fp32, bf16 (default), fp16, or weight-only fp8, int8, int4."))] = None,
               kv_dtype: KvDtypeOpt = None, quant: QuantOpt = None,
               gpu: Annotated[Optional[str], typer.Option("--gpu", help="A GPU by name (h100-sxm, a100-80gb, ...): "
                                                                        "does it fit (inference: how many "
                                                                        "sequences; training: the smallest "
                                                                        "layout that fits).")] = None,
               precision: Annotated[Optional[str], _training_opt("--precision", (
                   "fp32, bf16-mixed (default: 16-bit weights and gradients, fp32 master weights and states), "
                   "fp16-mixed, bf16 (pure), fp8-delayed (alias fp8), fp8-current, fp8-mxfp8 (TransformerEngine: "
                   "bf16-mixed with the blocks' linears in FP8)."))] = None,
               optimizer: Annotated[Optional[str], _training_opt("--optimizer", (
                   "adamw (default), sgd (with momentum), adam8bit (bitsandbytes)."))] = None,
               recompute: Annotated[Optional[str], _training_opt("--recompute", (
                   "none (default), selective (attention cores recomputed in backward: eager drops its "
                   "probabilities, fused its output and logsumexp), full (each block's input only)."))] = None,
               attention: Annotated[Optional[str], _training_opt("--attention", (
                   "fused (default: FlashAttention, torch SDPA: q, k, v, the output and an fp32 logsumexp per row "
                   "kept, no N x N tensor) or eager (two matmuls and a softmax: its probabilities kept)."))] = None,
               dp: Annotated[Optional[int], _training_opt("--dp", "Data-parallel GPUs (default 1).",
                                                          parser=_one, metavar="N")] = None,
               zero: Annotated[Optional[int], _training_opt("--zero", (
                   "ZeRO stage over the data-parallel GPUs: 0 (default), 1 optimizer states, 2 + gradients, "
                   "3 + weights (FSDP)."), parser=_one, metavar="0-3")] = None,
               tp: Annotated[Optional[int], _training_opt("--tp", (
                   "Tensor-parallel GPUs (Megatron; default 1). With --context, --dtype, --kv-dtype or --phase "
                   "prefill|decode: inference weights and KV cache per GPU."), parser=_one, metavar="N")] = None,
               sp: Annotated[Optional[bool], _training_opt("--sp", (
                   "Sequence parallelism with --tp: norms and their outputs split too."))] = None,
               pp: Annotated[Optional[int], _training_opt("--pp", "Pipeline stages (1F1B; default 1).",
                                                          parser=_one, metavar="N")] = None,
               ep: Annotated[Optional[int], _training_opt("--ep", "Expert-parallel GPUs (MoE; default 1).",
                                                          parser=_one, metavar="N")] = None,
               cp: Annotated[Optional[int], _training_opt("--cp", "Context-parallel GPUs (default 1).",
                                                          parser=_one, metavar="N")] = None,
               serve: Annotated[Optional[bool], _serve_opt("--serve", (
                   "With --gpu: the KV cache a serving engine (vLLM) allocates beside the weights, in blocks, and "
                   "how many sequences of --context tokens fit at once (docs/serving.md)."))] = None,
               gpu_memory_utilization: Annotated[Optional[Fraction], _serve_opt(
                   "--gpu-memory-utilization", "With --serve: the fraction of the GPU's memory vLLM may use, in "
                   "(0, 1] (default 0.9).", parser=_fraction_text, metavar="F")] = None,
               block_size: Annotated[Optional[int], _serve_opt("--block-size", (
                   "With --serve: tokens per KV cache block (default 16)."), parser=_one, metavar="N")] = None,
               max_num_batched_tokens: Annotated[Optional[int], _serve_opt("--max-num-batched-tokens", (
                   "With --serve: tokens of vLLM's profiling pass (default: vllm serve's, 8192 on a GPU of 70 GiB "
                   "or more that is not an A100, else 2048)."), parser=_one, metavar="N")] = None,
               max_num_seqs: Annotated[Optional[int], _serve_opt("--max-num-seqs", (
                   "With --serve: requests of the profiling pass, rows of its logits (default: vllm serve's, 1024 "
                   "or 256 as above)."), parser=_one, metavar="N")] = None,
               non_torch_gib: Annotated[Optional[Fraction], _serve_opt("--non-torch-gib", (
                   "With --serve: memory outside PyTorch (CUDA context, NCCL), GiB (default: an assumed 1.79, "
                   "3.58 with --tp > 1: what vLLM logged for Llama-3-8B on an H100)."), parser=_fraction_text,
                   metavar="GIB")] = None,
               activation_gib: Annotated[Optional[Fraction], _serve_opt("--activation-gib", (
                   "With --serve: the profiling pass's activation peak, GiB, as vLLM logs it (default: "
                   "tfcalc's estimate)."), parser=_fraction_text, metavar="GIB")] = None,
               framework: Annotated[Optional[str], _training_opt("--framework", (
                   "Whose conventions: torch (default: torch.distributed, what check --memory measures) or "
                   "megatron (sequence parallelism keeps linears' inputs sharded, ZeRO-1 splits every tensor "
                   "evenly, the vocab-parallel table's gradient sharded)."))] = None,
               plot: PlotOpt = None,
               lora_rank: LoraRankOpt = None, lora_targets: LoraTargetsOpt = None, dora: DoraOpt = False,
               fmt: FormatOpt = Format.table, as_json: JsonOpt = False) -> None:
    """Memory per GPU. Training (--phase train or any training flag): weights, gradients, optimizer states,
    master weights and activations on a parallel layout. Inference (default: decode): weights by dtype and
    the KV cache. Lists or ranges (--batch-size 1,8,64, --context 1k..128kx2) give one row per point."""
    from .sweep import order, plan_row

    _single(dtype=dtype, kv_dtype=kv_dtype, gpu=gpu, precision=precision, optimizer=optimizer, recompute=recompute,
            attention=attention)
    engine = {"--gpu-memory-utilization": gpu_memory_utilization, "--block-size": block_size,
              "--max-num-batched-tokens": max_num_batched_tokens, "--max-num-seqs": max_num_seqs,
              "--non-torch-gib": non_torch_gib, "--activation-gib": activation_gib}
    if serve or any(v is not None for v in engine.values()):
        training = {"--precision": precision, "--optimizer": optimizer, "--recompute": recompute,
                    "--attention": attention, "--dp": dp, "--zero": zero, "--sp": sp, "--pp": pp, "--ep": ep,
                    "--cp": cp, "--plot": plot, "--phase": phase, "--src-len": src_len, "--tgt-len": tgt_len,
                    "--batch-size": overrides.get("batch_size"), "--framework": framework,
                    "--lora-rank": lora_rank, "--lora-targets": lora_targets, "--dora": dora or None,
                    # the towers' weights are served; the prompts' images and audio are not planned (were dropped)
                    "--images": images, "--image-size": image_size, "--audio-seconds": audio_seconds}
        if _quant(quant, hf_config, dtype) is not None:  # vLLM's arithmetic here is for 16-bit or --dtype weights
            raise TfcalcError(f"{'--quant ' + quant if quant else '--hf-config'}: quantized weights (a format with "
                              "scales, or the config's quantization_config) are not planned with --serve yet; "
                              "give --quant none for 16-bit weights, or plan them with tfcalc memory --quant")
        return _serve_capacity(overrides, axes, preset, spec, hf_config, context, dtype, kv_dtype, gpu, tp,
                               bool(serve), engine, training, fmt, as_json)
    single = _workload_axes(axes, context=context, src_len=src_len, tgt_len=tgt_len)
    context, src_len, tgt_len = single["context"], single["src_len"], single["tgt_len"]
    axes = order(axes)
    presets = _presets(preset)
    points = _sweep_points(presets, spec, hf_config, overrides, axes)
    if sp and (tp is None or tp == 1):
        raise TfcalcError("--sp: sequence parallelism splits what tensor parallelism keeps whole over the "
                          "tensor-parallel GPUs; it needs --tp 2 or more (got "
                          f"{'no --tp' if tp is None else '--tp 1'})")
    layout_flags = {k: v for k, v in (("dp", dp), ("zero", zero), ("tp", tp), ("sp", sp), ("pp", pp),
                                      ("ep", ep), ("cp", cp), ("framework", framework)) if v is not None}
    training_flags = [f"--{k}" for k, v in (("precision", precision), ("optimizer", optimizer),
                                            ("recompute", recompute), ("attention", attention)) if v is not None]
    training_flags += [f"--{k}" for k in layout_flags]
    tuned = adapters(lora_rank, lora_targets, dora)
    if tuned is not None:
        training_flags.append(f"--lora-rank={lora_rank}")
    # --quant with adapters is their frozen model's format (QLoRA): a training flag then
    inference_flags = [f for f, v in (("--dtype", dtype), ("--kv-dtype", kv_dtype),
                                      ("--quant", quant if tuned is None else None),
                                      ("--context", context if "context" not in axes else axes["context"]))
                       if v is not None]
    inference_tp = None  # --tp with an inference flag or phase: the weights and KV cache per GPU
    if tp is not None and (inference_flags or (phase is not None and phase is not Phase.train)):
        training_flags.remove("--tp")
        inference_tp = tp
    training = (phase is Phase.train) or (phase is None and bool(training_flags))
    points = iter(points)
    first = next(points, None)
    points = itertools.chain([first] if first is not None else [], points)
    # an encoder (BERT), or a dual encoder whose causal text tower has no LM head (CLIP), has no KV cache to plan
    cacheless = first is not None and (not first.spec.causal or bool(first.spec.towers) and not first.spec.lm_head)
    if phase is None and not inference_flags and cacheless:
        training = True  # its memory question is a train step's
    if phase is None and inference_flags and cacheless:
        typed = inference_flags[0]  # the flag that made it an inference plan, not the phase it implied
        what = "a bidirectional encoder" if not first.spec.causal else "an encoder of texts and images"
        raise TfcalcError(f"{typed}: an inference flag; {first.spec.label} is {what} with no KV "
                          "cache to plan (its memory is a train step's: drop the flag)")
    if training and inference_flags:
        what = training_flags[0] if training_flags else "--phase train"
        raise TfcalcError(f"{inference_flags[0]}: an inference flag; {what} plans a train step (drop one)")
    if not training and training_flags:
        raise TfcalcError(f"{training_flags[0]}: a training flag; --phase {phase.value} plans inference (drop one)")
    sweeping = bool(axes) or len(presets) > 1
    axis = _single_axis(axes, len(presets), "memory") if plot is not None else None
    path = _plot_start(plot)
    capacity = name = None
    # inference: the weights as stored; adapters: their frozen model's (QLoRA); full training: the recipe's
    q = _quant(quant, hf_config, None if training else dtype) if not training or tuned is not None else None
    if gpu is not None:
        from .plan.gpus import lookup

        card = lookup(gpu)
        capacity, name = card.memory_bytes, card.name

    def plan(p):
        v = p.values
        ctx, src, tgt = v.get("context", context), v.get("src_len", src_len), v.get("tgt_len", tgt_len)
        _tokens_only(p.spec, "memory", towers=not training, step=training)
        if training:
            from .plan.training import Layout, training_memory

            workload = workload_for(p.spec, "train", None, src, tgt, p.overrides.get("seq_len"), image_size, images,
                                    audio_seconds)
            return training_memory(p.spec, workload, precision or "bf16-mixed", optimizer or "adamw",
                                   recompute or "none", Layout(**layout_flags), capacity, name, search=layout_flags,
                                   adapters=tuned, attention=attention or "fused", quant=q)
        from .plan.memory import inference_memory

        workload = workload_for(p.spec, (phase and phase.value) or "decode", ctx, src, tgt, p.overrides.get("seq_len"),
                                image_size, images, audio_seconds)
        return inference_memory(p.spec, workload, dtype or "bf16", kv_dtype, capacity, name,
                                1 if inference_tp is None else inference_tp, q)

    fmt = Format.json if as_json else fmt
    pairs = ((p, plan(p)) for p in points)  # a tidy sweep without a figure: one point at a time, none kept
    if not (sweeping and fmt is not Format.table and path is None):
        pairs = list(pairs)
    if sweeping and fmt is not Format.table:
        _emit_tidy((plan_row(p, m.to_dict()) for p, m in pairs), fmt)
    elif sweeping:
        header = _sweep_header(pairs, pairs[0][1].workload)
        _print_tables([render.memory_sweep_table(pairs, list(axes))], fmt, header)
    else:
        ((point, m),) = pairs
        model_spec, source = point.spec, point.source
        table = render.training_memory_table(m) if training else render.memory_table(m)
        if fmt is Format.json:
            typer.echo(render.to_json({"spec": model_spec.model_dump(), **m.to_dict()}))
        elif fmt is Format.csv:
            typer.echo(render.to_csv(["figure", "value"], render.flatten(m.to_dict())), nl=False)
        else:
            header = [f"{model_spec.label}: {render.describe(model_spec, workload=training)}", f"source: {source}",
                      f"workload: {render.describe_workload(m.workload, model_spec)}"]
            _print_tables([table], fmt, header)
    if path is not None:
        from .plot import memory_breakdown

        _plot_save(memory_breakdown(pairs, axis), path)


def _serve_capacity(overrides, axes, preset, spec, hf_config, context, dtype, kv_dtype, gpu, tp, serve: bool,
                    engine: dict, others: dict, fmt: Format, as_json: bool) -> None:
    """memory --serve: vLLM's KV cache arithmetic for one model on one GPU (tfcalc.plan.serve)."""
    from .plan.serve import serving_capacity

    given = [flag for flag, value in engine.items() if value is not None]
    if not serve:
        raise TfcalcError(f"{given[0]}: a serving-engine flag; it needs --serve (and --gpu)")
    if gpu is None:
        raise TfcalcError("--serve: needs --gpu NAME (h100, a100-80gb, ...): the card whose memory is divided")
    for flag, value in others.items():
        if value is not None:
            typed = flag if value is True else f"{flag} {getattr(value, 'value', value)}"
            raise TfcalcError(f"{typed}: not planned with --serve (serving capacity is a decoder's inference plan)")
    if axes or isinstance(context, _Sweep) or len(_presets(preset)) > 1:
        raise TfcalcError("--serve: one model and one --context (a list or range is not planned with --serve)")
    utilization = engine["--gpu-memory-utilization"]
    if utilization is not None and not 0 < utilization <= 1:
        raise TfcalcError(f"--gpu-memory-utilization {_typed(utilization)}: expected a fraction in (0, 1] "
                          "(0.9 for 90%)")
    for flag in ("--block-size", "--max-num-batched-tokens", "--max-num-seqs"):
        if engine[flag] is not None and engine[flag] < 1:
            raise TfcalcError(f"{flag} {engine[flag]}: expected a positive integer")
    if context is not None and context < 1:
        raise TfcalcError(f"--context {context}: expected a positive number of tokens")
    if tp is not None and tp < 1:
        raise TfcalcError(f"--tp {tp}: expected a positive integer")
    gib = {}
    for flag in ("--non-torch-gib", "--activation-gib"):
        value = engine[flag]
        if value is not None and value < 0:
            raise TfcalcError(f"{flag} {_typed(value)}: expected a non-negative number of GiB")
        gib[flag] = None if value is None else int(value * 2**30)
    (point,) = _sweep_points(_presets(preset), spec, hf_config, overrides, {})
    kwargs = {"gpu_memory_utilization": utilization} if utilization is not None else {}
    c = serving_capacity(point.spec, gpu, context, dtype or "bf16", kv_dtype, tp or 1,
                         block_size=engine["--block-size"] or 16,
                         max_num_batched_tokens=engine["--max-num-batched-tokens"],
                         max_num_seqs=engine["--max-num-seqs"], non_torch_bytes=gib["--non-torch-gib"],
                         activation_bytes=gib["--activation-gib"], **kwargs)
    fmt = Format.json if as_json else fmt
    if fmt is Format.json:
        typer.echo(render.to_json({"spec": point.spec.model_dump(), **c.to_dict()}))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(["figure", "value"], render.flatten(c.to_dict())), nl=False)
    else:
        header = [f"{point.spec.label}: {render.describe(point.spec, workload=False)}", f"source: {point.source}"]
        _print_tables([render.serve_table(c)], fmt, header)


def _default_prompt(spec: ModelSpec) -> int:
    """infer's prompt when --context is not given: seq_len tokens, or one fewer where a learned position table of
    seq_len rows leaves no row for the decoded token (GPT-2: 1,023 prompt tokens, the 1,024th decoded)."""
    if spec.positions == "learned" and spec.max_positions is not None and spec.seq_len >= spec.max_positions:
        return max(1, spec.max_positions - 1)
    return spec.seq_len


@app.command("infer")
@sweep_flags
def infer_cmd(overrides: dict, axes: dict, preset: SweepPresetOpt = None, spec: SpecOpt = None,
              hf_config: HfOpt = None,
              gpu: Annotated[Optional[str], typer.Option("--gpu", help="The GPU (h100-sxm, a100-80gb, ...): its "
                                                                       "dense peak and bandwidth.")] = None,
              context: Annotated[Optional[str], typer.Option("--context", parser=_sizes, metavar="N|LIST", help=(
                  "Prompt tokens per sequence: prefilled, then decoded against (default seq_len)." + _SWEEPS))]
              = None,
              src_len: SweepSrcLenOpt = None, image_size: ImageSizeOpt = None, images: ImagesOpt = None,
              audio_seconds: AudioSecondsOpt = None,
              dtype: WeightsDtypeOpt = "bf16", kv_dtype: KvDtypeOpt = None, quant: QuantOpt = None,
              tp: Annotated[Optional[str], typer.Option("--tp", parser=_sizes, metavar="N|LIST", show_default=False,
                                                          help=(
                  "Tensor-parallel GPUs (Megatron's split, as vLLM serves; default 1): every figure is one GPU's, "
                  "with the all-reduces and the logits' all-gather over its GPU-to-GPU link." + _SWEEPS))] = None,
              output_tokens: Annotated[Optional[int], typer.Option("--output-tokens", parser=_one, metavar="T",
                                                                   show_default=False, help=(
                  "A request's life: T output tokens (the first from the prefill, then T - 1 decode steps, each at "
                  "its own context, summed exactly): time to first token, end to end, tokens/s."))] = None,
              efficiency: Annotated[Optional[Fraction], typer.Option("--efficiency", parser=_fraction_text,
                                                                     metavar="F", show_default=False, help=(
                  "With --output-tokens: the fraction of the peak FLOP/s, bandwidth and link every op reaches, in "
                  "(0, 1] (default 1: the roofline bound); an assumption, labelled as one."))] = None,
              plot: PlotOpt = None,
              fmt: FormatOpt = Format.table, as_json: JsonOpt = False) -> None:
    """Prefill and decode on a roofline: time to first token, decode tokens/s, what each op is bound by. Lists or
    ranges (--context 1k..32kx2, --batch-size 1,8,64) give one row per point."""
    from .plan.gpus import lookup
    from .plan.roofline import inference_plan
    from .sweep import order, plan_row

    _single(gpu=gpu, dtype=dtype, kv_dtype=kv_dtype)
    single = _workload_axes(axes, context=context, src_len=src_len, tp=tp)
    context, src_len, tp = single["context"], single["src_len"], single["tp"]
    axes = order(axes)
    presets = _presets(preset)
    points = _sweep_points(presets, spec, hf_config, overrides, axes)
    if gpu is None:
        raise TfcalcError("give --gpu NAME (h100-sxm, a100-80gb, ...): the roofline needs its peak and bandwidth")
    card = lookup(gpu)
    q = _quant(quant, hf_config, dtype)
    sweeping = bool(axes) or len(presets) > 1
    if efficiency is not None and output_tokens is None:
        raise TfcalcError(f"--efficiency {_typed(efficiency)}: it scales a request's life; give --output-tokens T")
    if efficiency is not None and not 0 < efficiency <= 1:
        raise TfcalcError(f"--efficiency {_typed(efficiency)}: expected a fraction in (0, 1] (0.5 for half the "
                          "roofline's rates)")
    if output_tokens is not None and output_tokens < 1:
        raise TfcalcError(f"--output-tokens {output_tokens}: expected a positive number of tokens")
    if output_tokens is not None and (sweeping or plot is not None):
        raise TfcalcError("--output-tokens: one model at one point (a list, a range or --plot is not planned with it)")
    media = [f"--{flag} {value}" for flag, value in (("image-size", image_size), ("images", images),
                                                      ("audio-seconds", audio_seconds)) if value is not None]
    if media and output_tokens is not None:
        raise TfcalcError(f"{media[0]}: a request's life (--output-tokens) plans the language model's prompt alone "
                          "for now (the towers' work at the prefill: infer without --output-tokens)")
    if plot is not None and (len(axes) > 1 or (axes and len(presets) > 1)):
        _single_axis(axes, len(presets), "the roofline")
    path = _plot_start(plot)

    def plan(p):
        ctx, src, gpus = p.values.get("context", context), p.values.get("src_len", src_len), p.values.get("tp", tp)
        s = p.spec
        _tokens_only(s, "infer", towers=True)
        if not s.causal or (s.towers and not s.lm_head):  # infer has no --phase: its refusal names none
            what = "is a bidirectional encoder" if not s.causal else "encodes texts and images (no LM head)"
            raise TfcalcError(f"tfcalc infer: {s.label} {what}: it has no KV cache to prefill or decode; infer "
                              "plans a decoder's prefill and decode (count counts its forward, memory its train step)")
        if ctx is not None and ("seq_len" in overrides or "seq_len" in axes) and not s.is_encoder_decoder:
            raise TfcalcError("--seq-len and --context: infer's prompt is --context tokens (--seq-len sets it only "
                              "when --context is not given); give one")
        prompt = _default_prompt(s) if ctx is None else ctx
        given = {}
        try:
            if media:  # checked and read as count reads them
                w = workload_for(s, "prefill", None, None, None, prompt, image_size, images, audio_seconds)
                given = {"images": w.images, "image_size": w.image_size, "mel_frames": w.mel_frames}
            return inference_plan(s, card, prompt, s.batch_size, dtype, kv_dtype,
                                  (src or s.seq_len) if s.is_encoder_decoder else src, 1 if gpus is None else gpus, q,
                                  **given)
        except TfcalcError as e:  # the images' tokens past the prompt: the prompt is --context as typed
            said = f"seq_len={prompt}: the "
            if ctx is None or not s.towers or not str(e).startswith(said):
                raise
            raise TfcalcError(f"--context {ctx}: the " + str(e)[len(said):].replace("seq_len", "context")) from None

    fmt = Format.json if as_json else fmt
    pairs = ((p, plan(p)) for p in points)  # a tidy sweep without a figure: one point at a time, none kept
    if not (sweeping and fmt is not Format.table and path is None):
        pairs = list(pairs)
    life = None
    if output_tokens is not None:
        from .plan.request import request_life

        ((point, result),) = pairs
        s, src = point.spec, src_len
        prompt = result.prefill.workload.seq_len
        if s.positions == "learned" and s.max_positions is not None and prompt + output_tokens - 1 > s.max_positions:
            raise TfcalcError(f"--output-tokens {output_tokens}: a prompt of {prompt:,} tokens and "
                              f"{output_tokens - 1:,} decode steps need {prompt + output_tokens - 1:,} positions; "
                              f"{s.label}'s learned position table has {s.max_positions:,} (a shorter --context?)")
        life = request_life(s, card, result.prefill.workload.seq_len, output_tokens, s.batch_size, dtype, kv_dtype,
                            1 if tp is None else tp, (src or s.seq_len) if s.is_encoder_decoder else src,
                            1 if efficiency is None else efficiency)
    if sweeping and fmt is not Format.table:
        def row(p, result) -> dict:
            data = {k: v for k, v in result.to_dict().items() if k not in ("prefill", "decode")}
            for phase in ("prefill", "decode"):
                data[phase] = {k: v for k, v in getattr(result, phase).to_dict().items() if k != "ops"}
            return plan_row(p, data)
        _emit_tidy((row(p, result) for p, result in pairs), fmt)
    elif sweeping:
        header = _sweep_header(pairs)
        _print_tables([render.infer_sweep_table(pairs, list(axes))], fmt, header)
    else:
        ((point, result),) = pairs
        model_spec, source = point.spec, point.source
        request = {} if life is None else {"request": life.to_dict()}
        if fmt is Format.json:
            typer.echo(render.to_json({"spec": model_spec.model_dump(), **result.to_dict(), **request}))
        elif fmt is Format.csv:
            data = {k: v for k, v in result.to_dict().items() if k not in ("prefill", "decode")}
            typer.echo(render.to_csv(["figure", "value"], render.flatten({**data, **request})), nl=False)
        else:
            header = [f"{model_spec.label}: {render.describe(model_spec, workload=False)}", f"source: {source}"]
            _print_tables(render.infer_tables(result) + ([] if life is None else [render.request_table(life)]),
                          fmt, header)
    if path is not None:
        from .plot import roofline

        _plot_save(roofline(pairs, next(iter(axes), None) if len(presets) == 1 and len(axes) == 1 else None), path)


def _tokens(text: str, what: str = "tokens") -> int:
    """A token count: 15_600_000_000_000, 15.6T, 2e12, 300B (K, M, B or G, T: 10^3 ... 10^12), exactly."""
    from decimal import Decimal, InvalidOperation, localcontext

    scale = {"K": 3, "M": 6, "B": 9, "G": 9, "T": 12}.get(text[-1:].upper(), 0)
    digits = text[:-1] if scale else text
    try:
        value = Decimal(digits.replace("_", ""))
    except InvalidOperation:
        raise typer.BadParameter(f"{text!r} is not a number of {what} (15600000000000, 15.6T, 2e12)") from None
    if not value.is_finite() or len(digits) > MAX_DIGITS or value.adjusted() + scale >= MAX_DIGITS:
        raise typer.BadParameter(f"{text!r}: expected a finite number of {what}, at most {MAX_DIGITS} digits")
    with localcontext() as exact:  # every digit kept: the default context's 28 would round a long count
        exact.prec = 2 * MAX_DIGITS
        value = value.scaleb(scale)
    if value != value.to_integral_value() or value < 1:
        raise typer.BadParameter(f"{text!r}: expected a whole, positive number of {what}")
    return int(value)


def _samples(text: str) -> int:
    """A number of samples (images, image-text pairs, clips): 384M, 1.28e6, 81_600_000, exactly."""
    return _tokens(text, "samples")


def _flops(text: str) -> int | float:
    """A FLOP budget: 5.76e23, 1e24, 3.8e25 or a whole number, kept as typed (an integer stays exact)."""
    from decimal import Decimal, InvalidOperation

    if len(text) > MAX_DIGITS + 10:
        raise typer.BadParameter(f"{text[:12]}... ({len(text)} characters): at most {MAX_DIGITS} digits")
    try:
        value = Decimal(text.replace("_", ""))
    except InvalidOperation:
        raise typer.BadParameter(f"{text!r} is not a number of FLOPs (5.76e23, 1e24)") from None
    if not value.is_finite() or value <= 0:
        raise typer.BadParameter(f"{text!r}: expected a positive number of FLOPs")
    if value > Decimal("1e300"):  # the scaling laws run in floats; no run is within 10^250 of it
        raise typer.BadParameter(f"{text!r}: at most 1e300 FLOPs (the fits are evaluated in floating point)")
    return int(value) if value == value.to_integral_value() and "e" not in text.lower() and "." not in text \
        else float(value)


@app.command("train")
@spec_flags
def train_cmd(overrides: dict, preset: PresetOpt = None, spec: SpecOpt = None, hf_config: HfOpt = None,
              tokens: Annotated[Optional[int], typer.Option("--tokens", parser=_tokens, metavar="D", help=(
                  "Training tokens: 15600000000000, 15.6T, 2e12."))] = None,
              gpus: Annotated[Optional[int], typer.Option("--gpus", parser=_integer, metavar="K",
                                                          help="GPUs the run uses.")] = None,
              gpu: Annotated[Optional[str], typer.Option("--gpu", help="The GPU (h100-sxm, a100-80gb, ...): its "
                                                                       "dense peak in --dtype.")] = None,
              dtype: Annotated[Optional[str], typer.Option("--dtype", show_default=False, help=(
                  "The peak to hold against: bf16 (default), fp16, fp8, tf32, fp32; with --gpu."))] = None,
              precision: Annotated[Optional[str], typer.Option("--precision", show_default=False, help=(
                  "The run's recipe, for --gpu's peak when --dtype is not given: an FP8 recipe (fp8-delayed, "
                  "alias fp8; fp8-current, fp8-mxfp8) the dense fp8 peak; bf16-mixed, bf16 bf16; fp16-mixed "
                  "fp16; fp32 fp32."))] = None,
              mfu: Annotated[Optional[float], typer.Option("--mfu", help="Model FLOPs utilisation, 0-1 (0.4 for "
                                                                         "40%), for the time.")] = None,
              price: Annotated[Optional[float], typer.Option("--price", help="Price per GPU-hour, for the "
                                                                             "cost.")] = None,
              recompute: Annotated[Optional[str], typer.Option("--recompute", show_default=False, help=(
                  "none (default), selective (attention cores) or full (every block)."))] = None,
              attention: Annotated[Optional[str], typer.Option("--attention", show_default=False, help=(
                  "fused (default: FlashAttention, torch SDPA; its backward computes the scores again: hardware "
                  "FLOPs) or eager (two matmuls and a softmax)."))] = None,
              tokens_per_second: Annotated[Optional[float], typer.Option("--tokens-per-second", help=(
                  "A measured run's throughput, all GPUs together: its MFU."))] = None,
              samples: Annotated[Optional[int], typer.Option("--samples", parser=_samples, metavar="N", help=(
                  "A model of images (ViT), a dual encoder (CLIP, SigLIP) or a model of audio (Whisper): the "
                  "budget in samples, images, image-text pairs or clips (384M: 300 epochs of 1.28M images)."))] = None,
              samples_per_second: Annotated[Optional[float], typer.Option("--samples-per-second", help=(
                  "With a model whose budget is --samples: a measured run's images (pairs, clips) a second, all "
                  "GPUs together: its MFU."))] = None,
              image_size: ImageSizeOpt = None, images: Annotated[Optional[int], typer.Option(
                  "--images", parser=_integer, metavar="INT", rich_help_panel=_WORKLOAD, show_default=False, help=(
                      "A model with a vision tower: images in each sequence of --seq-len tokens, their tokens "
                      "among them (default 1)."))] = None,
              audio_seconds: AudioSecondsOpt = None,
              flops_budget: Annotated[Optional[float], typer.Option("--flops-budget", parser=_flops, metavar="C",
                                                                    help=(
                  "A compute budget in FLOPs (5.76e23): the compute-optimal parameters and tokens (Hoffmann et "
                  "al. 2022); with a model, also the tokens C buys it."))] = None,
              lora_rank: LoraRankOpt = None, lora_targets: LoraTargetsOpt = None, dora: DoraOpt = False,
              fmt: FormatOpt = Format.table, as_json: JsonOpt = False) -> None:
    """Training budget: FLOPs for D tokens from the exact count, time and cost on K GPUs, a run's MFU, or the
    compute-optimal size for a FLOP budget. A model of images, a dual encoder or a model of audio: --samples N
    images, pairs or clips; a multimodal model: D text tokens, each sequence with its --images and --audio-seconds.
    With --lora-rank: fine-tuning adapters on the frozen model."""
    from .plan.train import UNITS, budget_unit, mfu_of_run, training_budget

    tuned = adapters(lora_rank, lora_targets, dora)
    if tuned is not None and flops_budget is not None:
        raise TfcalcError(f"--lora-rank={lora_rank}: --flops-budget sizes a model trained from scratch; adapters "
                          "fine-tune a given one (use --tokens or --tokens-per-second)")

    modelled = any(v is not None for v in (preset, spec, hf_config)) or bool(overrides)
    _single(precision=precision)
    given = {flag: value for flag, value in (("--gpus", gpus), ("--gpu", gpu), ("--dtype", dtype),
                                             ("--precision", precision), ("--mfu", mfu),
                                             ("--price", price), ("--tokens-per-second", tokens_per_second),
                                             ("--samples", samples), ("--samples-per-second", samples_per_second),
                                             ("--image-size", image_size), ("--images", images),
                                             ("--audio-seconds", audio_seconds))
             if value is not None}
    for flag, value in (("--mfu", mfu), ("--price", price), ("--tokens-per-second", tokens_per_second),
                        ("--samples-per-second", samples_per_second)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise TfcalcError(f"{flag} {value}: expected a positive, finite number")
    if mfu is not None and mfu < 1e-6:
        raise TfcalcError(f"--mfu {mfu}: expected a fraction of the peak from 0.000001 to 1 (0.4 for 40%)")
    _single(attention=attention)
    if flops_budget is not None:
        if tokens is not None:
            raise TfcalcError(f"--flops-budget {flops_budget:g} and --tokens {tokens}: give one (the budget "
                              "decides the tokens)")
        if attention is not None:
            raise TfcalcError(f"--attention {attention}: with --flops-budget the model FLOPs decide the tokens; the "
                              "attention kernel changes only the hardware FLOPs (give --tokens D)")
        if given:  # a flag typed is used or refused
            raise TfcalcError(f"--flops-budget gives the compute-optimal size and the tokens it buys; "
                              f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} not used there (time and cost: "
                              "--tokens D with --gpus, --gpu and --mfu)")
        if not modelled:
            if recompute is not None:
                raise TfcalcError(f"--recompute {recompute}: with --flops-budget alone there is no model to "
                                  "recompute (give one: its tokens for the budget use it)")
            _compute_optimal(flops_budget, None, fmt, as_json)
            return
    model_spec, source = resolve(preset, spec, overrides, hf_config)
    unit = budget_unit(model_spec)
    if "batch_size" in overrides and unit != "pair":
        # a budget is tokens in sequences of -N: how many run at once changes nothing (a dual encoder's contrastive
        # batch does: its logits are batch x batch)
        counted = ("--tokens D in sequences of --seq-len" if unit == "token" else
                   f"--samples N {UNITS[unit]}, each on its own")
        raise TfcalcError(f"--batch-size {overrides['batch_size']}: train counts {counted}; the batch size does not "
                          "change the FLOPs, the time or the MFU (memory --phase train plans a batch)")
    recompute = recompute or "none"
    if flops_budget is not None:
        if unit != "token" or model_spec.towers:
            what = (f"has {' and '.join(model_spec.towers)} tower{'s' if len(model_spec.towers) > 1 else ''} beside "
                    "its language model (--tower text sizes the language model alone)" if unit == "token" else
                    f"is {_A_MODEL[unit]}, its budget in {UNITS[unit]} (--samples N)")
            raise TfcalcError(f"--flops-budget {flops_budget:g}: the compute-optimal size (Hoffmann et al. 2022) is "
                              f"fitted on language models of tokens; {model_spec.label} {what}")
        _compute_optimal(flops_budget, (model_spec, source, recompute), fmt, as_json)
        return
    amount, rate, workload = _train_budget(model_spec, unit, tokens, tokens_per_second, samples, samples_per_second,
                                           overrides, image_size, images, audio_seconds)
    budget_flag, rate_flag = ("--tokens D", "--tokens-per-second") if unit == "token" else ("--samples N",
                                                                                     "--samples-per-second")
    if amount is None and rate is None:
        raise TfcalcError(f"give {budget_flag} (a training budget), {rate_flag} X (the MFU of a run)"
                          + (" or --flops-budget C (the compute-optimal size)" if unit == "token" and
                             not model_spec.towers else ""))
    for flag, value in (("--dtype", dtype), ("--precision", precision)):
        if value is not None and gpu is None:
            raise TfcalcError(f"{flag} {value}: it picks --gpu's peak; give --gpu")
    timed = [f for f, value in (("--gpus", gpus), ("--gpu", gpu), ("--mfu", mfu)) if value is not None]
    if amount is not None and timed and rate is None and len(timed) < 3:
        missing = [f for f in ("--gpus", "--gpu", "--mfu") if f not in timed]
        raise TfcalcError(f"{', '.join(timed)}: the time for {budget_flag[:-2]} needs --gpus, --gpu and --mfu "
                          "together; "
                          f"missing {' and '.join(missing)}")
    if amount is None and mfu is not None:
        raise TfcalcError(f"--mfu {mfu}: it times {budget_flag}; {rate_flag} measures a run's MFU itself")
    if price is not None and (amount is None or mfu is None):
        raise TfcalcError(f"--price {price}: the cost is the time of {budget_flag[:-2]} at --mfu on --gpus; give them")
    peak = card = None
    if gpu is not None:
        from .plan.train import training_peak

        card, dtype, peak = training_peak(gpu, precision, dtype)
        if precision is not None:
            from .plan.training import PRECISION_ALIASES

            precision = PRECISION_ALIASES.get(precision, precision)
    if (mfu is not None or rate is not None) and (gpus is None or gpu is None):
        missing = [f for f, value in (("--gpus", gpus), ("--gpu", gpu)) if value is None]
        raise TfcalcError(f"--mfu and {rate_flag} need {' and '.join(missing)}")
    attention = attention or "fused"
    by = {"tokens": amount} if unit == "token" else {"samples": amount}
    budget = None if amount is None else training_budget(
        model_spec, recompute=recompute, gpus=gpus, gpu_name=card and card.name, peak_flops_per_s=peak, mfu=mfu,
        price_per_gpu_hour=price, adapters=tuned, peak_dtype=dtype, precision=precision, attention=attention,
        workload=workload, **by)
    at = {"tokens_per_s": rate, "samples_per_s": None} if unit == "token" else {"tokens_per_s": None,
                                                                              "samples_per_s": rate}
    run = (mfu_of_run(model_spec, gpus=gpus, peak_flops_per_s=peak, recompute=recompute, adapters=tuned,
                      peak_dtype=dtype, precision=precision, attention=attention, workload=workload, **at)
           if rate else None)
    fmt = Format.json if as_json else fmt
    media = unit != "token" or bool(model_spec.towers)  # the step counted: its images, audio, contrastive batch
    data = {"spec": model_spec.model_dump(), **({"workload": workload.model_dump()} if media else {}),
            **(budget.to_dict() if budget else {}), **({"run": run} if run else {}),
            **({"adapters": tuned.to_dict()} if tuned else {})}
    if fmt is Format.json:
        typer.echo(render.to_json(data))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(["figure", "value"], render.flatten({k: v for k, v in data.items() if k != "spec"})),
                   nl=False)
    else:
        _print_tables([render.train_table(budget, run, tuned is not None)], fmt,
                      [f"{model_spec.label}: {render.describe(model_spec, workload=media)}", f"source: {source}"]
                      + ([f"train step counted: {render.describe_workload(workload, model_spec)}"] if media else [])
                      + ([f"fine-tuning: {tuned.describe()} on the frozen model (step FLOPs: docs/finetuning.md)"]
                         if tuned else []))


def _as_typed(value: int | float) -> str:
    """A count as its integer (any size: no float of it), a rate as a float."""
    return str(value) if isinstance(value, int) else f"{value:g}"


_A_MODEL = {"image": "a model of images", "pair": "a dual encoder of images and texts", "clip": "a model of audio"}


def _train_budget(spec: ModelSpec, unit: str, tokens, tokens_per_second, samples, samples_per_second, overrides,
                  image_size, images, audio_seconds):
    """(the budget, the measured rate, the train step counted) of `tfcalc train`: tokens for a model of tokens,
    samples for the others (the other flag refused by name); the step is one sequence with its images and audio, one
    image, one clip, or a dual encoder's contrastive batch of --batch-size pairs."""
    from .plan.train import UNITS, training_workload

    if unit == "token":
        for flag, value in (("--samples", samples), ("--samples-per-second", samples_per_second)):
            if value is not None:
                raise TfcalcError(f"{flag} {_as_typed(value)}: {spec.label} is a model of tokens; its budget is "
                                  "--tokens D (its throughput --tokens-per-second)")
    else:
        for flag, value in (("--tokens", tokens), ("--tokens-per-second", tokens_per_second)):
            if value is not None:
                raise TfcalcError(f"{flag} {_as_typed(value)}: {spec.label} is {_A_MODEL[unit]}; its budget is in "
                                  f"{UNITS[unit]}: --samples N (its throughput --samples-per-second)")
        if images is not None and unit != "clip":  # a model of audio refuses it as count does (workload_for)
            what = ("the pairs of its contrastive batch are --batch-size (one image per text)" if unit == "pair" else
                    "a budget counts each image, whatever runs at once (the FLOPs per image do not change)")
            raise TfcalcError(f"--images {images}: {spec.label}'s --samples N are its {UNITS[unit]}; {what}")
    workload = workload_for(spec, "train", None, None, None, overrides.get("seq_len"), image_size, images,
                            audio_seconds)
    update: dict = {"batch_size": spec.batch_size if unit == "pair" else 1}
    if unit == "pair":
        update["images"] = spec.batch_size
    workload = training_workload(spec, workload.model_copy(update=update))
    if unit == "token":
        return tokens, tokens_per_second, workload
    return samples, samples_per_second, workload


def _compute_optimal(flops, model, fmt: Format, as_json: bool) -> None:
    """Chinchilla's compute-optimal size for `flops`; with (spec, source, recompute), the tokens it buys that model
    (its exact train-step FLOPs per token)."""
    from .plan.chinchilla import compute_optimal

    result = compute_optimal(flops)
    data: dict = {"flops_budget": flops, **result.to_dict()}
    fit = None
    if model is not None:
        from .plan.train import training_budget

        spec, source, recompute = model
        per_token = training_budget(spec, 1, recompute).flops_per_token_causal
        tokens = int(Fraction(flops) / per_token) if isinstance(flops, int) else int(flops / float(per_token))
        n = count(spec).params.active
        fit = {"tokens": tokens, "flops_per_token_causal": float(per_token), "params_active": n,
               "tokens_per_param": tokens / n, "optimal_params": result.params,
               "params_over_optimal": n / result.params}
        data["model"] = {"spec": spec.model_dump(), **fit}
    fmt = Format.json if as_json else fmt
    if fmt is Format.json:
        typer.echo(render.to_json(data))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(["figure", "value"], render.flatten(data if model is None else
                                                                     {k: v for k, v in data.items() if k != "model"}
                                                                     | {"model": fit})), nl=False)
    else:
        lines = [] if model is None else [f"{model[0].label}: {render.describe(model[0])}", f"source: {model[1]}"]
        _print_tables([render.compute_optimal_table(result, fit, model and model[0].label)], fmt, lines)


@app.command("presets")
def presets_cmd(fmt: FormatOpt = Format.table, as_json: JsonOpt = False) -> None:
    """Every preset with its headline figures and source."""
    presets = list_presets()
    entries = [(p.name, p.description, count(p.spec), p.source) for p in presets]
    fmt = Format.json if as_json else fmt
    if fmt is Format.json:
        typer.echo(render.to_json({name: {
            "description": desc, "source": source, "aliases": list(p.aliases),
            "params": {"total": r.params.total, "active": r.params.active},
            "seq_len": r.spec.seq_len, "flops": {"forward": r.flops.forward},
        } for p, (name, desc, r, source) in zip(presets, entries)}))
    elif fmt is Format.csv:
        rows = [[name, r.params.total, r.params.active, r.spec.seq_len, r.flops.forward, source]
                for name, _, r, source in entries]
        typer.echo(render.to_csv(["preset", "params_total", "params_active", "seq_len", "flops_forward", "source"],
                                 rows), nl=False)
    else:
        _print_tables([render.presets_table(entries)], fmt)


@app.command("gpus")
def gpus_cmd(fmt: FormatOpt = Format.table, as_json: JsonOpt = False) -> None:
    """The GPUs --gpu takes: memory, bandwidth, dense peak FLOP/s per dtype, the GPU-to-GPU link, each source."""
    from .plan.gpus import list_gpus

    gpus = list_gpus()
    fmt = Format.json if as_json else fmt
    if fmt is Format.json:
        typer.echo(render.to_json({g.aliases[0]: {
            "name": g.name, "aliases": list(g.aliases), "memory_bytes": g.memory_bytes,
            "bandwidth_bytes_per_s": g.bandwidth_bytes_per_s, "peak_flops_per_s": dict(g.peak_flops),
            "link_bytes_per_s": g.link_bytes_per_s, "link": g.link, "source": g.source} for g in gpus}))
    elif fmt is Format.csv:
        dtypes = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
        rows = [[g.aliases[0], g.name, g.memory_bytes, g.bandwidth_bytes_per_s,
                 *(g.peak_flops.get(d, "") for d in dtypes), g.link_bytes_per_s or "", g.source] for g in gpus]
        typer.echo(render.to_csv(["gpu", "name", "memory_bytes", "bandwidth_bytes_per_s",
                                  *(f"peak_{d}_flops_per_s" for d in dtypes), "link_bytes_per_s", "source"], rows),
                   nl=False)
    else:
        _print_tables([render.gpus_table(gpus)], fmt)


def _takes(name: str) -> str:
    """What a model flag takes, as --help writes it."""
    kind = _unwrap(ModelSpec.model_fields[name].annotation)
    if kind is int:
        return "INT|LIST"
    if kind is bool:
        return "on/off"
    if typing.get_origin(kind) is typing.Literal:
        return "|".join(map(str, typing.get_args(kind)))
    if typing.get_origin(kind) is list:
        return "A,B,..."
    if typing.get_origin(kind) is dict:
        return "KIND.FIELD=VALUE,..."
    return "TEXT"


def _flag_names(name: str) -> str:
    flag = "--" + name.replace("_", "-")
    short = [_SHORT[name]] if name in _SHORT else []
    long = f"{flag} / --no-{flag[2:]}" if _unwrap(ModelSpec.model_fields[name].annotation) is bool else flag
    return ", ".join([*short, long])


@app.command("flags", epilog="Examples: tfcalc flags  |  tfcalc flags expert  |  tfcalc flags --json")
def flags_cmd(word: Annotated[Optional[str], typer.Argument(metavar="WORD", show_default=False, help=(
                  "Only the flags whose name or description holds WORD (any case)."))] = None,
              fmt: FormatOpt = Format.table, as_json: JsonOpt = False) -> None:
    """Every model flag, by panel: the commands' --help shows only the sizes.

    Taken by count, compare, memory, infer, train, check and profile; INT|LIST sweeps in count, memory, infer."""
    fields = [name for name in SPEC_FIELDS if word is None or word.casefold() in (
        name + " " + _flag_names(name) + " " + (ModelSpec.model_fields[name].description or "")).casefold()]
    if not fields:
        raise TfcalcError(f"{word!r}: no model flag's name or description holds it (tfcalc flags lists them all)")
    fields.sort(key=lambda name: _RANK[_panel(name)])
    fmt = Format.json if as_json else fmt
    if fmt is Format.json:
        typer.echo(render.to_json({name: {"flag": _flag_names(name), "takes": _takes(name), "panel": _panel(name),
                                          "help": ModelSpec.model_fields[name].description or ""}
                                   for name in fields}))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(["field", "flag", "takes", "panel", "help"], [
            [name, _flag_names(name), _takes(name), _panel(name), ModelSpec.model_fields[name].description or ""]
            for name in fields]), nl=False)
    else:
        panels = {panel: [(_flag_names(name), _takes(name), ModelSpec.model_fields[name].description or "")
                          for name in fields if _panel(name) == panel] for panel in dict.fromkeys(map(_panel, fields))}
        if fmt is Format.markdown:
            typer.echo("\n\n".join(render.to_markdown(render.flags_table(p, f)) for p, f in panels.items()))
        else:
            width = shutil.get_terminal_size().columns if sys.stdout.isatty() or "COLUMNS" in os.environ else None
            typer.echo(render.flags_text(panels, width))


def main() -> None:
    """The console entry point. typer turns every registered command into a click command, options and all, on
    each run (11 ms for all five here, 2 ms for `count` alone); only the command being run is built. `tfcalc`,
    `tfcalc --help` and an unknown command name get them all."""
    name = sys.argv[1] if len(sys.argv) > 1 else None
    chosen = [c for c in app.registered_commands if c.name == name]
    registered = app.registered_commands
    app.registered_commands = chosen or registered
    try:
        command = typer.main.get_command(app)
    finally:
        app.registered_commands = registered
    for sub in getattr(command, "commands", {}).values():
        for param in sub.params:
            _absent_needs_no_coercion(param)
    command()


def _absent_needs_no_coercion(param) -> None:
    """typer coerces every option of the command being run through a pydantic TypeAdapter it builds on first use,
    given or not: for the 80-odd options of `count`, most of them model flags left out, that was a fifth of the
    command's time. An option left out (None, one value) comes out None whatever its type (typer's
    RuntimeParam.coerce), so it skips the building; its required check and callback run as before."""
    if param.multiple or param.nargs == -1 or param.required or param.callback is not None:
        return
    process = param.process_value

    def process_value(ctx, value):
        return None if value is None else process(ctx, value)
    param.process_value = process_value
