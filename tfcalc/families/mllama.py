"""Llama 3.2 Vision's language model (transformers' MllamaForCausalLM, model_type `mllama_text_model`), read alone or
from a multimodal `mllama` config's text_config; the `mllama` config is read whole (MllamaForConditionalGeneration:
its vision tower and multimodal projector, tfcalc/families/mllama_vision.py).

A llama decoder (pre-norm RMSNorm, grouped-query attention, SwiGLU, rotary) in which the blocks listed in
cross_attention_layers are gated cross-attention blocks (MllamaCrossAttentionDecoderLayer) with no self-attention:
queries from the text, keys and values from the projected vision states (hidden_size wide), an RMSNorm over each query
and key head (q_norm, k_norm [head_dim]), o_proj, a tanh gate [1] on its output (cross_attn_attn_gate), then the MLP
with a tanh gate [1] of its own (cross_attn_mlp_gate): tfcalc's `cross_attention` kind with its sizes qk_norm and
gated, in a block_pattern. The token table has vocab_size + 8 rows (embedding_rows); the head vocab_size. Every head
width is hidden_size / num_attention_heads (MllamaTextConfig declares no head_dim).

Read alone (or --tower text), the cross-attended tokens per sequence (src_len; kinds.cross_attention.keys by default)
are what reaches cross_attention_states: one image's max_num_tiles tiles of (image_size / patch_size)^2 + 1 tokens each
(MllamaVisionModel's num_patches, its padding removed), read from the multimodal config's vision_config
(MllamaVisionConfig's defaults when there is none: 4 * (32^2 + 1) = 4,100); read whole, the step's images decide them
(tfcalc.arch.towers.text_workload). In a prefill the cross-attention blocks
project them to keys and values once and cache them (transformers' cache layers for those blocks hold the vision
tokens, not the text's); in decode they read the cache.
"""

from __future__ import annotations

from ..hf import DECODER_TYPES, PATTERN_LIMIT, decoder_fields, refuse_if, shortest_cycle, show
from .llama import LLAMA_COMPONENTS
from .mllama_vision import MLLAMA_WHOLE
from .registry import Family, register

EXTRA_ROWS = 8  # MllamaTextModel.embed_tokens: nn.Embedding(vocab_size + 8, hidden_size)
# MllamaVisionConfig's defaults for what sizes the vision tokens
VISION_DEFAULTS = dict(image_size=448, patch_size=14, max_num_tiles=4)
SELF, CROSS = "attention+mlp", "cross_attention+mlp"

_LAYER = r"model\.layers\.\d+\."
COMPONENTS = [
    (_LAYER + r"cross_attn\.q_proj", "cross_attention/q"),
    (_LAYER + r"cross_attn\.(k_proj|v_proj)", "cross_attention/kv"),
    (_LAYER + r"cross_attn\.q_norm", "cross_attention/q_norm"),
    (_LAYER + r"cross_attn\.k_norm", "cross_attention/k_norm"),
    (_LAYER + r"cross_attn", "cross_attention/core"),
    (_LAYER + r"cross_attn\.o_proj", "cross_attention/out"),
    (_LAYER + r"cross_attn_attn_gate", "cross_attention/gate"),
    (_LAYER + r"cross_attn_mlp_gate", "cross_attention/mlp_gate"),
    # one input_layernorm before either block's first sublayer: compared with the sum of both (hf_model.fused_parts)
    (_LAYER + r"input_layernorm", "attention/norm+cross_attention/norm"),
    *LLAMA_COMPONENTS,
]


def vision_tokens(cfg: dict, notes: list[str]) -> int:
    """Vision tokens per image reaching cross_attention_states: max_num_tiles * ((image_size // patch_size)^2 + 1),
    from the multimodal config's vision_config (carried in by tfcalc.hf._nested), else MllamaVisionConfig's
    defaults."""
    vision = cfg.get("vision_config")
    given = vision if isinstance(vision, dict) else {}
    sizes = {}
    for key, default in VISION_DEFAULTS.items():
        value = given.get(key, default)  # one side: MllamaVisionModel computes (image_size // patch_size) ** 2
        refuse_if({f"vision_config.{key}": value}, f"vision_config.{key}",
                  type(value) is not int or value <= 0, "expected a positive integer")
        sizes[key] = value
    per_tile = (sizes["image_size"] // sizes["patch_size"]) ** 2 + 1
    tokens = sizes["max_num_tiles"] * per_tile
    where = "vision_config" if vision is not None else "MllamaVisionConfig's defaults (no vision_config)"
    notes.append(f"cross-attention keys (src_len default): one image's {sizes['max_num_tiles']} tiles of "
                 f"({sizes['image_size']} // {sizes['patch_size']})^2 + 1 = {per_tile:,} vision tokens = {tokens:,}, "
                 f"from {where}")
    return tokens


def mllama_text(cfg: dict, notes: list[str]) -> dict:
    """Llama 3.2 Vision's language model: the llama decoder with gated cross-attention blocks at
    cross_attention_layers, a token table of vocab_size + 8 rows, an untied head."""
    L = cfg["num_hidden_layers"]
    listed = cfg["cross_attention_layers"]
    if listed is None:  # MllamaTextConfig's default
        listed = [3, 8, 13, 18, 23, 28, 33, 38]
    refuse_if(cfg, "cross_attention_layers", any(i < 0 for i in listed),
              "a negative index is no block (transformers builds block i when i is in the list)")
    beyond = sorted({i for i in listed if i >= L})
    if beyond:
        notes.append(f"cross_attention_layers {', '.join(map(str, beyond))} >= num_hidden_layers={L}: no such block "
                     "(transformers builds none)")
    cross = {i for i in listed if i < L}
    refuse_if(cfg, "num_hidden_layers", bool(cross) and L > PATTERN_LIMIT,
              f"tfcalc writes the cross-attention blocks per block, for at most {PATTERN_LIMIT:,} blocks")
    if cfg.get("head_dim") is not None:
        notes.append(f"head_dim={show(cfg['head_dim'])} not read: Mllama's attention heads are hidden_size / "
                     "num_attention_heads wide")
    fields = decoder_fields({k: v for k, v in cfg.items() if k != "head_dim"}, notes)
    if cfg["tie_word_embeddings"] is True:
        notes.append("tie_word_embeddings=True not read: transformers' Mllama classes tie no weights (the head "
                     "[vocab_size, hidden_size] and the token table [vocab_size + 8, hidden_size] are their own)")
    fields |= dict(tie_embeddings=False, embedding_rows=cfg["vocab_size"] + EXTRA_ROWS)
    if cross:
        fields["block_pattern"] = shortest_cycle([CROSS if i in cross else SELF for i in range(L)])
        fields["kinds"] = {"cross_attention": dict(keys=vision_tokens(cfg, notes), qk_norm=True, gated=True)}
        notes.append(f"{len(cross)} of {L} blocks gated cross-attention (cross_attention_layers), no self-attention "
                     "in them")
    else:
        notes.append(f"no cross_attention_layers below num_hidden_layers={L}: every block self-attention")
    return fields


register(
    Family("mllama_text_model", mapper=mllama_text, components=COMPONENTS,
           # MllamaTextConfig's defaults; num_key_value_heads is an int there (no null)
           defaults=dict(vocab_size=128256, hidden_size=4096, hidden_act="silu", num_hidden_layers=40,
                         num_attention_heads=32, num_key_value_heads=8, intermediate_size=14_336,
                         max_position_embeddings=131_072, tie_word_embeddings=False, cross_attention_layers=None),
           types=DECODER_TYPES | dict(num_key_value_heads="size", cross_attention_layers="integers?",
                                      vision_config="object?")),
    # the multimodal config read whole: its language model from text_config, the vision tower from vision_config
    # and the multimodal projector (tfcalc/families/mllama_vision.py)
    Family("mllama", nested=("mllama_text_model", "text_config"), **MLLAMA_WHOLE),
)
