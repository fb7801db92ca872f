"""GPT-2 and GPTBigCode (SantaCoder, StarCoder): pre-norm LayerNorms, a fused c_attn (q, k, v) and c_proj with
biases, an MLP c_fc -> act -> c_proj with biases, learned positions, a final LayerNorm, a head tied to the token table
by default. GPTBigCode has one key/value head when multi_query is true.

Their config classes' attribute_map (GPT2_ALIASES; GPT-J's too) reads the common names hidden_size,
max_position_embeddings, num_attention_heads and num_hidden_layers into n_embd, n_positions, n_head and n_layer, over
those fields' own values.
"""

from __future__ import annotations

from ..hf import activation_of, refuse_if
from .registry import Family, register

GPT2_ALIASES = dict(hidden_size="n_embd", max_position_embeddings="n_positions", num_attention_heads="n_head",
                    num_hidden_layers="n_layer")

GPT2_COMPONENTS = [
    (r"transformer\.wte", "embedding/token"),
    (r"transformer\.wpe", "embedding/position"),
    (r"transformer\.h\.\d+\.ln_1", "attention/norm"),
    (r"transformer\.h\.\d+\.attn\.c_attn", "attention/qkv"),
    (r"transformer\.h\.\d+\.attn", "attention/core"),
    (r"transformer\.h\.\d+\.attn\.c_proj", "attention/out"),
    (r"transformer\.h\.\d+\.ln_2", "mlp/norm"),
    (r"transformer\.h\.\d+\.mlp\.c_fc", "mlp/up"),
    (r"transformer\.h\.\d+\.mlp\.c_proj", "mlp/down"),
    (r"transformer\.ln_f", "final_norm"),
    (r"lm_head", "head"),
]


def gpt2(cfg: dict, notes: list[str]) -> dict:
    refuse_if(cfg, "add_cross_attention", cfg["add_cross_attention"] is True, "cross-attention adds layers")
    n_embd = cfg["n_embd"]
    return dict(n_layers=cfg["n_layer"], d_model=n_embd, n_heads=cfg["n_head"],
                d_ff=cfg["n_inner"] if cfg["n_inner"] is not None else 4 * n_embd,
                vocab_size=cfg["vocab_size"], max_positions=cfg["n_positions"],
                activation=activation_of(cfg, "activation_function"), tie_embeddings=cfg["tie_word_embeddings"],
                context=cfg["n_positions"])


def gpt_bigcode(cfg: dict, notes: list[str]) -> dict:
    """GPTBigCode (SantaCoder, StarCoder): GPT-2's layout with one key/value head when multi_query is true."""
    fields = gpt2(cfg, notes)
    fields["n_kv_heads"] = 1 if cfg["multi_query"] is True else fields["n_heads"]
    return fields


register(
    Family("gpt2", mapper=gpt2, components=GPT2_COMPONENTS, aliases=GPT2_ALIASES,
           layer_keys={"n_layer": "n_layers"},  # or num_hidden_layers, when given
           defaults=dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                         activation_function="gelu_new", add_cross_attention=False, tie_word_embeddings=True),
           types=dict(vocab_size="size", n_positions="size", n_embd="size", n_layer="size", n_head="size",
                      n_inner="size?", activation_function="str", add_cross_attention="bool",
                      tie_word_embeddings="bool", hidden_size="size", max_position_embeddings="size",
                      num_attention_heads="size", num_hidden_layers="size")),
    Family("gpt_bigcode", like="gpt2", mapper=gpt_bigcode, types=dict(multi_query="bool"),
           defaults=dict(activation_function="gelu_pytorch_tanh", multi_query=True)),
)
