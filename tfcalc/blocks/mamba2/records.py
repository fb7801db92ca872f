"""`SSDScan`: the record of Mamba2's state-space scan (SSD), as transformers' pure-torch path runs it
(modeling_mamba2.mamba2_chunk_scan over a sequence, mamba2_selective_state_update for one token after a state).

Shapes: b sequences, s new positions each, h heads of p channels (d_inner = h p), a state of n per head channel,
g groups of B and C (each shared by h / g heads), chunks of Q positions: the chunked form pads the sequence to
c = ceil(s / Q) chunks. FlopCounterMode counts each einsum as the bmm torch runs it (2 FLOPs per multiply-add):

    G       = einsum(bclhn,bcshn->bclsh)   C B^T within a chunk        2 b c h Q Q n
    Y_diag  = einsum(bclsh,bcshp->bclhp)   (G * L) x                   2 b c h Q Q p
    states  = einsum(bclhn,bclhp->bchpn)   each chunk's own state      2 b c h Q p n
    chunks  = einsum(bzch,bzhpn->bchpn)    the inter-chunk recurrence  2 b h (c + 1)^2 p n
    Y_off   = einsum(bclhn,bchpn->bclhp)   C times the chunk's state   2 b c h Q p n

torch's einsum runs a contraction over a dimension of size 1 as a multiply, no bmm: with n = 1 (or Q = 1) the
terms contracted over n (over Q) count 0, as FlopCounterMode sees them.

One token after a state (decode): state = state * exp(dt A) + dt B x, then y = state @ C as a bmm
[b h, p, n] @ [b h, n, 1]: 2 b h p n. No file here imports torch.

Backward: 2 x forward (no `backward_extra`): both operands of every einsum need gradients, the zero initial state
included (concatenated to the chunk states), and the unread final state is a slice of the recurrence's output, so
autograd runs each bmm's two gradients in full (exact against transformers' Mamba2 and Nemotron-H, eager).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...arch.ops import Parallel, Record, _ceil

# Non-matmul work per element, an estimate stated once (reported apart, never in forward):
DISCRETIZE = 4  # dt + dt_bias, softplus, clamp (per head and position); x * dt, A * dt
SEGSUM = 4  # segment_sum's cumsum and masking, then exp (per chunk's Q x Q pair and head)
PER_OUTPUT = 4  # G * L, B * decay, C·state * decay, Y_diag + Y_off, + D x (per position's head channel)


@dataclass(frozen=True, slots=True)
class SSDScan(Record):
    """Mamba2's scan over b sequences of s new positions: h heads of p channels, a state of n per channel, g groups
    of B and C, chunks of `chunk` positions. `recurrent`: one token after a carried state (the decode step's
    recurrent form); else the chunked form over the padded sequence. `carried`: an inference step keeps the state
    [h, p, n] per sequence for the next (0 elements in training). Its parameters are A_log, D and dt_bias, one
    per head. Tensor parallelism splits the heads (the projections around it are column- and row-parallel)."""

    component: str
    b: int
    s: int
    heads: int
    head_dim: int
    d_state: int
    groups: int
    chunk: int
    recurrent: bool = False
    carried: bool = False
    sublayer: str = ""

    role = "scan"
    state_bytes = 4  # the SSM state is fp32 (transformers' cache, Nemotron-H's mamba_ssm_cache_dtype "float32")

    @property
    def chunks(self) -> int:
        """c = ceil(s / Q): transformers pads the sequence with zeros to a whole number of chunks."""
        return _ceil(self.s, self.chunk)

    def flops(self, heads: int) -> int:
        """The matmul FLOPs of the step over `heads` heads, as the eager path computes them (padded chunks)."""
        b, s, p, n, Q, c = self.b, self.s, self.head_dim, self.d_state, self.chunk, self.chunks
        if not s:
            return 0
        if self.recurrent:
            return 2 * b * heads * p * n * s  # [b h, p, n] @ [b h, n, 1] per token
        # torch's einsum multiplies (no bmm, no FLOPs counted) where the contracted dimension has size 1
        over_n, over_Q = int(n > 1), int(Q > 1)
        return (over_n * 2 * b * c * heads * Q * Q * n  # G = C B^T: [Q, n] @ [n, Q] per chunk and head
                + over_Q * 2 * b * c * heads * Q * Q * p  # Y_diag = (G * L) x: [Q, Q] @ [Q, p]
                + over_Q * 2 * b * c * heads * Q * p * n  # states = x^T (B * decay): [p, Q] @ [Q, n]
                + 2 * b * heads * (c + 1) ** 2 * p * n  # new_states: [c + 1, c + 1] @ [c + 1, p n]
                + over_n * 2 * b * c * heads * Q * p * n)  # Y_off = C state: [Q, n] @ [n, p]

    def useful(self) -> int:
        """The chunked form's FLOPs without eager's padding (the sequence as if it were s / Q chunks exactly), for
        the unpadded figure beside the padded one: a fractional last chunk computes only its own rows and columns."""
        b, s, h, p, n, Q = self.b, self.s, self.heads, self.head_dim, self.d_state, self.chunk
        if not s or self.recurrent:
            return self.flops(h)
        full, rest = divmod(s, Q)
        pairs = full * Q * Q + rest * rest  # (l, s) pairs of the intra-chunk products
        c = full + (1 if rest else 0)
        return 2 * b * h * (pairs * (n + p) + 2 * s * p * n + (c + 1) ** 2 * p * n)

    # ---- counting
    def params(self) -> int:
        return 3 * self.heads  # A_log [h], D [h], dt_bias [h]

    def parameters(self) -> dict[str, int]:
        return {self.component: self.params()}

    def inactive_params(self) -> int:
        return 0

    def matrix_params(self, tp: int = 1) -> int:
        return 0  # vectors, not a linear layer's matrix

    def forward(self) -> dict[str, int]:
        return {self.component: self.flops(self.heads)}

    def masked(self, windows: bool) -> dict[str, int]:
        return {}  # the chunks' products are what the eager path computes; no mask is applied by skipping pairs

    def non_matmul(self) -> dict[str, int]:
        b, s, h, p, n = self.b, self.s, self.heads, self.head_dim, self.d_state
        if not s:
            return {}
        if self.recurrent:  # exp(dt A), dt B x, state * dA + dBx, + D x
            return {"mamba2/scan": b * s * h * (DISCRETIZE + 4 * p * n + 2 * p)}
        padded, Q = self.chunks * self.chunk, self.chunk
        return {"mamba2/scan": b * h * (padded * DISCRETIZE + self.chunks * Q * Q * SEGSUM
                                        + padded * (p + n) * PER_OUTPUT)}

    def names(self) -> list[str]:
        return [self.component]

    # ---- inference
    def cache(self, tp: int = 1) -> dict[str, int]:
        return {}

    def cache_per_token(self, tp: int = 1) -> int:
        return 0

    def state(self, tp: int = 1) -> dict[str, int]:
        """[b, h / tp, p, n]: the SSM state per sequence, whatever the context."""
        if not self.carried:
            return {}
        return {self.component: self.b * _ceil(self.heads, tp) * self.head_dim * self.d_state}

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        if not self.s:
            return None
        h = _ceil(self.heads, tp)
        g = _ceil(self.groups, tp)
        t, p, n = self.b * self.s, self.head_dim, self.d_state
        # x, dt and the output per head; B and C per group; A_log, D, dt_bias; the state read and written
        moved = (t * h * (2 * p + 1) + 2 * t * g * n + 3 * h) * act
        if self.recurrent or self.carried:
            moved += 2 * self.b * h * p * n * self.state_bytes  # read and written in fp32
        return self.flops(h), moved

    def collective(self, act: int, tp: int) -> tuple[str, int, str] | None:
        return None

    # ---- training
    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        return [_ceil(self.heads, tp)] * 3

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        """What the scan keeps of its own for backward, as the fused kernel (mamba_chunk_scan_combined) and the
        reference model (the chunked scan under torch.utils.checkpoint) do: its inputs, recomputing the rest. x, B
        and C are the conv's silu output (kept by that record); dt [b, s, h] is a slice of in_proj's output, kept
        here. The same under every recompute mode (`selective` recomputes attention cores only). Split by heads
        under tensor parallelism."""
        if self.recurrent:  # a training step runs the chunked form over whole sequences
            return self._missing("saved (the recurrent form is an inference step's; a train step is chunked)")
        return {"dt": par.part(self.b * self.s * self.heads * a, par.tp)} if self.s else {}

    def gemm(self) -> tuple[int, int, int] | None:
        return None  # batched products of activations: no weight GEMM

    def scores(self) -> int:
        return 0

    def transient(self, par: Parallel) -> int:
        """In backward the checkpointed scan runs its eager forward again and keeps its fp32 intermediates (x, B
        and C per head, L, G and G*L per chunk, Y_diag, Y_off, the chunk states) while their gradients flow: an
        estimate fitted to MemTracker's peak over 12 shapes (within 3% of the peak; docs/formulas.md):
        4 bytes x b x h x (10 P p + 7 P n + c Q^2 + 3 c p n), P = c Q the padded positions."""
        if self.recurrent or not self.s:
            return 0
        c, Q, p, n = self.chunks, self.chunk, self.head_dim, self.d_state
        padded = c * Q
        return par.part(4 * self.b * self.heads * (10 * padded * p + 7 * padded * n + c * Q * Q + 3 * c * p * n),
                        par.tp)

    # ---- fine-tuning with adapters (frozen A_log, D, dt_bias)
    def frozen_backward(self, grad: bool = True) -> int:
        """When a gradient flows (in_proj makes x, B, C and dt alike, so all or none need one): every product of the
        chunked scan has operands made of them, and the frozen A_log, D and dt_bias add elementwise gradients only:
        the full training figure, 2 x forward + backward_extra; nothing without one."""
        return 2 * sum(self.forward().values()) + self.backward_extra() if grad else 0

    def saved_frozen(self, a: int, recompute: str, par: Parallel, grad: bool) -> dict[str, int]:
        return self.saved(a, recompute, par) if grad else {}
