import pytest
from pydantic import ValidationError

from tfcalc import ModelSpec
from tfcalc.errors import validation_lines

BASE = dict(n_layers=12, d_model=768, n_heads=12, vocab_size=50257, seq_len=1024)


def lines(**fields) -> list[str]:
    with pytest.raises(ValidationError) as info:
        ModelSpec(**fields)
    return validation_lines(info.value)


def test_defaults_make_a_gpt_style_decoder():
    spec = ModelSpec(**BASE)
    assert (spec.d_head, spec.n_kv_heads, spec.d_ff, spec.max_positions) == (768 // 12, 12, 4 * 768, 1024)
    assert (spec.batch_size, spec.mlp, spec.norm, spec.norm_position, spec.positions) == (
        1, "standard", "layernorm", "pre", "learned")
    assert spec.bias and spec.tie_embeddings and spec.causal and spec.final_norm and spec.lm_head
    assert spec.n_experts == 1 and spec.d_expert is None  # a dense model has no experts to size
    assert spec.replace(n_experts=8, top_k=2).d_expert == spec.d_ff


def test_d_head_may_differ_from_d_model_over_n_heads():
    spec = ModelSpec(**{**BASE, "d_model": 770, "d_head": 64})
    assert spec.d_attn == 12 * 64


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"d_model": 770}, "d_model=770 is not divisible by n_heads=12; give d_head"),
        ({"n_kv_heads": 5}, "n_kv_heads=5 does not divide n_heads=12"),
        ({"n_experts": 8, "top_k": 9}, "top_k=9 is greater than n_experts=8"),
        ({"top_k": 2}, "top_k=2 is greater than n_experts=1"),
        ({"n_layers": 0}, "n_layers=0: Input should be greater than 0"),
        ({"d_model": -768}, "d_model=-768: Input should be greater than 0"),
        ({"seq_len": 12.5}, "seq_len=12.5: Input should be a valid integer"),
        ({"vocab_size": "50257"}, "vocab_size='50257': Input should be a valid integer"),
        ({"bias": 1}, "bias=1: Input should be a valid boolean"),
        ({"seq_len": 2048, "max_positions": 1024}, "seq_len=2048 exceeds max_positions=1024"),
        ({"positions": "rotary", "max_positions": 1024}, "max_positions=1024 is only for learned positions"),
        ({"mlp": "swiglu"}, "mlp='swiglu': Input should be 'standard' or 'gated'"),
        ({"n_shared_experts": 1}, "n_shared_experts=1 needs a mixture of experts"),
        ({"dropout": 0.1}, "dropout=0.1: unknown field"),
        ({"qk_norm": "layer"}, "qk_norm='layer': Input should be 'none', 'head', 'per_head' or 'full'"),
        ({"norm_position": "peri"}, "norm_position='peri': Input should be 'pre', 'post', 'sandwich' or 'output'"),
        ({"qk_norm": "head", "n_encoder_layers": 2}, "qk_norm='head' is for decoder- or encoder-only models"),
        ({"parallel_block": "one_norm", "norm_position": "post"},
         "parallel_block='one_norm' needs norm_position='pre', got norm_position='post'"),
        ({"parallel_block": "two_norms", "n_encoder_layers": 2},
         "parallel_block='two_norms' is for decoder- or encoder-only models"),
        ({"parallel_block": "both"}, "parallel_block='both': Input should be 'none', 'one_norm' or 'two_norms'"),
        ({"rotary_dim": 16}, "rotary_dim=16 is only for rotary positions, not positions='learned'"),
        ({"positions": "rotary", "max_positions": None, "rotary_dim": 65}, "rotary_dim=65 is more than d_head=64"),
        ({"shared_blocks": 13}, "shared_blocks=13 is more than n_layers=12"),
        ({"shared_blocks": 1, "n_experts": 4}, "shared_blocks=1 needs blocks that are all alike: not with n_experts=4"),
        ({"d_embedding": 128}, "d_embedding=128 is for an encoder without an LM head"),
        ({"head_bias": True}, "head_bias=True needs an untied LM head (lm_head=True, tie_embeddings=False), got "
                              "lm_head=True, tie_embeddings=True"),
        # Gemma 4's block kinds
        ({"global_n_kv_heads": 5}, "global_n_kv_heads=5 does not divide n_heads=12"),
        ({"global_d_head": 128, "n_encoder_layers": 2}, "global_d_head=128 is not modelled with n_encoder_layers=2"),
        ({"moe_beside_mlp": True}, "moe_beside_mlp=True needs a mixture of experts (n_experts > 1)"),
        ({"moe_beside_mlp": True, "n_experts": 4}, "moe_beside_mlp=True is modelled with norm_position='sandwich'"),
        ({"per_layer_vocab": 100}, "per_layer_vocab=100 needs d_per_layer_input"),
        ({"kv_shared_d_ff": 100}, "kv_shared_d_ff=100 needs kv_shared_layers > 0"),
        ({"kv_shared_layers": 12}, "kv_shared_layers=12: at least one block before them computes"),
        ({"kv_shared_layers": 3, "sliding_window": 8, "attention_pattern": ["local"] * 9 + ["global"] * 3},
         "kv_shared_layers=3: the shared blocks include global blocks, and no block of that kind comes before"),
        ({"kv_shared_layers": 1, "shared_blocks": 1}, "kv_shared_layers=1 is not modelled with shared_blocks=1"),
    ],
)
def test_invalid_specs_are_refused_naming_field_and_value(change, expected):
    problems = lines(**{**BASE, **change})
    assert len(problems) == 1
    assert problems[0].startswith(expected), problems


def test_several_problems_give_one_line_each():
    problems = lines(**{**BASE, "d_model": 770, "n_kv_heads": 5})
    assert problems == ["d_model=770 is not divisible by n_heads=12; give d_head",
                        "n_kv_heads=5 does not divide n_heads=12"]


def test_missing_field_is_named():
    assert lines(n_layers=1) == [f"{f} is required" for f in ("d_model", "n_heads", "vocab_size", "seq_len")]


def test_frozen():
    spec = ModelSpec(**BASE)
    with pytest.raises(ValidationError):
        spec.seq_len = 2048


def test_replace_validates_and_rederives_defaults():
    spec = ModelSpec(**BASE)
    wider = spec.replace(d_model=1024, n_heads=16)
    assert (wider.d_head, wider.d_ff) == (64, 4096)
    # the position table is the model's: fixed from the seq_len the spec was written with, not re-derived
    assert spec.model_copy(update={"seq_len": 512}).max_positions == BASE["seq_len"]
    with pytest.raises(ValidationError):
        spec.replace(n_kv_heads=5)
    pinned = ModelSpec(**BASE, max_positions=1024)
    with pytest.raises(ValidationError, match="exceeds max_positions"):
        pinned.model_copy(update={"seq_len": 8192})


def test_huge_sizes_stay_exact_integers():
    spec = ModelSpec(n_layers=10_000, d_model=10**6, n_heads=1000, vocab_size=10**6, seq_len=10**7)
    assert spec.max_positions == 10**7 and isinstance(spec.d_head, int)
