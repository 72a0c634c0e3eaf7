"""The `ringflow` command: what users type is listed first, and the steps the rules run
(`ringflow step …`) are parsed by a table of their own, without the user commands'
(docs/architecture.md#the-command)."""

from __future__ import annotations

import pytest

from ringflow import cli


def test_a_step_is_parsed_by_the_step_table_alone(monkeypatch):
    def refuse():
        raise AssertionError("a step built the whole command table")

    monkeypatch.setattr(cli, "build_parser", refuse)
    args = cli.parse(["step", "execute", "runs/r", "n001-a", "proxy", "s0", "--gpus", "1",
                      "--result", "r.json", "--score", "s.json"])  # fmt: skip
    assert (args.command, args.step, args.func) == ("step", "execute", cli.cmd_execute)
    assert (args.ring_dir, args.node, args.view, args.variant) == (
        "runs/r",
        "n001-a",
        "proxy",
        "s0",
    )
    assert args.gpus == 1 and args.result == "r.json"


def test_the_step_table_is_the_one_under_ringflow_step():
    whole = cli.build_parser()
    sub = next(a for a in whole._actions if a.dest == "command")
    nested = next(a for a in sub.choices["step"]._actions if a.dest == "step")
    alone = next(a for a in cli.step_parser()._actions if a.dest == "step")
    assert list(alone.choices) == list(nested.choices)


def test_a_named_step_builds_its_own_parser_and_parses_as_in_the_whole_table():
    alone = next(a for a in cli.step_parser("rank")._actions if a.dest == "step")
    assert list(alone.choices) == ["rank"]
    argv = ["step", "rank", "runs/r", "--out", "runs/r/selection/rank.json"]
    whole = cli.build_parser().parse_args(argv)
    assert vars(cli.parse(argv)) == {**vars(whole), "command": "step"}


def test_a_step_parser_for_no_step_lists_every_step():
    every = next(a for a in cli.step_parser()._actions if a.dest == "step")
    unknown = next(a for a in cli.step_parser("exeucte")._actions if a.dest == "step")
    assert list(unknown.choices) == list(every.choices) and "execute" in every.choices


def test_user_commands_come_first_and_the_steps_are_one_group(capsys):
    with pytest.raises(SystemExit):
        cli.parse(["--help"])
    listing = capsys.readouterr().out
    for command in ("check", "status", "report", "verify", "export", "store", "reserve"):
        assert f"    {command}" in listing
    assert listing.index("    status") < listing.index("    step")
    assert "    execute" not in listing


def test_an_unknown_step_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        cli.parse(["step", "exeucte", "runs/r"])
    assert "invalid choice: 'exeucte'" in capsys.readouterr().err


def test_health_digest_is_the_digest_under_its_contract_name():
    args = cli.parse(["health-digest", "runs/demo"])
    assert args.func is cli.cmd_digest and args.ring_dir == "runs/demo" and not args.send


def test_a_new_user_meets_check_first_and_the_rules_steps_last():
    whole = cli.build_parser()
    names = list(next(a for a in whole._actions if a.dest == "command").choices)
    assert names[0] == "check"
    assert names[-2:] == ["query-score", "step"]


def test_a_process_that_forks_steps_builds_their_parsers_once_beforehand():
    # The resident step server prepares them before its first fork: each fork parses with
    # the parser built there, and the same parser parses the next call as the first.
    cli.step_parser.cache_clear()
    cli.prepare_step_parsers()
    every = next(a for a in cli.step_parser()._actions if a.dest == "step")
    built = cli.step_parser.cache_info()
    assert built.currsize == len(every.choices) + 1  # each step's own, and the whole table
    argv = ["step", "execute", "runs/r", "n001-a", "proxy", "s0", "--result", "r.json",
            "--score", "s.json"]  # fmt: skip
    first, again = cli.parse(argv), cli.parse([*argv[:5], "s1", *argv[6:]])
    assert cli.step_parser.cache_info().currsize == built.currsize  # nothing built anew
    assert (first.variant, again.variant, again.gpus) == ("s0", "s1", 0)


def test_package_takes_its_folder_as_export_does():
    args = cli.parse(["package", "runs/r2", "r2-pkg"])
    assert (args.func, args.ring_dir, args.dest, args.out) == (cli.cmd_package, "runs/r2",
                                                              "r2-pkg", None)  # fmt: skip
    assert cli.parse(["package", "runs/r2", "--out", "r2-pkg"]).out == "r2-pkg"
    assert cli.parse(["export", "runs/r2", "r2-model"]).dest == "r2-model"


@pytest.mark.parametrize(
    "decision, said",
    [
        ("candidate", "the chosen candidate"),
        ("baseline", "the baseline, kept"),
        ("incumbent", "the chain's incumbent, kept"),
    ],
)
def test_export_and_package_say_what_final_holds_in_the_summarys_words(tmp_path, decision, said):
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "FINAL.json").write_text(f'{{"decision": "{decision}"}}')
    assert cli.final_role(tmp_path) == said
