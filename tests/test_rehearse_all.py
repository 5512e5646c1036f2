"""`python -m rehearse all`: the runbook's order (the read-only checks, then what changes the
lab once confirmed), demo 3 only with a GPU host, stopping at the first failure unless
--keep-going, Ctrl-C keeping every finished run, and the summary page at the end. The
per-command runner is a recording stand-in that writes each run's report as a real run would."""

from __future__ import annotations

import argparse
import datetime
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Optional

import pytest

from rehearse import cli
from rehearse.run import execute as run_execute
from rehearse.pages import all as rehearsal
from rehearse.run import record
from rehearse.run.errors import RunError
from rehearse.run.report import FAIL, NOT_READ, PASS, Check, Report

NOW = datetime.datetime(2026, 12, 1, 18, 0, tzinfo=datetime.timezone.utc)
XHTML = "{http://www.w3.org/1999/xhtml}"
#: The demo guide's order (docs/demo-guide.md#the-runbook), read-only checks first.
READ_ONLY = ["preflight", "verify gateway", "verify burst", "verify gpu"]
CHANGING = ["failover", "burst"]


class StandIn:
    """Runs nothing: records each command and its parsed options and writes a report into a
    run folder, as rehearse.cli.execute would. ``outcomes`` maps a command to its exit code,
    "interrupted", KeyboardInterrupt or an exception to raise."""

    def __init__(self, outcomes: Optional[dict] = None):
        self.outcomes = outcomes or {}
        self.calls: list[tuple[str, argparse.Namespace]] = []

    def __call__(self, command: str, args: argparse.Namespace) -> run_execute.RunResult:
        self.calls.append((command, args))
        outcome = self.outcomes.get(command, 0)
        if isinstance(outcome, BaseException) or (isinstance(outcome, type) and
                                                   issubclass(outcome, BaseException)):
            raise outcome
        started = NOW - datetime.timedelta(minutes=30 - len(self.calls))
        folder = record.folder_for(args.out, "lab", command, started)
        folder.mkdir(parents=True)
        failed = outcome != 0
        checks = [Check("a check", FAIL if failed else PASS, "seen", "the fix")]
        if outcome == 2:  # failed part-way: the report's first check says so (rehearse.run.outcome)
            checks.insert(0, Check("run completed", FAIL, "failed at 17:40: the cluster went away"))
        Report(command, "lab", record.iso(started), f"{command} run", checks).write(folder)
        return run_execute.RunResult(1 if outcome == "interrupted" else outcome, folder,
                             interrupted=outcome == "interrupted")

    @property
    def commands(self) -> list[str]:
        return [c for c, _ in self.calls]


def outputs_file(tmp_path: Path, gpu: bool = True) -> Path:
    values = {"region": "ap-northeast-2", "layers": ["network", "cluster", "demo"]}
    if gpu:
        values["demo3"] = {"namespace": "demo-gpu"}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(values))
    return path


def run_all(tmp_path: Path, *extra: str, runner: StandIn, gpu: bool = True,
            confirm=lambda question: True, interactive=lambda: True) -> int:
    argv = ["all", "--outputs", str(outputs_file(tmp_path, gpu)), "--stack", "lab",
            "--out", str(tmp_path / "rehearsals"), *extra]
    args = cli.build_parser().parse_args(argv)
    return rehearsal.main(args, runner=runner, read_outputs=run_execute._outputs,
                          parse=cli.build_parser().parse_args, as_run_error=run_execute._as_run_error,
                          clock=lambda: NOW, confirm=confirm, interactive=interactive)


def rehearsal_table(tmp_path: Path) -> dict[str, tuple[str, str]]:
    page = ET.fromstring((tmp_path / "rehearsals" / "lab-summary.html").read_text())
    return {tr.get("data-step"): tuple("".join(td.itertext()) for td in tr.findall(f"{XHTML}td")[1:])
            for tr in page.iter(f"{XHTML}tr") if tr.get("data-step")}


def test_the_checks_run_first_then_failover_and_burst_and_the_summary_ends_it(tmp_path, capsys):
    runner = StandIn()
    assert run_all(tmp_path, "--yes", "--scenarios", "A", "B", runner=runner) == 0
    assert runner.commands == READ_ONLY + CHANGING
    for command, args in runner.calls:
        # Each step is the command's own options, this run's stack, outputs and folder.
        assert (args.stack, args.out) == ("lab", tmp_path / "rehearsals")
        assert args.outputs == tmp_path / "outputs.json"
        assert (f"verify {args.target}" if args.command == "verify" else args.command) == command
    burst = dict(runner.calls)["burst"]
    assert burst.scenarios == ["A", "B"] and burst.yes is True
    table = rehearsal_table(tmp_path)
    assert list(table) == READ_ONLY + CHANGING and {s for s, _ in table.values()} == {"PASS"}
    md = (tmp_path / "rehearsals" / "lab-summary.md").read_text()
    assert "## This rehearsal" in md and "| `failover` | PASS |" in md
    assert "summary: " in capsys.readouterr().out


def test_demo_3_is_skipped_without_a_gpu_host_and_the_summary_says_why(tmp_path):
    runner = StandIn()
    assert run_all(tmp_path, "--yes", runner=runner, gpu=False) == 0
    assert runner.commands == ["preflight", "verify gateway", "verify burst"] + CHANGING
    state, detail = rehearsal_table(tmp_path)["verify gpu"]
    assert state == "SKIPPED" and "no GPU host (no output demo3)" in detail
    md = (tmp_path / "rehearsals" / "lab-summary.md").read_text()
    assert "`verify gpu`: no run of this stack (skipped this time: the stack lab has no GPU host" in md


def test_the_lab_changes_only_after_one_question_once_the_checks_are_done(tmp_path):
    runner = StandIn()
    asked: list[tuple[str, list[str]]] = []

    def confirm(question):
        asked.append((question, list(runner.commands)))
        return False

    assert run_all(tmp_path, runner=runner, confirm=confirm) == 0
    [(question, done)] = asked
    assert done == READ_ONLY and "deletes the gateway leader's pod" in question
    assert runner.commands == READ_ONLY
    table = rehearsal_table(tmp_path)
    assert table["failover"][0] == table["burst"][0] == "SKIPPED"
    assert "not confirmed" in table["burst"][1]
    # Confirmed: both run, and burst asks for each switch itself (no --yes passed on).
    runner, asked = StandIn(), []
    assert run_all(tmp_path / "again", runner=runner, confirm=lambda q: asked.append(q) or True) == 0
    assert runner.commands == READ_ONLY + CHANGING and len(asked) == 1
    assert dict(runner.calls)["burst"].yes is False


def test_without_a_terminal_or_yes_it_refuses_before_running_anything(tmp_path, capsys):
    runner = StandIn()
    with pytest.raises(RunError, match="stdin is not a terminal.*--yes.*--read-only"):
        run_all(tmp_path, runner=runner, interactive=lambda: False)
    assert runner.calls == []
    # Through the CLI (pytest's stdin is no terminal): one line, exit 2.
    (tmp_path / "cli").mkdir()
    argv = ["all", "--outputs", str(outputs_file(tmp_path / "cli")), "--out", str(tmp_path / "cli")]
    assert cli.main(argv) == 2 and "stdin is not a terminal" in capsys.readouterr().err
    # The checks alone need no one to answer.
    assert run_all(tmp_path, "--read-only", runner=runner, interactive=lambda: False) == 0
    assert runner.commands == READ_ONLY


def test_it_stops_at_the_first_failure_unless_keep_going(tmp_path):
    runner = StandIn({"verify gateway": 1})
    assert run_all(tmp_path, "--yes", runner=runner) == 1
    assert runner.commands == ["preflight", "verify gateway"]
    table = rehearsal_table(tmp_path)
    assert table["verify gateway"][0] == "FAIL"
    assert {table[c][0] for c in ["verify burst", "verify gpu"] + CHANGING} == {"NOT RUN"}
    assert "stopped after verify gateway did not pass" in table["failover"][1]
    runner = StandIn({"verify gateway": 1, "verify burst": RunError("no demo layer"), "burst": 2})
    assert run_all(tmp_path / "again", "--yes", "--keep-going", runner=runner) == 1
    assert runner.commands == READ_ONLY + CHANGING
    table = rehearsal_table(tmp_path / "again")
    assert table["verify burst"] == ("COULD NOT RUN", "no demo layer")
    state, detail = table["burst"]
    assert state == "COULD NOT RUN" and detail.startswith("failed at 17:40: the cluster went away: ")


def test_ctrl_c_while_writing_the_summary_says_how_to_write_it(tmp_path, capsys):
    def clock():
        raise KeyboardInterrupt

    args = cli.build_parser().parse_args(["all", "--outputs", str(outputs_file(tmp_path)), "--stack",
                                          "lab", "--out", str(tmp_path / "r"), "--yes"])
    runner = StandIn()
    assert rehearsal.main(args, runner=runner, read_outputs=run_execute._outputs,
                          parse=cli.build_parser().parse_args, as_run_error=run_execute._as_run_error,
                          clock=clock) == 1
    assert runner.commands == READ_ONLY + CHANGING
    assert f"python -m rehearse summary --stack lab --out {tmp_path / 'r'}" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["during a run", "before a run's folder", "at the question"])
def test_ctrl_c_ends_the_rehearsal_keeping_the_finished_runs_and_the_summary(tmp_path, how):
    outcomes = {"during a run": {"failover": "interrupted"},
                "before a run's folder": {"failover": KeyboardInterrupt}}.get(how, {})
    runner = StandIn(outcomes)

    def confirm(question):
        if how == "at the question":
            raise KeyboardInterrupt
        return True

    assert run_all(tmp_path, "--keep-going", runner=runner, confirm=confirm) == 1
    ran = READ_ONLY + ([] if how == "at the question" else ["failover"])
    assert runner.commands == ran, "--keep-going does not run on after Ctrl-C"
    table = rehearsal_table(tmp_path)
    assert table["burst"][0] == "NOT RUN" and "interrupted" in table["burst"][1]
    assert {table[c][0] for c in READ_ONLY} == {"PASS"}
    if how != "at the question":
        assert table["failover"][0] == "INTERRUPTED"
    md = (tmp_path / "rehearsals" / "lab-summary.md").read_text()
    for command in READ_ONLY:  # every finished run is on the page, with its folder
        assert f"### `python -m rehearse {command}`: PASS" in md
    folders = sorted(p.name for p in (tmp_path / "rehearsals").iterdir() if p.is_dir())
    assert len(folders) == len(ran) - (how == "before a run's folder")


def test_every_step_parses_as_its_command_with_the_rehearsals_options(tmp_path):
    # The real parser takes what `all` passes each command (no stand-in between).
    args = cli.build_parser().parse_args(
        ["all", "--stack", "lab", "--outputs", "o.json", "--work-dir", str(tmp_path),
         "--kubeconfig", "k", "--out", "r", "--yes", "--scenarios", "B", "C"])
    for command in rehearsal.READ_ONLY + rehearsal.CHANGING:
        step = cli.build_parser().parse_args(rehearsal._argv(command, args))
        assert (step.stack, str(step.outputs), step.work_dir, str(step.kubeconfig), str(step.out)) == \
            ("lab", "o.json", tmp_path, "k", "r")
        assert (f"verify {step.target}" if step.command == "verify" else step.command) == command
    assert cli.build_parser().parse_args(rehearsal._argv("burst", args)).scenarios == ["B", "C"]


def test_a_bad_scenario_stops_the_rehearsal_before_any_step(tmp_path, capsys):
    runner = StandIn()
    with pytest.raises(SystemExit):
        run_all(tmp_path, "--yes", "--scenarios", "Z", runner=runner)
    assert runner.calls == [] and "a scenario is A, B or C" in capsys.readouterr().err


def test_a_defect_in_a_step_still_writes_the_summary_then_raises(tmp_path):
    runner = StandIn({"verify burst": ZeroDivisionError("boom")})
    with pytest.raises(ZeroDivisionError):
        run_all(tmp_path, "--yes", "--keep-going", runner=runner)
    table = rehearsal_table(tmp_path)
    assert table["verify burst"] == ("COULD NOT RUN", "a defect: ZeroDivisionError: boom")
    assert table["verify gpu"][0] == "NOT RUN"


# --- the pre-check as a run -------------------------------------------------------------------

def test_the_pre_check_records_ops_preflights_checks_as_a_run(tmp_path, monkeypatch):
    from ops.preflight import checks as preflight_checks, sequence
    from components.aws_account import AwsAccount
    from rehearse.run import outcome
    from rehearse.commands.preflight import collect as precheck
    from rehearse.commands.preflight import analyse as precheck_analysis
    from rehearse.run.context import Context
    from rehearse.lab.outputs import StackOutputs
    from tests.conftest import PROJECT_DIR

    seen = {}

    def run_preflight(session, needs, account, activation):
        seen["region"], seen["cluster"] = session.region_name, needs.cluster_name
        seen["account"], seen["activation"] = account, activation
        return [preflight_checks.Check("credentials", "PASS", "arn:aws:iam::111122223333:user/me"),
                preflight_checks.Check("quotas", "WARN", "4 vCPUs of headroom", "ask for more"),
                preflight_checks.Check("region", "FAIL", "opt-in region", "enable it"),
                preflight_checks.Check("instance types", "SKIP", "see region")]

    monkeypatch.setattr(sequence, "run_preflight", run_preflight)
    # The stack file is read from --work-dir: the dev file, under another stack's name.
    work = tmp_path / "project"
    work.mkdir()
    (work / "Pulumi.stage.yaml").write_text((PROJECT_DIR / "Pulumi.dev.yaml").read_text())
    ctx = Context(outputs=StackOutputs("stage", {}), kube=None, region="ap-northeast-2",
                  aws=None, progress=lambda message: None, work_dir=work)
    recorder = record.Recorder(tmp_path / "run", clock=lambda: NOW)
    recorder(record.RUN_STARTED, command="preflight", stack="stage")
    precheck.collect(ctx, recorder)
    recorder.close()
    # The dev stack file's region and cluster (Pulumi.dev.yaml).
    assert seen["region"] == "ap-northeast-2" and seen["cluster"]
    # The stack's account settings, for the account check (the dev stack has none).
    assert seen["account"] == AwsAccount()
    # And its activation, as python -m ops.preflight checks it (ops/preflight/activation.py).
    assert seen["activation"].name == "hybrid-lab-stage-hybrid-nodes" and seen["activation"].limit == 6
    report = outcome.analyse_run(precheck_analysis.analyse, record.read_events(tmp_path / "run"))
    assert [(c.name, c.status) for c in report.checks] == [
        ("credentials", PASS), ("quotas", "WARN"), ("region", FAIL), ("instance types", "SKIP")]
    # A warning is its own verdict: what was seen, and its fix, each said once.
    assert (report.checks[1].seen, report.checks[1].fix) == ("4 vCPUs of headroom", "ask for more")
    assert report.checks[2].fix == "enable it" and not report.passed
    assert report.checks[0].command == "python -m ops.preflight --stack stage"
    # A stack with no stack file cannot be pre-checked: one line saying so.
    ctx.outputs = StackOutputs("nosuchstack", {})
    with pytest.raises(RunError, match="the pre-check reads the stack file: no stack file"):
        precheck.collect(ctx, recorder)
    # Nothing recorded: the pre-check's checks were not read, which is no verdict on the account.
    assert precheck_analysis.analyse([]).checks[0].status == NOT_READ
    # Outputs from a file (--outputs without --stack) are named after the file, not a stack.
    ctx.outputs = StackOutputs("lab-outputs", {}, named=False)
    with pytest.raises(RunError, match="pass --stack NAME with --outputs"):
        precheck.collect(ctx, recorder)
