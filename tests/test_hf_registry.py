"""The one registry of Hugging Face families (tfcalc/families/registry.py): every model_type is one complete record,
a family `like` another is read as that one with its overrides (a clone is one line), and tfcalc.hf's and
verify/hf_model.py's tables are views of it."""

import json
import subprocess
import sys
import warnings

import pytest
import transformers

from tfcalc import TfcalcError, Workload, hf
from tfcalc.families.registry import REGISTRY, Family, family, model_types, register, tower_types
from tfcalc.hf import read_hf_config
from tfcalc.verify import hf_model

LANGUAGE_MODELS = [t for t in REGISTRY if REGISTRY[t].nested is None]
SMALL = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
             max_position_embeddings=32, vocab_size=100, _name_or_path="tiny")


def write(path, config: dict):
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def throwaway():
    """register() for the test's own families, removed from the registry afterwards."""
    added = []

    def add(*families: Family):
        register(*families)
        added.extend(f.model_type for f in families)

    yield add
    for model_type in added:
        REGISTRY.pop(model_type)


@pytest.mark.parametrize("model_type", list(REGISTRY))
def test_every_family_is_a_complete_record(model_type):
    f = family(model_type)
    if f.nested is not None:  # a multimodal config: only where its language model is, and of which family
        inner, field = f.nested
        assert inner in REGISTRY and family(inner).nested is None and field
        if f.towers:  # read whole: its towers' families, what joins them (its own fields, its own modules' rules)
            assert all(t in REGISTRY and family(t).nested is None and entry[1] for entry in f.towers.values()
                       for t in tower_types(entry))
            modelled = {t for t, entry in f.towers.items() if entry[0] is not None}  # (Gemma 4's audio: not)
            assert set(f.prefixes) == {"text", *modelled} and f.connectors is not None and f.components
            assert f.mapper is None and set(f.defaults) <= set(f.types) and set(f.types.values()) <= set(hf.KINDS)
            return
        assert (f.mapper, f.components, f.defaults, f.types) == (None, None, {}, {})
        return
    assert callable(f.mapper)
    assert set(f.defaults) <= set(f.types), sorted(set(f.defaults) - set(f.types))
    assert set(f.types.values()) <= set(hf.KINDS)
    assert set(f.aliases) | set(f.aliases.values()) <= set(f.types)  # an alias and the field it sets: both typed
    assert f.components and all(len(rule) == 2 for rule in f.components)
    # the fields check --hf-config writes -L into: read fields, each a stack's block count (none, given as {}, where
    # no one field holds it: Mllama's vision tower, its local and global blocks; -L is then noted, not written)
    if REGISTRY[model_type].layer_keys == {}:
        assert model_type == "mllama_vision_model"
        return
    assert f.layer_keys and set(f.layer_keys) <= set(f.types), sorted(set(f.layer_keys) - set(f.types))
    stacks = {"n_layers", "n_encoder_layers"} if f.encoder_decoder else {"n_layers"}
    assert sorted(f.layer_keys.values()) == sorted(stacks)


def test_every_like_names_a_registered_family():
    likes = {t: f.like for t, f in REGISTRY.items() if f.like is not None}
    assert likes  # the clones are written as clones
    for model_type, target in likes.items():
        assert target in REGISTRY, (model_type, target)
        family(model_type)  # resolves, without going round in a circle


def test_the_views_are_the_registry():
    # every family but the language models read only inside their multimodal config (tests/test_hf_wrappers.py)
    assert hf.SUPPORTED == tuple(model_types()) and set(hf.SUPPORTED) == {t for t in REGISTRY
                                                                           if not family(t).inner_only}
    assert list(hf.DEFAULTS) == list(hf.TYPES) == [t for t in hf.SUPPORTED if t not in hf.NESTED]
    for model_type in [t for t in LANGUAGE_MODELS if not family(t).inner_only]:
        f = family(model_type)
        assert hf.DEFAULTS[model_type] == f.defaults and hf.TYPES[model_type] == f.types
        assert hf_model.FAMILIES[model_type] == f.components
        assert (model_type in hf.ENCODER_DECODER) == f.encoder_decoder
    assert hf.NESTED == {t: f.nested for t, f in REGISTRY.items() if f.nested is not None}


def test_an_existing_clone_is_its_family_with_its_overrides():
    base, clone = family("roberta"), family("xlm-roberta")
    assert clone.like == "roberta" and clone.defaults == base.defaults | {"vocab_size": 30522}
    assert (clone.types, clone.mapper, clone.components, clone.aliases, clone.encoder_decoder) == (
        base.types, base.mapper, base.components, base.aliases, base.encoder_decoder)
    assert family("mbart").components[:-2] == family("bart").components[:-1]  # BART's table, then its final norms


def test_a_one_line_clone_reads_as_its_family(tmp_path, throwaway):
    throwaway(Family("tfcalc-test-ministral", like="mistral", defaults=dict(vocab_size=131072, sliding_window=None)))
    config = SMALL | {"sliding_window": 8}
    clone = read_hf_config(write(tmp_path / "clone.json", {"model_type": "tfcalc-test-ministral", **config}))
    base = read_hf_config(write(tmp_path / "base.json", {"model_type": "mistral", **config}))
    assert clone.spec == base.spec and clone.spec.sliding_window == 8
    assert clone.source.partition(";")[2] == base.source.partition(";")[2]  # the same notes
    assert "sliding_window=8 in 2 of 2 blocks" in clone.source
    assert read_hf_config(write(tmp_path / "c.json", {"model_type": "tfcalc-test-ministral"})).spec.vocab_size == 131072
    assert hf_model.component_of("tfcalc-test-ministral", "model.layers.1.mlp.gate_proj") == "mlp/gate"
    with pytest.raises(TfcalcError, match="supported: .*, tfcalc-test-ministral, "):
        read_hf_config(write(tmp_path / "unknown.json", {"model_type": "tfcalc-test-unknown"}))
    with pytest.raises(TfcalcError, match="sliding_window='8': expected an integer or null"):  # mistral's kinds
        read_hf_config(write(tmp_path / "bad.json", {"model_type": "tfcalc-test-ministral", "sliding_window": "8"}))


def test_aliases_are_data_and_typed_as_the_field_they_set(tmp_path, throwaway):
    throwaway(Family("tfcalc-test-llama", like="llama", aliases=dict(n_embd="hidden_size")))
    assert family("tfcalc-test-llama").types["n_embd"] == "size"
    source = read_hf_config(write(tmp_path / "a.json", {"model_type": "tfcalc-test-llama", **SMALL, "n_embd": 32}))
    assert source.spec.d_model == 32
    assert "n_embd=32 read as hidden_size (transformers sets hidden_size from it, over any hidden_size given)" in (
        source.source)
    with pytest.raises(TfcalcError, match="n_embd='32': expected an integer"):
        read_hf_config(write(tmp_path / "b.json", {"model_type": "tfcalc-test-llama", "n_embd": "32"}))


def test_a_model_type_is_registered_once_and_like_does_not_go_round(throwaway):
    with pytest.raises(AssertionError, match="registered twice"):
        register(Family("llama", like="mistral"))
    throwaway(Family("tfcalc-test-a", like="tfcalc-test-b"), Family("tfcalc-test-b", like="tfcalc-test-a"))
    with pytest.raises(AssertionError, match="circle"):
        family("tfcalc-test-a")


def test_importing_a_family_module_first_loads_every_family():
    code = ("import tfcalc.families.gpt_oss\nfrom tfcalc.families.registry import REGISTRY\n"
            "from tfcalc.hf import SUPPORTED\nprint(len(REGISTRY), len(SUPPORTED))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(len(REGISTRY)), str(len(model_types()))]  # the wrappers' own text types are not listed


# transformers' attribute_map entries a family does not read as an alias, each with why; the set is held exact below
NOT_ALIASED = {
    ("deepseek_v3", "num_mtp_layers"): "its mapper reads num_mtp_layers itself (a note; the module is not counted)",
}
EXTRA_ALIASES = {("bloom", "n_embed"): "BloomConfig pops n_embed from its kwargs into hidden_size",
                 ("lfm2", "tie_embedding"): "Lfm2Config pops tie_embedding from its kwargs into tie_word_embeddings",
                 ("lfm2", "block_ff_dim"): "Lfm2Config pops block_ff_dim from its kwargs into intermediate_size",
                 ("lfm2_moe", "tie_embedding"): "Lfm2MoeConfig pops tie_embedding into tie_word_embeddings",
                 ("deepseek_v32", "num_experts"): "DeepseekV32Config reads num_experts from its kwargs over "
                                                  "n_routed_experts",
                 **{("nemotron_h", f"mamba_{k}"): f"NemotronHConfig pops mamba_{k} from its kwargs into {v}"
                    for k, v in (("n_groups", "n_groups"), ("d_conv", "conv_kernel"), ("chunk_size", "chunk_size"),
                                 ("conv_bias", "use_conv_bias"))}}


def test_aliases_are_transformers_attribute_map():
    # read from transformers' config classes, not typed again
    not_aliased = set()
    for model_type in LANGUAGE_MODELS:
        f = family(model_type)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config_class = type(transformers.AutoConfig.for_model(model_type))
        attribute_map, declared = config_class.attribute_map, set(getattr(config_class, "__dataclass_fields__", ()))
        # an alias is read over the field it sets (transformers sets it once the class has set its own fields); where
        # the class declares the alias as a field of its own, the attribute_map's target is the one set last, and the
        # family lists the pair the other way round (Qwen3-MoE: num_local_experts over num_experts)
        for alias, field in f.aliases.items():
            assert (attribute_map.get(alias) == field and alias not in declared
                    or attribute_map.get(field) == alias and field in declared
                    or (model_type, alias) in EXTRA_ALIASES), (model_type, alias)
        not_aliased |= {(model_type, alias) for alias, field in attribute_map.items()
                        if f.aliases.get(alias) != field and f.aliases.get(field) != alias
                        and (alias in f.types or field in f.types)}
    assert not_aliased == set(NOT_ALIASED)


def test_layer_keys_and_known_differences_are_the_familys_and_its_clones():
    assert family("llama").layer_keys == {"num_hidden_layers": "n_layers"} and family("llama").known is None
    assert family("t5").layer_keys == {"num_layers": "n_encoder_layers", "num_decoder_layers": "n_layers"}
    bart = {"encoder_layers": "n_encoder_layers", "decoder_layers": "n_layers"}
    assert family("bart").layer_keys == family("mbart").layer_keys == family("marian").layer_keys == bart
    assert family("gpt2").layer_keys == family("gpt_bigcode").layer_keys == {"n_layer": "n_layers"}
    # where the config gives a field's alias, transformers reads the alias over the field: -L is written there
    assert hf_model._layer_keys(family("marian"), {"num_hidden_layers": 2}) == {
        "num_hidden_layers": "n_encoder_layers", "decoder_layers": "n_layers"}
    assert hf_model._layer_keys(family("gpt_bigcode"), {"n_layer": 2}) == {"n_layer": "n_layers"}
    assert hf_model._layer_keys(family("gpt2"), {"n_layer": 2, "num_hidden_layers": 2}) == {
        "num_hidden_layers": "n_layers"}
    assert hf_model._layer_keys(family("bloom"), {"n_layer": 2}) == {"num_hidden_layers": "n_layers"}
    assert {t for t in REGISTRY if family(t).known is not None} >= {"t5", "bloom"}


def test_a_known_hook_is_general_data_a_clone_inherits(tmp_path, throwaway):
    # LFM2-like: a short convolution computes more in transformers when seq_len < its kernel; the hook reads the
    # figure, the component, both numbers, the config, the spec and the workload
    def short_conv(d) -> str | None:  # d: registry.Difference
        short = d.workload is not None and d.workload.seq_len < d.config["conv_L_cache"]
        if d.figure == "forward" and d.component in ("conv/conv", "total") and d.excess > 0 and short:
            return f"transformers computes more when seq_len {d.workload.seq_len} < the conv kernel"
        return None

    throwaway(Family("tfcalc-test-conv", like="llama", known=short_conv), Family("tfcalc-test-clone",
                                                                                 like="tfcalc-test-conv"))
    assert family("tfcalc-test-clone").known is short_conv
    spec = read_hf_config(write(tmp_path / "a.json", {"model_type": "llama", **SMALL})).spec.replace(seq_len=2)
    config = {"conv_L_cache": 3}
    explain = hf_model._explainer(family("tfcalc-test-clone"), config, spec, Workload(seq_len=2))
    row = explain(hf_model.HfRow("forward", "conv/conv", 10, 12, False))
    assert row.known and row.note == "known: transformers computes more when seq_len 2 < the conv kernel"
    other = explain(hf_model.HfRow("forward", "attention/qkv", 10, 12, False))
    assert not other.known and other.note == "transformers has 2 more: the formula or the name mapping is wrong here"
    longer = hf_model._explainer(family("tfcalc-test-clone"), config, spec, Workload(seq_len=8))
    assert not longer(hf_model.HfRow("forward", "conv/conv", 10, 12, False)).known
    assert explain(hf_model.HfRow("forward", "conv/conv", 10, 10, True)).note == ""  # a match is never explained
