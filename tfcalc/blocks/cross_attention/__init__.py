"""Cross-attention: queries from the decoder, keys and values from another sequence (an encoder's output, or, in a
decoder-only model whose block_pattern names `cross_attention`, Llama 3.2 Vision's projected vision tokens); in decode
those keys and values come from the cache, computed once at prefill.

Its own sizes (`kinds.cross_attention`, `CrossAttentionSizes`) make the gated variant of Flamingo and Llama 3.2 Vision
(transformers' MllamaCrossAttentionDecoderLayer): an RMS/layer norm over each query and key head (q_norm, k_norm:
weight [d_head] each), and tanh gates, one scalar parameter each, on the cross-attention's output and on the output of
the block's MLP (cross_attn_attn_gate, cross_attn_mlp_gate): x + tanh(g_a) * xattn(norm(x)), then
x + tanh(g_m) * mlp(norm(x)). Both gates are counted here (`cross_attention/gate`, `cross_attention/mlp_gate`): the
MLP itself is the plain `mlp` kind. `keys` is the cross-attended tokens per sequence of a decoder-only model when the
workload gives no src_len.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import BlockKind, Ctx, attention_core, register, sublayer
from ...arch.ops import Elementwise, Linear, Mask, Matmul, Norm, Op, Table
from ...sizes import Size

GATE_FLOPS = 1  # tanh(g) is one scalar; the multiply, one FLOP per element


class CrossAttentionSizes(BaseModel):
    """The `cross_attention` kind's own sizes (a spec's `[kinds.cross_attention]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    keys: Size | None = Field(None, description="Tokens per sequence the cross-attention attends to when the "
                                                "workload gives no src_len (a decoder-only model's: Llama 3.2 Vision's "
                                                "vision tokens of one image, max_num_tiles * ((image_size / "
                                                "patch_size)^2 + 1)). An encoder-decoder's are its encoder's tokens.")
    qk_norm: bool = Field(False, description="A norm (the spec's `norm`) over each query and each key head, weight "
                                             "[d_head] each (Llama 3.2 Vision's q_norm, k_norm).")
    gated: bool = Field(False, description="tanh gates, one parameter each, on the cross-attention's output and on "
                                           "the block's MLP output (cross_attn_attn_gate, cross_attn_mlp_gate).")

    def problems(self, spec) -> list[str]:
        """A decoder-only model's cross-attention needs its number of keys; a gated block needs its MLP."""
        out = []
        if self.keys is None and not spec.n_encoder_layers:
            out.append("block_pattern has 'cross_attention' blocks in a decoder-only model: give "
                       "kinds.cross_attention.keys, the tokens they attend to per sequence (the default src_len)")
        blocks = [b for b in spec.block_pattern or () if "cross_attention" in b.split("+")]
        if self.gated and any("mlp" not in b.split("+") for b in blocks):
            out.append(f"kinds.cross_attention.gated=True gates the block's MLP too: each cross_attention block needs "
                       f"'mlp' (got {', '.join(map(repr, blocks))})")
        return out


def cross_attention(ctx: Ctx) -> list[Op]:
    """Queries from the decoder, keys and values from the encoder's output or the vision tokens (all of them: no
    mask). In decode the keys and values are cached, so their projection (and the key norm) does no work (its
    weights are still there)."""
    spec, t, D = ctx.spec, ctx.t, ctx.spec.d_model
    sizes = spec.sizes("cross_attention")
    H, Hkv, dh = spec.n_heads, spec.n_kv_heads, spec.d_head
    kv_rows = 0 if ctx.workload.phase == "decode" else ctx.b * ctx.src
    ops: list[Op] = [
        # decoder x: [T, D] @ W_q: [D, H*dh]
        Matmul(ctx.name("cross_attention/q"), t, D, spec.d_attn, bias=spec.has_qkv_bias, split="column",
               linears=(Linear("q", spec.d_attn),)),
        # encoder out (or vision tokens): [B*S, D] @ W_kv: [D, 2*Hkv*dh]
        Matmul(ctx.name("cross_attention/kv"), kv_rows, D, 2 * spec.d_kv, bias=spec.has_qkv_bias, split="column",
               role="encoder_kv", linears=(Linear("k", spec.d_kv), Linear("v", spec.d_kv)),
               unbiased=0 if spec.k_bias else spec.d_kv),  # k_bias False: k without a bias (Whisper)
    ]
    if sizes.qk_norm:  # q: [T*H, dh], k: [B*S*Hkv, dh], one weight [dh] each
        ops += [Norm(ctx.name("cross_attention/q_norm"), spec.norm, t * H, dh, "heads"),
                Norm(ctx.name("cross_attention/k_norm"), spec.norm, kv_rows * Hkv, dh, "heads")]
    ops += [
        attention_core(ctx, "cross_attention", ctx.s, ctx.src, Mask(causal=False)),
        # heads: [T, H*dh] @ W_o: [H*dh, D]
        Matmul(ctx.name("cross_attention/out"), t, spec.d_attn, D, bias=spec.bias, split="row",
               linears=(Linear("o", D),)),
    ]
    if sizes.gated:  # tanh(g) * out: [T, D], and the MLP's own gate (its multiply on the MLP's output [T, D]); each
        # multiply keeps its [T, D] operand for the gate's gradient
        ops += [Table(ctx.name("cross_attention/gate"), 1, 1, "gate"),
                Elementwise(ctx.name("cross_attention/gate"), "scalar_gate", t * D, GATE_FLOPS, kept=t * D),
                Table(ctx.name("cross_attention/mlp_gate"), 1, 1, "gate"),
                Elementwise(ctx.name("cross_attention/mlp_gate"), "scalar_gate", t * D, GATE_FLOPS, kept=t * D)]
    return sublayer(ctx, "cross_attention", ops)


register(BlockKind("cross_attention", cross_attention, family="cross_attention", norm="cross_attention",
                   reference=f"{__name__}.reference", in_pattern=True, sizes=CrossAttentionSizes,
                   components=((r"cross_attention\.(q|kv|q_norm|k_norm|core|out|gate|mlp_gate)",
                                r"cross_attention/\1"),)))
