"""The supervisor against real processes: activity, hang, deadlines, escapees, orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ringflow.core import statuses
from ringflow.core.errors import InputError
from ringflow.core.jsonio import read_jsonl
from ringflow.supervisor import HealthSettings, Outcome, ResourceLimits, supervise, wait_for
from ringflow.supervisor.cgroup import (
    ABANDONED_AFTER_S,
    DISABLE_ENV,
    OwnedCgroup,
    sweep_abandoned,
)
from ringflow.supervisor.proctree import wait_for_an_end

SRC = str(Path(__file__).resolve().parents[3] / "src")
FAST = HealthSettings(collect_s=0.2, interval_s=1, hang_min=0.05, term_grace_s=1)
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"}

CPU_BOUND = """
import time
end = time.time() + {seconds}
while time.time() < end:
    sum(i * i for i in range(1000))
"""

IO_BOUND = """
import os, time
end = time.time() + {seconds}
with open("data.bin", "wb") as handle:
    while time.time() < end:
        handle.write(os.urandom(256 * 1024))
        handle.flush()
        os.fsync(handle.fileno())
        time.sleep(0.05)
"""

PROGRESS_ONLY = """
import json, time
end = time.time() + {seconds}
step = 0
while time.time() < end:
    step += 1
    with open("progress.json", "w") as handle:
        json.dump({{"step": step, "t": time.time()}}, handle)
    time.sleep(1)
"""

THREADED = """
import threading, time
def work():
    end = time.time() + {seconds}
    while time.time() < end:
        sum(i * i for i in range(1000))
workers = [threading.Thread(target=work) for _ in range(3)]
for w in workers:
    w.start()
for w in workers:
    w.join()  # the main thread waits in a futex while the workers compute
"""

# Ignores SIGTERM and leaves a double-forked setsid grandchild that ignores it too.
ESCAPING = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open("grandchild.pid", "w").write(str(os.getpid()))
        while True:
            time.sleep(0.2)
    os._exit(0)
open("program.pid", "w").write(str(os.getpid()))
while True:
    time.sleep(0.2)
"""


def run(
    tmp_path: Path,
    code: str,
    settings: HealthSettings = FAST,
    name: str = "prog",
    limits: ResourceLimits | None = None,
    **kwargs,
) -> Outcome:
    work = tmp_path / name
    work.mkdir(parents=True, exist_ok=True)
    (work / "prog.py").write_text(textwrap.dedent(code))
    return supervise(
        [sys.executable, "prog.py"],
        cwd=work,
        env=ENV,
        stdout_path=work / "stdout.txt",
        stderr_path=work / "stderr.txt",
        health_dir=work / "health",
        settings=settings,
        limits=limits or ResourceLimits(),
        **kwargs,
    )


def events(outcome: Outcome, name: str) -> list[dict]:
    return [e for e in outcome.events if e["event"] == name]


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_file(path: Path, timeout: float = 10) -> str:
    end = time.time() + timeout
    while time.time() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def cgroup2_available() -> bool:
    probe = OwnedCgroup.create(f"ringflow-probe-{os.getpid()}", None)
    try:
        return probe.v2_path is not None
    finally:
        probe.remove()


# -- activity and hang -------------------------------------------------------------------


def test_only_the_heartbeat_loop_would_hang_in_observe_mode(tmp_path):
    programs = {
        "cpu": CPU_BOUND.format(seconds=5),
        "io": IO_BOUND.format(seconds=5),
        "progress": PROGRESS_ONLY.format(seconds=5),
        "threads": THREADED.format(seconds=5),
    }
    with ThreadPoolExecutor(len(programs)) as pool:
        futures = {
            name: pool.submit(
                run,
                tmp_path,
                code,
                FAST,
                name,
                progress_file=tmp_path / name / "progress.json",
                watch_output=[tmp_path / name],
                watch_writable=[tmp_path / name],
            )
            for name, code in programs.items()
        }
        outcomes = {name: f.result() for name, f in futures.items()}
    for name, outcome in outcomes.items():
        assert outcome.status == statuses.OK, (name, outcome.reason)
        assert not outcome.budget_cut
    assert events(outcomes["progress"], "would_hang"), outcomes["progress"].events
    assert len(events(outcomes["progress"], "would_hang")) == 1  # once per episode
    for name in ("cpu", "io", "threads"):
        assert not events(outcomes[name], "would_hang"), (name, outcomes[name].events)
    # The I/O-bound program was judged active by its I/O, not just by its CPU.
    io_lines = read_jsonl(outcomes["io"].health_jsonl)
    assert any(line["activity_reasons"].get("io") for line in io_lines)
    assert max(line["io_kbps_max"] for line in io_lines) > FAST.min_io_kbps
    assert sum(line["output_growth_bytes"] for line in io_lines) > 1_000_000
    assert all(line["writable_mtime"] for line in io_lines)
    # The heartbeat's few bytes per second stay below the floor.
    progress_lines = read_jsonl(outcomes["progress"].health_jsonl)
    assert not any(line["activity_reasons"].get("io") for line in progress_lines[1:])
    assert sum(line["progress_changes"] for line in progress_lines) >= 3
    # wchan is read per thread: the main thread's futex wait shows beside running workers.
    thread_lines = read_jsonl(outcomes["threads"].health_jsonl)
    wchans: dict[str, int] = {}
    for line in thread_lines:
        for key, count in line["wchans"].items():
            wchans[key] = max(wchans.get(key, 0), count)
    assert any("futex" in key for key in wchans), wchans
    assert max(line["threads_max"] for line in thread_lines) >= 4


def test_enforce_mode_stops_the_heartbeat_loop_as_hung_but_not_the_busy_one(tmp_path):
    enforce = HealthSettings(
        enforce=True, collect_s=0.2, interval_s=1, hang_min=0.05, term_grace_s=1
    )
    with ThreadPoolExecutor(2) as pool:
        idle = pool.submit(run, tmp_path, PROGRESS_ONLY.format(seconds=60), enforce, "idle")
        busy = pool.submit(run, tmp_path, CPU_BOUND.format(seconds=4.5), enforce, "busy")
        idle_outcome, busy_outcome = idle.result(), busy.result()
    assert idle_outcome.status == statuses.HUNG, idle_outcome.reason
    assert not idle_outcome.budget_cut
    assert events(idle_outcome, "hung")
    assert idle_outcome.wall_s < 3 + 1 + 3  # hang_min + grace + slack, not 60 s
    assert idle_outcome.signal == signal.SIGTERM
    assert busy_outcome.status == statuses.OK, busy_outcome.events
    assert not events(busy_outcome, "hung")
    # Busy with no I/O, output or progress for hang_min: suspected, never acted on.
    assert events(busy_outcome, "busy_no_progress")


# -- stopping: deadlines, escapees, checkpoints -------------------------------------------


def _deadline_stop_of_escaping_tree(tmp_path: Path, name: str) -> tuple[Outcome, float, float]:
    start = time.time()
    cutoff = start + 1.5
    outcome = run(tmp_path, ESCAPING, FAST, name, deadline=lambda: cutoff)
    done = time.time()
    return outcome, done - cutoff, start


@pytest.mark.parametrize("use_cgroup", [True, False], ids=["cgroup", "subreaper"])
def test_deadline_kills_sigterm_ignoring_setsid_grandchild(tmp_path, monkeypatch, use_cgroup):
    if use_cgroup and not cgroup2_available():
        pytest.skip("no cgroup2 child can be created here; the subreaper case covers it")
    if not use_cgroup:
        monkeypatch.setenv(DISABLE_ENV, "1")
    outcome, reap_latency, _ = _deadline_stop_of_escaping_tree(tmp_path, "esc")
    program = int(wait_file(tmp_path / "esc" / "program.pid"))
    grandchild = int(wait_file(tmp_path / "esc" / "grandchild.pid"))
    assert outcome.status == statuses.INTERRUPTED and outcome.budget_cut
    assert outcome.reason == "deadline reached"
    assert outcome.reap_left == []
    assert not pid_alive(program) and not pid_alive(grandchild)
    assert not os.path.exists(f"/proc/{grandchild}")  # reaped, not left as a zombie
    assert reap_latency <= FAST.term_grace_s + 2, reap_latency
    assert outcome.limits["cgroup"]["owned"] is use_cgroup
    assert outcome.limits["cgroup"]["kill_used"] is use_cgroup
    # The grandchild left the program's session: a daemon, recorded once.
    (own,) = events(outcome, "own_session")
    assert grandchild in [process["pid"] for process in own["processes"]]


def test_a_program_that_stays_in_its_session_has_no_own_session_event(tmp_path):
    code = """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    time.sleep(1)
    child.wait()
    """
    outcome = run(tmp_path, code)
    assert outcome.status == statuses.OK and not events(outcome, "own_session")


def test_checkpoint_written_on_sigterm_is_complete(tmp_path):
    code = """
    import os, signal, sys, time
    def checkpoint(signum, frame):
        with open("ckpt.tmp", "wb") as handle:
            for _ in range(10):
                handle.write(b"x" * 100_000)
                time.sleep(0.05)
            handle.write(b"END")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace("ckpt.tmp", "ckpt.bin")
        sys.exit(0)
    signal.signal(signal.SIGTERM, checkpoint)
    while True:
        time.sleep(0.1)
    """
    cutoff = time.time() + 1.0
    grace = HealthSettings(collect_s=0.2, interval_s=1, hang_min=1, term_grace_s=2)
    outcome = run(tmp_path, code, grace, deadline=lambda: cutoff)
    data = (tmp_path / "prog" / "ckpt.bin").read_bytes()
    assert len(data) == 1_000_003 and data.endswith(b"END")
    assert outcome.status == statuses.INTERRUPTED and outcome.budget_cut
    assert outcome.exit_code == 0  # it left by itself within the grace
    assert outcome.wall_s < 1.0 + 2.0


def test_moved_deadline_shortens_the_run_and_crashes_are_not_budget_cut(tmp_path):
    cutoff_file = tmp_path / "cutoff"
    cutoff_file.write_text(str(time.time() + 60))

    def read_cutoff() -> float:
        return float(cutoff_file.read_text())

    def move_earlier():
        time.sleep(1.0)
        cutoff_file.write_text(str(time.time() + 0.3))

    mover = threading.Thread(target=move_earlier)
    mover.start()
    slow = HealthSettings(collect_s=60, interval_s=300, hang_min=30, term_grace_s=1)
    started = time.time()
    outcome = run(tmp_path, "import time\ntime.sleep(30)\n", slow, "moved", deadline=read_cutoff)
    mover.join()
    assert outcome.status == statuses.INTERRUPTED and outcome.budget_cut
    # collect_s is 60, yet the moved cutoff acts within a tick.
    assert time.time() - started < 1.0 + 0.3 + 0.5 + 1.5

    crash = run(tmp_path, "raise SystemExit(3)\n", FAST, "crash", deadline=lambda: time.time() + 60)
    assert (crash.status, crash.budget_cut, crash.exit_code) == (statuses.CRASH, False, 3)
    killed = run(
        tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", FAST, "kill"
    )
    assert (killed.status, killed.budget_cut, killed.signal) == (statuses.CRASH, False, 9)
    assert killed.exit_code is None


def test_deadline_already_passed_does_not_start(tmp_path):
    outcome = run(tmp_path, "open('started', 'w').write('yes')\n", deadline=lambda: time.time() - 1)
    assert outcome.status == statuses.INTERRUPTED and outcome.budget_cut
    assert not (tmp_path / "prog" / "started").exists()
    assert json.loads(Path(outcome.health_latest).read_text())["state"] == "ended"


def test_daemon_left_after_normal_exit_is_swept(tmp_path):
    code = """
    import os, signal, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open("daemon.pid", "w").write(str(os.getpid()))
            time.sleep(100)
        os._exit(0)
    while not os.path.exists("daemon.pid"):
        time.sleep(0.02)
    """
    outcome = run(tmp_path, code)
    daemon = int(wait_file(tmp_path / "prog" / "daemon.pid"))
    assert outcome.status == statuses.OK and not outcome.budget_cut
    assert events(outcome, "leftover_descendants")
    assert not pid_alive(daemon)


def test_a_child_ending_just_after_the_program_is_waited_for_not_swept(tmp_path):
    # Bubblewrap's init ends a few milliseconds after the program: what ends by itself
    # within the settle time is no leftover.
    code = """
    import os, time
    if os.fork() == 0:
        time.sleep(0.2)
        os._exit(0)
    """
    outcome = run(tmp_path, code)
    assert outcome.status == statuses.OK
    assert not events(outcome, "leftover_descendants")


def test_waiting_for_an_end_returns_as_one_process_ends():
    quick = subprocess.Popen(["sleep", "0.2"])
    slow = subprocess.Popen(["sleep", "30"])
    try:
        start = time.monotonic()
        wait_for_an_end([slow.pid, quick.pid], start + 10)
        assert 0.15 < time.monotonic() - start < 5  # the quick one's end, not the limit
        start = time.monotonic()
        wait_for_an_end([slow.pid], start + 0.3)
        assert time.monotonic() - start >= 0.29  # nothing ended: the limit
        wake_r, wake_w = os.pipe()
        threading.Timer(0.2, os.write, (wake_w, b"x")).start()
        start = time.monotonic()
        wait_for_an_end([slow.pid], start + 10, wake_r)
        assert time.monotonic() - start < 5  # woken (a signal, in the supervisor)
        os.close(wake_r)
        os.close(wake_w)
    finally:
        for proc in (quick, slow):
            proc.kill()
            proc.wait()


def test_time_limit_applies_in_observe_mode_only(tmp_path):
    limits = ResourceLimits(time_limit_min=0.02)  # 1.2 s
    observe = HealthSettings(collect_s=0.2, interval_s=1, hang_min=1, term_grace_s=1)
    enforce = HealthSettings(enforce=True, collect_s=0.2, interval_s=1, hang_min=1, term_grace_s=1)
    with ThreadPoolExecutor(2) as pool:
        watched = pool.submit(run, tmp_path, "import time\ntime.sleep(20)\n", observe, "o", limits)
        backstop = pool.submit(run, tmp_path, CPU_BOUND.format(seconds=2.5), enforce, "e", limits)
        watched_outcome, backstop_outcome = watched.result(), backstop.result()
    assert watched_outcome.status == statuses.TIMEOUT and not watched_outcome.budget_cut
    assert watched_outcome.wall_s < 1.2 + 1 + 2
    # Enforce mode: the tree was readable all along, so the backstop does not apply.
    assert backstop_outcome.status == statuses.OK, backstop_outcome.events
    assert "enforce" in backstop_outcome.limits["time_limit_min"]["applies"]


# -- orphans and signals to the supervisor ------------------------------------------------

SUPERVISOR_SCRIPT = """
import json, sys, time
sys.path.insert(0, {src!r})
from ringflow.supervisor import HealthSettings, ResourceLimits, supervise
work = {work!r}
outcome = supervise(
    [sys.executable, "prog.py"], cwd=work, env={env!r},
    stdout_path=work + "/stdout.txt", stderr_path=work + "/stderr.txt",
    health_dir=work + "/health",
    settings=HealthSettings(collect_s=0.2, interval_s=1, hang_min=1, term_grace_s=1),
    limits=ResourceLimits(),
)
open(work + "/outcome.json", "w").write(json.dumps(outcome.to_dict()))
"""


def _start_nested_supervisor(work: Path) -> subprocess.Popen:
    work.mkdir(parents=True)
    (work / "prog.py").write_text(textwrap.dedent(ESCAPING))
    script = SUPERVISOR_SCRIPT.format(src=SRC, work=str(work), env=ENV)
    (work / "supervisor.py").write_text(script)
    # The shell stays as the supervisor's parent (a second command prevents exec).
    return subprocess.Popen(
        ["sh", "-c", f"{sys.executable} {work / 'supervisor.py'}; echo finished"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


def _supervisor_pid(shell_pid: int) -> int:
    end = time.time() + 10
    while time.time() < end:
        children = Path(f"/proc/{shell_pid}/task/{shell_pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.02)
    raise AssertionError("supervisor never started")


def _orphaned(tmp_path: Path) -> dict:
    work = tmp_path / "orphan"
    shell = _start_nested_supervisor(work)
    program = int(wait_file(work / "program.pid"))
    grandchild = int(wait_file(work / "grandchild.pid"))
    os.kill(shell.pid, signal.SIGKILL)
    killed_at = time.time()
    shell.wait()
    end = killed_at + 1 + 4
    while time.time() < end and (pid_alive(program) or pid_alive(grandchild)):
        time.sleep(0.05)
    gone_after = time.time() - killed_at
    outcome = json.loads(wait_file(work / "outcome.json", timeout=5))
    return {
        "gone_after": gone_after,
        "alive": [pid_alive(program), pid_alive(grandchild)],
        "outcome": outcome,
    }


def _signalled(tmp_path: Path) -> dict:
    work = tmp_path / "signalled"
    shell = _start_nested_supervisor(work)
    supervisor = _supervisor_pid(shell.pid)
    program = int(wait_file(work / "program.pid"))
    wait_file(work / "grandchild.pid")
    os.kill(supervisor, signal.SIGTERM)
    shell.wait(timeout=10)
    outcome = json.loads(wait_file(work / "outcome.json", timeout=5))
    return {"outcome": outcome, "program_alive": pid_alive(program)}


def test_orphaned_supervisor_stops_the_tree_and_a_signal_stops_it_too(tmp_path):
    with ThreadPoolExecutor(2) as pool:
        orphan_future = pool.submit(_orphaned, tmp_path)
        signal_future = pool.submit(_signalled, tmp_path)
        orphan, signalled = orphan_future.result(), signal_future.result()
    assert orphan["alive"] == [False, False], orphan
    assert orphan["gone_after"] <= 1 + 4
    assert orphan["outcome"]["status"] == statuses.INTERRUPTED
    assert orphan["outcome"]["budget_cut"] is False
    assert orphan["outcome"]["reason"].startswith("orphaned")
    assert signalled["outcome"]["status"] == statuses.INTERRUPTED
    assert signalled["outcome"]["budget_cut"] is False
    assert "SIGTERM" in signalled["outcome"]["reason"]
    assert not signalled["program_alive"]


# -- health files ----------------------------------------------------------------------


def test_health_lines_per_interval_keep_bursts(tmp_path):
    code = """
    import time
    time.sleep(1.2)
    end = time.process_time() + 0.4
    while time.process_time() < end:
        pass
    time.sleep(2.0)
    """
    outcome = run(tmp_path, code)
    lines = read_jsonl(outcome.health_jsonl)
    full = [line for line in lines if not line["partial"]]
    # One line per completed interval (the last boundary may fall after the last sample).
    assert int(outcome.wall_s) - 1 <= len(full) <= int(outcome.wall_s), len(full)
    assert [line["interval"] for line in lines] == list(range(len(lines)))
    assert len(lines) - len(full) <= 1
    for line in lines:
        assert line["gpu_attribution"] == "none"
        assert line["probes"]["gpu"] is False and line["probes"]["gpu_reason"]
        assert line["probes"]["proc_tree"] is True
    cumulative = [line["cpu_s_cumulative"] for line in lines]
    assert cumulative == sorted(cumulative)
    burst = max(lines, key=lambda line: line["cpu_frac_max"])
    assert burst["cpu_frac_max"] > 0.3  # the 0.4 s burst shows as a maximum
    assert burst["cpu_frac_avg"] < burst["cpu_frac_max"]
    latest = json.loads(Path(outcome.health_latest).read_text())
    assert latest["state"] == "ended" and latest["outcome"]["status"] == statuses.OK
    assert latest["gpu_attribution"] == "none"
    assert outcome.cpu_s >= 0.4


# -- cgroup --------------------------------------------------------------------------


def test_the_empty_cgroups_of_supervisors_killed_outright_are_swept():
    # A supervisor removes its cgroup as it ends; one killed with SIGKILL cannot, and the
    # next one to make a cgroup beside it removes it once it is surely abandoned.
    if not cgroup2_available():
        pytest.skip("no cgroup2 child can be created here")
    live = OwnedCgroup.create(f"ringflow-{os.getpid()}-{'0' * 12}", None)
    parent = os.path.dirname(live.v2_path)
    ended = subprocess.Popen(["true"])
    ended.wait()
    abandoned = os.path.join(parent, f"ringflow-{ended.pid}-{'a' * 12}")
    busy = os.path.join(parent, f"ringflow-{ended.pid}-{'b' * 12}")
    os.mkdir(abandoned)
    os.mkdir(busy)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        Path(busy, "cgroup.procs").write_text(str(sleeper.pid))
        ours = {abandoned, busy, live.v2_path}
        # Supervisors of tests running beside this one share the parent; a dead one's
        # cgroup may be swept too, so only the cgroups made here are asserted on.
        assert ours.isdisjoint(sweep_abandoned(parent))  # just made: may be starting
        later = time.time() + ABANDONED_AFTER_S + 1
        assert ours.intersection(sweep_abandoned(parent, now=later)) == {abandoned}
        assert os.path.isdir(busy)  # a program still runs in it
        assert os.path.isdir(live.v2_path)  # its supervisor lives
    finally:
        sleeper.kill()
        sleeper.wait()
        for path in (abandoned, busy):
            for _ in range(40):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
        live.remove()


def test_cgroup_cpu_counts_an_exited_unwaited_child(tmp_path):
    if not cgroup2_available():
        pytest.skip("no cgroup2 child can be created here")
    # SIGCHLD ignored: the child is auto-reaped and its CPU never reaches any parent's
    # children times; only the cgroup still counts it.
    code = """
    import os, signal, time
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    if os.fork() == 0:
        while time.process_time() < 1.0:
            pass
        os._exit(0)
    while True:  # with SIGCHLD ignored, waitpid only says when no child is left
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        time.sleep(0.05)
    """
    outcome = run(tmp_path, code, HealthSettings(collect_s=5, interval_s=10, term_grace_s=1))
    assert outcome.status == statuses.OK
    assert outcome.limits["cgroup"]["cpu_accounting"] == "cgroup2 cpu.stat"
    assert outcome.cpu_s >= 1.0, outcome.cpu_s
    assert outcome.limits["cgroup"]["cgroup2"] and not os.path.exists(
        outcome.limits["cgroup"]["cgroup2"]
    )


@pytest.mark.user
def test_memory_limit_enforced_where_a_memory_cgroup_exists(tmp_path):
    outcome = run(
        tmp_path,
        "blocks = [bytearray(50 * 2**20) for _ in range(12)]\n",
        limits=ResourceLimits(memory_gb=0.2),
    )
    memory = outcome.limits["memory"]
    if not memory["enforced"]:
        assert memory["reason"]
        assert events(outcome, "limits")
        pytest.skip(f"memory limit not enforceable here: {memory['reason']}")
    assert outcome.status == statuses.CRASH
    if memory.get("best_effort"):
        # No memory cgroup (an ordinary user): RLIMIT_DATA refuses the allocation past
        # the limit, or the supervisor's count of the tree stops it.
        assert "RLIMIT_DATA" in outcome.reason or "memory limit (ringflow's" in outcome.reason
        return
    assert outcome.signal == signal.SIGKILL
    assert events(outcome, "oom_kill")
    assert outcome.reason.startswith("memory limit (ringflow's 0.2 GB, limits.memory_gb)")
    assert outcome.reason.endswith("killed by signal 9")


# -- settings and helpers --------------------------------------------------------------


def test_settings_from_config():
    assert HealthSettings.from_mapping({}) == HealthSettings()
    s = HealthSettings.from_mapping({"enforce": True, "collect_s": 0.2, "hang_min": 0.05})
    assert (s.enforce, s.collect_s, s.hang_min, s.interval_s) == (True, 0.2, 0.05, 300)
    with pytest.raises(InputError, match="unknown key"):
        HealthSettings.from_mapping({"colect_s": 1})
    with pytest.raises(InputError, match="enforce"):
        HealthSettings.from_mapping({"enforce": "yes"})
    with pytest.raises(InputError, match="collect_s"):
        HealthSettings.from_mapping({"collect_s": 0})
    limits = ResourceLimits.from_mapping({"memory_gb": None, "threads": 2})
    assert (limits.memory_gb, limits.threads, limits.time_limit_min) == (None, 2, 360)
    with pytest.raises(InputError, match="threads"):
        ResourceLimits.from_mapping({"threads": 1.5})
    with pytest.raises(InputError, match="memory_gb"):
        ResourceLimits.from_mapping({"memory_gb": -1})


def test_wait_for_follows_a_moving_deadline():
    assert wait_for(lambda: True, deadline=lambda: None)
    cutoff = [time.time() + 60]
    threading.Timer(0.3, lambda: cutoff.__setitem__(0, time.time())).start()
    started = time.time()
    assert not wait_for(lambda: False, deadline=lambda: cutoff[0], poll_s=0.05)
    assert time.time() - started < 1.0
    assert not wait_for(lambda: True, deadline=lambda: time.time() - 1)


def test_empty_argv_is_refused(tmp_path):
    with pytest.raises(InputError, match="argv"):
        supervise(
            [],
            cwd=tmp_path,
            env=ENV,
            stdout_path=tmp_path / "o",
            stderr_path=tmp_path / "e",
            health_dir=tmp_path / "h",
            settings=FAST,
            limits=ResourceLimits(),
        )
