"""The cloud node groups follow ``kubernetesVersion``, after the control plane.

EKS: a node group's version "can't be greater than the control plane's version" (EKS User
Guide, "Update a managed node group for your cluster"), so an upgrade runs the control plane's
UpdateClusterVersion first and each group's UpdateNodegroupVersion after it
(docs/eks-support.md#upgrades). The AWS provider updates a node group's
``version`` in place: it is Optional and Computed in the Terraform schema pulumi-aws wraps, not
ForceNew (hashicorp/terraform-provider-aws internal/service/eks/node_group.go,
``resourceNodeGroup``; ``resourceNodeGroupUpdate`` calls UpdateNodegroupVersion when
``version``, ``release_version`` or ``launch_template`` change).
"""

from __future__ import annotations

import re

import pytest
import yaml

from offline import plan as offline_plan
from tests.conftest import PROJECT_DIR, RENAMED, main_in_process, run_lab
from tests.graph import DestroyGraph
from tests.replacement import State, plan, steps

CLUSTER = "aws:eks/cluster:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"

#: node_group.go's ForceNew top-level arguments (camelCase, as pulumi-aws names them): a change
#: of any of these replaces the group, every other argument is updated in place.
NODE_GROUP_FORCE_NEW = frozenset({
    "amiType", "capacityType", "clusterName", "diskSize", "instanceTypes", "nodeGroupName",
    "nodeGroupNamePrefix", "nodeRoleArn", "remoteAccess", "subnetIds"})

#: The lab's node groups: the cluster layer's system group, the gateway layer's own.
GROUPS = ["cluster-system-ng", "gateway-nodes-group-ng"]

GROUP_PARAMS = ["cluster-system-ng", "gateway-nodes-group-ng"]


def test_the_lab_has_the_node_groups_this_file_checks(dev_run):
    assert sorted(r.name for r in dev_run.of_type(NODE_GROUP)) == sorted(GROUPS)


@pytest.mark.parametrize("group", GROUP_PARAMS)
def test_a_node_group_runs_the_configured_version(group):
    run = run_lab(**RENAMED)
    assert RENAMED["kubernetesVersion"] == "1.36"
    assert run.one(NODE_GROUP, group).inputs.get("version") == "1.36"
    assert run_lab().one(NODE_GROUP, group).inputs.get("version") == "1.35"


@pytest.mark.parametrize("group", GROUP_PARAMS)
def test_a_node_groups_version_is_the_control_planes_as_applied(group, dev_run):
    """The group's version is the cluster resource's ``version`` output, not the setting: its
    UpdateNodegroupVersion cannot start before the control plane's update is done."""
    [cluster] = dev_run.of_type(CLUSTER)
    found = dev_run.one(NODE_GROUP, group)
    assert cluster.urn in found.property_dependencies.get("version", [])
    # So the group also goes before the cluster at destroy (the graph destroy runs by).
    assert DestroyGraph(dev_run).path(found.urn, cluster.urn)


def _upgrade():
    """1.35 -> 1.36, in burst scenario C (the runs test_replacement's version transition reads)."""
    return run_lab(burstScenario="C"), run_lab(burstScenario="C", kubernetesVersion="1.36")


@pytest.mark.parametrize("group", GROUP_PARAMS)
def test_an_upgrade_updates_a_node_group_in_place(group):
    old, new = _upgrade()
    urn = new.one(NODE_GROUP, group).urn
    result = plan(old, new)
    assert urn in result.updated and urn not in result.replaced
    before, after = old.by_urn[urn].inputs, new.by_urn[urn].inputs
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed == {"version"}
    assert not changed & NODE_GROUP_FORCE_NEW


@pytest.mark.parametrize("group", GROUP_PARAMS)
def test_an_upgrade_updates_the_control_plane_before_a_node_group(group):
    old, new = _upgrade()
    order = [(s.op, s.urn) for s in steps(State.of(old), new, new)]
    [cluster] = new.of_type(CLUSTER)
    urn = new.one(NODE_GROUP, group).urn
    assert ("update", cluster.urn) in order
    assert ("update", urn) in order, "the node group is not upgraded"
    assert order.index(("update", cluster.urn)) < order.index(("update", urn))


def test_the_plan_shows_each_node_groups_version(tmp_path, capsys, monkeypatch):
    stack = yaml.safe_load((PROJECT_DIR / "Pulumi.dev.yaml").read_text())
    stack["config"]["eks-hybrid-lab:kubernetesVersion"] = "1.36"
    path = tmp_path / "Pulumi.upgrade.yaml"
    path.write_text(yaml.safe_dump(stack))
    done = main_in_process(capsys, monkeypatch, "offline.plan", offline_plan.main,
                           "--stack-file", str(path))
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("\nKubernetes version (", 1)[1].split("\n\n", 1)[0]
    rows = [re.fullmatch(r"  (control plane|node group) +(\S+) +(.+)", line)
            for line in section.splitlines()[1:]]
    assert all(rows), section
    shown = {row.group(2): (row.group(1), row.group(3)) for row in rows}
    assert shown["cluster-eks-cluster"] == ("control plane", "1.36")
    assert shown["cluster-system-ng"] == ("node group", "1.36")
    # Every node group has a line of its own, saying what it runs.
    assert set(shown) == {"cluster-eks-cluster", *GROUPS}
