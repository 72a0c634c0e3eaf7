"""What Snakemake's own log says of a ring's SLURM jobs: when the driver noticed each one
end. Shared by the SLURM tests and bench/bench_slurm.py."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+)")
FINISHED = re.compile(r"Finished jobid: (\d+) ")
COMPLETE_LOG = re.compile(r"Complete log\(s\): (\S+\.snakemake\.log)")


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


def driver_log(output: str) -> Path | None:
    """The Snakemake log a driver's output names at its end."""
    found = COMPLETE_LOG.findall(output)
    return Path(found[-1]) if found else None
