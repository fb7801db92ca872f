"""Training memory of the reference model, measured: a real training step (two, the second reported) watched by
torch's own `torch.distributed._tools.mem_tracker.MemTracker`, category by category, and on CUDA also
`torch.cuda.max_memory_allocated`. The analytic estimate (`tfcalc.plan.training`) is held against this by
`tfcalc check --memory`; this module only measures.

    measure_training_memory(spec, workload, "bf16-mixed", "adamw", "none", device="fake") -> MeasuredMemory
    saved_for_backward(spec, workload, torch.bfloat16, "none") -> [SavedTensor(module, description, ...)]

Devices: "fake" runs the step under torch's FakeTensorMode over CPU tensors (shapes and dtypes, no data and no
allocation: a 70B model measures on a laptop); "cpu" runs it for real (small models); "cuda" runs it for real on
the GPU and also reports `torch.cuda.max_memory_allocated` of a steady-state step.

The step (every recipe): gradients set to None, forward, the loss, backward, the optimizer step. The loss is
`F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())` (an fp32 loss, as every framework computes
it); a model without an LM head takes the sum of its outputs (in fp32) as the loss. A pooler's output is added to
the loss as its sum. The attention (`attention`): "fused" (default) runs torch's scaled_dot_product_attention, the
key/value heads as they are (enable_gqa=True, as transformers' sdpa path passes them when there is no mask): on the
CPU and under FakeTensorMode the dispatcher picks `_scaled_dot_product_flash_attention_for_cpu`, which keeps q, k,
v, its output and an fp32 logsumexp per (batch, head, query row) for backward, no N x N tensor; "eager" the
explicit two-matmul path (its softmax probabilities kept unless recomputed). `fused_problem` names the models
whose attention SDPA cannot run as a fused kernel would (sliding windows, sinks, a bias under a causal mask, MLA).

Recipes (bytes per parameter, the ZeRO paper's convention, Rajbhandari et al. 2020):
- `fp32`: model, gradients and optimizer states in fp32, activations in fp32.
- `bf16-mixed`, `fp16-mixed`: the model and its gradients in 16 bits (2 + 2), an fp32 master copy of every
  parameter (4) held by the optimizer, the optimizer's states in fp32 (AdamW 8, SGD 4): 16 bytes with AdamW. The
  step runs one optimizer per parameter over its master: the parameter's gradient cast to fp32 into the master's
  .grad, the master stepped, copied back into the 16-bit parameter, the fp32 gradient freed: at most one
  parameter's fp32 gradient exists at a time. No loss scaling (it changes no memory).
- `bf16`: pure bf16, the optimizer over the model's own parameters, its states in bf16 (AdamW 4 bytes).
Optimizers: `adamw` (torch.optim.AdamW, 2 states) and `sgd` (torch.optim.SGD, momentum 0.9: 1 state), both with
`fused=True` (one kernel per update, no temporaries beside the states, on CPU, CUDA and fake tensors alike).
8-bit Adam (bitsandbytes) cannot be measured here.

How MemTracker (torch 2.13) counts, and what this module does about it:
- Categories (`_MemRefType`): Parameter, Buffer, Gradient, Activation (every tensor created in forward, and in a
  checkpointed module's recomputation in backward), Temp (tensors created in backward outside a recomputation:
  activation gradients; a parameter's gradient starts as Temp and moves to Gradient when its hook fires),
  Optstate (every tensor created inside `optimizer.step()`, then the optimizer's `state` after it), Other
  (tensors given to `track_external` that are none of these). Snapshots are {device: {category: bytes,
  "Total": bytes}}; "Total" is the sum of the categories.
- It only sees tensors created inside its context or given to `track_external`: the model, the optimizers and
  the fp32 master weights are registered before the measured step. The masters are not in any optimizer's
  `state` (they are its params), so MemTracker files them under Other: reported as `master_weights`.
- The fp32 gradient a mixed-precision step casts for one parameter is created inside that parameter's
  `optimizer.step()`, so MemTracker counts it as Optstate while it lives: `optimizer_states` is Optstate after
  the step (the states), `optimizer_peak` its peak (the states and that one transient gradient).
- AdamW's `step` counter is a 4-byte fp32 tensor per parameter tensor, counted in Optstate:
  `optimizer_step_counters` says how much of `optimizer_states` it is (SGD has none).
- It keeps one peak snapshot (the moment Total was highest) and per-module snapshots; per-category peaks and
  where the peak happened are not kept, so `_Tracker` (a subclass) records them on every op
  (`_update_peak_stats`, a private method: the price of knowing them).
- On CUDA every storage is rounded up to 512 bytes (the caching allocator's minimum block); on CPU and under
  FakeTensorMode the bytes are exact. `torch.cuda.max_memory_allocated` also rounds to 512 bytes, may hand out
  a cached block up to 1 MiB larger than asked for (large blocks are split only when the rest is over 1 MiB),
  and includes what MemTracker cannot see: cuBLAS workspaces, the token ids and targets, and scratch memory
  an aten op allocates and frees inside itself (no dispatch mode sees it). Measured on an H100 (torch 2.11),
  max_memory_allocated was MemTracker's peak plus 69-105 MB in every case but one: with full recomputation
  (8 llama blocks, B=2, s=2048) it was 322 MB over, the peak falling inside an op of a recomputed block.
- Fake and real CPU steps agree byte for byte in every category but Temp where a kernel differs: RMS norm's
  backward is one fused kernel on CUDA and for fake tensors, fp32 arithmetic on the CPU.
- A view taken inside the tracked context of a tensor it does not know (created before it, not given to
  `track_external`) registers that tensor's storage as new, under the current category: the targets are made
  flat before the step for that reason (the token ids are only read, never viewed).
- Its module tracker (`ModTracker`) leaks: for every module whose input requires grad it registers a
  multi-grad hook ("all" mode) whose closure holds the inputs' autograd nodes, and the hook is stored on those
  nodes: a cycle through C++ that Python's collector cannot see, which keeps the nodes and, through their
  AccumulateGrad nodes, the model's parameters alive after the model is dropped (torch 2.11 and 2.13; the same
  kind of cycle as pytorch/pytorch#139214). On a real device this module frees the parameters' storage when a
  measurement ends, so that measurements in one process do not pile up.
- A second forward of the root module under one tracker raises NotImplementedError ("multiple iterative
  calls"): the first step runs untracked, the second under a fresh tracker.
- Its Activation peak is not the saved set at the end of forward: it includes the transients of forward (a
  matmul output not yet consumed, the fp32 logits), and with recomputation the recomputed block in backward.
  `activations_end_of_forward` is Activation right after the loss (logits dropped): the saved set itemised in
  `saved`, plus the loss itself (4 bytes).

What is saved for backward is recorded with `torch.autograd.graph.saved_tensors_hooks` in the same forward (the
hooks pass tensors through untouched and hold no reference to them), one entry per storage: a storage kept by
two ops (a norm's output, read by q/k/v projection and gate) counts once, and a view counts its whole storage
(`SavedTensor.nbytes` is the storage's; the description says when the tensor is a view of a larger one).
Parameters (a linear's weight) and the step's inputs (token ids, targets) are not activations and are left
out. Under checkpointing, a checkpointed region's inputs are what it keeps (saved by torch's checkpoint).
"""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType
from torch.utils._python_dispatch import TorchDispatchMode

from ..arch import Workload, default_workload
from ..errors import TfcalcError
from ..spec import ModelSpec

# precision: (model dtype, fp32 masters)
PRECISIONS: dict[str, tuple[torch.dtype, bool]] = {
    "fp32": (torch.float32, False),
    "bf16-mixed": (torch.bfloat16, True),
    "fp16-mixed": (torch.float16, True),
    "bf16": (torch.bfloat16, False),
}
OPTIMIZERS = ("adamw", "sgd")
UNMEASURABLE = {"adam8bit": "8-bit Adam (bitsandbytes) is not in torch, and its kernels need a CUDA build of "
                            "bitsandbytes"}
RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("fused", "eager")
DEVICES = ("fake", "cpu", "cuda")
_CATEGORIES = {_MemRefType.PARAM: "parameters", _MemRefType.BUFFER: "buffers", _MemRefType.GRAD: "gradients",
               _MemRefType.ACT: "activations", _MemRefType.TEMP: "temporaries", _MemRefType.OPT: "optimizer",
               _MemRefType.OTH: "other"}


class SavedTensor(NamedTuple):
    """One storage kept for backward. `module`: the innermost module running when it was saved ("(loss)" for
    the loss after the model, the model itself as "(model)"); `description`: the op that produced the storage
    (and who keeps it: "input of checkpointed blocks.3"); `shape`/`dtype`: the saved tensor's; `nbytes`: its
    storage's."""

    module: str
    description: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int


@dataclass(frozen=True)
class MeasuredMemory:
    """Bytes of one steady-state training step (the second), as MemTracker counts them on the step's device."""

    spec: str
    workload: str
    precision: str
    optimizer: str
    recompute: str
    attention: str  # "eager" (two matmuls and a softmax) or "fused" (torch SDPA)
    device: str
    parameters: int  # Parameter
    buffers: int  # Buffer
    gradients: int  # Gradient at the end of backward (every parameter's)
    optimizer_states: int  # Optstate after the step
    optimizer_step_counters: int  # AdamW's 4-byte step tensors, part of optimizer_states
    master_weights: int  # Other: the fp32 masters of a mixed recipe
    activations_peak: int  # Activation's highest value in the step
    activations_end_of_forward: int  # Activation right after the loss
    temporaries_peak: int  # Temp's highest value (backward)
    optimizer_peak: int  # Optstate's highest value (states + the step's transients)
    peak_total: int  # MemTracker's peak "Total"
    peak_at: str  # where the peak happened: phase and innermost module
    peak_breakdown: dict[str, int]  # every category at the peak
    saved: tuple[SavedTensor, ...]  # the storages kept for backward, in the order saved
    cuda_max_allocated: int | None = None  # torch.cuda.max_memory_allocated of the step (reset before it)
    cuda_allocated_before_step: int | None = None  # torch.cuda.memory_allocated as the step begins
    seconds: float = 0.0  # wall time of the whole measurement
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def saved_bytes(self) -> int:
        return sum(s.nbytes for s in self.saved)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["saved"] = [{"module": s.module, "description": s.description, "shape": list(s.shape),
                       "dtype": str(s.dtype).removeprefix("torch."), "nbytes": s.nbytes} for s in self.saved]
        d["saved_bytes"] = self.saved_bytes
        d["notes"] = list(self.notes)
        return d


# ------------------------------------------------------------------------------------------------ measuring


def measure_training_memory(spec: ModelSpec, workload: Workload | None = None, precision: str = "bf16-mixed",
                            optimizer: str = "adamw", recompute: str = "none", device: str = "fake",
                            attention: str = "fused", adapters=None) -> MeasuredMemory:
    """Run two training steps of the reference model for `spec` on `workload` (default: the spec's train step)
    and report the second as MemTracker sees it (see the module docstring for the recipes and MemTracker's
    categories). device: "fake" (FakeTensorMode, nothing allocated), "cpu", "cuda" (or "cuda:N"). attention:
    "eager" (the explicit two-matmul path) or "fused" (torch's scaled_dot_product_attention; `fused_problem` says
    where the reference model cannot run it as the fused kernel would). `adapters` (`tfcalc.Adapters`): a
    fine-tuning step, LoRA adapters on the frozen reference model (tfcalc.verify.adapters); the optimizer and its
    masters are over the adapters alone."""
    started = time.perf_counter()
    workload = _check_arguments(spec, workload, precision, optimizer, recompute, device)
    _check_attention(spec, attention)
    dtype, mixed = PRECISIONS[precision]
    notes = [_loss_note(spec), _attention_note(attention)]
    if adapters is not None:
        notes.append(f"{adapters.describe()}: adapters added to the reference model (tfcalc.verify.adapters), every "
                     "other parameter frozen")
    with _device(device) as dev:
        model, inputs, targets = _build(spec, workload, dtype, recompute, attention == "eager", dev, adapters)
        trainer = _Trainer(model, optimizer, mixed)
        _step(model, inputs, targets, trainer)  # the optimizer's states exist after a first step
        trainer.zero_grad()
        cuda = dev.type == "cuda"
        cuda_max = cuda_before = None
        if cuda:
            cuda_before, cuda_max = _cuda_step(model, inputs, targets, trainer, dev)
        tracker = _Tracker()
        tracker.skip_frozen(model)
        tracker.track_external(model, *trainer.optimizers, *trainer.masters)
        recorder = _SavedRecorder(model, inputs, targets)
        marks: dict[str, dict] = {}
        with tracker:
            _step(model, inputs, targets, trainer, tracker=tracker, recorder=recorder, marks=marks)
        if cuda:
            torch.cuda.synchronize(dev)
            tracked_max = torch.cuda.max_memory_allocated(dev)
            if tracked_max != cuda_max:
                notes.append(f"cuda: max_memory_allocated {tracked_max} B in the tracked step, {cuda_max} B in "
                             "the untracked one (reported)")
        counters = trainer.step_counter_bytes(dev)
        if device != "fake":
            _release(model)
    key = _device_key(tracker, dev)
    peak = _by_name(tracker.get_tracker_snapshot("peak").get(key, {}))
    end = {mark: _by_name(snapshot.get(key, {})) for mark, snapshot in marks.items()}
    highest = _by_name(tracker.category_peaks.get(key, {}))
    return MeasuredMemory(
        spec=spec.label, workload=workload.describe(), precision=precision, optimizer=optimizer,
        recompute=recompute, attention=attention, device=str(dev) if device != "fake" else "fake",
        parameters=end["step"]["parameters"],
        buffers=end["step"]["buffers"], gradients=end["backward"]["gradients"],
        optimizer_states=end["step"]["optimizer"], optimizer_step_counters=counters,
        master_weights=end["step"]["other"], activations_peak=highest["activations"],
        activations_end_of_forward=end["forward"]["activations"], temporaries_peak=highest["temporaries"],
        optimizer_peak=highest["optimizer"], peak_total=peak.get("total", 0), peak_at=tracker.peak_at.get(key, ""),
        peak_breakdown=peak, saved=tuple(recorder.saved), cuda_max_allocated=cuda_max,
        cuda_allocated_before_step=cuda_before, seconds=time.perf_counter() - started, notes=tuple(notes))


def saved_for_backward(spec: ModelSpec, workload: Workload | None = None, dtype: torch.dtype = torch.bfloat16,
                       recompute: str = "none", attention: str = "fused",
                       device: str = "fake", adapters=None) -> list[SavedTensor]:
    """What one forward (and the loss) of the reference model in `dtype` keeps for backward, one entry per
    storage, in the order saved; by default under FakeTensorMode (nothing allocated; a mixture of experts routes
    round robin), "cpu" or "cuda" for real data. Parameters and the step's inputs are left out."""
    workload = _check_arguments(spec, workload, "fp32", "adamw", recompute, device)
    _check_attention(spec, attention)
    with _device(device) as dev:
        model, inputs, targets = _build(spec, workload, dtype, recompute, attention == "eager", dev, adapters)
        recorder = _SavedRecorder(model, inputs, targets)
        with recorder:
            loss = _loss(model, inputs, targets, recorder)
        del loss
    return recorder.saved


def _check_arguments(spec: ModelSpec, workload: Workload | None, precision: str, optimizer: str, recompute: str,
                     device: str) -> Workload:
    workload = workload or default_workload(spec)
    if workload.phase != "train":
        raise TfcalcError(f"phase={workload.phase!r}: training memory is measured for a train step (phase "
                          "'train')")
    if spec.is_encoder_decoder and workload.src_len is None:
        workload = workload.model_copy(update={"src_len": workload.seq_len})
    if precision not in PRECISIONS:
        from ..plan.training import FP8_UNMEASURABLE
        from ..plan.training import PRECISIONS as RECIPES

        if precision in RECIPES and RECIPES[precision].fp8:
            raise TfcalcError(f"precision={precision!r}: {FP8_UNMEASURABLE}")
        raise TfcalcError(f"precision={precision!r}: expected one of {', '.join(PRECISIONS)}")
    if optimizer in UNMEASURABLE:
        raise TfcalcError(f"optimizer={optimizer!r} cannot be measured: {UNMEASURABLE[optimizer]}; measure "
                          f"with one of {', '.join(OPTIMIZERS)}")
    if optimizer not in OPTIMIZERS:
        raise TfcalcError(f"optimizer={optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
    if recompute not in RECOMPUTE:
        raise TfcalcError(f"recompute={recompute!r}: expected one of {', '.join(RECOMPUTE)}")
    kind = device.split(":")[0]
    if kind not in DEVICES or (kind != "cuda" and ":" in device):
        raise TfcalcError(f"device={device!r}: expected one of {', '.join(DEVICES)} (cuda:N for a given GPU)")
    if kind == "cuda" and not torch.cuda.is_available():
        raise TfcalcError(f"device={device!r}: CUDA is not available here; use device 'fake'")
    return workload


def fused_problem(spec: ModelSpec) -> str | None:
    """Why the reference model cannot measure `spec`'s attention as the fused kernel the plan models runs it, or
    None. torch's SDPA has no sliding window and no sink logit: a window becomes an attn_mask SDPA keeps per layer
    (FlashAttention's window_size keeps none), sinks run the explicit path; a causal mask on a bias (ALiBi, T5's
    relative bias) makes a masked copy per layer; on the CPU, heads whose keys and values differ in width (MLA)
    fall back to the math path (softmax probabilities kept, in fp32)."""
    from ..arch.architecture import stacks

    windowed = any(layer.window is not None or layer.chunk is not None
                   for stack in stacks(spec) for layer in stack.distinct())
    if windowed:
        return "sliding windows or chunks (torch SDPA takes them only as an attn_mask, which it keeps)"
    if spec.attention_sinks:
        return "attention sinks (torch SDPA has no sink logit)"
    if spec.positions in ("alibi", "relative") and spec.causal:
        return f"{spec.positions} position bias under a causal mask (a masked copy of the bias for each SDPA call)"
    if spec.is_mla:
        return "multi-head latent attention (keys and values of different widths: SDPA's CPU kernel falls back to math)"
    return None


def _check_attention(spec: ModelSpec, attention: str) -> None:
    if attention not in ATTENTION:
        raise TfcalcError(f"attention={attention!r}: expected one of {', '.join(ATTENTION)}")
    problem = fused_problem(spec) if attention == "fused" else None
    if problem:
        raise TfcalcError(f"attention='fused': {spec.label} cannot be measured with torch's fused kernel here: "
                          f"{problem}; measure it with attention 'eager'")


def _attention_note(attention: str) -> str:
    if attention == "eager":
        return "attention: eager (q k^T, softmax, @ v: the softmax probabilities kept for backward)"
    return ("attention: fused (torch scaled_dot_product_attention; on the CPU and under FakeTensorMode "
            "_scaled_dot_product_flash_attention_for_cpu, which keeps q, k, v, the output and an fp32 logsumexp per "
            "row; key/value heads as they are, enable_gqa=True)")


@contextlib.contextmanager
def _device(device: str):
    """The torch device the step runs on; "fake": CPU tensors under a FakeTensorMode held for the block."""
    if device == "fake":
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            yield torch.device("cpu")
    else:
        yield torch.device(device)


def _build(spec: ModelSpec, workload: Workload, dtype: torch.dtype, recompute: str, explicit: bool,
           dev: torch.device, adapters=None):
    from ..reference import build_model, example_inputs

    torch.manual_seed(0)
    model = build_model(spec, dev, dtype, explicit, workload, recompute)
    for module in model.modules():  # SDPA over the key/value heads as they are, as transformers' sdpa path runs
        if hasattr(module, "native_gqa"):
            module.native_gqa = True
    if adapters is not None:
        from .adapters import add_adapters

        add_adapters(model, spec, workload, adapters)
    model.train()
    # images and mel frames in the model's dtype, as transformers casts pixel_values and input_features
    inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in example_inputs(spec, dev, workload))
    targets = None
    if spec.lm_head:
        generator = torch.Generator(device=dev).manual_seed(1)
        # flat from the start: a view taken inside the tracked step would register the (untracked) targets'
        # storage as a new Activation
        targets = torch.randint(spec.vocab_size, (workload.batch_size * workload.scored,), device=dev,
                                generator=generator)
    return model, inputs, targets


def _loss_note(spec: ModelSpec) -> str:
    if spec.lm_head:
        return ("loss: F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()), fp32"
                + ("; the pooler's output summed into it" if spec.pooler else ""))
    return "loss: no LM head, the sum of the model's outputs in fp32"


def _loss(model, inputs, targets, recorder: _SavedRecorder | None = None,
          tracker: _Tracker | None = None) -> torch.Tensor:
    """Forward and the loss; nothing but the loss (and what backward keeps) outlives this call."""
    outputs = model(*inputs)
    outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
    for watcher in (recorder, tracker):
        if watcher is not None:
            watcher.phase = "(loss)" if watcher is recorder else "loss"
    if targets is None:
        return sum(o.float().sum() for o in outputs)
    loss = F.cross_entropy(outputs.pop(0).float().flatten(0, 1), targets)
    while outputs:
        loss = loss + outputs.pop().float().sum()
    return loss


def _step(model, inputs, targets, trainer: _Trainer, tracker: _Tracker | None = None,
          recorder: _SavedRecorder | None = None, marks: dict | None = None) -> None:
    """One training step; with a tracker, snapshots after the loss, after backward and after the step."""
    trainer.zero_grad()
    if tracker is not None:
        tracker.phase = "forward"
    with recorder if recorder is not None else contextlib.nullcontext():
        loss = _loss(model, inputs, targets, recorder, tracker)
    if tracker is not None:
        marks["forward"] = tracker.mark()
        tracker.phase = "backward"
    loss.backward()
    del loss
    if tracker is not None:
        marks["backward"] = tracker.mark()
        tracker.phase = "optimizer step"
    trainer.step()
    if tracker is not None:
        marks["step"] = tracker.mark()


def _cuda_step(model, inputs, targets, trainer: _Trainer, dev: torch.device) -> tuple[int, int]:
    """A steady-state step on CUDA, untracked: (memory_allocated before it, max_memory_allocated during it)."""
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    before = torch.cuda.memory_allocated(dev)
    _step(model, inputs, targets, trainer)
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev)
    trainer.zero_grad()
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    return before, peak


class _Trainer:
    """The optimizer side of a recipe: one optimizer over the model's parameters, or (mixed precision) one per
    parameter over its fp32 master, fed the parameter's gradient cast to fp32 and copying the master back."""

    def __init__(self, model: torch.nn.Module, optimizer: str, mixed: bool):
        self.params = [p for p in model.parameters() if p.requires_grad]  # all, unless adapters train alone
        self.masters: list[torch.Tensor] = []
        if not mixed:
            self.optimizers = [_optimizer(optimizer, self.params)]
            return
        self.optimizers = []
        for p in self.params:
            master = p.detach().float().requires_grad_(True)
            opt = _optimizer(optimizer, [master])
            opt.register_step_pre_hook(partial(_load_fp32_grad, p, master))
            opt.register_step_post_hook(partial(_store_master, p, master))
            self.masters.append(master)
            self.optimizers.append(opt)

    def step(self) -> None:
        if not self.masters:
            self.optimizers[0].step()
            return
        for p, opt in zip(self.params, self.optimizers):
            if p.grad is not None:  # a routed expert no token chose has none
                opt.step()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step_counter_bytes(self, dev: torch.device) -> int:
        total = 0
        for opt in self.optimizers:
            for state in opt.state.values():
                step = state.get("step")
                if isinstance(step, torch.Tensor) and step.device.type == dev.type:
                    total += step.numel() * step.element_size()
        return total


def _release(model: torch.nn.Module) -> None:
    """Free the parameters' storage (and gradients) now: MemTracker's module tracker leaves them referenced from
    autograd nodes that no collector can reach (see the module docstring)."""
    with torch.no_grad():
        for p in model.parameters():
            p.grad = None
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)


def _optimizer(name: str, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    return torch.optim.SGD(params, lr=1e-4, momentum=0.9, fused=True)


def _load_fp32_grad(param: torch.Tensor, master: torch.Tensor, optimizer, args, kwargs) -> None:
    master.grad = param.grad.float()


def _store_master(param: torch.Tensor, master: torch.Tensor, optimizer, args, kwargs) -> None:
    with torch.no_grad():
        param.copy_(master)
    master.grad = None


# ------------------------------------------------------------------------------------------------ MemTracker


class _NoHook:
    """A hook handle with nothing to remove."""

    def remove(self) -> None:
        pass


class _Tracker(MemTracker):
    """MemTracker that also records each category's own peak, where the total peaked, and snapshots on demand."""

    def __init__(self) -> None:
        super().__init__()
        self.category_peaks: dict[torch.device, dict] = {}
        self.peak_at: dict[torch.device, str] = {}
        self.phase = ""

    def skip_frozen(self, model: torch.nn.Module) -> None:
        """MemTracker (torch 2.13) registers a gradient hook on every parameter of a module it enters, which raises
        for a frozen one ("cannot register a hook on a tensor that doesn't require gradient"): a frozen parameter
        is given a handle that does nothing instead (it never gets a gradient to count)."""
        for p in model.parameters():
            if not p.requires_grad:
                self._param_to_grad_hook_handles[p] = (_NoHook(), _NoHook())

    def _update_peak_stats(self, peak_state) -> None:  # called after every op MemTracker sees
        before = dict(self._peak_mem)
        super()._update_peak_stats(peak_state)
        self._note_categories()
        for dev, total in self._peak_mem.items():
            if total > before.get(dev, -1):
                self.peak_at[dev] = self._where()

    def _note_categories(self) -> None:
        for dev, snapshot in self._curr_mem_snap.items():
            peaks = self.category_peaks.setdefault(dev, {})
            for category, value in snapshot.items():
                if value > peaks.get(category, 0):
                    peaks[category] = value

    def _where(self) -> str:
        names = [n for n in self._mod_tracker.parents if n != "Global"]
        inner = max(names, key=lambda n: (n.count("."), n), default="")
        inner = inner.partition(".")[2] if "." in inner else ("(model)" if inner else "(outside the model)")
        phase = self.phase
        if self._in_opt:
            phase = "optimizer step"
        elif self._mod_tracker.is_bw:
            phase = "backward (recomputing)" if self._in_ac else "backward"
        return f"{phase}: {inner}"

    def mark(self) -> dict:
        """The current snapshot (and the category peaks brought up to date with it)."""
        self._note_categories()
        return self.get_tracker_snapshot("current")


def _device_key(tracker: _Tracker, dev: torch.device):
    keys = list(tracker.get_tracker_snapshot("peak")) + list(tracker.category_peaks)
    for key in keys:
        if key.type == dev.type and (dev.index is None or key.index == dev.index):
            return key
    return keys[0] if keys else dev


def _by_name(snapshot: dict) -> dict[str, int]:
    named = {name: 0 for name in _CATEGORIES.values()}
    for key, value in snapshot.items():
        if key in _CATEGORIES:
            named[_CATEGORIES[key]] = value
        elif key == "Total":
            named["total"] = value
    return named


# ------------------------------------------------------------------------------------------------ saved tensors


class _Producers(TorchDispatchMode):
    """Which op created each storage (its first producer; views and in-place ops do not overwrite it)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: dict[int, tuple[weakref.ref, str]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                known = self.ops.get(storage._cdata)
                if known is None or known[0]() is None:
                    self.ops[storage._cdata] = (weakref.ref(storage), func.overloadpacket.__name__)
        return out

    def op(self, storage) -> str:
        known = self.ops.get(storage._cdata)
        return known[1] if known is not None and known[0]() is storage else "?"


class _SavedRecorder:
    """While active: every storage saved for backward, once, with the module saving it and its producer op.
    Holds weak references only: the step's memory is what it would be without it."""

    def __init__(self, model: torch.nn.Module, inputs: tuple, targets: torch.Tensor | None):
        self.model = model
        self.names = {m: name or "(model)" for name, m in model.named_modules()}
        for stack in getattr(model, "_stack", ()):  # a one-stack model's stack is the model itself
            self.names[stack] = "(model)"
        self.excluded = {p.untyped_storage()._cdata for p in model.parameters()}
        self.excluded |= {t.untyped_storage()._cdata for t in (*inputs, targets) if t is not None}
        self.seen: dict[int, weakref.ref] = {}
        self.saved: list[SavedTensor] = []
        self.stack: list[str] = []
        self.phase = ""
        self._handles: list = []
        self._producers = _Producers()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)

    def __enter__(self):
        self.phase = ""
        for module in self.model.modules():
            self._handles.append(module.register_forward_pre_hook(self._enter_module))
            self._handles.append(module.register_forward_hook(self._leave_module, always_call=True))
        self._producers.__enter__()
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        self._producers.__exit__(*exc)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _enter_module(self, module, args) -> None:
        self.stack.append(self.names.get(module, type(module).__name__))

    def _leave_module(self, module, args, output) -> None:
        if self.stack:
            self.stack.pop()

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self.excluded:
            return t
        known = self.seen.get(key)
        if known is not None and known() is storage:
            return t
        self.seen[key] = weakref.ref(storage)
        nbytes = storage.nbytes()
        description = self._producers.op(storage)
        module = self.phase or (self.stack[-1] if self.stack else "(model)")
        checkpointed = _checkpointed_module(self.names)
        if checkpointed is not None:  # torch.utils.checkpoint keeping its region's inputs
            module, description = checkpointed, f"{description}, kept as an input of the checkpointed module"
        own = t.numel() * t.element_size()
        if own < nbytes:
            description += f", a view ({own} B) of its storage"
        self.saved.append(SavedTensor(module, description, tuple(t.shape), t.dtype, nbytes))
        return t


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def _checkpointed_module(names) -> str | None:
    """When torch.utils.checkpoint is saving its inputs: the module it checkpoints, else None."""
    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return None
        if frame.f_code.co_name == "_checkpoint_without_reentrant_generator":
            fn = frame.f_locals.get("fn")
            return names.get(fn, type(fn).__name__) if fn is not None else "?"
        frame = frame.f_back
    return None
