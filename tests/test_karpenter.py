"""Karpenter layer: the controller's IAM scoped to this cluster, the interruption queue and
rules, the charts, the EC2NodeClass and NodePool (validated against the real CRDs), the
scenario switch, and the destroy order NodePool -> controller -> leftovers cleanup."""

from __future__ import annotations

import json

import pytest
import yaml

from offline.runner import ProgramRun, Registration
from tests.conftest import BURST, NODE_TYPES, PROJECT_DIR, RENAMED
from tests.kube_checks import CRD_DIR, as_object, crd_problems

needs_crds = pytest.mark.skipif(not CRD_DIR.is_dir(), reason=f"no CRDs at {CRD_DIR} (../shared/crds)")


def named(run: ProgramRun, name: str) -> Registration:
    return run.named(name)


def controller(run: ProgramRun) -> Registration:
    return named(run, "karpenter-karpenter-controller-release")


def policy(run: ProgramRun) -> dict:
    return json.loads(named(run, "karpenter-karpenter-controller-controller").inputs["policy"])


def statements(run: ProgramRun) -> dict[str, dict]:
    return {s["Sid"]: s for s in policy(run)["Statement"]}


WRITE_ACTIONS = {"ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate",
                 "ec2:CreateTags", "ec2:TerminateInstances", "ec2:DeleteLaunchTemplate",
                 "iam:CreateInstanceProfile", "iam:TagInstanceProfile",
                 "iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile",
                 "iam:DeleteInstanceProfile", "iam:PassRole"}


def _actions(statement: dict) -> set[str]:
    a = statement["Action"]
    return {a} if isinstance(a, str) else set(a)


def test_every_write_is_conditioned_on_this_cluster(lab):
    run = lab(**RENAMED)
    for sid, statement in statements(run).items():
        writes = _actions(statement) & WRITE_ACTIONS
        if not writes or sid == "AllowScopedEC2InstanceAccessActions":
            # RunInstances on images, subnets and security groups is not taggable; the
            # instance it makes is, and the next statements require the tags on it.
            continue
        condition = json.dumps(statement.get("Condition", {}))
        if sid == "AllowPassingInstanceRole":
            node_role = named(run, "karpenter-karpenter-node-role")
            assert statement["Resource"] == node_role.outputs["arn"]
            assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
            continue
        assert "kubernetes.io/cluster/rehearsal-1" in condition, sid
        assert statement["Resource"] != "*" or sid.startswith("AllowScopedInstanceProfile"), sid


def test_request_tags_required_on_what_karpenter_creates(dev_run):
    cluster = dev_run.lab_config.cluster_name
    create = statements(dev_run)["AllowScopedEC2InstanceActionsWithTags"]
    assert create["Condition"]["StringEquals"] == {
        f"aws:RequestTag/kubernetes.io/cluster/{cluster}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": cluster}
    assert create["Condition"]["StringLike"] == {"aws:RequestTag/karpenter.sh/nodepool": "*"}
    delete = statements(dev_run)["AllowScopedDeletion"]
    assert _actions(delete) == {"ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"}
    assert delete["Condition"]["StringEquals"] == {
        f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned"}


def test_reads_are_regional_and_queue_and_cluster_scoped(dev_run):
    s = statements(dev_run)
    assert s["AllowRegionalReadActions"]["Condition"] == {
        "StringEquals": {"aws:RequestedRegion": "ap-northeast-2"}}
    queue = named(dev_run, "karpenter-karpenter-interruption")
    assert s["AllowInterruptionQueueActions"]["Resource"] == queue.outputs["arn"]
    eks = dev_run.of_type("aws:eks/cluster:Cluster")[0]
    assert s["AllowAPIServerEndpointDiscovery"]["Resource"] == eks.outputs["arn"]


def test_controller_identity_and_node_role(dev_run):
    role = named(dev_run, "karpenter-karpenter-controller-role")
    assert json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Principal"] == {
        "Service": "pods.eks.amazonaws.com"}
    association = named(dev_run, "karpenter-karpenter-pod-identity")
    assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == ("kube-system", "karpenter")
    attachments = {a.inputs["policyArn"].rsplit("/", 1)[1] for a in dev_run.of_type(
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment") if a.name.startswith("karpenter-karpenter-node-")}
    assert attachments == {"AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy",
                           "AmazonEC2ContainerRegistryPullOnly", "AmazonSSMManagedInstanceCore"}
    entry = named(dev_run, "karpenter-karpenter-node-access")
    assert entry.inputs["type"] == "EC2_LINUX"
    assert entry.inputs["principalArn"] == named(dev_run, "karpenter-karpenter-node-role").outputs["arn"]


def test_interruption_queue_and_rules(dev_run):
    queue = named(dev_run, "karpenter-karpenter-interruption")
    assert queue.inputs["messageRetentionSeconds"] == 300
    assert queue.inputs["sqsManagedSseEnabled"] is True
    queue_policy = json.loads(named(dev_run, "karpenter-karpenter-interruption-policy").inputs["policy"])
    allow, deny = queue_policy["Statement"]
    assert allow["Principal"] == {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]}
    assert allow["Action"] == "sqs:SendMessage"
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    patterns = {(p["source"][0], p["detail-type"][0]) for p in (
        json.loads(r.inputs["eventPattern"]) for r in dev_run.of_type("aws:cloudwatch/eventRule:EventRule"))}
    assert patterns == {("aws.health", "AWS Health Event"),
                        ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
                        ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
                        ("aws.ec2", "EC2 Instance State-change Notification")}
    targets = dev_run.of_type("aws:cloudwatch/eventTarget:EventTarget")
    assert len(targets) == 4 and {t.inputs["arn"] for t in targets} == {queue.outputs["arn"]}


# A non-default version (the BURST run) shows the setting reaches both charts; scenarios B and C
# keep the default, so their runs are the ones tests/test_demo.py and tests/test_awaits.py make too.
@pytest.mark.parametrize("scenario,gate,version", [("A", False, "1.15.1"), ("B", False, None),
                                                   ("C", True, None)])
def test_charts_and_values(lab, scenario, gate, version):
    run = lab(burstScenario=scenario, **({**BURST, "karpenterVersion": version} if version else {}))
    crds = named(run, "karpenter-karpenter-crds")
    release = controller(run)
    assert crds.inputs["chart"] == "oci://public.ecr.aws/karpenter/karpenter-crd"
    assert release.inputs["chart"] == "oci://public.ecr.aws/karpenter/karpenter"
    # The version set, or else the stack's own (Pulumi.dev.yaml), as the run read it.
    expected = version or run.lab_config.karpenter_version
    assert version or expected == yaml.safe_load(
        (PROJECT_DIR / "Pulumi.dev.yaml").read_text())["config"]["eks-hybrid-lab:karpenterVersion"]
    assert crds.inputs["version"] == release.inputs["version"] == expected
    assert release.inputs["namespace"] == crds.inputs["namespace"] == "kube-system"
    values = release.inputs["values"]
    assert values["settings"]["clusterName"] == run.lab_config.cluster_name
    assert values["settings"]["interruptionQueue"] == named(run, "karpenter-karpenter-interruption").outputs["name"]
    assert values["settings"]["featureGates"] == {"podDeletionCostManagement": gate}
    assert values["replicas"] == 2
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["hybrid"]} in terms[0]["matchExpressions"]
    assert values["controller"]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert run.outputs["karpenterPodDeletionCostManagement"] is gate


def test_node_class(dev_run):
    node_class = as_object(named(dev_run, "karpenter-node-class"))
    spec = node_class["spec"]
    assert spec["role"] == named(dev_run, "karpenter-karpenter-node-role").outputs["name"]
    assert spec["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    discovery = [{"tags": {"karpenter.sh/discovery": dev_run.lab_config.cluster_name}}]
    assert spec["subnetSelectorTerms"] == discovery
    assert spec["securityGroupSelectorTerms"] == discovery
    assert spec["tags"]["eks-hybrid-lab:stack"] == "eks-hybrid-lab/dev"
    assert spec["metadataOptions"]["httpTokens"] == "required"
    assert spec["blockDeviceMappings"][0]["ebs"]["encrypted"] is True


def test_discovery_tag_only_on_cloud_subnets_and_the_cluster_security_group(dev_run):
    [tag] = dev_run.of_type("aws:ec2/tag:Tag")
    eks = dev_run.of_type("aws:eks/cluster:Cluster")[0]
    assert tag.inputs == {"resourceId": eks.outputs["vpcConfig"]["clusterSecurityGroupId"],
                          "key": "karpenter.sh/discovery", "value": dev_run.lab_config.cluster_name}
    tagged_subnets = {s.name for s in dev_run.of_type("aws:ec2/subnet:Subnet")
                      if "karpenter.sh/discovery" in (s.inputs.get("tags") or {})}
    assert tagged_subnets == {"network-cloud-private-0", "network-cloud-private-1"}


@pytest.mark.parametrize("limit", [4, 32, 96])
def test_node_pool(lab, limit):
    # 4 and 96 are the limits of two shared runs (conftest); 32, the default, is the dev run's.
    shared = {settings["burstCpuLimit"]: settings for settings in (BURST, NODE_TYPES)}
    run = lab(**shared.get(limit, {"burstCpuLimit": limit}))
    pool = as_object(named(run, "karpenter-node-pool"))
    assert pool["metadata"]["name"] == "cloud-burst"
    spec = pool["spec"]
    assert spec["limits"] == {"cpu": str(limit)}
    assert spec["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s",
                                  "budgets": [{"nodes": "100%"}]}
    requirements = {r["key"]: r["values"] for r in spec["template"]["spec"]["requirements"]}
    assert requirements["kubernetes.io/arch"] == ["amd64"]
    assert set(requirements["karpenter.sh/capacity-type"]) == {"spot", "on-demand"}
    # General-purpose types with room for several 930m pods.
    assert all(t.split(".")[0][0] == "m" and t.split(".")[1] in ("xlarge", "2xlarge")
               for t in requirements["node.kubernetes.io/instance-type"])
    assert spec["template"]["spec"]["nodeClassRef"] == {
        "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}


@needs_crds
@pytest.mark.parametrize("name", ["karpenter-node-pool", "karpenter-node-class"])
def test_custom_resources_validate_against_the_crds(dev_run, name):
    assert crd_problems(as_object(named(dev_run, name))) == []


@needs_crds
def test_crd_validation_catches_a_bad_node_pool(dev_run):
    pool = as_object(named(dev_run, "karpenter-node-pool"))
    pool["spec"]["disruption"]["consolidationPolicy"] = "Sometimes"
    pool["spec"]["template"]["spec"]["nodeClassRef"].pop("kind")
    assert len(crd_problems(pool)) >= 2


def test_destroy_order_node_pool_then_controller_then_cleanup(dev_run):
    pool, node_class = named(dev_run, "karpenter-node-pool"), named(dev_run, "karpenter-node-class")
    release, cleanup = controller(dev_run), named(dev_run, "karpenter-karpenter-leftovers")
    # A depends on B: B is created first and deleted after A.
    assert release.urn in pool.explicit_dependencies and node_class.urn in pool.explicit_dependencies
    assert release.urn in node_class.explicit_dependencies
    assert cleanup.urn in release.explicit_dependencies
    names = {dev_run.by_urn[u].name for u in cleanup.dependencies}
    assert {"karpenter-karpenter-node-role", "network-cloud-private-0", "karpenter-cluster-sg-discovery"} & names
    assert "network-cloud-private-0" in names and "karpenter-karpenter-node-access" in names
    # The controller needs the internet (AWS APIs) until it has terminated its instances.
    release_deps = {dev_run.by_urn[u].name for u in release.explicit_dependencies}
    assert {"network-cloud-private-default-route", "cluster-system-ng",
            "cluster-eks-pod-identity-agent", "karpenter-karpenter-crds"} <= release_deps
    assert pool.custom_timeouts.get("delete") == "20m"


def test_leftover_cleanup_is_scoped_to_this_cluster(lab):
    cleanup = named(lab(**RENAMED), "karpenter-karpenter-leftovers")
    assert cleanup.inputs["clusterName"] == "rehearsal-1"
    assert cleanup.inputs["region"] == "ap-northeast-2"
