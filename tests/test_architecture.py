"""Stack.distinct: each distinct block and its count, by arithmetic, against walking every block."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from tfcalc import ModelSpec, count
from tfcalc.arch import architecture, stacks


def walked(stack, lo, hi):
    layers = [stack.layer(i) for i in range(lo, hi)]
    return dict(Counter(layers))  # insertion order: first appearance


@settings(max_examples=200, deadline=None)
@given(n_layers=st.integers(1, 600), pattern=st.lists(st.sampled_from(["local", "global"]), min_size=1, max_size=7),
       moe_every=st.integers(1, 40), first_dense=st.integers(0, 50),
       window_layers=st.one_of(st.none(), st.integers(0, 60)), use_pattern=st.booleans(),
       bounds=st.tuples(st.integers(0, 600), st.integers(0, 600)), short=st.sampled_from([1, 3, 4096]),
       blocks=st.one_of(st.none(), st.lists(st.sampled_from(["attention+moe", "attention", "mlp", "moe"]),
                                            min_size=1, max_size=5)))
def test_distinct_counts_what_walking_the_blocks_counts(n_layers, pattern, moe_every, first_dense,
                                                         window_layers, use_pattern, bounds, short, blocks):
    layout = (dict(moe_every=moe_every, first_dense_layers=min(first_dense, n_layers)) if blocks is None else
              dict(block_pattern=[*blocks, "attention+moe"]))
    spec = ModelSpec(n_layers=n_layers, d_model=64, n_heads=4, vocab_size=100, seq_len=8, n_experts=4, top_k=1,
                     **layout, sliding_window=4,
                     **({"attention_pattern": pattern} if use_pattern else
                        {"sliding_window_layers": None if window_layers is None else min(window_layers, n_layers)}))
    lo, hi = sorted(min(b, n_layers) for b in bounds)
    previous = architecture.SHORT_PERIOD
    architecture.SHORT_PERIOD = short  # 1: every interval by the residues of the pattern and the CRT
    try:
        (stack,) = stacks(spec)
        assert stack.distinct(lo, hi) == walked(stack, lo, hi)
        assert list(stack.distinct(lo, hi)) == list(walked(stack, lo, hi))  # in order of first appearance
    finally:
        architecture.SHORT_PERIOD = previous


def test_a_long_period_is_not_walked():
    # moe_every = 9,999,991 (a prime) beside a pattern of 3: a period of 29,999,973 blocks, counted at once.
    # Blocks i with (i + 1) % 9,999,991 == 0 below 10^7: i = 9,999,990 only; it is local when i % 3 == 0.
    spec = ModelSpec(n_layers=10**7, d_model=64, n_heads=4, vocab_size=100, seq_len=8, n_experts=4, top_k=1,
                     moe_every=9_999_991, sliding_window=4, attention_pattern=["local", "global", "global"])
    (stack,) = stacks(spec)
    kinds = {(layer.moe, layer.window): n for layer, n in stack.distinct().items()}
    assert 9_999_990 % 3 == 0
    assert kinds == {(False, 4): 3_333_334 - 1, (False, None): 6_666_666, (True, 4): 1}
    assert count(spec).params.total > 0
