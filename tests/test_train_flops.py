"""A train step (forward + backward) of LFM2's short convolution, Qwen3.5's gated DeltaNet, Mamba2 and Mamba, held
to FlopCounterMode over transformers' own classes (Lfm2ForCausalLM, Qwen3_5ForCausalLM, Mamba2ForCausalLM,
NemotronHForCausalLM, MambaForCausalLM: eager, fp32 CPU, loss = the logits' sum) and over the reference model
(check(..., train=True)), on tiny generated configs.

Two things made them differ, each pinned here with its arithmetic:
- FlopCounterMode's convolution_backward formula ignores `groups` in the weight gradient: a depthwise convolution's
  weight gradient (2 b n C K FLOPs, what its forward costs) is counted 2 b n C^2 K, C times over. The check counts it
  with its groups (grouped_conv_backward_flop); tfcalc's 2 x forward is right.
- The chunked gated delta rule's backward is not 2 x its forward: each triangular solve (counted 0) adds the matmul of
  its matrix's gradient, and the products on the zero initial state and on the final, unread, state need fewer
  gradients (DeltaRule.backward_extra).
Mamba2's (Mamba2ForCausalLM, NemotronHForCausalLM) and Mamba's train steps are 3 x forward as transformers runs them;
the reference's Mamba2 scan, checkpointed for its memory, recomputes its forward in backward, which check(train=True)
leaves out (the scan's `explicit`), as it leaves out SDPA's recomputation."""

import json
import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import Workload, count
from tfcalc.hf import read_hf_config
from tfcalc.verify import check
from tfcalc.verify.counters import grouped_conv_backward_flop

LFM2 = {"model_type": "lfm2", "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 48,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50, "layer_types": ["conv", "full_attention"],
        "block_auto_adjust_ff_dim": False, "conv_L_cache": 3}
QWEN3_5 = {"model_type": "qwen3_5_text", "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 24, "vocab_size": 50,
           "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
           "linear_value_head_dim": 6, "linear_conv_kernel_dim": 3, "layer_types": ["linear_attention", "full_attention"]}


def spec_of(tmp_path, config: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return read_hf_config(path).spec


def hf_train_step(model_class, config: dict, batch: int, seq_len: int, grouped: bool) -> int:
    """FlopCounterMode over forward + backward of transformers' class; `grouped`: with the convolution's weight
    gradient counted by its groups, else torch's formula as shipped."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = model_class._from_config(hf_config(config), attn_implementation="eager")
    ids = torch.randint(config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(0))
    mapping = {torch.ops.aten.convolution_backward: grouped_conv_backward_flop} if grouped else {}
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        model(input_ids=ids, use_cache=False).logits.sum().backward()
    return counter.get_total_flops()


def test_lfm2_train_step_matches_transformers_and_the_reference(tmp_path):
    spec, w = spec_of(tmp_path, LFM2), Workload(batch_size=2, seq_len=20)
    flops = count(spec, w).flops
    assert flops.backward == 2 * flops.forward  # every op's backward is its input's and its weight's gradients
    assert hf_train_step(transformers.Lfm2ForCausalLM, LFM2, 2, 20, grouped=True) == flops.train_step
    # torch's formula as shipped: the convolution (C = D = 32 channels, K = 3 taps, n = s + K - 1 = 22 positions
    # computed, b = 2) costs 2 b n C K = 2 * 2 * 22 * 32 * 3 = 8,448 forward; its weight gradient is counted C times
    # over, 31 x 8,448 = 261,888 too many
    assert hf_train_step(transformers.Lfm2ForCausalLM, LFM2, 2, 20, grouped=False) == flops.train_step + 31 * 8_448
    report = check(spec, workload=w, train=True)
    assert report.train.match and report.train.flop_counter == flops.train_step


@pytest.mark.parametrize("batch, seq_len, chunks", [(2, 40, 1), (1, 130, 3)])
def test_qwen3_5_train_step_matches_transformers_and_the_reference(tmp_path, batch, seq_len, chunks):
    spec, w = spec_of(tmp_path, QWEN3_5), Workload(batch_size=batch, seq_len=seq_len)
    flops = count(spec, w).flops
    # one gated DeltaNet block: H = 4 value heads, dk = 8, dv = 6, chunk C = 64, P = 64 x chunks padded positions.
    # Backward beyond 2 x forward: b H (2 P C (dk + dv) - 8 C dk dv): the solves' matrix gradients [C, d] @ [d, C]
    # (2 P C (dk + dv)), less the first chunk's k_cumdecay @ S and q @ S (the zero state needs no gradient: 2 x
    # 2 C dk dv) and the last chunk's unread state update k^T @ v_new (4 C dk dv)
    P, C, H, dk, dv = 64 * chunks, 64, 4, 8, 6
    assert flops.backward - 2 * flops.forward == batch * H * (2 * P * C * (dk + dv) - 8 * C * dk * dv)
    assert hf_train_step(transformers.Qwen3_5ForCausalLM, QWEN3_5, batch, seq_len, grouped=True) == flops.train_step
    # torch's formula as shipped: the convolution over q, k, v (2 x 16 + 24 = 56 channels, K = 3, n = s + 2) costs
    # 2 b n 56 K forward; its weight gradient is counted 56 times over, 55 x that too many
    conv = 2 * batch * (seq_len + 2) * 56 * 3
    assert hf_train_step(transformers.Qwen3_5ForCausalLM, QWEN3_5, batch, seq_len, grouped=False) \
        == flops.train_step + 55 * conv
    report = check(spec, workload=w, train=True)
    assert report.train.match and report.train.flop_counter == flops.train_step


def test_grouped_conv_backward_is_torchs_for_one_group_and_2x_forward_for_a_depthwise_one():
    def train(conv: torch.nn.Conv1d, x: torch.Tensor) -> tuple[int, int]:
        with FlopCounterMode(display=False) as fwd, torch.no_grad():
            conv(x)
        mapping = {torch.ops.aten.convolution_backward: grouped_conv_backward_flop}
        with FlopCounterMode(display=False, custom_mapping=mapping) as step:
            conv(x).sum().backward()
        return fwd.get_total_flops(), step.get_total_flops()

    x = torch.randn(2, 12, 10, requires_grad=True)
    forward, step = train(torch.nn.Conv1d(12, 6, 3, bias=False), x)
    assert forward == 2 * 2 * 8 * 6 * 12 * 3 and step == 3 * forward  # groups = 1: torch's own formula
    forward, step = train(torch.nn.Conv1d(12, 12, 3, groups=12, bias=False), x)
    assert forward == 2 * 2 * 8 * 12 * 3 and step == 3 * forward  # depthwise: input and weight gradients, 1 x each
    forward, step = train(torch.nn.Conv1d(12, 6, 3, groups=3, bias=False), x)
    assert forward == 2 * 2 * 8 * 6 * 4 * 3 and step == 3 * forward  # 3 groups of 4 inputs, 2 outputs


# Mamba2's chunked scan (transformers' mamba2_chunk_scan, the eager path): five einsums, each run as a bmm whose two
# operands both need gradients (x, B, C from the conv, L and the decays from dt and A_log), so each backward is its two
# bmm, 2 x its forward, whatever the padding of the last chunk. Unlike the gated delta rule's, the zero initial state
# is concatenated to the chunk states (cat: the einsum over the c + 1 states reads one tensor that needs a gradient)
# and the final state is a slice of that einsum's output (its zero gradient still runs through the whole bmm): no
# product is skipped, none added. Odd sizes (n = 1 or Q = 1, where torch's einsum multiplies instead: 0 both ways)
# were measured equal too. SSDScan.backward_extra is 0.
MAMBA2 = {"model_type": "mamba2", "num_hidden_layers": 2, "hidden_size": 32, "expand": 2, "num_heads": 8, "head_dim": 8,
          "state_size": 8, "n_groups": 2, "conv_kernel": 3, "vocab_size": 50}
NEMOTRON_H = {"model_type": "nemotron_h", "hybrid_override_pattern": "M-*-", "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
              "max_position_embeddings": 64, "vocab_size": 50, "mamba_num_heads": 8, "mamba_head_dim": 16,
              "ssm_state_size": 8, "n_groups": 2, "conv_kernel": 3}


@pytest.mark.parametrize("model_class, config, batch, seq_len, chunk", [
    (transformers.Mamba2ForCausalLM, MAMBA2, 2, 10, 4),  # 3 chunks, the last of 2 positions
    (transformers.Mamba2ForCausalLM, MAMBA2, 1, 8, 4),  # 2 whole chunks
    (transformers.Mamba2ForCausalLM, MAMBA2, 3, 7, 16),  # one chunk, 7 of its 16 positions
    (transformers.NemotronHForCausalLM, NEMOTRON_H, 2, 13, 5),  # 3 chunks, the last of 3
    (transformers.NemotronHForCausalLM, NEMOTRON_H, 1, 1, 4),  # one position
], ids=["mamba2-partial", "mamba2-whole", "mamba2-one-chunk", "nemotron_h-partial", "nemotron_h-one-token"])
def test_mamba2_train_step_is_3x_forward_as_transformers_runs_it(tmp_path, model_class, config, batch, seq_len, chunk):
    config = config | {"chunk_size": chunk}
    spec, w = spec_of(tmp_path, config), Workload(batch_size=batch, seq_len=seq_len)
    flops = count(spec, w).flops
    assert flops.backward == 2 * flops.forward  # no backward_extra: every einsum's backward is its two bmm
    assert hf_train_step(model_class, config, batch, seq_len, grouped=True) == flops.train_step
    report = check(spec, workload=w, train=True)
    assert report.train.match and report.train.flop_counter == flops.train_step


def test_the_checkpointed_reference_scan_counts_its_forward_once_more(tmp_path):
    """What made check(train=True) differ before: the reference scan runs under torch.utils.checkpoint (its memory
    form, as the fused kernel keeps only its inputs), which runs the scan's forward again in backward. check sets the
    scan's `explicit` to count autograd of the eager scan, as transformers runs it; left unset, FlopCounterMode sees
    one more scan forward per block."""
    from tfcalc.reference import build_model, example_inputs
    from tfcalc.verify.counters import flop_counter_train_step

    config = MAMBA2 | {"chunk_size": 4}
    spec, w = spec_of(tmp_path, config), Workload(batch_size=2, seq_len=10)
    flops = count(spec, w).flops
    model = build_model(spec, "meta", workload=w)
    model.requires_grad_(True)
    checkpointed = flop_counter_train_step(model, example_inputs(spec, "meta", w))
    # per block: b = 2, h = 8 heads of p = 8, n = 8, Q = 4, c = 3 chunks: G 2 b c h Q^2 n, Y_diag 2 b c h Q^2 p, the
    # chunk states and Y_off 2 b c h Q p n each, the recurrence 2 b h (c + 1)^2 p n
    b, h, p, n, Q, c = 2, 8, 8, 8, 4, 3
    scan = 2 * b * h * (c * Q * Q * n + c * Q * Q * p + 2 * c * Q * p * n + (c + 1) ** 2 * p * n)
    assert flops.components["mamba2/scan"] == 2 * scan  # 2 blocks
    assert checkpointed == flops.train_step + 2 * scan


MAMBA = {"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 16, "state_size": 4, "conv_kernel": 4,
         "expand": 2, "vocab_size": 50}


@pytest.mark.parametrize("batch, seq_len", [(2, 10), (3, 1)])
def test_mamba_train_step_is_3x_forward_as_transformers_runs_it(tmp_path, batch, seq_len):
    # Mamba (v1)'s sequential scan: per token a bmm y = state @ C, [b, d_inner, n] @ [b, n, 1], whose state and C both
    # need gradients (the first state is dA * 0 + dt B x): backward 2 x forward, no checkpoint in the reference
    spec, w = spec_of(tmp_path, MAMBA), Workload(batch_size=batch, seq_len=seq_len)
    flops = count(spec, w).flops
    assert flops.backward == 2 * flops.forward
    assert hf_train_step(transformers.MambaForCausalLM, MAMBA, batch, seq_len, grouped=True) == flops.train_step
    report = check(spec, workload=w, train=True)
    assert report.train.match and report.train.flop_counter == flops.train_step
