"""The Ctrl-C relay finds the ring's executions by their jobs' command lines."""

from __future__ import annotations

import sys

from ringflow.workflow.relay import is_supervisor
from ringflow.workflow.resident_client import step_command

EXECUTION = ["runs/r1", "n001-a", "proxy", "s0", "--gpus", "0"]


def test_an_execution_is_found_by_the_command_its_rule_runs():
    assert is_supervisor([*step_command(sys.executable), "execute", *EXECUTION])


def test_an_execution_started_by_hand_as_a_module_is_found_too():
    assert is_supervisor([sys.executable, "-m", "ringflow", "step", "execute", *EXECUTION])


def test_other_steps_and_other_programs_are_not_executions():
    rule = step_command(sys.executable)
    assert not is_supervisor([*rule, "key-target", "runs/r1", "k"])
    assert not is_supervisor([sys.executable, "-m", "ringflow", "step", "summary", "runs/r1"])
    assert not is_supervisor([sys.executable, "-m", "other", "step", "execute", *EXECUTION])
    assert not is_supervisor([sys.executable, "-P", "/tmp/client.py", "step", "execute"])
    assert not is_supervisor(["sh", "-c", " ".join([*rule, "execute", *EXECUTION])])
    assert not is_supervisor([])


def test_a_resident_steps_title_is_found_as_the_step_it_runs():
    title = " ".join([sys.executable, "-m", "ringflow", "step", "execute", *EXECUTION])
    assert is_supervisor([title, "", "", ""])  # as psutil reads a title set in place
    assert not is_supervisor([title.replace("execute", "summary"), "", ""])
