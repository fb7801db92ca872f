"""Every kind of figure tfcalc gives, held against its oracle, written to docs/accuracy.md (issue 22).

    PYTHONPATH=. python benchmarks/accuracy.py [--quick] [--out PATH]

The oracles are the project's own (nothing here is a second implementation of one):
- parameters: transformers' class built on the meta device from each preset's published config.json, as the test
  files keep them (tests/test_hf*.py, tests/test_quant.py; `tfcalc.verify.hf_model.build`);
- FLOPs per phase: FlopCounterMode and fvcore on tfcalc's reference model (`tfcalc.verify.checker.check`);
- KV cache and recurrent state: transformers' own cache after a prefill on meta (the tensors it keeps);
- training memory per category and peak: torch's MemTracker (`tfcalc.verify.memory_check.check_memory`);
- per parallel layout: torch.distributed on a fake process group (`check_memory(..., layout=...)`);
- quantized checkpoint bytes: the published safetensors totals tests/test_quant.py pins.
Rows that have no oracle are listed as such, never dropped. `--quick` runs a small subset (tests/test_accuracy.py).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("params", "flops", "kv cache / state", "training memory", "parallel memory", "quantized bytes",
         "serving capacity")


@dataclass
class Row:
    kind: str
    model: str
    case: str  # the workload, layout or category
    tfcalc: int | None
    oracle: int | None
    oracle_name: str
    promise: float = 0.0  # what the docs promise: 0 exact, else a relative bound
    note: str = ""
    explained: int = 0  # bytes a named cause accounts for (the check's `known`)

    @property
    def difference(self) -> int | None:
        return None if self.tfcalc is None or self.oracle is None else self.oracle - self.tfcalc

    @property
    def percent(self) -> float | None:
        d = self.difference
        if d is None:
            return None
        return 100.0 * d / self.oracle if self.oracle else (0.0 if d == 0 else float("inf"))

    @property
    def exact(self) -> bool:
        return self.difference == 0

    @property
    def kept(self) -> bool | None:
        """Within what the docs promise (an exact row: equal, or off by the bytes of a named cause)."""
        d = self.difference
        if d is None:
            return None
        if self.promise == 0:
            return d == self.explained
        return abs(self.percent) <= 100 * self.promise

    def to_dict(self) -> dict:
        return {"kind": self.kind, "model": self.model, "case": self.case, "tfcalc": self.tfcalc,
                "oracle": self.oracle, "oracle_name": self.oracle_name, "difference": self.difference,
                "percent": self.percent, "promise": self.promise, "explained": self.explained,
                "kept": self.kept, "note": self.note}


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, *rows: Row) -> None:
        self.rows.extend(rows)

    def failed(self, kind: str, model: str, case: str, oracle_name: str, error: BaseException) -> None:
        """A comparison that could not run: a row with no figure and the reason, never dropped."""
        text = str(error).splitlines()[0] if str(error) else ""
        self.add(Row(kind, model, case, None, None, oracle_name, note=f"not compared: {type(error).__name__}: "
                                                                        f"{text}"[:200]))


def _quiet():
    warnings.simplefilter("ignore")
    import transformers

    transformers.logging.set_verbosity_error()


# ------------------------------------------------------------------------------------------------- configs


def _tests_module(name: str):
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "tests"))


def published_configs(quick: bool = False) -> dict[str, tuple[dict, str]]:
    """preset -> (its published config.json as a test file keeps it, where). Only presets a test pins to
    transformers' class from a published config are here; the rest are listed as having none. `quick`: those of
    tests/test_hf.py only (importing every family's test file takes seconds)."""
    from tfcalc import list_presets

    names = {p.name for p in list_presets()}
    out: dict[str, tuple[dict, str]] = {}

    def put(preset, config, where):
        if preset in names and preset not in out and isinstance(config, dict):
            out[preset] = (config, where)

    tables = (("test_hf", "PUBLISHED"), ("test_hf_alibi", "PUBLISHED"), ("test_hf_families_more", "PUBLISHED"),
              ("test_hf_parallel", "PUBLISHED"), ("test_hf_deepseek", "PUBLISHED_V2"))
    for module, attr in tables[:1] if quick else tables:
        for key, value in getattr(_tests_module(module), attr).items():
            if isinstance(value, tuple):
                preset = next((v for v in value[1:] if isinstance(v, str) and v in names), key)
                put(preset, value[0], f"tests/{module}.py {attr}[{key!r}]")
            else:
                put(key, value, f"tests/{module}.py {attr}[{key!r}]")
    singles = (("test_hf_deepseek", "DEEPSEEK_V3", "deepseek-v3"),
               ("test_hf_deepseek_v32", "DEEPSEEK_V32", "deepseek-v3.2"),
               ("test_hf_falcon_h1", "FALCON_H1_7B", "falcon-h1-7b"),
               ("test_hf_jamba", "JAMBA_15_MINI", "jamba-1.5-mini"),
               ("test_hf_lfm2", "LFM2_1_2B", "lfm2-1.2b"),
               ("test_mllama_whole", "PUBLISHED", "llama3.2-11b-vision"),
               ("test_hf_nemotron_h", "NEMOTRON_H_8B", "nemotron-h-8b"),
               ("test_hf_nemotron_h", "NEMOTRON_3_NANO", "nemotron-3-nano"),
               ("test_hf_qwen3_next", "QWEN3_NEXT_80B_A3B", "qwen3-next-80b-a3b"),
               ("test_hf_hybrid_presets", "QWEN3_5_0_8B_TEXT", "qwen3.5-0.8b"),
               ("test_hf_hybrid_presets", "QWEN3_5_35B_A3B_TEXT", "qwen3.5-35b-a3b"),
               ("test_hf_hybrid_presets", "GRANITE_4_0_H_SMALL", "granite4-h-small"),
               ("test_hf_hybrid_presets", "GRANITE_4_0_H_TINY", "granite4-h-tiny"),
               ("test_quant", "GPT_OSS_120B", "gpt-oss-120b"),
               ("test_llama4_whole", "SCOUT_WHOLE", "llama4-scout"),
               ("test_more_pins", "MAVERICK_WHOLE", "llama4-maverick"),
               ("test_whisper", "WHISPER_LARGE_V3", "whisper-large-v3"),
               ("test_towers_whole", "CLIP_L14", "clip-vit-l14"),
               ("test_more_pins", "SO400M", "siglip-so400m"),
               ("test_more_pins", "VIT_B16", "vit-b16"),
               ("test_more_pins", "VIT_L16", "vit-l16"),
               ("test_qwen3_vl_whole", "QWEN3_VL_8B", "qwen3-vl-8b"),
               ("test_voxtral_whole", "MINI", "voxtral-mini-3b"))
    if quick:
        return out
    for module, attr, preset in singles:
        put(preset, getattr(_tests_module(module), attr), f"tests/{module}.py {attr}")
    gpt_oss = _tests_module("test_hf_gpt_oss")  # the published config with its depth and experts per size
    put("gpt-oss-20b", gpt_oss._published(24, 32), "tests/test_hf_gpt_oss.py _published(24, 32)")
    wrappers = json.loads((ROOT / "tests" / "data" / "wrapper_configs.json").read_text())
    put("qwen2.5-vl-7b", wrappers["qwen2.5-vl-7b-instruct"]["config"],
        "tests/data/wrapper_configs.json ['qwen2.5-vl-7b-instruct']")
    pixtral = _tests_module("test_pixtral_whole")  # Mistral Small 3's outer config with 3.1's vision tower
    put("mistral-small-3.1-24b", {**wrappers["mistral-small-3-24b"]["config"],
                                  "vision_config": pixtral.MISTRAL_SMALL_31_VISION},
        "tests/data/wrapper_configs.json ['mistral-small-3-24b'] + tests/test_pixtral_whole.py MISTRAL_SMALL_31_VISION")
    whole = ROOT / "tests" / "data" / "gemma4_31b_config.json"  # gemma4-31b is whole: its published config whole
    put("gemma4-31b", json.loads(whole.read_text()), "tests/data/gemma4_31b_config.json")
    # gemma4-e2b is whole: its published text_config with its vision_config and audio_config (test_gemma4_audio.py)
    e2b_towers = json.loads((ROOT / "tests" / "data" / "gemma4_e2b_towers.json").read_text())
    e2b_text = json.loads((ROOT / "tests" / "data" / "gemma4_text_configs.json").read_text())["gemma-4-e2b"]
    put("gemma4-e2b", {"model_type": "gemma4", "text_config": e2b_text["text_config"], "tie_word_embeddings": True,
                       "vision_config": e2b_towers["vision_config"], "audio_config": e2b_towers["audio_config"]},
        "tests/data/gemma4_text_configs.json ['gemma-4-e2b'] + tests/data/gemma4_e2b_towers.json")
    gemma4 = _tests_module("test_hf_gemma4")
    for key, preset in gemma4.PRESETS.items():
        put(preset, gemma4.PUBLISHED[key], f"tests/data/gemma4_text_configs.json [{key!r}]")
    return out


def _language_model(config: dict) -> dict:
    """A multimodal config's text model, as tfcalc reads it (the vision tower is counted by neither side)."""
    text = config.get("text_config")
    if isinstance(text, dict) and "model_type" in text:
        tie = {"tie_word_embeddings": config["tie_word_embeddings"]} if "tie_word_embeddings" in config else {}
        return {**text, **tie}
    return config


# ---------------------------------------------------------------------------------------------- parameters


# Presets whose model has no transformers class to build
NO_CLASS = {
    "gpt3": "no transformers class: GPT-3 was never released (its shapes are the paper's, Brown et al. 2020)",
    "transformer-base": "no transformers class: the original Transformer (Vaswani et al. 2017)",
    "transformer-big": "no transformers class: the original Transformer (Vaswani et al. 2017)",
}


def run_params(res: Results, presets: list[str] | None, quick: bool = False) -> None:
    """Every preset with a published config: tfcalc's count against transformers' class on meta."""
    from tfcalc import count, list_presets, load_preset
    from tfcalc.verify import hf_model

    oracle = "transformers class, meta device: sum(numel), tied once"
    configs = published_configs(quick)
    every = sorted(p.name for p in list_presets())
    for name in every if presets is None else presets:
        if name not in configs:
            if presets is None:
                why = NO_CLASS.get(name) or NO_CLASS.get(name.split("-")[0]) or (
                    "transformers has a class for this family, but no published config.json of this model is "
                    "pinned in tests/: not compared (add one there to compare it)")
                res.add(Row("params", name, "total", count(load_preset(name)).params.total, None, "none",
                            note=why))
            continue
        config, where = configs[name]
        spec = load_preset(name)
        # a whole multimodal preset (its towers): the whole class; a language model's: its language model alone
        raw = {k: v for k, v in (config if spec.towers else _language_model(config)).items()
               if k != "quantization_config"}
        try:
            model, _ = hf_model.build(raw, lm_head=spec.lm_head, encoder_decoder=spec.is_encoder_decoder,
                                      classifier=spec.n_classes is not None, multimodal=bool(spec.towers))
            theirs = sum(hf_model.parameters(model).values())
            res.add(Row("params", name, "total", count(spec).params.total, theirs,
                        f"{type(model).__name__} ({oracle})", note=f"config: {where}"))
        except Exception as e:  # noqa: BLE001 - reported as a row
            res.failed("params", name, "total", oracle, e)


# ---------------------------------------------------------------------------------------------------- FLOPs

# Generated models: each preset with n_layers cut to 2 (a hybrid to one cycle of its pattern) and a short sequence
FLOP_PRESETS = ("gpt2", "bert-base", "llama3-8b", "mistral-7b", "mixtral-8x7b", "qwen3-8b", "gemma2-9b", "t5-small",
                "deepseek-v2-lite", "gpt-oss-20b", "vit-b16", "qwen3.5-0.8b", "nemotron-h-8b", "jamba-1.5-mini")
QUICK_FLOP_PRESETS = ("gpt2",)
SEQ = 64


def trimmed(name: str):
    """The preset with its stack cut to 2 blocks (or to one cycle of a longer block pattern) and seq_len 64."""
    from tfcalc import load_preset

    spec = load_preset(name)
    pattern = getattr(spec, "block_pattern", None) or []
    layers = max(2, len(pattern)) if len(pattern) <= 8 else 2
    fields = {"n_layers": layers}
    if spec.inputs != "images":
        fields["seq_len"] = SEQ
    try:
        return spec.replace(**fields), f"n_layers {layers}" + (f", seq_len {SEQ}" if "seq_len" in fields else "")
    except Exception:  # noqa: BLE001 - a spec that refuses the cut keeps its depth
        return spec.replace(seq_len=SEQ), f"seq_len {SEQ}, full depth"


def workloads(spec):
    from tfcalc import Workload

    if spec.inputs == "images":
        return {"train": None}  # the spec's own train step: its images' tokens
    out = {"train": Workload(seq_len=SEQ, phase="train")}
    if not spec.is_encoder_decoder and spec.lm_head:
        out["prefill"] = Workload(seq_len=SEQ, phase="prefill")
        out["decode"] = Workload(seq_len=1, context=SEQ - 1, phase="decode")
    return out


def _train_by_op(spec, workload) -> str:
    """FlopCounterMode's train step split by aten op beside its forward (a row that differs: where it differs)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tfcalc.reference import build_model, example_inputs

    model = build_model(spec, "meta", workload=workload)
    for module in model.modules():  # as check(train=True) runs it
        if hasattr(module, "explicit"):
            module.explicit = True
    model.requires_grad_(True)
    inputs = example_inputs(spec, "meta", workload)
    with torch.no_grad(), FlopCounterMode(display=False) as forward:
        model(*inputs)
    with FlopCounterMode(display=False) as step:
        out = model(*inputs)
        sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
    fwd = {str(k).removeprefix("aten."): v for k, v in forward.get_flop_counts()["Global"].items()}
    both = {str(k).removeprefix("aten."): v for k, v in step.get_flop_counts()["Global"].items()}
    parts = [f"{op} {n:,} (forward {fwd[op]:,}, x{n / fwd[op]:.3g})" if fwd.get(op) else f"{op} {n:,}"
             for op, n in sorted(both.items())]
    return "FlopCounterMode by op, forward + backward: " + "; ".join(parts)


def run_flops(res: Results, presets) -> None:
    from tfcalc.verify.checker import check

    for name in presets:
        spec, how = trimmed(name)
        for phase, w in workloads(spec).items():
            case = f"{phase} ({how}, B=1" + (f", context {w.context}" if w is not None and w.context else "") + ")"
            try:
                report = check(spec, device="meta", train=phase == "train", workload=w)
            except Exception as e:  # noqa: BLE001
                res.failed("flops", name, case, "FlopCounterMode / fvcore", e)
                continue
            f = report.forward
            analytic = report.total(f, "analytic")
            uncounted = (f"; fvcore unsupported ops: {', '.join(sorted(report.uncounted_ops))}"
                         if report.uncounted_ops else "")
            res.add(Row("flops", name, f"{case}: forward", analytic, report.total(f, "flop_counter"),
                        "torch FlopCounterMode on the reference model"),
                    Row("flops", name, f"{case}: forward (MACs x 2)", analytic, 2 * report.total(f, "fvcore_macs"),
                        "fvcore FlopCountAnalysis on the reference model", note=uncounted.lstrip("; ")))
            if report.train is not None:
                t = report.train
                res.add(Row("flops", name, f"{case}: train step", t.analytic, t.flop_counter,
                            "torch FlopCounterMode, forward + backward",
                            note="" if t.match else _train_by_op(spec, w)))
            if phase == "train":
                p = report.params
                res.add(Row("params", name, f"reference model ({how})", report.total(p, "analytic"),
                            report.total(p, "model"), "tfcalc's reference torch model: sum(numel)"))


# ------------------------------------------------------------------------------------- KV cache and state

KV_PRESETS = ("gpt2", "llama2-7b", "llama3-8b", "mistral-7b", "mistral-7b/window-16", "qwen2.5-7b", "gemma2-9b",
              "gemma2-9b/window-16", "phi3-mini", "deepseek-v2-lite", "qwen3.5-0.8b", "qwen3-next-80b-a3b", "lfm2-1.2b",
              "nemotron-h-8b", "falcon-h1-7b", "jamba-1.5-mini", "granite4-h-tiny")
# a variant: the published config with its sliding window set to 16 tokens, shorter than the 64-token prefill
VARIANTS = {"window-16": {"sliding_window": 16}}
QUICK_KV_PRESETS = ("llama3-8b",)


def _cut_config(config: dict) -> tuple[dict, int]:
    """The published config with its stack cut: 2 blocks, or the first blocks up to and including the first full
    attention block of a hybrid (transformers' cached forward needs one), its per-layer lists cut alike."""
    cfg = dict(config)
    kinds = cfg.get("layer_types")
    n = 2
    if isinstance(kinds, list):
        full = [i for i, k in enumerate(kinds) if "full" in str(k) or k == "attention"]
        n = max(2, full[0] + 1) if full else 2
        cfg["layer_types"] = kinds[:n]
    if not isinstance(kinds, list) and isinstance(cfg.get("full_attention_interval"), int):  # Qwen3-Next
        n = max(2, cfg["full_attention_interval"])
    if isinstance(cfg.get("attn_layer_offset"), int):  # Jamba: attention at offset + k * period
        n = max(2, cfg["attn_layer_offset"] + 1)
    idxs = cfg.get("full_attn_idxs")
    if isinstance(idxs, list) and idxs:  # LFM2: the attention blocks by index
        n = max(2, min(idxs) + 1)
        cfg["full_attn_idxs"] = [i for i in idxs if i < n]
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        n = max(2, pattern.index("*") + 1) if "*" in pattern else 2
        cfg["hybrid_override_pattern"] = pattern[:n]
    for key in ("num_hidden_layers", "n_layer", "n_layers", "num_layers"):
        if key in cfg or key == "num_hidden_layers":
            cfg[key] = n
    for key in ("first_k_dense_replace",):
        if key in cfg:
            cfg[key] = min(cfg[key], 1)
    return cfg, n


def _cache_bytes(cache) -> tuple[int, dict[str, int]]:
    """Bytes transformers' cache holds, per layer: (keys and values, the conv and recurrent states), each tensor
    once; its bookkeeping scalars (a window's length as a 0-dim tensor) are not cache."""
    import torch

    seen: set[int] = set()
    sums: dict[str, int] = {"kv": 0}

    def add(obj, where: str) -> None:
        if isinstance(obj, torch.Tensor):
            if id(obj) not in seen and obj.dim() > 0:
                seen.add(id(obj))
                sums[where] = sums.get(where, 0) + obj.numel() * obj.element_size()
        elif isinstance(obj, dict):
            for x in obj.values():
                add(x, where)
        elif isinstance(obj, (list, tuple)):
            for x in obj:
                add(x, where)

    for layer in getattr(cache, "layers", None) or [cache]:
        for name, value in vars(layer).items():
            if name in ("keys", "values", "key_cache", "value_cache"):
                add(value, "kv")
            elif name in ("conv_states", "recurrent_states", "ssm_states"):
                add(value, name)
    return sums.pop("kv"), sums


def run_kv(res: Results, presets, quick: bool = False) -> None:
    import torch

    from tfcalc import Workload
    from tfcalc.hf import read_hf_config
    from tfcalc.plan.memory import inference_memory
    from tfcalc.verify import hf_model

    configs = published_configs(quick)
    oracle = "transformers' cache after a prefill on meta (bf16): bytes of its tensors"
    for label in presets:
        name, _, variant = label.partition("/")
        if name not in configs:
            res.add(Row("kv cache / state", name, "prefill", None, None, "none",
                        note="no published config.json pinned in tests/: no transformers cache to hold it against"))
            continue
        cfg, layers = _cut_config(_language_model(configs[name][0]))
        cfg = {k: v for k, v in cfg.items() if k != "quantization_config"} | VARIANTS.get(variant, {})
        changed = "".join(f", {k} {v}" for k, v in VARIANTS.get(variant, {}).items())
        case = f"prefill {SEQ} tokens, B=2 (published config, {layers} blocks{changed})"
        try:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "config.json"
                path.write_text(json.dumps(cfg))
                spec = read_hf_config(path).spec.replace(seq_len=SEQ)
            m = inference_memory(spec, Workload(phase="prefill", seq_len=SEQ, batch_size=2), dtype="bf16")
            model, _ = hf_model.build(cfg)
            model = model.to(torch.bfloat16)
            ids = torch.zeros(2, SEQ, dtype=torch.long, device="meta")
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=True)
            kv, other = _cache_bytes(out.past_key_values)
        except Exception as e:  # noqa: BLE001
            res.failed("kv cache / state", name, case, oracle, e)
            continue
        res.add(Row("kv cache / state", name, f"{case}: KV cache", m.kv_cache_bytes, kv,
                    f"{type(out.past_key_values).__name__} keys and values"))
        if m.state_bytes or sum(other.values()):
            ours = ", ".join(f"{k} {v:,} B" for k, v in m.state.to_dict().items())
            theirs = ", ".join(f"{k} {v:,} B" for k, v in other.items())
            res.add(Row("kv cache / state", name, f"{case}: recurrent state", m.state_bytes, sum(other.values()),
                        f"{type(out.past_key_values).__name__} conv and recurrent states",
                        note=f"tfcalc: {ours}; transformers: {theirs}"))


# --------------------------------------------------------------------------------------- training memory

def _tiny(name: str):
    """The small models tests/test_parallel_memory.py measures (a llama and a gpt2 at d_model 256/128)."""
    return _tests_module("test_parallel_memory").SPECS[name]


def run_memory(res: Results, quick: bool) -> None:
    from tfcalc import Workload
    from tfcalc.plan.adapters import adapters as make_adapters
    from tfcalc.verify.memory_check import check_memory

    w = Workload(seq_len=32, batch_size=2, phase="train")
    cases = [("llama (tiny)", "fused", "none", None), ("llama (tiny)", "eager", "none", None)]
    if not quick:
        cases += [("llama (tiny)", a, r, None) for a in ("fused", "eager") for r in ("selective", "full")]
        cases += [("gpt2 (tiny)", a, "none", None) for a in ("fused", "eager")]
        cases += [("llama (tiny)", "fused", "none", 8), ("gpt2 (tiny)", "fused", "none", 8)]
    for model, attention, recompute, rank in cases:
        spec = _tiny(model.split()[0])
        case = (f"bf16-mixed AdamW, {attention} attention, recompute {recompute}"
                + (f", LoRA r={rank}" if rank else ""))
        try:
            report = check_memory(spec, w, "bf16-mixed", "adamw", recompute, "meta", attention,
                                  adapters=make_adapters(rank) if rank else None)
        except Exception as e:  # noqa: BLE001
            res.failed("training memory", model, case, "MemTracker", e)
            continue
        for r in report.rows:
            res.add(Row("training memory", model, f"{case}: {r.category}", r.analytic, r.measured,
                        "torch MemTracker (FakeTensorMode)", r.tolerance, r.note, r.known))


def run_parallel(res: Results, quick: bool) -> None:
    from tfcalc import Workload
    from tfcalc.verify.memory_check import check_memory

    mod = _tests_module("test_parallel_memory")
    w = Workload(seq_len=32, batch_size=2, phase="train")
    layouts = ("fsdp-zero3",) if quick else tuple(mod.LAYOUTS)
    for name in layouts:
        layout = mod.LAYOUTS[name]
        try:
            report = check_memory(mod.SPECS["llama"], w, attention="eager", layout=layout)
        except Exception as e:  # noqa: BLE001
            res.failed("parallel memory", "llama (tiny)", name, "torch.distributed, fake process group", e)
            continue
        for r in report.rows:
            rank = r.category.partition(": ")[0]
            if rank not in ("rank 0", f"rank {layout.gpus - 1}"):  # the first and the last rank
                continue
            res.add(Row("parallel memory", "llama (tiny)", f"{name} ({layout.describe()}), {r.category}",
                        r.analytic, r.measured,
                        "torch.distributed on a fake process group, MemTracker", r.tolerance, r.note, r.known))


# ---------------------------------------------------------------------------------------- quantized bytes


DEEPSEEK_V3_FILES = 688_586_727_753  # docs/planning.md: the checkpoint's files, revision afb92e1f
DEEPSEEK_V3_PROMISE = 0.0225  # docs/planning.md: "15,436,175,337 more (2.2%)", its causes named there


def run_quant(res: Results) -> None:
    from tfcalc.hf import read_hf_config
    from tfcalc.plan.quant import weight_bytes
    from tfcalc.sources import checkpoint_quant

    mod = _tests_module("test_quant")

    def stored(config: dict) -> int:  # the checkpoint's bytes as its config's quantization_config stores them
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "config.json").write_text(json.dumps(config))
            return weight_bytes(read_hf_config(folder).spec, checkpoint_quant(None, Path(folder))).total

    case = "as its config's quantization_config stores it"
    res.add(Row("quantized bytes", "gpt-oss-120b", f"mxfp4 checkpoint, {case}", stored(mod.GPT_OSS_120B),
                mod.GPT_OSS_120B_BYTES, "published safetensors total (15 shards' tensor bytes)"))
    res.add(Row("quantized bytes", "deepseek-v3", f"block fp8 checkpoint, {case}", stored(mod.DEEPSEEK_V3),
                DEEPSEEK_V3_FILES, "the checkpoint's files (revision afb92e1f)", DEEPSEEK_V3_PROMISE,
                note="the multi-token-prediction layer (num_nextn_predict_layers 1) with its own table and head, "
                     "the e_score_correction_bias buffers and 163 safetensors headers, which transformers' class "
                     "does not build (docs/planning.md)"))


def run_serving(res: Results) -> None:
    res.add(Row("serving capacity", "llama3-8b", "H100 SXM, context 8192", None, None, "none",
                note="no vLLM 'GPU KV cache size' log line is pinned in the project; tests/test_serve.py pins "
                     "vLLM's arithmetic term by term (its non-torch memory is taken from vLLM's log as an input)"))


# ------------------------------------------------------------------------------------------------ render


def _n(x) -> str:
    return "" if x is None else f"{x:,}"


def _pct(x) -> str:
    if x is None:
        return ""
    return "0" if x == 0 else f"{x:+.4g}%"


def _promise(r: Row) -> str:
    if r.promise == 0:
        return "exact" + (f" (+{r.explained:,} B named)" if r.explained else "")
    return f"within {100 * r.promise:g}%"


def _kept(r: Row) -> str:
    return {None: "no oracle", True: "yes", False: "**no**"}[r.kept]


def environment() -> dict:
    import fvcore
    import torch
    import transformers

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "tfcalc"], cwd=ROOT, capture_output=True,
                                    text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", False
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit + (" (tfcalc/ modified)" if dirty else ""), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "fvcore": fvcore.__version__,
            "machine": f"{cpu}, {os.cpu_count()} CPUs, no GPU" if not torch.cuda.is_available()
            else f"{cpu}, GPU {torch.cuda.get_device_name()}"}


# What is known of a kind of row outside the promise (printed only while such a row is there)
CAUSES = (
    ("kv cache / state", "sliding_window", ("KV cache with a sliding window shorter than the prefill: transformers' "
     "DynamicSlidingWindowLayer keeps the last W − 1 tokens of each windowed layer after the prefill (the next "
     "token's own key and value complete its window), tfcalc's plan counts W per sequence (the window the step "
     "attends over, its key and value included): one token per windowed layer, as each row shows.")),
    ("kv cache / state", "recurrent state", ("recurrent state: the SSM and delta-rule states agree to the byte (see each row's note); "
     "the short convolutions' states differ by the ratio (K − 1) / K: transformers' cache keeps the last K "
     "(conv_kernel_size) input positions per channel, tfcalc's plan counts K − 1, the positions the next step "
     "needs (its convention, tfcalc/plan/memory.py).")),
    ("flops", "train step", ("train step of the models with a short convolution (gated DeltaNet, Mamba, Mamba2; the forward rows "
     "agree exactly; each row's note splits FlopCounterMode's count by op): torch's `conv_backward_flop` "
     "(torch/utils/flop_counter.py) counts the weight gradient of a grouped convolution as if it were dense (its "
     "`_groups` argument is unused; pytorch/pytorch pull request 183405 divides by it), so a depthwise conv's "
     "backward is counted about `channels` times over; and the chunked scans' batched matmuls, whose backward "
     "autograd runs at other than 2 x their forward (bmm not at x3 in the note: some operands need no gradient, "
     "some are used twice), where tfcalc's train step is 3 x forward for every matmul. No test held these train steps before this document.")),
)


def render(res: Results, env: dict, quick: bool, seconds: float) -> str:
    command = "PYTHONPATH=. python benchmarks/accuracy.py" + (" --quick" if quick else "")
    lines = [
        "# Accuracy: every figure against its oracle",
        "",
        "<!-- generated by benchmarks/accuracy.py: do not edit by hand; regenerate with the command below -->",
        "",
        ("How far each figure tfcalc gives is from someone else's implementation: parameters against transformers' "
        "classes, FLOPs per phase against torch's FlopCounterMode and fvcore, the KV cache and recurrent state "
        "against transformers' own cache, training memory per category and peak against torch's MemTracker, per "
        "parallel layout against torch.distributed on a fake process group, quantized checkpoint bytes against a "
        "published safetensors total. Difference = oracle − tfcalc, in the figure's unit (parameters, FLOPs, "
        "bytes), and as a percentage of the oracle. \"Promise\" is what the docs promise for that figure "
        "([verification.md](verification.md)); a row outside it is marked **no** and is reported as it is."),
        "",
        f"Regenerate: `{command}` (options: `--quick` for the small subset the tests run, `--out PATH`).",
        "",
        f"- date: {env['date']}; tfcalc commit {env['commit']}",
        f"- python {env['python']}, torch {env['torch']}, transformers {env['transformers']}, fvcore {env['fvcore']}",
        f"- machine: {env['machine']}; this run took {seconds:.0f} s",
        ("- **GPU rows: none yet.** No GPU was at hand for this run: every measurement here is on the meta device or "
        "fake tensors (the same shapes and dtypes, nothing allocated). `tfcalc check --memory --device cuda` "
        "compares the plan with `torch.cuda.max_memory_allocated`; those rows are to be added by a run on a GPU."),
        "",
        "How the models were made:",
        "",
        ("- parameters: every preset with a published config.json that a test pins (tests/test_hf*.py, "
        "tests/test_quant.py; the config named in each row), at full size, built by transformers on meta. Presets "
        "without one are listed with no oracle; the reference-model rows are the trimmed models below."),
        (f"- FLOPs: presets with n_layers cut to 2 (a hybrid: one cycle of its block pattern) and seq_len {SEQ}, "
        f"batch 1; train step, a prefill of {SEQ} tokens and a decode step after {SEQ - 1} cached tokens "
        "(an encoder-decoder or an encoder: the train step only). Measured with `tfcalc.verify.checker.check` on "
        "meta."),
        (f"- KV cache and state: the published config with its stack cut to 2 blocks (a hybrid: up to its first "
        f"attention block), batch 2, a prefill of {SEQ} tokens in bf16."),
        ("- training and parallel memory: the tiny llama (d_model 256, 2 blocks, GQA 8/2) and gpt2 (d_model 128) of "
        "tests/test_parallel_memory.py, batch 2 x 32 tokens, bf16-mixed AdamW; parallel layouts: first and last "
        "rank."),
        "",
        "## Summary",
        "",
        "| figure | rows | with an oracle | exact | within the promise | max abs difference % |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind in KINDS:
        rows = [r for r in res.rows if r.kind == kind]
        compared = [r for r in rows if r.difference is not None]
        worst = max((abs(r.percent) for r in compared), default=None)
        lines.append(f"| {kind} | {len(rows)} | {len(compared)} | {sum(r.exact for r in compared)} | "
                     f"{sum(bool(r.kept) for r in compared)} | {'' if worst is None else f'{worst:.4g}'} |")
    outside = [r for r in res.rows if r.kept is False]
    lines += ["", "## Outside the promise", ""]
    if outside:
        lines += ["| figure | model | case | tfcalc | oracle | difference | % | note |",
                  "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
        lines += [f"| {r.kind} | {r.model} | {r.case} | {_n(r.tfcalc)} | {_n(r.oracle)} | {_n(r.difference)} | "
                  f"{_pct(r.percent)} | {r.note} |" for r in outside]
    else:
        lines.append("None: every compared row is within what the docs promise.")
    failed = [r for r in res.rows if r.note.startswith("not compared:")]
    if failed:
        lines += ["", "Comparisons that could not run (the oracle raised; listed, not dropped):", ""]
        lines += [f"- {r.kind}, {r.model}, {r.case}: {r.note}" for r in failed]
    known = [text for kind, case, text in CAUSES if any(r.kind == kind and case in r.case for r in outside)]
    if known:
        lines += ["", "What is known of these rows at this commit:", ""] + [f"- {t}" for t in known]
    for kind in KINDS:
        rows = [r for r in res.rows if r.kind == kind]
        lines += ["", f"## {kind}", "",
                  "| model | case | tfcalc | oracle | difference | % | promise | kept | oracle's name | note |",
                  "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- |"]
        lines += [f"| {r.model} | {r.case} | {_n(r.tfcalc)} | {_n(r.oracle)} | {_n(r.difference)} | "
                  f"{_pct(r.percent)} | {_promise(r)} | {_kept(r)} | {r.oracle_name} | "
                  f"{r.note.replace('|', '/')} |" for r in rows]
    return "\n".join(lines) + "\n"


def run(quick: bool = False) -> Results:
    res = Results()
    with warnings.catch_warnings():
        _quiet()
        steps = [("params", lambda: run_params(res, ["gpt2"] if quick else None, quick)),
                 ("flops", lambda: run_flops(res, QUICK_FLOP_PRESETS if quick else FLOP_PRESETS)),
                 ("kv", lambda: run_kv(res, QUICK_KV_PRESETS if quick else KV_PRESETS, quick)),
                 ("memory", lambda: run_memory(res, quick)),
                 ("parallel", lambda: run_parallel(res, quick)),
                 ("quant", lambda: run_quant(res)),
                 ("serving", lambda: run_serving(res))]
        for name, step in steps:
            started = time.perf_counter()
            step()
            res.seconds[name] = time.perf_counter() - started
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset (the tests run it)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "accuracy.md", help="where to write")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    res = run(args.quick)
    seconds = time.perf_counter() - started
    args.out.write_text(render(res, environment(), args.quick, seconds))
    outside = sum(r.kept is False for r in res.rows)
    print(f"{len(res.rows)} rows, {outside} outside the promise, {seconds:.0f} s "
          f"({', '.join(f'{k} {v:.0f} s' for k, v in res.seconds.items())}); wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
