"""The one registry of the Hugging Face model types tfcalc reads: a `Family` record per `model_type`.

A record says, as data, what reading a config.json of its type takes: transformers' defaults for the fields it reads,
their JSON kinds, the config class's attribute aliases, whether it is an encoder-decoder or a multimodal config whose
language model sits in a field of its own (`nested`), and what `check --hf-config` compares by: the table of
transformers' module names -> tfcalc components, the fields holding each stack's number of blocks (`layer_keys`, where
-L is written) and the family's documented differences from transformers' class (`known`). The mapper (the config's
fields -> ModelSpec fields) and the `known` hook are the only code, and a family that shares its layout with another
has none of its own: `like=` names that family, whose record it starts from, the dicts (defaults, types, aliases)
updated with the ones given, any other field replaced.

    register(Family("xlm-roberta", like="roberta", defaults=dict(vocab_size=30522)))

The modules of tfcalc/families/ register every family (`load`, called by tfcalc.hf); `family()` is a record with its
`like` filled in.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..arch import Workload
    from ..spec import ModelSpec

# A mapper reads the checked fields of a config (transformers' defaults under the file's own values) and appends notes;
# it returns ModelSpec fields and `context`, the config's longest input (the default seq_len).
Mapper = Callable[[dict[str, Any], list[str]], dict[str, Any]]
# A rule: (a regex over a module's path in transformers' model, a tfcalc component); "{stack}" in the component is the
# regex's `stack` group (encoder or decoder).
Rule = tuple[str, str]
# A config's fields holding each stack's number of blocks -> the ModelSpec field it is (n_layers, n_encoder_layers), for
# a family that does not say
DEFAULT_LAYER_KEYS = {"num_hidden_layers": "n_layers"}


@dataclass(frozen=True)
class Difference:
    """A row of `check --hf-config` where tfcalc and transformers differ: what a family's `known` hook reads."""

    figure: str  # "params" or "forward"
    component: str  # a tfcalc component, or "total"
    analytic: int
    transformers: int
    config: Mapping[str, Any]  # the config transformers built from (a nested config's language model; -L written in)
    spec: ModelSpec  # what tfcalc counted; its seq_len and batch_size are the workload's
    workload: Workload | None = None  # the forward pass compared

    @property
    def excess(self) -> int:
        """transformers' figure minus tfcalc's."""
        return self.transformers - self.analytic


# A family's documented differences from transformers' class: the note on a row that differs as documented (check
# shows it after "known: " and does not fail on it), else None
Known = Callable[[Difference], "str | None"]


@dataclass(frozen=True)
class Wrapper:
    """How a multimodal config's generation class (XForConditionalGeneration: its language model, then lm_head) reads
    the language model's config in the field `Family.nested` names, as data (transformers' config class and its
    SubConfigSpec): which text model_types that field may name, what is built when it is absent, and which flag ties
    lm_head to the token embedding. The defaults are Gemma 3's: one text type, the outer flag alone ties."""

    text_types: tuple[str, ...] = ()  # text_config.model_type values read beside the default (each a family)
    renamed: Mapping[str, str] = field(default_factory=dict)  # a text model_type the config class reads as another
    type_required: bool = False  # a given text_config must name its model_type (EXAONE 4.5's config indexes it)
    absent: Mapping[str, Any] = field(default_factory=dict)  # the text config built when the field is absent or null
    under: bool = False  # `absent` is laid under a given text_config too (Voxtral merges its defaults into a dict)
    at_top: bool = False  # no text_config: the language model's fields are the top-level ones (Qwen2-VL's old saves)
    tie: bool | None = None  # the class's tie_word_embeddings default; None: the language model's default
    tie_from_text: bool = False  # a true text_config.tie_word_embeddings ties too (the class moves it to the outer)
    # text_config.tie_word_embeddings alone ties, the outer flag is not read (Llama 4: the generation class holds a whole
    # Llama4ForCausalLM, which ties its own head by its own config)
    text_flag_only: bool = False
    untied: bool = False  # the class ties no weights whatever the flags say (no _tied_weights_keys: Voxtral)
    tie_aliases: tuple[str, ...] = ()  # outer names read over tie_word_embeddings (LFM2-VL's tie_embedding)


@dataclass(frozen=True)
class Family:
    """How a config.json of `model_type` is read. Left out (None): taken from the family it is `like`, else empty."""

    model_type: str
    defaults: Mapping[str, Any] | None = None  # transformers' config class defaults for the fields the mapper reads
    types: Mapping[str, str] | None = None  # field -> JSON kind (tfcalc.hf.KINDS); a field not here is not read
    mapper: Mapper | None = None
    components: Sequence[Rule] | None = None  # transformers' module names -> tfcalc components (check --hf-config)
    # the config class's attribute_map: common name -> the field it sets, read over it (the other way round where the
    # class declares the common name as a field itself: the name transformers sets last is the key)
    aliases: Mapping[str, str] | None = None
    encoder_decoder: bool | None = None
    nested: tuple[str, str] | None = None  # (the language model's model_type, the field holding its config)
    # a multimodal config's other towers read beside its nested language model: tower ("vision", "audio") -> (its
    # model_type, or the model_types it may name, the first when it names none: `tower_types`; the field holding its
    # config; optionally the config the class builds when that field is absent or null, else the tower family's
    # defaults, or None: the class builds no such tower then); without them a nested family's other towers are not
    # modelled. A tower's model_type None: not modelled, its field given (not null) refuses the whole model by name
    towers: Mapping[str, tuple] | None = None
    # outer fields a tower's config reads as its own: tower -> {outer field: the key it is laid in as}, the outer
    # value (its default when absent) over the tower config's own, as the config class sets it (MiniCPM-V's
    # __post_init__ writes its insert_layer_id into vision_config); a field neither gives nor defaults is not laid in
    into_towers: Mapping[str, Mapping[str, str]] | None = None
    # the connectors between them: (the config's checked fields, each tower's ModelSpec fields ("text", "vision"),
    # notes) -> tfcalc.spec.Connector fields
    connectors: Callable[[dict[str, Any], dict[str, dict[str, Any]], list[str]], list[dict[str, Any]]] | None = None
    # where each tower sits in transformers' whole class: tower ("text", "vision") -> a regex prefix of its modules'
    # paths (check --hf-config maps them by the tower's own family's table, the vision tower's under "vision/")
    prefixes: Mapping[str, str] | None = None
    # a whole class whose forward cannot run on meta (it reads an image grid's values): (the model, the spec, the
    # workload) -> its parts to trace, each (prefix of its modules' paths, the submodule, its forward's inputs); a
    # tower's family may give one for its own class (check --tower vision), the prefix "" naming the model itself
    hf_trace: Callable[[Any, ModelSpec, Workload], list[tuple[str, Any, dict[str, Any]]]] | None = None
    wrapper: Wrapper | None = None  # a nested family: how its generation class reads that field (Wrapper() if None)
    # a language model that transformers builds only inside a multimodal config (no generation class of its own: its
    # lm_head is the wrapper's): read from that config's text_config, refused as a top-level model_type
    inner_only: bool | None = None
    like: str | None = None  # the family this one starts from
    # config field -> the ModelSpec field of that stack's block count (check --hf-config writes -L there, or into the
    # field's alias when the config gives it); DEFAULT_LAYER_KEYS when left out; {}: no one field holds it (Mllama's
    # vision tower: local and global blocks), -L is not written into the config (said in a note)
    layer_keys: Mapping[str, str] | None = None
    known: Known | None = None  # documented differences from transformers' class (check --hf-config)

    def __post_init__(self):
        if self.components is not None:  # a tuple: a table is shared, never changed in place
            object.__setattr__(self, "components", tuple(tuple(rule) for rule in self.components))


REGISTRY: dict[str, Family] = {}
_MERGED = ("defaults", "types", "aliases")  # dicts: the like-family's, updated with the ones given

# `supported:` (in the message refusing an unknown model_type) and tfcalc.hf.SUPPORTED list these first, in the order
# tfcalc has always listed them; every other language model follows in the order its module registers it (modules
# load alphabetically), the multimodal (nested) types last
LISTED_FIRST = ("gpt2", "bert", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "t5", "bart", "gemma",
                "gpt_bigcode", "roberta", "xlm-roberta", "opt", "granite", "phi3", "qwen3", "qwen3_moe", "olmo2",
                "gemma2", "gemma3_text")


def register(*families: Family) -> None:
    """Add each family; a model_type is registered once. A family without `like` states its own types, and every
    default it gives is of a field it types."""
    for f in families:
        assert f.model_type not in REGISTRY, f"{f.model_type} is registered twice"
        assert f.like != f.model_type, f.model_type
        if f.like is None and f.defaults is not None:
            missing = set(f.defaults) - set(f.types or {})
            assert not missing, (f.model_type, sorted(missing))
        REGISTRY[f.model_type] = f


def tower_types(entry: tuple) -> tuple[str, ...]:
    """The model_types a tower's config may name, from a Family.towers entry (the first: when it names none)."""
    types = entry[0]
    return (types,) if isinstance(types, str) else () if types is None else tuple(types)


def family(model_type: str) -> Family:
    """The record of `model_type` as it is read: what it takes from the family it is `like` filled in, the kind of
    each alias the kind of the field it sets (unless given), no field left None but `mapper`, `components`, `nested`,
    `like`, `known` and a language model's `wrapper`. KeyError for a model_type not registered (or a `like` naming
    one)."""
    return _resolve(model_type, ())


def _resolve(model_type: str, seen: tuple[str, ...]) -> Family:
    assert model_type not in seen, f"like= goes round in a circle: {' -> '.join((*seen, model_type))}"
    own = REGISTRY[model_type]
    if own.like is not None:
        base = _resolve(own.like, (*seen, model_type))
        given = {f.name: getattr(own, f.name) for f in fields(own) if getattr(own, f.name) is not None}
        merged = {name: {**getattr(base, name), **given[name]} for name in _MERGED if name in given}
        own = replace(base, **given | merged)
    types = dict(own.types or {})
    aliases = dict(own.aliases or {})
    types |= {alias: types[field] for alias, field in aliases.items() if alias not in types and field in types}
    wrapper = own.wrapper if own.wrapper is not None or own.nested is None else Wrapper()
    return replace(own, defaults=dict(own.defaults or {}), types=types, aliases=aliases, towers=dict(own.towers or {}),
                   prefixes=dict(own.prefixes or {}),
                   encoder_decoder=bool(own.encoder_decoder), layer_keys=dict(DEFAULT_LAYER_KEYS if own.layer_keys is None else own.layer_keys),
                   wrapper=wrapper, inner_only=bool(own.inner_only))


def model_types() -> list[str]:
    """Every model_type a config.json may give, in the order tfcalc lists them (LISTED_FIRST); a language model read
    only inside its multimodal config (`inner_only`) is not one."""
    first = [t for t in LISTED_FIRST if t in REGISTRY]
    rest = [t for t, f in REGISTRY.items() if t not in first and f.nested is None and not family(t).inner_only]
    return [*first, *rest, *(t for t, f in REGISTRY.items() if f.nested is not None)]


def load() -> None:
    """Import every module of tfcalc/families/ (alphabetically); each registers its families."""
    package = importlib.import_module(__package__)
    for name in sorted(m.name for m in pkgutil.iter_modules(package.__path__)):
        if name != "registry":
            importlib.import_module(f"{__package__}.{name}")
