"""GLM-4 (glm4, Glm4ForCausalLM): the LLaMA attention (GQA, q/k/v biases by attention_bias, o_proj without) with
sandwich RMSNorms (input_layernorm and post_self_attn_layernorm around attention, post_attention_layernorm and
post_mlp_layernorm around the MLP: norm_position "sandwich"), a SwiGLU MLP whose gate and up are one fused
gate_up_proj (D x 2F, the weights and multiply-adds of separate gate and up projections), and rotary on the first
int(head_dim * partial_rotary_factor) channels of each head, rounded up to even (default 0.5; rope_parameters'
partial_rotary_factor wins over the top-level one, as Glm4Config moves it there). GLM-4's rotary turns interleaved
pairs: the channel order changes, not the count.
"""

from __future__ import annotations

from ..hf import DECODER_TYPES, decoder_fields
from .gpt_neox import partial_factor, partial_rotary
from .llama import DECODER_COMPONENTS
from .registry import Family, register

# transformers' module names -> tfcalc components: the sandwich norms by GLM-4's names
GLM4_COMPONENTS = [
    (r"model\.layers\.\d+\.input_layernorm", "attention/norm"),
    (r"model\.layers\.\d+\.post_self_attn_layernorm", "attention/post_norm"),
    (r"model\.layers\.\d+\.post_attention_layernorm", "mlp/norm"),
    (r"model\.layers\.\d+\.post_mlp_layernorm", "mlp/post_norm"),
    *DECODER_COMPONENTS,
]

# Glm4Config's defaults (transformers 5); partial_rotary_factor is a kwarg its __post_init__ defaults to 0.5 and moves
# into rope_parameters. head_dim and num_key_value_heads are declared int (strict): null is refused, as there
GLM4_DEFAULTS = {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
                 "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "hidden_act": "silu",
                 "max_position_embeddings": 131072, "tie_word_embeddings": False, "attention_bias": True}
GLM4_TYPES = DECODER_TYPES | {"num_key_value_heads": "size", "head_dim": "size", "attention_bias": "bool",
                              "partial_rotary_factor": "float?"}


def glm_rotary(cfg: dict, fields: dict, notes: list[str]) -> None:
    """Rotary on the first int(head_dim * factor) channels (rounded up to even) of each head. The factor is
    rope_parameters' (or rope_scaling's), else the top-level partial_rotary_factor, else 0.5; a top-level null that
    the rope parameters do not override is refused by name (transformers then rotates every channel)."""
    where, factor = partial_factor(cfg, "partial_rotary_factor", 0.5)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    partial_rotary(cfg, fields, notes, head_dim, factor, where, "head_dim" if cfg.get("head_dim") else "hidden_size")


def glm4(cfg: dict, notes: list[str]) -> dict:
    fields = decoder_fields(cfg, notes) | {"bias": False, "qkv_bias": cfg["attention_bias"], "mlp_bias": False,
                                           "norm_position": "sandwich"}
    glm_rotary(cfg, fields, notes)
    return fields


register(Family("glm4", GLM4_DEFAULTS, GLM4_TYPES, glm4, GLM4_COMPONENTS))
