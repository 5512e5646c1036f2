"""A setting's value is shown as the user wrote it: ``20`` and ``"20"`` are different text in a
stack file (Pulumi accepts both for an integer and hands the program the same string), and a
value of the wrong YAML type is named with its type and what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline import plan as offline_plan
from ops.leftovers import cli as leftovers_cli
from ops.preflight import cli as preflight_cli
from stacks import config as config_module
from tests.conftest import PROJECT_DIR, main_in_process

DEV = (PROJECT_DIR / "Pulumi.dev.yaml").read_text()


def _stack_file(tmp_path: Path, line: str, instead: str) -> Path:
    """The dev stack file with one line's text replaced, so the YAML is exactly as written."""
    assert line in DEV
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(DEV.replace(line, instead))
    return path


@pytest.mark.parametrize("written", ['"20"', "20", "'20'"])
def test_the_plan_shows_an_out_of_range_count_as_the_file_writes_it(tmp_path, capsys, monkeypatch,
                                                                    written):
    path = _stack_file(tmp_path, "hybridNodeCount: 2\n", f"hybridNodeCount: {written}\n")
    done = main_in_process(capsys, monkeypatch, "offline.plan", offline_plan.main,
                           "--stack-file", str(path))
    assert done.returncode == 1
    # Pulumi.yaml's description of the setting: "(1 to 10)".
    assert f"  - hybridNodeCount = {written}: must be from 1 to 10" in done.stderr.splitlines()


def test_preflight_and_the_leftovers_audit_show_it_as_written_too(tmp_path, capsys):
    path = _stack_file(tmp_path, "hybridNodeCount: 2\n", 'hybridNodeCount: "20"\n')
    code = preflight_cli.main(["--stack-file", str(path)], session=object(),
                              which=lambda _: None, run=None)
    assert code == 2
    assert '  - hybridNodeCount = "20": must be from 1 to 10' in capsys.readouterr().err.splitlines()
    assert leftovers_cli.main(["--stack-file", str(path)], session=object()) == 2
    assert '  - hybridNodeCount = "20": must be from 1 to 10' in capsys.readouterr().err.splitlines()


def test_a_number_handed_over_as_text_is_shown_as_a_number():
    """Under `pulumi up` the program gets only text: a count is shown as the number it reads as,
    not as a quoted string."""
    with pytest.raises(config_module.ConfigError) as caught:
        config_module.load_config({"hybridNodeCount": "20", "burstReplicas": "99"},
                                  stack="dev", region="ap-northeast-2")
    shown = [str(v) for v in caught.value.violations]
    assert "hybridNodeCount = 20: must be from 1 to 10" in shown
    assert "burstReplicas = 99: must be from 0 to 50" in shown


@pytest.mark.parametrize("line,instead,message", [
    ("hybridNodeCount: 2\n", 'hybridNodeCount: "two"\n',
     'hybridNodeCount: "two" is a string; write a whole number such as 2'),
    ("hybridNodeCount: 2\n", "hybridNodeCount: 2.5\n",
     "hybridNodeCount: 2.5 is a number; write a whole number such as 2"),
    ("gpuEnabled: false\n", 'gpuEnabled: "yes"\n',
     'gpuEnabled: "yes" is a string; write true or false'),
    ("adminCidrs: []\n", "adminCidrs: 10.0.0.0/8\n",
     "adminCidrs: 10.0.0.0/8 is a string; write a list such as []"),
])
def test_a_value_of_the_wrong_type_names_its_yaml_type(tmp_path, capsys, monkeypatch, line,
                                                       instead, message):
    path = _stack_file(tmp_path, line, instead)
    done = main_in_process(capsys, monkeypatch, "offline.plan", offline_plan.main,
                           "--stack-file", str(path))
    [error] = done.stderr.strip().splitlines()
    # The Pulumi CLI's own refusal first (it names the key and the type, not the value).
    assert "the Pulumi CLI would refuse this stack: Stack 'dev' with configuration key" in error
    assert error.endswith(f"({message})"), error
