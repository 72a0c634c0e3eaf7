"""Interrupting a ring (docs/operations.md#recovery-after-a-stop): SIGINT or SIGTERM to Snakemake
stops its executions now, and a step waiting on a SLURM job through srun (the lock's probe).

Snakemake's local executor answers SIGINT by waiting for every running job to finish, and
its jobs may run for hours. The Snakemake process that drives a ring therefore relays the
signal to the supervisors of its in-flight executions: each stops its program's tree
(SIGTERM, the grace for a last checkpoint, SIGKILL) and records `interrupted`
(core/interrupts.py says what runs again).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

import psutil

from ..core.ledger import emit_event
from .resident_client import SCRIPT

RELAYED = (signal.SIGINT, signal.SIGTERM)


def is_supervisor(cmdline: list[str]) -> bool:
    """The execute rule's command, `python -P …/resident_client.py step execute RING …`,
    or the same step as `python -m ringflow step execute RING …`."""
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
    return _descendants(pid, lambda child: child if is_supervisor(child.cmdline()) else None)


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


def relay(ring_root, signum: int) -> list[int]:
    """Send SIGTERM to every in-flight execution's supervisor that did not get the signal,
    and to every step waiting on a SLURM job through srun."""
    foreground = _terminal_group() if signum == signal.SIGINT else None
    if waiting := _terminate(srun_waiters(), foreground):
        print(f"ringflow: {signal.Signals(signum).name}: cancelling the SLURM job that "
              f"{len(waiting)} step(s) wait for (the lock's probe)", file=sys.stderr)  # fmt: skip
    sent = _terminate(supervisors(), foreground)
    if sent:
        name = signal.Signals(signum).name
        emit_event(ring_root, "interrupt_relayed", signal=name, supervisors=sent)
        print(
            f"ringflow: {name}: stopping {len(sent)} execution(s) in flight; they are recorded "
            "interrupted and run again when the ring is run again",
            file=sys.stderr,
        )
    return sent


def install_relay(ring_root) -> bool:
    """Relay SIGINT and SIGTERM to the executions, then let Snakemake handle them as usual."""
    for signum in RELAYED:
        previous = signal.getsignal(signum)

        def handler(sig, frame, previous=previous):
            relay(ring_root, sig)
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
