"""What the caller asks of the sandbox, and the plan it gets back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ringflow.errors import SandboxError

NOBODY = 65534


@dataclass(frozen=True)
class SandboxRequest:
    """One execution's folders and how tightly to confine its program (SPEC 3, 7.6)."""

    solution_dir: Path  # the execution's working copy (already prepared by the caller)
    input_dir: Path  # the view's inputs/
    output_dir: Path  # where predictions go (exists, empty)
    progress_file: Path  # solution_dir / "progress.json" (may not exist yet)
    writable_dirs: tuple[Path, ...] = ()  # weights folders in solution_dir, when training
    hidden_paths: tuple[Path, ...] = ()  # labels, the store, the ring's folder: never visible
    blind: bool = False  # no network
    uid: int = NOBODY
    gid: int = NOBODY
    staging_root: Path | None = None  # user-only mode: where copies the uid can reach live
    allow_readable_hidden: bool = False  # user-only mode: note, rather than refuse, leaks


@dataclass
class SandboxPlan:
    """How to start the program confined, and how to clean up after it.

    `argv`, `env` and `cwd` go to the supervisor as they are; the paths in
    `env` are those the program sees. Call `finish()` once the program and
    all its processes have ended: it brings results back, returns ownership
    and removes any staging folder. It may be called more than once.
    """

    mode: str  # "bwrap" | "user-only"
    argv: list[str]
    env: dict[str, str]
    cwd: str
    network_isolated: bool
    notes: list[str] = field(default_factory=list)
    # Executables of the sandbox itself: they end with the program, and a stop must send
    # them no SIGTERM (bubblewrap would die at once and SIGKILL the program).
    wrappers: list[str] = field(default_factory=list)
    _cleanups: list[Callable[[], list[str] | None]] = field(default_factory=list, repr=False)
    _finished: bool = field(default=False, repr=False)

    def finish(self) -> None:
        """Copy results back (user-only), restore ownership, remove the stage; idempotent.

        Every cleanup step runs even when an earlier one fails; the first
        failure is raised afterwards as a SandboxError.
        """
        if self._finished:
            return
        self._finished = True
        failures: list[str] = []
        for cleanup in self._cleanups:
            try:
                self.notes.extend(cleanup() or [])
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
        if failures:
            raise SandboxError("cleaning up after the sandbox failed: " + "; ".join(failures))
