"""Mamba2 (model_type mamba2): transformers' Mamba2ForCausalLM, a stack of Mamba2 blocks and nothing else.

Each block (Mamba2Block) is pre-norm: an RMSNorm (`norm`) before its mixer (Mamba2Mixer; tfcalc's `mamba2` kind),
no MLP; a final RMSNorm (norm_f) after the last block; the head is tied by tie_word_embeddings (false by default).
The mixer: in_proj D -> 2 d_inner + 2 g n + h (use_bias), a depthwise causal Conv1d over d_inner + 2 g n channels of
conv_kernel taps (use_conv_bias), A_log, D and dt_bias [h], a gated RMSNorm over n_groups groups (weight [d_inner]),
out_proj d_inner -> D (use_bias); d_inner = int(expand * hidden_size), which Mamba2Config requires to be num_heads *
head_dim. hidden_act is the activation after the convolution (elementwise: no count changes with it).
time_step_rank, time_step_* and residual_in_fp32 change values, not shapes: not read.
"""

from __future__ import annotations

from typing import Any

from ..hf import refuse_if, show
from .registry import Difference, Family, register

DEFAULTS = {"vocab_size": 32768, "hidden_size": 4096, "num_hidden_layers": 64, "num_heads": 128, "head_dim": 64,
            "state_size": 128, "expand": 2, "conv_kernel": 4, "n_groups": 8, "use_bias": False,
            "use_conv_bias": True, "hidden_act": "silu", "chunk_size": 256, "tie_word_embeddings": False}
TYPES = {"vocab_size": "size", "hidden_size": "size", "num_hidden_layers": "size", "num_heads": "size",
         "head_dim": "size", "state_size": "size", "expand": "int", "conv_kernel": "size", "n_groups": "size",
         "use_bias": "bool", "use_conv_bias": "bool", "hidden_act": "str", "chunk_size": "size",
         "tie_word_embeddings": "bool"}
# Mamba2 has no position table nor a longest input: the default seq_len is this (tfcalc.hf caps it anyway)
CONTEXT = 4096


def mixer_rules(blocks: str, mixer: str = "mixer") -> list[tuple[str, str]]:
    """transformers' Mamba2 mixer modules -> tfcalc components, for a model whose blocks sit at `blocks` (a regex) and
    whose mixer is `mixer` inside a block. The conv runs as F.conv1d on conv1d's weight inside the mixer's forward, and
    the scan's einsums too: the mixer's own FLOPs are the conv's and the scan's, compared with their sum
    (hf_model.fused_parts "mamba2/conv+scan"), and so are conv1d's weight and bias with A_log, D and dt_bias."""
    return [(rf"{blocks}\.{mixer}\.in_proj", "mamba2/in_proj"),
            (rf"{blocks}\.{mixer}\.conv1d", "mamba2/conv+scan"),
            (rf"{blocks}\.{mixer}", "mamba2/conv+scan"),
            (rf"{blocks}\.{mixer}\.norm", "mamba2/gated_norm"),
            (rf"{blocks}\.{mixer}\.out_proj", "mamba2/out_proj")]


COMPONENTS = [
    (r"backbone\.embeddings", "embedding/token"),
    (r"backbone\.layers\.\d+\.norm", "mamba2/norm"),
    *mixer_rules(r"backbone\.layers\.\d+"),
    (r"backbone\.norm_f", "final_norm"),
    (r"lm_head", "head"),
]


# The fields a family's config names the mixer's sizes by: Mamba2Config's, the default
MAMBA2_NAMES = {"heads": "num_heads", "head_dim": "head_dim", "state": "state_size", "groups": "n_groups",
                "kernel": "conv_kernel", "chunk": "chunk_size", "conv_bias": "use_conv_bias", "bias": "use_bias",
                "act": "hidden_act"}


def mixer_sizes(cfg: dict, notes: list[str], inner: int, inner_from: str, **names: str) -> dict[str, Any]:
    """The `mamba2` kind's sizes from a config's fields (named as each family names them: MAMBA2_NAMES, with the
    family's own `names`), refused by field and value where transformers' mixer fails or tfcalc does not model it.
    `inner`: the mixer's inner width as the config class computes it (`inner_from` the field refused when it is not
    heads * head_dim)."""
    n = MAMBA2_NAMES | names
    h, p, g = cfg[n["heads"]], cfg[n["head_dim"]], cfg[n["groups"]]
    refuse_if(cfg, inner_from, inner != h * p, f"the mixer's inner width {inner} is not {n['heads']}={h} * "
              f"{n['head_dim']}={p} = {h * p} (transformers refuses it, or its scan fails on the reshape)")
    refuse_if(cfg, n["groups"], h % g != 0, f"does not divide {n['heads']}={h} (each group of B and C serves a "
              "whole number of heads; transformers' scan fails)")
    if cfg.get(n["act"], "silu") != "silu":
        notes.append(f"{n['act']}={show(cfg[n['act']])} after the convolution: elementwise, the counts do not change "
                     "(the non-matmul estimate is silu's)")
    return {"n_heads": h, "head_dim": p, "d_state": cfg[n["state"]], "n_groups": g, "conv_kernel": cfg[n["kernel"]],
            "chunk_size": cfg[n["chunk"]], "conv_bias": cfg[n["conv_bias"]], "bias": cfg[n["bias"]]}


def mamba2(cfg: dict, notes: list[str]) -> dict[str, Any]:
    D, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    expand = cfg["expand"]
    refuse_if(cfg, "expand", expand < 1, "the inner width int(expand * hidden_size) must be 1 or more")
    sizes = mixer_sizes(cfg, notes, expand * D, "expand")
    notes.append(f"{L} Mamba2 blocks, no attention, no MLP (d_inner {expand * D}, {sizes['n_heads']} heads of "
                 f"{sizes['head_dim']}, state {sizes['d_state']}, {sizes['n_groups']} groups, chunk "
                 f"{sizes['chunk_size']})")
    # n_heads: ModelSpec's attention heads, which no block has here (1: any whole number of channels)
    return {"n_layers": L, "d_model": D, "n_heads": 1, "vocab_size": cfg["vocab_size"], "norm": "rmsnorm",
            "norm_position": "pre", "positions": "none", "bias": False, "tie_embeddings": cfg["tie_word_embeddings"],
            "block_pattern": ["mamba2"], "kinds": {"mamba2": sizes}, "context": CONTEXT}


def mamba2_blocks(pattern: list[str] | None, L: int) -> int:
    """How many of the L blocks, `pattern` cycled over them, are Mamba2 blocks (or have a Mamba2 mixer in a kind made
    of others: Falcon-H1's parallel_hybrid)."""
    from ..arch.builders import KINDS

    mixers = [any(k == "mamba2" or "mamba2" in KINDS[k].parts for k in block.split("+")) for block in pattern or []]
    cycles, rest = divmod(L, len(mixers)) if mixers else (0, 0)
    return cycles * sum(mixers) + sum(mixers[:rest])


def padded_conv(d: Difference) -> str | None:
    """With a cache (check --hf-config runs one) and fewer tokens s than taps K, transformers' DynamicCache pads the
    conv's input to K positions first: 2 b C K (K - s) FLOPs more in each Mamba2 block (C = d_inner + 2 g n)."""
    w = d.workload
    # the mixer's own FLOPs: mamba2/conv+scan (Mamba2), mamba2/conv+scan+attention/core (Nemotron-H)
    mixer = d.component == "total" or d.component.startswith("mamba2/conv+scan")
    if w is None or d.figure != "forward" or not mixer:
        return None
    blocks = mamba2_blocks(d.spec.block_pattern, d.spec.n_layers)
    if not blocks:
        return None
    z = d.spec.sizes("mamba2")
    K, s, b, C = z.conv_kernel, w.seq_len, w.batch_size, z.conv_channels
    if s >= K or d.excess != blocks * 2 * b * C * K * (K - s):
        return None
    return (f"seq_len {s} < conv_kernel {K}: with a cache transformers pads each conv's input to {K} positions and "
            f"convolves {2 * K - 1} per channel, tfcalc a train step's {s + K - 1}: 2 * b * C * K * (K - s) = "
            f"{d.excess // blocks:,} more in each of {blocks} Mamba2 blocks")


register(Family("mamba2", DEFAULTS, TYPES, mamba2, COMPONENTS, known=padded_conv))
