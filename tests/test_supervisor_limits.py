"""Per-execution limits the supervisor enforces (docs/operations.md#health-supervision): logs,
output, processes, memory."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from ringflow import statuses
from ringflow.supervisor import HealthSettings, ResourceLimits, supervise
from ringflow.supervisor.cgroup import DISABLE_ENV

FAST = HealthSettings(collect_s=0.2, interval_s=1, hang_min=5, term_grace_s=1)


def run(tmp_path: Path, code: str, env: dict | None = None, **limits):
    out = tmp_path / "output"
    out.mkdir(exist_ok=True)
    return supervise(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env={**os.environ, "OUT": str(out), **(env or {})},
        stdout_path=tmp_path / "stdout.log",
        stderr_path=tmp_path / "stderr.log",
        health_dir=tmp_path / "health",
        settings=FAST,
        limits=ResourceLimits(memory_gb=None, time_limit_min=2, threads=1, **limits),
        watch_output=[out],
        watch_ancestors=False,
    )


def test_a_flooded_log_is_cut_with_a_marker_and_the_program_finishes(tmp_path):
    outcome = run(
        tmp_path,
        """
        import sys
        for _ in range(3000):
            sys.stdout.write("x" * 1023 + "\\n")
        sys.stderr.write("small\\n")
        """,
        log_mb=1,
    )
    assert outcome.status == statuses.OK, outcome.reason
    log = (tmp_path / "stdout.log").read_bytes()
    assert len(log) < 1024 * 1024 + 200
    assert b"log truncated at 1048576 bytes" in log
    assert (tmp_path / "stderr.log").read_text() == "small\n"
    assert any(e["event"] == "log_truncated" for e in outcome.events)


def test_output_over_its_quota_ends_the_execution_with_that_reason(tmp_path):
    outcome = run(
        tmp_path,
        """
        import os, time
        with open(os.path.join(os.environ["OUT"], "big.bin"), "wb") as f:
            for _ in range(40):
                f.write(b"x" * (1 << 20))
                f.flush()
                time.sleep(0.05)
        time.sleep(30)
        """,
        output_gb=10 / 1024,
    )
    assert outcome.status == statuses.CRASH and not outcome.budget_cut
    assert "output limit exceeded" in outcome.reason and "output_gb" in outcome.reason
    assert outcome.wall_s < 15


def test_forking_past_the_process_limit_ends_the_execution(tmp_path):
    outcome = run(
        tmp_path,
        """
        import subprocess, time
        children = []
        for _ in range(60):
            try:
                children.append(subprocess.Popen(["sleep", "30"]))
            except OSError:
                break
        time.sleep(30)
        """,
        max_processes=20,
    )
    assert outcome.status == statuses.CRASH
    assert "process limit reached" in outcome.reason and "max_processes" in outcome.reason
    assert outcome.reap_left == []
    assert outcome.limits["max_processes"]["value"] == 20


def test_memory_without_a_cgroup_is_enforced_on_the_summed_rss(tmp_path, monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "1")  # as an ordinary user, who has no memory cgroup
    outcome = supervise(
        [sys.executable, "-c", "import time; b = bytearray(300 << 20); time.sleep(30)"],
        cwd=tmp_path,
        env=dict(os.environ),
        stdout_path=tmp_path / "stdout.log",
        stderr_path=tmp_path / "stderr.log",
        health_dir=tmp_path / "health",
        settings=FAST,
        limits=ResourceLimits(memory_gb=0.1, time_limit_min=2, threads=1),
        watch_ancestors=False,
    )
    assert outcome.status == statuses.CRASH
    assert outcome.reason.startswith("memory limit (ringflow's 0.1 GB, limits.memory_gb) exceeded")
    assert "summed RSS" in outcome.reason
    memory = outcome.limits["memory"]
    assert memory["enforced"] and "summed RSS" in memory["how"]
