"""`tfcalc` and `python -m tfcalc`."""

import atexit
import codecs
import errno
import gc
import os
import signal
import sys

# The commands that never import torch: short processes that must start fast (benchmarks/startup.py).
PURE_PYTHON = {"count", "compare", "presets", "memory", "train", "infer"}
EXIT_INTERRUPTED, EXIT_WRITE_FAILED = 130, 1


# What tables and notes use beyond ASCII, and what a terminal that cannot show them gets instead (LC_ALL=C with
# PYTHONIOENCODING=ascii, a Latin-1 console, ...); anything else becomes '?'. rich draws its boxes in ASCII itself.
ASCII = {"·": ".", "✓": "ok", "✗": "x", "×": "x", "−": "-", "–": "-", "—": "-", "≤": "<=", "≥": ">=", "≈": "~",
         "…": "...", "→": "->", "←": "<-", "²": "^2", "³": "^3", "µ": "u", "█": "#", "▏": "|", "┃": "|", "━": "-"}


def _to_ascii(error: UnicodeEncodeError) -> tuple[str, int]:
    text = error.object[error.start:error.end]
    return "".join(ASCII.get(c, "?") for c in text), error.end


def _encodable_output() -> None:
    """stdout and stderr that cannot encode tfcalc's characters write ASCII stand-ins instead of raising."""
    codecs.register_error("tfcalc-ascii", _to_ascii)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "ascii"
        try:
            "·✓−≤".encode(encoding)
        except (UnicodeEncodeError, LookupError):
            try:
                stream.reconfigure(errors="tfcalc-ascii")
            except (AttributeError, ValueError):  # not a TextIOWrapper (a test's capture): leave it
                pass


def main() -> None:
    """Run the command; then make sure its output was written. Ctrl-C at any point (start-up included) exits with
    130 and one line; an output that cannot be written (a full disk, a closed pipe) with 1."""
    # pydantic scans every installed distribution's entry points for plugins when the first model is built;
    # with torch installed that scan costs 0.14 s of `tfcalc count`'s 0.7 s here (benchmarks/startup.py).
    # The CLI uses no plugins. Library users keep theirs, and setting the variable yourself still wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if sys.stdout is None:  # started with stdout closed (`>&-`): Python leaves sys.stdout None; nothing can be written
        if sys.stderr is not None:
            print("tfcalc: error: cannot write the output: stdout is closed", file=sys.stderr)
        sys.exit(EXIT_WRITE_FAILED)
    _encodable_output()
    if len(sys.argv) > 1 and sys.argv[1] in PURE_PYTHON:
        # Such a run allocates the long-lived objects of its imports (modules, classes, pydantic's schema) and
        # little else: the collector's passes over them, during start-up and at exit, find nothing to free and
        # took ~60 ms of `count`'s ~0.5 s here. Cyclic garbage, if any, goes with the process.
        gc.disable()
        atexit.register(gc.freeze)
    try:
        from .cli import main as cli_main

        cli_main()
        code = 0
    except KeyboardInterrupt:  # before the command line is parsed: importing typer, pydantic, rich
        print("tfcalc: error: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except SystemExit as e:
        code = e.code
    except OSError as e:  # writing the output failed (the library reports unreadable inputs itself)
        code = _write_failed(e)
    try:
        sys.stdout.flush()
    except OSError as e:
        code = _write_failed(e)
    if code == EXIT_INTERRUPTED:
        # CPython may end a process whose KeyboardInterrupt passed through an import by re-raising SIGINT (exit
        # -2), even when it was handled: leave with the documented code, the output flushed
        sys.stderr.flush()
        os._exit(code)
    # The work is done and written: a Ctrl-C from here on would raise inside the interpreter's exit handlers (torch
    # registers some), which print a traceback; let it end the process as the signal does (the shell shows 130)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(code)


def _write_failed(e: OSError) -> int:
    if e.errno != errno.EPIPE:  # a closed pipe (`| head`) is the reader's choice; say nothing
        print(f"tfcalc: error: cannot write the output: {e.strerror or e}", file=sys.stderr)
    # stdout stays unwritable: point it at /dev/null so that the interpreter's own flush at exit stays quiet
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_WRITE_FAILED


if __name__ == "__main__":
    main()
