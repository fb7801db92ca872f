"""`tfcalc check`: the analytic counts held against the reference model and two independent counters."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..arch import Workload
from ..counts import count
from ..errors import TfcalcError
from ..spec import ModelSpec
from . import counters, folding
from .components import comparable, component_of_parameter

DEVICES = ("meta", "cpu", "cuda")


@dataclass(frozen=True)
class FlopRow:
    component: str
    analytic: int
    flop_counter: int
    fvcore_macs: int

    @property
    def match(self) -> bool:
        return self.analytic == self.flop_counter == 2 * self.fvcore_macs

    def to_dict(self) -> dict:
        return {"component": self.component, "analytic": self.analytic, "flop_counter": self.flop_counter,
                "fvcore_macs": self.fvcore_macs, "match": self.match}


@dataclass(frozen=True)
class ParamRow:
    component: str
    analytic: int
    model: int
    fvcore: int

    @property
    def match(self) -> bool:
        return self.analytic == self.model == self.fvcore

    def to_dict(self) -> dict:
        return {"component": self.component, "analytic": self.analytic, "model": self.model, "fvcore": self.fvcore,
                "match": self.match}


@dataclass(frozen=True)
class TrainRow:
    analytic: int
    flop_counter: int

    @property
    def match(self) -> bool:
        return self.analytic == self.flop_counter


@dataclass
class CheckReport:
    spec: ModelSpec
    device: str
    forward: list[FlopRow]
    params: list[ParamRow]
    uncounted_ops: dict[str, int]
    notes: list[str]
    workload: Workload | None = None
    train: TrainRow | None = None
    routing: str = ""

    @property
    def match(self) -> bool:
        rows = [*self.forward, *self.params, *([self.train] if self.train else [])]
        return all(row.match for row in rows)

    def total(self, rows: list, attr: str) -> int:
        return sum(getattr(row, attr) for row in rows)

    def to_dict(self) -> dict:
        f, p = self.forward, self.params
        return {
            "spec": self.spec.model_dump(),
            "workload": self.workload.model_dump(),
            "device": self.device,
            "routing": self.routing,
            "match": self.match,
            "forward": {"analytic": self.total(f, "analytic"), "flop_counter": self.total(f, "flop_counter"),
                        "fvcore_macs": self.total(f, "fvcore_macs"), "components": [r.to_dict() for r in f]},
            "params": {"analytic": self.total(p, "analytic"), "model": self.total(p, "model"),
                       "fvcore": self.total(p, "fvcore"), "components": [r.to_dict() for r in p]},
            "train_step": None if self.train is None else {
                "analytic": self.train.analytic, "flop_counter": self.train.flop_counter, "match": self.train.match},
            "uncounted_ops": self.uncounted_ops,
            "notes": self.notes,
        }


def check(spec: ModelSpec, device: str = "meta", train: bool = False,
          workload: Workload | None = None, fold: bool | None = None) -> CheckReport:
    """Build the reference model on `device` for `workload` (default: the spec's train step) and compare every
    count with FlopCounterMode and fvcore. `fold`: build one block of each kind and count it once per block of that
    kind (tfcalc.verify.folding); None: only for a model with more than FOLD_EXPERTS expert modules."""
    if spec.towers:
        return _check_towers(spec, device, train, workload, fold)
    torch = _import_torch()
    from ..reference import build_model, example_inputs

    result = count(spec, workload)
    workload = result.workload
    if train and workload.phase != "train":
        raise TfcalcError(f"train=True with phase={workload.phase!r}: a train step is counted for phase 'train' "
                          "only")
    device = _validate_device(torch, device, spec)
    layout, repeats = folding.fold(spec) if (folding.should_fold(spec) if fold is None else fold) else (None, None)
    model = build_model(spec, device, workload=workload, stack_layout=layout)
    inputs = example_inputs(spec, device, workload)

    fc = counters.flop_counter_forward(model, inputs, repeats)
    fv = counters.fvcore_forward(model, inputs, repeats)
    analytic = comparable(result.flops.components)
    names = list(dict.fromkeys([*analytic, *fc.components, *fv.components]))
    forward = [FlopRow(n, analytic.get(n, 0), fc.components.get(n, 0), fv.components.get(n, 0)) for n in names]
    if fc.unattributed or fv.unattributed:  # counted outside any component: shown, and a mismatch
        forward.append(FlopRow("(outside any component)", 0, fc.unattributed, fv.unattributed))

    model_params: Counter[str] = Counter()
    for name, parameter in model.named_parameters():
        model_params[component_of_parameter(name) or f"(unmapped) {name}"] += parameter.numel() * folding.times(
            name, repeats)
    fvcore_params: Counter[str] = Counter()
    for name, n in counters.fvcore_parameters(model).items():
        fvcore_params[component_of_parameter(name) or f"(unmapped) {name}"] += n * folding.times(name, repeats)
    p_analytic = result.params.components
    p_names = list(dict.fromkeys([*p_analytic, *model_params, *fvcore_params]))
    params = [ParamRow(n, p_analytic.get(n, 0), model_params[n], fvcore_params[n]) for n in p_names]

    notes = [counters.NOTE_FLOP_COUNTER_SDPA, counters.NOTE_FVCORE_SDPA, counters.NOTE_FVCORE_NORM]
    if repeats:
        notes.append(folding.note(spec, repeats))
    train_row = None
    if train:
        for module in model.modules():  # count backward without SDPA kernels' recomputation of the scores
            if hasattr(module, "explicit"):
                module.explicit = True
        model.requires_grad_(True)
        train_row = TrainRow(result.flops.train_step, counters.flop_counter_train_step(model, inputs, repeats))
        notes.append("train step: counted with the explicit-matmul attention path; SDPA's backward kernels "
                     "recompute q k^T (FlopCounterMode counts 5 bmm where autograd of the explicit path has 4)")
        # a module whose `explicit` form drops a recomputation says so (Mamba2's checkpointed scan)
        notes += [n for n in dict.fromkeys(getattr(m, "train_note", "") for m in model.modules()) if n]
        if any(getattr(m, "groups", 1) > 1 for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)):
            notes.append(counters.NOTE_FLOP_COUNTER_GROUPED_CONV)  # only where a grouped convolution is counted
    routing = ""
    if spec.is_moe:
        routing = ("deterministic round robin (meta has no data): token t's j-th slot t*k+j goes to expert "
                   "(t*k+j) mod n_experts" if device == "meta" else "real: softmax router, top-k per token")
    return CheckReport(spec, device, forward, params, fv.uncounted_ops, notes, workload, train_row, routing)


def _check_towers(spec: ModelSpec, device: str, train: bool, workload: Workload | None,
                  fold: bool | None) -> CheckReport:
    """A multimodal model: each tower's reference model checked on its own workload (the language model on the
    text tokens, the vision tower on every image), the connectors' linears as torch modules of their own; rows named
    as the whole model's count names them, the train step the sum of the parts'."""
    from ..arch.towers import text_tower, text_workload, tower_workload

    result = count(spec, workload)
    w = result.workload
    if w.phase == "decode":
        raise TfcalcError(f"phase='decode': {spec.label}'s towers did their work at the prefill; check the prefill "
                          "(--phase prefill) or the language model alone (--tower text)")
    if w.images == 0:
        raise TfcalcError(f"images=0: no tower of {spec.label} runs on a prompt of text alone; check its language "
                          "model (--tower text)")
    parts = [("", check(text_tower(spec), device, train, text_workload(spec, w), fold))]
    parts += [(name, check(spec.towers[name], device, train, tower_workload(spec, name, w), fold))
              for name in spec.towers]
    forward = [FlopRow(f"{name}/{r.component}" if name else r.component, r.analytic, r.flop_counter, r.fvcore_macs)
               for name, report in parts for r in report.forward]
    params = [ParamRow(f"{name}/{r.component}" if name else r.component, r.analytic, r.model, r.fvcore)
              for name, report in parts for r in report.params]
    uncounted: Counter[str] = Counter()
    for _, report in parts:
        uncounted.update(report.uncounted_ops)
    c_forward, c_params, c_train = _check_connectors(spec, result, device, train)
    forward += c_forward
    params += c_params
    notes = list(dict.fromkeys(n for _, report in parts for n in report.notes))
    runs = ", ".join(f"the {name} tower on {tower_workload(spec, name, w).batch_size} "
                     f"{'image(s)' if spec.towers[name].inputs == 'images' else 'window(s) of audio'}"
                     for name in spec.towers)
    notes.append(f"{spec.label}: each tower's reference model built alone on its own workload ({runs}); the connectors' pooling and pixel shuffle are averages and reshapes (no "
                 "matmul); their norms and linears are torch modules of their own")
    train_row = None
    if train:
        train_row = TrainRow(result.flops.train_step, sum(r.train.flop_counter for _, r in parts) + c_train)
    routing = next((r.routing for _, r in parts if r.routing), "")
    return CheckReport(spec, device, forward, params, dict(uncounted), notes, w, train_row, routing)


def _check_connectors(spec: ModelSpec, result, device: str, train: bool) -> tuple[list, list, int]:
    """The connectors' rows: each as torch modules (its norm over widths[0], its linears with the activation between
    them, its scalars) on the rows it reads, counted by FlopCounterMode and fvcore."""
    import torch
    from fvcore.nn import FlopCountAnalysis
    from torch.utils.flop_counter import FlopCounterMode

    from ..arch.towers import connector_rows

    acts = {"gelu": lambda: torch.nn.GELU(), "gelu_tanh": lambda: torch.nn.GELU(approximate="tanh"),
            "relu": torch.nn.ReLU, "silu": torch.nn.SiLU}
    forward, params, train_flops = [], [], 0
    fwd, p = result.flops.components, result.params.components
    on = "meta" if device == "meta" else device
    for c in spec.connectors:
        units, per = connector_rows(spec, c, result.workload)
        layers: list[tuple[str, torch.nn.Module]] = []
        x_rows, x_width = units * per, c.widths[0] if c.widths else 0  # what it reads
        if c.norm != "none":
            width = c.tower_width if c.norm_before_merge else c.widths[0]
            norm = (torch.nn.LayerNorm(width, elementwise_affine=c.norm_weight) if c.norm == "layernorm" else
                    torch.nn.RMSNorm(width, elementwise_affine=c.norm_weight))
            layers.append((f"{c.name}/norm", norm))
        if c.norm_before_merge or c.merge_linear:  # the tower's tokens, merge of them concatenated (a reshape)
            x_rows, x_width = units * per * c.merge, c.tower_width
            if not c.norm_before_merge:
                layers = []  # the norm (over widths[0]) comes after the merging linear
            layers.append((f"{c.name}/merge_tokens", torch.nn.Unflatten(0, (units * per, c.merge))))
            layers.append((f"{c.name}/merge_flat", torch.nn.Flatten(1)))
            if c.merge_linear:
                layers.append((f"{c.name}/merge", torch.nn.Linear(c.merge * c.tower_width, c.tower_width,
                                                                  bias=False)))
            if c.norm != "none" and not c.norm_before_merge:
                norm = (torch.nn.LayerNorm(c.widths[0], elementwise_affine=c.norm_weight) if c.norm == "layernorm"
                        else torch.nn.RMSNorm(c.widths[0], elementwise_affine=c.norm_weight))
                layers.append((f"{c.name}/norm", norm))
        pairs = list(zip(c.widths, c.widths[1:]))
        for i, (k, n) in enumerate(pairs):
            layers.append((c.name if len(pairs) == 1 else f"{c.name}/linear_{i + 1}", torch.nn.Linear(k, n, bias=c.bias)))
            if i + 1 < len(pairs):
                layers.append((f"{c.name}/act", acts[c.activation]()))
        with torch.device(on):
            modules = [(name, m.to(on)) for name, m in layers]
            scalars = torch.nn.Parameter(torch.zeros(c.scalars)) if c.scalars else None
        counted: Counter[str] = Counter()
        for name, m in modules:
            counted[name] += sum(q.numel() for q in m.parameters())
        if scalars is not None:
            counted[c.name] += scalars.numel()
        for name in dict.fromkeys([*(n for n, _ in modules if counted[n]), *([c.name] if scalars is not None else [])]):
            params.append(ParamRow(name, p.get(name, 0), counted[name], counted[name]))
        if c.similarity is not None:  # every image's embedding against every text's
            class Similarity(torch.nn.Module):
                def forward(self, images, texts):
                    return images @ texts.t()

            pair = (torch.zeros(units, c.similarity, device=on), torch.zeros(result.workload.batch_size, c.similarity,
                                                                           device=on))
            with FlopCounterMode(display=False) as fc:
                Similarity()(*pair)
            macs = FlopCountAnalysis(Similarity(), pair).unsupported_ops_warnings(False).total()
            forward.append(FlopRow(c.name, fwd.get(c.name, 0), fc.get_total_flops(), macs))
            if train:  # the embeddings need their gradients
                with FlopCounterMode(display=False) as fc:
                    Similarity()(*(t.requires_grad_() for t in pair)).sum().backward()
                train_flops += fc.get_total_flops()
        if not modules:
            continue
        model = torch.nn.Sequential(*(m for _, m in modules))
        x = torch.zeros(x_rows, x_width, device=on)
        with FlopCounterMode(display=False) as fc:
            model(x)
        flops = fc.get_total_flops()
        linears = [name for name, m in modules if isinstance(m, torch.nn.Linear)]
        macs = 0  # fvcore's, of the linears alone (it counts a LayerNorm's elements too; FlopCounterMode does not)
        for name in linears:  # one component per linear: each counted alone
            m = dict(modules)[name]
            xi = torch.zeros(units * per, m.in_features, device=on)
            with FlopCounterMode(display=False) as one:
                m(xi)
            one_macs = FlopCountAnalysis(m, (xi,)).unsupported_ops_warnings(False).uncalled_modules_warnings(
                False).total()
            forward.append(FlopRow(name, fwd.get(name, 0), one.get_total_flops(), one_macs))
            macs += one_macs
        assert flops == sum(r.flop_counter for r in forward if r.component in linears) and 2 * macs == flops, \
            (c.name, flops, macs)
        if train:  # its input is the tower's output, which needs a gradient
            with FlopCounterMode(display=False) as fc:
                out = model(torch.zeros(x_rows, x_width, device=on, requires_grad=True))
                out.sum().backward()
            train_flops += fc.get_total_flops()
    return forward, params, train_flops


def _import_torch():
    from ..interrupts import import_torch

    try:
        torch = import_torch()
        import fvcore  # noqa: F401
    except ImportError as e:
        raise TfcalcError(f"tfcalc check needs torch and fvcore ({e.name} is missing): "
                          "pip install torch fvcore, or pip install 'tfcalc[torch]'") from None
    return torch


def _validate_device(torch, device: str, spec: ModelSpec) -> str:
    expected = f"expected one of {', '.join(DEVICES)} (cuda:N for a given GPU)"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise TfcalcError(f"device={device!r}: {expected}") from None
    kind = parsed.type
    if kind not in DEVICES or (kind == "meta" and parsed.index is not None) or (kind == "cpu" and parsed.index):
        raise TfcalcError(f"device={device!r}: {expected}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise TfcalcError(f"device={device!r}: CUDA is not available here; use --device meta or cpu")
    if kind == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise TfcalcError(f"device={device!r}: there are {torch.cuda.device_count()} CUDA devices")
    if kind == "cpu":
        from ..profile.memory import available_bytes, estimate_bytes

        # fp32, a train step on the explicit path (--train): the most a check can allocate
        need = estimate_bytes(spec, 4, "train", scores=True)
        have = available_bytes(torch.device("cpu"))
        if need > have:
            raise TfcalcError(
                f"device='cpu': {spec.label} needs about {need / 2**30:.1f} GiB (fp32 weights, gradients, "
                f"activations and attention scores) and {have / 2**30:.1f} GiB is available; use --device meta "
                "(counts without allocating), or smaller --n-layers/--seq-len")
    return device
