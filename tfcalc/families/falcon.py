"""Falcon (Falcon-7B, -40B, -180B, the RW models): transformers' FalconForCausalLM.

Every block: LayerNorms with biases; a fused query_key_value linear and the output dense [D, D]; an MLP
dense_h_to_4h [D, F] -> act -> dense_4h_to_h [F, D] (F = ffn_hidden_size, default 4 * hidden_size); biases on all
four linears by `bias`. Key/value heads: num_kv_heads with new_decoder_architecture (default num_attention_heads), else
1 with multi_query, else one per query head. The block:
- new_decoder_architecture (parallel_attn must be true): attention and MLP side by side, each through its own norm
  (ln_attn, ln_mlp: two_norms) with num_ln_in_parallel_attn 2 (or null), through one (input_layernorm: one_norm) with 1;
- otherwise parallel_attn: side by side through input_layernorm (one_norm); not parallel_attn: the MLP after
  attention (pre-norm, input_layernorm and post_attention_layernorm).
Positions: alibi (no parameters) or rotary over the whole head. A final LayerNorm ln_f; the head tied by default,
without a bias.

FalconConfig takes n_embed for hidden_size (its __post_init__). A null in one of the boolean switches (alibi,
new_decoder_architecture, multi_query, parallel_attn, bias) reads as false, as transformers' `if` does.

Not read, because they change no shape and no matmul: rope_theta and the rope scaling type (frequencies),
layer_norm_epsilon, the dropouts, initializer_range, use_cache, the token ids. The alibi bias and the scores'
scaling are elementwise. With new_decoder_architecture transformers broadcasts each key/value head to its query heads
before caching them (its cache holds num_attention_heads heads); tfcalc's KV cache holds num_kv_heads.
"""

from __future__ import annotations

from ..hf import activation_of, refuse_if
from .registry import Family, register

MODEL_TYPE = "falcon"

# FalconConfig's defaults (transformers 5) for the fields read here
DEFAULTS = dict(vocab_size=65024, hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
                num_ln_in_parallel_attn=None, num_kv_heads=None, alibi=False, new_decoder_architecture=False,
                multi_query=True, parallel_attn=True, bias=False, max_position_embeddings=2048, rope_parameters=None,
                ffn_hidden_size=None, activation="gelu", tie_word_embeddings=True)
TYPES = dict(vocab_size="size", hidden_size="size", num_hidden_layers="size", num_attention_heads="size",
             num_ln_in_parallel_attn="int?", num_kv_heads="size?", alibi="bool?", new_decoder_architecture="bool?",
             multi_query="bool?", parallel_attn="bool?", bias="bool?", max_position_embeddings="size",
             rope_parameters="object?", rope_scaling="object?", ffn_hidden_size="size?", activation="str?",
             tie_word_embeddings="bool", n_embed="size?")

COMPONENTS = [
    (r"transformer\.word_embeddings", "embedding/token"),
    (r"transformer\.h\.\d+\.(input_layernorm|ln_attn)", "attention/norm"),
    (r"transformer\.h\.\d+\.self_attention\.query_key_value", "attention/qkv"),
    (r"transformer\.h\.\d+\.self_attention", "attention/core"),
    (r"transformer\.h\.\d+\.self_attention\.dense", "attention/out"),
    (r"transformer\.h\.\d+\.(post_attention_layernorm|ln_mlp)", "mlp/norm"),
    (r"transformer\.h\.\d+\.mlp\.dense_h_to_4h", "mlp/up"),
    (r"transformer\.h\.\d+\.mlp\.dense_4h_to_h", "mlp/down"),
    (r"transformer\.ln_f", "final_norm"),
    (r"lm_head", "head"),
]


def falcon(cfg: dict, notes: list[str]) -> dict:
    D = cfg["hidden_size"] if cfg.get("n_embed") is None else cfg["n_embed"]
    if cfg.get("n_embed") is not None:
        notes.append(f"n_embed={cfg['n_embed']} read as hidden_size (FalconConfig sets hidden_size from it)")
    H = cfg["num_attention_heads"]
    refuse_if(cfg, "hidden_size", D % H != 0, f"hidden size {D} not divisible by num_attention_heads={H} "
              "(FalconAttention refuses it)")
    refuse_if(cfg, "hidden_size", cfg["alibi"] is not True and (D // H) % 2 == 1,
              f"an odd head ({D // H} channels) with rotary: transformers' rotary tables are {D // H + 1} wide and "
              "fail to broadcast")
    new, parallel = cfg["new_decoder_architecture"] is True, cfg["parallel_attn"] is True
    given_kv, lns = cfg["num_kv_heads"], cfg["num_ln_in_parallel_attn"]
    if new:
        refuse_if(cfg, "parallel_attn", not parallel, "with new_decoder_architecture=true transformers' block reads "
                  "norms it has not built (it runs attention and the MLP side by side only)")
        refuse_if(cfg, "num_ln_in_parallel_attn", lns not in (None, 1, 2), "with new_decoder_architecture=true "
                  "transformers' block has 1 or 2 norms (null: 2) and fails otherwise")
        kv = given_kv if given_kv is not None else H
        block = "one_norm" if lns == 1 else "two_norms"
    else:
        multi_query = cfg["multi_query"] is True
        refuse_if(cfg, "num_kv_heads", not multi_query and given_kv not in (None, H),
                  f"with multi_query and new_decoder_architecture false transformers builds num_attention_heads={H} "
                  "key/value heads and fails to reshape them into num_kv_heads")
        refuse_if(cfg, "num_ln_in_parallel_attn", parallel and lns == 2, "with new_decoder_architecture false "
                  "transformers builds ln_attn and ln_mlp but its block reads input_layernorm (it fails)")
        kv = 1 if multi_query else H
        block = "one_norm" if parallel else "none"
    fields = dict(n_layers=cfg["num_hidden_layers"], d_model=D, n_heads=H, n_kv_heads=kv,
                  d_ff=cfg["ffn_hidden_size"] if cfg["ffn_hidden_size"] is not None else 4 * D,
                  vocab_size=cfg["vocab_size"], mlp="standard", activation=activation_of(cfg, "activation"),
                  norm="layernorm", norm_position="pre", parallel_block=block,
                  positions="alibi" if cfg["alibi"] is True else "rotary", bias=cfg["bias"] is True,
                  tie_embeddings=cfg["tie_word_embeddings"], context=cfg["max_position_embeddings"])
    if new and kv < H:
        notes.append(f"new_decoder_architecture: transformers caches each of the {kv} key/value heads broadcast to "
                     f"its query heads ({H} heads); the KV cache here holds {kv}")
    return fields


register(Family(MODEL_TYPE, DEFAULTS, TYPES, falcon, COMPONENTS))
