"""The scorer side of score queries (docs/contracts.md#engineer): a Unix socket per native engineer
session.

Each admitted query is recorded by this side before it is scored
(`nodes/<id>/queries.jsonl`, fsynced), up to `search.queries_per_node`. When the session
ends its client is closed first: no request is admitted after close, a query already
admitted is answered, and only then is the count settled from the record. A query racing
the close is therefore either counted or refused, never lost. Blind rings start no server
(and this side refuses too). Predictions are scored on the proxy view (the first search
view) with seed 0, by the same isolated evaluator as executions; the session never holds
the scorer's files, labels or address beyond the socket it was handed.

The socket is the session's alone: it lies in a folder (0700) and is a file (0600) of the
session's own host uid; the server admits a connection only from that uid (SO_PEERCRED)
and with the session's token (handed to it as `$RINGFLOW_QUERY_TOKEN`). Anything else is
refused before it is read and costs nothing: no query is recorded.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import json
import os
import secrets
import shutil
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path, PurePosixPath

from ..core.jsonio import append_jsonl
from ..core.layout import RingLayout
from ..core.query_record import ADMITTED, settled_count
from ..core.state import Ring
from ..scoring import evaluate_predictions
from .query_client import MAX_BYTES


class QueryServer:
    """Serve one session's queries until close(); then settle its count."""

    def __init__(self, ring: Ring, layout: RingLayout, node_id: str, work: Path,
                 quota: int | None = None, peer: tuple[int, int] | None = None):  # fmt: skip
        """`peer`: the session's host (uid, gid), this process's own by default; the socket
        and its folder are made beside `work` (the session's box)."""
        self.ring = ring
        # A resume node's quota is what its earlier segments left (carryover/engineer.py).
        self.quota = ring.config.search.queries_per_node if quota is None else quota
        self.native = ring.config.search.feedback == "native"
        self.record = layout.node_dir(node_id) / "queries.jsonl"
        self.view = ring.search_views[0]
        self.work = work
        self.peer = peer or (os.getuid(), os.getgid())
        self.token = secrets.token_hex(16)
        work.parent.mkdir(parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="q-", dir=work.parent))  # 0700
        self.path = self.folder / "s"
        self._lock = threading.Lock()
        self._closed = False
        self._admitted = settled_count(self.record)  # a rerun session keeps its count
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # AF_UNIX paths are short (108 bytes): bound through the folder's fd, not its path.
        folder_fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._sock.bind(f"/proc/self/fd/{folder_fd}/s")
        finally:
            os.close(folder_fd)
        self.path.chmod(0o600)
        if self.peer != (os.getuid(), os.getgid()):
            os.chown(self.path, *self.peer)
            os.chown(self.folder, *self.peer)
        self._sock.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._sock.settimeout(0.2)
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                try:
                    self._answer(conn)
                except OSError:
                    continue

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(60)
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                  struct.calcsize("3i")))[1]  # fmt: skip
        if uid != self.peer[0]:
            # Not the session: refused before anything is read, and never counted.
            conn.sendall(json.dumps({"refused": f"score queries are refused: uid {uid} is "
                                     "not this session's"}).encode() + b"\n")  # fmt: skip
            _discard_unread(conn)
            return
        request = self._read(conn)
        if not self._has_token(request):
            conn.sendall(json.dumps({"refused": "score queries are refused: not this "
                                     "session's token"}).encode() + b"\n")  # fmt: skip
            return
        number, refused = self._admit()
        if refused:
            answer = {"refused": refused, "queries_left": self._left()}
        else:
            answer = self._score(number, request)
        conn.sendall(json.dumps(answer).encode() + b"\n")

    def _read(self, conn: socket.socket) -> bytes:
        chunks, size = [], 0
        while chunk := conn.recv(65536):
            size += len(chunk)
            if size > MAX_BYTES * 2:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def _has_token(self, request: bytes) -> bool:
        try:
            token = json.loads(request).get("token")
        except (ValueError, AttributeError):
            return False
        return isinstance(token, str) and hmac.compare_digest(token, self.token)

    def _admit(self) -> tuple[int, str | None]:
        with self._lock:
            if not self.native:
                return 0, "score queries are refused: this ring's feedback is blind"
            if self._closed:
                return 0, "score queries are refused: the session has ended"
            if self._admitted >= self.quota:
                return 0, f"score queries are refused: the node's quota of {self.quota} is used"
            self._admitted += 1
            number = self._admitted
            append_jsonl(self.record, {"query": number, "status": ADMITTED, "at": time.time()})
            return number, None

    def _left(self) -> int:
        return max(0, self.quota - self._admitted)

    def _score(self, number: int, request: bytes) -> dict:
        folder = self.work / f"query-{number}"
        output = folder / "output"
        output.mkdir(parents=True)
        try:
            files = json.loads(request)["files"]
            for rel, data in files.items():
                target = output / rel
                if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
                    raise ValueError(f"bad file name {rel!r}")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(base64.b64decode(data, validate=True))
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            record = {"valid": False, "score": None, "reason": f"unreadable query: {exc}"}
        else:
            record = evaluate_predictions(self.ring, folder, self.view, seed=0)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        answer = {"query": number, "score": record.get("score") if record.get("scored") else None,
                  "valid": bool(record.get("valid")), "reason": record.get("reason", ""),
                  "queries_left": self._left()}  # fmt: skip
        append_jsonl(self.record, {"query": number, "status": "answered", "at": time.time(),
                                   "score": answer["score"], "valid": answer["valid"]})  # fmt: skip
        return answer

    def close(self) -> int:
        """Refuse from now on, finish the query in flight, settle: the count admitted."""
        with self._lock:
            self._closed = True
        # A query already admitted is answered before the serving thread ends; one still
        # waiting in the backlog finds the socket closed: refused, never counted.
        self._thread.join()
        self._sock.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        return settled_count(self.record)


def queries_record(layout: RingLayout, node_id: str) -> list[dict]:
    path = layout.node_dir(node_id) / "queries.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _discard_unread(conn: socket.socket, limit: int = 1 << 20) -> None:
    """After a refusal, let the peer read it: what it sent is read and thrown away (at most
    `limit` bytes, for two seconds), since closing a socket with unread data resets it."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(2)
        seen = 0
        while seen < limit and (chunk := conn.recv(65536)):
            seen += len(chunk)
