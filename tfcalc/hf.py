"""Read a Hugging Face `config.json` into a ModelSpec: no network, no weights, no transformers.

Every supported `model_type` is a `Family` record in one registry (tfcalc/families/registry.py; the families
themselves in tfcalc/families/): transformers' defaults for the fields it reads, their JSON kinds, its attribute
aliases, its mapper to ModelSpec fields. A field the file leaves out takes the default of transformers' config class
(tests/test_hf*.py hold them against transformers' own classes). Every field a mapper reads has the JSON type
transformers' config class declares for it (checked strictly with pydantic before any mapper runs): "false" is not
false and 4096.7 is not 4096. A field whose value would change the shapes in a way ModelSpec does not model is
refused, by name: never a silently wrong count.

Here: reading and validation, and the helpers the family modules share (`decoder_fields`, `refuse_if`, `set_window`,
...). DEFAULTS, TYPES, NESTED, ENCODER_DECODER and SUPPORTED are views of the registry.
"""

from __future__ import annotations

from dataclasses import replace

import os
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter, ValidationError

from . import hub
from .errors import TfcalcError, validation_lines
from .loading import SpecFile, as_path, parse_json, read_text_file
from .spec import ModelSpec

SEQ_LEN_CAP = 131_072  # default seq_len is max_position_embeddings, but not beyond this

# Fields every config may give, beside its family's `types` (model_type is checked first: it picks the family).
# A kind is a strict JSON type: "false" is not false, 4096.7 is not 4096, true is not 1; "size": a positive integer;
# "count": zero or more; "?": or null.
COMMON_TYPES = {"_name_or_path": "str?"}

_Size = Annotated[StrictInt, Field(gt=0)]
_Count = Annotated[StrictInt, Field(ge=0)]


def _not_an_int(value):
    if type(value) is int:  # strict pydantic takes 5 for a float; transformers 5 declares these float and refuses it
        raise ValueError("an int")
    return value


_Float = Annotated[StrictFloat, BeforeValidator(_not_an_int)]
# kind -> (strict pydantic validator, what a value of the wrong type is told, what one out of range is told)
KINDS: dict[str, tuple[TypeAdapter, str, str]] = {
    "bool": (TypeAdapter(StrictBool), "a boolean (true or false)", ""),
    "bool?": (TypeAdapter(StrictBool | None), "a boolean (true or false) or null", ""),
    "float?": (TypeAdapter(_Float | None), "a float (50.0, not 50) or null", ""),
    "float": (TypeAdapter(_Float), "a float (0.5, not 1)", ""),  # Llama 4's pixel_shuffle_ratio
    "int": (TypeAdapter(StrictInt), "an integer", ""),
    "number": (TypeAdapter(StrictInt | StrictFloat), "a number", ""),  # float | int (LFM2's ffn multiplier)
    "int?": (TypeAdapter(StrictInt | None), "an integer or null", ""),
    "size": (TypeAdapter(_Size), "an integer", "a positive integer"),
    "size?": (TypeAdapter(_Size | None), "an integer or null", "a positive integer or null"),
    "count": (TypeAdapter(_Count), "an integer", "an integer >= 0"),
    "str": (TypeAdapter(StrictStr), "a string", ""),
    "str?": (TypeAdapter(StrictStr | None), "a string or null", ""),
    "integers?": (TypeAdapter(list[StrictInt] | None), "a list of integers or null", ""),
    "integers": (TypeAdapter(list[StrictInt]), "a list of integers", ""),  # Qwen2.5-VL's fullatt_block_indexes
    "strings?": (TypeAdapter(list[StrictStr] | None), "a list of strings or null", ""),
    "integer lists?": (TypeAdapter(list[list[StrictInt]] | None), "a list of lists of integers or null", ""),
    "object?": (TypeAdapter(dict[str, Any] | None), "an object or null", ""),
    "int|str?": (TypeAdapter(StrictInt | StrictStr | None), "an integer, a string or null", ""),
    "int|str": (TypeAdapter(StrictInt | StrictStr), "an integer or a string", ""),  # Mamba's time_step_rank
    # ViT's image_size and patch_size: one side, or [height, width]
    "size|sizes": (TypeAdapter(_Size | list[_Size]), "a positive integer or a list of them",
                   "a positive integer or a list of them"),
    "all|vision?": (TypeAdapter(Literal["all", "vision"] | None), "'all', 'vision' or null", ""),
}
_RANGE_ERRORS = {"greater_than", "greater_than_equal"}

# transformers' ACT2FN names -> ModelSpec.activation
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "relu": "relu", "silu": "silu", "swish": "silu", "quick_gelu": "quick_gelu"}


def find_config(path: str | Path) -> Path:
    """The config.json at `path`, or in the folder `path`, or of the Hugging Face id `path` (tfcalc.hub)."""
    if isinstance(path, (str, Path)) and hub.is_id(path):  # ORG/NAME, no such path here: the hub's config.json
        return hub.config_path(str(path))
    path = as_path(path, "Hugging Face config")
    for candidate in (path, path / "config.json"):
        try:
            if not stat.S_ISDIR(os.stat(candidate).st_mode):
                return candidate
        except (FileNotFoundError, NotADirectoryError):
            raise TfcalcError(f"{candidate}: no such file (give a config.json or a folder holding one)") from None
        except OSError:
            return candidate  # read_text_file says what is wrong with it
    return path / "config.json"  # a folder named config.json in a folder: read_text_file refuses it by name


def read_hf_config(path: str | Path) -> SpecFile:
    """The ModelSpec of a Hugging Face config.json (or a folder holding one)."""
    path = find_config(path)
    raw = parse_json(path, read_text_file(path, "Hugging Face config"))
    if not isinstance(raw, dict):
        raise TfcalcError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    model_type = raw.get("model_type")
    supported = ", ".join(registry.model_types())
    if not isinstance(model_type, (str, type(None))):
        raise TfcalcError(f"{path}: model_type={show(model_type)}: expected a string, one of: {supported}")
    if model_type not in registry.REGISTRY:
        raise TfcalcError(f"{path}: model_type={show(model_type)} is not supported; supported: {supported}"
                          + ("" if model_type is None else f" (tfcalc check --hf-config {path} still gives "
                                                           "transformers' own totals for a type it builds)"))
    notes: list[str] = []
    quant = raw.get("quantization_config")  # the checkpoint's storage, not its shapes: tfcalc.plan.quant reads it
    if quant is not None:
        method = quant.get("quant_method") if isinstance(quant, dict) else None
        notes.append(f"quantization_config (quant_method {show(method)}): count, inference memory and infer take "
                     "the weights as the checkpoint stores them (--quant none: 16-bit; a train step's plan is "
                     "16-bit)")
    family = registry.family(model_type)
    if family.inner_only:
        raise TfcalcError(f"{path}: model_type={show(model_type)} is a language model transformers builds only inside "
                          f"a multimodal config ({', '.join(sorted(wrappers_of(model_type)))}): give that config")
    outer, outer_type, text_only = raw, model_type, ""
    other = _other_tower_type(raw, family)
    if other:  # a tower of another kind than the one tfcalc reads (LLaVA's Pixtral tower): its language model alone
        text_only = (f"only the language model of {model_type} is read (from {family.nested[1]}): its {other} is not "
                     "modelled yet")
        family = replace(family, towers={})
    unread = [entry[1] for entry in (family.towers or {}).values()
              if entry[0] is None and raw.get(entry[1]) is not None]
    if unread and not text_only:  # a tower the family does not model (Gemma 4's audio): read without it, refused whole
        text_only = f"its {' and '.join(unread)} tower is not modelled yet"
    if family.nested is not None:
        if not family.towers and not text_only:
            text_only = (f"only the language model of {model_type} is read (from {family.nested[1]}): its other "
                         "towers and projectors are not modelled yet")
        raw, model_type = language_model(raw, model_type, path, notes, whole=bool(family.towers))
    fields, cfg = _fields(raw, model_type, path, notes)
    name = (hub.repo_of(path) or cfg.get("_name_or_path")
            or (path.parent.name if path.name == "config.json" else path.stem) or model_type)
    if family.towers:
        fields = _towers(outer, outer_type, family, fields, path, notes)
    try:
        spec = ModelSpec.model_validate({"name": name, **fields})
    except ValidationError as e:
        lines = [_in_config_names(line, cfg, registry.family(model_type).types) for line in validation_lines(e)]
        raise TfcalcError("\n".join(f"{path}: {line}" for line in lines)) from None
    source = f"Hugging Face config {path} (model_type {outer_type if family.towers else model_type})" + "".join(
        f"; {n}" for n in notes)
    model_type = outer_type if family.towers else model_type
    return SpecFile(spec, spec.name, f"{model_type} from config.json", source, quant_config=quant, text_only=text_only)


# ModelSpec fields -> the config fields that commonly set them, in the order they are looked for
CONFIG_NAMES = {
    "n_layers": ("num_hidden_layers", "n_layer", "n_layers", "num_decoder_layers", "decoder_layers"),
    "n_encoder_layers": ("encoder_layers", "num_layers"),
    "d_model": ("hidden_size", "n_embd", "d_model", "dim", "n_embed"),
    "n_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads", "decoder_attention_heads"),
    "n_kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "d_head": ("head_dim", "d_kv"),
    "d_ff": ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "hidden_dim", "decoder_ffn_dim"),
    "vocab_size": ("vocab_size",),
    "max_positions": ("max_position_embeddings", "n_positions", "max_seq_len"),
    "n_experts": ("num_experts", "num_local_experts", "n_routed_experts"),
    "top_k": ("num_experts_per_tok", "top_k_experts"),
    "d_expert": ("moe_intermediate_size",),
    "rotary_dim": ("rotary_dim",),
    "sliding_window": ("sliding_window",),
}


def _in_config_names(line: str, cfg: dict[str, Any], types: dict[str, str]) -> str:
    """A ModelSpec refusal in the config's own words: `n_kv_heads=5` where the file says num_key_value_heads: 5
    becomes `num_key_value_heads=5`; `give d_head` becomes `give head_dim` where the family reads one. A field the
    config did not set with that value keeps tfcalc's name."""
    import re

    def named(m: re.Match) -> str:
        field, value = m["field"], m["value"]
        for key in CONFIG_NAMES.get(field, ()):
            if key in cfg and show(cfg[key]) == value:
                return f"{key}={value}"
        return m[0]

    def give(m: re.Match) -> str:
        key = next((k for k in CONFIG_NAMES.get(m["field"], ()) if k in types), None)
        return f"give {key}" if key else m[0]

    fields = "|".join(CONFIG_NAMES)
    line = re.sub(rf"\b(?P<field>{fields})=(?P<value>[^\s,;:)]+)", named, line)
    return re.sub(rf"\bgive (?P<field>{fields})\b", give, line)


def _in_alias_names(message: str, cfg: dict[str, Any], aliases: dict[str, str]) -> str:
    """A mapper's refusal in the config's own words: `num_experts=1` where the file gave num_local_experts: 1 (an
    alias read into num_experts) becomes `num_local_experts=1`. A message that names the alias already (it says
    how the alias was read) is left as it is."""
    import re

    for alias, own in aliases.items():
        if alias in cfg and not re.search(rf"(?<![\w.]){re.escape(alias)}\b", message):
            message = re.sub(rf"(?<![\w.]){re.escape(own)}=", f"{alias}=", message)
    return message


def _other_tower_type(raw: dict, family) -> str:
    """'vision_config.model_type=...' where a whole config's tower names a model_type its family does not read as that
    tower (one of several a wrapper takes: LLaVA's clip_vision_model, not Pixtral's), else ''."""
    for entry in (family.towers or {}).values():
        key = entry[1]
        inner = raw.get(key)
        if entry[0] is None:  # a tower not modelled at all (`load` says so)
            continue
        named = inner.get("model_type") if isinstance(inner, dict) else None
        if named not in (None, "", *registry.tower_types(entry), raw.get("model_type")):  # "": a remote-code save's
            return f"{key}.model_type={show(named)} tower"
    return ""


def _fields(raw: dict, model_type: str, path: Path, notes: list[str], where: str = "") -> tuple[dict, dict]:
    """(ModelSpec fields, the checked config fields) of a config of `model_type` (`where`: the field of a whole
    config that holds it, named in each refusal), its seq_len the config's longest input, capped."""
    family = registry.family(model_type)
    types = COMMON_TYPES | family.types
    given = {**family.defaults, **raw}
    at = f"{path}: {where}." if where else f"{path}: "
    problems = [f"{at}{line}" for key, kind in types.items() if key in given
                for line in check_type(key, given[key], kind)]
    if problems:
        raise TfcalcError("\n".join(problems))
    cfg = {key: given[key] for key in types if key in given}  # a mapper reads only fields whose type is checked
    try:
        refuse_if(raw, "text_config", family.nested is None and raw.get("text_config") is not None,
                  f"{model_type} has no text_config (transformers builds it from the top-level fields and does not "
                  "read this one); give its fields at the top level")
        fields = family.mapper(unalias(cfg, family.aliases, notes), notes)
    except Unmodelled as e:
        message = _in_alias_names(str(e), cfg, family.aliases)
        raise TfcalcError(f"{at}{message}; supported: the standard {model_type} architecture") from None
    max_positions = fields.pop("context")
    seq_len = min(max_positions, SEQ_LEN_CAP)
    if seq_len < max_positions:
        notes.append(f"{where + ': ' if where else ''}seq_len capped at {SEQ_LEN_CAP:,} "
                     f"(max_position_embeddings={max_positions:,}); use --seq-len to change it")
    fields.setdefault("seq_len", seq_len)
    return fields, cfg


def _towers(outer: dict, outer_type: str, family, text: dict, path: Path, notes: list[str]) -> dict:
    """A whole multimodal config's ModelSpec fields: its language model's (`text`), each other tower's read from its
    own field (registry.Family.towers) by its own family, and the connectors between them."""
    towers = {}
    for tower, entry in family.towers.items():
        key = entry[1]
        accepted = registry.tower_types(entry)
        inner = outer.get(key)
        if entry[0] is None or (inner is None and len(entry) > 2 and entry[2] is None):
            continue  # a tower not modelled (`load` refuses it whole), or none built without its config (Gemma 4's)
        if inner is None:  # the config the class builds when there is none (Mistral3Config's own Pixtral sizes)
            inner = dict(entry[2]) if len(entry) > 2 else {}
        if not isinstance(inner, dict):
            raise TfcalcError(f"{path}: {key}={show(inner)}: expected an object or null")
        inner_type = inner.get("model_type", accepted[0])
        if inner_type == outer_type:  # an older save's spelling (Qwen2.5-VL's before 4.5x)
            inner_type = accepted[0]
            notes.append(f"{key}.model_type={show(outer_type)} read as {inner_type!r}, as transformers renames it")
        elif inner.get("model_type") == "":  # a remote-code save's (Kimi K2.5's): the config class's sub-config reads it
            inner_type = accepted[0]
            notes.append(f"{key}.model_type='' read as {inner_type!r}, the class {outer_type} builds there")
        elif inner_type not in accepted:
            raise TfcalcError(f"{path}: {key}.model_type={show(inner['model_type'])}: expected "
                              f"{' or '.join(map(repr, accepted))}")
        laid = {**family.defaults, **outer}  # the outer fields the tower reads (registry.Family.into_towers)
        into = (family.into_towers or {}).get(tower, {})
        inner = {**inner, **{to: laid[of] for of, to in into.items() if of in laid}}
        towers[tower], _ = _fields({**inner, "model_type": inner_type}, inner_type, path, notes, where=key)
    types = COMMON_TYPES | family.types
    given = {**family.defaults, **outer}
    problems = [f"{path}: {line}" for key, kind in types.items() if key in given
                for line in check_type(key, given[key], kind)]
    if problems:
        raise TfcalcError("\n".join(problems))
    cfg = {key: given[key] for key in types if key in given}
    try:
        connectors = family.connectors(cfg, {"text": text, **towers}, notes) if family.connectors else []
    except Unmodelled as e:
        raise TfcalcError(f"{path}: {e}; supported: the standard {outer_type} architecture") from None
    for fields in towers.values():
        fields.pop("name", None)
    return {**text, "towers": towers, "connectors": connectors}


def language_model(raw: dict, model_type: str, path: Path, notes: list[str], whole: bool = False) -> tuple[dict, str]:
    """The language model's config of a multimodal config, as its generation class reads it (the family's `nested`
    field and its `Wrapper`), and its model_type: the text_config (or the config the class builds when it is absent),
    with the tie flag that decides lm_head and the outer _name_or_path. Refused by name: a text_config that is not an
    object, or names a model_type the wrapper does not read as one of its families."""
    f = registry.family(model_type)
    default_type, key = f.nested
    w = f.wrapper
    given = raw.get(key)
    if given is not None and not isinstance(given, dict):
        raise TfcalcError(f"{path}: {key}={show(given)}: expected an object or null")
    if given is None:
        inner = dict(w.absent)
        if w.at_top:  # the class builds its text config from the top-level fields
            typed = registry.family(default_type).types
            inner |= {k: v for k, v in raw.items() if k in typed and k != "tie_word_embeddings"}
    else:
        inner = {**w.absent, **given} if w.under else dict(given)
        if w.at_top:
            shadowed = sorted(k for k, v in raw.items() if k in registry.family(default_type).types
                              and k not in ("tie_word_embeddings", "_name_or_path") and k in inner and inner[k] != v)
            if shadowed:
                notes.append(f"top-level {', '.join(f'{k}={show(raw[k])}' for k in shadowed)} not read: "
                             f"{model_type} reads its language model from {key} when there is one")
    allowed = (default_type, *w.text_types)
    if "model_type" not in inner:
        if given is not None and w.type_required:
            raise TfcalcError(f"{path}: {key}.model_type: missing ({model_type}'s config class reads it; one of "
                              f"{', '.join(allowed)})")
        inner_type = default_type
    else:
        named = inner["model_type"]
        inner_type = w.renamed.get(named, named) if isinstance(named, str) else named
        if inner_type not in allowed:
            raise TfcalcError(f"{path}: {key}.model_type={show(named)}: expected "
                              f"{' or '.join(map(repr, allowed)) if len(allowed) < 3 else 'one of ' + ', '.join(allowed)}"
                              + (f" (tfcalc reads {model_type}'s language model as one of these)" if len(allowed) > 1
                                 else ""))
        if inner_type != named:
            notes.append(f"{key}.model_type={show(named)} read as {inner_type!r}, as {model_type}'s config class "
                         "renames it")
    flags = {a for a, target in registry.family(inner_type).aliases.items() if target == "tie_word_embeddings"}
    for name in sorted(flags & set(inner)):  # the language model's own names for the flag (LFM2's tie_embedding)
        notes.append(f"{key}.{name}={show(inner[name])} not read: {model_type}'s generation class ties lm_head by its "
                     "own flag")
    inner = {k: v for k, v in inner.items() if k != "tie_word_embeddings" and k not in flags}
    tie = _tie(raw, given if isinstance(given, dict) else {}, model_type, key, path, notes)
    if tie is not None:
        inner["tie_word_embeddings"] = tie
    # the outer vision_config too: a language model whose family reads it takes the cross-attended vision tokens'
    # number from it (Llama 3.2 Vision); a family that does not type it does not read it
    outer = {k: raw[k] for k in ("_name_or_path", "vision_config") if k in raw}
    notes.append(f"{model_type}: the language model read from {key} ({inner_type})" + (
        "" if whole else "; the other towers (vision, audio) and the multimodal projectors are not counted"))
    return {**inner, **outer, "model_type": inner_type}, inner_type


def _tie(raw: dict, text: dict, model_type: str, key: str, path: Path, notes: list[str]) -> Any:
    """The tie_word_embeddings the generation class ties lm_head by (None: the language model's default): the outer
    flag (or an alias of it the class reads over it), else the class's default; a true text_config flag too where the
    class moves it to the outer one; the text_config flag alone where the class's language model ties its own head;
    never, for a class that ties no weights."""
    w = registry.family(model_type).wrapper
    inner = text.get("tie_word_embeddings")
    if w.untied:
        given = [f"{k}={show(v)}" for k, v in ((k, raw.get(k)) for k in ("tie_word_embeddings", *w.tie_aliases))
                 if v is not None] + ([f"{key}.tie_word_embeddings={show(inner)}"] if inner is not None else [])
        if given:
            notes.append(f"{', '.join(given)} not read: {model_type}'s generation class ties no weights (lm_head is "
                         "its own)")
        return False
    names = [k for k in ("tie_word_embeddings", *w.tie_aliases) if k in raw]
    if names:
        outer = raw[names[-1]]  # an alias is read over the flag
        problems = check_type(names[-1], outer, "bool")
        if problems:
            raise TfcalcError(f"{path}: {problems[0]}")
        if names[-1] != "tie_word_embeddings":
            notes.append(f"{names[-1]}={show(outer)} read as tie_word_embeddings (transformers sets it from it)")
    else:
        outer = w.tie
    if w.text_flag_only:
        if names:
            notes.append(f"{names[-1]}={show(outer)} not read: {model_type}'s language model ties lm_head by "
                         f"{key}.tie_word_embeddings")
        if "tie_word_embeddings" not in text:
            return None  # the language model's default
        problems = check_type(f"{key}.tie_word_embeddings", inner, "bool")
        if problems:
            raise TfcalcError(f"{path}: {problems[0]}")
        return inner
    if w.tie_from_text and "tie_word_embeddings" in text:
        problems = check_type(f"{key}.tie_word_embeddings", inner, "bool?")  # null: not true, as the class reads it
        if problems:
            raise TfcalcError(f"{path}: {problems[0]}")
        if inner is True and outer is not True:
            notes.append(f"{key}.tie_word_embeddings=True read: {model_type}'s config class ties the head by it "
                         "when the outer flag is false (saves before transformers 5)")
            return True
    if "tie_word_embeddings" in text and not names:
        notes.append(f"{key}.tie_word_embeddings={show(inner)} not read: transformers ties the head by the outer "
                     f"tie_word_embeddings (absent: {model_type}'s default)")
    return outer


def wrappers_of(model_type: str) -> list[str]:
    """The multimodal model_types whose language model may be `model_type`."""
    return [t for t, f in registry.REGISTRY.items() if f.nested is not None
            and model_type in (f.nested[0], *registry.family(t).wrapper.text_types)]


def check_type(key: str, value: Any, kind: str) -> list[str]:
    """['key=value: expected ...'] when `value` is not of `kind` (KINDS), strictly; else []."""
    adapter, expected, in_range = KINDS[kind]
    try:
        adapter.validate_python(value, strict=True)
    except ValidationError as e:
        out_of_range = all(err["type"] in _RANGE_ERRORS or err["type"] == "none_required" for err in e.errors())
        return [f"{key}={show(value)}: expected {in_range if out_of_range and in_range else expected}"]
    return []


def show(value: Any, width: int = 80) -> str:
    """repr(value), cut to `width` characters: a message names the value without repeating a whole file."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<a {type(value).__name__} nested too deeply to show>"
    except ValueError:  # an integer beyond Python's digit limit for str()
        text = f"<an integer of {value.bit_length():,} bits>"
    return text if len(text) <= width else text[:width - 3] + "..."


class Unmodelled(Exception):
    """A config field whose value tfcalc does not model (read_hf_config names it, with the model_type)."""


# ---- helpers for the mappers (tfcalc/families/) ---------------------------------------------------------------------
# A mapper reads `cfg`: its family's defaults laid under the file's fields, each of its JSON type, checked. It reads
# values as they are: no bool(), int() or truthiness that would turn "false" into True.

def activation_of(cfg: dict, key: str) -> str:
    """ModelSpec's activation for transformers' name in cfg[key]; refused by name when not modelled."""
    value = cfg[key]
    if value not in ACTIVATIONS:
        raise Unmodelled(f"{key}={show(value)} is not modelled (known: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[value]


def refuse_if(cfg: dict, key: str, bad: bool, why: str) -> None:
    """Refuse cfg[key], by name and value, saying `why`, when `bad`."""
    if bad:
        raise Unmodelled(f"{key}={show(cfg.get(key))} is not modelled: {why}")


def unalias(cfg: dict, aliases: dict[str, str], notes: list[str]) -> dict:
    """`cfg` with each common name a config gave (hidden_size, ...) read into the field it stands for (n_embd, ...):
    transformers' attribute_map sets that field from it, over the field's own value, once the class has set its own
    fields (cfg[SHADOWED] keeps the values read over). read_hf_config applies a family's `aliases` before its mapper
    runs. Where a class declares the alias as a field of its own, the attribute_map's target is the name set last:
    the family lists the pair the other way round (Qwen3-MoE: num_local_experts over num_experts)."""
    cfg = dict(cfg)
    shadowed = {}
    for alias, own in aliases.items():
        if alias in cfg:
            notes.append(f"{alias}={show(cfg[alias])} read as {own} (transformers sets {own} from it, over any {own} "
                         "given)")
            if own in cfg:
                shadowed[own] = cfg[own]
            cfg[own] = cfg.pop(alias)
    if shadowed:  # the fields' own values (a file's or the default), for a class that derives another field from
        cfg[SHADOWED] = shadowed  # one before the alias is set (T5: num_decoder_layers from num_layers)
    return cfg


SHADOWED = "_shadowed"  # unalias: the fields' own values an alias was read over


# The JSON kinds of the fields decoder_fields reads, as the LLaMA-like config classes declare them (a family adds its
# own)
DECODER_TYPES = dict(vocab_size="size", hidden_size="size", intermediate_size="size", num_hidden_layers="size",
                     num_attention_heads="size", num_key_value_heads="size?", head_dim="size?", hidden_act="str",
                     max_position_embeddings="size", tie_word_embeddings="bool", rope_scaling="object?",
                     rope_parameters="object?")


def decoder_fields(cfg: dict, notes: list[str]) -> dict:
    """The LLaMA family: pre-norm RMSNorm, gated MLP, rotary positions, GQA; shared by its descendants."""
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads")
    fields = dict(n_layers=cfg["num_hidden_layers"], d_model=cfg["hidden_size"], n_heads=heads,
                  n_kv_heads=kv_heads if kv_heads is not None else heads,
                  d_ff=cfg["intermediate_size"], vocab_size=cfg["vocab_size"], mlp="gated",
                  activation=activation_of(cfg, "hidden_act"), norm="rmsnorm", positions="rotary", bias=False,
                  tie_embeddings=cfg["tie_word_embeddings"], context=cfg["max_position_embeddings"])
    if cfg.get("head_dim") is not None:
        fields["d_head"] = cfg["head_dim"]
    if any(cfg.get(key) not in (None, {}) for key in ("rope_scaling", "rope_parameters")):
        notes.append("rope scaling/parameters read: they change rotary frequencies, not shapes or counts")
    return fields


def set_window(cfg: dict, fields: dict, notes: list[str], pattern: list[str] | None = None,
               last: int | None = None) -> None:
    """A sliding window in every block, in the blocks `pattern` (cycled) marks local, or in the `last` blocks."""
    window = cfg.get("sliding_window")
    L = fields["n_layers"]
    if pattern is not None:  # the pattern cycled over the L blocks: its whole cycles, then its first L % n entries
        cycles, rest = divmod(L, len(pattern))
        layers = cycles * pattern.count("local") + pattern[:rest].count("local")
    else:
        layers = L if last is None else last
    if window is None or not layers:
        return
    fields["sliding_window"] = window
    if pattern is not None:
        fields["attention_pattern"] = pattern
    elif last is not None:
        fields["sliding_window_layers"] = last
    notes.append(f"sliding_window={window} in {layers} of {L} blocks: forward counts full N x N attention, "
                 "forward_windowed the windowed figure")


LAYER_TYPES = ("full_attention", "sliding_attention")
PATTERN_LIMIT = 65_536  # blocks a per-block attention pattern is written for (a config's rule, not its file)


def layer_kinds(cfg: dict, L: int) -> list[str]:
    """The config's layer_types, one entry per block (full_attention or sliding_attention), checked, as the spec's
    'global' and 'local'."""
    types = cfg["layer_types"]
    refuse_if(cfg, "layer_types", len(types) != L, f"expected a list of num_hidden_layers={L} entries")
    unknown = sorted(set(types) - set(LAYER_TYPES))
    refuse_if(cfg, "layer_types", bool(unknown), f"entries {', '.join(map(show, unknown))}; known: "
              f"{', '.join(LAYER_TYPES)}")
    return ["local" if t == "sliding_attention" else "global" for t in types]


def shortest_cycle(kinds: list[str]) -> list[str]:
    """The shortest pattern that, cycled, gives `kinds` (block i: pattern[i % len(pattern)]): its length is the
    list's smallest period, len - the longest proper border (Knuth-Morris-Pratt's prefix function, linear time)."""
    border = [0] * len(kinds)
    for i in range(1, len(kinds)):
        k = border[i - 1]
        while k and kinds[i] != kinds[k]:
            k = border[k - 1]
        border[i] = k + (kinds[i] == kinds[k])
    return kinds[:len(kinds) - border[-1]] if kinds else kinds


# ---- the families ----------------------------------------------------------------------------------------------------
# Every module of tfcalc/families/ registers its families; they import the helpers above, so they load here, after
# them (tfcalc/families/__init__.py imports this module first: importing a family module first comes here too).
from .families import registry  # noqa: E402

registry.load()

# Views of the registry as it is once every family module has loaded (read_hf_config reads the registry itself)
_FAMILIES = {t: registry.family(t) for t in registry.model_types()}
DEFAULTS: dict[str, dict[str, Any]] = {t: f.defaults for t, f in _FAMILIES.items() if f.nested is None}
TYPES: dict[str, dict[str, str]] = {t: f.types for t, f in _FAMILIES.items() if f.nested is None}
NESTED: dict[str, tuple[str, str]] = {t: f.nested for t, f in _FAMILIES.items() if f.nested is not None}
ENCODER_DECODER: set[str] = {t for t, f in _FAMILIES.items() if f.encoder_decoder}
SUPPORTED = (*DEFAULTS, *NESTED)
