"""Ctrl-C, always honoured, never a traceback or an abort.

`tfcalc` exits with EXIT_INTERRUPTED (130, the shell's 128 + SIGINT) and one line when interrupted. A
KeyboardInterrupt raised while a C extension initialises (importing torch) can abort the process (exit 134), so
`import_torch()` holds SIGINT for the length of the import and delivers it right after.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

EXIT_INTERRUPTED = 130


@contextmanager
def held_interrupts():
    """Hold SIGINT (in the main thread) until the block ends, then raise KeyboardInterrupt if one came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def import_torch(what: str = "this command"):
    """torch, imported with SIGINT held (see the module docstring); not installed: one line saying which extra
    (tfcalc's plain install counts, plans and compares without it)."""
    try:
        with held_interrupts():
            import torch
    except ImportError as e:
        from .errors import TfcalcError

        raise TfcalcError(f"{what} needs torch ({e.name or 'torch'} cannot be imported): pip install "
                          "'tfcalc[torch]' (pip install torch==2.13.0 first for a CPU build)") from None
    return torch
