"""The ring's jobs pending in SLURM's queue, as the progress line names them
(docs/slurm.md#pending-jobs), from recorded squeue output."""

from __future__ import annotations

import io
import json
import time

from ringflow.cluster.queue import PendingJob, parse_pending, pending_note
from ringflow.reporting import progress

SQUEUE = """\
41|Resources|2026-12-03T10:00:00
42|Priority|2026-12-03T10:03:30
43|PartitionConfig|2026-12-03T10:09:00
44|Resources|not a time
"""


def _at(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def test_squeue_lines_are_read_with_their_submission_times():
    jobs = parse_pending(SQUEUE + "\n|||\n")
    assert [j.job_id for j in jobs] == ["41", "42", "43", "44"]
    assert jobs[0] == PendingJob("41", "Resources", _at("2026-12-03T10:00:00"))
    assert jobs[3].submitted_at is None


def test_only_jobs_pending_longer_than_the_limit_are_named_with_their_reasons():
    jobs = parse_pending(SQUEUE)
    now = _at("2026-12-03T10:10:00")
    key, note = pending_note(jobs, now, warn_min=5)
    # 41 waited 10 min, 42 6.5 min; 43 (1 min) and 44 (no time) are not named.
    assert note == (
        "2 SLURM jobs pending over 5 min (longest 10m00s; SLURM says: Priority 1, Resources 1)"
    )
    assert key == (2, (("Priority", 1), ("Resources", 1)))
    # The key stays while the waits grow; it moves when another job crosses the limit.
    assert pending_note(jobs, now + 20, warn_min=5)[0] == key
    assert pending_note(jobs, now + 300, warn_min=5)[0] != key
    one = pending_note(jobs[:1], now, warn_min=5)[1]
    assert one == "1 SLURM job pending over 5 min (longest 10m00s; SLURM says: Resources)"
    assert pending_note(jobs, now, warn_min=20) is None
    assert pending_note(jobs, now, warn_min=0) is None  # 0: never


def test_the_progress_line_names_the_pending_jobs(tmp_path, monkeypatch):
    ring = tmp_path / "r"
    ring.mkdir()
    (ring / "RING.json").write_text(json.dumps({"ring_id": "r", "ring_dir": str(ring)}))
    queue = [PendingJob("41", "Resources", time.time() - 400)]
    monkeypatch.setattr(progress, "pending_jobs", lambda name: queue if name == "run" else [])
    out = io.StringIO()
    line = progress.Progress(ring, 30, stream=out, pending_warn_min=5)
    line.print_now()
    assert "SLURM" not in out.getvalue()  # no job name yet: not on SLURM
    line.slurm_job_name = "run"
    line.print_now()
    last = out.getvalue().splitlines()[-1]
    assert "| 1 SLURM job pending over 5 min (longest 6m4" in last  # 6m40s, a second more
    assert last.endswith("s; SLURM says: Resources)")
