"""Signals held while a step writes what a run left (docs/operations.md#recovery-after-a-stop).

SIGTERM, SIGINT and SIGHUP stop a supervised run at once: its supervisor stops the tree
and records the run `interrupted`. Outside a run (while the step sets it up, stores its
weights, writes its record or scores its output) the same signal would end the step
midway and leave half of its records; Snakemake would then remove the rest. Held instead,
it lets the step finish what it is writing; a run that starts with one held stops at
once, as if the signal had come then.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

HELD = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_held: list[int] = []


def pending() -> int | None:
    """The first signal held and not yet acted on, or None."""
    return _held[0] if _held else None


@contextmanager
def held_signals() -> Iterator[list[int]]:
    """Hold HELD signals in this block (the main thread only; elsewhere none can be
    handled); yields the list of those received, in order."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    _held.clear()
    previous = {signum: signal.signal(signum, _hold) for signum in HELD}
    try:
        yield _held
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _hold(signum, _frame) -> None:
    _held.append(signum)
