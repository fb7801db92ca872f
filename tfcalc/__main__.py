"""`tfcalc` and `python -m tfcalc`."""

import os


def main() -> None:
    # pydantic scans every installed distribution's entry points for plugins when the first model is built;
    # with torch installed that scan costs 0.14 s of `tfcalc count`'s 0.7 s here (benchmarks/startup.py).
    # The CLI uses no plugins. Library users keep theirs, and setting the variable yourself still wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from .cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
