"""Gateway layer: the route policy is scoped to exactly the gateway's route tables, the gateway
nodes turn off source/dest check, VXLAN is open both ways and no wider, the Helm values match
the config, and destroy removes the release before the route cleanup."""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import re
import subprocess

import pytest

from components.hybrid_gateway import gateway_node_user_data
from offline.runner import ProgramRun, Registration
from tests.conftest import NODE_TYPES
from tests.test_user_data import SHELLCHECK

RELEASE = "kubernetes:helm.sh/v3:Release"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ROUTE_CLEANUP = "pulumi-python:dynamic/cleanup:GatewayRoutes"
ROUTE_WRITES = {"ec2:CreateRoute", "ec2:ReplaceRoute"}


def named(run: ProgramRun, name: str) -> Registration:
    return run.named(name)


def release(run: ProgramRun) -> Registration:
    return named(run, "gateway-gateway-release")


def route_policy(run: ProgramRun) -> dict:
    return json.loads(named(run, "gateway-gateway-routes-routes").inputs["policy"])


def listed_route_table_ids(run: ProgramRun) -> list[str]:
    return release(run).inputs["values"]["routeTableIDs"].split(",")


def _actions(statement: dict) -> set[str]:
    actions = statement["Action"]
    return {actions} if isinstance(actions, str) else set(actions)


def _resources(statement: dict) -> list[str]:
    resources = statement["Resource"]
    return [resources] if isinstance(resources, str) else list(resources)


def _may_write_routes(statement: dict) -> bool:
    """Whether any action pattern of the statement (IAM wildcards included) matches a route
    write."""
    return any(fnmatch.fnmatchcase(write.lower(), action.lower())
               for action in _actions(statement) for write in ROUTE_WRITES)


def test_route_writes_only_on_the_listed_route_tables(dev_run):
    policy = route_policy(dev_run)
    expected = {f"arn:aws:ec2:ap-northeast-2:111122223333:route-table/{rtb}"
                for rtb in listed_route_table_ids(dev_run)}
    writers = [s for s in policy["Statement"] if s["Effect"] == "Allow" and _may_write_routes(s)]
    assert writers, "the policy must let the gateway write its route"
    for statement in writers:
        assert _actions(statement) == ROUTE_WRITES
        assert set(_resources(statement)) == expected
        assert "*" not in "".join(_resources(statement))
    # Exactly the cloud private route tables: where nodes, pods and control-plane ENIs live.
    private_rt = [r for r in dev_run.of_type("aws:ec2/routeTable:RouteTable")
                  if r.name == "network-cloud-private-rt"]
    assert listed_route_table_ids(dev_run) == [private_rt[0].id]


def test_route_policy_reads_only_in_the_region_and_does_nothing_else(dev_run):
    statements = route_policy(dev_run)["Statement"]
    assert len(statements) == 2
    [reads] = [s for s in statements if not _may_write_routes(s)]
    assert _actions(reads) == {"ec2:DescribeRouteTables", "ec2:DescribeInstances"}
    assert reads["Resource"] == "*"
    assert reads["Condition"] == {"StringEquals": {"aws:RequestedRegion": "ap-northeast-2"}}
    # Imported here, as in tests/test_iam.py: parliament loads its IAM catalogue on import
    # (~0.4 s), a cost for each worker's collection even where this test does not run.
    from parliament import analyze_policy_string

    document = named(dev_run, "gateway-gateway-routes-routes").inputs["policy"]
    assert analyze_policy_string(document, include_community_auditors=True).findings == []


def test_route_policy_check_catches_a_wider_policy(dev_run):
    policy = route_policy(dev_run)
    widened = {**policy, "Statement": policy["Statement"] + [
        {"Effect": "Allow", "Action": "ec2:*Route", "Resource": "*"}]}
    writers = [s for s in widened["Statement"] if _may_write_routes(s)]
    assert any(_resources(s) == ["*"] for s in writers)


def test_gateway_role_is_bound_by_pod_identity(dev_run):
    role = named(dev_run, "gateway-gateway-routes-role")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert trust["Statement"] == [{"Effect": "Allow",
                                   "Principal": {"Service": "pods.eks.amazonaws.com"},
                                   "Action": ["sts:AssumeRole", "sts:TagSession"]}]
    association = named(dev_run, "gateway-gateway-pod-identity")
    assert association.inputs["namespace"] == "eks-hybrid-nodes-gateway"
    assert association.inputs["serviceAccount"] == "eks-hybrid-nodes-gateway"
    assert association.inputs["roleArn"] == role.outputs["arn"]
    assert association.inputs["clusterName"] == dev_run.lab_config.cluster_name
    # The chart names its service account after the release.
    assert release(dev_run).inputs["name"] == association.inputs["serviceAccount"]
    assert release(dev_run).inputs["namespace"] == association.inputs["namespace"]


# The second: tests/test_network.py's custom CIDRs, so the two tests share the run.
@pytest.mark.parametrize("overrides", [{}, {"cloudVpcCidr": "192.168.0.0/24", "onPremVpcCidr": "10.20.0.0/16",
                                           "hybridPodCidr": "10.30.0.0/16", "serviceCidr": "10.40.0.0/16"}])
def test_helm_values_match_the_config(lab, overrides):
    run = lab(**overrides)
    inputs = release(run).inputs
    assert inputs["chart"] == "oci://public.ecr.aws/eks/eks-hybrid-nodes-gateway"
    assert inputs["version"] == "1.0.1"
    values = inputs["values"]
    assert values["vpcCIDR"] == run.config["eks-hybrid-lab:cloudVpcCidr"]
    assert values["podCIDRs"] == run.config["eks-hybrid-lab:hybridPodCidr"]
    assert values["autoMode"] == {"enabled": False}
    assert values["nodeLabel"] == "hybrid-gateway-node"
    assert set(values) <= {"vpcCIDR", "podCIDRs", "routeTableIDs", "autoMode", "replicas",
                           "nodeLabel", "image", "podMonitor"}, "a value the chart does not have"


def test_release_waits_for_cilium_identity_nodes_and_its_cleanup(dev_run):
    deps = {dev_run.by_urn[u].name for u in release(dev_run).explicit_dependencies}
    # The association through its propagation wait (tests/test_pod_identity_wait.py).
    assert {"hybrid-cilium-release", "gateway-gateway-pod-identity-ready", "gateway-nodes-group-ng",
            "gateway-gateway-route-cleanup", "cluster-eks-pod-identity-agent"} <= deps


def test_route_cleanup_covers_exactly_the_gateways_tables_and_cidrs(dev_run):
    [cleanup] = dev_run.of_type(ROUTE_CLEANUP)
    assert cleanup.inputs["routeTableIds"] == listed_route_table_ids(dev_run)
    assert cleanup.inputs["podCidrs"] == ["172.17.0.0/16"]
    assert cleanup.inputs["region"] == "ap-northeast-2"
    assert cleanup.inputs["vtepConfigName"] == "hybrid-gateway"
    # Deleted before the route tables it cleans and while the cluster still answers.
    private_rt = [r for r in dev_run.of_type("aws:ec2/routeTable:RouteTable") if r.name == "network-cloud-private-rt"][0]
    eks = dev_run.of_type("aws:eks/cluster:Cluster")[0]
    assert private_rt.urn in cleanup.dependencies and eks.urn in cleanup.dependencies


def test_gateway_nodes(lab):
    run = lab(**NODE_TYPES)
    assert (NODE_TYPES["gatewayInstanceType"], NODE_TYPES["availabilityZoneCount"]) == ("c6in.large", 3)
    group = named(run, "gateway-nodes-group-ng")
    assert group.inputs["instanceTypes"] == ["c6in.large"]
    assert group.inputs["scalingConfig"] == {"desiredSize": 2, "minSize": 2, "maxSize": 2}
    assert group.inputs["labels"] == {"hybrid-gateway-node": "true"}
    assert group.inputs["taints"] == [{"key": "hybrid-gateway-node", "value": "true", "effect": "NO_SCHEDULE"}]
    zones = {s.id: s.inputs["availabilityZone"] for s in run.of_type("aws:ec2/subnet:Subnet")}
    assert len({zones[s] for s in group.inputs["subnetIds"]}) == 2
    template = named(run, "gateway-nodes-group-lt")
    assert template.inputs["metadataOptions"]["httpTokens"] == "required"
    assert template.inputs["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true"
    eks = run.of_type("aws:eks/cluster:Cluster")[0]
    sg = named(run, "gateway-nodes-sg")
    assert set(template.inputs["vpcSecurityGroupIds"]) == {
        eks.outputs["vpcConfig"]["clusterSecurityGroupId"], sg.id}
    deps = {run.by_urn[u].name for u in group.explicit_dependencies}
    assert {"network-cloud-private-default-route", "cluster-vpc-cni"} <= deps


def test_launch_template_turns_off_source_dest_check_on_device_index_0(dev_run):
    import base64
    user_data = base64.b64decode(named(dev_run, "gateway-nodes-group-lt").inputs["userData"]).decode()
    assert "Content-Type: multipart/mixed" in user_data
    assert 'device-number")" = "0"' in user_data
    assert "aws ec2 modify-network-interface-attribute" in user_data
    assert "--no-source-dest-check" in user_data
    assert "net.ipv4.ip_forward = 1" in user_data
    assert "modify-instance-attribute" not in user_data


#: What AWS managed policies grant, from their published documents (AWS Managed Policy
#: reference). AmazonEKS_CNI_Policy v5, the Allow statement on "*".
MANAGED_POLICY_ACTIONS = {
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy": {
        "ec2:AssignPrivateIpAddresses", "ec2:AttachNetworkInterface",
        "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:DescribeInstances",
        "ec2:DescribeTags", "ec2:DescribeNetworkInterfaces", "ec2:DescribeInstanceTypes",
        "ec2:DescribeSubnets", "ec2:DetachNetworkInterface",
        "ec2:ModifyNetworkInterfaceAttribute", "ec2:UnassignPrivateIpAddresses"},
}


def aws_calls(script: str) -> set[str]:
    """The IAM actions of the ``aws <service> <operation>`` commands a script runs."""
    calls = set()
    for service, operation in re.findall(r"^\s*(?:until\s+)?aws (\w+) ([a-z0-9-]+)", script, re.M):
        calls.add(f"{service}:" + "".join(part.capitalize() for part in operation.split("-")))
    return calls


def test_gateway_node_role_grants_what_its_boot_script_calls(dev_run):
    """The boot script turns off source/dest check with the node role's credentials. The
    permission comes from AmazonEKS_CNI_Policy (on every interface); the node role has no
    inline policy of its own, since a VPC-scoped grant of the same action would add nothing."""
    needed = aws_calls(gateway_node_user_data())
    assert needed == {"ec2:ModifyNetworkInterfaceAttribute"}
    role = named(dev_run, "gateway-nodes-group-node-role")
    attached = {a.inputs["policyArn"] for a in dev_run.of_type(ATTACHMENT)
                if a.inputs["role"] == role.outputs["name"]}
    granted = set().union(*(MANAGED_POLICY_ACTIONS.get(arn, set()) for arn in attached))
    assert needed <= granted, f"{needed - granted} is granted by none of {sorted(attached)}"
    inline = [p.name for p in dev_run.of_type("aws:iam/rolePolicy:RolePolicy")
              if p.inputs["role"] == role.outputs["name"]]
    assert inline == []


def test_aws_calls_reads_commands():
    assert aws_calls("until aws ec2 modify-network-interface-attribute --x; do\n"
                     "  aws sts get-caller-identity\n# aws iam delete-role\n") == {
        "ec2:ModifyNetworkInterfaceAttribute", "sts:GetCallerIdentity"}


def test_gateway_node_script_is_valid_bash(tmp_path):
    script = tmp_path / "gateway-node.sh"
    script.write_text(gateway_node_user_data())
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    if SHELLCHECK:
        done = subprocess.run([SHELLCHECK, "-S", "warning", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


def test_vxlan_both_ways_between_gateway_nodes_and_the_server_lan_only(dev_run):
    lan = ipaddress.ip_network(dev_run.outputs["remoteNodeCidr"])
    sg = named(dev_run, "gateway-nodes-sg")
    hosts_sg = named(dev_run, "hybrid-hosts-sg")
    rules = [r for r in dev_run.registrations if dev_run.layer_of(r) == "gateway"
             and r.type.startswith("aws:vpc/securityGroup")]
    described = set()
    for rule in rules:
        i = rule.inputs
        assert (i["ipProtocol"], i["fromPort"], i["toPort"]) == ("udp", 8472, 8472), rule.name
        direction = "in" if rule.type.endswith("IngressRule") else "out"
        target = {sg.id: "gateway", hosts_sg.id: "hosts"}[i["securityGroupId"]]
        described.add((target, direction, i["cidrIpv4"]))
    gateway_subnets = [s.inputs["cidrBlock"] for s in dev_run.of_type("aws:ec2/subnet:Subnet")
                       if s.name in ("network-cloud-private-0", "network-cloud-private-1")]
    assert described == {("gateway", "in", str(lan)), ("gateway", "out", str(lan))} | {
        ("hosts", "in", cidr) for cidr in gateway_subnets}


def test_no_route_to_the_pod_cidr_is_declared(dev_run):
    pods = ipaddress.ip_network("172.17.0.0/16")
    for route in dev_run.of_type("aws:ec2/route:Route"):
        destination = ipaddress.ip_network(route.inputs["destinationCidrBlock"])
        assert destination.prefixlen == 0 or not destination.overlaps(pods), route.name


def test_exports_give_the_presenter_the_demo_1_commands(dev_run):
    outputs = dev_run.outputs
    assert outputs["gatewayNamespace"] == "eks-hybrid-nodes-gateway"
    assert outputs["gatewayLeaseName"] == "hybrid-gateway-leader"
    assert outputs["gatewayRouteTableIds"] == listed_route_table_ids(dev_run)
    commands = outputs["demo1Commands"]
    assert "get lease hybrid-gateway-leader" in commands["leader"]
    assert "cut -d_ -f1" in commands["leader"]
    assert all(rtb in commands["podRoute"] for rtb in listed_route_table_ids(dev_run))
    assert "172.17.0.0/16" in commands["podRoute"]
    assert "delete pod" in commands["failover"]


def test_exports_tell_the_rehearsal_how_to_find_the_gateway_pods_and_nodes(dev_run):
    """`python -m rehearse verify gateway` lists the gateway's pods and nodes by these."""
    outputs = dev_run.outputs
    # The chart's selector label is its name; the release's pods carry it.
    assert outputs["gatewayPodSelector"] == "app.kubernetes.io/name=eks-hybrid-nodes-gateway"
    key, value = outputs["gatewayNodeSelector"].split("=")
    assert release(dev_run).inputs["values"]["nodeLabel"] == key
    assert named(dev_run, "gateway-nodes-group-ng").inputs["labels"] == {key: value}
