"""The gated delta rule's record (`DeltaRule`): what transformers' torch_chunk_gated_delta_rule (train, prefill)
and torch_recurrent_gated_delta_rule (a one-token decode step after a cache) compute, with the parameters the
gated DeltaNet keeps beside them (A_log and dt_bias, one each per value head)."""

from __future__ import annotations

from dataclasses import dataclass

from ...arch.ops import STAT_BYTES, Parallel, Record
from ..conv.records import Conv

RECURRENT_PER_STATE = 7  # per state element of a decode step: decay, k.S (mul, add), S + k delta (mul, add), q.S


def _ceil(a: int, n: int) -> int:
    return -(-a // n)


@dataclass(frozen=True, slots=True)
class DeltaRule(Record):
    """The gated delta rule over `b` sequences of `s` new tokens, `value_heads` heads of a [key_head_dim,
    value_head_dim] state each (queries and keys from `key_heads` heads, each repeated value_heads / key_heads times).

    Chunked (`recurrent` False): the sequence is padded to P = ceil(s / chunk) * chunk positions, n = P / chunk
    chunks of C = chunk; per head, as batched matmuls (bmm) FlopCounterMode counts:
      k_beta @ k^T and q @ k^T, [n, C, dk] @ [n, dk, C]:   2 * 2 P C dk
      per chunk, k_cumdecay @ S and q @ S, [C, dk] @ [dk, dv]; k^T @ v_new, [dk, C] @ [C, dv]:  3 * 2 P dk dv
      per chunk, intra-chunk attention @ v_new, [C, C] @ [C, dv]:   2 P C dv
    and two unit-lower-triangular solves per chunk (linalg_solve_triangular: FlopCounterMode has no formula for it,
    it counts 0), [C, C] \\ [C, dv] and [C, C] \\ [C, dk]: C (C - 1) (dk + dv) FLOPs per chunk and head, reported apart
    in non-matmul as "gated_deltanet/solve_triangular".
    Recurrent (`recurrent` True, one token after a cache): elementwise products and sums only (no matmul FlopCounterMode
    counts): about 7 FLOPs per state element, reported in non-matmul as "gated_deltanet/recurrence".
    `carried`: an inference step keeps the recurrent state [value_heads, key_head_dim, value_head_dim] per sequence.
    Tensor parallelism splits the heads."""

    component: str
    b: int
    s: int
    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    chunk: int = 64
    recurrent: bool = False
    carried: bool = False
    sublayer: str = ""

    role = "delta_rule"
    state_bytes = 4  # the recurrent state is fp32: transformers' torch path runs the rule in float32

    @property
    def padded(self) -> int:
        """P: the positions per sequence the chunked form computes (s rounded up to a multiple of the chunk)."""
        return _ceil(self.s, self.chunk) * self.chunk

    def _chunked(self, heads: int, positions: int) -> int:
        C, dk, dv = self.chunk, self.key_head_dim, self.value_head_dim
        # q k^T and k_beta k^T; k_cumdecay S, q S, k^T v_new; intra-chunk attention @ v_new
        return 2 * self.b * heads * positions * (2 * C * dk + 3 * dk * dv + C * dv)

    def _solves(self, heads: int) -> int:
        C = self.chunk
        # per chunk and head: [C, C] unit lower triangular \ [C, dv] and \ [C, dk], C (C - 1) / 2 multiply-adds a column
        return self.b * heads * (self.padded // C) * C * (C - 1) * (self.key_head_dim + self.value_head_dim)

    def params(self) -> int:
        return 2 * self.value_heads  # A_log [Hv], dt_bias [Hv]

    def parameters(self) -> dict[str, int]:
        return {self.component: self.params()}

    def inactive_params(self) -> int:
        return 0

    def matrix_params(self, tp: int = 1) -> int:
        return 0

    def forward(self) -> dict[str, int]:
        if not self.s or self.recurrent:
            return {}
        return {self.component: self._chunked(self.value_heads, self.padded)}

    def backward_extra(self) -> int:
        """The chunked rule's backward beyond 2 x its forward, as autograd runs torch_chunk_gated_delta_rule: each
        triangular solve X = A \\ B (FlopCounterMode counts the solves 0) adds, for A's gradient, the matmul
        -(A^-T dX) X^T, [C, d] @ [d, C]: 2 P C (dk + dv) per head; and two products need fewer gradients than their
        forward's 2 x: the first chunk's k_cumdecay @ S and q @ S read the zero initial state, which needs none (2 x
        2 C dk dv less), and the last chunk's state update k^T @ v_new is never read (its 4 C dk dv not run):
        b H (2 P C (dk + dv) - 8 C dk dv) (docs/formulas.md). The recurrent form (inference only) has none."""
        if not self.s or self.recurrent:
            return 0
        C, dk, dv = self.chunk, self.key_head_dim, self.value_head_dim
        return self.b * self.value_heads * (2 * self.padded * C * (dk + dv) - 8 * C * dk * dv)

    def useful(self) -> int:
        """The chunked matmuls over the s positions only (a kernel that does not pad the last chunk)."""
        return 0 if self.recurrent else self._chunked(self.value_heads, self.s)

    def masked(self, windows: bool) -> dict[str, int]:
        return {}

    def non_matmul(self) -> dict[str, int]:
        if not self.s:
            return {}
        if self.recurrent:
            return {"gated_deltanet/recurrence": self.b * self.s * self.value_heads * self.key_head_dim
                    * self.value_head_dim * RECURRENT_PER_STATE}
        return {"gated_deltanet/solve_triangular": self._solves(self.value_heads)}

    def names(self) -> list[str]:
        return [self.component]

    def cache(self, tp: int = 1) -> dict[str, int]:
        return {}

    def cache_per_token(self, tp: int = 1) -> int:
        return 0

    def state(self, tp: int = 1) -> dict[str, int]:
        """[b, value_heads / tp, key_head_dim, value_head_dim]: the recurrent state, per sequence."""
        if not self.carried:
            return {}
        return {self.component: self.b * _ceil(self.value_heads, tp) * self.key_head_dim * self.value_head_dim}

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        if not self.s:
            return None
        h, hk = _ceil(self.value_heads, tp), _ceil(self.key_heads, tp)
        dk, dv, t = self.key_head_dim, self.value_head_dim, self.b * self.s
        if self.recurrent:
            flops = 2 * t * h * 3 * dk * dv  # k.S, the rank-one update, q.S
        else:  # a kernel's: the s positions, the solves
            flops = self._chunked(h, self.s) + self._solves(h)
        # q, k (key heads), v, g and beta in, the output out; the state read and written back
        moved = (t * (2 * hk * dk + 2 * h * dv + 2 * h)) * act
        if self.carried:
            moved += 2 * self.b * h * dk * dv * self.state_bytes  # read and written in fp32
        return flops, moved

    def collective(self, act: int, tp: int) -> tuple[str, int, str] | None:
        return None

    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        h = _ceil(self.value_heads, tp)
        return [h, h]  # A_log, dt_bias: split with the heads

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        """What the rule keeps for backward, as FLA's fused chunk_gated_delta_rule keeps it (the kernel transformers
        runs when fla is installed; the reference model keeps the same, `reference._ChunkRuleFunction`): the
        l2-normalised q and k [b, s, Hv, dk] (the heads repeated), v made contiguous [b, s, Hv, dv], beta [b, s, Hv]
        (sigmoid's output, which the sigmoid keeps too) and the WY matrix A [b, s, Hv, C], in the activations'
        dtype; in fp32 [b, s, Hv]: q's and k's rstd, g's chunk-local cumsum, and the decay's softplus input and
        output (g = -exp(A_log) softplus(a + dt_bias), eager torch); and -exp(A_log) and exp(A_log) [Hv], fp32.
        Nothing padded. The same under every recompute mode (`selective` recomputes attention cores only); split by
        heads under tensor parallelism (the [Hv] vectors not over context-parallel GPUs)."""
        if self.recurrent:  # a training step runs the chunked form over whole sequences
            return self._missing("saved (the recurrent form is an inference step's; a train step is chunked)")
        if not self.s:
            return {}
        rows = self.b * self.s * self.value_heads  # [b, s, Hv]
        dk, dv, C = self.key_head_dim, self.value_head_dim, self.chunk
        return {"q, k, v": par.part(rows * (2 * dk + dv) * a, par.tp),
                "beta, A": par.part(rows * (1 + C) * a, par.tp),
                "statistics": par.part(rows * 5 * STAT_BYTES, par.tp),
                "decay": 2 * _ceil(self.value_heads, par.tp) * STAT_BYTES}

    def frozen_backward(self, grad: bool = True) -> int:
        """With A_log and dt_bias frozen: the same products as in full training when a gradient flows into q, k and v
        (every matmul of the chunked rule has an operand made of them, both operands when they need one; A_log's
        and dt_bias's gradients are elementwise): 2 x forward + backward_extra; nothing without one."""
        return 2 * sum(self.forward().values()) + self.backward_extra() if grad else 0

    def saved_frozen(self, a: int, recompute: str, par: Parallel, grad: bool) -> dict[str, int]:
        # full training's `saved` less what frozen A_log and dt_bias need is the likely figure, but a LoRA step of a
        # gated DeltaNet model is not yet held to MemTracker (it was off by hundreds of bytes): refused by name
        return self._missing("saved_frozen (a LoRA step's memory of the delta rule is not yet held to MemTracker)")

    def gemm(self) -> tuple[int, int, int] | None:
        return None  # batched matmuls of activations

    def scores(self) -> int:
        return 0

    def transient(self, par: Parallel) -> int:
        """In backward the fused form runs the eager rule again from what it kept and holds its fp32 intermediates
        while their gradients flow (the reference model; FLA's kernel recomputes per chunk in SRAM and keeps far
        less): an estimate fitted to MemTracker's peak over 8 shapes (dk, dv, C from 4 to 64), 4 bytes x b x Hv x P x
        (15 dk + 10 dv + 7 C - 60), P the padded positions (docs/formulas.md)."""
        if self.recurrent or not self.s:
            return 0
        dk, dv, C = self.key_head_dim, self.value_head_dim, self.chunk
        per_position = max(15 * dk + 10 * dv + 7 * C - 60, 0)
        return par.part(STAT_BYTES * self.b * self.value_heads * self.padded * per_position, par.tp)


@dataclass(frozen=True, slots=True)
class DeltaNetConv(Conv):
    """The gated DeltaNet's convolution over q, k and v: LFM2's `Conv` in every figure but what it keeps for
    backward, which differs (no gates around it)."""

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        """The padded output [b, C, outputs] the silu after it reads a slice of (and keeps whole). Its input
        [b, C, s], a view of in_proj_qkvz's output, is the silu record's figure (the same component: the silu
        keeps nothing else, its output being copied by the rule's fused form); z, the rest of that output, the
        gate's. Split by channels under tensor parallelism."""
        return {"conv": par.part(self.b * self.outputs * self.channels * a, par.tp)} if self.s else {}

    def saved_frozen(self, a: int, recompute: str, par: Parallel, grad: bool) -> dict[str, int]:
        return self.saved(a, recompute, par) if grad else {}
