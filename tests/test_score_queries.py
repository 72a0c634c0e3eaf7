"""Score queries (issue: the search phase): the quota is counted and settled by the scorer
side, a query racing the close is counted or refused, and blind rings refuse."""

from __future__ import annotations

import json
import threading
import time

from ringflow.ring.clock import load_ring
from ringflow.ring.layout import RingLayout
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
