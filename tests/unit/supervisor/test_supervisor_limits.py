"""Per-execution limits the supervisor enforces (docs/operations.md#health-supervision): logs,
output, processes, memory."""

from __future__ import annotations

import resource
import sys
import textwrap
from pathlib import Path

import pytest

from ringflow.core import statuses
from ringflow.supervisor import ResourceLimits
from ringflow.supervisor.cgroup import DISABLE_ENV
from ringflow.supervisor.oom import allocation_failed
from supervisetools import supervised

# An ordinary user has no memory cgroup: the supervisor alone holds these limits.
pytestmark = pytest.mark.user


def run(tmp_path: Path, code: str, env: dict | None = None, **limits):
    limits = ResourceLimits(memory_gb=None, time_limit_min=2, threads=1, **limits)
    return supervised(tmp_path, [sys.executable, "-c", textwrap.dedent(code)], limits, env,
                      watch_output=[tmp_path / "output"])  # fmt: skip


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


FORK_UNTIL_REFUSED = """
import subprocess, sys, time
children = []
for _ in range(60):
    try:
        children.append(subprocess.Popen(["sleep", "30"]))
    except OSError:
        break
"""


def test_forking_past_the_process_limit_without_a_pids_cgroup_ends_the_execution(
    tmp_path, monkeypatch
):
    # No pids cgroup and no sandbox here: the supervisor's count is all that holds it.
    monkeypatch.setenv(DISABLE_ENV, "1")
    outcome = run(tmp_path, FORK_UNTIL_REFUSED + "time.sleep(30)\n", max_processes=20)
    assert outcome.status == statuses.CRASH
    assert "process limit reached" in outcome.reason and "max_processes" in outcome.reason
    assert outcome.reap_left == []
    assert outcome.limits["max_processes"]["value"] == 20
    assert not outcome.limits["max_processes"]["enforced"]
    assert outcome.wall_s < 15


def pids_cgroup_run(tmp_path, code: str):
    outcome = run(tmp_path, FORK_UNTIL_REFUSED + code, max_processes=20)
    if not outcome.limits["max_processes"]["enforced"]:
        pytest.skip("no pids cgroup here: " + outcome.limits["max_processes"].get("reason", ""))
    return outcome


def test_a_fork_refused_by_the_pids_cgroup_is_the_programs_to_handle(tmp_path):
    # The kernel refuses the fork at the limit; the program carries on and succeeds, and
    # every run of it ends so, whenever the supervisor happens to count.
    outcome = pids_cgroup_run(tmp_path, "print(len(children))\n")
    assert outcome.status == statuses.OK, outcome.reason
    assert outcome.limits["max_processes"]["refused"] >= 1
    noted = [e for e in outcome.events if e.get("limit") == "max_processes"]
    assert len(noted) == 1 and noted[0]["refused"] >= 1
    assert int((tmp_path / "stdout.log").read_text()) < 20


def test_a_program_that_fails_on_a_refused_fork_says_the_process_limit(tmp_path):
    outcome = pids_cgroup_run(tmp_path, "sys.exit(3)\n")
    assert outcome.status == statuses.CRASH
    assert outcome.reason.startswith("process limit reached: the kernel refused ")
    assert "(limits.max_processes = 20); exited with code 3" in outcome.reason
    assert outcome.limits["max_processes"]["refused"] >= 1


def supervise_without_cgroup(tmp_path, monkeypatch, code: str, memory_gb: float, **kw):
    monkeypatch.setenv(DISABLE_ENV, "1")  # as an ordinary user, who has no memory cgroup
    limits = ResourceLimits(memory_gb=memory_gb, time_limit_min=2, threads=1)
    return supervised(tmp_path, [sys.executable, "-c", textwrap.dedent(code)], limits, **kw)


# Three processes of 60 MB each: every one under RLIMIT_DATA, the tree over the limit.
THREE_HOLDERS = """
import subprocess, sys, time
hold = "b = bytearray(60 << 20); import time; time.sleep(30)"
kids = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range(3)]
time.sleep(30)
"""


def test_memory_without_a_cgroup_is_enforced_on_the_summed_rss(tmp_path, monkeypatch):
    outcome = supervise_without_cgroup(tmp_path, monkeypatch, THREE_HOLDERS, memory_gb=0.1)
    assert outcome.status == statuses.CRASH
    assert outcome.reason.startswith("memory limit (ringflow's 0.1 GB, limits.memory_gb) exceeded")
    assert "summed RSS" in outcome.reason
    assert outcome.reap_left == []
    memory = outcome.limits["memory"]
    assert memory["enforced"] and memory["best_effort"] and "summed RSS" in memory["how"]
    assert memory["rlimit_data_bytes"] == int(0.1 * 1024**3)


def test_one_process_past_the_memory_limit_is_refused_by_rlimit_data(tmp_path, monkeypatch):
    code = "b = bytearray(300 << 20)"
    outcome = supervise_without_cgroup(tmp_path, monkeypatch, code, memory_gb=0.1)
    assert outcome.status == statuses.CRASH and outcome.exit_code == 1
    assert "RLIMIT_DATA" in outcome.reason and "limits.memory_gb" in outcome.reason
    assert "MemoryError" in (tmp_path / "stderr.log").read_text()
    assert "0.1 GiB of data" in outcome.reason


def test_a_crash_that_is_no_failed_allocation_does_not_blame_the_memory_limit(
    tmp_path, monkeypatch
):
    code = "raise RuntimeError('deliberate failure')"
    outcome = supervise_without_cgroup(tmp_path, monkeypatch, code, memory_gb=0.1)
    assert outcome.status == statuses.CRASH and outcome.exit_code == 1
    assert "RLIMIT_DATA" not in outcome.reason  # beside the point here
    assert outcome.limits["memory"]["rlimit_data_bytes"] == int(0.1 * 1024**3)  # still recorded


def test_what_programs_write_when_an_allocation_fails_is_recognised(tmp_path):
    said = {
        "numpy": "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 8.00 GiB",
        "c": "malloc: Cannot allocate memory",
        "c++": "terminate called after throwing an instance of 'std::bad_alloc'",
        "torch": "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried 9 GB",
        "other": "ValueError: the input has 3 columns, expected 4",
    }
    for name, line in said.items():
        log = tmp_path / f"{name}.log"
        log.write_text("x" * 100_000 + "\n" + line + "\n")  # after more than the tail read
        assert allocation_failed(log) is (name != "other"), name
    assert allocation_failed(tmp_path / "missing.log") is False


def test_a_gpu_run_gets_no_data_limit(tmp_path, monkeypatch):
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_DATA)[0])"
    outcome = supervise_without_cgroup(tmp_path, monkeypatch, code, memory_gb=0.1, gpu_ids=[0])
    assert outcome.status == statuses.OK
    assert int((tmp_path / "stdout.log").read_text()) == resource.RLIM_INFINITY
    assert outcome.limits["memory"]["rlimit_data_bytes"] is None


def test_a_tree_near_its_memory_limit_is_checked_ten_times_a_second(tmp_path, monkeypatch):
    # Past half its limit for 4 s: read every 0.1 s there, not once a second.
    code = "import time; base = bytearray(80 << 20); time.sleep(4)"
    outcome = supervise_without_cgroup(tmp_path, monkeypatch, code, memory_gb=0.12)
    assert outcome.status == statuses.OK, outcome.reason
    assert outcome.limits["memory"]["near_limit_checks"] >= 10


def test_a_spike_between_one_second_checks_is_caught_near_the_limit(tmp_path, monkeypatch):
    code = """
    import subprocess, sys, time
    base = bytearray(60 << 20)
    time.sleep(1.5)
    spike = "b = bytearray(70 << 20); import time; time.sleep(0.8)"
    subprocess.run([sys.executable, "-c", spike])
    """
    outcome = supervise_without_cgroup(tmp_path, monkeypatch, code, memory_gb=0.12)
    assert outcome.status == statuses.CRASH
    assert "memory limit (ringflow's" in outcome.reason


def test_many_small_files_fail_the_run_at_the_file_limit_however_fast(tmp_path):
    # Written and ended within one check interval: the count after the run catches it.
    code = """
    import os
    out = os.environ["OUT"]
    for i in range(120):
        open(os.path.join(out, f"f{i}"), "w").close()
    """
    outcome = run(tmp_path, code, output_files=100)
    assert outcome.status == statuses.CRASH
    assert "output file limit exceeded" in outcome.reason and "output_files" in outcome.reason


def test_a_sparse_file_counts_at_its_apparent_size(tmp_path):
    code = """
    import os
    with open(os.path.join(os.environ["OUT"], "sparse"), "wb") as f:
        f.truncate(64 << 20)
    """
    outcome = run(tmp_path, code, output_gb=10 / 1024)
    assert outcome.status == statuses.CRASH and "output limit exceeded" in outcome.reason


@pytest.mark.parametrize("signal_default", [False, True])
def test_a_write_refused_past_the_largest_file_names_the_output_limit(tmp_path, signal_default):
    # The sandbox sets RLIMIT_FSIZE from limits.output_gb; this program sets it itself. A
    # sparse write far past it fills nothing, so only the refusal tells why it crashed:
    # EFBIG where SIGXFSZ is ignored (Python's default), the signal itself otherwise.
    outcome = run(
        tmp_path,
        f"""
        import os, resource, signal
        if {signal_default}:
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        os.makedirs("output", exist_ok=True)
        with open("output/big.bin", "wb") as handle:
            handle.seek(100 << 20)
            handle.write(b"x")
        """,
        output_gb=0.01,
    )
    assert outcome.status == statuses.CRASH
    assert outcome.reason.startswith(
        "a write past the largest file a program may write was refused "
        "(limits.output_gb = 0.01, RLIMIT_FSIZE); "
    ), outcome.reason
