"""Ministral 3 (ministral3, Ministral3ForCausalLM): Mistral's layout and module names (pre-norm RMSNorm, GQA, SwiGLU
without biases, rotary), with its own defaults (head_dim 128 and num_key_value_heads 8, integers, not null; vocab
131,072, 34 layers, context 262,144, no window).

The sliding_window, when given, is in every block (Ministral3Model builds a sliding mask whenever it is set);
Ministral3Config does not read layer_types. Its yarn rope_parameters and the query's llama-4 position scale
(`llama_4_scaling_beta`) are elementwise: no parameters, no matmul.
"""

from __future__ import annotations

from .registry import Family, register

register(Family("ministral3", like="mistral",
                defaults={"vocab_size": 131072, "intermediate_size": 14336, "num_hidden_layers": 34,
                          "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                          "max_position_embeddings": 262144, "tie_word_embeddings": False, "sliding_window": None},
                # Ministral3Config declares both int (strict): null is refused, as transformers refuses it
                types={"head_dim": "size", "num_key_value_heads": "size"}))
