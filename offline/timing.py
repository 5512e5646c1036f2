"""How long `pulumi up` and `pulumi destroy` take, and whether every await outlasts what it waits
for: one table of typical durations, read by both.

Pulumi starts a resource as soon as everything it depends on is done, and marks it done when its
await ends. So the wall time of an `up` is the longest chain of create durations, and a resource
whose await is shorter than what happens inside it fails the `up` (a `destroy` walks the graph
backwards). Some of what an await covers happens outside Pulumi: a host joins the cluster after
its EC2 instance runs, the GPU driver installs after that, a pod pulls its image. Those phases
are figures in the same table, placed in the await of the resource that actually waits for them
(``COVERS``): the estimate and the awaits model compute one schedule from it.

The figures are typical values with where each comes from; the chain they pick out is the part
to act on: it is what to shorten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Union

import components.hybrid_user_data as user_data
from stacks.config import LAYERS
from offline.runner import ProgramRun, Registration


@dataclass(frozen=True)
class Duration:
    create: float  # seconds
    delete: float
    source: str


INSTANCE = "aws:ec2/instance:Instance"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
RELEASE = "kubernetes:helm.sh/v3:Release"
CLUSTER = "aws:eks/cluster:Cluster"
NODE_CLEANUP = "pulumi-python:dynamic/cleanup:HybridNodeObjects"

#: Typical durations: by resource type (the resource's own work), and by phase name (work outside
#: Pulumi that some awaits cover, see COVERS; a phase has no delete). Types not listed take
#: DEFAULT.
DURATIONS: dict[str, Duration] = {
    "aws:eks/cluster:Cluster": Duration(570, 180, "create 8.5-10 min (terraform-aws-eks #2203, DevopsArtFactory/terraform-provisioning #46, AWS 2021-03 'under 9 min'); delete 1-4 min (Terraform logs)"),
    "aws:eks/nodeGroup:NodeGroup": Duration(150, 250, "create 2-3 min (DevopsArtFactory #47); delete 4-10 min (Terraform logs, cloud-nuke #339)"),
    "aws:eks/addon:Addon": Duration(45, 30, "vpc-cni, kube-proxy: under a minute (estimate); coredns waits for nodes (terraform-aws-eks #1765)"),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": Duration(5, 5, "API call"),
    "aws:eks/accessEntry:AccessEntry": Duration(5, 5, "API call"),
    "aws:ec2/natGateway:NatGateway": Duration(110, 60, "create 1.5-2 min, delete about 1 min (six Terraform logs)"),
    "aws:ec2transitgateway/transitGateway:TransitGateway": Duration(120, 120, "1-2 min (estimate; terraform-provider-aws #6605 test: 95 s create+destroy)"),
    "aws:ec2transitgateway/vpcAttachment:VpcAttachment": Duration(90, 90, "1-2 min (estimate)"),
    # Pulumi marks an instance created once it runs; the host's join is not in this await.
    INSTANCE: Duration(20, 60, "running in 10-16 s (karpenter-provider-aws #3827); terminate about a minute"),
    "aws:kms/key:Key": Duration(20, 5, "12-29 s (Terraform logs); deletion only schedules it"),
    "aws:cloudwatch/logGroup:LogGroup": Duration(2, 2, "0-2 s (Terraform logs)"),
    "aws:iam/role:Role": Duration(5, 3, "1-7 s (DevopsArtFactory #46, steampipe-plugin-aws #131)"),
    RELEASE: Duration(60, 45, "Cilium 30 s, Karpenter 63 s on nodes that are up (Terraform logs)"),
    "kubernetes:karpenter.sh/v1:NodePool": Duration(2, 60, "deletion waits for its instances to terminate"),
    "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass": Duration(2, 30, "deletion waits for its instance profiles"),
    DEPLOYMENT: Duration(30, 20, "pods scheduled, small images pulled, ready (estimate)"),
    SERVICE: Duration(12, 5, "pulumi-kubernetes waits until the Endpoints target a pod, then 10 s for them to settle (provider/pkg/await/service.go); the pods are their Deployment's"),
    "pulumi-python:dynamic/wait:Propagation": Duration(30, 1, "components/propagation.py: 30 s for a Pod Identity association to take effect (EKS API reference: 'several seconds'; eksctl #7709: 15 s)"),
    "pulumi-python:dynamic/cleanup:SsmRegistrations": Duration(1, 15, "deregistration calls"),
    # Its delete terminates its host first and waits until EC2 reports it terminated
    # (components/cleanup/node_objects.py), then deregisters and deletes the Node.
    NODE_CLEANUP: Duration(1, 75, "terminate the host and wait: about a minute (as INSTANCE's "
                           "delete), then SSM and Kubernetes API calls, 15 s"),
    "pulumi-python:dynamic/cleanup:GatewayRoutes": Duration(1, 15, "route and Kubernetes API calls"),
    "pulumi-python:dynamic/cleanup:KarpenterLeftovers": Duration(1, 20, "describe calls (nothing left normally)"),
    # Phases: work outside Pulumi.
    # A host's join, in two parts (components/templates/hybrid-host.sh): it installs as soon as
    # its instance runs, whatever the cluster's state, and nodeadm init succeeds only once the
    # cluster side is there (JOIN_NEEDS).
    "nodeadm-install": Duration(180, 0, "after the instance runs: nodeadm download, apt-get update, nodeadm install (containerd, kubelet, the SSM agent) 1-3 min (estimate; aws/eks-hybrid #514 allows 8 min for install in its tests)"),
    "nodeadm-init": Duration(60, 0, "nodeadm init once the cluster is ACTIVE and the access entry exists: containerd restarted, the pause image pulled from ECR, kubelet started, 0.5-1.5 min (estimate; aws/eks-hybrid internal/flows/init.go, internal/containerd/sandbox.go)"),
    "join-retry": Duration(user_data.JOIN_RETRY_SECONDS, 0, "the join script's pause between two tries of nodeadm init (components/hybrid_user_data.py JOIN_RETRY_SECONDS): the try after the cluster side is ready starts within it; the whole pause, not half of it"),
    "gpu-driver": Duration(360, 0, "hybrid-host-gpu-install.sh, before nodeadm init: ubuntu-drivers --gpgpu and nvidia-container-toolkit from apt; the GPU stack takes 3-5 min after a node boots (NVIDIA/gpu-operator #707), apt installs have taken about 12 min (Azure/acs-engine #989); estimate 6 min"),
    "gpu-reboot": Duration(120, 0, "only when the driver's module does not match the running kernel: hybrid-host-gpu.sh reboots once, after the join; EC2 reboot and kubelet back (estimate)"),
    "crashloop-backoff-cap": Duration(300, 0, "CrashLoopBackOff's longest delay, 5 minutes (Kubernetes pod lifecycle)"),
    "vllm-image-pull": Duration(268, 0, "the ~10 GB vllm/vllm-openai image: 4 min 28 s (docs/demo-guide.md#demo-3-gpu-inference-on-a-hybrid-node); the GPU host pulls it into containerd while its driver installs, before nodeadm init"),
    "vllm-model-load": Duration(150, 0, "model download (Qwen2.5-0.5B, ~1 GB) over the on-prem NAT, load, torch.compile and CUDA graphs: 59 s to a first answer with a warm compile cache (vllm-project/vllm #20264), a cold compile adds 20-40 s (vllm #11005); estimate 2.5 min"),
}
DEFAULT = Duration(3, 3, "API call")

#: Figures for some resources of a type, by (type, name prefix), before DURATIONS' by type.
BY_NAME: dict[tuple[str, str], Duration] = {
    # A hybrid host's Node cleanup terminates it and waits before Pulumi deletes it: Pulumi's
    # delete then finds it terminated, TerminateInstances is idempotent and the provider's wait
    # ends at its first poll, after its 10 s delay (terraform-provider-aws ec2_instance.go,
    # terminateInstance, waitInstanceDeleted).
    (INSTANCE, "hybrid-hosts-"): Duration(20, 10, "running in 10-16 s (karpenter-provider-aws #3827); already terminated by its Node cleanup at delete: one 10 s poll"),
}


#: A phase, or phases run side by side (the longest counts).
Step = Union[str, tuple[str, ...]]

#: What nodeadm init needs besides its host (type, name prefix): the cluster ACTIVE, the
#: hybrid role's access entry, and the role's policy that reads the cluster (DescribeCluster);
#: the pause image comes from ECR with the managed policy the host already waited for
#: (aws/eks-hybrid internal/node/hybrid/configenricher.go ensureClusterDetails,
#: internal/containerd/sandbox.go cacheSandboxImage). The add-ons are not among them.
JOIN_NEEDS: tuple[tuple[str, str], ...] = (
    (CLUSTER, "cluster-eks-cluster"),
    ("aws:eks/accessEntry:AccessEntry", "hybrid-node-role-access"),
    ("aws:iam/rolePolicy:RolePolicy", "hybrid-node-role-iam-cluster"),
)


@dataclass(frozen=True)
class Path:
    """Work outside Pulumi that starts when a host's instance runs."""

    #: On the host, from when its instance runs (its install, a GPU host's driver).
    host: tuple[Step, ...] = ()
    #: Then nodeadm init, which also waits for JOIN_NEEDS (and the script's next try).
    joins: bool = False
    #: After the join (a reboot, a restart back-off).
    after: tuple[Step, ...] = ()


@dataclass(frozen=True)
class Covers:
    """What a resource's create await covers besides its type's figure: work that starts when a
    host it needs (matched by type and name prefix) runs, then work of its own."""

    after_type: str
    after_prefix: str
    typical: Path
    #: Phases added to the resource's own work (after its type's figure).
    then: tuple[str, ...] = ()
    #: The worst case the await must still outlast (no safety factor on it); None: typical.
    worst: Optional[Path] = None
    #: Phases an update (a Deployment's rollout) adds to the resource's own work.
    update_then: tuple[str, ...] = ()


#: The GPU host, after nodeadm install: its driver and toolkit, and beside them the vLLM image
#: pulled into containerd (the join script waits for both before nodeadm init).
GPU_HOST = ("nodeadm-install", ("gpu-driver", "vllm-image-pull"))
GPU_WORST = Path(host=GPU_HOST, joins=True, after=("gpu-reboot", "crashloop-backoff-cap"))
#: Each host's join, by instance name prefix: a plain host installs, then joins.
JOINS: dict[str, Path] = {
    "hybrid-hosts-node-": Path(host=("nodeadm-install",), joins=True),
    "hybrid-hosts-gpu": Path(host=GPU_HOST, joins=True),
}

#: By resource name: the awaits that cover work outside Pulumi.
COVERS: dict[str, Covers] = {
    # Helm waits until the operator's ready replicas reach 2 - maxUnavailable 50% = 1 (and the
    # agents' to hosts - 2): a host must have registered, so the join happens in this await. The
    # operator tolerates the hybrid taint only, so the hosts that count are the plain ones (the
    # GPU host, which joins after its driver is in, counts for neither). The hosts install while
    # EKS creates the control plane, so the join typically ends with nodeadm init after the
    # access entry.
    "hybrid-cilium-release": Covers(INSTANCE, "hybrid-hosts-node-", JOINS["hybrid-hosts-node-"]),
    # Helm v3 counts a DaemonSet ready when its desired pods are scheduled and all but
    # maxUnavailable of them ready (helm pkg/kube/ready.go, daemonSetReady). The release installs
    # after Cilium's, which the plain hosts' join ends; the GPU host, whose driver and image
    # take longer than their install, has not joined yet (typically by about half a minute:
    # tests/test_awaits.py checks it), so no node matches the plugin's selector, desired is 0,
    # and the wait returns at once: typically this await covers nothing outside Pulumi.
    # Worst: the GPU host has joined by then and a wait that counts ready pods (as Helm 4's
    # kstatus watcher does) waits through the driver, the join, a reboot and the plugin's
    # longest restart delay; the timeout allows for it.
    "hybrid-nvidia-release": Covers(INSTANCE, "hybrid-hosts-gpu", Path(), worst=GPU_WORST),
    # The vLLM pod is pending until the device plugin advertises nvidia.com/gpu: the driver is
    # in before the join, so the plugin serves from its first start. Its image is in containerd
    # by then (pulled beside the driver), so the pod starts without pulling and loads the model.
    # Worst: a reboot after the join, and the plugin backing off through it.
    "demo-vllm": Covers(INSTANCE, "hybrid-hosts-gpu", JOINS["hybrid-hosts-gpu"],
                        then=("vllm-model-load",), worst=GPU_WORST,
                        # A rollout may bring an image the host did not pull at boot.
                        update_then=("vllm-image-pull",)),
}

#: An await must last this many times its typical duration. The figures are typical values from
#: a handful of logs and one measured run (the 4.5-minute image pull was one network on one day):
#: 1.5 lets a run be half again slower than typical (a slow mirror, a throttled registry, a
#: busier NAT) and still pass, while a deploy that is really stuck still fails within the hour.
#: Tail events known in advance (a reboot, the longest restart backoff) are in COVERS' worst
#: case, which must fit without the factor.
SAFETY_FACTOR = 1.5


def figure(reg: Registration) -> Duration:
    """The resource's figure: by name where BY_NAME has one, else by type."""
    for (type_, prefix), d in BY_NAME.items():
        if reg.type == type_ and reg.name.startswith(prefix):
            return d
    return DURATIONS.get(reg.type, DEFAULT)


def duration(reg: Registration, *, create: bool) -> float:
    """The resource's own work: its figure (plus, at create, phases of its own)."""
    d = figure(reg)
    if not create:
        return d.delete
    covers = COVERS.get(reg.name)
    return d.create + sum(DURATIONS[p].create for p in (covers.then if covers else ()))


def _phases(steps: Iterable[Step]) -> float:
    return sum(max(DURATIONS[p].create for p in step) if isinstance(step, tuple)
               else DURATIONS[step].create for step in steps)


def phase_names(path: Path) -> list[str]:
    """Every phase a path names (the join's own among them)."""
    names = [p for step in (*path.host, *path.after)
             for p in (step if isinstance(step, tuple) else (step,))]
    return names + (["join-retry", "nodeadm-init"] if path.joins else [])


def _labels_match(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _selected_deployments(run: ProgramRun, service: Registration) -> list[Registration]:
    """The Deployments whose pods a Service selects: its await waits for them."""
    meta, spec = service.inputs.get("metadata") or {}, service.inputs.get("spec") or {}
    selector = spec.get("selector") or {}
    found = []
    for dep in run.of_type(DEPLOYMENT):
        dep_meta = dep.inputs.get("metadata") or {}
        template = ((dep.inputs.get("spec") or {}).get("template") or {}).get("metadata") or {}
        if (dep_meta.get("namespace") == meta.get("namespace")
                and _labels_match(selector, template.get("labels") or {})):
            found.append(dep)
    return found


@dataclass(frozen=True)
class Wait:
    """Something a resource's create await waits for beyond what it depends on: ``anchor``'s
    creation, then ``seconds`` of work outside Pulumi; with ``joins``, the host then joins:
    nodeadm init starts once that work is done and ``joins`` (JOIN_NEEDS) are created — the
    script's next try after them — and takes its time; ``after`` seconds follow."""

    anchor: Registration
    seconds: float
    joins: tuple[Registration, ...] = ()
    after: float = 0.0

    def ready(self, finish: Callable[[Registration], float]) -> tuple[float, Registration]:
        """When the work waited for ends, given when each resource's create finishes, and the
        resource whose finish decided it (the host, or one of JOIN_NEEDS)."""
        at, by = finish(self.anchor) + self.seconds, self.anchor
        if self.joins:
            need = max(self.joins, key=lambda r: (finish(r), r.urn))
            cluster_side = finish(need) + DURATIONS["join-retry"].create
            if cluster_side > at:
                at, by = cluster_side, need
            at += DURATIONS["nodeadm-init"].create
        return at + self.after, by


def join_needs(run: ProgramRun) -> tuple[Registration, ...]:
    return tuple(r for type_, prefix in JOIN_NEEDS for r in run.of_type(type_)
                 if r.name.startswith(prefix))


def waits(run: ProgramRun, reg: Registration, *, worst: bool = False) -> list[Wait]:
    covers = COVERS.get(reg.name)
    if covers is not None:
        path = covers.worst if worst and covers.worst is not None else covers.typical
        needs = join_needs(run) if path.joins else ()
        return [Wait(a, _phases(path.host), needs, _phases(path.after))
                for a in run.of_type(covers.after_type) if a.name.startswith(covers.after_prefix)]
    if reg.type == SERVICE:
        return [Wait(d, 0.0) for d in _selected_deployments(run, reg)]
    return []


def _edges(run: ProgramRun) -> dict[str, set[str]]:
    """resource -> what it waits for (dependencies and provider), custom resources only."""
    custom = {r.urn for r in run.resources()}
    edges = {}
    for reg in run.resources():
        targets = set(reg.dependencies)
        if reg.provider:
            targets.add(reg.provider.rsplit("::", 1)[0])
        edges[reg.urn] = {t for t in targets if t in custom}
    return edges


@dataclass(frozen=True)
class Slot:
    #: When Pulumi starts the resource: everything it depends on is done; its await starts.
    start: float
    finish: float
    #: The resource whose finish decided this one's start or end (None: nothing before it).
    via: Optional[str]

    @property
    def window(self) -> float:
        """How long the resource's operation (its await included) lasts."""
        return self.finish - self.start


def _reversed(edges: dict[str, set[str]], nodes: set[str]) -> dict[str, set[str]]:
    """node -> the nodes that wait for it (a destroy waits for its dependents), in one pass
    over the edges rather than a scan of every node for every node."""
    found: dict[str, set[str]] = {n: set() for n in nodes}
    for m in nodes:
        for n in edges.get(m, ()):
            if n in found:
                found[n].add(m)
    return found


def schedule(run: ProgramRun, *, create: bool = True, only: Optional[set[str]] = None,
             edges: Optional[dict[str, set[str]]] = None) -> dict[str, Slot]:
    """Start and finish of every resource (URN -> Slot), typical durations, when each starts as
    soon as what it depends on is done. ``create=False``: a destroy, over the reversed edges.
    ``only``: these resources alone, from time 0 (work they wait for outside the set counts
    from 0)."""
    edges = _edges(run) if edges is None else edges
    nodes = set(edges) if only is None else only
    waits_for = edges if create else _reversed(edges, nodes)
    slots: dict[str, Slot] = {}

    def finish(reg: Registration) -> float:
        # Work waited for outside the set counts from 0.
        return slot(reg.urn).finish if reg.urn in nodes else 0.0

    def slot(urn: str) -> Slot:
        if urn not in slots:
            reg = run.by_urn[urn]
            before = [(slot(d).finish, d) for d in waits_for.get(urn, ()) if d in nodes]
            start, via = max(before, default=(0.0, None))
            ready = start
            # In URN order, as `before`'s ties are broken by URN: the registration order (the
            # SDK's threads) is not the same from run to run, and the chain printed must be.
            for wait in (sorted(waits(run, reg), key=lambda w: w.anchor.urn) if create else ()):
                at, by = wait.ready(finish)
                if at > ready:
                    ready, via = at, (by.urn if by.urn in nodes else via)
            slots[urn] = Slot(start, ready + duration(reg, create=create), via)
        return slots[urn]

    for urn in nodes:
        slot(urn)
    return slots


@dataclass(frozen=True)
class Estimate:
    seconds: float
    chain: list[str]


def _longest(run: ProgramRun, edges: dict[str, set[str]], *, create: bool,
             only: Optional[set[str]] = None) -> Estimate:
    slots = schedule(run, create=create, only=only, edges=edges)
    if not slots:
        return Estimate(0.0, [])
    end = max(slots, key=lambda u: (slots[u].finish, u))  # ties: by URN, whatever the order
    chain, urn = [], end
    while urn is not None:
        chain.append(run.by_urn[urn].name)
        urn = slots[urn].via
    return Estimate(slots[end].finish, list(reversed(chain)))


def estimate_up(run: ProgramRun) -> Estimate:
    return _longest(run, _edges(run), create=True)


def estimate_destroy(run: ProgramRun) -> Estimate:
    return _longest(run, _edges(run), create=False)


def estimate_layer_by_layer(run: ProgramRun) -> float:
    """If each layer waited for the whole previous one (layers chained with depends_on)."""
    edges = _edges(run)
    total = 0.0
    for layer in LAYERS:
        members = {r.urn for r in run.resources() if run.layer_of(r) == layer}
        total += _longest(run, edges, create=True, only=members).seconds
    return total


# --- Await limits --------------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    seconds: float
    source: str


#: pulumi-kubernetes' default awaits (provider/pkg/await/deployment.go
#: DefaultDeploymentTimeoutMins = 10, service.go DefaultServiceTimeoutMins = 10).
KUBERNETES_DEFAULT_AWAIT = {DEPLOYMENT: 600, SERVICE: 600}
#: helm.v3.Release: Helm's wait, `timeout` seconds (provider/pkg/provider/helm_release.go
#: defaultTimeoutSeconds = 300); customTimeouts do not reach it.
HELM_DEFAULT_TIMEOUT = 300
#: terraform-provider-aws default create timeouts, which pulumi-aws inherits and
#: customTimeouts replace (internal/service/eks/cluster.go, node_group.go, addon.go;
#: ec2/ec2_instance.go; ec2/vpc_nat_gateway.go).
AWS_DEFAULT_CREATE = {
    "aws:eks/cluster:Cluster": (1800, "aws_eks_cluster default create timeout 30m"),
    "aws:eks/nodeGroup:NodeGroup": (3600, "aws_eks_node_group default create timeout 60m"),
    "aws:eks/addon:Addon": (1200, "aws_eks_addon default create timeout 20m"),
    INSTANCE: (600, "aws_instance default create timeout 10m"),
    "aws:ec2/natGateway:NatGateway": (600, "aws_nat_gateway default create timeout 10m"),
}
AWS_DEFAULT_UPDATE = {
    "aws:eks/cluster:Cluster": (3600, "aws_eks_cluster default update timeout 60m"),
    "aws:eks/nodeGroup:NodeGroup": (3600, "aws_eks_node_group default update timeout 60m"),
    "aws:eks/addon:Addon": (1200, "aws_eks_addon default update timeout 20m"),
    INSTANCE: (600, "aws_instance default update timeout 10m"),
    "aws:ec2/natGateway:NatGateway": (600, "aws_nat_gateway default update timeout 10m"),
}

_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def go_duration_seconds(text: str) -> float:
    """A Go duration string ("30m", "1h30m", "90s") in seconds, as customTimeouts takes it."""
    if not text or _GO_PART.sub("", text) != "":
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * _GO_UNITS[u] for n, u in _GO_PART.findall(text))


def await_limit(reg: Registration, operation: str = "create") -> Optional[Limit]:
    """How long Pulumi waits for ``reg``'s create (or update) before failing it, and where that
    comes from; None when nothing waits (skipAwait, or no await for the type) or the type's
    limit is not modelled here."""
    custom = reg.custom_timeouts.get(operation)
    if reg.type in KUBERNETES_DEFAULT_AWAIT:
        annotations = (reg.inputs.get("metadata") or {}).get("annotations") or {}
        if str(annotations.get("pulumi.com/skipAwait", "")).lower() == "true":
            return None
        # Order of precedence: customTimeouts, the timeoutSeconds annotation, the default
        # (pulumi-kubernetes #672).
        if custom:
            return Limit(go_duration_seconds(custom), f"customTimeouts.{operation} {custom}")
        if "pulumi.com/timeoutSeconds" in annotations:
            seconds = float(annotations["pulumi.com/timeoutSeconds"])
            return Limit(seconds, f"annotation pulumi.com/timeoutSeconds {seconds:g}")
        minutes = KUBERNETES_DEFAULT_AWAIT[reg.type] // 60
        return Limit(KUBERNETES_DEFAULT_AWAIT[reg.type], f"pulumi-kubernetes default {minutes} min")
    if reg.type == RELEASE:
        if reg.inputs.get("skipAwait"):
            return None
        if reg.inputs.get("timeout") is not None:
            return Limit(float(reg.inputs["timeout"]), f"timeout {float(reg.inputs['timeout']):g} s")
        return Limit(HELM_DEFAULT_TIMEOUT, f"Helm default {HELM_DEFAULT_TIMEOUT} s")
    defaults = AWS_DEFAULT_CREATE if operation == "create" else AWS_DEFAULT_UPDATE
    if reg.type in defaults:
        if custom:
            return Limit(go_duration_seconds(custom), f"customTimeouts.{operation} {custom}")
        return Limit(*defaults[reg.type])
    return None


# --- The awaits model ----------------------------------------------------------------------


@dataclass(frozen=True)
class Await:
    name: str
    type: str
    operation: str
    #: Typical length of the operation, its await included.
    typical: float
    #: In the worst case COVERS knows of (equal to typical where it knows none).
    worst: float
    limit: Limit

    @property
    def problem(self) -> Optional[str]:
        if self.typical * SAFETY_FACTOR > self.limit.seconds:
            return (f"{self.name}: {self.operation} typically takes {self.typical:.0f} s; x"
                    f"{SAFETY_FACTOR:g} = {self.typical * SAFETY_FACTOR:.0f} s exceeds its await "
                    f"limit {self.limit.seconds:.0f} s ({self.limit.source})")
        if self.worst > self.limit.seconds:
            return (f"{self.name}: {self.operation} takes up to {self.worst:.0f} s, over its await "
                    f"limit {self.limit.seconds:.0f} s ({self.limit.source})")
        return None


def _update_seconds(reg: Registration) -> Optional[float]:
    """A Deployment's rollout: its own work again (the image may be new), after the old pods
    stop when the strategy is Recreate; None for other types (not modelled)."""
    if reg.type != DEPLOYMENT:
        return None
    spec = reg.inputs.get("spec") or {}
    covers = COVERS.get(reg.name)
    seconds = duration(reg, create=True) + _phases(covers.update_then if covers else ())
    if (spec.get("strategy") or {}).get("type") == "Recreate":
        seconds += float(((spec.get("template") or {}).get("spec") or {})
                         .get("terminationGracePeriodSeconds", 30))
    return seconds


def _worst_window(run: ProgramRun, reg: Registration, slots: dict[str, Slot]) -> float:
    """The create's length when this resource's outside work takes its worst case and
    everything else its typical time."""
    ready = slots[reg.urn].start
    for wait in waits(run, reg, worst=True):
        ready = max(ready, wait.ready(lambda r: slots[r.urn].finish)[0])
    return max(slots[reg.urn].window, ready + duration(reg, create=True) - slots[reg.urn].start)


def _joins(run: ProgramRun, slots: dict[str, Slot]) -> list[Await]:
    """Each host's join as the await it is: its script tries nodeadm init until
    JOIN_DEADLINE_SECONDS from its start (about when its instance runs). Typically the join
    ends after the host's install or after what it needs of the cluster, whichever is later.
    In the worst case the control plane takes its whole create timeout (beyond it `pulumi up`
    fails anyway); what follows it (the access entry, the policy that reads the cluster) takes
    half again its typical time, and the next try starts within the script's pause. A host that
    starts before the cluster's create would wait that much longer; one that starts after it
    gets no credit for its head start."""
    clusters = [r for r in run.of_type(CLUSTER) if r.name.startswith(JOIN_NEEDS[0][1])]
    limit = Limit(user_data.JOIN_DEADLINE_SECONDS,
                  "the join script's deadline, components/hybrid_user_data.py JOIN_DEADLINE_SECONDS")
    found = []
    for host in run.of_type(INSTANCE):
        path = next((p for prefix, p in JOINS.items() if host.name.startswith(prefix)), None)
        if path is None or not clusters:
            continue
        [cluster], needs = clusters, join_needs(run)
        cluster_limit = await_limit(cluster, "create")
        finish = lambda r: slots[r.urn].finish
        started = finish(host)
        wait = Wait(host, _phases(path.host), needs)
        typical = wait.ready(finish)[0] - started
        after = max(finish(r) - finish(cluster) for r in needs) * SAFETY_FACTOR
        worst = (max(0.0, slots[cluster.urn].start - started) + cluster_limit.seconds + after
                 + DURATIONS["join-retry"].create)
        found.append(Await(host.name, "nodeadm init", "join", typical, worst, limit))
    return found


def awaits(run: ProgramRun) -> list[Await]:
    """Every awaited create (and Deployment update) with its typical and worst length and its
    limit, from the same schedule as the estimate; and each host's join, which its script
    awaits."""
    slots = schedule(run)
    found = _joins(run, slots)
    for reg in run.resources():
        limit = await_limit(reg, "create")
        if limit is not None:
            found.append(Await(reg.name, reg.type, "create", slots[reg.urn].window,
                               _worst_window(run, reg, slots), limit))
        update, limit = _update_seconds(reg), await_limit(reg, "update")
        if update is not None and limit is not None:
            found.append(Await(reg.name, reg.type, "update", update, update, limit))
    return found


def await_problems(run: ProgramRun) -> list[str]:
    return [a.problem for a in awaits(run) if a.problem]
