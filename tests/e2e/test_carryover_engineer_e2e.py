"""Three chained rings (issue: carryover and chained rings), engineer kind.

Ring a: a slow scripted engineer is cut at the hand-over point without a program and its
work is carried (engineer). Ring b continues a: the work is resumed in generation 0, before
any new node, from the snapshot's solution/, cut again and carried again. Ring c continues b
with max_resume_per_ring 2: only b's re-carried work is resumed (a's, reached again through
b, is not); the resumed node's trajectory starts with the earlier segments' logs, its query
quota is what the two earlier segments left, and it finishes the work. `ringflow package`
lists both earlier segments; a tainted grandparent makes it refuse.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engtools import engineer_config, search_config
from ringflow.carryover.seal import seal_problems
from ringflow.core.reserve import CutoffFile
from ringflow.verify import verify_ring
from ringtools import make_candidate, make_task, snakemake, snakemake_argv, write_config

pytestmark = pytest.mark.e2e

# One score query per segment; the third segment (the snapshot it resumes has earlier
# segments of its own) finishes the work with a runnable program, the others think on.
ENGINEER_SH = """\
if [ -d "$RINGFLOW_RESUME_DIR/trajectory/segments" ]; then
  echo "finishing after $(wc -l < notes.md) notes"
  cat > run.py <<'PY'
import argparse, json, os, random
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
p.add_argument("--ablate", action="store_true")
value = 0.9 + random.Random(p.parse_args().seed).gauss(0, 0.01)
out = os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json")
open(out, "w").write(json.dumps({"value": value}))
PY
  echo "A constant prediction, finished in its third segment." > METHOD.md
  exit 0
fi
if [ -n "$RINGFLOW_RESUME_DIR" ]; then
  echo "resuming: $(tail -n 1 "$RINGFLOW_RESUME_DIR/solution/notes.md")"
  echo "notes of segment 2" >> notes.md
else
  echo "notes of segment 1" > notes.md
  printf '{"next": "write run.py"}\\n' > PLAN.json
fi
mkdir -p "$HOME/pred" && printf '{"value": 0.1}' > "$HOME/pred/score.json"
"$RINGFLOW_PYTHON" "$RINGFLOW_QUERY_CLIENT" "$HOME/pred"
echo "thinking"
sleep 600
"""

NODE_TAIL_S = 60  # config/quick.yaml: timeline.node_tail_min 1


def read(path: Path):
    return json.loads(path.read_text())


def run_ring_and_cut(work: Path, config: Path, ring: Path, node: str) -> None:
    """Run the ring; once the node's session is thinking, bring the hand-over point to now.
    The ring must then end by itself."""
    log_path = work / f"{ring.name}.log"
    stdout = ring / "nodes" / node / "trajectory" / "stdout.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(snakemake_argv(work, config), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            end = time.monotonic() + 240
            while not (stdout.exists() and "thinking" in stdout.read_text()):
                assert proc.poll() is None, log_path.read_text()[-4000:]
                assert time.monotonic() < end, f"{node}'s session never started thinking"
                time.sleep(0.5)
            CutoffFile(ring / "cutoff.json").move_earlier(time.time() + NODE_TAIL_S, why="test")
            assert proc.wait(timeout=300) == 0, log_path.read_text()[-4000:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def carried(ring: Path, node: str) -> tuple[dict, dict, Path]:
    """The node was carried over (engineer) and its seal verifies: node, HANDOFF, snapshot."""
    node_json = read(ring / "nodes" / node / "node.json")
    assert node_json["status"] == "carried_over", node_json
    assert node_json["carryover"]["kind"] == "engineer" and node_json["carryover"]["seal_sha256"]
    snapshot = ring / "nodes" / node / "carryover"
    assert seal_problems(snapshot, read(snapshot / "SEAL.json")) == []
    return node_json, read(snapshot / "HANDOFF.json"), snapshot


def package(ring: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ringflow", "package", str(ring), "--out",
                           str(out)], capture_output=True, text=True)  # fmt: skip


def test_engineer_work_is_carried_resumed_once_per_ring_and_packaged_with_its_lineage(tmp_path):
    task = make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    make_candidate(tmp_path / "base", mean=0.3, sd=0.01)
    runs = tmp_path / "runs"

    # Ring a: the draft's session is cut at the hand-over point without a program.
    config_a = write_config(tmp_path, ring_id="a", task=str(task),
                            candidates=str(tmp_path / "cands"), baseline=str(tmp_path / "base"),
                            engineer=engineer_config(tmp_path / "tools", ENGINEER_SH),
                            search=search_config(max_nodes=3, queries_per_node=3))  # fmt: skip
    a, draft = runs / "a", "n002-draft-g0"
    run_ring_and_cut(tmp_path, config_a, a, draft)
    _node, handoff_a, snapshot_a = carried(a, draft)
    assert handoff_a["queries_used"] == 1 and handoff_a["plan"] is True
    assert (snapshot_a / "PLAN.json").is_file() and (snapshot_a / "solution/notes.md").is_file()
    manifest_a = read(a / "stop_manifest.json")
    assert [(s["identity"], s["kind"]) for s in manifest_a["seals"]] == [(f"a#{draft}", "engineer")]
    assert verify_ring(a) == []

    # Ring b continues a: the work is resumed first (generation 0), cut again, carried again.
    config_b = write_config(tmp_path, ring_id="b", continue_from="runs/a")
    b, resumed = runs / "b", "n001-draft-g0"
    run_ring_and_cut(tmp_path, config_b, b, resumed)
    assert read(b / "carryover" / "imported.json")["queue"] == [f"a#{draft}"]
    gen0, gen1 = read(b / "search" / "gen-0.json"), read(b / "search" / "gen-1.json")
    assert gen0["nodes"] == gen0["resumed"] == [resumed]
    assert gen1["last"] and gen1["nodes"] == []  # no new node before it, none after the cut
    node_b, handoff_b, snapshot_b = carried(b, resumed)
    assert node_b["origin"]["kind"] == "resume" and node_b["parent"] is None
    assert [(s["ring"], s["node"]) for s in node_b["resume_origin"]["segments"]] == [("a", draft)]
    assert handoff_b["segments"][0]["quota"]["used"] == 1
    assert handoff_b["queries_quota"] == 2 and handoff_b["queries_used"] == 1
    assert handoff_b["changed_files"]["modified"] == ["notes.md"]
    assert (snapshot_b / "solution/notes.md").read_text() == (
        "notes of segment 1\nnotes of segment 2\n"
    )
    own_b = (b / "nodes" / resumed / "trajectory" / "stdout.log").read_text()
    assert "resuming: notes of segment 1" in own_b
    instructions_b = (b / "nodes" / resumed / "trajectory" / "INSTRUCTIONS.md").read_text()
    assert f"RESUME: you continue carried-over work (a#{draft})" in instructions_b
    assert "score queries left: 2" in instructions_b
    last = instructions_b.split("Last messages of the previous session:")[1].split("## ")[0]
    assert "\nthinking\n" in last and "missing program: no run.py" in instructions_b
    assert verify_ring(b) == []

    # Ring c continues b, resuming at most 2: only b's re-carried work.
    config_c = write_config(tmp_path, ring_id="c", continue_from="runs/b", max_resume_per_ring=2)
    snakemake(tmp_path, config_c)
    c = runs / "c"
    imported_c = read(c / "carryover" / "imported.json")
    assert imported_c["queue"] == [f"b#{resumed}"]
    assert [r["identity"] for r in imported_c["already_resumed"]] == [f"a#{draft}"]
    node_c = read(c / "nodes" / resumed / "node.json")
    segments = node_c["resume_origin"]["segments"]
    assert [(s["ring"], s["node"]) for s in segments] == [("a", draft), ("b", resumed)]
    assert [s["seal_sha256"] for s in segments] == [
        manifest_a["seals"][0]["seal_sha256"],
        read(b / "stop_manifest.json")["seals"][0]["seal_sha256"],
    ]
    # Its quota: 3 per node, less one query in each earlier segment.
    assert read(c / "nodes" / resumed / "session.json")["queries_quota"] == 1
    # Its trajectory starts with the earlier segments' logs, oldest first, then its own.
    trajectory = c / "nodes" / resumed / "trajectory"
    earlier = sorted(p.name for p in (trajectory / "segments").iterdir())
    assert earlier == [f"01-a--{draft}", f"02-b--{resumed}"]
    assert (trajectory / "segments" / earlier[0] / "stdout.log").read_text() == (
        snapshot_a / "trajectory" / "stdout.log"
    ).read_text()
    assert (trajectory / "segments" / earlier[1] / "stdout.log").read_text() == own_b
    transcript = (trajectory / "transcript.log").read_text()
    assert transcript.startswith(f"==== segment 1 of 3: a#{draft} ")
    marks = [transcript.index(m) for m in (f"segment 2 of 3: b#{resumed}", "segment 3 of 3",
                                           "finishing after 2 notes")]  # fmt: skip
    assert marks == sorted(marks)
    # The third segment finished the work: executed, and chosen over the baseline.
    assert node_c["status"] == "ready"
    final = read(c / "final" / "FINAL.json")
    assert final["chosen"] == resumed, final
    assert verify_ring(c) == []

    # The package holds final/ and both earlier segments' snapshots.
    done = package(c, tmp_path / "pkg")
    assert done.returncode == 0, done.stderr
    manifest = read(tmp_path / "pkg" / "MANIFEST.json")
    assert [(s["identity"], s["seal_sha256"]) for s in manifest["lineage_segments"]] == [
        (f"{s['ring']}#{s['node']}", s["seal_sha256"]) for s in segments
    ]
    for segment in manifest["lineage_segments"]:
        copy = tmp_path / "pkg" / segment["path"]
        assert seal_problems(copy, read(copy / "SEAL.json")) == []
    assert (tmp_path / "pkg" / "final" / "solution" / "run.py").is_file()
    # A lineage snapshot changed after sealing: packaging refuses, naming the file.
    notes = snapshot_b / "solution" / "notes.md"
    kept = notes.read_bytes()
    notes.chmod(0o644)
    notes.write_bytes(kept.replace(b"segment 2", b"segment X"))
    changed = package(c, tmp_path / "pkg-changed")
    assert changed.returncode == 2 and "solution/notes.md: content differs" in changed.stderr
    assert not (tmp_path / "pkg-changed").exists()
    notes.write_bytes(kept)
    # A tainted grandparent: packaging refuses, and writes nothing.
    why = "its scorer leaked labels"
    taint = subprocess.run([sys.executable, "-m", "ringflow", "taint", str(a), "--why", why],
                           capture_output=True, text=True)  # fmt: skip
    assert taint.returncode == 0, taint.stderr
    refused = package(c, tmp_path / "pkg2")
    assert refused.returncode == 2
    assert "refusing to package" in refused.stderr and why in refused.stderr
    assert not (tmp_path / "pkg2").exists()
