"""Accelerator datasheets: memory, memory bandwidth and dense peak FLOP/s per dtype, each with its source. No torch.

The one table of accelerators in tfcalc: planning reads it by name (`lookup("h100")`), profile by the name
torch.cuda.get_device_name() reports (`from_device_name("NVIDIA H100 80GB HBM3")`).

    >>> h100 = lookup("h100")
    >>> h100.name, h100.memory_bytes == 80 * 2**30, h100.peak_flops["bf16"]
    ('H100 SXM', True, 989400000000000)

Conventions, stated once:
- `memory_bytes` is the vendor's capacity figure read as binary: "80GB" of HBM or GDDR is 80 GiB = 80 * 2**30
  bytes. Memory parts come in binary sizes (five 16 GiB HBM3 stacks on an H100 SXM) and the usable memory
  drivers report is just under the GiB reading and above the decimal one: an H100 80GB shows 81,559 MiB
  (79.6 GiB, 85.5e9 bytes; 80e9 would be 76,294 MiB), an H200 "141GB" 143,771 MiB, a B200 "180GB"
  182,784 MiB, an MI300X "192GB" 205,822,885,888 bytes. It is the whole capacity: the CUDA context, the
  driver's reservation and, on GDDR cards with ECC on (L4, L40S), the ECC bits take a few percent of it.
- `bandwidth_bytes_per_s` is decimal, as vendors publish it: 3.35 TB/s = 3.35e12 bytes/s.
- `peak_flops` holds dense peaks, FLOP/s (2 per multiply-add; int8 in OP/s), never the "with sparsity" figures
  (2:4 structured sparsity, twice the dense rate) that NVIDIA's datasheets headline. Where a vendor publishes
  the dense figure (the H100 whitepaper, the A100, A10, L40, L40S and MI300X datasheets, the Ada whitepaper) it
  is taken as published; where it publishes only the sparse one (H100 NVL, H200 NVL, L4, B200) the dense figure
  is half of it. All are at the vendor's boost (peak engine) clock: sustained clocks under load can be lower.
- `link_bytes_per_s` is one direction of the GPU's GPU-to-GPU link as its datasheet gives it in both directions
  together (H100 SXM "NVLink: 900GB/s" is 450 GB/s each way); a part sold with an NVLink bridge for 2 GPUs (H100
  NVL, H200 NVL, A100 PCIe) is given its bridge, and a PCIe-only card its PCIe slot (x16, both directions over 2).
  Figures typed from the datasheets named, without network access to re-read them.
- dtypes: fp32 is the non-tensor (CUDA-core, "vector") rate, what an fp32 matmul runs at unless TF32 is
  allowed; tf32, bf16, fp16, fp8 and int8 are tensor-core (matrix-core) rates. bf16/fp16 are with FP32
  accumulate (what torch's matmuls use), which on a GeForce card (RTX 4090) is half the FP16-accumulate rate.
  A dtype a GPU has no tensor-core rate for (fp8 before Hopper and Ada, bf16 and tf32 on V100) is absent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import TfcalcError

GiB = 2**30


def _tera(figure: str) -> int:
    """A decimal figure in units of 1e12 ('989.4' TFLOP/s, '3.35' TB/s) as an exact integer (no float rounding)."""
    whole, _, frac = figure.partition(".")
    assert len(frac) <= 12 and (whole + frac).isdigit(), figure
    return int(whole) * 10**12 + int(frac.ljust(12, "0"))


def _peaks(fp32: str, tf32: str | None, bf16: str | None, fp16: str, fp8: str | None = None,
           int8: str | None = None) -> dict[str, int]:
    """Dense peaks in TFLOP/s (TOP/s for int8), None where the GPU has no such rate."""
    given = {"fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": fp16, "fp8": fp8, "int8": int8}
    return {dtype: _tera(t) for dtype, t in given.items() if t is not None}


DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True)
class Gpu:
    name: str
    aliases: tuple[str, ...]  # short names users type, lower-case; the first is the one listings show
    memory_bytes: int
    bandwidth_bytes_per_s: int
    peak_flops: dict[str, int] = field(hash=False)  # dtype -> dense FLOP/s (int8: OP/s)
    source: str
    # GPU-to-GPU bandwidth each way, bytes/s: half the vendor's bidirectional NVLink (or Infinity Fabric, or PCIe)
    # figure; what tensor parallelism's all-reduces run at (`link` in the source says which)
    link_bytes_per_s: int | None = None
    link: str = ""


# Hopper's tensor figures, shared by the parts built on the same GH100 compute at the same clocks: the H100
# whitepaper's dense column (the datasheets' sparsity figures 1,979 / 3,958 / 989 halved round to these).
_HOPPER_SXM = _peaks(fp32="67", tf32="494.7", bf16="989.4", fp16="989.4", fp8="1978.9", int8="1978.9")
# H100 NVL and H200 NVL datasheets: TF32 835, BF16/FP16 1,671, FP8/INT8 3,341 with sparsity.
_HOPPER_NVL = _peaks(fp32="60", tf32="417.5", bf16="835.5", fp16="835.5", fp8="1670.5", int8="1670.5")
_A100 = _peaks(fp32="19.5", tf32="156", bf16="312", fp16="312", int8="624")
_V100_SXM2 = _peaks(fp32="15.7", tf32=None, bf16=None, fp16="125")

GPUS: tuple[Gpu, ...] = (
    Gpu("H100 SXM", ("h100-sxm", "h100", "h100-sxm5"), 80 * GiB, _tera("3.35"), _HOPPER_SXM,
        "NVIDIA H100 Tensor Core GPU datasheet (2023), H100 SXM; dense tensor figures from the NVIDIA H100 "
        "Tensor Core GPU Architecture whitepaper (2022)",
        link_bytes_per_s=_tera("0.45"), link="NVLink 4, 900 GB/s both ways (H100 datasheet)"),
    Gpu("H100 PCIe", ("h100-pcie",), 80 * GiB, _tera("2"),
        _peaks(fp32="51", tf32="378", bf16="756", fp16="756", fp8="1513", int8="1513"),
        "NVIDIA H100 Tensor Core GPU datasheet (2023), H100 PCIe; dense tensor figures from the NVIDIA H100 "
        "Tensor Core GPU Architecture whitepaper (2022)",
        link_bytes_per_s=_tera("0.064"), link="PCIe Gen5 x16, 128 GB/s both ways (H100 datasheet; an NVLink bridge for "
             "2 GPUs, 600 GB/s, is optional)"),
    Gpu("H100 NVL", ("h100-nvl",), 94 * GiB, _tera("3.9"), _HOPPER_NVL,
        "NVIDIA H100 Tensor Core GPU datasheet (2024), H100 NVL, per GPU; sparsity figures halved",
        link_bytes_per_s=_tera("0.3"), link="NVLink bridge, 600 GB/s both ways (H100 NVL datasheet)"),
    Gpu("H200 SXM", ("h200-sxm", "h200"), 141 * GiB, _tera("4.8"), _HOPPER_SXM,
        "NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM; dense tensor figures as the H100 SXM's "
        "(H100 whitepaper, 2022: same GH100 compute and clocks)",
        link_bytes_per_s=_tera("0.45"), link="NVLink 4, 900 GB/s both ways (H200 datasheet)"),
    Gpu("H200 NVL", ("h200-nvl",), 141 * GiB, _tera("4.8"), _HOPPER_NVL,
        "NVIDIA H200 Tensor Core GPU datasheet (2024), H200 NVL; sparsity figures halved",
        link_bytes_per_s=_tera("0.45"), link="2- or 4-way NVLink bridge, 900 GB/s both ways (H200 NVL datasheet)"),
    Gpu("GH200 96GB", ("gh200-96gb", "gh200"), 96 * GiB, _tera("4"), _HOPPER_SXM,
        "NVIDIA GH200 Grace Hopper Superchip datasheet (2024), HBM3 variant, GPU only (not the Grace CPU's "
        "LPDDR5X); dense tensor figures as the H100 SXM's (H100 whitepaper, 2022)",
        link_bytes_per_s=_tera("0.45"), link="NVLink 4, 900 GB/s both ways (GH200 datasheet)"),
    Gpu("GH200 144GB", ("gh200-144gb",), 144 * GiB, _tera("4.9"), _HOPPER_SXM,
        "NVIDIA GH200 Grace Hopper Superchip datasheet (2024), HBM3e variant, GPU only; dense tensor figures "
        "as the H100 SXM's (H100 whitepaper, 2022)",
        link_bytes_per_s=_tera("0.45"), link="NVLink 4, 900 GB/s both ways (GH200 datasheet)"),
    Gpu("B200", ("b200", "b200-sxm", "hgx-b200"), 180 * GiB, _tera("7.7"),
        _peaks(fp32="75", tf32="1100", bf16="2250", fp16="2250", fp8="4500", int8="4500"),
        "NVIDIA HGX B200 specifications (2025), per-GPU column (1,000 W); sparsity figures (TF32 2.2, "
        "BF16/FP16 4.5, FP8 and INT8 9 PFLOPS) halved",
        link_bytes_per_s=_tera("0.9"), link="NVLink 5, 1.8 TB/s both ways (HGX B200 specifications)"),
    Gpu("A100 40GB SXM", ("a100-40gb", "a100-sxm-40gb", "a100-40gb-sxm"), 40 * GiB, _tera("1.555"), _A100,
        "NVIDIA A100 Tensor Core GPU datasheet (2020), A100 40GB SXM; dense figures as published",
        link_bytes_per_s=_tera("0.3"), link="NVLink 3, 600 GB/s both ways (A100 datasheet)"),
    Gpu("A100 80GB SXM", ("a100-80gb", "a100", "a100-sxm", "a100-sxm-80gb", "a100-80gb-sxm"), 80 * GiB,
        _tera("2.039"), _A100,
        "NVIDIA A100 Tensor Core GPU datasheet (2021), A100 80GB SXM; dense figures as published",
        link_bytes_per_s=_tera("0.3"), link="NVLink 3, 600 GB/s both ways (A100 datasheet)"),
    Gpu("A100 40GB PCIe", ("a100-40gb-pcie", "a100-pcie-40gb"), 40 * GiB, _tera("1.555"), _A100,
        "NVIDIA A100 Tensor Core GPU datasheet (2020), A100 40GB PCIe; dense figures as published",
        link_bytes_per_s=_tera("0.3"), link="NVLink bridge for 2 GPUs, 600 GB/s both ways (A100 datasheet; PCIe Gen4 "
             "without it: 64 GB/s)"),
    Gpu("A100 80GB PCIe", ("a100-80gb-pcie", "a100-pcie-80gb", "a100-pcie"), 80 * GiB, _tera("1.935"), _A100,
        "NVIDIA A100 Tensor Core GPU datasheet (2021), A100 80GB PCIe; dense figures as published",
        link_bytes_per_s=_tera("0.3"), link="NVLink bridge for 2 GPUs, 600 GB/s both ways (A100 datasheet; PCIe Gen4 "
             "without it: 64 GB/s)"),
    Gpu("L4", ("l4",), 24 * GiB, _tera("0.3"),
        _peaks(fp32="30.3", tf32="60", bf16="121", fp16="121", fp8="242.5", int8="242.5"),
        "NVIDIA L4 Tensor Core GPU datasheet (2023); sparsity figures (TF32 120, BF16/FP16 242, FP8/INT8 485) "
        "halved",
        link_bytes_per_s=_tera("0.032"), link="PCIe Gen4 x16, 64 GB/s both ways (L4 datasheet; no NVLink)"),
    Gpu("L40", ("l40",), 48 * GiB, _tera("0.864"),
        _peaks(fp32="90.5", tf32="90.5", bf16="181.05", fp16="181.05", fp8="362", int8="362"),
        "NVIDIA L40 GPU datasheet (2022); dense figures as published",
        link_bytes_per_s=_tera("0.032"), link="PCIe Gen4 x16, 64 GB/s both ways (L40 datasheet; no NVLink)"),
    Gpu("L40S", ("l40s",), 48 * GiB, _tera("0.864"),
        _peaks(fp32="91.6", tf32="183", bf16="362.05", fp16="362.05", fp8="733", int8="733"),
        "NVIDIA L40S GPU datasheet (2023); dense figures as published",
        link_bytes_per_s=_tera("0.032"), link="PCIe Gen4 x16, 64 GB/s both ways (L40S datasheet; no NVLink)"),
    Gpu("A10", ("a10",), 24 * GiB, _tera("0.6"),
        _peaks(fp32="31.2", tf32="62.5", bf16="125", fp16="125", int8="250"),
        "NVIDIA A10 Tensor Core GPU datasheet (2021); dense figures as published",
        link_bytes_per_s=_tera("0.032"), link="PCIe Gen4 x16, 64 GB/s both ways (A10 datasheet; no NVLink)"),
    Gpu("GeForce RTX 4090", ("rtx4090", "rtx-4090", "4090", "geforce-rtx-4090"), 24 * GiB, _tera("1.008"),
        _peaks(fp32="82.6", tf32="82.6", bf16="165.2", fp16="165.2", fp8="330.3", int8="660.6"),
        "NVIDIA Ada Lovelace GPU Architecture whitepaper (2022), GeForce RTX 4090; dense, FP32 accumulate "
        "(FP16 accumulate doubles fp16 and fp8)",
        link_bytes_per_s=_tera("0.032"), link="PCIe Gen4 x16, 64 GB/s both ways (no NVLink, no peer-to-peer: a bound "
             "it does not reach)"),
    Gpu("V100 SXM2 32GB", ("v100", "v100-32gb", "v100-sxm2", "v100-sxm2-32gb"), 32 * GiB, _tera("0.9"),
        _V100_SXM2,
        "NVIDIA V100 Tensor Core GPU datasheet (2020), V100 SXM2; fp16 is its 'Tensor Performance' (no bf16, "
        "tf32, fp8 or int8 tensor cores)",
        link_bytes_per_s=_tera("0.15"), link="NVLink 2, 300 GB/s both ways (V100 datasheet)"),
    Gpu("V100 SXM2 16GB", ("v100-16gb", "v100-sxm2-16gb"), 16 * GiB, _tera("0.9"), _V100_SXM2,
        "NVIDIA V100 Tensor Core GPU datasheet (2020), V100 SXM2; fp16 is its 'Tensor Performance' (no bf16, "
        "tf32, fp8 or int8 tensor cores)",
        link_bytes_per_s=_tera("0.15"), link="NVLink 2, 300 GB/s both ways (V100 datasheet)"),
    Gpu("MI300X", ("mi300x", "instinct-mi300x"), 192 * GiB, _tera("5.3"),
        _peaks(fp32="163.4", tf32="653.7", bf16="1307.4", fp16="1307.4", fp8="2614.9", int8="2614.9"),
        "AMD Instinct MI300X accelerator datasheet (2023); dense figures as published (peak engine clock "
        "2,100 MHz); fp32 is the vector rate",
        link_bytes_per_s=_tera("0.448"), link="Infinity Fabric, 7 links of 128 GB/s both ways, 896 GB/s (MI300X "
             "datasheet)"),
)

# torch.cuda.get_device_name() -> GPU, first match wins (case-insensitive). A name none matches gets no
# datasheet rather than a wrong one: MIG slices (a fraction of the SMs), A10G (AWS's A10 variant, with less
# tensor throughput and no NVIDIA datasheet), GB200's B200 (other clocks), RTX 4090 D and laptop parts.
_DEVICE_NAMES: tuple[tuple[str, str], ...] = (
    (r"\bMIG\b", ""),
    (r"\bGH200\b.*\b144G", "gh200-144gb"),  # "NVIDIA GH200 144G HBM3e"
    (r"\bGH200\b", "gh200-96gb"),  # "NVIDIA GH200 480GB": 480 GB is the Grace CPU's LPDDR5X
    (r"\bH200\b.*\bNVL\b", "h200-nvl"),
    (r"\bH200\b", "h200-sxm"),  # "NVIDIA H200", "NVIDIA H200 141GB HBM3e"
    (r"\bH100\b.*\bNVL\b", "h100-nvl"),
    (r"\bH100\b.*(\bPCIE\b|HBM2E)", "h100-pcie"),  # "NVIDIA H100 PCIe"; only the PCIe card has HBM2e
    (r"\bH100\b", "h100-sxm"),  # "NVIDIA H100 80GB HBM3"
    (r"\bB200\b", "b200"),  # "NVIDIA B200" (not "NVIDIA GB200")
    (r"\bA100\b(?=.*\bPCIE\b)(?=.*\b80GB\b)", "a100-80gb-pcie"),  # "NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"
    (r"\bA100\b.*\bPCIE\b", "a100-40gb-pcie"),  # "NVIDIA A100-PCIE-40GB"
    (r"\bA100\b.*\b40GB\b", "a100-40gb"),  # "NVIDIA A100-SXM4-40GB"
    (r"\bA100\b", "a100-80gb"),  # "NVIDIA A100-SXM4-80GB"
    (r"\bL40S\b", "l40s"),
    (r"\bL40\b", "l40"),
    (r"\bL4\b", "l4"),
    (r"\bA10\b", "a10"),
    (r"\bRTX 4090$", "rtx4090"),  # "NVIDIA GeForce RTX 4090"
    (r"\bV100\b.*\bSXM2\b.*\b32GB\b", "v100-sxm2-32gb"),  # "Tesla V100-SXM2-32GB"
    (r"\bV100\b.*\bSXM2\b.*\b16GB\b", "v100-sxm2-16gb"),
    (r"\bMI300X\b", "mi300x"),  # "AMD Instinct MI300X"
)


def _key(name: str) -> str:
    """'NVIDIA H100 SXM' -> 'h100-sxm': lower case, runs of spaces and underscores as one dash, no vendor."""
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    return re.sub(r"^(nvidia|amd)-", "", key)


def _index() -> dict[str, Gpu]:
    index: dict[str, Gpu] = {}
    for gpu in GPUS:
        for key in dict.fromkeys((_key(gpu.name), *gpu.aliases)):
            assert key not in index, f"{key!r} names both {index[key].name} and {gpu.name}"
            index[key] = gpu
    return index


_BY_KEY = _index()


def list_gpus() -> list[Gpu]:
    """Every GPU in the table, in table order (NVIDIA by generation, then AMD)."""
    return list(GPUS)


def from_device_name(cuda_device_name: str) -> Gpu | None:
    """The GPU torch.cuda.get_device_name() names (e.g. 'NVIDIA H100 80GB HBM3'), or None if not in the table."""
    name = cuda_device_name.strip()
    for pattern, key in _DEVICE_NAMES:
        if re.search(pattern, name, re.IGNORECASE):
            return _BY_KEY[key] if key else None
    return None


def lookup(name: str) -> Gpu:
    """The GPU called `name`: a short name ('h100', 'a100-80gb', 'mi300x') or its table name ('H100 SXM'), in any
    case. Unknown names suggest the nearest ones (a name as torch reports it is from_device_name's job)."""
    if not isinstance(name, str):
        raise TfcalcError(f"GPU name must be a string, got {type(name).__name__}")
    gpu = _BY_KEY.get(_key(name))
    if gpu is not None:
        return gpu
    import difflib

    close = difflib.get_close_matches(_key(name), list(_BY_KEY), n=3, cutoff=0.5)
    hint = (f"did you mean {', '.join(close)}?" if close
            else f"known: {', '.join(g.aliases[0] for g in GPUS)}")
    raise TfcalcError(f"unknown GPU {name!r}; {hint} (`tfcalc gpus` lists them)")
