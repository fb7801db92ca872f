"""Configs as transformers writes and reads them: for every supported model_type, a config written by transformers'
own `save_pretrained` (the class defaults; a small config; that config with one field the family reads changed, or
set to null) counts exactly what the class builds from it (`AutoConfig.from_pretrained`, sum(p.numel()) on the meta
device, tied weights once), or is refused by name where this file expects it. Every attribute_map alias, written in
a config as a user types it, is read as transformers reads it."""

import json
import warnings

import pytest
import torch
import transformers
from transformers import CONFIG_MAPPING

from tfcalc import TfcalcError, Workload, count
from tfcalc.arch.towers import select
from tfcalc.families.registry import REGISTRY, family, model_types
from tfcalc.hf import read_hf_config
from tfcalc.verify import hf_model

# The hybrids' families: their own test files hold them against transformers (the small config here cannot hold
# their mixers' sizes)
ELSEWHERE = {"mamba2", "nemotron_h", "bamba", "granitemoehybrid", "mamba", "jamba", "qwen3_next", "qwen3_5",
             "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text", "lfm2", "lfm2_moe", "falcon_h1", "minicpmv4_6",
             "minicpmv4_7", "minicpm_ocr",  # (the last three: Qwen3.5's language model, tests/test_hf_wrappers.py)
             # the whole dual encoders: tests/test_towers_whole.py holds them against CLIPModel and SiglipModel
             "clip", "siglip",
             # transformers 5.24 exports no MiniCPMV4_6VisionModel (built only inside MiniCPMV4_6Model; 4.7's and
             # OCR's towers are exported, and held here): tests/test_minicpmv_whole.py holds it in the whole class
             "minicpmv4_6_vision"}
TYPES = [t for t in model_types() if t not in ELSEWHERE]
# where a multimodal generation class keeps its language model and head (every other tower is left out);
# Llama4ForConditionalGeneration keeps a whole Llama4ForCausalLM, head and all, as language_model
LANGUAGE_MODEL = ("model.language_model.", "model.text_model.", "lm_head.", "language_model.")

# Small sizes under each config class's own names (only the names a family reads are given)
SMALL = dict(
    num_hidden_layers=2, n_layer=2, n_layers=2, num_layers=2, num_decoder_layers=2, encoder_layers=2,
    decoder_layers=2, hidden_size=64, n_embd=64, d_model=64, dim=64, num_attention_heads=4, n_head=4, n_heads=4,
    num_heads=4, encoder_attention_heads=4, decoder_attention_heads=4, num_key_value_heads=2, num_kv_heads=2,
    head_dim=16, d_kv=16, intermediate_size=96, n_inner=96, ffn_dim=96, d_ff=96, hidden_dim=96, encoder_ffn_dim=96,
    decoder_ffn_dim=96, ffn_hidden_size=96, max_position_embeddings=64, n_positions=64, max_seq_len=64,
    vocab_size=128, decoder_vocab_size=128, num_experts=4, num_local_experts=4, n_routed_experts=4,
    num_experts_per_tok=2, top_k_experts=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
    kv_lora_rank=16, q_lora_rank=32, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, n_group=2, topk_group=1,
    embedding_size=32, word_embed_proj_dim=64, sliding_window=16, global_head_dim=32,
    hidden_size_per_layer_input=8, vocab_size_per_layer_input=128, first_k_dense_replace=1,
)


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()
        try:
            return fn(*args, **kwargs)
        finally:
            transformers.logging.set_verbosity(verbosity)


def saved(folder, model_type: str, **fields) -> dict:
    """The config.json transformers' own config class writes for `fields` (save_pretrained), as a dict."""
    quiet(CONFIG_MAPPING[model_type](**fields).save_pretrained, folder)
    return json.loads((folder / "config.json").read_text())


def write(folder, config: dict):
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def multimodal(config) -> bool:
    """Whether transformers' `config` is a multimodal config whose language model tfcalc reads from a field."""
    return config.model_type in REGISTRY and family(config.model_type).nested is not None


def built(folder, lm_head: bool, encoder_decoder: bool) -> int:
    """transformers' sum(p.numel()) of the class it builds from the config in `folder` (read with from_pretrained),
    on meta, tied weights once; of a multimodal config its language model only (of its generation class, as check
    --hf-config builds it: AutoModelForCausalLM maps llama4 to Llama4ForCausalLM, which cannot take a Llama4Config)."""
    def build():
        config = transformers.AutoConfig.from_pretrained(folder)
        cls = hf_model._model_class(transformers, config, lm_head, encoder_decoder, multimodal=multimodal(config))
        with torch.device("meta"):
            return cls._from_config(config)

    model = quiet(build)
    nested = family(model.config.model_type).nested if model.config.model_type in REGISTRY else None
    return sum(p.numel() for name, p in model.named_parameters() if not nested or name.startswith(LANGUAGE_MODEL))


def counted(folder) -> tuple[int, object]:
    """tfcalc's count of the config in `folder`; of a whole multimodal config its text tower (the language model),
    as `built` counts transformers' (tests/test_towers_whole.py holds the whole ones)."""
    spec = read_hf_config(folder).spec
    spec = select(spec, "text") if spec.towers else spec
    return count(spec).params.total, spec


# Token ids inside the small vocabulary (a pad id outside it fails the embedding's padding_idx check)
TOKENS = dict(pad_token_id=0, bos_token_id=0, eos_token_id=0)
# Where a family's small config needs other sizes than SMALL's
SMALL_FOR = {
    "deepseek_v2": dict(num_key_value_heads=4, num_experts_per_tok=2),  # MLA: a key and a value per head
    "deepseek_v3": dict(num_key_value_heads=4, head_dim=None),  # (a head_dim beside qk_rope_head_dim: no forward)
    "deepseek_v32": dict(num_key_value_heads=4),
    "gptj": dict(rotary_dim=8),  # at most the head's 16 channels

    "gpt_neox": dict(head_dim=None),  # GPTNeoXAttention's heads are hidden_size // heads wide
    "falcon": dict(num_kv_heads=None),
    # outputs of the 2 local blocks; aspect ratios of its own (with the default ones max_num_tiles must be 4)
    "mllama_vision_model": dict(intermediate_layers_indices=[0, 1], supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]]),
    # the multimodal rotary's sections (mrope_section) fill half of a 16-channel head
    **{t: dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
       for t in ("qwen2_vl_text", "qwen2_5_vl_text", "glm4v_text")},
    # Llama 4's vision adapter reads the 2 x 2 pixel-shuffled tokens: intermediate_size is 4 x hidden_size
    "llama4_vision_model": dict(intermediate_size=256),
    # MiniCPM-V's window merger runs after block insert_layer_id (6 by default): one of the 2 blocks
    **{t: dict(insert_layer_id=0) for t in ("minicpmv4_6_vision", "minicpmv4_7_vision", "minicpm_ocr_vision")},
}
# A multimodal config's other fields beside its text_config: a SigLIP tower whose 16 x 16 patch grid Gemma 3's projector
# pools into its 256 tokens (Gemma3Config's default vision tower, 224 / 16, cannot be: see DEFAULTS_REFUSED)
OUTER_FOR = {"gemma3": dict(vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                               num_attention_heads=2, image_size=64, patch_size=4,
                                               vision_use_head=False)),
             # Llama4VisionConfig's defaults cannot run (see DEFAULTS_REFUSED): a tower whose adapter can
             "llama4": dict(vision_config=dict(hidden_size=32, intermediate_size=128, num_hidden_layers=1,
                                               num_attention_heads=2, image_size=32, patch_size=8,
                                               projector_input_dim=24, projector_output_dim=24,
                                               vision_output_dim=24))}
ACTIVATION_FIELDS = ("hidden_act", "hidden_activation", "activation_function", "activation")


def small(model_type: str) -> dict:
    """The class's keyword arguments for a small model: SMALL under the names the family reads (its own, not its
    aliases), a multimodal config's in its text_config."""
    f = family(model_type)
    inner_type = f.nested[0] if f.nested else model_type
    inner = family(inner_type)
    own = {k: v for k, v in SMALL.items() if k in inner.types and k not in inner.aliases}
    own = {k: v for k, v in (own | SMALL_FOR.get(inner_type, {})).items() if v is not None} | TOKENS
    return ({f.nested[1]: own | {"model_type": inner_type}, **OUTER_FOR.get(model_type, {})}  # (EXAONE 4.5 needs
            if f.nested else own)  # its type)


CHANGES = {"n_embed": 128}  # Falcon's n_embed, read over hidden_size: a width the heads divide


def changed(key: str, kind: str, value):
    """Another value of the field, of its kind, that the class builds from; None where none is tried."""
    if key in CHANGES:
        return CHANGES[key]
    if kind.startswith("bool"):
        return value is not True
    if kind.rstrip("?") in ("size", "int", "count"):
        return 2 if value is None else 2 * value if isinstance(value, int) and value else 1
    if key in ACTIVATION_FIELDS:
        return "relu" if value != "relu" else "gelu"
    if key == "feed_forward_proj":
        return "gated-gelu"
    return None


def compare(folder) -> tuple[int, int] | str:
    """(tfcalc's count, transformers') of the config in `folder`, or tfcalc's refusal (its message, less the path)."""
    try:
        ours, spec = counted(folder)
    except TfcalcError as e:
        return str(e).partition(": ")[2]
    return ours, built(folder, spec.lm_head, spec.is_encoder_decoder)


# Class defaults tfcalc refuses by name (transformers builds the parameters but cannot run the model)
DEFAULTS_REFUSED = {"deepseek_v2": "num_experts_per_tok=None is not modelled",  # DeepseekV2Config's default top-k
                    # Gemma3Config's default vision tower (SiglipVisionConfig: 224 / 16 = a 14 x 14 grid) cannot be
                    # pooled into its default 256 tokens (transformers' projector builds an AvgPool2d of kernel 0)
                    "gemma3": "mm_tokens_per_image=256 is not modelled with a patch grid of 14 x 14",
                    # Llama4VisionConfig's default hidden_size 768, 2 x 2 pixel-shuffled, is 3,072 wide; its adapter's
                    # fc1 reads intermediate_size 5,632 (and the projector vision_output_dim 7,680 of its 4,096)
                    "llama4_vision_model": "intermediate_size=5632 is not modelled",
                    "llama4": "vision_config.intermediate_size=5632 is not modelled"}


@pytest.mark.parametrize("model_type", TYPES)
def test_the_class_defaults_as_saved_count_what_the_class_builds(tmp_path, model_type):
    result = compare(write(tmp_path, saved(tmp_path, model_type)))
    if model_type in DEFAULTS_REFUSED:
        assert DEFAULTS_REFUSED[model_type] in result, result
    else:
        ours, theirs = result
        assert ours == theirs


# (model_type, field changed) -> the field tfcalc's refusal names: a layout tfcalc does not model, refused by name
# (each with its reason in docs/hf-configs.md); the other changes are counted exactly
REFUSED = {
    **{(t, "add_cross_attention"): "add_cross_attention" for t in ("gpt2", "gpt_bigcode", "bert", "roberta",
                                                                     "xlm-roberta")},
    ("albert", "inner_group_num"): "inner_group_num",
    **{(t, f"{stack}_{size}"): f"{other}_{size}" for t in ("bart", "mbart", "marian", "whisper")
       for size in ("attention_heads", "ffn_dim") for stack, other in (("encoder", "decoder"), ("decoder", "decoder"))},
    **{(t, "tie_word_embeddings"): "tie_word_embeddings" for t in ("bart", "mbart", "marian", "gptj", "phi")},
    ("marian", "decoder_vocab_size"): "decoder_vocab_size", ("marian", "vocab_size"): "decoder_vocab_size",
    ("marian", "normalize_before"): "normalize_before", ("opt", "hidden_size"): "word_embed_proj_dim",
    ("opt", "word_embed_proj_dim"): "word_embed_proj_dim",
    ("opt", "layer_norm_elementwise_affine"): "layer_norm_elementwise_affine",
    **{(t, "use_bidirectional_attention"): "use_bidirectional_attention" for t in ("gemma2", "gemma3_text", "gemma3")},
    **{(t, f): "num_key_value_heads" for t in ("deepseek_v2", "deepseek_v3", "deepseek_v32")  # MLA: one key/value
       for f in ("num_attention_heads", "num_key_value_heads")},  # head per head
    **{(t, "moe_layer_freq"): "moe_layer_freq" for t in ("deepseek_v2", "deepseek_v3", "deepseek_v32")},
    ("deepseek_v2", "mlp_bias"): "mlp_bias",
    **{(t, "n_group"): "n_group" for t in ("deepseek_v3", "deepseek_v32")},
    **{(t, "num_experts_per_tok"): "num_experts_per_tok" for t in ("deepseek_v3", "deepseek_v32")},
    # GLM-4.5's group-limited router: 4 experts in 4 groups, each scored by its top 2; Phi-3.5-MoE's sparsemixer: 2
    ("glm4_moe", "n_group"): "n_group", ("glm4_moe", "num_experts_per_tok"): "num_experts_per_tok",
    ("phimoe", "num_experts_per_tok"): "num_experts_per_tok",
    ("falcon", "num_ln_in_parallel_attn"): "num_ln_in_parallel_attn", ("gpt_neox", "head_dim"): "head_dim",
    ("mpt", "expansion_ratio"): "expansion_ratio", ("mpt", "no_bias"): "no_bias",
    # two blocks, sliding then full: a KV-shared last block has no full block before it to share (transformers'
    # kv_sharing_modes refuses it too); tests/test_hf_gemma4.py counts KV sharing
    **{(t, "num_kv_shared_layers"): "num_kv_shared_layers" for t in ("gemma4_text", "gemma4")},
    # 512 patches: transformers builds the table, and its forward cannot reshape it to a square grid
    ("siglip2_vision_model", "num_patches"): "num_patches",
    # Llama 4's adapter reads the previous layer's output: fc1 the shuffled tokens (4 x hidden_size), fc2 fc1's
    ("llama4_vision_model", "hidden_size"): "intermediate_size",
    ("llama4_vision_model", "intermediate_size"): "intermediate_size",
    ("llama4_vision_model", "projector_input_dim"): "projector_output_dim",
    ("llama4_vision_model", "projector_output_dim"): "projector_output_dim",
    # Moonshot's remote-code names, which transformers does not read: one that differs from the name it reads is
    # refused (vt_num_hidden_layers doubled here is 2, the small config's num_hidden_layers: read); a table that is
    # not square (transformers resamples it as pos_emb_height a side)
    **{("kimi_k25_vision", k): k for k in ("vt_hidden_size", "vt_num_attention_heads", "vt_intermediate_size",
                                           "init_pos_emb_height", "init_pos_emb_width", "mm_hidden_size",
                                           "pos_emb_width")},
    ("kimi_k25_vision", "pos_emb_height"): "pos_emb_width",
    # the wrapper's image_size laid into MiniCPM-V's tower (2 px): no image of whole 2 x 2 windows of patches
    **{(t, "processor_image_size"): "processor_image_size"
       for t in ("minicpmv4_6_vision", "minicpmv4_7_vision", "minicpm_ocr_vision")},
}


def refusal_of(model_type: str, key: str) -> str | None:
    """REFUSED's entry of (model_type, key), else of its language model's type (a multimodal config's)."""
    nested = family(model_type).nested
    return REFUSED.get((model_type, key)) or (REFUSED.get((nested[0], key)) if nested else None)


def fields_read(model_type: str) -> tuple[dict, dict[str, str]]:
    """(the family whose fields a config's body holds: a multimodal config's language model's, the fields it reads
    and their kinds, its aliases left out)."""
    f = family(model_type)
    inner = family(f.nested[0]) if f.nested else f
    return inner, {k: kind for k, kind in sorted(inner.types.items()) if k not in inner.aliases}


def with_field(model_type: str, key: str, value) -> dict:
    """small(model_type) with `key` set (in the text_config of a multimodal config)."""
    kwargs, nested = small(model_type), family(model_type).nested
    if nested:
        return {**kwargs, nested[1]: kwargs[nested[1]] | {key: value}}
    return kwargs | {key: value}


@pytest.mark.parametrize("model_type", TYPES)
def test_one_field_changed_at_a_time_counts_what_the_class_builds(tmp_path_factory, model_type):
    base = saved(tmp_path_factory.mktemp("base"), model_type, **small(model_type))
    ours, theirs = compare(write(tmp_path_factory.mktemp("small"), base))
    assert ours == theirs
    _, fields = fields_read(model_type)
    body = base[family(model_type).nested[1]] if family(model_type).nested else base
    tried, wrong = 0, []
    for key, kind in fields.items():
        value = changed(key, kind, body.get(key))
        if value is None:
            continue
        folder = tmp_path_factory.mktemp(key)
        try:
            config = saved(folder, model_type, **with_field(model_type, key, value))
            result = compare(write(folder, config))
        except (ValueError, TypeError, AssertionError, KeyError, IndexError) as e:  # the class refuses the value
            assert not isinstance(e, TfcalcError)
            continue
        tried += 1
        if refusal_of(model_type, key):
            if f"{refusal_of(model_type, key)}=" not in result or "is not modelled" not in result:
                wrong.append((key, value, result))
        elif isinstance(result, str) or result[0] != result[1]:
            wrong.append((key, value, result))
    assert not wrong, wrong
    assert tried >= len(fields) // 2  # most fields are tried: a change this test cannot make is rare


# Explicit nulls tfcalc refuses by name where transformers builds the class from them: a forward that then fails or
# a field the class reads in a way tfcalc does not model ("forward"), or a kind tfcalc holds stricter than the class,
# where null would count as the default ("kind": left, each a one-line refusal naming the field)
NULLS_REFUSED = {
    # (Llama 4: save_pretrained writes layer_types with chunked_attention blocks; a null chunk size fails their mask)
    "llama4_text": {"attention_chunk_size": "forward"},
    "t5": {"tie_word_embeddings": "kind"}, "gemma3_text": {"sliding_window_pattern": "kind"},
    "gemma3": {"sliding_window_pattern": "kind"}, "cohere": {"logit_scale": "forward"},
    "cohere2": {"sliding_window": "forward", "sliding_window_pattern": "kind"},
    "deepseek_v2": {"moe_layer_freq": "kind", "num_experts_per_tok": "forward", "num_local_experts": "kind",
                    "topk_method": "forward"},
    "deepseek_v3": {"moe_layer_freq": "kind", "n_group": "forward", "num_experts": "kind",
                    "num_experts_per_tok": "forward", "num_nextn_predict_layers": "kind", "topk_group": "forward"},
    "deepseek_v32": {"moe_layer_freq": "kind", "num_nextn_predict_layers": "kind"},
    "olmo3": {"sliding_window": "forward"}, "exaone4": {"sliding_window": "forward"},
    "gemma4_text": {"global_head_dim": "kind"}, "gemma4": {"global_head_dim": "kind"},
    "gpt_neox": {"rotary_pct": "forward"}, "gpt_oss": {"sliding_window": "forward"},
    "granitemoe": {"num_experts_per_tok": "kind"}, "phi": {"partial_rotary_factor": "forward"},
    # null: MllamaVisionConfig's [3, 7, 15, 23, 30], outputs of blocks a 2-block tower has not
    "mllama_vision_model": {"intermediate_layers_indices": "forward"},
    # the wrapper's downsample_mode and image_size, laid into MiniCPM-V's tower (not fields of its config class)
    **{t: {"downsample_mode": "kind", "processor_image_size": "kind"} for t in ("minicpmv4_7_vision",
                                                                            "minicpm_ocr_vision")},
}


@pytest.mark.parametrize("model_type", TYPES)
def test_explicit_nulls_are_counted_as_the_class_builds_or_refused_by_name(tmp_path_factory, model_type):
    """Every field the family reads set to null in a saved config: transformers' count, or (NULLS_REFUSED) a refusal
    naming the field and its null; where transformers cannot build from it, there is nothing to hold tfcalc to."""
    nested = family(model_type).nested
    base = saved(tmp_path_factory.mktemp("base"), model_type, **small(model_type))
    refused, wrong = {}, []
    for key in fields_read(model_type)[1]:
        config = json.loads(json.dumps(base))
        (config[nested[1]] if nested else config)[key] = None
        folder = write(tmp_path_factory.mktemp(key), config)
        try:
            result = compare(folder)
            if isinstance(result, str):
                built(folder, True, family(model_type).encoder_decoder)  # transformers builds from it
        except Exception:  # noqa: BLE001 - transformers cannot build from it
            continue
        if isinstance(result, str):
            refused[key] = "kind" if f"{key}=None: expected" in result else "forward"
            if f"{key}=" not in result or "None" not in result:
                wrong.append((key, result))
        elif result[0] != result[1]:
            wrong.append((key, result))
    assert not wrong, wrong
    inner_type = nested[0] if nested else model_type
    assert refused == NULLS_REFUSED.get(model_type, NULLS_REFUSED.get(inner_type, {}))


def aliases_of(model_type: str) -> dict[str, str]:
    """The config class's attribute_map (a multimodal config's language model's) and the family's own aliases,
    where either name is a field the family reads."""
    f = family(model_type)
    inner_type = f.nested[0] if f.nested else model_type
    inner = family(inner_type)
    names = {**CONFIG_MAPPING[inner_type].attribute_map, **inner.aliases}
    return {a: t for a, t in names.items() if a in inner.types or t in inner.types}


ALIASED = [(t, alias) for t in TYPES for alias in aliases_of(t)]


@pytest.mark.parametrize("model_type, alias", ALIASED)
def test_every_alias_as_typed_is_read_as_transformers_reads_it(tmp_path_factory, model_type, alias):
    """A saved small config with an attribute_map name written in, alone and beside the field it stands for (with
    another value): the count transformers builds, whichever of the two its class reads."""
    nested = family(model_type).nested
    inner, _ = fields_read(model_type)
    base = saved(tmp_path_factory.mktemp("base"), model_type, **small(model_type))
    body = base[nested[1]] if nested else base
    field = aliases_of(model_type)[alias]
    field = field if field in inner.types else alias  # the name tfcalc reads of the two
    kind = inner.types[field]
    value = changed(alias, kind, body.get(field))
    for other in ({}, {field: changed(field, kind, value)}) if field != alias else ({},):
        config = json.loads(json.dumps(base))
        (config[nested[1]] if nested else config).update({**other, alias: value})
        result = compare(write(tmp_path_factory.mktemp("alias"), config))
        target = inner.aliases.get(alias) or aliases_of(model_type)[alias]
        if refusal_of(model_type, target):  # a refusal names the alias, as the config does
            assert "is not modelled" in result and (f"{alias}=" in result or
                                                    f"{refusal_of(model_type, target)}=" in result), result
        else:
            assert isinstance(result, tuple) and result[0] == result[1], (other, result)


def test_the_alias_gaps_the_fuzzer_found(tmp_path):
    # Qwen3-MoE exactly as save_pretrained writes it: num_local_experts (Qwen3MoeConfig's attribute_map target)
    config = saved(tmp_path, "qwen3_moe", **small("qwen3_moe"))
    assert config["num_local_experts"] == 4 and "num_experts" not in config
    assert read_hf_config(write(tmp_path, config)).spec.n_experts == 4
    assert read_hf_config(write(tmp_path, config | {"num_experts": 8})).spec.n_experts == 4  # num_local_experts wins
    # Mixtral's num_experts (its attribute_map name) over num_local_experts
    mixtral = read_hf_config(write(tmp_path, {"model_type": "mixtral", "num_experts": 4, "num_local_experts": 6}))
    assert mixtral.spec.n_experts == 4 and "num_experts=4 read as num_local_experts" in mixtral.source
    # T5's common names; a null num_decoder_layers is num_layers' own value (6, the default), taken before the
    # alias num_hidden_layers sets num_layers: T5Config(num_hidden_layers=3) has 3 encoder and 6 decoder blocks
    t5 = read_hf_config(write(tmp_path, {"model_type": "t5", "hidden_size": 256, "num_attention_heads": 4,
                                         "head_dim": 32, "num_hidden_layers": 3})).spec
    assert (t5.d_model, t5.n_heads, t5.d_head, t5.n_encoder_layers, t5.n_layers) == (256, 4, 32, 3, 6)
    ours, theirs = compare(tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("model_type, config, message", [
    ("qwen3_moe", {"num_local_experts": 1}, "num_local_experts=1 is not modelled: tfcalc models a mixture of 2"),
    ("mixtral", {"num_experts": 1}, "num_experts=1 is not modelled: tfcalc models a mixture of 2"),
    ("qwen3_moe", {"num_local_experts": 4, "num_experts_per_tok": 8}, "num_experts_per_tok=8 is greater than "
                                                                      "num_local_experts=4"),
    ("gpt2", {"hidden_size": 66, "n_head": 4}, "hidden_size=66"),
])
def test_refusals_quote_the_configs_own_names_and_values(tmp_path, model_type, config, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": model_type, **config}))
    assert message in str(e.value), str(e.value)


# Mllama ties no head whatever either flag says (MllamaConfig has no tie_word_embeddings; tests/test_hf_mllama.py)
NESTED = [t for t in TYPES if family(t).nested and t != "mllama"]


def tied_by_transformers(folder) -> bool:
    """Whether the class transformers builds from the config in `folder` ties lm_head to the token embedding."""
    def build():
        config = transformers.AutoConfig.from_pretrained(folder)
        with torch.device("meta"):
            return hf_model._model_class(transformers, config, True, False, multimodal=multimodal(config))._from_config(
                config)

    model = quiet(build)
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


@pytest.mark.parametrize("model_type", NESTED)
@pytest.mark.parametrize("inner, outer", [(False, None), (True, None), (False, True), (True, False)])
def test_the_head_is_tied_by_the_outer_flag_as_transformers_reads_it(tmp_path, model_type, inner, outer):
    # the outer flag ties (absent: the class's default); where the class says so, a true inner flag too (qwen2_vl,
    # llava, glm4v: saves before transformers 5), or nothing at all (voxtral): tests/test_hf_wrappers.py
    key, wrapper = family(model_type).nested[1], family(model_type).wrapper
    config = {**small(model_type), "model_type": model_type, key: small(model_type)[key] | {"tie_word_embeddings": inner}}
    if outer is not None:
        config["tie_word_embeddings"] = outer
    source = read_hf_config(write(tmp_path, config))
    ours, theirs = compare(tmp_path)
    assert ours == theirs
    assert select(source.spec, "text").tie_embeddings is tied_by_transformers(tmp_path)
    if wrapper.untied:
        assert "generation class ties no weights (lm_head is its own)" in source.source
    else:
        inner_read = wrapper.text_flag_only or wrapper.tie_from_text and inner
        assert (f"{key}.tie_word_embeddings={inner} not read" in source.source) is (outer is None and not inner_read)
        if wrapper.text_flag_only:  # (Llama 4) the outer flag is said not read where given
            assert (f"tie_word_embeddings={outer} not read" in source.source) is (outer is not None)
    # check --hf-config builds the language model with the same head (a whole model's: its text tower, --tower text)
    text = select(source.spec, "text") if source.spec.towers else source.spec
    report = hf_model.compare(tmp_path, text, Workload(batch_size=1, seq_len=4))
    assert report.match, [r for r in report.rows if not r.match]


# qwen3_5's too: a guard (not the dual encoders, which have no head, nor mllama, which ties nothing)
@pytest.mark.parametrize("model_type", [t for t in model_types()
                                        if family(t).nested and t not in ("clip", "siglip", "mllama")])
def test_a_multimodal_default_tie_flag_is_its_language_models(model_type):
    # an absent outer flag is the class's default: the wrapper's record states it (Wrapper.tie), else it is the
    # language model's default (Gemma 3, Gemma 4, Qwen3.5); Voxtral's class has no flag and ties nothing
    inner_type, wrapper = family(model_type).nested[0], family(model_type).wrapper
    default = getattr(CONFIG_MAPPING[model_type](), "tie_word_embeddings", None)
    if wrapper.untied:
        assert default is None
    else:
        assert default is (wrapper.tie if wrapper.tie is not None else family(inner_type).defaults["tie_word_embeddings"])


@pytest.mark.parametrize("model_type", [t for t in TYPES if not family(t).nested])
def test_a_text_config_where_the_type_has_none_is_refused_by_name(tmp_path, model_type):
    body = {k: v for k, v in saved(tmp_path, model_type, **small(model_type)).items() if k != "model_type"}
    with pytest.raises(TfcalcError, match=r"config.json: text_config=\{.* is not modelled: "
                                          rf"{model_type} has no text_config"):
        read_hf_config(write(tmp_path, {"model_type": model_type, "text_config": body}))
    read_hf_config(write(tmp_path, {"model_type": model_type, **body, "text_config": None}))  # null: nothing there


@pytest.mark.parametrize("model_type", ["gemma4_text", "gemma4"])  # (gemma4_vision: a tower)
def test_an_explicit_null_per_layer_config_is_no_overrides(tmp_path, model_type):
    # Gemma4TextConfig derives per_layer_config (global blocks 512 wide) only when the key is absent: a null one
    # leaves every block the local shape
    text = {"per_layer_config": None}
    config = {"model_type": model_type, **({"text_config": text} if model_type == "gemma4" else text)}
    source = read_hf_config(write(tmp_path, config))
    assert source.spec.global_d_head in (None, source.spec.d_head) and "per_layer_config=None" in source.source
    ours, theirs = compare(tmp_path)
    assert ours == theirs
