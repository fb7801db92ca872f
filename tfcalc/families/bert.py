"""BERT, RoBERTa and XLM-RoBERTa (BertModel, RobertaModel, XLMRobertaModel, with their poolers): post-norm encoders
with an embedding LayerNorm, token-type embeddings, learned positions, biases, no LM head; bidirectional unless
is_decoder. RoBERTa's position ids start at padding_idx + 1.
"""

from __future__ import annotations

from ..hf import activation_of, refuse_if
from .registry import Family, register

BERT_COMPONENTS = [
    (r"embeddings\.word_embeddings", "embedding/token"),
    (r"embeddings\.position_embeddings", "embedding/position"),
    (r"embeddings\.token_type_embeddings", "embedding/token_type"),
    (r"embeddings\.LayerNorm", "embedding/norm"),
    (r"encoder\.layer\.\d+\.attention\.self\.(query|key|value)", "attention/qkv"),
    (r"encoder\.layer\.\d+\.attention\.self", "attention/core"),
    (r"encoder\.layer\.\d+\.attention\.output\.dense", "attention/out"),
    (r"encoder\.layer\.\d+\.attention\.output\.LayerNorm", "attention/norm"),
    (r"encoder\.layer\.\d+\.intermediate\.dense", "mlp/up"),
    (r"encoder\.layer\.\d+\.output\.dense", "mlp/down"),
    (r"encoder\.layer\.\d+\.output\.LayerNorm", "mlp/norm"),
    (r"pooler\.dense", "pooler"),
]


def bert(cfg: dict, notes: list[str]) -> dict:
    # transformers 4 read this field (transformers 5 dropped it and supports absolute positions alone); null is
    # absolute in both
    refuse_if(cfg, "position_embedding_type", cfg.get("position_embedding_type") not in ("absolute", None),
              "relative position embeddings add a distance table")
    refuse_if(cfg, "add_cross_attention", cfg["add_cross_attention"] is True, "cross-attention adds layers")
    positions = cfg["max_position_embeddings"]
    return dict(n_layers=cfg["num_hidden_layers"], d_model=cfg["hidden_size"],
                n_heads=cfg["num_attention_heads"], d_ff=cfg["intermediate_size"],
                vocab_size=cfg["vocab_size"], max_positions=positions, activation=activation_of(cfg, "hidden_act"),
                n_token_types=cfg["type_vocab_size"], embedding_norm=True, norm_position="post",
                final_norm=False, pooler=True, causal=cfg["is_decoder"], lm_head=False, context=positions)


def roberta(cfg: dict, notes: list[str]) -> dict:
    """RoBERTa and XLM-RoBERTa: BERT's layout. Position ids start at padding_idx + 1 (2 with pad_token_id=1), so
    max_position_embeddings (514 in the published configs) is the table's rows and 2 more than the longest input."""
    fields = bert(cfg, notes)
    fields["context"] = max(1, cfg["max_position_embeddings"] - 2)
    notes.append("learned positions: max_position_embeddings rows, numbered from padding_idx + 1 (default seq_len "
                 "max_position_embeddings - 2)")
    return fields


register(
    Family("bert", mapper=bert, components=BERT_COMPONENTS,
           defaults=dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2,
                         is_decoder=False, add_cross_attention=False),
           types=dict(vocab_size="size", hidden_size="size", num_hidden_layers="size", num_attention_heads="size",
                      intermediate_size="size", hidden_act="str", max_position_embeddings="size",
                      type_vocab_size="count", is_decoder="bool", add_cross_attention="bool",
                      position_embedding_type="str?")),
    Family("roberta", like="bert", mapper=roberta, defaults=dict(vocab_size=50265)),
    Family("xlm-roberta", like="roberta", defaults=dict(vocab_size=30522)),
)
