"""Mamba (model_type mamba): transformers' MambaForCausalLM, a stack of Mamba (v1) blocks and nothing else.

Each block (MambaBlock) is pre-norm: an RMSNorm (`norm`) before its mixer (MambaMixer; tfcalc's `mamba` kind), no
MLP; a final RMSNorm (norm_f) after the last block; the head is tied by tie_word_embeddings (true by default).
The mixer: in_proj D -> 2 d_inner (use_bias), a depthwise causal Conv1d over d_inner channels of conv_kernel taps
(use_conv_bias), x_proj d_inner -> time_step_rank + 2 state_size (no bias), dt_proj time_step_rank -> d_inner (its
weight a matmul in the mixer's forward, its bias added in the scan), A_log [d_inner, state_size], D [d_inner],
out_proj d_inner -> D (use_bias); d_inner = int(expand * hidden_size) (MambaConfig's intermediate_size, which it
sets itself: a config's own intermediate_size is not read); time_step_rank "auto" is ceil(hidden_size / 16).
hidden_act is the activation after the convolution (elementwise: no count changes with it). time_step_scale/min/
max/init_scheme/floor, residual_in_fp32, rescale_prenorm_residual and layer_norm_epsilon change values, not shapes;
use_mambapy (mamba.py's pscan, where installed) computes the same products (all states @ C): not read.
"""

from __future__ import annotations

import math
from typing import Any

from ..hf import activation_of, refuse_if
from .registry import Difference, Family, register

DEFAULTS = {"vocab_size": 50280, "hidden_size": 768, "num_hidden_layers": 32, "state_size": 16, "expand": 2,
            "conv_kernel": 4, "use_bias": False, "use_conv_bias": True, "hidden_act": "silu",
            "time_step_rank": "auto", "tie_word_embeddings": True}
TYPES = {"vocab_size": "size", "hidden_size": "size", "num_hidden_layers": "size", "state_size": "size",
         "expand": "int", "conv_kernel": "size", "use_bias": "bool", "use_conv_bias": "bool", "hidden_act": "str",
         "time_step_rank": "int|str", "tie_word_embeddings": "bool"}
# Mamba has no position table nor a longest input: the default seq_len is this (tfcalc.hf caps it anyway)
CONTEXT = 4096


def mixer_rules(blocks: str, mixer: str = "mixer") -> list[tuple[str, str]]:
    """transformers' Mamba (v1) mixer modules -> tfcalc components, for a model whose blocks sit at `blocks` (a regex)
    and whose mixer is `mixer` inside a block. The conv runs as F.conv1d on conv1d's weight inside the mixer's
    forward, dt_proj as its weight times dt, and the scan's bmm too: the mixer's own FLOPs are the three's, compared
    with their sum (hf_model.fused_parts "mamba/conv+dt_proj+scan"), and so are conv1d's and dt_proj's weights and
    biases with A_log and D. Jamba's norms on dt, B and C are modules of their own."""
    fused = "mamba/conv+dt_proj+scan"
    return [(rf"{blocks}\.{mixer}\.in_proj", "mamba/in_proj"),
            (rf"{blocks}\.{mixer}\.(conv1d|dt_proj)", fused),
            (rf"{blocks}\.{mixer}", fused),
            (rf"{blocks}\.{mixer}\.x_proj", "mamba/x_proj"),
            (rf"{blocks}\.{mixer}\.dt_layernorm", "mamba/dt_norm"),
            (rf"{blocks}\.{mixer}\.b_layernorm", "mamba/b_norm"),
            (rf"{blocks}\.{mixer}\.c_layernorm", "mamba/c_norm"),
            (rf"{blocks}\.{mixer}\.out_proj", "mamba/out_proj")]


COMPONENTS = [
    (r"backbone\.embeddings", "embedding/token"),
    (r"backbone\.layers\.\d+\.norm", "mamba/norm"),
    *mixer_rules(r"backbone\.layers\.\d+"),
    (r"backbone\.norm_f", "final_norm"),
    (r"lm_head", "head"),
]

# The fields a family's config names the mixer's sizes by: MambaConfig's, the default
MAMBA_NAMES = {"state": "state_size", "kernel": "conv_kernel", "expand": "expand", "rank": "time_step_rank",
               "conv_bias": "use_conv_bias", "bias": "use_bias", "act": "hidden_act"}


def mixer_sizes(cfg: dict, notes: list[str], **names: str) -> dict[str, Any]:
    """The `mamba` kind's sizes from a config's fields (named as each family names them: MAMBA_NAMES, with the
    family's own `names`), refused by field and value where transformers' mixer fails or tfcalc does not model it."""
    n = MAMBA_NAMES | names
    D, expand, rank = cfg["hidden_size"], cfg[n["expand"]], cfg[n["rank"]]
    refuse_if(cfg, n["expand"], expand < 1, "the inner width expand * hidden_size must be 1 or more")
    refuse_if(cfg, n["rank"], rank is None or (isinstance(rank, str) and rank != "auto"),
              "expected an integer or 'auto'")
    if rank == "auto":
        rank = math.ceil(D / 16)
        notes.append(f"{n['rank']} 'auto': ceil(hidden_size / 16) = {rank}")
    refuse_if(cfg, n["rank"], rank < 1, "the time-step projection needs a rank of 1 or more")
    sizes = {"d_state": cfg[n["state"]], "d_conv": cfg[n["kernel"]], "expand": expand, "dt_rank": rank,
             "conv_bias": cfg[n["conv_bias"]], "bias": cfg[n["bias"]]}
    act = activation_of(cfg, n["act"])
    return sizes if act == "silu" else sizes | {"activation": act}  # silu: the kind's default


def mamba(cfg: dict, notes: list[str]) -> dict[str, Any]:
    D, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    sizes = mixer_sizes(cfg, notes)
    notes.append(f"{L} Mamba blocks, no attention, no MLP (d_inner {sizes['expand'] * D}, state {sizes['d_state']}, "
                 f"dt_rank {sizes['dt_rank']}, conv {sizes['d_conv']} taps)")
    # n_heads: ModelSpec's attention heads, which no block has here (1: any whole number of channels)
    return {"n_layers": L, "d_model": D, "n_heads": 1, "vocab_size": cfg["vocab_size"], "norm": "rmsnorm",
            "norm_position": "pre", "positions": "none", "bias": False, "tie_embeddings": cfg["tie_word_embeddings"],
            "block_pattern": ["mamba"], "kinds": {"mamba": sizes}, "context": CONTEXT}


def mamba_blocks(pattern: list[str] | None, L: int) -> int:
    """How many of the L blocks, `pattern` cycled over them, are Mamba blocks."""
    mixers = [("mamba" in block.split("+")) for block in pattern or []]
    cycles, rest = divmod(L, len(mixers)) if mixers else (0, 0)
    return cycles * sum(mixers) + sum(mixers[:rest])


def padded_conv(d: Difference) -> str | None:
    """With a cache (check --hf-config runs one) and fewer tokens s than taps K, transformers' DynamicCache pads the
    conv's input to K positions first: 2 b d_inner K (K - s) FLOPs more in each Mamba block."""
    w = d.workload
    mixer = d.component == "total" or d.component.startswith("mamba/conv+")
    if w is None or d.figure != "forward" or not mixer:
        return None
    blocks = mamba_blocks(d.spec.block_pattern, d.spec.n_layers)
    if not blocks:
        return None
    z = d.spec.sizes("mamba")
    K, s, b, C = z.d_conv, w.seq_len, w.batch_size, z.inner(d.spec.d_model)
    if s >= K or d.excess != blocks * 2 * b * C * K * (K - s):
        return None
    return (f"seq_len {s} < conv_kernel {K}: with a cache transformers pads each conv's input to {K} positions and "
            f"convolves {2 * K - 1} per channel, tfcalc a train step's {s + K - 1}: 2 * b * d_inner * K * (K - s) = "
            f"{d.excess // blocks:,} more in each of {blocks} Mamba blocks")


register(Family("mamba", DEFAULTS, TYPES, mamba, COMPONENTS, known=padded_conv))
