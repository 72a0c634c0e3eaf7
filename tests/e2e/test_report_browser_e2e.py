"""The demo chain's pages in a real browser (headless Chromium, Debian's `chromium`):
no console error, and the decision, the best-so-far chart and the deployable model in the
first viewport at 1400 x 900. Screenshots stay in each ring folder, under screenshots/.

With RINGFLOW_DEMO_CHAIN_DIR naming a folder where `make demo` has run (CI does), the test
opens that chain's pages; otherwise it runs the demo chain once (minutes).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from browser import chromium, visit
from ringtools import finished_demo_chain

WIDTH, HEIGHT = 1400, 900
FIRST_SCREEN = ["#decision", "#progress", "#chosen"]


def _need_chromium() -> None:
    if chromium() is None:
        pytest.fail(
            "chromium is not installed: scripts/setup-system.sh installs it as root "
            "(apt-get install -y chromium)"
        )


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", header[16:24])


@pytest.fixture(scope="module")
def demo_chain() -> Path:
    _need_chromium()
    work = finished_demo_chain()
    for ring in ("demo", "demo-2"):
        # The pages as this version of ringflow writes them (ring 2's report writes the
        # chain page too: it continues ring 1).
        proc = subprocess.run(
            [sys.executable, "-m", "ringflow", "report", str(work / "runs" / ring)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
    return work


def check_first_screen(page: Path, shot: Path, selectors: list[str]) -> dict:
    seen = visit(page.resolve().as_uri(), selectors, shot, WIDTH, HEIGHT)
    assert seen.errors == [], seen.errors
    assert seen.viewport["width"] == WIDTH and seen.viewport["height"] == HEIGHT
    for selector in selectors:
        box = seen.boxes[selector]
        assert box is not None, f"{page}: no {selector}"
        assert box["top"] >= 0 and box["bottom"] <= HEIGHT, f"{page}: {selector} at {box}"
        assert box["right"] <= WIDTH, f"{page}: {selector} wider than the window: {box}"
    assert png_size(shot) == (WIDTH, HEIGHT)
    return seen.boxes


@pytest.mark.e2e
@pytest.mark.parametrize("ring", ["demo", "demo-2"])
def test_report_decision_is_on_the_first_screen(demo_chain, ring):
    folder = demo_chain / "runs" / ring
    shot = folder / "screenshots" / f"report-{WIDTH}x{HEIGHT}.png"
    boxes = check_first_screen(folder / "report.html", shot, [*FIRST_SCREEN, "#deploy"])
    decision = json.loads((folder / "selection" / "decision.json").read_text())
    assert boxes["#chosen"]["text"] == decision["chosen"]
    assert f"ringflow export {folder.resolve()} DEST" in boxes["#deploy"]["text"]
    assert "Time to first valid result" in boxes["#progress"]["text"]


@pytest.mark.e2e
def test_chain_page_in_the_browser(demo_chain):
    folder = demo_chain / "runs" / "demo-2"
    shot = folder / "screenshots" / f"chain-{WIDTH}x{HEIGHT}.png"
    boxes = check_first_screen(folder / "chain.html", shot, FIRST_SCREEN)
    decision = json.loads((folder / "selection" / "decision.json").read_text())
    assert boxes["#chosen"]["text"] == decision["chosen"]
    assert "demo" in boxes["#decision"]["text"] and "demo-2" in boxes["#decision"]["text"]


def test_console_errors_are_caught(tmp_path):
    # The check above can fail: a page that logs an error and throws is reported.
    _need_chromium()
    page = tmp_path / "bad.html"
    page.write_text(
        "<!doctype html><html><body><p id='x'>x</p><script>"
        "console.error('boom'); undefined_function();</script></body></html>"
    )
    seen = visit(page.as_uri(), ["#x", "#missing"], tmp_path / "bad.png")
    assert any("boom" in e for e in seen.errors), seen.errors
    assert any("undefined_function" in e for e in seen.errors), seen.errors
    assert seen.boxes["#missing"] is None and seen.boxes["#x"]["text"] == "x"
