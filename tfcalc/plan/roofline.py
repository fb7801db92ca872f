"""Prefill and decode on a roofline: each op of the inventory bounded by the GPU's peak FLOP/s or its memory
bandwidth, whichever is slower. No torch.

    >>> from tfcalc import load_preset
    >>> from tfcalc.plan.gpus import lookup
    >>> r = inference_plan(load_preset("llama2-7b"), lookup("a100-80gb"), context=1024)
    >>> r.decode.bound, round(r.decode.tokens_per_s)   # batch 1: every weight read for one token
    ('memory', 148)

Conventions, stated once (a roofline is a bound, not a measurement):
- An op's time is max(FLOPs / peak, bytes / bandwidth): the dense datasheet peak in the compute dtype and the
  datasheet bandwidth. Ops do not overlap, and no kernel reaches either roof: a real step is slower.
- Bytes moved: a linear layer reads its weights once per step (shared by the batch) and its input, and writes
  its output; a routed expert layer reads the weights of min(E, token-expert pairs) experts (every pair on its
  own expert: the most it can read); the attention core reads q, the keys and values of every key (the KV cache
  in decode) and writes its output, as a fused kernel does (scores stay on chip), and its FLOPs are the pairs the
  mask keeps; norms, activations and residual adds read and write their elements. Weights and activations in the
  weights' dtype (activations 2 bytes for quantized weights), the KV cache in `kv_dtype`.
- With `quant` (tfcalc.plan.quant: a config's quantization_config or --quant), a linear layer reads its weight
  matrices as the format stores them (values, scales, zeros, g_idx), the head and routers in `dtype`; activations
  and the compute peak are `dtype`'s (weight-only quantization: the matmul runs in 16 bits).
- Prefill processes the prompt (`context` tokens) into the cache, and its time is the time to first token;
  decode processes one new token per sequence against `context` cached ones.
- Tensor parallelism over `tp` GPUs (Megatron-LM's split, as vLLM serves): every figure is one GPU's. Column-
  parallel linears keep n / tp of their outputs, row-parallel ones k / tp of their inputs and end in an all-reduce
  of their [m, n] output; the attention core keeps H / tp query heads and Hkv / tp key/value heads (one, copied,
  when tp > Hkv, as vLLM does); MLP activations are split, norms and residual adds are not (each GPU does them
  whole). The vocabulary-parallel embedding ends in an all-reduce of its [tokens, D] output, the vocabulary-
  parallel head in an all-gather of the logits. A ring all-reduce of M bytes takes 2 (tp - 1) / tp * M / link, an
  all-gather (tp - 1) / tp * M / link, with `link` the GPU's one-way GPU-to-GPU bandwidth (plan.gpus); they do not
  overlap compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..arch import Workload, build, validate
from ..errors import TfcalcError, check_positive_int
from ..spec import ModelSpec
from .gpus import Gpu
from .memory import DTYPE_BYTES, QUANTIZED, check_quant
from .memory import check_tp as check_heads

PEAK_DTYPE = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "bf16", "int8": "bf16", "int4": "bf16"}


@dataclass(frozen=True)
class OpCost:
    component: str
    repeat: int
    flops: int  # all repeats
    bytes: int  # all repeats, to and from the GPU's memory
    seconds: float
    bound: str  # "compute", "memory" or "link" (a tensor-parallel all-reduce or all-gather)
    link_bytes: int = 0  # all repeats, sent over the GPU-to-GPU link

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass(frozen=True)
class PhaseCost:
    phase: str
    workload: Workload
    ops: list[OpCost] = field(repr=False)

    @property
    def seconds(self) -> float:
        return sum(op.seconds for op in self.ops)

    @property
    def flops(self) -> int:
        return sum(op.flops for op in self.ops)

    @property
    def bytes(self) -> int:
        return sum(op.bytes for op in self.ops)

    @property
    def link_bytes(self) -> int:
        return sum(op.link_bytes for op in self.ops)

    @property
    def bound(self) -> str:
        """What most of the step's time is bound by (memory on a tie)."""
        time = {bound: sum(op.seconds for op in self.ops if op.bound == bound) for bound in ("memory", "compute",
                                                                                          "link")}
        return max(time, key=lambda bound: time[bound])

    @property
    def tokens_per_s(self) -> float:
        return self.workload.tokens / self.seconds

    def to_dict(self) -> dict:
        return {"phase": self.phase, "workload": self.workload.model_dump(), "seconds": self.seconds,
                "tokens_per_s": self.tokens_per_s, "flops": self.flops, "bytes": self.bytes,
                "link_bytes": self.link_bytes, "bound": self.bound,
                "ops": [{"component": op.component, "repeat": op.repeat, "flops": op.flops, "bytes": op.bytes,
                         "link_bytes": op.link_bytes, "seconds": op.seconds, "bound": op.bound}
                        for op in self.ops]}


@dataclass(frozen=True)
class InferencePlan:
    spec: ModelSpec
    gpu: Gpu
    dtype: str
    kv_dtype: str
    prefill: PhaseCost
    decode: PhaseCost
    tp: int = 1  # tensor-parallel GPUs; every figure is one GPU's
    quant: object = None  # tfcalc.plan.quant.Quant: the weights' format, when quantized

    @property
    def peak(self) -> int:
        return self.gpu.peak_flops[PEAK_DTYPE[self.dtype]]

    def to_dict(self) -> dict:
        return {"gpu": self.gpu.name, "tp": self.tp, "link_bytes_per_s": self.gpu.link_bytes_per_s if self.tp > 1
                else None, "dtype": self.dtype, "kv_dtype": self.kv_dtype, "peak_flops_per_s": self.peak,
                "bandwidth_bytes_per_s": self.gpu.bandwidth_bytes_per_s,
                "ridge_flops_per_byte": self.peak / self.gpu.bandwidth_bytes_per_s,
                "time_to_first_token_s": self.prefill.seconds, "decode_time_per_step_s": self.decode.seconds,
                "decode_tokens_per_s": self.decode.tokens_per_s,
                **({"quant": self.quant.to_dict()} if self.quant is not None else {}),
                "prefill": self.prefill.to_dict(), "decode": self.decode.to_dict()}


def check_tp(spec: ModelSpec, gpu: Gpu, tp: int) -> None:
    """Refuse a tensor-parallel size the model's heads or the GPU's link cannot take, naming the value."""
    check_heads(spec, tp)
    if tp > 1 and gpu.link_bytes_per_s is None:
        raise TfcalcError(f"tp={tp}: no GPU-to-GPU bandwidth is on file for {gpu.name}")


def phase_cost(spec: ModelSpec, workload: Workload, gpu: Gpu, dtype: str = "bf16",
               kv_dtype: str | None = None, tp: int = 1, quant=None) -> PhaseCost:
    if dtype not in DTYPE_BYTES:
        raise TfcalcError(f"dtype={dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
    quant = check_quant(dtype, quant, spec)
    kv_dtype = kv_dtype or ("bf16" if dtype in QUANTIZED else dtype)
    if kv_dtype not in DTYPE_BYTES or kv_dtype == "int4":
        raise TfcalcError(f"kv_dtype={kv_dtype!r}: expected one of fp32, bf16, fp16, fp8, int8")
    peak_dtype = PEAK_DTYPE[dtype]
    if peak_dtype not in gpu.peak_flops:
        raise TfcalcError(f"dtype={dtype!r}: {gpu.name} has no {peak_dtype} peak (it has "
                          f"{', '.join(gpu.peak_flops)})")
    peak, bandwidth = gpu.peak_flops[peak_dtype], gpu.bandwidth_bytes_per_s
    act = 2 if dtype in QUANTIZED else int(DTYPE_BYTES[dtype])
    check_tp(spec, gpu, tp)
    inv = build(spec, workload)
    validate(spec, inv.workload)
    ops = []
    read = None
    if quant is not None:
        from .quant import read_bytes_fn

        read = read_bytes_fn(quant, tp, int(DTYPE_BYTES[dtype]))
    for op, repeat in inv:
        if not repeat:  # a multimodal model's towers in decode: their images were encoded at the prefill
            continue
        weight_bytes = read if read is not None and op.matrices(tp) else DTYPE_BYTES[dtype]
        cost = op.cost(weight_bytes, act, DTYPE_BYTES[kv_dtype], tp)
        if cost is not None:
            flops, moved = repeat * cost[0], repeat * cost[1]
            compute, memory = flops / peak, moved / bandwidth
            ops.append(OpCost(op.component, repeat, flops, moved, max(compute, memory),
                              "compute" if compute >= memory else "memory"))
        collective = op.collective(act, tp) if tp > 1 else None
        if collective is not None:
            component, sent = collective[0], repeat * collective[1]
            ops.append(OpCost(component, repeat, 0, 0, sent / gpu.link_bytes_per_s, "link", sent))
    return PhaseCost(inv.workload.phase, inv.workload, ops)


def inference_plan(spec: ModelSpec, gpu: Gpu, context: int, batch_size: int = 1, dtype: str = "bf16",
                   kv_dtype: str | None = None, src_len: int | None = None, tp: int = 1,
                   quant=None, images: int | None = None, image_size: tuple[int, int] | None = None,
                   mel_frames: int | None = None) -> InferencePlan:
    """Prefill of a `context`-token prompt (time to first token) and decode of one token against it, for
    `batch_size` sequences on one `gpu`, or on each of `tp` tensor-parallel GPUs. A multimodal model's prompt holds
    `images` images of `image_size` (default one at its vision tower's size; their tokens among the context's) and
    `mel_frames` of audio per sequence (default one window), encoded at the prefill."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise TfcalcError(f"context={context!r}: expected a positive number of tokens")
    check_positive_int("batch_size", batch_size)
    if src_len is not None:
        check_positive_int("src_len", src_len)
    if isinstance(gpu, str):  # a name, as --gpu takes it
        from .gpus import lookup

        gpu = lookup(gpu)
    elif not isinstance(gpu, Gpu):
        raise TfcalcError(f"gpu={gpu!r}: expected a tfcalc.plan.gpus.Gpu or a GPU's name ('h100', 'mi300x')")
    media = {"images": images, "image_size": image_size, "mel_frames": mel_frames}
    from pydantic import ValidationError

    try:  # the media arguments are checked by Workload's fields: a TfcalcError naming each, as the others are
        prefill = Workload(phase="prefill", batch_size=batch_size, seq_len=context, src_len=src_len, **media)
    except ValidationError as e:
        from ..errors import validation_lines

        raise TfcalcError("\n".join(validation_lines(e))) from None
    decode = Workload(phase="decode", batch_size=batch_size, seq_len=1, context=context, src_len=src_len, **media)
    kv = kv_dtype or ("bf16" if dtype in QUANTIZED else dtype)
    quant = check_quant(dtype, quant) if dtype in DTYPE_BYTES else quant
    return InferencePlan(spec, gpu, dtype, kv, phase_cost(spec, prefill, gpu, dtype, kv, tp, quant),
                         phase_cost(spec, decode, gpu, dtype, kv, tp, quant), tp, quant)
