"""The op records an inventory is made of: shapes and integers, nothing else (no torch, no config objects).

Every figure tfcalc reports is a fold over these records (`tfcalc.counts.folds`):
- `Matmul`: x [m, k] @ W [k, n], with the weight matrices it owns (0 when tied or when W is an activation).
- `AttentionCore`: softmax(q k^T) v for b x h heads, s_q queries against s_k keys, and which pairs the mask keeps.
- `Table`: a lookup table (token, position, token-type or relative-bias embedding): parameters, no matmul.
- `Norm`: a LayerNorm or RMSNorm over `rows` vectors of `width`: parameters and non-matmul work.
- `Elementwise`: activations, gates, residual adds, routing: non-matmul work only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Matmul:
    """x: [m, k] @ W: [k, n]. `weights` matrices of [k, n] (and biases [n]) belong to this op: 1 for a linear,
    E for E routed experts (m is then all the rows sent to any of them), 0 for a tied or activation operand.
    `active`: the weight matrices one token touches (top_k of E); None means all of them.
    `split`: how tensor parallelism (Megatron-LM) splits W: "column" (the n outputs; x is whole on every GPU),
    "row" (the k inputs; x arrives split), "" (not split: every GPU holds all of W).
    `shares_input`: x is an input an earlier op already keeps (a gate beside its up projection, a parallel block's
    MLP beside attention on one normalised x): kept once."""

    component: str
    m: int
    k: int
    n: int
    weights: int = 1
    bias: bool = False
    active: int | None = None
    split: str = ""
    shares_input: bool = False

    @property
    def params_each(self) -> int:
        """One weight matrix and its bias: nn.Linear(k, n) has weight [n, k] and bias [n]."""
        return self.k * self.n + (self.n if self.bias else 0)


@dataclass(frozen=True, slots=True)
class Mask:
    """Which (query, key) pairs attention keeps. Query i sits at key position `offset + i` (offset = cached
    tokens before the queries). causal: keys at or before the query; window: also within the last `window`."""

    causal: bool
    window: int | None = None


@dataclass(frozen=True, slots=True)
class AttentionCore:
    """scores = q [b, h, s_q, d_qk] @ k^T [b, h, d_qk, s_k]; out = probs [b, h, s_q, s_k] @ v [b, h, s_k, d_v].

    The keys and values come from `h_kv` heads (GQA, MQA: h_kv < h). `cached`: an inference step keeps them in a
    KV cache (a decoder's self-attention and its cross-attention; not an encoder's)."""

    component: str
    b: int
    h: int
    s_q: int
    s_k: int
    d_qk: int
    d_v: int
    mask: Mask
    h_kv: int = 0  # 0: h (one key/value head per query head)
    cached: bool = False
    sinks: int = 0  # logit columns the softmax has beside the keys' (gpt-oss's attention sinks: 1), no value
    # elements the KV cache keeps per token (all heads); 0: kv_heads * (d_qk + d_v), the keys and values themselves.
    # Multi-head latent attention caches its latent and shared rotary key instead: kv_lora_rank + qk_rope_dim
    cache_width: int = 0
    # its keys and values are an earlier block's (Gemma 4's KV sharing): not its own to cache or keep for backward
    shares_kv: bool = False

    @property
    def kv_heads(self) -> int:
        return self.h_kv or self.h

    @property
    def cached_per_token(self) -> int:
        """Elements one token adds to this attention's KV cache (`cache_width`, else keys and values)."""
        return self.cache_width or self.kv_heads * (self.d_qk + self.d_v)

    def cached_per_token_on(self, tp: int) -> int:
        """The same on one of `tp` tensor-parallel GPUs: its share of the key/value heads (one, copied, when tp is
        more than the heads, as vLLM does); a latent (`cache_width`) is not split by heads: whole on every GPU."""
        return self.cache_width or max(1, self.kv_heads // tp) * (self.d_qk + self.d_v)


@dataclass(frozen=True, slots=True)
class Table:
    """A lookup table of `rows` x `dim` parameters (an embedding); a lookup is not a matmul."""

    component: str
    rows: int
    dim: int
    kind: str = "token"  # "token", "position" (learned or relative-bias), "token_type" or "sinks" ([1, H])


@dataclass(frozen=True, slots=True)
class Norm:
    """A norm over `rows` vectors of `width`: LayerNorm has weight and bias [width], RMSNorm a weight.
    `split`: "heads" when its input is the queries or keys, which tensor parallelism splits by heads (q/k norms);
    "" when it is the residual stream (whole on every GPU unless sequence-parallel).
    `shares_input`: its input is one an earlier op already keeps (a parallel block's MLP norm, on the block's input,
    beside attention's norm): kept once."""

    component: str
    kind: str  # "layernorm" | "rmsnorm" | "layernorm_no_bias"
    rows: int
    width: int
    split: str = ""
    shares_input: bool = False
    sets: int = 1  # sets of weights: a per-head q/k norm has one per head (each row uses its head's)

    @property
    def params(self) -> int:
        return self.sets * self.width * (2 if self.kind == "layernorm" else 1)


@dataclass(frozen=True, slots=True)
class Elementwise:
    """Non-matmul work: `elements` elements at an estimated `flops_each` FLOPs each. `function`: an activation's
    (gelu, silu, relu, ...): what it keeps for backward differs (relu its output, the others their input)."""

    component: str
    kind: str  # "activation", "gate", "residual", "routing"
    elements: int
    flops_each: int
    function: str = ""


Op = Matmul | AttentionCore | Table | Norm | Elementwise
