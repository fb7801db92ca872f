import tomllib

import pytest

from tfcalc import TfcalcError, find_preset, list_presets, load_preset
from tfcalc.presets import preset_dir

EXPECTED = {
    "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl",
    "gpt3-125m", "gpt3-350m", "gpt3-760m", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b",
    "bert-base", "bert-large", "llama-7b", "llama-13b", "llama-33b", "llama-65b",
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b", "mistral-7b",
    "mixtral-8x7b", "mixtral-8x22b",
    "llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "llama3.2-1b", "llama3.2-3b", "qwen2.5-7b", "qwen2.5-72b",
    "phi3-mini", "phi4", "gemma-2b", "gemma-7b", "starcoder",
    "qwen3-8b", "qwen3-32b", "qwen3-235b-a22b", "gemma2-9b", "gemma2-27b", "gemma3-27b", "olmo2-7b",
    "transformer-base", "transformer-big", "t5-small", "t5-base", "t5-large", "bart-base", "bart-large",
    "albert-base-v2", "albert-xxlarge-v2", "gpt-oss-20b", "gpt-oss-120b",
    "deepseek-v3", "deepseek-v3.2", "deepseek-v2", "deepseek-v2-lite", "granite3-3b-a800m", "mbart-large-cc25",
    "distilbert-base", "opus-mt-en-de", "vit-b16", "vit-l16", "whisper-large-v3",
    "bloom-176b", "bloom-7b1", "mpt-7b",
    "pythia-6.9b", "gpt-j-6b", "falcon-7b", "falcon-40b", "phi-2", "command-r", "command-r-plus", "smollm3-3b",
    "flan-t5-small", "flan-t5-base", "flan-t5-large", "flan-t5-xl", "flan-t5-xxl",
    "gemma4-31b", "gemma4-26b-a4b", "gemma4-e2b", "gemma4-e4b", "lfm2-1.2b", "nemotron-h-8b", "qwen3-next-80b-a3b",
    "jamba-1.5-mini", "qwen3.5-0.8b", "qwen3.5-35b-a3b", "granite4-h-small", "granite4-h-tiny", "falcon-h1-7b",
    "nemotron-3-nano", "llama4-scout", "llama4-maverick", "clip-vit-l14", "llama3.2-11b-vision", "qwen2.5-vl-7b",
    "mistral-small-3.1-24b", "voxtral-mini-3b",
    "qwen3-vl-8b", "siglip-so400m",
}


def test_every_named_preset_exists_and_says_where_it_comes_from():
    presets = {p.name: p for p in list_presets()}
    assert set(presets) == EXPECTED
    for p in presets.values():
        assert p.source and p.description
        assert p.spec.name == p.name


def test_alias():
    assert load_preset("gpt3") == load_preset("gpt3-175b")
    assert load_preset("GPT2").name == "gpt2"


def test_every_alias_finds_its_preset():
    # find_preset only parses files that spell the alias as a quoted string; every alias must be found so
    aliases = {alias: p.name for p in list_presets() for alias in p.aliases}
    assert aliases  # gpt3 at least
    for alias, name in aliases.items():
        assert find_preset(alias).name == name
        assert find_preset(alias.upper()).name == name


def test_unknown_preset_suggests_the_nearest():
    with pytest.raises(TfcalcError, match=r"unknown preset 'llama2-8b'; did you mean .*llama2-7b"):
        find_preset("llama2-8b")


def test_default_seq_len_is_the_context_length():
    contexts = {"gpt2": 1024, "gpt3": 2048, "bert-base": 512, "llama-7b": 2048, "llama2-7b": 4096,
                "llama3-8b": 8192, "mistral-7b": 8192, "mixtral-8x7b": 32768}
    assert {name: load_preset(name).seq_len for name in contexts} == contexts


def test_preset_files_are_valid_toml_with_a_model_table():
    for path in preset_dir().glob("*.toml"):
        doc = tomllib.loads(path.read_text())
        assert set(doc) <= {"name", "description", "source", "aliases", "model"}
        assert doc["name"] == path.stem


def test_llama3_1_presets_are_the_llama3_shapes_with_a_longer_context():
    # Llama 3.1 kept Llama 3's shapes and raised the context to 131,072; 405B was only released as 3.1, so the
    # llama3-405b preset already is Llama 3.1 405B and llama3.1-405b is the same model
    for size in ("8b", "70b", "405b"):
        old, new = load_preset(f"llama3-{size}"), load_preset(f"llama3.1-{size}")
        assert new.seq_len == 131072
        assert new.replace(name=old.name, seq_len=old.seq_len) == old
