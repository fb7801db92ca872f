"""gpt-oss (OpenAI gpt-oss-20b, gpt-oss-120b): transformers' GptOssForCausalLM.

Every block: pre-norm RMSNorm, grouped-query attention with biases on q, k, v and o (attention_bias), a learned
sink logit per query head in the softmax (`attention_sinks`), sliding (sliding_window) or full attention by
layer_types (default: alternating, sliding first), then a mixture of num_local_experts experts: a router linear with
a bias (`router_bias`), each expert a fused gate_up_proj [D, 2F] with a bias [2F] and a down_proj [F, D] with a bias
[D] (`mlp_bias`), F = intermediate_size. No dense block, no shared expert; an untied head by default.

Not read, because they change no shape and no matmul: hidden_act (the experts run their own clamped SwiGLU,
gate * sigmoid(swiglu_alpha * gate) * (up + 1) with clamps at swiglu_limit: elementwise, counted as the gated silu,
the spec activation of the closest per-element cost and saved tensors), swiglu_alpha, swiglu_limit, rms_norm_eps,
attention_dropout, router_aux_loss_coef, output_router_logits, initializer_range, the token ids, use_cache. The rope
parameters (GptOssConfig's default: yarn, factor 32 over 4096 positions) change rotary frequencies, not shapes.
"""

from __future__ import annotations

from ..hf import layer_kinds, refuse_if, set_window, shortest_cycle
from .registry import Family, register

MODEL_TYPE = "gpt_oss"

# GptOssConfig's defaults (transformers 5) for the fields read here; rope_parameters None: __post_init__ sets yarn
DEFAULTS = dict(num_hidden_layers=36, num_local_experts=128, vocab_size=201088, hidden_size=2880,
                intermediate_size=2880, head_dim=64, num_attention_heads=64, num_key_value_heads=8, sliding_window=128,
                tie_word_embeddings=False, max_position_embeddings=131072, rope_parameters=None,
                num_experts_per_tok=4, layer_types=None, attention_bias=True)
# The JSON kinds GptOssConfig declares (strict: head_dim and num_key_value_heads are int, not null); num_experts is
# its attribute_map's name for num_local_experts; rope_scaling is the older configs' name for the rope parameters
TYPES = dict(num_hidden_layers="size", num_local_experts="int", vocab_size="size", hidden_size="size",
             intermediate_size="size", head_dim="size", num_attention_heads="size", num_key_value_heads="size",
             sliding_window="int?", tie_word_embeddings="bool", max_position_embeddings="size",
             rope_parameters="object?", rope_scaling="object?", num_experts_per_tok="size", layer_types="strings?",
             attention_bias="bool", num_experts="int")
ALIASES = {"num_experts": "num_local_experts"}

# transformers' module names -> tfcalc components (check --hf-config). A parameter a rule names itself is counted
# under that rule (self_attn.sinks); the attention module's own FLOPs are its core (q k^T and p v).
COMPONENTS = [
    (r"model\.embed_tokens", "embedding/token"),
    (r"model\.layers\.\d+\.input_layernorm", "attention/norm"),
    (r"model\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (r"model\.layers\.\d+\.self_attn\.sinks", "attention/sinks"),
    (r"model\.layers\.\d+\.self_attn", "attention/core"),
    (r"model\.layers\.\d+\.self_attn\.o_proj", "attention/out"),
    (r"model\.layers\.\d+\.post_attention_layernorm", "mlp/norm"),
    (r"model\.layers\.\d+\.mlp\.router", "moe/router"),
    (r"model\.layers\.\d+\.mlp\.experts", "moe/experts"),
    (r"model\.norm", "final_norm"),
    (r"lm_head", "head"),
]


def gpt_oss(cfg: dict, notes: list[str]) -> dict:
    """GptOssConfig's fields -> ModelSpec fields; what transformers would build differently is refused by name."""
    L, experts, k = cfg["num_hidden_layers"], cfg["num_local_experts"], cfg["num_experts_per_tok"]
    refuse_if(cfg, "num_local_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers "
              "builds a router even for 1 expert, which a dense MLP has not")
    refuse_if(cfg, "num_experts_per_tok", k > experts,
              f"more than num_local_experts={experts}: transformers' top-k of the router's logits fails")
    types = cfg["layer_types"]
    if types is None:  # GptOssConfig.__post_init__: block i sliding when i is even (block 0 always is)
        pattern = ["local", "global"]
    else:
        pattern = shortest_cycle(layer_kinds(cfg, L))
    window = cfg["sliding_window"]
    refuse_if(cfg, "sliding_window", "local" in pattern and (window is None or window < 1),
              "sliding_attention blocks need a window of 1 or more tokens (transformers' cache fails without one)")
    fields = dict(n_layers=L, d_model=cfg["hidden_size"], n_heads=cfg["num_attention_heads"],
                  n_kv_heads=cfg["num_key_value_heads"], d_head=cfg["head_dim"], d_ff=cfg["intermediate_size"],
                  vocab_size=cfg["vocab_size"], mlp="gated", activation="silu", norm="rmsnorm", positions="rotary",
                  bias=cfg["attention_bias"], mlp_bias=True, attention_sinks=True, n_experts=experts, top_k=k,
                  router_bias=True, tie_embeddings=cfg["tie_word_embeddings"],  # d_expert: d_ff, every block MoE
                  context=cfg["max_position_embeddings"])
    set_window(cfg, fields, notes, pattern)
    notes.append("experts: gpt-oss's clamped SwiGLU (gate * sigmoid(1.702 gate) * (up + 1)) counted as the gated "
                 "silu (elementwise: no parameters, no matmul)")
    rope = [key for key in ("rope_parameters", "rope_scaling") if cfg.get(key) not in (None, {})]
    notes.append(f"{' and '.join(rope) or 'rope_parameters (default: yarn)'} read: rotary frequencies, not shapes "
                 "or counts")
    return fields


register(Family(MODEL_TYPE, DEFAULTS, TYPES, gpt_oss, COMPONENTS, aliases=ALIASES))
