"""Training budgets: the FLOPs of training on D tokens from the exact count, time and cost on K GPUs at an MFU, and
the MFU of a run from its measured throughput. No torch.

    >>> from tfcalc import load_preset
    >>> b = training_budget(load_preset("llama3-405b"), tokens=15_600_000_000_000)
    >>> f"{b.six_nd:.2e}"   # Llama 3 paper, sec. 3.4: 3.8e25 FLOPs for 405B parameters and 15.6T tokens
    '3.80e+25'

Conventions, stated once:
- A train step is forward + backward = 3 x forward for matmuls (backward computes the input and the weight
  gradients; not the input's of a patch embedding or an audio front end: docs/formulas.md). With recomputation the forward runs again during backward: `full` recomputes every block (the
  embeddings and the head are not recomputed: Megatron-LM's convention), `selective` only the attention cores
  (Korthikanti et al. 2022). The model FLOPs (MFU's numerator) never include recomputation; the hardware FLOPs
  (HFU's) do. A fused attention kernel (FlashAttention, torch SDPA; `attention="fused"`, the default) computes the
  scores q k^T again in its backward (5 matmuls of the core where eager's backward has 4: torch's
  `sdpa_backward_flop` counts the same): hardware FLOPs, once per core per step.
- `flops` uses attention over every (query, key) pair, what an eager model computes; `flops_causal` counts the
  pairs a causal mask keeps, what a FlashAttention kernel computes. MFU is reported on both.
- FLOPs per token are those of a train step on sequences of the spec's seq_len (exact fractions; integers for
  a decoder), times D tokens. Where the product is not whole (a pooler's once-per-sequence work, a window that
  splits pairs unevenly) it is rounded to the nearest FLOP.
- What a budget counts (`budget_unit`): tokens for a model of tokens, and for a multimodal language model its text
  tokens (each sequence of seq_len carrying the workload's images and audio: the towers' and connectors' work is in
  its FLOPs per token); images for a model of images (ViT), image-text pairs for a dual encoder (CLIP, SigLIP: a
  contrastive batch of batch_size pairs, its batch_size x batch_size logits), clips for a model of audio (Whisper: each
  of the workload's mel frames and seq_len decoder tokens). A step's FLOPs are count's train step (forward + backward:
  3 x forward, less a patch embedding's or audio front end's input gradient, which the images and audio need not,
  and with the gated delta rule's backward_extra), divided by the workload's units.
- The peak is the GPU's dense datasheet peak in one dtype: `--dtype` as given, else the recipe's (`training_peak`):
  an FP8 recipe's is the dense fp8 peak (TransformerEngine runs the blocks' linears in FP8; attention and the head
  stay 16-bit, so an FP8 run's MFU at the fp8 peak is lower than the same speed's at the bf16 peak), fp16-mixed's
  fp16, fp32's fp32, bf16's and bf16-mixed's (and no recipe's) bf16.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from fractions import Fraction

from ..arch import Workload
from ..counts import count
from ..errors import TfcalcError, check_positive_int
from ..spec import ModelSpec
from .gpus import Gpu

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("fused", "eager")


UNITS = {"token": "tokens", "image": "images", "pair": "image-text pairs", "clip": "clips"}


def budget_unit(spec: ModelSpec) -> str:
    """What a training budget of `spec` counts: "token" (a model of tokens, a multimodal language model's text
    tokens), "image" (a model of images: ViT), "pair" (a dual encoder: CLIP, SigLIP, whose towers meet in the logits
    alone, no tower's output among the text tower's tokens) or "clip" (a model of audio: Whisper)."""
    if spec.inputs == "images":
        return "image"
    if spec.inputs == "audio":
        return "clip"
    if spec.towers and not any(c.into_text or c.cross_attended for c in spec.connectors):
        return "pair"
    return "token"


def training_workload(spec: ModelSpec, workload: Workload | None = None) -> Workload:
    """The train step a budget is counted on (`workload`, else the spec's own): one sequence of seq_len tokens (with
    a multimodal model's images and audio), one image (ViT), one clip (Whisper), or a contrastive batch of the spec's
    batch_size image-text pairs (a dual encoder: its images are its texts' batch_size). Refused by field when it is
    not a train step or a dual encoder's images are not one per text."""
    from ..arch import default_workload
    from ..arch.towers import with_images

    unit = budget_unit(spec)
    if workload is None:
        own = default_workload(spec)
        batch = spec.batch_size if unit == "pair" else 1
        images = batch if unit == "pair" else None  # a dual encoder: one image per text
        workload = with_images(spec, own.model_copy(update={"batch_size": batch, "images": images}))
    if not isinstance(workload, Workload):
        raise TfcalcError(f"workload={workload!r}: expected a tfcalc.Workload (or None: the spec's own)")
    if workload.phase != "train":
        raise TfcalcError(f"workload.phase={workload.phase!r}: a training budget counts train steps (phase='train')")
    if unit == "pair":
        if workload.images is None:
            workload = workload.model_copy(update={"images": workload.batch_size})
        if workload.images != workload.batch_size:
            raise TfcalcError(f"images={workload.images}: {spec.label} is a dual encoder trained on image-text pairs, "
                              f"one image per text: images = batch_size ({workload.batch_size}), the contrastive "
                              "batch")
    return workload


@dataclass(frozen=True)
class TrainingBudget:
    spec: ModelSpec
    tokens: int  # the budget: D tokens, or (unit != "token") samples: images, image-text pairs, clips
    recompute: str
    flops_per_token: Fraction  # model FLOPs: forward + backward, every (query, key) pair; per unit
    flops_per_token_causal: Fraction
    hardware_flops_per_token: Fraction  # with the recomputed forward
    n_params: int  # active parameters (embeddings included, as Chinchilla and the Llama 3 paper count N), for 6ND
    gpus: int | None = None
    gpu_name: str | None = None
    peak_flops_per_s: int | None = None  # one GPU, dense, in the training dtype
    mfu: Fraction | None = None
    price_per_gpu_hour: Fraction | None = None
    peak_dtype: str | None = None  # the dtype of peak_flops_per_s (fp8 for an FP8 recipe)
    precision: str | None = None  # the training recipe, when given
    attention: str = "fused"
    unit: str = "token"  # budget_unit: token, image, pair, clip
    workload: Workload | None = None  # the train step counted (training_workload)

    @property
    def samples(self) -> int | None:
        """The budget in samples (images, pairs, clips); None for a budget of tokens."""
        return None if self.unit == "token" else self.tokens

    @property
    def flops(self) -> int:
        return _whole(self.tokens * self.flops_per_token)

    @property
    def flops_causal(self) -> int:
        return _whole(self.tokens * self.flops_per_token_causal)

    @property
    def hardware_flops(self) -> int:
        return _whole(self.tokens * self.hardware_flops_per_token)

    @property
    def six_nd(self) -> int | None:
        """The usual estimate, 6 N D (N: active parameters), beside the exact count; for a model of images D is the
        tokens its images are (patches and class token). None where no one D is the model's (a dual encoder's towers
        and an encoder-decoder of audio run on different tokens)."""
        if self.unit == "token":
            return 6 * self.n_params * self.tokens
        if self.unit == "image":
            return 6 * self.n_params * self.tokens * (self.workload.tokens // self.workload.batch_size)
        return None

    @property
    def seconds(self) -> float | None:
        """Wall time on `gpus` GPUs at `mfu` of the peak: model FLOPs (causal: what a fused kernel computes) over
        the achieved rate."""
        if None in (self.gpus, self.peak_flops_per_s, self.mfu):
            return None
        return float(Fraction(self.flops_causal) / (self.gpus * self.peak_flops_per_s * self.mfu))

    @property
    def gpu_hours(self) -> float | None:
        return None if self.seconds is None else self.seconds * self.gpus / 3600

    @property
    def cost(self) -> float | None:
        if self.gpu_hours is None or self.price_per_gpu_hour is None:
            return None
        return self.gpu_hours * float(self.price_per_gpu_hour)

    def to_dict(self) -> dict:
        def exact(q: Fraction) -> int | float:
            return q.numerator if q.denominator == 1 else float(q)

        per = "token" if self.unit == "token" else "sample"
        budget = {"tokens": self.tokens} if self.unit == "token" else {"samples": self.tokens, "sample": self.unit}
        media = {}
        if self.workload is not None and (self.unit != "token" or self.spec.towers):
            media["workload"] = self.workload.model_dump()
        if self.unit == "clip":  # each clip's mel frames, 100 a second
            media["audio_hours"] = self.tokens * self.workload.mel_frames / 100 / 3600
        six = self.six_nd
        return {
            **budget, "seq_len": self.spec.seq_len, **media, "recompute": self.recompute,
            "attention": self.attention,
            "flops": self.flops, "flops_causal": self.flops_causal, "hardware_flops": self.hardware_flops,
            f"flops_per_{per}": exact(self.flops_per_token),
            f"flops_per_{per}_causal": exact(self.flops_per_token_causal),
            "six_nd": six, "six_nd_over_flops_causal": None if six is None else float(Fraction(six, self.flops_causal)),
            "gpus": self.gpus, "gpu": self.gpu_name, "peak_flops_per_s": self.peak_flops_per_s,
            "peak_dtype": self.peak_dtype, "precision": self.precision,
            "mfu": None if self.mfu is None else float(self.mfu),
            "seconds": self.seconds, "days": None if self.seconds is None else self.seconds / 86400,
            "gpu_hours": self.gpu_hours,
            "price_per_gpu_hour": None if self.price_per_gpu_hour is None else float(self.price_per_gpu_hour),
            "cost": self.cost,
        }


def _positive(value: float) -> bool:
    """A finite number above 0 (not nan, not inf; not a bool, a string or a list)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        return False
    return 0 < value < float("inf")


def _whole(q: Fraction) -> int:
    return round(q)  # exact when whole (every decoder); else the nearest FLOP


def _budget(spec: ModelSpec, tokens, samples) -> tuple[str, int]:
    """(unit, the budget): `tokens` for a model of tokens, `samples` for the others; the other refused by name."""
    unit = budget_unit(spec)
    given, other = ("samples", samples) if unit != "token" else ("tokens", tokens)
    if (tokens if unit != "token" else samples) is not None:
        if unit == "token":
            raise TfcalcError(f"samples={samples!r}: {spec.label} is a model of tokens; its budget is tokens "
                              "(tokens=D)")
        raise TfcalcError(f"tokens={tokens!r}: {spec.label}'s budget is in {UNITS[unit]} (samples=N), not tokens")
    if not isinstance(other, int) or isinstance(other, bool) or other < 1:
        raise TfcalcError(f"{given}={other!r}: expected a positive integer")
    return unit, other


def training_budget(spec: ModelSpec, tokens: int | None = None, recompute: str = "none", gpus: int | None = None,
                    gpu_name: str | None = None, peak_flops_per_s: int | None = None, mfu: float | None = None,
                    price_per_gpu_hour: float | None = None, adapters=None, peak_dtype: str | None = None,
                    precision: str | None = None, attention: str = "fused", *, samples: int | None = None,
                    workload: Workload | None = None) -> TrainingBudget:
    """The FLOPs of training `spec` on `tokens` tokens (in sequences of spec.seq_len), and with `gpus`, a peak and
    an MFU, the time (and with a price, the cost). With `adapters` (`tfcalc.Adapters`): fine-tuning them on the
    frozen model. `attention`: "fused" or "eager", the attention kernel (its backward's matmuls: hardware FLOPs
    only). A model of images, a dual encoder or a model of audio (`budget_unit`) is given `samples` (images, pairs,
    clips) instead of tokens; `workload` is the train step counted (`training_workload`: default the spec's own)."""
    if recompute not in RECOMPUTE:
        raise TfcalcError(f"recompute={recompute!r}: expected one of {', '.join(RECOMPUTE)}")
    _check_attention(attention)
    unit, tokens = _budget(spec, tokens, samples)
    for field, value in (("gpus", gpus), ("mfu", mfu), ("price_per_gpu_hour", price_per_gpu_hour)):
        if value is not None and not _positive(value):
            raise TfcalcError(f"{field}={value!r}: expected a positive number")
    check_positive_int("gpus", gpus, optional=True)
    check_positive_int("peak_flops_per_s", peak_flops_per_s, optional=True)
    if gpu_name is not None and not isinstance(gpu_name, str):
        raise TfcalcError(f"gpu_name={gpu_name!r}: expected a string (or None)")
    if mfu is not None and mfu > 1:
        raise TfcalcError(f"mfu={mfu!r}: expected a fraction of the peak, at most 1 (0.4 for 40%)")
    workload = training_workload(spec, workload)
    per_token, per_token_causal, hardware, active = _per_token(spec, recompute, adapters, attention, workload)
    return TrainingBudget(spec, tokens, recompute, per_token, per_token_causal, hardware,
                          active, gpus, gpu_name, peak_flops_per_s,
                          None if mfu is None else Fraction(mfu), None if price_per_gpu_hour is None
                          else Fraction(price_per_gpu_hour), peak_dtype, precision, attention, unit, workload)


def _check_attention(attention: str) -> None:
    if attention not in ATTENTION:
        raise TfcalcError(f"attention={attention!r}: expected one of {', '.join(ATTENTION)}")


def _per_token(spec: ModelSpec, recompute: str, adapters=None, attention: str = "fused",
               workload: Workload | None = None) -> tuple[Fraction, Fraction, Fraction, int]:
    """(model FLOPs, model FLOPs with causal attention, hardware FLOPs) per unit (budget_unit: a token, an image, a
    pair, a clip) of a train step of `workload` (training_workload), and the active parameters: read off one count.
    With `adapters`, a fine-tuning step's (count's `finetune`: frozen linears' backward 1 x their forward, adapters'
    and attention cores' 2 x)."""
    workload = training_workload(spec, workload)
    r = count(spec, workload, adapters=adapters)
    units = r.flops.tokens if budget_unit(spec) == "token" else workload.batch_size
    model = r.flops.train_step  # 3 x forward; an input's gradient not computed (the images'), backward_extra
    model_causal = model - 3 * (r.flops.forward - r.flops.forward_causal)
    if r.finetune is not None:  # the cores' backward is 2 x theirs in either step: the causal saving is 3 x theirs
        model, model_causal = r.finetune.train_step, r.finetune.train_step - (model - model_causal)
    if recompute == "full":  # every block's forward again; not the embeddings (their projections included), the head
        again = sum(g.repeat * (sum(op.forward().values()) + sum(op.adapter_flops().values() if op.lora else ()))
                    for g in r.inventory.groups if g.block for op in g.ops)
    elif recompute == "selective":  # the attention cores (scores and values) again
        again = sum(repeat * sum(op.forward().values()) for op, repeat in r.inventory if op.role == "core")
    else:
        again = 0
    if attention == "fused":  # the kernel's backward computes each core's scores again
        again += sum(repeat * op.backward_recompute() for op, repeat in r.inventory if op.role == "core")
    return Fraction(model, units), Fraction(model_causal, units), Fraction(model + again, units), r.params.active


def mfu_of_run(spec: ModelSpec, tokens_per_s: float | None, gpus: int, peak_flops_per_s: int,
               recompute: str = "none", adapters=None, peak_dtype: str | None = None,
               precision: str | None = None, attention: str = "fused", *, samples_per_s: float | None = None,
               workload: Workload | None = None) -> dict:
    """The MFU (and HFU) of a measured run: model FLOPs per token x tokens/s over the GPUs' peak (with `adapters`,
    a fine-tuning run's step FLOPs). A model of images, a dual encoder or a model of audio: `samples_per_s` (images,
    pairs, clips a second) instead, on `workload` (training_workload)."""
    unit = budget_unit(spec)
    rate, field = (tokens_per_s, "tokens_per_second") if unit == "token" else (samples_per_s, "samples_per_second")
    wrong = samples_per_s if unit == "token" else tokens_per_s
    if wrong is not None:
        if unit == "token":
            raise TfcalcError(f"samples_per_second={samples_per_s!r}: {spec.label} is a model of tokens; its "
                              "throughput is tokens_per_second")
        raise TfcalcError(f"tokens_per_second={tokens_per_s!r}: {spec.label}'s throughput is in {UNITS[unit]} a "
                          "second (samples_per_second)")
    if not _positive(rate):
        raise TfcalcError(f"{field}={rate!r}: expected a positive number")
    if not _positive(gpus):
        raise TfcalcError(f"gpus={gpus!r}: expected a positive number")
    check_positive_int("gpus", gpus)
    check_positive_int("peak_flops_per_s", peak_flops_per_s)
    _check_attention(attention)
    per_token, per_token_causal, hardware, _ = _per_token(spec, recompute, adapters, attention, workload)
    peak = gpus * peak_flops_per_s
    try:  # an integer too large for a float (10**400 tokens/s, GPUs or FLOP/s) overflows here
        finite = math.isfinite(float(hardware) * rate / peak)
    except OverflowError:
        finite = False
    if not finite:
        raise TfcalcError(f"{field}={rate!r}: its MFU is not a finite number ({gpus} GPUs of "
                          f"{peak_flops_per_s:,} FLOP/s)")
    return {field: rate, **({} if unit == "token" else {"sample": unit}), "gpus": gpus,
            "peak_flops_per_s": peak_flops_per_s,
            "mfu": float(per_token) * rate / peak, "mfu_causal": float(per_token_causal) * rate / peak,
            "hfu": float(hardware) * rate / peak, "recompute": recompute, "peak_dtype": peak_dtype,
            "precision": precision, "attention": attention}


PEAK_DTYPE = {"fp32": "fp32", "fp16-mixed": "fp16", "bf16-mixed": "bf16", "bf16": "bf16"}  # else: an FP8 recipe


def training_peak(gpu_name: str, precision: str | None = None, dtype: str | None = None) -> tuple[Gpu, str, int]:
    """The GPU, the dtype and the dense peak (FLOP/s) an MFU is held against: `dtype` as given, else the
    recipe's (an FP8 recipe's: fp8; none: bf16). A GPU with no such peak is refused by name.

    >>> training_peak("h100-sxm", "fp8")[1:]   # H100 SXM datasheet: 1,978.9 TFLOP/s dense FP8
    ('fp8', 1978900000000000)"""
    from .gpus import lookup
    from .training import PRECISION_ALIASES, PRECISIONS, _choice

    card = lookup(gpu_name)
    typed = precision
    if precision is not None:
        _choice(precision, "precision", PRECISIONS)
        precision = PRECISION_ALIASES.get(precision, precision)
    fp8 = precision is not None and bool(PRECISIONS[precision].fp8)
    if dtype is None and precision is not None:
        dtype = "fp8" if fp8 else PEAK_DTYPE[precision]
        if dtype not in card.peak_flops:
            raise TfcalcError(f"precision={typed!r}: {card.name} has no dense {dtype} peak (it has "
                              f"{', '.join(card.peak_flops)})" + ("; FP8 training needs FP8 tensor cores (Hopper, "
                                                                  "Ada, Blackwell, MI300)" if fp8 else ""))
    dtype = dtype or "bf16"
    if dtype not in card.peak_flops:
        raise TfcalcError(f"dtype={dtype!r}: {card.name} has no {dtype} peak (it has {', '.join(card.peak_flops)})")
    return card, dtype, card.peak_flops[dtype]
