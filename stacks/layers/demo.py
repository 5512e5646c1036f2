"""Layer 6 — Demo: the workloads of the three demos, Kyverno and the scenario of demo 2."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components import demos
from components.cleanup.deletion_cost_ranks import DeletionCostRanks
from components.eks_cluster import RemoteAccess
from components.kyverno import Kyverno, KyvernoArgs
from components.capacity import burst_cpu_request_m
from stacks.config import LabConfig
from stacks.layers.base import Layer
from stacks.layers.cluster import ClusterLayer
from stacks.layers.hybrid import HybridLayer
from stacks.layers.karpenter import BURST_TOLERATION, NODE_POOL, KarpenterLayer

GATEWAY_NS = "demo-gateway"
BURST_NS = "demo-burst"
GPU_NS = "demo-gpu"
#: echo-cloud's target port (nginx-unprivileged listens on 8080).
ECHO_PORT = 8080
#: The port ``python -m rehearse gateway-throughput``'s iperf3 serves on (rehearse/commands/gateway_throughput/pods.py
#: PORT; stacks do not import the rehearsal tools, a test holds the two equal).
REHEARSE_IPERF3_PORT = 5201
#: Demo 2 scales 3 -> 15 (hybrid full, 7 burst to the cloud) -> 12 -> 10 -> 3
#: (docs/demo-guide.md#demo-2-bursting-and-scale-in).
BURST_SCALE_SEQUENCE = (3, 15, 12, 10, 3)


class DemoLayer(Layer):
    kyverno: Kyverno
    namespaces: dict[str, k8s.core.v1.Namespace]

    def __init__(self, cfg: LabConfig, cluster: ClusterLayer, hybrid: HybridLayer,
                 karpenter: KarpenterLayer, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Demo", "demo", opts)
        hosts = list(hybrid.hosts.instances.values())
        # Workloads on hybrid nodes need them (and their CNI); at delete they go first — before
        # each host's Node cleanup too, whose delete is where the host is terminated.
        on_hybrid = [*hosts, *hybrid.hosts.node_cleanups.values(), hybrid.cilium.release]

        self.namespaces = {}
        for ns in [GATEWAY_NS, BURST_NS] + ([GPU_NS] if cfg.gpu_enabled else []):
            self.namespaces[ns] = k8s.core.v1.Namespace(
                self.child_name(ns), metadata=demos.restricted_namespace(ns), opts=self.child())

        def workload(ns: str, name: str, spec: dict, depends_on=(), service_port=None,
                     timeouts: Optional[pulumi.CustomTimeouts] = None, headless_port=None):
            namespace = self.namespaces[ns]
            created = k8s.apps.v1.Deployment(
                self.child_name(name),
                metadata={"name": name, "namespace": ns, "labels": {"app": name}},
                spec=spec,
                # Any demo pod may land on a burst node: the workloads go before the NodePool,
                # so deleting it drains nothing but empty nodes.
                opts=self.child(depends_on=[namespace, karpenter.node_pool, *depends_on],
                                custom_timeouts=timeouts))
            if service_port:
                k8s.core.v1.Service(
                    self.child_name(f"{name}-svc"),
                    metadata={"name": name, "namespace": ns, "labels": {"app": name}},
                    spec=demos.cluster_ip_service(name, service_port[0], service_port[1]),
                    # Pulumi awaits a Service until its Endpoints target a pod (10 min): created
                    # with the namespace, vLLM's would wait through the GPU host's join and
                    # driver install and time out. After its Deployment, the pods are there.
                    opts=self.child(depends_on=[namespace, created]))
            if headless_port:
                k8s.core.v1.Service(
                    self.child_name(f"{name}-pods-svc"),
                    metadata={"name": f"{name}-pods", "namespace": ns, "labels": {"app": name}},
                    spec=demos.headless_service(name, headless_port),
                    opts=self.child(depends_on=[namespace, created]))
            return created

        # Demo 1: traffic both ways through the gateway, through the ClusterIP services and pod
        # to pod (the headless "-pods" services resolve to the pods' own addresses).
        workload(GATEWAY_NS, "echo-cloud", demos.echo_server("echo-cloud", on_hybrid=False),
                 service_port=(80, ECHO_PORT), headless_port=ECHO_PORT)
        echo_hybrid = demos.echo_server("echo-hybrid", on_hybrid=True)
        workload(GATEWAY_NS, "echo-hybrid", echo_hybrid, depends_on=on_hybrid,
                 service_port=(80, ECHO_PORT), headless_port=ECHO_PORT)

        def urls(target: str) -> tuple[str, str]:
            return (f"http://{target}.{GATEWAY_NS}.svc",
                    f"http://{target}-pods.{GATEWAY_NS}.svc:{ECHO_PORT}")

        workload(GATEWAY_NS, "prober-cloud", demos.prober(
            "prober-cloud", *urls("echo-hybrid"), on_hybrid=False))
        prober_hybrid = demos.prober("prober-hybrid", *urls("echo-cloud"), on_hybrid=True)
        workload(GATEWAY_NS, "prober-hybrid", prober_hybrid, depends_on=on_hybrid)

        # prober-hybrid reaches echo-cloud's pods, which sit on cloud nodes behind the cluster
        # security group: their target port is opened to the remote networks here, so it comes
        # and goes with the demos (as the gateway layer owns its VXLAN rules).
        cluster.eks.admit_remote_networks(self.child_name("echo-cloud"), [RemoteAccess(
            "tcp", ECHO_PORT, "demo 1 prober-hybrid to echo-cloud")], self.child())
        # The rehearsal's hybrid → cloud throughput runs iperf3 from a hybrid pod to a cloud pod
        # (rehearse/lab/flows.py): the same group, so the same opening, and with the demos it goes.
        cluster.eks.admit_remote_networks(self.child_name("rehearse-iperf3"), [RemoteAccess(
            "tcp", REHEARSE_IPERF3_PORT, "rehearse gateway-throughput iperf3 hybrid to cloud")],
            self.child())

        # Demo 2: Kyverno's deletion-cost policy in scenarios B and C, absent in A.
        self.kyverno = Kyverno(self.child_name("kyverno"), KyvernoArgs(
            node_selector={"role": "system"},
            policy_namespaces=[BURST_NS] if cfg.burst_scenario in ("B", "C") else None,
            wait_for=[cluster.system_nodes.node_group],
        ), opts=self.child())
        burst_needs = [karpenter.node_pool, *on_hybrid, self.kyverno.release]
        if self.kyverno.policy is not None:
            burst_needs.append(self.kyverno.policy)
        # Sized so that exactly four burst pods fit on each default hybrid node next to demo 1's
        # pods there, wherever those land (components/capacity.py; tests/test_scheduling.py).
        co_tenants = demos.cpu_requested_m(echo_hybrid) + demos.cpu_requested_m(prober_hybrid)
        burst_request = burst_cpu_request_m(cfg.hybrid_node_instance_type, co_tenants)
        workload(BURST_NS, "burst", demos.burst(
            "burst", cfg.burst_replicas, burst_request, extra_tolerations=[BURST_TOLERATION],
            burst_pool=NODE_POOL),
            depends_on=burst_needs)
        if cfg.burst_scenario == "C":
            # Present while Karpenter ranks pods (scenario C). Switching to A or B deletes it,
            # after Karpenter's gate is off, and its deletion strips the negative costs
            # Karpenter wrote so they do not skew the next run.
            DeletionCostRanks(
                self.child_name("deletion-cost-ranks"), cluster_name=cluster.eks.name,
                region=cfg.region, endpoint=cluster.eks.endpoint,
                certificate_authority=cluster.eks.certificate_authority, namespace=BURST_NS,
                account=cfg.aws_account, opts=self.child(depends_on=[self.namespaces[BURST_NS], karpenter.karpenter.controller]))

        # Demo 3: inference on the hybrid GPU host, called from the cloud.
        if cfg.gpu_enabled:
            gpu_host = hybrid.hosts.instances["gpu"]
            needs = [gpu_host, hybrid.cilium.release]
            if hybrid.device_plugin is not None:
                needs.append(hybrid.device_plugin.release)
            workload(GPU_NS, "vllm", demos.vllm_server("vllm", cfg.gpu_model),
                     depends_on=needs, service_port=(8000, 8000),
                     # The pod is pending until the GPU host has installed its driver and
                     # joined (about 10 min after it boots), then pulls ~10 GB and loads the
                     # model: the await typically lasts about 11.5 min, x1.5 over Pulumi's
                     # default 10; after a reboot and the plugin's longest back-off, about 18.5
                     # (offline/timing.py). An update is a Recreate
                     # rollout: the old pod stops, the new one may pull a new image and loads the
                     # model again.
                     timeouts=pulumi.CustomTimeouts(create="30m", update="30m"))
            workload(GPU_NS, "vllm-client", demos.vllm_client(
                "vllm-client", f"http://vllm.{GPU_NS}.svc:8000", cfg.gpu_model))

        self.register_outputs({"namespaces": list(self.namespaces)})
