"""What the host, gateway and demo cleanups find when the real engine deletes them: an account in
moto (hosts, the gateway's routes, SSM registrations: tests/moto_ssm_instances.py) and an EKS
cluster on the real kube-apiserver (tests/real_cluster.py ``eks_control_plane``: Nodes, the
gateway's CiliumVTEPConfig, pods with deletion costs), each with decoys the cleanups must leave
alone. Read back from moto and the API server, never from Pulumi.

The labels are the program's (stacks/layers/hybrid.py, components/hybrid_hosts.py): a host's
Node carries the stack's identity label, ``<prefix>host``, ``<prefix>cleanup`` (its token) and
``<prefix>instance``, and ``eks.amazonaws.com/compute-type: hybrid``.
"""

from __future__ import annotations

import datetime
import secrets
from dataclasses import dataclass, field
from typing import Any

import boto3

from tests.moto_ssm_instances import ManagedInstances
from tests.real_cluster import EksControlPlane

PREFIX = "eks-hybrid-lab.io/"
STACK_LABEL = f"{PREFIX}stack"
TOKEN_LABEL = f"{PREFIX}cleanup"
INSTANCE_LABEL = f"{PREFIX}instance"
HYBRID = ("eks.amazonaws.com/compute-type", "hybrid")
HOST_TAG = ("eks-hybrid-lab", "true")
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
POD_CIDR = "172.17.0.0/16"

VTEP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "ciliumvtepconfigs.cilium.io"},
    "spec": {"group": "cilium.io", "scope": "Cluster",
             "names": {"plural": "ciliumvtepconfigs", "singular": "ciliumvtepconfig",
                       "kind": "CiliumVTEPConfig"},
             # Served at v2 only: the cleanup tries v2 first (gateway_routes.vtep_versions).
             "versions": [{"name": "v2", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {
                               "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def mi() -> str:
    """A managed instance id as SSM makes them (nodeadm names the Node after it)."""
    return "mi-" + secrets.token_hex(9)[:17]


@dataclass
class World:
    eks: EksControlPlane
    ec2: Any
    ssm: ManagedInstances
    #: This stack's identity label value (unique per test on the shared control plane).
    stack: str = field(default_factory=lambda: "t" + secrets.token_hex(4))
    namespace: str = ""
    activation: str = field(default_factory=lambda: "act-" + secrets.token_hex(8))
    other_activation: str = field(default_factory=lambda: "act-" + secrets.token_hex(8))
    vtep_name: str = field(default_factory=lambda: "hybrid-gateway-" + secrets.token_hex(3))

    def selector(self, host: str) -> str:
        return f"{STACK_LABEL}={self.stack},{PREFIX}host={host}"

    # --- AWS ----------------------------------------------------------------------------------

    def host(self, name: str, tagged: bool = True) -> str:
        tags = [{"Key": "Name", "Value": name}] + (
            [{"Key": HOST_TAG[0], "Value": HOST_TAG[1]}] if tagged else [])
        answer = self.ec2.run_instances(
            ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m5.large",
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
        return answer["Instances"][0]["InstanceId"]

    def launched(self, instance: str) -> datetime.datetime:
        [reservation] = self.ec2.describe_instances(InstanceIds=[instance])["Reservations"]
        return reservation["Instances"][0]["LaunchTime"]

    def states(self) -> dict[str, str]:
        return {i["InstanceId"]: i["State"]["Name"]
                for r in self.ec2.describe_instances()["Reservations"] for i in r["Instances"]}

    def route_tables(self) -> tuple[str, str]:
        """(the gateway's table, a table it was not given), with routes a gateway writes (to an
        ENI, inside the pod CIDR) in both, and one it cannot have written (outside it)."""
        vpc = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = self.ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        eni = self.ec2.create_network_interface(
            SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
        listed = self.ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        other = self.ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        for table, cidr in ((listed, POD_CIDR), (listed, "172.17.5.0/24"),
                            (listed, "10.200.0.0/16"), (other, POD_CIDR)):
            self.ec2.create_route(RouteTableId=table, DestinationCidrBlock=cidr,
                                  NetworkInterfaceId=eni)
        return listed, other

    def routes(self, table: str) -> set[str]:
        [found] = self.ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"]
        return {r["DestinationCidrBlock"] for r in found["Routes"] if r.get("NetworkInterfaceId")}

    # --- Kubernetes ---------------------------------------------------------------------------

    def node(self, name: str, labels: dict[str, str]) -> None:
        answer = self.eks.plane.apply({"apiVersion": "v1", "kind": "Node",
                                       "metadata": {"name": name, "labels": labels}})
        assert answer.status in (200, 201), answer.body

    def host_node(self, host: str, token: str, instance: str, *, stack: str = "",
                  hybrid: bool = True) -> str:
        name = mi()
        labels = {STACK_LABEL: stack or self.stack, f"{PREFIX}host": host, TOKEN_LABEL: token,
                  INSTANCE_LABEL: instance}
        if hybrid:
            labels[HYBRID[0]] = HYBRID[1]
        self.node(name, labels)
        return name

    def nodes(self) -> set[str]:
        answer = self.eks.plane.call("GET", "/api/v1/nodes")
        return {n["metadata"]["name"] for n in answer.body["items"]}

    def vtep(self) -> None:
        plane = self.eks.plane
        assert plane.apply(VTEP_CRD).status in (200, 201)
        plane.wait_for("the CiliumVTEPConfig CRD served", lambda: plane.call(
            "GET", "/apis/cilium.io/v2/ciliumvtepconfigs").status == 200, timeout=60)
        plane.forget_discovery()
        answer = plane.apply({"apiVersion": "cilium.io/v2", "kind": "CiliumVTEPConfig",
                              "metadata": {"name": self.vtep_name}, "spec": {}})
        assert answer.status in (200, 201), answer.body

    def vtep_exists(self) -> bool:
        return self.eks.plane.call(
            "GET", f"/apis/cilium.io/v2/ciliumvtepconfigs/{self.vtep_name}").status == 200

    def ranked_pods(self) -> None:
        """Pods of the burst namespace: Karpenter's negative rank, Kyverno's "1", none. A node
        selector nothing matches keeps them Pending (a pod bound to one of the Nodes above
        would be collected with it)."""
        plane = self.eks.plane
        self.namespace = f"burst-{self.stack}"
        assert plane.apply({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": self.namespace}}).status in (200, 201)
        plane.wait_for("the namespace's default ServiceAccount", lambda: plane.call(
            "GET", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/default").status == 200,
            timeout=60)
        for name, cost in (("karpenter-ranked", "-5"), ("kyverno-ranked", "1"), ("unranked", None)):
            metadata: dict = {"name": name, "namespace": self.namespace}
            if cost is not None:
                metadata["annotations"] = {DELETION_COST: cost}
            answer = plane.apply({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                                  "spec": {"nodeSelector": {"eks-hybrid-lab.io/none": "none"},
                                           "containers": [{"name": "c", "image": "busybox"}]}})
            assert answer.status in (200, 201), answer.body

    def costs(self) -> dict[str, Any]:
        answer = self.eks.plane.call("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        return {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(DELETION_COST)
                for p in answer.body["items"]}

    def forget(self) -> None:
        """Removes what is left of this world on the shared control plane (nodes, namespace,
        the VTEP config), whatever the test found; bounded by the API's own timeouts."""
        plane = self.eks.plane
        listed = plane.call("GET", "/api/v1/nodes").body
        for node in listed.get("items", []) if isinstance(listed, dict) else []:
            # This stack's and its decoys' (the stack's value with a suffix).
            if (node["metadata"].get("labels") or {}).get(STACK_LABEL, "").startswith(self.stack):
                plane.call("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
        if self.namespace:
            plane.call("DELETE", f"/api/v1/namespaces/{self.namespace}")
        plane.call("DELETE", f"/apis/cilium.io/v2/ciliumvtepconfigs/{self.vtep_name}")


def clients(moto_url: str, region: str) -> Any:
    return boto3.client("ec2", region_name=region, endpoint_url=moto_url,
                        aws_access_key_id="testing", aws_secret_access_key="testing")
