"""Copy a program's stdout or stderr to its log file, up to a size limit
(docs/operations.md#health-supervision).

The program writes into a pipe; a thread copies what arrives to the log until the limit,
then writes one marker line and counts, but drops, the rest. A program that floods its
output therefore neither fills the disk nor blocks on a full pipe. A log that cannot be
written (a full disk) is drained all the same, so the program never blocks on it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

CHUNK = 1 << 16


class LogSink:
    def __init__(self, path: Path, limit_bytes: int | None) -> None:
        self.path = Path(path)
        self.limit = limit_bytes
        self.read_fd, self.write_fd = os.pipe()
        self.written = 0
        self.dropped = 0
        self.write_error: str | None = None
        self._thread = threading.Thread(target=self._copy, name=f"log:{self.path.name}")
        self._thread.daemon = True

    def start(self) -> None:
        """Call after the child has been started: the parent's write end is closed here."""
        os.close(self.write_fd)
        self.write_fd = -1
        self._thread.start()

    def _copy(self) -> None:
        try:
            log = open(self.path, "ab", buffering=0)  # noqa: SIM115 (closed below)
        except OSError as exc:
            log, self.write_error = None, str(exc)
        while True:
            try:
                chunk = os.read(self.read_fd, CHUNK)
            except OSError:
                break
            if not chunk:
                break
            if log is None:
                self.dropped += len(chunk)
                continue
            try:
                self._keep(log, chunk)
            except OSError as exc:
                self.write_error = str(exc)
                self.dropped += len(chunk)
                log.close()
                log = None
        if log is not None:
            log.close()
        os.close(self.read_fd)

    def _keep(self, log, chunk: bytes) -> None:
        room = None if self.limit is None else self.limit - self.written
        if room is None or len(chunk) <= room:
            log.write(chunk)
            self.written += len(chunk)
            return
        if room > 0:
            log.write(chunk[:room])
            self.written += room
        if self.dropped == 0:
            log.write(
                f"\n[ringflow: log truncated at {self.limit} bytes (limits.log_mb); "
                "the rest was dropped]\n".encode()
            )
        self.dropped += len(chunk) - max(room, 0)

    def close(self, timeout: float = 5.0) -> None:
        """Wait for the copy to end (every writer gone); close the write end if unused."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1
        if self._thread.is_alive() or self._thread.ident is not None:
            self._thread.join(timeout)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0 and self.write_error is None
