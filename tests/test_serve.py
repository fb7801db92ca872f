"""Serving capacity in vLLM's arithmetic (plan.serve) and a request's life on the roofline (plan.request)."""

import json
from fractions import Fraction

import pytest
from typer.testing import CliRunner

from tfcalc import ModelSpec, TfcalcError, load_preset
from tfcalc.cli import app
from tfcalc.plan.gpus import lookup
from tfcalc.plan.memory import inference_memory
from tfcalc.plan.request import _affine_time, decode_sum, decode_workload, request_life
from tfcalc.plan.roofline import phase_cost
from tfcalc.plan.serve import activation_peak, serving_capacity

H100, A100, MI300X = lookup("h100-sxm"), lookup("a100-80gb"), lookup("mi300x")
runner = CliRunner()
GiB = 2**30


@pytest.fixture(scope="module")
def llama3():
    return load_preset("llama3-8b")  # Hugging Face meta-llama/Meta-Llama-3-8B config.json (the preset's source)


def test_llama3_8b_on_an_h100_term_by_term(llama3):
    c = serving_capacity(llama3, H100, context=8192)
    card = 80 * GiB  # H100 SXM datasheet: 80 GB of HBM3, read as GiB (tfcalc.plan.gpus)
    budget = card * 9 // 10  # gpu_memory_utilization 0.9: 77,309,411,328
    weights = 8_030_261_248 * 2  # LlamaForCausalLM sum(p.numel()) (the preset's source) in bf16
    # the profiling pass: 8,192 tokens (vllm serve's default on a GPU of 70 GiB or more, not an A100) in 1,024
    # requests; the largest op is SwiGLU's product, reading and writing [8192, 14336] in bf16; the residual stream
    # twice [8192, 4096]; the sampler's fp32 logits [1024, 128256]
    activation = 2 * 8192 * 14336 * 2 + 2 * 8192 * 4096 * 2 + 1024 * 128256 * 4
    non_torch = round(Fraction("1.79") * GiB)  # vLLM's log for Llama-3-8B on one H100 (pull request 10511)
    block = 16 * 2 * 32 * 8 * 128 * 2  # 16 tokens x (K, V) x 32 layers x 8 KV heads x head_dim 128 x bf16
    available = budget - weights - activation - non_torch
    assert (c.card_bytes, c.budget_bytes, c.weights_bytes) == (card, budget, weights)
    assert (c.activation_bytes, c.non_torch_bytes, c.available_bytes) == (activation, non_torch, available)
    assert c.block_bytes == block == 2_097_152
    assert c.num_blocks == available // block == 27_750
    # vLLM's get_num_blocks: available // page_size // num_layers, a page being one layer's 16 tokens
    assert c.num_blocks == available // (2 * 16 * 8 * 128 * 2) // 32
    assert c.kv_tokens == 27_750 * 16
    assert c.max_sequences == 27_750 // (8192 // 16) == 54
    assert c.longest_context == 27_750 * 16  # rotary positions: the spec knows no maximum, memory bounds it
    assert (c.max_num_batched_tokens, c.max_num_seqs, c.block_size) == (8192, 1024, 16)


def test_the_weights_and_kv_figures_are_inference_memorys(llama3):
    c = serving_capacity(llama3, H100, context=1000, dtype="int4", tp=2)
    m = inference_memory(llama3, decode_workload(1, 999), "int4", tp=2)
    assert (c.weights_bytes, c.kv_bytes_per_token, c.kv_dtype) == (m.weights_bytes, m.kv_bytes_per_token, "bf16")
    assert c.kv_bytes_per_token == 2 * 32 * 4 * 128 * 2  # 4 of the 8 KV heads on each of 2 GPUs
    assert c.non_torch_bytes == round(Fraction("3.58") * GiB)  # vLLM's log at tp 2
    assert c.blocks_per_sequence == 63  # ceil(1000 / 16): a part-filled block is a whole block
    assert c.max_sequences == c.num_blocks // 63


def test_engine_knobs_and_given_figures(llama3):
    c = serving_capacity(llama3, A100, context=4096, gpu_memory_utilization="0.95", block_size=32,
                         non_torch_bytes=0, activation_bytes=GiB)
    budget = 80 * GiB * 95 // 100
    assert c.available_bytes == budget - 8_030_261_248 * 2 - GiB
    assert c.num_blocks == c.available_bytes // (32 * 131072)
    assert c.max_sequences == c.num_blocks // (4096 // 32)
    assert (c.max_num_batched_tokens, c.max_num_seqs) == (2048, 256)  # an A100: vllm serve's smaller defaults
    assert not c.activation_estimated and not c.non_torch_assumed


def test_the_activation_estimate_follows_the_profiling_pass(llama3):
    # 2,048 tokens in 256 requests: SwiGLU's [2048, 14336] read and written, the residual stream, fp32 logits
    assert activation_peak(llama3, 2048, 256) == 2 * 2048 * 14336 * 2 + 2 * 2048 * 4096 * 2 + 256 * 128256 * 4
    # more requests than tokens: one token each (vLLM's min(max_num_seqs, tokens))
    assert activation_peak(llama3, 64, 1024) == activation_peak(llama3, 64, 64)


def test_hybrid_state_is_counted_per_sequence():
    spec = load_preset("jamba-1.5-mini")  # Mamba and attention blocks
    c = serving_capacity(spec, MI300X, context=4096)
    m = inference_memory(spec, decode_workload(1, 4095))
    assert c.state_bytes_per_sequence == m.state_bytes_per_sequence > 0
    per_sequence = 256 * c.block_bytes + c.state_bytes_per_sequence  # 4096 / 16 blocks, and the state
    assert c.max_sequences == c.available_bytes // per_sequence
    assert c.max_sequences < c.num_blocks // 256  # the state takes room the blocks alone would not
    assert c.longest_context == (c.available_bytes - c.state_bytes_per_sequence) // c.block_bytes * 16


def test_attention_free_model_has_no_blocks():
    spec = ModelSpec(n_layers=2, d_model=64, n_heads=4, vocab_size=100, seq_len=16, positions="rotary", mlp="gated",
                     activation="silu", norm="rmsnorm", bias=False, block_pattern=["mamba", "mamba"],
                     kinds={"mamba": {"d_state": 4, "d_conv": 4, "dt_rank": 4}})
    c = serving_capacity(spec, H100, non_torch_bytes=0, activation_bytes=0)
    assert (c.block_bytes, c.num_blocks, c.kv_tokens, c.longest_context) == (0, 0, 0, None)
    assert c.max_sequences == c.available_bytes // c.state_bytes_per_sequence


def test_a_learned_position_table_bounds_the_longest_context():
    c = serving_capacity(load_preset("gpt2"), H100)
    assert c.longest_context_by_memory > 1024
    assert c.longest_context == c.model_max_context == 1024  # GPT-2's n_positions


def test_nothing_left_is_zero_blocks_not_negative():
    c = serving_capacity(load_preset("llama2-70b"), H100)  # 138 GB of bf16 weights on one 80 GB card
    # the remainder is never a negative byte count: 0 available, and by how much the budget is short
    assert c.available_bytes == 0 and c.num_blocks == 0 and c.max_sequences == 0
    assert c.shortfall_bytes == c.weights_bytes + c.activation_bytes + c.non_torch_bytes - c.budget_bytes > 0


@pytest.mark.parametrize("kwargs, field", [({"gpu_memory_utilization": 0}, "gpu_memory_utilization=0"),
                                           ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization=1.5"),
                                           ({"block_size": 0}, "block_size=0"),
                                           ({"max_num_seqs": -1}, "max_num_seqs=-1"),
                                           ({"non_torch_bytes": -5}, "non_torch_bytes=-5")])
def test_library_refuses_bad_knobs(llama3, kwargs, field):
    with pytest.raises(TfcalcError, match=field):
        serving_capacity(llama3, H100, **kwargs)


def test_an_encoder_decoder_is_refused():
    with pytest.raises(TfcalcError, match="decoder-only"):
        serving_capacity(load_preset("t5-small"), H100)


# ---- a request's life ---------------------------------------------------------------------------------------------

def _loop(spec, gpu, first, steps, batch=1, tp=1):
    return [phase_cost(spec, decode_workload(batch, c), gpu, tp=tp) for c in range(first, first + steps)]


@pytest.mark.parametrize("preset, first, steps, batch, tp", [
    ("llama3-8b", 1000, 40, 1, 1),
    ("llama3-8b", 1000, 40, 16, 2),  # all-reduces over the link
    ("mistral-7b", 4070, 60, 4, 1),  # its 4,096-token window starts capping the keys inside the range
    ("jamba-1.5-mini", 10, 20, 2, 1),  # recurrent state beside attention
])
def test_the_decode_sum_is_the_step_by_step_loop(preset, first, steps, batch, tp):
    spec = load_preset(preset)
    summed = decode_sum(spec, H100, first, steps, batch, tp=tp)
    loop = _loop(spec, H100, first, steps, batch, tp)
    assert summed.flops == sum(s.flops for s in loop)
    assert summed.bytes == sum(s.bytes for s in loop)
    assert summed.link_bytes == sum(s.link_bytes for s in loop)
    assert summed.roofline_seconds == pytest.approx(sum(s.seconds for s in loop), rel=1e-12)
    assert summed.contexts == (first, first + steps - 1)


def test_the_time_of_an_affine_op_is_split_where_it_changes_bound():
    peak, bandwidth = 7, 3
    for f0, fs, b0, bs, n in [(10, 5, 40, 1, 30), (100, -1, 1, 2, 40), (3, 0, 9, 0, 5), (0, 3, 50, 0, 25)]:
        brute = sum(max(Fraction(f0 + fs * x, peak), Fraction(b0 + bs * x, bandwidth)) for x in range(n))
        assert _affine_time(f0, fs, b0, bs, n, peak, bandwidth) == brute


def test_a_request_life(llama3):
    life = request_life(llama3, H100, prompt=512, output_tokens=64, batch_size=4)
    prefill = phase_cost(llama3, decode_workload(4, 0).model_copy(update={"phase": "prefill", "seq_len": 512}), H100)
    assert life.ttft_s == prefill.seconds
    assert life.decode.steps == 63 and life.decode.contexts == (512, 574)  # tokens 2..64
    assert life.end_to_end_s == life.ttft_s + life.decode.seconds
    assert life.tokens_per_s == 64 / life.end_to_end_s
    assert life.batch_tokens_per_s == 4 * 64 / life.end_to_end_s
    assert life.ttft_one_s < life.ttft_s and life.bound
    half = request_life(llama3, H100, prompt=512, output_tokens=64, batch_size=4, efficiency="0.5")
    assert half.end_to_end_s == pytest.approx(2 * life.end_to_end_s, rel=1e-12) and not half.bound
    one = request_life(llama3, H100, prompt=512, output_tokens=1)  # the prefill's token only
    assert one.decode.steps == 0 and one.end_to_end_s == one.ttft_s and one.decode_tokens_per_s is None


def test_a_learned_position_table_bounds_the_output_tokens():
    gpt2 = load_preset("gpt2")
    assert request_life(gpt2, H100, prompt=1000, output_tokens=25).decode.contexts == (1000, 1023)  # 1,024 keys
    with pytest.raises(TfcalcError, match="output_tokens=26: .* need 1,025 positions"):
        request_life(gpt2, H100, prompt=1000, output_tokens=26)
    r = runner.invoke(app, ["infer", "-p", "gpt2", "--gpu", "h100", "--context", "1000", "--output-tokens", "26"])
    assert r.exit_code == 2 and r.output.strip().startswith("tfcalc: error: --output-tokens 26:"), r.output


@pytest.mark.parametrize("kwargs, field", [({"output_tokens": 0}, "output_tokens=0"),
                                           ({"efficiency": 0}, "efficiency=0"),
                                           ({"efficiency": 1.5}, "efficiency=1.5")])
def test_request_life_refuses_bad_input(llama3, kwargs, field):
    with pytest.raises(TfcalcError, match=field):
        request_life(llama3, H100, **({"prompt": 8, "output_tokens": 4} | kwargs))


# ---- the CLI ------------------------------------------------------------------------------------------------------

def test_memory_serve_json_carries_exact_integers():
    r = runner.invoke(app, ["memory", "--preset", "llama3-8b", "--gpu", "h100", "--serve", "--context", "8192",
                            "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["block_bytes"] == 2_097_152 and data["num_blocks"] == 27_750 and data["kv_tokens"] == 444_000
    assert data["max_sequences"] == 54 and data["gpu_memory_utilization"] == 0.9


def test_memory_serve_table_shows_each_term():
    r = runner.invoke(app, ["memory", "--preset", "llama3-8b", "--gpu", "h100", "--serve", "--tp", "2",
                            "--gpu-memory-utilization", "0.85", "--non-torch-gib", "2", "--activation-gib", "1.5"],
                      env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    for term in ("budget", "- weights", "- activation peak", "- non-torch memory", "= available for KV cache",
                 "GPU blocks", "KV cache tokens", "get_num_blocks", "determine_available_memory"):
        assert term in r.output
    assert "2,147,483,648" in r.output and "1,610,612,736" in r.output  # 2 GiB and 1.5 GiB, as given


@pytest.mark.parametrize("args, message", [
    (["memory", "--serve"], "--serve: needs --gpu"),
    (["memory", "--gpu", "h100", "--serve", "--gpu-memory-utilization", "0"], "--gpu-memory-utilization 0:"),
    (["memory", "--gpu", "h100", "--serve", "--gpu-memory-utilization", "1.01"], "--gpu-memory-utilization 1.01:"),
    (["memory", "--gpu", "h100", "--serve", "--block-size", "0"], "--block-size 0:"),
    (["memory", "--gpu", "h100", "--block-size", "16"], "--block-size: a serving-engine flag"),
    (["memory", "--gpu", "h100", "--serve", "--non-torch-gib", "-1"], "--non-torch-gib -1:"),
    (["memory", "--gpu", "h100", "--serve", "--optimizer", "sgd"], "--optimizer sgd: not planned with --serve"),
    (["memory", "--gpu", "h100", "--serve", "--context", "1k,2k"], "--serve: one model and one --context"),
    (["memory", "--gpu", "h100", "--serve", "--batch-size", "8"], "--batch-size 8: not planned with --serve"),
    (["memory", "--gpu", "h100", "--serve", "--phase", "decode"], "--phase decode: not planned with --serve"),
    (["infer", "--gpu", "h100", "--output-tokens", "0"], "--output-tokens 0:"),
    (["infer", "--gpu", "h100", "--output-tokens", "8", "--efficiency", "0"], "--efficiency 0:"),
    (["infer", "--gpu", "h100", "--output-tokens", "8", "--efficiency", "1.5"], "--efficiency 1.5:"),
    (["infer", "--gpu", "h100", "--efficiency", "0.5"], "--efficiency 0.5: it scales a request's life"),
])
def test_bad_input_is_one_line_naming_the_flag(args, message):
    r = runner.invoke(app, [*args, "--preset", "llama3-8b"])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.output


def test_infer_output_tokens_json():
    r = runner.invoke(app, ["infer", "--preset", "llama3-8b", "--gpu", "h100", "--context", "512",
                            "--output-tokens", "64", "--batch-size", "4", "--json"])
    assert r.exit_code == 0, r.output
    request = json.loads(r.output)["request"]
    assert request["roofline_bound"] is True and request["decode"]["steps"] == 63
    assert isinstance(request["decode"]["flops"], int) and isinstance(request["decode"]["bytes"], int)
    life = request_life(load_preset("llama3-8b"), H100, 512, 64, 4)
    assert request["decode"]["flops"] == life.decode.flops and request["end_to_end_s"] == life.end_to_end_s
