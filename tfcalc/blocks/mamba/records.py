"""`SelectiveScan`: the record of Mamba's (v1) selective scan, as transformers' pure-torch path runs it
(modeling_mamba.mamba_selective_scan over a sequence, mamba_selective_state_update for one token after a state).

Shapes: b sequences, s new positions each, d_inner channels, a state of n per channel. The sequential form steps
through the sequence one token at a time:

    state = exp(A dt_i) * state + dt_i B_i x_i         # elementwise, [b, d_inner, n]
    y_i   = state @ C_i                                 # a bmm [b, d_inner, n] @ [b, n, 1]: 2 b d_inner n

so FlopCounterMode counts 2 b s d_inner n over the sequence, and 2 b d_inner n for one token after a state (the
recurrent form's one bmm): the same figure either way (a size-1 contraction is still a bmm, counted as such). The
prefill after a cache runs the sequential form from a zero state, as transformers does. No file here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...arch.ops import STAT_BYTES, Parallel, Record, _ceil

# Non-matmul work, an estimate stated once (reported apart, never in forward):
PER_CHANNEL = 6  # dt + dt_bias, softplus (per channel and position); + D x, the add, the stack
PER_STATE = 6  # A * dt, exp, dt * B, * x, state * dA, + dBx (per channel, state entry and position)
SCAN_CHUNK = 2048  # mamba_ssm's selective scan keeps its state at the end of each chunk of 2048 positions


@dataclass(frozen=True, slots=True)
class SelectiveScan(Record):
    """Mamba's selective scan over b sequences of s new positions: `channels` (d_inner) channels, a state of
    `d_state` per channel. `carried`: an inference step keeps the state [d_inner, n] per sequence for the next (0
    elements in training). Its parameters are A_log [d_inner, n] and D [d_inner]. Tensor parallelism splits the
    channels (in_proj and dt_proj are column-parallel, x_proj and out_proj row-parallel)."""

    component: str
    b: int
    s: int
    channels: int
    d_state: int
    carried: bool = False
    sublayer: str = ""

    role = "scan"
    state_bytes = 4  # the SSM state is fp32: exp(A dt) and dt B x are fp32 (A_log.float(), dt_proj.bias.float())

    def flops(self, channels: int) -> int:
        """2 b s channels n: one [b, channels, n] @ [b, n, 1] bmm per token."""
        return 2 * self.b * self.s * channels * self.d_state

    def useful(self) -> int:
        """Nothing is padded: the figure of a fused selective-scan kernel's matmul work too."""
        return self.flops(self.channels)

    # ---- counting
    def params(self) -> int:
        return self.channels * self.d_state + self.channels  # A_log [d_inner, n], D [d_inner]

    def parameters(self) -> dict[str, int]:
        return {self.component: self.params()}

    def inactive_params(self) -> int:
        return 0

    def matrix_params(self, tp: int = 1) -> int:
        return 0  # A_log and D: not a linear layer's matrix (weight-only schemes leave them alone)

    def forward(self) -> dict[str, int]:
        return {self.component: self.flops(self.channels)}

    def masked(self, windows: bool) -> dict[str, int]:
        return {}  # no mask: every step is computed

    def non_matmul(self) -> dict[str, int]:
        t = self.b * self.s
        return {"mamba/scan": t * self.channels * (PER_CHANNEL + PER_STATE * self.d_state)} if t else {}

    def names(self) -> list[str]:
        return [self.component]

    # ---- inference
    def cache(self, tp: int = 1) -> dict[str, int]:
        return {}

    def cache_per_token(self, tp: int = 1) -> int:
        return 0

    def state(self, tp: int = 1) -> dict[str, int]:
        """[b, d_inner / tp, n]: the SSM state per sequence, whatever the context."""
        if not self.carried:
            return {}
        return {self.component: self.b * _ceil(self.channels, tp) * self.d_state}

    def cost(self, weight_bytes, act: int, kv, tp: int) -> tuple[int, int] | None:
        if not self.s:
            return None
        c, n, t = _ceil(self.channels, tp), self.d_state, self.b * self.s
        # x, dt and y per channel; B and C; A_log and D; the state read and written (fp32)
        moved = (3 * t * c + 2 * t * n + c * n + c) * act
        if self.carried:
            moved += 2 * self.b * c * n * self.state_bytes
        return self.flops(c), moved

    def collective(self, act: int, tp: int) -> tuple[str, int, str] | None:
        return None

    # ---- training
    def tensors(self, tp: int, ep: int, copy_tied: bool) -> list[int]:
        c = _ceil(self.channels, tp)
        return [c * self.d_state, c]

    def saved(self, a: int, recompute: str, par: Parallel) -> dict[str, int]:
        """What the scan keeps for backward, as mamba_ssm's fused selective_scan_fn with z keeps it (the kernel
        transformers' Mamba and Jamba run when mamba_ssm is installed; the reference model keeps the same,
        `reference._SelectiveScanFunction`), not the eager loop's state per step: delta [b, d, s] (dt_proj's
        output), B and C copied to [b, n, s], z copied to contiguous [b, d, s] (a strided half of in_proj's output),
        the output before the gate [b, d, s] and, with more than one sequence, its input u [b, d, s] (the conv's
        activation: x_proj reads it transposed, [b, s, d], which torch's linear copies to rows of its own when b > 1
        and keeps as a view of u when b = 1), in the activations' dtype; the fp32
        state and decay at the end of each chunk of 2048 positions x [b, d, ceil(s / 2048), 2 n]; A = -exp(A_log)
        and exp(A_log) [d, n], fp32. The same under every recompute mode; split by channels under tensor
        parallelism (B and C, made by the row-parallel x_proj, whole on every GPU)."""
        if not self.s:
            return {}
        b, s, d, n = self.b, self.s, self.channels, self.d_state
        t = b * s
        copies = 4 if b > 1 else 3  # u apart from x_proj's copy (b > 1); delta, z, out
        return {"u, delta, z, out": par.part(copies * t * d * a, par.tp), "B, C": par.part(2 * t * n * a, par.whole),
                "states": par.part(b * d * _ceil(s, SCAN_CHUNK) * 2 * n * STAT_BYTES, par.tp),
                "A": 2 * _ceil(d, par.tp) * n * STAT_BYTES}

    def transient(self, par: Parallel) -> int:
        """In backward the fused form runs the eager scan again and holds its fp32 [b, d, s, n] intermediates (dA,
        dB x, the states and what autograd keeps of each) while their gradients flow (the reference model; the fused
        kernel recomputes in SRAM): an estimate fitted to MemTracker's peak over 5 shapes (within 3% of the peak),
        4 bytes x b s d n x 8 (docs/formulas.md)."""
        if not self.s:
            return 0
        return par.part(STAT_BYTES * self.b * self.s * self.channels * self.d_state * 8, par.tp)

    def frozen_backward(self, grad: bool = True) -> int:
        """With A_log and D frozen: each token's y_i = state_i @ C_i still needs both gradients when one flows (the
        state carries x, dt and B, and C is x_proj's, all downstream of in_proj or x_proj, the first linears whose
        adapters run: dt_proj's never does): 2 x forward, as in full training; nothing without one."""
        return 2 * self.flops(self.channels) if grad else 0

    def saved_frozen(self, a: int, recompute: str, par: Parallel, grad: bool) -> dict[str, int]:
        # a LoRA step of a Mamba model is not yet held to MemTracker (the reference's dt_proj with an adapter does
        # not run; in_proj's adapters left the plan 2 KB under on a tiny model): refused by name
        return self._missing("saved_frozen (a LoRA step's memory of the selective scan is not yet held to "
                             "MemTracker)")

    def gemm(self) -> tuple[int, int, int] | None:
        return None  # batched products of activations: no weight GEMM

    def scores(self) -> int:
        return 0
