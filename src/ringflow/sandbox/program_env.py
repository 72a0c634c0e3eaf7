"""The environment and progress file a confined program finds, in the paths it sees."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath


def program_env(
    base_env: dict[str, str],
    *,
    inputs: PurePosixPath | Path,
    output: PurePosixPath | Path,
    progress: PurePosixPath | Path,
    weights: PurePosixPath | Path | None,
    home: PurePosixPath | Path,
) -> dict[str, str]:
    """base_env with the RINGFLOW_* paths, HOME and TMPDIR as the program sees them."""
    env = dict(base_env)
    env["RINGFLOW_INPUT_DIR"] = str(inputs)
    env["RINGFLOW_OUTPUT_DIR"] = str(output)
    env["RINGFLOW_PROGRESS_FILE"] = str(progress)
    if weights is not None:
        env["RINGFLOW_WEIGHTS_DIR"] = str(weights)
    else:
        env.pop("RINGFLOW_WEIGHTS_DIR", None)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home)
    env.setdefault("PATH", os.defpath)
    return env


def ensure_progress_file(progress: Path) -> bool:
    """Create an empty progress file if there is none (a bind or link needs one).

    Returns True when it was created, so that `drop_untouched_progress` can
    remove it again if the program never wrote to it.
    """
    if os.path.lexists(progress):
        return False
    progress.touch(mode=0o644, exist_ok=False)
    return True


def drop_untouched_progress(progress: Path, created: bool) -> None:
    """Remove a progress file that ringflow created and the program left empty."""
    if not created or progress.is_symlink() or not progress.is_file():
        return
    if progress.stat().st_size == 0:
        progress.unlink()
