"""OPT (OPTForCausalLM): learned positions with an offset of 2 rows, biases by enable_bias, pre-norm (with a final
norm) or post-norm (without one) by do_layer_norm_before, a tied head by default."""

from __future__ import annotations

from ..hf import activation_of, refuse_if
from .registry import Family, register

COMPONENTS = [
    (r"model\.decoder\.embed_tokens", "embedding/token"),
    (r"model\.decoder\.embed_positions", "embedding/position"),
    (r"model\.decoder\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (r"model\.decoder\.layers\.\d+\.self_attn", "attention/core"),
    (r"model\.decoder\.layers\.\d+\.self_attn\.out_proj", "attention/out"),
    (r"model\.decoder\.layers\.\d+\.self_attn_layer_norm", "attention/norm"),
    (r"model\.decoder\.layers\.\d+\.fc1", "mlp/up"),
    (r"model\.decoder\.layers\.\d+\.fc2", "mlp/down"),
    (r"model\.decoder\.layers\.\d+\.final_layer_norm", "mlp/norm"),
    (r"model\.decoder\.final_layer_norm", "final_norm"),
    (r"lm_head", "head"),
]


def opt(cfg: dict, notes: list[str]) -> dict:
    """OPT: learned positions with an offset of 2 rows, biases by enable_bias, pre-norm (with a final norm) or
    post-norm (without one) by do_layer_norm_before, a tied head by default."""
    hidden = cfg["hidden_size"]
    proj = cfg["word_embed_proj_dim"]
    refuse_if(cfg, "word_embed_proj_dim", proj is not None and proj != hidden,
              f"it differs from hidden_size={hidden}: transformers then builds the token table and head "
              "that wide, with project_in and project_out linears to and from hidden_size, a layout tfcalc does not "
              "have")
    refuse_if(cfg, "layer_norm_elementwise_affine", cfg["layer_norm_elementwise_affine"] is not True,
              "layer norms without weight or bias; tfcalc's layernorm has both")
    pre = cfg["do_layer_norm_before"] is True
    positions = cfg["max_position_embeddings"]
    notes.append("learned positions: max_position_embeddings + 2 rows (OPT's offset)")
    return dict(n_layers=cfg["num_hidden_layers"], d_model=hidden, n_heads=cfg["num_attention_heads"],
                d_ff=cfg["ffn_dim"], vocab_size=cfg["vocab_size"], positions="learned", max_positions=positions + 2,
                norm="layernorm", norm_position="pre" if pre else "post",
                final_norm=pre and cfg["_remove_final_layer_norm"] is not True, bias=cfg["enable_bias"],
                activation=activation_of(cfg, "activation_function"), tie_embeddings=cfg["tie_word_embeddings"],
                context=positions)


register(Family(
    "opt", mapper=opt, components=COMPONENTS,
    defaults=dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072, max_position_embeddings=2048,
                  do_layer_norm_before=True, _remove_final_layer_norm=False, word_embed_proj_dim=None,
                  num_attention_heads=12, activation_function="relu", enable_bias=True,
                  layer_norm_elementwise_affine=True, tie_word_embeddings=True),
    types=dict(vocab_size="size", hidden_size="size", num_hidden_layers="size", ffn_dim="size",
               max_position_embeddings="size", do_layer_norm_before="bool", _remove_final_layer_norm="bool",
               word_embed_proj_dim="size?", num_attention_heads="size", activation_function="str",
               enable_bias="bool", layer_norm_elementwise_affine="bool", tie_word_embeddings="bool")))
