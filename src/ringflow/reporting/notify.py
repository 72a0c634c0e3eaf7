"""Word when a long ring needs you (docs/report.md#notifications): the ring's digest (its
decision, failures, hung executions and time left) sent by e-mail over SMTP and/or to a
webhook, at the end of each stage and every `notify.digest_every_h` hours.

Secrets (the SMTP password, a webhook token or a webhook URL that is itself a secret) are
read from environment variables the configuration names; only those names are written
anywhere. A channel that fails is logged (stderr and `notify.jsonl` in the ring folder)
and never stops the ring: nothing here raises.
"""

from __future__ import annotations

import json
import os
import smtplib
import sys
import threading
import time
import urllib.request
from email.message import EmailMessage
from pathlib import Path

from ..core.jsonio import append_jsonl, atomic_write_json, atomic_write_text, read_json
from ..core.layout import RingLayout
from ..core.settings import Email, Notify, Webhook
from .health_digest import ring_digest

TIMEOUT_S = 15.0
LOG = "notify.jsonl"
STATE = "notify_state.json"
DIGEST = "digest.txt"
# The stages of a ring, each ended when its file appears (in the order they end).
STAGES = (
    ("search", lambda layout: layout.search),
    ("promotion", lambda layout: layout.promotion),
    ("final selection", lambda layout: layout.decision),
    ("ring", lambda layout: layout.stop_manifest),
)


class ChannelError(Exception):
    """A channel could not deliver (its reason, without any secret)."""


def _secret(name: str | None, what: str) -> str | None:
    if not name:
        return None
    value = os.environ.get(name)
    if value is None:
        raise ChannelError(f"{what}: environment variable {name} is not set")
    return value


def send_email(settings: Email, subject: str, text: str) -> str:
    """One message to `settings.to` through `settings.smtp_host`; returns to whom."""
    recipients = [settings.to] if isinstance(settings.to, str) else list(settings.to)
    message = EmailMessage()
    message["Subject"], message["From"] = subject, settings.from_
    message["To"] = ", ".join(recipients)
    message.set_content(text)
    password = _secret(settings.password_env, "email")
    try:
        with smtplib.SMTP(settings.smtp_host, int(settings.smtp_port or 25),
                          timeout=TIMEOUT_S) as smtp:  # fmt: skip
            if settings.starttls:
                smtp.starttls()
            if settings.username:
                smtp.login(settings.username, password or "")
            smtp.send_message(message)
    except (OSError, smtplib.SMTPException) as exc:
        raise ChannelError(f"email via {settings.smtp_host}: {exc}") from None
    return ", ".join(recipients)


def send_webhook(settings: Webhook, subject: str, text: str, digest: dict) -> str:
    """POST the digest as JSON ({subject, text, digest}); returns the host it went to."""
    url = settings.url or _secret(settings.url_env, "webhook")
    if not url:
        raise ChannelError("webhook: neither url nor url_env is set")
    body = json.dumps({"subject": subject, "text": text, "digest": digest}).encode()
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    token = _secret(settings.token_env, "webhook")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    host = urllib.request.urlparse(url).hostname or "?"
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            if not 200 <= reply.status < 300:
                raise ChannelError(f"webhook {host}: HTTP {reply.status}")
    except (OSError, ValueError) as exc:
        raise ChannelError(f"webhook {host}: {exc}") from None
    return host


def notify(ring_dir: str | Path, settings: Notify | None, why: str, now: float | None = None):
    """Write the digest to RING_DIR/digest.txt and send it on every configured channel;
    each delivery (or its failure) is one line of notify.jsonl. Returns those lines."""
    root = Path(ring_dir)
    try:
        digest = ring_digest(root, now)
    except Exception as exc:  # a digest that cannot be made must not stop the ring
        _log(root, {"why": why, "channel": "digest", "ok": False, "error": str(exc)})
        return []
    subject = f"ringflow {digest['ring_id']}: {why}"
    text = digest["text"]
    atomic_write_text(root / DIGEST, f"{subject}\n\n{text}")
    channels = []
    if settings is not None and email_on(settings):
        channels.append(("email", lambda: send_email(settings.email, subject, text)))
    if settings is not None and webhook_on(settings):
        channels.append(
            ("webhook", lambda: send_webhook(settings.webhook, subject, text, digest["data"]))
        )
    lines = []
    for name, send in channels:
        line = {"at": time.time(), "why": why, "channel": name}
        try:
            line.update(ok=True, to=send())
        except ChannelError as exc:
            line.update(ok=False, error=str(exc))
        except Exception as exc:  # any other failure of a channel is logged, never raised
            line.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        if not line["ok"]:
            print(f"ringflow: notify: {line['error']}", file=sys.stderr)
        _log(root, line)
        lines.append(line)
    return lines


def _log(root: Path, line: dict) -> None:
    try:
        append_jsonl(root / LOG, line)
    except OSError as exc:
        print(f"ringflow: notify: cannot log to {root / LOG}: {exc}", file=sys.stderr)


def ended_stages(root: Path) -> list[str]:
    """The stages whose end file exists now."""
    layout = RingLayout(root)
    return [name for name, path in STAGES if path(layout).exists()]


def due(root: Path, state: dict, every_h: float, now: float, ended: list[str]) -> list[str]:
    """Why a digest is due now: each stage of `ended` not told yet, and the periodic
    digest when `every_h` hours passed since the last one (0: never)."""
    layout = RingLayout(root)
    reasons = [f"{name} ended" for name in ended if name not in state.get("stages", [])]
    last = state.get("periodic_at") or state.get("started_at") or now
    if every_h > 0 and now - last >= every_h * 3600 and not layout.stop_manifest.exists():
        reasons.append(f"every {every_h:g} h")
    return reasons


def check(root: str | Path, settings: Notify | None, now: float | None = None) -> list[str]:
    """Send the digests due now and remember them (RING_DIR/notify_state.json)."""
    root = Path(root)
    now = time.time() if now is None else now
    if not RingLayout(root).ring_json.exists():
        return []
    path = root / STATE
    try:
        state = read_json(path) if path.exists() else {}
    except Exception:
        state = {}
    state.setdefault("started_at", now)
    # The stages are looked at once: one that ends while this digest is being sent is
    # told by the next look, not marked as told (docs/report.md#notifications).
    ended = ended_stages(root)
    every_h = float(settings.digest_every_h or 0) if settings is not None else 0.0
    reasons = due(root, state, every_h, now, ended)
    if not reasons:
        if not path.exists():
            atomic_write_json(path, state)
        return []
    notify(root, settings, "; ".join(reasons), now)
    state["stages"] = ended
    if any(r.startswith("every") for r in reasons):
        state["periodic_at"] = now
    atomic_write_json(path, state)
    return reasons


class Watcher:
    """A thread of the Snakemake process that checks for due digests every `poll_s`."""

    def __init__(self, root: str | Path, settings: Notify, poll_s: float = 60.0):
        self.root, self.settings, self.poll_s = Path(root), settings, poll_s
        self.stopped = threading.Event()
        # One check at a time: the last one (at the ring's end) must not race the thread's.
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name="ringflow-notify", daemon=True)

    def _loop(self) -> None:
        while not self.stopped.wait(self.poll_s):
            self.check()

    def check(self) -> None:
        with self.lock:
            try:
                check(self.root, self.settings)
            except Exception as exc:  # word to the user must never bring the ring down
                print(f"ringflow: notify: {exc}", file=sys.stderr)

    def stop(self) -> None:
        self.stopped.set()


_watchers: dict[str, Watcher] = {}


def email_on(settings: Notify | None) -> bool:
    """E-mail is sent when notify.email.to names someone."""
    return settings is not None and bool(settings.email.to)


def webhook_on(settings: Notify | None) -> bool:
    """The webhook is called when notify.webhook.url or url_env is set."""
    return settings is not None and bool(settings.webhook.url or settings.webhook.url_env)


def enabled(settings: Notify | None) -> bool:
    return email_on(settings) or webhook_on(settings)


def ring_start(root: str | Path, settings: Notify | None) -> None:
    """onstart: watch the ring for due digests (only when a channel is configured)."""
    if settings is not None and enabled(settings) and str(root) not in _watchers:
        watcher = Watcher(root, settings, float(settings.poll_s or 60.0))
        _watchers[str(root)] = watcher
        watcher.thread.start()


def ring_end(root: str | Path) -> None:
    """onsuccess/onerror: the last due digests (the ring's own end above all)."""
    watcher = _watchers.pop(str(root), None)
    if watcher is not None:
        watcher.stop()
        watcher.thread.join(timeout=4 * TIMEOUT_S)
        watcher.check()
