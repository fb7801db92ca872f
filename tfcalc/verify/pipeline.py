"""One pipeline stage of the reference model under `torch.distributed.pipelining` (`Schedule1F1B`), measured by
MemTracker: the parallel check's pp path (`tfcalc.verify.parallel`). Stage i holds contiguous blocks (split as
evenly as can be, the earlier stages taking the extra ones), the first the embedding, the last the final norm and
the head (a tied head its own copy of the token table). pp microbatches of `workload.batch_size` sequences each
run through the schedule."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..arch import Workload
from ..reference.layers import rotary_tables
from ..spec import ModelSpec
from .memory import _build, _Tracker, _Trainer


def stage_blocks(n_blocks: int, pp: int) -> list[range]:
    """The blocks of each stage: contiguous, as even as can be, the first stages one more."""
    base, extra = divmod(n_blocks, pp)
    out, start = [], 0
    for i in range(pp):
        size = base + (1 if i < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


class _Stage(nn.Module):
    def __init__(self, model, blocks: range, first: bool, last: bool):
        super().__init__()
        stack = model._stack[0]
        self.embedding = model.embedding if first else None
        self.blocks = nn.ModuleList(model.blocks[i] for i in blocks)
        self.widths = None if stack.widths is None else [stack.widths[i] for i in blocks]
        self.final_norm = model.final_norm if last else None
        self.head = model.head if last else None
        if last and not first and model.head is not None and model.head.weight is model.embedding.token.weight:
            self.head.weight = nn.Parameter(model.head.weight.detach().clone())  # the last stage's own copy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x, None, 0, None)
        N = x.shape[1]
        tables = {} if self.widths is None else {
            w: rotary_tables(0, N, w, x.device, x.dtype) for w in sorted(set(self.widths))}
        for i, block in enumerate(self.blocks):
            rope = (None, None) if self.widths is None else tables[self.widths[i]]
            x = block(x, 0, None, None, 0, *rope, None)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.head(x) if self.head is not None else x


class _MicrobatchTracker(_Tracker):
    """MemTracker over a stage that runs forward once per microbatch: its per-module statistics (one call each)
    are cleared as the stage starts another microbatch's forward; the totals and categories are unaffected."""

    def __init__(self, root: nn.Module):
        super().__init__()
        self.root = root

    def _pre_fw_hook(self, module, inputs) -> None:
        if module is self.root and module in self.memory_tracking:
            self.reset_mod_stats()
        super()._pre_fw_hook(module, inputs)


def _static_shapes(stages, has_backward, p2p_done) -> None:
    """The schedule's warm-up vote, decided: every stage was given its input and output shapes."""
    from torch.distributed.pipelining._utils import InferenceMode

    for stage in stages:
        stage._inference_mode = InferenceMode.STATIC


def _loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output.float().flatten(0, 1), target.flatten())


def pipeline_step(spec: ModelSpec, workload: Workload, dtype, mixed: bool, optimizer: str, layout, rank: int, mesh,
                  explicit: bool, dev: torch.device):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    from .parallel import _rank_memory

    pp = layout.pp
    total = workload.model_copy(update={"batch_size": workload.batch_size * pp})
    model, inputs, targets = _build(spec, total, dtype, "none", explicit, dev)
    ranges = stage_blocks(len(model.blocks), pp)
    first, last = rank == 0, rank == pp - 1
    stage_module = _Stage(model, ranges[rank], first, last)
    del model
    B, N, D = workload.batch_size, workload.seq_len, spec.d_model
    example = (torch.empty(B, N, dtype=torch.long, device=dev) if first
               else torch.empty(B, N, D, dtype=dtype, device=dev))
    out = torch.empty(B, N, spec.vocab_size if last else D, dtype=dtype, device=dev, requires_grad=True)
    stage = PipelineStage(stage_module, rank, pp, dev, input_args=(example,), output_args=(out,))
    schedule = Schedule1F1B(stage, n_microbatches=pp, loss_fn=_loss)
    schedule._warmup_p2p = _static_shapes  # its vote reads a tensor's value (.item()): nothing to read on fakes
    trainer = _Trainer(stage_module, optimizer, mixed)
    targets = targets.view(B * pp, N)

    def run(tracker=None, marks=None):
        trainer.zero_grad()
        if tracker is not None:
            tracker.phase = "1F1B"
        args = (inputs[0],) if first else ()
        kwargs = {"target": targets} if last else {}
        schedule.step(*args, **kwargs)
        if tracker is not None:
            marks["backward"] = tracker.mark()
            tracker.phase = "optimizer step"
        trainer.step()
        if tracker is not None:
            marks["step"] = tracker.mark()

    run()
    tracker = _MicrobatchTracker(stage_module)
    tracker.track_external(stage_module, *trainer.optimizers, *trainer.masters)
    marks: dict = {}
    backward_one_chunk = stage.backward_one_chunk

    def first_backward(*args, **kwargs):  # what the stage keeps with every microbatch of the warm-up in flight
        if "forward" not in marks:
            marks["forward"] = tracker.mark()
        return backward_one_chunk(*args, **kwargs)

    stage.backward_one_chunk = first_backward
    with tracker:
        run(tracker, marks)
    return _rank_memory(tracker, marks, trainer, dev, layout, rank)
