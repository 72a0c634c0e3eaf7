"""Engineer sessions cut at the hand-over point without a runnable program, for the tests of
the engineer kind of carryover: a scripted engineer that writes notes and a plan, prints a
secret it was passed, and thinks until it is stopped."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from carrytools import wait_for
from ringflow.core.reserve import CutoffFile
from ringflow.search.plan import plan_generation
from ringtools import locked_ring, make_candidate

SECRET_NAME = "RINGFLOW_TEST_TOKEN"
SECRET = "tok-5f1e9a77c3"

# Without a resume snapshot it starts the work; resumed, it adds to it. It never writes a
# run.py: the session is cut at the hand-over point without a runnable program.
ENGINEER_SH = """\
if [ -n "$RINGFLOW_RESUME_DIR" ]; then
  echo "resuming from $(cat "$RINGFLOW_RESUME_DIR/solution/notes.md" | tail -n 1)"
  echo "more notes in $RINGFLOW_NODE" >> notes.md
else
  echo "notes of $RINGFLOW_NODE" > notes.md
  printf '{"next": "write run.py"}\\n' > PLAN.json
fi
echo "token is $RINGFLOW_TEST_TOKEN"
echo "thinking"
sleep 600
"""


def engineer_config(tools: Path, script_text: str = ENGINEER_SH, **overrides) -> dict:
    script = tools / "engineer.sh"
    if not script.exists():
        tools.mkdir(parents=True, exist_ok=True)
        script.write_text(script_text)
    return {"command": f"sh {script}", "builtin_delay_s": 0, "network": False,
            "env_pass": [SECRET_NAME], "mounts": [str(tools)], "stall_min": 30,
            "template": None, **overrides}  # fmt: skip


def search_config(**overrides) -> dict:
    return {"max_nodes": 20, "max_concurrent_nodes": 1, "draft_fraction": 1.0,
            "feedback": "native", "queries_per_node": 5, **overrides}  # fmt: skip


def cut_session(ring: Path, node: str, env: dict) -> int:
    """Run the node's session; once it is thinking, bring the hand-over point to now."""
    proc = subprocess.Popen([sys.executable, "-m", "ringflow", "step", "engineer", str(ring), node],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    log = ring / "nodes" / node / "trajectory" / "stdout.log"
    wait_for(log)
    end = time.monotonic() + 60
    while "thinking" not in log.read_text():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < end, "the session never started thinking"
        time.sleep(0.2)
    node_tail_s = 60  # config/quick.yaml: timeline.node_tail_min 1
    CutoffFile(ring / "cutoff.json").move_earlier(time.time() + node_tail_s, why="test")
    return proc.wait(timeout=60)


def ring_with_cut_session(work: Path, env: dict, ring_id: str = "a",
                          script_text: str = ENGINEER_SH) -> tuple[Path, str]:  # fmt: skip
    """A locked ring whose one planned draft was cut at the hand-over point (by default
    without a runnable program: the script never writes run.py)."""
    make_candidate(work / "cands" / "a", mean=0.5)
    ring = locked_ring(work, work / "cands", ring_id,
                       engineer=engineer_config(work / "tools", script_text),
                       search=search_config())  # fmt: skip
    (node,) = plan_generation(ring, 0)["nodes"]
    assert cut_session(ring, node, env) == 0
    return ring, node


def planned_session(
    tmp_path: Path, script: str, ring_id: str, **engineer
) -> tuple[Path, str, list[str]]:
    """(ring, node, the engineer step's argv) of a locked ring of candidate `a` whose
    first generation plans one session of `script`; `engineer` overrides its keys."""
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    config = engineer_config(tmp_path / "tools", script, env_pass=[], **engineer)
    ring = locked_ring(tmp_path, tmp_path / "cands", ring_id, engineer=config,
                       search=search_config())  # fmt: skip
    (node,) = plan_generation(ring, 0)["nodes"]
    return ring, node, [sys.executable, "-m", "ringflow", "step", "engineer", str(ring), node]


def run_session_step(tmp_path: Path, script: str, ring_id: str, **engineer) -> tuple[Path, str]:
    """Run that session's step to its end (it must exit 0); (ring, node)."""
    ring, node, argv = planned_session(tmp_path, script, ring_id, **engineer)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return ring, node
