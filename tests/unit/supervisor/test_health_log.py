"""What the health files keep when a run ends: the timeline's last line synced, the
latest sample a live view that is never synced (docs/ring-folder.md)."""

from __future__ import annotations

import json
import time

from ringflow.supervisor.health_log import HealthLog


def test_a_run_ends_with_its_timeline_synced_and_its_latest_view_rewritten(tmp_path, synced):
    started = time.monotonic()
    health = HealthLog(tmp_path / "health", 2.0, started, time.time(), {"node": "n001-a"})
    health.event({"kind": "oom_kill", "t": 0.1})
    health.close(started + 0.5, 0.0, {"status": "crash"})
    line = json.loads((tmp_path / "health" / "health.jsonl").read_text().splitlines()[-1])
    latest = json.loads((tmp_path / "health" / "health_latest.json").read_text())
    assert line["partial"] and line["events"] == [{"kind": "oom_kill", "t": 0.1}]
    assert (latest["state"], latest["outcome"], latest["node"]) == (
        "ended", {"status": "crash"}, "n001-a")  # fmt: skip
    assert synced == [str(tmp_path / "health" / "health.jsonl")]
