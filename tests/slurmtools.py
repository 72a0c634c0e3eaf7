"""What Snakemake's own log says of a ring's SLURM jobs: when the driver noticed each one
end. Shared by the SLURM tests and bench/bench_slurm.py."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+)")
FINISHED = re.compile(r"Finished jobid: (\d+) ")


def noticed(log: Path) -> dict[str, float]:
    """SLURM job id -> when Snakemake's log says the job finished (whole seconds)."""
    when, slurm_of, seen = 0.0, {}, {}
    for line in log.read_text().splitlines():
        if m := STAMP.match(line.strip()):
            when = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y").timestamp()
        elif m := SUBMITTED.search(line):
            slurm_of[m.group(1)] = m.group(2)
        elif (m := FINISHED.search(line)) and m.group(1) in slurm_of:
            seen[slurm_of[m.group(1)]] = when
    return seen


def driver_log(workdir: Path, ring_id: str) -> Path | None:
    """The newest Snakemake log under `workdir` of a driver run for `ring_id` (its command
    line, near the top of the log, names the ring)."""
    logs = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"), reverse=True)
    for log in logs:
        with log.open(errors="replace") as head:
            if f"ring_id={ring_id} " in head.read(20_000):
                return log
    return None
