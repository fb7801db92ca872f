"""Granite 4.0-H (IBM; model_type granitemoehybrid): transformers' GraniteMoeHybridForCausalLM, Mamba2 and attention
blocks by layer_types, each with a mixture of experts beside a shared MLP (or the shared MLP alone).

Every block is pre-norm: an RMSNorm (input_layernorm) before its mixer, another (post_attention_layernorm) before its
MLP; a final RMSNorm (norm); the head tied by tie_word_embeddings (false by default).
  * layer_types (its attribute_map's layers_block_type; the legacy "mamba" and "attention" entries are transformers'
    linear_attention and full_attention): linear_attention -> a Mamba2 mixer (GraniteMoeHybridMambaLayer; tfcalc's
    `mamba2` kind): in_proj D -> 2 d_inner + 2 g n + h (mamba_proj_bias), a depthwise causal Conv1d of mamba_d_conv
    taps (mamba_conv_bias), A_log, D, dt_bias [h], a gated RMSNorm over mamba_n_groups groups, out_proj; d_inner =
    int(mamba_expand * hidden_size), which the config requires to be mamba_n_heads * mamba_d_head ("auto":
    mamba_expand * hidden_size // mamba_n_heads). null: every block Mamba2 (the config class's default);
  * full_attention -> GraniteMoeHybridAttention: q_proj, k_proj, v_proj (grouped-query) and o_proj, all with biases
    by attention_bias; heads of hidden_size // num_attention_heads (or a head_dim the config gives); rotary on the
    whole head when position_embedding_type is "rope", else no position encoding (NoPE: the published models);
  * the MLP: with num_local_experts > 0, a router (weight [E, D], no bias) and E gated experts of intermediate_size
    (gate_up_proj [E, 2 F, D], down_proj [E, D, F], no biases), num_experts_per_tok per token, beside the shared MLP
    (GraniteMoeHybridMLP: input_linear D -> 2 shared_intermediate_size, act(first half) * second half,
    output_linear; no biases, no gate on its output): tfcalc's one shared expert of d_shared_expert, ungated. With
    num_local_experts 0, the shared MLP alone: a dense gated MLP of shared_intermediate_size.
  * hidden_act: the experts', the shared MLP's and the Mamba2 conv's activation.
embedding_multiplier, residual_multiplier, attention_multiplier (the attention's scale) and logits_scaling scale
activations: no parameters, no matmul, not read. time_step_limit, router_aux_loss_coef, rope parameters: not shapes.
"""

from __future__ import annotations

from typing import Any

from ..hf import PATTERN_LIMIT, SHADOWED, activation_of, refuse_if, shortest_cycle, show
from .mamba2 import mixer_rules, mixer_sizes, padded_conv
from .registry import Family, register

# GraniteMoeHybridConfig's class attributes for the fields read here
DEFAULTS = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": None, "hidden_act": "silu",
            "max_position_embeddings": 2048, "tie_word_embeddings": False, "rope_parameters": None,
            "attention_bias": False, "num_local_experts": 8, "num_experts_per_tok": 2,
            "shared_intermediate_size": 1024, "position_embedding_type": None, "layer_types": None,
            "mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_head": "auto", "mamba_d_conv": 4,
            "mamba_expand": 2, "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False}
# GraniteMoeHybridConfig declares no head_dim, but its attention reads one (getattr) when a config gives it
TYPES = {"vocab_size": "size", "hidden_size": "size", "intermediate_size": "size", "num_hidden_layers": "size",
         "num_attention_heads": "size", "num_key_value_heads": "size?", "hidden_act": "str",
         "max_position_embeddings": "size", "tie_word_embeddings": "bool", "rope_parameters": "object?",
         "attention_bias": "bool", "num_local_experts": "int?", "num_experts_per_tok": "int?",
         "shared_intermediate_size": "size", "position_embedding_type": "str?", "layer_types": "strings?",
         "mamba_n_heads": "size?", "mamba_n_groups": "size?", "mamba_d_state": "size?", "mamba_d_head": "int|str?",
         "mamba_d_conv": "size?", "mamba_expand": "int?", "mamba_chunk_size": "size?", "mamba_conv_bias": "bool?",
         "mamba_proj_bias": "bool?", "head_dim": "size?"}
ALIASES = {"layers_block_type": "layer_types"}  # its attribute_map

# transformers' names, and the legacy ones it remaps (configuration_utils._LEGACY_LAYER_TYPE_REMAP), -> tfcalc's mixer
MIXERS = {"linear_attention": "mamba2", "mamba": "mamba2", "full_attention": "attention", "attention": "attention"}

LAYERS = r"model\.layers\.\d+"
COMPONENTS = [
    (r"model\.embed_tokens", "embedding/token"),
    # one norm before the block's mixer, Mamba2 or attention: compared with the sum of both (hf_model.fused_parts)
    (rf"{LAYERS}\.input_layernorm", "mamba2/norm+attention/norm"),
    *mixer_rules(LAYERS, "mamba"),
    (rf"{LAYERS}\.self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (rf"{LAYERS}\.self_attn", "attention/core"),
    (rf"{LAYERS}\.self_attn\.o_proj", "attention/out"),
    (rf"{LAYERS}\.post_attention_layernorm", "mlp/norm"),
    (rf"{LAYERS}\.block_sparse_moe\.router", "moe/router"),
    (rf"{LAYERS}\.block_sparse_moe\.experts", "moe/experts"),
    # the shared MLP (input_linear: gate and up fused) is tfcalc's shared expert beside the experts, or the dense MLP
    # when there are none: compared with the sum of both (one of them is 0)
    (rf"{LAYERS}\.shared_mlp\.(input_linear|output_linear)", "moe/shared_experts+mlp/gate+up+down"),
    (r"model\.norm", "final_norm"),
    (r"lm_head", "head"),
]

MAMBA_FIELDS = ("mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv", "mamba_expand",
                "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias")


def _mixer(cfg: dict, notes: list[str]) -> dict[str, Any]:
    """The `mamba2` kind's sizes, as GraniteMoeHybridConfig resolves and checks them."""
    for key in ("mamba_conv_bias", "mamba_proj_bias"):
        if cfg[key] is None:  # nn.Conv1d / nn.Linear(bias=None): no bias
            notes.append(f"{key} null: transformers builds no bias (bias=None), as false")
            cfg = {**cfg, key: False}
    for key in MAMBA_FIELDS:
        refuse_if(cfg, key, cfg[key] is None, "GraniteMoeHybridMambaLayer needs a value (transformers fails on null)")
    D, h, expand = cfg["hidden_size"], cfg["mamba_n_heads"], cfg["mamba_expand"]
    refuse_if(cfg, "mamba_expand", expand < 1, "the inner width int(mamba_expand * hidden_size) must be 1 or more")
    inner = expand * D
    refuse_if(cfg, "mamba_n_heads", inner % h != 0, f"does not divide mamba_expand * hidden_size = {inner} "
              "(GraniteMoeHybridConfig refuses it)")
    head = cfg["mamba_d_head"]
    refuse_if(cfg, "mamba_d_head", isinstance(head, str) and head != "auto", "expected an integer or 'auto'")
    if head == "auto":
        notes.append(f"mamba_d_head 'auto': mamba_expand * hidden_size // mamba_n_heads = {inner // h}")
        head = inner // h
    refuse_if(cfg, "mamba_d_head", head < 1, "heads of 1 channel or more")
    return mixer_sizes({**cfg, "mamba_d_head": head}, notes, inner, "mamba_d_head", heads="mamba_n_heads",
                       head_dim="mamba_d_head", state="mamba_d_state", groups="mamba_n_groups", kernel="mamba_d_conv",
                       chunk="mamba_chunk_size", conv_bias="mamba_conv_bias", bias="mamba_proj_bias")


def _mixers(cfg: dict, L: int) -> list[str]:
    """Each block's mixer, as GraniteMoeHybridConfig sets layer_types (null: every block linear_attention)."""
    types = cfg["layer_types"]
    # layers_block_type: null is set over the default GraniteMoeHybridConfig gives layer_types: the model then fails
    refuse_if(cfg, "layer_types", types is None and "layer_types" in cfg.get(SHADOWED, {}), "transformers sets "
              "layer_types to null from it, after its default, and its decoder layers fail on that")
    if types is None:
        return ["mamba2"] * min(L, PATTERN_LIMIT)  # one kind: cycled whatever its length
    refuse_if(cfg, "layer_types", len(types) != L, f"expected a list of num_hidden_layers={L} entries "
              "(transformers refuses any other length)")
    unknown = sorted(set(types) - set(MIXERS))
    refuse_if(cfg, "layer_types", bool(unknown), f"entries {', '.join(map(show, unknown))}; known: "
              f"{', '.join(MIXERS)} (transformers builds attention for any other, but its forward has no mask for it)")
    return [MIXERS[t] for t in types]


def _ffn(cfg: dict, notes: list[str]) -> tuple[str, dict[str, Any]]:
    """The MLP in every block: ('moe', the experts and the shared expert) or ('mlp', the shared MLP alone)."""
    E, k, shared = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["shared_intermediate_size"]
    refuse_if(cfg, "num_local_experts", E is None, "transformers' decoder layer fails on null (num_local_experts > 0)")
    if E <= 0:  # transformers builds experts only for num_local_experts > 0
        notes.append(f"num_local_experts {E}: no experts, the shared MLP alone (a gated MLP of "
                     f"shared_intermediate_size={shared}) in every block")
        return "mlp", {"d_ff": shared}
    refuse_if(cfg, "num_local_experts", E < 2, "tfcalc models a mixture of 2 or more experts; transformers builds a "
              "router even for 1 expert, which a dense MLP has not")
    refuse_if(cfg, "num_experts_per_tok", k is None or not 1 <= k <= E, f"expected 1 to num_local_experts={E} experts per token "
              "(transformers' top-k fails above, and routes to no expert at 0)")
    notes.append(f"{E} experts of intermediate_size={cfg['intermediate_size']}, {k} per token, beside one shared "
                 f"expert (the shared MLP, ungated) of shared_intermediate_size={shared}")
    return "moe", {"d_ff": cfg["intermediate_size"], "n_experts": E, "top_k": k,
                   "d_expert": cfg["intermediate_size"], "n_shared_experts": 1, "d_shared_expert": shared}


def granitemoehybrid(cfg: dict, notes: list[str]) -> dict[str, Any]:
    L, D, H = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    H_kv = cfg["num_key_value_heads"]
    H_kv = H if H_kv is None else H_kv
    mixers = _mixers(cfg, L)
    ffn, ffn_fields = _ffn(cfg, notes)
    fields = {"n_layers": L, "d_model": D, "n_heads": H, "n_kv_heads": H_kv, "vocab_size": cfg["vocab_size"],
              "mlp": "gated", "activation": activation_of(cfg, "hidden_act"), "norm": "rmsnorm",
              "norm_position": "pre", "bias": cfg["attention_bias"], "mlp_bias": False,
              "tie_embeddings": cfg["tie_word_embeddings"], "context": cfg["max_position_embeddings"], **ffn_fields}
    position = cfg["position_embedding_type"]
    if "attention" in mixers:
        head_dim = cfg.get("head_dim", D // H)
        refuse_if(cfg, "head_dim", head_dim is None, "transformers' attention reads it (getattr) and fails on null")
        refuse_if(cfg, "hidden_size", head_dim == 0, f"fewer channels than num_attention_heads={H}: heads of 0 "
                  "channels")
        refuse_if(cfg, "num_key_value_heads", H % H_kv != 0, f"does not divide num_attention_heads={H} (transformers' "
                  "attention repeats each key/value head num_attention_heads // num_key_value_heads times)")
        if "head_dim" in cfg or D % H:
            fields["d_head"] = head_dim
        if position == "rope":
            fields["positions"] = "rotary"
            if cfg.get("rope_parameters") not in (None, {}):
                notes.append("rope parameters read: they change rotary frequencies, not shapes or counts")
        else:
            fields["positions"] = "none"
            notes.append(f"position_embedding_type={show(position)}: no position encoding in the attention blocks "
                         "(transformers builds rotary only for 'rope')")
    else:  # ModelSpec's attention heads, which no block has here (1: any whole number of channels)
        fields |= {"positions": "none", "n_heads": 1, "n_kv_heads": 1}
        notes.append("no attention block: transformers' model fails a forward with a cache (generation: "
                     "get_seq_length needs an attention layer); without one it runs")
    sizes = _mixer(cfg, notes)  # GraniteMoeHybridConfig checks the mixer's sizes whatever the blocks
    if "mamba2" in mixers:
        fields["kinds"] = {"mamba2": sizes}
    blocks = [f"{m}+{ffn}" for m in mixers]
    if len(set(blocks)) > 1:
        refuse_if(cfg, "num_hidden_layers", L > PATTERN_LIMIT, f"with layer_types, tfcalc writes the blocks' kinds "
                  f"per block, for at most {PATTERN_LIMIT:,} blocks")
    cycle = shortest_cycle(blocks)
    fields["block_pattern"] = cycle if len(blocks) % len(cycle) == 0 else blocks
    n_mamba = L if cfg["layer_types"] is None else mixers.count("mamba2")
    notes.append(f"{n_mamba} of {L} blocks Mamba2, {L - n_mamba} attention")
    notes.append("embedding, residual and attention multipliers and logits_scaling: elementwise scales, no "
                 "parameters, not counted")
    return fields


register(Family("granitemoehybrid", DEFAULTS, TYPES, granitemoehybrid, COMPONENTS, aliases=ALIASES,
                known=padded_conv))
