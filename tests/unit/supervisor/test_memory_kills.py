"""A memory kill names the limit it met: ringflow's own, or an enclosing cgroup's."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from ringflow.supervisor.cgroup import own_cgroup_paths, read_mounts

# The supervisor in a process of its own, moved into an enclosing memory cgroup (as a
# SLURM job or a container would be) before it starts the program; ringflow sets no limit.
SUPERVISED = """\
import json, os, sys
from ringflow.supervisor import HealthSettings, ResourceLimits, supervise
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
work = sys.argv[2]
outcome = supervise(
    [sys.executable, "-c", "b = [bytearray(50 << 20) for _ in range(12)]"],
    cwd=work, env=dict(os.environ), stdout_path=work + "/out", stderr_path=work + "/err",
    health_dir=work + "/health", settings=HealthSettings(collect_s=0.2, interval_s=1,
    term_grace_s=1), limits=ResourceLimits(memory_gb=None, time_limit_min=2, threads=1),
    watch_ancestors=False,
)
print(json.dumps({"reason": outcome.reason, "signal": outcome.signal}))
"""


def _memory_v1_folder() -> Path | None:
    for mount in read_mounts():
        if mount.fstype == "cgroup" and "memory" in mount.superopts:
            own = own_cgroup_paths().get("memory")
            if own is None:
                return None
            return Path(mount.mountpoint) / own.lstrip("/")
    return None


@pytest.fixture
def enclosing_cgroup():
    own = _memory_v1_folder()
    if own is None or not os.access(own, os.W_OK):
        pytest.skip("no writable v1 memory cgroup to enclose the supervisor in")
    folder = own / f"ringflow-test-{secrets.token_hex(4)}"
    folder.mkdir()
    (folder / "memory.limit_in_bytes").write_text(str(200 << 20))
    yield folder
    # Every process of the test has exited by now; the folder is empty.
    for pid in (folder / "cgroup.procs").read_text().split():
        (own / "cgroup.procs").write_text(pid)
    folder.rmdir()


def test_a_kill_by_an_enclosing_cgroup_names_that_cgroup(tmp_path, enclosing_cgroup):
    pid_file = tmp_path / "pid"
    procs = str(enclosing_cgroup / "cgroup.procs")
    code = f"import os\nopen({procs!r}, 'w').write(str(os.getpid()))\n" + SUPERVISED
    done = subprocess.run([sys.executable, "-c", code, str(pid_file), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["signal"] == 9
    assert outcome["reason"].startswith("memory limit (the cgroup's 0.195 GB, "), outcome
    assert str(enclosing_cgroup) in outcome["reason"]
    assert outcome["reason"].endswith("killed by signal 9")
