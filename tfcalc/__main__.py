"""`tfcalc` and `python -m tfcalc`."""

import atexit
import gc
import os
import sys

# The commands that never import torch: short processes that must start fast (benchmarks/startup.py).
PURE_PYTHON = {"count", "compare", "presets"}


def main() -> None:
    # pydantic scans every installed distribution's entry points for plugins when the first model is built;
    # with torch installed that scan costs 0.14 s of `tfcalc count`'s 0.7 s here (benchmarks/startup.py).
    # The CLI uses no plugins. Library users keep theirs, and setting the variable yourself still wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if len(sys.argv) > 1 and sys.argv[1] in PURE_PYTHON:
        # Such a run allocates the long-lived objects of its imports (modules, classes, pydantic's schema) and
        # little else: the collector's passes over them, during start-up and at exit, find nothing to free and
        # took ~60 ms of `count`'s ~0.5 s here. Cyclic garbage, if any, goes with the process.
        gc.disable()
        atexit.register(gc.freeze)
    from .cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
