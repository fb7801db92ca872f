"""The `attention` kind's torch modules: fused q/k/v (or latent attention's projections), q/k norms, the core, out."""

from __future__ import annotations

import torch
from torch import nn

from ...arch import Layer
from ...reference.layers import (
    AttentionCore,
    PerHeadNorm,
    Sinks,
    cached,
    linear,
    make_norm,
    rotary,
    run_core,
    split_heads,
)
from ...spec import ModelSpec


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
        # a global block whose values are its keys (Gemma 4) has no value projection; Qwen3-Next's output gate
        # doubles the query projection
        self.gate = H * dh if spec.attention_gate else 0
        # k without a bias where k_bias is false (Whisper's k_proj)
        no_k_bias = (H * dh + self.gate, 0 if spec.k_bias or self.kv_shared else Hkv * dh)
        self.qkv = linear(spec.d_model, H * dh + self.gate + kv_width, spec.has_qkv_bias, no_k_bias)
        self.core = AttentionCore(causal, layer.window, explicit, layer.chunk)
        self.sinks = Sinks(H) if spec.attention_sinks else None
        self.out = nn.Linear(H * dh, spec.d_model, bias=spec.bias)
        self.rotary = spec.positions == "rotary" and layer.rotary  # a NoPE block (Llama 4) has none
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
        # [q | gate | k | v]: the gate (Qwen3-Next's; 0 channels without it) a view its sigmoid does not keep
        widths = [H * dh, self.gate, Hkv * dh] + ([] if self.k_eq_v else [Hkv * dh])
        q, gate, k, *v = self.qkv(x).split(widths, dim=-1)
        # the values are the key projection's output, before the key norm and rotary (Gemma 4)
        v = k if self.k_eq_v else v[0]
        gate = gate if self.gate else None
        if self.qk_norm != "none":
            # each norm keeps a copy of its input, not a view of the fused projection's output (which would keep
            # v's part alive too): what a model with separate q and k projections keeps
            if self.qk_norm in ("head", "per_head"):  # over each head's dh channels: [B, N, heads, dh]
                q = self.q_norm(q.reshape(B, N, H, dh).contiguous()).view(B, N, H * dh)
                k = self.k_norm(k.reshape(B, N, Hkv, dh).contiguous()).view(B, N, Hkv * dh)
            else:  # over all heads: [B, N, heads * dh]
                q, k = self.q_norm(q.contiguous()), self.k_norm(k.contiguous())
        q, k, v = split_heads(q, H, dh), split_heads(k, Hkv, dh), split_heads(v, Hkv, dh)
        if self.rotary:
            q, k = rotary(q, context, rope), rotary(k, context, rope)
        # q, k, v each in its own storage: the fused projection's output is not kept alive by views of it
        q, k, v = q.contiguous(), cached(k, context).contiguous(), cached(v, context).contiguous()
        if self.kv_store is not None:  # the last block of this kind before the shared ones leaves its own
            self.kv_store[self.kv_kind] = k, v
        y = run_core(self.core, self.recompute_core, q, k, v, bias, None if self.sinks is None else self.sinks.weight)
        return self.out(self._gated(y.transpose(1, 2).reshape(B, N, H * dh), gate))

    def _gated(self, y: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
        """Qwen3-Next's output gate: y * sigmoid(gate) (no gate: y)."""
        return y if gate is None else y * torch.sigmoid(gate)

    def _with_shared_kv(self, x: torch.Tensor, context: int, bias, rope) -> torch.Tensor:
        B, N, _ = x.shape
        H, dh = self.n_heads, self.d_head
        q, gate = self.qkv(x), None
        if self.gate:
            q, gate = q.split([H * dh, self.gate], dim=-1)
        if self.qk_norm in ("head", "per_head"):
            q = self.q_norm(q.view(B, N, H, dh)).view(B, N, H * dh)
        elif self.qk_norm != "none":
            q = self.q_norm(q)
        q = split_heads(q, H, dh)
        if self.rotary:
            q = rotary(q, context, rope)
        k, v = self.kv_store[self.kv_kind]
        y = run_core(self.core, self.recompute_core, q.contiguous(), k, v, bias,
                      None if self.sinks is None else self.sinks.weight)
        return self.out(self._gated(y.transpose(1, 2).reshape(B, N, H * dh), gate))


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
        self.indexer = Indexer(spec) if spec.index_n_heads is not None else None
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
        q_latent = self.q_a_norm(self.q_a(x)) if self.q is None else None
        q = self.q(x) if self.q is not None else self.q_b(q_latent)
        # the keys the indexer picks: eager attention masks the others (the same FLOPs), a bias [B, 1, N, keys]
        picked = self.indexer(x, q_latent, context, rope) if self.indexer is not None else None
        q_nope, q_rope = split_heads(q, H, nope + d_rope).split([nope, d_rope], dim=-1)
        k_rope = k_rope.unsqueeze(1)  # [B, 1, N, rope]: one rotary key for every head
        q_rope, k_rope = rotary(q_rope, context, rope), rotary(k_rope, context, rope)
        if context:  # the cached latents and rotary keys before the new ones
            latent = torch.cat([latent.new_zeros(B, context, self.r_kv), latent], dim=1)
            k_rope = cached(k_rope, context)
        k_nope, v = split_heads(self.kv_b(latent), H, nope + d_v).split([nope, d_v], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(-1, H, -1, -1)], dim=-1)
        if picked is not None:
            bias = picked if bias is None else bias + picked
        y = run_core(self.core, self.recompute_core, q, k, v.clone(), bias)  # v in its own storage
        return self.out(y.transpose(1, 2).reshape(B, N, H * d_v))



class Indexer(nn.Module):
    """DeepSeek-V3.2's indexer (blocks/attention/indexer.py): wq_b over the query latent, wk and its LayerNorm over x,
    weights_proj over x; relu(q k^T) weighted over its heads, per (query, key), then each query's top keys. Under
    no_grad, as transformers runs it. Its selection is not applied to the core here (transformers' eager path
    masks, not skips, the other keys: the core's FLOPs are the same). Returns that mask as an additive bias."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        D, h, d = spec.d_model, spec.index_n_heads, spec.index_head_dim
        self.h, self.d, self.d_rope, self.topk = h, d, spec.qk_rope_dim, spec.index_topk
        self.q = nn.Linear(spec.q_lora_rank, h * d, bias=False)
        self.k = nn.Linear(D, d, bias=False)
        self.k_norm = nn.LayerNorm(d)
        self.weights = nn.Linear(D, h, bias=False)
        self.scores = IndexerScores()

    @torch.no_grad()
    def forward(self, x: torch.Tensor, q_latent: torch.Tensor, context: int, rope) -> torch.Tensor:
        B, N, _ = x.shape
        q = self.q(q_latent).view(B, N, self.h, self.d)
        k = self.k_norm(self.k(x))  # [B, N, d]
        q_rot, q_pass = q.split([self.d_rope, self.d - self.d_rope], dim=-1)
        k_rot, k_pass = k.unsqueeze(1).split([self.d_rope, self.d - self.d_rope], dim=-1)
        q = torch.cat([rotary(q_rot.transpose(1, 2), context, rope).transpose(1, 2), q_pass], dim=-1)
        k = torch.cat([rotary(k_rot, context, rope), k_pass], dim=-1).squeeze(1)
        if context:  # the cached keys before the new ones
            k = torch.cat([k.new_zeros(B, context, self.d), k], dim=1)
        index = self.scores(q, k, self.weights(x))  # [B, N, keys]
        keys = int(index.shape[-1])
        causal = torch.ones(N, keys, dtype=torch.bool, device=x.device).tril(keys - N)
        picked = index.masked_fill(~causal, float("-inf")).topk(min(self.topk, keys), dim=-1).indices
        blocked = torch.full_like(index, float("-inf")).scatter(-1, picked, 0.0)
        return blocked.unsqueeze(1)  # [B, 1, N, keys]: 0 at the picked keys


class IndexerScores(nn.Module):
    """The `attention/indexer_scores` record: w [B, N, 1, h] @ relu(q [B, N, h, d] @ k^T [B, 1, d, keys])."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        scores = torch.relu(torch.matmul(q, k.transpose(-1, -2).unsqueeze(1)))  # [B, N, h, keys]
        return torch.matmul(w.unsqueeze(-2), scores).squeeze(-2)



def attach(block: nn.Module, site) -> None:
    cls = LatentAttention if site.spec.is_mla else Attention
    block.attention = cls(site.spec, site.layer, site.causal, site.explicit, site.recompute)


def call(block: nn.Module, h: torch.Tensor, env) -> torch.Tensor:
    return block.attention(h, env.context, env.bias, env.rope)


def forward(block: nn.Module, x: torch.Tensor, env) -> torch.Tensor:
    # a block with layer_gates (Mllama's global encoder) scales the output by its tanh gate
    gate = getattr(getattr(block, "layer_gates", None), "attention", None)
    if gate is not None:
        return block.normed("attention", lambda h: gate(call(block, h, env)), x)
    return block.normed("attention", lambda h: call(block, h, env), x)
