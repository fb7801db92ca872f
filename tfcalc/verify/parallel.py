"""Training memory per GPU under a parallel layout, measured by torch.distributed itself: the reference model's
train step (as `tfcalc.verify.memory` runs it: the same model, recipes, optimizers, step and `_Tracker`) sharded
by torch's own data, tensor, sequence and pipeline parallelism, one rank at a time, every rank on torch's fake
process group (`torch.testing._internal.distributed.fake_pg.FakeStore`, backend "fake": collectives return at
once, nothing is sent) of the layout's world size, inside FakeTensorMode (nothing allocated: a world of 64 costs
what a world of 8 does). `tfcalc check --memory --dp/--zero/--tp/--sp/--pp` holds the plan against it.

    measure_parallel_memory(spec, workload, "bf16-mixed", "adamw", Layout(dp=4, zero=3)) -> ParallelMeasured

What each layout runs (torch's APIs; `SETUPS` says it per layout in the report):
- dp > 1, ZeRO 0: `DistributedDataParallel` (its reducer needs real storage: the step runs on real CPU tensors,
  so keep the model small; `gradient_as_bucket_view=True`, so the gradients are the buckets' views).
- ZeRO 1: `ZeroRedundancyOptimizer`'s own partition (whole parameters, largest first, each to the rank holding
  the fewest values so far); the rank keeps the optimizer states (and a mixed recipe's fp32 masters) of its
  parameters only. The broadcast of updated parameters after the step allocates nothing and is left out.
- ZeRO 2: FSDP2 `fully_shard` per block and on the root with `reshard_after_forward=False`; ZeRO 3: the same with
  `reshard_after_forward=True` (the root keeps its own parameters gathered from forward to backward: FSDP2's
  default for the root). A mixed recipe's fp32 masters are made over the sharded parameters.
- tp > 1: DTensor tensor parallelism (`parallelize_module`): q/k/v and the MLP's up and gate `ColwiseParallel`,
  the attention's output and the MLP's down `RowwiseParallel`, the token table vocab-parallel
  (`RowwiseParallel(input_layouts=Replicate())`), the head `ColwiseParallel` with its logits left sharded over
  the vocabulary and the loss under `loss_parallel()`. With sp the norms are `SequenceParallel` and the
  column-parallel linears take sequence-sharded inputs (and gather them). DTensor's sharding propagation runs
  global-shape ops on fake tensors to learn output shapes; they run here with the dispatch modes off, so
  MemTracker does not count phantom full-size tensors.
- dp x tp with ZeRO 2/3: a 2-D mesh (dp, tp), TP first, then FSDP2 over the dp dimension.
- pp > 1: `torch.distributed.pipelining`: contiguous blocks per stage (the first stage the embedding, the last
  the final norm and the head), `PipelineStage`, schedule `Schedule1F1B` over pp microbatches of
  `workload.batch_size` sequences each (the plan's convention: the batch size is one microbatch).
Expert and context parallelism have no CPU path here: `check_measurable` refuses them by name.

On CUDA under `torchrun` with NCCL (`measure_rank_cuda`), the same harness measures the calling rank for real and
reports `torch.cuda.max_memory_allocated` beside MemTracker's figure.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field, replace

import torch
import torch.distributed as dist

from ..arch import Workload
from ..errors import TfcalcError
from ..plan.training import Layout
from ..spec import ModelSpec
from .memory import (
    PRECISIONS,
    _build,
    _by_name,
    _check_arguments,
    _device_key,
    _loss_note,
    _optimizer,
    _step,
    _Tracker,
    _Trainer,
)

UNMEASURED = {"ep": "expert parallelism routes tokens with all-to-all between ranks; there is no CPU path for "
                    "it in torch.distributed here",
              "cp": "context parallelism (torch's context_parallel) runs ring attention over SDPA on CUDA only"}


def check_measurable(layout: Layout) -> None:
    """Refuse what cannot run on this machine's fake process group, naming the flag and the value."""
    for name, why in UNMEASURED.items():
        value = getattr(layout, name)
        if value > 1:
            raise TfcalcError(f"--{name} {value}: cannot be measured: {why}")


def setup(layout: Layout) -> str:
    """What torch runs for `layout`, in words."""
    parts = []
    if layout.tp > 1:
        parts.append("DTensor TP" + (" + SequenceParallel" if layout.sp else "") + " with loss_parallel")
    if layout.dp > 1 or layout.zero:
        parts.append({0: "DDP", 1: "ZeroRedundancyOptimizer (ZeRO-1 partition)",
                      2: "FSDP2 fully_shard(reshard_after_forward=False)",
                      3: "FSDP2 fully_shard(reshard_after_forward=True)"}[layout.zero])
    if layout.pp > 1:
        parts.append(f"pipelining Schedule1F1B, {layout.pp} microbatches")
    return ", ".join(parts) or "one device"


@dataclass(frozen=True)
class RankMemory:
    """One rank's bytes in the measured step, as MemTracker counts them."""

    rank: int
    coords: dict[str, int]  # {"pp": i, "dp": j, "tp": k}
    weights: int  # Parameter after the step
    gradients: int  # Gradient at the end of backward
    optimizer_states: int  # Optstate after the step
    step_counters: int  # AdamW's 4-byte step tensors, part of optimizer_states
    master_weights: int  # Other: the fp32 masters
    activations: int  # Activation at the end of forward (every microbatch's, under pipelining: their peak)
    peak: int  # MemTracker's peak total
    peak_at: str  # the moment: phase and innermost module
    peak_breakdown: dict[str, int]  # every category at the peak
    # FSDP2 (tp 1): each parameter's (first dimension, values per row), which FSDP2 shards, padding the first
    # dimension to a multiple of dp (`fsdp_padding`); () otherwise
    shapes: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class ParallelMeasured:
    spec: str
    workload: str
    precision: str
    optimizer: str
    layout: Layout
    setup: str
    ranks: tuple[RankMemory, ...]
    seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"spec": self.spec, "workload": self.workload, "precision": self.precision,
                "optimizer": self.optimizer, "layout": self.layout.to_dict(), "setup": self.setup,
                "ranks": [asdict(r) for r in self.ranks], "seconds": self.seconds, "notes": list(self.notes)}


# ------------------------------------------------------------------------------------------------ measuring


def default_ranks(layout: Layout) -> list[int]:
    """Rank 0 and the last rank; under ZeRO-1 every data-parallel rank of the first tensor/pipeline group (the
    partition gives each its own share); under pipelining the first rank of every stage too."""
    world = layout.gpus
    ranks = {0, world - 1}
    if layout.zero == 1:
        ranks |= {_rank(layout, 0, d, 0) for d in range(layout.dp)}
    ranks |= {_rank(layout, p, 0, 0) for p in range(layout.pp)}
    return sorted(ranks)


def _rank(layout: Layout, pp: int, dp: int, tp: int) -> int:
    return (pp * layout.dp + dp) * layout.tp + tp


def _coords(layout: Layout, rank: int) -> dict[str, int]:
    return {"pp": rank // (layout.dp * layout.tp), "dp": rank // layout.tp % layout.dp, "tp": rank % layout.tp}


def measure_parallel_memory(spec: ModelSpec, workload: Workload | None = None, precision: str = "bf16-mixed",
                            optimizer: str = "adamw", layout: Layout | None = None, ranks: list[int] | None = None,
                            explicit_attention: bool = True) -> ParallelMeasured:
    """One training step (the second; the first makes the optimizer's states) of the reference model under
    `layout`, per rank in `ranks` (default `default_ranks`), each on a fake process group of the layout's world
    size. `explicit_attention`: the attention core's path, as `tfcalc.verify.memory` builds it."""
    started = time.perf_counter()
    layout = layout or Layout()
    check_measurable(layout)
    workload = _check_arguments(spec, workload, precision, optimizer, "none", "fake")
    if spec.is_encoder_decoder or spec.shared_blocks is not None or spec.is_moe:
        raise TfcalcError(f"{spec.label}: the parallel check shards decoder-only models of dense blocks (no "
                          "encoder-decoder, shared blocks or experts)")
    if spec.cross_attends and (layout.tp > 1 or layout.pp > 1):
        flag = f"--tp {layout.tp}" if layout.tp > 1 else f"--pp {layout.pp}"
        raise TfcalcError(f"{flag}: the parallel check shards self-attention and MLP blocks and its pipeline stages "
                          f"carry no cross-attended states: {spec.label}'s cross_attention blocks are not measured "
                          "under it yet (--dp and --zero are)")
    if layout.pp > 1 and (layout.tp > 1 or layout.dp > 1):
        raise TfcalcError(f"--pp {layout.pp}: the parallel check runs pipelining alone (no --dp or --tp beside it)")
    if layout.dp > 1 and layout.zero < 2 and layout.tp > 1:
        raise TfcalcError(f"--dp {layout.dp} --tp {layout.tp}: measured with --zero 2 or 3 (FSDP2 over a 2-D mesh); "
                          "DDP or ZeroRedundancyOptimizer over DTensors is not built")
    if layout.zero and layout.dp == 1:
        raise TfcalcError(f"--zero {layout.zero}: ZeRO shards over data-parallel GPUs; it needs --dp 2 or more")
    if layout.tp > 1 and spec.vocab_size % layout.tp:  # the table and loss_parallel's logits split in equal shards
        raise TfcalcError(f"--tp {layout.tp}: the parallel check shards the vocabulary evenly (a vocab-parallel "
                          f"table, loss_parallel's logits); {spec.label}'s vocab_size={spec.vocab_size} is not a "
                          f"multiple of {layout.tp} (give --vocab-size padded to one)")
    world = layout.gpus
    ranks = default_ranks(layout) if ranks is None else ranks
    for r in ranks:
        if not 0 <= r < world:
            raise TfcalcError(f"rank={r}: the layout has ranks 0 to {world - 1}")
    notes = [_loss_note(spec), f"torch {torch.__version__}: {setup(layout)}"]
    measured = tuple(_measure_rank(spec, workload, precision, optimizer, layout, r, explicit_attention)
                     for r in ranks)
    return ParallelMeasured(spec.label, workload.describe(), precision, optimizer, layout, setup(layout), measured,
                            time.perf_counter() - started, tuple(notes))


@contextlib.contextmanager
def _fake_world(rank: int, world: int):
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise TfcalcError("a process group is already initialised: the parallel check makes its own fake one")
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def _quiet_propagation():
    """DTensor learns an op's output shape by running it on global-shape fake tensors; with MemTracker (a dispatch
    mode) on, those would be counted as if allocated. Run them with the dispatch modes off."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator
    from torch.utils._python_dispatch import _disable_current_modes

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    def quiet(self, op_schema):
        with _disable_current_modes():
            return original(self, op_schema)

    from torch.distributed.device_mesh import DeviceMesh

    concatenate = DeviceMesh._concatenate

    def concatenate_real(meshes):  # FSDP2 over TP joins the dp and tp meshes: a real tensor of ranks
        with _disable_current_modes():
            return concatenate(meshes)

    ShardingPropagator._propagate_tensor_meta_non_cached = quiet
    DeviceMesh._concatenate = staticmethod(concatenate_real)
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = original
        DeviceMesh._concatenate = staticmethod(concatenate)


def _mesh(layout: Layout, device: str):
    """The device mesh (made before FakeTensorMode: it holds a real tensor of ranks)."""
    from torch.distributed.device_mesh import init_device_mesh

    if layout.tp > 1 and layout.dp > 1:
        mesh = init_device_mesh(device, (layout.dp, layout.tp), mesh_dim_names=("dp", "tp"))
        return {"dp": mesh["dp"], "tp": mesh["tp"], "both": mesh}  # sliced here, outside FakeTensorMode
    name = "tp" if layout.tp > 1 else "pp" if layout.pp > 1 else "dp"
    return init_device_mesh(device, (layout.gpus,), mesh_dim_names=(name,))


def _measure_rank(spec, workload, precision, optimizer, layout: Layout, rank: int, explicit: bool,
                  device: str = "fake") -> RankMemory:
    from torch._subclasses.fake_tensor import FakeTensorMode

    dtype, mixed = PRECISIONS[precision]
    real = layout.dp > 1 and layout.zero == 0 and device == "fake"  # DDP's reducer needs real storage
    with contextlib.ExitStack() as stack:
        if device == "fake":
            stack.enter_context(_fake_world(rank, layout.gpus))
        mesh = _mesh(layout, "cpu" if device == "fake" else "cuda")
        if device == "fake" and not real:
            stack.enter_context(FakeTensorMode())
        stack.enter_context(_quiet_propagation())
        dev = torch.device("cpu") if device == "fake" else torch.device("cuda", torch.cuda.current_device())
        if layout.pp > 1:
            from .pipeline import pipeline_step

            return pipeline_step(spec, workload, dtype, mixed, optimizer, layout, rank, mesh, explicit, dev)
        model, inputs, targets = _build(spec, workload, dtype, "none", explicit, dev)
        shapes = tuple((p.shape[0], p.numel() // p.shape[0]) for p in model.parameters() if p.dim()) if (
            layout.zero >= 2 and layout.tp == 1) else ()
        model, trainer, context = _parallelize(model, layout, mesh, optimizer, mixed, rank)
        with context():
            _step(model, inputs, targets, trainer)  # the optimizer's states exist after a first step
            if isinstance(trainer, _BucketTrainer):  # DDP rebuilds its buckets in the second step's forward
                _step(model, inputs, targets, trainer)
            trainer.zero_grad()
            tracker = _Tracker()
            tracker.track_external(model, *trainer.optimizers, *trainer.masters)
            marks: dict[str, dict] = {}
            with tracker:
                _step(model, inputs, targets, trainer, tracker=tracker, marks=marks)
        return replace(_rank_memory(tracker, marks, trainer, dev, layout, rank), shapes=shapes)


def _rank_memory(tracker: _Tracker, marks: dict, trainer: _Trainer, dev, layout: Layout, rank: int,
                 activations: int | None = None) -> RankMemory:
    key = _device_key(tracker, dev)
    peak = _by_name(tracker.get_tracker_snapshot("peak").get(key, {}))
    end = {mark: _by_name(snapshot.get(key, {})) for mark, snapshot in marks.items()}
    return RankMemory(rank, _coords(layout, rank), end["step"]["parameters"], end["backward"]["gradients"],
                      end["step"]["optimizer"], trainer.step_counter_bytes(dev), end["step"]["other"],
                      end["forward"]["activations"] if activations is None else activations,
                      peak.get("total", 0), tracker.peak_at.get(key, ""), peak)


def _parallelize(model, layout: Layout, mesh, optimizer: str, mixed: bool, rank: int):
    """`model` sharded as `layout` says; its trainer; the context the step runs in (loss_parallel under TP)."""
    context = contextlib.nullcontext
    if layout.tp > 1:
        from torch.distributed.tensor.parallel import loss_parallel

        tensor_parallel(model, mesh["tp"] if layout.dp > 1 else mesh, layout.sp)
        context = loss_parallel
    if layout.zero >= 2:
        from torch.distributed.fsdp import fully_shard

        dp_mesh = mesh["dp"] if layout.tp > 1 else mesh
        for block in model.blocks:
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=layout.zero == 3)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=layout.zero == 3)
    elif layout.dp > 1 and layout.zero == 0:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, gradient_as_bucket_view=True)
        if dist.get_backend() != "nccl":  # the fake group's all-reduce hands back nothing: keep the bucket
            ddp.register_comm_hook(None, _keep_bucket)
        return _DDP(ddp), _BucketTrainer(model, optimizer, mixed), context
    if layout.zero == 1:
        return model, _Zero1Trainer(model, optimizer, mixed, rank), context
    return model, _Trainer(model, optimizer, mixed), context


def _keep_bucket(state, bucket):
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


class _DDP(torch.nn.Module):
    """DDP with the reference model's attributes (blocks) reachable, for the step and the tracker."""

    def __init__(self, ddp):
        super().__init__()
        self.ddp = ddp
        self.blocks = ddp.module.blocks

    def forward(self, *inputs):
        return self.ddp(*inputs)


def tensor_parallel(model, mesh, sp: bool) -> None:
    """Megatron-style tensor (and sequence) parallelism by DTensor on the reference model of a dense
    decoder: column-parallel q/k/v, up and gate; row-parallel out and down; a vocab-parallel token table and
    head (logits left sharded for `loss_parallel`); with `sp`, SequenceParallel norms."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    tp = mesh.size()
    seq = Shard(1) if sp else Replicate()
    for block in model.blocks:
        plan = {"attention.qkv": ColwiseParallel(input_layouts=seq),
                "attention.out": RowwiseParallel(output_layouts=seq)}
        for name in ("up", "gate"):
            if getattr(block.mlp, name, None) is not None:
                plan[f"mlp.{name}"] = ColwiseParallel(input_layouts=seq)
        plan["mlp.down"] = RowwiseParallel(output_layouts=seq)
        if sp:
            plan.update({f"{prefix}_norm": SequenceParallel() for prefix in ("attention", "mlp")
                         if getattr(block, f"{prefix}_norm", None) is not None})
        parallelize_module(block, mesh, plan)
        attention = block.attention
        attention.n_heads //= tp  # the local heads each rank's q/k/v columns hold
        attention.n_kv_heads //= tp
    # with sp the embedding's whole output (token rows plus positions) is split over the sequence after it, as
    # Megatron scatters it into the sequence-parallel region
    top = {"embedding.token": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
           "head": ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1), use_local_output=False)}
    if sp and model.final_norm is not None:
        top["final_norm"] = SequenceParallel()
    tied = model.head is not None and model.head.weight is model.embedding.token.weight
    if tied:
        del top["head"]
    parallelize_module(model, mesh, top)
    if sp:
        rank = mesh.get_local_rank()
        model.embedding.register_forward_hook(lambda module, args, out: out.chunk(tp, dim=1)[rank].contiguous())
    if tied:  # the head reads the sharded table: its logits sharded over the vocabulary
        from torch.distributed.tensor import DTensor

        table = model.embedding.token.weight
        head = model.head
        head.weight = table

        def head_forward(module, args):
            x = args[0]
            if not isinstance(x, DTensor):
                x = DTensor.from_local(x, mesh, (seq,), run_check=False)
            x = x.redistribute(mesh, (Replicate(),))
            return (x,)

        head.register_forward_pre_hook(head_forward)


class _BucketTrainer(_Trainer):
    """Under DDP with `gradient_as_bucket_view=True` the gradients are views of the reducer's buckets, which live
    from one step to the next whatever `zero_grad` does: zeroed in place here, so MemTracker sees them (they are
    registered with the model as Gradient)."""

    def zero_grad(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()


class _Zero1Trainer(_Trainer):
    """ZeRO-1 as torch's `ZeroRedundancyOptimizer` partitions it: this rank steps (and, mixed, keeps fp32 masters
    of) only the parameters the partition gives it; the others' gradients are dropped after backward."""

    def __init__(self, model: torch.nn.Module, optimizer: str, mixed: bool, rank: int):
        from torch.distributed.optim import ZeroRedundancyOptimizer

        params = list(model.parameters())
        zero = ZeroRedundancyOptimizer(params, optimizer_class=type(_optimizer(optimizer, [params[0]])), lr=1e-4)
        mine = {id(p) for group in zero._partition_parameters()[rank] for p in group["params"]}
        del zero
        self.all_params = params

        class _Mine(torch.nn.Module):
            def parameters(self, recurse=True):
                return iter([p for p in params if id(p) in mine])

        super().__init__(_Mine(), optimizer, mixed)

    def zero_grad(self) -> None:
        for p in self.all_params:
            p.grad = None


def measure_rank_cuda(spec: ModelSpec, workload: Workload, precision: str, optimizer: str,
                      layout: Layout, explicit_attention: bool = True) -> tuple[RankMemory, int]:
    """Under `torchrun` with NCCL (the process group initialised, `torch.cuda.set_device(local_rank)` done): the
    calling rank's step on its GPU, for real, as MemTracker counts it, and `torch.cuda.max_memory_allocated` of the
    tracked step beside it (which also holds what MemTracker cannot see: NCCL's buffers, cuBLAS workspaces, the
    caching allocator's rounding)."""
    if not (dist.is_initialized() and torch.cuda.is_available()):
        raise TfcalcError("measure_rank_cuda: run under torchrun with an initialised NCCL process group")
    if dist.get_world_size() != layout.gpus:
        raise TfcalcError(f"measure_rank_cuda: world size {dist.get_world_size()}, the layout has {layout.gpus}")
    check_measurable(layout)
    workload = _check_arguments(spec, workload, precision, optimizer, "none", "cuda")
    torch.cuda.reset_peak_memory_stats()
    rank = _measure_rank(spec, workload, precision, optimizer, layout, dist.get_rank(), explicit_attention, "cuda")
    torch.cuda.synchronize()
    return rank, torch.cuda.max_memory_allocated()


def fsdp_padding(shapes: tuple[tuple[int, int], ...], dp: int, rank: int) -> tuple[int, int]:
    """FSDP2 pads each parameter's first dimension to a multiple of dp: (values in this rank's padded shards, which
    its weights and gradients hold; values in its unpadded local shards, which its fp32 masters and optimizer
    states are made from: the last ranks' are shorter)."""
    padded = local = 0
    for rows, per_row in shapes:
        chunk = -(-rows // dp)
        padded += chunk * per_row
        local += max(0, min(chunk, rows - rank * chunk)) * per_row
    return padded, local
