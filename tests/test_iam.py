"""Every IAM policy the stack registers: identity policies pass parliament with no findings;
trust policies (which parliament does not audit: they have a Principal and no Resource) admit
one AWS service and nothing else."""

from __future__ import annotations

import json

import pytest

from offline.runner import ProgramRun

# Configurations that add roles; later layers add theirs.
#: The second is the run tests/test_cluster.py's admin-role test reads too.
VARIANTS = [{}, {"gpuEnabled": True, "adminRoleArns": ["arn:aws:iam::111122223333:role/Platform",
                                                      "arn:aws:iam::111122223333:role/Presenter"]}]
TRUSTED_SERVICES = {"eks.amazonaws.com", "ec2.amazonaws.com", "ssm.amazonaws.com",
                    "pods.eks.amazonaws.com"}


def identity_policies(run: ProgramRun) -> dict[str, str]:
    return {r.name: r.inputs["policy"] for r in run.registrations
            if r.type in ("aws:iam/rolePolicy:RolePolicy", "aws:iam/policy:Policy")}


def trust_policies(run: ProgramRun) -> dict[str, str]:
    return {r.name: r.inputs["assumeRolePolicy"] for r in run.of_type("aws:iam/role:Role")}


DOCUMENT = "(whole document)"

#: Findings accepted, each for a reason; keyed by (policy name suffix, statement Sid, issue).
ACCEPTED = {
    # RunInstances and CreateFleet touch several resource types; the Karpenter policy grants
    # them over three statements so that each can carry its own tag condition. parliament
    # reads every statement alone and finds each incomplete.
    ("karpenter-controller-controller", "AllowScopedEC2InstanceAccessActions", "RESOURCE_MISMATCH"),
    ("karpenter-controller-controller", "AllowScopedEC2LaunchTemplateAccessActions", "RESOURCE_MISMATCH"),
    ("karpenter-controller-controller", "AllowScopedEC2InstanceActionsWithTags", "RESOURCE_MISMATCH"),
    # Public parameters live under an ARN with no account (arn:aws:ssm:<region>::parameter/
    # aws/service/...); parliament expects one.
    ("karpenter-controller-controller", "AllowSSMReadActions", "RESOURCE_MISMATCH"),
    # Karpenter must hand the node role to the instances it launches and manage their
    # instance profiles: PassRole on that one role, for EC2 only; instance-profile actions only
    # on profiles tagged for this cluster and region.
    ("karpenter-controller-controller", "AllowPassingInstanceRole", "PERMISSIONS_MANAGEMENT_ACTIONS"),
    ("karpenter-controller-controller", "AllowScopedInstanceProfileCreationActions", "PERMISSIONS_MANAGEMENT_ACTIONS"),
    ("karpenter-controller-controller", "AllowScopedInstanceProfileActions", "PERMISSIONS_MANAGEMENT_ACTIONS"),
    # The same pair read as a whole: RunInstances + PassRole is an escalation path in general;
    # here the role that can be passed is the node role (worker policies only).
    ("karpenter-controller-controller", DOCUMENT, "PRIVILEGE_ESCALATION"),
}


def audit(document: str) -> list[tuple[str, str]]:
    # Imported here: parliament loads its IAM catalogue on import (~0.4 s), a cost for each
    # test worker's collection even where none of these tests runs.
    from parliament import analyze_policy_string

    return [(f.issue, str(f.detail)) for f in
            analyze_policy_string(document, include_community_auditors=True).findings]


def statement_findings(where: str, document: str) -> list[tuple[str, str, str]]:
    """parliament's findings, statement by statement so each names its Sid; accepted ones
    (ACCEPTED) are left out."""
    policy = json.loads(document)
    found = []
    for statement in policy["Statement"]:
        single = json.dumps({"Version": policy["Version"], "Statement": [statement]})
        for issue, detail in audit(single):
            key = next((k for k in ACCEPTED if where.endswith(k[0]) and
                        k[1:] == (statement.get("Sid"), issue)), None)
            if key is None:
                found.append((statement.get("Sid", "?"), issue, detail[:200]))
    return found


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: ",".join(o) or "defaults")
def test_identity_policies_pass_parliament(lab, overrides):
    documents = identity_policies(lab(**overrides))
    assert documents
    problems = {where: found for where, doc in documents.items()
                if (found := statement_findings(where, doc))}
    assert problems == {}
    # The whole documents parse and hold no finding beyond the accepted ones.
    for where, doc in documents.items():
        issues = {issue for issue, _ in audit(doc)}
        accepted = {k[2] for k in ACCEPTED if where.endswith(k[0])}
        assert issues <= accepted, (where, issues)


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: ",".join(o) or "defaults")
def test_trust_policies_admit_one_service_to_assume_the_role(lab, overrides):
    documents = trust_policies(lab(**overrides))
    assert len(documents) >= 3
    for where, document in documents.items():
        policy = json.loads(document)
        assert policy["Version"] == "2012-10-17", where
        for statement in policy["Statement"]:
            assert statement["Effect"] == "Allow", where
            assert set(statement["Principal"]) == {"Service"}, where
            assert statement["Principal"]["Service"] in TRUSTED_SERVICES, where
            actions = statement["Action"]
            actions = {actions} if isinstance(actions, str) else set(actions)
            assert actions <= {"sts:AssumeRole", "sts:TagSession"}, where


def test_parliament_catches_a_bad_policy():
    assert audit(json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "ec2:CreateRoutes", "Resource": "*"}]}))
    assert audit(json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"}]}))


def test_no_policy_grants_every_action_of_a_service(lab):
    for where, document in identity_policies(lab(gpuEnabled=True)).items():
        for statement in json.loads(document)["Statement"]:
            actions = statement["Action"]
            actions = [actions] if isinstance(actions, str) else actions
            assert not any(a == "*" or a.endswith(":*") for a in actions), where


def test_karpenter_regional_reads_are_the_getting_started_ones(dev_run):
    """The Describe calls of Karpenter 1.14's getting-started policy (ResourceDiscoveryPolicy),
    DescribeInstanceStatus included: the instance-status controller polls it every minute and,
    denied it, switches its health checks off. DescribePlacementGroups is left out: Karpenter
    calls it only for an EC2NodeClass with a placement group."""
    [policy] = [r for r in dev_run.of_type("aws:iam/rolePolicy:RolePolicy")
                if r.name == "karpenter-karpenter-controller-controller"]
    [reads] = [s for s in json.loads(policy.inputs["policy"])["Statement"]
               if s["Sid"] == "AllowRegionalReadActions"]
    assert set(reads["Action"]) == {
        "ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
        "ec2:DescribeInstanceStatus", "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplates",
        "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets"}
    assert reads["Resource"] == "*"
    assert reads["Condition"] == {"StringEquals": {"aws:RequestedRegion": dev_run.lab_config.region}}
