"""A mistyped command line is answered by the command the user typed, in one line: the one
option or command they meant, exit 2, before anything is read."""

from __future__ import annotations

import pytest

from rehearse import cli


def _error(capsys, *argv: str) -> list[str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        cli.main(list(argv))
    assert exited.value.code == 2, argv
    return capsys.readouterr().err.strip().splitlines()


def test_an_unknown_option_names_the_option_meant_under_the_commands_own_usage(capsys):
    lines = _error(capsys, "burst", "--scenario", "Z")
    assert lines == ["python -m rehearse burst: error: no option --scenario; "
                     "did you mean --scenarios?"], lines


def test_a_nested_commands_unknown_option_is_answered_by_that_command(capsys):
    lines = _error(capsys, "verify", "gateway", "--outptus=stack.json")
    assert len(lines) == 1, lines
    assert lines[-1] == ("python -m rehearse verify gateway: error: no option --outptus; "
                         "did you mean --outputs?")


def test_an_unknown_option_is_named_before_a_missing_required_one(capsys):
    # predict requires --replicas: argparse checks that before it returns the unknown options,
    # so a user who typed --out (meaning --outputs) was told only that --replicas is missing.
    lines = _error(capsys, "predict", "--out", "x.json")
    assert lines == ["python -m rehearse predict: error: no option --out; did you mean --outputs?"]
    # With nothing mistyped, the missing option is still argparse's own error.
    lines = _error(capsys, "predict")
    assert lines == ["python -m rehearse predict: error: the following arguments are required: "
                     "--replicas (see python -m rehearse predict --help)"]


def test_an_option_like_none_says_where_the_options_are(capsys):
    lines = _error(capsys, "failover", "--zzzzzz")
    assert len(lines) == 1, lines
    assert lines[-1] == "python -m rehearse failover: error: no option --zzzzzz; --help lists its options"


def test_a_misspelt_command_suggests_the_command(capsys):
    lines = _error(capsys, "failvoer")
    assert lines[-1] == "python -m rehearse: error: no command 'failvoer'; did you mean failover?"


def test_a_misspelt_demo_suggests_the_demo(capsys):
    lines = _error(capsys, "verify", "gatway")
    assert lines[-1] == "python -m rehearse verify: error: no demo 'gatway'; did you mean gateway?"


def test_a_command_like_none_lists_the_commands(capsys):
    lines = _error(capsys, "zzzz")
    assert lines[-1].startswith("python -m rehearse: error: no command 'zzzz'; the commands: verify, ")
