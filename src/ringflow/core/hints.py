"""Commands ringflow prints for the user to type, as they work where the user reads them:
the summary's deploy line, a digest's report line, a repair a refusal names."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


def shown_path(path: Path) -> str:
    """A path as short as it can be said from here: relative below the current folder."""
    relative = os.path.relpath(path, Path.cwd())
    return str(path) if relative.startswith("..") else relative


def ringflow_command(cwd: Path | None = None) -> str:
    """`ringflow` as whoever reads this can type it where they are: the plain name where it
    is on PATH (an activated environment), `./ringflow` in a checkout's root (the launcher
    that needs none), else this environment's own `ringflow` by its path."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    own = Path(sys.executable).parent / "ringflow"
    on_path = shutil.which("ringflow")
    if on_path and (not own.exists() or Path(on_path).resolve() == own.resolve()):
        return "ringflow"
    launcher, checkout_own = cwd / "ringflow", cwd / ".venv" / "bin" / "ringflow"
    in_checkout = launcher.is_file() and os.access(launcher, os.X_OK) and checkout_own.exists()
    if in_checkout and (not own.exists() or checkout_own.resolve() == own.resolve()):
        return "./ringflow"
    if own.exists():
        relative = os.path.relpath(own, cwd)
        return shlex.quote(str(own) if relative.startswith("..") else relative)
    return "ringflow"


def ringflow_hint(*args: str | Path) -> str:
    """A whole ringflow command line, its paths shortened and quoted for a shell."""
    words = [shown_path(a) if isinstance(a, Path) else a for a in args]
    return " ".join([ringflow_command(), *map(shlex.quote, words)])
