"""Inference memory: the KV cache per token and for a workload (GQA, MQA, windows, cross-attention), the weights
by dtype, and what fits. Published figures, or the arithmetic shown."""

import json

import pytest

from tfcalc import ModelSpec, TfcalcError, Workload, count, load_preset
from tfcalc.plan.memory import inference_memory, weights_bytes

DECODE_8K = Workload(phase="decode", seq_len=1, context=8191)


def test_opt_13b_is_800_kb_a_token_as_vllm_says():
    # Kwon et al. 2023 (vLLM), sec. 3: "2 (key and value vectors) x 5120 (hidden state size) x 40 (number of
    # layers) x 2 (bytes per FP16) = 800 KB" (819,200 bytes: KiB)
    opt_13b = ModelSpec(n_layers=40, d_model=5120, n_heads=40, vocab_size=50272, seq_len=2048, max_positions=2050,
                        activation="relu")
    m = inference_memory(opt_13b, Workload(phase="decode", seq_len=1, context=2047), dtype="fp16")
    assert m.kv_bytes_per_token == 2 * 5120 * 40 * 2 == 800 * 1024
    assert m.kv_cache_bytes == 2048 * 819_200  # the context and the new token


def test_gqa_shrinks_the_cache_by_the_group_and_a_window_caps_it():
    llama3 = inference_memory(load_preset("llama3-8b"), DECODE_8K)
    assert llama3.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # k and v, 32 layers, 8 kv heads of 128, bf16
    mistral = inference_memory(load_preset("mistral-7b"), Workload(phase="decode", seq_len=1, context=32767))
    assert mistral.kv_cache_bytes == 4096 * mistral.kv_bytes_per_token  # a 4,096-token ring buffer per layer
    batch = inference_memory(load_preset("llama3-8b"), DECODE_8K.model_copy(update={"batch_size": 16}))
    assert batch.kv_cache_bytes == 16 * 8192 * llama3.kv_bytes_per_token


def test_local_and_global_layers_cap_only_the_local_ones():
    spec = load_preset("llama3-8b").replace(sliding_window=1024, attention_pattern=["local", "local", "global"])
    m = inference_memory(spec, DECODE_8K)
    per_layer_token = 2 * 8 * 128 * 2
    local, glob = 22, 10  # 32 blocks: pattern local, local, global from block 0
    assert m.kv_cache_bytes == per_layer_token * (local * 1024 + glob * 8192)


def test_an_encoder_decoder_caches_the_encoder_tokens_for_cross_attention():
    m = inference_memory(load_preset("t5-small"), Workload(phase="decode", seq_len=1, context=99, src_len=512))
    per_token_layer = 2 * 8 * 64 * 2  # k and v, 8 heads of 64, bf16
    assert m.kv_cache.to_dict() == {"decoder/attention": 6 * 100 * per_token_layer,
                                    "decoder/cross_attention": 6 * 512 * per_token_layer}
    assert m.kv_bytes_per_token == 6 * per_token_layer  # the decoder's own tokens


def test_weights_by_dtype():
    spec = load_preset("llama2-7b")
    params = count(spec).params.total
    assert weights_bytes(spec, "fp32") == 4 * params and weights_bytes(spec, "bf16") == 2 * params
    # int4 weight-only: the 32 x (4 D^2 + 3 D F) block matrices and the untied head at half a byte, the rest bf16
    D, F, L, V = 4096, 11008, 32, 32000
    matrices = L * (4 * D * D + 3 * D * F) + D * V
    assert weights_bytes(spec, "int4") == matrices // 2 + 2 * (params - matrices)
    assert weights_bytes(spec, "int8") == matrices + 2 * (params - matrices)


def test_what_fits_next_to_the_weights():
    spec = load_preset("llama3-8b")
    capacity = 80 * 10**9
    m = inference_memory(spec, DECODE_8K, capacity_bytes=capacity, gpu_name="80 GB")
    per_sequence = 8192 * 131_072
    assert m.max_sequences == (capacity - 2 * count(spec).params.total) // per_sequence
    assert m.fits
    too_many = inference_memory(spec, DECODE_8K.model_copy(update={"batch_size": m.max_sequences + 1}),
                                capacity_bytes=capacity)
    assert too_many.fits is False


def test_training_workloads_and_unknown_dtypes_are_refused():
    with pytest.raises(TfcalcError, match="phase 'prefill' or 'decode'"):
        inference_memory(load_preset("gpt2"), Workload(seq_len=8))
    with pytest.raises(TfcalcError, match="dtype='int3': expected one of"):
        weights_bytes(load_preset("gpt2"), "int3")
    with pytest.raises(TfcalcError, match="kv_dtype='int4': expected one of"):
        inference_memory(load_preset("gpt2"), DECODE_8K.model_copy(update={"context": 10}), kv_dtype="int4")


def test_the_memory_command():
    import json

    from typer.testing import CliRunner

    from tfcalc.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["memory", "-p", "llama3-8b", "--context", "8192", "-B", "16", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["workload"]["phase"] == "decode" and d["workload"]["keys"] == 8193
    assert d["kv_cache_bytes"] == 16 * 8193 * 131_072 and d["kv_bytes_per_token"] == 131_072
    assert d["weights_bytes"] == 2 * 8_030_261_248
    table = runner.invoke(app, ["memory", "-p", "llama3-8b", "--context", "8192", "-B", "16"])
    assert "17,181,966,336" in table.output and "16.00 GiB" in table.output
    for args, message in ((["--dtype", "int3"], "dtype='int3': expected one of"),
                          (["--phase", "decode", "--zero", "1"], "--zero: a training flag; --phase decode plans inference")):
        bad = runner.invoke(app, ["memory", "-p", "gpt2", *args])
        (line,) = bad.output.strip().splitlines()
        assert bad.exit_code == 2 and line.startswith("tfcalc: error: ") and message in line


def test_what_fits_on_a_named_gpu():
    import json

    from typer.testing import CliRunner

    from tfcalc.cli import app
    from tfcalc.plan.gpus import lookup

    runner = CliRunner()
    d = json.loads(runner.invoke(app, ["memory", "-p", "llama3-70b", "--dtype", "int4", "--gpu", "h100-sxm",
                                       "--context", "32767", "--json"]).output)
    h100 = lookup("h100-sxm").memory_bytes
    assert d["capacity_bytes"] == h100 and d["gpu"] == lookup("h100-sxm").name
    per_sequence = 32768 * 2 * 80 * 8 * 128 * 2  # tokens x (k and v) x 80 layers x 8 kv heads x 128 x bf16
    assert d["kv_cache_bytes"] == per_sequence
    assert d["max_sequences"] == (h100 - d["weights_bytes"]) // per_sequence
    unknown = runner.invoke(app, ["memory", "-p", "gpt2", "--gpu", "h100-sxn"])
    assert unknown.exit_code == 2 and "unknown GPU 'h100-sxn'; did you mean h100-sxm" in unknown.output


def test_tensor_parallel_weights_and_cache_per_gpu():
    # llama2-7b on each of 2 GPUs: the seven matrices of a block and the token table and head split in half; the
    # two norms per block and the final norm whole on each GPU; 16 of the 32 key/value heads cached
    spec, D, F, L, V = load_preset("llama2-7b"), 4096, 11008, 32, 32000
    per_gpu = L * (4 * D * D + 3 * D * F) // 2 + L * 2 * D + 2 * V * D // 2 + D
    assert weights_bytes(spec, "bf16", tp=2) == 2 * per_gpu
    assert weights_bytes(spec, "bf16", tp=1) == 2 * 6_738_415_616
    w = Workload(phase="decode", seq_len=1, context=4095)
    m = inference_memory(spec, w, tp=2)
    assert m.kv_bytes_per_token == 2 * L * 16 * 128 * 2 and m.kv_cache_bytes == 4096 * m.kv_bytes_per_token
    # int4: the split linear matrices (the head's included) at half a byte, the rest (the token table's half, the
    # norms) in 16 bits
    matrices = L * (4 * D * D + 3 * D * F) // 2 + V * D // 2
    assert weights_bytes(spec, "int4", tp=2) == matrices // 2 + (per_gpu - matrices) * 2


def test_tensor_parallel_cache_copies_heads_past_their_number_and_keeps_a_latent_whole():
    w = Workload(phase="decode", seq_len=1, context=4095)
    # llama3-70b: 8 key/value heads; at tp = 16 each GPU keeps one (copied on two GPUs)
    assert inference_memory(load_preset("llama3-70b"), w, tp=16).kv_bytes_per_token == 2 * 80 * 1 * 128 * 2
    # DeepSeek-V3: the latent (512) and shared rotary key (64) are not split by heads: whole on every GPU
    assert inference_memory(load_preset("deepseek-v3"), w, tp=8).kv_bytes_per_token == 61 * (512 + 64) * 2


def test_the_memory_command_plans_inference_per_gpu_with_tp():
    from typer.testing import CliRunner

    from tfcalc.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["memory", "-p", "llama2-7b", "--context", "4095", "--tp", "2", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["tp"] == 2 and data["kv_bytes_per_token"] == 2 * 32 * 16 * 128 * 2
    # --tp alone still plans a train step; with a training flag and an inference flag, one is refused by name
    assert "workload: train" in runner.invoke(app, ["memory", "-p", "llama2-7b", "--tp", "2"]).output
    mixed = runner.invoke(app, ["memory", "-p", "llama2-7b", "--tp", "2", "--zero", "1", "--context", "128"])
    assert mixed.exit_code == 2 and "--context: an inference flag; --zero plans a train step" in mixed.output
    heads = runner.invoke(app, ["memory", "-p", "llama2-7b", "--tp", "3", "--context", "128"])
    assert heads.exit_code == 2 and "tp=3: tensor parallelism splits the attention heads" in heads.output


def test_what_does_not_fit_says_the_smallest_tensor_parallel_size_that_does():
    # Llama 3.1 405B in bf16, one sequence of 8,192 tokens, on 80 GiB H100s: at tp 8 one GPU's weights alone are
    # 101,470,601,216 bytes (> 85,899,345,920); at tp 16 (8 key/value heads, each on two GPUs) its share fits
    spec, w, h100 = load_preset("llama3.1-405b"), Workload(phase="decode", seq_len=1, context=8191), 80 * 2**30
    assert weights_bytes(spec, "bf16", tp=8) > h100
    m = inference_memory(spec, w, capacity_bytes=h100, gpu_name="H100 SXM")
    assert not m.fits and m.smallest_tp == 16
    assert inference_memory(spec, w, capacity_bytes=h100, tp=16).fits
    assert inference_memory(spec, w, capacity_bytes=h100, tp=16).smallest_tp is None  # it fits: nothing to say
    # nothing up to 64 GPUs holds a 405B model on 16 GiB parts with its 131,072-token cache
    long = Workload(phase="decode", seq_len=1, context=131_071, batch_size=64)
    assert inference_memory(spec, long, capacity_bytes=16 * 2**30).smallest_tp is None
