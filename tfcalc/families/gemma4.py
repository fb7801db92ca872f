"""Gemma 4's language model (model_type gemma4_text; the multimodal gemma4 reads its text_config, tfcalc.hf.NESTED).

Gemma 3's block (sandwich RMSNorms, an RMSNorm on each query and key head, GeGLU by hidden_activation, local and
global blocks) with a value norm (an RMSNorm without weight on each value head: no parameters, elementwise),
attention scaling 1.0 and a `layer_scalar` buffer (no parameters, elementwise). By default the last block is global
(transformers forces layer_types[-1] to full_attention).

Gemma 4 also has features ModelSpec does not model; a config that uses one is refused by that field and value:
  * global_head_dim (default 512) != head_dim: global blocks with a head width of their own;
  * attention_k_eq_v=true: global blocks without v_proj (values are the keys), with num_global_key_value_heads;
  * hidden_size_per_layer_input > 0 (default 256): per-layer embeddings (PLE);
  * num_kv_shared_layers > 0: the last blocks reuse an earlier block's keys and values (no k/v projections), and
    with use_double_wide_mlp twice the MLP width;
  * enable_moe_block=true: a routed MoE beside the dense MLP in every block;
  * a non-empty per_layer_config (per-block overrides) and use_bidirectional_attention='all'.
Every published Gemma 4 config (E2B, E4B, 26B-A4B, 31B; recalled, none is stored here) has global_head_dim=512
with head_dim=256, and more of the above, so none is read today.
"""

from __future__ import annotations

from ..hf import (_DECODER_TYPES, GEMMA2_COMPONENTS, PATTERN_LIMIT, _activation, _decoder, _refuse_if, _window,
                  layer_kinds, register, shortest_cycle)

# Gemma4TextConfig declares use_bidirectional_attention as Literal["all", "vision"] | None: the kind "all|vision?"

DEFAULTS = dict(vocab_size=262_144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30,
                num_attention_heads=8, num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh",
                max_position_embeddings=131_072, tie_word_embeddings=True, attention_bias=False, sliding_window=512,
                layer_types=None, final_logit_softcapping=None, use_bidirectional_attention=None,
                hidden_size_per_layer_input=256, attention_k_eq_v=False, num_kv_shared_layers=0,
                enable_moe_block=False, use_double_wide_mlp=False, rope_parameters=None)
# global_head_dim and num_global_key_value_heads are not declared by Gemma4TextConfig: its __post_init__ pops them
# from its kwargs (global_head_dim default 512) into per_layer_config, which a saved config carries instead
TYPES = _DECODER_TYPES | dict(num_key_value_heads="size", head_dim="size", hidden_activation="str",
                              attention_bias="bool", sliding_window="int", layer_types="strings?",
                              final_logit_softcapping="float?", use_bidirectional_attention="all|vision?",
                              hidden_size_per_layer_input="count", attention_k_eq_v="bool",
                              num_kv_shared_layers="count", enable_moe_block="bool", use_double_wide_mlp="bool",
                              global_head_dim="size", num_global_key_value_heads="size?",
                              per_layer_config="object?")
GLOBAL_HEAD_DIM = 512  # Gemma4TextConfig.__post_init__'s default

COMPONENTS = GEMMA2_COMPONENTS  # the LLaMA layout's module names with Gemma 2/3's sandwich norms


def _layer_kinds(cfg: dict, L: int, notes: list[str]) -> list[str]:
    """'local' or 'global' per block, as Gemma4TextConfig sets layer_types: given, or every sixth block global;
    the last block forced global."""
    types = cfg.get("layer_types")
    if types is not None:
        if types and types[-1] == "sliding_attention":
            notes.append("layer_types' last entry 'sliding_attention' read as 'full_attention', as transformers' "
                         "Gemma4TextConfig forces it")
        kinds = layer_kinds(cfg, L)
    else:
        _refuse_if(cfg, "num_hidden_layers", L % 6 != 0 and L > PATTERN_LIMIT,
                   f"with the default layer_types (every sixth block global, the last block global), tfcalc writes "
                   f"the blocks' attention per block, for at most {PATTERN_LIMIT:,} blocks")
        if L % 6 == 0:
            return ["local"] * 5 + ["global"]
        kinds = ["global" if (i + 1) % 6 == 0 else "local" for i in range(L)]
    kinds[-1] = "global"
    return kinds


def gemma4_text(cfg: dict, notes: list[str]) -> dict:
    head_dim = cfg["head_dim"]
    overrides = cfg.get("per_layer_config")
    _refuse_if(cfg, "per_layer_config", overrides not in (None, {}),
               "per-block overrides (a head_dim or num_key_value_heads of their own for some blocks); tfcalc gives "
               "every block one head_dim and one number of key/value heads")
    if overrides is None:  # transformers then sets the global blocks' head_dim from global_head_dim
        global_dim = cfg.get("global_head_dim", GLOBAL_HEAD_DIM)
        _refuse_if(cfg | {"global_head_dim": global_dim}, "global_head_dim", global_dim != head_dim,
                   f"global (full_attention) blocks with a head width other than head_dim={head_dim}: their q, k, v "
                   "and o projections and q/k norms that wide; tfcalc gives every block one head_dim")
    elif "global_head_dim" in cfg:
        notes.append(f"global_head_dim={cfg['global_head_dim']} not read: per_layer_config is given (transformers "
                     "then takes the blocks' sizes from it)")
    _refuse_if(cfg, "attention_k_eq_v", cfg["attention_k_eq_v"] is True,
               "global blocks without v_proj (the keys are the values), with num_global_key_value_heads key heads")
    _refuse_if(cfg, "hidden_size_per_layer_input", cfg["hidden_size_per_layer_input"] != 0,
               "per-layer embeddings (PLE: a table vocab_size_per_layer_input x num_hidden_layers * "
               "hidden_size_per_layer_input, a projection and a gate per block); give 0 for none")
    _refuse_if(cfg, "num_kv_shared_layers", cfg["num_kv_shared_layers"] != 0,
               "blocks that reuse an earlier block's keys and values (no k_proj, v_proj, k_norm)")
    _refuse_if(cfg, "enable_moe_block", cfg["enable_moe_block"] is True,
               "a routed mixture of experts beside the dense MLP in every block, with norms of its own")
    mode = cfg.get("use_bidirectional_attention")
    _refuse_if(cfg, "use_bidirectional_attention", mode == "all",
               "bidirectional attention, with a two-sided window; tfcalc's windows are causal")
    if mode == "vision":
        notes.append("use_bidirectional_attention='vision': text tokens attend causally (only image tokens both "
                     "ways); no parameters")
    if cfg["use_double_wide_mlp"] is True:
        notes.append("use_double_wide_mlp=true not read: it widens only KV-shared blocks, and there are none")
    if cfg.get("num_global_key_value_heads") is not None:
        notes.append(f"num_global_key_value_heads={cfg['num_global_key_value_heads']} not read: transformers uses it "
                     "only with attention_k_eq_v=true")
    activation = _activation(cfg, "hidden_activation")
    fields = _decoder(cfg | {"hidden_act": cfg["hidden_activation"]}, notes)
    fields |= dict(activation=activation, bias=cfg["attention_bias"], mlp_bias=False, norm_position="sandwich",
                   qk_norm="head")
    kinds = _layer_kinds(cfg, fields["n_layers"], notes)
    _refuse_if(cfg, "sliding_window", cfg["sliding_window"] < 1 and "local" in kinds,
               "sliding_attention blocks need a window of 1 or more")
    _window(cfg, fields, notes, shortest_cycle(kinds))
    notes.append("value norm (RMSNorm without weight on each value head), attention scaling 1.0, layer_scalar and "
                 "the embedding scale: elementwise, no parameters (not counted)")
    if cfg.get("final_logit_softcapping") is not None:
        notes.append(f"final_logit_softcapping={cfg['final_logit_softcapping']}: tanh soft-capping, elementwise (no "
                     "parameters, not counted)")
    return fields


register("gemma4_text", DEFAULTS, TYPES, gemma4_text, COMPONENTS)
