"""The lab runs in the aws partition only: a region of any other partition (GovCloud, China, the
isolated regions) is refused before anything is created, with the reason, and every ARN the
program writes is the partition of the regions it accepts (docs/configuration.md#regions)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

from components.aws_account import AwsAccount
from offline import plan as offline_plan
from offline.runner import run_program
from ops.preflight import cli as preflight
from stacks.config import ConfigError, load_config
from tests.conftest import PROJECT_DIR, lab_config, main_in_process

#: One region of each kind the config used to accept, its partition, and words of the reason.
OTHER_PARTITIONS = [
    ("us-gov-west-1", "aws-us-gov", "Amazon EKS Hybrid Nodes isn't available in AWS GovCloud (US)"),
    ("cn-north-1", "aws-cn", "ec2.amazonaws.com.cn"),
    ("us-iso-east-1", "aws-iso", "isolated (ISO) regions"),
]


def _botocore_data(name: str) -> dict:
    """A file of botocore's data folder, read as botocore ships it."""
    spec = importlib.util.find_spec("botocore")
    folder = Path(list(spec.submodule_search_locations)[0]) / "data"
    return json.loads((folder / name).read_text())


def _refusal(region: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config({}, stack="test", region=region)
    return caught.value


@pytest.mark.parametrize("region,partition,why", OTHER_PARTITIONS,
                         ids=[r for r, _, _ in OTHER_PARTITIONS])
def test_a_region_of_another_partition_is_refused_with_the_reason(region, partition, why):
    [found] = _refusal(region).violations
    line = str(found)
    assert line.startswith(f'aws:region = "{region}": is in the {partition} partition; '
                           "the lab runs only in regions of the aws partition: "), line
    assert why in line and "docs/configuration.md#regions" in line
    assert "\n" not in line


@pytest.mark.parametrize("region", [r for r, _, _ in OTHER_PARTITIONS])
def test_a_region_of_another_partition_registers_nothing(region):
    with pytest.raises(ConfigError) as caught:
        run_program(lab_config(aws_region=region))
    assert [v.key for v in caught.value.violations] == ["aws:region"]
    assert caught.value.registrations == []


def test_what_is_not_a_region_is_still_said_so():
    for value in ("Ap-Northeast-2", "mars-1", "ap_northeast_2", "ap-northeast"):
        [found] = _refusal(value).violations
        assert "must be an AWS region such as ap-northeast-2" in found.rule, value


def test_every_region_botocore_knows_is_accepted_exactly_when_it_is_in_the_aws_partition():
    """botocore's endpoint data (another file than the partitions data the rule reads) lists
    each partition's regions: the config accepts a region exactly when it is the aws
    partition's, and accepts every one of those."""
    endpoints = _botocore_data("endpoints.json")["partitions"]
    seen = set()
    for partition in endpoints:
        for region in partition["regions"]:
            seen.add(partition["partition"])
            try:
                load_config({}, stack="test", region=region)
                accepted = True
            except ConfigError as error:
                assert [v.key for v in error.violations] == ["aws:region"], region
                accepted = False
            assert accepted == (partition["partition"] == "aws"), region
    # Not vacuous: the data holds the partitions refused above.
    assert {"aws", "aws-us-gov", "aws-cn", "aws-iso"} <= seen


def test_every_arn_the_program_writes_is_the_partition_of_its_region(dev_run):
    """What makes the aws-only rule the whole rule: the ARNs the program registers (its
    policies, access entries, trust conditions) name the aws partition, the one its region is
    in. An ARN of another partition written anywhere would show here."""
    text = json.dumps([r.inputs for r in dev_run.resources()], default=str)
    partitions = set(re.findall(r"\barn:([a-z-]*):", text))
    assert partitions == {"aws"}
    assert len(re.findall(r"\barn:aws:", text)) > 20


@pytest.mark.parametrize("arn", ["arn:aws-us-gov:iam::123456789012:role/Admin",
                                 "arn:aws-cn:iam::123456789012:role/Admin"])
def test_an_admin_role_of_another_partition_is_refused(arn):
    """IAM is one instance per partition: a role of another partition cannot reach a cluster
    in this one (AWS Fault Isolation Boundaries, "Partitions")."""
    with pytest.raises(ConfigError) as caught:
        load_config({"adminRoleArns": json.dumps([arn])}, stack="test", region="ap-northeast-2")
    [found] = caught.value.violations
    assert found.key == "adminRoleArns"
    assert f'is a role of the {arn.split(":")[1]} partition' in found.rule


def _stack_file_in(tmp_path, region: str) -> Path:
    stack = yaml.safe_load((PROJECT_DIR / "Pulumi.dev.yaml").read_text())
    stack["config"]["aws:region"] = region
    path = tmp_path / "Pulumi.gov.yaml"
    path.write_text(yaml.safe_dump(stack))
    return path


def test_the_plan_refuses_a_govcloud_stack_with_the_reason(tmp_path, capsys, monkeypatch):
    path = _stack_file_in(tmp_path, "us-gov-west-1")
    done = main_in_process(capsys, monkeypatch, "offline.plan", offline_plan.main,
                           "--stack-file", str(path))
    assert done.returncode == 1 and done.stdout == ""
    # The value as the stack file writes it (yaml.safe_dump writes it unquoted).
    assert "aws:region = us-gov-west-1: is in the aws-us-gov partition" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [("--region", "cn-north-1"), ()], ids=["--region", "stack file"])
def test_preflight_refuses_another_partition_before_calling_aws(args, tmp_path, capsys,
                                                                monkeypatch):
    path = _stack_file_in(tmp_path, "us-iso-east-1")
    argv = ("--stack-file", str(path), *args)

    def no_session(*_args, **_kwargs):
        raise AssertionError("preflight made an AWS session for a refused region")

    # The refusal comes before any client: nothing may be sent towards a real endpoint.
    monkeypatch.setattr(AwsAccount, "boto3_session", no_session)
    done = main_in_process(capsys, monkeypatch, "ops.preflight", preflight.main, *argv)
    # --region's value is not the file's, so it is shown as a value; the file's as written.
    shown = '"cn-north-1"' if args else "us-iso-east-1"
    assert done.returncode == 2
    assert f"aws:region = {shown}: is in the aws-" in done.stderr
    assert "Traceback" not in done.stderr
