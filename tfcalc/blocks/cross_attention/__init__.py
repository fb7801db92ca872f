"""Cross-attention: queries from the decoder, keys and values from the encoder's output (or, in decode, the cache)."""

from __future__ import annotations

from ...arch.builders import BlockKind, Ctx, attention_core, register, sublayer
from ...arch.ops import Linear, Mask, Matmul, Op


def cross_attention(ctx: Ctx) -> list[Op]:
    """Queries from the decoder, keys and values from the encoder's output (all of it: no mask). In decode the
    encoder's keys and values are cached, so their projection does no work (its weights are still there)."""
    spec, t, D = ctx.spec, ctx.t, ctx.spec.d_model
    kv_rows = 0 if ctx.workload.phase == "decode" else ctx.b * ctx.src
    return sublayer(ctx, "cross_attention", [
        # decoder x: [T, D] @ W_q: [D, H*dh]
        Matmul(ctx.name("cross_attention/q"), t, D, spec.d_attn, bias=spec.has_qkv_bias, split="column",
               linears=(Linear("q", spec.d_attn),)),
        # encoder out: [B*S, D] @ W_kv: [D, 2*Hkv*dh]
        Matmul(ctx.name("cross_attention/kv"), kv_rows, D, 2 * spec.d_kv, bias=spec.has_qkv_bias, split="column",
               role="encoder_kv", linears=(Linear("k", spec.d_kv), Linear("v", spec.d_kv)),
               unbiased=0 if spec.k_bias else spec.d_kv),  # k_bias False: k without a bias (Whisper)
        attention_core(ctx, "cross_attention", ctx.s, ctx.src, Mask(causal=False)),
        # heads: [T, H*dh] @ W_o: [H*dh, D]
        Matmul(ctx.name("cross_attention/out"), t, spec.d_attn, D, bias=spec.bias, split="row",
               linears=(Linear("o", D),)),
    ])


register(BlockKind("cross_attention", cross_attention, family="cross_attention", norm="cross_attention",
                   reference=f"{__name__}.reference",
                   components=((r"cross_attention\.(q|kv|core|out)", r"cross_attention/\1"),)))
