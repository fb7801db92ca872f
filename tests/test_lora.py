"""LoRA and DoRA adapters: trainable parameters held against PEFT's get_peft_model on transformers' own classes built
on the meta device (llama, mixtral, qwen3, gemma layouts), the published Llama-3-8B figure, the fine-tuning step's
FLOPs by their arithmetic, and refusals by field name."""

import warnings

import peft
import pytest
import torch
import transformers
from hf_oracle import hf_config, write

from tfcalc import Adapters, TfcalcError, count, load_preset
from tfcalc.hf import read_hf_config
from tfcalc.plan.adapters import adapters

# tfcalc's target names -> the module names PEFT is given (Mixtral's experts: the names of transformers 4's
# experts, w1 w2 w3, which PEFT maps onto transformers 5's stacked gate_up_proj and down_proj parameters)
PEFT_NAMES = {"q": ["q_proj"], "k": ["k_proj"], "v": ["v_proj"], "o": ["o_proj"], "gate": ["gate_proj"],
              "up": ["up_proj"], "down": ["down_proj"], "experts": ["w1", "w2", "w3"]}

SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64}
CONFIGS = {
    "llama": {"model_type": "llama", **SMALL},
    "qwen3": {"model_type": "qwen3", **SMALL, "head_dim": 32},
    "gemma": {"model_type": "gemma", **SMALL, "num_key_value_heads": 1, "head_dim": 24},
    "mixtral": {"model_type": "mixtral", **SMALL, "num_local_experts": 4, "num_experts_per_tok": 2},
}


def peft_trainable(config: dict, rank: int, targets, dora: bool = False) -> int:
    """sum(numel) of the parameters get_peft_model leaves trainable, on transformers' class built on meta."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf_config(config))
        if targets != "all-linear":
            names = {"attention": "q,k,v,o", "mlp": "gate,up,down,experts"}.get(targets, targets)
            targets = [name for target in names.split(",") for name in PEFT_NAMES[target]]
        model = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=targets, use_dora=dora))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora")
    out = {}
    for name, config in CONFIGS.items():
        (folder / name).mkdir()
        out[name] = read_hf_config(write(folder / name, config)).spec
    return out


CASES = [
    ("llama", 8, "all-linear", False), ("llama", 4, "q,v", False), ("llama", 16, "mlp", True),
    ("qwen3", 8, "all-linear", False), ("qwen3", 4, "attention", True),
    ("gemma", 8, "all-linear", True), ("gemma", 2, "k,o,down", False),
    ("mixtral", 8, "all-linear", False), ("mixtral", 4, "experts", False), ("mixtral", 4, "attention", True),
]


@pytest.mark.parametrize("family,rank,targets,dora", CASES)
def test_trainable_params_are_peft(specs, family, rank, targets, dora):
    tuned = count(specs[family], adapters=Adapters(rank, targets, dora)).finetune
    assert tuned.trainable == peft_trainable(CONFIGS[family], rank, targets, dora)
    assert tuned.frozen == count(specs[family]).params.total


def test_t5_attention_targets_are_peft(tmp_path):
    # T5 names its attentions' linears q, k, v, o (self-attention and cross-attention alike), as tfcalc's targets
    config = {"model_type": "t5", "d_model": 64, "d_kv": 16, "num_heads": 4, "d_ff": 96, "num_layers": 2,
              "num_decoder_layers": 3, "vocab_size": 128}
    spec = read_hf_config(write(tmp_path, config)).spec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            model = transformers.T5ForConditionalGeneration(hf_config(config))
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q", "k", "v", "o"]))
    expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # 2 encoder self-attentions, 3 decoder self- and 3 cross-attentions, each 4 x 4 x (64 + 64)
    assert expected == 8 * 4 * 4 * (64 + 64)
    assert count(spec, adapters=Adapters(4, "attention")).finetune.trainable == expected


def test_llama3_8b_rank_16_all_linear():
    # Published (PEFT on meta-llama/Meta-Llama-3-8B, r=16, all linear layers): 41,943,040 trainable.
    # 32 layers x 16 x (q 4096+4096, k 4096+1024, v 4096+1024, o 4096+4096, gate 4096+14336, up 4096+14336,
    # down 14336+4096)
    arithmetic = 32 * 16 * ((4096 + 4096) + (4096 + 1024) * 2 + (4096 + 4096) + (4096 + 14336) * 3)
    assert arithmetic == 41_943_040
    assert count(load_preset("llama3-8b"), adapters=Adapters(16)).finetune.trainable == arithmetic


def test_step_flops_arithmetic():
    # Llama-3-8B, rank 16, q and v only, B=1, N=8192 tokens (t). Adapters' forward per layer: 2t(4096*16 + 16*4096)
    # for q, 2t(4096*16 + 16*1024) for v; their backward twice that. Frozen matmuls' backward = their forward (input
    # gradients), the attention cores' 2 x theirs; but nothing before the first adapter needs a gradient: block 0's
    # q/k/v projection passes none to its input (2t * 4096 * 6144), nor do its q and v adapters' A (2t * 4096 * 16
    # each).
    spec = load_preset("llama3-8b")
    plain = count(spec)
    tuned = count(spec, adapters=Adapters(16, "q,v")).finetune
    t = plain.workload.tokens
    adapters_fwd = 32 * 2 * t * ((4096 * 16 + 16 * 4096) + (4096 * 16 + 16 * 1024))
    assert tuned.adapter_forward == adapters_fwd
    assert tuned.forward == plain.flops.forward + adapters_fwd
    cores = sum(v for k, v in plain.flops.components.items() if k.endswith(("/scores", "/values")))
    first = 2 * t * 4096 * 6144 + 2 * (2 * t * 4096 * 16)
    assert tuned.backward == (plain.flops.forward - cores) + 2 * cores + 2 * adapters_fwd - first
    assert tuned.train_step == tuned.forward + tuned.backward


@pytest.mark.parametrize("targets", ["all-linear", "q,v", "up", "k,down"])
def test_step_flops_are_flop_counter_modes(targets):
    # forward and backward of the reference model with adapters (tfcalc.verify.adapters) on meta, under torch's
    # FlopCounterMode: what torch really runs (no gradient for an input that needs none)
    from torch.utils.flop_counter import FlopCounterMode

    from tfcalc import Workload
    from tfcalc.reference import build_model, example_inputs
    from tfcalc.verify.adapters import add_adapters

    spec = load_preset("llama2-7b").replace(n_layers=3, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96,
                                            vocab_size=128, seq_len=16)
    workload = Workload(seq_len=16, batch_size=2)
    adapters = Adapters(4, targets)
    model = build_model(spec, "meta", torch.float32, True, workload)
    add_adapters(model, spec, workload, adapters)
    with FlopCounterMode(display=False) as counter:
        logits = model(*example_inputs(spec, "meta", workload))
        forward = counter.get_total_flops()
        logits.float().sum().backward()
    tuned = count(spec, workload, adapters=adapters).finetune
    assert (forward, counter.get_total_flops() - forward) == (tuned.forward, tuned.backward)


def test_dora_adds_magnitude_and_norm_update():
    spec = load_preset("llama3-8b")
    lora = count(spec, adapters=Adapters(16, "q")).finetune
    dora = count(spec, adapters=Adapters(16, "q", dora=True)).finetune
    assert dora.trainable - lora.trainable == 32 * 4096  # a magnitude per output of each q_proj
    assert dora.dora_norm == 32 * 2 * 4096 * 16 * 4096  # B [4096, 16] @ A [16, 4096] per layer, forward only
    assert dora.backward == lora.backward


@pytest.mark.parametrize("call,message", [
    (lambda: Adapters(0), "lora_rank=0: expected a positive integer"),
    (lambda: Adapters(-3), "lora_rank=-3: expected a positive integer"),
    (lambda: Adapters(8, "q,gates"), "lora_targets='q,gates': 'gates' is not a target"),
    (lambda: adapters(None, dora=True), "dora=True: DoRA needs a LoRA rank"),
    (lambda: adapters(None, "q"), "lora_targets='q': adapter targets need a LoRA rank"),
    (lambda: count(load_preset("gpt2"), adapters=Adapters(8, "gate")), "lora_targets='gate': gpt2 has no gate linear"),
    (lambda: count(load_preset("llama3-8b"), adapters=Adapters(1025, "k")),
     "lora_rank=1025: past the width of"),
    (lambda: count(load_preset("mixtral-8x7b"), adapters=Adapters(8, dora=True)), "dora=True: PEFT's DoRA does not"),
])
def test_refusals(call, message):
    with pytest.raises(TfcalcError) as error:
        call()
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)
