#!/usr/bin/env bash
# Stop what scripts/slurm-up.sh started, in reverse order, each daemon by the PID in its PID
# file (a daemon deletes its file as it exits). Jobs still queued are cancelled first.
# Safe to run when nothing is running.
set -uo pipefail
if [ -s /run/slurm/slurmctld.pid ] && command -v scancel >/dev/null 2>&1; then
  scancel --user=root >/dev/null 2>&1 || true
fi
for f in /run/slurm/slurmd.pid /run/slurm/slurmctld.pid /run/slurm/slurmdbd.pid \
  /run/mysqld/mysqld.pid /run/munge/munged.pid; do
  [ -s "$f" ] || continue
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null || continue
  kill "$pid" && echo "slurm-down: stopped ${f##*/} (pid $pid)"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "slurm-down: ${f##*/} (pid $pid) did not stop in 10 s" >&2
  fi
done
exit 0
