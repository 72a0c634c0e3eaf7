"""The job's side of the resident step server (docs/architecture.md#resident-steps).

The rules run each step as this file, `python -P …/resident_client.py step …`
(`step_command`): it asks the driver's resident server to run the step in a fork of a
process that has ringflow imported already, and exits as that step exits. It imports only
what Python's start has loaded and the C modules `_socket` and `_signal`, and runs as a
script rather than `-m`, whose module search costs more than the rest of this process;
so a step costs Python's start instead of ringflow's imports. Where no server takes the
step (none started: a SLURM job, a driver that predates it, one that ended), it becomes
`python -m ringflow step …` (an exec, the same process), which runs the step itself.
`python -m ringflow step …` asks the server the same way.

The request is one message: fields separated by NUL (no argument or environment entry
can hold one), length first, with the job's stdin, stdout and stderr passed along
(SCM_RIGHTS). The answers are ASCII lines: `P<pid>` from the step once it runs, then
`E<exit code>` or `S<signal>` from the server when the step has ended; or `R<why>` from
the server when it refuses the request before running anything.
"""

from __future__ import annotations

import _signal
import _socket
import os
import sys

SERVER_ENV = "RINGFLOW_STEP_SERVER"
# The steps that start themselves: an engineer's session runs for minutes, so its start
# is nothing beside it. Every other step (the executions, the weights keys, and each
# bookkeeping step, a few dozen a ring) runs in the server.
SELF_STARTED_STEPS = frozenset({"engineer"})
PROTOCOL = b"ringflow-step/1"
# The same request sent by the driver itself for a local job (driver_steps.py): no job
# process holds the connection, so the step does not die when it closes.
HELD_PROTOCOL = PROTOCOL + b"+driver"
# Forwarded to the step as they come: Snakemake's and the relay's stop, a terminal's.
FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT)
EXIT_LOST = 1
LOST_MESSAGE = (b"ringflow: the resident step server ended before the step did; "
                b"the step's own record says how far it got\n")  # fmt: skip
SCRIPT = os.path.abspath(__file__)


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


def step_command(python: str = sys.executable) -> list[str]:
    """The command a rule runs a step with, before the step's own arguments. `-P` keeps
    this file's folder off the import path."""
    return [python, "-P", SCRIPT, "step"]


def encode_request(argv: list[str], path: list[str] | None = None, environ=None,
                   protocol: bytes = PROTOCOL, mask: int | None = None) -> bytes:  # fmt: skip
    """The request for a step with this process's argv, folder, umask (or `mask`),
    environment (or `environ`, bytes to bytes) and import path (or `path`)."""
    path = sys.path if path is None else path
    environ = os.environb if environ is None else environ
    if mask is None:  # this process has one thread: the umask is 0 for no one else
        mask = os.umask(0)
        os.umask(mask)
    env = [key + b"=" + value for key, value in environ.items()]
    fields = [protocol, os.fsencode(sys.executable), os.fsencode(os.getcwd()), b"%d" % mask,
              b"%d" % len(argv), *map(os.fsencode, argv), b"%d" % len(env), *env,
              b"%d" % len(path), *map(os.fsencode, path)]  # fmt: skip
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


def run_through_server(path: str, argv: list[str], import_path: list[str] | None = None):
    """Run the step `argv` in the resident server at `path`, with this process's import
    path or `import_path`; its exit code (negative for a signal) once it has ended, or
    None where the server did not take it (nothing ran)."""
    try:
        request = encode_request(argv, import_path)
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except (OSError, ValueError):
        return None
    try:
        return _converse(sock, path, request)
    finally:
        sock.close()


def _converse(sock, path: str, request: bytes) -> int | None:
    try:
        sock.connect(path)
    except (OSError, ValueError):
        return None
    relay = _Relay()
    previous = {signum: _signal.signal(signum, relay) for signum in FORWARDED}
    # The three standard streams as C ints (not the array module: collections, 2 ms).
    fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
    try:
        sock.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
    except OSError:
        return _refused(previous, relay)
    for kind, value in answers(sock):
        if not kind:
            if relay.pid is None:
                return _refused(previous, relay)
            os.write(2, LOST_MESSAGE)
            return EXIT_LOST
        if kind == b"P":
            relay.started(int(value))
        elif kind == b"E":
            return int(value)
        elif kind == b"S":
            return -int(value)
        elif kind == b"R" and relay.pid is None:
            return _refused(previous, relay)


def answers(sock):
    """The server's answers as (kind, value) lines, then (b"", b"") once it hangs up."""
    buffer = b""
    while True:
        try:
            chunk = sock.recv(256)
        except OSError:
            chunk = b""
        if not chunk:
            yield b"", b""
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line[:1], line[1:]


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


def main(argv: list[str]) -> None:
    """The rules' step command: the step through the server, or started afresh."""
    server = wants_server(argv)
    os.environ.pop(SERVER_ENV, None)  # neither the step nor what it starts sees the server
    # The import path `python -m ringflow` would have: its folder first.
    import_path = [os.getcwd(), *sys.path]
    if server is not None:
        code = run_through_server(server, [sys.argv[0], *argv], import_path)
        if code is not None:
            exit_as(code)
    os.execv(sys.executable, [sys.executable, "-m", "ringflow", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
