"""Quantized weights as each format stores them: a format is data (bits per value, how values are packed, what
shares a scale, the scale's and zero point's dtype, what a tensor carries besides) plus one function of a weight
matrix's shape to its bytes (`Format.matrix_bytes`). A `Quant` is a format and what stays unquantized; it is read
from a config.json's `quantization_config` (`from_config`) or named by `--quant` (`named`). No torch.

    >>> nf4 = FORMATS["nf4"]
    >>> nf4.matrix_bytes(4096, 4096)   # 4096*4096/2 + 4096*4096/64 + 4*ceil(262144/256) + 64 + 1024
    8655936
    >>> round(8 * (nf4.matrix_bytes(4096, 4096) - 1088) / 4096**2, 4)   # QLoRA's 4 + 8/64 + 32/(64*256)
    4.127

What each format stores for one weight matrix W of k inputs and n outputs (nn.Linear's weight is [n, k]):

- `nf4`, `fp4` (bitsandbytes Params4bit, QLoRA): the n*k values flattened, two per byte; an absmax per block of
  64 values; with double quantization (`nf4`: QLoRA's) each absmax is a uint8 code, with an fp32 absmax per 256
  of them, the 16-entry fp32 code book (64 bytes) and the nested 256-entry fp32 code book (1,024 bytes) per
  tensor; without it (`nf4-nodq`, `fp4`) an fp32 absmax per block and the 64-byte code book. Not counted: the
  per-tensor `quant_state.bitsandbytes__nf4` entry, a JSON text of the shape, dtypes and the nested offset
  (a few hundred bytes a tensor, its length depends on the names).
- `int8` (bitsandbytes LLM.int8, Int8Params): int8 values and an fp32 absmax per output row (`SCB`), and the
  one-byte `weight_format` transformers serialises beside them.
- `int4-g128`, `int4-g64` (GPTQ as AutoGPTQ's QuantLinear stores it): `qweight` int32 [k/8, n] (eight 4-bit values
  a word along k), `scales` fp16 [ceil(k/g), n], `qzeros` int32 [ceil(k/g), n/8] (a packed 4-bit zero per group and
  column) and `g_idx` int32 [k] (kept whatever desc_act says). `awq-g128` (AutoAWQ's GEMM layout): `qweight`
  int32 [k, n/8], `scales` fp16 [k/g, n], `qzeros` int32 [k/g, n/8], no g_idx. Words are counted whole (ceil).
- `fp8` (per tensor): one byte a value and one fp32 scale per tensor (and one fp32 activation scale with a
  static activation scheme, read from a config). `fp8-block` (DeepSeek-V3's weight_block_size [128, 128]): one
  fp32 `weight_scale_inv` per 128 x 128 tile, ceil on each side.
- `mxfp4` (OCP Microscaling MX spec v1.0: E2M1 elements, an E8M0 scale per block of 32): two values a byte and
  one byte of scale per 32 values along k (`blocks` and `scales`, as gpt-oss ships its experts). transformers'
  Mxfp4 quantizer converts the routed experts only: attention, routers, embeddings and the head stay 16-bit.

What stays unquantized in every format: token, position and other tables, norms, biases (kept 16-bit beside a
quantized matrix), the LM head, MoE routers and shared-expert gates; plus what a config's modules_to_not_convert
(llm_int8_skip_modules, ...) names. A fused record (tfcalc's q/k/v projection) is counted as the separate
tensors a checkpoint stores (Matmul.parts: q, k, v; cross-attention's k, v); a family whose checkpoint fuses them
(GPT-2's c_attn, Falcon's query_key_value, Phi-3's qkv_proj and gate_up_proj) differs by the per-tensor constants
of the tensors it does not have (1,088 bytes each in nf4).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import ceil

from ..errors import TfcalcError, check_positive_int


@dataclass(frozen=True)
class Format:
    """How one weight matrix is stored. `layout`: "bnb4" (flat blocks, bitsandbytes 4-bit), "rows" (a scale
    per output row), "gptq"/"awq" (int32-packed groups along k with zeros), "tensor" (one scale), "tile" (a scale
    per tile), "mx" (a shared scale per block along k)."""

    name: str
    layout: str
    bits: int  # bits per stored value
    group: int = 0  # values sharing a scale along k (bnb4: flat block; gptq/awq: group size, 0 = all of k; mx: 32)
    tile: tuple[int, int] = (0, 0)  # (rows of n, columns of k) per scale: fp8-block
    scale_bytes: int = 0  # bytes of one scale
    double_quant: bool = False  # bnb4: absmax kept as uint8 codes, an fp32 absmax per `nested` of them
    nested: int = 256
    extra: int = 0  # bytes every quantized tensor carries besides (code books, activation scale, weight_format)
    experts_only: bool = False  # converts the routed experts only (transformers' Mxfp4 quantizer)
    description: str = ""
    zeros: bool = False  # ct: an asymmetric scheme's zero points (packed int32 in pack-quantized, else 1 byte each)
    g_idx: bool = False  # ct: actorder "group" keeps weight_g_idx int32 [k]

    def matrix_bytes(self, k: int, n: int) -> int:
        """Bytes of one weight matrix of k inputs and n outputs in this format, every tensor it stores."""
        values = k * n
        if self.layout == "bnb4":
            blocks = ceil(values / self.group)
            absmax = blocks + 4 * ceil(blocks / self.nested) + 1024 if self.double_quant else 4 * blocks
            return ceil(values * self.bits / 8) + absmax + self.extra
        if self.layout == "rows":  # int8 values, an fp32 scale per output row
            return values + self.scale_bytes * n + self.extra
        if self.layout in ("gptq", "awq"):
            per_word = 32 // self.bits
            g = self.group or k
            groups = ceil(k / g)
            qweight = 4 * (ceil(k / per_word) * n if self.layout == "gptq" else k * ceil(n / per_word))
            qzeros = 4 * groups * ceil(n / per_word)
            g_idx = 4 * k if self.layout == "gptq" else 0
            return qweight + self.scale_bytes * groups * n + qzeros + g_idx + self.extra
        if self.layout == "tensor":
            return ceil(values * self.bits / 8) + self.scale_bytes + self.extra
        if self.layout == "tile":
            rows, cols = self.tile
            return ceil(values * self.bits / 8) + self.scale_bytes * ceil(n / rows) * ceil(k / cols) + self.extra
        if self.layout == "mx":
            blocks = ceil(k / self.group) * n
            return blocks * ceil(self.group * self.bits / 8) + self.scale_bytes * blocks + self.extra
        if self.layout in ("ct-pack", "ct-naive"):  # compressed-tensors: weight [n, k], scales [n, groups]
            if self.tile != (0, 0):
                rows, cols = self.tile
                scales = ceil(n / rows) * ceil(k / cols)
            else:
                scales = n * ceil(k / self.group) if self.group else n  # group or channel (group 0)
            scales = 1 if self.group < 0 else scales  # tensor
            if self.layout == "ct-pack":  # weight_packed int32 [n, ceil(k / (32 / bits))], weight_shape int64 [2]
                per_word = 32 // self.bits
                values = 4 * n * ceil(k / per_word) + 16
                zeros = 4 * ceil(n / per_word) * (scales // n) if self.zeros and scales >= n else 0
            else:
                values = ceil(k * n * self.bits / 8)
                zeros = scales if self.zeros else 0
            return values + self.scale_bytes * scales + zeros + (4 * k if self.g_idx else 0) + self.extra
        raise AssertionError(self.layout)


def _gptq(bits: int, group: int) -> Format:
    return Format(f"int{bits}-g{group}" if group else f"int{bits}-channel", "gptq", bits, group, scale_bytes=2,
                  description=f"GPTQ int{bits}, " + (f"groups of {group}" if group else "per channel") +
                  " (qweight, fp16 scales, packed zeros, g_idx)")


# the formats --quant names; a config may give others of the same layouts (from_config)
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("nf4", "bnb4", 4, 64, double_quant=True, extra=64,
           description="bitsandbytes NF4 with double quantization (QLoRA): 4.127 bits a weight"),
    Format("nf4-nodq", "bnb4", 4, 64, extra=64, description="bitsandbytes NF4, fp32 absmax per 64"),
    Format("fp4", "bnb4", 4, 64, extra=64, description="bitsandbytes FP4, fp32 absmax per 64"),
    Format("int8", "rows", 8, scale_bytes=4, extra=1,
           description="bitsandbytes LLM.int8: int8, an fp32 scale per output row"),
    _gptq(4, 128),
    _gptq(4, 64),
    Format("awq-g128", "awq", 4, 128, scale_bytes=2, description="AWQ int4 (GEMM), groups of 128"),
    Format("fp8", "tensor", 8, scale_bytes=4, description="fp8 e4m3, one fp32 scale per tensor"),
    Format("fp8-block", "tile", 8, tile=(128, 128), scale_bytes=4,
           description="fp8 e4m3, an fp32 scale per 128x128 tile (DeepSeek-V3)"),
    Format("mxfp4", "mx", 4, 32, scale_bytes=1, experts_only=True,
           description="MXFP4: E2M1 values, an E8M0 scale per 32 (routed experts only, as gpt-oss)"),
)}
NAMES = ("none", *FORMATS)


@dataclass(frozen=True)
class Skip:
    """What a modules_to_not_convert entry keeps unquantized, as record attributes (never a component's name)."""

    entry: str
    sublayers: tuple[str, ...] = ()  # every linear of these sublayers
    roles: tuple[str, ...] = ()  # linears of these roles
    experts: bool | None = None  # True: routed experts only; False: the sublayer's linears that are not experts

    def keeps(self, op) -> bool:
        if self.roles and op.role not in self.roles:
            return False
        if self.sublayers and op.sublayer not in self.sublayers:
            return False
        if self.experts is not None and bool(op.expert) != self.experts:
            return False
        return bool(self.roles or self.sublayers or self.experts is not None)


@dataclass(frozen=True)
class Quant:
    """A format and what stays unquantized. `source`: where it came from (a config's quantization_config, or
    --quant). `notes`: what was read and how."""

    format: Format
    skips: tuple[Skip, ...] = ()
    source: str = "--quant"
    notes: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.format.name

    def quantizes(self, op) -> bool:
        """Whether this record's weight matrices are stored in the format (else 16-bit)."""
        if not op.matrices() or op.role not in ("", "encoder_kv"):
            return False  # the head, routers, shared-expert gates, poolers; tables, norms
        if self.format.experts_only and not op.expert:
            return False
        return not any(skip.keeps(op) for skip in self.skips)

    def to_dict(self) -> dict:
        return {"format": self.format.name, "description": self.format.description, "source": self.source,
                "not_converted": [s.entry for s in self.skips], "notes": list(self.notes)}


@dataclass(frozen=True)
class WeightBytes:
    """Bytes of a model's weights under a Quant, per component: (parameters, bytes), quantized and not."""

    components: dict[str, tuple[int, int]]  # component -> (parameters, bytes), everything it holds
    quantized: dict[str, tuple[int, int]]  # component -> (matrix parameters, bytes) of its quantized matrices

    @property
    def total(self) -> int:
        return sum(b for _, b in self.components.values())

    @property
    def quantized_params(self) -> int:
        return sum(p for p, _ in self.quantized.values())

    @property
    def quantized_bytes(self) -> int:
        return sum(b for _, b in self.quantized.values())

    def to_dict(self) -> dict:
        return {"total_bytes": self.total, "quantized_params": self.quantized_params,
                "quantized_bytes": self.quantized_bytes,
                "components": {name: {"params": p, "bytes": b, **({"quantized_params": self.quantized[name][0],
                                                                     "quantized_bytes": self.quantized[name][1]}
                                                                    if name in self.quantized else {})}
                               for name, (p, b) in self.components.items()}}


def as_quant(value) -> Quant | None:
    """A plan's `quant` argument: a Quant, a format's name (`"nf4"`; `"none"`: None) or None; else refused."""
    if value is None or isinstance(value, Quant):
        return value
    if isinstance(value, str):
        if value != "none" and value not in FORMATS:
            raise TfcalcError(f"quant={value!r}: expected one of {', '.join(NAMES)}, or a tfcalc.plan.quant.Quant")
        return named(value)
    raise TfcalcError(f"quant={value!r}: expected a format's name ({', '.join(NAMES)}) or a tfcalc.plan.quant.Quant")


def named(name: str) -> Quant | None:
    """The Quant `--quant NAME` asks for (None: `none`, the checkpoint's own dtype)."""
    if name == "none":
        return None
    if name not in FORMATS:
        raise TfcalcError(f"--quant {name}: expected one of {', '.join(NAMES)}")
    return Quant(FORMATS[name])


def record_bytes(op, quant: Quant | None, tp: int = 1, ep: int = 1, copy_tied: bool = False,
                 base: int = 2) -> tuple[int, int, int, int]:
    """(parameters, bytes, quantized matrix parameters, their bytes) of one set of a record's weights on one GPU
    of a layout (`tp` tensor-parallel, `ep` expert-parallel GPUs; `copy_tied`: a later pipeline stage's copy of a
    tied head, as `Record.tensors` takes them): its quantized matrices in the format, everything else `base` bytes
    a parameter. A training plan's frozen weights (QLoRA's base) are the sum of these over its stage's records."""
    params = sum(op.tensors(tp, ep, copy_tied))
    if quant is None or not quant.quantizes(op):
        return params, params * base, 0, 0
    mats = op.matrices(tp)
    held = -(-op.weights // ep) if op.expert else op.weights  # the expert-parallel GPU's share of the experts
    matrix_params = sum(k * n * count for k, n, count in mats) * held // op.weights
    matrix_bytes = sum(count * quant.format.matrix_bytes(k, n) for k, n, count in mats) * held // op.weights
    return params, matrix_bytes + (params - matrix_params) * base, matrix_params, matrix_bytes


def weight_bytes(spec, quant: Quant | str | None, tp: int = 1, base: int = 2) -> WeightBytes:
    """Bytes of `spec`'s weights under `quant` (a Quant or a format's name; None: every tensor `base` bytes) on one
    of `tp` tensor-parallel GPUs, per component. The frozen base weights of a quantized fine-tune (QLoRA) are these
    bytes."""
    from ..arch import build
    from .memory import check_tp

    quant = as_quant(quant)
    check_tp(spec, tp)
    check_positive_int("base", base)

    inv = build(spec)
    components: dict[str, list[int]] = {}
    quantized: dict[str, list[int]] = {}
    for op, sets in inv.parameters():
        params, total, qp, qb = (sets * x for x in record_bytes(op, quant, tp, base=base))
        if not params:
            continue
        for name in op.parameters():  # a record holding weights reports one component
            row = components.setdefault(name, [0, 0])
            row[0] += params
            row[1] += total
            if qp:
                q = quantized.setdefault(name, [0, 0])
                q[0] += qp
                q[1] += qb
            break
    if quant is not None and not quantized:
        what = "routed experts" if quant.format.experts_only else "linear layers (the head and routers stay)"
        raise TfcalcError(f"quant={quant.name}: {spec.label} has no {what} it applies to")
    return WeightBytes({k: (p, b) for k, (p, b) in components.items()},
                       {k: (p, b) for k, (p, b) in quantized.items()})


def read_bytes_fn(quant: Quant, tp: int, base: int = 2):
    """For the roofline: a function of (record, matrices read) to the bytes a step reads of its weights."""

    def read(op, count: int) -> int:  # `count` of the record's `weights` sets (routed experts: those touched)
        mats = op.matrices(tp)
        if quant.quantizes(op):
            every = sum(c * quant.format.matrix_bytes(k, n) for k, n, c in mats)
        else:
            every = sum(c * k * n for k, n, c in mats) * base
        return every * count // op.weights if op.weights else 0

    return read


# ---- a config.json's quantization_config ---------------------------------------------------------------------------

# the last part of a module path -> what it keeps unquantized (modules_to_not_convert and its kin)
_MODULES: dict[str, dict] = {
    "self_attn": {"sublayers": ("attention",)}, "attn": {"sublayers": ("attention",)},
    "attention": {"sublayers": ("attention",)}, "self_attention": {"sublayers": ("attention",)},
    "encoder_attn": {"sublayers": ("cross_attention",)}, "crossattention": {"sublayers": ("cross_attention",)},
    "mlp": {"sublayers": ("mlp", "moe")}, "feed_forward": {"sublayers": ("mlp", "moe")},
    "block_sparse_moe": {"sublayers": ("moe",)},
    "experts": {"sublayers": ("moe",), "experts": True},
    "shared_expert": {"sublayers": ("moe",), "experts": False, "roles": ("",)},
    "shared_experts": {"sublayers": ("moe",), "experts": False, "roles": ("",)},
    "router": {"roles": ("router",)}, "gate": {"roles": ("router",)},
    "shared_expert_gate": {"roles": ("shared_gate",)},
    "lm_head": {"roles": ("head",)}, "embed_out": {"roles": ("head",)},
}
# tables are never quantized: naming them keeps what is kept
_TABLES = ("embed_tokens", "wte", "wpe", "word_embeddings", "embed_in", "embed_positions", "embeddings", "norm")
# towers tfcalc does not count (a multimodal config's): nothing of them is in the figures
_TOWERS = ("visual", "vision_tower", "vision_model", "multi_modal_projector", "audio_tower", "mm_projector")


def _skip(entry, key: str) -> Skip | None:
    if not isinstance(entry, str):
        raise TfcalcError(f"quantization_config.{key}: {entry!r}: expected a module name (a string)")
    text = entry.removeprefix("re:")
    for ch in "^$*\\()?+[]|":
        text = text.replace(ch, "" if ch != "|" else ".")
    parts = [p for p in text.split(".") if p and p not in ("model", "layers", "language_model", "weight")]
    if any(p.isdigit() for p in parts):
        raise TfcalcError(f"quantization_config.{key}: {entry!r} names one layer; tfcalc keeps or quantizes "
                          "every layer alike (a per-layer exception is not modelled)")
    if not parts:
        raise TfcalcError(f"quantization_config.{key}: {entry!r}: no module named")
    last = parts[-1]
    if last in _TABLES or parts[0] in _TOWERS:
        return None  # never quantized here / not counted
    if last not in _MODULES:
        raise TfcalcError(f"quantization_config.{key}: {entry!r} is not modelled (known modules: "
                          f"{', '.join([*_MODULES, *_TABLES])}; a single projection such as q_proj is not kept "
                          "apart from its sublayer)")
    return Skip(entry, **_MODULES[last])


def _skips(cfg: dict, key: str) -> tuple[Skip, ...]:
    value = cfg.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise TfcalcError(f"quantization_config.{key}={value!r}: expected a list of module names or null")
    return tuple(s for s in (_skip(e, key) for e in value) if s is not None)


def _int(cfg: dict, key: str, default, allowed=None):
    value = cfg.get(key, default)
    if type(value) is not int or (allowed is not None and value not in allowed):
        raise TfcalcError(f"quantization_config.{key}={value!r}: expected "
                          + (f"one of {', '.join(map(str, allowed))}" if allowed else "an integer"))
    return value


def _bool(cfg: dict, key: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        raise TfcalcError(f"quantization_config.{key}={value!r}: expected a boolean (true or false)")
    return value


METHODS = ("bitsandbytes", "gptq", "awq", "fp8", "mxfp4", "compressed-tensors")


def from_config(cfg, where: str = "config.json") -> Quant:
    """The Quant of a config.json's `quantization_config`; an unknown quant_method, or a value that changes what
    is stored in a way not modelled, is refused by name."""
    if not isinstance(cfg, dict):
        raise TfcalcError(f"{where}: quantization_config={cfg!r}: expected an object")
    method = cfg.get("quant_method")
    if method not in METHODS:
        raise TfcalcError(f"{where}: quantization_config.quant_method={method!r} is not supported; "
                          f"supported: {', '.join(METHODS)} (or give --quant none to count the weights in 16 bits)")
    source = f"{where} quantization_config (quant_method {method})"
    if method == "bitsandbytes":
        four, eight = _bool(cfg, "load_in_4bit", False), _bool(cfg, "load_in_8bit", False)
        if four == eight:
            raise TfcalcError(f"{where}: quantization_config: load_in_4bit={four!r} and load_in_8bit={eight!r}: "
                              "expected one of them true")
        skips = _skips(cfg, "llm_int8_skip_modules")
        if eight:
            return Quant(FORMATS["int8"], skips, source)
        kind = cfg.get("bnb_4bit_quant_type", "fp4")
        if kind not in ("nf4", "fp4"):
            raise TfcalcError(f"{where}: quantization_config.bnb_4bit_quant_type={kind!r}: expected 'nf4' or 'fp4'")
        storage = cfg.get("bnb_4bit_quant_storage", "uint8")
        if storage not in ("uint8", None):
            raise TfcalcError(f"{where}: quantization_config.bnb_4bit_quant_storage={storage!r} is not modelled "
                              "(uint8: two values a byte)")
        double = _bool(cfg, "bnb_4bit_use_double_quant", False)
        fmt = replace(FORMATS["nf4-nodq"], name=kind + ("" if double else "-nodq") if kind == "nf4" else
                      kind + ("-dq" if double else ""), double_quant=double,
                      description=f"bitsandbytes {kind.upper()}" + (", double quantization" if double else
                                                                   ", fp32 absmax per 64"))
        return Quant(fmt, skips, source)
    if method in ("gptq", "awq"):
        bits = _int(cfg, "bits" if "bits" in cfg or method == "gptq" else "w_bit", 4, (2, 4, 8))
        group = _int(cfg, "group_size" if "group_size" in cfg or method == "gptq" else "q_group_size", 128)
        if group != -1 and group < 1:
            raise TfcalcError(f"{where}: quantization_config.group_size={group!r}: expected -1 or a positive size")
        group = 0 if group == -1 else group
        if method == "gptq":
            fmt_name = cfg.get("checkpoint_format", "gptq")
            if fmt_name not in ("gptq", "gptq_v2"):
                raise TfcalcError(f"{where}: quantization_config.checkpoint_format={fmt_name!r} is not modelled "
                                  "(gptq, gptq_v2: qweight, scales, qzeros, g_idx)")
            if cfg.get("lm_head") is True:
                raise TfcalcError(f"{where}: quantization_config.lm_head=True is not modelled (the head stays "
                                  "16-bit here)")
            fmt = _gptq(bits, group)
            return Quant(fmt, _skips(cfg, "modules_to_not_convert"), source)
        version = str(cfg.get("version", "gemm")).lower()
        if version != "gemm":
            raise TfcalcError(f"{where}: quantization_config.version={cfg.get('version')!r} is not modelled "
                              "(gemm: AutoAWQ's qweight [k, n/8], scales, qzeros)")
        if bits != 4:
            raise TfcalcError(f"{where}: quantization_config.bits={bits}: AWQ's GEMM layout packs 4-bit values")
        fmt = Format(f"awq-g{group}" if group else "awq-channel", "awq", 4, group, scale_bytes=2,
                     description="AWQ int4 (GEMM), " + (f"groups of {group}" if group else "per channel"))
        return Quant(fmt, _skips(cfg, "modules_to_not_convert"), source)
    if method == "fp8":
        fmt_name = cfg.get("fmt", "e4m3")
        if fmt_name not in ("e4m3", "e5m2"):
            raise TfcalcError(f"{where}: quantization_config.fmt={fmt_name!r}: expected 'e4m3' or 'e5m2'")
        scheme = cfg.get("activation_scheme", "dynamic")
        if scheme not in ("dynamic", "static"):
            raise TfcalcError(f"{where}: quantization_config.activation_scheme={scheme!r}: expected 'dynamic' or "
                              "'static'")
        block = cfg.get("weight_block_size")
        extra = 4 if scheme == "static" else 0  # an fp32 activation_scale per linear
        scale_fmt = cfg.get("scale_fmt")
        if scale_fmt not in (None, "float32", "ue8m0"):
            raise TfcalcError(f"{where}: quantization_config.scale_fmt={scale_fmt!r} is not modelled (float32 or "
                              "ue8m0: a one-byte power-of-two scale)")
        scale = 1 if scale_fmt == "ue8m0" else 4
        if block is None:
            fmt = replace(FORMATS["fp8"], extra=extra, scale_bytes=scale)
        else:
            if (not isinstance(block, list) or len(block) != 2
                    or not all(type(b) is int and b > 0 for b in block)):
                raise TfcalcError(f"{where}: quantization_config.weight_block_size={block!r}: expected two "
                                  "positive integers [rows, columns] or null")
            fmt = replace(FORMATS["fp8-block"], name=f"fp8-block{block[0]}x{block[1]}", tile=(block[0], block[1]),
                          extra=extra, scale_bytes=scale,
                          description=f"fp8 {fmt_name}, an {'ue8m0' if scale == 1 else 'fp32'} scale per "
                                      f"{block[0]}x{block[1]} tile")
        return Quant(fmt, _skips(cfg, "modules_to_not_convert"), source)
    if method == "compressed-tensors":
        return _compressed_tensors(cfg, where, source)
    # mxfp4
    return Quant(FORMATS["mxfp4"], _skips(cfg, "modules_to_not_convert"), source)


CT_FORMATS = {"pack-quantized": "ct-pack", "naive-quantized": "ct-naive", "int-quantized": "ct-naive",
              "float-quantized": "ct-naive"}


def _compressed_tensors(cfg: dict, where: str, source: str) -> Quant:
    """compressed-tensors (llm-compressor's checkpoints): one config group of Linear targets. What each compressor
    writes (compressed_tensors/compressors/quantized_compressors): pack-quantized: weight_packed int32 [n, k / (32 /
    bits)], weight_shape int64 [2], weight_scale [n, groups], an asymmetric scheme's weight_zero_point packed int32
    [n / (32 / bits), groups], actorder "group"'s weight_g_idx int32 [k]; naive/int/float-quantized: the values
    unpacked, the same scales, zero points one byte each. Scales are taken in 16 bits (compressed-tensors computes
    them in the weights' dtype; a checkpoint of fp32 scales has 2 bytes more a scale); a static activation scheme's
    input_scale one per linear."""
    name = cfg.get("format")
    if name not in CT_FORMATS:
        raise TfcalcError(f"{where}: quantization_config.format={name!r} is not modelled (known: "
                          f"{', '.join(CT_FORMATS)})")
    groups = cfg.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise TfcalcError(f"{where}: quantization_config.config_groups: expected one group (several schemes in one "
                          "model are not modelled)")
    (key, group), = groups.items()
    if not isinstance(group, dict) or group.get("targets") != ["Linear"]:
        raise TfcalcError(f"{where}: quantization_config.config_groups.{key}.targets={group.get('targets')!r}: "
                          "expected ['Linear'] (other targets are not modelled)")
    w = group.get("weights")
    if not isinstance(w, dict):
        raise TfcalcError(f"{where}: quantization_config.config_groups.{key}.weights={w!r}: expected an object")
    at = f"{where}: quantization_config.config_groups.{key}.weights"
    bits, kind, strategy = w.get("num_bits"), w.get("type", "int"), w.get("strategy")
    if kind not in ("int", "float") or bits not in ((2, 4, 8) if kind == "int" else (8,)):
        raise TfcalcError(f"{at}: type={kind!r}, num_bits={bits!r} is not modelled (int 2, 4 or 8; float 8)")
    wants = {"pack-quantized": "int", "naive-quantized": "int8", "int-quantized": "int8",
             "float-quantized": "float8"}[name]
    if wants not in (kind, f"{kind}{bits}"):
        raise TfcalcError(f"{at}: type={kind!r}, num_bits={bits} is not what format {name!r} stores ({wants})")
    tile = (0, 0)
    if strategy == "group":
        size = w.get("group_size")
        if type(size) is not int or size < 1:
            raise TfcalcError(f"{at}.group_size={size!r}: expected a positive integer")
    elif strategy == "channel":
        size = 0
    elif strategy == "tensor":
        size = -1
    elif strategy == "block":
        block = w.get("block_structure")
        if not isinstance(block, list) or len(block) != 2 or not all(type(b) is int and b > 0 for b in block):
            raise TfcalcError(f"{at}.block_structure={block!r}: expected two positive integers")
        size, tile = 0, (block[0], block[1])
    else:
        raise TfcalcError(f"{at}.strategy={strategy!r} is not modelled (tensor, channel, group, block)")
    symmetric = w.get("symmetric", True)
    if not isinstance(symmetric, bool):
        raise TfcalcError(f"{at}.symmetric={symmetric!r}: expected a boolean")
    actorder = w.get("actorder")
    if actorder not in (None, "group", "weight", "static", "dynamic"):
        raise TfcalcError(f"{at}.actorder={actorder!r} is not modelled")
    act = group.get("input_activations")
    extra = 2 if isinstance(act, dict) and act.get("dynamic") is False else 0  # a static input_scale
    label = f"{kind}{bits}" + (f"-g{size}" if strategy == "group" else f"-{strategy}")
    fmt = Format(f"ct-{label}", CT_FORMATS[name], bits, size, tile, scale_bytes=2, extra=extra,
                 zeros=not symmetric and (strategy in ("group", "channel") or name != "pack-quantized"),
                 g_idx=actorder == "group",
                 description=f"compressed-tensors {name} {label} (16-bit scales)")
    notes = ("kv_cache_scheme: the cache's per-layer scales are not counted",) if cfg.get("kv_cache_scheme") else ()
    return Quant(fmt, _skips(cfg, "ignore"), source, notes)


# ---- the KV cache's scales ------------------------------------------------------------------------------------------

# bytes a serving engine keeps beside each cached attention layer for a quantized KV cache, per dtype: vLLM's
# Attention layer holds `_k_scale` and `_v_scale`, fp32 scalars, per layer (per-tensor scales; vllm/attention/
# layer.py), used by its fp8 caches. int8: no engine's layout is modelled (vLLM has no int8 KV cache): none added.
KV_SCALE_BYTES = {"fp8": 8}
