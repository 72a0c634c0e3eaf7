"""Ask the ring's scorer for a score: `ringflow query-score PRED_DIR`, or inside an engineer
session `$RINGFLOW_PYTHON $RINGFLOW_QUERY_CLIENT PRED_DIR` (standard library only).

Sends every regular file under PRED_DIR over the Unix socket the session was handed
(`$RINGFLOW_QUERY_SOCKET`), with the session's token (`$RINGFLOW_QUERY_TOKEN`), and prints
the scorer side's answer as JSON: the score on the proxy view, whether the output was
valid, and the queries left. Exit 0 when scored or judged invalid, 3 when refused (blind
feedback, quota used up, session closed, not this session's uid or token).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sys
from pathlib import Path

MAX_BYTES = 64 * 1024 * 1024
REFUSED = 3


def collect(folder: Path) -> dict[str, str]:
    files, total = {}, 0
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        total += len(data)
        if total > MAX_BYTES:
            raise SystemExit(f"query-score: predictions over {MAX_BYTES} bytes")
        files[str(path.relative_to(folder))] = base64.b64encode(data).decode()
    return files


def ask(socket_path: str, files: dict[str, str], timeout: float = 3600,
        token: str | None = None) -> dict:  # fmt: skip
    token = os.environ.get("RINGFLOW_QUERY_TOKEN", "") if token is None else token
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(socket_path)
        conn.sendall(json.dumps({"token": token, "files": files}).encode() + b"\n")
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return json.loads(b"".join(chunks) or b'{"refused": "no answer from the scorer side"}')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="query-score", description=__doc__.split("\n")[0])
    parser.add_argument("pred_dir", help="folder of predictions, as a program writes them")
    parser.add_argument("--socket", default=os.environ.get("RINGFLOW_QUERY_SOCKET"),
                        help="the session's socket (default $RINGFLOW_QUERY_SOCKET)")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.socket:
        answer = {
            "refused": "score queries are refused: no scorer socket (blind feedback, "
            "or not inside an engineer session)"
        }
    else:
        try:
            answer = ask(args.socket, collect(Path(args.pred_dir)))
        except OSError as exc:
            answer = {"refused": f"the scorer side does not answer: {exc}"}
    print(json.dumps(answer))
    return REFUSED if "refused" in answer else 0


if __name__ == "__main__":
    sys.exit(main())
