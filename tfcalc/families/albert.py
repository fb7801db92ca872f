"""ALBERT (Lan et al. 2019): BERT's post-norm encoder with a factorised embedding (embedding_size-wide token,
position and token-type tables and LayerNorm, then embedding_hidden_mapping_in: embedding_size -> hidden_size) and
blocks that share parameters: num_hidden_groups sets, block i running set int(i / (num_hidden_layers /
num_hidden_groups)). Parameters are counted once per set (sum(numel) of AlbertModel), FLOPs once per block.
AlbertModel has a pooler and no head (the masked-LM and sentence-order heads are AlbertForPreTraining's)."""

from __future__ import annotations

from ..hf import activation_of, refuse_if
from .registry import Family, register

DEFAULTS = dict(vocab_size=30000, embedding_size=128, hidden_size=4096, num_hidden_layers=12, num_hidden_groups=1,
                num_attention_heads=64, intermediate_size=16384, inner_group_num=1, hidden_act="gelu_new",
                max_position_embeddings=512, type_vocab_size=2)
TYPES = dict(vocab_size="size", embedding_size="size", hidden_size="size", num_hidden_layers="size",
             num_hidden_groups="size", num_attention_heads="size", intermediate_size="size", inner_group_num="int",
             hidden_act="str", max_position_embeddings="size", type_vocab_size="count")

_LAYER = r"encoder\.albert_layer_groups\.\d+\.albert_layers\.\d+\."
COMPONENTS = [
    (r"embeddings\.word_embeddings", "embedding/token"),
    (r"embeddings\.position_embeddings", "embedding/position"),
    (r"embeddings\.token_type_embeddings", "embedding/token_type"),
    (r"embeddings\.LayerNorm", "embedding/norm"),
    (r"encoder\.embedding_hidden_mapping_in", "embedding/projection"),
    (_LAYER + r"attention\.(query|key|value)", "attention/qkv"),
    (_LAYER + r"attention", "attention/core"),
    (_LAYER + r"attention\.dense", "attention/out"),
    (_LAYER + r"attention\.LayerNorm", "attention/norm"),
    (_LAYER + r"ffn", "mlp/up"),
    (_LAYER + r"ffn_output", "mlp/down"),
    (_LAYER + r"full_layer_layer_norm", "mlp/norm"),
    (r"pooler", "pooler"),
]


def albert(cfg: dict, notes: list[str]) -> dict:
    layers, groups = cfg["num_hidden_layers"], cfg["num_hidden_groups"]
    refuse_if(cfg, "inner_group_num", cfg["inner_group_num"] != 1, "tfcalc models one block per parameter set "
              "(inner_group_num=1, as every published ALBERT); more runs several distinct blocks per layer")
    refuse_if(cfg, "num_hidden_groups", groups > layers, f"more than num_hidden_layers={layers}: transformers "
              "builds groups no block runs")
    positions = cfg["max_position_embeddings"]
    if groups < layers:
        notes.append(f"num_hidden_groups={groups}: the {layers} blocks share {groups} set(s) of parameters "
                     "(counted once each); FLOPs are per block")
    return dict(n_layers=layers, d_model=cfg["hidden_size"], n_heads=cfg["num_attention_heads"],
                d_ff=cfg["intermediate_size"], vocab_size=cfg["vocab_size"], max_positions=positions,
                activation=activation_of(cfg, "hidden_act"), n_token_types=cfg["type_vocab_size"],
                embedding_norm=True, norm_position="post", final_norm=False, pooler=True, causal=False,
                lm_head=False, d_embedding=cfg["embedding_size"], shared_blocks=groups, context=positions)


register(Family("albert", DEFAULTS, TYPES, albert, COMPONENTS))
