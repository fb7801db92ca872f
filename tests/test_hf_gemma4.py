"""Gemma 4's language model (gemma4_text, and gemma4's text_config): exact against transformers' Gemma4ForCausalLM and
the language model of Gemma4ForConditionalGeneration; the features tfcalc does not model refused by field."""

import json
import warnings

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.arch.towers import select
from tfcalc.families.gemma4 import GLOBAL_HEAD_DIM
from tfcalc.families.registry import family
from tfcalc.hf import read_hf_config
from tfcalc.verify import hf_model

OTHER_TOWERS = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.")


def write(folder, config: dict, name="config.json"):
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def hf_config(config: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # "Last layer must use full_attention ..."
        try:
            return transformers.AutoConfig.for_model(**config)
        finally:
            transformers.logging.set_verbosity(verbosity)


def meta_params(config: dict, cls=transformers.Gemma4ForCausalLM) -> int:
    """transformers' sum(p.numel()) on the meta device, the language model's only (no vision or audio tower)."""
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = cls(hf_config(config))
    return sum(p.numel() for name, p in model.named_parameters() if not name.startswith(OTHER_TOWERS))


def eager_forward_flops(config: dict, batch: int, seq_len: int, **forward) -> int:
    """FlopCounterMode FLOPs of one eager forward on the CPU (`forward`: the forward's keyword arguments; default:
    the hidden states asked for, see below)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.Gemma4ForCausalLM._from_config(hf_config(config), attn_implementation="eager",
                                                            experts_implementation="eager")
        ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            # output_hidden_states: transformers 5.23 fails in _maybe_slice_kv_shared_inputs with KV sharing and no
            # per-layer inputs (it slices per_layer_inputs, None); asking for the hidden states skips that slicing,
            # which with logits_to_keep=0 keeps every token anyway (no FLOPs change)
            model(input_ids=ids, **(forward or {"output_hidden_states": True}))
    return counter.get_total_flops()


def test_defaults_are_transformers_defaults():
    for key, value in family("gemma4_text").defaults.items():
        assert getattr(transformers.Gemma4TextConfig, key) == value, key
    # global_head_dim is popped from the kwargs, not declared: its default is the global blocks' head_dim
    config = transformers.Gemma4TextConfig(num_hidden_layers=6)
    assert config.per_layer_config[5].head_dim == GLOBAL_HEAD_DIM and config.per_layer_config[0].head_dim == 256


LAYER_TYPES = ["sliding_attention", "full_attention"]


@st.composite
def gemma4_configs(draw) -> dict:
    """Small configs over every field the family reads, within what it models."""
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    layers = draw(st.integers(1, 8))
    head_dim = draw(st.sampled_from([2, 4, 8, 12]))
    config = dict(model_type="gemma4_text", num_hidden_layers=layers, hidden_size=draw(st.sampled_from([8, 12, 16])),
                  intermediate_size=draw(st.integers(2, 12)), num_attention_heads=heads, num_key_value_heads=kv,
                  head_dim=head_dim, vocab_size=draw(st.integers(16, 64)), tie_word_embeddings=draw(st.booleans()),
                  attention_bias=draw(st.booleans()), sliding_window=draw(st.integers(1, 6)),
                  max_position_embeddings=draw(st.integers(8, 64)),
                  hidden_size_per_layer_input=draw(st.sampled_from([0, 0, 2, 4])),
                  hidden_activation=draw(st.sampled_from(["gelu_pytorch_tanh", "gelu", "silu", "relu"])),
                  use_double_wide_mlp=draw(st.booleans()), pad_token_id=0, bos_token_id=0, eos_token_id=0)
    if draw(st.booleans()):
        config["layer_types"] = draw(st.lists(st.sampled_from(LAYER_TYPES), min_size=layers, max_size=layers))
    if config["hidden_size_per_layer_input"] and draw(st.booleans()):  # the per-layer table's own vocabulary
        config["vocab_size_per_layer_input"] = config["vocab_size"] + draw(st.integers(0, 8))
    # the last blocks reuse keys and values: every layer type has a block before them (transformers refuses it)
    types = hf_config(config).layer_types
    shared = draw(st.integers(0, layers - 1))
    if shared and set(types[:layers - shared]) == set(types):
        config["num_kv_shared_layers"] = shared
    if draw(st.booleans()):  # the experts beside the dense MLP in every block
        experts = draw(st.integers(2, 4))
        config |= dict(enable_moe_block=True, num_experts=experts, top_k_experts=draw(st.integers(1, experts)),
                       moe_intermediate_size=draw(st.integers(2, 8)))
    # the global (full_attention) blocks' own head width and, with k = v, key/value heads (dividing the heads)
    global_dim = draw(st.sampled_from([head_dim, 4, 8, 16]))
    k_eq_v = draw(st.booleans())
    global_kv = draw(st.sampled_from([k for k in (1, 2, 3) if heads % k == 0]))
    config["attention_k_eq_v"] = k_eq_v
    if draw(st.booleans()):
        config["global_head_dim"] = global_dim
        if draw(st.booleans()):
            config["num_global_key_value_heads"] = global_kv
    else:  # a config transformers saved: the global blocks' overrides instead of global_head_dim
        types = hf_config(config).layer_types
        override = {"head_dim": global_dim} | ({"num_key_value_heads": global_kv} if k_eq_v else {})
        config["per_layer_config"] = {str(i): override for i, t in enumerate(types) if t == "full_attention"}
    for key, values in (("final_logit_softcapping", st.floats(1, 50)), ("use_bidirectional_attention",
                        st.just("vision")),
                        ("rope_parameters", st.just({"sliding_attention": {"rope_type": "default",
                                                                            "rope_theta": 10000.0},
                                                      "full_attention": {"rope_type": "default",
                                                                         "rope_theta": 1e6}}))):
        if draw(st.booleans()):
            config[key] = draw(values)
    return config


@settings(max_examples=12, deadline=None)
@given(config=gemma4_configs(), batch=st.integers(1, 2), seq_len=st.integers(1, 8))
def test_generated_configs_match_transformers_exactly(tmp_path_factory, config, batch, seq_len):
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec.replace(batch_size=batch,
                                                                                     seq_len=seq_len)
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_forward_flops(config, batch, seq_len)
    # the windows are in the blocks transformers makes sliding (its layer_types, the last block forced global)
    L = config["num_hidden_layers"]
    pattern = spec.attention_pattern or ["global"]
    ours = [pattern[i % len(pattern)] for i in range(L)]
    assert ours == ["local" if t == "sliding_attention" else "global" for t in hf_config(config).layer_types]


@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_multimodal_configs_read_their_text_config(tmp_path_factory, data):
    # Gemma 4's multimodal config: the language model is its text_config (gemma4_text), the head tied by the outer
    # tie_word_embeddings (the vision tower, when there is one, read beside it: tests/test_gemma4_whole.py)
    text = data.draw(gemma4_configs())
    tie = text.pop("tie_word_embeddings")
    config = {"model_type": "gemma4", "text_config": text, "tie_word_embeddings": tie, "audio_config": None}
    if data.draw(st.booleans()):
        config["vision_config"] = {"hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
                                   "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 4}
    else:
        config["vision_config"] = None
    folder = tmp_path_factory.mktemp("hf")
    source = read_hf_config(write(folder, config))
    assert "gemma4: the language model read from text_config" in source.source
    alone = read_hf_config(write(folder, text | {"tie_word_embeddings": tie}, "text.json")).spec
    language_model = select(source.spec, "text")
    assert language_model.replace(name="x") == alone.replace(name="x")
    assert bool(source.spec.towers) == (config["vision_config"] is not None)
    assert count(language_model).params.total == meta_params(config, transformers.Gemma4ForConditionalGeneration)


def test_the_last_block_is_global_by_default(tmp_path):
    config = {"model_type": "gemma4_text", "num_hidden_layers": 8, "global_head_dim": 256,
              "hidden_size_per_layer_input": 0}
    spec = read_hf_config(write(tmp_path, config)).spec
    assert spec.attention_pattern == ["local"] * 5 + ["global", "local", "global"] and spec.sliding_window == 512
    twelve = read_hf_config(write(tmp_path, config | {"num_hidden_layers": 12})).spec
    assert twelve.attention_pattern == ["local"] * 5 + ["global"]
    assert (spec.d_model, spec.n_heads, spec.n_kv_heads, spec.d_head, spec.d_ff, spec.vocab_size) == (
        2304, 8, 4, 256, 9216, 262_144)
    assert spec.tie_embeddings and spec.qk_norm == "head" and spec.norm_position == "sandwich"
    assert spec.activation == "gelu_tanh" and not spec.bias


@pytest.mark.parametrize("changes, message", [
    ({"num_kv_shared_layers": 30}, "num_kv_shared_layers=30 is not modelled: at least one of the"),
    ({"num_kv_shared_layers": 25}, "num_kv_shared_layers=25 is not modelled: a layer type among the KV-shared"),
    ({"hidden_size_per_layer_input": 0, "per_layer_config": {"28": {"head_dim": 512}}},
     "per_layer_config={'28': {'head_dim': 512}} is not modelled: per-block overrides other than one"),
    ({"hidden_size_per_layer_input": 0, "per_layer_config": {"5": {"head_dim": 512}, "11": {"head_dim": 128},
                                                              "17": {"head_dim": 512}, "23": {"head_dim": 512},
                                                              "29": {"head_dim": 512}}},
     "is not modelled: per-block overrides other than one"),
    ({"hidden_size_per_layer_input": 0, "per_layer_config": {"5": {"sliding_window": 3}}},
     "is not modelled: per-block overrides other than one"),
    ({"hidden_size_per_layer_input": 0, "attention_k_eq_v": True, "num_global_key_value_heads": 3},
     "num_global_key_value_heads=3 is not modelled: global key/value heads that do not divide"),
    ({"hidden_size_per_layer_input": 0, "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2},
     "moe_intermediate_size=None is not modelled: enable_moe_block=true needs it"),
    ({"hidden_size_per_layer_input": 0, "enable_moe_block": True, "num_experts": 1, "top_k_experts": 1,
      "moe_intermediate_size": 8}, "num_experts=1 is not modelled: tfcalc models a mixture of 2 or more"),
    ({"hidden_size_per_layer_input": 0, "enable_moe_block": True, "num_experts": 4, "top_k_experts": 5,
      "moe_intermediate_size": 8}, "top_k_experts=5 is not modelled: more than num_experts=4"),
    ({"global_head_dim": 256, "hidden_size_per_layer_input": 0, "use_bidirectional_attention": "all"},
     "use_bidirectional_attention='all' is not modelled"),
    ({"global_head_dim": 256, "hidden_size_per_layer_input": 0, "layer_types": ["x"] * 30},
     "entries 'x'"),
    ({"global_head_dim": 256, "hidden_size_per_layer_input": 0, "layer_types": ["full_attention"]},
     "layer_types=['full_attention'] is not modelled: expected a list of num_hidden_layers=30 entries"),
    ({"global_head_dim": 256, "hidden_size_per_layer_input": 0, "hidden_activation": "gelu_new2"},
     "hidden_activation='gelu_new2' is not modelled"),
    ({"global_head_dim": 256.0}, "global_head_dim=256.0: expected an integer"),
    ({"hidden_size_per_layer_input": -1}, "hidden_size_per_layer_input=-1: expected an integer >= 0"),
    ({"sliding_window": None}, "sliding_window=None: expected an integer"),
    ({"use_bidirectional_attention": "both"}, "use_bidirectional_attention='both': expected 'all', 'vision' or null"),
    ({"attention_k_eq_v": "false"}, "attention_k_eq_v='false': expected a boolean"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "gemma4_text", **changes}))
    assert message in str(e.value), str(e.value)


def test_k_eq_v_global_blocks_of_their_own_shape(tmp_path):
    # Gemma 4 31B's text tower's shape (typed from memory), at 6 blocks: global blocks 512 wide with 4 key heads and
    # no v_proj; the 5 local blocks 256 wide with 16 key/value heads
    text = {"model_type": "gemma4_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 6,
            "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 256, "global_head_dim": 512,
            "num_global_key_value_heads": 4, "attention_k_eq_v": True, "hidden_size_per_layer_input": 0,
            "sliding_window": 1024}
    spec = read_hf_config(write(tmp_path, {"model_type": "gemma4", "text_config": text})).spec
    assert (spec.global_d_head, spec.global_n_kv_heads, spec.global_k_eq_v) == (512, 4, True)
    D, V, F = 5376, 262_144, 21504
    local = D * (32 + 2 * 16) * 256 + 32 * 256 * D + 2 * 256  # q, k, v, o, q_norm, k_norm
    global_ = D * (32 + 4) * 512 + 32 * 512 * D + 2 * 512  # q, k (no v), o, q_norm, k_norm
    block = 3 * D * F + 4 * D  # gated MLP, four sandwich norms
    assert count(spec).params.total == V * D + 5 * local + global_ + 6 * block + D == meta_params(text)


def test_check_hf_config_matches_every_component(tmp_path):
    config = {"model_type": "gemma4_text", "num_hidden_layers": 7, "hidden_size": 48, "intermediate_size": 24,
              "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 8, "global_head_dim": 8,
              "vocab_size": 97, "sliding_window": 4, "max_position_embeddings": 64, "hidden_size_per_layer_input": 0,
              "attention_bias": True, "tie_word_embeddings": False}
    for name, raw in (("text.json", config), ("config.json", {"model_type": "gemma4", "text_config": config,
                                                               "vision_config": None, "audio_config": None,
                                                               "tie_word_embeddings": False})):
        path = write(tmp_path, raw, name)
        spec = read_hf_config(path).spec
        report = hf_model.compare(path, spec, Workload(batch_size=2, seq_len=16))
        assert report.match and not [r for r in report.rows if r.match is None], report.rows
        rows = {(r.figure, r.component): r for r in report.rows}
        assert rows["params", "attention/q_norm"].transformers == 7 * 8  # L * head_dim
        assert rows["params", "attention/qkv"].transformers == 7 * (48 * (6 + 2 + 2) * 8 + (6 + 2 + 2) * 8)


PUBLISHED = json.loads((__import__("pathlib").Path(__file__).parent / "data" / "gemma4_text_configs.json").read_text())
PRESETS = {"gemma-4-31b": "gemma4-31b", "gemma-4-26b-a4b": "gemma4-26b-a4b", "gemma-4-e2b": "gemma4-e2b",
           "gemma-4-e4b": "gemma4-e4b"}


@pytest.mark.parametrize("name", PRESETS)
def test_published_text_configs_are_exact_and_agree_with_the_presets(tmp_path, name):
    # the text_config of each published multimodal config.json (tests/data says where each was read), as the
    # language model of the gemma4 config: transformers' Gemma4ForCausalLM on meta is the oracle
    entry = PUBLISHED[name]
    config = {"model_type": "gemma4", "text_config": entry["text_config"],
              "tie_word_embeddings": entry["tie_word_embeddings"]}
    spec = read_hf_config(write(tmp_path, config)).spec
    preset = select(load_preset(PRESETS[name]), "text")  # (gemma4-31b and gemma4-e2b are whole)
    assert count(spec).params.total == count(preset).params.total == meta_params(entry["text_config"])
    assert count(spec.replace(seq_len=4096)).flops.components == count(preset.replace(seq_len=4096)).flops.components


def test_published_totals_are_the_model_cards():
    # Gemma 4 model cards: 31B "30.7B" (its language model: the preset is whole); 26B-A4B "25.2B total, 3.8B active"
    assert round(count(select(load_preset("gemma4-31b"), "text")).params.total / 1e8) == 307
    moe = count(load_preset("gemma4-26b-a4b")).params
    assert round(moe.total / 1e8) == 252 and round(moe.active / 1e8) == 38
    # E2B: "2.3B effective", the parameters without the per-layer table (262,144 x 35 blocks x 256)
    e2b = select(load_preset("gemma4-e2b"), "text")  # (the preset is whole: tests/test_gemma4_audio.py)
    assert round((count(e2b).params.total - 262_144 * 35 * 256) / 1e8) == 23


def test_check_hf_config_maps_global_blocks_and_the_experts_beside_the_mlp(tmp_path):
    config = {"model_type": "gemma4_text", "num_hidden_layers": 4, "hidden_size": 32, "intermediate_size": 24,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "global_head_dim": 16,
              "num_global_key_value_heads": 1, "attention_k_eq_v": True, "vocab_size": 97, "sliding_window": 4,
              "max_position_embeddings": 64, "hidden_size_per_layer_input": 0, "enable_moe_block": True,
              "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 6,
              "layer_types": ["sliding_attention", "full_attention"] * 2}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=8))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    # two local blocks: q, k, v 8 wide (4 + 2 + 2 heads); two global blocks: q 4 heads and k 1 head of 16, no v
    assert rows["params", "attention/qkv"].transformers == 2 * 32 * 8 * 8 + 2 * 32 * 5 * 16
    assert rows["params", "moe/experts"].transformers == 4 * 4 * 3 * 32 * 6  # L * E * (gate, up, down) * D * F'
    assert rows["params", "moe/router_norm"].transformers == 4 * 32  # the router's scale [D]
    assert rows["params", "moe/expert_scale"].transformers == 4 * 4
    for norm in ("mlp/branch_norm", "moe/norm", "moe/post_norm"):
        assert rows["params", norm].transformers == 4 * 32


@settings(max_examples=10, deadline=None)
@given(config=gemma4_configs(), batch=st.integers(1, 2), seq_len=st.integers(2, 8))
def test_a_prefill_runs_the_kv_sharing_blocks_over_the_scored_token_as_generate_does(tmp_path_factory, config, batch,
                                                                                      seq_len):
    # transformers' generate asks for the last position's logits (logits_to_keep=1); from the first KV-sharing block
    # on, Gemma4TextModel then runs only that position (_maybe_slice_kv_shared_inputs): tfcalc's prefill counts the
    # same. Per-layer inputs on: without them transformers 5.23 fails in that slicing (it slices None).
    config = config | {"hidden_size_per_layer_input": config["hidden_size_per_layer_input"] or 2}
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len, phase="prefill"))
    assert result.flops.forward == eager_forward_flops(config, batch, seq_len, logits_to_keep=1)


def test_check_hf_config_maps_per_layer_inputs_and_kv_sharing(tmp_path):
    config = {"model_type": "gemma4_text", "num_hidden_layers": 5, "hidden_size": 32, "intermediate_size": 24,
              "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8, "global_head_dim": 16,
              "vocab_size": 97, "vocab_size_per_layer_input": 101, "sliding_window": 4, "max_position_embeddings": 64,
              "hidden_size_per_layer_input": 4, "num_kv_shared_layers": 2, "use_double_wide_mlp": True,
              "layer_types": ["sliding_attention", "full_attention"] * 2 + ["full_attention"]}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=8))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "embedding/per_layer"].transformers == 101 * 5 * 4  # vocab_per_layer x L*P
    assert rows["params", "per_layer/gate"].transformers == 5 * 32 * 4
    # three blocks with keys and values (two local: q 4*8, k and v 8 each; one global: q 4*16, k and v 16 each) and
    # two sharing global blocks (q only: 4*16), each projection from D = 32
    assert rows["params", "attention/qkv"].transformers == 32 * (2 * 48 + 96 + 2 * 64)
    # the two sharing blocks' MLPs twice as wide: 3 * 24 + 2 * 48 channels, gate, up and down each 32 wide
    assert rows["params", "mlp/up"].transformers == 32 * (3 * 24 + 2 * 48)


def test_an_empty_multimodal_config_is_the_class_defaults(tmp_path):
    # no text_config: Gemma4TextConfig's defaults (global blocks 512 wide, per-layer embeddings of 256), the language
    # model of Gemma4ForConditionalGeneration as transformers builds it
    spec = read_hf_config(write(tmp_path, {"model_type": "gemma4"})).spec
    assert (spec.global_d_head, spec.d_per_layer_input) == (512, 256)
    assert count(spec).params.total == meta_params({"model_type": "gemma4"},
                                                   transformers.Gemma4ForConditionalGeneration)
