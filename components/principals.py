"""Which IAM role an AWS principal ARN stands for, so the deployer can be compared with the roles
a stack is configured to admit.

Pure string work, no AWS calls: the program (before it registers anything) and the preflight
both use it.

An assumed-role session ARN (``arn:aws:sts::<account>:assumed-role/<RoleName>/<session>``, what
``sts:GetCallerIdentity`` returns for SSO, ``aws sts assume-role`` and instance profiles) names
the role without its path, while a role ARN (``arn:aws:iam::<account>:role/<path>/<RoleName>``)
carries it. A role name is unique in its account whatever the path (and whatever the case: IAM
does not distinguish names by case), so the account and the name identify the role.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_ASSUMED_ROLE = re.compile(r"arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/.+")
_ROLE = re.compile(r"arn:(aws[a-z-]*):iam::(\d{12}):role/(?:[\w+=,.@/-]*/)?([\w+=,.@-]+)")


@dataclass(frozen=True)
class RoleIdentity:
    partition: str
    account: str
    name: str


def role_of(arn: str) -> Optional[RoleIdentity]:
    """The role an assumed-role session or a role ARN stands for; None for anything else (an
    IAM user, the root user, a federated user)."""
    for pattern in (_ASSUMED_ROLE, _ROLE):
        match = pattern.fullmatch(arn or "")
        if match:
            return RoleIdentity(*match.groups())
    return None


def same_role(caller_arn: str, role_arn: str) -> bool:
    """Whether ``caller_arn`` (a session or a role) acts as the role ``role_arn``."""
    caller, role = role_of(caller_arn), role_of(role_arn)
    if caller is None or role is None:
        return False
    return ((caller.partition, caller.account, caller.name.casefold())
            == (role.partition, role.account, role.name.casefold()))
