"""Cohere Command-R and Command-R+: transformers' CohereForCausalLM.

Every block is parallel with one norm (parallel_block one_norm): x + attn(input_layernorm(x)) + mlp(input_layernorm(x)),
with CohereLayerNorm, a LayerNorm with a weight and no bias (norm layernorm_no_bias), also as the final norm.
Attention: q_proj, k_proj, v_proj (grouped-query by num_key_value_heads) and o_proj, biases by attention_bias, rotary
over the whole head (interleaved: the same channels, the same cost). MLP: SwiGLU (gate_proj, up_proj, down_proj, no
biases). The head is tied by default, without a bias.

use_qk_norm=true (Command-R+): q_norm and k_norm are LayerNorms over each head's head_dim with a weight per head and
channel ([num_heads, head_dim], [num_key_value_heads, head_dim]), before rotary: qk_norm per_head.

Not read, because they change no shape and no matmul: logit_scale (the logits are multiplied by it: elementwise),
rope_theta and the rope scaling type (frequencies), layer_norm_eps, attention_dropout, initializer_range, use_cache,
the token ids.
"""

from __future__ import annotations

from ..hf import decoder_fields, refuse_if, show
from .llama import DECODER_COMPONENTS
from .registry import Family, register

MODEL_TYPE = "cohere"

# CohereConfig's defaults (transformers 5) for the fields read here
DEFAULTS = dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528, logit_scale=0.0625,
                num_hidden_layers=40, num_attention_heads=64, num_key_value_heads=None, hidden_act="silu",
                max_position_embeddings=8192, tie_word_embeddings=True, rope_parameters=None, attention_bias=False,
                use_qk_norm=False)
# CohereConfig declares no head_dim, but its attention reads one (getattr) when a config gives it: then not null
TYPES = dict(vocab_size="size", hidden_size="size", intermediate_size="size", logit_scale="float?",
             num_hidden_layers="size", num_attention_heads="size", num_key_value_heads="size?", hidden_act="str",
             max_position_embeddings="size", tie_word_embeddings="bool", rope_parameters="object?",
             rope_scaling="object?", attention_bias="bool", use_qk_norm="bool?", head_dim="size")

COMPONENTS = [  # the LLaMA layout's names with one norm per (parallel) block
    (r"model\.layers\.\d+\.input_layernorm", "attention/norm"),
    *DECODER_COMPONENTS,
]


def cohere(cfg: dict, notes: list[str]) -> dict:
    refuse_if(cfg, "logit_scale", cfg["logit_scale"] is None, "CohereForCausalLM multiplies the logits by it (it "
              "fails with null)")
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim", D // H)
    refuse_if(cfg, "head_dim" if "head_dim" in cfg else "hidden_size", head_dim % 2 == 1,
              f"an odd head ({head_dim} channels): transformers' rotary tables are {head_dim + 1} wide and fail to "
              "broadcast")
    fields = decoder_fields(cfg, notes) | dict(d_head=head_dim, norm="layernorm_no_bias", parallel_block="one_norm",
                                               bias=cfg["attention_bias"], mlp_bias=False,
                                               qk_norm="per_head" if cfg["use_qk_norm"] is True else "none")
    if cfg["logit_scale"] != 1.0:
        notes.append(f"logit_scale={show(cfg['logit_scale'])}: the logits are scaled, elementwise (not counted)")
    return fields


register(Family(MODEL_TYPE, DEFAULTS, TYPES, cohere, COMPONENTS))
