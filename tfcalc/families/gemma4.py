"""Gemma 4's language model (model_type gemma4_text; the multimodal gemma4 reads its text_config, tfcalc.hf.NESTED).

Gemma 3's block (sandwich RMSNorms, an RMSNorm on each query and key head, GeGLU by hidden_activation, local and
global blocks) with a value norm (an RMSNorm without weight on each value head: no parameters, elementwise),
attention scaling 1.0 and a `layer_scalar` buffer (no parameters, elementwise). By default the last block is global
(transformers forces layer_types[-1] to full_attention). And Gemma 4's own features, each a ModelSpec field:
  * global_head_dim (default 512) and, with attention_k_eq_v, num_global_key_value_heads: the global blocks' own
    head width and key heads (global_d_head, global_n_kv_heads), without v_proj (global_k_eq_v); a saved config's
    per_layer_config instead when it is one override for exactly the full_attention blocks;
  * hidden_size_per_layer_input > 0 (default 256): per-layer embeddings (d_per_layer_input, per_layer_vocab);
  * num_kv_shared_layers: the last blocks reuse earlier keys and values (kv_shared_layers), with use_double_wide_mlp
    twice the MLP width (kv_shared_d_ff);
  * enable_moe_block: the experts beside the dense MLP in every block (moe_beside_mlp).
Refused by field and value: other per_layer_config overrides, KV sharing without a producer of every layer type,
a MoE block without its sizes, use_bidirectional_attention='all'. All four published text towers (E2B, E4B,
26B-A4B, 31B; tests/data/gemma4_text_configs.json) are read exactly.
"""

from __future__ import annotations

from ..hf import (DECODER_TYPES, PATTERN_LIMIT, activation_of, decoder_fields, layer_kinds, refuse_if, set_window,
                  shortest_cycle)
from .gemma import GEMMA2_COMPONENTS
from .gemma4_audio import GEMMA4_WHOLE
from .registry import Family, register

# Gemma4TextConfig declares use_bidirectional_attention as Literal["all", "vision"] | None: the kind "all|vision?"

DEFAULTS = dict(vocab_size=262_144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30,
                num_attention_heads=8, num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh",
                max_position_embeddings=131_072, tie_word_embeddings=True, attention_bias=False, sliding_window=512,
                layer_types=None, final_logit_softcapping=None, use_bidirectional_attention=None,
                hidden_size_per_layer_input=256, attention_k_eq_v=False, num_kv_shared_layers=0,
                enable_moe_block=False, use_double_wide_mlp=False, rope_parameters=None, num_experts=None,
                top_k_experts=None, moe_intermediate_size=None, vocab_size_per_layer_input=262_144)
# global_head_dim and num_global_key_value_heads are not declared by Gemma4TextConfig: its __post_init__ pops them
# from its kwargs (global_head_dim default 512) into per_layer_config, which a saved config carries instead
TYPES = DECODER_TYPES | dict(hidden_act="str?", num_key_value_heads="size", head_dim="size", hidden_activation="str",
                             attention_bias="bool", sliding_window="int", layer_types="strings?",
                             final_logit_softcapping="float?", use_bidirectional_attention="all|vision?",
                             hidden_size_per_layer_input="count", attention_k_eq_v="bool",
                             num_kv_shared_layers="count", enable_moe_block="bool", use_double_wide_mlp="bool",
                             global_head_dim="size", num_global_key_value_heads="size?",
                             per_layer_config="object?", num_experts="size?", top_k_experts="size?",
                             moe_intermediate_size="size?", vocab_size_per_layer_input="size")
GLOBAL_HEAD_DIM = 512  # Gemma4TextConfig.__post_init__'s default

COMPONENTS = [  # the LLaMA layout's module names with Gemma 2/3's sandwich norms, and the MoE beside the MLP
    (r"model\.layers\.\d+\.router\.proj", "moe/router"),
    (r"model\.layers\.\d+\.router\.scale", "moe/router_norm"),  # its weightless norm times this scale
    (r"model\.layers\.\d+\.router\.per_expert_scale", "moe/expert_scale"),
    (r"model\.layers\.\d+\.experts", "moe/experts"),
    (r"model\.layers\.\d+\.pre_feedforward_layernorm_2", "moe/norm"),
    (r"model\.layers\.\d+\.post_feedforward_layernorm_1", "mlp/branch_norm"),
    (r"model\.layers\.\d+\.post_feedforward_layernorm_2", "moe/post_norm"),
    (r"model\.embed_tokens_per_layer", "embedding/per_layer"),  # the per-layer embeddings
    (r"model\.per_layer_model_projection", "embedding/per_layer_projection"),
    (r"model\.per_layer_projection_norm", "embedding/per_layer_norm"),
    (r"model\.layers\.\d+\.per_layer_input_gate", "per_layer/gate"),
    (r"model\.layers\.\d+\.per_layer_projection", "per_layer/projection"),
    (r"model\.layers\.\d+\.post_per_layer_input_norm", "per_layer/norm"),
    *GEMMA2_COMPONENTS,
]


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
        refuse_if(cfg, "num_hidden_layers", L % 6 != 0 and L > PATTERN_LIMIT,
                  f"with the default layer_types (every sixth block global, the last block global), tfcalc writes "
                  f"the blocks' attention per block, for at most {PATTERN_LIMIT:,} blocks")
        if L % 6 == 0:
            return ["local"] * 5 + ["global"]
        kinds = ["global" if (i + 1) % 6 == 0 else "local" for i in range(L)]
    kinds[-1] = "global"
    return kinds


def _kinds_in(kinds: list[str], lo: int, hi: int) -> set[str]:
    """The kinds of blocks lo..hi-1, `kinds` cycled over the blocks (by arithmetic: no list of every block)."""
    n = len(kinds)
    return set(kinds) if hi - lo >= n else {kinds[i % n] for i in range(lo, hi)}


def _count_global(kinds: list[str], L: int) -> int:
    cycles, rest = divmod(L, len(kinds))
    return cycles * kinds.count("global") + kinds[:rest].count("global")


def _global_overrides(cfg: dict, kinds: list[str], L: int, notes: list[str]) -> tuple[int, int | None]:
    """The global blocks' head_dim and key/value heads (None: num_key_value_heads), as Gemma4TextConfig sets them:
    from per_layer_config when a config carries it (transformers saves one), else from global_head_dim (default
    512) and, with attention_k_eq_v, num_global_key_value_heads. An explicit null is a per_layer_config given
    (Gemma4TextConfig derives one only when the key is absent): no overrides, every block the local shape."""
    if "per_layer_config" not in cfg:
        k_eq_v = cfg["attention_k_eq_v"] is True
        if cfg.get("num_global_key_value_heads") is not None and not k_eq_v:
            notes.append(f"num_global_key_value_heads={cfg['num_global_key_value_heads']} not read: transformers "
                         "uses it only with attention_k_eq_v=true")
        return cfg.get("global_head_dim", GLOBAL_HEAD_DIM), cfg.get("num_global_key_value_heads") if k_eq_v else None
    overrides = cfg["per_layer_config"]
    for field in ("global_head_dim", "num_global_key_value_heads"):
        if field in cfg:
            notes.append(f"{field}={cfg[field]} not read: per_layer_config is given (transformers then takes the "
                         "blocks' sizes from it)")
    if overrides is None:
        notes.append("per_layer_config=None: no per-block overrides (transformers derives them only when the field "
                     "is absent); the global blocks have the local blocks' head_dim and key/value heads")
        overrides = {}
    try:
        blocks = {int(index): value for index, value in overrides.items()}
    except (TypeError, ValueError):
        blocks = None
    # exactly the global blocks: as many as there are, each of them global
    is_globals = blocks is not None and len(blocks) == _count_global(kinds, L) and all(
        0 <= i < L and kinds[i % len(kinds)] == "global" for i in blocks)
    ok = blocks is not None and all(isinstance(v, dict) and set(v) <= {"head_dim", "num_key_value_heads"}
                                    and all(isinstance(x, int) and not isinstance(x, bool) and x > 0
                                            for x in v.values()) for v in blocks.values())
    values = [blocks[i] for i in sorted(blocks)] if ok else []
    refuse_if(cfg, "per_layer_config", not ok or bool(blocks and (not is_globals or any(
        v != values[0] for v in values))), "per-block overrides other than one {head_dim, num_key_value_heads} "
               "for exactly the full_attention blocks (tfcalc gives the global blocks one shape, the local blocks "
               "another)")
    first = values[0] if values else {}
    return first.get("head_dim", cfg["head_dim"]), first.get("num_key_value_heads")


def _per_layer_inputs(cfg: dict, fields: dict, notes: list[str]) -> None:
    """Per-layer embeddings (hidden_size_per_layer_input > 0: E2B, E4B)."""
    P = cfg["hidden_size_per_layer_input"]
    if not P:
        return
    fields["d_per_layer_input"] = P
    if cfg["vocab_size_per_layer_input"] != fields["vocab_size"]:
        fields["per_layer_vocab"] = cfg["vocab_size_per_layer_input"]
    notes.append(f"hidden_size_per_layer_input={P}: per-layer embeddings, a table of "
                 f"{cfg['vocab_size_per_layer_input']:,} x {fields['n_layers']} * {P} (counted in the embedding "
                 "parameters), a projection and norm, and a gate, projection and norm in every block")


def _kv_sharing(cfg: dict, fields: dict, kinds: list[str], notes: list[str]) -> None:
    """The last num_kv_shared_layers blocks reuse the keys and values of the last earlier block of their type; with
    use_double_wide_mlp their MLPs are twice as wide."""
    S, L = cfg["num_kv_shared_layers"], fields["n_layers"]
    if not S:
        if cfg["use_double_wide_mlp"] is True:
            notes.append("use_double_wide_mlp=true not read: it widens only KV-shared blocks, and there are none")
        return
    refuse_if(cfg, "num_kv_shared_layers", S >= L, f"at least one of the num_hidden_layers={L} blocks computes "
              "the keys and values the shared ones reuse")
    refuse_if(cfg, "num_kv_shared_layers", _kinds_in(kinds, 0, L - S) != set(kinds),
              "a layer type among the KV-shared blocks (or among all blocks) with no block of that type before "
              "them (transformers refuses it too)")
    fields["kv_shared_layers"] = S
    if cfg["use_double_wide_mlp"] is True:
        fields["kv_shared_d_ff"] = 2 * fields["d_ff"]
    notes.append(f"num_kv_shared_layers={S}: the last {S} blocks attend with the keys and values of the last earlier "
                 "block of their type (no k_proj, v_proj, k_norm; nothing cached)"
                 + (", their MLPs twice as wide (use_double_wide_mlp)" if cfg["use_double_wide_mlp"] is True else ""))


def gemma4_text(cfg: dict, notes: list[str]) -> dict:
    mode = cfg.get("use_bidirectional_attention")
    refuse_if(cfg, "use_bidirectional_attention", mode == "all",
              "bidirectional attention, with a two-sided window; tfcalc's windows are causal")
    if mode == "vision":
        notes.append("use_bidirectional_attention='vision': text tokens attend causally (only image tokens both "
                     "ways); no parameters")
    activation = activation_of(cfg, "hidden_activation")
    fields = decoder_fields(cfg | {"hidden_act": cfg["hidden_activation"]}, notes)
    fields |= dict(activation=activation, bias=cfg["attention_bias"], mlp_bias=False, norm_position="sandwich",
                   qk_norm="head")
    kinds = _layer_kinds(cfg, fields["n_layers"], notes)
    global_dim, global_kv = _global_overrides(cfg, kinds, fields["n_layers"], notes)
    fields["global_d_head"] = global_dim  # said even when it is head_dim: the config gives both
    if global_kv is not None and global_kv != fields["n_kv_heads"]:
        refuse_if(cfg, "num_global_key_value_heads", fields["n_heads"] % global_kv != 0,
                  f"global key/value heads that do not divide num_attention_heads={fields['n_heads']}")
        fields["global_n_kv_heads"] = global_kv
    if cfg["enable_moe_block"] is True:  # the experts beside the dense MLP in every block
        for field in ("num_experts", "top_k_experts", "moe_intermediate_size"):
            refuse_if(cfg, field, cfg[field] is None, "enable_moe_block=true needs it (transformers fails without)")
        refuse_if(cfg, "num_experts", cfg["num_experts"] < 2, "tfcalc models a mixture of 2 or more experts")
        refuse_if(cfg, "top_k_experts", cfg["top_k_experts"] > cfg["num_experts"],
                  f"more than num_experts={cfg['num_experts']} experts per token")
        fields |= dict(n_experts=cfg["num_experts"], top_k=cfg["top_k_experts"],
                       d_expert=cfg["moe_intermediate_size"], moe_beside_mlp=True)
    else:
        for field in ("num_experts", "top_k_experts", "moe_intermediate_size"):
            if cfg[field] is not None:
                notes.append(f"{field}={cfg[field]} not read: enable_moe_block=false (no experts)")
    _per_layer_inputs(cfg, fields, notes)
    _kv_sharing(cfg, fields, kinds, notes)
    if cfg["attention_k_eq_v"] is True:
        fields["global_k_eq_v"] = True
        notes.append("attention_k_eq_v=true: the global blocks have no v_proj (their values are k_proj's output)")
    refuse_if(cfg, "sliding_window", cfg["sliding_window"] < 1 and "local" in kinds,
              "sliding_attention blocks need a window of 1 or more")
    set_window(cfg, fields, notes, shortest_cycle(kinds))
    notes.append("value norm (RMSNorm without weight on each value head), attention scaling 1.0, layer_scalar and "
                 "the embedding scale: elementwise, no parameters (not counted)")
    if cfg.get("final_logit_softcapping") is not None:
        notes.append(f"final_logit_softcapping={cfg['final_logit_softcapping']}: tanh soft-capping, elementwise (no "
                     "parameters, not counted)")
    return fields


register(Family("gemma4_text", DEFAULTS, TYPES, gemma4_text, COMPONENTS),
         # the multimodal config, whole: its language model from text_config, its vision tower from vision_config
         # (tfcalc/families/gemma4_vision.py), its audio tower from audio_config (tfcalc/families/gemma4_audio.py)
         Family("gemma4", nested=("gemma4_text", "text_config"), **GEMMA4_WHOLE))
