"""Local step jobs that the driver hands to the resident server itself
(docs/architecture.md#resident-steps).

A rule runs a step as `python -P …/resident_client.py step NAME … > LOG 2>&1`. Run the
way Snakemake runs a shell command, a local job starts bash, bash starts the client's
Python, and the client asks the resident server to fork the step: two process starts,
about 13 ms of CPU, for a request the driver can send itself. So Snakemake's local
executor sends it from the job's own thread wherever the job's command has exactly that
shape: the same argv, folder, umask and import path; the environment Snakemake gives a
shell job (its thread counts and temporary folder); the log as the step's standard output
and error, /dev/null as its input. The job ends as its step ends. Any other command, a
job the server refuses, and every job where no server runs, run as Snakemake runs them.

What a job's client did, the driver does:

- signals: the Ctrl-C relay (relay.py) sends each step here what its client would have
  forwarded (`in_flight`);
- the job's end: a step that fails fails its job, and a server that ends before its step
  fails the job as the machinery's failure, never a candidate's;
- the driver killed: the step does not die with the driver's connection; as when its
  client outlived the driver, an execution's supervisor finds its grandparent gone
  (orphaned) and records the execution interrupted;
- the driver stopping: once it relayed a stop, no local job starts (it fails, unstarted),
  whether or not Snakemake saw the signal (docs/operations.md#recovery-after-a-stop).
"""

from __future__ import annotations

import array
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading

from .resident_client import (
    EXIT_LOST,
    HELD_PROTOCOL,
    LOST_MESSAGE,
    SERVER_ENV,
    answers,
    encode_request,
    step_command,
    wants_server,
)

# What Snakemake's shell() sets in every job's environment (snakemake/shell.py).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")  # fmt: skip
TMPDIR_VARIABLES = ("TMPDIR", "TMP", "TEMPDIR", "TEMP")

_IN_FLIGHT: dict[int, str] = {}  # a running step's pid -> its step's name
_RELAYED: list[tuple[int, bool]] = []  # the signal relayed, for the steps that start after
_GUARD = threading.Lock()


def in_flight() -> dict[int, str]:
    """The steps the driver has running now: pid -> the step's name (`execute`, …)."""
    with _GUARD:
        return dict(_IN_FLIGHT)


def relay_to_steps(signum: int, from_terminal: bool) -> list[int]:
    """Give each step the driver runs what its client would have forwarded: a terminal's
    Ctrl-C reached every client, so every step gets it; any other signal to the driver
    becomes SIGTERM to the executions (as relay.py sends their clients). A step whose
    request is on its way gets it as it starts. The pids of the executions told."""
    with _GUARD:
        _RELAYED[:] = [(signum, from_terminal)]
        steps = dict(_IN_FLIGHT)
    return [pid for pid, name in steps.items() if _tell(pid, name, signum, from_terminal)]


def _tell(pid: int, name: str, signum: int, from_terminal: bool) -> bool:
    """Whether `pid`, an execution, was sent the relayed signal."""
    if not from_terminal and name != "execute":
        return False
    try:
        os.kill(pid, signum if from_terminal else signal.SIGTERM)
    except OSError:
        return False
    return name == "execute"


def step_words(command: str, step: list[str]) -> tuple[list[str], str] | None:
    """(the step's arguments after `step`, the log) where `command` is exactly the rules'
    `STEP ARGS… > LOG 2>&1` with every word quoted as the rules quote it (so that no word
    holds anything a shell would read otherwise); None for any other command."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    head = len(step)
    if len(words) < head + 4 or words[:head] != step or words[-3::2] != [">", "2>&1"]:
        return None
    args, log = words[head:-3], words[-2]
    if f"{shlex.join(words[:-3])} > {shlex.quote(log)} 2>&1" != command.strip():
        return None
    return args, log


def job_environment(threads, tmpdir: str | None) -> dict[bytes, bytes]:
    """The environment Snakemake's shell() gives a job, without the server's address."""
    environ = dict(os.environb)
    environ.pop(os.fsencode(SERVER_ENV), None)
    for name in THREAD_VARIABLES:
        environ[name.encode()] = str(threads).encode()
    if tmpdir:
        for name in TMPDIR_VARIABLES:
            environ[name.encode()] = os.fsencode(tmpdir)
    return environ


def current_umask() -> int:
    """This process's umask, read without changing it (Linux 4.7+ shows it in /proc):
    setting it to read it back would, for a moment, leave every file the driver's other
    threads create without a mask."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def client_import_path(python: str = sys.executable) -> list[str]:
    """The import path the client would send: its folder first, then what `python -P`
    starts with in this environment (asked once per driver)."""
    out = subprocess.run([python, "-P", "-c", "import sys; print('\\0'.join(sys.path))"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return out.rstrip("\n").split("\0")


class StepDispatch:
    """The driver's side of its local step jobs: what it needs to send each one."""

    def __init__(self, server_path: str, python: str = sys.executable) -> None:
        self.server_path = server_path
        self.step = step_command(python)
        self.import_path = client_import_path(python)
        self.umask = current_umask()  # Snakemake never changes it while it runs

    def request_for(self, command: str, threads, tmpdir: str | None):
        """(request, log, step name) for a job's command, or None where it is not a step
        the server runs."""
        found = step_words(command, self.step)
        if found is None:
            return None
        args, log = found
        argv = ["step", *args]
        if wants_server(argv, {SERVER_ENV: self.server_path}) is None:
            return None
        request = encode_request([self.step[2], *argv], [os.getcwd(), *self.import_path],
                                 job_environment(threads, tmpdir), HELD_PROTOCOL,
                                 self.umask)  # fmt: skip
        return request, log, args[0]

    def run(self, request: bytes, log: str, name: str) -> int | None:
        """Run the step: its exit code (negative for a signal), EXIT_LOST where the server
        ended before it, or None where the server did not take it (nothing ran)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(self.server_path)
            except OSError:
                return None
            if not self._send(sock, request, log):
                return None
            return self._wait(sock, log, name)

    @staticmethod
    def _send(sock: socket.socket, request: bytes, log: str) -> bool:
        stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        except OSError:
            os.close(stdin)
            return False  # Snakemake's shell says why
        try:
            fds = array.array("i", [stdin, out, out])
            sock.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            return True
        except OSError:
            return False
        finally:
            os.close(stdin)
            os.close(out)

    @staticmethod
    def _wait(sock: socket.socket, log: str, name: str) -> int | None:
        pid = None
        try:
            for kind, value in answers(sock):
                if not kind:
                    if pid is None:
                        return None
                    _say_lost(log)
                    return EXIT_LOST
                if kind == b"P" and pid is None:
                    pid = int(value)
                    with _GUARD:
                        _IN_FLIGHT[pid] = name
                        relayed = list(_RELAYED)
                    for signum, from_terminal in relayed:
                        _tell(pid, name, signum, from_terminal)
                elif kind == b"E":
                    return int(value)
                elif kind == b"S":
                    return -int(value)
                elif kind == b"R" and pid is None:
                    return None
        finally:
            if pid is not None:
                with _GUARD:
                    _IN_FLIGHT.pop(pid, None)
        return None


def _say_lost(log: str) -> None:
    try:
        with open(log, "ab") as stream:
            stream.write(LOST_MESSAGE)
    except OSError:
        pass


def send_local_steps(workflow, server_path: str) -> bool:
    """Have the local executor(s) of `workflow` send their step jobs to the server at
    `server_path` (see the module's docstring); whether an executor took it."""
    scheduler = getattr(workflow, "scheduler", None)
    executors = [getattr(scheduler, "_executor", None), getattr(scheduler, "_local_executor", None)]
    local = [ex for ex in executors if _is_local_executor(ex)]
    if not local or _deploys(workflow):
        return False
    dispatch = StepDispatch(server_path)
    for executor in local:
        _wrap(executor, dispatch)
    return True


def _is_local_executor(executor) -> bool:
    return (
        executor is not None
        and type(executor).__module__ == "snakemake.executors.local"
        and callable(getattr(executor, "run_single_job", None))
        and hasattr(executor, "pool")
        and callable(getattr(executor, "cached_or_run", None))
    )


def _deploys(workflow) -> bool:
    """Whether jobs run in a conda environment, a container or environment modules: their
    shell command is wrapped, so it is not the step's alone."""
    settings = getattr(workflow, "deployment_settings", None)
    methods = getattr(settings, "deployment_method", None)
    return bool(methods)


def _wrap(executor, dispatch: StepDispatch) -> None:
    run_single_job = executor.run_single_job

    def run_step_job(job):
        with _GUARD:
            relayed = [signum for signum, _ in _RELAYED]
        if relayed:
            # The driver was told to stop, and Snakemake may not know it: a Ctrl-C that
            # comes while Snakemake writes a log line is dropped there (its log handler
            # catches KeyboardInterrupt). No job starts after it, so no step decides with
            # the runs the relay interrupted (they ended their jobs as done).
            return executor.pool.submit(executor.cached_or_run, job, _refused, job, relayed[0])
        planned = None
        if not (job.is_group() or not job.is_shell or job.is_shadow or job.benchmark):
            tmpdir = job.resources.get("tmpdir", None)
            planned = dispatch.request_for(job.shellcmd or "", job.threads, tmpdir)
        if planned is None:
            return run_single_job(job)
        # Prepared here, in the scheduler's thread, as Snakemake prepares its own jobs;
        # the arguments are its own run's, should the server not take the step.
        fallback = executor.job_args_and_prepare(job)
        return executor.pool.submit(executor.cached_or_run, job, _run_step, job, dispatch,
                                    planned, fallback)  # fmt: skip

    executor.run_single_job = run_step_job


def _refused(job, signum: int) -> None:
    from snakemake.exceptions import RuleException

    name = signal.Signals(signum).name
    raise RuleException(f"ringflow: not started: the driver received {name} and is stopping",
                        rule=job.rule)  # fmt: skip


def _run_step(job, dispatch: StepDispatch, planned, fallback) -> None:
    """In the job's thread: the step through the server, or Snakemake's own run."""
    code = dispatch.run(*planned)
    if code is None:
        from snakemake.executors.local import run_wrapper

        run_wrapper(*fallback)
    elif code != 0:
        from snakemake.exceptions import RuleException

        command = job.shellcmd or ""
        raise RuleException(str(subprocess.CalledProcessError(code, command)), rule=job.rule)
