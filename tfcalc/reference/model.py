"""A real torch.nn.Module built from any ModelSpec, for a workload: the model's frame (embeddings, stacks, final
norms, the head) here, and in each block one module per sublayer kind, each kind's own (`tfcalc/blocks/<kind>/
reference.py`), laid out as its builder's op records say. A block is composed by looping over the same list of
kinds the inventory loops over (`Layer.kinds`).

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

import importlib
import math
from dataclasses import dataclass
from functools import cache
from types import ModuleType

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..arch import Layer, Stack, Workload, default_workload, stacks
from ..arch.builders import KINDS, cross_keys
from ..spec import ModelSpec
from .layers import RMSNorm, make_norm, rotary_tables

RECOMPUTE = ("none", "selective", "full")



class Embedding(nn.Module):
    """Token table (unless an encoder-decoder shares one), positions, token types, a norm; with a factorised
    embedding (d_embedding, ALBERT) all of them d_embedding wide, then a projection to d_model."""

    def __init__(self, spec: ModelSpec, own_token_table: bool, n_layers: int = 0):
        super().__init__()
        D = spec.d_embedding or spec.d_model
        self.token = nn.Embedding(spec.embedding_rows or spec.vocab_size, D) if own_token_table else None
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


@dataclass(frozen=True)
class Site:
    """What a block kind's module is built from: the model, the block, its stack's mask, the core's path."""

    spec: ModelSpec
    layer: Layer
    causal: bool
    explicit: bool
    recompute: str
    grid: tuple[int, int] | None = None  # a model of images: the workload's patch grid (rows, columns)


@dataclass(frozen=True)
class Env:
    """What a block's sublayers read in one forward beside the residual stream."""

    context: int = 0
    bias: torch.Tensor | None = None
    memory: torch.Tensor | None = None
    src_len: int = 0
    rope: tuple[torch.Tensor, torch.Tensor] | None = None
    per_layer: torch.Tensor | None = None


@cache
def reference(kind: str) -> ModuleType:
    """The torch module of a block kind (imported the first time a model with it is built)."""
    return importlib.import_module(KINDS[kind].reference)


class Block(nn.Module):
    """One block of the inventory: its kinds in order (`Layer.kinds`), each wrapped in its norms and
    residual add by `norm_position` (`<kind>_norm` before it, after the residual add under post-norm;
    `<kind>_post_norm` after it), or side by side with attention in a parallel block."""

    def __init__(self, spec: ModelSpec, layer: Layer, causal: bool, explicit: bool, recompute: str = "none",
                 grid: tuple[int, int] | None = None):
        super().__init__()
        self.position, self.parallel = spec.norm_position, spec.parallel_block
        self.kinds = layer.kinds
        before = spec.norm_position != "output"
        after = spec.norm_position in ("sandwich", "output")
        for prefix in (KINDS[name].norm for name in self.kinds):
            if prefix:
                setattr(self, f"{prefix}_norm", make_norm(spec) if before else None)
                setattr(self, f"{prefix}_post_norm", make_norm(spec) if after else None)
        if self.parallel == "one_norm":  # the MLP reads attention's normalised input
            self.mlp_norm = None
        site = Site(spec, layer, causal, explicit, recompute, grid)
        for name in self.kinds:
            reference(name).attach(self, site)

    def normed(self, prefix: str, f, x: torch.Tensor) -> torch.Tensor:
        """x through sublayer f with its norms and the residual add."""
        norm, post_norm = getattr(self, f"{prefix}_norm"), getattr(self, f"{prefix}_post_norm")
        if self.position == "post":
            return norm(x + f(x))
        h = f(norm(x) if norm is not None else x)
        return x + (post_norm(h) if post_norm is not None else h)

    def forward(self, x: torch.Tensor, context: int = 0, bias: torch.Tensor | None = None,
                memory: torch.Tensor | None = None, src_len: int = 0, cos: torch.Tensor | None = None,
                sin: torch.Tensor | None = None, per_layer: torch.Tensor | None = None) -> torch.Tensor:
        """cos, sin: the stack's `rotary_tables` (two tensors, not a tuple: a checkpoint of the block saves
        its tensor arguments); per_layer: this block's slice of the per-layer inputs [B, N, P] (Gemma 4)."""
        env = Env(context, bias, memory, src_len, None if cos is None else (cos, sin), per_layer)
        if self.parallel != "none":  # x + attn(norm(x)) + mlp(norm(x) or norm'(x))
            attention, mlp = (reference(name) for name in self.kinds)
            h = self.attention_norm(x)
            return x + attention.call(self, h, env) + mlp.call(self, h if self.mlp_norm is None else self.mlp_norm(x),
                                                                env)
        for name in self.kinds:
            x = reference(name).forward(self, x, env)
        return x


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
                 recompute: str = "none", grid: tuple[int, int] | None = None):
        super().__init__()
        kind = spec.stack_input(stack.name)  # tokens (`embedding`), or a kind's own module (images, audio)
        self.embedding = (Embedding(spec, own_token_table, stack.n_layers) if kind == "embedding" else
                          reference(kind).input_module(spec))
        self.relative_bias = RelativeBias(spec) if spec.positions == "relative" else None
        self.alibi_heads = spec.n_heads if spec.positions == "alibi" else 0
        L, shared = stack.n_layers, spec.shared_blocks
        if shared is None:
            self.blocks = nn.ModuleList(Block(spec, stack.layer(i), stack.causal, explicit, recompute, grid)
                                        for i in range(L))
        else:  # ALBERT: `shared` sets of parameters, block i running set int(i / (L / shared))
            sets = [Block(spec, stack.layer(i), stack.causal, explicit, recompute, grid) for i in range(shared)]
            self.blocks = nn.ModuleList(sets[int(i / (L / shared))] for i in range(L))
        self.final_norm = make_norm(spec) if spec.final_norm else None
        self.pooled_norm = spec.pooled_final_norm  # only the first token normalised (CLIP's post_layernorm)
        # rotary: one pair of cos/sin tables per distinct width, each block reading its own (Gemma 4's global
        # blocks have heads of their own width); a NoPE block (Llama 4) reads none (None)
        self.widths = [stack.rotary_width(layer) if (layer := stack.layer(i)).rotary else None
                       for i in range(L)] if spec.positions == "rotary" else None
        self.recompute_blocks = recompute == "full"
        self.kv_sharing = spec.kv_shared_layers > 0
        self.first_shared = stack.n_layers - spec.kv_shared_layers if self.kv_sharing else -1

    def forward(self, tokens: torch.Tensor, token_types=None, context: int = 0, table=None, memory=None,
                src_len: int = 0, keep: int = 0) -> torch.Tensor:
        """keep > 0 (a prefill with KV sharing): from the first block that shares keys and values on, only the last
        `keep` positions (the scored ones) go on, as transformers' generate runs them."""
        x = self.embedding(tokens, token_types, context, table)  # tokens [B, N] (images [B, C, H, W], mel [B, C, F])
        # the sequence's length: the tokens' (x may hold a sequence-parallel shard of it), or the patches'
        N = tokens.shape[1] if tokens.dim() == 2 else x.shape[1]
        per_layer = None if self.embedding.per_layer is None else self.embedding.per_layer_inputs(tokens, x)
        if self.kv_sharing:  # a fresh store of keys and values for the blocks that share them
            store: dict = {}
            for block in self.blocks:
                block.attention.kv_store = store
        bias = None if self.relative_bias is None else self.relative_bias(N, context + N, tokens.device)
        if self.alibi_heads:
            bias = alibi_bias(self.alibi_heads, N, context + N, x.device, x.dtype)
        tables = {} if self.widths is None else {
            width: rotary_tables(context, N, width, x.device, x.dtype) for width in sorted(set(self.widths) - {None})}
        for i, block in enumerate(self.blocks):
            if keep and i == self.first_shared:  # the positions whose outputs nothing else reads are dropped
                x = x[:, -keep:]
                per_layer = None if per_layer is None else per_layer[:, -keep:]
                bias = None if bias is None else bias[:, :, -keep:]
                tables = {w: (cos[-keep:], sin[-keep:]) for w, (cos, sin) in tables.items()}
            rope = (None, None) if self.widths is None or self.widths[i] is None else tables[self.widths[i]]
            mine = None if per_layer is None else per_layer[:, :, i]
            if self.recompute_blocks and torch.is_grad_enabled():  # full recomputation: the block's input kept
                x = checkpoint(block, x, context, bias, memory, src_len, *rope, mine, use_reentrant=False,
                               preserve_rng_state=False)
            else:
                x = block(x, context, bias, memory, src_len, *rope, mine)
        if self.final_norm is None:
            return x
        if self.pooled_norm:
            return torch.cat([self.final_norm(x[:, :1]), x[:, 1:]], dim=1)
        return self.final_norm(x)


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
            # (a model of audio: the encoder reads mel frames, no tokens; the decoder has its own table)
            self.encoder = StackModule(spec, all_stacks[0], explicit_attention, not shared, recompute)
            self.decoder = StackModule(spec, all_stacks[1], explicit_attention, not shared, recompute)
            token_table = self.embedding.token if shared else self.decoder.embedding.token
        else:
            grid = image_grid(spec, self.workload)
            stack = StackModule(spec, all_stacks[0], explicit_attention, True, recompute, grid)
            self.embedding, self.blocks, self.final_norm = stack.embedding, stack.blocks, stack.final_norm
            self.relative_bias = stack.relative_bias
            self._stack = [stack]  # not registered: its modules are this model's own
            token_table = self.embedding.token
        for name in spec.output_kinds:  # after the stack, before the head (a patch merger: `merger`)
            reference(name).attach(self, spec)
        self.outputs = spec.output_kinds
        self.pooler = nn.Linear(spec.d_model, spec.d_pooler or spec.d_model) if spec.pooler else None
        self.classifier = nn.Linear(spec.d_model, spec.n_classes) if spec.n_classes else None
        self.attention_pool = (reference("attention_pool").AttentionPool(spec, explicit_attention)
                               if spec.attention_pool else None)
        self.projection = (nn.Linear(spec.d_model, spec.d_projection, bias=spec.projection_bias)
                           if spec.d_projection else None)
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
            memory, src_len = None, 0
            if self.spec.cross_attends:  # the cross-attended tokens (Llama 3.2 Vision's projected vision states):
                src_len = cross_keys(self.spec, w)  # an input of d_model, zeros (the shapes are what is counted);
                if w.phase != "decode":  # in decode their keys and values come from the cache
                    memory = inputs[0].new_zeros(w.batch_size, src_len, self.spec.d_model, dtype=self.head_dtype())
                    # the states come from a tower that trains (the vision tower and its projector): in a train
                    # step the key/value projection computes their gradient, as the count does
                    memory.requires_grad_(torch.is_grad_enabled())
            x = self._stack[0](inputs[0], inputs[1] if len(inputs) > 1 else None, context=w.context, keep=keep,
                               memory=memory, src_len=src_len)
        for name in self.outputs:
            x = reference(name).forward(self, x)
        out = x if self.head is None else self.head(x[:, x.shape[1] - w.scored:])
        if self.pooler is None and self.classifier is None and self.attention_pool is None and \
                self.projection is None:
            return out
        # the first token copied (clone: with B = 1 the view is already contiguous): a view would keep the whole
        # [B, N, D] output alive for the pooler's backward
        first = x[:, 0].clone()
        pooled = () if self.pooler is None else (torch.tanh(self.pooler(first)),)
        attended = () if self.attention_pool is None else (self.attention_pool(x),)
        # the projection reads the pooled row: the attention pool's, else the first token's (CLIP's class token; its
        # text tower's EOS token is one row per sequence as well)
        projected = () if self.projection is None else (self.projection(attended[0] if attended else first),)
        return (out, *pooled, *(() if self.classifier is None else (self.classifier(first),)), *attended,
                *projected)

    def head_dtype(self) -> torch.dtype:
        """The dtype of the model's parameters (the cross-attended states are made in it)."""
        return next(self.parameters()).dtype


def image_grid(spec: ModelSpec, workload: Workload) -> tuple[int, int] | None:
    """A model of images' patch grid (rows, columns) on the workload's images (default: the model's)."""
    if spec.inputs != "images":
        return None
    sizes = spec.sizes("patch_embedding")
    H, W = workload.image_size or (sizes.height, sizes.width)
    return H // sizes.patch_size, W // sizes.patch_size


def build_model(spec: ModelSpec, device: str | torch.device = "meta", dtype: torch.dtype = torch.float32,
                explicit_attention: bool = False, workload: Workload | None = None,
                recompute: str = "none", stack_layout: list[Stack] | None = None) -> Transformer:
    """The reference model, its parameters created directly on `device` and in `dtype` (on meta, nothing is
    allocated). Built in fp32 and then cast, a bf16 model would briefly hold both copies: 1.5x its weights.
    `recompute`: see `Transformer`. A multimodal model (`spec.towers`) is built one tower at a time
    (tfcalc.verify.check builds each tower and its connectors): refused here, never built as its text tower alone."""
    if spec.towers:
        from ..errors import TfcalcError

        raise TfcalcError(f"build_model: {spec.label} has a {' and '.join(spec.towers)} tower beside its language model; "
                          "its reference model is built one tower at a time (tfcalc.verify.check, or --tower)")
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
    has them (a model of images: images [B, C, H, W]; an audio encoder alone: mel frames [B, C, 2N]); for an
    encoder-decoder the source [B, S] first (a model of audio: mel frames [B, C, F]; left out in decode, when the
    encoder is cached)."""
    w = workload or default_workload(spec)
    generator = None if str(device) == "meta" else torch.Generator(device=device).manual_seed(0)
    if spec.inputs == "images":  # [B, C, H, W]
        return (reference(spec.input_kind).example_images(spec, w.batch_size, w.image_size, device, generator,
                                                                 seq_len=w.seq_len),)
    if spec.inputs == "audio" and not spec.is_encoder_decoder:  # an audio encoder alone: mel frames [B, C, 2N]
        frames = w.mel_frames or spec.sizes("audio_conv").frames_for(w.seq_len)  # (Gemma 4's: its clip's frames)
        return (reference(spec.input_kind).example_mel(spec, w.batch_size, frames, device, generator),)
    if spec.inputs == "audio" and w.phase != "decode":  # mel frames [B, C, F], then the decoder's tokens
        mel = reference(spec.input_kind).example_mel(spec, w.batch_size, w.mel_frames, device, generator)
        return mel, torch.randint(spec.vocab_size, (w.batch_size, w.seq_len), device=device, generator=generator)

    def ids(n: int, high: int) -> torch.Tensor:
        return torch.randint(high, (w.batch_size, n), device=device, generator=generator)

    tokens = ids(w.seq_len, min(spec.vocab_size, spec.per_layer_vocab or spec.vocab_size))  # a per-layer table's too
    if spec.is_encoder_decoder:
        return (tokens,) if w.phase == "decode" else (ids(w.src_len or w.seq_len, spec.vocab_size), tokens)
    if not spec.n_token_types:
        return (tokens,)
    return tokens, ids(w.seq_len, spec.n_token_types)

