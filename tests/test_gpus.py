"""The accelerator table (tfcalc.plan.gpus): figures pinned to datasheets, dense not sparse, memory in GiB, lookup
by every name, and no torch on import."""

import json
import subprocess
import sys
from decimal import Decimal

import pytest

from tfcalc import TfcalcError
from tfcalc.plan.gpus import DTYPES, GiB, from_device_name, list_gpus, lookup

MiB = 2**20
T = 10**12

# The "with sparsity" figures the datasheets headline, TFLOP/s (TOP/s for int8), as printed. A dense peak is at most
# half of one: 2:4 structured sparsity skips half the multiply-adds. Printed figures are rounded to their last
# digit, so half of "989" allows up to 494.75.
PUBLISHED_SPARSE = {
    # H100 datasheet (2023): BF16 1,979*, TF32 989*, FP8 3,958* -> 989.5 >= 989.4, 494.75 >= 494.7, 1,979 >= 1,978.9
    "H100 SXM": {"bf16": "1979", "fp16": "1979", "tf32": "989", "fp8": "3958", "int8": "3958"},
    # 1,513 / 2 = 756.5 >= 756 (the whitepaper's dense figure); 756 / 2 = 378; 3,026 / 2 = 1,513
    "H100 PCIe": {"bf16": "1513", "fp16": "1513", "tf32": "756", "fp8": "3026", "int8": "3026"},
    # 1,671 / 2 = 835.5; 835 / 2 = 417.5; 3,341 / 2 = 1,670.5
    "H100 NVL": {"bf16": "1671", "tf32": "835", "fp8": "3341", "int8": "3341"},
    "H200 SXM": {"bf16": "1979", "tf32": "989", "fp8": "3958", "int8": "3958"},
    "H200 NVL": {"bf16": "1671", "tf32": "835", "fp8": "3341", "int8": "3341"},
    "GH200 96GB": {"bf16": "1979", "tf32": "989", "fp8": "3958"},
    "GH200 144GB": {"bf16": "1979", "tf32": "989", "fp8": "3958"},
    # HGX B200, per GPU: FP16/BF16 4.5 PF*, TF32 2.2 PF*, FP8 9 PF* -> 2,250, 1,100, 4,500 TFLOP/s dense
    "B200": {"bf16": "4500", "fp16": "4500", "tf32": "2200", "fp8": "9000", "int8": "9000"},
    # A100 datasheet: BF16 312 | 624*, TF32 156 | 312*, INT8 624 | 1,248*
    "A100 40GB SXM": {"bf16": "624", "tf32": "312", "int8": "1248"},
    "A100 80GB SXM": {"bf16": "624", "tf32": "312", "int8": "1248"},
    "A100 40GB PCIe": {"bf16": "624", "tf32": "312", "int8": "1248"},
    "A100 80GB PCIe": {"bf16": "624", "tf32": "312", "int8": "1248"},
    # L4 datasheet: BF16 242*, TF32 120*, FP8 485* -> 121, 60, 242.5
    "L4": {"bf16": "242", "tf32": "120", "fp8": "485", "int8": "485"},
    "L40": {"bf16": "362.1", "tf32": "181", "fp8": "724"},
    # L40S datasheet: BF16 362.05 | 733*: 733 / 2 = 366.5 >= 362.05 (the dense figure is at a lower clock)
    "L40S": {"bf16": "733", "tf32": "366", "fp8": "1466", "int8": "1466"},
    "A10": {"bf16": "250", "tf32": "125", "int8": "500"},
    # Ada whitepaper, FP32 accumulate: BF16 165.2 / 330.4, TF32 82.6 / 165.2, FP8 330.3 / 660.6
    "GeForce RTX 4090": {"bf16": "330.4", "tf32": "165.2", "fp8": "660.6", "int8": "1321.2"},
    # MI300X datasheet: BF16 1,307.4 | 2,614.9 with sparsity -> 1,307.45 >= 1,307.4
    "MI300X": {"bf16": "2614.9", "fp16": "2614.9", "tf32": "1307.4", "fp8": "5229.8", "int8": "5229.8"},
}
NO_SPARSITY = {"V100 SXM2 32GB", "V100 SXM2 16GB"}  # Volta's tensor cores predate 2:4 sparsity

# Memory the driver reports (nvidia-smi's memory.total; rocm-smi's VRAM total for MI300X), from public logs. Each
# is above the vendor's "N GB" read as N * 10**9 bytes and at most N GiB: the vendor's GB here is GiB.
OBSERVED_TOTAL_BYTES = {
    "H100 SXM": 81_559 * MiB,  # NVIDIA H100 80GB HBM3 (AWS p5)
    "H100 PCIe": 81_559 * MiB,
    "H100 NVL": 95_830 * MiB,
    "H200 SXM": 143_771 * MiB,
    "H200 NVL": 143_771 * MiB,
    "GH200 144GB": 146_831 * MiB,  # NVIDIA GH200 144G HBM3e
    "B200": 182_784 * MiB,  # AWS p6-b200
    "A100 40GB SXM": 40_960 * MiB,  # AWS p4d
    "A100 80GB SXM": 81_920 * MiB,
    "L4": 23_034 * MiB,  # ECC on
    "L40S": 46_068 * MiB,  # ECC on
    "A10": 24_564 * MiB,
    "GeForce RTX 4090": 24_564 * MiB,
    "MI300X": 205_822_885_888,
}

# torch.cuda.get_device_name() strings -> table name (None: no datasheet rather than a wrong one)
DEVICE_NAMES = {
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100": "H100 SXM",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 80GB HBM2e": "H100 PCIe",  # only the PCIe card has HBM2e
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 141GB HBM3e": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA GH200 480GB": "GH200 96GB",
    "NVIDIA GH200 144G HBM3e": "GH200 144GB",
    "NVIDIA B200": "B200",
    "NVIDIA A100-SXM4-40GB": "A100 40GB SXM",
    "NVIDIA A100-SXM4-80GB": "A100 80GB SXM",
    "NVIDIA A100-PCIE-40GB": "A100 40GB PCIe",
    "NVIDIA A100 80GB PCIe": "A100 80GB PCIe",
    "NVIDIA A100-PCIE-80GB": "A100 80GB PCIe",
    "NVIDIA L4": "L4",
    "NVIDIA L40": "L40",
    "NVIDIA L40S": "L40S",
    "NVIDIA A10": "A10",
    "NVIDIA GeForce RTX 4090": "GeForce RTX 4090",
    "Tesla V100-SXM2-32GB": "V100 SXM2 32GB",
    "Tesla V100-SXM2-16GB": "V100 SXM2 16GB",
    "AMD Instinct MI300X": "MI300X",
    "NVIDIA A100-SXM4-40GB MIG 1g.5gb": None,  # a slice of the SMs
    "NVIDIA A10G": None,  # AWS's variant, less tensor throughput than the A10
    "NVIDIA GB200": None,
    "NVIDIA GeForce RTX 4090 D": None,
    "NVIDIA GeForce RTX 4090 Laptop GPU": None,
    "Tesla V100-PCIE-32GB": None,
    "Tesla T4": None,
    "Some Other GPU": None,
}


def _half_of_rounded(figure: str) -> int:
    """Half of a printed TFLOP/s figure plus half its last digit's unit, in FLOP/s: the most its dense peak can be."""
    decimals = len(figure.partition(".")[2])
    scale = 10**decimals
    return (int(figure.replace(".", "")) * 2 + 1) * T // (4 * scale)


def by_name():
    return {g.name: g for g in list_gpus()}


def test_required_gpus_and_short_names_are_there():
    for alias, name in {"h100-sxm": "H100 SXM", "h100": "H100 SXM", "h100-pcie": "H100 PCIe", "h100-nvl": "H100 NVL",
                        "h200": "H200 SXM", "b200": "B200", "a100-40gb": "A100 40GB SXM",
                        "a100-80gb": "A100 80GB SXM", "a100-80gb-pcie": "A100 80GB PCIe", "l4": "L4", "l40s": "L40S",
                        "rtx4090": "GeForce RTX 4090", "mi300x": "MI300X", "v100": "V100 SXM2 32GB",
                        "a10": "A10"}.items():
        assert lookup(alias).name == name


def test_every_gpu_has_a_source_and_positive_integer_figures():
    gpus = list_gpus()
    assert len({g.name for g in gpus}) == len(gpus) >= 12
    for g in gpus:
        assert g.source and any(str(year) in g.source for year in range(2017, 2027)), g.name  # datasheet and year
        assert g.aliases and all(a == a.lower() and " " not in a for a in g.aliases), g.name
        figures = [g.memory_bytes, g.bandwidth_bytes_per_s, *g.peak_flops.values()]
        assert all(type(x) is int and x > 0 for x in figures), g.name
        assert set(g.peak_flops) <= set(DTYPES) and {"fp32", "fp16"} <= set(g.peak_flops), g.name
        if "bf16" in g.peak_flops:
            assert g.peak_flops["bf16"] == g.peak_flops["fp16"], g.name  # both at FP32 accumulate


def test_published_figures_exactly():
    h100, mi300x = lookup("h100-sxm"), lookup("mi300x")
    assert h100.peak_flops == {"fp32": 67 * T, "tf32": 494_700_000_000_000, "bf16": 989_400_000_000_000,
                               "fp16": 989_400_000_000_000, "fp8": 1_978_900_000_000_000,
                               "int8": 1_978_900_000_000_000}
    assert h100.memory_bytes == 85_899_345_920 == 80 * 2**30 and h100.bandwidth_bytes_per_s == 3_350_000_000_000
    assert mi300x.peak_flops["bf16"] == 1_307_400_000_000_000 and mi300x.memory_bytes == 192 * 2**30
    assert lookup("l40s").peak_flops["bf16"] == 362_050_000_000_000  # no float rounding: 362.05e12 exactly
    assert lookup("a100-80gb").bandwidth_bytes_per_s == 2_039_000_000_000
    assert lookup("a100-80gb-pcie").bandwidth_bytes_per_s == 1_935_000_000_000
    assert lookup("b200").peak_flops["bf16"] == 2_250 * T and lookup("b200").memory_bytes == 180 * GiB
    assert lookup("h200").memory_bytes == 141 * GiB and lookup("h200").bandwidth_bytes_per_s == 4_800_000_000_000
    assert "bf16" not in lookup("v100").peak_flops and "fp8" not in lookup("a100").peak_flops


def test_dense_peaks_are_half_the_sparsity_figures_at_most():
    gpus = by_name()
    assert set(PUBLISHED_SPARSE) | NO_SPARSITY == set(gpus)
    for name, sparse in PUBLISHED_SPARSE.items():
        for dtype, figure in sparse.items():
            dense, half = gpus[name].peak_flops[dtype], _half_of_rounded(figure)
            assert dense <= half, (name, dtype)
            assert dense >= 0.98 * half, (name, dtype)  # not some other, smaller figure (FP16 accumulate, a slice)
    assert _half_of_rounded("1979") == 989_750_000_000_000  # (1,979 + 0.5) / 2 TFLOP/s


def test_memory_is_the_vendor_figure_in_gib():
    gpus = by_name()
    for name, observed in OBSERVED_TOTAL_BYTES.items():
        g = gpus[name]
        vendor_gb = g.memory_bytes // GiB
        assert g.memory_bytes == vendor_gb * GiB, name
        assert vendor_gb * 10**9 < observed <= g.memory_bytes, name  # 80 GB as 80e9 bytes would be under the driver
        assert observed >= 0.93 * g.memory_bytes, name  # what the driver and ECC keep is a few percent


def test_lookup_by_every_alias_name_and_case():
    index = {}
    for g in list_gpus():
        for alias in g.aliases:
            assert alias not in index, f"{alias} names {index.get(alias)} and {g.name}"
            index[alias] = g.name
            assert lookup(alias) is g and lookup(alias.upper()) is g and lookup(f" {alias} ") is g
        assert lookup(g.name) is g and lookup(g.name.lower().replace(" ", "_")) is g
    assert lookup("NVIDIA H100 SXM").name == "H100 SXM"
    with pytest.raises(TfcalcError):
        lookup("NVIDIA H100 80GB HBM3")  # a device name as torch reports it: from_device_name's job, not a guess


@pytest.mark.parametrize("device_name, expected", DEVICE_NAMES.items())
def test_from_device_name(device_name, expected):
    gpu = from_device_name(device_name)
    assert (None if gpu is None else gpu.name) == expected


def test_unknown_name_is_one_line_with_the_nearest_names():
    with pytest.raises(TfcalcError) as e:
        lookup("h100-sxn")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("unknown GPU 'h100-sxn'; did you mean h100-sxm")
    with pytest.raises(TfcalcError) as e:
        lookup("tpu-v5p")
    assert "\n" not in str(e.value) and "known: h100-sxm, h100-pcie" in str(e.value)
    with pytest.raises(TfcalcError, match="must be a string"):
        lookup(80)


def test_importing_the_table_does_not_import_torch():
    code = "import tfcalc.plan.gpus, sys; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_profile_datasheet_reads_this_table():
    from tfcalc.profile.peak import datasheet_for

    h100 = datasheet_for("NVIDIA H100 80GB HBM3")
    assert (h100.name, h100.peaks, h100.source) == ("H100 SXM", lookup("h100").peak_flops, lookup("h100").source)
    # the figures profile reported before the table moved here, unchanged
    for device, bf16, tf32, fp32 in [("NVIDIA H100 80GB HBM3", "989.4", "494.7", "67"),
                                     ("NVIDIA H100 PCIe", "756", "378", "51"),
                                     ("NVIDIA H100 NVL", "835.5", "417.5", "60"),
                                     ("NVIDIA H200", "989.4", "494.7", "67"),
                                     ("NVIDIA A100-SXM4-80GB", "312", "156", "19.5"),
                                     ("NVIDIA L40S", "362.05", "183", "91.6"), ("NVIDIA L4", "121", "60", "30.3"),
                                     ("NVIDIA A10", "125", "62.5", "31.2"),
                                     ("NVIDIA GeForce RTX 4090", "165.2", "82.6", "82.6")]:
        peaks = datasheet_for(device).peaks
        expected = [Decimal(x) * T for x in (bf16, bf16, tf32, fp32)]
        assert [peaks["bf16"], peaks["fp16"], peaks["tf32"], peaks["fp32"]] == expected, device
    assert datasheet_for("NVIDIA H200 NVL").peaks["bf16"] == 835_500_000_000_000  # was the H200 SXM's 989.4
    assert datasheet_for("Some Other GPU") is None


def test_the_gpus_command_lists_the_table_exactly():
    from typer.testing import CliRunner

    from tfcalc.cli import app
    from tfcalc.plan.gpus import list_gpus

    runner = CliRunner()
    doc = json.loads(runner.invoke(app, ["gpus", "--json"]).output)
    assert list(doc) == [g.aliases[0] for g in list_gpus()]
    h100 = doc["h100-sxm"]
    assert h100["memory_bytes"] == 80 * 2**30 and h100["peak_flops_per_s"]["bf16"] == 989_400_000_000_000
    assert h100["bandwidth_bytes_per_s"] == 3_350_000_000_000 and "datasheet" in h100["source"]
    table = runner.invoke(app, ["gpus"], env={"COLUMNS": "200"}).output
    assert "1,978.9" in table and "H100 SXM" in table  # exact decimals: 1,978,900,000,000,000 FLOP/s
    assert "(`tfcalc gpus` lists them)" in runner.invoke(app, ["memory", "-p", "gpt2", "--gpu", "h100-sxn"]).output
