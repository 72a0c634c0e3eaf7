"""SLURM's partitions read from recorded sinfo/scontrol output, and the refusal of an
execution no node can run (docs/slurm.md#refused-at-the-lock), without a controller."""

from __future__ import annotations

import pytest

from ringflow.cluster import slurm
from ringflow.cluster.slurm import (
    Node,
    Partition,
    Request,
    capacity,
    execution_request,
    parse_gres,
    parse_partition,
    parse_sinfo,
    parse_time_min,
    request_problem,
    requests_problem,
)
from ringflow.cluster.target import SlurmTarget, cluster_slots

# Recorded on the one-node cluster of scripts/slurm-up.sh (2 CPUs, 23 GB, no GPU).
ONE_NODE_SCONTROL = (
    "PartitionName=debug AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL "
    "Default=YES QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 "
    "Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO "
    "MaxCPUsPerNode=UNLIMITED Nodes=vm PriorityJobFactor=1 PriorityTier=1 RootOnly=NO "
    "ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=2 "
    "TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=UNLIMITED TRES=cpu=2,mem=23081M,node=1,billing=2\n"
)
ONE_NODE_SINFO = "vm|2|23081|(null)|alloc\n"

# A GPU partition as sinfo prints it on a mixed cluster (typed gres, socket lists).
GPU_SINFO = """\
g001|64|512000|gpu:a100:4(S:0-1)|mix
g002|64|512000|gpu:a100:4(S:0-1)|idle
g003|32|256000|gpu:v100:2(S:0),gpu:v100:2(S:1)|drain
g004|128|1024000|gpu:h100:8(S:0-3),tmpfs:100|down*
"""
GPU_SCONTROL = (
    "PartitionName=gpu AllowGroups=ALL Default=NO MaxTime=2-00:00:00 MaxNodes=UNLIMITED "
    "MaxCPUsPerNode=48 MaxMemPerNode=409600 Nodes=g[001-004] State=UP TotalCPUs=288\n"
)

QUICK = {"exec_health": {"term_grace_s": 2}, "scorer_timeout_min": 30}
DEFAULTS = {"exec_health": {"term_grace_s": 60}, "scorer_timeout_min": 30}


def one_node() -> Partition:
    return parse_partition(ONE_NODE_SCONTROL, parse_sinfo(ONE_NODE_SINFO))


def gpu_partition() -> Partition:
    return parse_partition(GPU_SCONTROL, parse_sinfo(GPU_SINFO))


def test_the_one_node_cluster_is_read_from_its_recorded_output():
    part = one_node()
    assert part.name == "debug" and part.state == "UP"
    assert part.max_time_min is None and part.max_mem_per_node_mb is None
    assert part.max_cpus_per_node is None
    assert part.nodes == (Node("vm", 2, 23081, {}, "alloc"),)


def test_gres_gives_the_gpus_by_model():
    assert parse_gres("(null)") == {}
    assert parse_gres("gpu:4") == {"": 4}
    assert parse_gres("gpu:a100:4(S:0-1)") == {"a100": 4}
    assert parse_gres("gpu:v100:2(S:0),gpu:v100:2(S:1)") == {"v100": 4}
    assert parse_gres("gpu:h100:8(S:0-3),tmpfs:100") == {"h100": 8}
    assert parse_gres("gpu:a100:2(S:0,1),gpu:t4:1") == {"a100": 2, "t4": 1}


def test_a_gpu_partition_is_read_with_its_caps():
    part = gpu_partition()
    assert part.max_time_min == 2880
    assert part.max_cpus_per_node == 48 and part.max_mem_per_node_mb == 409600
    assert [n.name for n in part.nodes if n.usable] == ["g001", "g002"]
    assert part.nodes[3].gpus_of("h100") == 8 and part.nodes[3].gpus_of("a100") == 0


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("UNLIMITED", None), ("INFINITE", None), ("30", 30), ("30:30", 30.5),
     ("2:00:00", 120), ("1-00:00:00", 1440), ("1-02", 1560), ("1-02:30", 1590)],
)  # fmt: skip
def test_time_limits_in_every_slurm_form(text, minutes):
    assert parse_time_min(text) == minutes


def test_the_request_is_what_the_execute_rule_asks():
    request = execution_request({"threads": 8, "memory_gb": 28, "time_limit_min": 360}, DEFAULTS)
    assert request == Request(threads=8, memory_mb=28 * 1024 + 512, runtime_min=392)
    quick = execution_request({"threads": 1, "memory_gb": 4, "time_limit_min": 10}, QUICK)
    assert (quick.threads, quick.memory_mb, quick.runtime_min) == (1, 4608, 41)


def test_the_quick_ring_fits_the_one_node_cluster():
    quick = execution_request({"threads": 1, "memory_gb": 4, "time_limit_min": 10}, QUICK)
    assert request_problem(quick, one_node()) is None


def test_the_default_limits_are_refused_with_the_keys_and_the_largest_node():
    request = execution_request({"threads": 8, "memory_gb": 28, "time_limit_min": 360}, DEFAULTS)
    problem = request_problem(request, one_node())
    assert problem is not None
    assert "no node of SLURM partition debug can run" in problem
    assert "asks for 8 CPUs, 28.5 GB of memory and 392 min" in problem
    assert "its largest node, vm, has 2 CPUs, 22.5 GB and 0 GPU(s)" in problem
    assert "set limits.threads to at most 2" in problem
    assert "set limits.memory_gb to at most 22" in problem


def test_a_per_view_limit_names_its_own_key():
    request = execution_request(
        {"threads": 1, "memory_gb": 64, "time_limit_min": 10}, QUICK, view="final"
    )
    problem = requests_problem([request], one_node())
    assert "on view final" in problem
    assert "limits.memory_gb (or limits_per_view.final.memory_gb)" in problem


def test_gpus_on_a_cpu_partition_are_refused():
    request = execution_request({"threads": 1, "memory_gb": 4, "time_limit_min": 10}, QUICK, 1)
    problem = request_problem(request, one_node())
    assert "1 GPU(s)" in problem
    assert "set gpus_per_execution to at most 0, or use a GPU partition" in problem


def test_a_gpu_partition_checks_caps_models_and_usable_nodes():
    part = gpu_partition()
    ok = Request(threads=16, memory_mb=100_000, gpus=4, runtime_min=600)
    assert request_problem(ok, part) is None
    # Eight GPUs exist only on a node that is down.
    eight = Request(threads=16, memory_mb=100_000, gpus=8, runtime_min=600)
    assert "set gpus_per_execution to at most 4" in request_problem(eight, part)
    # The partition's caps, not the nodes', bound CPUs, memory and time.
    big = Request(threads=64, memory_mb=450_000, gpus=1, runtime_min=3000)
    problem = request_problem(big, part)
    assert "set limits.threads to at most 48" in problem
    assert "set limits.memory_gb to at most 399" in problem
    assert "shorten limits.time_limit_min" in problem and "at most 2880 min" in problem
    assert "the partition allows MaxCPUsPerNode 48, MaxMemPerNode 400.0 GB, MaxTime 2880 min" in (
        problem
    )
    # A model no usable node has.
    v100 = Request(threads=4, memory_mb=10_000, gpus=1, runtime_min=60, gpu_model="v100")
    assert "of model v100" in request_problem(v100, part)


def test_no_single_node_offering_everything_is_refused_too():
    part = Partition("mixed", (Node("cpu", 64, 512_000, {}), Node("gpu", 8, 64_000, {"": 4})))
    request = Request(threads=32, memory_mb=100_000, gpus=1, runtime_min=60)
    assert "so that one node offers them all" in request_problem(request, part)


def test_a_partition_that_is_down_or_has_no_usable_node_is_refused():
    down = Partition("p", (Node("n", 8, 8000),), state="DOWN")
    assert "is DOWN" in request_problem(Request(1, 1000), down)
    drained = Partition("p", (Node("n", 8, 8000, state="drain"),))
    assert "no node that takes jobs (n drain)" in request_problem(Request(1, 1000), drained)


def test_missing_client_tools_are_an_input_error(monkeypatch):
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    with pytest.raises(slurm.InputError, match=r"sinfo. is not on PATH"):
        slurm.query_partition(None)


def test_capacity_counts_what_every_usable_node_holds_side_by_side():
    # The one-node cluster: 2 CPUs, 23 GB. The quick ring's executions (1 thread, 4.5 GB)
    # fit twice (CPUs bound), the demo's 8 threads not at all.
    assert capacity(one_node(), Request(threads=1, memory_mb=4608)) == 2
    assert capacity(one_node(), Request(threads=1, memory_mb=12000)) == 1  # memory bound
    assert capacity(one_node(), Request(threads=8, memory_mb=4608)) == 0
    # The GPU partition: drained and down nodes hold nothing; MaxCPUsPerNode=48 and
    # MaxMemPerNode=400 GB cap the two a100 nodes; GPUs bound first.
    part = gpu_partition()
    assert capacity(part, Request(threads=4, memory_mb=16000, gpus=1)) == 8
    assert capacity(part, Request(threads=4, memory_mb=16000, gpus=1, gpu_model="v100")) == 0
    assert capacity(part, Request(threads=20, memory_mb=16000, gpus=1)) == 4  # 48 // 20 = 2
    assert capacity(part, Request(threads=1, memory_mb=300000)) == 2  # 400 GB // 293 GB = 1


def test_a_rings_cluster_slots_are_the_least_any_of_its_views_gets():
    config = {
        **QUICK,
        "gpus_per_execution": 0,
        "limits": {"threads": 1, "memory_gb": 4, "time_limit_min": 5},
        "limits_per_view": {"big": {"memory_gb": 15}},
    }
    assert cluster_slots(config, SlurmTarget(None), lambda name: one_node()) == 1
    del config["limits_per_view"]
    assert cluster_slots(config, SlurmTarget(None), lambda name: one_node()) == 2
