"""A ring's SLURM jobs without a controller (docs/slurm.md#job-ids-signals-and-kills): the
job list the executions append to, SLURM's account of a job read from recorded `sacct`
output, the record of an execution SLURM ended, the driver's cancellation by id and the
job's time limit."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ringflow.cluster import jobs
from ringflow.cluster.jobs import JobEnd
from ringflow.cluster.slurm import SESSION_SETTLE_MIN, job_time_limit_min, session_time_limit_min
from ringflow.core import statuses
from ringflow.core.interrupts import stopped_by_signal
from ringflow.core.layout import RingLayout
from ringflow.core.node_state import Node
from ringflow.core.records import record_problems
from ringflow.workflow import cluster
from ringtools import full_config, locked_ring, make_candidate

# `sacct -X -n -P -j 41,42,43,44,45,46 -o JobID,State,ExitCode,Reason` as SLURM 22.05 prints
# it (a step line where -X is left out).
SACCT = """\
41|TIMEOUT|0:0|None
42|CANCELLED by 0|0:15|None
43|OUT_OF_MEMORY|0:125|None
44|NODE_FAIL|0:0|NodeDown
45|COMPLETED|0:0|None
46|FAILED|3:0|NonZeroExitCode
46.batch|FAILED|3:0|
47_2|PREEMPTED|0:0|None
"""


def test_sacct_lines_give_each_job_its_end_without_steps():
    ends = jobs.parse_sacct(SACCT)
    assert set(ends) == {"41", "42", "43", "44", "45", "46", "47_2"}
    assert ends["42"] == JobEnd("CANCELLED", "0:15", "")
    assert ends["44"] == JobEnd("NODE_FAIL", "0:0", "NodeDown")
    assert ends["46"].state == "FAILED"
    assert jobs.parse_sacct("\n\n") == {}


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("TIMEOUT", statuses.INTERRUPTED),
        ("CANCELLED by 0", statuses.INTERRUPTED),
        ("NODE_FAIL", statuses.INTERRUPTED),
        ("PREEMPTED", statuses.INTERRUPTED),
        ("OUT_OF_MEMORY", statuses.CRASH),
        ("COMPLETED", None),
        ("FAILED", None),
        ("RUNNING", None),
    ],
)
def test_slurm_states_map_to_execution_statuses(state, status):
    assert jobs.kill_status(state) == status


def test_reasons_name_slurm_and_its_state():
    timeout = jobs.kill_reason("41", JobEnd("TIMEOUT", "0:0"))
    assert timeout.startswith("SLURM ended job 41 with TIMEOUT")
    assert "time limit" in timeout
    memory = jobs.kill_reason("43", JobEnd("OUT_OF_MEMORY", "0:125"))
    assert "memory" in memory and "SLURM's" in memory and "OUT_OF_MEMORY" in memory
    assert "exit code 0:125" in memory
    assert "NodeDown" in jobs.kill_reason("44", JobEnd("NODE_FAIL", "0:0", "NodeDown"))


def test_the_plugins_message_names_the_state_where_sacct_cannot():
    msg = ("SLURM-job '77' failed, SLURM status is: 'TIMEOUT'. Detailed failure reason "
           "unavailable (status command is not 'sacct').")  # fmt: skip
    assert jobs.state_in_message(msg) == "TIMEOUT"
    assert jobs.state_in_message("something else") is None
    assert jobs.state_in_message(None) is None


def test_an_execution_lists_its_job_only_under_slurm(tmp_path):
    ring = tmp_path / "runs" / "r"
    assert jobs.record_job(ring, "n001-a", "proxy", "s0", env={}) is None
    assert not RingLayout(ring).cluster_jobs.exists()
    assert jobs.record_job(ring, "n001-a", "proxy", "s0", env={"SLURM_JOB_ID": "41"}) == "41"
    assert jobs.record_job(ring, "n001-a", "proxy", "s1", env={"SLURM_JOB_ID": "42"})
    with RingLayout(ring).cluster_jobs.open("a") as handle:
        handle.write('{"job": "43", "no')  # a torn last line
    listed = jobs.ring_jobs(ring)
    assert [(j["job"], j["variant"], j["host"]) for j in listed] == [
        ("41", "s0", os.uname().nodename),
        ("42", "s1", os.uname().nodename),
    ]
    result = RingLayout(ring).result("n001-a", "proxy", "s0")
    result.parent.mkdir(parents=True)
    result.write_text("{}")
    assert [j["job"] for j in jobs.unfinished_jobs(ring)] == ["42"]
    assert [j["job"] for j in jobs.unfinished_jobs(ring, listed[1]["at"])] == ["42"]
    assert jobs.unfinished_jobs(ring, time.time() + 1) == []


def test_the_result_of_a_killed_job_has_the_keys_of_the_supervisors_own():
    from ringflow.execute import _new_result

    spec = {"seed": 1, "ablate": False, "key": None}
    ex = SimpleNamespace(node=Node(id="n001-a"), view="proxy", variant="s1", spec=spec)
    own = _new_result(ex)
    killed = jobs.killed_result(spec, "n001-a", "proxy", "s1", "41", JobEnd("TIMEOUT"))
    assert set(own) - {"slurm_job_id"} <= set(killed)
    assert killed["status"] == statuses.INTERRUPTED and killed["budget_cut"] is False
    assert killed["slurm_job_id"] == "41" and killed["slurm_state"] == "TIMEOUT"
    assert killed["events"][-1]["event"] == "slurm_killed"
    assert not stopped_by_signal(killed)  # recorded: never run again


def test_execute_keeps_the_job_id_only_under_slurm(monkeypatch):
    from ringflow.execute import _new_result

    ex = SimpleNamespace(node=Node(id="n001-a"), view="proxy", variant="s0",
                         spec={"seed": 0, "ablate": False})  # fmt: skip
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert "slurm_job_id" not in _new_result(ex)
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    assert _new_result(ex)["slurm_job_id"] == "99"


@pytest.fixture(scope="module")
def ring(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("slurm-jobs")
    make_candidate(work / "cands" / "a", mean=0.5)
    return locked_ring(work, work / "cands", "r1")


def _node(ring: Path) -> str:
    return json.loads((ring / "nodes" / "index.json").read_text())["nodes"][0]["id"]


def _box(ring: Path) -> Path:
    box = RingLayout(ring).boxes / "abandoned"
    (box / "output").mkdir(parents=True, exist_ok=True)
    return box


def test_a_job_slurm_ended_without_a_record_gets_one(ring):
    node = _node(ring)
    box = _box(ring)
    result = cluster.record_kill(ring, node, "proxy", "s0", "41", JobEnd("TIMEOUT", "0:0"))
    layout = RingLayout(ring)
    written = json.loads(layout.result(node, "proxy", "s0").read_text())
    assert written == result.to_record()
    assert written["status"] == "interrupted" and written["slurm_state"] == "TIMEOUT"
    assert "SLURM ended job 41 with TIMEOUT" in written["reason"]
    score = json.loads(layout.score(node, "proxy", "s0").read_text())
    assert score["valid"] is False and "interrupted" in score["reason"]
    assert not box.exists()
    events = [json.loads(x) for x in layout.events.read_text().splitlines()]
    assert any(e["kind"] == "slurm_job_killed" and e["job"] == "41" for e in events)
    assert record_problems(ring) == []  # hashed into the ledger like execute's own


def test_a_record_a_signal_cut_short_gives_way_to_slurms_account(ring):
    node = _node(ring)
    layout = RingLayout(ring)
    path = layout.result(node, "proxy", "s1")
    path.parent.mkdir(parents=True, exist_ok=True)
    cut = {"status": "interrupted", "budget_cut": False, "wall_s": 61.5, "reason": "signal",
           "events": [{"event": "signal", "signal": "SIGTERM"}]}  # fmt: skip
    path.write_text(json.dumps(cut))
    result = cluster.record_kill(ring, node, "proxy", "s1", "43", JobEnd("OUT_OF_MEMORY"))
    assert result.status == "crash" and "memory" in result.reason
    assert result.wall_s == 61.5
    assert [e["event"] for e in result.events] == ["signal", "slurm_killed"]


def test_a_record_the_supervisor_finished_stands(ring):
    node = _node(ring)
    layout = RingLayout(ring)
    path = layout.result(node, "x3", "s0")
    path.parent.mkdir(parents=True, exist_ok=True)
    own = {"status": "crash", "budget_cut": False, "reason": "exit code 1", "events": []}
    path.write_text(json.dumps(own))
    result = cluster.record_kill(ring, node, "x3", "s0", "42", JobEnd("CANCELLED"))
    assert result.to_record() == own
    assert json.loads(path.read_text()) == own
    assert layout.score(node, "x3", "s0").exists()


# ---- the driver ---------------------------------------------------------------------------


def _job_info(ring_prefix: str, node: str, variant: str, job: str):
    rule = SimpleNamespace(name=f"{ring_prefix}execute")
    job_ = SimpleNamespace(rule=rule, wildcards={"node": node, "view": "proxy", "variant": variant})
    return SimpleNamespace(job=job_, external_jobid=job, aux={})


class FakeExecutor:
    def __init__(self, active=()):
        self.active_jobs = list(active)
        self.run_uuid = "ringflow-r1_abc"
        self.reported: list[tuple[str, str]] = []

    def report_job_error(self, job_info, msg=None, **kwargs):
        self.reported.append(("error", job_info.external_jobid))

    def report_job_success(self, job_info):
        self.reported.append(("success", job_info.external_jobid))


def test_the_driver_records_a_job_slurm_killed_and_reports_it_done(ring, monkeypatch):
    node = _node(ring)
    rings = [SimpleNamespace(root=ring, prefix="", name="r1")]
    ends = {"51": JobEnd("TIMEOUT", "0:0"), "52": JobEnd("FAILED", "1:0")}
    monkeypatch.setattr(jobs, "query_ends", lambda ids: {i: ends[i] for i in ids if i in ends})
    monkeypatch.setattr(cluster.DRIVER, "cancelled_by", None)
    executor = FakeExecutor()
    cluster.watch_slurm_jobs(executor, rings)
    executor.report_job_error(_job_info("", node, "s2", "51"), msg="failed")
    executor.report_job_error(_job_info("", node, "s0-ablate", "52"), msg="failed")
    executor.report_job_error(_job_info("ring2_", node, "s0-ablate", "51"), msg="x")
    assert executor.reported == [("success", "51"), ("error", "52"), ("error", "51")]
    assert RingLayout(ring).result(node, "proxy", "s2").exists()
    assert not RingLayout(ring).result(node, "proxy", "s0-ablate").exists()


def test_jobs_the_driver_cancelled_itself_are_not_recorded(ring, monkeypatch):
    node = _node(ring)
    rings = [SimpleNamespace(root=ring, prefix="", name="r1")]
    monkeypatch.setattr(jobs, "query_ends", lambda ids: {"53": JobEnd("CANCELLED")})
    monkeypatch.setattr(cluster.DRIVER, "cancelled_by", "SIGTERM")
    executor = FakeExecutor()
    cluster.watch_slurm_jobs(executor, rings)
    executor.report_job_error(_job_info("", node, "g3", "53"), msg="failed")
    assert executor.reported == [("error", "53")]
    assert not RingLayout(ring).result(node, "proxy", "g3").exists()


def test_the_driver_cancels_exactly_its_runs_jobs_by_id(tmp_path, monkeypatch):
    ring = tmp_path / "r1"
    jobs.record_job(ring, "n001-a", "proxy", "s1", env={"SLURM_JOB_ID": "62"})  # an old run's
    monkeypatch.setattr(cluster.DRIVER, "started_at", time.time())
    jobs.record_job(ring, "n001-a", "proxy", "s0", env={"SLURM_JOB_ID": "61"})
    monkeypatch.setattr(
        jobs, "queued_ids", lambda name: ["63", "64"] if name == "ringflow-r1_abc" else ["99"]
    )
    cancelled = []
    monkeypatch.setattr(
        jobs, "cancel", lambda ids: (cancelled.extend(sorted(ids)) or sorted(ids), None)
    )
    executor = FakeExecutor(
        [SimpleNamespace(external_jobid="60"), SimpleNamespace(external_jobid=None)]
    )
    monkeypatch.setattr(cluster.DRIVER, "cancelled", set())
    rings = [SimpleNamespace(root=ring, prefix="")]
    ids = cluster.cancel_ring_jobs(executor, rings, "SIGTERM")
    assert ids == cancelled == ["60", "61", "63", "64"]  # never the old run's 62, never 99
    # As the driver ends: only what was submitted meanwhile.
    executor.active_jobs.append(SimpleNamespace(external_jobid="65"))
    assert cluster.cancel_ring_jobs(executor, rings, "SIGTERM, as the driver ends") == ["65"]
    events = [json.loads(x) for x in (ring / "events.jsonl").read_text().splitlines()]
    assert events[0]["kind"] == "slurm_jobs_cancelled" and events[0]["signal"] == "SIGTERM"


def test_squeue_lines_give_the_jobs_not_yet_ended():
    text = ("70|ringflow-r1_old|RUNNING\n71|ringflow-r1_old|PENDING\n"
            "72|ringflow-r1_old|CANCELLED\n73|other|COMPLETING\n74|x|COMPLETED\n\n")  # fmt: skip
    assert jobs.parse_held(text) == {"70": "ringflow-r1_old", "71": "ringflow-r1_old",
                                     "73": "other"}  # fmt: skip


def test_a_new_driver_finds_the_jobs_an_earlier_one_left(tmp_path):
    ring = tmp_path / "r1"
    jobs.record_driver(ring, "ringflow-r1_old")
    jobs.record_driver(ring, "ringflow-r1_new")
    # 80 ran an execution and has no record; 81 ran one that has a record.
    jobs.record_job(ring, "n001-a", "proxy", "s0", env={"SLURM_JOB_ID": "80"})
    jobs.record_job(ring, "n001-a", "proxy", "s1", env={"SLURM_JOB_ID": "81"})
    done = RingLayout(ring).result("n001-a", "proxy", "s1")
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    held = {"80": "ringflow-r0_gone", "81": "ringflow-r1_old", "82": "ringflow-r1_old",
            "83": "ringflow-r1_new", "84": "someone-else"}  # fmt: skip
    # The old run's jobs by name (pending 82 too), the listed one without a record; never
    # this run's, never another's.
    assert jobs.left_jobs(ring, "ringflow-r1_new", held) == ["80", "81", "82"]


def test_the_driver_cancels_what_an_earlier_one_left_and_waits_for_it(tmp_path, monkeypatch):
    ring = tmp_path / "r1"
    jobs.record_driver(ring, "ringflow-r1_old")
    polls = iter([{"90": "ringflow-r1_old", "91": "ringflow-r1_new"},
                  {"90": "ringflow-r1_old"}, {}])  # fmt: skip
    monkeypatch.setattr(jobs, "held_jobs", lambda: next(polls))
    cancelled = []
    monkeypatch.setattr(jobs, "cancel", lambda ids: (cancelled.extend(ids) or list(ids), None))
    monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
    assert cluster.cancel_left_jobs(ring, "ringflow-r1_new") == cancelled == ["90"]
    events = [json.loads(x) for x in (ring / "events.jsonl").read_text().splitlines()]
    assert events[-1]["kind"] == "slurm_jobs_cancelled" and events[-1]["jobs"] == ["90"]
    # Nothing left: nothing cancelled, nothing said.
    monkeypatch.setattr(jobs, "held_jobs", lambda: {"91": "ringflow-r1_new"})
    assert cluster.cancel_left_jobs(ring, "ringflow-r1_new") == []
    assert len((ring / "events.jsonl").read_text().splitlines()) == len(events)


def test_sigterm_to_the_driver_cancels_then_stops_snakemake(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(cluster, "cancel_ring_jobs", lambda ex, rings, why: calls.append(why))
    monkeypatch.setattr(cluster.DRIVER, "cancelled_by", None)
    graceful = []
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        signal.signal(signal.SIGTERM, lambda *a: graceful.append(1))
        cluster.cancel_on_signals(FakeExecutor(), [])
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0.1)  # let the handler run here
        assert calls == ["SIGTERM"] and graceful == [1]
        # A second signal cancels again (what was submitted meanwhile), and nothing more.
        os.kill(os.getpid(), signal.SIGINT)
        assert calls == ["SIGTERM", "SIGINT"]
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


# ---- the time limit -----------------------------------------------------------------------


def test_the_job_time_limit_is_ringflows_deadline_plus_grace_and_scoring():
    config = full_config()  # quick: 10 min, 2 s grace, scorer_timeout_min
    limits = {"time_limit_min": 10, "threads": 1, "memory_gb": 1}
    scoring = config["scorer_timeout_min"]
    now = 1_000_000.0
    assert job_time_limit_min(limits, config, now) == int(10 + 2 / 60 + scoring) + 1
    # The ring's clock stops the program in 3 minutes: 3 minutes, not 10.
    soon = job_time_limit_min(limits, config, now, deadline=now + 180)
    assert soon == int(3 + 2 / 60 + scoring) + 1
    # Never past stop_at.
    assert job_time_limit_min(limits, config, now, stop_at=now + 5 * 60 + 30) == 5
    # A deadline already passed, stop_at close: still SLURM's smallest limit.
    assert job_time_limit_min(limits, config, now, deadline=now - 60, stop_at=now + 10) == 1


def test_a_sessions_time_limit_runs_to_its_hand_over_not_the_profiles_hour():
    config = full_config()  # 2 s grace
    now = 1_000_000.0
    # Hand-over in 3 hours: the job may run that long, the grace and the settling after it.
    hours = session_time_limit_min(config, now, handover=now + 3 * 3600)
    assert hours == int(180 + 2 / 60 + SESSION_SETTLE_MIN) + 1
    # Never past stop_at; a hand-over already passed still settles the workspace.
    assert session_time_limit_min(config, now, now + 3 * 3600, stop_at=now + 3600) == 60
    assert session_time_limit_min(config, now, now - 60) == SESSION_SETTLE_MIN + 1
    assert session_time_limit_min(config, now, now - 60, stop_at=now + 20) == 1


def test_a_box_held_by_a_live_run_is_left_alone(ring):
    box = RingLayout(ring).boxes / "live"
    box.mkdir(parents=True, exist_ok=True)
    fd = os.open(box, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        cluster.record_kill(ring, _node(ring), "proxy", "g4", "70", JobEnd("NODE_FAIL"))
        assert box.exists()
    finally:
        os.close(fd)


def test_sacct_times_are_read_and_a_jobs_overhead_measured():
    times = jobs.parse_job_times(
        "40|2026-12-03T10:00:00|2026-12-03T10:00:02|2026-12-03T10:00:18\n"
        "40.batch|2026-12-03T10:00:02|2026-12-03T10:00:02|2026-12-03T10:00:18\n"
        "41|2026-12-03T10:00:00|2026-12-03T10:00:30|2026-12-03T10:00:48\n"
        "42|2026-12-03T10:00:00|Unknown|Unknown\n"
    )
    assert set(times) == {"40", "41", "42"}
    assert times["40"].started - times["40"].submitted == 2.0
    assert times["42"].started is None and times["42"].ended is None
    # Around the runs: 16 - 10 = 6 s and 18 - 10 = 8 s (median 7); the least wait, 2 s.
    assert jobs.job_overhead_s(times, {"40": 10.0, "41": 10.0, "42": 5.0}) == 9.0
    assert jobs.job_overhead_s(times, {"42": 5.0}) is None  # not ended yet
    assert jobs.job_overhead_s({}, {"40": 10.0}) is None
