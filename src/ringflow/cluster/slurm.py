"""SLURM's view of a partition, and the refusal of an execution no node of it can run
(docs/slurm.md#refused-at-the-lock).

A job whose request exceeds every node of its partition pends forever (reason
`PartitionConfig` or `Resources`) and neither SLURM nor Snakemake says so; ringflow refuses
such a ring at its lock instead, naming the configuration keys to change and the figures
of the partition's largest node. Parsing is separate from querying, so it is tested on
recorded `sinfo` and `scontrol` output without a controller."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import field

from ..core.errors import InputError
from ..core.frozen import Frozen, frozen_record

# One line per node of the partition: name, CPUs, memory (MB), generic resources, state.
SINFO_FORMAT = "%N|%c|%m|%G|%t"
QUERY_TIMEOUT_S = 30
# Node states that never take a job until an administrator acts.
UNUSABLE_STATES = ("down", "drain", "fail", "inval", "futr", "maint", "resv")
_JOBNAME = re.compile(r"[^A-Za-z0-9_-]")


def job_prefix(ring_name: str) -> str:
    """The SLURM job name prefix for a ring: what the plugin allows, at most 50 characters."""
    return _JOBNAME.sub("-", f"ringflow-{ring_name}")[:50]


@frozen_record
class Node(Frozen):
    name: str
    cpus: int
    memory_mb: int
    gpus: dict[str, int] = field(default_factory=dict)  # GPU model ("" if untyped) -> count
    state: str = "idle"

    @property
    def gpu_count(self) -> int:
        return sum(self.gpus.values())

    def gpus_of(self, model: str | None) -> int:
        """GPUs of `model` (any model when None)."""
        if not model:
            return self.gpu_count
        return self.gpus.get(model, 0)

    @property
    def usable(self) -> bool:
        return not self.state.rstrip("*~#!%$@^-").startswith(UNUSABLE_STATES)


@frozen_record
class Partition(Frozen):
    name: str
    nodes: tuple[Node, ...]
    max_time_min: float | None = None  # None: unlimited
    max_mem_per_node_mb: int | None = None
    max_cpus_per_node: int | None = None
    state: str = "UP"


@frozen_record
class Request(Frozen):
    """What one execution asks of a node, with the configuration keys that set each figure."""

    threads: int
    memory_mb: int
    gpus: int = 0
    runtime_min: int = 0
    gpu_model: str | None = None
    view: str | None = None  # the view whose limits these are (limits_per_view)


def execution_request(
    limits: dict, config: dict, gpus: int = 0, view: str | None = None
) -> Request:
    """An execution's request from its view's limits, as the execute rule asks: the threads,
    the memory plus 512 MB for the supervisor, and the time limit plus the supervisor's
    grace and the scorer's time (ringflow.workflow.dag)."""
    minutes = limits["time_limit_min"] + _after_program_min(config)
    return Request(
        threads=int(limits["threads"]),
        memory_mb=int(limits["memory_gb"] * 1024) + 512,
        gpus=int(gpus),
        runtime_min=int(minutes) + 1,
        view=view,
    )


def _after_program_min(config: dict) -> float:
    """Minutes an execution's job runs after its program is stopped: the supervisor's
    grace, then scoring."""
    return config["exec_health"]["term_grace_s"] / 60 + config["scorer_timeout_min"]


def job_time_limit_min(limits: dict, config: dict, now: float, deadline: float | None = None,
                       stop_at: float | None = None) -> int:  # fmt: skip
    """An execution job's SLURM time limit as it is submitted at `now`: ringflow's own
    deadline for the execution (its time limit, or the moment the ring's clock stops it,
    `deadline`, whichever comes first) plus the grace and scoring, and a minute; never
    past the ring's `stop_at`, and at least a minute (SLURM's smallest limit). SLURM
    counts it from the job's start, so a job that pends stays within it too."""
    program = float(limits["time_limit_min"])
    if deadline is not None:
        program = min(program, max(0.0, (deadline - now) / 60))
    minutes = int(program + _after_program_min(config)) + 1
    if stop_at is not None:
        minutes = min(minutes, int((stop_at - now) // 60))
    return max(1, minutes)


# Minutes an engineer session's job runs after its engineer is stopped: the workspace
# checked, copied and hashed into a submission (up to engineer.limits.workspace_gb).
SESSION_SETTLE_MIN = 5


def session_time_limit_min(config: dict, now: float, handover: float,
                           stop_at: float | None = None) -> int:  # fmt: skip
    """An engineer session's SLURM time limit as its job is submitted at `now`: until the
    hand-over point (the session's own deadline; the cutoff it follows only moves
    earlier), the supervisor's grace and the settling of the workspace, and a minute;
    never past the ring's `stop_at`, and at least a minute."""
    minutes = max(0.0, (handover - now) / 60) + config["exec_health"]["term_grace_s"] / 60
    minutes = int(minutes + SESSION_SETTLE_MIN) + 1
    if stop_at is not None:
        minutes = min(minutes, int((stop_at - now) // 60))
    return max(1, minutes)


def controller_problem() -> str | None:
    """Why SLURM cannot run a ring from here (no plugin for this Python, no client tools,
    no controller answering), or None."""
    import importlib.util

    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "the SLURM executor plugin is not installed for this Python (make setup-slurm)"
    if shutil.which("sinfo") is None:
        return "no SLURM client tools here (make slurm-up)"
    done = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip
    if done.returncode != 0 or not done.stdout.strip():
        said = (done.stderr or done.stdout).strip()[-200:]
        return f"no SLURM controller answers (make slurm-up): {said}"
    return None


# ---- parsing ------------------------------------------------------------------------------


def parse_gres(text: str) -> dict[str, int]:
    """GPUs in a node's gres: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:a100:2,gpu:v100:2`,
    `(null)`. Other generic resources are ignored."""
    gpus: dict[str, int] = {}
    # Commas separate resources, but a socket list inside parentheses has commas too.
    for item in re.split(r",(?![^(]*\))", text.strip()):
        item = re.sub(r"\(.*?\)", "", item).strip()
        parts = item.split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        model, count = ("", parts[1]) if len(parts) == 2 else (parts[1], parts[2])
        match = re.match(r"\d+", count)
        if match:
            gpus[model] = gpus.get(model, 0) + int(match.group())
    return gpus


def parse_sinfo(text: str) -> tuple[Node, ...]:
    """`sinfo -N -h -p PART -o '%N|%c|%m|%G|%t'`: one node per line (a node listed twice,
    once per state, counts once)."""
    nodes: dict[str, Node] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 5:
            raise ValueError(f"unexpected sinfo line: {line!r}")
        name, cpus, memory, gres, state = (f.strip() for f in fields)
        nodes.setdefault(
            name,
            Node(name, _int(cpus), _int(memory), parse_gres(gres), state),
        )
    return tuple(nodes.values())


def _int(text: str) -> int:
    match = re.match(r"\d+", text)
    if not match:
        raise ValueError(f"not a number: {text!r}")
    return int(match.group())


def parse_time_min(text: str) -> float | None:
    """A SLURM time limit in minutes: `UNLIMITED`/`INFINITE` (None), `MM`, `MM:SS`,
    `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days = 0
    if "-" in text:
        head, text = text.split("-", 1)
        days = int(head)
        parts = [int(p) for p in text.split(":")]
        hours, minutes, seconds = [*parts, 0, 0][:3]
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts[:3]
    return days * 1440 + hours * 60 + minutes + seconds / 60


def parse_partition(text: str, nodes: tuple[Node, ...] = ()) -> Partition:
    """`scontrol show partition PART -o` (one line of KEY=VALUE fields), with its nodes."""
    fields: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
    if "PartitionName" not in fields:
        raise ValueError(f"not a partition record: {text.strip()[:200]!r}")

    def limit(key: str) -> int | None:
        value = fields.get(key, "UNLIMITED")
        return None if value.upper() in ("UNLIMITED", "0") else _int(value)

    return Partition(
        name=fields["PartitionName"],
        nodes=nodes,
        max_time_min=parse_time_min(fields.get("MaxTime", "UNLIMITED")),
        max_mem_per_node_mb=limit("MaxMemPerNode"),
        max_cpus_per_node=limit("MaxCPUsPerNode"),
        state=fields.get("State", "UP"),
    )


# ---- querying -----------------------------------------------------------------------------


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        raise InputError(
            f"the ring runs under SLURM but `{argv[0]}` is not on PATH here: run the workflow "
            "where SLURM's client tools are (docs/slurm.md)"
        )
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise InputError(
            f"`{' '.join(argv)}` gave no answer in {QUERY_TIMEOUT_S} s: is slurmctld up?"
        ) from exc
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise InputError(f"`{' '.join(argv)}` failed: {why[-1] if why else done.returncode}")
    return done.stdout


def default_partition() -> str:
    """The cluster's default partition (`sinfo` marks it with `*`)."""
    for line in _run(["sinfo", "-h", "-o", "%P"]).splitlines():
        if line.strip().endswith("*"):
            return line.strip().rstrip("*")
    raise InputError("SLURM has no default partition: name one (slurm_partition)")


def query_partition(name: str | None) -> Partition:
    """The partition `name` (SLURM's default when None) and its nodes, from sinfo/scontrol."""
    name = name or default_partition()
    record = _run(["scontrol", "show", "partition", name, "-o"])
    nodes = parse_sinfo(_run(["sinfo", "-N", "-h", "-p", name, "-o", SINFO_FORMAT]))
    return parse_partition(record, nodes)


# ---- the refusal --------------------------------------------------------------------------


def _gb(mb: int | float) -> str:
    return f"{mb / 1024:.1f} GB"


def fits(node: Node, request: Request) -> bool:
    return (
        node.cpus >= request.threads
        and node.memory_mb >= request.memory_mb
        and node.gpus_of(request.gpu_model) >= request.gpus
    )


def node_capacity(node: Node, request: Request, partition: Partition | None = None) -> int:
    """Executions of `request` one node runs side by side, within the partition's per-node
    caps; 0 where the node takes no jobs or cannot fit one."""
    if not node.usable:
        return 0
    cpus, memory = node.cpus, node.memory_mb
    if partition is not None:
        cpus = min(cpus, partition.max_cpus_per_node or cpus)
        memory = min(memory, partition.max_mem_per_node_mb or memory)
    count = min(cpus // max(1, request.threads), memory // max(1, request.memory_mb))
    if request.gpus:
        count = min(count, node.gpus_of(request.gpu_model) // request.gpus)
    return max(0, count)


def capacity(partition: Partition, request: Request) -> int:
    """Executions of `request` the whole partition runs at once, were it theirs alone: the
    most a ring can have running there, whatever the profile's `jobs`."""
    return sum(node_capacity(node, request, partition) for node in partition.nodes)


def largest(nodes: tuple[Node, ...], model: str | None = None) -> Node:
    """The node with the most GPUs (of the model), then CPUs, then memory."""
    return max(nodes, key=lambda n: (n.gpus_of(model), n.cpus, n.memory_mb))


def _key(view: str | None, name: str) -> str:
    return f"limits.{name}" + (f" (or limits_per_view.{view}.{name})" if view else "")


def request_problem(request: Request, partition: Partition) -> str | None:
    """Why no node of `partition` can run an execution asking `request`, naming the keys to
    change and the largest node's figures; None when one can."""
    where = f"SLURM partition {partition.name}"
    if partition.state.upper() != "UP":
        return f"{where} is {partition.state}: no job of it starts; use another partition"
    usable = tuple(n for n in partition.nodes if n.usable)
    if not usable:
        states = ", ".join(f"{n.name} {n.state}" for n in partition.nodes) or "no nodes"
        return f"{where} has no node that takes jobs ({states})"
    asks = (
        f"an execution{f' on view {request.view}' if request.view else ''} asks for "
        f"{request.threads} CPUs, {_gb(request.memory_mb)} of memory"
        f"{f', {request.gpus} GPU(s)' if request.gpus else ''}"
        f"{f' of model {request.gpu_model}' if request.gpu_model and request.gpus else ''}"
        f" and {request.runtime_min} min"
    )
    fixes = []
    big = largest(usable, request.gpu_model)
    most_cpus = max(n.cpus for n in usable)
    most_mem = max(n.memory_mb for n in usable)
    most_gpus = max(n.gpus_of(request.gpu_model) for n in usable)
    cpu_cap = min(most_cpus, partition.max_cpus_per_node or most_cpus)
    mem_cap = min(most_mem, partition.max_mem_per_node_mb or most_mem)
    if request.threads > cpu_cap:
        fixes.append(f"set {_key(request.view, 'threads')} to at most {cpu_cap}")
    if request.memory_mb > mem_cap:
        fixes.append(
            f"set {_key(request.view, 'memory_gb')} to at most "
            f"{max(0, (mem_cap - 512) // 1024)} (the request adds 0.5 GB for the supervisor)"
        )
    if request.gpus > most_gpus:
        fixes.append(
            f"set gpus_per_execution to at most {most_gpus}"
            + (" (or another gpu_model)" if request.gpu_model else "")
            + (", or use a GPU partition (slurm_partition)" if not most_gpus else "")
        )
    limit = partition.max_time_min
    if limit is not None and request.runtime_min > limit:
        fixes.append(
            f"shorten {_key(request.view, 'time_limit_min')} (with exec_health.term_grace_s "
            f"and scorer_timeout_min, at most {limit:g} min in all)"
        )
    if not fixes and any(fits(n, request) for n in usable):
        return None
    if not fixes:
        fixes.append("lower the threads, memory or GPUs so that one node offers them all")
    figures = (
        f"its largest node, {big.name}, has {big.cpus} CPUs, {_gb(big.memory_mb)} and "
        f"{big.gpus_of(request.gpu_model)} GPU(s)"
    )
    caps = [
        f"{what} {value}"
        for what, value in (
            ("MaxCPUsPerNode", partition.max_cpus_per_node),
            ("MaxMemPerNode", partition.max_mem_per_node_mb and _gb(partition.max_mem_per_node_mb)),
            ("MaxTime", limit is not None and f"{limit:g} min"),
        )
        if value
    ]
    if caps:
        figures += f"; the partition allows {', '.join(caps)}"
    return f"no node of {where} can run the ring's executions: {asks}; {figures}. " + (
        "; ".join(fixes)
    )


def requests_problem(requests: list[Request], partition: Partition) -> str | None:
    """The first request (one per view) no node can meet, or None."""
    for request in requests:
        if problem := request_problem(request, partition):
            return problem
    return None
