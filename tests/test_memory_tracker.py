"""The measurement side of training memory (`tfcalc.verify.memory`) held to arithmetic: bytes per parameter of
each recipe from the model's own parameter count, and the saved-for-backward set of small models written out
as formulas. Everything runs under FakeTensorMode (nothing allocated), except one real CPU step that must agree
with it."""

import pytest
import torch
import torch.nn.functional as F

from tfcalc import load_preset
from tfcalc.arch import Workload
from tfcalc.errors import TfcalcError
from tfcalc.reference import build_model
from tfcalc.reference.layers import AttentionCore, LayerNorm, RMSNorm
from tfcalc.verify.memory import measure_training_memory, saved_for_backward

B, N = 2, 16
WORKLOAD = Workload(batch_size=B, seq_len=N)
LOSS_BYTES = 4  # the fp32 loss, alive at the end of forward


def _gpt() -> object:  # GPT-2 layout: LayerNorm, learned positions, GELU MLP, tied head; t*D, t*F, b*h*s*s distinct
    return load_preset("gpt2").replace(n_layers=2, d_model=48, n_heads=4, vocab_size=100, seq_len=N)


def _llama() -> object:  # RMSNorm, rotary, SwiGLU, untied head, grouped-query attention (2 kv heads for 4)
    return load_preset("llama2-7b").replace(n_layers=2, d_model=48, n_heads=4, n_kv_heads=2, d_ff=80,
                                            vocab_size=100, seq_len=N)


def _numel(spec) -> tuple[int, int, int]:
    """(parameters, parameter tensors, the largest tensor) of the model, on meta."""
    params = list(build_model(spec, "meta").parameters())
    return sum(p.numel() for p in params), len(params), max(p.numel() for p in params)


@pytest.fixture(scope="module")
def runs():
    spec = _llama()
    # eager attention: the softmax probabilities are what selective recomputation drops
    measured = {(precision, optimizer, recompute): measure_training_memory(spec, WORKLOAD, precision, optimizer,
                                                                           recompute, "fake", "eager")
                for precision, optimizer, recompute in [
                    ("bf16-mixed", "adamw", "none"), ("bf16-mixed", "adamw", "selective"),
                    ("bf16-mixed", "adamw", "full"), ("bf16-mixed", "sgd", "none"), ("fp32", "adamw", "none"),
                    ("bf16", "adamw", "none")]}
    return spec, measured


def test_model_states_are_bytes_per_parameter(runs):
    spec, measured = runs
    n, tensors, _ = _numel(spec)
    mixed = measured["bf16-mixed", "adamw", "none"]
    assert mixed.parameters == 2 * n and mixed.gradients == 2 * n and mixed.buffers == 0
    assert mixed.master_weights == 4 * n
    assert mixed.optimizer_step_counters == 4 * tensors  # AdamW's fp32 `step`, one per tensor
    assert mixed.optimizer_states - mixed.optimizer_step_counters == 2 * 4 * n
    sgd = measured["bf16-mixed", "sgd", "none"]
    assert (sgd.optimizer_states, sgd.optimizer_step_counters, sgd.master_weights) == (4 * n, 0, 4 * n)
    fp32 = measured["fp32", "adamw", "none"]
    assert (fp32.parameters, fp32.gradients, fp32.master_weights) == (4 * n, 4 * n, 0)
    assert fp32.optimizer_states == 2 * 4 * n + 4 * tensors
    bf16 = measured["bf16", "adamw", "none"]
    assert (bf16.parameters, bf16.gradients, bf16.master_weights) == (2 * n, 2 * n, 0)
    assert bf16.optimizer_states == 2 * 2 * n + 4 * tensors


def test_the_mixed_step_holds_one_fp32_gradient_at_a_time(runs):
    spec, measured = runs
    _, _, largest = _numel(spec)
    for optimizer in ("adamw", "sgd"):
        m = measured["bf16-mixed", optimizer, "none"]
        assert m.optimizer_peak == m.optimizer_states + 4 * largest  # fused updates: no other temporaries


def test_recomputation_keeps_less(runs):
    _, measured = runs
    none, selective, full = (measured["bf16-mixed", "adamw", r] for r in ("none", "selective", "full"))
    assert full.activations_end_of_forward < selective.activations_end_of_forward < none.activations_end_of_forward
    assert full.activations_peak < selective.activations_peak < none.activations_peak
    # selective drops exactly the softmax probabilities: b * h * s * s in bf16, per layer
    spec = _llama()
    probs = spec.n_layers * B * spec.n_heads * N * N * 2
    assert none.activations_end_of_forward - selective.activations_end_of_forward == probs


def test_activations_at_the_end_of_forward_are_the_saved_set(runs):
    _, measured = runs
    for m in measured.values():
        assert m.activations_end_of_forward == m.saved_bytes + LOSS_BYTES
        assert m.peak_total >= m.parameters + m.master_weights + m.optimizer_states


@pytest.mark.parametrize("attention", ["fused", "eager"])
def test_fake_and_real_cpu_steps_agree(attention):
    spec = _gpt()
    fake = measure_training_memory(spec, WORKLOAD, "bf16-mixed", "adamw", "selective", "fake", attention)
    cpu = measure_training_memory(spec, WORKLOAD, "bf16-mixed", "adamw", "selective", "cpu", attention)
    fields = ("parameters", "gradients", "optimizer_states", "master_weights", "activations_end_of_forward",
              "activations_peak", "temporaries_peak", "optimizer_peak", "peak_total")
    assert {f: getattr(fake, f) for f in fields} == {f: getattr(cpu, f) for f in fields}
    assert fake.saved == cpu.saved


def _by_module(saved) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in saved:
        out[s.module] = out.get(s.module, 0) + s.nbytes
    return out


def test_gpt2_keeps_the_canonical_set():
    spec = _gpt()
    t, D, F, V, H = B * N, spec.d_model, spec.d_ff, spec.vocab_size, spec.n_heads
    a = 2  # bf16
    saved = _by_module(saved_for_backward(spec, WORKLOAD, torch.bfloat16, "none", "eager"))
    layer_norm = t * D * a + 2 * t * 4  # input, fp32 mean and rstd
    expected = {"embedding.position": N * 8}  # the position ids (an arange) kept by the table's lookup
    for i in range(spec.n_layers):
        expected |= {
            f"blocks.{i}.attention_norm": layer_norm,
            f"blocks.{i}.attention.qkv": t * D * a,  # its input (the norm's output)
            f"blocks.{i}.attention.core": (t * spec.d_attn + 2 * t * spec.d_kv) * a + B * H * N * N * a,  # q k v, p
            f"blocks.{i}.attention.out": t * spec.d_attn * a,
            f"blocks.{i}.mlp_norm": layer_norm,
            f"blocks.{i}.mlp.up": t * D * a,
            f"blocks.{i}.mlp": t * F * a,  # GELU's input
            f"blocks.{i}.mlp.down": t * F * a,  # GELU's output
        }
    expected |= {"final_norm": layer_norm, "head": t * D * a, "(loss)": t * V * 4 + 4}  # fp32 log-softmax, weight
    assert saved == expected


def test_llama_with_grouped_query_attention_keeps_the_canonical_set():
    spec = _llama()
    t, D, F, V, H = B * N, spec.d_model, spec.d_ff, spec.vocab_size, spec.n_heads
    a = 2
    saved = _by_module(saved_for_backward(spec, WORKLOAD, torch.bfloat16, "none", "eager"))
    rms_norm = t * D * a + t * 4  # input, fp32 rstd
    rotary = 2 * N * spec.d_head * a  # cos and sin, computed once per forward, shared by every layer
    expected = {}
    for i in range(spec.n_layers):
        expected |= {
            f"blocks.{i}.attention_norm": rms_norm,
            f"blocks.{i}.attention.qkv": t * D * a,
            f"blocks.{i}.attention": rotary if i == 0 else 0,
            f"blocks.{i}.attention.core": (t * spec.d_attn + 2 * t * spec.d_kv) * a + B * H * N * N * a,
            f"blocks.{i}.attention.out": t * spec.d_attn * a,
            f"blocks.{i}.mlp_norm": rms_norm,
            f"blocks.{i}.mlp.gate": t * D * a,  # shared with up: once
            f"blocks.{i}.mlp": 3 * t * F * a,  # gate's output, its SiLU, up's output
            f"blocks.{i}.mlp.down": t * F * a,
        }
    expected |= {"final_norm": rms_norm, "head": t * D * a, "(loss)": t * V * 4 + 4}
    assert saved == {k: v for k, v in expected.items() if v}


@pytest.mark.parametrize("make", [_gpt, _llama])
def test_the_fused_kernel_keeps_q_k_v_its_output_and_a_logsumexp_per_row(make):
    # torch SDPA on the CPU (and under FakeTensorMode): _scaled_dot_product_flash_attention_for_cpu keeps q, k, v
    # (k and v at the key/value heads: enable_gqa=True, as transformers' sdpa path passes them), its output
    # [B, H, N, dh] and the logsumexp [B, H, N] in fp32 for backward; no N x N tensor
    spec = make()
    t, H, dh = B * N, spec.n_heads, spec.d_head
    a = 2
    fused = saved_for_backward(spec, WORKLOAD, torch.bfloat16, "none", "fused")
    eager = saved_for_backward(spec, WORKLOAD, torch.bfloat16, "none", "eager")
    for i in range(spec.n_layers):
        core = sorted((s.shape, s.dtype) for s in fused if s.module == f"blocks.{i}.attention.core")
        assert core == sorted([((B, H, N, dh), torch.bfloat16), ((B, spec.n_kv_heads, N, dh), torch.bfloat16),
                               ((B, spec.n_kv_heads, N, dh), torch.bfloat16), ((B, H, N, dh), torch.bfloat16),
                               ((B, H, N), torch.float32)])
    qkv = (t * spec.d_attn + 2 * t * spec.d_kv) * a
    fused, eager = _by_module(fused), _by_module(eager)
    assert fused.pop("blocks.0.attention.core") == qkv + t * spec.d_attn * a + B * H * N * 4
    assert eager.pop("blocks.0.attention.core") == qkv + B * H * N * N * a  # the probabilities instead
    # every other module keeps the same
    assert {k: v for k, v in fused.items() if ".core" not in k} == {k: v for k, v in eager.items() if ".core" not in k}


def test_fused_attention_the_reference_cannot_run_is_refused():
    windowed = _llama().replace(sliding_window=8)
    with pytest.raises(TfcalcError, match="sliding windows"):
        saved_for_backward(windowed, WORKLOAD, torch.bfloat16, "none", "fused")
    with pytest.raises(TfcalcError, match="attention='flash': expected one of fused, eager"):
        measure_training_memory(_gpt(), WORKLOAD, attention="flash")


def test_full_recomputation_keeps_each_blocks_input():
    spec = _llama()
    t, D, V = B * N, spec.d_model, spec.vocab_size
    saved = _by_module(saved_for_backward(spec, WORKLOAD, torch.bfloat16, "full"))
    rotary = 2 * N * spec.d_head * 2
    assert saved == {"blocks.0": t * D * 2 + rotary, "blocks.1": t * D * 2, "final_norm": t * D * 2 + t * 4,
                     "head": t * D * 2, "(loss)": t * V * 4 + 4}


def test_unmeasurable_and_unknown_choices_are_refused():
    spec = _gpt()
    with pytest.raises(TfcalcError, match="adam8bit"):
        measure_training_memory(spec, WORKLOAD, optimizer="adam8bit")
    with pytest.raises(TfcalcError, match="precision='int8'"):
        measure_training_memory(spec, WORKLOAD, precision="int8")
    with pytest.raises(TfcalcError, match="phase"):
        measure_training_memory(spec, Workload(seq_len=1, context=8, phase="decode"))


@pytest.mark.parametrize("norm, reference", [
    (LayerNorm, lambda m, x: F.layer_norm(x, (x.shape[-1],), m.weight, m.bias, m.eps)),
    (RMSNorm, lambda m, x: F.rms_norm(x, (x.shape[-1],), m.weight, m.eps)),
])
def test_norms_match_torch_in_value_and_gradient(norm, reference):
    torch.manual_seed(0)
    m = norm(24, dtype=torch.float64)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_()
    x = torch.randn(3, 5, 24, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(3, 5, 24, dtype=torch.float64)
    results = []
    for f in (m, lambda x: reference(m, x)):
        y = f(x)
        y.backward(grad)
        results.append((y.detach(), x.grad, *(p.grad for p in m.parameters())))
        x.grad = None
        m.zero_grad()
    for ours, theirs in zip(*results):
        torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("window, relative", [(None, False), (5, False), (None, True)])
def test_grouped_query_attention_folded_equals_repeated(window, relative):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 7, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
    bias = torch.randn(1, 4, 7, 7) if relative else None
    explicit = AttentionCore(True, window, explicit=True)(q, k, v, bias)
    sdpa = AttentionCore(True, window, explicit=False)(q, k, v, bias)
    torch.testing.assert_close(explicit, sdpa, atol=1e-5, rtol=1e-5)
