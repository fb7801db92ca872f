"""A mixture of experts: a router, each token through top_k routed experts, shared experts every token goes
through and their gate; or (Gemma 4) the experts beside a dense MLP on the same residual stream."""

from __future__ import annotations

from dataclasses import replace

from ...arch.builders import RESIDUAL_ADD, BlockKind, Ctx, norm, register, sublayer
from ...arch.ops import Elementwise, Linear, Matmul, Norm, Op, Table
from ..mlp import d_ff, ffn


def router(E: int) -> tuple[Linear, ...]:
    """transformers 5's router holds its weight [E, D] itself (not an nn.Linear): PEFT's "all-linear" adapts it as a
    parameter, its update folded into the weight (ParamWrapper)."""
    return (Linear("", E, delta=True),)


def moe(ctx: Ctx) -> list[Op]:
    """A mixture of experts: a router, each token through exactly top_k routed experts (an even split is not
    assumed: the rows are all the token-expert pairs), shared experts every token goes through, their gate."""
    spec, t, D = ctx.spec, ctx.t, ctx.spec.d_model
    E, k = spec.n_experts, spec.top_k
    if spec.moe_beside_mlp:
        return _moe_beside_mlp(ctx)
    ops: list[Op] = [Matmul(ctx.name("moe/router"), t, D, E, bias=spec.router_bias, role="router",  # [T, D] @ [D, E]
                            linears=router(E)),
                     # softmax over E router logits, then weighting each of the top_k expert outputs
                     Elementwise(ctx.name("moe/routing"), "routing", t, 5 * E + k * D)]
    L = spec.d_moe_latent
    if L is None:
        # [T*k, D] @ [D, F_e] (x2 when gated), [T*k, F_e] @ [F_e, D]: E experts' weights, k of them per token
        ops += ffn(ctx, ("moe/experts",) * 3, t * k, spec.d_expert, weights=E, active=k)
    else:  # the experts on a latent width L (Nemotron 3): x [T, D] @ [D, L] (the router's x), then
        # [T*k, L] @ [L, F_e], [T*k, F_e] @ [F_e, L], and their sum [T, L] @ [L, D]
        ops += [Matmul(ctx.name("moe/latent_in"), t, D, L, bias=spec.has_mlp_bias, shares_input=True),
                *ffn(ctx, ("moe/experts",) * 3, t * k, spec.d_expert, weights=E, active=k, d_in=L),
                Matmul(ctx.name("moe/latent_out"), t, L, D, bias=spec.has_mlp_bias)]
    if spec.n_shared_experts:
        n = spec.n_shared_experts  # every token through each: [T*n, D] @ [D, F_s], ...
        shared = ffn(ctx, ("moe/shared_experts",) * 3, t * n, spec.d_shared_expert, weights=n)
        shared[0] = replace(shared[0], shares_input=True)  # they read the router's x: kept once
        ops += shared
    if spec.shared_expert_gate:  # x: [T, D] @ W_gate: [D, 1], the router's x
        ops.append(Matmul(ctx.name("moe/shared_gate"), t, D, 1, shares_input=True, role="shared_gate"))
    return sublayer(ctx, "mlp", ops, beside_attention=True)


def _moe_beside_mlp(ctx: Ctx) -> list[Op]:
    """Gemma 4's MoE block (moe_beside_mlp): the dense MLP, normed before and after (mlp/norm, mlp/branch_norm),
    and beside it the experts on the same residual stream x, normed before and after (moe/norm, moe/post_norm); the
    router reads x through an RMS norm without weight times a scale [D] (one RMS norm with that weight:
    moe/router_norm), and each token's top_k weights are times a scale per expert [E] (moe/expert_scale). The two
    outputs are summed, normed (mlp/post_norm) and added to x."""
    spec, t, D = ctx.spec, ctx.t, ctx.spec.d_model
    E, k = spec.n_experts, spec.top_k
    return [
        norm(ctx, "mlp/norm", t),
        *ffn(ctx, ("mlp/up", "mlp/gate", "mlp/down"), t, d_ff(ctx)),
        norm(ctx, "mlp/branch_norm", t),
        Norm(ctx.name("moe/router_norm"), "rmsnorm", t, D, shares_input=True),  # x kept once (mlp/norm's)
        Table(ctx.name("moe/expert_scale"), 1, E, "scale"),  # [E]
        Matmul(ctx.name("moe/router"), t, D, E, bias=spec.router_bias, role="router",  # [T, D] @ [D, E]
               linears=router(E)),
        Elementwise(ctx.name("moe/routing"), "routing", t, 5 * E + k * D + k),  # softmax, weights, expert scales
        replace(norm(ctx, "moe/norm", t), shares_input=True),  # the same x as mlp/norm's
        # [T*k, D] @ [D, F_e] (x2 when gated), [T*k, F_e] @ [F_e, D]: E experts' weights, k of them per token
        *ffn(ctx, ("moe/experts",) * 3, t * k, spec.d_expert, weights=E, active=k),
        norm(ctx, "moe/post_norm", t),
        norm(ctx, "mlp/post_norm", t),
        Elementwise(ctx.name("residual"), "residual", t * D, RESIDUAL_ADD + 1),  # the two branches summed, then x
    ]


register(BlockKind("moe", moe, family="mlp", norm="mlp", in_pattern=True, reference=f"{__name__}.reference",
                   components=(
                       (r"mlp_branch_norm", "mlp/branch_norm"),
                       (r"moe\.(norm|post_norm|router_norm|expert_scale)", r"moe/\1"),
                       (r"moe\.router", "moe/router"),
                       (r"moe\.latent_(in|out)", r"moe/latent_\1"),
                       (r"moe\.experts\.\d+\.(up|gate|down)", "moe/experts"),
                       (r"moe\.shared\.\d+\.(up|gate|down)", "moe/shared_experts"),
                       (r"moe\.shared_gate", "moe/shared_gate"),
                   )))
