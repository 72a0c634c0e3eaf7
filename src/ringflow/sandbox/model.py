"""What the caller asks of the sandbox, and the plan it gets back."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ringflow.core.errors import SandboxError
from ringflow.core.settings import HostUids

from ..core.frozen import Frozen, frozen_record

NOBODY = 65534


@frozen_record
class SandboxRequest(Frozen):
    """One confined run: what the program may see and write (docs/contracts.md#sandbox).

    Every path is a host path. The execution's own folders appear inside under neutral
    names (/ringflow/solution, /ringflow/inputs, /ringflow/output); the interpreter's
    environment and the declared mounts appear read-only at their host paths.
    """

    solution_dir: Path  # the execution's working copy (already prepared by the caller)
    input_dir: Path  # the view's inputs (a ring-owned snapshot)
    output_dir: Path  # where predictions go (exists, empty)
    progress_file: Path  # solution_dir / "progress.json" (may not exist yet)
    writable_dirs: tuple[Path, ...] = ()  # weights folders in solution_dir, when training
    environment_dirs: tuple[Path, ...] = ()  # the interpreter's install: prefix, base prefix
    mounts: tuple[Path, ...] = ()  # sandbox.mounts: extra read-only folders
    hidden_paths: tuple[Path, ...] = ()  # never visible, even under a system folder
    network: bool = False  # sandbox.network: keep the host's network
    gpu_devices: tuple[tuple[str, str], ...] = ()  # (host, inside) device nodes of its GPUs
    uid: int = NOBODY  # as root: the unprivileged uid the program runs as (inside)
    gid: int = NOBODY
    host_uids: HostUids | None = None  # as root: the range of the run's host uid
    tmp_mb: int = 1024  # size of the fresh /tmp and of /dev/shm
    max_processes: int | None = None  # RLIMIT_NPROC inside the sandbox
    max_file_bytes: int | None = None  # RLIMIT_FSIZE inside the sandbox


@dataclass
class SandboxPlan:
    """How to start the program confined, and how to clean up after it.

    `argv`, `env` and `cwd` go to the supervisor as they are; the paths in `env` are those
    the program sees. `status_fd` (when not None) must be passed to the child: a shell
    inside the finished sandbox reports on it; `confirm_started()` reads that report
    after the run and raises SandboxError when the sandbox never came up (a failure of
    the machine, never of the program). Call `finish()` once the program and all its
    processes have ended; it may be called more than once.
    """

    mode: str  # "root" | "userns" | "none"
    argv: list[str]
    env: dict[str, str]
    cwd: str
    network_isolated: bool
    notes: list[str] = field(default_factory=list)
    # Executables of the sandbox itself: they end with the program, and a stop must send
    # them no SIGTERM (bubblewrap would die at once and SIGKILL the program).
    wrappers: list[str] = field(default_factory=list)
    status_fd: int | None = None
    # What kept the run's kernel state its own (sandbox/identity.py), for result.json.
    isolation: dict = field(default_factory=dict)
    extra_fds: list[int] = field(default_factory=list)  # also passed to the child
    # What the starting thread does just before the start; the run inherits what it gives
    # the thread (a session keyring of its own).
    spawn_setup: Callable[[], None] | None = field(default=None, repr=False)
    _status_read: int | None = field(default=None, repr=False)
    _owned_fds: list[int] = field(default_factory=list, repr=False)
    _cleanups: list[Callable[[], list[str] | None]] = field(default_factory=list, repr=False)
    _finished: bool = field(default=False, repr=False)

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """Every fd the child must be given: the started marker and bwrap's own."""
        first = () if self.status_fd is None else (self.status_fd,)
        return first + tuple(self.extra_fds)

    def confirm_started(self) -> None:
        """Raise SandboxError when bubblewrap never started the program (setup failed)."""
        if self._status_read is None:
            return
        if self.status_fd is not None:
            _close(self.status_fd)
            self.status_fd = None
        chunks = []
        try:
            while True:
                try:
                    chunk = _read_nonblocking(self._status_read)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            _close(self._status_read)
            self._status_read = None
        report = b"".join(chunks).decode(errors="replace")
        if "started" not in report:
            raise SandboxError("bubblewrap did not start the program (sandbox set-up failed)")

    def finish(self) -> None:
        """Restore ownership and release what the plan holds; idempotent.

        Every cleanup step runs even when an earlier one fails; the first
        failure is raised afterwards as a SandboxError.
        """
        if self._finished:
            return
        self._finished = True
        for fd in (self.status_fd, self._status_read, *self._owned_fds):
            if fd is not None:
                _close(fd)
        self.status_fd = self._status_read = None
        self._owned_fds = []
        failures: list[str] = []
        for cleanup in self._cleanups:
            try:
                self.notes.extend(cleanup() or [])
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
        if failures:
            raise SandboxError("cleaning up after the sandbox failed: " + "; ".join(failures))


def _read_nonblocking(fd: int) -> bytes:
    os.set_blocking(fd, False)
    return os.read(fd, 65536)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
