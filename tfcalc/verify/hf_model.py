"""`tfcalc check --hf-config`: the analytic counts held against transformers' own model class.

The reference model (checker.py) is written from the same spec as the formulas; this holds the spec itself against
the real implementation. transformers builds its class from the config.json on the meta device (nothing allocated,
no weights, no network), with eager attention and eager experts, and one forward pass runs under torch's
FlopCounterMode. The class is the one `architectures` names for a family that reads that field (vit, the CLIP and SigLIP
towers), else the Auto class for what tfcalc counts (a tower no Auto class maps: the class its config is named for). Parameters: sum(numel) with tied weights once (named_parameters drops duplicates). Per component:
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
import os
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
    """The module-name table of `model_type` (registered now), or None. A whole multimodal config's: its own rules
    (the connectors, the head) and each tower's family's under the tower's prefix (registry.Family.prefixes), the
    vision tower's components under "vision/"."""
    if model_type not in registry.REGISTRY:
        return None
    family = registry.family(model_type)
    if not family.towers or not family.prefixes:
        return family.components
    return _whole_table(model_type)


@functools.cache
def _whole_table(model_type: str) -> tuple[tuple[str, str], ...]:
    family = registry.family(model_type)
    rules = list(family.components or ())
    for tower, prefix in family.prefixes.items():
        # a tower of several kinds (LLaVA's CLIP or Pixtral tower): every kind's rules (their module names differ)
        for inner in (family.nested[0],) if tower == "text" else registry.tower_types(family.towers[tower]):
            for pattern, component in table(inner) or ():
                # a language model's table names its causal-LM class's modules: its base model's `model.` is the prefix
                pattern = prefix + (pattern.removeprefix(r"model\.") if tower == "text" else pattern)
                rules.append((pattern, component if tower == "text" else f"{tower}/{component}"))
    return tuple(rules)


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


_WORKLOAD_FIELDS = {"name", "seq_len", "batch_size", "tower"}


def _config_for(path: Path, raw: dict, spec: ModelSpec, notes: list[str],
                overrides: dict | None = None, wrapper: dict | None = None) -> tuple[dict, ModelSpec]:
    """The config transformers builds, with the spec's block counts (-L) written in, and the spec tfcalc reads from
    that same config: both sides count one architecture. Other overrides cannot be written into a config; they are
    named in a note and the config's own values are compared. `wrapper`: the multimodal config whose language model
    `raw` is; the counts are written into it too (`wrapper` is updated in place), where its class reads them."""
    from ..hf import read_hf_config

    model_type = raw["model_type"]
    base = read_hf_config(path).spec
    if base.towers:  # --tower vision of a whole multimodal config: that tower's spec
        from ..arch.towers import select

        base = select(base, {"images": "vision", "tokens": "text"}.get(spec.inputs, spec.inputs))
    raw = dict(raw)
    changed, written_in = [], {}
    for key, field_name in _layer_keys(registry.family(model_type), raw).items():
        if getattr(spec, field_name) != getattr(base, field_name):
            raw[key] = written_in[key] = getattr(spec, field_name)
            changed.append(f"{key}={raw[key]}")
            for per_block in ("layer_types", "no_rope_layers"):  # lists of one entry per block (Llama 4's too)
                if isinstance(raw.get(per_block), list) and field_name == "n_layers":
                    raw[per_block] = written_in[per_block] = raw[per_block][:raw[key]]
    if changed:
        notes.append(f"transformers' model built with {', '.join(changed)} (from the layer override)")
        if wrapper is not None:
            _write_text_fields(wrapper, written_in)
        with tempfile.TemporaryDirectory() as folder:
            written = Path(folder) / "config.json"
            written.write_text(json.dumps(wrapper if wrapper is not None else raw))
            base = read_hf_config(written).spec.replace(name=base.name)
            if base.towers:  # a whole multimodal config rewritten: its text tower, compared here
                from ..arch.towers import select

                base = select(base, "text")
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
    if multimodal and lm_head:  # the generation class of a multimodal config (Voxtral's is Seq2SeqLM's; a causal
        # LM's last: Qwen3.5 maps its multimodal config to a text-only class)
        auto = [transformers.AutoModelForImageTextToText, transformers.AutoModelForSeq2SeqLM,
                transformers.AutoModelForCausalLM]
    elif multimodal:  # a dual encoder (CLIPModel, SiglipModel)
        auto = [transformers.AutoModel]
    elif classifier:  # a classifier on the first token (ViTForImageClassification)
        auto = [transformers.AutoModelForImageClassification, *auto]
    elif encoder_decoder:  # with its head (of audio: WhisperForConditionalGeneration), or bare (WhisperModel)
        auto = [transformers.AutoModelForSeq2SeqLM, transformers.AutoModelForSpeechSeq2Seq,
                transformers.AutoModelForCausalLM, *auto] if lm_head else auto
    elif lm_head:  # (a multimodal config that no causal LM maps: its generation class, AutoModelForImageTextToText's)
        auto = [transformers.AutoModelForCausalLM, transformers.AutoModelForSeq2SeqLM,
                transformers.AutoModelForImageTextToText, *auto]
    for factory in auto:
        mapping = factory._model_mapping
        if type(config) in mapping:
            return mapping[type(config)]
    if lm_head:  # a language model no auto class maps (Mllama's mllama_text_model): its module's *ForCausalLM
        import importlib

        module = importlib.import_module(type(config).__module__.replace(".configuration_", ".modeling_"))
        for name, cls in vars(module).items():
            if name.endswith("ForCausalLM") and getattr(cls, "config_class", None) is type(config):
                return cls
    # a tower no Auto class maps (SiglipTextConfig): the model class its config class is named for
    cls = getattr(transformers, type(config).__name__.removesuffix("Config") + "Model", None)
    if cls is not None and getattr(cls, "config_class", None) is type(config):
        return cls
    own = _own_class(config)  # (Qwen2-VL's vision config): its modeling module's one class for it
    if own is not None:
        return own
    raise TfcalcError(f"transformers has no model class for {type(config).__name__}")


def _own_class(config):
    """The one model class of `config`'s modeling module whose config_class is its type (Qwen2VLVisionConfig:
    Qwen2VisionTransformerPretrainedModel), else None."""
    import importlib
    import inspect

    try:
        module = importlib.import_module(type(config).__module__.replace(".configuration_", ".modeling_"))
    except ImportError:
        return None
    found = [k for k in vars(module).values() if inspect.isclass(k) and getattr(k, "config_class", None) is type(config)
             and hasattr(k, "_from_config")]
    return found[0] if len(found) == 1 else None


def build(raw: dict, lm_head: bool = True, encoder_decoder: bool = False, classifier: bool = False,
          named: str | None = None, multimodal: bool = False):
    """transformers' model of `raw` (a config.json's object) on the meta device: eager attention, eager experts.
    `named`: the class to build (the one `architectures` names, for a family that reads it), else by the Auto
    classes (`multimodal`: a vision-language model's generation class)."""
    import torch
    import transformers

    fields = {k: v for k, v in raw.items() if k != "model_type"}
    config = transformers.AutoConfig.for_model(raw["model_type"], **fields)
    cls = getattr(transformers, named, None) if named else None
    if cls is None or getattr(cls, "config_class", None) is not type(config):
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

        def forward(self, input_ids, use_cache=None, **inputs):  # (Mllama's cross_attention_states, passed on)
            return self.lm_head(self.model(input_ids=input_ids, use_cache=use_cache, **inputs).last_hidden_state)

    decoder = model.get_decoder()
    if getattr(decoder, "lm_head", None) is not None:  # a whole causal LM inside (Llama 4's Llama4ForCausalLM, which
        decoder = decoder.model  # get_decoder returns as it is): its own decoder
    view = LanguageModel(decoder, model.get_output_embeddings()).eval()
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
    import inspect

    routed = 0
    for module in model.modules():
        weights = _up(module), getattr(module, "down_proj", None)
        transposed = _transposed_with_biases(module)
        if len(inspect.signature(module.forward).parameters) == 1:
            continue  # experts that take the tokens alone (Llama 4's: every expert over every token, no routing)
        if all(getattr(w, "ndim", 0) == 3 for w in weights) and (hasattr(module, "act_fn") or transposed):
            if not transposed and any(n.endswith("_bias") for n, _ in module.named_parameters(recurse=False)):
                raise TfcalcError(f"{type(module).__name__}: experts with biases are not traced on meta yet")
            module.forward = types.MethodType(_round_robin_experts, module)
            routed += 1
    return routed


def trace(model, workload: Workload, encoder_decoder: bool,
          images: tuple[int, tuple[int, int], bool, int] | None = None, mel_bins: int | None = None,
          inputs: dict | None = None, patches: tuple[int, int, int, tuple[int, int]] | None = None,
          cross: tuple[int, int] | None = None) -> tuple[int, dict[str, int], int]:
    """(total FLOPs, each module's own FLOPs by path, FLOPs outside any submodule) of one forward on meta; `images`:
    (channels, (height, width), whether that is not the config's image size, the patch's side) of a model of images'
    input; `mel_bins`: a model of audio's, its encoder reading [B, mel_bins, workload.mel_frames]; `inputs`: the
    forward's inputs, given whole (a multimodal model's); `patches`: (channels, temporal patch, patch, (height,
    width)) of a vision tower that reads its images as the Qwen2-VL processor lays them out, pixel_values
    [patches, C*T*p*p] and grid_thw [images, 3] (each row 1, H/p, W/p); `cross`: (tokens, width) of the states a
    decoder-only model's cross-attention blocks attend to (Mllama's cross_attention_states, the projected vision
    tokens)."""
    import inspect

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.zeros(workload.batch_size, workload.seq_len, dtype=torch.long, device="meta")
    given, inputs = inputs, {"input_ids": ids}
    patchified = "spatial_shapes" in inspect.signature(model.forward).parameters
    if given is not None:
        inputs = dict(given)
    elif images is not None and patchified:  # SigLIP2 (NaFlex): patches flattened [B, patches, C*p*p], each image's
        channels, (H, W), _, p = images  # grid; no padding (no mask)
        B = workload.batch_size
        inputs = {"pixel_values": torch.empty(B, (H // p) * (W // p), channels * p * p, device="meta"),
                  "spatial_shapes": torch.empty(B, 2, dtype=torch.long, device="meta"), "pixel_attention_mask": None}
    elif images is not None:  # a model of images: pixel_values [B, C, H, W], the table interpolated to them
        channels, (H, W), interpolate, _ = images
        inputs = {"pixel_values": torch.empty(workload.batch_size, channels, H, W, device="meta"),
                  "interpolate_pos_encoding": interpolate}
    if patches is not None:
        inputs = _patch_inputs(model, workload.batch_size, *patches)
    if encoder_decoder:
        src = torch.zeros(workload.batch_size, workload.src_len or workload.seq_len, dtype=torch.long, device="meta")
        inputs = {"input_ids": src, "decoder_input_ids": ids}
    if mel_bins is not None:  # Whisper: the mel frames [B, mel_bins, F], then the decoder's tokens
        mel = torch.empty(workload.batch_size, mel_bins, workload.mel_frames, device="meta",
                          dtype=next(model.parameters()).dtype)  # in the model's dtype (a config's torch_dtype)
        inputs = {"input_features": mel, **({"decoder_input_ids": ids} if encoder_decoder else {})}  # (an audio
        # encoder alone: the mel frames only)
    if cross is not None:  # [B, tokens, hidden_size]
        inputs["cross_attention_states"] = torch.empty(workload.batch_size, *cross, device="meta")
    if "use_cache" in inspect.signature(model.forward).parameters:
        # a cache, even unused: without one (and without a mask) transformers inspects position ids for packed
        # sequences, which reads data (.item() on meta)
        inputs["use_cache"] = True
    # SigLIP2's checks of its spatial shapes read data (none on meta): transformers' own switch turns them off
    checks = os.environ.get("TRANSFORMERS_DISABLE_TORCH_CHECK")
    quiet = patchified or given is not None  # and a multimodal model's count of its image tokens
    if quiet:
        os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = "1"
    try:
        with warnings.catch_warnings(), torch.no_grad(), FlopCounterMode(display=False) as counter:
            warnings.simplefilter("ignore")
            model(**inputs)
    finally:
        if quiet:
            if checks is None:
                os.environ.pop("TRANSFORMERS_DISABLE_TORCH_CHECK", None)
            else:
                os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = checks
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


def trace_parts(parts: list[tuple[str, Any, dict]]) -> tuple[int, dict[str, int], int]:
    """(total FLOPs, each module's own FLOPs by its path in the whole model, FLOPs outside any submodule) of a whole
    model traced part by part on meta: each (prefix of its path, the submodule, its forward's inputs) (a vision tower
    on its patches and grid, the language model on the merged embeddings, the head on its hidden states)."""
    total, own, outside = 0, {}, 0
    for prefix, module, inputs in parts:  # prefix "": the model itself (a tower's own class)
        t, o, rest = trace(module, Workload(seq_len=1), False, inputs=inputs)
        total += t
        own.update({f"{prefix}.{name}" if prefix else name: v for name, v in o.items()})  # "": the model itself
        if rest:
            own[prefix] = own.get(prefix, 0) + rest  # the part's own work (a head is one module: all of it)
    return total, own, outside


def _patch_inputs(model, images: int, channels: int, frames: int, p: int, hw: tuple[int, int]) -> dict:
    """A vision tower's inputs as the Qwen2-VL processor gives them: every image's patches, one row of C*T*p*p
    pixels each, and grid_thw (1, H/p, W/p) per image. grid_thw stays on the CPU (the tower reads it with tolist());
    the rotary's position ids are computed from it as transformers does and handed in on meta, beside the model."""
    import torch
    from transformers.vision_utils import get_vision_position_ids

    rows, cols = hw[0] // p, hw[1] // p
    grid = torch.tensor([[1, rows, cols]] * images)
    position_ids = get_vision_position_ids(grid, model.config.spatial_merge_size).to("meta")
    pixels = torch.empty(images * rows * cols, channels * frames * p * p, device="meta")
    return {"hidden_states": pixels, "grid_thw": grid, "position_ids": position_ids}


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

    from ..arch.builders import cross_keys

    path, raw = read_raw(path)
    model_type = raw["model_type"]
    notes: list[str] = []
    # the tokens a decoder-only model's cross-attention blocks attend to, as the spec given counts them
    cross = (cross_keys(spec, workload) if spec.cross_attends and not spec.is_encoder_decoder else None)
    family = registry.family(model_type) if model_type in registry.REGISTRY else None
    if family is not None and family.towers and spec.towers:
        return _compare_whole(path, raw, spec, workload, overrides, notes)
    wrapper = None
    if family is not None and family.towers and (spec.inputs != "tokens" or not spec.lm_head):
        # one tower of a whole config (--tower vision; a dual encoder's --tower text): that tower's config alone
        tower = {"images": "vision", "tokens": "text"}.get(spec.inputs, spec.inputs)
        if tower == "text":
            inner_type, key = family.nested
        else:  # the kind its config names, of those the family reads
            key, accepted = family.towers[tower][1], registry.tower_types(family.towers[tower])
            named = (raw.get(key) or {}).get("model_type")
            inner_type = named if named in accepted else accepted[0]
        raw = {**(raw.get(key) or {}), "model_type": inner_type}
        notes.append(f"{model_type}: transformers' {tower} tower built from {key} ({inner_type}), as tfcalc reads it")
        model_type = inner_type
    elif registry.family(model_type).nested is not None:  # a multimodal config: its language model, as tfcalc reads it
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
    images = mel_bins = patches = packed = None
    if spec.inputs == "audio":  # transformers runs exactly the window of mel frames (its feature extractor pads to it)
        sizes = spec.sizes("audio_conv")
        mel_bins = sizes.mel_bins
        if not sizes.whole_windows:  # a clip as long as it is (Gemma 4's tower: its family traces it, [B, F, mel])
            frames = workload.mel_frames or sizes.window
            work = Workload(batch_size=workload.batch_size, seq_len=sizes.tokens(frames), mel_frames=frames)
        elif workload.mel_frames not in (None, sizes.window):
            notes.append(f"transformers runs a whole window of {sizes.window:,} mel frames (its feature extractor pads "
                         f"the audio to it; WhisperEncoder refuses another length): compared there, not at the "
                         f"workload's {workload.mel_frames:,}")
        if not sizes.whole_windows:
            pass  # (work set above: the clip's own frames)
        elif spec.is_encoder_decoder:
            work = Workload(batch_size=workload.batch_size, seq_len=workload.keys, src_len=sizes.positions,
                            mel_frames=sizes.window)
        else:  # an audio encoder alone (a multimodal model's audio tower): its tokens are the window's
            work = Workload(batch_size=workload.batch_size, seq_len=sizes.positions, mel_frames=sizes.window)
        spec = spec.replace(batch_size=work.batch_size, seq_len=work.seq_len)
    elif spec.inputs == "images":  # the images the workload gives (the tokens follow from them); the spec's seq_len is
        sizes = spec.sizes("patch_embedding")  # the model's own image
        image = workload.image_size or (sizes.height, sizes.width)
        images = sizes.channels, image, image != (sizes.height, sizes.width), sizes.patch_size
        tokens = sizes.tokens(*image)
        if sizes.packed:  # Pixtral: the workload's images one sequence, pixel_values [images, C, H, W]
            import torch

            k = workload.seq_len // tokens if workload.seq_len % tokens == 0 else 1
            packed = {"pixel_values": torch.empty(k, sizes.channels, *image, device="meta")}
            work = Workload(batch_size=1, seq_len=k * tokens, image_size=image)
        elif not sizes.class_token and spec.positions == "rotary":  # a Qwen2-VL tower: patches and grid_thw
            patches, images = (sizes.channels, sizes.temporal_patch_size, sizes.patch_size, image), None
        if not sizes.packed:
            work = Workload(batch_size=workload.batch_size, seq_len=tokens, image_size=image)
        spec = spec.replace(batch_size=work.batch_size)
    else:
        work = Workload(batch_size=workload.batch_size, seq_len=workload.keys,
                        src_len=(workload.src_len or workload.seq_len) if spec.is_encoder_decoder else cross)
        spec = spec.replace(batch_size=work.batch_size, seq_len=work.seq_len)
    result = count(spec, work)
    if wrapper is not None:
        model, routed = _guarded(path, build_language_model, wrapper)
    else:
        # a family that reads `architectures` (its types name it) counts the class it names: build that one
        given = raw.get("architectures") if "architectures" in registry.family(model_type).types else None
        model, routed = _guarded(path, build, raw, lm_head=spec.lm_head, encoder_decoder=spec.is_encoder_decoder,
                                 classifier=spec.n_classes is not None,
                                 named=given[0] if isinstance(given, list) and given else None)
    if routed:
        notes.append("MoE on meta: transformers' eager experts route with nonzero (no meta kernel); their forward "
                     f"is replaced in {routed} blocks by a round robin over the same weights (slot t*k+j to expert "
                     "(t*k+j) mod E): every token through k experts, as with any routing")
    parts = registry.family(model_type).hf_trace if wrapper is None else None
    if parts is not None:  # a class whose forward cannot run on meta (it reads values): traced part by part
        total, own, outside = _guarded(path, trace_parts, parts(model, spec, work))
    else:
        total, own, outside = _guarded(path, trace, model, work, spec.is_encoder_decoder, images, mel_bins,
                                       inputs=packed, patches=patches,
                                       cross=None if cross is None else (cross, spec.d_model))
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


def _compare_whole(path: Path, raw: dict, spec: ModelSpec, workload: Workload, overrides: dict | None,
                   notes: list[str]) -> HfReport:
    """A whole multimodal config against transformers' whole class: every tower, the connectors and the head, on
    the text tokens and the images of the workload (phase train), per component (each tower's by its family's table
    under its prefix: `table`)."""
    import inspect

    import torch

    from ..arch.towers import image_size
    from ..counts import count
    from ..hf import read_hf_config
    from .components import comparable

    model_type = raw["model_type"]
    family = registry.family(model_type)
    base = read_hf_config(path).spec
    if spec.replace(name=base.name, seq_len=base.seq_len, batch_size=base.batch_size) != base:
        notes.append("overrides not written into a whole multimodal config: both sides count the config's own "
                     "(--tower text or --tower vision writes -L into that tower's)")
    if workload.phase != "train":
        notes.append(f"phase {workload.phase}: transformers is compared on a full forward (phase train) over the "
                     f"{workload.keys:,} tokens per sequence the step sees, without a KV cache")
    work = Workload(batch_size=workload.batch_size, seq_len=workload.keys, images=workload.images,
                    image_size=workload.image_size, mel_frames=workload.mel_frames)
    spec = base.replace(batch_size=work.batch_size, seq_len=base.seq_len)
    result = count(spec, work)
    model, routed = _guarded(path, build, raw, lm_head=spec.lm_head, multimodal=True)
    if routed:
        notes.append(f"MoE on meta: the eager experts of {routed} blocks route round robin (as for a language model)")
    inputs = {"input_ids": torch.zeros(work.batch_size, work.seq_len, dtype=torch.long, device="meta")}
    if "vision" in spec.towers:
        H, W = image_size(spec, work)
        channels = spec.towers["vision"].sizes("patch_embedding").channels
        inputs["pixel_values"] = torch.empty(work.images or 1, channels, H, W, device="meta")
        sizes = spec.towers["vision"].sizes("patch_embedding")
        if (H, W) != (sizes.height, sizes.width) and "interpolate_pos_encoding" in inspect.signature(
                model.forward).parameters:  # another size than the tower's own: its position table interpolated
            inputs["interpolate_pos_encoding"] = True
    if family.hf_trace is not None:  # a class whose whole forward cannot run on meta: traced part by part
        total, own, outside = _guarded(path, trace_parts, family.hf_trace(model, spec, work))
    else:
        total, own, outside = _guarded(path, trace, model, work, False, inputs=inputs)
    if outside and component_of(model_type, "") is not None:  # the whole class's own work (a dual encoder's logits)
        own, outside = {**own, "": outside}, 0
    params = parameters(model)
    by_module: Counter[str] = Counter()
    for name, n in params.items():
        by_module[name if component_of(model_type, name) is not None else name.rpartition(".")[0]] += n
    explain = _explainer(family, raw, spec, work)
    rows = _rows("params", model_type, result.params.components, dict(by_module), result.params.total,
                 sum(params.values()), explain)
    fwd = _rows("forward", model_type, comparable(result.flops.components), own, result.flops.forward, total, explain)
    if outside:
        fwd.insert(-1, HfRow("forward", "(outside any module)", None, outside, None,
                             "counted at the model's top level; in the total"))
    what = [f"{work.images or 1} image(s)"] if "vision" in spec.towers else []
    if "audio" in spec.towers:
        from ..arch.towers import audio_windows

        what.append(f"{audio_windows(spec, work)} window(s) of audio")
    notes.append(f"{model_type}: transformers' whole class, every tower on the workload's text tokens and "
                 f"{' and '.join(what)}")
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
