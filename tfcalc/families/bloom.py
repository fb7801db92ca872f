"""BLOOM (BigScience): ALiBi positions (a fixed per-head linear bias on the scores, no parameters), a LayerNorm right
after the token embedding (word_embeddings_layernorm), pre-norm blocks of LayerNorms with weight and bias, a fused
query_key_value linear (D -> 3D, with bias), a dense output linear, an MLP D -> 4D -> D with biases and bloom_gelu
(the tanh approximation), a final LayerNorm and a head tied to the token table unless tie_word_embeddings=false.

BloomConfig's attribute_map: num_hidden_layers and num_attention_heads set n_layer and n_head over their own
values; n_embed (the published configs' name) sets hidden_size over its own value. The config has no maximum
length (ALiBi extrapolates): the default seq_len is 2048, BLOOM's training length."""

from __future__ import annotations

from ..hf import show
from .registry import Difference, Family, register

DEFAULTS = dict(vocab_size=250880, hidden_size=64, n_layer=2, n_head=8, apply_residual_connection_post_layernorm=False,
                pretraining_tp=1, slow_but_exact=False, tie_word_embeddings=True)
ALIASES = dict(num_hidden_layers="n_layer", num_attention_heads="n_head", n_embed="hidden_size")
TYPES = dict(vocab_size="size", hidden_size="size", n_layer="size", n_head="size",
             apply_residual_connection_post_layernorm="bool", pretraining_tp="int", slow_but_exact="bool",
             tie_word_embeddings="bool")  # and the aliases, of the kinds of the fields they set
TRAINING_LENGTH = 2048  # BLOOM's sequence length in training; the config does not say it

_LAYER = r"transformer\.h\.\d+\."
COMPONENTS = [
    (r"transformer\.word_embeddings", "embedding/token"),
    (r"transformer\.word_embeddings_layernorm", "embedding/norm"),
    (_LAYER + r"input_layernorm", "attention/norm"),
    (_LAYER + r"self_attention\.query_key_value", "attention/qkv"),
    (_LAYER + r"self_attention", "attention/core"),
    (_LAYER + r"self_attention\.dense", "attention/out"),
    (_LAYER + r"post_attention_layernorm", "mlp/norm"),
    (_LAYER + r"mlp\.dense_h_to_4h", "mlp/up"),
    (_LAYER + r"mlp\.dense_4h_to_h", "mlp/down"),
    (r"transformer\.ln_f", "final_norm"),
    (r"lm_head", "head"),
]


def bloom(cfg: dict, notes: list[str]) -> dict:
    if cfg["apply_residual_connection_post_layernorm"] is True:
        notes.append("apply_residual_connection_post_layernorm=true: the residual is the normed input (which tensor "
                     "is added: no parameters, no matmul)")
    if cfg["slow_but_exact"] is True and cfg["pretraining_tp"] > 1:
        notes.append(f"slow_but_exact=true, pretraining_tp={show(cfg['pretraining_tp'])}: transformers splits the "
                     "dense and dense_4h_to_h matmuls into slices that multiply the same weights (same FLOPs in total; "
                     "check --hf-config sees them in the attention and MLP modules, not in their linears)")
    notes.append(f"alibi positions: no parameters; the config has no maximum length, default seq_len "
                 f"{TRAINING_LENGTH} (BLOOM's training length)")
    return dict(n_layers=cfg["n_layer"], d_model=cfg["hidden_size"], n_heads=cfg["n_head"],
                vocab_size=cfg["vocab_size"], mlp="standard", activation="gelu_tanh", norm="layernorm",
                norm_position="pre", positions="alibi", embedding_norm=True, final_norm=True, bias=True,
                tie_embeddings=cfg["tie_word_embeddings"], context=TRAINING_LENGTH)


def sliced_matmuls(d: Difference) -> str | None:
    """slow_but_exact with pretraining_tp > 1: dense and dense_4h_to_h run as slices inside their parent modules."""
    tp = d.config.get("pretraining_tp", 1)
    if (d.config.get("slow_but_exact") is True and type(tp) is int and tp > 1 and d.figure == "forward"
            and d.component != "total"):
        return ("slow_but_exact with pretraining_tp > 1 runs dense and dense_4h_to_h as slices inside the attention "
                "and MLP modules, not in their linears (the total matches)")
    return None


register(Family("bloom", DEFAULTS, TYPES, bloom, COMPONENTS, aliases=ALIASES, known=sliced_matmuls))
