"""The resident step server: the steps that run once per execution start as a fork of a
process that has imported ringflow already (docs/architecture.md#resident-steps).

A step started afresh spends most of its own time importing ringflow; a ring runs
hundreds of them. The driver therefore starts one server on this machine (never for SLURM
jobs, which run elsewhere) and tells its jobs where it listens. For each request the server
forks; the fork becomes the job's step as a fresh process would be, with the job's argv,
folder, umask, environment, import path and standard streams, in a session of its own,
and runs `ringflow.cli.main`. The job's process (`resident_client`) forwards the signals
it gets to the step and exits as the step did, so Snakemake, the Ctrl-C relay and the
supervisor's own checks see what they saw before:

- the job killed (SIGKILL, a kill of Snakemake's process group) kills its step at once,
  as it did when the step was the job's process;
- the driver gone, the server ends, and a running step's supervisor finds its parent gone
  (orphaned) as before;
- the server gone, each job still waits for its step, then says the step's end was not
  heard, and fails: the machinery's failure, never a candidate's.

Only the driver's user can connect: the socket lives in a folder of mode 0700, and the
server also checks the peer's uid.

    python -m ringflow.workflow.resident_steps LISTENING_FD DRIVER_FD [--main MODULE:FUNC]
"""

from __future__ import annotations

import array
import atexit
import contextlib
import fcntl
import importlib
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import traceback

from ..core.clock import load_ring
from .resident_client import HELD_PROTOCOL, PROTOCOL, SERVER_ENV

# What the resident steps import: loaded once, before the first fork. The executions'
# first (they are most of a ring's steps), then the bookkeeping steps' own modules.
PRELOAD = ("ringflow.cli", "ringflow.execute", "ringflow.scoring", "heapq",
           "ringflow.core.recovery", "ringflow.weights.environment",
           "ringflow.core.interrupts", "ringflow.weights.keytarget",
           "ringflow.ring.lock", "ringflow.nodes", "ringflow.carryover.importing",
           "ringflow.carryover.executions", "ringflow.carryover.manifest",
           "ringflow.search.plan", "ringflow.selection.promote", "ringflow.selection.power",
           "ringflow.selection.final", "ringflow.reporting.summary",
           "ringflow.reporting.report", "ringflow.reporting.chain_report",
           "setproctitle")  # fmt: skip
# A job sends its whole request as it connects; the server serves one request at a time,
# so a request that stalls is refused (the job then starts its step itself) before it
# holds up the others for long.
REQUEST_TIMEOUT_S = 2.0
MAX_REQUEST = 1 << 24
DISABLE_ENV = "RINGFLOW_RESIDENT_STEPS"


class Request:
    """A job's step as the client described it."""

    def __init__(self, body: bytes) -> None:
        fields = body.split(b"\0")
        if fields[0] not in (PROTOCOL, HELD_PROTOCOL):
            raise ValueError(f"protocol {fields[0][:40]!r}, not {PROTOCOL!r}")
        # Sent by the driver for a local job: no job process to die with.
        self.held_by_driver = fields[0] == HELD_PROTOCOL
        self.executable = os.fsdecode(fields[1])
        self.cwd = fields[2]
        self.umask = int(fields[3])
        at = 4
        self.argv, at = _counted(fields, at)
        self.env, at = _counted(fields, at)
        self.path, at = _counted(fields, at)
        if at != len(fields):
            raise ValueError("trailing fields")


def _counted(fields: list[bytes], at: int) -> tuple[list[bytes], int]:
    count = int(fields[at])
    items = fields[at + 1 : at + 1 + count]
    if len(items) != count:
        raise ValueError("truncated request")
    return items, at + 1 + count


# -- the driver's side -------------------------------------------------------------------


class ResidentServer:
    """The server the driver started: its process, the pipe whose end it waits for, and
    the folder of its socket."""

    def __init__(self, proc: subprocess.Popen, driver_fd: int, folder: str, path: str):
        self.proc, self.driver_fd, self.folder, self.path = proc, driver_fd, folder, path

    def stop(self, timeout: float = 5.0) -> None:
        """End the server (running steps go on) and stop pointing jobs at it."""
        if os.environ.get(SERVER_ENV) == self.path:
            del os.environ[SERVER_ENV]
        if self.driver_fd >= 0:
            os.close(self.driver_fd)
            self.driver_fd = -1
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_server(main: str | None = None) -> ResidentServer | None:
    """Start a server for this process's jobs and point them at it (the environment they
    inherit); None where this machine or the user's setting rules it out."""
    if os.environ.get(DISABLE_ENV, "1") == "0" or not hasattr(os, "pidfd_open"):
        return None
    folder = tempfile.mkdtemp(prefix="ringflow-steps-")  # mode 0700: the user's alone
    path = os.path.join(folder, "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)  # before the server runs: a job that comes early waits in line
        listener.listen(128)
    except OSError as exc:  # a path too long for a socket (a deep TMPDIR)
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)
        print(f"ringflow: steps start afresh: no resident server at {path}: {exc}",
              file=sys.stderr)  # fmt: skip
        return None
    driver_read, driver_write = os.pipe()  # the server ends with the driver, however it ends
    argv = [sys.executable, "-m", "ringflow.workflow.resident_steps",
            str(listener.fileno()), str(driver_read)]  # fmt: skip
    if main:
        argv += ["--main", main]
    try:
        proc = subprocess.Popen(argv, pass_fds=(listener.fileno(), driver_read),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
    finally:
        listener.close()
        os.close(driver_read)
    os.environ[SERVER_ENV] = path
    return ResidentServer(proc, driver_write, folder, path)


# -- the server --------------------------------------------------------------------------


def serve(listener: socket.socket, driver_fd: int, main) -> None:
    """Fork a step for each request until the driver is gone."""
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(driver_fd, selectors.EVENT_READ, "driver")
    running: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the job's socket)
    while True:
        for key, _events in selector.select():
            if key.data == "driver":
                return
            if key.data == "accept":
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                inherited = [listener, selector, driver_fd, *(c for _, c in running.values()),
                             *running]  # fmt: skip
                started = _start_step(conn, main, inherited)
                if started is None:
                    conn.close()
                    continue
                pid, pidfd = started
                running[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ, "step")
            else:
                pid, conn = running.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
                _send(conn, b"E%d\n" % code if code >= 0 else b"S%d\n" % -code)
                conn.close()


def _send(conn: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the job is gone: nobody waits for the answer
        conn.sendall(data)


def _start_step(conn: socket.socket, main, inherited: list) -> tuple[int, int] | None:
    """Read the request and fork its step; (pid, pidfd), or None where refused."""
    fds: list[int] = []
    try:
        conn.settimeout(REQUEST_TIMEOUT_S)
        _, uid, _ = struct.unpack("3i", conn.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))  # fmt: skip
        if uid != os.getuid():
            raise ValueError(f"uid {uid} is not the server's")
        body, fds = _receive(conn)
        request = Request(body)
        if request.executable != sys.executable:
            raise ValueError(f"{request.executable} is not the server's {sys.executable}")
        if len(fds) != 3:
            raise ValueError(f"{len(fds)} standard streams, not 3")
        conn.settimeout(None)
    except (OSError, ValueError) as exc:
        for fd in fds:
            os.close(fd)
        _send(conn, b"R%s\n" % str(exc).encode(errors="replace").replace(b"\n", b" "))
        return None
    _read_ahead(request)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as exc:  # no room for another process now: the job starts its own
        for fd in fds:
            os.close(fd)
        _send(conn, b"R%s\n" % str(exc).encode(errors="replace"))
        return None
    if pid == 0:
        code = 1
        try:
            code = _become_step(conn, request, fds, inherited, main)
        except SystemExit as exc:
            code = _exit_code(exc)
        except KeyboardInterrupt:
            traceback.print_exc()
            _exit(-signal.SIGINT)
        except BaseException:  # a step's crash ends it as Python's would
            traceback.print_exc()
        finally:
            _exit(code)
    for fd in fds:
        os.close(fd)
    return pid, os.pidfd_open(pid)


def _read_ahead(request: Request) -> None:
    """Parse the step's ring here, once, so that its forks find it parsed: a ring's steps
    are `step NAME RING …`, and each execution reads its RING.json twice. A ring not
    locked yet, or anything else that is not a ring, is left to the step."""
    if len(request.argv) < 4 or request.argv[1] != b"step":
        return
    ring = os.path.join(request.cwd, request.argv[3])
    if not os.path.isfile(os.path.join(ring, b"RING.json")):
        return
    with contextlib.suppress(Exception):  # the step reads it again and says what is wrong
        load_ring(os.fsdecode(ring))


def _receive(conn: socket.socket) -> tuple[bytes, list[int]]:
    """The request's body and the streams passed with it; a request that ends early or
    is too long is refused with any streams it passed closed."""
    fds: list[int] = []
    try:
        return _receive_into(conn, fds), fds
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        raise


def _receive_into(conn: socket.socket, fds: list[int]) -> bytes:
    data = b""
    size = None
    while size is None or len(data) < 4 + size:
        chunk, ancdata, _flags, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(3 * 4))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
                fds += list(received)
        if not chunk:
            raise ValueError("the request ended early")
        data += chunk
        if size is None and len(data) >= 4:
            size = int.from_bytes(data[:4], "big")
            if size > MAX_REQUEST:
                raise ValueError(f"a request of {size} bytes")
    return data[4:]


def _become_step(conn, request: Request, fds: list[int], inherited: list, main) -> int:
    """In the fork: become the job's step, then run it."""
    for thing in inherited:
        if isinstance(thing, int):
            os.close(thing)
        else:
            thing.close()
    os.setsid()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request.cwd)
    os.umask(request.umask)
    from setproctitle import setproctitle, setthreadtitle  # loaded before the first fork

    # What ps and top show, and what the Ctrl-C relay looks for: the step's own command,
    # as it would read had the step started afresh, not the server's. Before the
    # environment changes: the title takes the room of the server's argv and environment.
    # The process's name stays the interpreter's, as an exec would have named it.
    argv = [os.fsdecode(arg) for arg in request.argv[1:]]
    setproctitle(" ".join([request.executable, "-m", "ringflow", *argv]))
    setthreadtitle(os.path.basename(request.executable)[:15])
    os.environb.clear()
    os.environb.update(entry.split(b"=", 1) for entry in request.env if b"=" in entry)
    sys.argv = [os.fsdecode(arg) for arg in request.argv]
    sys.path[:] = [os.fsdecode(entry) for entry in request.path]
    tempfile.tempdir = None
    _send(conn, b"P%d\n" % os.getpid())
    if not request.held_by_driver:
        _die_with_job(conn)
    return _exit_code(SystemExit(main()))


def _die_with_job(conn: socket.socket) -> None:
    """The job killed, its step dies with it at once, as when the step was the job's own
    process. The job sends nothing after its request, so the socket becomes readable only
    when the job's end closes it: the kernel then sends this process SIGKILL (O_ASYNC with
    F_SETSIG), with no thread to watch it (a step that forks must stay single-threaded).
    From here on only the server writes to the socket, after this process has ended."""
    fd = conn.fileno()
    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGKILL)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    try:
        ended = conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        ended = False
    if ended:  # the job ended before the signal was armed
        os.kill(os.getpid(), signal.SIGKILL)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _exit(code: int) -> None:
    """End the fork as Python ends a process: exit handlers, flushed streams; a negative
    code ends it by that signal, as an uncaught KeyboardInterrupt ends Python."""
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)


def _main_of(spec: str | None):
    if not spec:
        from ..cli import main

        return main
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def run(argv: list[str]) -> int:
    listener = socket.socket(fileno=int(argv[0]))
    driver_fd = int(argv[1])
    main = _main_of(argv[3] if argv[2:3] == ["--main"] else None)
    for module in PRELOAD:
        importlib.import_module(module)
    from ..cli import prepare_step_parsers  # preloaded above

    prepare_step_parsers()
    # A job's Ctrl-C is relayed by its own process; the server itself ends with the driver.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    path = listener.getsockname()
    try:
        serve(listener, driver_fd, main)
    finally:
        listener.close()
        if isinstance(path, str) and path:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:]))
