"""What the sandbox adds to starting a program: median over N starts, sandboxed vs bare.

    python bench/bench_sandbox.py [--starts 50]

The program is the candidates' interpreter running `pass`; the baseline is the same
command started bare, in the same run, interleaved. The mode is this process's own: as
root the program drops to uid 65534 in bubblewrap, as an ordinary user it runs in a user
namespace; run the script both ways to measure both. Target: at most 50 ms more.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import _ring  # noqa: E402
from ringflow import sandbox  # noqa: E402
from ringflow.sandbox.interpreter import describe_interpreter  # noqa: E402

NAME = "bench_sandbox"
TARGET_MS = 50.0


def timed(argv, **kwargs) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kwargs)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--starts", type=int, default=50)
    args = parser.parse_args()
    info = sandbox.require_sandbox({"mode": "auto", "uid": 65534, "gid": 65534})
    program_python = ROOT / ".venv-program" / "bin" / "python"
    program = describe_interpreter(program_python if program_python.exists() else sys.executable)
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        for name in ("solution", "inputs", "output"):
            (base / name).mkdir()
        os.chmod(base, 0o755)
        request = sandbox.SandboxRequest(
            solution_dir=base / "solution",
            input_dir=base / "inputs",
            output_dir=base / "output",
            progress_file=base / "solution" / "progress.json",
            environment_dirs=tuple(Path(d) for d in program["dirs"]),
            max_processes=4096,
            max_file_bytes=1 << 30,
        )
        command = [program["executable"], "-c", "pass"]
        bare, boxed = [], []
        for _ in range(args.starts):
            bare.append(timed(command, env={"PATH": "/usr/bin:/bin"}))
            plan = sandbox.plan(request, command, {"PATH": "/usr/bin:/bin"}, info)
            try:
                boxed.append(timed(plan.argv, env=plan.env, cwd=plan.cwd,
                                   pass_fds=(plan.status_fd,)))  # fmt: skip
                plan.confirm_started()
            finally:
                plan.finish()
    bare_ms = statistics.median(bare) * 1000
    boxed_ms = statistics.median(boxed) * 1000
    added = boxed_ms - bare_ms
    record = {
        "mode": info["mode"],
        "starts": args.starts,
        "bare_median_ms": round(bare_ms, 2),
        "sandboxed_median_ms": round(boxed_ms, 2),
        "added_ms": round(added, 2),
        "target_ms": TARGET_MS,
        "met": added <= TARGET_MS,
    }
    _ring.write_results(f"{NAME}-{info['mode']}", record)  # one file per mode
    print(
        f"sandbox start ({info['mode']} mode, median of {args.starts}): bare {bare_ms:.1f} ms, "
        f"sandboxed {boxed_ms:.1f} ms, added {added:.1f} ms (target <= {TARGET_MS:.0f} ms)"
    )
    return 0 if record["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
