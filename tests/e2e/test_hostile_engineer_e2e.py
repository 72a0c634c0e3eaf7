"""Hostile engineer sessions (docs/limits.md#engineer-sessions): whatever a session leaves in
its workspace, its node gets a recorded status with a specific reason, nothing past
engineer.limits is submitted, and the next session of the same ring runs as if nothing had
happened."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engtools import search_config
from ringflow.search.plan import plan_generation
from ringtools import locked_ring, make_candidate

pytestmark = [pytest.mark.e2e, pytest.mark.sandbox]

RUN_PY = "printf 'print(1)\\n' > run.py\n"
SESSIONS = {
    "fifo": RUN_PY + "mkfifo pipe\n",
    "loop": RUN_PY + "ln -s loop-a loop-b; ln -s loop-b loop-a\n",
    "badname": RUN_PY + "touch \"$(printf 'bad\\377\\376name')\"\n",
    "deepjson": RUN_PY + "python3 -c \"print('[' * 50000 + ']' * 50000)\" > EXECUTION.json\n",
    "manyfiles": RUN_PY + "for i in $(seq 1 80); do : > f$i; done; sleep 5\n",
    "sparse": RUN_PY + "truncate -s 2G big.bin; echo truncate=$?\n",
    "plain": RUN_PY,
}
WHY = {
    "fifo": "is not a file or folder (a FIFO)",
    "loop": "does not lead to a file (a loop, or dangling)",
    "badname": "bad\\xff\\xfename is not plain text",
    "deepjson": "nested too deeply",
    "manyfiles": "more than 50 entries",
}


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    work = tmp_path_factory.mktemp("hostile-engineer")
    make_candidate(work / "cands" / "a", mean=0.5)
    tools = work / "tools"
    tools.mkdir()
    engineer = {"command": f"sh {tools}/dispatch.sh", "builtin_delay_s": 0, "network": False,
                "env_pass": [], "mounts": [str(tools)], "stall_min": 30, "template": None,
                "limits": {"file_mb": 1, "workspace_gb": 0.01, "workspace_files": 50}}  # fmt: skip
    ring = locked_ring(work, work / "cands", "hostile-eng", engineer=engineer,
                       search=search_config(max_concurrent_nodes=len(SESSIONS),
                                            max_nodes=len(SESSIONS) + 1))  # fmt: skip
    nodes = plan_generation(ring, 0)["nodes"]
    assert len(nodes) >= len(SESSIONS), nodes
    # Each planned node runs the script of its kind, picked by its node id.
    picked = dict(zip(nodes, SESSIONS, strict=False))
    lines = [f'[ "$RINGFLOW_NODE" = "{node}" ] && {{\n{SESSIONS[kind]}exit 0\n}}'
             for node, kind in picked.items()]  # fmt: skip
    (tools / "dispatch.sh").write_text("\n".join(lines) + "\n")
    records = {}
    for node, kind in picked.items():
        argv = [sys.executable, "-m", "ringflow", "step", "engineer", str(ring), node]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        records[kind] = json.loads((ring / "nodes" / node / "node.json").read_text())
    return ring, records


@pytest.mark.parametrize("kind", sorted(WHY))
def test_a_hostile_workspace_rejects_its_node_with_the_reason(sessions, kind):
    _ring, records = sessions
    node = records[kind]
    assert node["status"] == "rejected", node
    assert WHY[kind] in node["error"], node["error"]
    node["error"].encode("utf-8")


def test_a_file_past_the_file_size_limit_is_never_written(sessions):
    ring, records = sessions
    node = records["sparse"]
    assert node["status"] == "ready", node.get("error")
    submission = ring / "nodes" / node["id"] / "solution"
    assert all(f.stat().st_size <= 1 << 20 for f in submission.rglob("*") if f.is_file())


def test_the_plain_session_next_to_them_is_unaffected(sessions):
    ring, records = sessions
    node = records["plain"]
    assert node["status"] == "ready", node.get("error")
    assert (ring / "nodes" / node["id"] / "solution" / "run.py").read_text() == "print(1)\n"
