"""The torch pieces the reference model's block kinds share: norms that keep what a fused kernel keeps, the
activations, rotary tables, the attention core (eager or SDPA), attention sinks and the cache of a workload's
context. The block kinds' modules (`tfcalc/blocks/<kind>/reference.py`) and the model's frame
(`tfcalc.reference.model`) are built from them."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..spec import ModelSpec

ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),  # transformers' QuickGELUActivation
}


def is_fake(t: torch.Tensor) -> bool:
    """A FakeTensor (FakeTensorMode: shapes without data)."""
    try:
        from torch._subclasses.fake_tensor import is_fake
    except ImportError:  # pragma: no cover - every torch this package supports has it
        return False
    return is_fake(t)


def saving(x: torch.Tensor, *params: torch.Tensor) -> bool:
    """True when autograd will record this op (grad mode on, something requires grad), outside a jit trace."""
    return (torch.is_grad_enabled() and not torch.jit.is_tracing()
            and (x.requires_grad or any(p is not None and p.requires_grad for p in params)))


class _LayerNormFunction(torch.autograd.Function):
    """torch's native layer norm, keeping for backward what a fused layer norm keeps: the input, the weight and
    bias, and the mean and rstd per row in fp32 (the CPU kernel returns them in the input's dtype: they are kept
    in fp32 and handed back to its backward in that dtype)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), weight, bias, eps)
        ctx.stat_dtype = mean.dtype
        ctx.save_for_backward(x, weight, bias, mean.float(), rstd.float())
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        dtype = ctx.stat_dtype
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(
            dy, x, [x.shape[-1]], mean.to(dtype), rstd.to(dtype), weight, bias, list(ctx.needs_input_grad[:3]))
        return dx, dw, db, None


class _RMSNormFunction(torch.autograd.Function):
    """torch's fused RMS norm (`aten._fused_rms_norm`: one kernel on CUDA), keeping the input, the weight and the
    fp32 rstd per row. Its backward kernel exists on CUDA (and for fake and meta tensors); elsewhere (the CPU)
    the same gradient is computed here from the kept tensors."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        mask = list(ctx.needs_input_grad[:2])
        if x.device.type != "cpu" or is_fake(x):
            try:
                dx, dw = torch.ops.aten._fused_rms_norm_backward(dy, x, [x.shape[-1]], rstd, weight, mask)
                return dx, dw, None
            except NotImplementedError:  # no kernel for this backend: the formula below
                pass
        acc = torch.promote_types(x.dtype, torch.float32)
        x_hat = x.to(acc) * rstd
        g = dy.to(acc) * weight.to(acc)
        dx = (rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))).to(x.dtype)
        dw = (dy.to(acc) * x_hat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        return dx, dw, None


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm (same parameters, same values); with autograd on, one function that keeps only what a fused
    kernel keeps (see `_LayerNormFunction`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if saving(x, self.weight, self.bias):
            return _LayerNormFunction.apply(x, self.weight, self.bias, self.eps)
        return super().forward(x)


class RMSNorm(nn.RMSNorm):
    """nn.RMSNorm (same parameters, same values); with autograd on, the fused kernel that keeps the input and the
    fp32 rstd (see `_RMSNormFunction`). F.rms_norm off CUDA decomposes into ops that keep fp32 copies of the
    input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if saving(x, self.weight):
            return _RMSNormFunction.apply(x, self.weight, self.eps)
        return super().forward(x)


class _PerHeadNormFunction(torch.autograd.Function):
    """A norm over the last dim of x [..., heads, d] with weights [heads, d] (and bias) of each head's own, keeping what
    a fused kernel keeps: the input, the weights and the fp32 statistics per row (mean and rstd; RMS: rstd)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, rms):
        d = x.shape[-1]
        if rms:
            x_hat, rstd = torch.ops.aten._fused_rms_norm(x, [d], None, eps)
            mean = torch.zeros(0, device=x.device)
        else:
            x_hat, mean, rstd = torch.native_layer_norm(x, (d,), None, None, eps)
            mean = mean.float()
        ctx.rms, ctx.stat_dtype = rms, rstd.dtype
        ctx.save_for_backward(x, weight, bias, mean, rstd.float())
        y = x_hat * weight
        return y + bias if bias is not None else y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        acc = torch.promote_types(x.dtype, torch.float32)
        x_hat = (x.to(acc) * rstd) if ctx.rms else (x.to(acc) - mean) * rstd
        rows = tuple(range(x.dim() - 2))
        dw = (dy.to(acc) * x_hat).sum(rows).to(weight.dtype)
        db = dy.to(acc).sum(rows).to(bias.dtype) if bias is not None else None
        g = dy.to(acc) * weight.to(acc)
        if ctx.rms:
            dx = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
        else:
            dx = rstd * (g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True))
        return dx.to(x.dtype), dw, db, None, None


class PerHeadNorm(nn.Module):
    """A norm over each head's channels with weights of that head's own ([heads, d]; Cohere's q/k LayerNorms)."""

    def __init__(self, spec: ModelSpec, heads: int, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(heads, d))
        self.bias = nn.Parameter(torch.zeros(heads, d)) if spec.norm == "layernorm" else None
        self.rms, self.eps = spec.norm == "rmsnorm", 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., heads, d]
        if saving(x, self.weight, self.bias):
            return _PerHeadNormFunction.apply(x, self.weight, self.bias, self.eps, self.rms)
        d = x.shape[-1]
        y = (F.rms_norm(x, (d,), eps=self.eps) if self.rms else F.layer_norm(x, (d,), eps=self.eps)) * self.weight
        return y + self.bias if self.bias is not None else y


def make_norm(spec: ModelSpec, width: int | None = None) -> nn.Module:
    width = spec.d_model if width is None else width
    if spec.norm == "rmsnorm":
        return RMSNorm(width)
    return LayerNorm(width, bias=spec.norm == "layernorm")


def rotary_tables(offset: int, n: int, d_head: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [n, d] of positions offset.. (d: d_head rounded down to even), for `rotary`. A stack computes
    them once per forward and every layer shares them (what backward keeps of rotary is these two tables)."""
    d = d_head - d_head % 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    angles = torch.arange(offset, offset + n, device=device, dtype=torch.float32)[:, None] * inv_freq
    angles = torch.cat([angles, angles], -1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotary(x: torch.Tensor, offset: int = 0, tables: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Rotary position embedding (Su et al.) on x: [B, H, N, d_head] at positions offset.., rotate-half form;
    no parameters. An odd last channel is left as it is. `tables`: `rotary_tables` for these positions."""
    N = x.shape[-2]
    cos, sin = tables if tables is not None else rotary_tables(offset, N, x.shape[-1], x.device, x.dtype)
    d = cos.shape[-1]  # the rotated channels (partial rotary: the first rotary_dim), the rest as they are
    rot, rest = x[..., :d], x[..., d:]
    half1, half2 = rot[..., : d // 2], rot[..., d // 2:]
    rotated = rot * cos + torch.cat([-half2, half1], -1) * sin
    return torch.cat([rotated, rest], -1)


def keep_mask(s_q: int, s_k: int, causal: bool, window: int | None, device) -> torch.Tensor | None:
    """[s_q, s_k] booleans, True where query i (at key position s_k - s_q + i) may see key j; None: all."""
    if not causal:
        return None
    position = torch.arange(s_k - s_q, s_k, device=device)[:, None]
    key = torch.arange(s_k, device=device)[None, :]
    keep = key <= position
    if window is not None:
        keep = keep & (position - key < window)
    return keep


class AttentionCore(nn.Module):
    """softmax(q k^T / sqrt(d) + bias) v, the mask applied: the scores and value mixing, one module with no
    parameters.

    `explicit=True` computes it with two matmuls (what fvcore can trace op by op, and what a backward pass
    differentiates without recomputation); otherwise torch's scaled_dot_product_attention.

    k and v come at the key/value heads. With grouped-query attention the explicit path folds each group of
    H / Hkv query heads into the rows of its key/value head ([B, Hkv, g * s_q, dh] @ [B, Hkv, dh, s_k]: the same
    products, keys and values never repeated); SDPA gets them repeated to H heads (FlopCounterMode's SDPA
    formula wants equal heads). The mask is added as a constant (0 or -inf): an addition keeps nothing for
    backward, where masked_fill would keep the mask."""

    def __init__(self, causal: bool, window: int | None, explicit: bool):
        super().__init__()
        self.causal, self.window, self.explicit = causal, window, explicit
        # SDPA gets the key/value heads as they are (enable_gqa=True) where no mask is passed, as transformers'
        # sdpa path does (`use_gqa_in_sdpa`): what a training step keeps (tfcalc.verify.memory sets it)
        self.native_gqa = False

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                bias: torch.Tensor | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
        """`sinks`: one logit per query head [H] (gpt-oss), a column of each softmax row beside the keys' scores;
        SDPA has none, so with sinks the explicit path runs (the same matmuls)."""
        s_q, s_k = int(q.shape[-2]), int(k.shape[-2])  # ints, also under fvcore's jit trace
        H, Hkv = int(q.shape[1]), int(k.shape[1])
        plain_causal = bool(self.causal and self.window is None and s_q == s_k and bias is None)
        keep = None if plain_causal else keep_mask(s_q, s_k, self.causal, self.window, q.device)
        if not self.explicit and sinks is None:
            mask = keep if bias is None else bias if keep is None else bias.masked_fill(~keep, float("-inf"))
            gqa = Hkv != H and self.native_gqa and mask is None
            if Hkv != H and not gqa:  # GQA/MQA: each key/value head serves H / Hkv query heads
                k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=plain_causal,
                                                  **({"enable_gqa": True} if gqa else {}))
        B, dh, g = int(q.shape[0]), int(q.shape[-1]), H // Hkv
        if g > 1:  # query heads h = j * g + i .. of key/value head j: rows i * s_q + n of head j
            q = q.reshape(B, Hkv, g * s_q, dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)  # [B, Hkv, g s_q, dh] @ [B, Hkv, dh, s_k]
        if bias is not None:
            scores = scores + (bias if g == 1 else bias.reshape(bias.shape[0], Hkv, g * s_q, s_k))
        if plain_causal:
            keep = keep_mask(s_q, s_k, True, None, q.device)
        if keep is not None:
            blocked = torch.zeros(keep.shape, dtype=scores.dtype, device=scores.device)
            blocked = blocked.masked_fill(~keep, float("-inf"))
            scores = scores + (blocked if g == 1 else blocked.repeat(g, 1))
        probs = scores.softmax(-1) if sinks is None else _sink_softmax(scores, sinks, g, s_q)
        y = probs @ v  # [B, Hkv, g s_q, s_k] @ [B, Hkv, s_k, dh]
        return y if g == 1 else y.reshape(B, H, s_q, dh)


def _sink_softmax(scores: torch.Tensor, sinks: torch.Tensor, g: int, s_q: int) -> torch.Tensor:
    """softmax over each row's scores [B, Hkv, g s_q, s_k] and its query head's sink logit, the sink's column then
    dropped (a view: the one [.., s_k + 1] softmax output is what backward keeps). No matmul."""
    B, Hkv = int(scores.shape[0]), int(scores.shape[1])
    column = sinks.to(scores.dtype).view(Hkv, g, 1, 1).expand(Hkv, g, s_q, 1).reshape(1, Hkv, g * s_q, 1)
    logits = torch.cat([scores, column.expand(B, Hkv, g * s_q, 1)], dim=-1)
    return logits.softmax(-1)[..., :-1]


class Sinks(nn.Module):
    """The `attention/sinks` record: one learned logit per query head (weight [H]), read by the attention core."""

    def __init__(self, heads: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(heads))


def split_heads(x: torch.Tensor, heads: int, d_head: int) -> torch.Tensor:
    """[B, N, heads * d_head] -> [B, heads, N, d_head]"""
    B, N, _ = x.shape
    return x.view(B, N, heads, d_head).transpose(1, 2)


def run_core(core: AttentionCore, recompute: bool, q, k, v, bias=None, sinks=None) -> torch.Tensor:
    """The core, under torch.utils.checkpoint when it is recomputed in backward (selective recomputation)."""
    if recompute and torch.is_grad_enabled():
        return checkpoint(core, q, k, v, bias, sinks, use_reentrant=False, preserve_rng_state=False)
    return core(q, k, v, bias, sinks)


def cached(new: torch.Tensor, context: int) -> torch.Tensor:
    """The cache's `context` keys (or values) before the new ones: zeros, their shape is what counts."""
    if not context:
        return new
    B, H, _, d = new.shape
    return torch.cat([new.new_zeros(B, H, context, d), new], dim=2)

