"""An attention-pooling head (`attention_pool`; SigLIP's vision head, transformers'
SiglipMultiheadAttentionPoolingHead): after the stack's final norm, a learned probe [1, 1, D] is the one query of
each image, attending with n_heads heads of D / n_heads to the stack's tokens; then a norm and an MLP with a residual
add; the pooled row [B, D] is the model's output. Registered lazily: most models have none.

The attention is torch's nn.MultiheadAttention (in_proj_weight [3D, D] and in_proj_bias [3D], out_proj D -> D with a
bias), run as torch's multi_head_attention_forward runs a query that is not the keys: the probe through the first D
rows of in_proj ([B, D] @ [D, D]), the tokens through the other 2D rows at once ([B * s, D] @ [D, 2D]: keys and
values), one score row per head over the s tokens, the output projection on the one pooled row. The norm is the spec's
norm (SigLIP's LayerNorm), the MLP fc1 D -> d_ff, the activation, fc2 d_ff -> D, each with a bias (SiglipMLP).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...arch.builders import ACTIVATION_FLOPS, RESIDUAL_ADD, BlockKind, Ctx, register
from ...arch.ops import AttentionCore, Elementwise, Mask, Matmul, Norm, Op, Table


@dataclass(frozen=True, slots=True)
class PoolCore(AttentionCore):
    """The probe's scores and value mixing: an attention core in the model's head, not a block's (its role is not
    "core": it is no block's quadratic work, and selective recomputation, which checkpoints the blocks' cores, leaves
    it alone)."""

    role = "pool"

    def saved(self, a: int, recompute: str, par) -> dict[str, int]:
        """An attention core's, never recomputed (it is in the head: no mode checkpoints it); a fused kernel's output
        [b, h, 1, d] is the out projection's input too (one query per sequence: a view of it), kept by that record."""
        saved = AttentionCore.saved(self, a, "none", par)
        saved.pop("output", None)
        return saved


def attention_pool(ctx: Ctx) -> list[Op]:
    """The probe's attention over each sequence's s tokens, then norm, MLP and residual over the B pooled rows."""
    spec, b, s, D, F = ctx.spec, ctx.b, ctx.s, ctx.spec.d_model, ctx.spec.d_ff
    H = spec.n_heads
    return [
        Table("attention_pool/probe", 1, D, "probe"),  # [1, 1, D]
        Matmul("attention_pool/q", b, D, D, bias=True),  # probe: [B, D] @ W_q: [D, D] (in_proj's first D rows)
        Matmul("attention_pool/kv", b * s, D, 2 * D, bias=True),  # tokens: [B*s, D] @ W_kv: [D, 2D]
        # q: [B, H, 1, D/H] @ k^T: [B, H, D/H, s]; probs: [B, H, 1, s] @ v: [B, H, s, D/H]; every token kept
        PoolCore("attention_pool", b, H, 1, s, D // H, D // H, Mask(causal=False)),
        Matmul("attention_pool/out", b, D, D, bias=True),  # [B, D] @ W_out: [D, D] (out_proj)
        Norm("attention_pool/norm", spec.norm, b, D),  # [B, D]
        Matmul("attention_pool/up", b, D, F, bias=True),  # [B, D] @ W_fc1: [D, F]
        Elementwise("attention_pool/up", "activation", b * F, ACTIVATION_FLOPS[spec.activation], spec.activation),
        Matmul("attention_pool/down", b, F, D, bias=True),  # [B, F] @ W_fc2: [F, D]
        Elementwise("attention_pool/residual", "residual", b * D, RESIDUAL_ADD),
    ]


register(BlockKind("attention_pool", attention_pool, in_block=False,
                   reference=f"{__name__}.reference",
                   components=((r"attention_pool\.(probe|q|kv|core|out|norm|up|down)", r"attention_pool/\1"),)))
