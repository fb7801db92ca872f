"""DistilBERT: BERT's post-norm encoder without token types and without a pooler (DistilBertModel: word and position
tables, a norm after the embeddings, blocks of q_lin, k_lin, v_lin, out_lin with biases, sa_layer_norm, lin1, lin2,
output_layer_norm). sinusoidal_pos_embds=true fills the position table with fixed values, but it stays an
nn.Embedding parameter of max_position_embeddings x dim (in sum(numel)): counted as learned positions of that size,
which hold the same parameters (a lookup has no matmul)."""

from __future__ import annotations

from ..hf import activation_of
from .registry import Family, register

DEFAULTS = dict(vocab_size=30522, max_position_embeddings=512, sinusoidal_pos_embds=False, n_layers=6, n_heads=12,
                dim=768, hidden_dim=4 * 768, activation="gelu")
# DistilBertConfig's attribute_map: these common names set the field they stand for, over that field's own value
ALIASES = dict(hidden_size="dim", num_attention_heads="n_heads", num_hidden_layers="n_layers")
TYPES = dict(vocab_size="size", max_position_embeddings="size", sinusoidal_pos_embds="bool", n_layers="size",
             n_heads="size", dim="size", hidden_dim="size", activation="str")  # and the aliases

_LAYER = r"transformer\.layer\.\d+\."
COMPONENTS = [
    (r"embeddings\.word_embeddings", "embedding/token"),
    (r"embeddings\.position_embeddings", "embedding/position"),
    (r"embeddings\.LayerNorm", "embedding/norm"),
    (_LAYER + r"attention\.(q_lin|k_lin|v_lin)", "attention/qkv"),
    (_LAYER + r"attention", "attention/core"),
    (_LAYER + r"attention\.out_lin", "attention/out"),
    (_LAYER + r"sa_layer_norm", "attention/norm"),
    (_LAYER + r"ffn\.lin1", "mlp/up"),
    (_LAYER + r"ffn\.lin2", "mlp/down"),
    (_LAYER + r"output_layer_norm", "mlp/norm"),
]


def distilbert(cfg: dict, notes: list[str]) -> dict:
    positions = cfg["max_position_embeddings"]
    if cfg["sinusoidal_pos_embds"] is True:
        notes.append("sinusoidal_pos_embds=true: the fixed table is still an nn.Embedding parameter of "
                     "max_position_embeddings x dim (in sum(numel)); counted as learned positions of that size")
    return dict(n_layers=cfg["n_layers"], d_model=cfg["dim"], n_heads=cfg["n_heads"], d_ff=cfg["hidden_dim"],
                vocab_size=cfg["vocab_size"], max_positions=positions, activation=activation_of(cfg, "activation"),
                n_token_types=0, embedding_norm=True, norm_position="post", final_norm=False, pooler=False,
                causal=False, lm_head=False, context=positions)


register(Family("distilbert", DEFAULTS, TYPES, distilbert, COMPONENTS, aliases=ALIASES))
