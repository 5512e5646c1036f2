"""The collector of `python -m rehearse preflight`; what the command is and does, its --help, is
its face's docstring (command.py)."""

from __future__ import annotations

import argparse
from typing import Any

from rehearse.run.errors import RunError
from rehearse.run.outcome import not_read
from rehearse.run.record import RUN_STARTED, every, first
from rehearse.run.report import FAIL, PASS, SKIP, Check, Report

TITLE = "the pre-check: the account and this machine can hold the lab (read-only)"
CHECKED = "preflight.check"
#: ops.preflight's statuses as a report's: a warning passes and says so.
STATUS = {"PASS": PASS, "WARN": PASS, "FAIL": FAIL, "SKIP": SKIP}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options of its own: the stack file is ``Pulumi.<stack>.yaml`` in --work-dir."""


def check_inputs(given: Any) -> None:
    """Before a run starts (rehearse.inputs): a stack named, and its stack file readable."""
    _stack_config(given)


def _stack_config(ctx: Any) -> Any:
    from offline.runner import config_from_stack_file
    from stacks.config import ConfigError
    from rehearse.lab.switch import require_stack

    # Outputs read from a file carry the file's name: its stack file would be looked for under it.
    require_stack(ctx, "the pre-check", needs="reads the stack's Pulumi.<stack>.yaml")
    stack = ctx.outputs.stack
    path = ctx.work_dir / f"Pulumi.{stack}.yaml" if ctx.work_dir else None
    try:
        return config_from_stack_file(stack, path=path)
    except FileNotFoundError as error:
        from rehearse.lab.outputs import known_stacks

        there = known_stacks(ctx.work_dir) if ctx.work_dir else []
        raise RunError(f"--stack {stack}: the pre-check reads the stack file: {error}; "
                       + (f"the stacks there are {', '.join(there)}" if there else
                          "pass the --work-dir that holds it")) from None
    except (ValueError, ConfigError) as error:
        raise RunError(f"the pre-check reads the stack file: {error}") from None


def collect(ctx: Any, record: Any) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    from ops.preflight import cli as preflight, sequence

    stack = ctx.outputs.stack
    cfg = _stack_config(ctx)
    ctx.progress(f"preflight for stack {stack} in {cfg.region} (read-only); credentials: "
                 f"{cfg.aws_account.describe()}")
    try:
        # As the program's provider makes them; the account check judges the account.
        session = cfg.aws_account.boto3_session(cfg.region, check_account=False)
    except (BotoCoreError, ClientError) as error:
        raise RunError(f"the pre-check cannot use the stack's AWS credentials "
                       f"({cfg.aws_account.describe()}): {error}") from None
    for check in sequence.run_preflight(session, preflight.lab_needs(cfg),
                                        account=cfg.aws_account):
        record(CHECKED, name=check.name, status=check.status, detail=check.detail, fix=check.fix)


def analyse(events: list[dict]) -> Report:
    started = first(events, RUN_STARTED) or {}
    report = Report(command="preflight", stack=started.get("stack", "?"),
                    started=started.get("at", "?"), title="Pre-check: the account and this "
                    "machine can hold the lab")
    for event in every(events, CHECKED):
        status = STATUS.get(event.get("status"), FAIL)
        seen = event.get("detail", "")
        if event.get("status") == "WARN":
            seen = f"WARN: {seen}" + (f" ({event['fix']})" if event.get("fix") else "")
        report.checks.append(Check(event.get("name", "?"), status, seen, event.get("fix", ""),
                                   "python -m ops.preflight --stack " + str(report.stack)))
    if not report.checks:
        report.checks.append(not_read("preflight", "ops.preflight's checks", events,
                                      "python -m ops.preflight --stack " + str(report.stack)))
    return report
