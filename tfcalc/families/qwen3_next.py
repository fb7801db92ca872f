"""Qwen3-Next (model_type qwen3_next): transformers' Qwen3NextForCausalLM.

A hybrid of gated DeltaNet blocks (tfcalc's `gated_deltanet` kind) and attention blocks, by layer_types
("linear_attention" or "full_attention"; when null, every full_attention_interval-th block is attention, the others
linear: Qwen3NextConfig's rule, interval 4 by default). Every block is pre-norm (input_layernorm before its mixer,
post_attention_layernorm before its MLP), with a final norm; the norms are Qwen3NextRMSNorm (x * (1 + weight): the
same parameters as an RMSNorm).
  * gated DeltaNet (Qwen3NextGatedDeltaNet): in_proj_qkvz D -> 2 Hk dk + 2 Hv dv and in_proj_ba D -> 2 Hv without
    bias, a depthwise causal conv1d over q, k and v (linear_conv_kernel_dim taps, no bias), A_log and dt_bias [Hv],
    the gated delta rule, a gated RMSNorm over each value head (weight [dv]) and out_proj Hv dv -> D;
  * attention (Qwen3NextAttention): q_proj doubled (queries and a sigmoid gate over the attention output: tfcalc's
    attention_gate), k_proj, v_proj (grouped-query), o_proj, with attention_bias on all four; an RMSNorm on each
    query and key head (weight [head_dim]) before rotary; rotary on int(head_dim * partial_rotary_factor) channels;
  * the MLP: routed experts (a router D -> num_experts without bias, num_experts_per_tok SwiGLU experts of
    moe_intermediate_size) beside one shared SwiGLU expert of shared_expert_intermediate_size whose output a sigmoid
    gate (D -> 1) scales, where layer i is not in mlp_only_layers, num_experts > 0 and (i + 1) % decoder_sparse_step
    == 0; else a dense SwiGLU MLP of intermediate_size.
norm_topk_prob, router_aux_loss_coef and the rope parameters change weights or frequencies, not shapes: not read.
"""

from __future__ import annotations

from typing import Any

from ..hf import (
    DECODER_TYPES,
    PATTERN_LIMIT,
    decoder_fields,
    refuse_if,
    shortest_cycle,
    show,
)
from .gpt_neox import partial_factor, partial_rotary
from .qwen3_vl import QWEN3_5_MOE_WHOLE, QWEN3_5_WHOLE
from .registry import Difference, Family, register

# Qwen3NextConfig's class attributes for the fields read here (full_attention_interval and partial_rotary_factor are
# kwargs its __post_init__ reads: 4 and 0.25 when absent)
DEFAULTS = {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 48,
            "num_attention_heads": 16, "num_key_value_heads": 2, "hidden_act": "silu",
            "max_position_embeddings": 32768, "tie_word_embeddings": False, "rope_parameters": None,
            "attention_bias": False, "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
            "decoder_sparse_step": 1, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
            "num_experts_per_tok": 10, "num_experts": 512, "mlp_only_layers": None, "layer_types": None}
FULL_ATTENTION_INTERVAL = 4
PARTIAL_ROTARY_FACTOR = 0.25
TYPES = DECODER_TYPES | {
    "num_key_value_heads": "size", "head_dim": "size", "attention_bias": "bool", "linear_conv_kernel_dim": "size",
    "linear_key_head_dim": "size", "linear_value_head_dim": "size", "linear_num_key_heads": "size",
    "linear_num_value_heads": "size", "decoder_sparse_step": "size", "moe_intermediate_size": "size",
    "shared_expert_intermediate_size": "count", "num_experts_per_tok": "size", "num_experts": "count",
    "mlp_only_layers": "integers?", "layer_types": "strings?", "full_attention_interval": "int",
    "partial_rotary_factor": "number"}

LAYER_TYPES = {"linear_attention": "gated_deltanet", "full_attention": "attention"}

COMPONENTS = [  # transformers' module names -> tfcalc components (check --hf-config)
    (r"model\.embed_tokens", "embedding/token"),
    # one norm before the block's mixer, attention or gated DeltaNet: compared with the sum of both (hf_model.fused_parts)
    (r"model\.layers\.\d+\.input_layernorm", "attention/norm+gated_deltanet/norm"),
    (r"model\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (r"model\.layers\.\d+\.self_attn\.q_norm", "attention/q_norm"),
    (r"model\.layers\.\d+\.self_attn\.k_norm", "attention/k_norm"),
    (r"model\.layers\.\d+\.self_attn", "attention/core"),
    (r"model\.layers\.\d+\.self_attn\.o_proj", "attention/out"),
    (r"model\.layers\.\d+\.linear_attn\.in_proj_qkvz", "gated_deltanet/in_proj_qkvz"),
    (r"model\.layers\.\d+\.linear_attn\.in_proj_ba", "gated_deltanet/in_proj_ba"),
    (r"model\.layers\.\d+\.linear_attn\.out_proj", "gated_deltanet/out_proj"),
    (r"model\.layers\.\d+\.linear_attn\.norm", "gated_deltanet/out_norm"),
    # the pure-torch causal_conv1d_fn runs F.conv1d on conv1d's weight inside the GatedDeltaNet, beside the delta rule
    # (and A_log, dt_bias are its own parameters): the module's own figures are the conv's and the delta rule's
    (r"model\.layers\.\d+\.linear_attn\.conv1d", "gated_deltanet/conv+delta_rule"),
    (r"model\.layers\.\d+\.linear_attn", "gated_deltanet/conv+delta_rule"),
    (r"model\.layers\.\d+\.post_attention_layernorm", "mlp/norm"),
    (r"model\.layers\.\d+\.mlp\.gate_proj", "mlp/gate"),
    (r"model\.layers\.\d+\.mlp\.up_proj", "mlp/up"),
    (r"model\.layers\.\d+\.mlp\.down_proj", "mlp/down"),
    (r"model\.layers\.\d+\.mlp\.gate", "moe/router"),
    (r"model\.layers\.\d+\.mlp\.experts", "moe/experts"),
    (r"model\.layers\.\d+\.mlp\.shared_expert\.(gate_proj|up_proj|down_proj)", "moe/shared_experts"),
    (r"model\.layers\.\d+\.mlp\.shared_expert_gate", "moe/shared_gate"),
    (r"model\.norm", "final_norm"),
    (r"lm_head", "head"),
]


def mixers(cfg: dict, L: int) -> list[str]:
    """Each block's mixer kind, as Qwen3NextConfig sets layer_types: one entry per block, or, from the
    full_attention_interval rule past PATTERN_LIMIT blocks, one interval of it (the rule cycles it)."""
    types = cfg.get("layer_types")
    if types is None:
        interval = cfg.get("full_attention_interval", FULL_ATTENTION_INTERVAL)
        refuse_if(cfg, "full_attention_interval", interval < 1, "transformers takes (i + 1) % "
                  "full_attention_interval for each block: a positive integer")
        return [LAYER_TYPES["full_attention" if (i + 1) % interval == 0 else "linear_attention"]
                for i in range(interval if L > PATTERN_LIMIT else L)]
    refuse_if(cfg, "layer_types", len(types) != L, f"expected a list of num_hidden_layers={L} entries")
    unknown = sorted(set(types) - set(LAYER_TYPES))
    refuse_if(cfg, "layer_types", bool(unknown), f"entries {', '.join(map(show, unknown))}; known: "
              f"{', '.join(LAYER_TYPES)} (transformers builds no token mixer for any other)")
    return [LAYER_TYPES[t] for t in types]


def _moe_blocks(cfg: dict, L: int) -> bool | list[bool]:
    """Whether each block has experts (Qwen3NextDecoderLayer's rule): True when every block has, else one entry per
    block."""
    dense = set(cfg["mlp_only_layers"] or [])
    step, experts = cfg["decoder_sparse_step"], cfg["num_experts"]
    if experts > 0 and step == 1 and not dense:
        return True
    refuse_if(cfg, "num_hidden_layers", L > PATTERN_LIMIT, f"with dense blocks (mlp_only_layers, decoder_sparse_step "
              f"or num_experts=0), tfcalc writes the blocks' kinds per block, for at most {PATTERN_LIMIT:,} blocks")
    return [i not in dense and experts > 0 and (i + 1) % step == 0 for i in range(L)]


def _experts(cfg: dict) -> dict[str, Any]:
    """The routed experts (a router over num_experts, num_experts_per_tok SwiGLU experts of moe_intermediate_size) and
    the shared expert of shared_expert_intermediate_size with its sigmoid gate."""
    experts, k, shared = cfg["num_experts"], cfg["num_experts_per_tok"], cfg["shared_expert_intermediate_size"]
    refuse_if(cfg, "num_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers builds a "
              "router even for 1 expert")
    refuse_if(cfg, "num_experts_per_tok", k > experts, f"more than num_experts={experts} (transformers' top-k fails)")
    refuse_if(cfg, "shared_expert_intermediate_size", shared == 0,
              "transformers keeps the shared expert's gate even with no shared expert width")
    return {"n_experts": experts, "top_k": k, "d_expert": cfg["moe_intermediate_size"], "n_shared_experts": 1,
            "d_shared_expert": shared, "shared_expert_gate": True}


def hybrid(cfg: dict, notes: list[str], moe: bool | list[bool], d_ff: int, split: bool = False) -> dict[str, Any]:
    """The fields Qwen3-Next, Qwen3.5 and Qwen3.5-MoE share: the attention blocks (gated, q/k norms, partial rotary),
    the gated DeltaNet blocks' sizes, and the blocks' kinds: experts in every block (`moe` True), in none (False) or
    in those a list marks. `split`: the DeltaNet's input projections as Qwen3.5's four linears (in_proj_qkv,
    in_proj_z, in_proj_b, in_proj_a), what LoRA adapts one by one."""
    L, H, H_kv = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    refuse_if(cfg, "num_key_value_heads", H % H_kv != 0, f"does not divide num_attention_heads={H} (transformers' "
              "attention repeats each key/value head num_attention_heads // num_key_value_heads times)")
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    refuse_if(cfg, "linear_num_key_heads", hv % hk != 0, f"does not divide linear_num_value_heads={hv} (each "
              "query/key head serves linear_num_value_heads // linear_num_key_heads value heads)")
    fields = decoder_fields({**cfg, "intermediate_size": d_ff}, notes) | {
        "bias": cfg["attention_bias"], "mlp_bias": False, "qk_norm": "head", "attention_gate": True}
    head_dim = cfg["head_dim"]
    fields["d_head"] = head_dim
    where, factor = partial_factor(cfg, "partial_rotary_factor", PARTIAL_ROTARY_FACTOR)
    partial_rotary(cfg, fields, notes, head_dim, factor, where, head_field="head_dim")

    kinds = mixers(cfg, L)
    if moe is True or (moe is not False and any(moe)):
        fields |= _experts(cfg)
    if isinstance(moe, bool):
        blocks = [f"{m}+{'moe' if moe else 'mlp'}" for m in kinds]
    else:
        blocks = [f"{kinds[i]}+{'moe' if moe[i] else 'mlp'}" for i in range(L)]
    cycle = shortest_cycle(blocks)
    # one interval of the rule (past PATTERN_LIMIT blocks) is cycled as it is
    fields["block_pattern"] = cycle if len(blocks) == L and len(blocks) % len(cycle) == 0 else blocks
    if "gated_deltanet" in kinds:
        fields["kinds"] = {"gated_deltanet": {
            "key_heads": hk, "value_heads": hv, "key_head_dim": cfg["linear_key_head_dim"],
            "value_head_dim": cfg["linear_value_head_dim"], "conv_kernel": cfg["linear_conv_kernel_dim"],
            **({"split_projections": True} if split else {})}}
        cycles, rest = divmod(L, len(kinds))
        linear = cycles * kinds.count("gated_deltanet") + kinds[:rest].count("gated_deltanet")
        notes.append(f"{linear} of {L} blocks gated DeltaNet ({hk} query/key heads of {cfg['linear_key_head_dim']}, "
                     f"{hv} value heads of {cfg['linear_value_head_dim']}, a conv of {cfg['linear_conv_kernel_dim']} "
                     "taps), the others attention with an output gate")
    if "attention" not in kinds:
        notes.append("no attention block: transformers' model fails a forward with a cache (get_seq_length needs an "
                     "attention layer); without one it runs")
    return fields


def qwen3_next(cfg: dict, notes: list[str]) -> dict[str, Any]:
    return hybrid(cfg, notes, _moe_blocks(cfg, cfg["num_hidden_layers"]), cfg["intermediate_size"])


def padded_conv(d: Difference) -> str | None:
    """With a cache (check --hf-config runs one) and fewer tokens s than taps K, transformers pads the conv's input to
    K positions first (update_conv_state): K + K - 1 outputs per channel where tfcalc counts a train step's
    s + K - 1, so 2 b C K (K - s) FLOPs more in each gated DeltaNet block (C = 2 Hk dk + Hv dv channels)."""
    w, pattern = d.workload, d.spec.block_pattern or []
    if w is None or d.figure != "forward" or d.component not in ("gated_deltanet/conv+delta_rule", "total"):
        return None
    linear = [block.startswith("gated_deltanet+") for block in pattern]
    cycles, rest = divmod(d.spec.n_layers, len(linear)) if linear else (0, 0)
    blocks = cycles * sum(linear) + sum(linear[:rest])
    if not blocks:
        return None
    z = d.spec.sizes("gated_deltanet")
    K, s, b = z.conv_kernel, w.seq_len, w.batch_size
    channels = 2 * z.key_heads * z.key_head_dim + z.value_heads * z.value_head_dim
    if s >= K or d.excess != blocks * 2 * b * channels * K * (K - s):
        return None
    return (f"seq_len {s} < linear_conv_kernel_dim {K}: with a cache transformers pads each conv's input to {K} "
            f"positions and convolves {2 * K - 1} per channel, tfcalc a train step's {s + K - 1}: "
            f"2 * b * channels * K * (K - s) = {d.excess // blocks:,} more in each of {blocks} gated DeltaNet blocks")


# ---- Qwen3.5 (qwen3_5_text, Qwen3_5ForCausalLM) and Qwen3.5-MoE (qwen3_5_moe_text, Qwen3_5MoeForCausalLM) ---------
# Qwen3-Next's blocks, the gated DeltaNet's projections split (in_proj_qkv and in_proj_z, in_proj_b and in_proj_a: the
# same weights and multiply-adds as in_proj_qkvz and in_proj_ba). Qwen3.5: a dense SwiGLU MLP of intermediate_size in
# every block. Qwen3.5-MoE: experts with a shared expert in every block (no intermediate_size, no dense block). The
# multimodal configs (qwen3_5, qwen3_5_moe) hold them in text_config; the vision tower is read by qwen3_vl.py. The
# multi-token-prediction layers (mtp_num_hidden_layers) are not part of transformers' model: not counted.
QWEN3_5_DEFAULTS = {"vocab_size": 248320, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
                    "num_attention_heads": 16, "num_key_value_heads": 4, "hidden_act": "silu",
                    "max_position_embeddings": 32768, "tie_word_embeddings": False, "rope_parameters": None,
                    "attention_bias": False, "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                    "layer_types": None}
QWEN3_5_TYPES = {k: v for k, v in TYPES.items() if k not in (
    "decoder_sparse_step", "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts_per_tok",
    "num_experts", "mlp_only_layers")}
QWEN3_5_MOE_DEFAULTS = {k: v for k, v in QWEN3_5_DEFAULTS.items() if k != "intermediate_size"} | {
    "hidden_size": 2048, "num_hidden_layers": 40, "num_key_value_heads": 2, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "num_experts_per_tok": 8, "num_experts": 256}
QWEN3_5_MOE_TYPES = {k: v for k, v in TYPES.items() if k not in ("intermediate_size", "decoder_sparse_step",
                                                                  "mlp_only_layers")}
_SPLIT_PROJECTIONS = [
    (r"model\.layers\.\d+\.linear_attn\.(in_proj_qkv|in_proj_z)", "gated_deltanet/in_proj_qkvz"),
    (r"model\.layers\.\d+\.linear_attn\.(in_proj_b|in_proj_a)", "gated_deltanet/in_proj_ba"),
]
QWEN3_5_COMPONENTS = [rule for rule in COMPONENTS if "in_proj" not in rule[0]] + _SPLIT_PROJECTIONS


def qwen3_5(cfg: dict, notes: list[str]) -> dict[str, Any]:
    return hybrid(cfg, notes, False, cfg["intermediate_size"], split=True)


def qwen3_5_moe(cfg: dict, notes: list[str]) -> dict[str, Any]:
    # no dense MLP: d_ff is the experts' width, as for gpt-oss
    return hybrid(cfg, notes, True, cfg["moe_intermediate_size"], split=True)


register(Family("qwen3_next", DEFAULTS, TYPES, qwen3_next, COMPONENTS, known=padded_conv),
         Family("qwen3_5_text", QWEN3_5_DEFAULTS, QWEN3_5_TYPES, qwen3_5, QWEN3_5_COMPONENTS, known=padded_conv),
         Family("qwen3_5_moe_text", QWEN3_5_MOE_DEFAULTS, QWEN3_5_MOE_TYPES, qwen3_5_moe, QWEN3_5_COMPONENTS,
                known=padded_conv),
         # read whole: the vision tower (its merger: tfcalc/families/qwen3_vl.py)
         Family("qwen3_5", nested=("qwen3_5_text", "text_config"), **QWEN3_5_WHOLE),
         Family("qwen3_5_moe", nested=("qwen3_5_moe_text", "text_config"), **QWEN3_5_MOE_WHOLE))
