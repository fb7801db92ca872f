"""LFM2 (lfm2) from its config.json: exact against transformers' Lfm2ForCausalLM (sum(numel) on meta, FlopCounterMode
forward FLOPs of an eager CPU forward), with transformers' defaults, its legacy keys, refusals by field name, the
check against transformers per component, and the lfm2-1.2b preset pinned to the class built from the published
config."""

import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import TfcalcError, Workload, count, find_preset, load_preset
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import hf_model

LAYER_TYPES = ["conv", "full_attention"]

# LiquidAI/LFM2-1.2B's config.json: every key transformers reads, verbatim from two public copies that agree on them (no
# network here to the hub): a Rust port's test quoting "the REAL LiquidAI/LFM2-1.2B/config.json, read from the Hub"
# and the Q4NX LFM2-1.2B-NPU2 container's config.json (which adds intermediate_size 8192, head_dim 64 and
# block_ffn_dim_multiplier 1.0; tie_word_embeddings absent: true). Keys transformers does not read (block_dim,
# conv_dim, block_norm_eps, num_heads, init scales, ...) are left out.
LFM2_1_2B = {"model_type": "lfm2", "block_auto_adjust_ff_dim": True, "block_ff_dim": 12288,
             "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256, "conv_L_cache": 3, "conv_bias": False,
             "full_attn_idxs": [2, 5, 8, 10, 12, 14], "hidden_size": 2048, "intermediate_size": 8192, "head_dim": 64,
             "max_position_embeddings": 128000, "num_attention_heads": 32, "num_hidden_layers": 16,
             "num_key_value_heads": 8, "rope_theta": 1000000.0, "vocab_size": 65536, "bos_token_id": 1,
             "eos_token_id": 7, "pad_token_id": 0}


def meta_params(config: dict) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in transformers.Lfm2ForCausalLM(hf_config(config)).parameters())


def eager_forward_flops(config: dict, batch: int, seq_len: int, use_cache: bool = True) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.Lfm2ForCausalLM._from_config(hf_config(config), attn_implementation="eager")
        ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=ids, use_cache=use_cache)
    return counter.get_total_flops()


def test_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["lfm2"].items():
        assert getattr(transformers.Lfm2Config, key) == value, key


def test_the_default_config_is_a_plain_transformer(tmp_path):
    # Lfm2Config's default: no layer_types, no full_attn_idxs -> every block attention (no conv kind given)
    spec = read_hf_config(write(tmp_path, {"model_type": "lfm2"})).spec
    assert spec.block_pattern is None and not spec.kinds
    assert (spec.d_model, spec.n_layers, spec.d_ff, spec.qk_norm, spec.activation) == (2560, 32, 8192, "head", "silu")
    assert hf_config({"model_type": "lfm2"}).layer_types == ["full_attention"] * 32


@st.composite
def configs(draw) -> dict:
    """Small configs over every field the mapper reads, within what it models (even heads: rotary)."""
    layers = draw(st.integers(1, 5))
    kv = draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 3))
    config = {"model_type": "lfm2", "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv, "vocab_size": draw(st.integers(16, 48)),
              "max_position_embeddings": draw(st.integers(8, 64)), "conv_L_cache": draw(st.integers(1, 5)),
              "conv_bias": draw(st.booleans()), "block_auto_adjust_ff_dim": draw(st.booleans()),
              "block_multiple_of": draw(st.integers(1, 8)),
              "block_ffn_dim_multiplier": draw(st.floats(0.3, 3.0) | st.integers(1, 3))}
    if draw(st.booleans()):
        config |= {"hidden_size": draw(st.sampled_from([8, 12, 16])), "head_dim": draw(st.sampled_from([2, 4, 6]))}
    else:  # hidden_size // heads, not necessarily exact: transformers floors it
        config["hidden_size"] = heads * draw(st.sampled_from([2, 4])) + draw(st.integers(0, heads - 1))
    width = draw(st.integers(2, 40))
    config[draw(st.sampled_from(["intermediate_size", "block_ff_dim"]))] = width
    if "block_ff_dim" in config and draw(st.booleans()):
        config["intermediate_size"] = draw(st.integers(2, 40))  # block_ff_dim wins
    tie = draw(st.booleans())
    config[draw(st.sampled_from(["tie_word_embeddings", "tie_embedding"]))] = tie
    if "tie_embedding" in config and draw(st.booleans()):
        config["tie_word_embeddings"] = not tie  # tie_embedding wins
    how = draw(st.sampled_from(["layer_types", "all_conv", "all_attention", "full_attn_idxs", "neither"]))
    if how == "layer_types":
        config["layer_types"] = draw(st.lists(st.sampled_from(LAYER_TYPES), min_size=layers, max_size=layers))
    elif how in ("all_conv", "all_attention"):
        config["layer_types"] = [{"all_conv": "conv", "all_attention": "full_attention"}[how]] * layers
    elif how == "full_attn_idxs":
        config["full_attn_idxs"] = draw(st.lists(st.integers(-1, layers), max_size=layers + 1))
    if draw(st.booleans()):
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    # within what tfcalc models: an MLP of at least one channel (Lfm2MLP's width, built below by transformers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlp = transformers.models.lfm2.modeling_lfm2.Lfm2MLP(hf_config(config))
    assume(mlp.w1.out_features >= 1)
    return config


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_generated_configs_match_transformers_exactly(tmp_path_factory, data):
    config = data.draw(configs())
    K = config["conv_L_cache"]
    # seq_len >= conv_L_cache: with a cache and fewer tokens than taps transformers pads (test below)
    batch, seq_len = data.draw(st.integers(1, 2)), data.draw(st.integers(K, 8))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == meta_params(config)
    layer_types = hf_config(config).layer_types
    # transformers' cached forward needs an attention block (get_seq_length); an all-conv model runs without a cache
    use_cache = "full_attention" in layer_types
    assert result.flops.forward == eager_forward_flops(config, batch, seq_len, use_cache)
    # block i is what transformers builds: the pattern cycled
    pattern = spec.block_pattern or ["attention+mlp"]
    ours = [pattern[i % len(pattern)] for i in range(spec.n_layers)]
    assert ours == [{"conv": "conv+mlp", "full_attention": "attention+mlp"}[t] for t in layer_types]
    if "conv" in layer_types:
        assert spec.kinds == {"conv": {"kernel": K, "bias": config["conv_bias"]}}
    else:
        assert not spec.kinds


def test_fewer_tokens_than_taps_with_a_cache(tmp_path):
    # With a cache (transformers' default, and check --hf-config's) and s < conv_L_cache, transformers first pads the
    # conv's input to K positions (DynamicCache.update_conv_state) and convolves those: K + K - 1 outputs per channel,
    # where tfcalc counts a train step's s + K - 1 (F.conv1d padded by K - 1 on both sides, sliced to s).
    config = {"model_type": "lfm2", "num_hidden_layers": 3, "hidden_size": 8, "num_attention_heads": 2,
              "num_key_value_heads": 1, "intermediate_size": 12, "block_multiple_of": 4, "vocab_size": 16,
              "conv_L_cache": 5, "layer_types": ["conv", "full_attention", "conv"]}
    b, s, D, K, conv_layers = 2, 2, 8, 5, 2
    spec = read_hf_config(write(tmp_path, config)).spec
    ours = count(spec, Workload(batch_size=b, seq_len=s)).flops.forward
    assert eager_forward_flops(config, b, s, use_cache=False) == ours  # no cache: s + K - 1 outputs, as tfcalc
    # 2 FLOPs per tap, per channel, per output position: 2 * b * D * K * ((K + K - 1) - (s + K - 1)) per conv layer
    assert eager_forward_flops(config, b, s, use_cache=True) - ours == conv_layers * 2 * b * D * K * (K - s) == 960
    at_k = count(spec, Workload(batch_size=b, seq_len=K)).flops.forward
    assert eager_forward_flops(config, b, K, use_cache=True) == at_k  # s = K: no padding


def test_check_hf_config_knows_the_padded_conv(tmp_path):
    # check --hf-config runs transformers with a cache: with s = 2 < K = 5 the conv rows and the total differ by the
    # padding above, marked known (the family's hook), and every other row matches
    config = {"model_type": "lfm2", "num_hidden_layers": 3, "hidden_size": 8, "num_attention_heads": 2,
              "num_key_value_heads": 1, "intermediate_size": 12, "block_multiple_of": 4, "vocab_size": 16,
              "conv_L_cache": 5, "layer_types": ["conv", "full_attention", "conv"], "max_position_embeddings": 16}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=2))
    assert report.match
    differ = {(r.figure, r.component): r for r in report.rows if not r.match}
    assert set(differ) == {("forward", "conv/conv"), ("forward", "total")}
    for row in differ.values():
        assert row.known and row.transformers - row.analytic == 2 * 2 * 2 * 8 * 5 * (5 - 2) == 960
        assert row.note.startswith("known: seq_len 2 < conv_L_cache 5"), row.note


def test_legacy_keys_and_widths(tmp_path):
    # block_ff_dim over intermediate_size, tie_embedding over tie_word_embeddings (Lfm2Config pops both from kwargs);
    # full_attn_idxs when layer_types is null (indices past the last block ignored)
    config = {"model_type": "lfm2", "num_hidden_layers": 4, "hidden_size": 16, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 32, "intermediate_size": 96, "block_ff_dim": 40,
              "block_multiple_of": 8, "block_ffn_dim_multiplier": 1.5, "tie_word_embeddings": True,
              "tie_embedding": False, "full_attn_idxs": [1, 7]}
    source = read_hf_config(write(tmp_path, config))
    spec = source.spec
    # int(2 * 40 / 3) = 26; int(1.5 * 26) = 39; rounded up to a multiple of 8: 40
    assert spec.d_ff == 40 and spec.tie_embeddings is False
    # 4 blocks, not a whole number of a shorter cycle: one entry per block
    assert spec.block_pattern == ["conv+mlp", "attention+mlp", "conv+mlp", "conv+mlp"]
    assert "block_ff_dim=40 read as intermediate_size" in source.source
    assert "tie_embedding=False read as tie_word_embeddings" in source.source
    assert "full_attn_idxs entries 7 not read" in source.source
    assert count(spec).params.total == meta_params(config)
    # without block_auto_adjust_ff_dim the width is intermediate_size as it is
    plain = read_hf_config(write(tmp_path, {**config, "block_auto_adjust_ff_dim": False})).spec
    assert plain.d_ff == 40
    # hidden_size // num_attention_heads floors: 18 // 4 = 4, q_proj 16 wide
    odd = read_hf_config(write(tmp_path, {**config, "hidden_size": 18})).spec
    assert odd.d_head == 4 and count(odd).params.total == meta_params({**config, "hidden_size": 18})


@pytest.mark.parametrize("changes, message", [
    ({"num_hidden_layers": 2, "layer_types": ["conv"]},
     "layer_types=['conv'] is not modelled: expected a list of num_hidden_layers=2 entries"),
    ({"num_hidden_layers": 2, "layer_types": ["conv", "sliding_attention"]},
     "layer_types=['conv', 'sliding_attention'] is not modelled: entries 'sliding_attention'"),
    ({"num_hidden_layers": 1, "layer_types": ["conv"], "conv_L_cache": 0}, "conv_L_cache=0 is not modelled"),
    ({"num_hidden_layers": 70_000, "full_attn_idxs": [0]}, "num_hidden_layers=70000 is not modelled: with full_attn"),
    ({"block_multiple_of": 0}, "block_multiple_of=0 is not modelled: transformers divides by it"),
    ({"intermediate_size": 1}, "intermediate_size=1 is not modelled: its MLP width is 0"),
    ({"block_ffn_dim_multiplier": 0.0}, "intermediate_size=12288 is not modelled: its MLP width is 0"),
    ({"block_ff_dim": 1}, "intermediate_size=1 is not modelled: its MLP width is 0"),
    ({"intermediate_size": 10**400}, "is not a finite number"),
    ({"head_dim": 5}, "head_dim=5 is not modelled: an odd head"),
    ({"hidden_size": 20, "num_attention_heads": 4}, "hidden_size=20 is not modelled: an odd head"),
    ({"hidden_size": 2, "num_attention_heads": 4}, "hidden_size=2 is not modelled: fewer channels"),
    ({"num_key_value_heads": 3}, "num_key_value_heads=3 is not modelled: does not divide num_attention_heads=32"),
    ({"head_dim": None}, "head_dim=None: expected an integer"),
    ({"num_key_value_heads": None}, "num_key_value_heads=None: expected an integer"),
    ({"block_ffn_dim_multiplier": None}, "block_ffn_dim_multiplier=None: expected a number"),
    ({"block_ffn_dim_multiplier": "1.0"}, "block_ffn_dim_multiplier='1.0': expected a number"),
    ({"conv_bias": "false"}, "conv_bias='false': expected a boolean"),
    ({"tie_embedding": 1}, "tie_embedding=1: expected a boolean"),
    ({"block_ff_dim": 12288.0}, "block_ff_dim=12288.0: expected an integer"),
    ({"full_attn_idxs": [1.0]}, "full_attn_idxs=[1.0]: expected a list of integers or null"),
])
def test_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "lfm2", **changes}))
    assert message in str(e.value), str(e.value)


def test_what_only_attention_or_only_conv_blocks_need(tmp_path):
    # an odd hidden_size // heads fails only in attention blocks (rotary); a kernel < 1 only in conv blocks
    conv_only = {"model_type": "lfm2", "num_hidden_layers": 2, "layer_types": ["conv", "conv"], "hidden_size": 20,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 30, "block_multiple_of": 4,
                 "vocab_size": 32}
    assert read_hf_config(write(tmp_path, conv_only)).spec.d_head == 5
    attention_only = {"model_type": "lfm2", "num_hidden_layers": 1, "conv_L_cache": 0}
    assert read_hf_config(write(tmp_path, attention_only)).spec.block_pattern is None
    assert "no attention block" in read_hf_config(write(tmp_path, conv_only)).source


@pytest.mark.parametrize("config", [
    {"num_hidden_layers": 5, "hidden_size": 48, "intermediate_size": 96, "num_attention_heads": 6,
     "num_key_value_heads": 2, "vocab_size": 97, "conv_L_cache": 3, "conv_bias": True, "tie_word_embeddings": False,
     "block_multiple_of": 16, "layer_types": ["conv", "full_attention", "conv", "conv", "full_attention"]},
    {"num_hidden_layers": 4, "hidden_size": 32, "intermediate_size": 40, "num_attention_heads": 4,
     "num_key_value_heads": 4, "head_dim": 6, "vocab_size": 64, "conv_L_cache": 4, "block_auto_adjust_ff_dim": False,
     "full_attn_idxs": [3]},
    {"num_hidden_layers": 2, "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 2,
     "num_key_value_heads": 1, "vocab_size": 32, "block_multiple_of": 8},  # every block attention
], ids=["mixed-biases", "head_dim-one-attention", "all-attention"])
def test_check_hf_config_matches_every_component(tmp_path, config):
    config = {"model_type": "lfm2", "max_position_embeddings": 64, **config}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=8))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    if "layer_types" in config:  # one operator_norm per block, before attention or the conv: D each
        assert rows["params", "attention/norm+conv/norm"].transformers == 5 * 48
        # 3 conv blocks: in_proj 48 -> 144 with bias, a depthwise kernel of 3 with bias
        assert rows["params", "conv/in_proj"].transformers == 3 * (48 * 144 + 144)
        assert rows["params", "conv/conv"].transformers == 3 * (48 * 3 + 48)
        # the conv over s + K - 1 = 10 positions: 2 * b * D * K * 10 per block
        assert rows["forward", "conv/conv"].transformers == 3 * 2 * 2 * 48 * 3 * 10


def test_lfm2_1_2b_preset_is_transformers_built_from_the_config(tmp_path):
    n_params = meta_params(LFM2_1_2B)
    # embedding 65536 * 2048 = 134,217,728; every block: MLP 3 * 2048 * 8192 + two norms 2 * 2048 = 50,335,744;
    # 10 conv blocks: 2048 * 6144 + 2048 * 3 + 2048 * 2048 = 16,783,360; 6 attention blocks: 2048 * (2048 + 2 * 512)
    # + 2048 * 2048 + 2 * 64 = 10,485,888; final norm 2048; head tied
    assert n_params == 134_217_728 + 16 * 50_335_744 + 10 * 16_783_360 + 6 * 10_485_888 + 2048 == 1_170_340_608
    preset = load_preset("lfm2-1.2b")
    assert count(preset).params.total == n_params
    assert f"{n_params:,}" in find_preset("lfm2-1.2b").source
    spec = read_hf_config(write(tmp_path, LFM2_1_2B)).spec
    assert spec.replace(name=preset.name) == preset
    ours, theirs = count(spec.replace(seq_len=4096)), count(preset.replace(seq_len=4096))
    assert ours.params.total == theirs.params.total and ours.flops.forward == theirs.flops.forward


# ---- LFM2-MoE (lfm2_moe) ---------------------------------------------------------------------------------------------

def moe_params(config: dict) -> int:
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in transformers.Lfm2MoeForCausalLM(hf_config(config)).parameters())


def moe_forward_flops(config: dict, batch: int, seq_len: int, use_cache: bool = True) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.Lfm2MoeForCausalLM._from_config(hf_config(config), attn_implementation="eager",
                                                             experts_implementation="eager")
        ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=ids, use_cache=use_cache)
    return counter.get_total_flops()


def test_moe_defaults_are_transformers_defaults():
    for key, value in DEFAULTS["lfm2_moe"].items():
        assert getattr(transformers.Lfm2MoeConfig, key) == value, key


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_generated_moe_configs_match_transformers_exactly(tmp_path_factory, data):
    draw = data.draw
    layers, kv = draw(st.integers(1, 5)), draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 2))
    experts = draw(st.integers(2, 4))
    config = {"model_type": "lfm2_moe", "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv, "hidden_size": heads * draw(st.sampled_from([2, 4])),
              "vocab_size": draw(st.integers(16, 48)), "intermediate_size": draw(st.integers(1, 24)),
              "moe_intermediate_size": draw(st.integers(1, 12)), "num_experts": experts,
              "num_experts_per_tok": draw(st.integers(1, experts)), "num_dense_layers": draw(st.integers(-1, 6)),
              "conv_L_cache": draw(st.integers(1, 4)), "conv_bias": draw(st.booleans()),
              "layer_types": draw(st.lists(st.sampled_from(LAYER_TYPES), min_size=layers, max_size=layers)),
              draw(st.sampled_from(["tie_word_embeddings", "tie_embedding"])): draw(st.booleans()),
              "use_expert_bias": draw(st.booleans()), "norm_topk_prob": draw(st.booleans())}
    batch, seq_len = draw(st.integers(1, 2)), draw(st.integers(config["conv_L_cache"], 6))
    spec = read_hf_config(write(tmp_path_factory.mktemp("hf"), config)).spec
    result = count(spec, Workload(batch_size=batch, seq_len=seq_len))
    assert result.params.total == moe_params(config)
    use_cache = "full_attention" in config["layer_types"]  # (as above: an all-conv model runs without a cache)
    assert result.flops.forward == moe_forward_flops(config, batch, seq_len, use_cache)


@pytest.mark.parametrize("changes, message", [
    ({"layer_types": None}, "layer_types=None is not modelled: Lfm2MoeConfig has no rule without it"),
    ({"num_hidden_layers": 3, "layer_types": ["conv"] * 3, "num_experts": 1},
     "num_experts=1 is not modelled: tfcalc models a mixture of 2 or more"),
    ({"num_hidden_layers": 3, "layer_types": ["conv"] * 3, "num_experts": 4, "num_experts_per_tok": 5},
     "num_experts_per_tok=5 is not modelled: more than num_experts=4"),
    ({"num_hidden_layers": 2, "layer_types": ["conv", "attention"]}, "entries 'attention'"),
    ({"num_dense_layers": 1.0}, "num_dense_layers=1.0: expected an integer"),
])
def test_moe_refusals_name_the_field(tmp_path, changes, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, {"model_type": "lfm2_moe", **changes}))
    assert message in str(e.value), str(e.value)


def test_moe_check_hf_config_matches_every_component(tmp_path):
    config = {"model_type": "lfm2_moe", "num_hidden_layers": 4, "hidden_size": 32, "intermediate_size": 48,
              "moe_intermediate_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
              "num_experts": 4, "num_experts_per_tok": 2, "num_dense_layers": 1, "max_position_embeddings": 64,
              "layer_types": ["conv", "full_attention", "conv", "full_attention"], "tie_word_embeddings": False}
    path = write(tmp_path, config)
    report = hf_model.compare(path, read_hf_config(path).spec, Workload(batch_size=2, seq_len=8))
    assert report.match and not [r for r in report.rows if r.match is None], report.rows
    rows = {(r.figure, r.component): r for r in report.rows}
    assert rows["params", "moe/experts"].transformers == 3 * 4 * 3 * 32 * 16  # 3 MoE blocks, 4 experts, SwiGLU
    assert rows["params", "moe/router"].transformers == 3 * 32 * 4  # no bias; expert_bias is a buffer


# LiquidAI/LFM2-8B-A1B's config.json, the keys transformers reads, as a public test fixture spells them (no network
# here to the hub): 24 blocks, attention at 2, 6, 10, 14, 18, 21, 32 experts (top 4) of 1792, the first 2 dense (7168)
LFM2_8B_A1B = {"model_type": "lfm2_moe", "vocab_size": 65536, "hidden_size": 2048, "intermediate_size": 7168,
               "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 8, "conv_L_cache": 3,
               "conv_bias": False, "max_position_embeddings": 128000, "num_experts": 32, "num_experts_per_tok": 4,
               "moe_intermediate_size": 1792, "num_dense_layers": 2, "use_expert_bias": True, "norm_topk_prob": True,
               "layer_types": ["full_attention" if i in (2, 6, 10, 14, 18, 21) else "conv" for i in range(24)]}


def test_lfm2_8b_a1b_is_transformers_built_from_its_config(tmp_path):
    # the model card: 8.3B parameters, 1.5B active
    result = count(read_hf_config(write(tmp_path, LFM2_8B_A1B)).spec)
    assert result.params.total == moe_params(LFM2_8B_A1B) == 8_339_929_856
    # active: 28 of the 32 experts' 3 * 2048 * 1792 weights idle in each of the 22 MoE blocks
    assert result.params.active == 8_339_929_856 - 22 * 28 * 3 * 2048 * 1792 == 1_557_740_288
