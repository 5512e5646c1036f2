"""Config and stack files (issue 41, item 3): the real ``pulumi preview`` and the offline plan
give the same verdict on each shipped stack file and on a corpus of bad ones — both accept, or
both refuse naming the same key. A good stack file gets the real preview as far as the first
AWS resource, which needs the AWS provider plugin that cannot be built here: that is "accepted"
(the CLI's config checks and the program's validation both passed)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from offline import runner
from offline.plan import main as plan_main
from tests.config_corpus import (CORPUS, PROJECT_DIR, VIOLATION, Case, engine_verdict,
                                 shipped_stack_files)
from tests.real_pulumi import PulumiEngine, PulumiProject, pulumi_bindir  # noqa: F401


@pytest.fixture(scope="module")
def engine(pulumi_bindir, tmp_path_factory):  # noqa: F811
    with PulumiEngine(pulumi_bindir, tmp_path_factory.mktemp("engine"), deadline=120) as eng:
        yield eng


def _project(tmp: Path, case: Case) -> PulumiProject:
    project = PulumiProject.copy_of(PROJECT_DIR, tmp / "project")
    if case.project is not None:
        pulumi_yaml = project.path / "Pulumi.yaml"
        pulumi_yaml.write_text(case.project(pulumi_yaml.read_text()))
    return project


def _real(engine, project: PulumiProject, stack_name: str, case: Case) -> tuple:
    stack = engine.stack(project, stack_name)
    stack.write_stack_file(case.stack_text)
    if case.secrets:
        dev = (PROJECT_DIR / "Pulumi.yaml").read_text()
        value = re.search(rf"^  {case.secrets[0]}:\n(?:    .*\n)*?    default: (.*)$", dev, re.M)
        stack.set_config({f"eks-hybrid-lab:{k}": value.group(1) for k in case.secrets},
                         secret=tuple(f"eks-hybrid-lab:{k}" for k in case.secrets))
        case_text = stack.stack_file.read_text()
        assert "secure:" in case_text
    run = stack.preview()
    text = "\n".join([run.error, run.stdout, run.stderr, *run.diagnostics()])
    return engine_verdict(text, run.ok), text, stack.stack_file.read_text()


def _offline(project: PulumiProject, stack_file: Path, monkeypatch) -> tuple:
    """The offline plan's main() on ``stack_file``, with the (possibly varied) Pulumi.yaml of
    ``project``: its exit status and stderr give the verdict."""
    monkeypatch.setattr(runner, "PROJECT_DIR", project.path)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = plan_main(["--stack-file", str(stack_file)])
    text = err.getvalue()
    if code == 0:
        return ("accepted", None), text
    cli = re.search(r"configuration (?:key|values?) '(?:[\w-]+:)?(\w+)'", text)
    if cli:
        return ("refused by the CLI", cli.group(1)), text
    invalid = VIOLATION.search(text)
    if invalid:
        return ("refused by the program", invalid.group(1)), text
    return ("refused", None), text


def _check(engine, tmp_path, monkeypatch, case: Case, stack_name: str):
    project = _project(tmp_path, case)
    real, real_text, written = _real(engine, project, stack_name, case)
    # The offline plan reads the file the engine ran (its ciphertext, for a secret case);
    # a secret it cannot decrypt it refuses, so the secret cases give it a plain copy.
    offline_file = tmp_path / f"Pulumi.{stack_name}.yaml"
    offline_file.write_text(case.stack_text if case.secrets else written)
    offline, offline_text = _offline(project, offline_file, monkeypatch)
    expected = (("accepted", None) if not case.refused else ("refused", None)
                if case.refused == "a YAML error" else (f"refused by {case.refused}",
                                                        case.refused_key))
    assert real == expected, f"real preview: {real}\n{real_text[-2000:]}"
    assert offline == real, f"offline {offline} vs real {real}\n{offline_text[-1500:]}"


@pytest.mark.parametrize("stack_file", shipped_stack_files(), ids=lambda p: p.name)
def test_shipped_stack_file_accepted_by_both(engine, tmp_path, monkeypatch, stack_file):
    name = re.fullmatch(r"Pulumi\.(.+)\.yaml", stack_file.name).group(1)
    case = Case(stack_file.name, stack_file.read_text(), None, refused="")
    _check(engine, tmp_path, monkeypatch, case, name)


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_corpus_verdicts_agree(engine, tmp_path, monkeypatch, case):
    _check(engine, tmp_path, monkeypatch, case, case.name)
