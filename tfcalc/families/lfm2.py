"""LFM2 (Liquid AI; model_type lfm2): transformers' Lfm2ForCausalLM.

A hybrid of short-convolution blocks and attention blocks, by layer_types ("conv" or "full_attention"; when null,
full_attn_idxs lists the attention blocks, and when that is null too every block is attention: Lfm2Config's
default is a plain transformer). Every block is pre-norm: operator_norm (an RMSNorm) before its mixer, ffn_norm before
its MLP, and a final RMSNorm (embedding_norm) after the last block; no biases but the conv's (conv_bias).
  * the conv mixer (Lfm2ShortConv; tfcalc's `conv` kind): in_proj D -> 3D (B, C, x), B*x, a depthwise causal
    Conv1d over conv_L_cache positions, C*y, out_proj D -> D, all with biases by conv_bias;
  * attention (Lfm2Attention): q_proj, k_proj, v_proj (grouped-query) and out_proj without biases, an RMSNorm on each
    query and key head (q_layernorm, k_layernorm: one weight [head_dim] each, qk_norm "head") before rotary;
  * the MLP (Lfm2MLP): w2(silu(w1 x) * w3 x), always silu (no hidden_act is read); its width is intermediate_size,
    or with block_auto_adjust_ff_dim int(2n/3), times block_ffn_dim_multiplier, rounded up to block_multiple_of.
LFM2-MoE (model_type lfm2_moe; Lfm2MoeForCausalLM): the same blocks, a dense MLP in the first num_dense_layers and
routed experts in the others (`lfm2_moe` below). Legacy keys Lfm2Config pops from its kwargs: tie_embedding (into tie_word_embeddings) and block_ff_dim (into
intermediate_size), both over the field's own value. Keys transformers does not read (block_dim, conv_dim,
block_norm_eps, rope_theta, ...) are not read here either.
"""

from __future__ import annotations

from typing import Any

from ..hf import (
    DECODER_TYPES,
    PATTERN_LIMIT,
    Unmodelled,
    refuse_if,
    shortest_cycle,
    show,
)
from .registry import Difference, Family, register

DEFAULTS = {"vocab_size": 65536, "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 128_000,
            "tie_word_embeddings": True, "rope_parameters": None, "conv_bias": False, "conv_L_cache": 3,
            "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": True,
            "full_attn_idxs": None, "layer_types": None}
# Lfm2Config declares no head_dim, but its attention reads one (getattr) when a config gives it: then not null
TYPES = {k: v for k, v in DECODER_TYPES.items() if k not in ("hidden_act", "rope_scaling")} | {
    "num_key_value_heads": "size", "head_dim": "size", "conv_bias": "bool", "conv_L_cache": "int",
    "block_multiple_of": "int", "block_ffn_dim_multiplier": "number", "block_auto_adjust_ff_dim": "bool",
    "full_attn_idxs": "integers?", "layer_types": "strings?"}
# the legacy keys Lfm2Config.__post_init__ pops from its kwargs, each over the field it sets
ALIASES = {"tie_embedding": "tie_word_embeddings", "block_ff_dim": "intermediate_size"}

LAYER_TYPES = {"conv": "conv+mlp", "full_attention": "attention+mlp"}

COMPONENTS = [  # transformers' module names -> tfcalc components (check --hf-config)
    (r"model\.embed_tokens", "embedding/token"),
    # one norm before the block's mixer, attention or conv: compared with the sum of both (hf_model.fused_parts)
    (r"model\.layers\.\d+\.operator_norm", "attention/norm+conv/norm"),
    (r"model\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (r"model\.layers\.\d+\.self_attn\.q_layernorm", "attention/q_norm"),
    (r"model\.layers\.\d+\.self_attn\.k_layernorm", "attention/k_norm"),
    (r"model\.layers\.\d+\.self_attn", "attention/core"),
    (r"model\.layers\.\d+\.self_attn\.out_proj", "attention/out"),
    (r"model\.layers\.\d+\.conv\.in_proj", "conv/in_proj"),
    (r"model\.layers\.\d+\.conv\.conv", "conv/conv"),  # its weight and bias
    # the pure-torch causal_conv1d_fn runs F.conv1d on conv.conv's weight inside Lfm2ShortConv, not through conv.conv:
    # the ShortConv's own FLOPs are the convolution's (B*x and C*y are elementwise, not counted)
    (r"model\.layers\.\d+\.conv", "conv/conv"),
    (r"model\.layers\.\d+\.conv\.out_proj", "conv/out_proj"),
    (r"model\.layers\.\d+\.ffn_norm", "mlp/norm"),
    (r"model\.layers\.\d+\.feed_forward\.w1", "mlp/gate"),
    (r"model\.layers\.\d+\.feed_forward\.w3", "mlp/up"),
    (r"model\.layers\.\d+\.feed_forward\.w2", "mlp/down"),
    (r"model\.embedding_norm", "final_norm"),
    (r"lm_head", "head"),
]


def _layer_types(cfg: dict, L: int, notes: list[str]) -> list[str]:
    """'conv' or 'full_attention' per block, as Lfm2Config sets layer_types."""
    types = cfg.get("layer_types")
    indices = cfg.get("full_attn_idxs")
    if types is not None:
        refuse_if(cfg, "layer_types", len(types) != L, f"expected a list of num_hidden_layers={L} entries "
                  "(transformers refuses any other length)")
        unknown = sorted(set(types) - set(LAYER_TYPES))
        refuse_if(cfg, "layer_types", bool(unknown), f"entries {', '.join(map(show, unknown))}; known: "
                  f"{', '.join(LAYER_TYPES)} (transformers' LFM2 masks and builds only these)")
        if indices is not None:
            notes.append(f"full_attn_idxs={show(indices)} not read: layer_types is given")
        return types
    if indices is None:  # Lfm2Config's default: every block attention
        return ["full_attention"]
    refuse_if(cfg, "num_hidden_layers", L > PATTERN_LIMIT, f"with full_attn_idxs, tfcalc writes the blocks' kinds "
              f"per block, for at most {PATTERN_LIMIT:,} blocks")
    outside = sorted({i for i in indices if not 0 <= i < L})
    if outside:
        notes.append(f"full_attn_idxs entries {', '.join(map(show, outside))} not read: no block has that index "
                     "(transformers ignores them too)")
    attention = set(indices)
    return ["full_attention" if i in attention else "conv" for i in range(L)]


def _mlp_width(cfg: dict, notes: list[str]) -> int:
    """Lfm2MLP's width, with its own expressions (so that floats round as they do there)."""
    n = cfg["intermediate_size"]
    if cfg["block_auto_adjust_ff_dim"] is not True:
        return n
    multiplier, multiple = cfg["block_ffn_dim_multiplier"], cfg["block_multiple_of"]
    refuse_if(cfg, "block_multiple_of", multiple == 0, "transformers divides by it (block_auto_adjust_ff_dim=true)")
    try:
        width = int(2 * n / 3)
        width = int(multiplier * width)
    except (OverflowError, ValueError):  # beyond a float, or a product that is infinite
        raise Unmodelled(f"intermediate_size={show(n)} is not modelled: int(2 * {show(n)} / 3) times "
                         f"block_ffn_dim_multiplier={show(multiplier)} is not a finite number") from None
    width = multiple * ((width + multiple - 1) // multiple)
    notes.append(f"MLP width {width} (block_auto_adjust_ff_dim: int(2 * intermediate_size={n} / 3), times "
                 f"block_ffn_dim_multiplier={multiplier}, rounded up to a multiple of block_multiple_of={multiple})")
    return width


def _hybrid(cfg: dict, notes: list[str], types: list[str], d_ff: int) -> dict[str, Any]:
    """The fields LFM2 and LFM2-MoE share: heads, the conv kind's sizes, the per-block mixers `types` (one entry per
    block, or ["full_attention"] for all of them)."""
    L, D, H, H_kv = (cfg[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                      "num_key_value_heads"))
    attention, conv = "full_attention" in types, "conv" in types
    head_dim = cfg.get("head_dim", D // H)
    refuse_if(cfg, "hidden_size", head_dim == 0, f"fewer channels than num_attention_heads={H}: heads of 0 channels")
    refuse_if(cfg, "head_dim" if "head_dim" in cfg else "hidden_size",
              head_dim % 2 == 1 and ("head_dim" in cfg or attention),
              f"an odd head ({head_dim} channels): transformers' rotary needs an even one (its config refuses an odd "
              "head_dim; an odd hidden_size // num_attention_heads fails in the attention blocks)")
    refuse_if(cfg, "num_key_value_heads", H % H_kv != 0, f"does not divide num_attention_heads={H} "
              "(transformers' attention repeats each key/value head num_attention_heads // num_key_value_heads times)")
    if conv:
        refuse_if(cfg, "conv_L_cache", cfg["conv_L_cache"] < 1, "the conv blocks need a kernel of 1 or more "
                  "positions (transformers' Conv1d fails)")
    fields = {"n_layers": L, "d_model": D, "n_heads": H, "n_kv_heads": H_kv, "d_ff": d_ff,
              "vocab_size": cfg["vocab_size"], "mlp": "gated", "activation": "silu", "norm": "rmsnorm",
              "norm_position": "pre", "qk_norm": "head", "positions": "rotary", "bias": False,
              "tie_embeddings": cfg["tie_word_embeddings"], "context": cfg["max_position_embeddings"]}
    if "head_dim" in cfg or D % H:
        fields["d_head"] = head_dim
    if conv:
        fields["kinds"] = {"conv": {"kernel": cfg["conv_L_cache"], "bias": cfg["conv_bias"]}}
        notes.append(f"{types.count('conv')} of {L} blocks short convolutions (conv_L_cache={cfg['conv_L_cache']}, "
                     f"conv_bias={cfg['conv_bias']})")
    if not attention:
        notes.append("no attention block: transformers' model fails a forward with a cache (generation: "
                     "get_seq_length needs an attention layer); without one it runs")
    if cfg.get("rope_parameters") not in (None, {}):
        notes.append("rope parameters read: they change rotary frequencies, not shapes or counts")
    return fields


def _pattern(blocks: list[str]) -> list[str]:
    """The blocks' kinds as a block_pattern: their shortest cycle when it repeats a whole number of times, else one
    entry per block (LFM2-1.2B's 16 blocks are not 15 cycled once and a bit: they are listed as they are)."""
    cycle = shortest_cycle(blocks)
    return cycle if len(blocks) % len(cycle) == 0 else blocks


def lfm2(cfg: dict, notes: list[str]) -> dict[str, Any]:
    types = _layer_types(cfg, cfg["num_hidden_layers"], notes)
    d_ff = _mlp_width(cfg, notes)
    refuse_if(cfg, "intermediate_size", d_ff < 1, f"its MLP width is {d_ff} (Lfm2MLP's rule; a block_ff_dim given is "
              "read as intermediate_size): tfcalc models an MLP of 1 channel or more")
    fields = _hybrid(cfg, notes, types, d_ff)
    if "conv" in types:
        fields["block_pattern"] = _pattern([LAYER_TYPES[t] for t in types])
    return fields


def lfm2_moe(cfg: dict, notes: list[str]) -> dict[str, Any]:
    """LFM2-MoE: LFM2's blocks with a dense MLP of intermediate_size (as it is: no width rule) in the first
    num_dense_layers blocks and experts in the others: a router D -> num_experts without bias (sigmoid scores; the
    expert_bias that shifts the choice is a buffer, not a parameter), each token through num_experts_per_tok SwiGLU
    experts of moe_intermediate_size, no shared expert. norm_topk_prob, routed_scaling_factor and use_expert_bias
    change weights, not shapes: not read."""
    L = cfg["num_hidden_layers"]
    types = cfg.get("layer_types")
    refuse_if(cfg, "layer_types", types is None, "Lfm2MoeConfig has no rule without it (no full_attn_idxs): "
              "transformers fails to build the blocks")
    _layer_types(cfg, L, notes)  # checked as LFM2's
    dense = cfg["num_dense_layers"]
    fields = _hybrid(cfg, notes, types, cfg["intermediate_size"])
    mixers = [LAYER_TYPES[t].partition("+")[0] for t in types]
    blocks = [f"{m}+{'mlp' if i < dense else 'moe'}" for i, m in enumerate(mixers)]
    if dense < L:
        experts, k = cfg["num_experts"], cfg["num_experts_per_tok"]
        refuse_if(cfg, "num_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers builds "
                  "a router even for 1 expert")
        refuse_if(cfg, "num_experts_per_tok", k > experts, f"more than num_experts={experts} (transformers' top-k "
                  "fails)")
        fields |= {"n_experts": experts, "top_k": k, "d_expert": cfg["moe_intermediate_size"]}
        notes.append(f"{L - max(dense, 0)} of {L} blocks with {experts} experts (top {k}), the first "
                     f"{min(max(dense, 0), L)} with a dense MLP")
    if "conv" in types or dense < L:
        fields["block_pattern"] = _pattern(blocks)
    return fields


def _conv_blocks(pattern: list[str] | None, L: int) -> int:
    """How many of the L blocks, `pattern` cycled over them, have a conv."""
    convs = [("conv" in block.split("+")) for block in pattern or []]
    cycles, rest = divmod(L, len(convs)) if convs else (0, 0)
    return cycles * sum(convs) + sum(convs[:rest])


def padded_short_conv(d: Difference) -> str | None:
    """With a cache (check --hf-config runs one) and fewer tokens s than taps K, transformers' DynamicCache pads the
    conv's input to K positions first: K + K - 1 outputs per channel where a train step's s + K - 1 are counted, so
    2 b D K (K - s) FLOPs more in each conv block."""
    w, blocks = d.workload, _conv_blocks(d.spec.block_pattern, d.spec.n_layers)
    if w is None or not blocks or d.figure != "forward" or d.component not in ("conv/conv", "total"):
        return None
    K, s, b, D = d.spec.sizes("conv").kernel, w.seq_len, w.batch_size, d.spec.d_model
    if s >= K or d.excess != blocks * 2 * b * D * K * (K - s):  # 2 FLOPs per tap, channel and position
        return None
    return (f"seq_len {s} < conv_L_cache {K}: with a cache transformers pads each conv's input to {K} positions and "
            f"convolves {2 * K - 1} per channel, tfcalc a train step's {s + K - 1}: 2 * b * D * K * (K - s) = "
            f"{d.excess // blocks:,} more in each of {blocks} conv blocks")


MOE_DEFAULTS = {"vocab_size": 65536, "hidden_size": 2048, "intermediate_size": 7168, "moe_intermediate_size": 1792,
                "num_hidden_layers": 32, "tie_word_embeddings": True, "rope_parameters": None,
                "max_position_embeddings": 128_000, "num_attention_heads": 32, "num_key_value_heads": 8,
                "conv_bias": False, "conv_L_cache": 3, "num_dense_layers": 2, "num_experts_per_tok": 4,
                "num_experts": 32, "layer_types": None}
# Lfm2MoeConfig declares no head_dim either; it pops tie_embedding, but not block_ff_dim, and has no full_attn_idxs
MOE_TYPES = {k: v for k, v in TYPES.items() if k not in ("block_multiple_of", "block_ffn_dim_multiplier",
                                                         "block_auto_adjust_ff_dim", "full_attn_idxs")} | {
    "moe_intermediate_size": "size", "num_dense_layers": "int", "num_experts_per_tok": "size", "num_experts": "int"}
MOE_COMPONENTS = [
    (r"model\.layers\.\d+\.feed_forward\.gate", "moe/router"),
    (r"model\.layers\.\d+\.feed_forward\.experts", "moe/experts"),
    *COMPONENTS,
]

register(Family("lfm2", DEFAULTS, TYPES, lfm2, COMPONENTS, aliases=ALIASES, known=padded_short_conv),
         Family("lfm2_moe", MOE_DEFAULTS, MOE_TYPES, lfm2_moe, MOE_COMPONENTS,
                aliases={"tie_embedding": "tie_word_embeddings"}, known=padded_short_conv))
