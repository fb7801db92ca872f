"""Forward FLOPs: the nanoGPT figure, the seed identity, causal and MoE arithmetic."""

from hypothesis import given
from hypothesis import strategies as st

from tfcalc import ModelSpec, count, load_preset
from tfcalc.counts.folds import matmul


def test_matmul_is_two_flops_per_multiply_add():
    assert matmul(2, 3, 4) == 2 * (2 * 4) * 3


def test_gpt2_forward_matches_nanogpt_transformer_sizing():
    # nanoGPT transformer_sizing.ipynb, GPT-2 at block_size 1024: forward_total = 291,648,307,200.
    N, D, V, L, H = 1024, 768, 50257, 12, 12
    kqv = 2 * N * (D * 3 * D)
    scores = 2 * N * N * D
    reduce = 2 * H * (N * N * (D // H))
    proj = 2 * N * (D * D)
    mlp = 2 * N * (D * 4 * D) + 2 * N * (4 * D * D)
    dense = 2 * N * (D * V)
    expected = L * (kqv + scores + reduce + proj + mlp) + dense
    result = count(load_preset("gpt2"))
    assert result.flops.forward == expected == 291_648_307_200
    assert result.macs.forward * 2 == result.flops.forward
    assert result.flops.backward == 2 * expected and result.flops.train_step == 3 * expected
    assert result.flops.per_token == expected // N


@given(L=st.integers(1, 48), H=st.integers(1, 32), d_head=st.integers(1, 256), c=st.integers(1, 8),
       N=st.integers(1, 10**6), B=st.integers(1, 64))
def test_seed_identity_block_macs(L, H, d_head, c, N, B):
    # Per block and sequence, MACs = 2 N^2 D + (4 + 2c) N D^2 (d_head = D/H, d_ff = c D, MHA, dense).
    D = H * d_head
    spec = ModelSpec(n_layers=L, d_model=D, n_heads=H, d_ff=c * D, vocab_size=11, seq_len=N, batch_size=B,
                     positions="rotary", lm_head=False)
    assert count(spec).macs.forward == L * B * (2 * N * N * D + (4 + 2 * c) * N * D * D)


def test_gqa_and_d_head_shapes():
    spec = ModelSpec(n_layers=1, d_model=64, n_heads=8, d_head=16, n_kv_heads=2, vocab_size=5, seq_len=10,
                     lm_head=False, positions="none")
    f = count(spec).flops.components
    assert f["attention/qkv"] == 2 * 10 * 64 * (8 * 16 + 2 * 2 * 16)
    assert f["attention/scores"] == f["attention/values"] == 2 * 8 * 10 * 10 * 16
    assert f["attention/out"] == 2 * 10 * (8 * 16) * 64


def test_causal_counts_the_lower_triangle():
    spec = ModelSpec(n_layers=3, d_model=32, n_heads=4, vocab_size=5, seq_len=100, batch_size=2)
    r = count(spec)
    full = r.flops.components["attention/scores"] + r.flops.components["attention/values"]
    triangle = 2 * (2 * 3 * 2 * 4 * 8 * (100 * 101 // 2))  # scores + values, 2 FLOPs, L B H d_head, pairs
    assert r.flops.forward - r.flops.forward_causal == full - triangle
    bidirectional = count(spec.replace(causal=False))
    assert bidirectional.flops.forward_causal == bidirectional.flops.forward


def test_moe_expert_flops_are_tokens_times_top_k_times_one_expert():
    r = count(load_preset("mixtral-8x7b").replace(seq_len=4096, batch_size=2))
    T, D, F, E, L = 2 * 4096, 4096, 14336, 8, 32
    one_expert_per_token = 3 * 2 * D * F
    assert r.flops.components["moe/experts"] == L * T * 2 * one_expert_per_token
    assert r.flops.components["moe/router"] == L * 2 * T * D * E


def test_pooler_runs_once_per_sequence():
    r = count(load_preset("bert-base"))
    assert r.flops.components["pooler"] == 2 * 768 * 768
    assert "head" not in r.flops.components
    # 2 D^2 / N is a whole number at N = 512 but not at N = 500: per_token is then the exact quotient as a float
    assert r.flops.per_token == r.flops.forward // 512
    odd = count(load_preset("bert-base").replace(seq_len=500)).flops
    assert odd.per_token == odd.forward / 500 and isinstance(odd.per_token, float)


def test_huge_sizes_are_exact():
    spec = ModelSpec(n_layers=10_000, d_model=8192, n_heads=64, vocab_size=10**6, seq_len=10**7)
    r = count(spec)
    assert isinstance(r.flops.forward, int)
    assert r.flops.components["attention/scores"] == 10_000 * 64 * 2 * 10**7 * 128 * 10**7
