"""Marian (Helsinki-NLP opus-mt): BART's post-norm layout with biases, without a norm after the embeddings and without
final norms. Its sinusoidal position tables are nn.Embedding parameters (max_position_embeddings x d_model per
stack, frozen: requires_grad false, but in sum(numel)): counted as learned positions of that size, which hold the
same parameters (a table lookup has no matmul). scale_embedding multiplies the token embeddings by sqrt(d_model):
elementwise, not counted."""

from __future__ import annotations

from ..hf import activation_of, refuse_if, show
from .mbart import COMPONENTS as MBART_COMPONENTS
from .registry import Family, register

# mBART's names without its embedding and final norms, with each stack's own token table when not shared
COMPONENTS = [MBART_COMPONENTS[0], (r"model\.(?P<stack>encoder|decoder)\.embed_tokens", "{stack}/embedding/token"),
              *(rule for rule in MBART_COMPONENTS[1:]
                if rule[1] not in ("{stack}/embedding/norm", "{stack}/final_norm"))]


def marian(cfg: dict, notes: list[str]) -> dict:
    for field in ("attention_heads", "ffn_dim"):
        refuse_if(cfg, f"decoder_{field}", cfg[f"encoder_{field}"] != cfg[f"decoder_{field}"],
                  f"encoder_{field}={show(cfg[f'encoder_{field}'])} differs; tfcalc gives both stacks one width")
    vocab, decoder_vocab = cfg["vocab_size"], cfg["decoder_vocab_size"]
    refuse_if(cfg, "decoder_vocab_size", decoder_vocab not in (None, vocab),
              f"it differs from vocab_size={vocab}: the decoder's table and the head would be that size, and tfcalc "
              "gives both stacks one vocabulary")
    refuse_if(cfg, "normalize_before", cfg.get("normalize_before") is True,
              "transformers' MarianModel is post-norm whatever this says; a pre-norm checkpoint is not what it builds")
    shared = cfg["share_encoder_decoder_embeddings"] is True
    refuse_if(cfg, "tie_word_embeddings", shared and cfg["tie_word_embeddings"] is not True,
              "with share_encoder_decoder_embeddings=true, transformers then unties the encoder's, the decoder's and "
              "the head's tables from the shared one (four tables)")
    positions = cfg["max_position_embeddings"]
    notes.append("sinusoidal positions: transformers stores them as a frozen max_position_embeddings x d_model table "
                 "per stack (in sum(numel)); counted as learned positions of that size")
    return dict(n_encoder_layers=cfg["encoder_layers"], n_layers=cfg["decoder_layers"], d_model=cfg["d_model"],
                n_heads=cfg["encoder_attention_heads"], d_ff=cfg["encoder_ffn_dim"], vocab_size=vocab,
                positions="learned", max_positions=positions, embedding_norm=False, norm="layernorm",
                norm_position="post", final_norm=False, bias=True, activation=activation_of(cfg, "activation_function"),
                shared_embeddings=shared, tie_embeddings=cfg["tie_word_embeddings"], context=positions)


# MarianConfig's defaults are BartConfig's but for these; its attribute_map is BartConfig's. normalize_before: written
# by the Marian NMT converter; transformers 5 neither declares nor reads it
register(Family("marian", like="bart", mapper=marian, components=COMPONENTS,
                defaults=dict(vocab_size=58101, decoder_vocab_size=None, share_encoder_decoder_embeddings=True),
                types=dict(decoder_vocab_size="size?", share_encoder_decoder_embeddings="bool",
                           normalize_before="bool?")))
