"""Which account the lab acts in (issue 28, items 3 and 4).

The stack's ``aws:profile``, ``aws:allowedAccountIds`` and ``aws:assumeRoles`` reach everything
that calls AWS — the explicit provider, the kubeconfig's ``aws eks get-token``, the destroy-time
cleanups (through their outputs), preflight, the leftovers audit and the rehearsal — and a stack
pinned to an account refuses to act in another.

AWS is moto, in-process, with its accounts kept apart by access key: credentials from
sts:AssumeRole act in the role's account, any other key in moto's default account
(``DEFAULT_ACCOUNT``). A temporary AWS config names two profiles: ``lab`` assumes a role in
``LAB_ACCOUNT`` from the ``base`` keys, ``keys`` holds keys of its own. The environment holds
a third pair of keys, so a tool that ignores the profile acts in the default account, and one
that ignores the role signs with other keys.
"""

from __future__ import annotations

import base64
import io
import json
import urllib.parse

import boto3
import pytest
from moto import mock_aws

from components.aws_account import AssumedRole, AwsAccount
from components.cleanup.deletion_cost_ranks import DeletionCostRanksProvider
from components.cleanup.gateway_routes import GatewayRouteCleanupProvider
from components.cleanup.karpenter_leftovers import KarpenterLeftoverCleanupProvider
from components.cleanup.kubernetes_api import KubernetesApi
from components.cleanup.node_objects import NodeObjectCleanupProvider
from components.cleanup.ssm_registrations import SsmRegistrationCleanupProvider
from offline.fake_cloud import FakeCloud
from offline.runner import run_program
from ops.preflight.account import check_account
from ops.preflight.checks import FAIL, PASS, SKIP, WARN
from stacks.aws_config import PIN_COMMAND, aws_account_settings
from stacks.config import ConfigError
from tests.conftest import lab_config, run_lab
from tests.test_cleanup_karpenter_leftovers import CLUSTER, karpenter_tags, run_instances

REGION = "ap-northeast-2"
DEFAULT_ACCOUNT = "123456789012"  # moto's
LAB_ACCOUNT = "444455556666"
LAB_ROLE = f"arn:aws:iam::{LAB_ACCOUNT}:role/Lab"
FAKE_CLOUD_ACCOUNT = FakeCloud(region=REGION).account_id
ENV_KEY, BASE_KEY, KEYS_KEY = "AKIAENVIRONMENT00001", "AKIABASEPROFILE00001", "AKIAKEYSPROFILE00001"


@pytest.fixture
def aws_files(tmp_path, monkeypatch):
    """The AWS config and credentials files of the module docstring, and keys of another
    identity in the environment."""
    config, credentials = tmp_path / "aws-config", tmp_path / "aws-credentials"
    config.write_text(f"[profile lab]\nrole_arn = {LAB_ROLE}\nsource_profile = base\n"
                      "[profile keys]\n")
    credentials.write_text(f"[base]\naws_access_key_id = {BASE_KEY}\naws_secret_access_key = b\n"
                           f"[keys]\naws_access_key_id = {KEYS_KEY}\naws_secret_access_key = k\n")
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"AWS_CONFIG_FILE": str(config),
                        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
                        "AWS_ACCESS_KEY_ID": ENV_KEY, "AWS_SECRET_ACCESS_KEY": "e",
                        "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true",
                        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def moto(aws_files):
    with mock_aws():
        yield


def ec2_in(account: str):
    """An EC2 client acting in ``account`` (a role assumed there; moto's default: env keys)."""
    if account == DEFAULT_ACCOUNT:
        return boto3.client("ec2", region_name=REGION)
    return AwsAccount(assume_roles=(AssumedRole(f"arn:aws:iam::{account}:role/Planter"),)) \
        .boto3_session(REGION).client("ec2", region_name=REGION)


def states(ec2) -> dict[str, str]:
    return {i["InstanceId"]: i["State"]["Name"]
            for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}


# --- the stack's settings ----------------------------------------------------------------------

PINNED = {"aws:profile": "lab", "aws:allowedAccountIds": [FAKE_CLOUD_ACCOUNT],
          "aws:assumeRoles": [{"roleArn": LAB_ROLE, "sessionName": "demo"}]}


@pytest.fixture(scope="module")
def pinned_run():
    # Scenario C adds the one cleanup of the demo layer (DeletionCostRanks).
    return run_lab(**PINNED, burstScenario="C")


def test_the_explicit_provider_gets_the_profile_the_pinned_account_and_the_role(pinned_run):
    [provider] = pinned_run.of_type("pulumi:providers:aws")
    assert provider.inputs["profile"] == "lab"
    # Providers receive lists and objects as JSON.
    assert json.loads(provider.inputs["allowedAccountIds"]) == [FAKE_CLOUD_ACCOUNT]
    assert json.loads(provider.inputs["assumeRoles"]) == [{"roleArn": LAB_ROLE,
                                                           "sessionName": "demo"}]


def test_the_kubeconfig_gets_the_token_with_the_profile_and_the_role(pinned_run):
    [user] = json.loads(pinned_run.outputs["kubeconfig"])["users"]
    exec_ = user["user"]["exec"]
    assert exec_["args"][-4:] == ["--profile", "lab", "--role-arn", LAB_ROLE]
    assert exec_["env"] == [{"name": "AWS_PROFILE", "value": "lab"}]


def test_without_settings_the_kubeconfig_and_the_cleanups_are_as_before(dev_run):
    [user] = json.loads(dev_run.outputs["kubeconfig"])["users"]
    assert "--profile" not in user["user"]["exec"]["args"] and "env" not in user["user"]["exec"]
    for reg in dev_run.of_type("pulumi-python:dynamic:Resource") or dev_run.resources():
        assert not {"awsProfile", "allowedAccountIds", "assumeRoles"} & set(reg.inputs)


#: Every destroy-time cleanup that calls AWS or mints an EKS token.
CLEANUPS = {"gateway-gateway-route-cleanup", "karpenter-karpenter-leftovers",
            "hybrid-activation-registrations", "hybrid-hosts-node-0-node",
            "hybrid-hosts-node-1-node", "demo-deletion-cost-ranks",
            "hybrid-hosts-node-0-stale-nodes", "hybrid-hosts-node-1-stale-nodes",
            # Its check reads the activation's registrations with the stack's settings.
            "hybrid-registration-budget"}


def test_every_cleanup_stores_the_account_settings_for_its_delete(pinned_run):
    carrying = {reg.name: reg.outputs for reg in pinned_run.resources()
                if reg.type.startswith("pulumi-python:dynamic") and "awsProfile" in reg.outputs}
    assert set(carrying) == CLEANUPS
    for outputs in carrying.values():
        assert outputs["awsProfile"] == "lab"
        assert outputs["allowedAccountIds"] == [FAKE_CLOUD_ACCOUNT]
        assert outputs["assumeRoles"] == [{"roleArn": LAB_ROLE, "sessionName": "demo"}]


def test_a_caller_outside_the_pinned_accounts_is_refused_before_any_resource_registers():
    with pytest.raises(ConfigError) as caught:
        run_program(lab_config(**{"aws:allowedAccountIds": ["999988887777"]}))
    [found] = caught.value.violations
    assert found.key == "aws:allowedAccountIds"
    assert f"are for account {FAKE_CLOUD_ACCOUNT}" in found.rule
    assert PIN_COMMAND.format(account=FAKE_CLOUD_ACCOUNT) in found.rule
    # The provider (not a cloud resource) and nothing else.
    assert [r.type for r in caught.value.registrations] == ["pulumi:providers:aws"]


def test_an_unpinned_stack_is_warned_about_with_the_command_that_pins_it(dev_run, pinned_run):
    [warning] = [w for w in dev_run.warnings if "aws:allowedAccountIds" in w]
    assert warning.endswith(PIN_COMMAND.format(account="<account>"))
    assert not [w for w in pinned_run.warnings if "aws:allowedAccountIds" in w]


def test_a_stack_file_with_a_profile_plans_and_the_plan_shows_it_and_the_account(tmp_path, capsys):
    from offline import plan

    stack_file = tmp_path / "Pulumi.dev.yaml"
    stack_file.write_text(
        "config:\n  aws:region: ap-northeast-2\n  aws:profile: lab\n"
        f"  aws:allowedAccountIds:\n    - \"{FAKE_CLOUD_ACCOUNT}\"\n")
    assert plan.main(["--stack-file", str(stack_file)]) == 0
    out = capsys.readouterr().out
    assert f"AWS credentials: profile lab; pinned to account {FAKE_CLOUD_ACCOUNT}\n" in out
    assert "aws:allowedAccountIds is not set" not in out


def test_the_plan_of_an_unpinned_stack_says_so():
    from offline import plan

    out = io.StringIO()
    plan.render(run_lab(), out)
    text = out.getvalue()
    assert "AWS credentials: the environment's credentials; no account pinned" in text
    assert PIN_COMMAND.format(account="<account>") in text.split("\nWarnings\n", 1)[1]


@pytest.mark.parametrize("others, key, rule", [
    ({"aws:allowedAccountIds": '["12345"]'}, "aws:allowedAccountIds", "not a 12-digit"),
    ({"aws:allowedAccountIds": "123456789012"}, "aws:allowedAccountIds", "must be a list"),
    ({"aws:profile": " "}, "aws:profile", "name of a profile"),
    ({"aws:assumeRoles": '[{"roleArn": "arn:aws:iam::123456789012:user/alice"}]'},
     "aws:assumeRoles[0].roleArn", "IAM role ARN"),
    ({"aws:assumeRoles": json.dumps([{"roleArn": LAB_ROLE}, {"roleArn": LAB_ROLE}])},
     "aws:assumeRoles", "may name one role"),
    ({"aws:assumeRoles": json.dumps([{"roleArn": LAB_ROLE, "sessionName": "a b"}])},
     "aws:assumeRoles[0].sessionName", "RoleSessionName"),
])
def test_account_settings_are_validated_naming_key_value_and_rule(others, key, rule):
    _, [found] = aws_account_settings(others)
    assert found.key == key and rule in found.rule


def test_an_external_id_is_refused_with_the_reason_and_not_shown():
    account, [found] = aws_account_settings(
        {"aws:assumeRoles": json.dumps([{"roleArn": LAB_ROLE, "externalId": "s3cret-ext"}])})
    assert found.key == "aws:assumeRoles[0].externalId" and "s3cret-ext" not in str(found)
    assert "get-token" in found.rule and "aws:profile" in found.rule


def test_an_account_id_stored_as_a_number_keeps_its_twelve_digits():
    # `pulumi config set --path` stores an integer-looking value as a number; a leading 0 goes.
    account, problems = aws_account_settings({"aws:allowedAccountIds": "[12345678901]"})
    assert problems == [] and account.allowed_account_ids == ("012345678901",)


# --- the cleanups' delete ----------------------------------------------------------------------

def karpenter_delete(props: dict) -> None:
    provider = KarpenterLeftoverCleanupProvider()
    provider.poll_seconds = provider.retry_base_seconds = 0
    # Instances are what this is about: moto lacks ListInstanceProfileTags.
    provider._clean_instance_profiles = lambda region, cluster, account: []
    provider.delete(f"karpenter-leftovers-{CLUSTER}",
                    {"region": REGION, "clusterName": CLUSTER, **props})


@pytest.fixture
def two_accounts(moto):
    """One of this cluster's Karpenter instances in each account."""
    return {account: run_instances(ec2_in(account), karpenter_tags())[0]
            for account in (DEFAULT_ACCOUNT, LAB_ACCOUNT)}


def test_a_cleanup_acts_through_the_stored_profile(two_accounts):
    karpenter_delete({"awsProfile": "lab", "allowedAccountIds": [LAB_ACCOUNT]})
    assert states(ec2_in(LAB_ACCOUNT))[two_accounts[LAB_ACCOUNT]] == "terminated"
    assert states(ec2_in(DEFAULT_ACCOUNT))[two_accounts[DEFAULT_ACCOUNT]] == "running"


def test_a_cleanup_assumes_the_stored_role(two_accounts):
    karpenter_delete({"assumeRoles": [{"roleArn": LAB_ROLE}], "allowedAccountIds": [LAB_ACCOUNT]})
    assert states(ec2_in(LAB_ACCOUNT))[two_accounts[LAB_ACCOUNT]] == "terminated"
    assert states(ec2_in(DEFAULT_ACCOUNT))[two_accounts[DEFAULT_ACCOUNT]] == "running"


def test_a_cleanup_refuses_to_act_in_an_account_the_stack_is_not_pinned_to(two_accounts):
    # The shell's credentials are for the default account; the stack is the lab account's.
    with pytest.raises(Exception) as raised:
        karpenter_delete({"allowedAccountIds": [LAB_ACCOUNT]})
    assert f"are for account {DEFAULT_ACCOUNT}" in str(raised.value)
    assert f"pinned to {LAB_ACCOUNT}" in str(raised.value)
    assert states(ec2_in(DEFAULT_ACCOUNT))[two_accounts[DEFAULT_ACCOUNT]] == "running"
    assert states(ec2_in(LAB_ACCOUNT))[two_accounts[LAB_ACCOUNT]] == "running"


def test_a_state_stored_before_the_settings_existed_deletes_with_the_environments_credentials(
        two_accounts):
    karpenter_delete({})
    assert states(ec2_in(DEFAULT_ACCOUNT))[two_accounts[DEFAULT_ACCOUNT]] == "terminated"


def test_the_ssm_cleanup_refuses_another_account(moto):
    provider = SsmRegistrationCleanupProvider()
    with pytest.raises(Exception, match=f"were not looked at: .*are for account {DEFAULT_ACCOUNT}"):
        provider.delete("ssm-registrations-a", {"activationId": "a", "region": REGION,
                                                 "allowedAccountIds": [LAB_ACCOUNT]})


def signing_key(token: str) -> str:
    url = base64.urlsafe_b64decode(token[len("k8s-aws-v1."):] + "==").decode()
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    return query["X-Amz-Credential"].split("/")[0]


def test_the_eks_token_is_signed_with_the_stored_profile(aws_files):
    api = KubernetesApi()
    assert signing_key(api._bearer_token(CLUSTER, REGION,
                                         api._account({"awsProfile": "keys"}))) == KEYS_KEY
    # A state without the settings: the environment's keys, as before.
    assert signing_key(api._bearer_token(CLUSTER, REGION, api._account({}))) == ENV_KEY


@pytest.mark.parametrize("provider, props", [
    (GatewayRouteCleanupProvider(), {"region": REGION, "clusterName": CLUSTER,
                                      "routeTableIds": ["rtb-1"], "podCidrs": ["172.17.0.0/16"],
                                      "endpoint": "https://x", "certificateAuthority": "Y2E=",
                                      "vtepConfigName": "hybrid-gateway"}),
    (KarpenterLeftoverCleanupProvider(), {"region": REGION, "clusterName": CLUSTER}),
    (SsmRegistrationCleanupProvider(), {"region": REGION, "activationId": "a"}),
    (NodeObjectCleanupProvider(), {"region": REGION, "clusterName": CLUSTER,
                                    "endpoint": "https://x", "certificateAuthority": "Y2E=",
                                    "labelSelector": "a=b", "activationId": "a"}),
    (DeletionCostRanksProvider(), {"region": REGION, "clusterName": CLUSTER,
                                    "endpoint": "https://x", "certificateAuthority": "Y2E=",
                                    "namespace": "burst"}),
], ids=lambda value: type(value).__name__ if not isinstance(value, dict) else "")
def test_new_account_settings_update_a_cleanup_and_never_replace_it(provider, props):
    olds = {**provider.create(props).outs, "__provider": "code"}
    for change in ({"awsProfile": "lab"}, {"allowedAccountIds": [LAB_ACCOUNT]},
                   {"assumeRoles": [{"roleArn": LAB_ROLE}]}):
        news = {**props, **change, "__provider": "code"}
        diff = provider.diff("id", olds, news)
        assert (diff.changes, diff.replaces) == (True, []), change
        # The update stores them, so delete acts with them.
        assert change.items() <= provider.update("id", olds, news).outs.items()


# --- the tools outside Pulumi ------------------------------------------------------------------

def test_the_account_check_passes_fails_and_warns_with_the_command_that_pins():
    arn = f"arn:aws:sts::{LAB_ACCOUNT}:assumed-role/Lab/demo"
    lab = AwsAccount(profile="lab", allowed_account_ids=(LAB_ACCOUNT,))
    passed = check_account(arn, lab)
    assert passed.status == PASS
    assert passed.detail.startswith(f"account {LAB_ACCOUNT} as {arn} (through profile lab)")
    failed = check_account(f"arn:aws:iam::{DEFAULT_ACCOUNT}:user/me",
                           AwsAccount(allowed_account_ids=(LAB_ACCOUNT,)))
    assert failed.status == FAIL and f"account {DEFAULT_ACCOUNT}" in failed.detail
    assert PIN_COMMAND.format(account=DEFAULT_ACCOUNT) in failed.fix
    warned = check_account(arn, AwsAccount())
    assert warned.status == WARN and "aws:allowedAccountIds is not set" in warned.detail
    assert warned.fix.endswith(PIN_COMMAND.format(account=LAB_ACCOUNT))


def run_preflight_command(tmp_path, capsys, session=None, **settings):
    from ops.preflight.cli import main
    from tests.test_preflight import fake_tools, stack_file

    which, run = fake_tools()
    code = main(["--stack-file", str(stack_file(tmp_path, **settings))], session=session,
                which=which, run=run)
    lines = capsys.readouterr().out.splitlines()
    return code, lines, {line.split("  ", 1)[1].split(": ", 1)[0]: line.split("  ", 1)[0]
                         for line in lines if line.split("  ", 1)[0] in (PASS, WARN, FAIL, SKIP)}


def test_preflight_uses_the_stacks_profile_and_shows_the_account_it_sees(
        moto, tmp_path, capsys, monkeypatch):
    from ops.preflight import cli
    from ops.preflight.checks import _credentials

    def credentials_and_account(session, needs, which, run, now, account, activation=None):
        # The rest would ask in-process moto for what it lacks (default service quotas).
        credentials, caller_arn = _credentials(session, needs.region)
        return [credentials, check_account(caller_arn, account)]

    monkeypatch.setattr(cli, "run_preflight", credentials_and_account)
    code, lines, statuses = run_preflight_command(
        tmp_path, capsys, **{"aws:profile": "lab", "aws:allowedAccountIds": [LAB_ACCOUNT]})
    assert lines[1] == f"credentials: profile lab; pinned to account {LAB_ACCOUNT}"
    [account] = [line for line in lines if line.startswith("PASS  account: ")]
    assert account.startswith(f"PASS  account: account {LAB_ACCOUNT} as "
                              f"arn:aws:sts::{LAB_ACCOUNT}:assumed-role/Lab/")
    assert "(through profile lab)" in account


def test_preflight_in_another_account_fails_and_checks_nothing_there(moto, tmp_path, capsys):
    code, lines, statuses = run_preflight_command(
        tmp_path, capsys, **{"aws:allowedAccountIds": [LAB_ACCOUNT]})
    assert code == 1 and statuses["account"] == FAIL
    assert [n for n, s in statuses.items() if s == SKIP] == [
        "region", "availability zones", "instance types", "quotas", "names in the region",
        "hybrid activation",
        "spot service-linked role", "admin access entries"]


def test_the_leftovers_audit_refuses_another_account_and_uses_the_profile(
        moto, tmp_path, capsys, monkeypatch):
    from ops.leftovers import cli as command
    from ops.leftovers.audit import AwsUnavailable
    from tests.test_leftovers import write_stack_file

    pinned = write_stack_file(tmp_path, "dev", **{"aws:allowedAccountIds": [LAB_ACCOUNT]})
    assert command.main(["--stack-file", str(pinned)]) == 2
    err = capsys.readouterr().err
    assert f"are for account {DEFAULT_ACCOUNT}" in err and "Nothing was looked at" in err

    seen = []

    def scan(session, scope):
        seen.append(session.client("sts", region_name=REGION).get_caller_identity()["Account"])
        raise AwsUnavailable("stop here")

    monkeypatch.setattr(command, "scan", scan)
    with_profile = write_stack_file(tmp_path, "dev", **{"aws:profile": "lab",
                                                        "aws:allowedAccountIds": [LAB_ACCOUNT]})
    command.main(["--stack-file", str(with_profile)])
    assert seen == [LAB_ACCOUNT]


def test_the_rehearsal_reads_the_stack_files_account_for_its_clients_and_tokens(
        moto, tmp_path):
    from rehearse.lab.account import stack_account
    from rehearse.lab.connection import eks_token
    from rehearse.run.context import boto3_clients
    from tests.test_leftovers import write_stack_file

    write_stack_file(tmp_path, "demo", **{"aws:profile": "lab",
                                          "aws:allowedAccountIds": [LAB_ACCOUNT]})
    account = stack_account("demo", tmp_path)
    assert account == AwsAccount(profile="lab", allowed_account_ids=(LAB_ACCOUNT,))
    assert boto3_clients(REGION, account)("sts").get_caller_identity()["Account"] == LAB_ACCOUNT
    assert signing_key(eks_token(CLUSTER, REGION, AwsAccount(profile="keys"))) == KEYS_KEY
    # No stack file (outputs read from a file of another name): the environment's credentials.
    assert stack_account("elsewhere", tmp_path) == AwsAccount()


def test_a_pickled_cleanup_acts_in_the_stored_account_without_the_project(aws_files, tmp_path):
    """As at destroy time: unpickled in a process where this project cannot be imported, the
    session mixin came along by value, and the stored profile and pin are what it acts with."""
    import os

    from tests.pickled_provider import result_of, run_pickled

    env = {name: os.environ[name] for name in (
        "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED")}
    prelude = "from moto import mock_aws\nmock_aws().start()\n"
    props = {"region": REGION, "clusterName": CLUSTER, "awsProfile": "lab"}
    done = run_pickled(KarpenterLeftoverCleanupProvider(), "delete", "id",
                       {**props, "allowedAccountIds": [LAB_ACCOUNT]}, prelude=prelude, env=env)
    assert result_of(done) is None
    refused = run_pickled(KarpenterLeftoverCleanupProvider(), "delete", "id",
                          {**props, "allowedAccountIds": ["999988887777"]}, prelude=prelude,
                          env=env)
    assert refused.returncode == 1
    assert f"are for account {LAB_ACCOUNT}, and this stack is pinned to 999988887777" \
        in refused.stderr
