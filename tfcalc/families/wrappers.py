"""The vision-language (and audio-language) wrappers: a multimodal config whose generation class
(XForConditionalGeneration) is its language model, then one lm_head (nn.Linear(hidden, vocab, bias=False)); tfcalc
counts that language model and head, never the vision or audio tower nor the projector. One line of data per wrapper
(vLLM's registry style): where its text config is, which language-model types it reads there, and which flag ties
lm_head (transformers 5.24's configuration_*.py and modeling_*.py of each; tests/test_hf_wrappers.py holds every one
against its generation class).

Most wrap a language model tfcalc already reads (llama, mistral, ministral3, qwen2, deepseek_v3, lfm2, qwen3_5_text,
exaone4). Five have a text type of their own, built only inside the wrapper (`inner_only`: no generation class of
their own), each an existing layout under another name, checked against its modeling code:
- qwen2_vl_text, qwen2_5_vl_text: Qwen2's block (q, k, v biases, none on o; SwiGLU; RMSNorm), but the attention's
  heads are hidden_size // num_attention_heads wide (Qwen2VLAttention reads no head_dim) and the config has no tie
  flag of its own. Multimodal rotary (mrope) splits the rotary channels into three sections: no count changes.
- qwen3_vl_text: Qwen3's block (per-head q and k RMSNorms, attention_bias on q, k, v and o), no sliding window.
  Deepstack adds visual features to early blocks' hidden states: no parameters, not in a text forward.
- qwen3_vl_moe_text: Qwen3-MoE's block (router, stacked experts, no shared expert; dense blocks by mlp_only_layers
  and decoder_sparse_step), head_dim null meaning hidden_size // num_attention_heads, no sliding window.
- glm4v_text: GLM-4's sandwich-norm block with its fused gate_up_proj, but q, k and v always biased (no
  attention_bias field: a given one is not read, as there), heads hidden_size // num_attention_heads wide (no
  head_dim) and rotary on partial_rotary_factor of each head (rope_parameters', else the top-level one that
  transformers moves there, else all of it; GLM-4.1V's 0.5).
"""

from __future__ import annotations

from ..hf import DECODER_TYPES, decoder_fields, refuse_if
from .exaone4_5 import EXAONE4_5_WHOLE
from .glm4 import GLM4_COMPONENTS
from .glm4v import GLM4V_WHOLE, KIMI_K25_WHOLE
from .gpt_neox import partial_factor, partial_rotary
from .idefics3 import idefics3_whole
from .lfm2_vl import LFM2_VL_WHOLE
from .minicpmv import minicpmv_whole
from .llama import LLAMA_COMPONENTS, QWEN2_TYPES, qwen2, qwen3_moe
from .pixtral import LLAVA_PIXTRAL, LLAVA_VISION, MISTRAL3_WHOLE
from .qwen3_vl import QWEN3_VL_MOE_WHOLE, QWEN3_VL_WHOLE
from .registry import Family, Wrapper, register
from .voxtral import VOXTRAL_WHOLE

# ---- the text types built only inside a wrapper ------------------------------------------------------------------

NO_HEAD_DIM = {k: v for k, v in DECODER_TYPES.items() if k != "head_dim"}  # heads: hidden_size // num_attention_heads

# Qwen2VLTextConfig's (and Qwen2_5_VLTextConfig's) defaults
QWEN2_VL_TEXT_DEFAULTS = dict(vocab_size=152064, hidden_size=8192, intermediate_size=29568, num_hidden_layers=80,
                              num_attention_heads=64, num_key_value_heads=8, hidden_act="silu",
                              max_position_embeddings=32768, tie_word_embeddings=False, use_sliding_window=False,
                              sliding_window=4096, max_window_layers=80, layer_types=None)
# use_sliding_window and max_window_layers are declared `| None` (null: no window; a limit needed only with one)
QWEN2_VL_TEXT_TYPES = {k: v for k, v in QWEN2_TYPES.items() if k != "head_dim"} | dict(use_sliding_window="bool?",
                                                                                     max_window_layers="int?")

QWEN3_VL_TEXT_DEFAULTS = dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=32, head_dim=128, hidden_act="silu",
                              max_position_embeddings=128000, tie_word_embeddings=False, attention_bias=False)
QWEN3_VL_TEXT_TYPES = DECODER_TYPES | dict(head_dim="size", attention_bias="bool")

QWEN3_VL_MOE_TEXT_DEFAULTS = dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                                  num_attention_heads=16, num_key_value_heads=16, head_dim=None, hidden_act="silu",
                                  max_position_embeddings=128000, tie_word_embeddings=False, attention_bias=False,
                                  decoder_sparse_step=1, moe_intermediate_size=1408, num_experts_per_tok=4,
                                  num_experts=60, mlp_only_layers=None)
QWEN3_VL_MOE_TEXT_TYPES = DECODER_TYPES | dict(attention_bias="bool", decoder_sparse_step="size",
                                               moe_intermediate_size="size", num_experts_per_tok="size",
                                               num_experts="int", mlp_only_layers="integers?")

GLM4V_TEXT_DEFAULTS = dict(vocab_size=151552, hidden_size=4096, intermediate_size=13696, num_hidden_layers=40,
                           num_attention_heads=32, num_key_value_heads=2, hidden_act="silu",
                           max_position_embeddings=32768, tie_word_embeddings=False)


def qwen2_vl_text(cfg: dict, notes: list[str]) -> dict:
    window_on = cfg["use_sliding_window"] is True and cfg.get("sliding_window") is not None
    refuse_if(cfg, "max_window_layers", window_on and cfg.get("layer_types") is None
              and cfg["max_window_layers"] is None, "with use_sliding_window=true and no layer_types, "
              "Qwen2VLTextConfig compares each block's index with it (transformers fails on null)")
    return qwen2(cfg, notes)


def qwen3_vl_text(cfg: dict, notes: list[str]) -> dict:
    return decoder_fields(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False, qk_norm="head")


def qwen3_vl_moe_text(cfg: dict, notes: list[str]) -> dict:
    return qwen3_moe(cfg | {"use_sliding_window": False}, notes)  # its config sets sliding_window None


def glm4v_text(cfg: dict, notes: list[str]) -> dict:
    fields = decoder_fields(cfg, notes) | dict(bias=False, qkv_bias=True, mlp_bias=False, norm_position="sandwich")
    # the top-level factor moves into the rope parameters (null: none moves; all of each head rotates)
    given = cfg if cfg.get("partial_rotary_factor") is not None else {k: v for k, v in cfg.items()
                                                                       if k != "partial_rotary_factor"}
    where, factor = partial_factor(given, "partial_rotary_factor", 1.0)
    partial_rotary(cfg, fields, notes, cfg["hidden_size"] // cfg["num_attention_heads"], factor, where)
    return fields


register(
    Family("qwen2_vl_text", QWEN2_VL_TEXT_DEFAULTS, QWEN2_VL_TEXT_TYPES, qwen2_vl_text, LLAMA_COMPONENTS,
           inner_only=True),
    Family("qwen2_5_vl_text", like="qwen2_vl_text"),
    Family("qwen3_vl_text", QWEN3_VL_TEXT_DEFAULTS, QWEN3_VL_TEXT_TYPES, qwen3_vl_text, LLAMA_COMPONENTS,
           inner_only=True),
    Family("qwen3_vl_moe_text", QWEN3_VL_MOE_TEXT_DEFAULTS, QWEN3_VL_MOE_TEXT_TYPES, qwen3_vl_moe_text,
           LLAMA_COMPONENTS, aliases=dict(num_local_experts="num_experts"), inner_only=True),
    Family("glm4v_text", GLM4V_TEXT_DEFAULTS, NO_HEAD_DIM | dict(num_key_value_heads="size?",
                                                                 partial_rotary_factor="float?"), glm4v_text,
           GLM4_COMPONENTS, inner_only=True),
)

# ---- the wrappers: one line each -----------------------------------------------------------------------------------
# Mistral3Config's text config when none is given (its SubConfigSpec init_kwargs: Mistral Small 3.1's)
MISTRAL3_TEXT = {"attention_dropout": 0.0, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
                 "initializer_range": 0.02, "intermediate_size": 32768, "max_position_embeddings": 131072,
                 "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8,
                 "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0, "sliding_window": None, "use_cache": True,
                 "vocab_size": 131072}
# VoxtralConfig's, laid under any text_config given too (its __post_init__ merges them)
VOXTRAL_TEXT = {"vocab_size": 131072, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 30,
                "num_key_value_heads": 8, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "use_cache": True,
                "rope_theta": 100000000.0, "head_dim": 128}
TEXT = "text_config"


def qwen_vl_tokens(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """Qwen2-VL's and Qwen2.5-VL's images in the prompt: the vision tower's merger already outputs the language
    model's width, one token per spatial_merge_size^2 patches; nothing of its own joins them (no parameters)."""
    m = towers["vision"]["kinds"]["patch_merger"].get("merge", None) or towers["vision"]["kinds"]["patch_embedding"][
        "merge_size"]
    d_out, D = towers["vision"]["kinds"]["patch_merger"].get("d_out"), towers["text"]["d_model"]
    if d_out is not None and d_out != D:  # said, as Qwen3-VL's (qwen3_vl.qwen3_vl_tokens) says it
        notes.append(f"the vision tower's merger puts out {d_out} channels, not the language model's hidden_size={D}: "
                     "transformers builds this model, but its forward cannot put the merger's tokens in the prompt "
                     "(counted as if it could)")
    notes.append(f"{cfg.get('model_type', 'qwen2_vl')}: each image's patches merged {m}x{m} by the vision tower's "
                 "merger into tokens of the prompt")
    return [dict(name="image_tokens", source="vision", merge=m * m)]


def qwen_vl_parts(model, spec, workload) -> list:
    """Qwen2-VL's generation class traced part by part on meta (its forward reads image_grid_thw's values and the
    multimodal rotary's positions from the token ids): the vision tower on every image's patches and grid, the
    language model on the prompt's embeddings (the images' tokens among them, merged in place), lm_head on its output."""
    import torch

    from ..arch.towers import image_size, images
    from ..verify.hf_model import _patch_inputs

    sizes = spec.towers["vision"].sizes("patch_embedding")
    n = images(workload)
    parts = []
    if n:
        inputs = _patch_inputs(model.model.visual, n, sizes.channels, sizes.temporal_patch_size, sizes.patch_size,
                               image_size(spec, workload))
        parts.append(("model.visual", model.model.visual, inputs))
    B, N, D = workload.batch_size, workload.seq_len, spec.d_model
    embeds = torch.empty(B, N, D, device="meta")
    positions = torch.zeros(3, B, N, dtype=torch.long, device="meta")  # mrope's t, h, w positions
    parts.append(("model.language_model", model.model.language_model,
                  {"inputs_embeds": embeds, "position_ids": positions}))
    parts.append(("lm_head", model.lm_head, {"input": torch.empty(B, N, D, device="meta")}))
    return parts


def llava_projector(cfg: dict, towers: dict[str, dict], notes: list[str]) -> list[dict]:
    """LlavaMultiModalProjector over each image's tokens of one layer of the CLIP tower (vision_feature_layer; every
    block of the tower still runs), its class token dropped by the "default" strategy: linear_1 (vision width ->
    text width), the activation, linear_2 (text width -> text width), biases by multimodal_projector_bias. Its
    tokens take the image's places in the prompt."""
    from ..hf import activation_of, refuse_if
    from .pixtral import feature_layer

    feature_layer(cfg, towers)
    strategy = cfg["vision_feature_select_strategy"]
    refuse_if(cfg, "vision_feature_select_strategy", strategy not in ("default", "full"), "expected default or full")
    D_v, D_t = towers["vision"]["d_model"], towers["text"]["d_model"]
    return [dict(name="multi_modal_projector", source="vision", drop_class_token=strategy == "default",
                 widths=[D_v, D_t, D_t], bias=cfg["multimodal_projector_bias"],
                 activation=activation_of(cfg, "projector_hidden_act"))]


LLAVA_WHOLE = dict(towers={"vision": ("clip_vision_model", "vision_config", LLAVA_VISION)}, connectors=llava_projector,
                   prefixes={"text": r"model\.language_model\.", "vision": r"model\.vision_tower\.(?:vision_model\.)?"},
                   components=[(r"lm_head", "head"),
                               (r"model\.multi_modal_projector\.linear_1", "multi_modal_projector/linear_1"),
                               (r"model\.multi_modal_projector\.linear_2", "multi_modal_projector/linear_2")],
                   defaults=dict(vision_feature_layer=-2, vision_feature_select_strategy="default",
                                 projector_hidden_act="gelu", multimodal_projector_bias=True),
                   types=dict(vision_feature_layer="int", vision_feature_select_strategy="str",
                              projector_hidden_act="str", multimodal_projector_bias="bool"))


def qwen_vl_whole(vision_type: str) -> dict:
    """A Qwen-VL wrapper read whole: its vision tower, and where transformers' generation class keeps each part."""
    return dict(towers={"vision": (vision_type, "vision_config")}, connectors=qwen_vl_tokens,
                prefixes={"text": r"model\.language_model\.", "vision": r"model\.visual\."},
                components=[(r"lm_head", "head")], types=dict(model_type="str"), hf_trace=qwen_vl_parts)

register(
    # the class moves a pre-v5 text_config.tie_word_embeddings=true to the outer flag; with no text_config, the
    # language model's fields are the top-level ones
    # read whole: the vision tower (its merger included: tfcalc/families/qwen_vl.py) from vision_config
    Family("qwen2_vl", nested=("qwen2_vl_text", TEXT), wrapper=Wrapper(tie=False, tie_from_text=True, at_top=True),
           **qwen_vl_whole("qwen2_vl_vision")),
    Family("qwen2_5_vl", nested=("qwen2_5_vl_text", TEXT),
           wrapper=Wrapper(tie=False, tie_from_text=True, at_top=True), **qwen_vl_whole("qwen2_5_vl_vision")),
    # read whole: the vision tower (its merger and DeepStack mergers: tfcalc/families/qwen3_vl.py)
    Family("qwen3_vl", nested=("qwen3_vl_text", TEXT), wrapper=Wrapper(tie=False), **QWEN3_VL_WHOLE),
    Family("qwen3_vl_moe", nested=("qwen3_vl_moe_text", TEXT), wrapper=Wrapper(tie=False), **QWEN3_VL_MOE_WHOLE),
    Family("glm4v", nested=("glm4v_text", TEXT), wrapper=Wrapper(tie=False, tie_from_text=True), **GLM4V_WHOLE),
    # Mistral 3 (Mistral Small 3.1/3.2: mistral) and Ministral 3 / Devstral 2 (ministral3)
    Family("mistral3", nested=("mistral", TEXT),
           wrapper=Wrapper(text_types=("ministral3",), absent=MISTRAL3_TEXT, tie=True), **MISTRAL3_WHOLE),
    # read whole: the audio tower and the projector (tfcalc/families/voxtral.py)
    Family("voxtral", nested=("llama", TEXT), wrapper=Wrapper(absent=VOXTRAL_TEXT, under=True, untied=True),
           **VOXTRAL_WHOLE),
    # read whole: the SigLIP-like tower, pixel shuffle and modality projection (tfcalc/families/idefics3.py)
    Family("idefics3", nested=("llama", TEXT), wrapper=Wrapper(tie=False), **idefics3_whole("idefics3_vision")),
    Family("smolvlm", nested=("llama", TEXT), wrapper=Wrapper(tie=False), **idefics3_whole("smolvlm_vision")),
    # LLaVA 1.5 (llama), LLaVA-Interleave (qwen2), Pixtral 12B (mistral)
    Family("llava", nested=("llama", TEXT),
           wrapper=Wrapper(text_types=("mistral", "qwen2"), tie=False, tie_from_text=True),
           **(LLAVA_WHOLE | LLAVA_PIXTRAL)),
    Family("kimi_k25", nested=("deepseek_v3", TEXT), wrapper=Wrapper(renamed={"kimi_k2": "deepseek_v3"}, tie=True),
           **KIMI_K25_WHOLE),
    # read whole: SigLIP2's NaFlex tower and the pixel-unshuffle projector (tfcalc/families/lfm2_vl.py)
    Family("lfm2_vl", nested=("lfm2", TEXT), wrapper=Wrapper(tie=True, tie_aliases=("tie_embedding",)),
           **LFM2_VL_WHOLE),
    # MiniCPM-V 4.6, 4.7 and MiniCPM-OCR: Qwen3.5's language model; read whole: the vision tower with its window
    # merger, and the merger (tfcalc/families/minicpmv.py)
    Family("minicpmv4_6", nested=("qwen3_5_text", TEXT), wrapper=Wrapper(tie=False),
           **minicpmv_whole("minicpmv4_6_vision")),
    Family("minicpmv4_7", nested=("qwen3_5_text", TEXT), wrapper=Wrapper(tie=False),
           **minicpmv_whole("minicpmv4_7_vision")),
    Family("minicpm_ocr", nested=("qwen3_5_text", TEXT), wrapper=Wrapper(tie=True),
           **minicpmv_whole("minicpm_ocr_vision", image_size=None, mode="4x")),
    Family("exaone4_5", nested=("exaone4", TEXT),
           wrapper=Wrapper(renamed={"exaone4_5_text": "exaone4"}, type_required=True, tie=False), **EXAONE4_5_WHOLE),
)
