"""Cilium for hybrid nodes: the AWS build of the chart, configured for the hybrid nodes gateway.

Values follow the EKS Hybrid Nodes guide and the gateway's requirements (docs/gateway.md#what-it-does): Cilium
runs only on hybrid nodes (the VPC CNI serves cloud nodes), cluster-pool IPAM over the remote pod
network, VXLAN tunnelling, and VTEP on — set at first install, since turning it on through an
upgrade has been seen not to apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

CHART = "oci://public.ecr.aws/eks/cilium/cilium"
#: The AWS build that registers the CiliumVTEPConfig CRD the gateway needs (1.18.8-1 or later
#: on the 1.18 line, which EKS supports for hybrid nodes).
VERSION = "1.18.8-1"
NAMESPACE = "kube-system"

HYBRID_ONLY = {
    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
        "matchExpressions": [{"key": "eks.amazonaws.com/compute-type",
                              "operator": "In", "values": ["hybrid"]}],
    }]}},
}


#: The operator's tolerations in the chart's values.yaml (Cilium 1.18.8). Helm replaces a list
#: whole, so a release that adds a toleration must repeat these or lose them; not-ready and
#: uninitialized are what let the operator start on a bootstrapping node. Copied here because
#: the program runs without Helm; tests/test_charts.py renders the chart with and without the
#: lab's values and fails if the lab's operator tolerations lose any the chart renders.
CHART_OPERATOR_TOLERATIONS = (
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
    {"key": "node-role.kubernetes.io/master", "operator": "Exists"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
    {"key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Exists"},
)

#: A Transit Gateway carries packets of at most 8500 bytes and drops bigger ones without telling
#: the sender (no ICMP "fragmentation needed"); hosts default to 9001 and VXLAN adds 50 bytes.
#: Cilium's MTU is the underlying network's: pods get 50 bytes less, so every encapsulated packet
#: stays at or under 8450 (it would also fit if the value were read as the pods' own MTU).
TRANSIT_SAFE_MTU = 8450


def cilium_values(pod_cidrs: Sequence[str], node_mask: int, operator_replicas: int,
                  operator_tolerations: Sequence[dict]) -> dict:
    """The release's values. Helm replaces lists whole, so:

    - the agent's ``tolerations`` are left alone: the chart's ``[{operator: Exists}]`` lets the
      agent (the CNI) onto every hybrid node, tainted or NotReady — a node is NotReady until its
      CNI runs, and the DaemonSet controller adds no ``not-ready:NoSchedule`` toleration itself;
    - the operator's are the chart's (not-ready, uninitialized, control-plane) plus
      ``operator_tolerations``: it allocates the pod CIDRs the agents wait for, so it too must
      start on NotReady hybrid nodes, the only nodes its affinity allows.

    ``affinity`` is a map, which Helm merges: the chart's pod anti-affinity (one agent, and one
    operator, per node) stays next to the node affinity given here.
    """
    return {
        "affinity": HYBRID_ONLY,
        "ipam": {
            "mode": "cluster-pool",
            "operator": {
                "clusterPoolIPv4PodCIDRList": list(pod_cidrs),
                # Fixed for the life of the cluster: nodes keep the blocks they were given.
                "clusterPoolIPv4MaskSize": node_mask,
            },
        },
        "routingMode": "tunnel",
        "tunnelProtocol": "vxlan",
        "MTU": TRANSIT_SAFE_MTU,
        "vtep": {"enabled": True},
        # The gateway path carries no L7 policy; Envoy would only cost memory on the nodes.
        "l7Proxy": False,
        "envoy": {"enabled": False},
        "loadBalancer": {"serviceTopology": True},
        "operator": {
            "affinity": HYBRID_ONLY,
            "tolerations": [*(dict(t) for t in CHART_OPERATOR_TOLERATIONS),
                            *operator_tolerations],
            # The chart's anti-affinity spreads replicas over nodes: no more than there are.
            "replicas": operator_replicas,
            # Cloud pods belong to the VPC CNI; the operator must not restart them.
            "unmanagedPodWatcher": {"restart": False},
        },
    }


@dataclass(frozen=True)
class CiliumArgs:
    #: The hybrid pods' networks (Cilium's cluster-pool): the same CIDRs as the cluster's remote
    #: pod networks, which is how the control plane and the VPC route to hybrid pods.
    pod_cidrs: Sequence[str]
    #: Prefix length of the block each node takes from ``pod_cidrs`` (clusterPoolIPv4MaskSize);
    #: fixed for the cluster's life, since nodes keep the blocks they were given.
    node_mask: int
    #: Hybrid nodes the operator may run on (not the GPU host); it runs min(2, this) replicas.
    hybrid_node_count: int
    #: The hybrid nodes' own taint, as a toleration for the operator (the agent tolerates all).
    operator_tolerations: Sequence[dict]
    #: The nodes the release waits for (Helm waits until the agents and operator are ready).
    wait_for: Sequence[pulumi.Resource] = ()


class Cilium(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    values: dict

    def __init__(self, name: str, args: CiliumArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:hybrid:Cilium", name, None, opts)
        self.values = cilium_values(args.pod_cidrs, args.node_mask,
                                    min(2, args.hybrid_node_count), args.operator_tolerations)
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name="cilium",
            chart=CHART,
            version=VERSION,
            namespace=NAMESPACE,
            values=self.values,
            # Ready once the hosts have joined: nodeadm, the image pulls and the agents start.
            timeout=1200,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.wait_for)),
        )
        self.register_outputs({"releaseName": self.release.name})
