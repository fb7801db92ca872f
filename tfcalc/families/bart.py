"""BART (BartForConditionalGeneration): an encoder and a decoder, post-norm LayerNorms, biases, learned positions
with an offset of 2 rows per stack, a LayerNorm after each stack's embeddings, no final norm, one token table shared
by both stacks and tied to the head. mBART and Marian (their own modules) start from it.

BartConfig's attribute_map (mBART's and Marian's too; BART_ALIASES) reads hidden_size, num_attention_heads and
num_hidden_layers into d_model, encoder_attention_heads and encoder_layers, over those fields' own values.
"""

from __future__ import annotations

from ..hf import activation_of, refuse_if, show
from .registry import Family, register

BART_ALIASES = dict(hidden_size="d_model", num_attention_heads="encoder_attention_heads",
                    num_hidden_layers="encoder_layers")

_LAYER = r"model\.(?P<stack>encoder|decoder)\.layers\.\d+\."


def block_rules(layer: str) -> list[tuple[str, str]]:
    """The encoder and decoder blocks' rules (BartEncoderLayer, BartDecoderLayer, and the classes that copy them:
    Whisper's) under `layer`, a regex of a block's path with its `stack` group."""
    return [
        (layer + r"self_attn\.(q_proj|k_proj|v_proj)", "{stack}/attention/qkv"),
        (layer + r"self_attn", "{stack}/attention/core"),
        (layer + r"self_attn\.out_proj", "{stack}/attention/out"),
        (layer + r"self_attn_layer_norm", "{stack}/attention/norm"),
        (layer + r"encoder_attn\.q_proj", "{stack}/cross_attention/q"),
        (layer + r"encoder_attn\.(k_proj|v_proj)", "{stack}/cross_attention/kv"),
        (layer + r"encoder_attn", "{stack}/cross_attention/core"),
        (layer + r"encoder_attn\.out_proj", "{stack}/cross_attention/out"),
        (layer + r"encoder_attn_layer_norm", "{stack}/cross_attention/norm"),
        (layer + r"fc1", "{stack}/mlp/up"),
        (layer + r"fc2", "{stack}/mlp/down"),
        (layer + r"final_layer_norm", "{stack}/mlp/norm"),
    ]


COMPONENTS = [
    (r"model\.shared", "embedding/token"),
    (r"model\.(?P<stack>encoder|decoder)\.embed_positions", "{stack}/embedding/position"),
    (r"model\.(?P<stack>encoder|decoder)\.layernorm_embedding", "{stack}/embedding/norm"),
    *block_rules(_LAYER),
    (r"lm_head", "head"),
]


def bart(cfg: dict, notes: list[str]) -> dict:
    """BART: post-norm, biases, learned positions with an offset of 2 rows, a norm after each embedding."""
    for field in ("attention_heads", "ffn_dim"):
        refuse_if(cfg, f"decoder_{field}", cfg[f"encoder_{field}"] != cfg[f"decoder_{field}"],
                  f"encoder_{field}={show(cfg[f'encoder_{field}'])} differs; tfcalc gives both stacks one width")
    refuse_if(cfg, "tie_word_embeddings", cfg["tie_word_embeddings"] is not True,
              "transformers then unties the encoder's, the decoder's and the head's tables from the shared one")
    positions = cfg["max_position_embeddings"]
    notes.append("learned positions: max_position_embeddings + 2 rows per stack (BART's offset)")
    return dict(n_encoder_layers=cfg["encoder_layers"], n_layers=cfg["decoder_layers"],
                d_model=cfg["d_model"], n_heads=cfg["encoder_attention_heads"],
                d_ff=cfg["encoder_ffn_dim"], vocab_size=cfg["vocab_size"], positions="learned",
                max_positions=positions + 2, embedding_norm=True, norm="layernorm", norm_position="post",
                final_norm=False, bias=True, activation=activation_of(cfg, "activation_function"), context=positions)


register(Family(
    "bart", mapper=bart, components=COMPONENTS, aliases=BART_ALIASES, encoder_decoder=True,
    layer_keys={"encoder_layers": "n_encoder_layers", "decoder_layers": "n_layers"},  # or num_hidden_layers, given
    defaults=dict(vocab_size=50265, max_position_embeddings=1024, encoder_layers=12, encoder_ffn_dim=4096,
                  encoder_attention_heads=16, decoder_layers=12, decoder_ffn_dim=4096, decoder_attention_heads=16,
                  activation_function="gelu", d_model=1024, tie_word_embeddings=True),
    types=dict(vocab_size="size", max_position_embeddings="size", encoder_layers="size", encoder_ffn_dim="size",
               encoder_attention_heads="size", decoder_layers="size", decoder_ffn_dim="size",
               decoder_attention_heads="size", activation_function="str", d_model="size",
               tie_word_embeddings="bool", hidden_size="size", num_attention_heads="size",
               num_hidden_layers="size")))
