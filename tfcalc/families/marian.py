"""Marian (Helsinki-NLP opus-mt): BART's post-norm layout with biases, without a norm after the embeddings and without
final norms. Its sinusoidal position tables are nn.Embedding parameters (max_position_embeddings x d_model per
stack, frozen: requires_grad false, but in sum(numel)): counted as learned positions of that size, which hold the
same parameters (a table lookup has no matmul). scale_embedding multiplies the token embeddings by sqrt(d_model):
elementwise, not counted."""

from __future__ import annotations

from ..hf import TYPES as _HF_TYPES
from ..hf import BART_ALIASES, _activation, _refuse_if, _unalias, register, show
from .mbart import COMPONENTS as _MBART_COMPONENTS

DEFAULTS = dict(vocab_size=58101, decoder_vocab_size=None, max_position_embeddings=1024, encoder_layers=12,
                encoder_ffn_dim=4096, encoder_attention_heads=16, decoder_layers=12, decoder_ffn_dim=4096,
                decoder_attention_heads=16, activation_function="gelu", d_model=1024,
                share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
ALIASES = BART_ALIASES  # MarianConfig's attribute_map is BartConfig's
# normalize_before: written by the Marian NMT converter; transformers 5 neither declares nor reads it
TYPES = _HF_TYPES["bart"] | dict.fromkeys(ALIASES, "size") | dict(
    decoder_vocab_size="size?", share_encoder_decoder_embeddings="bool", normalize_before="bool")

# mBART's names without its embedding and final norms, with each stack's own token table when not shared
COMPONENTS = [_MBART_COMPONENTS[0], (r"model\.(?P<stack>encoder|decoder)\.embed_tokens", "{stack}/embedding/token"),
              *(rule for rule in _MBART_COMPONENTS[1:]
                if rule[1] not in ("{stack}/embedding/norm", "{stack}/final_norm"))]


def marian(cfg: dict, notes: list[str]) -> dict:
    cfg = _unalias(cfg, ALIASES, notes)
    for field in ("attention_heads", "ffn_dim"):
        _refuse_if(cfg, f"decoder_{field}", cfg[f"encoder_{field}"] != cfg[f"decoder_{field}"],
                   f"encoder_{field}={show(cfg[f'encoder_{field}'])} differs; tfcalc gives both stacks one width")
    vocab, decoder_vocab = cfg["vocab_size"], cfg["decoder_vocab_size"]
    _refuse_if(cfg, "decoder_vocab_size", decoder_vocab not in (None, vocab),
               f"it differs from vocab_size={vocab}: the decoder's table and the head would be that size, and tfcalc "
               "gives both stacks one vocabulary")
    _refuse_if(cfg, "normalize_before", cfg.get("normalize_before") is True,
               "transformers' MarianModel is post-norm whatever this says; a pre-norm checkpoint is not what it builds")
    shared = cfg["share_encoder_decoder_embeddings"] is True
    _refuse_if(cfg, "tie_word_embeddings", shared and cfg["tie_word_embeddings"] is not True,
               "with share_encoder_decoder_embeddings=true, transformers then unties the encoder's, the decoder's and "
               "the head's tables from the shared one (four tables)")
    positions = cfg["max_position_embeddings"]
    notes.append("sinusoidal positions: transformers stores them as a frozen max_position_embeddings x d_model table "
                 "per stack (in sum(numel)); counted as learned positions of that size")
    return dict(n_encoder_layers=cfg["encoder_layers"], n_layers=cfg["decoder_layers"], d_model=cfg["d_model"],
                n_heads=cfg["encoder_attention_heads"], d_ff=cfg["encoder_ffn_dim"], vocab_size=vocab,
                positions="learned", max_positions=positions, embedding_norm=False, norm="layernorm",
                norm_position="post", final_norm=False, bias=True, activation=_activation(cfg, "activation_function"),
                shared_embeddings=shared, tie_embeddings=cfg["tie_word_embeddings"], context=positions)


register("marian", DEFAULTS, TYPES, marian, COMPONENTS, encoder_decoder=True)
