"""IAM documents as plain dicts (rendered with ``pulumi.Output.json_dumps`` where they hold
outputs), and a role with its managed and inline policies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws


def trust_policy(service: str, *, actions: Sequence[str] = ("sts:AssumeRole",),
                 conditions: Optional[Mapping[str, Any]] = None) -> dict:
    """A trust policy letting one AWS service principal assume the role."""
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": list(actions) if len(actions) > 1 else actions[0],
    }
    if conditions:
        statement["Condition"] = dict(conditions)
    return {"Version": "2012-10-17", "Statement": [statement]}


def managed_policy_arn(name: str) -> str:
    return f"arn:aws:iam::aws:policy/{name}"


@dataclass(frozen=True)
class RoleArgs:
    #: The trust policy (a dict, may hold outputs).
    assume_role_policy: Any
    #: ARNs of AWS managed policies, each attached as a resource of its own named after the
    #: policy (managed_policy_arn builds them).
    managed_policies: Sequence[str] = ()
    #: Inline policy documents by name (dicts, may hold outputs).
    inline_policies: Mapping[str, Any] = field(default_factory=dict)
    #: The role's IAM description, what the console shows beside its generated name; empty: none.
    description: str = ""


class Role(pulumi.ComponentResource):
    """An IAM role with its managed-policy attachments and inline policies as separate resources,
    so each can be asserted on and depended on (``attachments``)."""

    role: aws.iam.Role
    arn: pulumi.Output[str]
    role_name: pulumi.Output[str]
    #: The policy attachments and inline policies: whatever acts with this role's permissions
    #: depends on them, so it starts after they exist and stops before they go.
    attachments: list[pulumi.Resource]

    def __init__(self, name: str, args: RoleArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:iam:Role", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=pulumi.Output.json_dumps(args.assume_role_policy),
            description=args.description or None,
            opts=child,
        )
        self.arn = self.role.arn
        self.role_name = self.role.name
        self.attachments = []
        for policy in args.managed_policies:
            self.attachments.append(aws.iam.RolePolicyAttachment(
                f"{name}-{policy.rsplit('/', 1)[-1]}",
                role=self.role.name,
                policy_arn=policy,
                opts=child,
            ))
        for policy_name, document in args.inline_policies.items():
            self.attachments.append(aws.iam.RolePolicy(
                f"{name}-{policy_name}",
                role=self.role.name,
                policy=pulumi.Output.json_dumps(document),
                opts=child,
            ))
        self.register_outputs({"arn": self.arn, "name": self.role_name})
