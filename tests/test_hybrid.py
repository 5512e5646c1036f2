"""Hybrid layer: node role and access entry, the activation and its secret code, the simulated
on-prem hosts, Cilium, the GPU host, and the dependencies that make destroy complete."""

from __future__ import annotations

import datetime
import hashlib
import shlex
import json

import jsonschema
import pytest

from components.expiry import ExpiryProvider
from offline.runner import ProgramRun, Registration, Secret
from tests.conftest import HOST_SETTINGS
from tests.replacement import State, labels_of, steps

INSTANCE = "aws:ec2/instance:Instance"
ACTIVATION = "aws:ssm/activation:Activation"
RELEASE = "kubernetes:helm.sh/v3:Release"
SSM_CLEANUP = "pulumi-python:dynamic/cleanup:SsmRegistrations"
NODE_CLEANUP = "pulumi-python:dynamic/cleanup:HybridNodeObjects"
HOST_TOKEN = "pulumi-python:dynamic/cleanup:HybridHostToken"


def one(run: ProgramRun, type_: str) -> Registration:
    [found] = run.of_type(type_)
    return found


def named(run: ProgramRun, name: str) -> Registration:
    return run.named(name)


def hosts(run: ProgramRun) -> dict[str, Registration]:
    return {r.name: r for r in run.of_type(INSTANCE) if r.name.startswith("hybrid-hosts-")}


def cluster_arn(run: ProgramRun) -> str:
    return one(run, "aws:eks/cluster:Cluster").outputs["arn"]



# --- IAM and access -----------------------------------------------------------------------------

def test_hybrid_node_role_trusts_ssm_of_this_account_and_region_only(dev_run):
    role = named(dev_run, "hybrid-node-role-iam-role")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert trust["Statement"] == [{
        "Effect": "Allow",
        "Principal": {"Service": "ssm.amazonaws.com"},
        "Action": "sts:AssumeRole",
        "Condition": {
            "StringEquals": {"aws:SourceAccount": "111122223333"},
            "ArnLike": {"aws:SourceArn": "arn:aws:ssm:ap-northeast-2:111122223333:*"},
        },
    }]


def test_hybrid_node_role_policies(dev_run):
    attachments = {a.inputs["policyArn"] for a in dev_run.of_type(
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment") if a.name.startswith("hybrid-node-role-")}
    assert attachments == {"arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
                           "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly"}
    policy = json.loads(named(dev_run, "hybrid-node-role-iam-cluster").inputs["policy"])
    statements = {s["Sid"]: s for s in policy["Statement"]}
    arn = cluster_arn(dev_run)
    assert statements["ReadThisCluster"]["Action"] == ["eks:DescribeCluster", "eks:ListAccessEntries"]
    assert statements["ReadThisCluster"]["Resource"] == arn
    deregister = statements["DeregisterOwnRegistration"]
    assert deregister["Action"] == "ssm:DeregisterManagedInstance"
    assert deregister["Condition"] == {"StringEquals": {"ssm:resourceTag/EKSClusterARN": arn}}
    assert deregister["Resource"] == "arn:aws:ssm:ap-northeast-2:111122223333:managed-instance/*"
    assert statements["FindOwnRegistration"]["Action"] == "ssm:DescribeInstanceInformation"
    assert len(statements) == 3


def test_hybrid_linux_access_entry_for_the_node_role(dev_run):
    [entry] = [e for e in dev_run.of_type("aws:eks/accessEntry:AccessEntry") if e.name == "hybrid-node-role-access"]
    assert entry.inputs["type"] == "HYBRID_LINUX"
    assert entry.inputs["principalArn"] == named(dev_run, "hybrid-node-role-iam-role").outputs["arn"]
    assert entry.inputs["clusterName"] == dev_run.lab_config.cluster_name
    assert not dev_run.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")


# --- the activation -----------------------------------------------------------------------------

@pytest.mark.parametrize("nodes,gpu", [(2, False), (3, True), (5, False)])
def test_activation(lab, nodes, gpu):
    run = lab(hybridNodeCount=nodes, gpuEnabled=gpu, **HOST_SETTINGS)
    activation = one(run, ACTIVATION)
    assert activation.inputs["iamRole"] == named(run, "hybrid-node-role-iam-role").outputs["name"]
    # Each host once plus one re-join, with the GPU host's share always reserved.
    assert activation.inputs["registrationLimit"] == 2 * (nodes + 1)
    assert activation.inputs["tags"] == {"EKSClusterARN": cluster_arn(run)}
    assert "activationCode" in activation.additional_secret_outputs
    expiry = one(run, "pulumi-python:dynamic/time:Expiry")
    assert activation.inputs["expirationDate"] == expiry.outputs["expiresAt"]


def test_registration_limit_does_not_change_with_the_gpu_host(lab):
    limits = {one(lab(gpuEnabled=gpu), ACTIVATION).inputs["registrationLimit"] for gpu in (False, True)}
    assert len(limits) == 1


def test_activation_code_never_travels_in_plain_text(lab):
    run = lab(gpuEnabled=True)
    code = one(run, ACTIVATION).outputs["activationCode"]
    assert isinstance(code, str) and len(code) > 10

    def plain_occurrences(value, path="") -> list[str]:
        if isinstance(value, Secret):
            return []
        if isinstance(value, dict):
            return [p for k, v in value.items() for p in plain_occurrences(v, f"{path}.{k}")]
        if isinstance(value, list):
            return [p for i, v in enumerate(value) for p in plain_occurrences(v, f"{path}[{i}]")]
        return [path] if isinstance(value, str) and code in value else []

    leaks = [f"{r.name}{p}" for r in run.registrations for p in plain_occurrences(r.inputs)]
    assert leaks == []
    secret_carriers = [r.name for r in run.registrations
                       if any(isinstance(v, Secret) and code in str(v.value) for v in r.inputs.values())]
    assert sorted(secret_carriers) == sorted(hosts(run))
    for key, value in run.outputs.items():
        assert code not in json.dumps(value, default=str) or key in run.secret_outputs, key


def test_expiry_is_fixed_at_creation_and_renewed_by_generation():
    provider = ExpiryProvider()
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    created = provider.create({"days": 30, "generation": 1, "createdAt": ""})
    made = datetime.datetime.strptime(created.outs["createdAt"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc)
    assert made >= before
    expires = datetime.datetime.strptime(created.outs["expiresAt"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc)
    assert expires - made == datetime.timedelta(days=30)
    same = provider.diff(created.id, created.outs, {"days": 30, "generation": 1, "createdAt": ""})
    assert not same.changes and not same.replaces
    renewed = provider.diff(created.id, created.outs, {"days": 30, "generation": 2, "createdAt": ""})
    assert renewed.changes and renewed.replaces == ["generation"]


def test_the_activation_expiry_leaves_a_margin_below_ssms_30_days(dev_run):
    """SSM refuses an expiry more than 30 days after its own clock; the expiry is computed from
    the deployer's. With the margin, a clock up to an hour fast still passes."""
    from components.hybrid_activation import CLOCK_MARGIN_MINUTES

    [expiry] = dev_run.of_type("pulumi-python:dynamic/time:Expiry")
    assert expiry.inputs["days"] == 30 and expiry.inputs["marginMinutes"] == CLOCK_MARGIN_MINUTES == 60
    fast = datetime.timedelta(minutes=59)
    aws_now = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)
    local = (aws_now + fast).strftime("%Y-%m-%dT%H:%M:%SZ")
    created = ExpiryProvider().create({"days": 30, "generation": 1, "createdAt": local,
                                       "marginMinutes": expiry.inputs["marginMinutes"]})
    expires = datetime.datetime.strptime(created.outs["expiresAt"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc)
    assert expires - aws_now <= datetime.timedelta(days=30), "SSM would refuse this expiry"
    assert expires - aws_now > datetime.timedelta(days=29, hours=23), "the margin is small"


def test_a_margin_change_does_not_replace_an_activation_in_place():
    provider = ExpiryProvider()
    created = provider.create({"days": 30, "generation": 1, "createdAt": "", "marginMinutes": 0})
    later = provider.diff(created.id, created.outs, {"days": 30, "generation": 1, "marginMinutes": 60})
    assert not later.changes and not later.replaces


def test_expired_activation_warns_with_the_setting_that_renews_it(monkeypatch):
    from stacks.layers import hybrid
    warnings = []
    monkeypatch.setattr(hybrid.pulumi.log, "warn", warnings.append)
    hybrid._warn_if_expiring("2020-01-01T00:00:00Z", 3)
    assert len(warnings) == 1
    assert "expired" in warnings[0] and "activationGeneration 4" in warnings[0]
    far = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=10)).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    hybrid._warn_if_expiring(far, 3)
    assert len(warnings) == 1


def test_renewing_the_activation_changes_the_expiry_generation(lab):
    expiry = one(lab(activationGeneration=2), "pulumi-python:dynamic/time:Expiry")
    assert expiry.inputs["generation"] == 2 and expiry.inputs["days"] == 30


# --- hosts --------------------------------------------------------------------------------------

@pytest.mark.parametrize("nodes,gpu", [(1, False), (2, False), (3, True)])
def test_hosts_count_and_types(lab, nodes, gpu):
    run = lab(hybridNodeCount=nodes, gpuEnabled=gpu, **HOST_SETTINGS)
    found = hosts(run)
    expected = {f"hybrid-hosts-node-{i}": "m6i.xlarge" for i in range(nodes)}
    if gpu:
        expected["hybrid-hosts-gpu"] = "g6.2xlarge"
    assert {name: h.inputs["instanceType"] for name, h in found.items()} == expected


def test_hosts_are_built_like_servers(lab):
    run = lab(gpuEnabled=True)
    [lan] = [s for s in run.of_type("aws:ec2/subnet:Subnet") if s.name == "network-onprem-private-0"]
    [sg] = [g for g in run.of_type("aws:ec2/securityGroup:SecurityGroup") if g.name == "hybrid-hosts-sg"]
    for host in hosts(run).values():
        inputs = host.inputs
        assert "iamInstanceProfile" not in inputs
        assert inputs["associatePublicIpAddress"] is False
        assert inputs["subnetId"] == lan.id
        assert inputs["vpcSecurityGroupIds"] == [sg.id]
        assert inputs["metadataOptions"] == {"httpEndpoint": "enabled", "httpTokens": "required",
                                             "httpPutResponseHopLimit": 1}
        disk = inputs["rootBlockDevice"]
        assert disk["encrypted"] is True and disk["volumeType"] == "gp3"
        assert isinstance(inputs["userData"], Secret)
        assert inputs["userDataReplaceOnChange"] is True
        assert host.options["ignoreChanges"] == ["ami"]
        assert inputs["ami"].startswith("ami-")
    assert hosts(run)["hybrid-hosts-gpu"].inputs["rootBlockDevice"]["volumeSize"] >= 100


def test_host_user_data_joins_this_cluster_with_this_activation(dev_run):
    activation = one(dev_run, ACTIVATION)
    for host in hosts(dev_run).values():
        script = host.inputs["userData"].value
        assert f"activationId: {activation.id}" in script
        assert f"activationCode: {activation.outputs['activationCode']}" in script
        assert f"name: {dev_run.lab_config.cluster_name}\n" in script
        assert "region: ap-northeast-2" in script
        assert "KUBERNETES_VERSION='1.35'" in script
        assert "/bin/linux/amd64/nodeadm" in script


def _closure(run: ProgramRun, urns) -> set[str]:
    """``urns`` and everything they wait for, directly or not."""
    seen: set[str] = set()
    todo = list(urns)
    while todo:
        urn = todo.pop()
        if urn not in seen and urn in run.by_urn:
            seen.add(urn)
            todo += run.by_urn[urn].dependencies
    return seen


def test_hosts_depend_on_routes_egress_policies_and_the_registrations_cleanup(dev_run):
    """A host needs the routes to the cluster and the internet, the role's managed policies and
    the activation (whose registrations cleanup must outlive it) — and nothing the cluster
    makes: it boots while EKS creates the control plane, and its join waits for the cluster.
    Its Node cleanup depends on it, not the reverse (it ends the host before deleting the
    Node)."""
    policies = {a.name for a in dev_run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                if a.name.startswith("hybrid-node-role-")}
    assert "hybrid-node-role-iam-AmazonSSMManagedInstanceCore" in policies
    required = {
        "network-transit-to-cloud", "network-transit-to-onprem", "network-transit-cloud-to-onprem",
        "network-transit-onprem-to-cloud", "network-onprem-private-default-route",
        "network-onprem-private-0-rta", "hybrid-activation-registrations", *policies,
    }
    eks = one(dev_run, "aws:eks/cluster:Cluster")
    entry = named(dev_run, "hybrid-node-role-access")
    cleanups = {c.urn for c in dev_run.of_type(NODE_CLEANUP)}
    assert cleanups
    for host in hosts(dev_run).values():
        names = {dev_run.by_urn[u].name for u in host.explicit_dependencies}
        assert required <= names, required - names
        # Not directly, nor through anything it waits for.
        waits_for = _closure(dev_run, host.dependencies)
        assert eks.urn not in waits_for, host.name
        assert entry.urn not in waits_for, host.name
        assert not cleanups & waits_for, host.name


def test_ssm_cleanup_is_scoped_to_the_activation_and_runs_before_it_goes(dev_run):
    cleanup = one(dev_run, SSM_CLEANUP)
    activation = one(dev_run, ACTIVATION)
    assert cleanup.inputs["activationId"] == activation.id
    assert cleanup.inputs["region"] == "ap-northeast-2"
    assert activation.urn in cleanup.dependencies


def test_each_host_has_a_node_cleanup_selecting_exactly_its_node(lab):
    run = lab(gpuEnabled=True)
    activation = one(run, ACTIVATION)
    eks = one(run, "aws:eks/cluster:Cluster")
    entry = named(run, "hybrid-node-role-access")
    [lan] = [s for s in run.of_type("aws:ec2/subnet:Subnet") if s.name == "network-onprem-private-0"]
    cleanups = {c.name: c for c in run.of_type(NODE_CLEANUP)}
    tokens = {t.name: t for t in run.of_type(HOST_TOKEN)}
    assert set(cleanups) == {f"{h}-node" for h in hosts(run)}
    assert set(tokens) == {f"{h}-token" for h in hosts(run)}
    nodes = {name: labels_of(host) for name, host in hosts(run).items()}
    generations = set()
    for name, host in hosts(run).items():
        cleanup, host_token = cleanups[f"{name}-node"], tokens[f"{name}-token"]
        assert cleanup.inputs["clusterName"] == run.lab_config.cluster_name
        assert cleanup.inputs["endpoint"] == eks.outputs["endpoint"]
        # Its SSM registration is deregistered only if it joined through this activation.
        assert cleanup.inputs["activationId"] == activation.id
        assert cleanup.inputs["region"] == "ap-northeast-2"
        # It ends its host: the host's id, and the tag an instance must carry to be ended.
        assert cleanup.inputs["instanceId"] == host.id
        assert cleanup.property_dependencies["instanceId"] == [host.urn]
        assert (cleanup.inputs["hostTagKey"], cleanup.inputs["hostTagValue"]) == \
            next(iter(run.lab_config.lab_tag.items()))
        assert host.inputs["tags"][cleanup.inputs["hostTagKey"]] == cleanup.inputs["hostTagValue"]
        # It outlives what it needs until it has ended its host: the access entry, the cluster.
        assert {host.urn, entry.urn, eks.urn} <= set(cleanup.dependencies)
        identity = dict(term.split("=") for term in cleanup.inputs["labelSelector"].split(","))
        assert identity == {"eks-hybrid-lab.io/stack": "eks-hybrid-lab.dev",
                            "eks-hybrid-lab.io/host": name.removeprefix("hybrid-hosts-")}
        # What its delete selects: this stack, this host, the token of its HostToken — which
        # only the Node of a host booted with it carries — and its own instance's id.
        token = host_token.outputs["token"]
        assert len(token) == 32
        assert cleanup.inputs["token"] == token
        assert cleanup.property_dependencies["token"] == [host_token.urn]
        assert host_token.urn in host.property_dependencies["userData"]
        selector = dict(term.split("=") for term in cleanup.outputs["nodeSelector"].split(","))
        assert selector == {**identity, "eks-hybrid-lab.io/cleanup": token,
                            "eks-hybrid-lab.io/instance": host.id}
        # Exactly its host's Node: the labels that host's kubelet registers with, no other's.
        assert [n for n, labels in nodes.items() if selector.items() <= labels.items()] == [name]
        # The generation, which replaces the token with its host, is what the host boots
        # with: its user data without the activation code and the token, and its subnet.
        script = host.inputs["userData"].value
        generation = host_token.inputs["generation"]
        booted = script.replace(f",eks-hybrid-lab.io/cleanup={token}", "").replace(
            f"activationCode: {activation.outputs['activationCode']}", "activationCode: ''").replace(
            f"ACTIVATION_CODE={shlex.quote(activation.outputs['activationCode'])}\n",
            "ACTIVATION_CODE=''\n")
        digest = hashlib.sha256(booted.encode())
        digest.update(f"\0subnet_id={lan.id}".encode())
        assert generation == digest.hexdigest()[:12]
        generations.add(generation)
        assert cleanup.urn not in _closure(run, host.dependencies)
    assert len(generations) == len(hosts(run))
    assert run.outputs["hybridNodeSelector"] == "eks-hybrid-lab.io/stack=eks-hybrid-lab.dev"


def test_switching_the_gpu_host_off_deletes_only_its_node(lab):
    with_gpu, without = lab(gpuEnabled=True), lab(gpuEnabled=False)
    removed = {r.urn for r in with_gpu.resources()} - {r.urn for r in without.resources()}
    names = {with_gpu.by_urn[u].name for u in removed}
    assert {"hybrid-hosts-gpu", "hybrid-hosts-gpu-node"} <= names
    assert not any(n.startswith("hybrid-hosts-node-") for n in names)
    # The activation (and so the other hosts) stays.
    assert one(with_gpu, ACTIVATION).inputs == one(without, ACTIVATION).inputs


def test_hosts_security_group_rules(dev_run):
    [sg] = [g for g in dev_run.of_type("aws:ec2/securityGroup:SecurityGroup") if g.name == "hybrid-hosts-sg"]
    ingress = [r for r in dev_run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
               if r.inputs["securityGroupId"] == sg.id]
    from_cloud = {(r.inputs["ipProtocol"], r.inputs["fromPort"], r.inputs["toPort"])
                  for r in ingress if r.inputs.get("cidrIpv4") == "10.0.0.0/16"}
    assert from_cloud == {("tcp", 10250, 10250), ("tcp", 9443, 9443)}
    from_self = [r for r in ingress if r.inputs.get("referencedSecurityGroupId") == sg.id]
    assert len(from_self) == 1 and from_self[0].inputs["ipProtocol"] == "-1"
    # VXLAN from the gateway nodes is the gateway layer's, and only when it is built.
    hybrid_layer_rules = [r for r in ingress if dev_run.layer_of(r) == "hybrid"]
    assert len(hybrid_layer_rules) == 3


# --- Cilium and the GPU host --------------------------------------------------------------------

# The value paths this lab sets and their types in the Cilium chart's values.schema.json
# (cilium/cilium install/kubernetes/cilium/values.schema.json; the schema has no
# additionalProperties, so it is also checked here that nothing else is set).
# loadBalancer.serviceTopology is not in that schema but is a documented value
# (kube-proxy-free guide; the EKS hybrid nodes guide sets it) and is allowed explicitly.
CILIUM_VALUES_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["affinity", "ipam", "routingMode", "tunnelProtocol", "MTU", "vtep", "l7Proxy",
                 "operator"],
    "properties": {
        "affinity": {"type": "object"},
        "tolerations": {"type": "array"},
        "ipam": {"type": "object", "additionalProperties": False, "properties": {
            "mode": {"const": "cluster-pool"},
            "operator": {"type": "object", "additionalProperties": False, "properties": {
                "clusterPoolIPv4PodCIDRList": {"type": "array", "items": {"type": "string"}},
                "clusterPoolIPv4MaskSize": {"type": "integer"},
            }},
        }},
        "routingMode": {"const": "tunnel"},
        "tunnelProtocol": {"const": "vxlan"},
        # A Transit Gateway drops packets over 8500 bytes; VXLAN adds 50 to what pods send.
        "MTU": {"type": "integer", "minimum": 1280, "maximum": 8500 - 50},
        "vtep": {"type": "object", "additionalProperties": False,
                 "properties": {"enabled": {"const": True}}},
        "l7Proxy": {"const": False},
        "envoy": {"type": "object", "additionalProperties": False,
                  "properties": {"enabled": {"type": ["null", "boolean"]}}},
        "loadBalancer": {"type": "object", "additionalProperties": False,
                         "properties": {"serviceTopology": {"type": "boolean"}}},
        "operator": {"type": "object", "additionalProperties": False, "properties": {
            "affinity": {"type": "object"},
            "tolerations": {"type": ["null", "array"]},
            "replicas": {"type": "integer"},
            "unmanagedPodWatcher": {"type": "object", "additionalProperties": False,
                                    "properties": {"restart": {"type": "boolean"}}},
        }},
    },
}

HYBRID_ONLY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "eks.amazonaws.com/compute-type", "operator": "In", "values": ["hybrid"]}]}]}}}


def cilium(run: ProgramRun) -> Registration:
    return named(run, "hybrid-cilium-release")


def _integral(value):
    """Protobuf carries numbers as floats; the chart wants integers where they are whole."""
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


@pytest.mark.parametrize("nodes", [1, 2, 5])
def test_cilium_values_validate_and_match_the_config(lab, nodes):
    run = lab(hybridNodeCount=nodes, gpuEnabled=False, **HOST_SETTINGS)
    release = cilium(run)
    assert release.inputs["chart"] == "oci://public.ecr.aws/eks/cilium/cilium"
    version = tuple(int(p) for p in release.inputs["version"].replace("-", ".").split("."))
    assert version >= (1, 18, 8, 1)
    assert release.inputs["namespace"] == "kube-system"
    values = _integral(release.inputs["values"])
    jsonschema.validate(values, CILIUM_VALUES_SCHEMA)
    assert values["ipam"]["operator"] == {"clusterPoolIPv4PodCIDRList": ["172.17.0.0/20"],
                                          "clusterPoolIPv4MaskSize": 25}
    assert values["affinity"] == HYBRID_ONLY and values["operator"]["affinity"] == HYBRID_ONLY
    assert values["operator"]["replicas"] == min(2, nodes)
    assert values["operator"]["unmanagedPodWatcher"] == {"restart": False}
    hybrid_toleration = {"key": "eks.amazonaws.com/compute-type", "operator": "Equal",
                         "value": "hybrid", "effect": "NoSchedule"}
    # Helm replaces lists: the agent keeps the chart's tolerate-everything default (it is the
    # CNI of NotReady nodes), and the operator gets the chart's four defaults back, plus the
    # hybrid taint — not the GPU's: it stays off the GPU host.
    assert "tolerations" not in values
    assert values["operator"]["tolerations"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
        {"key": "node-role.kubernetes.io/master", "operator": "Exists"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
        {"key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Exists"},
        hybrid_toleration,
    ]


def test_cilium_schema_catches_a_wrong_value(dev_run):
    values = _integral(cilium(dev_run).inputs["values"])
    for broken in ({**values, "vtep": {"enabled": False}}, {**values, "routingMode": "native"},
                   {**values, "unknownKey": 1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, CILIUM_VALUES_SCHEMA)


def test_cilium_waits_for_the_hosts(lab):
    run = lab(gpuEnabled=True)
    deps = cilium(run).explicit_dependencies
    assert {h.urn for h in hosts(run).values()} <= deps


def test_gpu_off_registers_nothing_gpu(dev_run):
    assert "hybrid-hosts-gpu" not in hosts(dev_run)
    assert not [r for r in dev_run.registrations if "nvidia" in r.name or "gpu" in r.name]
    for host in hosts(dev_run).values():
        assert "nvidia" not in host.inputs["userData"].value


def test_gpu_host_and_device_plugin(lab):
    run = lab(gpuEnabled=True)
    gpu = hosts(run)["hybrid-hosts-gpu"]
    script = gpu.inputs["userData"].value
    assert "--register-with-taints=eks.amazonaws.com/compute-type=hybrid:NoSchedule,gpu=true:NoSchedule" in script
    assert "nvidia.com/gpu.present=true" in script
    # The NVIDIA runtime is configured after nodeadm init rewrote containerd's configuration.
    assert script.index("nodeadm init") < script.index("nvidia-ctk runtime configure --runtime=containerd")
    plugin = named(run, "hybrid-nvidia-release")
    assert plugin.inputs["chart"] == "nvidia-device-plugin"
    assert plugin.inputs["repositoryOpts"] == {"repo": "https://nvidia.github.io/k8s-device-plugin"}
    values = plugin.inputs["values"]
    assert values["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in values["tolerations"]
    assert gpu.urn in plugin.explicit_dependencies


def test_lowering_below_hybrid_deletes_node_objects_while_the_cluster_stays(lab):
    # Hybrid nodes bill per vCPU while their Node object exists. Lowering upToLayer to cluster
    # removes the hybrid layer: Pulumi deletes each Node cleanup before its host (the cleanup
    # depends on it); the cleanup terminates the host, then deletes its Node through the API of
    # the cluster that is kept; Pulumi's delete of the host then finds it terminated.
    full, lowered = lab(upToLayer="hybrid"), lab(upToLayer="cluster")
    eks = one(full, "aws:eks/cluster:Cluster")
    assert eks.urn in lowered.by_urn
    order = steps(State.of(full), lowered, lowered)
    index = {(s.op, s.urn): i for i, s in enumerate(order)}
    assert ("delete", eks.urn) not in index
    for name, host in hosts(full).items():
        cleanup = full.named(f"{name}-node")
        assert cleanup.urn not in lowered.by_urn and host.urn not in lowered.by_urn
        assert eks.urn in cleanup.dependencies
        assert host.urn in cleanup.dependencies and cleanup.urn not in host.dependencies
        assert index[("delete", cleanup.urn)] < index[("delete", host.urn)], name


def test_a_host_named_with_its_architecture_in_state_is_this_host(lab):
    """A stack whose state names an Arm host (and its Node cleanup) with the architecture,
    ``<host>-arm64``, takes that entry as this host: without the alias the engine would create a
    second host before deleting the first, and need a second host's vCPU quota."""
    run = lab(hybridNodeInstanceType="m7g.xlarge")
    cleanups = {c.name: c for c in run.of_type(NODE_CLEANUP)}
    assert hosts(run)
    for name, host in hosts(run).items():
        assert host.options["aliasNames"] == [f"{name}-arm64"]
        assert cleanups[f"{name}-node"].options["aliasNames"] == [f"{name}-arm64-node"]
