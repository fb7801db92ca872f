"""The LLaMA layout and the decoders that keep its module names: LLaMA, Mistral, Mixtral, Qwen2, Qwen2-MoE, Granite,
Phi-3, Qwen3, Qwen3-MoE, OLMo 2.

Pre-norm RMSNorm, grouped-query attention (q_proj, k_proj, v_proj, o_proj), a gated MLP (gate_proj, up_proj,
down_proj), rotary positions, a final RMSNorm (tfcalc.hf.decoder_fields); each family adds its biases, windows,
experts or norms. Their module-name tables are here (LLAMA_COMPONENTS, OLMO2_COMPONENTS); the families of other modules
that keep these names use them too.
"""

from __future__ import annotations

from ..hf import DECODER_TYPES, PATTERN_LIMIT, decoder_fields, layer_kinds, refuse_if, set_window, show
from .registry import Family, register

# transformers' module names -> tfcalc components (check --hf-config)
DECODER_COMPONENTS = [  # the LLaMA layout and its descendants; the norms around a block differ per family (below)
    (r"model\.embed_tokens", "embedding/token"),
    (r"model\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj|qkv_proj)", "attention/qkv"),
    (r"model\.layers\.\d+\.self_attn\.q_norm", "attention/q_norm"),
    (r"model\.layers\.\d+\.self_attn\.k_norm", "attention/k_norm"),
    (r"model\.layers\.\d+\.self_attn", "attention/core"),
    (r"model\.layers\.\d+\.self_attn\.o_proj", "attention/out"),
    (r"model\.layers\.\d+\.mlp\.gate_proj", "mlp/gate"),
    (r"model\.layers\.\d+\.mlp\.up_proj", "mlp/up"),
    (r"model\.layers\.\d+\.mlp\.gate_up_proj", "mlp/gate+up"),  # Phi-3's fused gate and up
    (r"model\.layers\.\d+\.mlp\.down_proj", "mlp/down"),
    (r"model\.layers\.\d+\.mlp\.gate", "moe/router"),
    (r"model\.layers\.\d+\.mlp\.experts", "moe/experts"),
    (r"model\.layers\.\d+\.mlp\.shared_expert\.(gate_proj|up_proj|down_proj)", "moe/shared_experts"),
    (r"model\.layers\.\d+\.mlp\.shared_expert_gate", "moe/shared_gate"),
    (r"model\.norm", "final_norm"),
    (r"lm_head", "head"),
]
LLAMA_COMPONENTS = [  # pre-norm: one norm before attention, one before the MLP
    (r"model\.layers\.\d+\.input_layernorm", "attention/norm"),
    (r"model\.layers\.\d+\.post_attention_layernorm", "mlp/norm"),
    *DECODER_COMPONENTS,
]
OLMO2_COMPONENTS = [  # norms after attention and after the MLP only
    (r"model\.layers\.\d+\.post_attention_layernorm", "attention/post_norm"),
    (r"model\.layers\.\d+\.post_feedforward_layernorm", "mlp/post_norm"),
    *DECODER_COMPONENTS,
]

LLAMA_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                      tie_word_embeddings=False, attention_bias=False, mlp_bias=False, head_dim=None)
LLAMA_TYPES = DECODER_TYPES | dict(attention_bias="bool", mlp_bias="bool")
MISTRAL_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                        max_position_embeddings=4096 * 32, tie_word_embeddings=False, sliding_window=4096)
MISTRAL_TYPES = DECODER_TYPES | dict(sliding_window="int?")
QWEN2_DEFAULTS = dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=32768,
                      tie_word_embeddings=False, use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                      layer_types=None)
QWEN2_TYPES = DECODER_TYPES | dict(use_sliding_window="bool", sliding_window="int?", max_window_layers="int",
                                   layer_types="strings?")


def llama(cfg: dict, notes: list[str]) -> dict:
    """LLaMA (and Granite, whose embedding, residual and attention multipliers and logits_scaling scale activations:
    no parameters, no matmul, not read)."""
    fields = decoder_fields(cfg, notes)
    fields |= dict(bias=cfg["attention_bias"], mlp_bias=cfg["mlp_bias"])
    return fields


def mistral(cfg: dict, notes: list[str]) -> dict:
    """Mistral (and Phi-3, Phi-4: their fused qkv_proj and gate_up_proj hold the same weights and do the same
    multiply-adds as separate q, k, v and gate, up projections; partial_rotary_factor changes which channels rotate,
    not shapes): the llama layout without biases, a sliding_window in every block."""
    fields = decoder_fields(cfg, notes)
    set_window(cfg, fields, notes)
    return fields


def mixtral(cfg: dict, notes: list[str]) -> dict:
    experts = cfg["num_local_experts"]
    # transformers' MixtralSparseMoeBlock builds a router (num_local_experts x hidden_size) and stacked expert weights
    # for any number of experts; ModelSpec's n_experts=1 is a dense MLP with no router
    refuse_if(cfg, "num_local_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers "
              "builds a router even for 1 expert, which a dense MLP has not")
    fields = mistral(cfg, notes)
    fields |= dict(n_experts=experts, top_k=cfg["num_experts_per_tok"])
    return fields


def qwen_window(cfg: dict, fields: dict, notes: list[str], alternating: bool) -> None:
    """Blocks with sliding attention, by `layer_types` when given, else by transformers' rule for the type.

    transformers keeps sliding_window only with use_sliding_window=true (Qwen2 sets it to None, Qwen2-MoE to 0)."""
    L = fields["n_layers"]
    window_on = cfg["use_sliding_window"] is True and cfg.get("sliding_window") is not None
    types = cfg.get("layer_types")
    if types is not None:
        kinds = layer_kinds(cfg, L)
        refuse_if(cfg, "layer_types", "sliding_attention" in types and not window_on,
                  f"sliding_attention blocks need use_sliding_window=true and a sliding_window (got "
                  f"use_sliding_window={show(cfg['use_sliding_window'])}, sliding_window="
                  f"{show(cfg.get('sliding_window'))}): transformers then has no window for them")
        return set_window(cfg, fields, notes, kinds)
    if not window_on:
        return None
    limit = cfg["max_window_layers"]
    if alternating:  # Qwen2-MoE: every other block below max_window_layers
        if limit >= L:  # block i local when i is even: a cycle of two
            return set_window(cfg, fields, notes, ["local", "global"] if L > 1 else ["local"])
        refuse_if(cfg, "num_hidden_layers", L > PATTERN_LIMIT, f"with use_sliding_window=true and max_window_layers="
                  f"{limit}, tfcalc writes the windowed blocks per block, for at most {PATTERN_LIMIT:,} blocks")
        return set_window(cfg, fields, notes, ["local" if (i + 1) % 2 and i < limit else "global" for i in range(L)])
    return set_window(cfg, fields, notes, last=min(L, max(0, L - limit)))  # Qwen2: the blocks from max_window_layers on


def qwen2(cfg: dict, notes: list[str]) -> dict:
    fields = decoder_fields(cfg, notes) | dict(qkv_bias=True)
    qwen_window(cfg, fields, notes, alternating=False)
    return fields


def qwen2_moe(cfg: dict, notes: list[str]) -> dict:
    refuse_if(cfg, "mlp_only_layers", cfg["mlp_only_layers"] not in (None, []),
              "a list of dense blocks; tfcalc models the first k (first_dense_layers) or every n-th "
              "(decoder_sparse_step)")
    experts = cfg["num_experts"]
    refuse_if(cfg, "num_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers builds "
              "a router even for 1 expert, and dense blocks for 0")
    fields = decoder_fields(cfg, notes)
    shared = cfg["shared_expert_intermediate_size"]
    refuse_if(cfg, "shared_expert_intermediate_size", shared == 0,
              "transformers keeps the shared expert's gate even with no shared expert width")
    fields |= dict(qkv_bias=cfg["qkv_bias"], n_experts=experts,
                   top_k=cfg["num_experts_per_tok"], d_expert=cfg["moe_intermediate_size"])
    fields |= dict(n_shared_experts=1, d_shared_expert=shared, shared_expert_gate=True)
    step = cfg["decoder_sparse_step"]
    if step != 1:
        fields["moe_every"] = step
    qwen_window(cfg, fields, notes, alternating=True)
    return fields


def qwen3(cfg: dict, notes: list[str]) -> dict:
    """Qwen3: the llama layout with an RMSNorm on each query and key head (weight [head_dim] each) before rotary,
    attention_bias on q, k, v and o, an explicit head_dim, Qwen2's sliding-window rule."""
    fields = decoder_fields(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False, qk_norm="head")
    qwen_window(cfg, fields, notes, alternating=False)
    return fields


def qwen3_moe(cfg: dict, notes: list[str]) -> dict:
    """Qwen3-MoE: Qwen3's attention, routed experts (no shared expert), dense blocks of intermediate_size where
    decoder_sparse_step or mlp_only_layers say. norm_topk_prob renormalises the routing weights: no parameters."""
    experts = cfg["num_experts"]
    refuse_if(cfg, "num_experts", experts < 2, "tfcalc models a mixture of 2 or more experts; transformers builds "
              "a router even for 1 expert, and dense blocks for 0")
    fields = decoder_fields(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False, qk_norm="head",
                                               n_experts=experts, top_k=cfg["num_experts_per_tok"],
                                               d_expert=cfg["moe_intermediate_size"])
    dense = cfg["mlp_only_layers"] or []
    refuse_if(cfg, "mlp_only_layers", dense != list(range(len(dense))) or len(dense) > fields["n_layers"],
              "tfcalc models dense blocks as the first k (mlp_only_layers [0, 1, .., k-1]) or every n-th "
              "(decoder_sparse_step)")
    if dense:
        fields["first_dense_layers"] = len(dense)
    if cfg["decoder_sparse_step"] != 1:
        fields["moe_every"] = cfg["decoder_sparse_step"]
    if cfg["use_sliding_window"] is True:  # transformers keeps sliding_window only then, for every block
        set_window(cfg, fields, notes)
    return fields


def olmo2(cfg: dict, notes: list[str]) -> dict:
    """OLMo 2: the llama layout with its norms on each sublayer's output, before the residual add
    (post_attention_layernorm, post_feedforward_layernorm; no input norms), and an RMSNorm over all of q
    ([heads * head_dim]) and all of k ([kv_heads * head_dim]) before rotary."""
    return decoder_fields(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False, qk_norm="full",
                                             norm_position="output")


register(
    Family("llama", LLAMA_DEFAULTS, LLAMA_TYPES, llama, LLAMA_COMPONENTS),
    # Granite: GraniteConfig declares no head_dim (GraniteAttention reads one when a config gives it)
    Family("granite", {k: v for k, v in LLAMA_DEFAULTS.items() if k != "head_dim"}, LLAMA_TYPES, llama,
           LLAMA_COMPONENTS),
    Family("mistral", MISTRAL_DEFAULTS, MISTRAL_TYPES, mistral, LLAMA_COMPONENTS),
    Family("mixtral", like="mistral", defaults=dict(sliding_window=None, num_experts_per_tok=2, num_local_experts=8),
           types=dict(num_experts_per_tok="size", num_local_experts="int"), mapper=mixtral,
           aliases=dict(num_experts="num_local_experts")),
    Family("phi3", dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
                        max_position_embeddings=4096, tie_word_embeddings=False, sliding_window=None),
           MISTRAL_TYPES, mistral, LLAMA_COMPONENTS),
    Family("qwen2", QWEN2_DEFAULTS, QWEN2_TYPES, qwen2, LLAMA_COMPONENTS),
    Family("qwen2_moe", like="qwen2", mapper=qwen2_moe,
           defaults=dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16,
                         num_key_value_heads=16, decoder_sparse_step=1, moe_intermediate_size=1408,
                         shared_expert_intermediate_size=5632, num_experts_per_tok=4, num_experts=60,
                         mlp_only_layers=None, qkv_bias=True),
           types=dict(decoder_sparse_step="size", moe_intermediate_size="size", shared_expert_intermediate_size="count",
                      num_experts_per_tok="size", num_experts="int", mlp_only_layers="integers?", qkv_bias="bool")),
    Family("qwen3", like="qwen2", mapper=qwen3, defaults=dict(head_dim=128, attention_bias=False),
           types=dict(head_dim="size", attention_bias="bool")),
    # Qwen3MoeConfig and Olmo2Config declare no head_dim, but their attention reads one when a config gives it.
    # Qwen3MoeConfig declares num_experts and its attribute_map sets num_local_experts from it (what save_pretrained
    # writes): num_local_experts, given, is set after it and wins, so it is the alias here
    Family("qwen3_moe", mapper=qwen3_moe, components=LLAMA_COMPONENTS, aliases=dict(num_local_experts="num_experts"),
           defaults=dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                         num_attention_heads=32, num_key_value_heads=4, hidden_act="silu",
                         max_position_embeddings=32768, tie_word_embeddings=False, attention_bias=False,
                         use_sliding_window=False, sliding_window=4096, decoder_sparse_step=1,
                         moe_intermediate_size=768, num_experts_per_tok=8, num_experts=128, norm_topk_prob=False,
                         mlp_only_layers=None),
           types=DECODER_TYPES | dict(num_key_value_heads="size", attention_bias="bool", use_sliding_window="bool",
                                      sliding_window="int?", decoder_sparse_step="size", moe_intermediate_size="size",
                                      num_experts_per_tok="size", num_experts="int", norm_topk_prob="bool",
                                      mlp_only_layers="integers?")),
    Family("olmo2", mapper=olmo2, components=OLMO2_COMPONENTS,
           defaults=dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
                         max_position_embeddings=2048, tie_word_embeddings=False, attention_bias=False),
           types=DECODER_TYPES | dict(attention_bias="bool")),
)
