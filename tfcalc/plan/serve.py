"""Serving capacity in a serving engine's own arithmetic (vLLM's V1 engine): the KV cache that fits beside the
weights, in blocks of `block_size` tokens, how many sequences of a context fit at once, and the longest context one
sequence can have. No torch.

    >>> from tfcalc import load_preset
    >>> from tfcalc.plan.gpus import lookup
    >>> c = serving_capacity(load_preset("llama3-8b"), lookup("h100"), context=8192)
    >>> c.block_bytes == 16 * 2 * 32 * 8 * 128 * 2   # 16 tokens x (K and V) x 32 layers x 8 KV heads x 128 x bf16
    True
    >>> c.kv_tokens == c.num_blocks * 16, c.max_sequences == c.num_blocks // (8192 // 16)
    (True, True)

The arithmetic, term by term, with the vLLM source each term follows (docs/serving.md has the citations):
- budget = floor(card bytes x gpu_memory_utilization) (CacheConfig.gpu_memory_utilization, default 0.9;
  Worker.determine_available_memory: `total_gpu_memory * gpu_memory_utilization - peak_memory`). The card's bytes
  are the datasheet's (tfcalc.plan.gpus); the driver reports a little less (vLLM logs 79.22 GiB on an H100 80GB).
- weights: tfcalc.plan.memory.weights_bytes (inference_memory's figure), one GPU's share under tensor parallelism.
- activation peak (an estimate; `activation_bytes` overrides it): vLLM's profiling pass runs one forward over
  max_num_batched_tokens tokens split into min(max_num_seqs, tokens) requests, then the sampler over one row per
  request. Estimated here as the largest single op's activations (its input and output: the bytes it moves, less
  weights) + the residual stream kept beside it (the layer's input and the running hidden state, 2 x tokens x
  d_model) + the sampler's fp32 logits [requests, vocab]. PyTorch's allocator rounds and caches: a measured peak is
  higher.
- non-torch memory (CUDA context, cuBLAS and NCCL buffers): vLLM measures it; here an assumed figure, labelled,
  that `non_torch_bytes` overrides: 1.79 GiB on one GPU and 3.58 GiB per GPU with tp > 1, the figures vLLM logged
  for Llama-3-8B on an H100 (vllm-project/vllm pull request 10511).
- available = budget - weights - activation peak - non-torch.
- a block holds `block_size` tokens of every cached layer's keys and values: block bytes = block_size x KV bytes
  per token (all layers) = block_size x L x page bytes per layer; blocks = floor(available / block bytes), which
  equals vLLM's get_num_blocks `available // page_size // num_layers` (floor(floor(a / p) / L) = floor(a / (p L))).
- tokens = blocks x block_size (vLLM's "GPU KV cache size"); sequences of `context` tokens at once =
  floor(blocks / ceil(context / block_size)) (get_max_concurrency_for_kv_cache_config, floored to whole
  sequences); the longest context of one sequence = tokens, capped by the model's learned position table.

Not modelled, said where it matters: a sliding-window or chunked (Llama 4) layer is paged like a full-attention one
(what vLLM does with its hybrid KV cache manager off; with it on, such layers keep fewer blocks: a chunked layer at
most attention_chunk_size + max_num_batched_tokens tokens a request, vLLM's ChunkedLocalAttentionSpec); recurrent state (Mamba, DeltaNet, short
convolutions) is counted per sequence beside the blocks (vLLM's hybrid allocator pages it as one block per sequence
per layer group, with the attention block size raised to match: not reproduced); an encoder-decoder's cache is not
planned.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import ceil

from ..arch import Workload, build, validate
from ..errors import TfcalcError, check_positive_int
from ..spec import ModelSpec
from .gpus import GiB, Gpu
from .memory import DTYPE_BYTES, QUANTIZED, inference_memory

BLOCK_SIZE = 16  # vllm/config/cache.py CacheConfig.block_size (CUDA default)
GPU_MEMORY_UTILIZATION = Fraction(9, 10)  # CacheConfig.gpu_memory_utilization
# vLLM's logged non-torch memory for Llama-3-8B on an H100 80GB (pull request 10511): 1.79 GiB at tp 1, 3.58 GiB at
# tp 2 (NCCL's buffers); GiB figures rounded to 0.01 in the log
NON_TORCH_TP1 = round(Fraction("1.79") * GiB)
NON_TORCH_TP = round(Fraction("3.58") * GiB)
LOGITS_BYTES = 4  # the sampler's logits are fp32


def default_batch_limits(gpu: Gpu) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that `vllm serve` takes by default on `gpu`
    (EngineArgs.get_batch_defaults, OPENAI_API_SERVER context): 8192 and 1024 on a GPU of 70 GiB or more that is not
    an A100, else 2048 and 256."""
    if gpu.memory_bytes >= 70 * GiB and "a100" not in gpu.name.lower():
        return 8192, 1024
    return 2048, 256


def default_non_torch(tp: int) -> int:
    return NON_TORCH_TP1 if tp == 1 else NON_TORCH_TP


@dataclass(frozen=True)
class ServingCapacity:
    spec: ModelSpec
    gpu: Gpu
    dtype: str
    kv_dtype: str
    tp: int
    gpu_memory_utilization: Fraction
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    context: int
    card_bytes: int
    budget_bytes: int
    weights_bytes: int
    activation_bytes: int
    activation_estimated: bool  # False: the caller's figure
    non_torch_bytes: int
    non_torch_assumed: bool  # False: the caller's figure
    kv_bytes_per_token: int  # every cached layer, one GPU
    state_bytes_per_sequence: int  # recurrent state, one GPU

    @property
    def _left(self) -> int:
        """The budget less the weights, the activation peak and non-torch memory: negative when they do not fit."""
        return self.budget_bytes - self.weights_bytes - self.activation_bytes - self.non_torch_bytes

    @property
    def available_bytes(self) -> int:
        """What is left for the KV cache (0 when the weights and the engine's own memory do not fit: vLLM then
        refuses to start; `shortfall_bytes` says by how much)."""
        return max(self._left, 0)

    @property
    def shortfall_bytes(self) -> int:
        """By how much the weights, the activation peak and non-torch memory exceed the budget (0 when they fit)."""
        return max(-self._left, 0)

    @property
    def block_bytes(self) -> int:
        return self.block_size * self.kv_bytes_per_token

    @property
    def num_blocks(self) -> int:
        """GPU blocks (0 for a model without a KV cache, or when nothing is left)."""
        return self.available_bytes // self.block_bytes if self.block_bytes else 0

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def blocks_per_sequence(self) -> int:
        return ceil(self.context / self.block_size) if self.block_bytes else 0

    @property
    def bytes_per_sequence(self) -> int:
        """One sequence of `context` tokens: its blocks and its recurrent state."""
        return self.blocks_per_sequence * self.block_bytes + self.state_bytes_per_sequence

    @property
    def max_sequences(self) -> int:
        """Sequences of `context` tokens whose blocks (and state) fit at once."""
        if not self.bytes_per_sequence:
            raise TfcalcError(f"{self.spec.label}: keeps neither a KV cache nor a recurrent state")
        return self.available_bytes // self.bytes_per_sequence

    @property
    def longest_context_by_memory(self) -> int | None:
        """Tokens of one sequence whose blocks (and state) fit; None without a KV cache (no bound)."""
        if not self.block_bytes:
            return None
        left = max(self.available_bytes - self.state_bytes_per_sequence, 0)
        return left // self.block_bytes * self.block_size

    @property
    def model_max_context(self) -> int | None:
        """The model's own bound where the spec knows it (a learned position table's rows)."""
        return self.spec.max_positions if self.spec.positions == "learned" else None

    @property
    def longest_context(self) -> int | None:
        bounds = [b for b in (self.longest_context_by_memory, self.model_max_context) if b is not None]
        return min(bounds) if bounds else None

    def to_dict(self) -> dict:
        return {
            "engine": "vllm", "gpu": self.gpu.name, "tp": self.tp, "dtype": self.dtype, "kv_dtype": self.kv_dtype,
            "card_bytes": self.card_bytes, "gpu_memory_utilization": float(self.gpu_memory_utilization),
            "budget_bytes": self.budget_bytes, "weights_bytes": self.weights_bytes,
            "activation_bytes": self.activation_bytes, "activation_estimated": self.activation_estimated,
            "max_num_batched_tokens": self.max_num_batched_tokens, "max_num_seqs": self.max_num_seqs,
            "non_torch_bytes": self.non_torch_bytes, "non_torch_assumed": self.non_torch_assumed,
            "available_bytes": self.available_bytes, "shortfall_bytes": self.shortfall_bytes,
            "block_size": self.block_size,
            "kv_bytes_per_token": self.kv_bytes_per_token, "block_bytes": self.block_bytes,
            "num_blocks": self.num_blocks, "kv_tokens": self.kv_tokens,
            "state_bytes_per_sequence": self.state_bytes_per_sequence, "context": self.context,
            "blocks_per_sequence": self.blocks_per_sequence, "bytes_per_sequence": self.bytes_per_sequence,
            "max_sequences": self.max_sequences if self.bytes_per_sequence else None,
            "longest_context_by_memory": self.longest_context_by_memory,
            "model_max_context": self.model_max_context, "longest_context": self.longest_context,
        }


def activation_peak(spec: ModelSpec, tokens: int, requests: int, dtype: str = "bf16", tp: int = 1) -> int:
    """Estimated activation peak of vLLM's profiling forward (module docstring): `tokens` split into `requests`
    requests, on one of `tp` GPUs."""
    check_positive_int("max_num_batched_tokens", tokens)
    check_positive_int("max_num_seqs", requests)
    requests = min(requests, tokens)
    act = 2 if dtype in QUANTIZED else int(DTYPE_BYTES[dtype])
    # the dummy run's requests: tokens // requests each (the remainder, if any, is left out: a few tokens)
    workload = Workload(phase="prefill", batch_size=requests, seq_len=tokens // requests)
    inv = build(spec, workload)
    try:
        validate(spec, inv.workload)
    except TfcalcError as e:  # the user's engine flags, not our workload's fields (seq_len), named first
        raise TfcalcError(f"max_num_batched_tokens={tokens}, max_num_seqs={requests}: the profiling pass's "
                          f"{requests:,} requests of {tokens // requests:,} tokens: {e}") from None
    largest = logits = 0
    for op, _ in inv:
        if op.role == "head":  # logits of the sampled row of each request, gathered whole (vocabulary-parallel)
            logits = max(logits, op.m * op.n * LOGITS_BYTES)
            continue
        cost = op.cost(Fraction(0), act, act, tp)  # weights read as 0 bytes: what remains is the activations
        if cost is not None:
            largest = max(largest, cost[1])
    residual = 2 * workload.tokens * spec.d_model * act
    return largest + residual + logits


def _fraction(name: str, value) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Fraction)):
        raise TfcalcError(f"{name}={value!r}: expected a number")
    try:
        fraction = Fraction(value)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise TfcalcError(f"{name}={value!r}: expected a number") from None
    return fraction


def serving_capacity(spec: ModelSpec, gpu: Gpu | str, context: int | None = None, dtype: str = "bf16",
                     kv_dtype: str | None = None, tp: int = 1, gpu_memory_utilization=GPU_MEMORY_UTILIZATION,
                     block_size: int = BLOCK_SIZE, max_num_batched_tokens: int | None = None,
                     max_num_seqs: int | None = None, non_torch_bytes: int | None = None,
                     activation_bytes: int | None = None) -> ServingCapacity:
    """The KV cache vLLM would allocate for `spec` on `gpu` (one of `tp` tensor-parallel GPUs), and how many
    sequences of `context` tokens (default: the spec's seq_len) fit at once. Defaults are vLLM's."""
    if isinstance(gpu, str):
        from .gpus import lookup

        gpu = lookup(gpu)
    elif not isinstance(gpu, Gpu):
        raise TfcalcError(f"gpu={gpu!r}: expected a tfcalc.plan.gpus.Gpu or a GPU's name ('h100', 'mi300x')")
    if not spec.causal or spec.cross_attends:
        raise TfcalcError(f"{spec.label}: serving capacity is planned for decoder-only models without "
                          "cross-attention (an encoder keeps no KV cache; a cross-attention cache, an "
                          "encoder-decoder's or Llama 3.2 Vision's vision tokens', is not modelled)")
    utilization = _fraction("gpu_memory_utilization", gpu_memory_utilization)
    if not 0 < utilization <= 1:
        raise TfcalcError(f"gpu_memory_utilization={gpu_memory_utilization!r}: expected a fraction in (0, 1]")
    check_positive_int("block_size", block_size)
    tokens_default, seqs_default = default_batch_limits(gpu)
    check_positive_int("max_num_batched_tokens", max_num_batched_tokens, optional=True)
    check_positive_int("max_num_seqs", max_num_seqs, optional=True)
    check_positive_int("context", context, optional=True)
    for name, value in (("non_torch_bytes", non_torch_bytes), ("activation_bytes", activation_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise TfcalcError(f"{name}={value!r}: expected a non-negative integer of bytes")
    batched = max_num_batched_tokens or tokens_default
    seqs = max_num_seqs or seqs_default
    context = context or spec.seq_len
    # one token decoded against context - 1 cached: the cache then holds `context` tokens (inference_memory's
    # figures: weights and KV bytes per token through their own functions)
    # (the cache's tokens whatever they encode: no image asked to fit them, the weights and KV per token the same)
    text = {"images": 0} if "vision" in spec.towers else {}
    m = inference_memory(spec, Workload(phase="decode", seq_len=1, context=context - 1, **text), dtype, kv_dtype,
                         tp=tp)
    card = gpu.memory_bytes
    budget = card * utilization.numerator // utilization.denominator
    act = activation_peak(spec, batched, seqs, dtype, tp) if activation_bytes is None else activation_bytes
    non_torch = default_non_torch(tp) if non_torch_bytes is None else non_torch_bytes
    return ServingCapacity(spec, gpu, dtype, m.kv_dtype, tp, utilization, block_size, batched, seqs, context, card,
                           budget, m.weights_bytes, act, activation_bytes is None, non_torch, non_torch_bytes is None,
                           m.kv_bytes_per_token, m.state_bytes_per_sequence)
