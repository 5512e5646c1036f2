"""`python -m rehearse preflight`, the pre-check kept as a run: the recording of a healthy one
(tests/fixtures/rehearse/preflight-healthy), replayed through rehearse.commands.preflight.analyse.

The recording is the real collector (rehearse.commands.preflight.collect, ops.preflight's real checks)
for the repo's Pulumi.dev.yaml against an in-process moto: EC2, STS, IAM, EKS, Logs and SQS
answer from moto's account, as tests/test_preflight.py has it (an account that has run spot
before); Service Quotas, whose EC2 quotas moto does not implement, answers from botocore's
Stubber with that module's roomy quotas; the aws and pulumi CLIs are that module's fakes.
``RECORD_PREFLIGHT=1 pytest -n 0 tests/test_rehearse_precheck.py -k record`` records it again,
as the stack and at the start tests/rehearsal_evening.py gives.

The replay tests take every figure from the recording's own events: what a check saw is what
ops.preflight recorded, never a copy of a report."""

from __future__ import annotations

import datetime
import functools
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from rehearse.run import outcome
from rehearse.commands.preflight import collect as precheck
from rehearse.commands.preflight import analyse as precheck_analysis
from rehearse.run import record
from rehearse.run.report import FAIL, NOT_READ, PASS
from tests import rehearsal_evening

FIXTURES = Path(__file__).parent / "fixtures" / "rehearse"
RECORDING = FIXTURES / "preflight-healthy"
PROJECT_DIR = Path(__file__).resolve().parents[1]
#: The moto account's spot service-linked role, planted as tests/test_preflight.py plants it.
SPOT_TRUST = ('{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": '
              '{"Service": "spot.amazonaws.com"}, "Action": "sts:AssumeRole"}]}')


def events() -> list[dict]:
    return record.read_events(RECORDING)


def checks_recorded() -> list[dict]:
    return list(record.every(events(), precheck.CHECKED))


# --- the recorder --------------------------------------------------------------------------------

def simulated_clock(start: datetime.datetime) -> Callable[[], datetime.datetime]:
    """This machine's elapsed time, from ``start``: the first reading is ``start`` itself."""
    origin: list[float] = []

    def clock() -> datetime.datetime:
        if not origin:
            origin.append(time.monotonic())
        return start + datetime.timedelta(seconds=round(time.monotonic() - origin[0], 3))

    return clock


class _QuotasFromStubber:
    """The collector's boto3 session, but its Service Quotas client is one a Stubber sits on
    (moto answers no EC2 quota): every other service is the session's own, so moto's."""

    def __init__(self, session: Any):
        self._session = session
        self.region_name = session.region_name
        self._quotas = None

    def stubbed(self, service_name: str, region_name: str):
        from botocore.stub import Stubber

        assert service_name == "service-quotas"
        self._quotas = self._session.client(service_name, region_name=region_name)
        return Stubber(self._quotas)

    def client(self, service_name: str, region_name=None, config=None):
        if service_name == "service-quotas":
            assert self._quotas is not None and region_name in (None, self.region_name)
            return self._quotas
        return self._session.client(service_name, region_name=region_name, config=config)


def record_preflight(folder: Path, stack: str = rehearsal_evening.STACK,
                     started: datetime.datetime = rehearsal_evening.STARTED["preflight-healthy"]
                     ) -> list[dict]:
    """A `rehearse preflight` run of ``stack`` (the repo's ``Pulumi.<stack>.yaml``) into
    ``folder``, as rehearse.cli.execute runs one, on a clock that starts at ``started``."""
    import boto3
    from moto import mock_aws

    from components.aws_account import AwsAccount
    from ops.preflight import checks as preflight_checks, sequence
    from ops.preflight.checks import SPOT_ROLE
    from rehearse.run.context import Context
    from rehearse.lab.outputs import StackOutputs
    from tests.fake_ssm_activations import install_in_moto
    from tests.test_preflight import ROOMY, fake_tools, stub_quotas

    clock = simulated_clock(started)
    made: list[_QuotasFromStubber] = []
    boto3_session = AwsAccount.boto3_session
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
            patch.delenv(name, raising=False)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
        patch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")

        def session_with_stubbed_quotas(account, region, *, check_account=True):
            session = _QuotasFromStubber(boto3_session(account, region,
                                                       check_account=check_account))
            made.append(session)
            # Answered in the order the pre-check asks, as tests/test_preflight.py queues them.
            made.append(stub_quotas(session, region, ROOMY))
            return session

        patch.setattr(AwsAccount, "boto3_session", session_with_stubbed_quotas)
        # moto has no SSM activations: the stand-in answers, with none made yet (before the
        # first pulumi up).
        install_in_moto(patch)
        # The CLIs and the date the checks see: the fake tools, and the run's own clock.
        which, run = fake_tools()
        patch.setattr(sequence, "run_preflight", functools.partial(
            sequence.run_preflight, which=which, run=run, now=clock))
        with mock_aws():
            boto3.client("iam", region_name="us-east-1").create_role(
                RoleName=SPOT_ROLE, Path="/aws-service-role/spot.amazonaws.com/",
                AssumeRolePolicyDocument=SPOT_TRUST)
            shutil.rmtree(folder, ignore_errors=True)
            recorder = record.Recorder(folder, clock=clock)
            ctx = Context(outputs=StackOutputs(stack, {"region": "ap-northeast-2"}), kube=None,
                          region="ap-northeast-2", aws=None, clock=clock, work_dir=PROJECT_DIR,
                          progress=lambda message: recorder(outcome.RUN_STEP, message=message))
            recorder(record.RUN_STARTED, command="preflight", stack=stack, options={})
            precheck.collect(ctx, recorder)
            recorder.close()
    assert len(made) == 2, "the pre-check makes one session"
    made[1].assert_no_pending_responses()
    assert preflight_checks.FAIL not in {e["status"] for e in recorder.events
                                         if e["kind"] == precheck.CHECKED}
    return recorder.events


@pytest.mark.skipif(not os.environ.get("RECORD_PREFLIGHT"),
                    reason="records tests/fixtures/rehearse/preflight-healthy when RECORD_PREFLIGHT=1")
def test_record_the_healthy_pre_check(tmp_path):
    record_preflight(tmp_path / "run")
    shutil.rmtree(RECORDING, ignore_errors=True)
    RECORDING.mkdir()
    shutil.copy(tmp_path / "run" / record.EVENTS, RECORDING / record.EVENTS)


# --- the recording, replayed ---------------------------------------------------------------------

def test_the_recording_is_the_evenings_first_run_of_the_stack():
    started = record.first(events(), record.RUN_STARTED)
    assert started["command"] == "preflight" and started["stack"] == rehearsal_evening.STACK
    assert record.parse_time(started["at"]) == rehearsal_evening.STARTED["preflight-healthy"]
    # Before every other run of the evening.
    evening = [at for name, at in rehearsal_evening.STARTED.items()
               if at.date() == rehearsal_evening.STARTED["preflight-healthy"].date()]
    assert rehearsal_evening.STARTED["preflight-healthy"] == min(evening)


def test_the_replay_reports_every_recorded_check_as_it_was_seen():
    recorded = checks_recorded()
    report = outcome.analyse_run(precheck_analysis.analyse, events())
    assert [c.name for c in report.checks] == [e["name"] for e in recorded]
    for check, event in zip(report.checks, recorded):
        # The healthy run has only PASS and WARN (below): each is its own verdict.
        assert check.status == event["status"]
        assert check.seen == event["detail"] and check.fix == event["fix"]
        assert check.command == f"python -m ops.preflight --stack {rehearsal_evening.STACK}"
    assert report.passed
    assert report.stack == rehearsal_evening.STACK and report.command == "preflight"


def test_the_healthy_pre_check_passes_or_warns_every_check_of_the_dev_stack():
    from components.nodeadm import NODEADM_VERSION, SSM_KEY_EXPIRES
    from ops.preflight.nodeadm_key import NAME as NODEADM_KEY
    from tests.test_preflight import DEFAULT_CHECKS

    recorded = checks_recorded()
    # ops.preflight's every check of the dev stack, each once, in its order.
    assert [e["name"] for e in recorded] == DEFAULT_CHECKS
    statuses = {e["name"]: e["status"] for e in recorded}
    assert set(statuses.values()) <= {"PASS", "WARN"}
    # The repo's dev stack pins no account: the account check warns, with the pin as its fix.
    assert statuses["account"] == "WARN"
    account = next(e for e in recorded if e["name"] == "account")
    assert "aws:allowedAccountIds is not set" in account["detail"]
    assert "pin it" in account["fix"]
    assert [n for n, s in statuses.items() if s == "WARN"] == ["account"]
    # The signing key was judged on the run's own clock, not the day it was recorded.
    key = next(e for e in recorded if e["name"] == NODEADM_KEY)
    left = SSM_KEY_EXPIRES[NODEADM_VERSION] - record.parse_time(key["at"])
    assert key["detail"].endswith(f"in {left.days} days")


def test_a_pre_check_cut_short_has_not_passed():
    recorded = events()
    before_checks = [e for e in recorded if e["kind"] != precheck.CHECKED]
    report = outcome.analyse_run(precheck_analysis.analyse, before_checks)
    assert [c.status for c in report.checks] == [NOT_READ] and not report.passed
    # A check the account failed fails the run.
    failed = [dict(e, status="FAIL") if e.get("name") == "account" else e for e in recorded]
    report = outcome.analyse_run(precheck_analysis.analyse, failed)
    assert not report.passed
    assert [c.name for c in report.checks if c.status == FAIL] == ["account"]
    assert all(c.status == PASS for c in report.checks if c.name != "account")


def test_a_warning_is_one_verdict_on_every_line_that_shows_it(tmp_path):
    """The replayed healthy pre-check's one warning (the account): WARN, never "PASS: WARN:",
    in report.md, on the run's page, and in the terminal summary; the run still passes, and the
    page puts the warning under what needs attention with its fix."""
    report = outcome.analyse_run(precheck_analysis.analyse, events())
    warned = next(c for c in report.checks if c.name == "account")
    assert warned.status == "WARN" and report.passed
    markdown = report.to_markdown()
    assert f"**account** — WARN: {warned.seen}" in markdown
    assert f"  - Fix: {warned.fix}" in markdown
    report.write(tmp_path)
    page = (tmp_path / "report.html").read_text()
    summary = report.summary()
    for shown in (markdown, page, summary):
        assert "PASS: WARN" not in shown and "WARN: WARN" not in shown
    assert f"WARN account: {warned.seen}" in summary
    attention = page.split("<h2>Needs attention</h2>", 1)[1].split("<h2>", 1)[0]
    assert 'data-status="WARN"' in attention and "Fix: " in attention
    assert "1 WARN" in page.split('class="verdict"', 1)[1].split("</p>", 1)[0]
