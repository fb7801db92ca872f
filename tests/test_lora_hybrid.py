"""LoRA on hybrid models (LFM2's short convolution, Mamba and Jamba, Mamba2, Nemotron-H and Falcon-H1, Qwen3.5's and
Qwen3-Next's gated DeltaNet): trainable parameters against PEFT's get_peft_model on transformers' own classes on meta, the
fine-tuning step's FLOPs against FlopCounterMode over forward + backward of the PEFT model (frozen base, fp32 CPU,
transformers' torch path), the step's memory against MemTracker on the reference model, the blocks' order of
gradients, and refusals by name."""

import json
import warnings

import peft
import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import Adapters, ModelSpec, TfcalcError, Workload, count, load_preset
from tfcalc.arch import build
from tfcalc.arch.ops import UnsupportedFigure
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.plan.adapters import adapt, cold_instances
from tfcalc.plan.training import training_memory
from tfcalc.verify.counters import grouped_conv_backward_flop
from tfcalc.verify.memory_check import check_memory

# tfcalc's target names -> the module names PEFT is given (the mixers' are transformers' own)
PEFT_NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
              "down": "down_proj"}

GDN = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 24, "vocab_size": 50,
       "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 6,
       "linear_conv_kernel_dim": 3, "num_hidden_layers": 3, "hidden_size": 32,
       # a DeltaNet block after the attention block as well as before it: gradients in model order
       "layer_types": ["linear_attention", "full_attention", "linear_attention"]}
CONFIGS = {
    "lfm2": {"model_type": "lfm2", "num_hidden_layers": 3, "hidden_size": 32, "intermediate_size": 48,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50, "conv_L_cache": 3,
             "layer_types": ["conv", "full_attention", "conv"], "block_auto_adjust_ff_dim": False},
    "qwen3_5": {"model_type": "qwen3_5_text", **GDN},
    # experts in every block, as Qwen3-Next-80B-A3B (PEFT's all-linear leaves a dense block's MLP of a model type it
    # converts for fused experts unadapted: not modelled)
    "qwen3_next": {"model_type": "qwen3_next", **GDN, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 12, "shared_expert_intermediate_size": 10, "max_position_embeddings": 64},
    # dense blocks for the step's FLOPs (routed experts on real data send tokens where the data says)
    "qwen3_next_dense": {"model_type": "qwen3_next", **GDN, "num_experts": 4, "num_experts_per_tok": 2,
                         "moe_intermediate_size": 12, "shared_expert_intermediate_size": 10,
                         "max_position_embeddings": 64, "mlp_only_layers": [0, 1, 2]},
    "mamba": {"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 16, "expand": 2, "state_size": 4,
              "conv_kernel": 3, "time_step_rank": 4, "vocab_size": 50, "use_bias": True},
    "jamba": {"model_type": "jamba", "num_hidden_layers": 3, "hidden_size": 16, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 24, "num_experts": 1, "num_experts_per_tok": 1,
              "attn_layer_period": 3, "attn_layer_offset": 1, "expert_layer_period": 1, "expert_layer_offset": 0,
              "mamba_d_state": 4, "mamba_d_conv": 3, "mamba_expand": 2, "mamba_dt_rank": 4, "vocab_size": 50,
              "max_position_embeddings": 64},
    "mamba2": {"model_type": "mamba2", "num_hidden_layers": 2, "hidden_size": 16, "expand": 2, "num_heads": 4,
               "head_dim": 8, "n_groups": 2, "state_size": 4, "conv_kernel": 3, "chunk_size": 8, "vocab_size": 50},
    "nemotron_h": {"model_type": "nemotron_h", "hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 4, "intermediate_size": 24, "mamba_num_heads": 4, "mamba_head_dim": 4,
                   "ssm_state_size": 4, "n_groups": 2, "conv_kernel": 3, "chunk_size": 8, "vocab_size": 50,
                   "max_position_embeddings": 64, "hybrid_override_pattern": "M*-M"},
    # attention beside a Mamba2 mixer on one normed input (a parallel branch)
    "falcon_h1": {"model_type": "falcon_h1", "num_hidden_layers": 2, "hidden_size": 16, "mamba_n_heads": 4,
                  "mamba_d_head": 4, "mamba_d_ssm": 16, "mamba_n_groups": 2, "mamba_d_state": 4, "mamba_d_conv": 3,
                  "mamba_chunk_size": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4,
                  "intermediate_size": 24, "vocab_size": 50, "max_position_embeddings": 64},
}
CLASSES = {"lfm2": "Lfm2ForCausalLM", "qwen3_5": "Qwen3_5ForCausalLM", "qwen3_next": "Qwen3NextForCausalLM",
           "qwen3_next_dense": "Qwen3NextForCausalLM",
           "mamba": "MambaForCausalLM", "jamba": "JambaForCausalLM", "mamba2": "Mamba2ForCausalLM",
           "nemotron_h": "NemotronHForCausalLM", "falcon_h1": "FalconH1ForCausalLM"}


def peft_names(family: str, targets: str) -> str | list[str]:
    if targets == "all-linear":
        return targets
    names = {"attention": "q,k,v,o"}.get(targets, targets).split(",")
    if family == "lfm2":  # LFM2's attention names its output projection out_proj, as its conv block does
        return ["out_proj" if name == "o" else PEFT_NAMES.get(name, name) for name in names]
    return [PEFT_NAMES.get(name, name) for name in names]


def peft_model(family: str, config: dict, rank: int, targets: str, dora: bool = False, meta: bool = True):
    cls = getattr(transformers, CLASSES[family])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        if meta:
            with torch.device("meta"):
                model = cls(hf_config(config))
        else:
            torch.manual_seed(0)
            model = cls._from_config(hf_config(config), attn_implementation="eager")
        return peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=peft_names(family, targets),
                                                          use_dora=dora))


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    out = {}
    for family, config in CONFIGS.items():
        folder = tmp_path_factory.mktemp(family)
        out[family] = read_hf_config(write(folder, config)).spec
    return out


PARAM_CASES = [
    ("lfm2", "all-linear", False), ("lfm2", "in_proj,out_proj,o", True),
    ("qwen3_5", "all-linear", False), ("qwen3_5", "in_proj_qkv,in_proj_z,in_proj_b,in_proj_a", False),
    ("qwen3_5", "in_proj_qkv,out_proj", True),
    # (PEFT's all-linear on a model type whose experts it converts leaves the shared expert's linears alone: not
    # modelled, docs/finetuning.md)
    ("qwen3_next", "attention", False), ("qwen3_next", "in_proj_qkvz,in_proj_ba,out_proj", False),
    # PEFT refuses out_proj on model types mamba, mamba2 and nemotron_h (docs/finetuning.md): named lists without it
    ("mamba", "in_proj,x_proj,dt_proj", False), ("jamba", "all-linear", False),
    ("jamba", "in_proj,x_proj,dt_proj,out_proj", True), ("mamba2", "in_proj", True),
    ("nemotron_h", "in_proj,q,k,v,o,up,down", False), ("falcon_h1", "in_proj,q,k,v,o,gate,up,down", False),
]


@pytest.mark.parametrize("family,targets,dora", PARAM_CASES)
def test_trainable_params_are_pefts(specs, family, targets, dora):
    model = peft_model(family, CONFIGS[family], 4, targets, dora)
    expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert count(specs[family], adapters=Adapters(4, targets, dora)).finetune.trainable == expected


def test_qwen3_5_0_8b_all_linear_is_pefts_on_its_own_class():
    # the preset's text config, Qwen3_5ForCausalLM on meta (752,393,024 parameters), PEFT all-linear at rank 16.
    # By hand: 18 DeltaNet blocks, in_proj_qkv 1024 -> 6144, in_proj_z 1024 -> 2048, in_proj_b and in_proj_a
    # 1024 -> 16, out_proj 2048 -> 1024; 6 attention blocks, q 1024 -> 4096 (queries and their gate), k and v
    # 1024 -> 512, o 2048 -> 1024; 24 MLPs, gate and up 1024 -> 3584, down 3584 -> 1024
    r, D = 16, 1024
    mlp = 2 * r * (D + 3584) + r * (3584 + D)
    deltanet = r * ((D + 6144) + (D + 2048) + 2 * (D + 16) + (2048 + D))
    attention = r * ((D + 4096) + 2 * (D + 512) + (2048 + D))
    arithmetic = 18 * deltanet + 6 * attention + 24 * mlp
    config = {"model_type": "qwen3_5_text", "hidden_size": 1024, "num_hidden_layers": 24, "intermediate_size": 3584,
              "num_attention_heads": 8, "head_dim": 256, "num_key_value_heads": 2, "linear_num_key_heads": 16,
              "linear_num_value_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
              "linear_conv_kernel_dim": 4, "vocab_size": 248320, "tie_word_embeddings": True,
              "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
              + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
              + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
              + ["full_attention"]}
    model = peft_model("qwen3_5", config, 16, "all-linear")
    assert sum(p.numel() for p in model.parameters() if not p.requires_grad) == 752_393_024
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == arithmetic
    tuned = count(load_preset("qwen3.5-0.8b"), adapters=Adapters(16)).finetune
    assert (tuned.trainable, tuned.frozen) == (arithmetic, 752_393_024)
    # rank 32 is past in_proj_b's width: all-linear takes it, as PEFT does; named, it is refused
    assert count(load_preset("qwen3.5-0.8b"), adapters=Adapters(32)).finetune.trainable == 2 * arithmetic
    with pytest.raises(TfcalcError, match=r"^lora_rank=32: past the width of qwen3.5-0.8b's in_proj_b linear"):
        count(load_preset("qwen3.5-0.8b"), adapters=Adapters(32, "in_proj_b,in_proj_qkv"))


STEP_CASES = [
    ("lfm2", "all-linear"), ("lfm2", "q,k,v"), ("qwen3_5", "all-linear"), ("qwen3_5", "attention"),
    ("qwen3_5", "in_proj_qkv,out_proj"),  # g, beta and z need no gradient in block 0: every bmm of the rule still does
    ("qwen3_next_dense", "in_proj_qkvz,in_proj_ba"), ("mamba", "x_proj,dt_proj"), ("jamba", "all-linear"),
    ("jamba", "dt_proj,o"), ("mamba2", "in_proj"), ("nemotron_h", "in_proj,q,k,v,o,up,down"),
    ("nemotron_h", "attention"),
    # block 0's attention branch gets no gradient from the Mamba2 in_proj's adapter beside it
    ("falcon_h1", "in_proj"), ("falcon_h1", "in_proj,q,k,v,o,gate,up,down"),
]


@pytest.mark.parametrize("family,targets", STEP_CASES)
def test_step_flops_are_flop_counter_modes(specs, family, targets):
    # forward and backward of the PEFT model (every base weight frozen) on transformers' torch path, fp32 CPU: the
    # frozen convolutions' and scans' backward is their inputs' gradients alone, none before the first adapter that
    # runs (the blocks in model order: Qwen3.5's and LFM2's second mixer block after the attention block gets one,
    # its first does not); dt_proj's adapter never runs (transformers multiplies by dt_proj.weight)
    config, b, s = CONFIGS[family], 2, 20
    model = peft_model(family, config, 4, targets, meta=False)
    ids = torch.randint(config["vocab_size"], (b, s), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False, custom_mapping={
            torch.ops.aten.convolution_backward: grouped_conv_backward_flop}) as counter:
        logits = model(input_ids=ids, use_cache=False).logits
        forward = counter.get_total_flops()
        logits.sum().backward()
    tuned = count(specs[family], Workload(batch_size=b, seq_len=s), adapters=Adapters(4, targets)).finetune
    assert (tuned.forward, tuned.backward) == (forward, counter.get_total_flops() - forward)


def test_blocks_are_cold_until_the_first_adapted_one_in_model_order():
    # Qwen3.5-0.8B: 24 blocks, 3 DeltaNet then 1 attention, six times over; the inventory's groups: embedding,
    # the 18 DeltaNet blocks, the 6 attention blocks, the final norm, the head. With attention adapters the first 3
    # DeltaNet blocks and the first attention block (its gradient starts at q) run with none flowing in, the other
    # 15 DeltaNet blocks after an attention block with one; all-linear starts it in block 0
    spec = load_preset("qwen3.5-0.8b")
    assert cold_instances(adapt(build(spec), Adapters(8, "attention")).groups) == [1, 3, 1, 0, 0]
    assert cold_instances(adapt(build(spec), Adapters(8)).groups) == [1, 1, 0, 0, 0]
    # the same order for layers that differ in their MLP: Llama 4 Maverick's 48 blocks alternate dense (even) and MoE
    # (odd); with expert adapters block 0 runs cold, block 1 starts the gradient, the 23 dense blocks after it get one
    # (the groups: embedding, 24 dense, 12 + 12 MoE (chunked, global), final norm, head, then the vision tower's)
    maverick = adapt(build(load_preset("llama4-maverick")), Adapters(8, "experts")).groups
    assert cold_instances(maverick)[:6] == [1, 1, 1, 0, 0, 0]
    # so the DeltaNet blocks' frozen backward counts 15 of 18: each is its full-training backward less its weights'
    # gradients, whose FLOPs are the forward of its linears (its conv's weight gradient: the conv's forward)
    workload = Workload(seq_len=4096)
    inv = adapt(build(spec, workload), Adapters(8, "attention"))
    deltanet = inv.groups[1]
    weights = sum(sum(op.forward().values()) for op in deltanet.ops if op.role in ("", "conv"))
    full = sum(2 * sum(op.forward().values()) + op.backward_extra() for op in deltanet.ops)
    per_block = sum(op.frozen_backward(True) for op in deltanet.ops)
    assert per_block == full - weights
    assert sum(op.frozen_backward(False) for op in deltanet.ops) == 0


# the reference model's train step with adapters (tfcalc.verify.adapters) against MemTracker: weights, gradients,
# optimizer states, master weights and the activations kept to the byte
EXACT = ("weights", "gradients", "optimizer states", "master weights", "activations (end of forward)")


def conv_hybrid(kernel: int = 3, bias: bool = False) -> ModelSpec:
    """conv, conv, attention, conv, conv, attention (tests/test_conv.py's)."""
    return ModelSpec(n_layers=6, d_model=32, n_heads=4, n_kv_heads=2, vocab_size=64, seq_len=32, positions="rotary",
                     mlp="gated", activation="silu", norm="rmsnorm", bias=False, qk_norm="head",
                     block_pattern=["conv+mlp", "conv+mlp", "attention+mlp"],
                     kinds={"conv": {"kernel": kernel, "bias": bias}})


def parallel_hybrid() -> ModelSpec:
    """Two parallel_hybrid blocks (attention beside Mamba2, tests/test_parallel_hybrid.py's) and a gated MLP."""
    mamba2 = {"n_heads": 4, "head_dim": 12, "d_state": 5, "n_groups": 2, "conv_kernel": 3, "chunk_size": 4}
    return ModelSpec(n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, d_ff=48, vocab_size=50, seq_len=9,
                     positions="rotary", mlp="gated", activation="silu", norm="rmsnorm", bias=False,
                     tie_embeddings=False, block_pattern=["parallel_hybrid+mlp"], kinds={"mamba2": mamba2})


def mamba2_hybrid() -> ModelSpec:
    """mamba2, mamba2, attention + mlp (tests/test_mamba2.py's), chunks of 4 over 9 positions (padded)."""
    kinds = {"n_heads": 4, "head_dim": 16, "d_state": 8, "n_groups": 2, "conv_kernel": 3, "chunk_size": 4}
    return ModelSpec(n_layers=3, d_model=32, n_heads=4, vocab_size=64, seq_len=10, positions="rotary", mlp="gated",
                     activation="silu", norm="rmsnorm", bias=False, block_pattern=["mamba2", "mamba2", "attention+mlp"],
                     kinds={"mamba2": kinds})


@pytest.mark.parametrize("kind,targets,recompute", [
    ("conv", "all-linear", "none"), ("conv", "attention", "selective"), ("conv", "in_proj", "full"),
    ("mamba2", "all-linear", "none"), ("mamba2", "attention", "selective"), ("mamba2", "out_proj,up", "full"),
    ("parallel", "in_proj", "none"), ("parallel", "attention", "none"),
])
def test_lora_step_against_memtracker(kind, targets, recompute):
    spec, workload = (conv_hybrid(), Workload(seq_len=16, batch_size=2)) if kind == "conv" else (
        (mamba2_hybrid() if kind == "mamba2" else parallel_hybrid()), Workload(seq_len=9, batch_size=2))
    report = check_memory(spec, workload, "bf16-mixed", "adamw", recompute, "meta", adapters=Adapters(4, targets))
    rows = {r.category: r for r in report.rows}
    for category in EXACT:
        assert rows[category].difference == 0, (category, rows[category])
    if kind == "conv":  # the peak, an estimate, within 10% (the Mamba2 scan's transient is fitted at scale: not here)
        assert report.match, [r for r in report.rows if not r.match]


@pytest.mark.parametrize("preset", ["qwen3.5-0.8b", "jamba-1.5-mini"])
def test_memory_of_an_unmodelled_scan_is_refused_by_name(preset):
    # full training plans them (tests/test_training_memory_hybrid.py); a LoRA step's memory is not yet held to
    # MemTracker for these scans
    with pytest.raises(UnsupportedFigure, match=r"does not define saved_frozen"):
        training_memory(load_preset(preset), Workload(seq_len=512), adapters=Adapters(8))


@pytest.mark.parametrize("call,pattern", [
    # a first adapter on b and a alone would start a gradient in g and beta, not q, k and v: the rule's backward
    # would follow part of its products
    (lambda s: count(s["qwen3_5"], adapters=Adapters(4, "in_proj_b,in_proj_a,o")),
     r"lora_targets='o,in_proj_b,in_proj_a': the model's first adapted linear is gated_deltanet/in_proj_ba's "
     r"in_proj_b, in_proj_a, which feeds only part of its block's scan"),
    (lambda s: count(s["qwen3_next"], adapters=Adapters(4, "in_proj_ba")),
     r"lora_targets='in_proj_ba': the model's first adapted linear is gated_deltanet/in_proj_ba's in_proj_ba,"),
    (lambda s: count(s["mamba"], adapters=Adapters(4, "dt_proj")),
     r"lora_targets='dt_proj': no adapter of .* runs \(transformers multiplies by dt_proj.weight"),
    (lambda s: count(s["qwen3_next"], adapters=Adapters(4, "in_proj_qkv")),
     r"lora_targets='in_proj_qkv': .* has no in_proj_qkv linear$"),
    (lambda s: count(load_preset("jamba-1.5-mini"), adapters=Adapters(512, "dt_proj,q")),
     r"lora_rank=512: past the width of jamba-1.5-mini's dt_proj linear \(256 -> 8192: a rank-512 update, at most "
     r"256\)$"),
    (lambda s: Adapters(8, "in_proj,xproj"), r"lora_targets='in_proj,xproj': 'xproj' is not a target"),
])
def test_refusals(specs, call, pattern):
    with pytest.raises(TfcalcError, match="^" + pattern) as error:
        call(specs)
    assert "\n" not in str(error.value)


runner = CliRunner()


@pytest.mark.parametrize("preset", ["qwen3.5-0.8b", "lfm2-1.2b", "nemotron-h-8b", "granite4-h-tiny", "falcon-h1-7b",
                                    "jamba-1.5-mini", "qwen3-next-80b-a3b"])
def test_the_hybrid_presets_plan_a_lora_run(preset):
    result = runner.invoke(app, ["train", "--preset", preset, "--lora-rank", "8", "--tokens", "1e9"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["count", "--preset", preset, "--lora-rank", "8", "--json"])
    assert result.exit_code == 0, result.output
    tuned = json.loads(result.output)["finetune"]
    # all-linear adapts block 0's first linear: every frozen op after it passes a gradient on
    assert tuned["frozen_backward"] == count(load_preset(preset), adapters=Adapters(8)).finetune.frozen_backward


@pytest.mark.parametrize("preset,ok", [("lfm2-1.2b", True), ("nemotron-h-8b", True), ("qwen3.5-0.8b", False)])
def test_cli_memory(preset, ok):
    result = runner.invoke(app, ["memory", "--preset", preset, "--lora-rank", "8", "--seq-len", "2048", "--json"])
    if ok:
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["adapters"]["rank"] == 8
    else:
        assert result.exit_code == 2 and "does not define saved" in result.output
        assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("targets", ["all-linear", "q,v"])
def test_a_parallel_blocks_mlp_branch_starts_from_the_blocks_input(targets):
    # Command-R's blocks run attention and the MLP on one normed input (parallel_block one_norm): block 0's MLP gets
    # no gradient from the attention adapters beside it. The reference model with adapters (tfcalc.verify.adapters)
    # on meta under FlopCounterMode, as tests/test_lora.py holds the sequential layouts
    from tfcalc.reference import build_model, example_inputs
    from tfcalc.verify.adapters import add_adapters

    spec = load_preset("command-r").replace(n_layers=3, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96, vocab_size=128,
                                            seq_len=16)
    workload, adapters = Workload(seq_len=16, batch_size=2), Adapters(4, targets)
    model = build_model(spec, "meta", torch.float32, True, workload)
    add_adapters(model, spec, workload, adapters)
    with FlopCounterMode(display=False) as counter:
        logits = model(*example_inputs(spec, "meta", workload))
        forward = counter.get_total_flops()
        logits.float().sum().backward()
    tuned = count(spec, workload, adapters=adapters).finetune
    assert (tuned.forward, tuned.backward) == (forward, counter.get_total_flops() - forward)
