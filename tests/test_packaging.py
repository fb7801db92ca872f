"""The wheel ships the presets, and an installed wheel finds them."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contains_presets_and_loads_them(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True)
    (wheel,) = tmp_path.glob("tfcalc-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {Path(n).name for n in names if n.startswith("tfcalc/presets/")}
    assert shipped == {p.name for p in (ROOT / "presets").glob("*.toml")}
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    code = "import tfcalc, tfcalc.presets as p; print(p.preset_dir()); print(tfcalc.count(tfcalc.load_preset('gpt2')).params.total)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(unpacked)},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(unpacked / "tfcalc" / "presets"), "124439808"]
