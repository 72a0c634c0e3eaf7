"""Notifications: the ring's digest to a local SMTP server and a local webhook (both on
127.0.0.1, started by the test), at each stage's end and periodically; a failing channel
is logged and never raised; secrets never reach the ring folder."""

from __future__ import annotations

import json
import socket

import pytest
import yaml
from test_report import START, decided, finished, hand_ring, write

from mailtools import local_servers
from ringflow.core.hints import ringflow_command
from ringflow.core.settings import Notify
from ringflow.reporting import notify
from ringtools import REPO

PASSWORD, TOKEN = "s3cret-pass-word", "t0ken-for-the-hook"


DEFAULTS = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["notify"]


def settings(smtp_port: int, url: str, webhook: bool = True, **more) -> Notify:
    """The notify section with both channels on 127.0.0.1 (e-mail only: `webhook=False`),
    the defaults' other keys."""
    email = {
        "to": ["you@example.org"],
        "from": "ringflow@example.org",
        "smtp_host": "127.0.0.1",
        "smtp_port": smtp_port,
        "username": "you",
        "password_env": "TEST_RINGFLOW_SMTP_PASSWORD",
    }
    hook = {"url": url, "token_env": "TEST_RINGFLOW_HOOK_TOKEN"} if webhook else {}
    return Notify.from_mapping({
        **DEFAULTS, "digest_every_h": 3,
        "email": {**DEFAULTS["email"], **email},
        "webhook": {**DEFAULTS["webhook"], **hook},
        **more,
    })  # fmt: skip


@pytest.fixture
def secrets(monkeypatch):
    monkeypatch.setenv("TEST_RINGFLOW_SMTP_PASSWORD", PASSWORD)
    monkeypatch.setenv("TEST_RINGFLOW_HOOK_TOKEN", TOKEN)


def troubled_ring(tmp_path):
    """A decided ring with a crashed and a hung execution and one still running."""
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    finished(ring, "n001-good", "a", "s0", None, ended_at=START + 60, status="crash")
    finished(
        ring,
        "n001-good",
        "b",
        "s0",
        None,
        ended_at=START + 90,
        status="hung",
        events=[{"event": "would_hang", "wall": START + 80}],
    )
    decided(ring)
    return ring


def all_text(root) -> str:
    return "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


def test_digest_reaches_the_local_smtp_server_and_webhook(tmp_path, secrets):
    ring = troubled_ring(tmp_path)
    with local_servers() as (inbox, port, url):
        lines = notify.notify(ring, settings(port, url), "final selection ended", now=START + 600)
    assert [(x["channel"], x["ok"]) for x in lines] == [("email", True), ("webhook", True)]
    (message,) = inbox.messages
    assert message["Subject"] == "ringflow hand: final selection ended"
    assert message["To"] == "you@example.org"
    body = message.get_payload(decode=True).decode().replace("\r\n", "\n")
    assert "decision: candidate -> n001-good" in body
    assert "time left: to the cutoff 20m00s, to stop_at 50m00s" in body
    assert "hung: 1 execution(s)\n  n001-good/b/s0: hung, would_hang 1" in body
    assert "n001-good: crash (1x, e.g. a/s0)" in body
    root = ring.resolve()  # the report's command, as it can be typed where it was sent from
    assert f"report: {root / 'report.html'} ({ringflow_command()} report {root})" in body
    assert inbox.logins == [("you", PASSWORD)]
    ((headers, posted),) = inbox.posts
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert posted["subject"] == "ringflow hand: final selection ended"
    assert posted["digest"]["decision"]["chosen"] == "n001-good"
    assert posted["digest"]["hung"] == [
        {"execution": "n001-good/b/s0", "status": "hung", "would_hang": 1}
    ]
    assert posted["text"] == body
    # The digest is kept in the ring folder; the secrets are not, anywhere in it.
    assert (ring / "digest.txt").read_text().endswith(body)
    text = all_text(ring)
    assert PASSWORD not in text and TOKEN not in text
    logged = [json.loads(x) for x in (ring / "notify.jsonl").read_text().splitlines()]
    assert [(x["channel"], x["ok"], x["to"]) for x in logged] == [
        ("email", True, "you@example.org"),
        ("webhook", True, "127.0.0.1"),
    ]


def test_a_failing_channel_is_logged_and_never_raised(tmp_path, secrets, capsys):
    ring = troubled_ring(tmp_path)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    with local_servers(http_status=500) as (inbox, _, url):
        lines = notify.notify(ring, settings(dead_port, url), "search ended")
    assert [(x["channel"], x["ok"]) for x in lines] == [("email", False), ("webhook", False)]
    assert "email via 127.0.0.1" in lines[0]["error"]
    assert "500" in lines[1]["error"]
    assert len(inbox.posts) == 1  # it was tried
    err = capsys.readouterr().err
    assert "ringflow: notify: email via 127.0.0.1" in err
    assert (ring / "digest.txt").is_file()


def test_a_missing_secret_names_its_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_RINGFLOW_SMTP_PASSWORD", raising=False)
    ring = troubled_ring(tmp_path)
    with local_servers() as (inbox, port, url):
        lines = notify.notify(ring, settings(port, url, webhook=False), "search ended")
    assert not lines[0]["ok"]
    assert "environment variable TEST_RINGFLOW_SMTP_PASSWORD is not set" in lines[0]["error"]
    assert inbox.messages == []


def test_digests_at_each_stage_end_and_every_digest_every_h(tmp_path, secrets):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    with local_servers() as (inbox, port, url):
        config = settings(port, url)
        assert notify.check(ring, config, now=START) == []  # the watch starts
        write(ring / "selection" / "search.json", {"ended_at": START + 100})
        assert notify.check(ring, config, now=START + 100) == ["search ended"]
        assert notify.check(ring, config, now=START + 200) == []
        assert notify.check(ring, config, now=START + 3 * 3600 + 1) == ["every 3 h"]
        assert notify.check(ring, config, now=START + 3 * 3600 + 60) == []
        write(ring / "selection" / "promotion.json", {"promoted": []})
        decided(ring)
        write(ring / "stop_manifest.json", {"ring_id": "hand"})
        assert notify.check(ring, config, now=START + 4 * 3600) == [
            "promotion ended",
            "final selection ended",
            "ring ended",
        ]
        # A finished ring sends no periodic digest.
        assert notify.check(ring, config, now=START + 9 * 3600) == []
    subjects = [m["Subject"] for m in inbox.messages]
    assert subjects == [
        "ringflow hand: search ended",
        "ringflow hand: every 3 h",
        "ringflow hand: promotion ended; final selection ended; ring ended",
    ]
    assert [p["subject"] for _, p in inbox.posts] == subjects


def test_a_stage_that_ends_while_a_digest_is_sent_is_told_by_the_next(
    tmp_path, secrets, monkeypatch
):
    ring = hand_ring(tmp_path)
    write(ring / "selection" / "search.json", {"ended_at": START + 100})
    send = notify.notify

    def slow_send(root, settings, subject, now):
        # Promotion ends while the search's digest is on its way.
        write(ring / "selection" / "promotion.json", {"promoted": []})
        return send(root, settings, subject, now)

    with local_servers() as (inbox, port, url):
        config = settings(port, url)
        monkeypatch.setattr(notify, "notify", slow_send)
        assert notify.check(ring, config, now=START + 100) == ["search ended"]
        monkeypatch.setattr(notify, "notify", send)
        assert notify.check(ring, config, now=START + 101) == ["promotion ended"]
        assert notify.check(ring, config, now=START + 102) == []
    assert [m["Subject"] for m in inbox.messages] == [
        "ringflow hand: search ended",
        "ringflow hand: promotion ended",
    ]


def test_without_channels_nothing_is_watched_or_sent(tmp_path):
    defaults = Notify.from_mapping(DEFAULTS)
    assert not notify.enabled(defaults)
    notify.ring_start(tmp_path, defaults)
    assert str(tmp_path) not in notify._watchers
    ring = troubled_ring(tmp_path)
    assert notify.notify(ring, defaults, "search ended") == []
    assert (ring / "digest.txt").is_file() and not (ring / "notify.jsonl").exists()


def test_the_last_check_does_not_race_the_watcher(tmp_path, secrets):
    ring = hand_ring(tmp_path)
    with local_servers() as (inbox, port, url):
        config = settings(port, url, poll_s=0.01)
        notify.ring_start(ring, config)
        write(ring / "stop_manifest.json", {"ring_id": "hand"})
        notify.ring_end(ring)
    assert str(ring) not in notify._watchers
    assert [m["Subject"] for m in inbox.messages] == ["ringflow hand: ring ended"]


def test_a_finished_rings_digest_gives_no_time_left(tmp_path):
    from ringflow.reporting.health_digest import ring_digest

    ring = hand_ring(tmp_path)
    decided(ring)
    running = ring_digest(ring, now=START + 600)["text"]
    assert "time left: to the cutoff 20m00s, to stop_at 50m00s" in running
    write(ring / "stop_manifest.json", {"finished_at": START + 700})
    over = ring_digest(ring, now=START + 800)["text"]
    assert "time left: none (the ring is over; nothing runs)" in over
    assert "to the cutoff" not in over


def test_a_stopped_rings_digest_says_it_stopped(tmp_path):
    from ringflow.reporting.health_digest import ring_digest

    ring = hand_ring(tmp_path)
    write(ring / "STOPPED.json", {"reason": "the sandbox failed", "cause": "machine"})
    text = ring_digest(ring, now=START + 600)["text"]
    assert text.startswith("ring hand (")
    assert ": stopped\n" in text.splitlines()[0] + "\n"
    assert "time left: none (the ring stopped: the sandbox failed)" in text
