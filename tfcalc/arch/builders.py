"""Builders: one function per block kind, each turning (spec, workload, stack, layer) into op records.

A builder is registered under the name of the sublayer it builds (`@builder("attention")`); the inventory calls
them in order, and the reference model has one module per builder, named after its components. Adding a block
kind is one builder here and one module in `tfcalc.reference`; the folds, the renderers and `check` read the
records and need no change.

Shapes follow torch's nn.Linear (weight [out, in], bias [out]); a shape comment is on each record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..spec import ModelSpec
from .architecture import Layer, Stack
from .ops import AttentionCore, Elementwise, Mask, Matmul, Norm, Op, Table
from .workload import Workload

# Estimated FLOPs per element of the work that is not a matmul: rough, stated once, only ever reported apart.
ACTIVATION_FLOPS = {"gelu": 8, "gelu_tanh": 8, "silu": 4, "relu": 1}
GATE_MULTIPLY = 1  # act(gate) * up
RESIDUAL_ADD = 1


@dataclass(frozen=True)
class Ctx:
    """What a builder sees: the model, the workload, the stack and block, and the token counts they imply."""

    spec: ModelSpec
    workload: Workload
    stack: Stack
    layer: Layer | None = None
    final: bool = False  # the stack's final norm (after its last block)

    @property
    def b(self) -> int:
        return self.workload.batch_size

    @property
    def s(self) -> int:
        """Tokens per sequence this stack (this block) processes in the step (0: it does not run, e.g. the encoder
        in decode). In a prefill, the blocks from the first that shares keys and values on (Gemma 4) run only
        over the positions the head scores: their outputs elsewhere feed nothing (they add nothing to the cache),
        so transformers' generate slices them away (_maybe_slice_kv_shared_inputs), and so does tfcalc."""
        w = self.workload
        if self.stack.name == "encoder":
            return 0 if w.phase == "decode" else (w.src_len or w.seq_len)
        if self.past_shared_kv:
            return w.scored
        return w.seq_len

    @property
    def past_shared_kv(self) -> bool:
        """A prefill's block that shares keys and values, or the final norm after them: over the scored positions."""
        w, spec = self.workload, self.spec
        if w.phase != "prefill" or not spec.kv_shared_layers or self.stack.name == "encoder":
            return False
        return self.layer.kv_shared if self.layer is not None else self.final


    @property
    def t(self) -> int:
        return self.b * self.s

    @property
    def keys(self) -> int:
        """Keys of this stack's self-attention: the cache and the new tokens (the encoder has no cache)."""
        return self.s if self.stack.name == "encoder" else self.workload.keys

    @property
    def src(self) -> int:
        """Encoder tokens per sequence (the keys of cross-attention)."""
        return self.workload.src_len or self.workload.seq_len

    def name(self, component: str) -> str:
        return self.stack.prefix(component)

    @property
    def heads(self) -> tuple[int, int, bool]:
        """This block's self-attention: (d_head, key/value heads, values are the keys); a global block's may
        differ (Gemma 4)."""
        return self.spec.attention_shape(self.layer is not None and self.layer.window is not None)


Builder = Callable[[Ctx], list[Op]]
BUILDERS: dict[str, Builder] = {}
# the kind of work each builder's records do, for what classifies components (the attention/MLP crossover, a
# plot's colours): "attention", "cross_attention", "mlp" or "other" (embeddings, norms, heads)
FAMILIES: dict[str, str] = {}


def builder(name: str, family: str = "other") -> Callable[[Builder], Builder]:
    """Register a builder under `name` (one place per block kind, like torch's register_flop_formula)."""
    def register(fn: Builder) -> Builder:
        assert name not in BUILDERS, name
        BUILDERS[name], FAMILIES[name] = fn, family
        return fn
    return register


def _norm(ctx: Ctx, component: str, rows: int) -> Norm:
    return Norm(ctx.name(component), ctx.spec.norm, rows, ctx.spec.d_model)


@builder("embedding")
def embedding(ctx: Ctx) -> list[Op]:
    """The stack's input: token table (unless shared at the top), positions, token types, a norm."""
    spec = ctx.spec
    D = spec.d_embedding or spec.d_model  # ALBERT's factorised embedding: E-wide tables, then E -> D
    ops: list[Op] = []
    if not (spec.is_encoder_decoder and spec.shared_embeddings):
        ops.append(Table(ctx.name("embedding/token"), spec.vocab_size, D, tokens=ctx.t))  # [V, D]
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


def _attention_core(ctx: Ctx, component: str, s_q: int, s_k: int, mask: Mask, sinks: int = 0,
                    d_head: int | None = None, kv_heads: int | None = None) -> AttentionCore:
    spec = ctx.spec
    d_head, kv_heads = d_head or spec.d_head, kv_heads or spec.n_kv_heads
    cached = ctx.stack.name != "encoder" and spec.causal  # a decoder keeps its keys and values for the next step
    # q: [B, H, s_q, dh] @ k^T: [B, H, dh, s_k]; probs: [B, H, s_q, s_k] @ v: [B, H, s_k, dh]; k, v from Hkv heads
    return AttentionCore(ctx.name(component), ctx.b, spec.n_heads, s_q, s_k, d_head, d_head, mask, kv_heads, cached,
                         sinks)


def _sublayer(ctx: Ctx, sublayer: str, ops: list[Op], beside_attention: bool = False) -> list[Op]:
    """A sublayer's ops with its norms (by `norm_position`) and the residual add: pre and post have one norm
    (`<sublayer>/norm`; post's normalises the sum, after the residual add), output one on the sublayer's output
    (`<sublayer>/post_norm`, before the residual add), sandwich both.

    `beside_attention`: the MLP (or the experts) of a parallel block, x + attn(norm(x)) + mlp(norm'(x)), with its own
    residual add (two adds, as sequential blocks have). With two norms its norm reads the block's input, which
    attention's norm keeps; with one it has no norm of its own, and its first projection (the up projection, or the
    router) reads attention's normalised x: kept once."""
    position, t = ctx.spec.norm_position, ctx.t
    before = [] if position == "output" else [_norm(ctx, f"{sublayer}/norm", t)]
    after = [_norm(ctx, f"{sublayer}/post_norm", t)] if position in ("sandwich", "output") else []
    if beside_attention and ctx.spec.parallel_block == "two_norms":
        before = [replace(norm, shares_input=True) for norm in before]
    elif beside_attention and ctx.spec.parallel_block == "one_norm":
        before, ops = [], [replace(ops[0], shares_input=True), *ops[1:]]
    return [*before, *ops, *after, Elementwise(ctx.name("residual"), "residual", t * ctx.spec.d_model, RESIDUAL_ADD)]


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


@builder("attention", family="attention")
def attention(ctx: Ctx) -> list[Op]:
    """Self-attention: norm, fused q/k/v projection, q/k norms, scores and value mixing, output projection,
    residual. A global block may have heads of its own width and number, and no value projection (its values
    are the keys: Gemma 4)."""
    spec, t, D, H = ctx.spec, ctx.t, ctx.spec.d_model, ctx.spec.n_heads
    if spec.is_mla:
        return _sublayer(ctx, "attention", _mla_attention(ctx))
    dh, kv, k_eq_v = ctx.heads
    shared = ctx.layer.kv_shared  # an earlier block's keys and values: only q here, and nothing cached
    kv_width = 0 if shared else (1 if k_eq_v else 2) * kv * dh
    core = _attention_core(ctx, "attention", ctx.s, ctx.keys, Mask(ctx.stack.causal, ctx.layer.window),
                           sinks=int(spec.attention_sinks), d_head=dh, kv_heads=kv)
    return _sublayer(ctx, "attention", [
        # x: [T, D] @ W_qkv: [D, H*dh + 2*Hkv*dh] (+ Hkv*dh when the values are the keys; none when shared)
        Matmul(ctx.name("attention/qkv"), t, D, H * dh + kv_width, bias=spec.has_qkv_bias, split="column"),
        *_qk_norms(ctx),
        *_sinks(ctx),
        replace(core, cached=False, shares_kv=True) if shared else core,
        # heads: [T, H*dh] @ W_o: [H*dh, D]
        Matmul(ctx.name("attention/out"), t, H * dh, D, bias=spec.bias, split="row"),
    ])


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
    return ops + [
        # every key's latent, cached and new: [B*keys, r_kv] @ [r_kv, H*(nope+v)]
        Matmul(ctx.name("attention/kv_b"), ctx.b * ctx.keys, r_kv, H * (nope + d_v), split="column"),
        AttentionCore(ctx.name("attention"), ctx.b, H, ctx.s, ctx.keys, nope + rope, d_v,
                      Mask(ctx.stack.causal, ctx.layer.window), H, cached, cache_width=r_kv + rope),
        Matmul(ctx.name("attention/out"), t, H * d_v, D, bias=spec.bias, split="row"),  # [T, H*v] @ [H*v, D]
    ]


def _sinks(ctx: Ctx) -> list[Op]:
    """gpt-oss's attention sinks: one learned logit per query head, a column of each softmax row beside the keys'
    scores (no value mixed: it only takes probability mass). Parameters [H], no matmul; tensor parallelism splits
    them with the heads."""
    return [Table(ctx.name("attention/sinks"), 1, ctx.spec.n_heads, "sinks")] if ctx.spec.attention_sinks else []


@builder("cross_attention", family="cross_attention")
def cross_attention(ctx: Ctx) -> list[Op]:
    """Queries from the decoder, keys and values from the encoder's output (all of it: no mask). In decode the
    encoder's keys and values are cached, so their projection does no work (its weights are still there)."""
    spec, t, D = ctx.spec, ctx.t, ctx.spec.d_model
    kv_rows = 0 if ctx.workload.phase == "decode" else ctx.b * ctx.src
    return _sublayer(ctx, "cross_attention", [
        # decoder x: [T, D] @ W_q: [D, H*dh]
        Matmul(ctx.name("cross_attention/q"), t, D, spec.d_attn, bias=spec.has_qkv_bias, split="column"),
        # encoder out: [B*S, D] @ W_kv: [D, 2*Hkv*dh]
        Matmul(ctx.name("cross_attention/kv"), kv_rows, D, 2 * spec.d_kv, bias=spec.has_qkv_bias, split="column",
               role="encoder_kv"),
        _attention_core(ctx, "cross_attention", ctx.s, ctx.src, Mask(causal=False)),
        # heads: [T, H*dh] @ W_o: [H*dh, D]
        Matmul(ctx.name("cross_attention/out"), t, spec.d_attn, D, bias=spec.bias, split="row"),
    ])


def _ffn(ctx: Ctx, names: tuple[str, str, str], rows: int, width: int, weights: int = 1,
         active: int | None = None) -> list[Op]:
    """up [and gate] D -> width, the activation, down width -> D, over `rows` token rows; `names` are the
    components of (up, gate, down). Shared by the dense MLP and the experts."""
    spec, D, bias = ctx.spec, ctx.spec.d_model, ctx.spec.has_mlp_bias
    gated = spec.mlp == "gated"
    up, gate, down = (ctx.name(name) for name in names)
    ops: list[Op] = [Matmul(up, rows, D, width, weights, bias, active, "column")]  # x: [rows, D] @ W_up: [D, F]
    if gated:  # x: [rows, D] @ W_gate: [D, F], the same x as up's
        ops.append(Matmul(gate, rows, D, width, weights, bias, active, "column", shares_input=True))
    ops.append(Matmul(down, rows, width, D, weights, bias, active, "row"))  # h: [rows, F] @ W_down: [F, D]
    ops.append(Elementwise(up, "activation", rows * width,  # gated: act(gate) * up keeps both
                           ACTIVATION_FLOPS[spec.activation] + (GATE_MULTIPLY if gated else 0), spec.activation,
                           multiplies=2 if gated else 0))
    return ops


@builder("mlp", family="mlp")
def mlp(ctx: Ctx) -> list[Op]:
    """A dense MLP: norm, up [and gate], activation, down, residual."""
    return _sublayer(ctx, "mlp", _ffn(ctx, ("mlp/up", "mlp/gate", "mlp/down"), ctx.t, _d_ff(ctx)), beside_attention=True)


def _d_ff(ctx: Ctx) -> int:
    """The dense MLP's width in this block: kv_shared_d_ff in a block that shares keys and values (Gemma 4)."""
    spec = ctx.spec
    return spec.kv_shared_d_ff if ctx.layer.kv_shared and spec.kv_shared_d_ff else spec.d_ff


@builder("per_layer_input")
def per_layer_input(ctx: Ctx) -> list[Op]:
    """Gemma 4's per-layer input, after the MLP: x + norm(proj(act(gate(x)) * the block's P slice))."""
    spec, t, D, P = ctx.spec, ctx.t, ctx.spec.d_model, ctx.spec.d_per_layer_input
    return [
        Matmul(ctx.name("per_layer/gate"), t, D, P),  # x: [T, D] @ W_gate: [D, P]
        Elementwise(ctx.name("per_layer/gate"), "activation", t * P, ACTIVATION_FLOPS[spec.activation] + 1,
                    spec.activation, multiplies=1),  # act(gate) * the block's slice: keeps act(gate)
        Matmul(ctx.name("per_layer/projection"), t, P, D),  # [T, P] @ W_proj: [P, D]
        Norm(ctx.name("per_layer/norm"), spec.norm, t, D),
        Elementwise(ctx.name("residual"), "residual", t * D, RESIDUAL_ADD),
    ]


@builder("moe", family="mlp")
def moe(ctx: Ctx) -> list[Op]:
    """A mixture of experts: a router, each token through exactly top_k routed experts (an even split is not
    assumed: the rows are all the token-expert pairs), shared experts every token goes through, their gate."""
    spec, t, D = ctx.spec, ctx.t, ctx.spec.d_model
    E, k = spec.n_experts, spec.top_k
    if spec.moe_beside_mlp:
        return _moe_beside_mlp(ctx)
    ops: list[Op] = [Matmul(ctx.name("moe/router"), t, D, E, bias=spec.router_bias, role="router"),  # [T, D] @ [D, E]
                     # softmax over E router logits, then weighting each of the top_k expert outputs
                     Elementwise(ctx.name("moe/routing"), "routing", t, 5 * E + k * D)]
    # [T*k, D] @ [D, F_e] (x2 when gated), [T*k, F_e] @ [F_e, D]: E experts' weights, k of them per token
    ops += _ffn(ctx, ("moe/experts",) * 3, t * k, spec.d_expert, weights=E, active=k)
    if spec.n_shared_experts:
        n = spec.n_shared_experts  # every token through each: [T*n, D] @ [D, F_s], ...
        shared = _ffn(ctx, ("moe/shared_experts",) * 3, t * n, spec.d_shared_expert, weights=n)
        shared[0] = replace(shared[0], shares_input=True)  # they read the router's x: kept once
        ops += shared
    if spec.shared_expert_gate:  # x: [T, D] @ W_gate: [D, 1], the router's x
        ops.append(Matmul(ctx.name("moe/shared_gate"), t, D, 1, shares_input=True, role="shared_gate"))
    return _sublayer(ctx, "mlp", ops, beside_attention=True)


def _moe_beside_mlp(ctx: Ctx) -> list[Op]:
    """Gemma 4's MoE block (moe_beside_mlp): the dense MLP, normed before and after (mlp/norm, mlp/branch_norm),
    and beside it the experts on the same residual stream x, normed before and after (moe/norm, moe/post_norm); the
    router reads x through an RMS norm without weight times a scale [D] (one RMS norm with that weight:
    moe/router_norm), and each token's top_k weights are times a scale per expert [E] (moe/expert_scale). The two
    outputs are summed, normed (mlp/post_norm) and added to x."""
    spec, t, D = ctx.spec, ctx.t, ctx.spec.d_model
    E, k = spec.n_experts, spec.top_k
    return [
        _norm(ctx, "mlp/norm", t),
        *_ffn(ctx, ("mlp/up", "mlp/gate", "mlp/down"), t, _d_ff(ctx)),
        _norm(ctx, "mlp/branch_norm", t),
        Norm(ctx.name("moe/router_norm"), "rmsnorm", t, D, shares_input=True),  # x kept once (mlp/norm's)
        Table(ctx.name("moe/expert_scale"), 1, E, "scale"),  # [E]
        Matmul(ctx.name("moe/router"), t, D, E, bias=spec.router_bias, role="router"),  # [T, D] @ [D, E]
        Elementwise(ctx.name("moe/routing"), "routing", t, 5 * E + k * D + k),  # softmax, weights, expert scales
        replace(_norm(ctx, "moe/norm", t), shares_input=True),  # the same x as mlp/norm's
        # [T*k, D] @ [D, F_e] (x2 when gated), [T*k, F_e] @ [F_e, D]: E experts' weights, k of them per token
        *_ffn(ctx, ("moe/experts",) * 3, t * k, spec.d_expert, weights=E, active=k),
        _norm(ctx, "moe/post_norm", t),
        _norm(ctx, "mlp/post_norm", t),
        Elementwise(ctx.name("residual"), "residual", t * D, RESIDUAL_ADD + 1),  # the two branches summed, then x
    ]


@builder("final_norm")
def final_norm(ctx: Ctx) -> list[Op]:
    ctx = replace(ctx, final=True)  # over the scored positions after KV-sharing blocks in a prefill
    return [_norm(ctx, "final_norm", ctx.t)] if ctx.spec.final_norm else []


@builder("head")
def head(ctx: Ctx) -> list[Op]:
    """Once for the model, after the last stack: the pooler and the vocabulary projection."""
    spec, D, b = ctx.spec, ctx.spec.d_model, ctx.b
    ops: list[Op] = []
    if spec.pooler:  # first token of each sequence: [B, D] @ W_pool: [D, D]
        ops.append(Matmul("pooler", b, D, D, bias=True, role="pooler"))
    if spec.lm_head:
        # x: [B*scored, D] @ W_head: [D, V]; a tied head's weight is the token embedding, counted there
        ops.append(Matmul("head", b * ctx.workload.scored, D, spec.vocab_size,
                          weights=0 if spec.tie_embeddings else 1, bias=spec.head_bias, split="column",
                          role="head"))
    return ops


@builder("shared_embedding")
def shared_embedding(ctx: Ctx) -> list[Op]:
    """An encoder-decoder's one token table, used by both stacks (and by a tied head)."""
    spec = ctx.spec
    # looked up by the decoder's tokens and, unless in decode, the encoder's
    tokens = ctx.t + (0 if ctx.workload.phase == "decode" else ctx.b * ctx.src)
    return [Table("embedding/token", spec.vocab_size, spec.d_model, tokens=tokens)] if spec.shared_embeddings else []


def run(name: str, ctx: Ctx) -> list[Op]:
    """The ops of the builder registered as `name`, each marked with the sublayer that made it."""
    return [replace(op, sublayer=name) for op in BUILDERS[name](ctx)]


def sublayers(ctx: Ctx) -> list[str]:
    """The builders one block is composed of, in order: self-attention, cross-attention when it has it, then the
    MLP or the experts (beside attention in a parallel block), then a per-layer input (Gemma 4)."""
    names = ["attention", *(["cross_attention"] if ctx.layer.cross else []), "moe" if ctx.layer.moe else "mlp"]
    if ctx.spec.d_per_layer_input and ctx.spec.parallel_block == "none":
        names.append("per_layer_input")
    return names


def block(ctx: Ctx) -> list[Op]:
    """One block: its sublayers' ops in order (a parallel block's MLP reads the block's input: `_sublayer`)."""
    return [op for name in sublayers(ctx) for op in run(name, ctx)]
