"""The job's side of the resident step server (docs/architecture.md#resident-steps).

`python -m ringflow step …` (every step but an engineer's session) asks the driver's
resident server to run the step in a fork of a process that has ringflow imported
already, and exits as that step exits. It imports only what Python's start has loaded
and the C modules `_socket`, `_signal` and `array`, so a step costs Python's start
instead of ringflow's imports. Where no server answers (none started: a SLURM job, a
driver that predates it, one that ended), it returns and the caller runs the step itself,
as before.

The request is one message: fields separated by NUL (no argument or environment entry
can hold one), length first, with the job's stdin, stdout and stderr passed along
(SCM_RIGHTS). The answers are ASCII lines: `P<pid>` from the step once it runs, then
`E<exit code>` or `S<signal>` from the server when the step has ended; or `R<why>` from
the server when it refuses the request before running anything.
"""

from __future__ import annotations

import _signal
import _socket
import array
import os
import sys

SERVER_ENV = "RINGFLOW_STEP_SERVER"
# The steps that start themselves: an engineer's session runs for minutes, so its start
# is nothing beside it. Every other step (the executions, the weights keys, and each
# bookkeeping step, a few dozen a ring) runs in the server.
SELF_STARTED_STEPS = frozenset({"engineer"})
PROTOCOL = b"ringflow-step/1"
# Forwarded to the step as they come: Snakemake's and the relay's stop, a terminal's.
FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT)
EXIT_LOST = 1


def wants_server(argv: list[str], environ=os.environ) -> str | None:
    """The server's socket where `argv` (without the program) is a step the server runs
    and a server was started for this job; None otherwise. Inside a SLURM job never: the
    server runs on the driver's machine, outside the job's allocation."""
    path = environ.get(SERVER_ENV)
    if not path or "SLURM_JOB_ID" in environ:
        return None
    if len(argv) < 2 or argv[0] != "step" or argv[1] in SELF_STARTED_STEPS:
        return None
    return path


def encode_request(argv: list[str]) -> bytes:
    """The request for a step with this process's argv, folder, umask and environment."""
    mask = os.umask(0)
    os.umask(mask)
    env = [key + b"=" + value for key, value in os.environb.items()]
    fields = [PROTOCOL, os.fsencode(sys.executable), os.fsencode(os.getcwd()), b"%d" % mask,
              b"%d" % len(argv), *map(os.fsencode, argv), b"%d" % len(env), *env,
              b"%d" % len(sys.path), *map(os.fsencode, sys.path)]  # fmt: skip
    body = b"\0".join(fields)
    return len(body).to_bytes(4, "big") + body


class _Relay:
    """Signals that come before the step's pid is known wait for it."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.pending: list[int] = []

    def __call__(self, signum, _frame) -> None:
        if self.pid is None:
            self.pending.append(signum)
        else:
            _deliver(self.pid, signum)

    def started(self, pid: int) -> None:
        self.pid = pid
        for signum in self.pending:
            _deliver(pid, signum)
        self.pending.clear()


def _deliver(pid: int, signum: int) -> None:
    # Not contextlib.suppress: importing contextlib would cost this process 3 ms.
    try:  # noqa: SIM105
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def run_through_server(path: str, argv: list[str]) -> int | None:
    """Run the step `argv` in the resident server at `path`; its exit code (negative for
    a signal) once it has ended, or None where the server did not take it (nothing ran)."""
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        return _converse(sock, path, argv)
    finally:
        sock.close()


def _converse(sock, path: str, argv: list[str]) -> int | None:
    try:
        request = encode_request(argv)
        sock.connect(path)
    except (OSError, ValueError):
        return None
    relay = _Relay()
    previous = {signum: _signal.signal(signum, relay) for signum in FORWARDED}
    fds = array.array("i", [0, 1, 2]).tobytes()
    try:
        sock.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
    except OSError:
        return _refused(previous, relay)
    buffer = b""
    while True:
        try:
            chunk = sock.recv(256)
        except OSError:
            chunk = b""
        if not chunk:
            if relay.pid is None:
                return _refused(previous, relay)
            os.write(2, b"ringflow: the resident step server ended before the step did; "
                        b"the step's own record says how far it got\n")  # fmt: skip
            return EXIT_LOST
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            kind, value = line[:1], line[1:]
            if kind == b"P":
                relay.started(int(value))
            elif kind == b"E":
                return int(value)
            elif kind == b"S":
                return -int(value)
            elif kind == b"R" and relay.pid is None:
                return _refused(previous, relay)


def _refused(previous: dict, relay: _Relay) -> None:
    """Nothing ran: the handlers are restored and a signal that came meanwhile is this
    process's own again."""
    for signum, handler in previous.items():
        _signal.signal(signum, handler)
    for signum in relay.pending:
        os.kill(os.getpid(), signum)
    return None


def exit_as(code: int) -> None:
    """End this process as the step ended: its exit code, or killed by its signal."""
    if code >= 0:
        os._exit(code)
    try:  # noqa: SIM105 - as in _deliver
        _signal.signal(-code, _signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL and SIGSTOP keep their action
    os.kill(os.getpid(), -code)
    os._exit(128 - code)
