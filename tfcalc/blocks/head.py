"""The model's frame after the blocks: each stack's final norm, and once for the model the pooler and the
vocabulary projection (the head). Their torch modules are the reference model's frame
(`tfcalc.reference.model.StackModule`, `Transformer`)."""

from __future__ import annotations

from dataclasses import replace

from ..arch.builders import BlockKind, Ctx, norm, register, run
from ..arch.ops import Matmul, Op


def final_norm(ctx: Ctx) -> list[Op]:
    ctx = replace(ctx, final=True)  # over the scored positions after KV-sharing blocks in a prefill
    if not ctx.spec.final_norm:
        return []
    if ctx.spec.pooled_final_norm:  # CLIP's vision post_layernorm: only each sequence's first token, [B, D], a view
        # of the last hidden state [T, D] that keeps all of it for backward
        return [replace(norm(ctx, "final_norm", ctx.b), input_kept=ctx.t * ctx.spec.d_model)]
    return [norm(ctx, "final_norm", ctx.t)]


def head(ctx: Ctx) -> list[Op]:
    """Once for the model, after the last stack: an attention-pooling head (its own kind), the pooler, the
    classifier, the projection of the pooled token and the vocabulary projection."""
    spec, D, b = ctx.spec, ctx.spec.d_model, ctx.b
    ops: list[Op] = run("attention_pool", ctx) if spec.attention_pool else []
    if spec.pooler:  # first token of each sequence: [B, D] @ W_pool: [D, P] (P = d_pooler, default D)
        ops.append(Matmul("pooler", b, D, spec.d_pooler or D, bias=True, role="pooler"))
    if spec.n_classes:  # the first (class) token's final state: [B, D] @ W_cls: [D, classes]
        ops.append(Matmul("classifier", b, D, spec.n_classes, bias=True, role="classifier"))
    if spec.d_projection:  # the pooled token (CLIP's class or EOS token, SigLIP's pooled or last token):
        # [B, D] @ W_proj: [D, P]
        ops.append(Matmul("projection", b, D, spec.d_projection, bias=spec.projection_bias, role="projection"))
    if spec.lm_head:
        # x: [B*scored, D] @ W_head: [D, V]; a tied head's weight is the token embedding, counted there
        ops.append(Matmul("head", b * ctx.workload.scored, D, spec.vocab_size,
                          weights=0 if spec.tie_embeddings else 1, bias=spec.head_bias, split="column",
                          role="head"))
    return ops


register(BlockKind("final_norm", final_norm, in_block=False, components=((r"final_norm", "final_norm"),)))
register(BlockKind("head", head, in_block=False, components=((r"(pooler|classifier|projection|head)", r"\1"),)))
