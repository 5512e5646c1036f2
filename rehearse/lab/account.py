"""The stack's account settings for the rehearsal: its ``aws:profile``, ``aws:assumeRoles`` and
``aws:allowedAccountIds``, read from ``Pulumi.<stack>.yaml`` in --work-dir, so the rehearsal's
AWS calls and EKS tokens use the credentials ``pulumi up`` used (components/aws_account.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from rehearse.run.errors import RunError


def stack_account(stack: str, work_dir: Optional[Path]) -> Any:
    """The ``AwsAccount`` of ``stack``'s stack file; one without settings (the environment's
    credentials) when there is no such file (outputs read from a file named otherwise)."""
    from components.aws_account import AwsAccount

    path = Path(work_dir) / f"Pulumi.{stack}.yaml" if work_dir else None
    if path is None or not path.exists():
        return AwsAccount()
    from offline.runner import load_stack_config
    from stacks.aws_config import aws_account_settings

    try:
        account, problems = aws_account_settings(load_stack_config(stack, path=path))
    except (OSError, ValueError) as error:
        raise RunError(f"cannot read the account settings of {path}: {error}") from None
    if problems:
        raise RunError(f"{path}: " + "; ".join(str(p) for p in problems))
    return account
