"""The wheel ships the presets, and an installed wheel finds them."""

import os
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


BARE = ("import sys; sys.modules['torch'] = None; sys.modules['fvcore'] = None; sys.modules['transformers'] = None; "
        "sys.modules['matplotlib'] = None; from tfcalc.cli import main; sys.argv = ['tfcalc', *sys.argv[1:]]; main()")


def test_a_bare_install_says_which_extra_in_one_line():
    """README's main job installs tfcalc without extras: the commands that need torch say so in one line, exit 2;
    the rest work (torch and the others made unimportable in a child process)."""
    for args, said in [(["check", "-p", "gpt2", "-N", "64"], "tfcalc check needs torch"),
                       (["check", "--memory", "-p", "gpt2", "-N", "64"], "tfcalc check --memory needs torch"),
                       (["profile", "-p", "gpt2", "-N", "64"], "tfcalc profile needs torch"),
                       (["count", "-p", "gpt2", "-N", "64,128", "--plot", "x.png"], "--plot needs matplotlib")]:
        r = subprocess.run([sys.executable, "-c", BARE, *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and said in r.stderr and "pip install" in r.stderr, \
            (args, r.stderr)
    r = subprocess.run([sys.executable, "-c", BARE, "count", "-p", "gpt2", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and '"total": 124439808' in r.stdout


def test_any_locale_and_encoding_gets_its_output_without_a_traceback():
    """LC_ALL=C with PYTHONIOENCODING=ascii (containers, CI) or a Latin-1 console: tables and notes fall back to
    ASCII stand-ins (rich draws ASCII boxes), never a UnicodeEncodeError."""
    commands = [["count", "-p", "lfm2-1.2b"], ["memory", "-p", "llama3-8b", "--context", "4096", "--gpu", "h100"],
                ["infer", "-p", "llama3-8b", "--context", "4096", "--gpu", "h100"],
                ["train", "-p", "gpt2", "--tokens", "1e9", "--gpu", "h100", "--gpus", "8", "--mfu", "0.4"], ["presets"],
                ["count", "--help"]]
    for env in ({"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"}):
        for args in commands:
            r = subprocess.run([sys.executable, "-m", "tfcalc", *args], capture_output=True, timeout=120,
                               env={**os.environ, **env, "COLUMNS": "100"})
            assert r.returncode == 0 and b"Traceback" not in r.stderr, (env, args, r.stderr[-300:])
            if env["PYTHONIOENCODING"] == "ascii":
                r.stdout.decode("ascii")  # every byte ASCII
