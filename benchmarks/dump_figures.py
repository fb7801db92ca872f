"""Dump every figure tfcalc's counting and planning commands report, so that a refactor can be shown to change none.

    python benchmarks/dump_figures.py --out baseline.json          # run everything, write the dump
    python benchmarks/dump_figures.py --compare baseline.json      # rerun every entry of a dump, show what differs
    python benchmarks/dump_figures.py --only llama3 --out x.json   # only the sources whose name holds "llama3"

Options: `-j N` runs N worker processes (default: 2, or 1 where the machine has one core); `--src DIR` imports
tfcalc from the checkout DIR (a `git worktree` of an older commit, say) ahead of the installed one; `--tests DIR`
is the tests/ folder the Hugging Face fixtures are imported from (default: the tests/ beside the tfcalc imported).

To hold the working tree against a commit:

    git worktree add /tmp/base <commit>
    cd /tmp/base && python -I /path/to/benchmarks/dump_figures.py --src /tmp/base --out /tmp/baseline.json
    cd /path/to/checkout && python benchmarks/dump_figures.py --compare /tmp/baseline.json

Sources: every preset (`tfcalc presets`), and every Hugging Face config.json the tests hold as module-level
fixtures (FIXTURES below), each written to a folder of its own and passed as `--hf-config`. Commands, run in this
process through the real command line (typer's CliRunner on `tfcalc.cli.app`) with `--json`, for each source:
`count` (the default workload, prefill, decode), `memory` (inference in several dtypes and with tensor parallelism;
training under each recompute mode and several layouts, once with `--gpu` so the fit and the smallest-layout
search are in), `infer` (with and without tensor parallelism) and `train` (a budget, a time and cost, the MFU and
HFU of a run under each recompute mode, the compute-optimal split); and a few sweeps and model-free commands once
(source `(global)`). Lengths are capped at what each model's positions allow.

The dump is one JSON object, keys sorted:

- `entries`: `"<source>|<command>|<args>"` -> the command's JSON output (exit code 0, nothing on stderr), or
  `{"exit": code, "output": stdout and stderr}` (plus `json` when stdout parsed, `exception` on a crash).
  A refusal is a figure too.
- `sources`: `"preset:<name>"` -> `{"preset": name}`, `"hf:<fixture>"` -> `{"config": {...}, "from": where}`:
  the inputs, so that `--compare` reruns the same commands on the same configs without importing the tests.
- `skipped`: the Hugging Face fixtures tfcalc refuses (their `count` entry holds the refusal), and test modules
  that could not be imported.

Nothing in it depends on the run: no timings, and the folder the configs are written to reads `<configs>`.
`--compare` reruns exactly the baseline's entries (the same argument lists, the configs from its `sources`),
prints each key whose value differs with the differing leaf paths, then `identical: N entries` (exit 0) or
`DIFFERENT: K of N entries` (exit 1).
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

CONFIGS = "<configs>"  # what the folder holding the written config.json files reads as, in every output
GLOBAL = "(global)"  # the source of the commands that name their models themselves, or none
GPU_MEMORY, GPU_PEAK = "h100-sxm", "h100"


# ---- sources ----------------------------------------------------------------------------------------------------

def _one(value: dict) -> dict[str, dict]:
    return {"": value}


def _each(value: dict) -> dict[str, dict]:  # name -> config
    return dict(value)


def _first(value: dict) -> dict[str, dict]:  # name -> (config, preset or total)
    return {name: entry[0] for name, entry in value.items()}


def _typed(value: dict) -> dict[str, dict]:  # model_type -> config without it
    return {name: {"model_type": name, **config} for name, config in value.items()}


def _listed(value: list) -> dict[str, dict]:  # [config, ...]
    return {f"{i}-{config['model_type']}": config for i, config in enumerate(value)}


def _gemma4(value: dict) -> dict[str, dict]:  # name -> published entry; the config as the test builds it
    return {name: {"model_type": "gemma4", "text_config": entry["text_config"],
                   "tie_word_embeddings": entry["tie_word_embeddings"]} for name, entry in value.items()}


def _gpt_oss(published: Callable[[int, int], dict]) -> dict[str, dict]:  # the presets test's parameters
    return {"gpt-oss-20b": published(24, 32), "gpt-oss-120b": published(36, 128)}


# test module -> [(module-level name, how to read it: name -> config.json dict)]
FIXTURES: dict[str, list[tuple[str, Callable[[Any], dict[str, dict]]]]] = {
    "test_hf": [("PUBLISHED", _first)],
    "test_hf_alibi": [("PUBLISHED", _first), ("BLOOM_SMALL", _one), ("MPT_SMALL", _one)],
    "test_hf_families_more": [("PUBLISHED", _each), ("CHECK", _typed)],
    "test_hf_parallel": [("PUBLISHED", _each), ("CHECKED", _listed)],
    "test_hf_gpt_oss": [("_PUBLISHED", _one), ("_published", _gpt_oss)],
    "test_hf_gemma4": [("PUBLISHED", _gemma4)],
    "test_file_inputs": [("BASE", _each)],
    "test_hf_deepseek": [("DEEPSEEK_V3", _one), ("PUBLISHED_V2", _first), ("BASE_V3", _one)],
    "test_hf_smollm3_cohere2": [("SMOLLM3_3B", _one)],
    "test_check_hf": [("CONFIGS", _typed)],
    "test_hf_lfm2": [("LFM2_1_2B", _one), ("LFM2_8B_A1B", _one)],
    "test_hf_nemotron_h": [("NEMOTRON_H_8B", _one)],
    "test_hf_qwen3_next": [("TINY", _one), ("QWEN3_NEXT_80B_A3B", _one), ("QWEN3_5_TINY", _one),
                           ("QWEN3_5_MOE_TINY", _one)],
}


def fixture_sources(tests: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """The Hugging Face configs of the test modules in `tests`, by source name, and the modules that failed."""
    sys.path.insert(0, str(tests))
    sources, failed = {}, {}
    for module_name, attributes in FIXTURES.items():
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # noqa: BLE001 - a module that cannot be imported is reported, not fatal
            failed[module_name] = f"import failed: {type(e).__name__}: {e}"
            continue
        if Path(module.__file__).resolve().parent != tests.resolve():
            raise SystemExit(f"{module_name} was imported from {module.__file__}, not from {tests}")
        for attribute, read in attributes:
            for name, config in read(getattr(module, attribute)).items():
                source = "hf:" + ".".join(part for part in (module_name, attribute.strip("_"), name) if part)
                sources[source] = {"config": json.loads(json.dumps(config)),
                                   "from": f"tests/{module_name}.py {attribute}" + (f"[{name!r}]" if name else "")}
    return sources, failed


def _folder(source: str) -> str:
    return source.split(":", 1)[1]


def write_configs(sources: dict[str, dict], root: Path) -> None:
    for source, info in sources.items():
        if "config" in info:
            folder = root / _folder(source)
            folder.mkdir(parents=True)
            # keys sorted, as the dump stores them: a compare writes the very file the baseline read
            (folder / "config.json").write_text(json.dumps(info["config"], indent=1, sort_keys=True))


# ---- the commands -----------------------------------------------------------------------------------------------

def plan(spec: dict) -> list[tuple[str, str]]:
    """The (command, arguments) to run for a model, its `count --json` spec in hand (the default workload's)."""
    limit = spec.get("max_positions")  # the rows of a learned table (and T5/ALiBi-style: none)
    cap = (lambda n: n) if limit is None else (lambda n: max(1, min(n, limit)))
    prefill, decode, context = cap(512), cap(1025) - 1, cap(2049) - 1  # a new token beside the cached ones
    train_n = min(256, spec["seq_len"])
    train = f"--phase train -N {train_n}"
    runs = [
        ("count", ""),
        ("count", f"--phase prefill --seq-len {prefill}"),
        ("count", f"--phase decode --context {decode}"),
        ("count", f"--phase train -N {train_n} -B 4"),
        # inference memory
        ("memory", f"--dtype bf16 --context {context} --gpu {GPU_MEMORY}"),
        ("memory", "--dtype int4 --tp 2"),
        ("memory", f"--dtype fp8 --kv-dtype fp8 --phase prefill --seq-len {prefill} -B 8"),
        ("memory", f"--dtype fp32 --context {decode} --tp 4 --gpu a100-80gb"),
        # training memory
        ("memory", f"{train} --recompute none"),
        ("memory", f"{train} --recompute selective --gpu {GPU_MEMORY}"),
        ("memory", f"{train} --recompute full"),
        ("memory", f"{train} --zero 1 --dp 8"),
        ("memory", f"{train} --zero 3 --dp 8"),
        ("memory", f"{train} --tp 2 --sp"),
        ("memory", f"{train} --pp 2"),
        ("memory", f"{train} --pp 4 --tp 2 -B 2"),
        ("memory", f"{train} --cp 2 --precision fp32 --optimizer sgd"),
        ("memory", f"{train} --zero 2 --dp 4 --precision fp16-mixed --optimizer adam8bit --recompute selective"),
        ("memory", f"{train} --precision bf16 --recompute full --tp 2 --pp 2 --dp 2 --zero 1 --gpu {GPU_MEMORY}"),
        # inference roofline
        ("infer", f"--gpu {GPU_PEAK} --batch-size 4 --context {context}"),
        ("infer", f"--gpu {GPU_PEAK} --batch-size 4 --context {context} --tp 2"),
        ("infer", f"--gpu {GPU_PEAK} --batch-size 32 --context {decode} --dtype fp8 --kv-dtype fp8"),
        # training budget
        ("train", "--tokens 300B"),
        ("train", f"--tokens 300B --gpus 1024 --gpu {GPU_PEAK} --mfu 0.4 --price 2.5"),
        *(("train", f"--tokens 300B --gpus 64 --gpu {GPU_PEAK} --tokens-per-second 1e6 --recompute {mode}")
          for mode in ("none", "selective", "full")),
        ("train", "--flops-budget 1e24"),
    ]
    if spec.get("n_experts", 1) > 1:
        runs.append(("memory", f"{train} --ep 2 --dp 2"))
        runs.append(("memory", f"{train} --ep 2 --dp 4 --zero 1 --tp 2"))
    return runs


GLOBAL_RUNS = [
    ("presets", ""),
    ("train", "--flops-budget 1e24"),
    ("train", "--flops-budget 5.76e23"),
    ("count", "-p gpt2,gpt2-medium,llama3-8b,mixtral-8x7b -N 128,512"),
    ("count", "-p llama3-8b --phase decode --context 1k..16kx4"),
    ("compare", "gpt2 bert-base llama3-8b t5-small --seq-len 256"),
    ("memory", f"-p llama3-8b --context 1k..32kx2 -B 8 --gpu {GPU_MEMORY}"),
    ("memory", "-p llama3-8b --phase train -N 256,1024 --zero 3 --dp 8"),
    ("infer", f"-p llama3-8b --gpu {GPU_PEAK} -B 1,8,64 --tp 1,2"),
]


def key(source: str, command: str, args: str) -> str:
    return f"{source}|{command}|{args}"


def argv(source: str, info: dict, command: str, args: str, root: Path) -> list[str]:
    """The command line of an entry: the source's flag (none for GLOBAL), the arguments, `--json`."""
    if source == GLOBAL:
        where = []
    elif "preset" in info:
        where = ["--preset", info["preset"]]
    else:
        where = ["--hf-config", str(root / _folder(source) / "config.json")]
    return [command, *where, *args.split(), "--json"]


class Runner:
    """Runs one command line in this process, as `tfcalc` would, and returns what it reports."""

    def __init__(self, root: Path):
        from typer.testing import CliRunner

        from tfcalc.cli import app

        self.app, self.runner, self.root = app, CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"}), str(root)

    def __call__(self, arguments: list[str]) -> Any:
        result = self.runner.invoke(self.app, arguments)
        stdout = result.stdout.replace(self.root, CONFIGS)
        stderr = result.stderr.replace(self.root, CONFIGS)
        try:
            parsed = json.loads(stdout)
        except ValueError:
            parsed = None
        if result.exit_code == 0 and not stderr and parsed is not None:
            return parsed
        value: dict[str, Any] = {"exit": result.exit_code, "output": stdout + stderr}
        if parsed is not None:
            value["json"] = parsed
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            value["exception"] = f"{type(result.exception).__name__}: {result.exception}"
        return value


_RUNNER: Runner | None = None


def _refused(value: Any) -> bool:
    return isinstance(value, dict) and value.get("exit", 0) != 0


def _work(task: tuple[str, dict, list[tuple[str, str]] | None, str]) -> dict[str, Any]:
    """One source's entries: the given (command, args), or, with None, `count` first and then plan()'s."""
    global _RUNNER
    source, info, runs, root = task
    if _RUNNER is None or _RUNNER.root != root:
        _RUNNER = Runner(Path(root))
    out = {}
    if runs is None:
        first = _RUNNER(argv(source, info, "count", "", Path(root)))
        out[key(source, "count", "")] = first
        if _refused(first):
            return out  # the caller lists it as skipped
        runs = plan(first.get("json", first)["spec"])[1:]
    for command, args in runs:
        out[key(source, command, args)] = _RUNNER(argv(source, info, command, args, Path(root)))
    return out


def run_all(tasks: list[tuple[str, dict, list | None]], root: Path, jobs: int) -> dict[str, Any]:
    """Every task's entries, in a pool of `jobs` processes (forked: they share the imports)."""
    tasks = [(*t, str(root)) for t in tasks]
    # the big models first, so that the pool does not wait on one at the end
    tasks.sort(key=lambda t: (t[0] != GLOBAL, not t[0].startswith("preset:")))
    entries: dict[str, Any] = {}
    if jobs > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for part in pool.imap_unordered(_work, tasks, chunksize=1):
                entries.update(part)
    else:
        for task in tasks:
            entries.update(_work(task))
    return entries


# ---- comparing --------------------------------------------------------------------------------------------------

def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)  # NaN == NaN here, unlike ==


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    """A JSON value flattened to {"a.b[2].c": leaf}."""
    if isinstance(value, dict):
        return {k: v for name, item in value.items()
                for k, v in _leaves(item, f"{path}.{name}" if path else name).items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _leaves(item, f"{path}[{i}]").items()} or {path: []}
    return {path: value}


_MISSING = object()  # a key or leaf one side lacks


def _show(value: Any) -> str:
    text = "<missing>" if value is _MISSING else json.dumps(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _outcome(value: Any) -> str:
    if not _refused(value):
        return "exit 0 (JSON)"
    lines = value["output"].strip().splitlines() or [value.get("exception", "")]
    return f"exit {value['exit']}: {lines[0][:200]}" + (f" (+{len(lines) - 1} lines)" if len(lines) > 1 else "")


def compare(baseline: dict[str, Any], current: dict[str, Any], most: int = 12) -> int:
    """Print every key whose value differs; return how many do."""
    different = 0
    for k in sorted(set(baseline) | set(current)):
        a, b = baseline.get(k, _MISSING), current.get(k, _MISSING)
        if a is not _MISSING and b is not _MISSING and _canonical(a) == _canonical(b):
            continue
        different += 1
        print(f"{k}")
        if a is _MISSING or b is _MISSING:
            print(f"    baseline {_show(a)}  current {_show(b)}")
            continue
        if _refused(a) != _refused(b):  # one side ran, the other was refused: say how, not every leaf
            print(f"    baseline {_outcome(a)}\n    current  {_outcome(b)}")
            continue
        la, lb = _leaves(a), _leaves(b)
        # the leaves both have that differ first, then those one side lacks
        paths = sorted((p for p in set(la) | set(lb) if p not in la or p not in lb
                        or _canonical(la[p]) != _canonical(lb[p])), key=lambda p: (p not in la, p not in lb, p))
        for p in paths[:most]:
            print(f"    {p or '(value)'}: {_show(la.get(p, _MISSING))} -> {_show(lb.get(p, _MISSING))}")
        if len(paths) > most:
            print(f"    ... and {len(paths) - most} more leaves")
    return different


# ---- main ---------------------------------------------------------------------------------------------------------

def _import_tfcalc(src: Path | None):
    if src is not None:
        sys.path.insert(0, str(src.resolve()))
    import tfcalc

    where = Path(tfcalc.__file__).resolve().parent.parent
    if src is not None and where != src.resolve():
        raise SystemExit(f"tfcalc was imported from {tfcalc.__file__}, not from {src}")
    print(f"tfcalc from {tfcalc.__file__}", file=sys.stderr)
    return where


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the dump here")
    parser.add_argument("--compare", type=Path, metavar="BASELINE", help="rerun a dump's entries and diff them")
    parser.add_argument("--only", metavar="SUBSTRING", help="only the sources whose name holds it")
    parser.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    parser.add_argument("--src", type=Path, help="import tfcalc from this checkout (ahead of the installed one)")
    parser.add_argument("--tests", type=Path, help="the tests/ folder holding the fixtures (default: beside tfcalc)")
    options = parser.parse_args()
    if not options.out and not options.compare:
        parser.error("give --out FILE, --compare BASELINE, or both")
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # as `tfcalc` itself does
    checkout = _import_tfcalc(options.src)
    start = time.perf_counter()
    skipped: dict[str, str] = {}
    baseline = json.loads(options.compare.read_text()) if options.compare else None
    if baseline is not None:  # the baseline's inputs and commands, rerun
        sources = baseline["sources"]
        by_source: dict[str, list[tuple[str, str]]] = {}
        for k in baseline["entries"]:
            source, command, args = k.split("|", 2)
            by_source.setdefault(source, []).append((command, args))
        tasks = [(s, sources.get(s, {}), runs) for s, runs in by_source.items()]
        skipped = baseline.get("skipped", {})
    else:
        runner_root = Path(tempfile.mkdtemp(prefix="tfcalc-presets-"))
        names = sorted(Runner(runner_root)(["presets", "--json"]))
        shutil.rmtree(runner_root)
        sources = {f"preset:{name}": {"preset": name} for name in names}
        fixtures, failed = fixture_sources(options.tests or checkout / "tests")
        sources.update(fixtures)
        skipped.update({f"tests/{m}.py": why for m, why in failed.items()})
        tasks = [(GLOBAL, {}, GLOBAL_RUNS), *((s, info, None) for s, info in sources.items())]
    if options.only:
        tasks = [t for t in tasks if options.only in t[0]]
    root = Path(tempfile.mkdtemp(prefix="tfcalc-dump-"))
    try:
        write_configs({s: info for s, info, _ in tasks if s != GLOBAL}, root)
        entries = run_all(tasks, root, options.jobs)
    finally:
        shutil.rmtree(root)
    entries = json.loads(json.dumps(entries))  # the types a dump reads back as
    names = {t[0] for t in tasks}
    if baseline is None:
        for source in names:
            value = entries.get(key(source, "count", ""))
            if source.startswith("hf:") and _refused(value):
                skipped[source] = value["output"].strip()
    seconds = time.perf_counter() - start
    print(f"{len(entries)} entries from {len(names)} sources in {seconds:.1f} s", file=sys.stderr)
    if options.out:
        dump = {"entries": entries, "skipped": skipped,
                "sources": {s: info for s, info in sources.items() if s in names}}
        options.out.write_text(json.dumps(dump, sort_keys=True, indent=1) + "\n")
    if baseline is None:
        return 0
    wanted = {k: v for k, v in baseline["entries"].items() if k.split("|", 1)[0] in names}
    different = compare(wanted, entries)
    if different:
        print(f"DIFFERENT: {different} of {len(wanted)} entries")
        return 1
    print(f"identical: {len(wanted)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
