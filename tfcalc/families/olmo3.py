"""OLMo 3: OLMo 2's layout (norms on each sublayer's output only, an RMSNorm over all of q and all of k) with local
(sliding-window) and global blocks by layer_types; by default three local blocks then one global, cycled
(Olmo3Config: block i is global when (i + 1) % 4 == 0). The local and global rotary bases change frequencies, not
shapes."""

from __future__ import annotations

from ..hf import decoder_fields, layer_kinds, refuse_if, set_window
from .registry import Family, register


def layer_windows(cfg: dict, fields: dict, notes: list[str], default: list[str]) -> None:
    """Sliding windows in the blocks layer_types marks sliding_attention (a list of num_hidden_layers entries), else
    in the blocks `default` (cycled) marks local; none without a sliding_window."""
    L = fields["n_layers"]
    types = cfg.get("layer_types")
    if types is not None:
        kinds = layer_kinds(cfg, L)
        refuse_if(cfg, "layer_types", "sliding_attention" in types and cfg.get("sliding_window") is None,
                  "sliding_attention blocks with sliding_window=None: transformers has no window for them (its "
                  "cache cannot be built)")
        default = kinds
    else:
        refuse_if(cfg, "sliding_window", cfg.get("sliding_window") is None and "local" in default[:L],
                  "the default layer_types have sliding_attention blocks, for which transformers then has no window "
                  "(its cache cannot be built): give layer_types")
    set_window(cfg, fields, notes, default)


def olmo3(cfg: dict, notes: list[str]) -> dict:
    refuse_if(cfg, "sliding_window", cfg["sliding_window"] is None, "transformers' Olmo3Model builds a "
              "sliding-window mask in every forward and cannot run without a window")
    fields = decoder_fields(cfg, notes) | dict(bias=cfg["attention_bias"], mlp_bias=False, qk_norm="full",
                                               norm_position="output")
    layer_windows(cfg, fields, notes, ["local", "local", "local", "global"])
    return fields


# OLMo 2's defaults, kinds and module names, with a window
register(Family("olmo3", like="olmo2", mapper=olmo3, defaults=dict(sliding_window=4096, layer_types=None),
                types=dict(sliding_window="int?", layer_types="strings?")))
