"""The error line above Snakemake's log (`ringflow: the error: …`): taken from a real
Snakemake log, it names what stopped the ring, not the RuleException or the traceback
Snakemake wraps around it, and it is the first line of what ringflow says at the end."""

from __future__ import annotations

import json

from ringflow.reporting.digest import key_error_line
from ringflow.reporting.progress import ring_end

HEADER = """\
Config file /root/.cache/snakemake/snakemake/source-cache/snakemake-runtime-cache/tmpq8/file/work/main/config/config.yaml is extended by additional config specified via the command line.
Assuming unrestricted shared filesystem usage.

SNAKEMAKE
=========
  Date: 2026-12-03 11:52:31
  Snakemake version: 9.27.1
  Command: /work/main/.venv/bin/snakemake -s /work/main/Snakefile --directory /tmp/w --profile /work/main/profiles/local --cores 2 --configfile /tmp/w/ed-config.yaml
  Working directory: /tmp/w

Building DAG of jobs...
"""  # noqa: E501

# A job whose step stopped the ring: Snakemake's RuleException first, ringflow's line inside
# the job's log that Snakemake copies below it.
SCORER_STOP = (
    HEADER
    + """\
Using shell: /usr/bin/bash
Provided cores: 2
Select jobs to execute...
Execute 2 jobs...
[Thu Dec  3 11:52:36 2026]
localrule execute:
    output: runs/ed/nodes/n000-base/exec/proxy/s0/result.json, runs/ed/nodes/n000-base/exec/proxy/s0/score.json
    log: runs/ed/logs/execute/n000-base.proxy.s0.log
    jobid: 28
Select jobs to execute...
RuleException:
CalledProcessError in file "/work/main/rules/execute.smk", line 30:
Command 'set -euo pipefail;  /work/main/.venv/bin/python -m ringflow step execute runs/ed n000-base proxy s0 --gpus 0 > runs/ed/logs/execute/n000-base.proxy.s0.log 2>&1' returned non-zero exit status 2.
[Thu Dec  3 11:52:38 2026]
Error in rule execute:
    message: None
    jobid: 28
    log: runs/ed/logs/execute/n000-base.proxy.s0.log (check log file(s) for error details)
    shell:
        /work/main/.venv/bin/python -m ringflow step execute runs/ed n000-base proxy s0 --gpus 0
        (command exited with non-zero exit code)
Logfile runs/ed/logs/execute/n000-base.proxy.s0.log:
================================================================================
{"status": "ok", "budget_cut": false, "weights_mode": "none", "reason": "exited with code 0"}
ringflow: error: the ring stopped: the task's scorer failed on the baseline's output (scorer failed: the scorer is broken)
================================================================================
Removing output files of failed job execute since they might be corrupted:
runs/ed/nodes/n000-base/exec/proxy/s0/result.json, runs/ed/nodes/n000-base/exec/proxy/s0/score.json
Shutting down, this might take some time.
Exiting because a job execution failed. Look above for error messages
Complete log(s): /tmp/w/.snakemake/log/2026-12-03T115231.366593.snakemake.log
"""  # noqa: E501
)
SCORER_CAUSE = (
    "the ring stopped: the task's scorer failed on the baseline's output "
    "(scorer failed: the scorer is broken)"
)

# An input function's refusal: Snakemake's InputFunctionException with the traceback; what
# changed is on the line after the refusal's first.
LOCKED_EDIT = (
    HEADER
    + """\
InputFunctionException in rule decide in file "/work/main/rules/final.smk", line 73:
Error:
  InputError: ring runs/ed is locked, and what it was given has changed since:
  /tmp/w/task: task.yaml, the scorer, the validator or a file beside them was edited after the ring was locked
The ring would ignore edited candidates and use an edited task unnoticed. Undo the edits to resume this ring, or, to run them in a new ring that continues this one (its results taken, its weights replayed), run:
    /work/main/.venv/bin/snakemake -s /work/main/Snakefile --directory /tmp/w --profile /work/main/profiles/local --cores 2 --configfile /tmp/w/ed-config.yaml --config ring_id=ed-2 continue_from=runs/ed
Wildcards:

Traceback:
  File "/work/main/src/ringflow/workflow/dag.py", line 410, in decision_inputs
  File "/work/main/src/ringflow/workflow/hooks.py", line 83, in refuse_locked
  File "/work/main/src/ringflow/ring/edits.py", line 132, in refuse_edits (rule decide, line 161, /work/main/rules/final.smk)
"""  # noqa: E501
)

SNAKEMAKE_WORDS = ("RuleException", "CalledProcessError", "InputFunctionException",
                   "Traceback", "Command '", "Error in rule")  # fmt: skip


def _log(tmp_path, text: str):
    path = tmp_path / "2026-12-03T115231.366593.snakemake.log"
    path.write_text(text)
    return path


def test_a_stopped_job_gives_ringflow_s_reason_not_snakemake_s_rule_exception(tmp_path):
    line = key_error_line(_log(tmp_path, SCORER_STOP))
    assert line == SCORER_CAUSE
    assert not any(word in line for word in SNAKEMAKE_WORDS), line


def test_a_refusal_inside_a_traceback_names_what_changed(tmp_path):
    line = key_error_line(_log(tmp_path, LOCKED_EDIT))
    assert line.startswith("ring runs/ed is locked, and what it was given has changed since:")
    # The cause itself is on the refusal's next line: the line shown carries it.
    assert "task.yaml, the scorer, the validator or a file beside them was edited" in line
    assert not any(word in line for word in SNAKEMAKE_WORDS), line


def test_a_log_without_ringflow_s_own_error_gives_nothing(tmp_path):
    text = SCORER_STOP.replace("ringflow: error: ", "").replace("-m ringflow step", "-m x step")
    assert key_error_line(_log(tmp_path, text)) == ""
    assert key_error_line(tmp_path / "missing.log") == ""


def test_the_error_is_the_first_thing_ringflow_says_after_a_failure(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RINGFLOW_COMMAND", "snakemake --profile profiles/local")
    ring = tmp_path / "runs" / "ed"
    ring.mkdir(parents=True)
    (ring / "RING.json").write_text("{}")
    # A job failed: its error, then the command that continues the ring.
    ring_end(ring, str(_log(tmp_path, SCORER_STOP)), completed=False)
    said = capsys.readouterr().err.splitlines()
    assert said[0] == f"ringflow: the error: {SCORER_CAUSE}", said
    assert said[1].startswith(f"ringflow: the ring {ring} did not finish"), said
    # After a kill -9 the same command with --unlock comes first: printed whole, to type.
    assert said[3].startswith("  After a kill -9, Snakemake's lock stays") and said[4].endswith(
        " --unlock"
    ), said
    assert said[4].strip().removesuffix(" --unlock") == said[2].strip()
    # The ring stopped: why it stopped is the error, said once.
    (ring / "STOPPED.json").write_text(json.dumps({"cause": "task", "reason": SCORER_CAUSE[18:]}))
    ring_end(ring, str(_log(tmp_path, SCORER_STOP)), completed=False)
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith(f"ringflow: the ring {ring} stopped: the task's scorer failed")
    assert not [line for line in said if line.startswith("ringflow: the error: ")], said
    assert not any(word in "\n".join(said) for word in SNAKEMAKE_WORDS), said
