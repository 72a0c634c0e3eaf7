"""Score queries (issue: the search phase): the quota is counted and settled by the scorer
side, a query racing the close is counted or refused, and blind rings refuse."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from ringflow.core.clock import load_ring
from ringflow.core.layout import RingLayout
from ringflow.search.queries import QueryServer, queries_record
from ringflow.search.query_client import ask, collect
from ringflow.search.query_client import main as client_main
from ringtools import locked_ring, make_candidate


def _ring(tmp_path, quota=2, feedback="native"):
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    search = {"max_nodes": 10, "max_concurrent_nodes": 2, "draft_fraction": 0.0,
              "feedback": feedback, "queries_per_node": quota}  # fmt: skip
    ring_dir = locked_ring(tmp_path, tmp_path / "cands", "q", search=search)
    return load_ring(ring_dir), RingLayout(ring_dir)


def _predictions(tmp_path, value):
    folder = tmp_path / f"pred-{value}"
    folder.mkdir()
    (folder / "score.json").write_text(json.dumps({"value": value}))
    return collect(folder)


def test_the_query_after_the_quota_is_refused_and_the_count_is_the_scorers(tmp_path):
    ring, layout = _ring(tmp_path, quota=2)
    server = QueryServer(ring, layout, "n001-a", tmp_path / "work")
    answers = [
        ask(str(server.path), _predictions(tmp_path, v), token=server.token)
        for v in (0.25, 0.5, 0.75)
    ]
    used = server.close()
    assert [a.get("score") for a in answers[:2]] == [0.25, 0.5]
    assert all(a["valid"] for a in answers[:2]) and answers[1]["queries_left"] == 0
    assert "quota of 2" in answers[2]["refused"]
    admitted = [r for r in queries_record(layout, "n001-a") if r["status"] == "admitted"]
    assert used == 2 == len(admitted)
    # After close nothing is admitted: the socket is gone.
    assert client_main([str(tmp_path / "pred-0.25"), "--socket", str(server.path)]) == 3


def test_a_query_racing_the_close_is_counted_or_refused_never_lost(tmp_path):
    ring, layout = _ring(tmp_path, quota=50)
    server = QueryServer(ring, layout, "n001-a", tmp_path / "work")
    files = _predictions(tmp_path, 0.5)
    answers: list[dict] = []

    def query():
        try:
            answers.append(ask(str(server.path), files, token=server.token))
        except OSError as exc:  # the socket closed before it was accepted
            answers.append({"refused": str(exc)})

    threads = [threading.Thread(target=query) for _ in range(12)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    used = server.close()
    for thread in threads:
        thread.join()
    answered = sorted(a["query"] for a in answers if "query" in a)
    refused = [a for a in answers if "refused" in a]
    assert len(answered) + len(refused) == 12
    admitted = sorted(r["query"] for r in queries_record(layout, "n001-a")
                      if r["status"] == "admitted")  # fmt: skip
    assert answered == admitted and used == len(admitted)
    assert used >= 1


def test_blind_refuses(tmp_path):
    ring, layout = _ring(tmp_path, feedback="blind")
    server = QueryServer(ring, layout, "n001-a", tmp_path / "work")
    answer = ask(str(server.path), _predictions(tmp_path, 0.5), token=server.token)
    assert server.close() == 0
    assert "blind" in answer["refused"] and "score" not in answer
    # Without a socket (what a blind session is given) the client refuses at once.
    assert client_main([str(tmp_path / "pred-0.5"), "--socket", ""]) == 3


# The client another uid runs: the standard library only, at the system's Python (ringflow's
# own may live in a home folder that uid cannot enter).
FOREIGN_CLIENT = r"""
import json, socket, sys
path, token = sys.argv[1], sys.argv[2]
try:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(30)
    conn.connect(path)
    files = {"score.json": "eyJ2YWx1ZSI6IDAuNX0="}
    try:
        conn.sendall(json.dumps({"token": token, "files": files}).encode())
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # refused before the request was read: the answer is already waiting
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    print(json.dumps(json.loads(data)))
except OSError as exc:
    print(json.dumps({"error": type(exc).__name__}))
"""
SESSION_UID = 1879048300  # a host uid of sandbox.host_uids: the session's, not nobody's
NOBODY = 65534


def _as_uid(uid: int, path, token: str) -> dict:
    python = shutil.which("python3", path="/usr/bin:/bin")
    done = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", python, "-c",
         FOREIGN_CLIENT, str(path), token],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def session_server(tmp_path):
    """A native server whose session is SESSION_UID, its box in a folder others can pass."""
    ring, layout = _ring(tmp_path, quota=5)
    box = Path(tempfile.mkdtemp(prefix="box-"))
    box.chmod(0o755)
    server = QueryServer(ring, layout, "n001-a", box / "queries", peer=(SESSION_UID, SESSION_UID))
    try:
        yield server, layout
    finally:
        server.close()
        shutil.rmtree(box, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as other uids needs root")
def test_another_users_connection_is_refused_and_costs_nothing(session_server):
    server, layout = session_server
    folder = server.path.parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert folder.stat().st_uid == server.path.stat().st_uid == SESSION_UID
    # Nobody cannot even reach the socket, token or not.
    assert _as_uid(NOBODY, server.path, server.token) == {"error": "PermissionError"}
    # Were the folder open, the server still refuses a uid that is not the session's.
    folder.chmod(0o755)
    server.path.chmod(0o666)
    answer = _as_uid(NOBODY, server.path, server.token)
    assert f"uid {NOBODY} is not this session's" in answer["refused"], answer
    # The session's uid without its token is refused too.
    answer = _as_uid(SESSION_UID, server.path, "0" * 32)
    assert "not this session's token" in answer["refused"]
    assert queries_record(layout, "n001-a") == []
    # The session itself, with its token, is answered and counted.
    answer = _as_uid(SESSION_UID, server.path, server.token)
    assert answer["query"] == 1 and answer["valid"], answer
    assert server.close() == 1


def test_a_connection_without_the_sessions_token_is_refused_and_costs_nothing(tmp_path):
    ring, layout = _ring(tmp_path, quota=5)
    server = QueryServer(ring, layout, "n001-a", tmp_path / "work")
    answer = ask(str(server.path), _predictions(tmp_path, 0.5), token="")
    assert "not this session's token" in answer["refused"]
    assert server.close() == 0 and queries_record(layout, "n001-a") == []
