"""Interrupting a ring (docs/operations.md#recovery-after-a-stop): SIGINT or SIGTERM to Snakemake
stops its executions now, and a step waiting on a SLURM job through srun (the lock's probe).

Snakemake's local executor answers SIGINT by waiting for every running job to finish, and
its jobs may run for hours. The Snakemake process that drives a ring therefore relays the
signal to the supervisors of its in-flight executions: each stops its program's tree
(SIGTERM, the grace for a last checkpoint, SIGKILL) and records `interrupted`
(core/interrupts.py says what runs again).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable

import psutil

from ..core.interrupts import mark_relayed
from ..core.ledger import emit_event
from .driver_steps import relay_to_steps
from .resident_client import SCRIPT

RELAYED = (signal.SIGINT, signal.SIGTERM)
SERVER_MODULE = "ringflow.workflow.resident_steps"


def command_words(cmdline: list[str]) -> list[str]:
    """A process's command as words. A resident step's title (resident_steps.py) reads as
    one string of words followed by empty ones."""
    words = [word for word in cmdline if word]
    return words[0].split() if len(words) == 1 else words


def is_supervisor(cmdline: list[str]) -> bool:
    """The execute rule's command, `python -P …/resident_client.py step execute RING …`,
    or the same step as `python -m ringflow step execute RING …` (a step started afresh,
    or a resident step's title)."""
    cmdline = command_words(cmdline)
    for at in range(1, len(cmdline) - 2):
        if cmdline[at + 1 : at + 3] != ["step", "execute"]:
            continue
        if cmdline[at - 1 : at + 1] == ["-m", "ringflow"]:
            return True
        if os.path.basename(cmdline[at]) == os.path.basename(SCRIPT) and cmdline[at - 1] == "-P":
            return True
    return False


def _descendants(pid: int | None, pick: Callable[[psutil.Process], psutil.Process | None]):
    """`pick(child)` of every descendant of `pid` (this process) where it gives one; a
    process that ends while looked at is passed over."""
    try:
        children = psutil.Process(pid or os.getpid()).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if (picked := pick(child)) is not None:
                found.append(picked)
        except psutil.Error:
            continue
    return found


def supervisors(pid: int | None = None) -> list[psutil.Process]:
    """The executions' processes below `pid` that the relay signals: a job's client or a
    step started afresh. A step the resident server forked shows the same command, and is
    told through its client or by the driver (driver_steps.py), once."""
    return _descendants(
        pid,
        lambda child: (
            child if is_supervisor(child.cmdline()) and not _forked_by_server(child) else None
        ),
    )


def _forked_by_server(proc: psutil.Process) -> bool:
    parent = proc.parent()
    return parent is not None and SERVER_MODULE in parent.cmdline()


def srun_waiters(pid: int | None = None) -> list[psutil.Process]:
    """Steps of the driver that wait on a SLURM job through `srun` (the lock's probe job):
    the parents of the driver's `srun` descendants. Told SIGTERM, such a step has srun
    cancel its job; Snakemake would otherwise wait for it to end."""
    return _descendants(pid, lambda child: child.parent() if child.name() == "srun" else None)


def _terminal_group() -> int | None:
    """The foreground process group of our terminal: Ctrl-C already reached it."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return None
    try:
        return os.tcgetpgrp(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def _terminate(procs: list[psutil.Process], foreground: int | None) -> list[int]:
    """SIGTERM to each of `procs` the terminal's Ctrl-C did not reach; their pids."""
    sent = []
    for proc in procs:
        try:
            if foreground is not None and os.getpgid(proc.pid) == foreground:
                continue  # the terminal's Ctrl-C reached it already: a second would cut its grace
            proc.send_signal(signal.SIGTERM)
            sent.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return sent


def relay(ring_roots, signum: int) -> list[int]:
    """Send SIGTERM to every in-flight execution's supervisor that did not get the signal,
    and to every step waiting on a SLURM job through srun; once, whichever rings the
    driver runs, each of which records it."""
    foreground = _terminal_group() if signum == signal.SIGINT else None
    if waiting := _terminate(srun_waiters(), foreground):
        print(f"ringflow: {signal.Signals(signum).name}: cancelling the SLURM job that "
              f"{len(waiting)} step(s) wait for (the lock's probe)", file=sys.stderr)  # fmt: skip
    found = supervisors()
    # Before the signal: each execution told keeps its records (core/interrupts.py).
    for ring_root in ring_roots:
        with contextlib.suppress(OSError):
            mark_relayed(ring_root, signum)
    sent = _terminate(found, foreground) + relay_to_steps(
        signum, foreground is not None and foreground == os.getpgrp()
    )
    if sent:
        name = signal.Signals(signum).name
        for ring_root in ring_roots:
            emit_event(ring_root, "interrupt_relayed", signal=name, supervisors=sent)
        print(
            f"ringflow: {name}: stopping {len(sent)} execution(s) in flight; they are recorded "
            "interrupted and run again when the ring is run again",
            file=sys.stderr,
        )
    return sent


def install_relay(ring_roots) -> bool:
    """Relay SIGINT and SIGTERM to the executions of the rings at `ring_roots`, then let
    Snakemake handle them as usual."""
    ring_roots = list(ring_roots)
    for signum in RELAYED:
        previous = signal.getsignal(signum)

        def handler(sig, frame, previous=previous):
            relay(ring_roots, sig)
            if callable(previous):
                previous(sig, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)

        try:
            signal.signal(signum, handler)
        except ValueError:  # not the main thread: nothing to relay from here
            return False
    return True
