"""A real torch.nn.Module built from any ModelSpec, for a workload: one module per builder of the inventory
(`tfcalc.arch.builders`), each laid out as its builder's op records say.

Module names follow tfcalc's component names (`blocks.3.attention.qkv` is `attention/qkv`,
`decoder.blocks.0.cross_attention.kv` is `decoder/cross_attention/kv`), so that counters' per-module figures map
onto the analytic breakdown (see `tfcalc.verify.components`).

The workload is the model's: `build_model(spec, workload=...)`. With cached tokens (prefill with a context,
decode) each attention layer concatenates a cache of `context` keys and values (zeros: the shapes are what
is counted) with the new ones; in decode an encoder-decoder's encoder does not run and its cross-attention
keys and values come from the cache.

Mixture of experts, on a real device: a softmax router picks the top_k experts of each token and each expert
runs on exactly the tokens sent to it. On the meta device there is no data to route on, so routing is
deterministic: token t's j-th choice is slot i = t * top_k + j, and slot i goes to expert i mod n_experts
(round robin). Every token still goes through exactly top_k distinct experts, so expert FLOPs equal
tokens * top_k * one expert's FLOPs on both paths. Under torch's FakeTensorMode (tensors without data, used to
measure training memory) the router's softmax, top-k and weights run as on a real device and the choice is the
same round robin, slot i = t * top_k + j going to expert i mod n_experts.

What a train step keeps for backward is what an efficient implementation keeps (`tfcalc.verify.memory` itemises
it): each norm its input and its fp32 statistics (one autograd function over the native kernels, as fused norms
do), q, k and v once each (contiguous, k and v at the key/value heads: grouped-query attention folds each group
of query heads into the rows of one key/value head instead of repeating keys and values), the causal or window
mask added as a constant (nothing kept), the rotary cos/sin tables once per forward, shared by every layer.
`recompute="selective"` runs the attention core under torch.utils.checkpoint (its q, k, v kept, its scores and
probabilities recomputed in backward); `recompute="full"` checkpoints each block (its input kept).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..arch import Layer, Stack, Workload, default_workload, stacks
from ..spec import ModelSpec

ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}


RECOMPUTE = ("none", "selective", "full")


def _is_fake(t: torch.Tensor) -> bool:
    """A FakeTensor (FakeTensorMode: shapes without data)."""
    try:
        from torch._subclasses.fake_tensor import is_fake
    except ImportError:  # pragma: no cover - every torch this package supports has it
        return False
    return is_fake(t)


def _saving(x: torch.Tensor, *params: torch.Tensor) -> bool:
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
        if x.device.type != "cpu" or _is_fake(x):
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
        if _saving(x, self.weight, self.bias):
            return _LayerNormFunction.apply(x, self.weight, self.bias, self.eps)
        return super().forward(x)


class RMSNorm(nn.RMSNorm):
    """nn.RMSNorm (same parameters, same values); with autograd on, the fused kernel that keeps the input and the
    fp32 rstd (see `_RMSNormFunction`). F.rms_norm off CUDA decomposes into ops that keep fp32 copies of the
    input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _saving(x, self.weight):
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
        if _saving(x, self.weight, self.bias):
            return _PerHeadNormFunction.apply(x, self.weight, self.bias, self.eps, self.rms)
        d = x.shape[-1]
        y = (F.rms_norm(x, (d,), eps=self.eps) if self.rms else F.layer_norm(x, (d,), eps=self.eps)) * self.weight
        return y + self.bias if self.bias is not None else y


def make_norm(spec: ModelSpec, width: int | None = None) -> nn.Module:
    width = spec.d_model if width is None else width
    if spec.norm == "rmsnorm":
        return RMSNorm(width)
    return LayerNorm(width, bias=spec.norm == "layernorm")


class Embedding(nn.Module):
    """Token table (unless an encoder-decoder shares one), positions, token types, a norm; with a factorised
    embedding (d_embedding, ALBERT) all of them d_embedding wide, then a projection to d_model."""

    def __init__(self, spec: ModelSpec, own_token_table: bool, n_layers: int = 0):
        super().__init__()
        D = spec.d_embedding or spec.d_model
        self.token = nn.Embedding(spec.vocab_size, D) if own_token_table else None
        self.position = nn.Embedding(spec.max_positions, D) if spec.positions == "learned" else None
        self.token_type = nn.Embedding(spec.n_token_types, D) if spec.n_token_types else None
        self.norm = make_norm(spec, D) if spec.embedding_norm else None
        self.projection = nn.Linear(D, spec.d_model) if spec.d_embedding else None
        self.sinusoidal = spec.positions == "sinusoidal"
        self.per_layer = self.per_layer_projection = self.per_layer_norm = None
        if spec.d_per_layer_input:  # Gemma 4's per-layer embeddings: n_layers slices of P per token
            self.n_layers, P = n_layers, spec.d_per_layer_input
            self.per_layer = nn.Embedding(spec.per_layer_vocab or spec.vocab_size, n_layers * P)
            self.per_layer_projection = nn.Linear(spec.d_model, n_layers * P, bias=False)
            self.per_layer_norm = RMSNorm(P)

    def per_layer_inputs(self, tokens: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """[B, N, n_layers, P]: the token's per-layer table row plus the normed projection of its embedding,
        times 2^-0.5 (Gemma 4's project_per_layer_inputs)."""
        B, N = tokens.shape
        projected = self.per_layer_norm(self.per_layer_projection(x).view(B, N, self.n_layers, -1))
        # the token ids are below both vocabularies (example_inputs)
        return (projected + self.per_layer(tokens).view(B, N, self.n_layers, -1)) * 2 ** -0.5

    def forward(self, tokens: torch.Tensor, token_types: torch.Tensor | None, offset: int,
                table: nn.Embedding | None) -> torch.Tensor:
        N = tokens.shape[1]
        x = (table if self.token is None else self.token)(tokens)
        if self.position is not None:
            x = x + self.position(torch.arange(offset, offset + N, device=tokens.device))
        if self.sinusoidal:
            x = x + sinusoidal_table(offset + N, x.shape[-1], x.device, x.dtype)[offset:]
        if self.token_type is not None:
            x = x + self.token_type(token_types)
        x = self.norm(x) if self.norm is not None else x
        return self.projection(x) if self.projection is not None else x


def sinusoidal_table(n: int, d: int, device, dtype) -> torch.Tensor:
    """Vaswani et al.: sin on even channels, cos on odd ones; no parameters."""
    position = torch.arange(n, device=device, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, d, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d, device=device)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)[:, : d // 2]
    return table.to(dtype)


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

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                bias: torch.Tensor | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
        """`sinks`: one logit per query head [H] (gpt-oss), a column of each softmax row beside the keys' scores;
        SDPA has none, so with sinks the explicit path runs (the same matmuls)."""
        s_q, s_k = int(q.shape[-2]), int(k.shape[-2])  # ints, also under fvcore's jit trace
        H, Hkv = int(q.shape[1]), int(k.shape[1])
        plain_causal = bool(self.causal and self.window is None and s_q == s_k and bias is None)
        keep = None if plain_causal else keep_mask(s_q, s_k, self.causal, self.window, q.device)
        if not self.explicit and sinks is None:
            if Hkv != H:  # GQA/MQA: each key/value head serves H / Hkv query heads
                k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
            mask = keep if bias is None else bias if keep is None else bias.masked_fill(~keep, float("-inf"))
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=plain_causal)
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


def _heads(x: torch.Tensor, heads: int, d_head: int) -> torch.Tensor:
    """[B, N, heads * d_head] -> [B, heads, N, d_head]"""
    B, N, _ = x.shape
    return x.view(B, N, heads, d_head).transpose(1, 2)


def _run_core(core: AttentionCore, recompute: bool, q, k, v, bias=None, sinks=None) -> torch.Tensor:
    """The core, under torch.utils.checkpoint when it is recomputed in backward (selective recomputation)."""
    if recompute and torch.is_grad_enabled():
        return checkpoint(core, q, k, v, bias, sinks, use_reentrant=False, preserve_rng_state=False)
    return core(q, k, v, bias, sinks)


def _cached(new: torch.Tensor, context: int) -> torch.Tensor:
    """The cache's `context` keys (or values) before the new ones: zeros, their shape is what counts."""
    if not context:
        return new
    B, H, _, d = new.shape
    return torch.cat([new.new_zeros(B, H, context, d), new], dim=2)


class Attention(nn.Module):
    """The `attention` builder: fused q/k/v, the core over cache + new keys, the output projection."""

    def __init__(self, spec: ModelSpec, layer: Layer, causal: bool, explicit: bool, recompute: str = "none"):
        super().__init__()
        H = spec.n_heads
        dh, Hkv, self.k_eq_v = spec.attention_shape(layer.window is not None)
        self.n_heads, self.n_kv_heads, self.d_head = H, Hkv, dh
        # KV sharing (Gemma 4): a shared block takes the keys and values the last earlier block of its kind (its
        # window) put in `kv_store` (a dict the stack hands its blocks each forward); it projects only q
        self.kv_shared, self.kv_kind, self.kv_store = layer.kv_shared, layer.window, None
        kv_width = 0 if self.kv_shared else (1 if self.k_eq_v else 2) * Hkv * dh
        # a global block whose values are its keys (Gemma 4) has no value projection
        self.qkv = nn.Linear(spec.d_model, H * dh + kv_width, bias=spec.has_qkv_bias)
        self.core = AttentionCore(causal, layer.window, explicit)
        self.sinks = Sinks(H) if spec.attention_sinks else None
        self.out = nn.Linear(H * dh, spec.d_model, bias=spec.bias)
        self.rotary = spec.positions == "rotary"
        self.recompute_core = recompute == "selective"
        self.qk_norm = spec.qk_norm
        if spec.qk_norm == "per_head":  # weights [H, dh] and [Hkv, dh]
            self.q_norm = PerHeadNorm(spec, H, dh)
            self.k_norm = PerHeadNorm(spec, Hkv, dh)
        elif spec.qk_norm != "none":  # per head: weight [dh]; full: [H*dh] and [Hkv*dh]
            head = spec.qk_norm == "head"
            self.q_norm = make_norm(spec, dh if head else H * dh)
            self.k_norm = make_norm(spec, dh if head else Hkv * dh)
        if self.kv_shared and spec.qk_norm != "none":
            self.k_norm = None

    def forward(self, x: torch.Tensor, context: int = 0, bias: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        B, N, _ = x.shape
        H, Hkv, dh = self.n_heads, self.n_kv_heads, self.d_head
        if self.kv_shared:
            return self._with_shared_kv(x, context, bias, rope)
        if self.k_eq_v:  # the values are the key projection's output, before the key norm and rotary
            q, k = self.qkv(x).split([H * dh, Hkv * dh], dim=-1)
            v = k
        else:
            q, k, v = self.qkv(x).split([H * dh, Hkv * dh, Hkv * dh], dim=-1)
        if self.qk_norm != "none":
            # each norm keeps a copy of its input, not a view of the fused projection's output (which would keep
            # v's part alive too): what a model with separate q and k projections keeps
            if self.qk_norm in ("head", "per_head"):  # over each head's dh channels: [B, N, heads, dh]
                q = self.q_norm(q.reshape(B, N, H, dh).contiguous()).view(B, N, H * dh)
                k = self.k_norm(k.reshape(B, N, Hkv, dh).contiguous()).view(B, N, Hkv * dh)
            else:  # over all heads: [B, N, heads * dh]
                q, k = self.q_norm(q.contiguous()), self.k_norm(k.contiguous())
        q, k, v = _heads(q, H, dh), _heads(k, Hkv, dh), _heads(v, Hkv, dh)
        if self.rotary:
            q, k = rotary(q, context, rope), rotary(k, context, rope)
        # q, k, v each in its own storage: the fused projection's output is not kept alive by views of it
        q, k, v = q.contiguous(), _cached(k, context).contiguous(), _cached(v, context).contiguous()
        if self.kv_store is not None:  # the last block of this kind before the shared ones leaves its own
            self.kv_store[self.kv_kind] = k, v
        y = _run_core(self.core, self.recompute_core, q, k, v, bias, None if self.sinks is None else self.sinks.weight)
        return self.out(y.transpose(1, 2).reshape(B, N, H * dh))

    def _with_shared_kv(self, x: torch.Tensor, context: int, bias, rope) -> torch.Tensor:
        B, N, _ = x.shape
        H, dh = self.n_heads, self.d_head
        q = self.qkv(x)
        if self.qk_norm in ("head", "per_head"):
            q = self.q_norm(q.view(B, N, H, dh)).view(B, N, H * dh)
        elif self.qk_norm != "none":
            q = self.q_norm(q)
        q = _heads(q, H, dh)
        if self.rotary:
            q = rotary(q, context, rope)
        k, v = self.kv_store[self.kv_kind]
        y = _run_core(self.core, self.recompute_core, q.contiguous(), k, v, bias,
                      None if self.sinks is None else self.sinks.weight)
        return self.out(y.transpose(1, 2).reshape(B, N, H * dh))


class LatentAttention(nn.Module):
    """The `attention` builder for multi-head latent attention (kv_lora_rank set; DeepSeek-V2, V3): kv_a gives the
    latent [B, N, kv_lora_rank] (normed by kv_a_norm) and one rotary key [B, 1, N, qk_rope_dim] all heads share;
    q_a, q_a_norm, q_b (or q) the queries. Rotary turns only the rope channels (the last qk_rope_dim of each query
    head and the shared key); the nope channels are not rotated. With cached tokens the cache holds the latent and
    the rotary key (zeros here), and kv_b expands every key's latent, cached and new, per head into nope keys and
    values, as transformers' eager path does. The core sees query/key heads of qk_nope_dim + qk_rope_dim and value
    heads of v_head_dim, one key/value head per query head."""

    def __init__(self, spec: ModelSpec, layer: Layer, causal: bool, explicit: bool, recompute: str = "none"):
        super().__init__()
        D, H, bias = spec.d_model, spec.n_heads, spec.has_qkv_bias
        self.n_heads, self.r_kv, self.d_rope = H, spec.kv_lora_rank, spec.qk_rope_dim
        self.d_nope, self.d_v = spec.qk_nope_dim, spec.v_head_dim
        d_qk = self.d_nope + self.d_rope
        self.kv_a = nn.Linear(D, self.r_kv + self.d_rope, bias=bias)
        self.kv_a_norm = make_norm(spec, self.r_kv)
        if spec.q_lora_rank is not None:
            self.q_a = nn.Linear(D, spec.q_lora_rank, bias=bias)
            self.q_a_norm = make_norm(spec, spec.q_lora_rank)
            self.q_b = nn.Linear(spec.q_lora_rank, H * d_qk, bias=False)
            self.q = None
        else:
            self.q_a = self.q_a_norm = self.q_b = None
            self.q = nn.Linear(D, H * d_qk, bias=bias)
        self.kv_b = nn.Linear(self.r_kv, H * (self.d_nope + self.d_v), bias=False)
        self.core = AttentionCore(causal, layer.window, explicit)
        self.out = nn.Linear(H * self.d_v, D, bias=spec.bias)
        self.recompute_core = recompute == "selective"

    def forward(self, x: torch.Tensor, context: int = 0, bias: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        B, N, _ = x.shape
        H, nope, d_rope, d_v = self.n_heads, self.d_nope, self.d_rope, self.d_v
        latent, k_rope = self.kv_a(x).split([self.r_kv, d_rope], dim=-1)
        # [B, N, r_kv]: the norm keeps a copy of its own (clone: .contiguous() of a view whose other dims are 1
        # would return the view, and keep the whole kv_a output alive)
        latent = self.kv_a_norm(latent.clone())
        q = self.q(x) if self.q is not None else self.q_b(self.q_a_norm(self.q_a(x)))
        q_nope, q_rope = _heads(q, H, nope + d_rope).split([nope, d_rope], dim=-1)
        k_rope = k_rope.unsqueeze(1)  # [B, 1, N, rope]: one rotary key for every head
        q_rope, k_rope = rotary(q_rope, context, rope), rotary(k_rope, context, rope)
        if context:  # the cached latents and rotary keys before the new ones
            latent = torch.cat([latent.new_zeros(B, context, self.r_kv), latent], dim=1)
            k_rope = _cached(k_rope, context)
        k_nope, v = _heads(self.kv_b(latent), H, nope + d_v).split([nope, d_v], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(-1, H, -1, -1)], dim=-1)
        y = _run_core(self.core, self.recompute_core, q, k, v.clone(), bias)  # v in its own storage
        return self.out(y.transpose(1, 2).reshape(B, N, H * d_v))


class CrossAttention(nn.Module):
    """The `cross_attention` builder: queries from the decoder, keys and values from the encoder's output, or,
    in decode, from the cache (`src_len` of them)."""

    def __init__(self, spec: ModelSpec, explicit: bool, recompute: str = "none"):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = spec.n_heads, spec.n_kv_heads, spec.d_head
        self.q = nn.Linear(spec.d_model, spec.d_attn, bias=spec.has_qkv_bias)
        self.kv = nn.Linear(spec.d_model, 2 * spec.d_kv, bias=spec.has_qkv_bias)
        self.core = AttentionCore(False, None, explicit)
        self.out = nn.Linear(spec.d_attn, spec.d_model, bias=spec.bias)
        self.recompute_core = recompute == "selective"

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None, src_len: int) -> torch.Tensor:
        B, N, _ = x.shape
        H, Hkv, dh = self.n_heads, self.n_kv_heads, self.d_head
        q = _heads(self.q(x), H, dh).contiguous()
        if memory is None:  # decode: the encoder's keys and values were cached at prefill
            k = v = x.new_zeros(B, Hkv, src_len, dh)
        else:
            k, v = self.kv(memory).split([Hkv * dh, Hkv * dh], dim=-1)
            k, v = _heads(k, Hkv, dh).contiguous(), _heads(v, Hkv, dh).contiguous()
        y = _run_core(self.core, self.recompute_core, q, k, v)
        return self.out(y.transpose(1, 2).reshape(B, N, H * dh))


class MLP(nn.Module):
    """The `mlp` builder (and one expert of `moe`)."""

    def __init__(self, spec: ModelSpec, d_hidden: int):
        super().__init__()
        bias = spec.has_mlp_bias
        self.up = nn.Linear(spec.d_model, d_hidden, bias=bias)
        self.gate = nn.Linear(spec.d_model, d_hidden, bias=bias) if spec.mlp == "gated" else None
        self.down = nn.Linear(d_hidden, spec.d_model, bias=bias)
        self.act = ACTIVATIONS[spec.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.up(x)) if self.gate is None else self.act(self.gate(x)) * self.up(x)
        return self.down(h)


def _combine(out: torch.Tensor, tokens: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """out with y's rows added at `tokens`. With autograd on, scatter_add over the token index expanded (a view):
    its backward keeps only the index, where index_add's keeps its source too (its derivative formula reads the
    source's shape from the tensor)."""
    if _saving(y):
        return out.scatter_add(0, tokens[:, None].expand(-1, y.shape[-1]), y)
    return out.index_add(0, tokens, y)


class Scale(nn.Module):
    """A learned scale [width] (Gemma 4's router: one over the model width, one per expert)."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))


class MoE(nn.Module):
    """The `moe` builder. Beside a dense MLP (moe_beside_mlp, Gemma 4) the router reads the block's residual stream
    through an RMS norm (`router_norm`: Gemma's weightless norm times its router scale [D], one RMSNorm), each
    routing weight is times its expert's `expert_scale`, and the experts read x through their own norm (`norm`)
    and end with `post_norm`."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.top_k = spec.top_k
        self.beside = spec.moe_beside_mlp
        if self.beside:  # the router's RMS norm, its weight Gemma's router scale [D]; a scale per expert [E]
            self.router_norm, self.expert_scale = RMSNorm(spec.d_model), Scale(spec.n_experts)
            self.norm, self.post_norm = make_norm(spec), make_norm(spec)
        self.router = nn.Linear(spec.d_model, spec.n_experts, bias=spec.router_bias)
        self.experts = nn.ModuleList(MLP(spec, spec.d_expert) for _ in range(spec.n_experts))
        self.shared = nn.ModuleList(MLP(spec, spec.d_shared_expert) for _ in range(spec.n_shared_experts))
        self.shared_gate = nn.Linear(spec.d_model, 1, bias=False) if spec.shared_expert_gate else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        if self.beside:
            probs = self.router(self.router_norm(flat)).softmax(-1)
            inputs = self.norm(flat)
        else:
            probs, inputs = self.router(flat).softmax(-1), flat
        out = torch.zeros_like(flat)
        for e, (tokens, weights) in enumerate(self._route(probs)):
            if self.beside:
                weights = weights * self.expert_scale.weight[e]
            out = _combine(out, tokens, self.experts[e](inputs[tokens]) * weights)
        if self.beside:
            return self.post_norm(out).view(shape)
        if len(self.shared):
            shared = sum(expert(flat) for expert in self.shared)
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(flat)) * shared
            out = out + shared
        return out.view(shape)

    def _route(self, probs: torch.Tensor):
        """(token indices, routing weights [n, 1]) for each expert in turn."""
        T, E, k = probs.shape[0], probs.shape[1], self.top_k
        if probs.is_meta:  # no data: round robin over slots t * k + j (see the module docstring)
            for e in range(E):
                n = (T * k - e + E - 1) // E  # slots i < T k with i mod E == e
                tokens = torch.arange(n, device=probs.device)
                yield tokens, probs[tokens, e: e + 1]
            return
        weights, chosen = probs.topk(k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        if _is_fake(probs):  # no data to route on: the meta path's round robin, slot i = t * k + j -> i mod E
            for e in range(E):
                slots = torch.arange(e, T * k, E, device=probs.device)
                tokens, slot = slots // k, slots % k
                yield tokens, weights[tokens, slot].unsqueeze(-1)
            return
        for e in range(E):
            tokens, slot = (chosen == e).nonzero(as_tuple=True)
            yield tokens, weights[tokens, slot].unsqueeze(-1)


class Block(nn.Module):
    """One block of the inventory: self-attention, cross-attention when it has it, the MLP or the experts."""

    def __init__(self, spec: ModelSpec, layer: Layer, causal: bool, explicit: bool, recompute: str = "none"):
        super().__init__()
        self.position = spec.norm_position
        before = spec.norm_position != "output"
        after = spec.norm_position in ("sandwich", "output")
        names = ["attention", *(["cross_attention"] if layer.cross else []), "mlp"]
        for name in names:  # `<sublayer>_norm` before it (after the residual add, post-norm), `_post_norm` after it
            setattr(self, f"{name}_norm", make_norm(spec) if before else None)
            setattr(self, f"{name}_post_norm", make_norm(spec) if after else None)
        self.parallel = spec.parallel_block
        if self.parallel == "one_norm":  # the MLP reads attention's normalised input
            self.mlp_norm = None
        self.attention = (LatentAttention if spec.is_mla else Attention)(spec, layer, causal, explicit, recompute)
        if layer.cross:
            self.cross_attention = CrossAttention(spec, explicit, recompute)
        if layer.moe:
            self.moe = MoE(spec)
        if not layer.moe or spec.moe_beside_mlp:  # twice as wide in a KV-sharing block (use_double_wide_mlp)
            self.mlp = MLP(spec, spec.kv_shared_d_ff if layer.kv_shared and spec.kv_shared_d_ff else spec.d_ff)
        self.per_layer = PerLayerInput(spec) if spec.d_per_layer_input else None
        self.mlp_branch_norm = make_norm(spec) if layer.moe and spec.moe_beside_mlp else None

    def _sublayers(self, context: int, bias, memory, src_len: int, rope=None):
        yield self.attention_norm, self.attention_post_norm, lambda h: self.attention(h, context, bias, rope)
        if hasattr(self, "cross_attention"):
            yield (self.cross_attention_norm, self.cross_attention_post_norm,
                   lambda h: self.cross_attention(h, memory, src_len))
        if self.mlp_branch_norm is not None:  # the dense MLP and the experts beside it, both on x (Gemma 4)
            yield None, self.mlp_post_norm, lambda h: self.mlp_branch_norm(self.mlp(self.mlp_norm(h))) + self.moe(h)
            return
        yield self.mlp_norm, self.mlp_post_norm, self.moe if hasattr(self, "moe") else self.mlp

    def forward(self, x: torch.Tensor, context: int = 0, bias: torch.Tensor | None = None,
                memory: torch.Tensor | None = None, src_len: int = 0, cos: torch.Tensor | None = None,
                sin: torch.Tensor | None = None, per_layer: torch.Tensor | None = None) -> torch.Tensor:
        """cos, sin: the stack's `rotary_tables` (two tensors, not a tuple: a checkpoint of the block saves
        its tensor arguments); per_layer: this block's slice of the per-layer inputs [B, N, P] (Gemma 4)."""
        x = self._sublayers_forward(x, context, bias, memory, src_len, cos, sin)
        return x if self.per_layer is None else self.per_layer(x, per_layer)

    def _sublayers_forward(self, x, context, bias, memory, src_len, cos, sin) -> torch.Tensor:
        rope = None if cos is None else (cos, sin)
        if self.parallel != "none":  # x + attn(norm(x)) + mlp(norm(x) or norm'(x))
            (norm, _, attention), (mlp_norm, _, mlp) = self._sublayers(context, bias, memory, src_len, rope)
            h = norm(x)
            return x + attention(h) + mlp(h if mlp_norm is None else mlp_norm(x))
        for norm, post_norm, sublayer in self._sublayers(context, bias, memory, src_len, rope):
            if self.position == "post":
                x = norm(x + sublayer(x))
                continue
            h = sublayer(norm(x) if norm is not None else x)
            x = x + (post_norm(h) if post_norm is not None else h)
        return x


class PerLayerInput(nn.Module):
    """The `per_layer_input` builder (Gemma 4): x + norm(projection(act(gate(x)) * the block's slice))."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.gate = nn.Linear(spec.d_model, spec.d_per_layer_input, bias=False)
        self.projection = nn.Linear(spec.d_per_layer_input, spec.d_model, bias=False)
        self.norm = make_norm(spec)
        self.act = ACTIVATIONS[spec.activation]

    def forward(self, x: torch.Tensor, per_layer: torch.Tensor) -> torch.Tensor:
        return x + self.norm(self.projection(self.act(self.gate(x)) * per_layer))


class RelativeBias(nn.Module):
    """T5's relative position bias: a [buckets, H] table in the stack's first block, looked up by each (query,
    key) offset and added to every block's scores. The bucketing here is a plain clamp of |offset| (T5 buckets
    logarithmically); it is a lookup either way, no matmul, and the table's shape is T5's."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.table = nn.Embedding(spec.relative_attention_buckets, spec.n_heads)

    def forward(self, s_q: int, s_k: int, device) -> torch.Tensor:
        offset = torch.arange(s_k, device=device)[None, :] - torch.arange(s_k - s_q, s_k, device=device)[:, None]
        buckets = offset.abs().clamp(max=self.table.num_embeddings - 1)
        return self.table(buckets).permute(2, 0, 1).unsqueeze(0)  # [1, H, s_q, s_k]


def alibi_bias(n_heads: int, s_q: int, s_k: int, device, dtype) -> torch.Tensor:
    """ALiBi (Press et al.): -slope_h * (query position - key position), [1, H, s_q, s_k]; head h's slope is
    2^(-8 (h + 1) / H). No parameters: computed once per stack and added to every block's scores."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, device=device, dtype=torch.float32) / n_heads)
    distance = (torch.arange(s_k - s_q, s_k, device=device)[:, None] - torch.arange(s_k, device=device)[None, :])
    return (-slopes[:, None, None] * distance.abs().float()).unsqueeze(0).to(dtype)


class StackModule(nn.Module):
    """One stack: its embedding, its blocks in order, its final norm."""

    def __init__(self, spec: ModelSpec, stack: Stack, explicit: bool, own_token_table: bool,
                 recompute: str = "none"):
        super().__init__()
        self.embedding = Embedding(spec, own_token_table, stack.n_layers)
        self.relative_bias = RelativeBias(spec) if spec.positions == "relative" else None
        self.alibi_heads = spec.n_heads if spec.positions == "alibi" else 0
        L, shared = stack.n_layers, spec.shared_blocks
        if shared is None:
            self.blocks = nn.ModuleList(Block(spec, stack.layer(i), stack.causal, explicit, recompute)
                                        for i in range(L))
        else:  # ALBERT: `shared` sets of parameters, block i running set int(i / (L / shared))
            sets = [Block(spec, stack.layer(i), stack.causal, explicit, recompute) for i in range(shared)]
            self.blocks = nn.ModuleList(sets[int(i / (L / shared))] for i in range(L))
        self.final_norm = make_norm(spec) if spec.final_norm else None
        # rotary: one pair of cos/sin tables per distinct width, each block reading its own (Gemma 4's global
        # blocks have heads of their own width)
        self.widths = [stack.rotary_width(stack.layer(i)) for i in range(L)] if spec.positions == "rotary" else None
        self.recompute_blocks = recompute == "full"
        self.kv_sharing = spec.kv_shared_layers > 0
        self.first_shared = stack.n_layers - spec.kv_shared_layers if self.kv_sharing else -1

    def forward(self, tokens: torch.Tensor, token_types=None, context: int = 0, table=None, memory=None,
                src_len: int = 0, keep: int = 0) -> torch.Tensor:
        """keep > 0 (a prefill with KV sharing): from the first block that shares keys and values on, only the last
        `keep` positions (the scored ones) go on, as transformers' generate runs them."""
        x = self.embedding(tokens, token_types, context, table)
        N = tokens.shape[1]
        per_layer = None if self.embedding.per_layer is None else self.embedding.per_layer_inputs(tokens, x)
        if self.kv_sharing:  # a fresh store of keys and values for the blocks that share them
            store: dict = {}
            for block in self.blocks:
                block.attention.kv_store = store
        bias = None if self.relative_bias is None else self.relative_bias(N, context + N, tokens.device)
        if self.alibi_heads:
            bias = alibi_bias(self.alibi_heads, N, context + N, x.device, x.dtype)
        tables = {} if self.widths is None else {
            width: rotary_tables(context, N, width, x.device, x.dtype) for width in sorted(set(self.widths))}
        for i, block in enumerate(self.blocks):
            if keep and i == self.first_shared:  # the positions whose outputs nothing else reads are dropped
                x = x[:, -keep:]
                per_layer = None if per_layer is None else per_layer[:, -keep:]
                bias = None if bias is None else bias[:, :, -keep:]
                tables = {w: (cos[-keep:], sin[-keep:]) for w, (cos, sin) in tables.items()}
            rope = (None, None) if self.widths is None else tables[self.widths[i]]
            mine = None if per_layer is None else per_layer[:, :, i]
            if self.recompute_blocks and torch.is_grad_enabled():  # full recomputation: the block's input kept
                x = checkpoint(block, x, context, bias, memory, src_len, *rope, mine, use_reentrant=False,
                               preserve_rng_state=False)
            else:
                x = block(x, context, bias, memory, src_len, *rope, mine)
        return self.final_norm(x) if self.final_norm is not None else x


class Transformer(nn.Module):
    """The reference model for `spec` on `workload`. forward(*inputs) takes `example_inputs(spec, workload)`:
    tokens [B, N] (and token types), or for an encoder-decoder the source tokens [B, S] then the decoder's
    tokens [B, N] (the decoder's alone in decode). It returns the logits of the scored positions [B, n, V] (or
    the hidden states [B, N, D] without an LM head) and, with a pooler, also the pooled output [B, D].

    A one-stack model keeps the flat layout (`embedding`, `blocks`, `final_norm`); an encoder-decoder has
    `embedding.token` (shared), `encoder` and `decoder` stacks.

    `recompute` (what a train step recomputes in backward instead of keeping): "none", "selective" (each
    attention core under torch.utils.checkpoint) or "full" (each block)."""

    def __init__(self, spec: ModelSpec, workload: Workload | None = None, explicit_attention: bool = False,
                 recompute: str = "none", stack_layout: list[Stack] | None = None):
        super().__init__()
        if recompute not in RECOMPUTE:
            raise ValueError(f"recompute={recompute!r}: expected one of {', '.join(RECOMPUTE)}")
        self.spec, self.workload, self.recompute = spec, workload or default_workload(spec), recompute
        # stack_layout: the stacks to build, default stacks(spec) (`tfcalc check` folds a big model's repeated
        # blocks by passing stacks of one block of each kind: tfcalc.verify.folding)
        all_stacks = stack_layout or stacks(spec)
        if spec.is_encoder_decoder:
            shared = spec.shared_embeddings
            self.embedding = nn.Module()
            self.embedding.token = nn.Embedding(spec.vocab_size, spec.d_model) if shared else None
            self.encoder = StackModule(spec, all_stacks[0], explicit_attention, not shared, recompute)
            self.decoder = StackModule(spec, all_stacks[1], explicit_attention, not shared, recompute)
            token_table = self.embedding.token if shared else self.decoder.embedding.token
        else:
            stack = StackModule(spec, all_stacks[0], explicit_attention, True, recompute)
            self.embedding, self.blocks, self.final_norm = stack.embedding, stack.blocks, stack.final_norm
            self.relative_bias = stack.relative_bias
            self._stack = [stack]  # not registered: its modules are this model's own
            token_table = self.embedding.token
        self.pooler = nn.Linear(spec.d_model, spec.d_model) if spec.pooler else None
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=spec.head_bias) if spec.lm_head else None
        if self.head is not None and spec.tie_embeddings:
            self.head.weight = token_table.weight

    def forward(self, *inputs: torch.Tensor):
        w = self.workload
        if self.spec.is_encoder_decoder:
            table = self.embedding.token
            memory = None if w.phase == "decode" else self.encoder(inputs[0], table=table)
            x = self.decoder(inputs[-1], context=w.context, table=table, memory=memory, src_len=w.src_len or 0)
        else:
            keep = w.scored if w.phase == "prefill" and self.spec.kv_shared_layers else 0
            x = self._stack[0](inputs[0], inputs[1] if len(inputs) > 1 else None, context=w.context, keep=keep)
        out = x if self.head is None else self.head(x[:, x.shape[1] - w.scored:])
        if self.pooler is None:
            return out
        # the first token copied (clone: with B = 1 the view is already contiguous): a view would keep the whole
        # [B, N, D] output alive for the pooler's backward
        return out, torch.tanh(self.pooler(x[:, 0].clone()))


def build_model(spec: ModelSpec, device: str | torch.device = "meta", dtype: torch.dtype = torch.float32,
                explicit_attention: bool = False, workload: Workload | None = None,
                recompute: str = "none", stack_layout: list[Stack] | None = None) -> Transformer:
    """The reference model, its parameters created directly on `device` and in `dtype` (on meta, nothing is
    allocated). Built in fp32 and then cast, a bf16 model would briefly hold both copies: 1.5x its weights.
    `recompute`: see `Transformer`."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Transformer(spec, workload, explicit_attention, recompute, stack_layout)
    finally:
        torch.set_default_dtype(previous)
    return model


def example_inputs(spec: ModelSpec, device: str | torch.device = "meta",
                   workload: Workload | None = None) -> tuple[torch.Tensor, ...]:
    """Token ids for `workload` (default: the spec's own) on `device`: [B, N] and token types when the spec
    has them; for an encoder-decoder the source [B, S] first (left out in decode, when the encoder is cached)."""
    w = workload or default_workload(spec)
    generator = None if str(device) == "meta" else torch.Generator(device=device).manual_seed(0)

    def ids(n: int, high: int) -> torch.Tensor:
        return torch.randint(high, (w.batch_size, n), device=device, generator=generator)

    tokens = ids(w.seq_len, min(spec.vocab_size, spec.per_layer_vocab or spec.vocab_size))  # a per-layer table's too
    if spec.is_encoder_decoder:
        return (tokens,) if w.phase == "decode" else (ids(w.src_len or w.seq_len, spec.vocab_size), tokens)
    if not spec.n_token_types:
        return (tokens,)
    return tokens, ids(w.seq_len, spec.n_token_types)
