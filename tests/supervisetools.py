"""One supervised run in a test's folder: its logs, health and `output/` (as $OUT) there."""

from __future__ import annotations

import os
from pathlib import Path

from ringflow.supervisor import HealthSettings, Outcome, ResourceLimits, supervise

FAST = HealthSettings(collect_s=0.2, interval_s=1, hang_min=5, term_grace_s=1)


def supervised(tmp_path: Path, argv: list[str], limits: ResourceLimits, env: dict | None = None,
               **kw) -> Outcome:  # fmt: skip
    out = tmp_path / "output"
    out.mkdir(exist_ok=True)
    return supervise(
        argv,
        cwd=tmp_path,
        env={**os.environ, "OUT": str(out), **(env or {})},
        stdout_path=tmp_path / "stdout.log",
        stderr_path=tmp_path / "stderr.log",
        health_dir=tmp_path / "health",
        settings=FAST,
        limits=limits,
        watch_ancestors=False,
        **kw,
    )
