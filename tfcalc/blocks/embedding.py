"""The model's frame: each stack's embedding (token, position, token-type tables, a norm, ALBERT's projection,
Gemma 4's per-layer embeddings) and an encoder-decoder's shared token table. Their torch modules are the reference
model's frame (`tfcalc.reference.model.Embedding`, `Transformer`)."""

from __future__ import annotations

from ..arch.builders import BlockKind, Ctx, register
from ..arch.ops import Elementwise, Matmul, Norm, Op, Table


def embedding(ctx: Ctx) -> list[Op]:
    """The stack's input: token table (unless shared at the top), positions, token types, a norm."""
    spec = ctx.spec
    D = spec.d_embedding or spec.d_model  # ALBERT's factorised embedding: E-wide tables, then E -> D
    ops: list[Op] = []
    if not (spec.is_encoder_decoder and spec.shared_embeddings):
        # [V, D] (Llama 3.2 Vision's: [V + 8, D], embedding_rows)
        ops.append(Table(ctx.name("embedding/token"), spec.embedding_rows or spec.vocab_size, D, tokens=ctx.t))
    if spec.positions == "learned":
        ops.append(Table(ctx.name("embedding/position"), spec.max_positions, D, "position"))  # [P, D]
    if spec.positions == "relative":  # T5: one bucket table in the stack's first block, shared by the rest
        ops.append(Table(ctx.name("attention/relative_bias"), spec.relative_attention_buckets, spec.n_heads,
                         "position"))  # [buckets, H]
    if spec.n_token_types:
        ops.append(Table(ctx.name("embedding/token_type"), spec.n_token_types, D, "token_type"))  # [types, D]
    if spec.embedding_norm:
        ops.append(Norm(ctx.name("embedding/norm"), spec.norm, ctx.t, D))
    if spec.d_embedding:  # x: [T, E] @ W_proj: [E, D] (ALBERT's embedding_hidden_mapping_in)
        ops.append(Matmul(ctx.name("embedding/projection"), ctx.t, D, spec.d_model, bias=True))
    if spec.d_per_layer_input:  # Gemma 4's per-layer embeddings: every block's P-wide input, made once here
        LP = ctx.stack.n_layers * spec.d_per_layer_input
        ops += [Table(ctx.name("embedding/per_layer"), spec.per_layer_vocab or spec.vocab_size, LP, "per_layer"),
                # the embedded tokens x: [T, D] @ W: [D, L*P]; x is the first block's input, kept once
                Matmul(ctx.name("embedding/per_layer_projection"), ctx.t, spec.d_model, LP, shares_input=True),
                Norm(ctx.name("embedding/per_layer_norm"), "rmsnorm", ctx.t * ctx.stack.n_layers,
                     spec.d_per_layer_input),  # over each block's slice [T*L, P]
                Elementwise(ctx.name("embedding/per_layer"), "residual", ctx.t * LP, 2)]  # (table + norm) * scale
    return ops


def shared_embedding(ctx: Ctx) -> list[Op]:
    """An encoder-decoder's one token table, used by both stacks (and by a tied head)."""
    spec = ctx.spec
    # looked up by the decoder's tokens and, unless in decode, the encoder's
    tokens = ctx.t + (0 if ctx.workload.phase == "decode" else ctx.b * ctx.src)
    return [Table("embedding/token", spec.vocab_size, spec.d_model, tokens=tokens)] if spec.shared_embeddings else []


def kept_once(ctx: Ctx, recompute: str, attention: str = "fused") -> list[tuple[str, int, int]]:
    """What a stack's embedding keeps once per step: learned positions' ids (int64; the lookup keeps its indices),
    T5's relative-position bucket ids (int64, s_q x s_k) and, when attention is recomputed or fused, the bias
    itself (H x s_q x s_k: an input of every recomputed core or block, or of each fused kernel: SDPA's
    attn_mask), Gemma 4's per-layer inputs [T, L, P] (read by every block, a slice each)."""
    spec, s, name = ctx.spec, ctx.s, ctx.name
    kept: list[tuple[str, int, int]] = []
    if spec.positions == "learned" and spec.stack_input(ctx.stack.name) == "embedding":  # a patch embedding, an
        kept.append((name("embedding/position ids"), s, 8))  # audio front end add their tables' rows: no ids
    if spec.positions == "relative":
        kept.append((name("attention/relative bucket ids"), s * ctx.keys, 8))
        if recompute != "none" or attention == "fused":
            kept.append((name("attention/relative bias"), spec.n_heads * s * ctx.keys, 0))
    if spec.d_per_layer_input:
        kept.append((name("embedding/per-layer inputs"), ctx.t * ctx.stack.n_layers * spec.d_per_layer_input, 0))
    return kept


register(BlockKind("embedding", embedding, in_block=False, kept_once=kept_once, components=(
    (r"embedding\.(token|position|token_type|norm|projection|per_layer|per_layer_projection|per_layer_norm)",
     r"embedding/\1"),
    (r"relative_bias\.table", "attention/relative_bias"),
)))
register(BlockKind("shared_embedding", shared_embedding, in_block=False))
