"""`tfcalc check --hf-config`: the analytic counts held against transformers' own model class.

The reference model (checker.py) is written from the same spec as the formulas; this holds the spec itself against
the real implementation. transformers builds its class from the config.json on the meta device (nothing allocated,
no weights, no network), with eager attention and eager experts, and one forward pass runs under torch's
FlopCounterMode. Parameters: sum(numel) with tied weights once (named_parameters drops duplicates). Per component:
each module's own FLOPs (its count minus its submodules') and each parameter are mapped onto tfcalc's components by
a small table of module names per family (its `components`, tfcalc/families/); a name no rule maps is a row of its
own, never guessed. A row that differs as the family documents (its `known` hook) is shown explained, not failed.

MoE on meta: transformers' eager experts pick their tokens with `nonzero`, which has no meta kernel (no data to
route on). Their forward is replaced, on the instance, by a round robin over the same weights: token slot s = t*k + j
goes to expert s mod E, each expert one F.linear over its gate_up_proj (Nemotron-H's: its up_proj, no gate) and one
over its down_proj, as the eager path runs them (gpt-oss's transposed experts with biases: x @ W + b, as its eager
loop does); every token passes through k experts, as with real routing, so the FLOPs are those of any routing.

For a model_type tfcalc does not model but transformers does (`traced`), the totals are reported as traced.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
import types
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..arch import Workload
from ..errors import TfcalcError
from ..families import registry  # (loads every family: tfcalc.hf)
from ..spec import ModelSpec

INSTALL_HINT = ("transformers is not installed: the check against transformers' own model class is skipped "
                "(pip install 'tfcalc[hf]')")

# ---- module names -> tfcalc components, per family ---------------------------------------------------------------
# Each family's table is in its record (tfcalc/families/, `components`): a rule is (regex over a module's path,
# component). Block indices are \d+; "{stack}" is the encoder/decoder stack the regex's `stack` group names. The core of
# an attention is the attention module's own FLOPs (q k^T and p v run in eager_attention_forward, inside that module,
# outside its projections).

# model_type -> its table, for every family that has one (a view of the registry once tfcalc.hf has loaded it)
FAMILIES: dict[str, tuple[tuple[str, str], ...]] = {t: f.components for t in registry.REGISTRY
                                                    if (f := registry.family(t)).components is not None}
def fused_parts(component: str) -> tuple[str, ...]:
    """A module transformers fuses, named by a family's table as the tfcalc components it holds joined by '+', each
    part without a '/' in the stem of the one before it: 'mlp/gate+up' is mlp/gate and mlp/up (Phi-3);
    'attention/norm+conv/norm' one norm before either mixer (LFM2's operator_norm); 'mamba2/conv+scan' the conv and
    the scan Mamba2's torch path runs inside its mixer module. Compared with the sum of the parts tfcalc counts, so
    no list of fused names is kept here (a family's table says them)."""
    parts, stem = [], ""
    for part in component.split("+"):
        if "/" in part:
            stem = part.rpartition("/")[0] + "/"
        else:
            part = stem + part
        parts.append(part)
    return tuple(parts)


def table(model_type: str) -> tuple[tuple[str, str], ...] | None:
    """The module-name table of `model_type` (registered now), or None."""
    return registry.family(model_type).components if model_type in registry.REGISTRY else None


@functools.cache
def _compiled(rules: tuple[tuple[str, str], ...]) -> list[tuple[re.Pattern, str]]:
    return [(re.compile(pattern + "$"), component) for pattern, component in rules]


def component_of(model_type: str, module: str) -> str | None:
    """'model.layers.3.self_attn.q_proj' -> 'attention/qkv' for llama; None when no rule maps the name."""
    for pattern, component in _compiled(table(model_type) or ()):
        m = pattern.match(module)
        if m:
            return component.format(stack=m.groupdict().get("stack") or "")
    return None


# ---- the report ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HfRow:
    figure: str  # "params" or "forward"
    component: str
    analytic: int | None  # None: traced only (tfcalc does not model the type)
    transformers: int
    match: bool | None  # None: nothing to compare
    note: str = ""
    known: bool = False  # a documented difference (docs/hf-configs.md): shown, explained, not a failure

    def to_dict(self) -> dict:
        return {"figure": self.figure, "component": self.component, "analytic": self.analytic,
                "transformers": self.transformers, "match": self.match, "known": self.known, "note": self.note}


@dataclass
class HfReport:
    model_type: str
    model_class: str
    workload: Workload
    rows: list[HfRow]
    traced: bool = False  # tfcalc does not model this type: transformers' totals alone
    notes: list[str] = field(default_factory=list)

    @property
    def match(self) -> bool:
        return all(r.match is not False or r.known for r in self.rows)

    @property
    def label(self) -> str:
        if self.traced:
            return f"traced by transformers (tfcalc does not model {self.model_type} yet)"
        return f"analytic | transformers {self.model_class}"

    def explanations(self) -> list[str]:
        """'figure component: note' for each row that does not simply agree."""
        return [f"{r.figure} {r.component}: {r.note}" for r in self.rows if r.note and not r.match]

    def verdict(self) -> str:
        if self.traced:
            return f"transformers: {self.label}: totals only, nothing to compare."
        compared = [r for r in self.rows if r.match is not None]
        bad = [f"{r.figure} {r.component}" for r in compared if not r.match and not r.known]
        known = sum(r.known for r in compared)
        if bad:
            return f"transformers: MISMATCH in {len(bad)} of {len(compared)} rows: {', '.join(bad)}"
        if known:
            return (f"transformers: MATCH: {len(compared) - known} of {len(compared)} rows agree exactly; {known} "
                    "differ as documented (see their notes).")
        return f"transformers: MATCH: all {len(compared)} rows agree exactly."

    def to_dict(self) -> dict:
        totals = {r.figure: r for r in self.rows if r.component == "total"}
        return {
            "model_type": self.model_type, "model_class": self.model_class, "traced": self.traced,
            "label": self.label, "workload": self.workload.model_dump(), "match": self.match,
            "params": {"analytic": totals["params"].analytic, "transformers": totals["params"].transformers},
            "forward": {"analytic": totals["forward"].analytic, "transformers": totals["forward"].transformers},
            "rows": [r.to_dict() for r in self.rows], "notes": self.notes,
        }


# ---- reading the config -------------------------------------------------------------------------------------------

def transformers_available() -> bool:
    try:
        import transformers
    except ImportError:  # not installed (or set to None in sys.modules)
        return False
    return transformers.__name__ == "transformers"


def read_raw(path: str | Path) -> tuple[Path, dict]:
    """(the config.json's path, its JSON object), read as hf.read_hf_config reads it."""
    from ..hf import find_config
    from ..loading import parse_json, read_text_file

    path = find_config(path)
    raw = parse_json(path, read_text_file(path, "Hugging Face config"))
    if not isinstance(raw, dict):
        raise TfcalcError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    return path, raw


def model_type_of(path: str | Path) -> str | None:
    model_type = read_raw(path)[1].get("model_type")
    return model_type if isinstance(model_type, str) else None


def known_to_transformers(model_type: str | None) -> bool:
    from transformers import CONFIG_MAPPING

    return isinstance(model_type, str) and model_type in CONFIG_MAPPING


def _layer_keys(family: registry.Family, raw: dict) -> dict[str, str]:
    """Config field -> the spec field holding that stack's number of blocks (the family's `layer_keys`), each field's
    alias instead where the config gives one: transformers (and tfcalc.hf.unalias) read the alias over the field."""
    keys = {}
    for key, spec_field in family.layer_keys.items():
        given = [alias for alias, own in family.aliases.items() if own == key and alias in raw]
        keys[given[-1] if given else key] = spec_field  # the last, as unalias reads them
    return keys


_WORKLOAD_FIELDS = {"name", "seq_len", "batch_size"}


def _config_for(path: Path, raw: dict, spec: ModelSpec, notes: list[str],
                overrides: dict | None = None, wrapper: dict | None = None) -> tuple[dict, ModelSpec]:
    """The config transformers builds, with the spec's block counts (-L) written in, and the spec tfcalc reads from
    that same config: both sides count one architecture. Other overrides cannot be written into a config; they are
    named in a note and the config's own values are compared. `wrapper`: the multimodal config whose language model
    `raw` is; the counts are written into it too (`wrapper` is updated in place), where its class reads them."""
    from ..hf import read_hf_config

    model_type = raw["model_type"]
    base = read_hf_config(path).spec
    raw = dict(raw)
    changed, written_in = [], {}
    for key, field_name in _layer_keys(registry.family(model_type), raw).items():
        if getattr(spec, field_name) != getattr(base, field_name):
            raw[key] = written_in[key] = getattr(spec, field_name)
            changed.append(f"{key}={raw[key]}")
            if isinstance(raw.get("layer_types"), list) and field_name == "n_layers":
                raw["layer_types"] = written_in["layer_types"] = raw["layer_types"][:raw[key]]
    if changed:
        notes.append(f"transformers' model built with {', '.join(changed)} (from the layer override)")
        if wrapper is not None:
            _write_text_fields(wrapper, written_in)
        with tempfile.TemporaryDirectory() as folder:
            written = Path(folder) / "config.json"
            written.write_text(json.dumps(wrapper if wrapper is not None else raw))
            base = read_hf_config(written).spec.replace(name=base.name)
    given = ModelSpec.model_fields if overrides is None else overrides  # the flags given, when known
    ignored = sorted(k for k in given if k not in _WORKLOAD_FIELDS and getattr(spec, k) != getattr(base, k))
    if ignored:
        notes.append("overrides not written into the config (only -L is): "
                     f"{', '.join(f'{k}={getattr(spec, k)!r}' for k in ignored)}; both sides count the config's own "
                     f"{', '.join(f'{k}={getattr(base, k)!r}' for k in ignored)}")
    return raw, base


def _write_text_fields(wrapper: dict, fields: dict) -> None:
    """`fields` written into a multimodal config where its class reads its language model's: its text_config, else
    the top level (a class that reads them there), else a text_config of the fields it builds when none is given."""
    f = registry.family(wrapper["model_type"])
    key, w = f.nested[1], f.wrapper
    if isinstance(wrapper.get(key), dict):
        wrapper[key] = {**wrapper[key], **fields}
    elif w.at_top:
        wrapper.update(fields)
    else:
        wrapper[key] = {**w.absent, **fields}


# ---- building and tracing ------------------------------------------------------------------------------------------

def _model_class(transformers, config, lm_head: bool, encoder_decoder: bool, classifier: bool = False,
                 multimodal: bool = False):
    auto = [transformers.AutoModel]
    if multimodal:  # the generation class of a multimodal config (Voxtral's is Seq2SeqLM's; a causal LM's last: Qwen3.5
        auto = [transformers.AutoModelForImageTextToText, transformers.AutoModelForSeq2SeqLM,  # maps its multimodal
                transformers.AutoModelForCausalLM]  # config to a text-only class)
    elif classifier:  # a classifier on the first token (ViTForImageClassification)
        auto = [transformers.AutoModelForImageClassification, *auto]
    elif encoder_decoder:
        auto = [transformers.AutoModelForSeq2SeqLM, transformers.AutoModelForCausalLM, *auto]
    elif lm_head:  # (a multimodal config that no causal LM maps: its generation class, AutoModelForImageTextToText's)
        auto = [transformers.AutoModelForCausalLM, transformers.AutoModelForSeq2SeqLM,
                transformers.AutoModelForImageTextToText, *auto]
    for factory in auto:
        mapping = factory._model_mapping
        if type(config) in mapping:
            return mapping[type(config)]
    raise TfcalcError(f"transformers has no model class for {type(config).__name__}")


def build(raw: dict, lm_head: bool = True, encoder_decoder: bool = False, classifier: bool = False,
          multimodal: bool = False):
    """transformers' model of `raw` (a config.json's object) on the meta device: eager attention, eager experts."""
    import torch
    import transformers

    fields = {k: v for k, v in raw.items() if k != "model_type"}
    config = transformers.AutoConfig.for_model(raw["model_type"], **fields)
    cls = _model_class(transformers, config, lm_head, encoder_decoder, classifier, multimodal)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # config warnings (token ids outside a tiny vocab, ...)
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = cls._from_config(config, attn_implementation="eager", experts_implementation="eager")
    finally:
        transformers.logging.set_verbosity(verbosity)
    model.eval()
    routed = _route_experts_round_robin(model)
    return model, routed


def build_language_model(raw: dict):
    """The language model and lm_head of transformers' generation class of the multimodal config `raw`, built whole
    on meta (eager attention, eager experts): a module whose `model` is that language model (get_decoder) and whose
    `lm_head` is the class's own (tied to the token embedding as the class ties it), named as a causal LM's."""
    import torch

    model, _ = build(raw, multimodal=True)

    class LanguageModel(torch.nn.Module):
        def __init__(self, decoder, head):
            super().__init__()
            self.model, self.lm_head = decoder, head

        def forward(self, input_ids, use_cache=None):
            return self.lm_head(self.model(input_ids=input_ids, use_cache=use_cache).last_hidden_state)

    view = LanguageModel(model.get_decoder(), model.get_output_embeddings()).eval()
    return view, _route_experts_round_robin(view)


def _round_robin_experts(self, hidden_states, top_k_index, top_k_weights):
    """Token slot s = t*k + j to expert s mod E, over this module's own weights, the way the eager path runs each
    expert (one linear over gate_up_proj, chunk, act(gate) * up, one linear over down_proj). Meta: no data."""
    import torch
    import torch.nn.functional as F

    tokens, k = top_k_index.shape
    gated = getattr(self, "gate_up_proj", None) is not None
    experts = _up(self).shape[0]
    for e in range(experts):
        n = (tokens * k - e + experts - 1) // experts  # slots s < tokens*k with s % experts == e
        if n == 0:
            continue
        x = hidden_states[:n]  # n <= tokens, as k <= experts
        if _transposed_with_biases(self):  # gpt-oss: x @ W[e] + b[e], its own gate (interleaved, clamped)
            h = self._apply_gate(x @ self.gate_up_proj[e] + self.gate_up_proj_bias[e])
            h = h @ self.down_proj[e] + self.down_proj_bias[e]
            continue
        if not gated:  # Nemotron-H's experts: up_proj and down_proj, no gate
            F.linear(self.act_fn(F.linear(x, self.up_proj[e])), self.down_proj[e])
            continue
        gate, up = F.linear(x, self.gate_up_proj[e]).chunk(2, dim=-1)
        F.linear(self.act_fn(gate) * up, self.down_proj[e])
    return torch.zeros_like(hidden_states)


def _up(module):
    """A stacked-experts module's first weight: gate_up_proj, or up_proj where the experts have no gate (Nemotron-H);
    None for any other module."""
    up = getattr(module, "gate_up_proj", None)
    return up if up is not None else getattr(module, "up_proj", None)


def _transposed_with_biases(module) -> bool:
    """gpt-oss's experts: gate_up_proj [E, D, 2F] and down_proj [E, F, D] applied as x @ W, with biases [E, 2F] and
    [E, D], and their own _apply_gate."""
    return (getattr(module, "is_transposed", False) is True and hasattr(module, "_apply_gate")
            and all(hasattr(module, n) for n in ("gate_up_proj_bias", "down_proj_bias")))


def _route_experts_round_robin(model) -> int:
    """Swap the forward of every stacked-experts module (3-D gate_up_proj, or up_proj without a gate, and down_proj)
    for the round robin."""
    routed = 0
    for module in model.modules():
        weights = _up(module), getattr(module, "down_proj", None)
        transposed = _transposed_with_biases(module)
        if all(getattr(w, "ndim", 0) == 3 for w in weights) and (hasattr(module, "act_fn") or transposed):
            if not transposed and any(n.endswith("_bias") for n, _ in module.named_parameters(recurse=False)):
                raise TfcalcError(f"{type(module).__name__}: experts with biases are not traced on meta yet")
            module.forward = types.MethodType(_round_robin_experts, module)
            routed += 1
    return routed


def trace(model, workload: Workload, encoder_decoder: bool,
          images: tuple[int, tuple[int, int], bool] | None = None) -> tuple[int, dict[str, int], int]:
    """(total FLOPs, each module's own FLOPs by path, FLOPs outside any submodule) of one forward on meta; `images`:
    (channels, (height, width), whether that is not the config's image size) of a model of images' input."""
    import inspect

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.zeros(workload.batch_size, workload.seq_len, dtype=torch.long, device="meta")
    inputs = {"input_ids": ids}
    if images is not None:  # a model of images: pixel_values [B, C, H, W], the position table interpolated to them
        channels, (H, W), interpolate = images
        inputs = {"pixel_values": torch.empty(workload.batch_size, channels, H, W, device="meta"),
                  "interpolate_pos_encoding": interpolate}
    if encoder_decoder:
        src = torch.zeros(workload.batch_size, workload.src_len or workload.seq_len, dtype=torch.long, device="meta")
        inputs = {"input_ids": src, "decoder_input_ids": ids}
    if "use_cache" in inspect.signature(model.forward).parameters:
        # a cache, even unused: without one (and without a mask) transformers inspects position ids for packed
        # sequences, which reads data (.item() on meta)
        inputs["use_cache"] = True
    with warnings.catch_warnings(), torch.no_grad(), FlopCounterMode(display=False) as counter:
        warnings.simplefilter("ignore")
        model(**inputs)
    root = type(model).__name__
    inclusive = {name.removeprefix(root + "."): sum(ops.values())
                 for name, ops in counter.get_flop_counts().items() if name.startswith(root + ".")}
    own = dict(inclusive)
    total = outside = counter.get_total_flops()
    for name, value in inclusive.items():  # subtract each module from its nearest counted ancestor (or the root)
        parent = _ancestor(name, inclusive)
        if parent is None:
            outside -= value
        else:
            own[parent] -= value
    return total, {k: v for k, v in own.items() if v}, outside


def _ancestor(name: str, counted: dict) -> str | None:
    while "." in name:
        name = name.rpartition(".")[0]
        if name in counted:
            return name
    return None


def parameters(model) -> dict[str, int]:
    """numel per parameter name, tied weights once (named_parameters drops repeats)."""
    return {name: p.numel() for name, p in model.named_parameters()}


# ---- the comparison ------------------------------------------------------------------------------------------------

def _rows(figure: str, model_type: str, analytic: dict[str, int], measured: dict[str, int], total_analytic: int,
          total_measured: int, explain) -> list[HfRow]:
    mapped: Counter[str] = Counter()
    unmapped: Counter[str] = Counter()
    for name, value in measured.items():
        component = component_of(model_type, name)
        if component is None:
            unmapped[re.sub(r"\.\d+\.", ".*.", name)] += value
        else:
            mapped[component] += value
    for fused in [c for c in mapped if "+" in c]:  # the sum of the parts tfcalc counts, in the place of the first
        parts = fused_parts(fused)  # (none counted: a row of its own, 0 against transformers')
        first = next((k for k in analytic if k in parts), None)
        merged = sum(analytic.get(p, 0) for p in parts)
        analytic = {(fused if k == first else k): (merged if k == first else v)
                    for k, v in analytic.items() if k == first or k not in parts}
    rows = []
    for component in dict.fromkeys([*analytic, *mapped]):
        a, t = analytic.get(component, 0), mapped.get(component, 0)
        if a or t:
            rows.append(explain(HfRow(figure, component, a, t, a == t)))
    for name, value in unmapped.items():
        rows.append(HfRow(figure, f"(unmapped) {name}", None, value, None,
                          "no rule of this family's table maps this module; in the total"))
    rows.append(explain(HfRow(figure, "total", total_analytic, total_measured, total_analytic == total_measured)))
    return rows


def _explainer(family: registry.Family, raw: dict, spec: ModelSpec, workload: Workload | None = None):
    """Say why a row differs; mark the documented differences (the family's `known` hook)."""

    def explain(row: HfRow) -> HfRow:
        if row.match:
            return row
        diff = row.transformers - row.analytic
        if family.known is not None:
            note = family.known(registry.Difference(row.figure, row.component, row.analytic, row.transformers, raw,
                                                    spec, workload))
            if note is not None:
                return HfRow(row.figure, row.component, row.analytic, row.transformers, False, f"known: {note}",
                             known=True)
        side = "transformers has" if diff > 0 else "tfcalc counts"
        return HfRow(row.figure, row.component, row.analytic, row.transformers, False,
                     f"{side} {abs(diff):,} more: the formula or the name mapping is wrong here")

    return explain


def _guarded(path: Path, step, *args, **kwargs):
    """transformers' own errors (a config it refuses, a forward that reads data on meta) as one line."""
    try:
        return step(*args, **kwargs)
    except TfcalcError:
        raise
    except Exception as e:  # noqa: BLE001 - anything transformers raises is reported by name, not a traceback
        what = "build its model from" if step in (build, build_language_model) else "run its model (meta device) for"
        raise TfcalcError(f"{path}: transformers could not {what} this config: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}") from None


def compare(path: str | Path, spec: ModelSpec, workload: Workload, overrides: dict | None = None) -> HfReport:
    """Hold tfcalc's counts for the config at `path` (with the spec's block counts) against transformers' class
    built from it on meta: parameters and one forward over the workload's tokens (phase train), per component.
    `overrides`: the spec flags given (named in a note when they cannot be written into the config); None: any
    field of `spec` that differs from the config's."""
    from .. import hf
    from ..counts import count
    from .components import comparable

    path, raw = read_raw(path)
    model_type = raw["model_type"]
    notes: list[str] = []
    wrapper = None
    if registry.family(model_type).nested is not None:  # a multimodal config: its language model, as tfcalc reads it
        wrapper, inner_raw = raw, hf.language_model(raw, model_type, path, [])[0]
        key = registry.family(model_type).nested[1]
        notes.append(f"{model_type}: transformers' generation class built from the whole config; its language model "
                     f"and lm_head compared ({inner_raw['model_type']}, from {key}), the other towers and the "
                     "projector left out on both sides")
        raw, model_type = inner_raw, inner_raw["model_type"]
    raw, spec = _config_for(path, raw, spec, notes, overrides, wrapper)
    if workload.phase != "train":
        notes.append(f"phase {workload.phase}: transformers is compared on a full forward (phase train) over the "
                     f"{workload.keys:,} tokens per sequence the step sees, without a KV cache")
    images = None
    if spec.inputs == "images":  # the images the workload gives (the tokens follow from them); the spec's seq_len is
        sizes = spec.sizes("patch_embedding")  # the model's own image
        image = workload.image_size or (sizes.height, sizes.width)
        images = sizes.channels, image, image != (sizes.height, sizes.width)
        work = Workload(batch_size=workload.batch_size, seq_len=sizes.tokens(*image), image_size=image)
        spec = spec.replace(batch_size=work.batch_size)
    else:
        work = Workload(batch_size=workload.batch_size, seq_len=workload.keys,
                        src_len=(workload.src_len or workload.seq_len) if spec.is_encoder_decoder else None)
        spec = spec.replace(batch_size=work.batch_size, seq_len=work.seq_len)
    result = count(spec, work)
    if wrapper is not None:
        model, routed = _guarded(path, build_language_model, wrapper)
    else:
        model, routed = _guarded(path, build, raw, lm_head=spec.lm_head, encoder_decoder=spec.is_encoder_decoder,
                                 classifier=spec.n_classes is not None)
    if routed:
        notes.append("MoE on meta: transformers' eager experts route with nonzero (no meta kernel); their forward "
                     f"is replaced in {routed} blocks by a round robin over the same weights (slot t*k+j to expert "
                     "(t*k+j) mod E): every token through k experts, as with any routing")
    total, own, outside = _guarded(path, trace, model, work, spec.is_encoder_decoder, images)
    params = parameters(model)
    by_module: Counter[str] = Counter()
    for name, n in params.items():  # by module; a parameter a rule names itself (gpt-oss's self_attn.sinks): by name
        by_module[name if component_of(model_type, name) is not None else name.rpartition(".")[0]] += n
    explain = _explainer(registry.family(model_type), raw, spec, work)
    mapped = table(model_type) is not None
    if not mapped:
        notes.append(f"no name table for {model_type}: totals compared, not components")
    rows = _rows("params", model_type, result.params.components if mapped else {},
                 dict(by_module) if mapped else {}, result.params.total, sum(params.values()),
                 explain)
    fwd = _rows("forward", model_type, comparable(result.flops.components) if mapped else {},
                own if mapped else {}, result.flops.forward, total, explain)
    if outside:
        fwd.insert(-1, HfRow("forward", "(outside any module)", None, outside, None,
                             "counted at the model's top level; in the total"))
    return HfReport(model_type, type(model).__name__, work, rows + fwd, notes=notes)


def traced(path: str | Path, overrides: dict[str, Any]) -> HfReport:
    """transformers' totals for a model_type tfcalc does not model: parameters and one forward on meta."""
    from ..hf import SEQ_LEN_CAP

    path, raw = read_raw(path)
    model_type = raw["model_type"]
    notes = [(f"tfcalc does not model {model_type} yet: these are transformers' own figures, nothing to compare "
              "(exit code 0)")]
    raw = dict(raw)
    if "n_layers" in overrides:
        raw["num_hidden_layers"] = overrides["n_layers"]
        if isinstance(raw.get("layer_types"), list):
            raw["layer_types"] = raw["layer_types"][:overrides["n_layers"]]
        notes.append(f"built with num_hidden_layers={overrides['n_layers']} (from the layer override)")
    ignored = sorted(set(overrides) - {"n_layers", "seq_len", "batch_size"})
    if ignored:
        notes.append(f"overrides not applied (tfcalc cannot map them for {model_type}): {', '.join(ignored)}")
    model, routed = _guarded(path, build, raw)
    if routed:
        notes.append(f"MoE experts in {routed} blocks traced with a round robin on meta (see docs/verification.md)")
    config = model.config
    positions = next((getattr(config, k) for k in ("max_position_embeddings", "n_positions")
                      if isinstance(getattr(config, k, None), int)), 2048)
    seq_len = overrides.get("seq_len", min(positions, SEQ_LEN_CAP))
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    work = Workload(batch_size=overrides.get("batch_size", 1), seq_len=seq_len,
                    src_len=seq_len if encoder_decoder else None)
    total, _, _ = _guarded(path, trace, model, work, encoder_decoder)
    n_params = sum(parameters(model).values())
    rows = [HfRow("params", "total", None, n_params, None), HfRow("forward", "total", None, total, None)]
    return HfReport(model_type, type(model).__name__, work, rows, traced=True, notes=notes)
