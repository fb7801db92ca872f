"""GPT-J (EleutherAI GPT-J-6B): transformers' GPTJForCausalLM.

Every block is parallel with one norm (parallel_block one_norm): x + attn(ln_1(x)) + mlp(ln_1(x)), ln_1 a LayerNorm
with a bias. Attention: q_proj, k_proj, v_proj and out_proj [D, D] without biases; rotary (GPT-J's interleaved form,
rotate_every_two: the same channels, the same cost) on the first rotary_dim channels of each head. MLP: fc_in [D, F]
-> act -> fc_out [F, D], with biases (F = n_inner, default 4 * n_embd). A final LayerNorm ln_f; an untied lm_head with
a bias [V] (head_bias).

GPTJConfig's attribute_map: hidden_size, num_attention_heads, num_hidden_layers and max_position_embeddings set
n_embd, n_head, n_layer and n_positions, over their own values (as GPT-2's).

Not read, because they change no shape and no matmul: layer_norm_epsilon, the dropouts, initializer_range,
use_cache, the token ids. The scores' division by sqrt(head_dim) is elementwise.
"""

from __future__ import annotations

from ..hf import activation_of, refuse_if
from .gpt2 import GPT2_ALIASES
from .registry import Family, register

MODEL_TYPE = "gptj"

# GPTJConfig's defaults (transformers 5) for the fields read here
DEFAULTS = dict(vocab_size=50400, n_positions=2048, n_embd=4096, n_layer=28, n_head=16, rotary_dim=64, n_inner=None,
                activation_function="gelu_new", tie_word_embeddings=False)
TYPES = dict(vocab_size="size", n_positions="size", n_embd="size", n_layer="size", n_head="size", rotary_dim="int",
             n_inner="size?", activation_function="str", tie_word_embeddings="bool", hidden_size="size",
             max_position_embeddings="size", num_attention_heads="size", num_hidden_layers="size")

COMPONENTS = [
    (r"transformer\.wte", "embedding/token"),
    (r"transformer\.h\.\d+\.ln_1", "attention/norm"),
    (r"transformer\.h\.\d+\.attn\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (r"transformer\.h\.\d+\.attn", "attention/core"),
    (r"transformer\.h\.\d+\.attn\.out_proj", "attention/out"),
    (r"transformer\.h\.\d+\.mlp\.fc_in", "mlp/up"),
    (r"transformer\.h\.\d+\.mlp\.fc_out", "mlp/down"),
    (r"transformer\.ln_f", "final_norm"),
    (r"lm_head", "head"),
]


def gptj(cfg: dict, notes: list[str]) -> dict:
    D, H = cfg["n_embd"], cfg["n_head"]
    refuse_if(cfg, "n_embd", D % H != 0, f"not divisible by n_head={H} (GPTJAttention refuses it)")
    head_dim, rotary = D // H, cfg["rotary_dim"]
    refuse_if(cfg, "rotary_dim", rotary < 1 or rotary % 2 or rotary > head_dim,
              f"transformers' GPT-J rotates an even number of channels from 2 to the head's {head_dim} (its "
              "sin/cos tables are rotary_dim wide, n_embd wide for 0, and fail to broadcast otherwise)")
    refuse_if(cfg, "tie_word_embeddings", cfg["tie_word_embeddings"] is True,
              "transformers ties lm_head's weight to the token table and keeps lm_head's bias [V]; tfcalc's head "
              "bias is for an untied head")
    fields = dict(n_layers=cfg["n_layer"], d_model=D, n_heads=H,
                  d_ff=cfg["n_inner"] if cfg["n_inner"] is not None else 4 * D, vocab_size=cfg["vocab_size"],
                  mlp="standard", activation=activation_of(cfg, "activation_function"), norm="layernorm",
                  norm_position="pre", parallel_block="one_norm", positions="rotary", bias=False, mlp_bias=True,
                  tie_embeddings=False, head_bias=True, context=cfg["n_positions"])
    fields["rotary_dim"] = rotary  # always given: a spec read from a config keeps it when the head changes
    if rotary < head_dim:
        notes.append(f"partial rotary: {rotary} of {head_dim} channels per head (rotary_dim)")
    return fields


register(Family(MODEL_TYPE, DEFAULTS, TYPES, gptj, COMPONENTS, aliases=GPT2_ALIASES))
