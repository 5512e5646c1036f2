"""components/principals.py: which role a caller ARN stands for, as the program and the preflight use it
to refuse an adminRoleArns item that is the deployer's own role."""

from __future__ import annotations

import pytest

from components.principals import RoleIdentity, role_of, same_role

ACCOUNT = "111122223333"


@pytest.mark.parametrize("arn,expected", [
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/LabAdmin/alice@example.com",
     RoleIdentity("aws", ACCOUNT, "LabAdmin")),
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/AWSReservedSSO_Admin_0123abcd/alice",
     RoleIdentity("aws", ACCOUNT, "AWSReservedSSO_Admin_0123abcd")),
    (f"arn:aws:iam::{ACCOUNT}:role/LabAdmin", RoleIdentity("aws", ACCOUNT, "LabAdmin")),
    (f"arn:aws:iam::{ACCOUNT}:role/teams/platform/LabAdmin", RoleIdentity("aws", ACCOUNT, "LabAdmin")),
    (f"arn:aws-cn:iam::{ACCOUNT}:role/LabAdmin", RoleIdentity("aws-cn", ACCOUNT, "LabAdmin")),
    (f"arn:aws:iam::{ACCOUNT}:user/lab-deployer", None),
    (f"arn:aws:iam::{ACCOUNT}:root", None),
    (f"arn:aws:sts::{ACCOUNT}:federated-user/bob", None),
    ("", None),
])
def test_role_of(arn, expected):
    assert role_of(arn) == expected


@pytest.mark.parametrize("caller,role,same", [
    # Assumed-role ARNs drop the role's path: the name and account decide.
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/LabAdmin/alice", f"arn:aws:iam::{ACCOUNT}:role/teams/LabAdmin", True),
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/LabAdmin/alice", f"arn:aws:iam::{ACCOUNT}:role/LabAdmin", True),
    # IAM does not distinguish role names by case.
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/labadmin/alice", f"arn:aws:iam::{ACCOUNT}:role/LabAdmin", True),
    (f"arn:aws:iam::{ACCOUNT}:role/LabAdmin", f"arn:aws:iam::{ACCOUNT}:role/LabAdmin", True),
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/LabAdmin/alice", f"arn:aws:iam::{ACCOUNT}:role/LabAdmin2", False),
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/LabAdmin/alice", "arn:aws:iam::444455556666:role/LabAdmin", False),
    (f"arn:aws:iam::{ACCOUNT}:user/LabAdmin", f"arn:aws:iam::{ACCOUNT}:role/LabAdmin", False),
])
def test_same_role(caller, role, same):
    assert same_role(caller, role) is same
