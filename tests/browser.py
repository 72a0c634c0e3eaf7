"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe):
open a page at a given window size, collect console errors and uncaught exceptions, measure
elements and take a screenshot. Standard library only; Debian's `chromium` package.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-pipe",
)
TIMEOUT_S = 60.0


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageVisit:
    """What one visit saw: console errors, element boxes, the screenshot's path."""

    errors: list[str] = field(default_factory=list)
    boxes: dict[str, dict | None] = field(default_factory=dict)
    viewport: dict = field(default_factory=dict)
    screenshot: Path | None = None


class DevTools:
    """One Chromium process and its DevTools pipe (fd 3 in, fd 4 out, NUL-separated JSON)."""

    def __init__(self, binary: str, profile: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            # The pipes reach the child as fds 3 and 4 only (dup2 makes them inheritable;
            # the parent's own ends are not).
            close_fds=False,
            preexec_fn=_place(to_browser_r, from_browser_w),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)
        raise TimeoutError(f"no reply to {method} within {TIMEOUT_S} s")

    def wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while time.monotonic() < deadline:
            event = self._read()
            if event.get("method") == method:
                return event
            self.events.append(event)
        raise TimeoutError(f"no {method} within {TIMEOUT_S} s")

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)


def _place(read_fd: int, write_fd: int):
    """In the child: the pipe ends at fd 3 (commands) and fd 4 (replies)."""

    def move() -> None:
        # Out of the way first, so that neither end is overwritten by the other's dup2.
        high_read = fcntl.fcntl(read_fd, fcntl.F_DUPFD, 10)
        high_write = fcntl.fcntl(write_fd, fcntl.F_DUPFD, 10)
        os.dup2(high_read, 3)
        os.dup2(high_write, 4)

    return move


def _console_errors(events: list[dict]) -> list[str]:
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            errors.append(f"exception: {details.get('text')} {details.get('exception', {})}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(a.get("value", a.get("description", ""))) for a in params.get("args", [])]
            errors.append("console.error: " + " ".join(texts))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            errors.append(f"log {entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
    return errors


MEASURE = """JSON.stringify({
  viewport: {width: window.innerWidth, height: window.innerHeight,
             scrollY: window.scrollY},
  boxes: Object.fromEntries(%s.map(sel => {
    const el = document.querySelector(sel);
    if (!el) return [sel, null];
    const r = el.getBoundingClientRect();
    return [sel, {top: r.top, bottom: r.bottom, left: r.left, right: r.right,
                  text: el.innerText.slice(0, 400)}];
  }))
})"""


def visit(url: str, selectors: list[str], screenshot: Path, width: int = 1400,
          height: int = 900) -> PageVisit:  # fmt: skip
    """Open `url` in a fresh profile at width x height, wait for its load event (and a
    moment more for late console messages), measure `selectors`, save a PNG screenshot."""
    binary = chromium()
    if binary is None:
        raise RuntimeError("chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="ringflow-chromium-") as profile:
        tools = DevTools(binary, Path(profile))
        try:
            target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            attach = {"targetId": target, "flatten": True}
            session = tools.send("Target.attachToTarget", attach)["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                tools.send(f"{domain}.enable", session=session)
            tools.send("Emulation.setDeviceMetricsOverride",
                       {"width": width, "height": height, "deviceScaleFactor": 1,
                        "mobile": False}, session=session)  # fmt: skip
            tools.send("Page.navigate", {"url": url}, session=session)
            tools.wait_for("Page.loadEventFired")
            measured = tools.send("Runtime.evaluate",
                                  {"expression": MEASURE % json.dumps(selectors),
                                   "returnByValue": True}, session=session)  # fmt: skip
            shot = tools.send("Page.captureScreenshot", {"format": "png"}, session=session)
        finally:
            tools.close()
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    data = json.loads(measured["result"]["value"])
    return PageVisit(errors=_console_errors(tools.events), boxes=data["boxes"],
                     viewport=data["viewport"], screenshot=screenshot)  # fmt: skip
