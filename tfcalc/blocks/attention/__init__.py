"""Self-attention: a fused q/k/v projection (or multi-head latent attention's down and up projections), q/k norms,
attention sinks, the core over the cache and the new keys, the output projection. A global block may have heads of
its own width and number (Gemma 4); a block that shares keys and values projects only q."""

from __future__ import annotations

from dataclasses import replace

from ...arch.builders import BlockKind, Ctx, attention_core, register, sublayer
from ...arch.ops import AttentionCore, Elementwise, Linear, Mask, Matmul, Norm, Op, Table
from ...errors import TfcalcError

GATE_FLOPS = 5  # sigmoid (about 4) and the multiply, per element of the attention output


def _qk_norms(ctx: Ctx) -> list[Op]:
    """Norms on the new queries and keys (not the cached ones), before rotary: per head (weight [dh] each) or over
    all heads (weights [H*dh] and [Hkv*dh])."""
    spec, t, H = ctx.spec, ctx.t, ctx.spec.n_heads
    dh, kv, _ = ctx.heads
    norms: list[Norm] = []
    if spec.qk_norm in ("head", "per_head"):  # q: [T*H, dh], k: [T*Hkv, dh]; per_head: a weight [dh] per head
        per_head = spec.qk_norm == "per_head"
        norms = [Norm(ctx.name("attention/q_norm"), spec.norm, t * H, dh, "heads", sets=H if per_head else 1),
                 Norm(ctx.name("attention/k_norm"), spec.norm, t * kv, dh, "heads", sets=kv if per_head else 1)]
    if spec.qk_norm == "full":  # q: [T, H*dh], k: [T, Hkv*dh]
        norms = [Norm(ctx.name("attention/q_norm"), spec.norm, t, H * dh, "heads"),
                 Norm(ctx.name("attention/k_norm"), spec.norm, t, kv * dh, "heads")]
    return norms[:1] if ctx.layer is not None and ctx.layer.kv_shared else norms  # no keys of its own


def attention(ctx: Ctx) -> list[Op]:
    """Self-attention: norm, the attention itself (`mixer`), residual."""
    return sublayer(ctx, "attention", mixer(ctx))


def mixer(ctx: Ctx) -> list[Op]:
    """Self-attention between a block's norms: fused q/k/v projection, q/k norms, scores and value mixing, output
    projection. A global block may have heads of its own width and number, and no value projection (its values
    are the keys: Gemma 4)."""
    spec, t, D, H = ctx.spec, ctx.t, ctx.spec.d_model, ctx.spec.n_heads
    if spec.is_mla:
        if spec.attention_gate:
            raise TfcalcError("attention_gate=True is not modelled with multi-head latent attention (kv_lora_rank="
                              f"{spec.kv_lora_rank})")
        return _mla_attention(ctx)
    dh, kv, k_eq_v = ctx.heads
    shared = ctx.layer.kv_shared  # an earlier block's keys and values: only q here, and nothing cached
    kv_width = 0 if shared else (1 if k_eq_v else 2) * kv * dh
    gate = H * dh if spec.attention_gate else 0  # the query projection doubled: a gate per query channel
    mask = Mask(ctx.stack.causal, ctx.layer.window, ctx.layer.chunk)
    core = attention_core(ctx, "attention", ctx.s, ctx.keys, mask, sinks=int(spec.attention_sinks), d_head=dh,
                          kv_heads=kv)
    return [
        # x: [T, D] @ W_qkv: [D, H*dh + 2*Hkv*dh] (+ Hkv*dh when the values are the keys; none when shared;
        # + H*dh for the output gate)
        Matmul(ctx.name("attention/qkv"), t, D, H * dh + gate + kv_width, bias=spec.has_qkv_bias, split="column",
               linears=_qkv_linears(H * dh + gate, 0 if shared else kv * dh, k_eq_v),
               unbiased=0 if spec.k_bias or shared else kv * dh),  # k_bias False: k without a bias (Whisper)
        *_qk_norms(ctx),
        *_sinks(ctx),
        replace(core, cached=False, shares_kv=True) if shared else core,
        *_gate(ctx, dh),
        # heads: [T, H*dh] @ W_o: [H*dh, D]
        Matmul(ctx.name("attention/out"), t, H * dh, D, bias=spec.bias, split="row", linears=(Linear("o", D),)),
    ]


def _qkv_linears(q: int, kv: int, k_eq_v: bool) -> tuple[Linear, ...]:
    """The fused projection as an adapter sees it: q_proj, k_proj and v_proj, three linears (as Llama, Qwen, Gemma
    and Mixtral implement them; an implementation that fuses them into one module is not told apart: see
    docs/finetuning.md). No keys or values of its own (KV sharing): q alone; values that are the keys: no v."""
    return ((Linear("q", q),) + ((Linear("k", kv),) if kv else ())
            + ((Linear("v", kv),) if kv and not k_eq_v else ()))


def _gate(ctx: Ctx, dh: int) -> list[Op]:
    """Qwen3-Next's output gate: heads [T, H*dh] * sigmoid(gate [T, H*dh]), before the output projection. For
    backward the sigmoid keeps its output and the multiply both operands (the heads and the sigmoid): 2 T H dh."""
    if not ctx.spec.attention_gate:
        return []
    elements = ctx.t * ctx.spec.n_heads * dh
    return [Elementwise(ctx.name("attention/gate"), "gate", elements, GATE_FLOPS, kept=2 * elements)]


def _mla_attention(ctx: Ctx) -> list[Op]:
    """Multi-head latent attention (DeepSeek-V2, V3), the ops between the sublayer's norms. Keys and values come from
    a latent of kv_lora_rank per token (kv_a, "with MQA": it also gives one rotary key of qk_rope_dim that every head
    shares), normed, expanded per head by kv_b; queries from q_a, its norm and q_b (or one projection q). The core
    has query/key heads of qk_nope_dim + qk_rope_dim and value heads of v_head_dim, one key/value head per query head.

    The cache keeps the latent and the rotary key (cache_width kv_lora_rank + qk_rope_dim), so kv_b re-expands every
    cached token's latent in each step: its rows are all the keys (context and new tokens), as transformers' eager
    path runs it (serving engines absorb kv_b into the query and output projections in decode: not modelled).
    Tensor parallelism (Megatron, DeepSeek): q_b and kv_b split by heads (column), out by rows; the down
    projections q_a and kv_a and their norms are whole on every GPU. kv_a comes first: q_a (or q) reads the same
    normalised x (kept once)."""
    spec, t, D, H = ctx.spec, ctx.t, ctx.spec.d_model, ctx.spec.n_heads
    r_kv, rope, nope, d_v = spec.kv_lora_rank, spec.qk_rope_dim, spec.qk_nope_dim, spec.v_head_dim
    bias = spec.has_qkv_bias  # on the projections of x (kv_a, q_a or q), as DeepSeek's attention_bias
    ops: list[Op] = [
        Matmul(ctx.name("attention/kv_a"), t, D, r_kv + rope, bias=bias),  # x: [T, D] @ [D, r_kv + rope]
        Norm(ctx.name("attention/kv_a_norm"), spec.norm, t, r_kv),  # the latent [T, r_kv]
    ]
    if spec.q_lora_rank is not None:
        ops += [Matmul(ctx.name("attention/q_a"), t, D, spec.q_lora_rank, bias=bias, shares_input=True),
                Norm(ctx.name("attention/q_a_norm"), spec.norm, t, spec.q_lora_rank),
                # [T, r_q] @ [r_q, H*(nope+rope)]
                Matmul(ctx.name("attention/q_b"), t, spec.q_lora_rank, H * (nope + rope), split="column")]
    else:  # x: [T, D] @ [D, H*(nope+rope)]
        ops.append(Matmul(ctx.name("attention/q"), t, D, H * (nope + rope), bias=bias, split="column",
                          shares_input=True))
    cached = ctx.stack.name != "encoder" and spec.causal
    if spec.index_n_heads is not None:  # DeepSeek-V3.2's indexer: it picks the keys the core keeps
        from .indexer import indexer_ops

        ops += indexer_ops(ctx, cached)
    return ops + [
        # every key's latent, cached and new: [B*keys, r_kv] @ [r_kv, H*(nope+v)]
        Matmul(ctx.name("attention/kv_b"), ctx.b * ctx.keys, r_kv, H * (nope + d_v), split="column"),
        AttentionCore(ctx.name("attention"), ctx.b, H, ctx.s, ctx.keys, nope + rope, d_v,
                      Mask(ctx.stack.causal, ctx.layer.window, ctx.layer.chunk), H, cached, cache_width=r_kv + rope),
        Matmul(ctx.name("attention/out"), t, H * d_v, D, bias=spec.bias, split="row"),  # [T, H*v] @ [H*v, D]
    ]


def _sinks(ctx: Ctx) -> list[Op]:
    """gpt-oss's attention sinks: one learned logit per query head, a column of each softmax row beside the keys'
    scores (no value mixed: it only takes probability mass). Parameters [H], no matmul; tensor parallelism splits
    them with the heads."""
    return [Table(ctx.name("attention/sinks"), 1, ctx.spec.n_heads, "sinks")] if ctx.spec.attention_sinks else []


def kept_once(ctx: Ctx, recompute: str, attention: str = "fused") -> list[tuple[str, int, int]]:
    """What a stack's attention keeps once per step: ALiBi's bias [H, s_q, s_k] when attention is recomputed or
    fused (a constant, but an input of each recomputed core, or of each fused kernel: SDPA's attn_mask), and under
    full recomputation the keys and values the KV-sharing blocks read (their last producer of each kind is
    recomputed, but the shared blocks' inputs are the forward's): one block's of each kind (Gemma 4)."""
    spec, s, name = ctx.spec, ctx.s, ctx.name
    kept: list[tuple[str, int, int]] = []
    if spec.positions == "alibi" and (recompute != "none" or attention == "fused"):
        kept.append((name("attention/alibi bias"), spec.n_heads * s * ctx.keys, 0))
    if spec.kv_shared_layers and recompute == "full":
        kinds = {layer.window: layer for layer in ctx.stack.distinct() if layer.kv_shared}
        for layer in kinds.values():
            dh, kv, _ = spec.attention_shape(layer.window is not None)
            kept.append((name("attention/shared keys and values"), 2 * ctx.b * kv * ctx.keys * dh, 0))
    return kept


def kept_per_stage(ctx: Ctx) -> list[tuple[str, int, int]]:
    """The rotary cos and sin tables [s, width], one pair per distinct width of the stack's blocks: computed once per
    stack and shared by its blocks, kept on every pipeline stage that holds some of them."""
    widths = ctx.stack.rotary_widths() if ctx.spec.positions == "rotary" else []
    if not widths:  # no rotary, or every block NoPE
        return []
    return [(ctx.name("attention/rotary tables"), 2 * ctx.s * sum(widths), 0)]


register(BlockKind("attention", attention, family="attention", norm="attention", reference=f"{__name__}.reference",
                   in_pattern=True, kept_once=kept_once, kept_per_stage=kept_per_stage,
                   components=(
                       (r"attention\.(qkv|q_norm|k_norm|core|out|sinks)", r"attention/\1"),
                       (r"attention\.(q_a|q_a_norm|q_b|q|kv_a|kv_a_norm|kv_b)", r"attention/\1"),  # latent attention
                       # DeepSeek-V3.2's indexer: its projections, its key norm and (its own FLOPs) the scores
                       (r"attention\.indexer\.(q|k|k_norm|weights|scores)", r"attention/indexer_\1"),
                   )))
