from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from tfcalc import ModelSpec, count, load_preset


def test_published_estimates_for_gpt2():
    r = count(load_preset("gpt2"))
    e = {x.name: x for x in r.estimates}
    N_nonemb = r.params.total - 50257 * 768 - 1024 * 768  # Kaplan: less vocabulary and position embeddings
    assert e["kaplan_6n"].value == 6 * N_nonemb * 1024
    assert e["kaplan_6n"].exact == r.flops.train_step
    assert e["kaplan_forward"].value == (2 * N_nonemb + 2 * 12 * 1024 * 768) * 1024
    # nanoGPT's estimate_mfu: N = get_num_params() (less the position table), 6N + 12 L H Q T per token
    N_palm = r.params.total - 1024 * 768
    assert e["palm"].value == (6 * N_palm + 12 * 12 * 12 * 64 * 1024) * 1024
    assert abs(e["palm"].ratio - 1) < 0.001  # matmul weights dominate; biases and norms are the difference


def test_moe_estimates_use_active_parameters():
    r = count(load_preset("mixtral-8x7b"))
    e = {x.name: x for x in r.estimates}
    assert e["kaplan_6n"].value == 6 * (r.params.active - r.params.embedding) * r.spec.tokens


@given(H=st.integers(1, 16), d_head=st.integers(1, 128), c=st.integers(1, 8), kv=st.sampled_from([1, 0]),
       gated=st.booleans())
def test_crossover_is_the_first_n_where_attention_reaches_the_mlp(H, d_head, c, kv, gated):
    D = H * d_head
    spec = ModelSpec(n_layers=2, d_model=D, n_heads=H, n_kv_heads=1 if kv else H, d_ff=c * D, vocab_size=5,
                     seq_len=7, mlp="gated" if gated else "standard", positions="none")
    n = count(spec).crossover.seq_len

    def attention_minus_mlp(N):
        f = count(spec.replace(seq_len=N)).flops.components
        return f.subtotal("attention") - f.subtotal("mlp")

    assert attention_minus_mlp(n) >= 0
    assert n == 1 or attention_minus_mlp(n - 1) < 0


def test_crossover_for_the_seed_block_is_c_minus_2_times_d():
    # attention 4 N D^2 + 2 N^2 D vs MLP 2 c N D^2 (MACs): equal at N = (c - 2) D
    assert count(load_preset("gpt2")).crossover.seq_len == 2 * 768


def test_non_matmul_is_reported_apart():
    r = count(load_preset("gpt2"))
    assert r.non_matmul.total > 0
    assert r.flops.forward == 291_648_307_200  # unchanged by the estimate
    assert r.non_matmul["attention/softmax"] == 12 * 12 * 1024 * 1024 * 6


def test_a_ratio_past_a_floats_range_is_shown_not_raised():
    # a 321-digit token-type table makes PaLM's 6N (N counts it) 10^317 times the exact FLOPs: no float holds it
    from typer.testing import CliRunner

    from tfcalc.cli import app

    big = 10**320
    r = count(ModelSpec(n_layers=2, d_model=32, n_heads=4, vocab_size=50, seq_len=8, max_positions=8,
                        n_token_types=big))
    palm = next(e for e in r.estimates if e.name == "palm")
    assert palm.ratio == str(Fraction(palm.value, palm.exact))
    out = CliRunner().invoke(app, ["count", "-L", "2", "-d", "32", "-H", "4", "-V", "50", "-N", "8",
                                   "--max-positions", "8", "--n-token-types", str(big)])
    assert out.exit_code == 0 and "Traceback" not in out.output


def test_crossover_is_the_architectures_whatever_the_length_and_remembered_per_architecture():
    # per token, llama2-7b's MLP is 3 x 2 D F FLOPs, attention's projections 8 D^2 and its scores and values
    # 4 D N: attention >= MLP from N = (6 D F - 8 D^2) / 4 D = (6 F - 8 D) / 4 = 8,320, at any seq_len or batch;
    # a list field (attention_pattern) works too
    spec = load_preset("llama2-7b")
    assert {count(spec.replace(seq_len=n, batch_size=b)).crossover.seq_len for n in (1, 4096) for b in (1, 8)} \
        == {(6 * 11008 - 8 * 4096 + 3) // 4}
    windowed = ModelSpec(n_layers=4, d_model=64, n_heads=4, vocab_size=100, seq_len=16, positions="rotary",
                         sliding_window=8, attention_pattern=["local", "global"])
    assert count(windowed).crossover.seq_len == count(windowed.replace(seq_len=8)).crossover.seq_len
    # a different architecture is not served from the memory of another
    assert count(spec.replace(d_ff=2 * 11008)).crossover.seq_len == (6 * 2 * 11008 - 8 * 4096 + 3) // 4
