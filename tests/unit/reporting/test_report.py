"""`ringflow report`: the HTML page of a finished ring (a copy of the demo ring) and of rings
written by hand (in progress, refused, with carried-over, imported and failed nodes)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ringflow.core.hints import ringflow_command
from ringflow.reporting.report import render_report, write_report
from ringtools import finished_demo_ring, full_config

START = 1_800_000_000.0


def copy_demo(dest: Path) -> Path:
    """A copy of the finished demo ring (without program outputs and logs)."""
    target = dest / "demo"
    shutil.copytree(
        finished_demo_ring(),
        target,
        ignore=shutil.ignore_patterns(
            "output", "solution", "work", "logs", "*.log", "report.html", "*.lock", ".locks"
        ),
    )
    return target


def write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))


def write_lines(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def hand_ring(
    root: Path, *, cutoff: float | None = START + 1800, reserve_min=12.5, estimate_s=420.0
) -> Path:
    """A ring in progress: RING.json, cutoff.json and an index of a baseline and a candidate."""
    ring = root / "ring"
    write(
        ring / "RING.json",
        {
            "ring_id": "hand",
            "ring_dir": str(ring),
            "start": START,
            "initial_cutoff": START + 2400,
            "stop_at": START + 3600,
            "continue_from": None,
            "search_views": ["a", "b"],
            "final_view": "fin",
            "guard_seeds": [3, 4],
            "task": {"name": "toy", "direction": "maximize"},
            "config": full_config(
                guard={"enabled": True, "alpha": 0.05, "margin": 0.0, "seeds": 2},
                final_top_k=1,
                promote_top_k=2,
            ),
        },
    )
    if cutoff is not None:
        write(
            ring / "cutoff.json",
            {
                "cutoff": cutoff,
                "reserve_min": reserve_min,
                "estimate_s": estimate_s,
                "updated_at": START + 600,
                "history": [
                    {"cutoff": START + 2400, "at": START, "initial": True},
                    {"cutoff": cutoff, "previous": START + 2400, "at": START + 600},
                ],
            },
        )
    write(
        ring / "nodes" / "index.json",
        {
            "baseline": "n000-base",
            "keys": {},
            "nodes": [
                {"id": "n000-base", "name": "base", "role": "baseline", "status": "ready"},
                {"id": "n001-good", "name": "good", "role": "candidate", "status": "ready"},
            ],
        },
    )
    for node, role in (("n000-base", "baseline"), ("n001-good", "candidate")):
        write(
            ring / "nodes" / node / "node.json",
            {"id": node, "role": role, "status": "ready", "executions": {}},
        )
    return ring


def add_node(ring: Path, node: str, **fields) -> None:
    """Append a node to the index and write its node.json."""
    index_path = ring / "nodes" / "index.json"
    index = json.loads(index_path.read_text())
    index["nodes"].append(
        {
            "id": node,
            "name": node,
            "role": fields.get("role", "candidate"),
            "status": fields["status"],
        }
    )
    write(index_path, index)
    write(ring / "nodes" / node / "node.json", {"id": node, "role": "candidate", **fields})


def finished(
    ring: Path,
    node: str,
    view: str,
    variant: str,
    score: float | None,
    *,
    ended_at: float,
    status: str = "ok",
    mode: str = "none",
    key: str | None = None,
    events: list[dict] | None = None,
    lines: list[dict] | None = None,
) -> None:
    """A finished execution: result.json, score.json and its health files."""
    d = ring / "nodes" / node / "exec" / view / variant
    write(
        d / "result.json",
        {
            "node": node,
            "view": view,
            "variant": variant,
            "status": status,
            "started_at": ended_at - 5,
            "ended_at": ended_at,
            "wall_s": 5.0,
            "cpu_s": 4.0,
            "weights_mode": mode,
            "weights_key": key,
            "budget_cut": False,
            "reason": "exited with code 0" if status == "ok" else f"{status} <b>bold</b>",
            "events": events or [],
        },
    )
    scored = status == "ok" and score is not None
    write(
        d / "score.json",
        {
            "node": node,
            "view": view,
            "variant": variant,
            "score": score if scored else None,
            "scored": scored,
            "valid": scored,
            "reason": "",
        },
    )
    write_lines(
        d / "health" / "health.jsonl",
        lines
        or [
            {
                "start": ended_at - 5,
                "end": ended_at,
                "cpu_frac_avg": 0.8,
                "io_kbps_max": 3.0,
                "rss_bytes_max": 50 * 1024**2,
                "thread_states_max": {"R": 1},
                "events": [],
            }
        ],
    )
    write(
        d / "health" / "health_latest.json",
        {"started": ended_at - 5, "state": "ended", "updated": ended_at, "sample": None},
    )


def in_flight(
    ring: Path, node: str, view: str, variant: str, *, started: float, sample_wall: float
) -> None:
    """An execution still running: health files, no result.json."""
    d = ring / "nodes" / node / "exec" / view / variant
    write(
        d / "health" / "health_latest.json",
        {
            "started": started,
            "state": "running",
            "updated": sample_wall,
            "idle_s": 0.0,
            "sample": {
                "wall": sample_wall,
                "cpu_s": 30.0,
                "rss_bytes": 3 * 1024**3,
                "io_bytes": 10,
                "thread_states": {"R": 2, "S": 5},
            },
            "window": {"cpu_frac": 1.75, "io_kbps": 88.25, "active": True},
        },
    )
    write_lines(
        d / "health" / "health.jsonl",
        [
            {
                "start": started,
                "end": started + 60,
                "cpu_frac_avg": 1.5,
                "io_kbps_max": 70.0,
                "rss_bytes_max": 2 * 1024**3,
                "thread_states_max": {"R": 2, "S": 4},
                "events": [{"event": "busy_no_progress", "wall": started + 50}],
            },
        ],
    )
    # A line being appended at this moment: half-written, must be skipped.
    with open(d / "health" / "health.jsonl", "a") as f:
        f.write('{"start": ')


def section(page: str, table_id: str) -> str:
    match = re.search(rf'<table id="{table_id}">(.*?)</table>', page, flags=re.S)
    assert match, f"table {table_id} not in the page"
    return match.group(1)


def cells(row_html: str) -> list[str]:
    return [
        html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
        for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row_html, flags=re.S)
    ]


def rows(table_html: str) -> list[list[str]]:
    return [cells(r) for r in re.findall(r"<tr>(.*?)</tr>", table_html, flags=re.S)]


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory) -> tuple[Path, str]:
    ring = copy_demo(tmp_path_factory.mktemp("demo"))
    return ring, render_report(ring)


# ---------------------------------------------------------------------------------------------
# The finished demo ring


def test_guard_table_matches_final_json(demo_page):
    ring, page = demo_page
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    guard = final["guard"]
    table = rows(section(page, "guard"))
    # The columns name the candidate the guard ran for and the baseline.
    guarded = [v["node"] for v in final["verdicts"] if v.get("guard")]
    candidate = final["chosen"] if final["decision"] == "candidate" else guarded[-1]
    assert candidate != final["baseline"]
    assert table[0] == [
        "guard seed",
        f"candidate {candidate}",
        f"baseline {final['baseline']}",
        "difference",
    ]
    expected = [
        [str(s), f"{c:.4f}", f"{b:.4f}", f"{d:.4f}"]
        for s, c, b, d in zip(
            guard["seeds"], guard["candidate"], guard["baseline"], guard["differences"], strict=True
        )
    ]
    assert table[1:] == expected
    assert guard["mean"] == pytest.approx(sum(guard["differences"]) / len(guard["seeds"]))
    assert f'<td class="n">{guard["lcb"]:.4f}</td>' in page
    assert f'<td class="n">{guard["alpha"]:.4f}</td>' in page
    # Winner's curse: every guarded finalist (the chosen one marked), never the baseline.
    curse = {r[0]: r[1:] for r in rows(section(page, "winners-curse"))[1:]}
    guarded_rows = [r for r in final["finalists"] if r["guard_mean"] is not None]
    assert guarded_rows and final["baseline"] not in {k.split()[0] for k in curse}
    for row in guarded_rows:
        label = row["node"] + (" chosen" if row["node"] == final["chosen"] else "")
        assert curse[label] == [
            f"{row['promotion_mean']:.4f}",
            f"{row['guard_mean']:.4f}",
            f"{row['shrinkage']:.4f}",
        ]
    assert final["note"] in html.unescape(page)


def test_curve_has_one_mark_per_seed0_result(demo_page):
    ring, page = demo_page
    views = json.loads((ring / "RING.json").read_text())["search_views"]
    scored, failed = set(), set()
    for view in views:
        for score_path in ring.glob(f"nodes/*/exec/{view}/s0/score.json"):
            node = score_path.parents[3].name
            (scored if json.loads(score_path.read_text())["scored"] else failed).add((node, view))
    assert scored and failed, "the demo ring has both scored and crashed seed-0 runs"
    svg = re.search(r'<svg id="curve".*?</svg>', page, flags=re.S).group(0)
    point_titles = re.findall(r'<circle class="pt [^"]*"[^>]*><title>(\S+) (\S+) s0', svg)
    fail_titles = re.findall(r'<path class="fail"[^>]*><title>(\S+) (\S+) s0', svg)
    assert sorted(point_titles) == sorted(scored)
    assert sorted(fail_titles) == sorted(failed)
    assert '<polyline class="best"' in svg


def test_weights_counts_match_results(demo_page):
    ring, page = demo_page
    modes = [
        json.loads(p.read_text())["weights_mode"] for p in ring.glob("nodes/*/exec/*/*/result.json")
    ]
    table = rows(section(page, "weights"))
    assert table[0] == ["node", "train", "replay", "fresh", "none"]
    assert table[-1] == [
        "total",
        *(str(modes.count(m)) for m in ("train", "replay", "fresh", "none")),
    ]
    assert f"{modes.count('train')} trainings and {modes.count('replay')} replays" in page


def test_every_seed_score_and_failed_status_shown(demo_page):
    ring, page = demo_page
    # Guard seeds run on the demo's guard view, for the finalists that were guarded.
    guarded = json.loads((ring / "selection" / "verdict-1.json").read_text())["node"]
    path = ring / "nodes" / guarded / "exec" / "guard" / "g6" / "score.json"
    score = json.loads(path.read_text())["score"]
    table = re.search(
        r"<h3>View guard</h3>\s*<table class=\"scores\">(.*?)</table>", page, flags=re.S
    ).group(1)
    grid = rows(table)
    header, by_node = grid[0], {r[0]: r for r in grid[1:]}
    assert by_node[guarded][header.index("g6")] == f"{score:.4f}"
    table = re.search(
        r"<h3>View x3</h3>\s*<table class=\"scores\">(.*?)</table>", page, flags=re.S
    ).group(1)
    grid = rows(table)
    header, by_node = grid[0], {r[0]: r for r in grid[1:]}
    assert by_node["n001-crasher"][header.index("s0")] == "crash"


def test_page_is_self_contained(demo_page):
    _, page = demo_page
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"\b(src|href)=", page)


def test_selection_gap_against_best_final_view_node(tmp_path):
    ring = copy_demo(tmp_path)
    decision = json.loads((ring / "selection" / "decision.json").read_text())
    chosen_score = decision["final_view"]["chosen"]
    # Another node beats the choice on the final view: the gap is their difference.
    base_score = ring / "nodes" / decision["baseline"] / "exec" / "final" / "s0" / "score.json"
    record = json.loads(base_score.read_text())
    record.update(score=chosen_score + 0.0125, valid=True, scored=True)
    base_score.write_text(json.dumps(record))
    page = render_report(ring)
    assert f'<b id="gap">{0.0125:.4f}</b>' in page
    final_rows = rows(section(page, "final-view"))
    assert final_rows[1] == [decision["baseline"], f"{chosen_score + 0.0125:.4f}"]
    assert final_rows[2] == [f"{decision['chosen']} chosen", f"{chosen_score:.4f}"]


def test_rejected_error_is_escaped(tmp_path):
    ring = copy_demo(tmp_path)
    add_node(
        ring,
        "n006-bad",
        status="rejected",
        error="solution.json: <script>alert('x')</script> & no run.py",
    )
    page = render_report(ring)
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; no run.py" in page
    node_rows = {r[0]: r for r in rows(section(page, "nodes"))}
    assert node_rows["n006-bad"][2].startswith("rejected")


def test_write_report_is_atomic_and_honours_out(tmp_path):
    ring = copy_demo(tmp_path)
    target = write_report(ring)
    assert target == ring / "report.html"
    assert "<h1>Ring demo</h1>" in target.read_text()
    assert not list(ring.glob("*.tmp*")) and not list(ring.glob(".report.html*"))
    other = write_report(ring, tmp_path / "elsewhere.html")
    # Both pages say when they were written ("… (this page written at <time>)."), which
    # may be a second apart.
    stamp = re.compile(r"at \d{4}-\d\d-\d\d [\d:]{8}")
    assert stamp.sub("", other.read_text()) == stamp.sub("", target.read_text())


def test_cli_report(tmp_path):
    ring = copy_demo(tmp_path)
    out = tmp_path / "page.html"
    proc = subprocess.run(
        [sys.executable, "-m", "ringflow", "report", str(ring), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert 'id="guard"' in out.read_text()


# ---------------------------------------------------------------------------------------------
# Rings written by hand


def test_ring_in_progress(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    finished(ring, "n001-good", "a", "s0", 0.7, ended_at=START + 90, mode="train", key="k1")
    in_flight(ring, "n001-good", "b", "s0", started=START + 100, sample_wall=START + 160)
    page = render_report(ring, now=START + 170)
    assert "<b>In progress</b>" in page
    assert "No decision yet." in page
    assert "No node has a score on the final view yet." in page
    grid = {
        r[0]: r
        for r in rows(
            re.search(
                r"<h3>View b</h3>\s*<table class=\"scores\">(.*?)</table>", page, flags=re.S
            ).group(1)
        )
    }
    assert grid["n001-good"][1] == "running"
    # Time to first valid result: the baseline's seed-0 run on the proxy view (the first
    # search view) ended 30 s after the start.
    first = r'time to first valid result</th><td id="first-valid">30s\s*\(n000-base, seed 0 on a\)'
    assert re.search(first, page)
    progress = re.search(r'<svg id="best-so-far".*?</svg>', page, flags=re.S).group(0)
    assert progress.count('data-source="execution"') == 2 and "<polyline" in progress
    svg = re.search(r'<svg id="curve".*?</svg>', page, flags=re.S).group(0)
    assert svg.count('<circle class="pt ') == 2
    # No node has both search views yet: no best-so-far line.
    assert "<polyline" not in svg
    # The cutoff shown is the live one (moved earlier), not the initial one.
    assert "moved earlier 1 time;" in page
    assert "12.5 min" in page and "(measured estimate 7m00s)" in page
    assert "No carried-over nodes." in page


def test_health_counts_each_event_once(tmp_path):
    ring = hand_ring(tmp_path)
    hang = {"event": "would_hang", "wall": START + 40, "idle_s": 1800}
    again = {"event": "would_hang", "wall": START + 80, "idle_s": 1800}
    line = {
        "start": START,
        "end": START + 60,
        "cpu_frac_avg": 0.0,
        "io_kbps_max": 0.0,
        "rss_bytes_max": 1024**2,
        "thread_states_max": {"S": 3},
        "events": [hang],
    }
    finished(
        ring, "n001-good", "a", "s0", 0.7, ended_at=START + 90, events=[hang, again], lines=[line]
    )
    in_flight(ring, "n001-good", "b", "s0", started=START + 100, sample_wall=START + 160)
    page = render_report(ring, now=START + 170)
    assert "<b>would_hang</b>: 2 event(s) in 1 execution(s)" in page
    assert "<b>busy_no_progress</b>: 1 event(s) in 1 execution(s)" in page
    health = {(r[0], r[1], r[2]): r for r in rows(section(page, "health"))[1:]}
    done, running = health[("n001-good", "a", "s0")], health[("n001-good", "b", "s0")]
    assert done[6:12] == ["0.000", "0.0", "1.0 MiB", "S3", "1", "2"]
    assert running[3] == "running" and running[8] == "2.0 GiB" and running[12] == "1"


def test_refused_decision(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n001-good", "a", "s0", 0.7, ended_at=START + 90)
    why = "baseline n000-base was rejected at import"
    write(
        ring / "selection" / "baseline_seated.json",
        {"refused": True, "baseline": "n000-base", "reason": why, "at": START + 100},
    )
    write(
        ring / "selection" / "decision.json",
        {"decision": "refused", "reason": why, "final_written": False},
    )
    page = render_report(ring)
    assert '<b class="bad">refused</b>' in page
    assert f"<p>{why}</p>" in page
    assert "The guard did not run." in page
    assert 'id="guard"' not in page
    assert "Not written." in page  # no REPRO.json


def test_a_finished_ring_says_when_it_finished_not_when_the_page_was_written(tmp_path):
    from ringflow.reporting.report import format_time as when

    ring = hand_ring(tmp_path)
    finished(ring, "n001-good", "a", "s0", 0.7, ended_at=START + 90)
    write(ring / "selection" / "decision.json",
          {"decision": "refused", "reason": "no baseline", "final_written": False,
           "decided_at": START + 100})  # fmt: skip
    page = render_report(ring, now=START + 5000)
    assert (
        f"<b>Finished</b> at {when(START + 100)} (this page written at {when(START + 5000)})"
        in page
    )
    write(ring / "stop_manifest.json", {"ring_id": "r", "stopped_at": START + 120})
    page = render_report(ring, now=START + 5000)
    assert f"<b>Finished</b> at {when(START + 120)} (this page written" in page


def test_carried_over_and_resumed_nodes_listed(tmp_path):
    ring = hand_ring(tmp_path)
    add_node(
        ring,
        "n002-cut",
        status="carried_over",
        carryover={"kind": "execution"},
        reason="cut by the cutoff",
    )
    add_node(
        ring,
        "n003-again",
        status="ready",
        resume_origin={"segments": [{"ring": "r1", "node": "n002-cut"}]},
    )
    page = render_report(ring)
    assert rows(section(page, "carried"))[1] == ["n002-cut", "execution", "cut by the cutoff", "no"]
    assert "No carried-over nodes." not in page
    assert "r1#n002-cut" in page


def test_only_failed_nodes_are_drawn_as_failures(tmp_path):
    ring = hand_ring(tmp_path)
    add_node(ring, "n002-cut", status="carried_over", carryover={"kind": "engineer"})
    add_node(ring, "n003-old", status="history", origin={"kind": "imported"})
    add_node(ring, "n004-stuck", status="stalled")
    section_html = section(render_report(ring), "nodes")
    drawn = {
        status: cls for cls, status in re.findall(r'<span class="(\w+)">(\w+)</span>', section_html)
    }
    assert drawn == {
        "ready": "ok",
        "carried_over": "running",
        "history": "muted",
        "stalled": "bad",
    }


def test_malformed_file_is_listed_not_fatal(tmp_path):
    ring = hand_ring(tmp_path)
    (ring / "selection").mkdir()
    (ring / "selection" / "ranking.json").write_text("{not json")
    page = render_report(ring)
    assert "Unreadable files" in page and "ranking.json" in page


def test_not_a_ring(tmp_path):
    from ringflow.core.errors import InputError

    with pytest.raises(InputError, match=r"RING\.json not found"):
        render_report(tmp_path)


def test_copy_is_read_not_the_original(tmp_path):
    # RING.json names the folder it was created in; the report reads the folder it is given.
    ring = hand_ring(tmp_path)
    page = render_report(ring)
    assert f"<code>{ring.resolve()}</code>" in page
    shutil.rmtree(ring / "nodes")
    assert "no nodes yet" in render_report(ring)


# ---------------------------------------------------------------------------------------------
# The first screen


def decided(ring: Path, *, chosen: str = "n001-good", lcb: float | None = 0.012) -> dict:
    """A decision for the candidate, with its guard record and a finalist passed over."""
    guard = {
        "seeds": [3, 4],
        "views": ["guard"],
        "alpha": 0.025,
        "margin": 0.0,
        "lcb": lcb,
        "mean": 0.031,
        "complete": True,
        "candidate": [0.81, 0.83],
        "baseline": [0.78, 0.8],
        "differences": [0.03, 0.032],
        "bootstrap": {"replicates": 200, "detectable": 0.019, "min": 0.0, "max": 0.05},
    }
    record = {
        "decision": "candidate",
        "chosen": chosen,
        "baseline": "n000-base",
        "reason": "guard LCB above the margin: the candidate replaces the baseline",
        "guard": guard,
        "verdicts": [
            {
                "rank": 1,
                "node": chosen,
                "eligible": True,
                "replace": True,
                "reason": "LCB above margin",
                "guard": guard,
            }
        ],
        "finalists": [
            {
                "rank": 1,
                "node": chosen,
                "promotion_mean": 0.85,
                "guard_mean": 0.82,
                "shrinkage": -0.03,
                "verdict": "LCB above margin",
            },
            {
                "rank": 2,
                "node": "n002-other",
                "promotion_mean": 0.84,
                "guard_mean": None,
                "shrinkage": None,
                "verdict": "review failed: outputs change on disguised copies",
            },
        ],
        "final_view": {"view": "fin", "chosen": 0.8, "baseline": 0.75},
        "promotion_mean": 0.85,
        "guard_mean": 0.82,
    }
    write(ring / "selection" / "decision.json", record)
    write(ring / "final" / "FINAL.json", record)
    (ring / "final" / "solution").mkdir(parents=True)
    write(ring / "final" / "solution" / "MANIFEST.json", {"files": []})
    return record


def first_screen(page: str) -> str:
    match = re.search(r'<div id="first-screen">(.*?)<h2>Nodes</h2>', page, flags=re.S)
    assert match, "no first screen"
    return html.unescape(re.sub(r"<[^>]+>", " ", match.group(1)))


def test_first_screen_leads_with_the_decision(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    finished(ring, "n001-good", "a", "s0", 0.7, ended_at=START + 90, mode="train", key="k1")
    decided(ring)
    page = render_report(ring)
    text = " ".join(first_screen(page).split())
    assert "Chosen: n001-good , replacing the baseline n000-base" in text
    assert "mean advantage over the baseline 0.0310" in text
    assert "[0.0120, ∞)" in text and "alpha' 0.0250" in text
    assert "smallest advantage this guard could detect 0.0190" in text
    # On the final view, signed so that positive is better (maximize).
    assert (
        "the chosen node's advantage over the baseline (positive is better) "
        "0.0500 (0.8000 vs 0.7500)"
    ) in text
    assert "n002-other (finalist #2): review failed: outputs change on disguised copies" in text
    assert "Time to first valid result: 30s" in text
    # The command as it can be typed where the page was written.
    assert f"{ringflow_command()} export {ring.resolve()} DEST" in text
    assert "3 executions" not in text and "2 executions (2 ok)" in text
    # The first screen comes before every table of the page.
    assert page.index('id="first-screen"') < page.index('<table id="nodes">')


def test_first_screen_of_a_guard_without_bound(tmp_path):
    ring = hand_ring(tmp_path)
    decided(ring, lcb=None)
    text = " ".join(first_screen(render_report(ring)).split())
    assert "none: no bound" in text


def test_first_screen_while_searching(tmp_path):
    ring = hand_ring(tmp_path)
    in_flight(ring, "n001-good", "b", "s0", started=START + 100, sample_wall=START + 160)
    text = " ".join(first_screen(render_report(ring, now=START + 170)).split())
    assert "No decision yet: the ring is still running." in text
    assert "The search ends in 27m10s" in text and "1 execution(s) in flight" in text
    assert "Deployable model: not written yet" in text


def test_guard_table_names_its_candidate_when_the_baseline_is_kept(tmp_path):
    ring = hand_ring(tmp_path)
    record = decided(ring, lcb=-0.01)
    record.update(decision="baseline", chosen="n000-base")
    write(ring / "selection" / "decision.json", record)
    page = render_report(ring)
    assert rows(section(page, "guard"))[0] == [
        "guard seed",
        "candidate n001-good",
        "baseline n000-base",
        "difference",
    ]
    text = " ".join(first_screen(page).split())
    assert "Baseline kept: n000-base" in text
    assert "Candidate n001-good's advantage" in text
    # sd of the two per-seed differences (0.03, 0.032).
    assert f"{0.0014142:.4f}" in section(page, "guard-stats")


def test_health_lists_only_executions_that_need_a_look(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    finished(ring, "n001-good", "a", "s0", None, ended_at=START + 60, status="crash")
    page = render_report(ring)
    listed = rows(section(page, "health"))
    assert [r[:4] for r in listed[1:]] == [["n001-good", "a", "s0", "crash"]]
    assert listed[1][-1].startswith("crash: crash <b>bold</b>")
    rest = re.search(r"<details>.*?</details>", page, flags=re.S).group(0)
    assert [r[:4] for r in rows(section(rest, "health-rest"))[1:]] == [
        ["n000-base", "a", "s0", "ok"]
    ]


def test_node_table_shows_origin_and_lineage(tmp_path):
    ring = hand_ring(tmp_path)
    add_node(
        ring,
        "n002-old",
        status="history",
        origin={"kind": "imported", "ring": "r1", "node": "n007-x"},
    )
    add_node(
        ring,
        "n003-kid",
        status="ready",
        parent="n001-good",
        origin={"kind": "improve", "generation": 2},
    )
    table = rows(section(render_report(ring), "nodes"))
    assert table[0][:5] == ["node", "role", "status", "origin", "lineage"]
    by_node = {r[0]: r for r in table[1:]}
    assert by_node["n002-old"][3:5] == ["imported", "from r1#n007-x"]
    assert by_node["n003-kid"][3:5] == ["improve g2", "child of n001-good"]
    assert by_node["n000-base"][3] == "baseline"


def test_every_table_says_what_its_columns_are(demo_page):
    _, page = demo_page
    tables = re.findall(r"<table[^>]*>(.*?)</table>", page, flags=re.S)
    assert len(tables) > 10
    for table in tables:
        assert table.lstrip().startswith("<caption>"), table[:200]
    assert "sd of differences" not in page
    # No cell is left empty without saying why.
    assert not re.search(r"<td[^>]*>\s*</td>", page)


def test_a_cut_by_the_rings_clock_is_not_listed_as_trouble(tmp_path):
    ring = hand_ring(tmp_path)
    deadline = [{"event": "deadline", "wall": START + 50}]
    finished(
        ring,
        "n001-good",
        "a",
        "s0",
        None,
        ended_at=START + 60,
        status="interrupted",
        events=deadline,
    )
    result = ring / "nodes" / "n001-good" / "exec" / "a" / "s0" / "result.json"
    record = json.loads(result.read_text())
    result.write_text(json.dumps({**record, "budget_cut": True, "reason": "cut at the cutoff"}))
    page = render_report(ring)
    assert 'id="health"' in page and "No execution hung, crashed, hit a limit" in page
    assert rows(section(page, "health-rest"))[1][:4] == ["n001-good", "a", "s0", "interrupted"]
