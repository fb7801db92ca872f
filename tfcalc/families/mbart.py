"""mBART: BART's layout (learned positions with an offset of 2 rows, a norm after each stack's embeddings, biases,
one token table shared by both stacks and the head) made pre-norm, with a final layer_norm after each stack.
scale_embedding multiplies the token embeddings by sqrt(d_model): elementwise, no parameters, not counted."""

from __future__ import annotations

from ..hf import TYPES as _HF_TYPES
from ..hf import _bart, register

DEFAULTS = dict(vocab_size=50265, max_position_embeddings=1024, encoder_layers=12, encoder_ffn_dim=4096,
                encoder_attention_heads=16, decoder_layers=12, decoder_ffn_dim=4096, decoder_attention_heads=16,
                activation_function="gelu", d_model=1024, tie_word_embeddings=True)
TYPES = _HF_TYPES["bart"]  # with MBartConfig's attribute_map names, which _bart reads (BART_ALIASES)

_LAYER = r"model\.(?P<stack>encoder|decoder)\.layers\.\d+\."
COMPONENTS = [  # BART's names, with each stack's final layer_norm
    (r"model\.shared", "embedding/token"),
    (r"model\.(?P<stack>encoder|decoder)\.embed_positions", "{stack}/embedding/position"),
    (r"model\.(?P<stack>encoder|decoder)\.layernorm_embedding", "{stack}/embedding/norm"),
    (_LAYER + r"self_attn\.(q_proj|k_proj|v_proj)", "{stack}/attention/qkv"),
    (_LAYER + r"self_attn", "{stack}/attention/core"),
    (_LAYER + r"self_attn\.out_proj", "{stack}/attention/out"),
    (_LAYER + r"self_attn_layer_norm", "{stack}/attention/norm"),
    (_LAYER + r"encoder_attn\.q_proj", "{stack}/cross_attention/q"),
    (_LAYER + r"encoder_attn\.(k_proj|v_proj)", "{stack}/cross_attention/kv"),
    (_LAYER + r"encoder_attn", "{stack}/cross_attention/core"),
    (_LAYER + r"encoder_attn\.out_proj", "{stack}/cross_attention/out"),
    (_LAYER + r"encoder_attn_layer_norm", "{stack}/cross_attention/norm"),
    (_LAYER + r"fc1", "{stack}/mlp/up"),
    (_LAYER + r"fc2", "{stack}/mlp/down"),
    (_LAYER + r"final_layer_norm", "{stack}/mlp/norm"),
    (r"model\.(?P<stack>encoder|decoder)\.layer_norm", "{stack}/final_norm"),
    (r"lm_head", "head"),
]


def mbart(cfg: dict, notes: list[str]) -> dict:
    return _bart(cfg, notes) | dict(norm_position="pre", final_norm=True)


register("mbart", DEFAULTS, TYPES, mbart, COMPONENTS, encoder_decoder=True)
