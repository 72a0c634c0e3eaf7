"""Activity and hang decisions, driven directly with samples (pure logic)."""

from __future__ import annotations

from ringflow.supervisor import HealthSettings
from ringflow.supervisor.activity import ActivityTracker, judge_window
from ringflow.supervisor.sampling import Sample

SETTINGS = HealthSettings(hang_min=1)  # 60 s


def sample(t, cpu=0.0, io=0, states=None, progress_mtime=None, output=None):
    progress = None if progress_mtime is None else {"mtime": progress_mtime, "content": {}}
    return Sample(
        t=t,
        wall=1e9 + t,
        ok=True,
        cpu_s=cpu,
        io_bytes=io,
        thread_states=states or {"S": 1},
        progress=progress,
        output_bytes=output,
    )


def test_floors_decide_what_counts():
    base = sample(0)
    # A progress file of 4 KiB rewritten every second: 4 KiB/s is under the 64 KiB/s floor.
    heartbeat = judge_window(base, sample(60, io=60 * 4096, progress_mtime=60), SETTINGS)
    assert not heartbeat.active and heartbeat.progress_changed and heartbeat.shows_progress
    assert judge_window(base, sample(60, io=60 * 100 * 1024), SETTINGS).reasons == ["io"]
    assert not judge_window(base, sample(60, cpu=0.3), SETTINGS).active  # 0.005 of a core
    assert judge_window(base, sample(60, cpu=1.2), SETTINGS).reasons == ["cpu"]
    blocked = judge_window(base, sample(60, io=512, states={"D": 1, "S": 3}), SETTINGS)
    assert blocked.reasons == ["d_state_io"]
    assert not judge_window(base, sample(60, states={"D": 1}), SETTINGS).active


def run_windows(tracker, windows, start=0.0, step=10.0):
    produced, t, prev = [], start, sample(start)
    for cpu_frac, io_kbps, progress in windows:
        t += step
        cur = sample(
            t,
            cpu=prev.cpu_s + cpu_frac * step,
            io=prev.io_bytes + int(io_kbps * 1024 * step),
            progress_mtime=t if progress else (prev.progress or {}).get("mtime"),
        )
        produced += tracker.update(judge_window(prev, cur, SETTINGS), cur.t, cur.wall)
        prev = cur
    return produced


def names(events):
    return [e["event"] for e in events]


def test_would_hang_once_per_episode_and_cleared_by_activity():
    tracker = ActivityTracker(SETTINGS, 0.0)
    idle = [(0.0, 0.0, True)] * 8  # only a heartbeat for 80 s
    produced = run_windows(tracker, [*idle, (1.0, 0, False), *idle])
    assert names(produced) == ["would_hang", "would_hang_cleared", "would_hang"]
    assert not tracker.hung


def test_enforce_mode_marks_hung():
    tracker = ActivityTracker(HealthSettings(hang_min=1, enforce=True), 0.0)
    produced = run_windows(tracker, [(0.0, 0.0, True)] * 5)
    assert names(produced) == [] and not tracker.hung  # 50 s: not yet
    produced = run_windows(tracker, [(0.0, 0.0, True)] * 2, start=50.0)
    assert names(produced) == ["hung"] and tracker.hung


def test_busy_without_progress_is_only_suspected():
    tracker = ActivityTracker(SETTINGS, 0.0)
    produced = run_windows(tracker, [(1.0, 0.0, False)] * 10)
    assert names(produced) == ["busy_no_progress"]
    assert not tracker.hung
    # Progress resets the suspicion; busy with progress raises nothing.
    tracker = ActivityTracker(SETTINGS, 0.0)
    assert run_windows(tracker, [(1.0, 0.0, True)] * 10) == []
