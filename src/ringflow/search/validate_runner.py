"""Runs the task's public validator inside an engineer session (see public_validator.py).

    validate_runner.py FOLDER --pred DIR --inputs DIR

FOLDER holds the copy (`files/`) and its command (`command.json`). The paths given are made
absolute, then the validator runs from `files/` as it runs from the task folder in the
ring. Standard library only: it runs with the candidates' interpreter, without ringflow.
"""

from __future__ import annotations

import json
import os
import sys

PATH_FLAGS = ("--pred", "--inputs")
INTERPRETERS = ("python", "python3")


def absolute_args(args: list[str]) -> list[str]:
    """`--pred DIR`, `--pred=DIR` (and --inputs) with DIR made absolute; the rest as given."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg in PATH_FLAGS and i + 1 < len(out):
            out[i + 1] = os.path.abspath(out[i + 1])
        elif arg.split("=", 1)[0] in PATH_FLAGS and "=" in arg:
            flag, value = arg.split("=", 1)
            out[i] = f"{flag}={os.path.abspath(value)}"
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: validate_runner.py FOLDER --pred DIR --inputs DIR", file=sys.stderr)
        return 2
    folder, args = argv[0], absolute_args(argv[1:])
    with open(os.path.join(folder, "command.json")) as handle:
        command = list(json.load(handle)["argv"])
    if command[0] in INTERPRETERS:
        command[0] = sys.executable
    os.chdir(os.path.join(folder, "files"))
    os.execvp(command[0], [*command, *args])
    return 127  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
