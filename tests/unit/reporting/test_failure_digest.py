"""Failures in plain sight (issue: a crashing scorer, a syntax error and a bad output header
showed as `runs ok` with no reason): the failure digest in the summary, `status` and the
report, and the small truths: a finished ring says so, the selection gap claims nothing
that was not measured."""

from __future__ import annotations

import json

from test_report import START, add_node, finished, hand_ring, write

from ringflow.reporting.digest import failure_digest
from ringflow.reporting.report import render_report
from ringflow.reporting.status import render_status
from ringflow.reporting.summary import render_summary


def _ring_with_failures(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    # The baseline's run on b: the scorer failed on its output, which is invalid (no score).
    finished(ring, "n000-base", "b", "s0", 0.5, ended_at=START + 40)
    score = ring / "nodes/n000-base/exec/b/s0/score.json"
    record = json.loads(score.read_text())
    record.update(scored=False, valid=False, score=None,
                  reason="scorer failed: KeyError: 'label'\nTraceback ...")  # fmt: skip
    write(score, record)
    # The candidate crashed twice, with a traceback on stderr.
    for view in ("a", "b"):
        finished(ring, "n001-good", view, "s0", None, ended_at=START + 60, status="crash")
        (ring / f"nodes/n001-good/exec/{view}/s0/stderr.log").write_text(
            "Traceback (most recent call last):\n  File run.py\n"
            "NameError: name 'x' is not defined\n"
        )
    # A candidate with invalid output (a bad header): scored invalid with the reason.
    add_node(ring, "n002-header", status="ready", executions={})
    finished(ring, "n002-header", "a", "s0", 0.0, ended_at=START + 70)
    score = ring / "nodes/n002-header/exec/a/s0/score.json"
    record = json.loads(score.read_text())
    record.update(valid=False, reason="invalid: predictions.csv: the first line must be 'id,label'")
    write(score, record)
    # A rejected candidate, and an execution cut by the ring's own clock (not a failure).
    add_node(ring, "n003-syntax", status="rejected", error="run.py: does not compile (line 2)")
    finished(ring, "n002-header", "b", "s0", None, ended_at=START + 80, status="interrupted")
    result = ring / "nodes/n002-header/exec/b/s0/result.json"
    write(result, {**json.loads(result.read_text()), "budget_cut": True})
    return ring


def test_the_digest_names_each_failure_with_the_first_line_of_its_reason(tmp_path):
    ring = _ring_with_failures(tmp_path)
    lines = [f.line() for f in failure_digest(ring)]
    assert lines == [
        "n000-base: invalid (1x, e.g. b/s0): scorer failed: KeyError: 'label'",
        "n001-good: crash (2x, e.g. a/s0): crash <b>bold</b>; "
        "stderr: NameError: name 'x' is not defined",
        "n002-header: invalid (1x, e.g. a/s0): "
        "invalid: predictions.csv: the first line must be 'id,label'",
        "n003-syntax: rejected: run.py: does not compile (line 2)",
    ]


def test_runs_failing_for_other_reasons_than_the_first_are_counted(tmp_path):
    ring = _ring_with_failures(tmp_path)
    (ring / "nodes/n001-good/exec/b/s0/stderr.log").write_text("MemoryError\n")
    crash = next(f for f in failure_digest(ring) if f.node == "n001-good")
    assert crash.count == 2 and crash.other_reasons == 1
    assert crash.line().endswith(
        "stderr: NameError: name 'x' is not defined"
        " [+1 run with other reasons: nodes/n001-good/exec/]"
    )


def test_summary_status_and_report_show_the_digest(tmp_path):
    ring = _ring_with_failures(tmp_path)
    # render_summary reads the ring folder named in RING.json
    lock = json.loads((ring / "RING.json").read_text())
    write(ring / "RING.json", {**lock, "ring_dir": str(ring)})
    summary = render_summary(ring)
    assert "failures:\n  n000-base: invalid" in summary
    assert "n003-syntax: rejected: run.py: does not compile (line 2)" in summary
    # A crashed candidate is not "ok", and an unscored baseline run is not "scored".
    base = next(ln for ln in summary.splitlines() if ln.startswith("n000-base"))
    assert "invalid 1/2, ok 1/2" in base and base.split()[-4:-2] == ["2/2", "1/2"]
    good = next(ln for ln in summary.splitlines() if ln.startswith("n001-good"))
    assert "crashed 2/2" in good and "ready" not in good
    status = render_status(ring, now=START + 100)
    assert "n001-good: crash (2x, e.g. a/s0)" in status
    page = render_report(ring, now=START + 100)
    assert 'id="failures"' in page and "NameError: name &#39;x&#39; is not defined" in page
    assert "crash &lt;b&gt;bold&lt;/b&gt;" in page


def test_a_ring_without_failures_says_so(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    assert failure_digest(ring) == []
    assert "failures: none" in render_status(ring, now=START + 100)


def test_status_of_a_finished_ring_says_finished(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    live = render_status(ring, now=START + 100)
    assert "(live" in live and "finished" not in live
    write(ring / "selection" / "decision.json",
          {"decision": "baseline", "chosen": "n000-base", "decided_at": START + 900})  # fmt: skip
    text = render_status(ring, now=START + 1000)
    assert "finished" in text.splitlines()[1] and "1m40s ago" in text.splitlines()[1]
    assert "(live" not in text and "the ring is over" in text


def test_the_selection_gap_claims_nothing_when_only_the_choice_ran_there(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "fin", "s0", 0.5, ended_at=START + 30)
    write(ring / "selection" / "decision.json",
          {"decision": "baseline", "chosen": "n000-base", "decided_at": START + 900})  # fmt: skip
    page = render_report(ring, now=START + 1000)
    assert "the choice is the best node" not in page
    assert "No selection gap: only n000-base ran on the final view" in page
    finished(ring, "n001-good", "fin", "s0", 0.4, ended_at=START + 40)
    page = render_report(ring, now=START + 1000)
    assert "no other node that ran on the final view did better" in page
    assert "2 nodes ran there" in page
