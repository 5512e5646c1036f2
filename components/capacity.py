"""Node capacity arithmetic: what an instance type offers pods, and the CPU request that makes
demo 2's shape hold — eight ``burst`` pods on the two default hybrid nodes, a ninth bursting.

Pure functions over instance type names and numbers, so the config can refuse a host type that
cannot hold demo 2's shape, the demo layer can size ``burst`` when the program runs and the
scheduling model (``offline/scheduling.py``) can check it against what registers. What an
instance type has (vCPUs, memory, GPUs) is in ``components/instance_types.py``.
"""

from __future__ import annotations

from components.instance_types import Capacity, instance_capacity

#: kubelet's hard eviction threshold (memory.available), kept free by the EKS AMIs and nodeadm.
EVICTION_HARD_MIB = 100
#: Hybrid nodes take the kubelet's default pod limit (no ENI arithmetic on premises).
HYBRID_MAX_PODS = 110

#: What runs on every hybrid node besides the lab's workloads, as the scheduler counts it (a
#: pod's request is the larger of its containers' sum and its largest init container):
#: kube-proxy (EKS add-on) 100m; the Cilium agent 100m — none in its main container, 100m in
#: its install-cni-binaries init container (chart value ``cni.resources``). The EKS Pod Identity
#: agent and the VPC CNI exclude hybrid nodes.
HYBRID_DAEMONSET_CPU_M = {"kube-proxy": 100, "cilium": 100}
#: Demo 2's shape: four burst pods per default hybrid node.
BURST_PODS_PER_HYBRID_NODE = 4


def kube_reserved_cpu_m(cpus: int) -> int:
    """CPU the kubelet keeps for itself: the EKS AMI formula, which nodeadm also applies to
    hybrid nodes — 6% of the first core, 1% of the second, 0.5% of the third and fourth,
    0.25% of every core after that (in millicores, rounded down as the AMI does)."""
    reserved = 0.0
    for core in range(1, cpus + 1):
        reserved += 60 if core == 1 else 10 if core == 2 else 5 if core <= 4 else 2.5
    return int(reserved)


def kube_reserved_memory_mib(max_pods: int) -> int:
    """Memory the kubelet keeps for itself: 11 MiB per pod it may run, plus 255 MiB."""
    return 11 * max_pods + 255


def allocatable(instance_type: str, max_pods: int) -> Capacity:
    """What the scheduler may hand to pods on a node of this type. Memory is approximate: the
    kernel keeps a little of the nominal size, which the instance tables do not say."""
    cap = instance_capacity(instance_type)
    cpus = cap.cpu_m // 1000
    return Capacity(
        cap.cpu_m - kube_reserved_cpu_m(cpus),
        cap.memory_mib - kube_reserved_memory_mib(max_pods) - EVICTION_HARD_MIB,
        cap.gpus,
    )


def hybrid_allocatable(instance_type: str) -> Capacity:
    return allocatable(instance_type, HYBRID_MAX_PODS)


def burst_cpu_request_m(host_instance_type: str, co_tenant_cpu_m: int,
                        pods_per_node: int = BURST_PODS_PER_HYBRID_NODE) -> int:
    """The ``burst`` CPU request (millicores, a multiple of 10) that puts exactly
    ``pods_per_node`` burst pods on each hybrid host, wherever the lab's other hybrid pods
    (``co_tenant_cpu_m`` in all, e.g. demo 1's) land: ``pods_per_node`` fit on a node that also
    holds all of them, and one more does not fit on a node that holds none.

    The demo guide's 930m is this arithmetic for an m5.xlarge running nothing but its daemons
    ((3920 - 200) / 4); demo 1's pods on the same nodes leave 900m (docs/capacity.md#930m-versus-900m).
    """
    free = hybrid_allocatable(host_instance_type).cpu_m - sum(HYBRID_DAEMONSET_CPU_M.values())
    request = (free - co_tenant_cpu_m) // pods_per_node // 10 * 10
    if request <= 0 or request * (pods_per_node + 1) <= free:
        raise ValueError(
            f"no CPU request puts exactly {pods_per_node} burst pods on a {host_instance_type} "
            f"hybrid node next to {co_tenant_cpu_m}m of other pods ({free}m free)")
    return request
