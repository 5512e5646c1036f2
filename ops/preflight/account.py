"""The account check: is the account these credentials are for the one the stack is pinned to?

`pulumi destroy` from a shell pointed at another account finds none of the stack's resources,
takes each as deleted and drops it from the state while it runs on and bills. The stack's
``aws:allowedAccountIds`` stops that (the provider, the cleanups and the tools refuse another
account); this check says which account the preflight sees, through which profile and role, and
whether the stack is pinned to it.
"""

from __future__ import annotations

from typing import Optional

from components.aws_account import AwsAccount
from ops.preflight.checks import FAIL, PASS, WARN, Check
from stacks.aws_config import PIN_COMMAND

NAME = "account"


def account_of_arn(arn: str) -> Optional[str]:
    """The account id in an IAM or STS ARN (``arn:aws:sts::111122223333:assumed-role/...``)."""
    parts = arn.split(":")
    return parts[4] if len(parts) > 5 and parts[4].isdigit() else None


def _through(account: AwsAccount) -> str:
    parts = [f"profile {account.profile}" if account.profile else "the environment's credentials"]
    parts += [f"role {role.role_arn}" for role in account.assume_roles]
    return ", then ".join(parts)


def check_account(caller_arn: str, account: AwsAccount) -> Check:
    """PASS in a pinned account, FAIL in another one, WARN when the stack pins none (with the
    command that pins it to the account seen)."""
    seen = account_of_arn(caller_arn) or "?"
    detail = f"account {seen} as {caller_arn} (through {_through(account)})"
    if not account.pinned:
        return Check(NAME, WARN,
                     f"{detail}; the stack is pinned to no account (aws:allowedAccountIds is not "
                     "set), so pulumi up and destroy act in whichever account the shell's "
                     "credentials are for",
                     "if this is the stack's account, pin it: " + PIN_COMMAND.format(account=seen))
    allowed = ", ".join(account.allowed_account_ids)
    if seen in account.allowed_account_ids:
        return Check(NAME, PASS, f"{detail}: the stack's (aws:allowedAccountIds {allowed})")
    return Check(NAME, FAIL,
                 f"{detail}: not the stack's account (aws:allowedAccountIds {allowed}); pulumi up "
                 "and destroy would refuse to run",
                 f"use credentials for account {allowed} (aws:profile, AWS_PROFILE), or, if "
                 f"{seen} is right, pin the stack to it: " + PIN_COMMAND.format(account=seen))
