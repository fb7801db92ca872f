"""The parallel-block families (gpt_neox, gptj, phi, falcon, cohere): exact against transformers' own classes
(GPTNeoXForCausalLM, GPTJForCausalLM, PhiForCausalLM, FalconForCausalLM, CohereForCausalLM): parameters as
sum(p.numel()) on meta, forward FLOPs as FlopCounterMode over an eager forward on the CPU, component by component
through `check --hf-config`, and the presets against the published configs."""

import json
import warnings

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.families.registry import family
from tfcalc.hf import read_hf_config
from tfcalc.verify import hf_model

CLASSES = {"gpt_neox": "GPTNeoXForCausalLM", "gptj": "GPTJForCausalLM", "phi": "PhiForCausalLM",
           "falcon": "FalconForCausalLM", "cohere": "CohereForCausalLM"}
CONFIGS = {"gpt_neox": "GPTNeoXConfig", "gptj": "GPTJConfig", "phi": "PhiConfig", "falcon": "FalconConfig",
           "cohere": "CohereConfig"}
TOKENS = dict(bos_token_id=0, eos_token_id=0, pad_token_id=0)  # inside the small vocabularies


def write(folder, config: dict):
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def _hf(config: dict):
    hf_config = transformers.AutoConfig.for_model(**config)
    return hf_config, getattr(transformers, CLASSES[config["model_type"]])


def meta_params(config: dict) -> int:
    """transformers' sum(p.numel()) for `config`, built on the meta device."""
    hf_config, cls = _hf(config)
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in cls(hf_config).parameters())


def eager_forward_flops(config: dict, batch: int, seq_len: int) -> int:
    """FlopCounterMode FLOPs of one eager forward on the CPU."""
    hf_config, cls = _hf(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = cls._from_config(hf_config, attn_implementation="eager")
        ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=ids)
    return counter.get_total_flops()


@pytest.mark.parametrize("model_type", CLASSES)
def test_defaults_are_transformers_defaults(model_type):
    config_class = getattr(transformers, CONFIGS[model_type])
    for key, value in family(model_type).defaults.items():
        assert getattr(config_class, key) == value, (model_type, key)


def test_partial_rotary_defaults_are_transformers_defaults():
    assert transformers.GPTNeoXConfig().rope_parameters["partial_rotary_factor"] == 0.25
    assert transformers.PhiConfig().rope_parameters["partial_rotary_factor"] == 0.5
    assert transformers.GPTNeoXConfig(rotary_pct=0.5).rope_parameters["partial_rotary_factor"] == 0.5
    # the rope parameters' own factor wins over the top-level one, as the mapper reads it
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75}
    assert transformers.PhiConfig(partial_rotary_factor=0.25, rope_parameters=dict(rope)).rope_parameters[
        "partial_rotary_factor"] == 0.75


# ---- generated configs -----------------------------------------------------------------------------------------

_ACTS = st.sampled_from(["gelu", "gelu_new", "relu", "silu", "gelu_pytorch_tanh"])


def _common(draw, model_type: str) -> dict:
    return dict(model_type=model_type, vocab_size=draw(st.integers(16, 64)),
                **TOKENS)


@st.composite
def gpt_neox_configs(draw) -> dict:
    heads, head_dim = draw(st.integers(1, 4)), draw(st.sampled_from([2, 4, 6, 8]))
    config = _common(draw, "gpt_neox") | dict(
        hidden_size=heads * head_dim, num_attention_heads=heads, num_hidden_layers=draw(st.integers(1, 3)),
        intermediate_size=draw(st.integers(1, 24)), hidden_act=draw(_ACTS),
        max_position_embeddings=draw(st.integers(8, 64)), tie_word_embeddings=draw(st.booleans()),
        use_parallel_residual=draw(st.booleans()), attention_bias=draw(st.booleans()))
    factor = draw(st.sampled_from([0.25, 0.5, 1.0, 0.3, 0.75]))
    where = draw(st.sampled_from(["default", "rotary_pct", "rope_parameters"]))
    if where == "rotary_pct":
        config["rotary_pct"] = factor
    elif where == "rope_parameters":
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": factor}
    return config


@st.composite
def gptj_configs(draw) -> dict:
    heads, head_dim = draw(st.integers(1, 4)), draw(st.sampled_from([2, 4, 8]))
    config = _common(draw, "gptj") | dict(rotary_dim=draw(st.sampled_from(range(2, head_dim + 1, 2))),
                                          activation_function=draw(_ACTS))
    names = draw(st.sampled_from([("n_embd", "n_head", "n_layer", "n_positions"),
                                  ("hidden_size", "num_attention_heads", "num_hidden_layers",
                                   "max_position_embeddings")]))
    config |= dict(zip(names, (heads * head_dim, heads, draw(st.integers(1, 3)), draw(st.integers(8, 64)))))
    if draw(st.booleans()):
        config["n_inner"] = draw(st.integers(1, 24) | st.none())
    return config


@st.composite
def phi_configs(draw) -> dict:
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    head_dim = draw(st.sampled_from([8, 16]))
    config = _common(draw, "phi") | dict(
        num_attention_heads=heads, num_key_value_heads=draw(st.sampled_from([kv, None])) if kv == heads else kv,
        num_hidden_layers=draw(st.integers(1, 3)), intermediate_size=draw(st.integers(1, 24)),
        hidden_act=draw(_ACTS), max_position_embeddings=draw(st.integers(8, 64)))
    if draw(st.booleans()):  # a head of its own width: no qk_layernorm (transformers' norms are D // H wide)
        config |= dict(head_dim=head_dim, hidden_size=draw(st.integers(8, 32)))
    else:
        config |= dict(hidden_size=heads * head_dim, qk_layernorm=draw(st.booleans()))
    factor = draw(st.sampled_from([0.5, 0.25, 1.0, 0.75]))
    where = draw(st.sampled_from(["default", "partial_rotary_factor", "rope_parameters"]))
    if where == "partial_rotary_factor":
        config["partial_rotary_factor"] = factor
    elif where == "rope_parameters":
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": factor}
    return config


@st.composite
def falcon_configs(draw) -> dict:
    heads, head_dim = draw(st.integers(1, 4)), draw(st.sampled_from([2, 4, 8]))
    config = _common(draw, "falcon") | dict(
        num_attention_heads=heads, num_hidden_layers=draw(st.integers(1, 3)),
        max_position_embeddings=draw(st.integers(8, 64)), tie_word_embeddings=draw(st.booleans()),
        alibi=draw(st.sampled_from([True, False, None])), bias=draw(st.sampled_from([True, False, None])),
        activation=draw(st.sampled_from(["gelu", "relu", "silu", "gelu_new"])),
        ffn_hidden_size=draw(st.integers(1, 24) | st.none()))
    config["n_embed" if draw(st.booleans()) else "hidden_size"] = heads * head_dim
    if draw(st.booleans()):  # the new decoder architecture: grouped-query, one or two norms
        kv = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
        config |= dict(new_decoder_architecture=True, parallel_attn=True, num_kv_heads=kv,
                       num_ln_in_parallel_attn=draw(st.sampled_from([None, 1, 2])))
    else:
        multi_query = draw(st.sampled_from([True, False, None]))
        config |= dict(new_decoder_architecture=draw(st.sampled_from([False, None])), multi_query=multi_query,
                       parallel_attn=draw(st.sampled_from([True, False, None])))
        if multi_query is True:
            config["num_kv_heads"] = draw(st.integers(1, 4))  # not read: one key/value head
    return config


@st.composite
def cohere_configs(draw) -> dict:
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    head_dim = draw(st.sampled_from([2, 4, 8]))
    config = _common(draw, "cohere") | dict(
        num_attention_heads=heads, num_key_value_heads=kv, num_hidden_layers=draw(st.integers(1, 3)),
        intermediate_size=draw(st.integers(1, 24)), hidden_act=draw(st.sampled_from(["silu", "gelu", "relu"])),
        max_position_embeddings=draw(st.integers(8, 64)), tie_word_embeddings=draw(st.booleans()),
        attention_bias=draw(st.booleans()), logit_scale=draw(st.sampled_from([0.0625, 1.0])),
        use_qk_norm=draw(st.sampled_from([False, None, True])))
    if draw(st.booleans()):
        config |= dict(head_dim=head_dim, hidden_size=draw(st.integers(4, 32)))
    else:
        config["hidden_size"] = heads * head_dim
    return config


STRATEGIES = {"gpt_neox": gpt_neox_configs(), "gptj": gptj_configs(), "phi": phi_configs(),
              "falcon": falcon_configs(), "cohere": cohere_configs()}


@pytest.mark.parametrize("model_type", CLASSES)
@settings(max_examples=12, deadline=None)
@given(data=st.data(), batch=st.integers(1, 2), seq_len=st.integers(1, 8))
def test_generated_configs_match_transformers_exactly(tmp_path_factory, model_type, data, batch, seq_len):
    config = data.draw(STRATEGIES[model_type], label="config")
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec.replace(batch_size=batch,
                                                                                     seq_len=seq_len)
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    assert result.flops.forward == eager_forward_flops(config, batch, seq_len)


# ---- what each field maps to --------------------------------------------------------------------------------------

def read(tmp_path, **config):
    return read_hf_config(write(tmp_path, config)).spec


def test_block_layouts(tmp_path):
    neox = dict(model_type="gpt_neox", hidden_size=32, num_attention_heads=4)
    assert read(tmp_path, **neox).parallel_block == "two_norms"
    assert read(tmp_path, **neox, use_parallel_residual=False).parallel_block == "none"
    assert read(tmp_path, model_type="gptj").parallel_block == "one_norm"
    assert read(tmp_path, model_type="phi").parallel_block == "one_norm"
    assert read(tmp_path, model_type="cohere").parallel_block == "one_norm"
    f = dict(model_type="falcon", hidden_size=64, num_attention_heads=4)
    assert (read(tmp_path, **f).parallel_block, read(tmp_path, **f).n_kv_heads) == ("one_norm", 1)
    assert read(tmp_path, **f, parallel_attn=False).parallel_block == "none"
    assert read(tmp_path, **f, multi_query=False).n_kv_heads == 4
    new = f | dict(new_decoder_architecture=True, num_kv_heads=2)
    assert (read(tmp_path, **new).parallel_block, read(tmp_path, **new).n_kv_heads) == ("two_norms", 2)
    assert read(tmp_path, **new, num_ln_in_parallel_attn=1).parallel_block == "one_norm"
    assert read(tmp_path, **f, alibi=True).positions == "alibi"
    assert read(tmp_path, **f, n_embed=32).d_model == 32


def test_partial_rotary(tmp_path):
    neox = dict(model_type="gpt_neox", hidden_size=64, num_attention_heads=2)  # heads of 32
    assert read(tmp_path, **neox).rotary_dim == 8  # rotary_pct 0.25
    assert read(tmp_path, **neox, rotary_pct=1.0).rotary_dim is None  # the whole head
    assert read(tmp_path, **neox, rotary_pct=0.3).rotary_dim == 10  # int(9.6) = 9, tables of 10
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    assert read(tmp_path, **neox, rotary_pct=0.25, rope_parameters=rope).rotary_dim == 16
    assert read(tmp_path, **neox, rotary_pct=0.0).positions == "none"
    assert read(tmp_path, model_type="phi").rotary_dim == 32  # heads of 64, factor 0.5
    assert read(tmp_path, model_type="phi", partial_rotary_factor=0.4, hidden_size=2560).rotary_dim == 32
    assert read(tmp_path, model_type="gptj").rotary_dim == 64


def test_heads_and_biases(tmp_path):
    j = read(tmp_path, model_type="gptj")
    assert (j.bias, j.has_mlp_bias, j.head_bias, j.tie_embeddings, j.d_ff) == (False, True, True, False, 16384)
    p = read(tmp_path, model_type="phi", qk_layernorm=True)
    assert (p.bias, p.has_mlp_bias, p.head_bias, p.qk_norm, p.norm) == (True, True, True, "head", "layernorm")
    n = read(tmp_path, model_type="gpt_neox", attention_bias=False)
    assert (n.bias, n.has_mlp_bias, n.head_bias, n.tie_embeddings) == (False, True, False, False)
    c = read(tmp_path, model_type="cohere")
    assert (c.norm, c.mlp, c.bias, c.tie_embeddings, c.n_kv_heads) == ("layernorm_no_bias", "gated", False, True, 64)


@pytest.mark.parametrize("config, message", [
    ({"model_type": "gpt_neox", "hidden_size": 30, "num_attention_heads": 4}, "hidden_size=30 is not modelled"),
    ({"model_type": "gpt_neox", "rotary_pct": None}, "rotary_pct=None is not modelled"),
    ({"model_type": "gpt_neox", "rotary_pct": 1.5}, "rotary_pct=1.5 is not modelled"),
    ({"model_type": "gpt_neox", "rope_parameters": {"partial_rotary_factor": "x"}},
     "rope_parameters.partial_rotary_factor='x' is not modelled"),
    ({"model_type": "gpt_neox", "hidden_size": 12, "num_attention_heads": 4, "rotary_pct": 1.0},
     "rotary_pct=1.0 is not modelled"),  # an odd head (3): tables of 4
    ({"model_type": "gpt_neox", "rotary_pct": 1}, "rotary_pct=1: expected a float"),
    ({"model_type": "gptj", "rotary_dim": 3}, "rotary_dim=3 is not modelled"),
    ({"model_type": "gptj", "rotary_dim": 0}, "rotary_dim=0 is not modelled"),
    ({"model_type": "gptj", "rotary_dim": 512}, "rotary_dim=512 is not modelled"),
    ({"model_type": "gptj", "rotary_dim": None}, "rotary_dim=None: expected an integer"),
    ({"model_type": "gptj", "tie_word_embeddings": True}, "tie_word_embeddings=True is not modelled"),
    ({"model_type": "gptj", "n_embd": 100, "n_head": 3}, "n_embd=100 is not modelled"),
    ({"model_type": "phi", "tie_word_embeddings": True}, "tie_word_embeddings=True is not modelled"),
    ({"model_type": "phi", "head_dim": 32, "qk_layernorm": True}, "qk_layernorm=True is not modelled"),
    ({"model_type": "phi", "partial_rotary_factor": 0.3}, "partial_rotary_factor=0.3 is not modelled"),  # 19
    ({"model_type": "phi", "partial_rotary_factor": None}, "partial_rotary_factor=None is not modelled"),
    ({"model_type": "phi", "head_dim": None}, "head_dim=None: expected an integer"),
    ({"model_type": "falcon", "new_decoder_architecture": True, "parallel_attn": False},
     "parallel_attn=False is not modelled"),
    ({"model_type": "falcon", "new_decoder_architecture": True, "num_ln_in_parallel_attn": 3},
     "num_ln_in_parallel_attn=3 is not modelled"),
    ({"model_type": "falcon", "num_ln_in_parallel_attn": 2}, "num_ln_in_parallel_attn=2 is not modelled"),
    ({"model_type": "falcon", "multi_query": False, "num_kv_heads": 1}, "num_kv_heads=1 is not modelled"),
    ({"model_type": "falcon", "hidden_size": 60, "num_attention_heads": 4}, "hidden_size=60 is not modelled"),
    ({"model_type": "falcon", "hidden_size": 100, "num_attention_heads": 3}, "hidden_size=100 is not modelled"),
    ({"model_type": "falcon", "activation": None}, "activation=None is not modelled"),
    ({"model_type": "falcon", "alibi": "false"}, "alibi='false': expected a boolean (true or false) or null"),
    ({"model_type": "cohere", "head_dim": 5}, "head_dim=5 is not modelled"),
    ({"model_type": "cohere", "logit_scale": 1}, "logit_scale=1: expected a float"),
    ({"model_type": "cohere", "logit_scale": None}, "logit_scale=None is not modelled"),
])
def test_refusals_name_the_field(tmp_path, config, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, config))
    assert message in str(e.value), str(e.value)


# ---- check --hf-config, component by component ---------------------------------------------------------------------

CHECKED = [
    dict(model_type="gpt_neox", vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
         intermediate_size=48, max_position_embeddings=16),
    dict(model_type="gpt_neox", vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
         intermediate_size=48, max_position_embeddings=16, use_parallel_residual=False, tie_word_embeddings=True),
    dict(model_type="gptj", vocab_size=50, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=16),
    dict(model_type="phi", vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, intermediate_size=40, max_position_embeddings=16, qk_layernorm=True),
    dict(model_type="falcon", vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
         max_position_embeddings=16),
    dict(model_type="falcon", vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
         num_kv_heads=2, new_decoder_architecture=True, bias=True, alibi=True, max_position_embeddings=16),
    dict(model_type="falcon", vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
         parallel_attn=False, multi_query=False, max_position_embeddings=16),
    dict(model_type="cohere", vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, intermediate_size=40, max_position_embeddings=16),
]


@pytest.mark.parametrize("config", CHECKED, ids=lambda c: c["model_type"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=8))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows


# ---- the presets ---------------------------------------------------------------------------------------------------

# The published config.json files (typed from memory; no network here)
PUBLISHED = {
    "pythia-6.9b": dict(model_type="gpt_neox", bos_token_id=0, eos_token_id=0, hidden_act="gelu", hidden_size=4096,
                        intermediate_size=16384, layer_norm_eps=1e-05, max_position_embeddings=2048,
                        num_attention_heads=32, num_hidden_layers=32, rotary_emb_base=10000, rotary_pct=0.25,
                        tie_word_embeddings=False, use_cache=True, use_parallel_residual=True, vocab_size=50432),
    "gpt-j-6b": dict(model_type="gptj", activation_function="gelu_new", bos_token_id=50256, eos_token_id=50256,
                     layer_norm_epsilon=1e-05, n_embd=4096, n_head=16, n_inner=None, n_layer=28, n_positions=2048,
                     rotary=True, rotary_dim=64, tie_word_embeddings=False, vocab_size=50400),
    "falcon-7b": dict(model_type="falcon", alibi=False, apply_residual_connection_post_layernorm=False, bias=False,
                      bos_token_id=11, eos_token_id=11, hidden_size=4544, layer_norm_epsilon=1e-05, multi_query=True,
                      new_decoder_architecture=False, num_attention_heads=71, num_hidden_layers=32,
                      parallel_attn=True, vocab_size=65024),
    "falcon-40b": dict(model_type="falcon", alibi=False, apply_residual_connection_post_layernorm=False, bias=False,
                       bos_token_id=11, eos_token_id=11, hidden_size=8192, layer_norm_epsilon=1e-05,
                       multi_query=True, new_decoder_architecture=True, num_attention_heads=128,
                       num_hidden_layers=60, num_kv_heads=8, parallel_attn=True, vocab_size=65024),
    "phi-2": dict(model_type="phi", bos_token_id=50256, eos_token_id=50256, hidden_act="gelu_new", hidden_size=2560,
                  intermediate_size=10240, layer_norm_eps=1e-05, max_position_embeddings=2048, num_attention_heads=32,
                  num_hidden_layers=32, num_key_value_heads=32, partial_rotary_factor=0.4, qk_layernorm=False,
                  resid_pdrop=0.1, rope_scaling=None, rope_theta=10000.0, tie_word_embeddings=False,
                  vocab_size=51200),
    "command-r": dict(model_type="cohere", attention_bias=False, bos_token_id=5, eos_token_id=255001,
                      hidden_act="silu", hidden_size=8192, intermediate_size=22528, layer_norm_eps=1e-05,
                      logit_scale=0.0625, max_position_embeddings=8192, num_attention_heads=64, num_hidden_layers=40,
                      num_key_value_heads=64, pad_token_id=0, rope_theta=8000000.0, use_qk_norm=False,
                      vocab_size=256000),
    "command-r-plus": dict(model_type="cohere", attention_bias=False, bos_token_id=5, eos_token_id=255001,
                           hidden_act="silu", hidden_size=12288, intermediate_size=33792, layer_norm_eps=1e-05,
                           logit_scale=0.8333333333333334, max_position_embeddings=131072, num_attention_heads=96,
                           num_hidden_layers=64, num_key_value_heads=8, pad_token_id=0, rope_theta=75000000.0,
                           use_qk_norm=True, vocab_size=256000),
}


def test_gpt_j_published_count_is_its_eight_shard_checkpoint():
    # mesh-transformer-jax's 6,053,381,344 counts its JAX checkpoint: 8 tensor-parallel shards (cores_per_replica 8),
    # each with its own copy of the replicated tensors (29 layer norms' scale and offset: 28 blocks and the final
    # norm; the 28 row-parallel fc_out biases) and its own embedding bias (a Linear per vocabulary slice)
    D, L, shards = 4096, 28, 8
    replicated = (shards - 1) * (2 * D * (L + 1) + D * L)
    embedding_biases = shards * D
    assert count(load_preset("gpt-j-6b")).params.total + replicated + embedding_biases == 6_053_381_344


@pytest.mark.parametrize("preset, total", [
    ("pythia-6.9b", 6_857_302_016),  # the Pythia paper's Table 1
    ("gpt-j-6b", 6_050_882_784),  # mesh-transformer-jax's 6,053,381,344: its 8 shards' copies (test above)
    ("falcon-7b", 6_921_720_704),
    ("falcon-40b", 41_303_293_952),
    ("phi-2", 2_779_683_840),
    ("command-r", 34_980_831_232),
    ("command-r-plus", 103_810_674_688),  # q/k LayerNorms with a weight per head and channel (qk_norm per_head)
])
def test_presets_are_transformers_on_meta(tmp_path, preset, total):
    config = PUBLISHED[preset]
    assert meta_params(config) == total
    assert count(load_preset(preset)).params.total == total
    read_spec = read_hf_config(write(tmp_path, config)).spec
    assert read_spec.replace(name=preset) == load_preset(preset).replace(seq_len=read_spec.seq_len)


def test_pythia_non_embedding_count_is_the_papers():
    p = count(load_preset("pythia-6.9b")).params
    assert p.total - 2 * 50432 * 4096 == 6_444_163_072  # Table 1: non-embedding parameters
