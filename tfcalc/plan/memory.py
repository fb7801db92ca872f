"""Inference memory: the weights in a dtype, the KV cache of a workload, and how many sequences fit on a GPU.
Folds over the op inventory; no torch.

    >>> from tfcalc import load_preset, Workload
    >>> m = inference_memory(load_preset("llama2-7b"), Workload(phase="decode", seq_len=1, context=4095))
    >>> m.kv_bytes_per_token, m.kv_cache_bytes == 4096 * m.kv_bytes_per_token   # 2 x 32 layers x 4096 x 2 bytes
    (524288, True)

Conventions, stated once:
- `dtype` is the weights': fp32 4 bytes, bf16/fp16 2, fp8/int8 1, int4 a half. fp8, int8 and int4 are weight-only
  quantization of the linear layers' weight matrices; token, position and relative-bias tables, norms and biases
  stay in 16 bits (as GPTQ/AWQ-style checkpoints keep them). The per-group scales of a quantized checkpoint are
  not counted (about 2 bytes per group of 32-128 weights): a flat figure. `quant` (tfcalc.plan.quant: a config's
  quantization_config or --quant) counts a format as it is stored instead, tensor by tensor, scales and zeros
  included, the head and routers left unquantized; `dtype` is then the unquantized tensors' (fp32, bf16, fp16).
- An fp8 KV cache adds the per-layer scales an engine keeps beside it (vLLM: fp32 k_scale and v_scale per
  attention layer; tfcalc.plan.quant.KV_SCALE_BYTES), a constant apart from the cache (`kv_scale_bytes`).
- The KV cache holds keys and values of every cached attention (a decoder's self-attention, and its
  cross-attention to the encoder's tokens) in `kv_dtype` (default: the weights' dtype for fp32, bf16 and fp16;
  bf16 for quantized weights). A sliding-window layer keeps at most `window` tokens.
- Recurrent state (a short convolution's last kernel - 1 input positions per channel: LFM2, Mamba2; an SSM's
  state) is a constant per sequence, whatever the context, apart from the KV cache: a convolution's in the
  activations' dtype (the weights' for fp32, bf16 and fp16; bf16 for quantized weights), an SSM state in fp32 (as
  transformers keeps it, and Nemotron-H's mamba_ssm_cache_dtype); tensor parallelism splits channels and heads.
- How many sequences fit counts the weights, the KV cache and the state only: activations of the step and the runtime's own
  memory (CUDA context, allocator slack; vLLM leaves 10% by default) are not counted.
- Tensor parallelism over `tp` GPUs (Megatron-LM's split, as vLLM serves): the figures are one GPU's. Column-
  parallel linears keep n / tp of their outputs (and bias), row-parallel ones k / tp of their inputs (their bias
  whole), the token table and an untied head V / tp rows; norms, routers and position tables are whole on every
  GPU. The KV cache keeps Hkv / tp key/value heads (one, copied, when tp > Hkv); a latent (MLA) is whole on each.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from math import ceil

from ..arch import Workload, build, validate
from ..counts import Breakdown, folds
from ..errors import TfcalcError, check_capacity
from ..spec import ModelSpec

DTYPE_BYTES: dict[str, Fraction] = {"fp32": Fraction(4), "bf16": Fraction(2), "fp16": Fraction(2),
                                    "fp8": Fraction(1), "int8": Fraction(1), "int4": Fraction(1, 2)}
QUANTIZED = ("fp8", "int8", "int4")
KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8")


def _dtype(value: str, field: str, allowed) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise TfcalcError(f"{field}={value!r}: expected one of {', '.join(allowed)}")
    return value


@dataclass(frozen=True)
class InferenceMemory:
    spec: ModelSpec
    workload: Workload
    dtype: str
    kv_dtype: str
    weights_bytes: int
    kv_cache: Breakdown  # bytes per cached attention component, for the whole workload
    kv_bytes_per_token: int  # one more token of one sequence, every layer (before a window caps the total)
    # bytes of recurrent state per component, for the whole workload
    state: Breakdown = field(default_factory=lambda: Breakdown({}))
    capacity_bytes: int | None = None  # the GPU's memory, when one is named
    gpu_name: str | None = None
    tp: int = 1  # tensor-parallel GPUs: every figure is one GPU's
    # when it does not fit on the GPU named: the smallest tensor-parallel size (a power of two the heads take, up to
    # MAX_TP) at which one GPU's weights and cache fit; None when it fits, no GPU is named, or none up to MAX_TP does
    smallest_tp: int | None = None
    state_dtypes: dict = field(default_factory=dict)  # component -> the dtype its state is kept in
    quant: object = None  # tfcalc.plan.quant.Quant, when the weights are stored in a quantized format
    weights: object = None  # tfcalc.plan.quant.WeightBytes: per component, with a quant
    kv_scale_bytes: int = 0  # the scales an engine keeps beside a quantized KV cache (all layers)

    @property
    def kv_cache_bytes(self) -> int:
        return self.kv_cache.total

    @property
    def state_bytes(self) -> int:
        return self.state.total

    @property
    def state_bytes_per_sequence(self) -> int:
        return self.state_bytes // self.workload.batch_size

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.state_bytes + self.kv_scale_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_bytes is None else self.total_bytes <= self.capacity_bytes

    @property
    def max_sequences(self) -> int | None:
        """Sequences of this workload's length whose KV cache and state fit beside the weights (None without a
        GPU)."""
        if self.capacity_bytes is None:
            return None
        per_sequence = (self.kv_cache_bytes + self.state_bytes) // self.workload.batch_size
        room = self.capacity_bytes - self.weights_bytes - self.kv_scale_bytes
        return max(0, room) // per_sequence if per_sequence else None

    def to_dict(self) -> dict:
        return {
            "workload": {**self.workload.model_dump(), "keys": self.workload.keys},
            "dtype": self.dtype, "kv_dtype": self.kv_dtype,
            "weights_bytes": self.weights_bytes, "kv_cache_bytes": self.kv_cache_bytes,
            "kv_cache_components": self.kv_cache.to_dict(), "kv_bytes_per_token": self.kv_bytes_per_token,
            "state_bytes": self.state_bytes, "state_components": self.state.to_dict(),
            "state_bytes_per_sequence": self.state_bytes_per_sequence, "state_dtypes": dict(self.state_dtypes),
            "total_bytes": self.total_bytes, "gpu": self.gpu_name, "capacity_bytes": self.capacity_bytes,
            "fits": self.fits, "max_sequences": self.max_sequences, "tp": self.tp, "smallest_tp": self.smallest_tp,
            **({"kv_scale_bytes": self.kv_scale_bytes} if self.kv_scale_bytes else {}),
            **({"quant": self.quant.to_dict(), "weights": self.weights.to_dict()} if self.quant is not None else {}),
        }


def check_tp(spec: ModelSpec, tp: int) -> None:
    """Refuse a tensor-parallel size the model's heads cannot take, naming the value."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise TfcalcError(f"tp={tp!r}: expected a positive integer")
    if spec.towers and tp > 1:
        raise TfcalcError(f"tp={tp}: {spec.label} has a {' and '.join(spec.towers)} tower beside its language model; "
                          "its tensor-parallel split is not planned yet (tp=1, or --tower text)")
    kv = [spec.n_kv_heads] + ([spec.global_n_kv_heads] if spec.global_n_kv_heads else [])
    if tp > 1 and (spec.n_heads % tp or any(k % tp and tp % k for k in kv)):
        raise TfcalcError(f"tp={tp}: tensor parallelism splits the attention heads; it must divide n_heads="
                          f"{spec.n_heads}, and divide or be a multiple of n_kv_heads={spec.n_kv_heads}"
                          + (f" and global_n_kv_heads={spec.global_n_kv_heads}" if spec.global_n_kv_heads else ""))


def check_quant(dtype: str, quant, spec: ModelSpec | None = None):
    """`quant` as a tfcalc.plan.quant.Quant (or None; a format's name is read); a quantized format stores the linear
    layers itself: `dtype` is then the other tensors' (16 or 32 bits)."""
    from .quant import as_quant

    quant = as_quant(quant)
    if quant is not None and spec is not None and spec.towers:
        raise TfcalcError(f"quant={quant.name!r}: {spec.label} has a {' and '.join(spec.towers)} tower beside its "
                          "language model; which of its linears a quantized checkpoint stores quantized is not "
                          "modelled yet (--tower text)")
    if quant is not None and dtype in QUANTIZED:
        raise TfcalcError(f"dtype={dtype!r}: with quant={quant.name!r} the dtype is the unquantized tensors' "
                          "(fp32, bf16 or fp16); give one or the other")
    return quant


def weights_bytes(spec: ModelSpec, dtype: str, tp: int = 1, quant=None) -> int:
    """Bytes of the weights in `dtype` (quantized dtypes: the linear layers' matrices only, the rest 16-bit), on
    one of `tp` tensor-parallel GPUs; with `quant` (tfcalc.plan.quant.Quant), its format tensor by tensor and the
    rest in `dtype`."""
    _dtype(dtype, "dtype", tuple(DTYPE_BYTES))
    check_tp(spec, tp)
    if quant is not None:
        from .quant import weight_bytes

        quant = check_quant(dtype, quant, spec)
        if quant is not None:
            return weight_bytes(spec, quant, tp, int(DTYPE_BYTES[dtype])).total
    inv = build(spec)
    if tp == 1:
        total = folds.params(inv).total
        matrices = folds.matmul_weights(inv)
    else:
        total = sum(sets * sum(op.tensors(tp, 1, False)) for op, sets in inv.parameters())  # one GPU's share
        matrices = sum(sets * op.matrix_params(tp) for op, sets in inv.parameters())
    if dtype not in QUANTIZED:
        return int(total * DTYPE_BYTES[dtype])
    return ceil(matrices * DTYPE_BYTES[dtype]) + (total - matrices) * 2


def inference_memory(spec: ModelSpec, workload: Workload, dtype: str = "bf16", kv_dtype: str | None = None,
                     capacity_bytes: int | None = None, gpu_name: str | None = None,
                     tp: int = 1, quant=None) -> InferenceMemory:
    """Weights and KV cache of `spec` on an inference `workload` (prefill or decode), on one GPU or on each of `tp`
    tensor-parallel GPUs; `quant` (tfcalc.plan.quant.Quant): the weights in a quantized format."""
    if not isinstance(workload, Workload) or workload.phase == "train":
        raise TfcalcError("workload: inference memory is for phase 'prefill' or 'decode' (training memory is "
                          "another plan)")
    check_capacity(capacity_bytes, gpu_name)
    kv_dtype = _dtype(kv_dtype or ("bf16" if dtype in QUANTIZED else dtype), "kv_dtype", KV_DTYPES)
    inv = build(spec, workload)
    validate(spec, inv.workload)
    size = DTYPE_BYTES[kv_dtype]
    _dtype(dtype, "dtype", tuple(DTYPE_BYTES))
    quant = check_quant(dtype, quant, spec)
    detail = None
    if quant is not None:
        from .quant import weight_bytes

        check_tp(spec, tp)
        detail = weight_bytes(spec, quant, tp, int(DTYPE_BYTES[dtype]))
        weights = detail.total
    else:
        weights = weights_bytes(spec, dtype, tp)
    from .quant import KV_SCALE_BYTES

    cached_layers = sum(repeat for op, repeat in inv if op.cache(tp))
    cache = Breakdown({name: int(n * size) for name, n in folds.kv_cache(inv, tp).items()})
    act = DTYPE_BYTES["bf16" if dtype in QUANTIZED else dtype]
    state = folds.state_bytes(inv, tp, act)
    act_name = "bf16" if dtype in QUANTIZED else dtype
    state_dtypes = {name: "fp32" if op.state_bytes == 4 else act_name for op, _ in inv for name in op.state(tp)}
    plan = InferenceMemory(spec, inv.workload, dtype, kv_dtype, weights, cache,
                           int(folds.kv_per_token(inv, tp) * size), state, capacity_bytes, gpu_name, tp,
                           state_dtypes=state_dtypes, quant=quant, weights=detail,
                           kv_scale_bytes=KV_SCALE_BYTES.get(kv_dtype, 0) * cached_layers)
    if plan.fits is False:
        plan = replace(plan, smallest_tp=_smallest_tp(spec, inv, dtype, size, act, capacity_bytes, tp, quant))
    return plan


MAX_TP = 64  # the largest tensor-parallel size the fit search tries (eight nodes of eight)


def _smallest_tp(spec: ModelSpec, inv, dtype: str, kv_size: Fraction, act: Fraction, capacity: int,
                 tp: int, quant=None) -> int | None:
    """The smallest power of two above `tp`, up to MAX_TP, that the heads take and at which one GPU's weights, KV
    cache and state fit in `capacity`."""
    n = tp * 2
    while n <= MAX_TP:
        try:
            check_tp(spec, n)
        except TfcalcError:
            n *= 2
            continue
        if (weights_bytes(spec, dtype, n, quant) + int(folds.kv_cache(inv, n).total * kv_size)
                + folds.state_bytes(inv, n, act).total <= capacity):
            return n
        n *= 2
    return None
