"""Whole rings with engineers (issue: the search phase): the built-in engineer's
generations up to the hand-over point, and slow sessions cut there."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from ringflow.core.jsonio import read_json
from ringtools import make_candidate, make_task, snakemake, start_snakemake, write_config

pytestmark = pytest.mark.e2e


def engineer(**overrides) -> dict:
    return {"command": "builtin", "builtin_delay_s": 0, "network": False, "env_pass": [],
            "mounts": [], "stall_min": 30, "template": None, **overrides}  # fmt: skip


def search(**overrides) -> dict:
    return {"max_nodes": 100, "max_concurrent_nodes": 2, "draft_fraction": 0.0,
            "feedback": "native", "queries_per_node": 20, **overrides}  # fmt: skip


def timeline(duration_min, final_reserve_min, node_tail_min) -> dict:
    return {"duration_min": duration_min, "final_reserve_min": final_reserve_min,
            "node_tail_min": node_tail_min, "settle_extra_s": 5, "stop_margin_s": 5,
            "reserve_pad_min": 0.1}  # fmt: skip


def generations(ring: Path) -> list[dict]:
    out, g = [], 0
    while (ring / "search" / f"gen-{g}.json").exists():
        out.append(read_json(ring / "search" / f"gen-{g}.json"))
        g += 1
    return out


def node(ring: Path, node_id: str) -> dict:
    return read_json(ring / "nodes" / node_id / "node.json")


def test_builtin_engineer_runs_generations_until_the_handover_point(tmp_path):
    make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.5, sd=0.01)
    make_candidate(tmp_path / "cands" / "b", mean=0.6, sd=0.01)
    config = write_config(tmp_path, ring_id="b1", task=str(tmp_path / "task"),
                          candidates=str(tmp_path / "cands"), baseline=None,
                          engineer=engineer(builtin_delay_s=1), search=search(draft_fraction=0.25),
                          timeline=timeline(3, 1.5, 0.5))  # fmt: skip
    snakemake(tmp_path, config)
    ring = tmp_path / "runs" / "b1"
    plans = generations(ring)
    assert len(plans) >= 3, plans  # at least two generations of new nodes, then the last
    last = plans[-1]
    assert last["last"] and "hand-over" in last["reason"] and last["nodes"] == []
    assert all(not p["last"] for p in plans[:-1])
    assert all(node(ring, n)["status"] == "ready" for n in plans[0]["nodes"])
    handover = last["handover_at"]
    scored_before = {"n001-a", "n002-b"}
    for plan in plans[:-1]:
        assert plan["planned_at"] < handover
        lottery = {row["node"] for row in plan["lottery"]}
        assert lottery <= scored_before, (lottery, scored_before)
        for node_id in plan["nodes"]:
            record = node(ring, node_id)
            assert record["origin"]["generation"] == plan["generation"]
            assert record["operator"] == "builtin"
            if record["origin"]["kind"] == "improve":
                assert record["parent"] in lottery  # drawn among the scored nodes
            else:
                assert record["origin"]["kind"] == "draft" and record["parent"] is None
            assert record["timestamps"]["session_started_at"] >= plan["planned_at"]
            if record["session"]["budget_cut"]:
                # Planned just before the hand-over point and cut before it wrote: a draft
                # has nothing to run and is carried over; an improvement holds its parent's
                # copy, which is executed, its snapshot sealed as evidence.
                if record["status"] == "carried_over":
                    assert record["origin"]["kind"] == "draft", record
                else:
                    assert record["origin"]["kind"] == "improve", record
                    assert record["status"] == "ready", record
                    evidence = ring / "nodes" / node_id / "evidence" / "SEAL.json"
                    assert evidence.is_file(), record
                continue
            if record["status"] == "rejected":
                # The built-in engineer may write a program that runs already: it is not
                # run again, and the reason names the node that holds it.
                assert re.search(
                    r"wrote the program of n\d{3}-\S+, which runs already$|"
                    r"changed nothing: its program is its parent",
                    record["error"],
                )
                continue
            assert record["status"] == "ready", record
            # A real variant: the built-in engineer changed a hyper-parameter.
            method = (ring / "nodes" / node_id / "solution" / "METHOD.md").read_text()
            assert "changed " in method, method
            assert (ring / "nodes" / node_id / "trajectory" / "stdout.log").stat().st_size > 0
            if record["origin"]["kind"] == "draft":
                # Drafts start from one of this ring's candidates (the demo's for the demo).
                assert re.search(r"drafted from the candidate [ab]\b", method), method
            score = read_json(ring / "nodes" / node_id / "exec" / "proxy" / "s0" / "score.json")
            assert score["scored"], score
            scored_before.add(node_id)
    index = read_json(ring / "nodes" / "index.json")
    engineered = [n for p in plans for n in p["nodes"]]
    assert {n["id"] for n in index["nodes"]} >= set(engineered)
    promotion = read_json(ring / "selection" / "promotion.json")
    ranked = {row["node"] for row in promotion["ranked_by_seed0"]}
    improved = {n for n in engineered if node(ring, n)["origin"]["kind"] == "improve"
                and node(ring, n)["status"] == "ready"}  # fmt: skip
    assert improved and improved <= ranked  # engineered nodes compete like any candidate


ENGINEER_SH = """\
# Odd node numbers write a runnable program first; every session then starts a daemon
# that escapes with setsid and sleeps far past the hand-over point.
case "$RINGFLOW_NODE" in
  n[0-9][0-9][13579]-*)
    printf '%s\\n' 'import json, os' \
      'out = os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json")' \
      'open(out, "w").write(json.dumps({"value": 0.3}))' > run.py
    echo "wrote run.py" ;;
esac
setsid sleep 987.5 &
echo "thinking"
sleep 986.5
"""


def test_slow_sessions_are_cut_at_the_handover_point(tmp_path):
    make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.5, sd=0.01)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "engineer.sh").write_text(ENGINEER_SH)
    config = write_config(tmp_path, ring_id="slow", task=str(tmp_path / "task"),
                          candidates=str(tmp_path / "cands"), baseline=None,
                          engineer=engineer(command=f"sh {tools}/engineer.sh", mounts=[str(tools)]),
                          search=search(draft_fraction=1.0),
                          timeline=timeline(3, 1.5, 0.75))  # fmt: skip
    snakemake(tmp_path, config)
    ring = tmp_path / "runs" / "slow"
    plans = generations(ring)
    assert len(plans) == 2 and plans[1]["last"], plans
    drafts = plans[0]["nodes"]
    assert [n[:4] for n in drafts] == ["n002", "n003"]
    carried, submitted = node(ring, drafts[0]), node(ring, drafts[1])
    # Cut without a runnable program: carried over, kind engineer, never executed.
    assert carried["status"] == "carried_over" and carried["carryover"]["kind"] == "engineer"
    assert carried["session"]["budget_cut"] and not carried["session"]["runnable"]
    assert not (ring / "nodes" / drafts[0] / "exec").exists()
    # Cut with a runnable program: submitted and executed at once.
    assert submitted["status"] == "ready" and submitted["session"]["budget_cut"]
    result = read_json(ring / "nodes" / drafts[1] / "exec" / "proxy" / "s0" / "result.json")
    assert result["status"] == "ok"
    session = read_json(ring / "nodes" / drafts[1] / "session.json")
    assert session["status"] == "cut" and session["ended_at"] <= plans[0]["handover_at"] + 10
    log = (ring / "nodes" / drafts[1] / "trajectory" / "stdout.log").read_text()
    assert "wrote run.py" in log and "thinking" in log
    # The whole tree was stopped, the setsid daemon included.
    marks = ("987.5", "986.5")
    left = [p.info for p in psutil.process_iter(["pid", "cmdline"])
            if any(a in marks for a in p.info["cmdline"] or [])]  # fmt: skip
    assert left == []
    events = [json.loads(line) for line in (ring / "events.jsonl").read_text().splitlines()]
    assert any(e.get("kind") == "node_carried_over" and e.get("node") == drafts[0]
               for e in events)  # fmt: skip


def test_a_session_without_activity_is_stalled(tmp_path):
    make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.5, sd=0.01)
    config = write_config(tmp_path, ring_id="stall", task=str(tmp_path / "task"),
                          candidates=str(tmp_path / "cands"), baseline=None,
                          engineer=engineer(command="sleep 600", stall_min=0.1),
                          search=search(draft_fraction=1.0, max_nodes=2),
                          timeline=timeline(3, 1.5, 0.5))  # fmt: skip
    snakemake(tmp_path, config)
    ring = tmp_path / "runs" / "stall"
    [plan, last] = generations(ring)
    assert last["last"] and "max_nodes" in last["reason"]
    record = node(ring, plan["nodes"][0])
    assert record["session"]["status"] == "stalled" and not record["session"]["budget_cut"]
    assert record["status"] == "rejected" and "no runnable program" in record["error"]


QUERYING_SH = """\
mkdir -p /tmp/pred && printf '{{"value": 0.4}}' > /tmp/pred/score.json
for i in 1 2 3; do "$RINGFLOW_PYTHON" "$RINGFLOW_QUERY_CLIENT" /tmp/pred; echo "rc=$?"; done
for f in {labels} {scorer}; do
  cat "$f" >/dev/null 2>&1 && echo "READ $f" || echo "unreadable $f"
done
ls /ringflow/library >/dev/null 2>&1 && echo "SAW the library" || echo "no library"
echo "library=${{RINGFLOW_ENGINEER_LIBRARY:-none}}"
echo "cmdline1=$(tr '\\0' ' ' < /proc/1/cmdline)"
echo "socket=${{RINGFLOW_QUERY_SOCKET:-none}}"
printf '\n# asked the scorer\n' >> run.py  # a program of its own, not its parent's again
"""


@pytest.mark.parametrize("feedback", ["native", "blind"])
def test_sessions_query_the_scorer_only_in_native_mode_and_never_see_labels(tmp_path, feedback):
    task = make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.5, sd=0.01)
    tools = tmp_path / "tools"
    tools.mkdir()
    script = QUERYING_SH.format(labels=task / "views" / "proxy" / "labels" / "truth.txt",
                                scorer=task / "scorer.py")  # fmt: skip
    (tools / "engineer.sh").write_text(script)
    config = write_config(tmp_path, ring_id=feedback, task=str(task),
                          candidates=str(tmp_path / "cands"), baseline=None,
                          engineer=engineer(command=f"sh {tools}/engineer.sh", mounts=[str(tools)]),
                          search=search(max_nodes=2, queries_per_node=2, feedback=feedback),
                          timeline=timeline(3, 1.5, 0.5))  # fmt: skip
    snakemake(tmp_path, config)
    ring = tmp_path / "runs" / feedback
    [plan, _] = generations(ring)
    node_id = plan["nodes"][0]
    log = (ring / "nodes" / node_id / "trajectory" / "stdout.log").read_text()
    answers = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert "READ" not in log and log.count("unreadable") == 2, log
    # The candidates folder is the built-in engineer's draft library only: it may hold more.
    assert "no library" in log and "library=none" in log, log
    # Neither bubblewrap's command line nor the socket's path names the ring or a box.
    cmdline1 = next(line for line in log.splitlines() if line.startswith("cmdline1="))
    assert str(ring) not in cmdline1 and ".boxes" not in cmdline1, cmdline1
    session = json.loads((ring / "nodes" / node_id / "session.json").read_text())
    assert session["sandbox"]["kernel_state"] == "user-namespace", session["sandbox"]
    record = node(ring, node_id)
    if feedback == "native":
        assert "socket=/ringflow/score.sock" in log, log
        assert [a.get("score") for a in answers] == [0.4, 0.4, None], answers
        assert "quota of 2" in answers[2]["refused"]
        assert log.count("rc=0") == 2 and log.count("rc=3") == 1
        assert record["queries_used"] == 2
        admitted = (ring / "nodes" / node_id / "queries.jsonl").read_text().count('"admitted"')
        assert admitted == 2
    else:
        assert all("refused" in a for a in answers) and log.count("rc=3") == 3, answers
        assert record["queries_used"] == 0
        assert not (ring / "nodes" / node_id / "queries.jsonl").exists()
    assert record["status"] == "ready"


SLOW_FIRST_SH = """\
if [ -e {flag} ]; then echo thinking; sleep 120; fi
printf '\\n# tuned by session %s\\n' "$RINGFLOW_NODE" >> run.py
"""


def test_a_ring_interrupted_in_a_session_runs_it_again_and_goes_on_searching(tmp_path):
    # Resumed with a generation planned and its session stopped, the ring engineers that
    # node again and settles it before its search may end: the loop is walked from the
    # start, not taken as ended by its last plan.
    make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.5, sd=0.01)
    tools = tmp_path / "tools"
    flag = tools / "slow"  # the session sees engineer.mounts only
    tools.mkdir()
    (tools / "engineer.sh").write_text(SLOW_FIRST_SH.format(flag=flag))
    flag.write_text("")
    config = write_config(tmp_path, ring_id="si", task=str(tmp_path / "task"),
                          candidates=str(tmp_path / "cands"), baseline=None,
                          engineer=engineer(command=f"sh {tools}/engineer.sh",
                                            mounts=[str(tools)]),
                          search=search(max_nodes=3, max_concurrent_nodes=1),
                          timeline=timeline(6, 2, 0.5))  # fmt: skip
    ring = tmp_path / "runs" / "si"
    driver = start_snakemake(tmp_path, config)
    try:
        end = time.monotonic() + 240
        while not any("thinking" in log.read_text()
                      for log in ring.glob("nodes/*-g0/trajectory/stdout.log")):  # fmt: skip
            assert driver.poll() is None and time.monotonic() < end, "no session started"
            time.sleep(0.2)
        os.killpg(driver.pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches every process
        assert driver.wait(timeout=100) != 0
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    (first,) = generations(ring)[0]["nodes"]
    assert node(ring, first)["status"] == "engineering"
    assert not (ring / "nodes" / first / "session.json").exists()

    flag.unlink()
    snakemake(tmp_path, config)
    record = node(ring, first)
    assert record["status"] == "ready", record
    assert read_json(ring / "nodes" / first / "exec" / "proxy" / "s0" / "score.json")["scored"]
    plans = generations(ring)
    assert len(plans) >= 2 and plans[-1]["last"] and "max_nodes" in plans[-1]["reason"]
    assert "engineering" not in (ring / "summary.txt").read_text()
