#!/usr/bin/env bash
# A one-node SLURM 22.05 cluster with accounting on this machine, for the tests marked `slurm`
# and for trying profiles/slurm (docs/slurm.md): munge, MariaDB, slurmdbd, slurmctld and
# slurmd on loopback, partition `debug`, account `research`. Debian or Ubuntu, as root, no
# systemd needed. Idempotent: installs the packages only when missing (apt-get update
# first), writes the configuration, and starts only the daemons not already running; each
# daemon writes its PID file under /run, and scripts/slurm-down.sh stops them by PID.
# Where NVIDIA device nodes exist (/dev/nvidia0, …) the node offers them as `gpu` gres;
# on a machine without any, RINGFLOW_SLURM_FAKE_GPUS=N offers N stand-ins (character devices
# like /dev/null under /run/ringflow-slurm/gpus/) so that jobs get GPU allocations and
# CUDA_VISIBLE_DEVICES from SLURM, for the tests that run with tests/fake_nvml.
# RINGFLOW_SLURM_SCHEDULER_PARAMETERS sets slurm.conf's SchedulerParameters (SLURM's
# defaults otherwise), e.g. batch_sched_delay=0 to try a cluster that starts pending jobs
# without SLURM's batching delay (docs/slurm.md#measured); stop the cluster first.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "slurm-up: run as root (it installs packages and starts system daemons)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)

packages=()
command -v slurmctld >/dev/null 2>&1 || packages+=(slurm-wlm)
command -v slurmdbd >/dev/null 2>&1 || packages+=(slurmdbd)
command -v munged >/dev/null 2>&1 || packages+=(munge)
command -v mariadbd >/dev/null 2>&1 || packages+=(mariadb-server)
if [ ${#packages[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq "${packages[@]}" >/dev/null # munge's postinst creates its key
fi

# A daemon runs when its PID file names a live process.
running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() { # seconds, command…
  local tries=$(($1 * 4))
  shift
  for _ in $(seq "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  echo "slurm-up: gave up waiting for: $*" >&2
  return 1
}

HOST=$(hostname -s)
MEM=$(($(free -m | awk '/^Mem:/{print $2}') - 1024))
mkdir -p /run/munge /run/slurm /run/mysqld /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
chown munge:munge /run/munge
chown mysql:mysql /run/mysqld
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --force
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi

running /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged

if ! running /run/mysqld/mysqld.pid; then
  nohup /usr/sbin/mariadbd --user=mysql --datadir=/var/lib/mysql \
    --socket=/run/mysqld/mysqld.sock --pid-file=/run/mysqld/mysqld.pid \
    >/var/log/mariadbd.out 2>&1 &
fi
wait_for 30 mariadb -e 'select 1'
mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

cat >/etc/slurm/slurmdbd.conf <<EOC
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StoragePort=3306
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOC
chmod 600 /etc/slurm/slurmdbd.conf

# GPUs, when this machine has NVIDIA device nodes: one gres line per device.
shopt -s nullglob
gpus=()
for dev in /dev/nvidia[0-9]*; do gpus+=("$dev"); done
shopt -u nullglob
FAKE_GPUS=${RINGFLOW_SLURM_FAKE_GPUS:-0}
if [ ${#gpus[@]} -eq 0 ] && [ "$FAKE_GPUS" -gt 0 ]; then
  mkdir -p /run/ringflow-slurm/gpus
  for i in $(seq 0 $((FAKE_GPUS - 1))); do
    dev=/run/ringflow-slurm/gpus/nvidia$i
    [ -c "$dev" ] || mknod -m 666 "$dev" c 1 3
    gpus+=("$dev")
  done
fi
GPU_CONF="" NODE_GRES=""
: >/etc/slurm/gres.conf
if [ ${#gpus[@]} -gt 0 ]; then
  # sacct lists each job's GPUs (AllocTRES) only where accounting tracks them.
  GPU_CONF="GresTypes=gpu
AccountingStorageTRES=gres/gpu"
  NODE_GRES="Gres=gpu:${#gpus[@]}"
  for dev in "${gpus[@]}"; do echo "NodeName=${HOST} Name=gpu File=${dev}" >>/etc/slurm/gres.conf; done
fi

# MinJobAge keeps a finished job in squeue for a while (the plugin can poll either);
# KillWait is SLURM's grace between SIGTERM and SIGKILL; job comments are kept in sacct.
# A job in `urgent` preempts the `debug` jobs it needs room from: requeued where the job
# allows it (SLURM's default), cancelled as PREEMPTED where it does not (ringflow's jobs).
cat >/etc/slurm/slurm.conf <<EOC
ClusterName=local
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
PriorityType=priority/basic
ReturnToService=2
MinJobAge=300
KillWait=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
${GPU_CONF}
NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=${MEM} ${NODE_GRES} State=UNKNOWN
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
${RINGFLOW_SLURM_SCHEDULER_PARAMETERS:+SchedulerParameters=${RINGFLOW_SLURM_SCHEDULER_PARAMETERS}}
PartitionName=debug Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=${HOST} MaxTime=INFINITE State=UP PriorityTier=10
EOC
cat >/etc/slurm/cgroup.conf <<EOC
CgroupPlugin=cgroup/v1
CgroupAutomount=no
ConstrainCores=yes
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainDevices=no
EOC

running /run/slurm/slurmdbd.pid || /usr/sbin/slurmdbd
wait_for 30 sacctmgr -n list cluster
if running /run/slurm/slurmctld.pid; then
  scontrol reconfigure
else
  /usr/sbin/slurmctld # registers the cluster `local` in slurmdbd by itself
fi
running /run/slurm/slurmd.pid || /usr/sbin/slurmd
node_ready() { sinfo -h -N -o %t | grep -Eq '^(idle|mix|alloc)'; }
wait_for 60 node_ready
sacctmgr -i add account research Description=none Organization=none >/dev/null 2>&1 || true
sacctmgr -i add user root Account=research DefaultAccount=research >/dev/null 2>&1 || true
wait_for 30 sh -c "sacctmgr -n -P list assoc user=root format=account | grep -qx research"
sinfo -N -o '%N %P %c %m %G %t'
echo "slurm-up: SLURM is up in $(($(date +%s) - start)) s (stop it with scripts/slurm-down.sh)"
