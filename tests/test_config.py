"""Config rules: every rule has a failing input, every violation is reported at once, nothing is
registered before validation, and Pulumi.yaml declares exactly the settings the code reads."""

from __future__ import annotations

import ipaddress
import json

import pytest
import yaml

from stacks import config as config_module
from stacks.config import (AVAILABLE_LAYERS, CLUSTER_NAME_MAX, LAYERS, SETTINGS, ConfigError,
                           LabConfig, default_cluster_name, load_config)
from tests.conftest import PROJECT_DIR, lab_config, run_lab
from offline.fake_cloud import ACCOUNT_ID, FakeCloud
from offline.runner import run_program


def load(**raw: str) -> LabConfig:
    return load_config(raw, stack="test", region="ap-northeast-2")


def violations(**raw: str) -> list[config_module.Violation]:
    with pytest.raises(ConfigError) as caught:
        load(**raw)
    return caught.value.violations


def test_defaults_build_a_config():
    cfg = load()
    assert cfg.cluster_name == "hybrid-lab-test"  # derived from the stack's name
    assert cfg.kubernetes_version == "1.35"
    assert cfg.cloud_vpc_cidr == ipaddress.ip_network("10.0.0.0/16")
    assert cfg.admin_cidrs == ()
    assert cfg.gpu_enabled is False
    assert cfg.layers == AVAILABLE_LAYERS
    assert cfg.lab_tag == {"eks-hybrid-lab:stack": "eks-hybrid-lab/test"}


def test_values_are_parsed_from_pulumi_strings():
    cfg = load(availabilityZoneCount="3", gpuEnabled="true", hybridNodeCount="4",
               adminCidrs='["198.51.100.0/24", "203.0.113.7/32"]', burstCpuLimit="64")
    assert cfg.availability_zone_count == 3
    assert cfg.gpu_enabled is True
    assert cfg.hybrid_node_count == 4
    assert cfg.burst_cpu_limit == 64
    assert [str(n) for n in cfg.admin_cidrs] == ["198.51.100.0/24", "203.0.113.7/32"]


def test_config_is_frozen():
    cfg = load()
    with pytest.raises(AttributeError):
        cfg.cluster_name = "other"  # type: ignore[misc]


# One failing input per rule: (key, value, words the rule must say).
BAD_VALUES = [
    ("upToLayer", "everything", "must be one of network, cluster, hybrid, gateway, karpenter, demo"),
    # Empty is the declared default ("derive it"); blank is not a name.
    ("clusterName", " ", "1-100 characters"),
    ("clusterName", "-starts-with-hyphen", "starting with a letter or digit"),
    ("clusterName", "has.dot", "letters, digits, hyphens and underscores"),
    ("clusterName", "x" * 101, "1-100 characters"),
    ("clusterName", "x" * 71, "at most 70 characters: the Karpenter interruption queue"),
    ("kubernetesVersion", "1.29", "one of 1.32, 1.33, 1.34, 1.35, 1.36"),
    ("kubernetesVersion", "1.99", "the versions EKS offers"),
    # Offered, but past standard support (1.32 ended 2026-03-23): extended support billing.
    ("kubernetesVersion", "1.32", "EKS standard support for 1.32 ended on 2026-03-23"),
    ("kubernetesVersion", "v1.35", "must be 1.<minor>"),
    ("kubernetesVersion", "1.35.2", "must be 1.<minor>"),
    ("availabilityZoneCount", "1", "must be 2 or 3"),
    ("availabilityZoneCount", "4", "must be 2 or 3"),
    ("availabilityZoneCount", "two", "whole number"),
    ("cloudVpcCidr", "8.8.0.0/16", "RFC 1918"),
    ("cloudVpcCidr", "10.0.0.0/8", "/16 to /24"),
    ("cloudVpcCidr", "10.0.0.0/25", "/16 to /24"),
    ("cloudVpcCidr", "10.0.0.1/16", "host bits set; the network is 10.0.0.0/16"),
    ("cloudVpcCidr", "fd00::/48", "IPv4"),
    ("cloudVpcCidr", "not-a-cidr", "IPv4 CIDR"),
    ("onPremVpcCidr", "100.64.0.0/16", "RFC 1918"),
    ("onPremVpcCidr", "172.16.0.0/12", "/16 to /24"),
    ("hybridPodCidr", "100.64.0.0/16", "RFC 1918"),
    ("serviceCidr", "192.168.0.0/25", "/12 to /24"),
    ("serviceCidr", "10.0.0.0/11", "/12 to /24"),
    ("serviceCidr", "1.2.3.0/24", "RFC 1918"),
    ("endpointAccess", "both", "must be one of public, private"),
    ("adminCidrs", "198.51.100.0/24", "must be a list of strings"),
    ("adminCidrs", '["198.51.100.1/24"]', "host bits set"),
    ("adminCidrs", '["2001:db8::/32"]', "IPv4"),
    ("adminCidrs", '[42]', "must be a list of strings"),
    ("adminRoleArns", '["arn:aws:iam::123456789012:user/alice"]', "is not an IAM role ARN"),
    ("adminRoleArns", '["admin"]', "is not an IAM role ARN"),
    ("adminRoleArns", "arn:aws:iam::123456789012:role/admin", "must be a list of strings"),
    ("logRetentionDays", "8", "must be a CloudWatch retention"),
    ("logRetentionDays", "0", "must be a CloudWatch retention"),
    ("activationGeneration", "0", "must be at least 1"),
    ("hybridNodeCount", "0", "must be from 1 to 10"),
    ("hybridNodeCount", "11", "must be from 1 to 10"),
    ("hybridNodeInstanceType", "m5 xlarge", "EC2 instance type name"),
    ("gpuEnabled", "yes", "true or false"),
    ("gpuInstanceType", "G6.XLARGE", "EC2 instance type name"),
    ("systemNodeInstanceType", "large", "EC2 instance type name"),
    ("gatewayInstanceType", "m6i.", "EC2 instance type name"),
    ("karpenterVersion", "v1.15.0", "without the leading v"),
    ("karpenterVersion", "1.15", "MAJOR.MINOR.PATCH"),
    ("karpenterVersion", "0.37.0", "1.0.0 or later"),
    ("burstScenario", "D", "must be one of A, B, C"),
    ("burstCpuLimit", "3", "at least 4"),
    ("burstReplicas", "-1", "must be from 0 to 50"),
    ("burstReplicas", "51", "must be from 0 to 50"),
    ("priceOverrides", '["natGateway"]', "is not key=usd"),
    ("priceOverrides", '["ec2.m5.xlarge=-1"]', "is not key=usd"),
    ("gpuModel", "llama", "Hugging Face model id"),
    ("gpuModel", "org/model name", "Hugging Face model id"),
]


@pytest.mark.parametrize("key,value,rule", BAD_VALUES, ids=[f"{k}={v[:20]}" for k, v, _ in BAD_VALUES])
def test_each_rule_rejects_a_bad_value(key, value, rule):
    found = violations(**{key: value})
    assert [v.key for v in found] == [key]
    message = str(found[0])
    assert rule in message
    assert f"{key} = {_shown(key, value)}: " in message, "the error names the key and the value"


def _shown(key: str, value: str) -> str:
    """A number, boolean or list setting's text as a stack file writes it (unquoted), any
    other text quoted."""
    try:
        json.loads(value)
    except ValueError:
        return json.dumps(value)
    return value if config_module.SETTINGS_BY_KEY[key].type != "string" else json.dumps(value)


def test_every_setting_has_a_failing_input():
    tested = {key for key, _, _ in BAD_VALUES}
    assert tested == {s.key for s in SETTINGS}


GOOD_VALUES = [
    ("clusterName", "a"), ("clusterName", "Lab_2-x"), ("clusterName", "9" * 70),
    ("kubernetesVersion", "1.35"), ("kubernetesVersion", "1.36"),
    ("hybridNodeInstanceType", "m7i-flex.large"), ("gatewayInstanceType", "u-6tb1.metal"),
    ("gpuInstanceType", "p4d.24xlarge"), ("systemNodeInstanceType", "m8g.metal-24xl"),
    ("karpenterVersion", "1.15.1"), ("cloudVpcCidr", "192.168.10.0/24"),
    ("hybridPodCidr", "192.168.0.0/16"), ("serviceCidr", "10.96.0.0/12"),
    ("endpointAccess", "private"), ("upToLayer", AVAILABLE_LAYERS[-1]), ("burstScenario", "C"),
    ("adminRoleArns", '["arn:aws:iam::123456789012:role/platform/Admin+1"]'),
    ("logRetentionDays", "3653"), ("activationGeneration", "7"),
]


@pytest.mark.parametrize("key,value", GOOD_VALUES)
def test_rules_accept_valid_values(key, value):
    load(**{key: value})


OVERLAPS = [
    ({"onPremVpcCidr": "10.0.128.0/20"}, "onPremVpcCidr", "cloudVpcCidr"),
    ({"hybridPodCidr": "10.0.0.0/8"}, "hybridPodCidr", "cloudVpcCidr"),
    ({"hybridPodCidr": "172.16.4.0/24"}, "hybridPodCidr", "onPremVpcCidr"),
    ({"serviceCidr": "10.0.0.0/16"}, "serviceCidr", "cloudVpcCidr"),
    ({"serviceCidr": "172.16.0.0/16"}, "serviceCidr", "onPremVpcCidr"),
    ({"serviceCidr": "172.17.0.0/16"}, "serviceCidr", "hybridPodCidr"),
]


@pytest.mark.parametrize("raw,key,other", OVERLAPS)
def test_networks_must_not_overlap(raw, key, other):
    found = violations(**raw)
    assert [(v.key, v.rule.split(" (")[0]) for v in found] == [(key, f"must not overlap {other}")]


@pytest.mark.parametrize("pods,nodes,gpu,ok", [
    ("10.99.0.0/24", "2", "false", True),    # two /25 blocks for two hosts
    ("10.99.0.0/24", "2", "true", False),    # the GPU host needs a third
    ("10.99.0.0/23", "2", "true", True),
    ("10.99.0.0/25", "1", "false", True),
    ("10.99.0.0/26", "1", "false", False),   # smaller than one node's block
])
def test_pod_cidr_must_hold_a_cilium_block_per_host(pods, nodes, gpu, ok):
    raw = {"hybridPodCidr": pods, "hybridNodeCount": nodes, "gpuEnabled": gpu}
    if ok:
        load(**raw)
    else:
        [found] = violations(**raw)
        assert found.key == "hybridPodCidr"
        assert "must hold a /25 pod block for each of the" in found.rule


@pytest.mark.parametrize("version", ["1.14.1", "1.9.0", "1.0.0"])
def test_scenario_c_needs_the_karpenter_with_its_feature_gate(version):
    """Defect 8: podDeletionCostManagement exists from Karpenter 1.15.0; an older chart ignores
    the setting and scenario C silently runs as B."""
    [found] = violations(burstScenario="C", karpenterVersion=version)
    assert found.key == "burstScenario"
    message = str(found)
    assert message.startswith('burstScenario = "C": ')
    assert "karpenterVersion 1.15.0 or later" in message and f"karpenterVersion is {version}" in message


@pytest.mark.parametrize("scenario,version", [("C", "1.15.0"), ("C", "1.15.1"), ("C", "1.16.0"),
                                              ("C", "2.0.0"), ("B", "1.14.1"), ("A", "1.0.0")])
def test_scenario_c_with_a_recent_karpenter_and_a_or_b_with_any(scenario, version):
    assert load(burstScenario=scenario, karpenterVersion=version).burst_scenario == scenario


def test_scenario_c_with_an_old_karpenter_registers_nothing():
    with pytest.raises(ConfigError) as caught:
        run_program(lab_config(burstScenario="C", karpenterVersion="1.14.1"))
    assert [v.key for v in caught.value.violations] == ["burstScenario"]
    assert caught.value.registrations == []


@pytest.mark.parametrize("instance_type", ["m5.metal", "x2idn.xlarge", "t3.nano"])
def test_hybrid_hosts_must_be_a_size_the_capacity_model_knows(instance_type):
    """Demo 2 sizes its burst pods from the hybrid hosts' CPU: an unknown size cannot be sized,
    and that must stop the run before the first resource, not when the demo layer registers."""
    [found] = violations(hybridNodeInstanceType=instance_type)
    assert found.key == "hybridNodeInstanceType"
    assert "four burst pods per host" in found.rule


@pytest.mark.parametrize("instance_type,ok", [("g6.xlarge", True), ("g5.2xlarge", True),
                                              ("m5.xlarge", False), ("p9.large", False)])
def test_the_gpu_host_must_have_a_gpu(instance_type, ok):
    if ok:
        assert load(gpuEnabled="true", gpuInstanceType=instance_type).gpu_instance_type == instance_type
        return
    [found] = violations(gpuEnabled="true", gpuInstanceType=instance_type)
    assert found.key == "gpuInstanceType" and "one GPU" in found.rule
    # Off, the setting is not used.
    assert load(gpuEnabled="false", gpuInstanceType=instance_type)


def test_an_unknown_host_size_registers_nothing():
    with pytest.raises(ConfigError) as caught:
        run_program(lab_config(hybridNodeInstanceType="m5.metal"))
    assert [v.key for v in caught.value.violations] == ["hybridNodeInstanceType"]
    assert caught.value.registrations == []


def test_all_violations_are_reported_at_once():
    found = violations(clusterName="bad name", hybridNodeCount="0", burstScenario="Z",
                       gpuEnabled="maybe")
    assert {v.key for v in found} == {"clusterName", "hybridNodeCount", "burstScenario", "gpuEnabled"}
    message = str(ConfigError(found))
    assert message.startswith("invalid configuration (4 problems); nothing was created")


def test_unknown_key_is_an_error_with_a_suggestion():
    found = violations(clusterNmae="lab")
    assert len(found) == 1
    assert found[0].key == "eks-hybrid-lab:clusterNmae"
    assert "did you mean clusterName?" in found[0].rule


def test_region_is_required():
    with pytest.raises(ConfigError) as caught:
        load_config({}, stack="test", region=None)
    assert "aws:region" in str(caught.value)
    assert "pulumi config set aws:region" in str(caught.value)


def test_unbuilt_layer_is_a_clear_error():
    unbuilt = [layer for layer in LAYERS if layer not in AVAILABLE_LAYERS]
    if not unbuilt:
        pytest.skip("every layer is built")
    found = violations(upToLayer=unbuilt[-1])
    assert found[0].key == "upToLayer"
    assert "this version builds only the layers" in found[0].rule


def test_invalid_config_registers_nothing():
    with pytest.raises(ConfigError) as caught:
        run_program(lab_config(hybridNodeCount=0, cloudVpcCidr="8.8.8.0/24"))
    assert {v.key for v in caught.value.violations} == {"hybridNodeCount", "cloudVpcCidr"}
    assert caught.value.registrations == []


def test_too_few_zones_is_reported_before_layers_register():
    # The fake cloud's us-west-1 has two zones EKS can use (usw1-az2 is excluded).
    with pytest.raises(ConfigError) as caught:
        run_program(lab_config(aws_region="us-west-1", availabilityZoneCount=3))
    assert caught.value.violations[0].key == "availabilityZoneCount"
    assert "offers only 2 zone(s)" in str(caught.value)
    assert [r.type for r in caught.value.registrations] == ["pulumi:providers:aws"]


# --- clusterName defaults per stack ----------------------------------------------------------------

@pytest.mark.parametrize("stack,expected", [
    ("dev", "hybrid-lab-dev"),
    ("alice", "hybrid-lab-alice"),
    # Pulumi stack names may hold dots; EKS names may not.
    ("team.alice", "hybrid-lab-team-alice"),
    ("v1..2_x", "hybrid-lab-v1-2_x"),
    ("s" * 100, ("hybrid-lab-" + "s" * 100)[:CLUSTER_NAME_MAX]),
])
def test_cluster_name_defaults_to_a_valid_name_per_stack(stack, expected):
    assert default_cluster_name(stack) == expected
    cfg = load_config({}, stack=stack, region="ap-northeast-2")
    assert cfg.cluster_name == expected
    # The derived name passes the rule an explicit one must pass.
    assert load_config({"clusterName": expected}, stack="other", region="ap-northeast-2").cluster_name == expected


def test_the_dev_stack_cluster_is_hybrid_lab_dev(dev_run):
    # The dev stack leaves the key out; the CLI hands the program Pulumi.yaml's empty default.
    assert "eks-hybrid-lab:clusterName" not in yaml.safe_load(
        (PROJECT_DIR / "Pulumi.dev.yaml").read_text())["config"]
    assert dev_run.config["eks-hybrid-lab:clusterName"] == ""
    assert dev_run.one("aws:eks/cluster:Cluster", "cluster-eks-cluster").inputs["name"] == "hybrid-lab-dev"


def test_an_explicit_cluster_name_wins_over_the_derived_one():
    assert load(clusterName="shared-lab").cluster_name == "shared-lab"


def test_two_stacks_name_what_is_unique_in_a_region_differently():
    """Two presenters' stacks in one account and region: the cluster, the interruption queue,
    the activation and the control-plane log group must not share a name."""
    def names(run) -> set[str]:
        return {run.one("aws:eks/cluster:Cluster", "cluster-eks-cluster").inputs["name"],
                run.named("karpenter-karpenter-interruption").inputs["name"],
                run.named("hybrid-activation-ssm").inputs["name"],
                run.named("cluster-eks-logs").inputs["name"]}

    alice = names(run_program(lab_config(clusterName=None), stack="alice"))
    # The other stack is the dev stack as its file has it (clusterName left to its default):
    # the run the suite shares.
    dev = names(run_lab())
    assert alice == {"hybrid-lab-alice", "hybrid-lab-alice-karpenter",
                     "hybrid-lab-alice-hybrid-nodes", "/aws/eks/hybrid-lab-alice/cluster"}
    assert dev == {"hybrid-lab-dev", "hybrid-lab-dev-karpenter",
                   "hybrid-lab-dev-hybrid-nodes", "/aws/eks/hybrid-lab-dev/cluster"}
    assert not alice & dev


# --- adminRoleArns must not hold the deployer's own role ------------------------------------------

DEPLOYER_ROLE_SESSION = f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/LabAdmin/alice@example.com"
DEPLOYER_ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/teams/LabAdmin"
OTHER_ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/Auditor"


def as_assumed_role() -> FakeCloud:
    return FakeCloud(region="ap-northeast-2", caller_arn=DEPLOYER_ROLE_SESSION)


def test_the_deployers_own_role_in_admin_role_arns_is_refused_before_anything_registers():
    """EKS already gives the cluster's creator an admin access entry; a second one for the same
    role fails, after the cluster took minutes to create. The deployer's session ARN drops the
    role's path, so the roles are compared by account and name."""
    with pytest.raises(ConfigError) as caught:
        run_program(lab_config(adminRoleArns=[OTHER_ROLE, DEPLOYER_ROLE]), cloud=as_assumed_role())
    [found] = caught.value.violations
    assert (found.key, found.value) == ("adminRoleArns", DEPLOYER_ROLE)
    assert str(found).startswith(
        f'adminRoleArns = "{DEPLOYER_ROLE}": is the role pulumi up runs as ({DEPLOYER_ROLE_SESSION})')
    assert "remove this item" in str(found)
    # Only the provider, which is not a cloud resource, was registered.
    assert [r.type for r in caught.value.registrations] == ["pulumi:providers:aws"]


def test_admin_roles_other_than_the_deployers_are_given_access_entries():
    run = run_program(lab_config(adminRoleArns=[OTHER_ROLE], upToLayer="cluster"),
                      cloud=as_assumed_role())
    entries = run.of_type("aws:eks/accessEntry:AccessEntry")
    assert [e.inputs["principalArn"] for e in entries] == [OTHER_ROLE]


def test_the_fake_cloud_deploys_as_a_user_by_default():
    """The plan and every other test deploy as an IAM user, whom no role ARN can match."""
    assert FakeCloud(region="ap-northeast-2").caller_arn == f"arn:aws:iam::{ACCOUNT_ID}:user/lab-deployer"
    run_program(lab_config(adminRoleArns=[DEPLOYER_ROLE], upToLayer="network"))


# --- Pulumi.yaml and the dev stack stay in step with SETTINGS -----------------------------------

def _project_config() -> dict:
    return yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())["config"]


def test_pulumi_yaml_declares_every_setting_with_type_default_and_description():
    declared = _project_config()
    assert list(declared) == [s.key for s in SETTINGS]
    for setting in SETTINGS:
        entry = declared[setting.key]
        assert entry["type"] == setting.type, setting.key
        # Every key has a default: a project key without one is required by the Pulumi CLI
        # (tests/test_pulumi_cli.py). A stack-derived one is declared empty, and the
        # description says what the program makes of that.
        assert entry["default"] == setting.default, setting.key
        if setting.derived_default:
            assert setting.default == "", setting.key
            assert setting.derived_default in entry["description"], setting.key
        assert entry["description"] == setting.description, setting.key
        if setting.type == "array":
            assert entry["items"] == {"type": "string"}


def test_pulumi_yaml_project_and_runtime():
    project = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())
    assert project["name"] == "eks-hybrid-lab"
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"]["virtualenv"] == "venv"
    assert project["description"]


def test_dev_stack_writes_out_every_default():
    """Every fixed default is written out; a derived one is left out, so the dev stack gets its
    own (writing hybrid-lab-dev would pin it for every copy of the file)."""
    text = (PROJECT_DIR / "Pulumi.dev.yaml").read_text()
    stack = yaml.safe_load(text)["config"]
    assert stack.pop("aws:region") == "ap-northeast-2"
    assert stack == {f"eks-hybrid-lab:{s.key}": s.default for s in SETTINGS if not s.derived_default}
    for setting in SETTINGS:
        if setting.derived_default:
            assert f"# {setting.key} is left out: it defaults per stack to {setting.derived_default}" in text


def test_the_configuration_page_documents_every_setting_with_its_default():
    readme = (PROJECT_DIR / "docs" / "configuration.md").read_text()
    for setting in SETTINGS:
        if setting.derived_default:
            default = setting.derived_default
        elif isinstance(setting.default, (list, bool)):
            default = json.dumps(setting.default)
        else:
            default = str(setting.default)
        assert f"| `{setting.key}` | {setting.type} | `{default}` |" in readme, setting.key
