"""Whole rings with a slow scripted engineer (issue: the search phase, items 5 and 7): in
native and blind mode alike its running program is scored in the background for the
report's best-so-far curve, which the session never sees; the session runs the task's
public validator on its own predictions, and labels and scorer stay unreadable."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ringflow.core.jsonio import read_json
from ringtools import SCORER_ARGS, VALIDATOR, make_candidate, make_task, snakemake, write_config

pytestmark = pytest.mark.e2e

# Scores the session cannot know: the program's value plus an offset only the labels hold.
OFFSET = 0.1234
SCORER = (
    SCORER_ARGS
    + """\
offset = float(open(os.path.join(a.labels, "offset.txt")).read())
try:
    value = json.load(open(os.path.join(a.pred, "score.json")))["value"]
    rec = {"score": round(value + offset, 4), "valid": True, "reason": ""}
    if a.bootstrap:
        rec["bootstrap"] = [rec["score"]] * a.bootstrap
except Exception as exc:
    rec = {"score": None, "valid": False, "reason": f"no usable score.json: {exc}"}
json.dump(rec, open(a.out, "w"))
"""
)
# Writes a runnable program at once, checks its predictions with the task's validator,
# keeps working, improves it, keeps working, then leaves what it could see behind.
ENGINEER_SH = """\
cat > run.py <<'PY'
import json, os, sys
print("nice=%d" % os.nice(0), file=sys.stderr)
out = os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json")
open(out, "w").write(json.dumps({"value": 0.3}))
PY
echo "wrote v1"
mkdir -p /tmp/pred /tmp/bad
RINGFLOW_INPUT_DIR="$RINGFLOW_INPUTS/proxy" RINGFLOW_OUTPUT_DIR=/tmp/pred "$RINGFLOW_PYTHON" run.py
(cd /tmp && "$RINGFLOW_VALIDATE" --pred pred --inputs "$RINGFLOW_INPUTS/proxy" 2>/tmp/why)
echo "own predictions rc=$?" > VERDICT.txt
printf '{"value": 7}' > /tmp/bad/score.json
"$RINGFLOW_VALIDATE" --pred /tmp/bad --inputs "$RINGFLOW_INPUTS/proxy" 2>/tmp/why
echo "bad predictions rc=$? $(tail -n 1 /tmp/why)" >> VERDICT.txt
for f in {labels} {scorer} /ringflow/validator/files/scorer.py; do
  cat "$f" >/dev/null 2>&1 && echo "READ $f" || echo "unreadable $f"
done
ls -R /ringflow/validator > VALIDATOR_COPY.txt
sleep 9
sed -i 's/0.3/0.45/' run.py
echo "wrote v2"
sleep 9
env | sort > SEEN_ENV.txt
cp "$RINGFLOW_INSTRUCTIONS" SEEN_INSTRUCTIONS.md
ls -laR /ringflow /tmp > SEEN_FILES.txt 2>&1
echo done
"""


def _task(root: Path) -> Path:
    task = make_task(root)
    spec = yaml.safe_load((task / "task.yaml").read_text())
    (task / "task.yaml").write_text(yaml.safe_dump({**spec, "validator": "python validator.py"}))
    (task / "scorer.py").write_text(SCORER)
    (task / "validator.py").write_text(VALIDATOR)
    for view in spec["views"]:
        (task / "views" / view / "labels" / "offset.txt").write_text(f"{OFFSET}\n")
    return task


@pytest.mark.parametrize("feedback", ["native", "blind"])
def test_best_so_far_is_measured_alike_in_both_modes_and_never_shown(tmp_path, feedback):
    task = _task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.2)
    tools = tmp_path / "tools"
    tools.mkdir()
    labels = task / "views" / "proxy" / "labels" / "offset.txt"
    (tools / "engineer.sh").write_text(
        ENGINEER_SH.replace("{labels}", str(labels)).replace("{scorer}", str(task / "scorer.py"))
    )
    engineer = {
        "command": f"sh {tools}/engineer.sh",
        "builtin_delay_s": 0,
        "network": False,
        "env_pass": [],
        "mounts": [str(tools)],
        "stall_min": 30,
        "template": None,
    }
    search = {
        "max_nodes": 2,
        "max_concurrent_nodes": 1,
        "draft_fraction": 1.0,
        "feedback": feedback,
        "queries_per_node": 5,
        "background_eval_min": 0.05,
    }
    timeline = {"duration_min": 4, "final_reserve_min": 1.5, "node_tail_min": 0.5,
                "settle_extra_s": 5, "stop_margin_s": 5, "reserve_pad_min": 0.1}  # fmt: skip
    config = write_config(tmp_path, ring_id=feedback, task=str(task),
                          candidates=str(tmp_path / "cands"), baseline=None,
                          engineer=engineer, search=search, timeline=timeline)  # fmt: skip
    snakemake(tmp_path, config)
    ring = tmp_path / "runs" / feedback
    [node_id] = read_json(ring / "search" / "gen-0.json")["nodes"]
    node = read_json(ring / "nodes" / node_id / "node.json")
    assert node["status"] == "ready" and node["session"]["status"] == "ended", node

    # Background evaluations: both versions scored, while the session ran, niced.
    rows = [json.loads(line) for line in
            (ring / "nodes" / node_id / "best_so_far.jsonl").read_text().splitlines()]  # fmt: skip
    scored = [r for r in rows if r["status"] == "scored"]
    assert {r["score"] for r in scored} >= {0.4234, 0.5734}, rows
    session = read_json(ring / "nodes" / node_id / "session.json")
    for row in scored:
        assert row["nice"] == 19 and row["view"] == "proxy" and len(row["tree_hash"]) == 64
        assert session["started_at"] < row["at"] <= session["ended_at"]
        assert abs(row["t"] - (row["at"] - read_json(ring / "RING.json")["start"])) < 1e-6
    assert len({r["tree_hash"] for r in scored}) == len(scored)  # only changed programs
    assert all(r["status"] in ("scored", "cut", "skipped", "not_runnable") for r in rows), rows
    logs = ring / "nodes" / node_id / "best_so_far"
    assert all("nice=19" in (logs / str(r["eval"]) / "stderr.log").read_text() for r in scored)
    execution = ring / "nodes" / node_id / "exec" / "proxy" / "s0"
    assert "nice=0" in (execution / "stderr.log").read_text()  # the ring's own run: not niced
    assert read_json(execution / "score.json")["score"] == 0.5734
    # Never a query, never feedback: nothing of it reached the session, in either mode.
    assert node["queries_used"] == 0 and not (ring / "nodes" / node_id / "queries.jsonl").exists()
    seen = ring / "nodes" / node_id / "solution"
    leaked = [*(seen.glob("SEEN_*")), ring / "nodes" / node_id / "trajectory" / "stdout.log"]
    assert len(leaked) == 4
    for path in leaked:
        text = path.read_text()
        assert "0.4234" not in text and "0.5734" not in text, path
        assert "best_so_far.jsonl" not in text, path
        if feedback == "blind":
            assert "0.3234" not in text, path  # the static candidate's score: not shown
    assert "RINGFLOW_VALIDATE=/ringflow/validator/validate" in (seen / "SEEN_ENV.txt").read_text()

    # The public validator, run by the session on its own predictions; labels and scorer
    # unreadable, the copy holds the validator alone.
    verdict = (seen / "VERDICT.txt").read_text()
    assert "own predictions rc=0" in verdict, verdict
    assert "bad predictions rc=1 value 7 is not a number in [0, 1]" in verdict, verdict
    log = (ring / "nodes" / node_id / "trajectory" / "stdout.log").read_text()
    assert "READ" not in log and log.count("unreadable") == 3, log
    copy = (seen / "VALIDATOR_COPY.txt").read_text()
    assert "validator.py" in copy and "scorer.py" not in copy and "offset" not in copy
    instructions = (seen / "SEEN_INSTRUCTIONS.md").read_text()
    assert '"$RINGFLOW_VALIDATE" --pred PRED_DIR' in instructions

    # The report and the summary: the curve, and the time to the first valid result.
    report = (ring / "report.html").read_text()
    svg = re.search(r'<svg id="best-so-far".*?</svg>', report, flags=re.S).group(0)
    assert svg.count('data-source="background"') == len(scored)
    assert svg.count('data-source="execution"') == 2  # the static candidate and the node
    assert "<polyline" in svg
    first = re.search(r'<td id="first-valid">(.*?)</td>', report, flags=re.S).group(1)
    assert "n001-a" in first and "seed 0 on proxy" in first  # static a scored first
    assert 'id="background-evaluations"' in report
    summary = (ring / "summary.txt").read_text()
    assert f"background evaluations: {len([r for r in rows if 'eval' in r])}" in summary
    assert "best run of this ring on proxy: 0.5734" in summary
