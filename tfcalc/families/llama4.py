"""Llama 4's language model: transformers' Llama4ForCausalLM (model_type llama4_text), read alone or from a whole
`llama4` config's text_config (Llama4ForConditionalGeneration, read whole: its vision tower and projector are
tfcalc/families/llama4_vision.py's).

Every block: pre-norm RMSNorm, grouped-query attention (q_proj, k_proj, v_proj, o_proj, biases by attention_bias),
then a dense SwiGLU MLP of width intermediate_size_mlp or, in the moe_layers (default every
interleave_moe_layer_step-th block), a mixture: a router without bias (Llama4Router, D -> num_local_experts), each
token through num_experts_per_tok routed experts (Llama4TextExperts: gate_up_proj [E, D, 2F] and down_proj [E, F, D],
F = intermediate_size: 3 E D F parameters, the gated layout tfcalc counts) and one shared expert (a SwiGLU of width
intermediate_size). An untied head by default.

Attention (iRoPE): the blocks with rotary (no_rope_layers 1; by default all but every no_rope_layer_interval-th) are
chunked: a query sees only the keys of its own chunk of attention_chunk_size positions, causally (transformers'
chunked_overlay); the NoPE blocks (no_rope_layers 0) are global and rotary-free. layer_types, when given, says which
blocks are chunked. forward counts every (query, key) pair, as transformers' eager attention computes the full scores
and masks them; forward_windowed keeps only the chunks' pairs (docs/formulas.md). A chunked block's KV cache keeps at
most attention_chunk_size tokens, as transformers' cache keeps it (a sliding-window layer of that size).

Not read, because they change no shape, no parameter and no matmul: use_qk_norm (an L2 norm of the queries and keys
of the rotary blocks, without parameters: elementwise), attn_temperature_tuning, floor_scale and attn_scale (a scale
of the NoPE blocks' queries by position), rms_norm_eps, attention_dropout, router_aux_loss_coef,
router_jitter_noise, output_router_logits, initializer_range, the token ids, use_cache. The rope parameters change
rotary frequencies, not shapes.
"""

from __future__ import annotations

from ..hf import (
    DECODER_TYPES,
    PATTERN_LIMIT,
    decoder_fields,
    refuse_if,
    shortest_cycle,
    show,
)
from .llama4_vision import LLAMA4_WHOLE
from .registry import Difference, Family, Wrapper, register

MODEL_TYPE = "llama4_text"

# Llama4TextConfig's defaults (transformers 5) for the fields read here
DEFAULTS = dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
                num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128, hidden_act="silu",
                max_position_embeddings=4096 * 32, tie_word_embeddings=False, num_experts_per_tok=1,
                num_local_experts=16, moe_layers=None, interleave_moe_layer_step=1, use_qk_norm=True,
                rope_parameters=None, no_rope_layers=None, no_rope_layer_interval=4, attention_chunk_size=8192,
                layer_types=None, attention_bias=False)
# the kinds Llama4TextConfig declares (strict: head_dim and num_key_value_heads are int, not null)
TYPES = DECODER_TYPES | dict(num_key_value_heads="size", head_dim="size", intermediate_size_mlp="size",
                             num_experts_per_tok="size", num_local_experts="int", moe_layers="integers?",
                             interleave_moe_layer_step="int", use_qk_norm="bool", no_rope_layers="integers?",
                             no_rope_layer_interval="int", attention_chunk_size="int?", layer_types="strings?",
                             attention_bias="bool")

_LAYER = r"model\.layers\.\d+\."
COMPONENTS = [
    (r"model\.embed_tokens", "embedding/token"),
    (_LAYER + r"input_layernorm", "attention/norm"),
    (_LAYER + r"self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (_LAYER + r"self_attn", "attention/core"),
    (_LAYER + r"self_attn\.o_proj", "attention/out"),
    (_LAYER + r"post_attention_layernorm", "mlp/norm"),
    (_LAYER + r"feed_forward\.gate_proj", "mlp/gate"),
    (_LAYER + r"feed_forward\.up_proj", "mlp/up"),
    (_LAYER + r"feed_forward\.down_proj", "mlp/down"),
    (_LAYER + r"feed_forward\.router", "moe/router"),
    (_LAYER + r"feed_forward\.experts", "moe/experts"),
    (_LAYER + r"feed_forward\.shared_expert\.(gate_proj|up_proj|down_proj)", "moe/shared_experts"),
    (r"model\.norm", "final_norm"),
    (r"lm_head", "head"),
]

CHUNKED, FULL = "chunked_attention", "full_attention"


def _rotary_blocks(cfg: dict, L: int) -> list[bool]:
    """Whether each block applies rotary, as Llama4TextConfig sets no_rope_layers (an empty list: the default)."""
    given = cfg["no_rope_layers"]
    if given:
        refuse_if(cfg, "no_rope_layers", len(given) < L, f"expected at least num_hidden_layers={L} entries "
                  "(transformers reads entry i for block i)")
        refuse_if(cfg, "no_rope_layers", len(given) > L and cfg["layer_types"] is None,
                  f"expected num_hidden_layers={L} entries: transformers derives layer_types from it, one per entry, "
                  "and refuses a list longer than the blocks")
        return [value != 0 for value in given[:L]]
    every = cfg["no_rope_layer_interval"]
    refuse_if(cfg, "no_rope_layer_interval", every == 0, "transformers divides by it (no_rope_layers not given)")
    return [(i + 1) % every != 0 for i in range(L)]


def _chunked_blocks(cfg: dict, L: int, rotary: list[bool]) -> list[bool]:
    """Whether each block's attention is chunked: layer_types, else Llama4TextConfig's rule (the rotary blocks,
    when attention_chunk_size is set)."""
    types, size = cfg["layer_types"], cfg["attention_chunk_size"]
    if types is None:
        return [r and size is not None for r in rotary]
    refuse_if(cfg, "layer_types", len(types) != L, f"expected a list of num_hidden_layers={L} entries")
    unknown = sorted(set(types) - {CHUNKED, FULL})
    refuse_if(cfg, "layer_types", bool(unknown), f"entries {', '.join(map(show, unknown))}; known: {CHUNKED}, {FULL}")
    refuse_if(cfg, "attention_chunk_size", CHUNKED in types and size is None,
              f"{CHUNKED} blocks need a chunk size (transformers' chunked mask has none)")
    return [t == CHUNKED for t in types]


def _moe_every(cfg: dict, L: int) -> int | None:
    """moe_every of the MoE blocks (block i MoE when (i + 1) % moe_every == 0), None for none; moe_layers that are
    not such a rule are refused by name."""
    step = cfg["interleave_moe_layer_step"]
    given = cfg["moe_layers"]
    if given is None:
        refuse_if(cfg, "interleave_moe_layer_step", step < 1, "transformers' range() needs a step of 1 or more "
                  "(moe_layers not given)")
        return step if step <= L else None
    blocks = sorted({i for i in given if 0 <= i < L})  # transformers tests `layer_idx in moe_layers`
    if not blocks:
        return None
    every = blocks[0] + 1
    refuse_if(cfg, "moe_layers", blocks != list(range(every - 1, L, every)),
              "tfcalc models MoE blocks every k-th block (k - 1, 2k - 1, ...)")
    return every


def llama4_text(cfg: dict, notes: list[str]) -> dict:
    """Llama4TextConfig's fields -> ModelSpec fields; what transformers would build differently is refused by name."""
    L, experts, k = cfg["num_hidden_layers"], cfg["num_local_experts"], cfg["num_experts_per_tok"]
    refuse_if(cfg, "num_hidden_layers", L > PATTERN_LIMIT, f"tfcalc writes Llama 4's NoPE and chunked blocks per "
              f"block, for at most {PATTERN_LIMIT:,} blocks")
    fields = decoder_fields(cfg, notes) | dict(d_head=cfg["head_dim"], d_ff=cfg["intermediate_size_mlp"],
                                               bias=cfg["attention_bias"], mlp_bias=False)
    rotary = _rotary_blocks(cfg, L)
    refuse_if(cfg, "head_dim", cfg["head_dim"] % 2 == 1 and any(rotary),
              "an odd head: transformers' rotary (view_as_complex over channel pairs) fails")
    if not all(rotary):
        fields["rotary_layers"] = shortest_cycle(rotary)
        notes.append(f"{rotary.count(False)} of {L} blocks without rotary positions (NoPE): no parameters, no matmul "
                     "(training keeps no cos/sin tables for them)")
    chunked = _chunked_blocks(cfg, L, rotary)
    size = cfg["attention_chunk_size"]
    if any(chunked):
        refuse_if(cfg, "attention_chunk_size", size < 1, "a chunk of 1 or more positions")
        fields["attention_chunk_size"] = size
        fields["attention_pattern"] = shortest_cycle(["chunked" if c else "global" for c in chunked])
        notes.append(f"attention_chunk_size={size} in {chunked.count(True)} of {L} blocks: forward counts full N x N "
                     "attention (transformers' eager attention masks full scores), forward_windowed the chunks' "
                     "pairs; their KV cache keeps at most one chunk (transformers' cache)")
    every = _moe_every(cfg, L)
    if every is None:
        notes.append("no MoE block (moe_layers / interleave_moe_layer_step): every block a dense MLP of "
                     "intermediate_size_mlp")
    else:
        refuse_if(cfg, "num_local_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers "
                  "builds a router even for 1 expert, which a dense MLP has not")
        refuse_if(cfg, "num_experts_per_tok", k > experts,
                  f"more than num_local_experts={experts}: transformers' top-k of the router's logits fails")
        fields |= dict(n_experts=experts, top_k=k, d_expert=cfg["intermediate_size"], n_shared_experts=1,
                       d_shared_expert=cfg["intermediate_size"], moe_every=every)
        notes.append("MoE: the router's sigmoid of its top-k logits scales each token's expert input (elementwise); "
                     "transformers' Llama4TextMoe runs every token through every expert (the unpicked ones with a "
                     "zero scale): tfcalc counts the top-k experts, as a routed kernel does")
    if cfg["use_qk_norm"] and any(rotary):
        notes.append("use_qk_norm: an L2 norm without parameters on the rotary blocks' queries and keys (elementwise, "
                     "not counted)")
    return fields


def dense_experts(diff: Difference) -> str | None:
    """transformers' Llama4TextMoe computes every expert over every token (bmm over [E, T, D]), each token's input
    scaled by the router's score (0 for the experts it did not pick): E / k times the routed experts' FLOPs tfcalc
    counts, in moe/experts and the total."""
    from ..arch.architecture import stacks

    spec, work = diff.spec, diff.workload
    if diff.figure != "forward" or work is None or not spec.is_moe:
        return None
    E, k = spec.n_experts, spec.top_k
    # every MoE block: (E - k) more experts per token, each 2 D 2F + 2 F D FLOPs (gate_up and down)
    moe_blocks = sum(n for layer, n in stacks(spec)[0].distinct().items() if layer.moe)
    extra = moe_blocks * work.batch_size * work.seq_len * (E - k) * 6 * spec.d_model * spec.d_expert
    if diff.excess == extra and diff.component in ("moe/experts", "total"):
        return (f"transformers' Llama4TextMoe runs all {E} experts over every token (the unpicked with a zero "
                f"scale): {E}/{k} times the routed experts' FLOPs tfcalc counts")
    return None


register(
    Family(MODEL_TYPE, DEFAULTS, TYPES, llama4_text, COMPONENTS, known=dense_experts),
    # the multimodal config, whole: its language model from text_config, its vision tower from vision_config
    # (tfcalc/families/llama4_vision.py). Llama4ForConditionalGeneration holds a whole Llama4ForCausalLM
    # (language_model), which ties its head by text_config.tie_word_embeddings alone: the outer flag changes nothing
    Family("llama4", nested=(MODEL_TYPE, "text_config"), wrapper=Wrapper(text_flag_only=True), known=dense_experts,
           **LLAMA4_WHOLE),
)
