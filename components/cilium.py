"""Cilium for hybrid nodes: the AWS build of the chart, configured for the hybrid nodes gateway.

Values follow the EKS Hybrid Nodes guide and the gateway's requirements (REFERENCE §2): Cilium
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


def cilium_values(pod_cidrs: Sequence[str], node_mask: int, operator_replicas: int,
                  tolerations: Sequence[dict]) -> dict:
    return {
        "affinity": HYBRID_ONLY,
        "tolerations": list(tolerations),
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
        "vtep": {"enabled": True},
        # The gateway path carries no L7 policy; Envoy would only cost memory on the nodes.
        "l7Proxy": False,
        "envoy": {"enabled": False},
        "loadBalancer": {"serviceTopology": True},
        "operator": {
            "affinity": HYBRID_ONLY,
            "tolerations": list(tolerations),
            # Hard anti-affinity spreads operator replicas over nodes: no more than there are.
            "replicas": operator_replicas,
            # Cloud pods belong to the VPC CNI; the operator must not restart them.
            "unmanagedPodWatcher": {"restart": False},
        },
    }


@dataclass(frozen=True)
class CiliumArgs:
    pod_cidrs: Sequence[str]
    node_mask: int
    #: Hybrid nodes there will be; the operator runs min(2, this) replicas.
    hybrid_node_count: int
    #: Taints of the hybrid nodes, as pod tolerations.
    tolerations: Sequence[dict]
    #: The nodes the release waits for (Helm waits until the agents and operator are ready).
    wait_for: Sequence[pulumi.Resource] = ()


class Cilium(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    values: dict

    def __init__(self, name: str, args: CiliumArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:hybrid:Cilium", name, None, opts)
        self.values = cilium_values(args.pod_cidrs, args.node_mask,
                                    min(2, args.hybrid_node_count), args.tolerations)
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
