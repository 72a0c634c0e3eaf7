"""Commands ringflow prints for the user to type, as they work where the user reads them:
the summary's deploy line, a digest's report line, a repair a refusal names."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


def where_the_user_is() -> Path | None:
    """The folder a relative path in a printed command is read from: the current one,
    unless this process was started in another. Snakemake's `--directory` changes folder
    after the shell started it, and the shell's `PWD` still names where its user types;
    there only whole paths are safe, so this gives None."""
    here = Path.cwd()
    started_in = os.environ.get("PWD")
    if started_in and os.path.isabs(started_in):
        try:
            if not os.path.samefile(started_in, here):
                return None
        except OSError:
            return None
    return here


def shown_path(path: Path) -> str:
    """A path as short as it can be said to the user: relative below the folder they are
    in, else whole."""
    here = where_the_user_is()
    if here is None:
        return str(Path(path).absolute())
    relative = os.path.relpath(path, here)
    return str(Path(path).absolute()) if relative.startswith("..") else relative


def ringflow_command(cwd: Path | None = None) -> str:
    """`ringflow` as whoever reads this can type it where they are: the plain name where it
    is on PATH (an activated environment), `./ringflow` in a checkout's root (the launcher
    that needs none), else this environment's own `ringflow` by its path."""
    own = Path(sys.executable).parent / "ringflow"
    on_path = shutil.which("ringflow")
    if on_path and (not own.exists() or Path(on_path).resolve() == own.resolve()):
        return "ringflow"
    cwd = where_the_user_is() if cwd is None else Path(cwd)
    if cwd is None:
        return shlex.quote(str(own)) if own.exists() else "ringflow"
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
