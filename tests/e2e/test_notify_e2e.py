"""A ring configured with `notify:` delivers its digests to a local SMTP server and a local
webhook (both on 127.0.0.1, started by this test) while Snakemake runs it: one at the end
of each stage, the last with the decision."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mailtools import local_servers
from ringtools import make_candidate, make_task, snakemake, write_config

STAGES = ("search ended", "promotion ended", "final selection ended", "ring ended")


@pytest.mark.e2e
def test_a_ring_sends_its_digests(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_RINGFLOW_SMTP_PASSWORD", "pass-of-the-e2e-ring")
    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.6, sd=0.01)
    baseline = make_candidate(
        tmp_path / "base" / "baseline", mean=0.5, sd=0.01, noise_key="baseline"
    )
    with local_servers() as (inbox, port, url):
        notify = {
            "digest_every_h": 0,
            "poll_s": 1,
            "webhook": {"url": url},
            "email": {
                "to": "you@example.org",
                "from": "ring@example.org",
                "smtp_host": "127.0.0.1",
                "smtp_port": port,
                "username": "you",
                "password_env": "TEST_RINGFLOW_SMTP_PASSWORD",
            },
        }
        config = write_config(
            tmp_path,
            ring_id="told",
            task=str(make_task(tmp_path)),
            candidates=str(cands),
            baseline=str(baseline),
            notify=notify,
        )
        snakemake(tmp_path, config)
        ring = tmp_path / "runs" / "told"
        # By hand, on the ring's channels (its configuration as RING.json holds it).
        told, posted = len(inbox.messages), len(inbox.posts)
        sent = subprocess.run([sys.executable, "-m", "ringflow", "digest", str(ring), "--send"],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert "email: sent to you@example.org" in sent.stdout, sent.stdout
        assert [m["Subject"] for m in inbox.messages[told:]] == ["ringflow told: sent by hand"]
        inbox.messages[told:] = []
        inbox.posts[posted:] = []
    subjects = [m["Subject"] for m in inbox.messages]
    assert subjects and all(s.startswith("ringflow told: ") for s in subjects)
    said = [reason for s in subjects for reason in s.removeprefix("ringflow told: ").split("; ")]
    assert sorted(said) == sorted(STAGES), subjects  # each stage's end, once
    assert [p["subject"] for _, p in inbox.posts] == subjects
    decision = json.loads((ring / "selection" / "decision.json").read_text())
    last = inbox.posts[-1][1]["digest"]
    assert last["stage"] == "finished" and last["decision"]["chosen"] == decision["chosen"]
    assert inbox.logins and {pw for _, pw in inbox.logins} == {"pass-of-the-e2e-ring"}
    logged = [json.loads(x) for x in (ring / "notify.jsonl").read_text().splitlines()]
    assert logged and all(x["ok"] for x in logged)
    assert not any(
        "pass-of-the-e2e-ring" in p.read_text(errors="replace")
        for p in ring.rglob("*")
        if p.is_file()
    )
