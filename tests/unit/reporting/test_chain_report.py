"""`ringflow report --chain`: one page for the rings of a chain (hand-written rings), and a
continuation's report (the user's and the workflow's step) writing it beside itself."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_report import START, finished, hand_ring, rows, section, write

from ringflow.cli import main
from ringflow.core.errors import InputError
from ringflow.reporting.chain_report import render_chain
from ringflow.workflow.records import private_record


def chain(tmp_path: Path) -> tuple[Path, Path]:
    """Ring one (sealed one execution at its cutoff) and ring two continuing it (verified
    and resumed that work, rejected a second seal)."""
    first = hand_ring(tmp_path / "one")
    second = hand_ring(tmp_path / "two")
    for ring, ring_id, start, parent in (
        (first, "one", START, None),
        (second, "two", START + 3600, "../../one/ring"),
    ):
        lock = json.loads((ring / "RING.json").read_text())
        lock.update(ring_id=ring_id, start=start, continue_from=parent, chain_exposed_seeds=[])
        write(ring / "RING.json", lock)
    finished(first, "n001-good", "a", "s0", 0.7, ended_at=START + 90)
    finished(second, "n001-good", "a", "s0", 0.75, ended_at=START + 3600 + 40)
    write(
        first / "carryover" / "seals.json",
        {
            "seals": [
                {
                    "node": "n002-cut",
                    "kind": "execution",
                    "identity": "one#n002-cut",
                    "snapshot": "carryover/n002-cut",
                }
            ],
            "refused": [{"node": "n003-late", "reason": "no runnable program at the cutoff"}],
        },
    )
    write(
        second / "carryover" / "imported.json",
        {
            "imported": [
                {
                    "identity": "one#n002-cut",
                    "kind": "execution",
                    "copy": "carryover/imported/one--n002-cut",
                }
            ],
            "rejected": [{"identity": "one#n004-bad", "reason": "SEAL.json sha256 differs"}],
            "refused": [],
            "waiting": [],
            "already_resumed": [],
            "queue": ["one#n002-cut"],
        },
    )
    write(
        second / "nodes" / "n005-again" / "node.json",
        {
            "id": "n005-again",
            "role": "candidate",
            "status": "ready",
            "origin": {"kind": "resume", "identity": "one#n002-cut", "carry_kind": "execution"},
        },
    )
    write(
        first / "selection" / "decision.json",
        {
            "decision": "baseline",
            "chosen": "n000-base",
            "baseline": "n000-base",
            "reason": "no finalist beat the baseline",
        },
    )
    return first, second


def test_chain_page_shows_every_ring_and_boundary(tmp_path):
    _, second = chain(tmp_path)
    page = render_chain(second)
    assert "<h1>Chain one → two</h1>" in page
    assert page.index("<h2>Ring one</h2>") < page.index("<h2>Boundary one → two</h2>")
    assert page.index("<h2>Boundary one → two</h2>") < page.index("<h2>Ring two</h2>")
    crossed = {(r[0], r[1]): r[3] for r in rows(section(page, "boundary-1"))[1:]}
    assert crossed[("carried out (sealed in one)", "one#n002-cut")] == "carryover/n002-cut"
    assert crossed[("not sealed", "n003-late")] == "no runnable program at the cutoff"
    assert crossed[("verified in two", "one#n002-cut")] == (
        "seal checked, copied to carryover/imported/one--n002-cut"
    )
    assert crossed[("resumed", "n005-again (one#n002-cut)")] == "ready"
    assert crossed[("rejected", "one#n004-bad")] == "SEAL.json sha256 differs"
    decisions = {r[0]: r for r in rows(section(page, "chain-decisions"))[1:]}
    assert decisions["one"][1:3] == ["baseline", "n000-base (final/ not written)"]
    assert decisions["one"][3] == "baseline n000-base"  # what it was guarded against
    assert decisions["two"][1:3] == ["pending", "none yet"]


def test_chain_curve_puts_each_ring_at_its_own_time(tmp_path):
    _, second = chain(tmp_path)
    page = render_chain(second)
    svg = re.search(r'<svg id="chain-curve".*?</svg>', page, flags=re.S).group(0)
    titles = re.findall(r'data-ring="(\w+)"[^>]*><title>[^<]* at ([^<]+)</title>', svg)
    # Ring two's point: 40 s after its own start, one hour after the chain's.
    assert sorted(titles) == [("one", "1m30s"), ("two", "1h00m40s")]
    labels = html.unescape(svg)
    assert "two starts" in labels
    assert "wall time since the chain's first ring started (min)" in labels
    best = re.search(r'<p id="chain-best">(.*?)</p>', page, flags=re.S).group(1)
    best = " ".join(html.unescape(re.sub(r"<[^>]+>", "", best)).split())
    assert "0.7500 (n001-good in ring two, 1h00m40s after the chain started)" in best


def test_report_of_a_continuation_writes_the_chain_page(tmp_path):
    first, second = chain(tmp_path)
    for ring, chained in ((first, False), (second, True)):
        proc = subprocess.run(
            [sys.executable, "-m", "ringflow", "report", str(ring)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert (ring / "report.html").is_file()
        assert (ring / "chain.html").is_file() == chained
    out = tmp_path / "page.html"
    proc = subprocess.run(
        [sys.executable, "-m", "ringflow", "report", "--chain", str(first), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "<h1>Chain one</h1>" in out.read_text()


def test_chain_of_a_missing_ring(tmp_path):
    with pytest.raises(InputError, match=r"RING\.json not found"):
        render_chain(tmp_path)


def _ring_line(page: str, ring_id: str) -> str:
    """The line under a ring's heading: its folder, start, and whether it finished."""
    after = page[page.index(f"<h2>Ring {ring_id}</h2>") :]
    return html.unescape(re.sub(r"<[^>]+>", "", after[after.index("<p>Folder") :].split("\n")[0]))


def test_the_workflows_report_step_writes_a_continuations_chain_page(tmp_path, capsys):
    first, second = chain(tmp_path)
    for ring, chained in ((first, False), (second, True)):
        assert main(["step", "report", str(ring), "--out", str(ring / "report.html")]) == 0
        said = capsys.readouterr().out
        assert (ring / "report.html").is_file()
        assert (ring / "chain.html").is_file() == chained
        assert ("chain page written to" in said) == chained, said
    assert "<h1>Chain one → two</h1>" in (second / "chain.html").read_text()
    # No rule declares it: it is a listed private record of the step.
    assert private_record("chain.html") == "chain.html"


def test_a_ring_that_decided_and_reproduced_counts_as_finished(tmp_path):
    # The report step runs before the ring's stop manifest: a ring whose decision is made
    # and reproduced is over; one with a decision alone is not.
    first, second = chain(tmp_path)
    write(second / "selection" / "decision.json", {"decision": "baseline", "chosen": "n000-base",
                                                   "baseline": "n000-base"})  # fmt: skip
    write(second / "selection" / "repro.json", {"ok": True})
    page = render_chain(second)
    assert _ring_line(page, "two").endswith("; finished.")
    assert _ring_line(page, "one").endswith("; running or stopped early.")
    write(first / "stop_manifest.json", {"ring_id": "one", "ledger_head": "0" * 64})
    assert _ring_line(render_chain(second), "one").endswith("; finished.")
