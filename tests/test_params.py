"""Parameter counts against published sum(p.numel()) figures, with the arithmetic shown."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfcalc import ModelSpec, count, load_preset

# Issue 2's table: sum(p.numel()) of the Hugging Face model built from the published config.
HF_TOTALS = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "gpt3-175b": 174_604_259_328,
    "bert-base": 109_482_240,
    "bert-large": 335_141_888,
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
}


@pytest.mark.parametrize("name, total", HF_TOTALS.items())
def test_preset_totals_match_transformers(name, total):
    assert count(load_preset(name)).params.total == total


def test_mixtral_active():
    assert count(load_preset("mixtral-8x7b")).params.active == 12_879_925_248


def test_gpt2_arithmetic():
    D, V, L, P = 768, 50257, 12, 1024
    block = (2 * D) + (D * 3 * D + 3 * D) + (D * D + D) + (2 * D) + (D * 4 * D + 4 * D) + (4 * D * D + D)
    assert block == 12 * D**2 + 13 * D
    result = count(load_preset("gpt2"))
    assert result.params.total == V * D + P * D + L * block + 2 * D == 124_439_808
    assert result.params.embedding == V * D + P * D
    assert result.params.non_embedding == L * block + 2 * D


def test_gpt2_without_biases_matches_nanogpt():
    # nanoGPT transformer_sizing: GPT-2 with bias=False has 124,337,664 parameters (LayerNorm without bias too;
    # we keep the LayerNorm biases, 2 * 768 per block and 768 at the end, and add them back).
    spec = load_preset("gpt2").replace(bias=False)
    assert count(spec).params.total == 124_337_664 + (2 * 12 + 1) * 768


def test_llama2_7b_arithmetic():
    D, F, V, L = 4096, 11008, 32000, 32
    block = 4 * D * D + 3 * D * F + 2 * D
    assert count(load_preset("llama2-7b")).params.total == 2 * V * D + L * block + D == 6_738_415_616


def test_mixtral_components():
    D, F, E, L, kv = 4096, 14336, 8, 32, 8 * 128
    p = count(load_preset("mixtral-8x7b")).params
    assert p.components["moe/router"] == L * D * E
    assert p.components["moe/experts"] == L * E * 3 * D * F
    assert p.components["attention/qkv"] == L * (D * D + 2 * D * kv)
    assert p.total - p.active == L * (E - 2) * 3 * D * F


def test_bert_base_arithmetic():
    D, V, L, F = 768, 30522, 12, 3072
    embeddings = V * D + 512 * D + 2 * D + 2 * D  # word, position, token type, LayerNorm
    block = 4 * (D * D + D) + (D * F + F) + (F * D + D) + 2 * (2 * D)
    pooler = D * D + D
    assert count(load_preset("bert-base")).params.total == embeddings + L * block + pooler == 109_482_240


@pytest.mark.parametrize(
    "name, table",  # Brown et al. 2020, Table 2.1, n_params
    [("gpt3-125m", 125e6), ("gpt3-350m", 350e6), ("gpt3-760m", 760e6), ("gpt3-1.3b", 1.3e9),
     ("gpt3-2.7b", 2.7e9), ("gpt3-6.7b", 6.7e9), ("gpt3-13b", 13.0e9), ("gpt3-175b", 175.0e9)],
)
def test_gpt3_family_within_2_percent_of_the_paper(name, table):
    assert abs(count(load_preset(name)).params.total / table - 1) < 0.02


@pytest.mark.parametrize(
    "name, tenths_of_billions",  # LLaMA paper, Table 2: 6.7B, 13.0B, 32.5B, 65.2B
    [("llama-7b", 67), ("llama-13b", 130), ("llama-33b", 325), ("llama-65b", 652)],
)
def test_llama1_matches_the_paper_truncated(name, tenths_of_billions):
    # The paper truncates: 65,285,660,672 parameters is printed as 65.2B.
    assert count(load_preset(name)).params.total // 10**8 == tenths_of_billions


def test_mixtral_8x22b_headline():
    p = count(load_preset("mixtral-8x22b")).params
    assert round(p.total / 1e9) == 141 and round(p.active / 1e9) == 39


@given(L=st.integers(1, 64), H=st.integers(1, 32), d_head=st.integers(1, 128), c=st.integers(1, 8),
       bias=st.booleans(), norm=st.sampled_from(["layernorm", "rmsnorm"]))
def test_seed_identity_params(L, H, d_head, c, bias, norm):
    # A dense MHA block with d_ff = c D: 4 D^2 + 2 c D^2 weights, plus biases (3D + D + cD + D) and two norms.
    D = H * d_head
    spec = ModelSpec(n_layers=L, d_model=D, n_heads=H, d_ff=c * D, vocab_size=7, seq_len=3, bias=bias, norm=norm)
    p = count(spec).params
    norms = 2 * (2 * D if norm == "layernorm" else D)
    biases = (3 * D + D + c * D + D) if bias else 0
    block = p.total - p.components["embedding/token"] - p.components["embedding/position"] - p.components[
        "final_norm"]
    assert block == L * (4 * D**2 + 2 * c * D**2 + biases + norms)


def test_tied_head_counted_once_untied_twice():
    spec = ModelSpec(n_layers=1, d_model=8, n_heads=2, vocab_size=100, seq_len=4)
    tied, untied = count(spec).params, count(spec.replace(tie_embeddings=False)).params
    assert untied.total - tied.total == 100 * 8
    assert "head" not in tied.components and untied.components["head"] == 800
    assert untied.embedding - tied.embedding == 800  # an untied unembedding is a vocabulary embedding (Kaplan)


def test_qwen2_style_qkv_bias_only():
    spec = ModelSpec(n_layers=1, d_model=8, n_heads=2, n_kv_heads=1, vocab_size=10, seq_len=4, bias=False,
                     qkv_bias=True, positions="rotary", norm="rmsnorm", mlp="gated")
    p = count(spec).params.components
    assert p["attention/qkv"] == 8 * (8 + 2 * 4) + (8 + 2 * 4)
    assert p["attention/out"] == 8 * 8


def test_moe_shared_experts_and_gate():
    spec = ModelSpec(n_layers=2, d_model=16, n_heads=2, vocab_size=10, seq_len=4, mlp="gated", bias=False,
                     n_experts=4, top_k=2, d_expert=8, n_shared_experts=1, d_shared_expert=32,
                     shared_expert_gate=True, positions="none")
    p = count(spec).params
    one_expert, shared = 3 * 16 * 8, 3 * 16 * 32
    assert p.components["moe/experts"] == 2 * 4 * one_expert
    assert p.components["moe/shared_experts"] == 2 * shared
    assert p.components["moe/shared_gate"] == 2 * 16
    assert p.total - p.active == 2 * (4 - 2) * one_expert


def test_gpt2_without_any_bias_is_nanogpt_exactly():
    # nanoGPT's transformer_sizing: GPT-2 with bias=False (linears and LayerNorms) has 124,337,664 parameters
    spec = load_preset("gpt2").replace(bias=False, norm="layernorm_no_bias")
    assert count(spec).params.total == 124_337_664


def test_parallel_blocks_share_or_keep_their_norms():
    # x + attn(ln(x)) + mlp(ln(x)) has one norm a block fewer than the sequential block; with two norms the same
    # parameters, and the FLOPs are the same either way (the same matmuls on the same rows)
    D, L = 768, 12
    seq = load_preset("gpt2")
    one, two = seq.replace(parallel_block="one_norm"), seq.replace(parallel_block="two_norms")
    assert count(seq).params.total - count(one).params.total == L * 2 * D
    assert count(two).params.total == count(seq).params.total
    assert count(one).flops.forward == count(two).flops.forward == count(seq).flops.forward


def test_head_bias_alibi_and_partial_rotary():
    D, V, P = 768, 50257, 1024
    gpt2 = load_preset("gpt2")
    untied = gpt2.replace(tie_embeddings=False)
    assert count(untied.replace(head_bias=True)).params.total == count(untied).params.total + V
    # ALiBi and rotary have no parameters: the learned table's P x D go
    for positions in ("alibi", "rotary"):
        spec = gpt2.replace(positions=positions, max_positions=None)
        assert count(spec).params.total == count(gpt2).params.total - P * D
    rotary = gpt2.replace(positions="rotary", max_positions=None)
    assert count(rotary.replace(rotary_dim=16)).params.total == count(rotary).params.total
