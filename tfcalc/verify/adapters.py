"""LoRA adapters on the reference model, for measuring a fine-tuning step (`tfcalc check --memory --lora-rank R`).

PEFT's `get_peft_model` would adapt the reference model's fused q/k/v projection as one linear (one A for the three),
where tfcalc counts three (q_proj, k_proj, v_proj, as Llama, Qwen and Gemma implement them). So the adapters are put
on here, each reference linear that an adapted Matmul record stands for wrapped in `LoraLinear`, whose forward is
PEFT's `lora.Linear.forward` (peft 0.21, lora_dropout 0: an Identity): `result = base(x); result = result +
lora_B(lora_A(x)) * scaling`, once per part of a fused projection (q, k, v), the parts' updates added to their slices
of the base output. The adapters are made in the model's dtype (PEFT's `autocast_adapter_dtype=False`: a bf16 model
gets bf16 adapters, the recipe's fp32 masters beside them); every other parameter is frozen (requires_grad False),
as PEFT leaves it. Which linears are adapted, and their parts, come from the same records the plan reads (no second
list): the module's component (`component_of_module`) names its Matmul record, and the record its `adapted()`
linears.

Updates PEFT folds into a weight (its ParamWrapper: routed experts, routers) and DoRA are not reproduced here: such a
model is refused by name.
"""

from __future__ import annotations

import torch
from torch import nn

from ..arch import Workload, build
from ..errors import TfcalcError
from ..plan.adapters import Adapters, adapt
from ..spec import ModelSpec
from .components import component_of_module

LORA_ALPHA = 8  # PEFT's default lora_alpha: scaling = alpha / r (a constant multiply: nothing kept for it)


class LoraLinear(nn.Module):
    """A frozen linear and its adapters, one per adapted part of its outputs (`parts`: (width, rank or 0))."""

    def __init__(self, base: nn.Linear, parts: list[tuple[int, int]], scaling: float):
        super().__init__()
        self.base = base
        self.sizes = [width for width, _ in parts]
        self.ranks = [rank for _, rank in parts]
        weight = base.weight
        kw = {"device": weight.device, "dtype": weight.dtype, "bias": False}
        self.lora_A = nn.ModuleList(nn.Linear(base.in_features, r, **kw) for _, r in parts if r)
        self.lora_B = nn.ModuleList(nn.Linear(r, width, **kw) for width, r in parts if r)
        self.scaling = scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base(x)
        if len(self.sizes) == 1:
            return result + self.lora_B[0](self.lora_A[0](x)) * self.scaling
        pieces, adapter = [], 0
        for piece, rank in zip(result.split(self.sizes, dim=-1), self.ranks):
            if rank:
                piece = piece + self.lora_B[adapter](self.lora_A[adapter](x)) * self.scaling
                adapter += 1
            pieces.append(piece)
        return torch.cat(pieces, dim=-1)


def add_adapters(model: nn.Module, spec: ModelSpec, workload: Workload, adapters: Adapters) -> int:
    """Freeze every parameter of the reference model and wrap the linears the adapters target; the number of
    linears wrapped."""
    if adapters.dora:
        raise TfcalcError("dora=True: DoRA's step is not measured on the reference model (PEFT's DoRA forward is not "
                          "reproduced there); measure LoRA")
    records = {}
    for op, _ in adapt(build(spec, workload), adapters):
        if op.lora is not None:
            records.setdefault(op.component, op)
    for p in model.parameters():
        p.requires_grad_(False)
    wrapped = 0
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear):
            continue
        op = records.get(component_of_module(name))
        if op is None:
            continue
        adapted = op.adapted()
        if any(lin.delta for lin in adapted):
            raise TfcalcError(f"lora_targets={adapters.targets!r}: {spec.label}'s {op.component} is adapted as a "
                              "parameter (PEFT's ParamWrapper folds its update into the weight), not reproduced on "
                              "the reference model; measure targets without it (attention)")
        parts = [(lin.out, lin.rank * adapters.rank if lin in adapted else 0) for lin in op.modules()]
        if sum(width for width, _ in parts) != module.out_features:
            raise TfcalcError(f"{name}: {module.out_features} outputs, its record's linears give "
                              f"{sum(width for width, _ in parts)}")
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoraLinear(module, parts, LORA_ALPHA / adapters.rank))
        wrapped += 1
    if not wrapped:
        raise TfcalcError(f"lora_targets={adapters.targets!r}: no linear of the reference model was adapted")
    return wrapped
