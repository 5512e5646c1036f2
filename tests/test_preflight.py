"""The preflight (`python -m ops.preflight`): read-only checks that an account and a machine
can hold the lab.

EC2 and STS come from moto (its ap-northeast-2 offers every default type: m6i.large, m5.xlarge,
g6.xlarge); Service Quotas, whose EC2 quotas moto does not implement, and the failures (access
denied, no credentials) come from botocore's Stubber. The CLIs are fakes passed to the checks.
Nothing here reaches AWS: moto answers in-process, the subprocess test talks to a moto server
on 127.0.0.1.
"""

from __future__ import annotations

import copy
import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import botocore.credentials
import botocore.session
import pytest
import yaml
from botocore.stub import Stubber
from moto import mock_aws

from ops.preflight.checks import (FAIL, PASS, SKIP, SPOT_ROLE, WARN, CommandResult, LabNeeds,
                           check_admin_roles, check_aws_cli, check_names_free,
                           check_pulumi_cli, check_spot_role, vcpu_quota_class)
from ops.preflight.cli import lab_needs, main
from ops.preflight.nodeadm_key import NAME as NODEADM_KEY, check_nodeadm_ssm_key, utc_now
from tests.test_nodeadm_pin import EXPIRES as NODEADM_KEY_EXPIRES, DAY, far_from_expiry
from tests.test_cleanup_gateway_routes import moto_server  # noqa: F401 (fixture)
from tests.fake_ssm_activations import FakeActivations

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEV_STACK = yaml.safe_load((PROJECT_DIR / "Pulumi.dev.yaml").read_text())
#: moto's account: the tests' dev stack is pinned to it (the account check passes), as a stack
#: should be; tests/test_accounts.py runs the others.
MOTO_ACCOUNT = "123456789012"
DEV_STACK["config"]["aws:allowedAccountIds"] = [MOTO_ACCOUNT]
REGION = "ap-northeast-2"
AWS_V2 = "aws-cli/2.17.0 Python/3.11.9 Linux/6.1.0 exe/x86_64.ubuntu.24"
PULUMI_V3 = "v3.140.0"

# Quota codes, in the order the preflight reads them.
VPCS, NATS, EIPS, STANDARD, GVT = "L-F678F1CE", "L-FE5A380F", "L-0263D0A3", "L-1216C47A", "L-DB2E81BA"
SERVICE = {VPCS: "vpc", NATS: "vpc", EIPS: "ec2", STANDARD: "ec2", GVT: "ec2"}
ROOMY = {VPCS: 5, NATS: 5, EIPS: 5, STANDARD: 640}


def stack_file(tmp_path: Path, **settings) -> Path:
    """The dev stack file with some settings changed (``region`` stands for aws:region; a key
    with a namespace is taken as it is)."""
    data = copy.deepcopy(DEV_STACK)
    for key, value in settings.items():
        full = key if ":" in key else f"eks-hybrid-lab:{key}"
        data["config"]["aws:region" if key == "region" else full] = value
    # Named as the dev stack's file: preflight takes the stack's name from it.
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def fake_tools(aws: str | None = AWS_V2, pulumi: str | None = PULUMI_V3, aws_on_stderr=False):
    """``which`` and ``run`` for the CLI checks; None means the tool is not on PATH."""
    printed = {"aws": aws, "pulumi": pulumi}

    def which(name):
        return f"/opt/bin/{name}" if printed.get(name) is not None else None

    def run(argv):
        text = printed[Path(argv[0]).name] + "\n"
        return CommandResult(0, "", text) if aws_on_stderr else CommandResult(0, text, "")

    return which, run


#: botocore's service models, loaded once for every session of this module (each new
#: session would otherwise parse EC2's model again, about 0.3 s).
_LOADER = botocore.session.get_session().get_component("data_loader")


def shared_loader_session() -> botocore.session.Session:
    core = botocore.session.get_session()
    core.register_component("data_loader", _LOADER)
    return core


@functools.lru_cache(maxsize=None)
def _module_session() -> boto3.Session:
    """One boto3 session for the module's CachingSessions (as tests/test_cleanup_gateway_routes.py
    shares one): a botocore session registers ~8,000 event handlers when made, 12-20 ms each
    time, and the tests made two or three a test. Its clients are still made per CachingSession;
    its credentials are the aws fixture's fake keys (the same in every test)."""
    return boto3.Session(botocore_session=shared_loader_session())


#: Clients no Stubber sits on, shared by the module's tests: a client is stateless towards
#: moto (each test's moto is its own), and making one costs 5-10 ms, four to six a test.
_POOL: dict[tuple, Any] = {}


def _pool_key(service_name: str, args: tuple, kwargs: dict) -> tuple:
    # Configs by identity (the preflight's is its module's constant CLIENT_CONFIG).
    return (service_name, args, tuple(sorted(
        (k, v if v is None or isinstance(v, str) else id(v)) for k, v in kwargs.items())))


class CachingSession:
    """One client per service, so a Stubber can sit on the client the preflight will use
    (``stubbed``: a client of its own, made for this session). The others come from the module's
    pool. Clients come from the module's session, in this session's region unless told another."""

    def __init__(self, region_name: str):
        self.region_name = region_name
        self.cached = {}

    def _kwargs(self, args, kwargs):
        if not args:
            kwargs.setdefault("region_name", self.region_name)
        return kwargs

    def client(self, service_name, *args, **kwargs):
        if service_name == "ssm":
            # moto implements no SSM activations: the test's stand-in table answers.
            return ACTIVATIONS.table.client(kwargs.get("region_name") or self.region_name)
        if service_name not in self.cached:
            kwargs = self._kwargs(args, kwargs)
            key = _pool_key(service_name, args, kwargs)
            if key not in _POOL:
                _POOL[key] = _module_session().client(service_name, *args, **kwargs)
            self.cached[service_name] = _POOL[key]
        return self.cached[service_name]

    def stubbed(self, service_name, *args, **kwargs) -> Stubber:
        """An active Stubber on a new client of ``service_name``: the one this session gives
        from now on."""
        assert service_name not in self.cached, f"{service_name}: a client was given already"
        client = _module_session().client(service_name, *args, **self._kwargs(args, kwargs))
        self.cached[service_name] = client
        return Stubber(client)


class _Activations:
    """The SSM activations the in-process tests' account holds (tests/fake_ssm_activations.py):
    none, unless a test adds some (the ``aws`` fixture empties the table)."""
    table = FakeActivations()


ACTIVATIONS = _Activations()


def stub_quotas(session: boto3.Session, region: str, answers: dict) -> Stubber:
    """Queues Service Quotas answers in the order the preflight asks: a number is the applied
    value, ("default", n) is no applied value and an AWS default of n, a string is an error
    code for GetServiceQuota."""
    stubber = session.stubbed("service-quotas", region_name=region)
    for code, answer in answers.items():
        request = {"ServiceCode": SERVICE[code], "QuotaCode": code}
        if isinstance(answer, str):
            stubber.add_client_error("get_service_quota", service_error_code=answer,
                                     http_status_code=400, expected_params=request)
        elif isinstance(answer, tuple):
            stubber.add_client_error("get_service_quota",
                                     service_error_code="NoSuchResourceException",
                                     http_status_code=400, expected_params=request)
            stubber.add_response("get_aws_default_service_quota",
                                 {"Quota": {**request, "Value": float(answer[1])}}, request)
        else:
            stubber.add_response("get_service_quota",
                                 {"Quota": {**request, "Value": float(answer)}}, request)
    stubber.activate()
    return stubber


class _Account:
    """Whether moto's backends hold the module's account as the ``aws`` fixture plants it
    (``planted``), and whether the running test changes it (``changed``); ``default_run``:
    ``preflight``'s answer for the dev stack as it is, in that account (tests that make that
    same run share it)."""
    planted = False
    changed = False
    default_run = None


_ACCOUNT = _Account()


def account_changes() -> None:
    """Said by a test before it changes the account: the next test starts from a new one."""
    _ACCOUNT.changed = True
    _ACCOUNT.default_run = None


#: Operation names that only read: any other call moto serves in a test counts as a change of
#: the shared account (a verb missing here makes a reading test fail, naming the operation).
_READS = ("Describe", "Get", "List", "Search", "Simulate", "Lookup", "Validate", "Estimate",
          "Preview")


def _operation(request: Any) -> str:
    """The AWS operation of a request moto serves: the query protocol's ``Action`` (EC2, IAM,
    STS), the JSON protocol's ``X-Amz-Target`` (SSM, Service Quotas), else the REST method."""
    target = request.headers.get("X-Amz-Target")
    if target:
        target = target.decode() if isinstance(target, bytes) else target
        return target.rsplit(".", 1)[-1]
    body = request.body or b""
    body = body.decode() if isinstance(body, bytes) else str(body)
    for pair in body.split("&"):
        if pair.startswith("Action="):
            return pair[len("Action="):]
    return "GET" if request.method in ("GET", "HEAD") else f"REST {request.method}"


def _empty_moto() -> None:
    """moto's backends emptied, as a mock_aws start and stop leaves them (a reset makes each
    EC2 backend anew before dropping it: without its catalogue of 5,000 AMIs, ~0.2 s each)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
        with mock_aws():
            pass
    _ACCOUNT.planted = False
    _ACCOUNT.default_run = None


@pytest.fixture(scope="module", autouse=True)
def _module_account():
    """The account the tests share is emptied when the module's tests are done (or another
    module's test runs in between): other modules' moto starts from nothing."""
    yield
    if _ACCOUNT.planted:
        _empty_moto()


@pytest.fixture
def aws(monkeypatch):
    """moto for everything boto3 calls; fake credentials, no profile, no endpoint override.

    Speed only: the preflight only reads, so the tests share one account (planted once, not
    reset by every test's moto); a test that changes it says so with ``account_changes()``,
    and the next test gets a new one. A test that writes without saying so fails in its
    teardown, naming the calls."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # 5,000 AMIs: most of moto's start
    ACTIVATIONS.table = FakeActivations()
    mock = mock_aws()
    mock.start(reset=not _ACCOUNT.planted)
    writes: list[str] = []
    try:
        if not _ACCOUNT.planted:
            _ACCOUNT.default_run = None
            # An account that has run spot before; test_spot_role_* take it away.
            plant_spot_role()
            _ACCOUNT.planted = True
        # From here every call moto serves is watched: one that writes, in a test that did not
        # say account_changes(), would leak into the tests after it.
        from moto.core.botocore_stubber import BotocoreStubber

        serve = BotocoreStubber.process_request

        def watched(self, request):
            operation = _operation(request)
            if operation != "GET" and not operation.startswith(_READS):
                writes.append(operation)
            return serve(self, request)

        monkeypatch.setattr(BotocoreStubber, "process_request", watched)
        yield
    finally:
        changed, _ACCOUNT.changed = _ACCOUNT.changed, False
        if changed:
            _ACCOUNT.planted = False
        mock.stop(remove_data=changed or bool(writes))
        if writes and not changed:
            _ACCOUNT.planted = False
            pytest.fail(f"the test changed the shared moto account ({', '.join(sorted(set(writes)))}) "
                        "without saying account_changes() first")


def plant_spot_role() -> None:
    """The Spot service-linked role as IAM names it (moto's create_service_linked_role names it
    AWSServiceRoleForspot, so it is planted as a plain role with the real name and path)."""
    CachingSession(region_name=REGION).client("iam").create_role(
        RoleName=SPOT_ROLE, Path="/aws-service-role/spot.amazonaws.com/",
        AssumeRolePolicyDocument='{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", '
                                 '"Principal": {"Service": "spot.amazonaws.com"}, '
                                 '"Action": "sts:AssumeRole"}]}')


def plant_instances(count: int, instance_type: str) -> None:
    account_changes()
    CachingSession(region_name=REGION).client("ec2").run_instances(
        ImageId="ami-12c6146b", MinCount=count, MaxCount=count, InstanceType=instance_type)


def preflight(tmp_path, capsys, quotas=None, tools=None, session=None, cli_region=None,
              now=far_from_expiry, **settings):
    """Runs the command on the dev stack with ``settings`` changed (and ``--region cli_region``).
    Returns (exit code, the report's lines, {check name: line}).

    The run of the dev stack as it is (no argument but the fixtures) is made once for the
    tests that read it, while the account they share is unchanged."""
    default = ((quotas, tools, session, cli_region, now, settings)
               == (None, None, None, None, far_from_expiry, {})
               # No activation planted in the stand-in SSM (nor a failure queued).
               and not (ACTIVATIONS.table.activations or ACTIVATIONS.table.failures))
    if default and _ACCOUNT.default_run is not None and not _ACCOUNT.changed:
        code, lines, by_name = _ACCOUNT.default_run
        return code, list(lines), dict(by_name)
    region = cli_region or settings.get("region", REGION)
    if session is None:
        session = CachingSession(region_name=region)
        stubber = stub_quotas(session, region, ROOMY if quotas is None else quotas)
    else:
        stubber = None
    which, run = tools or fake_tools()
    argv = ["--stack-file", str(stack_file(tmp_path, **settings))]
    code = main(argv + (["--region", cli_region] if cli_region else []),
                session=session, which=which, run=run, now=now)
    if stubber:
        stubber.assert_no_pending_responses()
    lines = capsys.readouterr().out.splitlines()
    by_name = {}
    for line in lines:
        status, _, rest = line.partition("  ")
        if status in (PASS, WARN, FAIL, SKIP):
            by_name[rest.split(": ", 1)[0]] = line
    if default and not _ACCOUNT.changed:
        _ACCOUNT.default_run = (code, list(lines), dict(by_name))
    return code, lines, by_name


def fix_of(lines, line):
    """The ``fix:`` line printed under ``line``."""
    following = lines[lines.index(line) + 1]
    assert following.startswith("      fix: "), following
    return following


DEFAULT_CHECKS = [
    "credentials", "account", "region", "availability zones",
    "instance type for system nodes", "instance type for gateway nodes",
    "instance type for hybrid hosts", "instance types for burst nodes",
    f"quota VPCs per Region ({VPCS})", f"quota NAT gateways per Availability Zone ({NATS})",
    f"quota EC2-VPC Elastic IPs ({EIPS})",
    f"quota Running On-Demand Standard instances vCPUs ({STANDARD})",
    f"quota Running On-Demand Standard instances vCPUs ({STANDARD}) during an upgrade",
    "names in the region", "hybrid activation", "spot service-linked role",
    "admin access entries",
    "aws CLI", "pulumi CLI", NODEADM_KEY,
]


def test_all_pass(aws, tmp_path, capsys):
    code, lines, checks = preflight(tmp_path, capsys)
    assert code == 0
    assert list(checks) == DEFAULT_CHECKS
    assert all(line.startswith("PASS  ") for line in checks.values()), lines
    assert lines[0].startswith(f"eks-hybrid-lab preflight for stack 'dev' in {REGION}")
    assert lines[-1] == f"preflight: {len(DEFAULT_CHECKS)} passed, 0 warnings, 0 failed"
    assert checks["credentials"] == ("PASS  credentials: account 123456789012 as "
                                     "arn:aws:sts::123456789012:user/moto")
    assert "ap-northeast-2a, ap-northeast-2b (availabilityZoneCount = 2)" in checks["availability zones"]
    assert "m5.xlarge (2 instances) is offered in ap-northeast-2a" in checks["instance type for hybrid hosts"]
    # 2 system + 2 gateway m6i.large (2 vCPUs) + 2 m5.xlarge hybrid hosts (4 vCPUs) = 16;
    # the burst may add burstCpuLimit = 32 more.
    vcpus = checks[f"quota Running On-Demand Standard instances vCPUs ({STANDARD})"]
    assert "in use 0 (an estimate" in vcpus and "the lab adds 16 (+ up to 32" in vcpus
    assert vcpus.endswith("48 of 640")
    # moto's default VPC is in use; the lab adds its two.
    assert checks[f"quota VPCs per Region ({VPCS})"].endswith("in use 1, the lab adds 2: 3 of 5")
    assert not any("fix:" in line for line in lines)


def test_a_misspelt_aws_key_is_a_warning_naming_the_nearest(aws, tmp_path, capsys):
    code, lines, checks = preflight(tmp_path, capsys, **{"aws:regon": "ap-northeast-1"})
    assert code == 0
    assert list(checks) == ["stack settings", *DEFAULT_CHECKS]
    line = checks["stack settings"]
    assert line.startswith("WARN  stack settings: aws:regon is not a setting of the AWS provider")
    assert line.endswith("did you mean aws:region?")
    assert fix_of(lines, line) == "      fix: correct or remove the key in " + str(
        tmp_path / "Pulumi.dev.yaml")
    assert lines[-1] == f"preflight: {len(DEFAULT_CHECKS)} passed, 1 warnings, 0 failed"


def test_too_few_zones_names_the_setting_and_the_zones(aws, tmp_path, capsys):
    # moto's us-west-1 has two zones; the lab is asked for three (--region overrides the file).
    code, lines, checks = preflight(tmp_path, capsys, cli_region="us-west-1",
                                    availabilityZoneCount=3)
    assert lines[0].startswith("eks-hybrid-lab preflight for stack 'dev' in us-west-1 ")
    assert code == 1
    line = checks["availability zones"]
    assert line.startswith("FAIL  ")
    assert "availabilityZoneCount = 3 needs 3 usable zones in us-west-1" in line
    assert "it has 2: us-west-1a, us-west-1b" in line
    assert "pulumi config set availabilityZoneCount 2" in fix_of(lines, line)
    assert checks["instance types"].startswith("SKIP  ")
    assert lines[-1] == "preflight: 15 passed, 0 warnings, 1 failed (1 skipped)"


def test_zones_eks_does_not_support_are_left_out(aws, tmp_path, capsys):
    code, _, checks = preflight(tmp_path, capsys, region="us-east-1", availabilityZoneCount=3)
    assert code == 0
    line = checks["availability zones"]
    assert "5 usable zones in us-east-1" in line
    assert "left out: us-east-1e (use1-az3) is not supported by EKS" in line


def test_instance_type_not_offered(aws, tmp_path, capsys):
    # c7i-flex.large: moto offers it in ap-northeast-2b and 2d, not in 2a (the on-prem zone).
    # m8a.large: not offered anywhere in moto's ap-northeast-2. m9z.large: no such type.
    code, lines, checks = preflight(tmp_path, capsys, hybridNodeInstanceType="c7i-flex.large",
                                    systemNodeInstanceType="m8a.large",
                                    gatewayInstanceType="m9z.large")
    assert code == 1
    hybrid = checks["instance type for hybrid hosts"]
    assert hybrid.startswith("FAIL  ")
    assert "c7i-flex.large is offered in ap-northeast-2b, ap-northeast-2d " \
           "but not in ap-northeast-2a" in hybrid
    assert "which holds the simulated on-prem LAN" in hybrid
    assert "pulumi config set hybridNodeInstanceType <type>" in fix_of(lines, hybrid)
    system = checks["instance type for system nodes"]
    assert system.startswith("FAIL  ") and "m8a.large is not offered in any zone" in system
    assert "pick another type with systemNodeInstanceType" in fix_of(lines, system)
    gateway = checks["instance type for gateway nodes"]
    assert gateway.startswith("FAIL  ") and "m9z.large is not offered" in gateway
    assert "gatewayInstanceType" in fix_of(lines, gateway)
    # EC2 does not know m9z.large: its vCPUs cannot be counted, and the report says so.
    assert checks["quota vCPUs of gateway nodes"].startswith("WARN  ")
    assert lines[-1].endswith("3 failed")


def test_quota_exhausted_fails(aws, tmp_path, capsys):
    # Two running m5.24xlarge use 192 vCPUs; with the lab's 16 that is 208 of 200.
    plant_instances(2, "m5.24xlarge")
    code, lines, checks = preflight(tmp_path, capsys,
                                    quotas={VPCS: 2, NATS: 5, EIPS: 5, STANDARD: 200})
    assert code == 1
    vpcs = checks[f"quota VPCs per Region ({VPCS})"]
    assert vpcs.startswith("FAIL  ") and "in use 1, the lab adds 2: 3 > 2" in vpcs
    assert "--service-code vpc --quota-code L-F678F1CE --desired-value 3" in fix_of(lines, vpcs)
    vcpus = checks[f"quota Running On-Demand Standard instances vCPUs ({STANDARD})"]
    assert vcpus.startswith("FAIL  ") and "in use 192" in vcpus and "208 > 200" in vcpus
    assert lines[-1].endswith("2 failed")


def test_an_upgrades_surge_beyond_the_quota_warns(aws, tmp_path, capsys):
    # The stack's 16 vCPUs and a burst of 8 fit in 31. A change that rolls the node groups may
    # add up to two nodes per zone of each (the EKS User Guide's scale-up phase): 2 system
    # nodes' group in 2 zones and the gateway group in 2, so 4 + 4 m6i.large = 16 more; 32 > 31.
    # The hybrid hosts add nothing: they are replaced delete-first (tests/test_replacement.py).
    code, lines, checks = preflight(tmp_path, capsys, quotas={**ROOMY, STANDARD: 31},
                                    burstCpuLimit=8)
    assert code == 0
    assert checks[f"quota Running On-Demand Standard instances vCPUs ({STANDARD})"].startswith(
        "PASS  ")
    line = checks[f"quota Running On-Demand Standard instances vCPUs ({STANDARD}) during an upgrade"]
    assert line.startswith("WARN  ") and "the lab adds 16 (a host is replaced delete-first" in line
    assert "(+ up to 16 while a change rolls the node groups" in line and "32 > 31" in line
    assert "--quota-code L-1216C47A --desired-value 32" in fix_of(lines, line)


def test_burst_beyond_the_quota_warns(aws, tmp_path, capsys):
    # 192 + 16 fits in 220; with the burst's 32 more it does not.
    plant_instances(2, "m5.24xlarge")
    code, lines, checks = preflight(tmp_path, capsys, quotas={**ROOMY, STANDARD: 220})
    assert code == 0
    vcpus = checks[f"quota Running On-Demand Standard instances vCPUs ({STANDARD})"]
    assert vcpus.startswith("WARN  ") and "240 > 220 at full burst" in vcpus
    assert "capped by burstCpuLimit" in vcpus
    assert "lower burstCpuLimit to 12 (pulumi config set burstCpuLimit 12)" in fix_of(lines, vcpus)


def test_quota_lookups_denied_warn(aws, tmp_path, capsys):
    denied = {code: "AccessDeniedException" for code in ROOMY}
    code, lines, checks = preflight(tmp_path, capsys, quotas=denied)
    assert code == 0
    quota_lines = [line for name, line in checks.items() if name.startswith("quota ")]
    assert len(quota_lines) == 5
    for line in quota_lines:
        assert line.startswith("WARN  ") and "quota lookup not permitted" in line
        assert "servicequotas:GetServiceQuota" in fix_of(lines, line)
    assert lines[-1] == "preflight: 15 passed, 5 warnings, 0 failed"


def test_quota_without_an_applied_value_uses_the_aws_default(aws, tmp_path, capsys):
    code, _, checks = preflight(tmp_path, capsys, quotas={**ROOMY, EIPS: ("default", 5)})
    assert code == 0
    assert "quota 5 (AWS default)" in checks[f"quota EC2-VPC Elastic IPs ({EIPS})"]


@pytest.mark.parametrize("aws_cli, on_stderr, status, text", [
    (None, False, FAIL, "aws is not on PATH"),
    ("aws-cli/1.29.62 Python/3.8.10 Linux/5.15 botocore/1.31.62", True, FAIL, "v1"),
    (AWS_V2, False, PASS, "aws-cli/2.17.0"),
    ("something else", False, WARN, "printed no aws-cli/<version>"),
])
def test_aws_cli(aws_cli, on_stderr, status, text):
    check = check_aws_cli(*fake_tools(aws=aws_cli, aws_on_stderr=on_stderr))
    assert check.status == status and text in check.detail
    if status == FAIL:
        assert "AWS CLI v2" in check.fix and "getting-started-install" in check.fix


@pytest.mark.parametrize("pulumi, status, text", [
    (None, FAIL, "pulumi is not on PATH"),
    ("v2.25.2", FAIL, "needs 3.0 or newer"),
    (PULUMI_V3, PASS, "pulumi 3.140.0"),
    ("no version here", WARN, "could not read a version"),
])
def test_pulumi_cli(pulumi, status, text):
    check = check_pulumi_cli(*fake_tools(pulumi=pulumi))
    assert check.status == status and text in check.detail
    if status == FAIL:
        assert "get.pulumi.com" in check.fix


def test_missing_clis_fail_the_run(aws, tmp_path, capsys):
    code, lines, checks = preflight(tmp_path, capsys, tools=fake_tools(aws=None, pulumi=None))
    assert code == 1
    assert checks["aws CLI"].startswith("FAIL  ") and checks["pulumi CLI"].startswith("FAIL  ")
    assert "install the Pulumi CLI" in fix_of(lines, checks["pulumi CLI"])


def test_the_pinned_nodeadm_key_warns_then_fails_as_its_expiry_nears_and_passes(aws, tmp_path,
                                                                                capsys):
    """On a fixed clock: a WARN (exit 0) within the window before the pinned nodeadm's SSM key
    expires, a FAIL (exit 1) once it has, each with the fix (the rule: test_nodeadm_pin.py)."""
    for now, code_wanted, status in ((NODEADM_KEY_EXPIRES - 10 * DAY, 0, WARN),
                                     (NODEADM_KEY_EXPIRES + DAY, 1, FAIL)):
        code, lines, checks = preflight(tmp_path, capsys, now=lambda: now)
        assert code == code_wanted
        assert checks[NODEADM_KEY].startswith(f"{status}  {NODEADM_KEY}: nodeadm v")
        assert "raise NODEADM_VERSION in components/nodeadm.py" in fix_of(lines, checks[NODEADM_KEY])


def test_no_credentials_fails_and_skips_the_aws_checks(monkeypatch, tmp_path, capsys):
    # No moto: the call stops at signing. The endpoint is a closed loopback port regardless.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    core = shared_loader_session()
    core.register_component("credential_provider", botocore.credentials.CredentialResolver([]))
    code, lines, checks = preflight(tmp_path, capsys, session=boto3.Session(
        botocore_session=core, region_name=REGION))
    assert code == 1
    line = checks["credentials"]
    assert line.startswith("FAIL  credentials: no AWS credentials found")
    assert fix_of(lines, line) == "      fix: configure AWS credentials (aws configure / AWS_PROFILE)"
    for name in ("region", "availability zones", "instance types", "quotas",
                 "names in the region", "hybrid activation", "spot service-linked role",
                 "admin access entries"):
        assert checks[name] == (f"SKIP  {name}: not checked: no working AWS credentials "
                                "(see credentials)")
    assert checks["aws CLI"].startswith("PASS  ") and checks["pulumi CLI"].startswith("PASS  ")
    assert lines[-1] == "preflight: 3 passed, 0 warnings, 1 failed (8 skipped)"


def test_refused_credentials_fail(aws, tmp_path, capsys):
    session = CachingSession(region_name=REGION)
    sts = session.stubbed("sts", region_name=REGION)
    sts.add_client_error("get_caller_identity", service_error_code="InvalidClientTokenId",
                         service_message="The security token included in the request is invalid.",
                         http_status_code=403)
    sts.activate()
    code, lines, checks = preflight(tmp_path, capsys, session=session)
    assert code == 1
    assert "InvalidClientTokenId: The security token" in checks["credentials"]
    assert "aws configure / AWS_PROFILE" in fix_of(lines, checks["credentials"])
    assert checks["quotas"].startswith("SKIP  ")


def test_region_not_enabled(aws, tmp_path, capsys):
    # moto lists me-south-1 as not-opted-in.
    code, lines, checks = preflight(tmp_path, capsys, session=CachingSession(
        region_name="me-south-1"), region="me-south-1")
    assert code == 1
    line = checks["region"]
    assert line == "FAIL  region: me-south-1 is not enabled for the account (not-opted-in)"
    assert "aws account enable-region --region-name me-south-1" in fix_of(lines, line)
    assert checks["availability zones"].startswith("SKIP  ")


def test_gpu_enabled_adds_the_gpu_checks(aws, tmp_path, capsys):
    code, lines, checks = preflight(tmp_path, capsys, quotas={**ROOMY, GVT: 0},
                                    gpuEnabled=True)
    gpu_type = checks["instance type for GPU host"]
    assert gpu_type == "PASS  instance type for GPU host: g6.xlarge (1 instance) is offered in ap-northeast-2a"
    # A new account's G and VT quota is often 0: the GPU host's 4 vCPUs do not fit. One
    # host's worth is enough, also to replace it (tests/test_replacement.py).
    gvt = checks[f"quota Running On-Demand G and VT instances vCPUs ({GVT})"]
    assert gvt.startswith("FAIL  ") and gvt.endswith(
        "the lab adds 4 (a host is replaced delete-first: replacing it needs no more): 4 > 0")
    assert "--quota-code L-DB2E81BA --desired-value 4" in fix_of(lines, gvt)
    assert code == 1
    # The GPU host does not count against the standard quota.
    assert "the lab adds 16 " in checks[f"quota Running On-Demand Standard instances vCPUs ({STANDARD})"]


def test_gpu_disabled_has_no_gpu_checks(aws, tmp_path, capsys):
    _, lines, checks = preflight(tmp_path, capsys, gpuEnabled=False)
    assert not any("GPU" in name or "G and VT" in name for name in checks)
    assert not any("g6.xlarge" in line for line in lines)


def test_bad_config_exits_2(tmp_path, capsys):
    code = main(["--stack-file", str(stack_file(tmp_path, availabilityZoneCount=7))],
                session=object(), which=lambda _: None, run=None)
    assert code == 2
    assert 'availabilityZoneCount = 7: must be 2 or 3' in capsys.readouterr().err


def test_quota_classes():
    assert [vcpu_quota_class(t) for t in ("m6i.large", "c7i-flex.large", "t3.micro", "g6.xlarge",
                                          "vt1.3xlarge", "p5.48xlarge", "inf2.xlarge",
                                          "mac2.metal", "trn1.2xlarge")] == \
        ["standard", "standard", "standard", "gvt", "gvt", "other", "other", "other", "other"]


@pytest.fixture
def fresh_account():
    """An empty moto account (the in-process tests' shared one is emptied first)."""
    if _ACCOUNT.planted:
        _empty_moto()


def test_command_against_a_moto_server(tmp_path, monkeypatch, fresh_account, moto_server):
    """The real command, in its own process, against moto's server: Service Quotas answers the
    VPC quotas and fails the EC2 ones (not implemented), which must be WARN lines, not a crash."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, printed in (("aws", AWS_V2), ("pulumi", PULUMI_V3)):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho '{printed}'\n")
        script.chmod(0o755)
    # Read by the server's backends, which are made at their first request.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1",
           "AWS_ENDPOINT_URL": moto_server,
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
           "AWS_EC2_METADATA_DISABLED": "true",
           # No retries with backoff on the server's 500s for what it does not implement.
           "AWS_MAX_ATTEMPTS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "ops.preflight", "--stack-file", str(stack_file(tmp_path))],
        cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=60)
    # The pinned nodeadm's key is checked against today, as the command does (the check's own
    # tests fix the clock: tests/test_nodeadm_pin.py).
    key = check_nodeadm_ssm_key(utc_now()).status
    assert result.returncode == (1 if key == FAIL else 0), result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    reported = [line for line in result.stdout.splitlines() if not line.startswith("      fix:")]
    assert reported[0] == ("eks-hybrid-lab preflight for stack 'dev' in ap-northeast-2 "
                           "(read-only: Describe/List/Get calls only)")
    assert reported[1] == ("credentials: the environment's credentials; pinned to account "
                           f"{MOTO_ACCOUNT}")
    statuses = [(line.split("  ", 1)[0], line.split("  ", 1)[1].split(": ", 1)[0])
                for line in reported[2:-1]]
    # A fresh account: no Spot service-linked role yet; moto's server implements no SSM
    # activations (DescribeActivations answers an error), which must be a WARN, not a crash.
    assert statuses == [
        (key, name) if name == NODEADM_KEY else
        (PASS, name) if name not in (f"quota EC2-VPC Elastic IPs ({EIPS})",
                                     f"quota Running On-Demand Standard instances vCPUs ({STANDARD})",
                                     f"quota Running On-Demand Standard instances vCPUs ({STANDARD}) during an upgrade",
                                     "hybrid activation", "spot service-linked role")
        else (WARN, name)
        for name in DEFAULT_CHECKS
    ]
    assert f"PASS  aws CLI: aws-cli/2.17.0 at {bin_dir}/aws" in reported
    assert any(line.startswith(f"WARN  quota EC2-VPC Elastic IPs ({EIPS}): could not read the quota")
               for line in reported)
    tally = [[s for s, _ in statuses].count(s) for s in (PASS, WARN, FAIL)]
    assert tally == [len(DEFAULT_CHECKS) - 5 - (key != PASS), 5 + (key == WARN), key == FAIL]
    assert reported[-1] == f"preflight: {tally[0]} passed, {tally[1]} warnings, {tally[2]} failed"


# --- names the stack takes in the region -------------------------------------------------------

DEV_CLUSTER = "hybrid-lab-dev"  # the dev stack's derived clusterName
LAB_TAG = {"eks-hybrid-lab:stack": "eks-hybrid-lab/dev"}


def test_the_names_checked_are_the_names_the_program_creates(dev_run):
    needs = lab_needs(dev_run.lab_config)
    assert needs.cluster_name == DEV_CLUSTER
    assert needs.cluster_name == dev_run.one("aws:eks/cluster:Cluster", "cluster-eks-cluster").inputs["name"]
    assert needs.log_group_name == dev_run.named("cluster-eks-logs").inputs["name"]
    assert needs.queue_name == dev_run.named("karpenter-karpenter-interruption").inputs["name"]
    assert dict([needs.owner_tag]) == dev_run.lab_config.lab_tag == LAB_TAG


def plant_named(cluster_tags=None, log_group_tags=None, queue_tags=None) -> None:
    """What another stack (or an old run) left under the dev stack's names; None: not there."""
    account_changes()
    session = CachingSession(region_name=REGION)
    if cluster_tags is not None:
        session.client("eks").create_cluster(
            name=DEV_CLUSTER, roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={}, tags=cluster_tags)
    if log_group_tags is not None:
        session.client("logs").create_log_group(
            logGroupName=f"/aws/eks/{DEV_CLUSTER}/cluster", tags=log_group_tags)
    if queue_tags is not None:
        session.client("sqs").create_queue(QueueName=f"{DEV_CLUSTER}-karpenter", tags=queue_tags)


def test_names_taken_by_another_stack_fail_naming_cluster_name(aws, tmp_path, capsys):
    # Another presenter's stack, and a log group EKS made itself for an old, untagged cluster.
    plant_named(cluster_tags={"eks-hybrid-lab:stack": "eks-hybrid-lab/other"}, log_group_tags={},
                queue_tags={"eks-hybrid-lab:stack": "eks-hybrid-lab/other"})
    code, lines, checks = preflight(tmp_path, capsys)
    assert code == 1
    line = checks["names in the region"]
    assert line.startswith(f"FAIL  names in the region: in {REGION}, ")
    assert (f"the EKS cluster {DEV_CLUSTER} exists and is not this stack's "
            "(eks-hybrid-lab:stack=eks-hybrid-lab/other)") in line
    assert (f"the log group /aws/eks/{DEV_CLUSTER}/cluster exists and is not this stack's "
            "(no eks-hybrid-lab:stack tag)") in line
    assert f"the SQS queue {DEV_CLUSTER}-karpenter exists" in line
    assert line.endswith(f"creating the lab's would fail (clusterName = {DEV_CLUSTER})")
    fix = fix_of(lines, line)
    assert "pulumi config set clusterName <name>" in fix and "hybrid-lab-<stack>" in fix
    assert "python -m ops.leftovers" in fix


def test_one_taken_name_is_enough_to_fail(aws, tmp_path, capsys):
    plant_named(queue_tags={})
    _, _, checks = preflight(tmp_path, capsys)
    line = checks["names in the region"]
    assert line.startswith("FAIL  ") and f"the SQS queue {DEV_CLUSTER}-karpenter exists" in line
    assert "EKS cluster" not in line and "log group" not in line


def test_names_this_stack_already_holds_pass(aws, tmp_path, capsys):
    plant_named(cluster_tags=LAB_TAG, log_group_tags=LAB_TAG, queue_tags=LAB_TAG)
    code, _, checks = preflight(tmp_path, capsys)
    assert code == 0
    assert checks["names in the region"] == (
        f"PASS  names in the region: {DEV_CLUSTER}, /aws/eks/{DEV_CLUSTER}/cluster, "
        f"{DEV_CLUSTER}-karpenter already this stack's (eks-hybrid-lab:stack=eks-hybrid-lab/dev: "
        "an earlier pulumi up)")


def test_free_names_pass(aws, tmp_path, capsys):
    _, _, checks = preflight(tmp_path, capsys)
    assert checks["names in the region"] == (
        f"PASS  names in the region: {DEV_CLUSTER}, /aws/eks/{DEV_CLUSTER}/cluster, "
        f"{DEV_CLUSTER}-karpenter free in {REGION}")


def _needs(**fields) -> LabNeeds:
    return LabNeeds(region=REGION, availability_zone_count=2, instances=(),
                    burst_instance_types=(), burst_cpu_limit=32, **fields)


def test_a_denied_name_lookup_warns():
    session = CachingSession(region_name=REGION)
    eks = session.stubbed("eks", region_name=REGION)
    eks.add_client_error("describe_cluster", service_error_code="AccessDeniedException",
                         http_status_code=403, expected_params={"name": DEV_CLUSTER})
    logs = session.stubbed("logs", region_name=REGION)
    logs.add_response("describe_log_groups", {"logGroups": []},
                      {"logGroupNamePrefix": f"/aws/eks/{DEV_CLUSTER}/cluster"})
    sqs = session.stubbed("sqs", region_name=REGION)
    sqs.add_client_error("get_queue_url", service_error_code="QueueDoesNotExist",
                         http_status_code=400, expected_params={"QueueName": f"{DEV_CLUSTER}-karpenter"})
    for stubber in (eks, logs, sqs):
        stubber.activate()
    check = check_names_free(session, _needs(
        cluster_name=DEV_CLUSTER, log_group_name=f"/aws/eks/{DEV_CLUSTER}/cluster",
        queue_name=f"{DEV_CLUSTER}-karpenter", owner_tag=next(iter(LAB_TAG.items()))))
    assert check.status == WARN
    assert check.detail.startswith("not checked: eks:DescribeCluster is not permitted")
    for stubber in (eks, logs, sqs):
        stubber.assert_no_pending_responses()


# --- the Spot service-linked role -------------------------------------------------------------

def test_spot_role_present_passes(aws, tmp_path, capsys):
    _, _, checks = preflight(tmp_path, capsys)
    assert checks["spot service-linked role"] == (
        f"PASS  spot service-linked role: {SPOT_ROLE} exists (arn:aws:iam::123456789012:role/"
        f"aws-service-role/spot.amazonaws.com/{SPOT_ROLE}): Karpenter can launch spot")


def test_spot_role_missing_warns_with_the_command_that_creates_it(aws, tmp_path, capsys):
    account_changes()
    CachingSession(region_name=REGION).client("iam").delete_role(RoleName=SPOT_ROLE)
    code, lines, checks = preflight(tmp_path, capsys)
    assert code == 0, "a missing role is a WARN: demo 2 still bursts, on on-demand"
    line = checks["spot service-linked role"]
    assert line.startswith(f"WARN  spot service-linked role: {SPOT_ROLE} does not exist")
    assert fix_of(lines, line) == ("      fix: create it once for the account: aws iam "
                                   "create-service-linked-role --aws-service-name spot.amazonaws.com")


def test_spot_role_lookup_denied_warns():
    session = CachingSession(region_name=REGION)
    iam = session.stubbed("iam", region_name=REGION)
    iam.add_client_error("get_role", service_error_code="AccessDenied", http_status_code=403,
                         expected_params={"RoleName": SPOT_ROLE})
    iam.activate()
    check = check_spot_role(session, REGION)
    assert check.status == WARN
    assert check.detail.startswith("not checked: iam:GetRole is not permitted (AccessDenied")
    assert "allow iam:GetRole" in check.fix


# --- adminRoleArns and the deployer -------------------------------------------------------------

DEPLOYER_SESSION = "arn:aws:sts::123456789012:assumed-role/LabAdmin/alice@example.com"
DEPLOYER_ROLE = "arn:aws:iam::123456789012:role/teams/LabAdmin"


def test_the_deployers_role_in_admin_role_arns_fails(aws, tmp_path, capsys):
    session = CachingSession(region_name=REGION)
    sts = session.stubbed("sts", region_name=REGION)
    sts.add_response("get_caller_identity", {"UserId": "AROAEXAMPLE:alice", "Account": "123456789012",
                                             "Arn": DEPLOYER_SESSION})
    sts.activate()
    stub_quotas(session, REGION, ROOMY)
    code, lines, checks = preflight(
        tmp_path, capsys, session=session,
        adminRoleArns=["arn:aws:iam::123456789012:role/Auditor", DEPLOYER_ROLE])
    assert code == 1
    line = checks["admin access entries"]
    assert line == (f"FAIL  admin access entries: adminRoleArns item {DEPLOYER_ROLE} is the role "
                    f"you deploy as ({DEPLOYER_SESSION}): the cluster already makes its creator an "
                    "admin, and a second access entry for the same role fails")
    assert "pulumi config rm --path 'adminRoleArns[1]'" in fix_of(lines, line)


@pytest.mark.parametrize("caller,roles,status", [
    (DEPLOYER_SESSION, (), PASS),
    (DEPLOYER_SESSION, ("arn:aws:iam::123456789012:role/Auditor",), PASS),
    ("arn:aws:iam::123456789012:user/alice", (DEPLOYER_ROLE,), PASS),
    (DEPLOYER_SESSION, (DEPLOYER_ROLE,), FAIL),
])
def test_admin_roles(caller, roles, status):
    assert check_admin_roles(caller, _needs(admin_role_arns=roles)).status == status


def test_a_stack_file_is_checked_as_the_stack_its_name_gives(aws, tmp_path, capsys):
    """Pulumi.prod.yaml is the prod stack's file: its derived names (the cluster is
    hybrid-lab-<stack>) are the ones to look up, not the default dev stack's."""
    prod = tmp_path / "Pulumi.prod.yaml"
    stack_file(tmp_path).rename(prod)
    session = CachingSession(region_name=REGION)
    stubber = stub_quotas(session, REGION, ROOMY)
    which, run = fake_tools()
    main(["--stack-file", str(prod)], session=session, which=which, run=run)
    stubber.assert_no_pending_responses()
    out = capsys.readouterr().out
    assert out.startswith(f"eks-hybrid-lab preflight for stack 'prod' in {REGION}")
    assert "hybrid-lab-prod, /aws/eks/hybrid-lab-prod/cluster, hybrid-lab-prod-karpenter" in out


# --- the stack's SSM hybrid activation ----------------------------------------------------------

DEV_ACTIVATION = "hybrid-lab-dev-hybrid-nodes"  # the program's name for it (test_hybrid.py)
ACTIVATION_ID = "3f1c2a7e-5b8d-4c21-9e0f-6a7b8c9d0e1f"
GENERATION_FIX = ("pulumi config set activationGeneration 2 (a new activation with 6 "
                  "registrations; every hybrid host is replaced)")


def test_no_activation_yet_says_what_the_first_up_registers(aws, tmp_path, capsys):
    _, _, checks = preflight(tmp_path, capsys)
    assert checks["hybrid activation"] == (
        f"PASS  hybrid activation: {DEV_ACTIVATION}: none yet in {REGION}; the first pulumi up "
        "creates it with 6 registrations and registers 2 hosts, leaving 4")


def test_the_activation_reports_used_limit_and_left(aws, tmp_path, capsys):
    ACTIVATIONS.table.add(ACTIVATION_ID, DEV_ACTIVATION, limit=6, count=2, tags=LAB_TAG)
    # Another stack's activation of the same name, and one of another name: not this stack's.
    ACTIVATIONS.table.add("9d8c7b6a-0f1e-4d2c-8b3a-1e2f3a4b5c6d", DEV_ACTIVATION, limit=6,
                          count=6, tags={"eks-hybrid-lab:stack": "eks-hybrid-lab/prod"})
    ACTIVATIONS.table.add("0a0b0c0d-0f1e-4d2c-8b3a-1e2f3a4b5c6d", "other", limit=1, count=1)
    code, _, checks = preflight(tmp_path, capsys, gpuEnabled=True)
    assert code == 0
    assert checks["hybrid activation"] == (
        f"PASS  hybrid activation: {DEV_ACTIVATION} ({ACTIVATION_ID}): 2 of 6 registrations "
        "used, 4 left for 3 hosts")
    assert ACTIVATIONS.table.calls == [{"Filters": [
        {"FilterKey": "DefaultInstanceName", "FilterValues": [DEV_ACTIVATION]}]}]


def test_fewer_left_than_hosts_warns_with_the_command_for_a_new_activation(aws, tmp_path, capsys):
    # Two hosts: the first up and one edit of the join script made 4; one more deregistered
    # nothing back; 1 left.
    ACTIVATIONS.table.add(ACTIVATION_ID, DEV_ACTIVATION, limit=6, count=5, tags=LAB_TAG)
    code, lines, checks = preflight(tmp_path, capsys)
    assert code == 0
    line = checks["hybrid activation"]
    assert line == (f"WARN  hybrid activation: {DEV_ACTIVATION} ({ACTIVATION_ID}): 5 of 6 "
                    "registrations used, 1 left for 2 hosts: a change that replaces every host "
                    "(an edit of the join script, a new Kubernetes version) stops at preview")
    assert fix_of(lines, line) == f"      fix: {GENERATION_FIX}"


def test_an_expired_activation_warns(aws, tmp_path, capsys):
    ACTIVATIONS.table.add(ACTIVATION_ID, DEV_ACTIVATION, limit=6, count=2, expired=True,
                          tags=LAB_TAG)
    _, lines, checks = preflight(tmp_path, capsys)
    assert checks["hybrid activation"].startswith("WARN  hybrid activation: ")
    assert "it has EXPIRED: no host can register with it" in checks["hybrid activation"]
    assert fix_of(lines, checks["hybrid activation"]) == f"      fix: {GENERATION_FIX}"


def test_a_denied_activation_lookup_warns(aws, tmp_path, capsys):
    ACTIVATIONS.table.failures = ["AccessDeniedException"]
    code, _, checks = preflight(tmp_path, capsys)
    assert code == 0
    assert checks["hybrid activation"] == (
        "WARN  hybrid activation: not checked: ssm:DescribeActivations failed "
        "(AccessDeniedException: AccessDeniedException (stand-in))")


def test_the_activation_checked_is_the_one_the_program_creates(dev_run):
    from ops.preflight.activation import activation_need

    need = activation_need(dev_run.lab_config)
    [activation] = dev_run.of_type("aws:ssm/activation:Activation")
    assert need.name == activation.inputs["name"] == DEV_ACTIVATION
    assert need.limit == activation.inputs["registrationLimit"]
    hosts = [r for r in dev_run.of_type("aws:ec2/instance:Instance")
             if r.name.startswith("hybrid-hosts-")]
    assert need.hosts == len(hosts)
