"""DeepSeek-V3.2's sparse-attention indexer (DSA) beside multi-head latent attention, as transformers'
DeepseekV32Indexer builds it and its eager path runs it (under no_grad):

    q = wq_b(q_latent)                      # [T, q_lora_rank] -> [T, H_i * d_i]   (the attention's q_a_norm output)
    k = k_norm(wk(x))                       # [T, D] -> [T, d_i], a LayerNorm (weight and bias); cached per token
    w = weights_proj(x)                     # [T, D] -> [T, H_i]
    s = w @ relu(q @ k^T)                   # per sequence: [N, H_i, d_i] @ [d_i, keys], then [N, 1, H_i] @ [N, H_i, keys]
    topk(s + causal mask, index_topk)       # the keys attention keeps; eager attention masks the others

`IndexerScores` is the record of the scores: every (query, key) pair, as the eager model computes them; the causal
figure counts the pairs the causal mask keeps. Attention itself is counted as it runs: its eager core scores every
pair and masks the keys the indexer left out (docs/formulas.md gives the sparse figure beside it). The indexer keeps
nothing for backward (it runs under no_grad) and adds its key [d_i] per token to the inference cache."""

from __future__ import annotations

from dataclasses import dataclass

from ...arch.builders import Ctx
from ...arch.ops import Mask, Matmul, Norm, Op, Parallel, Record, kept_up_to, matmul

RELU_WEIGHT_FLOPS = 2  # per score: relu, the scale; the head-weighted sum is the second matmul


@dataclass(frozen=True, slots=True)
class IndexerScores(Record):
    """scores = w [b, s_q, 1, h] @ relu(q [b, s_q, h, d] @ k^T [b, 1, d, s_k]): one key head of `d` channels per
    token, `h` query heads weighted and summed. `cached`: an inference step keeps the keys [b, s_k, d]."""

    component: str
    b: int
    h: int
    s_q: int
    s_k: int
    d: int
    mask: Mask
    cached: bool = False
    sublayer: str = ""

    role = "indexer"

    def pairs(self) -> int:
        """(query, key) pairs the causal mask keeps (query i at key position s_k - s_q + i)."""
        if not self.mask.causal:
            return self.s_q * self.s_k
        return kept_up_to(self.s_k, None) - kept_up_to(self.s_k - self.s_q, None)

    def params(self) -> int:
        return 0

    def parameters(self) -> dict[str, int]:
        return {}

    def inactive_params(self) -> int:
        return 0

    def matrix_params(self, tp: int = 1) -> int:
        return 0

    def forward(self) -> dict[str, int]:
        # q @ k^T: b * h * [s_q, d] @ [d, s_k]; the weighted sum over heads: b * s_q * [1, h] @ [h, s_k]
        return {self.component: self.b * self.h * matmul(self.s_q, self.d, self.s_k)
                + self.b * self.s_q * matmul(1, self.h, self.s_k)}

    def masked(self, windows: bool) -> dict[str, int]:
        kept = self.pairs()
        return {self.component: self.b * self.h * matmul(kept, self.d, 1) + self.b * matmul(kept, self.h, 1)}

    def non_matmul(self) -> dict[str, int]:
        # relu and the scale per head score, the mask add and the top-k over each query's keys
        return {"attention/indexer": self.b * self.s_q * self.s_k * (RELU_WEIGHT_FLOPS * self.h + 2)}

    def names(self) -> list[str]:
        return [self.component]

    def cache(self, tp: int = 1) -> dict[str, int]:
        """Its keys [b, s_k, d] (not split by tensor parallelism: one key head)."""
        return {self.component: self.b * self.s_k * self.d} if self.cached else {}

    def cache_per_token(self, tp: int = 1) -> int:
        return self.d if self.cached else 0

    def state(self, tp: int = 1) -> dict[str, int]:
        return {}

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        if not self.s_q:
            return None
        kept = self.pairs()
        flops = self.b * self.h * matmul(kept, self.d, 1) + self.b * matmul(kept, self.h, 1)
        moved = self.b * self.s_q * self.h * (self.d + 1) * act + int(self.b * self.s_k * self.d * kv)  # q, w; keys
        return flops, moved

    def collective(self, act: int, tp: int) -> tuple[str, int, str] | None:
        return None

    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        return []

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        # no_grad: the scores keep nothing for a backward. What it gives attention, the mask of the picked keys
        # [b, 1, s_q, s_k], is an input of the core: kept when the core is recomputed (selective), as a checkpoint
        # keeps its inputs
        if recompute != "selective":
            return {}
        return {"mask": par.part(self.b * self.s_q * self.s_k * a, par.whole)}

    def gemm(self) -> tuple[int, int, int] | None:
        return None  # batched matmuls of activations: no weights

    def scores(self) -> int:
        return 0

    def transient(self, par: Parallel) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class IndexerNorm(Norm):
    """The indexer's key norm: a LayerNorm run under no_grad, so it keeps neither its input nor its statistics."""

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        return {}


def indexer_ops(ctx: Ctx, cached: bool) -> list[Op]:
    """The indexer's projections, its key norm and its scores, between q_a_norm and the attention core. Its inputs
    are ones attention already keeps (x, the query latent) and it runs under no_grad: its records keep nothing."""
    spec, t, D = ctx.spec, ctx.t, ctx.spec.d_model
    h, d = spec.index_n_heads, spec.index_head_dim
    return [
        # the query latent [T, r_q] @ [r_q, h*d]; x [T, D] @ [D, d] and its LayerNorm; x [T, D] @ [D, h]
        Matmul(ctx.name("attention/indexer_q"), t, spec.q_lora_rank, h * d, shares_input=True),
        Matmul(ctx.name("attention/indexer_k"), t, D, d, shares_input=True),
        IndexerNorm(ctx.name("attention/indexer_k_norm"), "layernorm", t, d, shares_input=True),
        Matmul(ctx.name("attention/indexer_weights"), t, D, h, shares_input=True),
        IndexerScores(ctx.name("attention/indexer_scores"), ctx.b, h, ctx.s, ctx.keys, d, Mask(ctx.stack.causal),
                      cached),
    ]
