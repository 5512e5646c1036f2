"""The collector of `python -m rehearse preflight`: ops.preflight's read-only checks, run with
the stack's configuration and credentials, one event each. What the command is and does, its
--help, is its face's docstring (command.py)."""

from __future__ import annotations

from typing import Any

from rehearse.commands.preflight.kinds import CHECKED
from rehearse.run.errors import RunError


def stack_config(ctx: Any) -> Any:
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
    from ops.preflight.activation import stack_activation

    stack = ctx.outputs.stack
    cfg = stack_config(ctx)
    ctx.progress(f"preflight for stack {stack} in {cfg.region} (read-only); credentials: "
                 f"{cfg.aws_account.describe()}")
    try:
        # As the program's provider makes them; the account check judges the account.
        session = cfg.aws_account.boto3_session(cfg.region, check_account=False)
    except (BotoCoreError, ClientError) as error:
        raise RunError(f"the pre-check cannot use the stack's AWS credentials "
                       f"({cfg.aws_account.describe()}): {error}") from None
    for check in sequence.run_preflight(session, preflight.lab_needs(cfg),
                                        account=cfg.aws_account,
                                        activation=stack_activation(cfg)):
        record(CHECKED, name=check.name, status=check.status, detail=check.detail, fix=check.fix)
