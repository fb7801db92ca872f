"""A parallel hybrid mixer (`parallel_hybrid`; Falcon-H1's): attention and a Mamba2 mixer side by side on one normed
input, their outputs summed into the residual stream:

    h = norm(x)
    x = x + mamba2(h) + attention(h)

One norm (`parallel_hybrid/norm`) and one residual add for both branches, and the add of the two branches. Each
branch is its kind's own work (`tfcalc.blocks.mamba2.mixer`, `tfcalc.blocks.attention.mixer`), under its own
component names (`mamba2/in_proj`, `attention/qkv`, ...) and sublayer (so its records keep their family), with the
sizes of `kinds.mamba2` and the spec's attention fields. The attention's projection reads the same normed input the
Mamba2 in_proj reads: kept once. It has no sizes of its own (`parts`: its sizes are its parts')."""

from __future__ import annotations

from dataclasses import replace

from ...arch.builders import RESIDUAL_ADD, BlockKind, Ctx, register, sublayer
from ...arch.ops import Elementwise, Op
from .. import attention as _attention
from .. import mamba2 as _mamba2

PARTS = ("mamba2", "attention")


def parallel_hybrid(ctx: Ctx) -> list[Op]:
    """norm, the Mamba2 mixer, the attention (its first projection on the same normed input), the branches' sum,
    the residual add."""
    mamba = [replace(op, sublayer="mamba2") for op in _mamba2.mixer(ctx)]
    first, *rest = _attention.mixer(ctx)
    attention = [replace(first, sublayer="attention", shares_input=True),
                 *(replace(op, sublayer="attention") for op in rest)]
    # mamba2(h) + attention(h): [t, D]
    both = Elementwise(ctx.name("parallel_hybrid/sum"), "residual", ctx.t * ctx.spec.d_model, RESIDUAL_ADD)
    return sublayer(ctx, "parallel_hybrid", [*mamba, *attention, both])


def _kept_once(ctx: Ctx, recompute: str, attention: str = "fused") -> list[tuple[str, int, int]]:
    return [kept for name in PARTS if (f := _kind(name).kept_once) for kept in f(ctx, recompute, attention)]


def _kept_per_stage(ctx: Ctx) -> list[tuple[str, int, int]]:
    return [kept for name in PARTS if (f := _kind(name).kept_per_stage) for kept in f(ctx)]


def _kind(name: str) -> BlockKind:
    from ...arch.builders import KINDS

    return KINDS[name]


register(BlockKind("parallel_hybrid", parallel_hybrid, family="mixer", norm="parallel_hybrid", in_pattern=True,
                   reference=f"{__name__}.reference", parts=PARTS, kept_once=_kept_once,
                   kept_per_stage=_kept_per_stage))
