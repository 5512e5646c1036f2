"""Stack outputs: what later steps, the demos and the presenter read with `pulumi stack output`."""

from __future__ import annotations

import pulumi

from stacks.config import LAYERS
from components import demos, hybrid_gateway
from components.capacity import burst_cpu_request_m
from stacks.costs import estimate as estimate_costs
from stacks.costs import totals as cost_totals
from stacks.layers import Lab

#: The label EKS gives every hybrid node.
HYBRID_NODE_SELECTOR = "eks.amazonaws.com/compute-type=hybrid"


def export_lab(lab: Lab) -> None:
    cfg = lab.config
    pulumi.export("layers", list(cfg.layers))
    pulumi.export("destroyOrder", list(reversed(cfg.layers)))
    pulumi.export("notBuilt", [layer for layer in LAYERS if layer not in cfg.layers])
    pulumi.export("region", cfg.region)
    costs, _ = estimate_costs(cfg, dict(cfg.price_overrides))
    low, high = cost_totals(costs)
    # Approximate on-demand USD per hour with everything built running; the maximum adds
    # Karpenter's burst at its cap. `python -m offline.plan` shows the breakdown.
    pulumi.export("estimatedHourlyCostUsd", low)
    pulumi.export("estimatedMaxHourlyCostUsd", high)

    if lab.network is not None:
        net = lab.network
        pulumi.export("availabilityZones", net.availability_zones)
        pulumi.export("cloudVpcId", net.cloud.vpc_id)
        pulumi.export("cloudVpcCidr", net.cloud.cidr_block)
        pulumi.export("cloudPrivateSubnetIds", net.cloud.private_subnet_ids)
        pulumi.export("cloudPrivateRouteTableIds", [net.cloud.private_route_table_id])
        pulumi.export("onPremVpcId", net.on_prem.vpc_id)
        pulumi.export("onPremVpcCidr", net.on_prem.cidr_block)
        pulumi.export("onPremServerLanSubnetId", net.on_prem.private_subnet_ids[0])
        pulumi.export("remoteNodeCidr", net.remote_node_cidr)
        pulumi.export("hybridPodCidr", str(cfg.hybrid_pod_cidr))
        pulumi.export("transitGatewayId", net.transit.transit_gateway_id)
        pulumi.export("natPublicIps", [net.cloud.nat_public_ip, net.on_prem.nat_public_ip])

    if lab.cluster is not None:
        eks = lab.cluster.eks
        pulumi.export("clusterName", eks.name)
        pulumi.export("clusterArn", eks.arn)
        pulumi.export("clusterEndpoint", eks.endpoint)
        # Secret: Pulumi stores it encrypted. `pulumi stack output kubeconfig --show-secrets`.
        pulumi.export("kubeconfig", lab.cluster.kubeconfig)
        pulumi.export("updateKubeconfigCommand",
                      eks.name.apply(lambda n: f"aws eks update-kubeconfig --name {n} --region {cfg.region}"))

    if lab.hybrid is not None:
        hybrid = lab.hybrid
        pulumi.export("activationId", hybrid.activation.activation_id)
        pulumi.export("activationExpiresAt", hybrid.activation.expires_at)
        pulumi.export("hybridHostIds", {k: i.id for k, i in hybrid.hosts.instances.items()})
        pulumi.export("hybridNodeSelector", hybrid.node_label_selector)
        pulumi.export("checkHybridNodesCommand",
                      f"kubectl get nodes -l {hybrid.node_label_selector} -o wide")

    if lab.gateway is not None:
        gateway = lab.gateway.gateway
        ns, lease = gateway.namespace, gateway.lease_name
        leader = (f"kubectl -n {ns} get lease {lease} -o jsonpath='{{.spec.holderIdentity}}' "
                  "| cut -d_ -f1")
        pulumi.export("gatewayNamespace", ns)
        pulumi.export("gatewayLeaseName", lease)
        pulumi.export("gatewayLeaseHolderFormat",
                      "<node name>_<uuid>: the pods use the host network, so the holder names the node")
        pulumi.export("gatewayRouteTableIds", lab.gateway.route_table_ids)
        # What `python -m rehearse` lists the gateway's pods and nodes by: the chart labels its
        # pods with its name (selectorLabels in its _helpers.tpl).
        pulumi.export("gatewayPodSelector", "app.kubernetes.io/name=eks-hybrid-nodes-gateway")
        pulumi.export("gatewayNodeSelector", f"{hybrid_gateway.NODE_LABEL}=true")
        pulumi.export("demo1Commands", pulumi.Output.all(*lab.gateway.route_table_ids).apply(
            lambda ids: {
                "pods": f"kubectl -n {ns} get pods -o wide",
                "leader": leader,
                "leaderHealth": f"kubectl -n {ns} get --raw \"/api/v1/namespaces/{ns}/pods/$(kubectl -n {ns} get pods --field-selector spec.nodeName=$({leader}) -o name | cut -d/ -f2):8088/proxy/healthz\"",
                "podRoute": (f"aws ec2 describe-route-tables --region {cfg.region} --route-table-ids {' '.join(ids)} "
                             f"--query \"RouteTables[].Routes[?DestinationCidrBlock=='{cfg.hybrid_pod_cidr}']\""),
                "vtepConfig": "kubectl get ciliumvtepconfig hybrid-gateway -o yaml",
                "failover": f"kubectl -n {ns} delete pod --field-selector spec.nodeName=$({leader})",
            }))

    if lab.karpenter is not None:
        karpenter = lab.karpenter.karpenter
        pulumi.export("karpenterNodePool", "cloud-burst")
        pulumi.export("karpenterInterruptionQueue", karpenter.queue.name)
        pulumi.export("karpenterPodDeletionCostManagement", cfg.burst_scenario == "C")

    if lab.demo is not None:
        from stacks.layers import demo as demo_layer

        gw, burst, gpu = demo_layer.GATEWAY_NS, demo_layer.BURST_NS, demo_layer.GPU_NS
        pulumi.export("demo1", {
            "namespace": gw,
            "probeCloudToHybrid": f"kubectl -n {gw} logs -f deploy/prober-cloud",
            "probeHybridToCloud": f"kubectl -n {gw} logs -f deploy/prober-hybrid",
            "pods": f"kubectl -n {gw} get pods -o wide",
            # The Deployments whose logs show traffic each way (`python -m rehearse`).
            "probers": {"cloudToHybrid": "prober-cloud", "hybridToCloud": "prober-hybrid"},
        })
        scale = " -> ".join(map(str, demo_layer.BURST_SCALE_SEQUENCE))
        pulumi.export("demo2", {
            "namespace": burst,
            "scenario": cfg.burst_scenario,
            # Four per hybrid host next to demo 1's pods (components/capacity.py): the number for
            # the slide, where the demo guide said 930m (docs/capacity.md#930m-versus-900m).
            "cpuRequestPerPod": f"{burst_cpu_request_m(cfg.hybrid_node_instance_type, demos.hybrid_co_tenant_cpu_m())}m",
            "scaleSequence": list(demo_layer.BURST_SCALE_SEQUENCE),
            "scale": f"kubectl -n {burst} scale deploy/burst --replicas=<n>   # {scale}",
            "placement": (f"kubectl -n {burst} get pods -o custom-columns=POD:.metadata.name,"
                          "NODE:.spec.nodeName,COST:'.metadata.annotations.controller\\.kubernetes\\.io/pod-deletion-cost'"),
            "nodeClaims": "kubectl get nodeclaims -o wide",
            # Pods cannot be selected by their node's labels: find the hybrid nodes, then ask
            # for the burst pods on each (a field selector, answered by the API server).
            "hybridPods": (f"for node in $(kubectl get nodes -l {HYBRID_NODE_SELECTOR} -o name); "
                           f"do kubectl -n {burst} get pods -l app=burst -o wide --no-headers "
                           "--field-selector spec.nodeName=${node#node/}; done"),
            # Annotations persist across scenarios: start each run from fresh pods.
            "beforeEachRun": f"kubectl -n {burst} rollout restart deploy/burst && "
                             f"kubectl -n {burst} rollout status deploy/burst",
        })
        if cfg.gpu_enabled:
            pulumi.export("demo3", {
                "namespace": gpu,
                # What `python -m rehearse verify gpu` reads (stacks/layers/demo.py names them).
                "deployment": "vllm",
                "service": "vllm",
                "port": 8000,
                "clientDeployment": "vllm-client",
                "model": cfg.gpu_model,
                "prePull": ("The vLLM image is about 10 GB (4.5 min to pull in the demo guide's run): deploy "
                            f"well before the talk and wait: kubectl -n {gpu} rollout status "
                            "deploy/vllm --timeout=20m"),
                "client": f"kubectl -n {gpu} logs -f deploy/vllm-client",
                "gpuAllocatable": ("kubectl get nodes -l nvidia.com/gpu.present=true -o "
                                   "custom-columns=NODE:.metadata.name,GPU:.status.allocatable.nvidia\\.com/gpu"),
            })
