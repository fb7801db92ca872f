"""The vision-language (and audio-language) wrappers (tfcalc/families/wrappers.py): their language model, read from
the text_config as the generation class reads it, held against that class (transformers 5.24), every wrapper and
every text type it reads: parameters (the class built on meta; the parameters of its language model and lm_head,
tied weights once) and one forward (FlopCounterMode over its language model then lm_head, on input_ids, fp32 CPU),
and `check --hf-config` all MATCH. Which flag ties lm_head is held against the built class for every combination of
the outer and the inner flag."""

import dataclasses
import json
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count
from tfcalc.families.registry import REGISTRY, family
from tfcalc.arch.towers import select
from tfcalc.hf import read_hf_config as read_whole


def read_hf_config(path):
    """The wrapper's language model as tfcalc reads it: of a config read whole (its vision tower too: qwen2_vl,
    qwen2_5_vl) its text tower, --tower text, which this file holds against the generation class's language model
    and head (the whole model: tests/test_towers_whole.py)."""
    source = read_whole(path)
    return dataclasses.replace(source, spec=select(source.spec, "text")) if source.spec.towers else source
from tfcalc.verify import hf_model

WRAPPERS = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "mistral3", "voxtral", "idefics3", "smolvlm", "llava",
            "kimi_k25", "glm4v", "lfm2_vl", "minicpmv4_6", "minicpmv4_7", "minicpm_ocr", "exaone4_5"]
# each wrapper with each text model_type it reads
CASES = [(t, inner) for t in WRAPPERS for inner in (family(t).nested[0], *family(t).wrapper.text_types)]

SMALL = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
             vocab_size=128, max_position_embeddings=64, pad_token_id=0, bos_token_id=0, eos_token_id=0)
MROPE = dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})  # 16 / 2
EXTRA = {  # where a text type needs more than SMALL
    "qwen2_vl_text": MROPE, "qwen2_5_vl_text": MROPE, "glm4v_text": MROPE,
    "qwen3_vl_moe_text": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32),
    "deepseek_v3": dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, kv_lora_rank=16,
                        q_lora_rank=32, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, n_group=1, topk_group=1,
                        num_key_value_heads=4, first_k_dense_replace=1),
    "lfm2": dict(layer_types=["conv", "full_attention"], block_ff_dim=96),
    "qwen3_5_text": dict(layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                         linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, head_dim=16),
    "exaone4": dict(layer_types=["sliding_attention", "full_attention"], sliding_window=16),
    "mistral": dict(sliding_window=None), "ministral3": dict(head_dim=16),
}
LANGUAGE_MODEL = ("model.language_model.", "model.text_model.", "lm_head.")  # where each class keeps them


def text(inner: str, **fields) -> dict:
    return {**SMALL, **EXTRA.get(inner, {}), "model_type": inner, **fields}


def wrapper(model_type: str, body: dict | None = None, **outer) -> dict:
    """A wrapper config: its text_config `body` (its default type's small config), its other tower one block deep
    (not counted; a smaller build)."""
    tower = "audio_config" if model_type == "voxtral" else "vision_config"
    body = text(family(model_type).nested[0]) if body is None else body
    # Qwen3-VL's DeepStack mergers read blocks 8, 16, 24 by default: one block deep, they read block 0
    deepstack = {"deepstack_visual_indexes": [0]} if model_type.startswith("qwen3_vl") else {}
    # MiniCPM-V's window merger runs after block insert_layer_id (6 by default; the wrapper's, over vision_config's)
    merger = {"insert_layer_id": 0} if model_type.startswith("minicpm") else {}
    return {"model_type": model_type, "text_config": body, tower: {"num_hidden_layers": 1, **deepstack}, **merger,
            **outer}


def write(folder, config: dict):
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def generation_class(config: dict, device: str = "meta"):
    """transformers' generation class of the wrapper config (XForConditionalGeneration), built on `device`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        hf = transformers.AutoConfig.for_model(**config)
        for auto in (transformers.AutoModelForImageTextToText, transformers.AutoModelForSeq2SeqLM):
            if type(hf) in auto._model_mapping:
                cls = auto._model_mapping[type(hf)]
        assert cls.__name__.endswith("ForConditionalGeneration")
        with torch.device(device):
            return cls._from_config(hf, attn_implementation="eager", experts_implementation="eager")


def language_model_params(model) -> int:
    """The parameters of the language model and lm_head, by their names in the class (tied ones once)."""
    return sum(p.numel() for name, p in model.named_parameters() if name.startswith(LANGUAGE_MODEL))


def language_model_flops(model, batch: int, seq_len: int) -> int:
    """FlopCounterMode over the language model (get_decoder) on input_ids, then lm_head on its output, fp32 CPU: the
    class's language model and head are allocated alone (to_empty), filled with small random weights."""
    parts = torch.nn.ModuleDict(dict(model=model.get_decoder(), head=model.get_output_embeddings()))
    parts.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in parts.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
        for b in parts.buffers():  # rotary tables and the like: values only, no FLOPs depend on them
            if b.is_floating_point():
                b.copy_(torch.rand(b.shape, generator=generator))
        ids = torch.randint(SMALL["vocab_size"], (batch, seq_len), generator=generator)
        with warnings.catch_warnings(), FlopCounterMode(display=False) as counter:
            warnings.simplefilter("ignore")
            parts["head"](parts["model"](input_ids=ids, use_cache=False).last_hidden_state)
    return counter.get_total_flops()


@pytest.mark.parametrize("model_type, inner", CASES)
def test_the_language_model_and_head_count_what_the_generation_class_builds(tmp_path, model_type, inner):
    config = wrapper(model_type, text(inner))
    source = read_hf_config(write(tmp_path, config))
    result = count(source.spec, Workload(batch_size=2, seq_len=6))
    model = generation_class(config)
    assert result.params.total == language_model_params(model)
    assert result.flops.forward == language_model_flops(model, batch=2, seq_len=6)
    assert f"{model_type}: the language model read from text_config ({inner})" in source.source
    if not family(model_type).towers:  # read whole where tfcalc reads its vision tower (qwen2_vl, qwen2_5_vl)
        assert "the other towers (vision, audio) and the multimodal projectors are not counted" in source.source


@pytest.mark.parametrize("model_type, inner", CASES)
def test_check_hf_config_compares_the_language_model_and_head(tmp_path, model_type, inner):
    body = text(inner, num_hidden_layers=3)
    if "layer_types" in body:  # one entry per block
        body["layer_types"] = [*body["layer_types"], body["layer_types"][0]]
    path = write(tmp_path, wrapper(model_type, body))
    spec = read_hf_config(path).spec
    report = hf_model.compare(path, spec, Workload(batch_size=2, seq_len=6))
    assert report.match, [r for r in report.rows if not r.match]
    assert report.model_class == "LanguageModel" and not any(r.component.startswith("(unmapped)") for r in report.rows)
    # -L 2 is written into the text_config transformers builds from
    fewer = hf_model.compare(path, spec.replace(n_layers=2), Workload(batch_size=2, seq_len=6))
    assert fewer.match and any("num_hidden_layers=2" in n for n in fewer.notes)
    params = {r.component: r for r in report.rows if r.figure == "params"}
    assert params["total"].analytic > {r.component: r for r in fewer.rows if r.figure == "params"}["total"].analytic


def tied(model) -> bool:
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


@pytest.mark.parametrize("model_type", WRAPPERS)
def test_the_head_is_tied_by_the_flags_the_class_reads(tmp_path, model_type):
    # every combination of the outer and the text_config's flag (absent, true, false): tfcalc's head is transformers'
    inner_type = family(model_type).nested[0]
    for outer in (None, True, False):
        for inner in (None, True, False):
            body = text(inner_type) | ({} if inner is None else {"tie_word_embeddings": inner})
            config = wrapper(model_type, body, **({} if outer is None else {"tie_word_embeddings": outer}))
            spec = read_hf_config(write(tmp_path, config)).spec
            model = generation_class(config)
            assert spec.tie_embeddings is tied(model), (outer, inner)
            assert count(spec).params.total == language_model_params(model), (outer, inner)


def test_the_tie_rules_as_read():
    # the classes' rules (modeling_*.py / configuration_*.py), as the records state them
    rules = {t: (family(t).wrapper.tie, family(t).wrapper.tie_from_text, family(t).wrapper.untied) for t in WRAPPERS}
    assert rules["mistral3"] == rules["kimi_k25"] == rules["lfm2_vl"] == rules["minicpm_ocr"] == (True, False, False)
    assert rules["qwen2_vl"] == rules["llava"] == rules["glm4v"] == (False, True, False)  # pre-v5 inner flag read
    assert rules["voxtral"] == (None, False, True)  # no _tied_weights_keys: never tied


def test_lfm2_vl_reads_tie_embedding_over_the_flag(tmp_path):
    config = wrapper("lfm2_vl", tie_embedding=False, tie_word_embeddings=True)
    source = read_hf_config(write(tmp_path, config))
    assert source.spec.tie_embeddings is False and "tie_embedding=False read as tie_word_embeddings" in source.source
    assert not tied(generation_class(config))


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl"])
def test_qwen2_vl_without_a_text_config_reads_the_top_level_fields(tmp_path, model_type):
    # the configs saved before transformers 5 (Qwen2-VL, Qwen2.5-VL on the hub) keep the language model's fields at
    # the top level; Qwen2VLConfig builds its text config from them
    inner = text(f"{model_type}_text")
    config = {k: v for k, v in wrapper(model_type, inner).items() if k != "text_config"}
    config |= {k: v for k, v in inner.items() if k != "model_type"}
    source = read_hf_config(write(tmp_path, config))
    assert source.spec.n_layers == 2 and source.spec.d_model == 64
    assert count(source.spec).params.total == language_model_params(generation_class(config))
    # beside a text_config, the top-level fields are not read (a note says which differ)
    both = config | {"text_config": inner | {"hidden_size": 32}}
    source = read_hf_config(write(tmp_path, both))
    assert source.spec.d_model == 32 and "top-level hidden_size=64 not read" in source.source
    assert count(source.spec).params.total == language_model_params(generation_class(both))


def test_a_wrapper_without_a_text_config_counts_the_one_its_class_builds(tmp_path):
    # Mistral3Config's text config when none is given is Mistral Small 3.1's (its SubConfigSpec init_kwargs), not
    # MistralConfig's defaults; Voxtral lays its defaults under a given text_config too
    config = {k: v for k, v in wrapper("mistral3").items() if k != "text_config"}
    spec = read_hf_config(write(tmp_path, config)).spec
    assert (spec.d_model, spec.n_layers, spec.d_ff, spec.vocab_size) == (5120, 40, 32768, 131072)
    assert count(spec).params.total == language_model_params(generation_class(config))
    voxtral = wrapper("voxtral", {"num_hidden_layers": 2})
    spec = read_hf_config(write(tmp_path, voxtral)).spec
    assert (spec.d_model, spec.n_layers, spec.d_head, spec.vocab_size) == (3072, 2, 128, 131072)
    assert count(spec).params.total == language_model_params(generation_class(voxtral))


@pytest.mark.parametrize("model_type, named, read_as", [("kimi_k25", "kimi_k2", "deepseek_v3"),
                                                         ("exaone4_5", "exaone4_5_text", "exaone4")])
def test_a_text_type_the_class_renames_is_read_as_it(tmp_path, model_type, named, read_as):
    config = wrapper(model_type, text(read_as) | {"model_type": named})
    source = read_hf_config(write(tmp_path, config))
    assert f"text_config.model_type='{named}' read as '{read_as}'" in source.source
    assert count(source.spec).params.total == language_model_params(generation_class(config))


@pytest.mark.parametrize("config, message", [
    ({"model_type": "mistral3", "text_config": {"model_type": "llama"}},
     "text_config.model_type='llama': expected 'mistral' or 'ministral3' (tfcalc reads mistral3's language model as "
     "one of these)"),
    ({"model_type": "llava", "text_config": {"model_type": "gemma"}},
     "text_config.model_type='gemma': expected one of llama, mistral, qwen2"),
    ({"model_type": "qwen2_vl", "text_config": {"model_type": "qwen2"}},
     "text_config.model_type='qwen2': expected 'qwen2_vl_text'"),
    ({"model_type": "exaone4_5", "text_config": {"num_hidden_layers": 2}},
     "text_config.model_type: missing (exaone4_5's config class reads it; one of exaone4)"),
    ({"model_type": "qwen2_vl", "text_config": [1]}, "text_config=[1]: expected an object or null"),
    ({"model_type": "glm4v", "text_config": {"tie_word_embeddings": "yes"}},
     "text_config.tie_word_embeddings='yes': expected a boolean"),
    ({"model_type": "glm4v", "text_config": {"tie_word_embeddings": True}, "tie_word_embeddings": "false"},
     "tie_word_embeddings='false': expected a boolean (true or false)"),
    ({"model_type": "lfm2_vl", "tie_embedding": 0}, "tie_embedding=0: expected a boolean (true or false)"),
    ({"model_type": "qwen2_vl_text"}, "model_type='qwen2_vl_text' is a language model transformers builds only "
                                      "inside a multimodal config (qwen2_vl): give that config"),
    ({"model_type": "glm4v_text"}, "inside a multimodal config (glm4v): give that config"),
])
def test_what_a_wrapper_does_not_read_is_refused_by_name(tmp_path, config, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, config))
    assert message in str(e.value), str(e.value)
    assert str(e.value).startswith(str(tmp_path / "config.json") + ": ")


def test_the_transformers_own_refusals_agree(tmp_path):
    # what tfcalc refuses above, transformers' config classes refuse too (or build a model without that type)
    with pytest.raises(KeyError):
        transformers.AutoConfig.for_model("exaone4_5", text_config={"num_hidden_layers": 2})
    assert "qwen2_vl_text" not in transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


@pytest.mark.parametrize("model_type", ["qwen2_vl_text", "glm4v_text"])
def test_heads_are_hidden_over_heads_wide_whatever_head_dim_says(tmp_path, model_type):
    # Qwen2VLAttention and Glm4vTextAttention take head_dim = hidden_size // num_attention_heads: no head_dim field
    config = wrapper(model_type.removesuffix("_text"), text(model_type, head_dim=32))
    spec = read_hf_config(write(tmp_path, config)).spec
    assert spec.d_model // spec.n_heads == 16 and spec.d_head in (None, 16)
    assert count(spec).params.total == language_model_params(generation_class(config))


@pytest.mark.parametrize("model_type", [t for t in REGISTRY if family(t).inner_only])
def test_a_wrappers_own_text_type_has_its_config_classs_defaults(model_type):
    # qwen2_vl_text, ...: the defaults tfcalc lays under a text_config are transformers' text config class's (the
    # class declares no tie flag where the wrapper's alone ties: tfcalc's is never read, the wrapper's is written)
    declared = {f.name: f.default for f in dataclasses.fields(transformers.CONFIG_MAPPING[model_type])}
    own = {k: v for k, v in family(model_type).defaults.items() if k != "tie_word_embeddings"}
    assert own == {k: declared[k] for k in own}
    assert "tie_word_embeddings" not in declared or model_type == "qwen3_vl_moe_text"  # its True is never read


PUBLISHED = json.loads((Path(__file__).parent / "data" / "wrapper_configs.json").read_text())


@pytest.mark.parametrize("name", [k for k in PUBLISHED if not k.startswith("_")])
def test_published_wrapper_configs_count_what_their_generation_class_builds(tmp_path, name):
    # the whole class on meta, at full size: its language model and lm_head (Qwen2.5-VL-7B's is Qwen2.5-7B's,
    # 7,615,616,512 parameters: 28 * 233,057,792 per block + 2 * 152064 * 3584 embeddings, untied, + 3584 final norm)
    config = PUBLISHED[name]["config"]
    path = write(tmp_path, config)
    spec = read_hf_config(path).spec
    assert count(spec).params.total == language_model_params(generation_class(config))
    report = hf_model.compare(path, spec.replace(n_layers=2), Workload(batch_size=1, seq_len=16))
    assert report.match, [r for r in report.rows if not r.match]
    if name == "qwen2.5-vl-7b-instruct":
        # two norms, q (biased), k and v (biased, 4 key/value heads x 128 = 512 wide), o, SwiGLU
        block = 2 * 3584 + (3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944
        assert block == 233_057_792
        assert count(spec).params.total == 28 * block + 2 * 152064 * 3584 + 3584 == 7_615_616_512


def test_the_cli_checks_a_wrapper_and_refuses_its_own_text_type(tmp_path):
    from typer.testing import CliRunner

    from tfcalc.cli import app

    path = write(tmp_path, wrapper("llava"))
    result = CliRunner().invoke(app, ["check", "--hf-config", str(path), "--seq-len", "8", "--tower", "text"])
    assert result.exit_code == 0 and "transformers: MATCH: all" in result.output, result.output
    # (a wrapper read text-only, its whole model refused, was shown here with minicpmv4_6: every wrapper is read whole
    # now, tests/test_minicpmv_whole.py the last; the refusal itself stays in tfcalc.hf for a family without towers)
    alone = write(tmp_path, {"model_type": "qwen3_vl_text"})
    result = CliRunner().invoke(app, ["check", "--hf-config", str(alone)])
    assert result.exit_code == 2 and "model_type='qwen3_vl_text' is a language model transformers builds only " \
                                      "inside a multimodal config (qwen3_vl): give that config" in result.output
