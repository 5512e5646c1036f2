"""`python -m rehearse burst` and `verify burst` (demo 2) against the Kubernetes emulator, the
test playing the cluster on a simulated clock: the Deployment and ReplicaSet controllers (the
ReplicaSet deletes the pods docs/scale-in.md's rules pick, through ``rehearse.models.ranking``, whose own
tests port the upstream controller's cases), the scheduler (hybrid nodes first, 4 burst pods
each by their real allocatable), Karpenter (it batches the pending pods for 1.2 s, creates one
NodeClaim per 4 pods, whose node is Ready 32 s later; consolidates an empty node after 30 s;
with its gate it ranks the cloud pods -n..-1, the emptiest node first, a minute apart), Kyverno
(it writes "1" on pods bound to hybrid nodes a second after binding, when it may get nodes), and
the API server's authorizer (SubjectAccessReviews). The tool's sleeps advance the clock and the
cluster acts when its time comes; nothing waits for real.

The scenario is switched through a stand-in stack object (the seam `rehearse.commands.burst.command.open_stack`),
or through the Automation API and the fake `pulumi` (tests/fake_pulumi.py). The forecast is the
real one, so forecast and cluster agree unless a test plants a difference (a ReplicaSet that
ignores the costs, a Karpenter eviction).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import math
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional
from unittest import mock

import pytest

from rehearse import cli
from rehearse.commands.burst import command as burst_command
from rehearse.commands.burst import kinds as burst_kinds
from rehearse.commands.burst.capacity import capacity_check
from rehearse.commands.burst.reading import (cost_of, feature_gates, image_version, neighbour_summary,
                                            node_summary)
from rehearse.commands.burst.scalein import compare
from rehearse.commands.burst.watch import hybrid_room
from rehearse.run import execute as run_execute
from rehearse.models import ranking as predict
from rehearse.models import ranking
from rehearse.run.record import read_events
from rehearse.run.report import FAIL, PASS
from tests import fake_pulumi as fake_pulumi_cli
from tests.conftest import list_charts_only
from tests.offline_guard import loopback_connect
from tests.kube_emulator import (CLUSTERPOLICIES, CONFIGMAPS, DEPLOYMENTS, EVENTS, NODECLAIMS,
                                 NODEPOOLS, NODES, PODS, REPLICASETS, Emulator, resource_key)

FIXTURES = Path(__file__).parent / "fixtures" / "rehearse"
UTC = datetime.timezone.utc
#: The simulated "now" when a run starts (the cluster's clock is this machine's).
T0 = datetime.datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
NS = "demo-burst"
POOL = "cloud-burst"
HASH0 = "6c9f7d8b4"
REQUEST_M = 900
GRACE_S = 2.0
#: The tool's poll in the runs that read nothing of its granularity (Lab.run).
POLL_S = "5"


def stamp(t: float) -> str:
    """The API server's whole-second timestamps."""
    return (T0 + datetime.timedelta(seconds=math.floor(t))).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the cluster, played ---------------------------------------------------------------------------

@dataclass
class Faults:
    #: Kyverno's background controller may not get nodes (the demo guide's B that looked like A).
    background_nodes: bool = True
    #: The Karpenter image running (1.14.1 ignores the gate: C would look like B).
    karpenter_version: str = "1.15.0"
    #: The Deployment's pod template carries a cost (a leftover no restart clears).
    template_cost: Optional[str] = None
    #: The costs the running pods carry before the run (a previous scenario's).
    pod_cost: Optional[str] = None
    #: The ReplicaSet controller ignores pod-deletion-cost (as with the PodDeletionCost gate off).
    ignore_cost: bool = False
    #: Karpenter evicts one pod of the emptiest cloud node when the Deployment scales to this.
    evict_at: Optional[int] = None
    #: Raise this in the tool's sleep once the Deployment has been scaled to 12.
    fail_at_12: Optional[BaseException] = None
    #: A pod from another workload on hybrid-2 requesting this many millicores.
    squatter_m: int = 0
    #: Karpenter's first ranking comes this long after its nodes are Ready.
    rank_delay: float = 20.0
    #: Karpenter can launch nothing (an exhausted limit, no capacity in the zone).
    no_launch: bool = False
    #: Once the Deployment is back at 3 after a burst, Karpenter consolidates a cloud node whose
    #: pods fit in the hybrid nodes' free room 30 s after it sees it (what the lab expects it
    #: never to do): events, evictions, the ReplicaSet's replacements land on hybrid nodes.
    consolidate_onto_hybrid: bool = False


@dataclass
class SimPod:
    name: str
    hash: str
    created: float
    node: Optional[str] = None
    ready: Optional[float] = None
    cost: Optional[str] = None
    deleting: Optional[float] = None
    disruption: bool = False
    #: When the DisruptionTarget condition came (None: with the deletion).
    disrupted_at: Optional[float] = None
    unschedulable_since: Optional[float] = None
    nominated: Optional[str] = None


@dataclass
class SimNode:
    name: str
    place: str
    created: float
    ready: Optional[float] = None
    empty_since: Optional[float] = None
    claim: Optional[str] = None
    underused_since: Optional[float] = None
    disrupting: bool = False
    said_unconsolidatable: bool = False


class Cluster:
    """The controllers, on this clock. ``t`` is seconds after T0 (this machine's and the
    cluster's clock)."""

    def __init__(self, server: Emulator, scenario: str, faults: Faults):
        self.server, self.faults = server, faults
        self.scenario = scenario
        self.t = 0.0
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self.pods: dict[str, SimPod] = {}
        self.nodes: dict[str, SimNode] = {}
        self.replica_sets: list[tuple[str, int]] = [(HASH0, 1)]  # (hash, revision)
        self.restarted_at: Optional[str] = None
        self.counter = 0
        self.claims: dict[str, dict] = {}
        self.next_rank: Optional[float] = None
        self.progress: list[str] = []
        self.dirty: set[str] = set()
        self.replicas_seen: list[int] = []
        self.log: list[tuple[float, str]] = []

    # the clock

    def clock(self) -> datetime.datetime:
        return T0 + datetime.timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return 1000.0 + self.t

    def sleep(self, seconds: float) -> None:
        end = self.t + seconds
        while True:
            due = sorted(self.timers)
            if not due or due[0][0] > end:
                break
            at, _, action = due[0]
            self.timers.remove(due[0])
            self.t = max(self.t, at)
            action()
            self.react()
        self.t = end
        # Its flush lets kmock forget the requests it keeps whole (the emulator keeps a
        # summary), so a long run stays small.
        self.react()
        if self.faults.fail_at_12 is not None and 12 in self.replicas_seen:
            error, self.faults.fail_at_12 = self.faults.fail_at_12, None
            raise error

    def later(self, delay: float, action: Callable[[], None]) -> None:
        self.counter += 1
        self.timers.append((self.t + delay, self.counter, action))

    # the cluster's state, written to the emulator

    @property
    def gate(self) -> bool:
        return self.scenario == "C"

    @property
    def gate_works(self) -> bool:
        return self.gate and tuple(int(x) for x in self.faults.karpenter_version.split(".")) >= (1, 15, 0)

    @property
    def kyverno_writes(self) -> bool:
        return self.scenario in ("B", "C") and self.faults.background_nodes

    def new_pod_name(self, template_hash: str) -> str:
        self.counter += 1
        return f"burst-{template_hash}-{self.counter:05d}"

    def pod_object(self, pod: SimPod) -> dict:
        annotations = {}
        if pod.cost is not None:
            annotations[burst_kinds.COST] = pod.cost
        metadata = {"uid": f"uid-{pod.name}", "creationTimestamp": stamp(pod.created),
                    "labels": {"app": "burst", burst_kinds.TEMPLATE_HASH: pod.hash},
                    "annotations": annotations,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                         "name": f"burst-{pod.hash}", "uid": f"uid-rs-{pod.hash}",
                                         "controller": True}]}
        if pod.deleting is not None:
            metadata["deletionTimestamp"] = stamp(pod.deleting + GRACE_S)
            metadata["deletionGracePeriodSeconds"] = int(GRACE_S)
        conditions = []
        if pod.node:
            conditions.append({"type": "PodScheduled", "status": "True",
                               "lastTransitionTime": stamp(pod.created)})
        elif pod.unschedulable_since is not None:
            conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                               "lastTransitionTime": stamp(pod.unschedulable_since)})
        conditions.append({"type": "Ready", "status": "True" if pod.ready is not None else "False",
                           "lastTransitionTime": stamp(pod.ready if pod.ready is not None else pod.created)})
        if pod.disruption:
            conditions.append({"type": "DisruptionTarget", "status": "True",
                               "reason": "EvictionByEvictionAPI",
                               "message": "Eviction API: evicting",
                               "lastTransitionTime": stamp(pod.disrupted_at if pod.disrupted_at is not None
                                                           else pod.deleting or self.t)})
        spec = {"containers": [{"name": "web", "resources": {"requests": {
            "cpu": f"{REQUEST_M}m", "memory": "64Mi"}}}]}
        if pod.node:
            spec["nodeName"] = pod.node
        return {"metadata": metadata, "spec": spec,
                "status": {"phase": "Running" if pod.ready is not None else "Pending",
                           "conditions": conditions,
                           "containerStatuses": [{"name": "web", "restartCount": 0, "image": "nginx", "imageID": "",
                                                  "ready": pod.ready is not None}]}}

    def flush(self) -> None:
        """The changed pods written, in one hand-off to the emulator's thread (the tool sends
        nothing while the cluster acts), and kmock's kept requests trimmed in it."""
        changes = []
        for name in sorted(self.dirty):
            pod = self.pods.get(name)
            changes.append((PODS, NS, name, None if pod is None else self.pod_object(pod)))
        self.server.write(changes, then=self.server._trim)
        self.dirty.clear()

    def touch(self, pod: SimPod) -> None:
        self.dirty.add(pod.name)

    # controllers

    def read(self) -> dict:
        """The Deployment as the tool last wrote it, in the same hand-off to the emulator's
        thread as the pods' costs; a cost someone else wrote or removed on the API server
        (the tool's restore strips them) is the pod's from now on — the controllers here would
        otherwise write it back."""
        def read(kmock: Any) -> tuple[dict[str, Optional[str]], Any]:
            found, pods = {}, resource_key(PODS)
            for name, pod in self.pods.items():
                try:
                    stored = kmock.objects[pods, NS, name]
                except KeyError:
                    continue
                if not stored.deleted:
                    found[name] = ((stored.raw.get("metadata") or {}).get("annotations") or {}).get(burst_kinds.COST)
            try:
                deployment = kmock.objects[resource_key(DEPLOYMENTS), NS, "burst"]
            except KeyError:
                return found, None
            return found, None if deployment.deleted else deployment.raw

        costs, deployment = self.server.do(read)
        for name, cost in costs.items():
            if name not in self.dirty and self.pods[name].cost != cost:
                self.pods[name].cost = cost
        return deployment

    def react(self) -> None:
        deployment = self.read()
        spec = deployment["spec"]
        replicas = int(spec["replicas"])
        if not self.replicas_seen or self.replicas_seen[-1] != replicas:
            self.replicas_seen.append(replicas)
        annotations = (spec["template"].get("metadata") or {}).get("annotations") or {}
        restarted = annotations.get(burst_kinds.RESTARTED_AT)
        if restarted != self.restarted_at:
            self.restarted_at = restarted
            revision = self.replica_sets[-1][1] + 1
            template_hash = f"7d{revision}f5c8b9"
            self.replica_sets.append((template_hash, revision))
            self.server.put(REPLICASETS, NS, f"burst-{template_hash}", replica_set(template_hash, revision))
            self.log.append((self.t, f"rollout to {template_hash}"))
        current = self.replica_sets[-1][0]
        template_cost = annotations.get(burst_kinds.COST)
        self.replica_set(current, replicas, template_cost)
        new_ready = all(p.ready is not None for p in self.live() if p.hash == current) and \
            len([p for p in self.live() if p.hash == current]) == replicas
        for old, _ in self.replica_sets[:-1]:
            if new_ready:
                self.replica_set(old, 0, None)
        self.schedule()
        self.karpenter()
        self.flush()

    def live(self) -> list[SimPod]:
        return [p for p in self.pods.values() if p.deleting is None]

    def rank(self, pod: SimPod) -> int:
        return len([p for p in self.live() if p.node == pod.node])

    def replica_set(self, template_hash: str, replicas: int, template_cost: Optional[str]) -> None:
        mine = [p for p in self.live() if p.hash == template_hash]
        if len(mine) < replicas:
            for _ in range(replicas - len(mine)):
                pod = SimPod(self.new_pod_name(template_hash), template_hash, self.t,
                             cost=template_cost)
                self.pods[pod.name] = pod
                self.touch(pod)
        elif len(mine) > replicas:
            # The ReplicaSet controller's own rules (docs/scale-in.md), as rehearse.models.ranking implements
            # them and its tests prove on the upstream controller's cases; among exact ties the
            # real controller picks at random, this one takes predict's order. With the
            # ignore_cost fault the costs are not seen (the PodDeletionCost gate off).
            def seen(pod: SimPod) -> dict:
                obj = self.pod_object(pod)
                obj["metadata"].update(name=pod.name, namespace=NS)
                if self.faults.ignore_cost:
                    obj["metadata"]["annotations"].pop(burst_kinds.COST, None)
                return obj

            mine_objects = [seen(p) for p in mine]
            related = [seen(p) for p in self.live()]
            chosen = predict.forecast(mine_objects, related, replicas, self.clock())
            for victim in chosen.delete:
                self.delete(self.pods[victim.name])
                self.log.append((self.t, f"scale-in deletes {victim.name}"))

    def delete(self, pod: SimPod, disruption: bool = False) -> None:
        pod.deleting = self.t
        pod.disruption = disruption
        self.touch(pod)

        def gone() -> None:
            self.pods.pop(pod.name, None)
            self.dirty.add(pod.name)

        self.later(GRACE_S, gone)

    def used_m(self, node: str) -> int:
        base = {"hybrid-1": 260, "hybrid-2": 250 + self.faults.squatter_m}.get(node, 200)
        return base + REQUEST_M * len([p for p in self.pods.values() if p.node == node])

    def schedule(self) -> None:
        pending = sorted((p for p in self.live() if p.node is None), key=lambda p: p.name)
        for pod in pending:
            candidates = [n for n in self.nodes.values() if n.ready is not None and n.place == "hybrid"]
            candidates += [n for n in self.nodes.values() if n.ready is not None and n.place == "cloud"
                           and not n.disrupting and (pod.nominated in (None, n.name))]
            target = next((n for n in candidates if self.used_m(n.name) + REQUEST_M <= 3920), None)
            if target is None:
                if pod.unschedulable_since is None:
                    pod.unschedulable_since = self.t
                    self.touch(pod)
                    self.later(1.2, lambda: None)  # Karpenter's batch window ends
                continue
            self.bind(pod, target.name)

    def bind(self, pod: SimPod, node: str) -> None:
        pod.node = node
        self.touch(pod)

        def started() -> None:
            if pod.name in self.pods and pod.deleting is None:
                pod.ready = self.t
                self.touch(pod)

        self.later(4.0, started)
        if self.nodes[node].place == "hybrid" and self.kyverno_writes:
            def annotate() -> None:
                if pod.name in self.pods and pod.deleting is None:
                    pod.cost = "1"
                    self.touch(pod)

            self.later(1.0, annotate)

    def karpenter(self) -> None:
        # Provisioning: the pending pods, batched for 1.2 s, one NodeClaim per 4 pods.
        waiting = [p for p in self.live() if p.node is None and p.unschedulable_since is not None
                   and p.nominated is None]
        if waiting and not self.faults.no_launch \
                and self.t - min(p.unschedulable_since for p in waiting) >= 1.2 - 1e-9:
            for i in range(0, len(waiting), 4):
                self.launch(sorted(waiting, key=lambda p: p.name)[i:i + 4])
        # Consolidation: an empty cloud node goes after 30 s. One that holds pods is
        # Unconsolidatable under WhenEmpty, said once on the Node and its NodeClaim (as the
        # real Karpenter 1.15.0 does, deduplicated for 15 minutes: tests/test_real_karpenter.py).
        for node in list(self.nodes.values()):
            if node.place != "cloud" or node.ready is None:
                continue
            if any(p.node == node.name for p in self.pods.values()):
                node.empty_since = None
                if not node.said_unconsolidatable:
                    node.said_unconsolidatable = True
                    message = (f'NodePool "{POOL}" has consolidation policy WhenEmpty, but node '
                               "is not empty")
                    self.event("Node", node.name, "Unconsolidatable", message)
                    self.event("NodeClaim", node.claim, "Unconsolidatable", message)
            elif node.empty_since is None:
                node.empty_since = self.t
                self.later(30.0, lambda node=node: self.consolidate(node))
        if self.faults.consolidate_onto_hybrid:
            self.consolidate_onto_hybrid()
        # Ranking (the gate): a minute apart, the emptiest node most negative.
        if self.gate_works and self.next_rank is not None and self.t >= self.next_rank:
            self.next_rank = self.t + 60.0
            cloud = sorted((n for n in self.nodes.values() if n.place == "cloud" and n.ready is not None),
                           key=lambda n: (len([p for p in self.live() if p.node == n.name]), n.name))
            for index, node in enumerate(cloud):
                for pod in self.live():
                    if pod.node == node.name:
                        pod.cost = str(index - len(cloud))
                        self.touch(pod)
            self.later(60.0, lambda: None)

    def launch(self, pods: list[SimPod]) -> None:
        index = len(self.claims) + 1
        claim = f"{POOL}-{'abcdefgh'[index - 1]}x{index}k"
        node = f"ip-10-0-{index}-{10 + index}.ap-northeast-2.compute.internal"
        self.claims[claim] = {"created": self.t, "node": node}
        for pod in pods:
            pod.nominated = node
        self.server.put(NODECLAIMS, None, claim, {
            "metadata": {"creationTimestamp": stamp(self.t), "labels": {
                burst_kinds.NODEPOOL_LABEL: POOL, "node.kubernetes.io/instance-type": "m6i.xlarge"}},
            "spec": {"nodeClassRef": {"name": "default"}}, "status": {}})
        self.log.append((self.t, f"NodeClaim {claim}"))

        def registered() -> None:
            self.nodes[node] = SimNode(node, "cloud", self.t, ready=self.t, claim=claim)
            self.server.put(NODES, None, node, node_object(node, "cloud"))
            self.server.put(NODECLAIMS, None, claim, {
                "metadata": {"creationTimestamp": stamp(self.claims[claim]["created"]), "labels": {
                    burst_kinds.NODEPOOL_LABEL: POOL, "node.kubernetes.io/instance-type": "m6i.xlarge"}},
                "status": {"nodeName": node, "conditions": [{"type": "Ready", "status": "True"}]}})
            if self.gate_works and self.next_rank is None:
                self.next_rank = self.t + self.faults.rank_delay
                self.later(self.faults.rank_delay, lambda: None)

        self.later(32.0, registered)

    def event(self, kind: str, name: str, reason: str, message: str) -> None:
        """An Event of Karpenter's, where the API server puts a cluster-scoped object's."""
        self.counter += 1
        self.server.put(EVENTS, "default", f"{name}.{self.counter:x}", {
            "involvedObject": {"kind": kind, "name": name,
                               "apiVersion": "karpenter.sh/v1" if kind == "NodeClaim" else "v1"},
            "reason": reason, "message": message, "type": "Normal", "count": 1,
            "source": {"component": "karpenter"},
            "firstTimestamp": stamp(self.t), "lastTimestamp": stamp(self.t)})

    def hybrid_slots(self) -> int:
        return sum(max((3920 - self.used_m(n.name)) // REQUEST_M, 0)
                   for n in self.nodes.values() if n.place == "hybrid")

    def consolidate_onto_hybrid(self) -> None:
        if len(self.replicas_seen) < 2 or self.replicas_seen[-1] != 3:
            return
        for node in list(self.nodes.values()):
            if node.place != "cloud" or node.ready is None or node.disrupting:
                continue
            pods = [p for p in self.live() if p.node == node.name]
            if not pods or len(pods) > self.hybrid_slots():
                node.underused_since = None
                continue
            if node.underused_since is None:
                node.underused_since = self.t
                self.later(30.0, lambda: None)
            elif self.t - node.underused_since >= 30.0 - 1e-9:
                node.disrupting = True
                self.event("Node", node.name, "DisruptionTerminating", "Disrupting Node: Underutilized")
                self.event("NodeClaim", node.claim, "DisruptionTerminating",
                           "Disrupting NodeClaim: Underutilized")
                for pod in pods:
                    self.delete(pod, disruption=True)
                    self.log.append((self.t, f"Karpenter evicts {pod.name} to consolidate {node.name}"))
                self.later(GRACE_S + 1.0, lambda node=node: self.consolidate(node, None))

    def consolidate(self, node: SimNode, reason: Optional[str] = "Empty") -> None:
        """Deletes the node and its NodeClaim; ``reason``: announce it first (None: announced
        when the disruption began)."""
        if node.name not in self.nodes or any(p.node == node.name for p in self.pods.values()):
            return
        if reason:
            self.event("Node", node.name, "DisruptionTerminating", f"Disrupting Node: {reason}")
            self.event("NodeClaim", node.claim, "DisruptionTerminating",
                       f"Disrupting NodeClaim: {reason}")
        del self.nodes[node.name]
        self.server.delete(NODES, None, node.name)
        self.server.delete(NODECLAIMS, None, node.claim)
        self.log.append((self.t, f"consolidated {node.name}"))

    def evict_while_terminating(self, pod: SimPod) -> None:
        """The Eviction API on a pod already being deleted: no disruption budget is checked (a
        pod with a deletionTimestamp may always go), the DisruptionTarget condition is added
        to it, and it is deleted again, going at the same moment (kubernetes/kubernetes,
        pkg/registry/core/pod/storage/eviction.go: canIgnorePDB, addConditionAndDeletePod)."""
        if self.pods.get(pod.name) is pod and pod.deleting is not None:
            pod.disruption, pod.disrupted_at = True, self.t
            self.touch(pod)
            self.log.append((self.t, f"evicted {pod.name} while it terminates"))

    def evict_one(self) -> None:
        cloud = sorted((n for n in self.nodes.values() if n.place == "cloud"),
                       key=lambda n: (len([p for p in self.live() if p.node == n.name]), n.name))
        victim = sorted((p for p in self.live() if p.node == cloud[0].name), key=lambda p: p.name)[0]
        self.delete(victim, disruption=True)
        self.log.append((self.t, f"Karpenter evicts {victim.name}"))

    # the authorizer

    def authorize(self, spec: dict) -> tuple[bool, str]:
        user = spec.get("user", "")
        attributes = spec.get("resourceAttributes") or {}
        verb, resource = attributes.get("verb"), attributes.get("resource")
        if user == "system:serviceaccount:kyverno:kyverno-admission-controller":
            return (verb, resource) == ("get", "nodes"), "RBAC: allowed by ClusterRoleBinding kyverno:admission-controller"
        if user == "system:serviceaccount:kyverno:kyverno-background-controller":
            if (verb, resource) == ("get", "nodes"):
                return self.faults.background_nodes, ("RBAC: allowed by ClusterRoleBinding kyverno:background-controller"
                                                      if self.faults.background_nodes else "")
            return (verb, resource) == ("update", "pods"), "RBAC: allowed by ClusterRoleBinding kyverno:background-controller"
        if user == "system:serviceaccount:kube-system:karpenter":
            return (verb, resource) == ("patch", "pods") and self.gate, \
                "RBAC: allowed by ClusterRoleBinding karpenter" if self.gate else ""
        return False, ""

    # the stack's program, for what a scenario switch changes

    def apply_scenario(self, scenario: str) -> None:
        leaving_c = self.scenario == "C" and scenario != "C"
        self.scenario = scenario
        plant_scenario(self.server, scenario, self.faults)
        if leaving_c:  # the DeletionCostRanks resource strips Karpenter's values
            for pod in self.pods.values():
                if pod.cost is not None and cost_of(pod.cost) < 0:
                    pod.cost = None
                    self.touch(pod)
        self.flush()


def replica_set(template_hash: str, revision: int) -> dict:
    return {"metadata": {"labels": {"app": "burst", burst_kinds.TEMPLATE_HASH: template_hash},
                         "annotations": {burst_kinds.REVISION: str(revision)},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                              "name": "burst", "uid": "uid-burst", "controller": True}]},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "burst",
                                                                 burst_kinds.TEMPLATE_HASH: template_hash}}}}


def node_object(name: str, place: str) -> dict:
    labels = {"kubernetes.io/hostname": name}
    taints = []
    if place == "hybrid":
        labels[burst_kinds.HYBRID_LABEL] = "hybrid"
        taints = [{"key": burst_kinds.HYBRID_LABEL, "value": "hybrid", "effect": "NoSchedule"}]
    elif place == "cloud":
        labels.update({burst_kinds.NODEPOOL_LABEL: POOL, "node.kubernetes.io/instance-type": "m6i.xlarge"})
        taints = [{"key": "eks-hybrid-lab.io/burst", "value": "true", "effect": "NoSchedule"}]
    elif place == "gpu":
        labels[burst_kinds.HYBRID_LABEL] = "hybrid"
        taints = [{"key": burst_kinds.HYBRID_LABEL, "value": "hybrid", "effect": "NoSchedule"},
                  {"key": "gpu", "value": "true", "effect": "NoSchedule"}]
    else:
        labels["role"] = "system"
    return {"metadata": {"labels": labels}, "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "3920m", "memory": "14819Mi"},
                       "capacity": {"cpu": "4", "memory": "16000Mi"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def neighbour(name: str, namespace: str, node: str, cpu: str = "", init_cpu: str = "") -> dict:
    containers = [{"name": "main", "resources": {"requests": {"cpu": cpu}} if cpu else {}}]
    spec: dict = {"nodeName": node, "containers": containers}
    if init_cpu:
        spec["initContainers"] = [{"name": "install", "resources": {"requests": {"cpu": init_cpu}}}]
    return {"metadata": {"labels": {"app": name.rsplit("-", 1)[0]}}, "spec": spec,
            "status": {"phase": "Running"}}


def karpenter_spec(version: str, gate: bool) -> dict:
    gates = ("ReservedCapacity=true,SpotToSpotConsolidation=false,NodeRepair=false,"
             f"NodeOverlay=false,StaticCapacity=false,PodDeletionCostManagement={'true' if gate else 'false'}")
    return {"serviceAccountName": "karpenter", "containers": [{
        "name": "controller",
        "image": f"public.ecr.aws/karpenter/controller:{version}@sha256:{'0' * 64}",
        "env": [{"name": "KUBERNETES_MIN_VERSION", "value": "1.19.0-0"},
                {"name": "FEATURE_GATES", "value": gates}]}]}


def plant_scenario(server: Emulator, scenario: str, faults: Faults) -> None:
    """What `pulumi up` leaves for a scenario: the policy in B and C, Karpenter's gate in C
    (its pods restart with the new env)."""
    if scenario in ("B", "C"):
        server.put(CLUSTERPOLICIES, None, burst_kinds.POLICY, {
            "spec": {"background": False, "rules": [{"name": "deletion-cost-on-hybrid-nodes"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                                       "message": "Ready"}]}})
    elif server.get(CLUSTERPOLICIES, None, burst_kinds.POLICY) is not None:
        server.delete(CLUSTERPOLICIES, None, burst_kinds.POLICY)
    spec = karpenter_spec(faults.karpenter_version, scenario == "C")
    server.put(DEPLOYMENTS, "kube-system", "karpenter", {
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app.kubernetes.io/name": "karpenter"}},
                 "template": {"metadata": {"labels": {"app.kubernetes.io/name": "karpenter"}},
                              "spec": spec}}})
    for i in (1, 2):
        server.put(PODS, "kube-system", f"karpenter-5b8d9c-{i}", {
            "metadata": {"labels": {"app.kubernetes.io/name": "karpenter"}}, "spec": spec,
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})


def plant(server: Emulator, cluster: Cluster, faults: Faults, scenario: str) -> None:
    server.declare(NODECLAIMS, NODEPOOLS, CLUSTERPOLICIES, REPLICASETS, EVENTS)
    server.access_reviews(cluster.authorize)
    for name, place in (("hybrid-1", "hybrid"), ("hybrid-2", "hybrid"), ("system-1", "system")):
        server.put(NODES, None, name, node_object(name, place))
        cluster.nodes[name] = SimNode(name, place, -7200.0, ready=-7200.0)
    for node in ("hybrid-1", "hybrid-2"):
        suffix = node[-1]
        server.put(PODS, "kube-system", f"kube-proxy-h{suffix}", neighbour(f"kube-proxy-h{suffix}", "kube-system", node, "100m"))
        server.put(PODS, "kube-system", f"cilium-h{suffix}", neighbour(f"cilium-h{suffix}", "kube-system", node, init_cpu="100m"))
        server.put(PODS, "demo-gateway", f"echo-hybrid-{suffix}", neighbour(f"echo-hybrid-{suffix}", "demo-gateway", node, "50m"))
    server.put(PODS, "demo-gateway", "prober-hybrid-1", neighbour("prober-hybrid-1", "demo-gateway", "hybrid-1", "10m"))
    if faults.squatter_m:
        server.put(PODS, "default", "squatter-1", neighbour("squatter-1", "default", "hybrid-2", f"{faults.squatter_m}m"))
    template = {"metadata": {"labels": {"app": "burst"},
                             "annotations": ({burst_kinds.COST: faults.template_cost} if faults.template_cost else {})},
                "spec": {"containers": [{"name": "web", "resources": {
                    "requests": {"cpu": f"{REQUEST_M}m", "memory": "64Mi"},
                    "limits": {"cpu": "1", "memory": "128Mi"}}}],
                         "tolerations": [
                             {"key": burst_kinds.HYBRID_LABEL, "operator": "Equal", "value": "hybrid",
                              "effect": "NoSchedule"},
                             {"key": "eks-hybrid-lab.io/burst", "operator": "Equal", "value": "true",
                              "effect": "NoSchedule"}]}}
    server.put(DEPLOYMENTS, NS, "burst", {"metadata": {"labels": {"app": "burst"}, "uid": "uid-burst"},
                                          "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "burst"}},
                                                   "template": template}})
    server.put(REPLICASETS, NS, f"burst-{HASH0}", replica_set(HASH0, 1))
    for i, node in enumerate(("hybrid-1", "hybrid-2", "hybrid-1")):
        pod = SimPod(f"burst-{HASH0}-a{i}", HASH0, -3600.0, node=node, ready=-3590.0,
                     cost=faults.pod_cost or faults.template_cost)
        cluster.pods[pod.name] = pod
        cluster.touch(pod)
    for role in ("admission", "background"):
        name = f"kyverno-{role}-controller"
        server.put(DEPLOYMENTS, "kyverno", name, {"spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"serviceAccountName": name, "containers": [{"name": "kyverno"}]}}}})
    server.put(CONFIGMAPS, "kyverno", "kyverno", {"data": {
        "resourceFilters": "[Event,*,*][*/*,kube-system,*][*/*,kube-public,*][*/*,kube-node-lease,*]"
                           "[Node,*,*][Node/*,*,*][APIService,*,*][TokenReview,*,*]"}})
    server.put(NODEPOOLS, None, POOL, {"spec": {
        "limits": {"cpu": "32"},
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s",
                       "budgets": [{"nodes": "100%"}]},
        "template": {"spec": {"taints": [{"key": "eks-hybrid-lab.io/burst", "value": "true",
                                          "effect": "NoSchedule"}]}}}})
    plant_scenario(server, scenario, faults)
    cluster.react()


class StandInStack:
    """The seam's stand-in for the Automation API's Stack: config in a dict; ``up`` plays the
    lab's program (the policy, the gate) on the cluster and takes 90 s of the clock."""

    def __init__(self, cluster: Cluster, config: Optional[str], fail_up_for: Optional[str] = None):
        self.cluster = cluster
        self.config = {} if config is None else {burst_kinds.SCENARIO_KEY: config}
        self.calls: list[tuple] = []
        self.fail_up_for = fail_up_for
        #: The config last applied, and steps of another change waiting on the stack (the
        #: program's plan is the fake CLI's: tests/fake_pulumi.program_steps).
        self.deployed = dict(self.config)
        self.pending_changes: list[dict] = []

    def preview(self, on_event=None, on_output=None):
        from pulumi.automation import EngineEvent

        scenario = self.config.get(burst_kinds.SCENARIO_KEY, "A")
        self.calls.append(("preview", scenario))
        steps = fake_pulumi_cli.program_steps("dev", self.deployed, self.config) + self.pending_changes
        for event in fake_pulumi_cli._events("dev", steps):
            if on_event:
                on_event(EngineEvent.from_json(event))
        return mock.Mock(change_summary=fake_pulumi_cli._change_summary(steps))

    def get_config(self, key: str):
        from pulumi.automation import ConfigValue

        self.calls.append(("get", key))
        if key not in self.config:
            raise RuntimeError(f"error: configuration key '{key}' not found for stack 'dev'")
        return ConfigValue(self.config[key])

    def set_config(self, key: str, value) -> None:
        self.calls.append(("set", key, value.value))
        self.config[key] = value.value

    def remove_config(self, key: str) -> None:
        self.calls.append(("rm", key))
        self.config.pop(key, None)

    def up(self, on_output=None):
        scenario = self.config.get(burst_kinds.SCENARIO_KEY, "A")
        self.calls.append(("up", scenario))
        if on_output:
            on_output("Updating (dev)")
        if scenario == self.fail_up_for:
            raise RuntimeError("error: update failed")
        self.cluster.apply_scenario(scenario)
        self.deployed = dict(self.config)
        self.pending_changes = []
        self.cluster.sleep(90.0)
        return None


@dataclass
class Lab:
    server: Emulator
    cluster: Cluster
    outputs: Path
    out: Path
    stack: Optional[StandInStack] = None

    def run(self, *args: str, yes: bool = True, stack: Optional[str] = "dev",
            interval: Optional[str] = None) -> int:
        command = ["verify", "burst"] if args[:1] == ("verify",) else ["burst"]
        rest = list(args[1:]) if args[:1] == ("verify",) else list(args)
        # The poll: every second for `verify burst` and for the tests whose case needs a finer
        # poll (the scale-up's timings, a --within of a few seconds, a pod that goes between
        # two polls). The other runs poll the played cluster every 5 s of its clock, with less
        # than half the requests: its controllers act at their own moments (timers) and at
        # each poll, as a real cluster's act between the tool's reads, and what those tests
        # assert, and the tool's code they run, are the same as at a one-second poll.
        interval = interval or ("1" if command == ["verify", "burst"] else POLL_S)
        # The watch after the last scale-in is off unless a test asks for it (the last
        # occurrence of an option wins): only the consolidation tests need its 36 polls.
        # --yes: the switches' plans are applied without asking (stdin is not a terminal).
        watch = [] if command == ["verify", "burst"] else ["--watch", "0"] + (["--yes"] if yes else [])
        named = ["--stack", stack] if stack else []
        return cli.main([*command, "--outputs", str(self.outputs), *named,
                         "--out", str(self.out), "--interval", interval, *watch, *rest])

    def folder(self) -> Path:
        [folder] = list(self.out.iterdir())
        return folder

    def report(self) -> dict:
        return json.loads((self.folder() / "report.json").read_text())

    def markdown(self) -> str:
        return (self.folder() / "report.md").read_text()

    def events(self) -> list[dict]:
        return read_events(self.folder())


def _outputs(path: Path, scenario: str) -> Path:
    path.write_text(json.dumps({
        "region": "ap-northeast-2", "kubeconfig": "{}",
        "layers": ["network", "cluster", "hybrid", "gateway", "karpenter", "demo"],
        "karpenterNodePool": POOL, "karpenterPodDeletionCostManagement": scenario == "C",
        "demo2": {"namespace": NS, "scenario": scenario, "scaleSequence": [3, 15, 12, 10, 3],
                  "cpuRequestPerPod": f"{REQUEST_M}m"}}))
    return path


@contextlib.contextmanager
def lab_session(tmp_path: Path, scenario: str = "A", faults: Optional[Faults] = None,
                config: Optional[str] = "same", stand_in: bool = True,
                fail_up_for: Optional[str] = None) -> Iterator[Lab]:
    """The emulator, the played cluster and the patches that point the CLI at them. Only
    127.0.0.1 may be reached."""
    from rehearse.lab.connection import Kube
    from rehearse.run.context import Context

    faults = faults or Faults()
    loopback_only = loopback_connect(socket.socket.connect)

    server = Emulator()
    try:
        cluster = Cluster(server, scenario, faults)
        server.server_clock = cluster.clock
        plant(server, cluster, faults, scenario)
        stack = StandInStack(cluster, scenario if config == "same" else config, fail_up_for)
        lab = Lab(server, cluster, _outputs(tmp_path / "dev.json", scenario), tmp_path / "rehearsals",
                  stack if stand_in else None)
        context = functools.partial(Context, clock=cluster.clock, sleep=cluster.sleep,
                                    monotonic=cluster.monotonic, progress=cluster.progress.append)
        patches = [mock.patch.object(socket.socket, "connect", loopback_only),
                   mock.patch.object(run_execute, "_connect", lambda args, outputs: Kube.connect(server.endpoint)),
                   mock.patch("rehearse.run.context.Context", context)]
        if stand_in:
            patches.append(mock.patch.object(burst_command, "open_stack", lambda name, work_dir: stack))
        with contextlib.ExitStack() as stack_of_patches:
            for patch in patches:
                stack_of_patches.enter_context(patch)
            yield lab
    finally:
        server.close()


@pytest.fixture
def lab_for(tmp_path):
    sessions = contextlib.ExitStack()

    def start(**kwargs: Any) -> Lab:
        return sessions.enter_context(lab_session(tmp_path, **kwargs))

    with sessions:
        yield start


@dataclass
class Finished:
    """A run made once for the tests that read different things of it: its exit code and its
    Lab (the emulator closed; the folder, the played cluster and the stack as the run left
    them)."""
    code: int
    lab: Lab


@pytest.fixture(scope="module")
def a_run(tmp_path_factory) -> Finished:
    """`rehearse burst` in A with nothing planted, the watch off (``--watch 0``, as Lab.run
    passes it anyway): three tests read it. Its charts are listed, not drawn, as for every
    run of a test not marked ``charts`` (tests/conftest.py; that fixture is per test, so the
    patch is made here)."""
    from rehearse import charts

    with mock.patch.object(charts, "write", list_charts_only), \
            lab_session(tmp_path_factory.mktemp("a-run"), scenario="A") as lab:
        return Finished(lab.run("--watch", "0"), lab)


def _checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def _numbers(report: dict) -> dict[str, Optional[float]]:
    return {m["name"]: m["value"] for m in report["measurements"]}


def _steps(report: dict, scenario: str) -> list[dict]:
    return report["demo2"]["scenarios"][scenario]["steps"]


def _removed(step: dict) -> tuple[int, int]:
    return (len([p for p in step["removed"] if p["place"] == "hybrid"]),
            len([p for p in step["removed"] if p["place"] == "cloud"]))


def _name(scenario: str, what: str) -> str:
    return burst_kinds.check_name(scenario, what)


# --- verify burst ------------------------------------------------------------------------------------

def test_verify_b_in_place_with_the_nodepool_and_the_capacity_arithmetic(lab_for):
    lab = lab_for(scenario="B", faults=Faults(pod_cost="1"))
    assert lab.run("verify") == 0, lab.markdown()
    report = lab.report()
    checks = _checks(report)
    assert checks[_name("B", burst_kinds.C_IN_PLACE)]["status"] == PASS
    assert checks[_name("B", burst_kinds.C_KYVERNO_NODES.format(role="background"))]["status"] == PASS
    assert "may get nodes" in checks[_name("B", burst_kinds.C_KYVERNO_NODES.format(role="admission"))]["seen"]
    assert checks[_name("B", burst_kinds.C_GATE_OFF)]["status"] == PASS
    capacity = checks[burst_kinds.CHECK_CAPACITY]
    assert capacity["status"] == PASS
    # By hand: 3920m - (kube-proxy 100 + cilium's init 100 + echo 50 + prober 10) = 3660m -> 4 x 900m;
    # 3920m - 250m = 3670m -> 4.
    assert "hybrid-1: 3920m allocatable − 260m" in capacity["seen"] and "= 3660m → 4 × 900m" in capacity["seen"]
    assert "hybrid-2: 3920m allocatable − 250m" in capacity["seen"] and "8 fit, a 9th does not" in capacity["seen"]
    assert checks["NodePool cloud-burst: CPU limit and disruption budget"]["status"] == PASS
    # Nothing was changed: no write reached the API server.
    assert not [r for r in lab.server.requests() if r[0] in ("PATCH", "PUT", "DELETE")]
    assert "| hybrid-1 | yes | 3920m | 260m" in lab.markdown()


def test_verify_b_without_get_nodes_for_kyverno_is_not_in_place(lab_for):
    """The demo guide's B that looked like A: the background controller may not get nodes, so Kyverno
    drops the rule silently and no pod carries "1"."""
    lab = lab_for(scenario="B", faults=Faults(background_nodes=False))
    assert lab.run("verify", "--within", "3") == 1
    checks = _checks(lab.report())
    verdict = checks[_name("B", burst_kinds.C_IN_PLACE)]
    assert verdict["status"] == FAIL and verdict["seen"].startswith("not in place")
    nodes = checks[_name("B", burst_kinds.C_KYVERNO_NODES.format(role="background"))]
    assert nodes["status"] == FAIL and "B would look like A" in nodes["seen"]
    assert "extraResources" in nodes["fix"]
    assert "--as=system:serviceaccount:kyverno:kyverno-background-controller" in nodes["command"]
    assert checks[_name("B", burst_kinds.C_HYBRID_COST)]["status"] == FAIL
    assert "after 3 s" in checks[_name("B", burst_kinds.C_HYBRID_COST)]["seen"]


def test_verify_a_catches_costs_left_by_the_previous_scenario(lab_for):
    lab = lab_for(scenario="A", faults=Faults(pod_cost="1"))
    assert lab.run("verify") == 1
    checks = _checks(lab.report())
    foreign = checks[_name("A", burst_kinds.C_FOREIGN_COST)]
    assert foreign["status"] == FAIL and "3 pod(s) carry a cost scenario A does not write" in foreign["seen"]
    assert "rollout restart" in foreign["fix"]
    assert checks[_name("A", burst_kinds.C_NO_POLICY)]["status"] == PASS
    assert checks[_name("A", burst_kinds.C_GATE_OFF)]["status"] == PASS


def test_verify_c_with_an_older_karpenter_that_ignores_the_gate(lab_for):
    lab = lab_for(scenario="C", faults=Faults(karpenter_version="1.14.1"))
    assert lab.run("verify") == 1
    checks = _checks(lab.report())
    assert checks[_name("C", burst_kinds.C_GATE_ON)]["status"] == PASS, "the env says true"
    version = checks[_name("C", burst_kinds.C_GATE_VERSION)]
    assert version["status"] == FAIL and "1.14.1" in version["seen"] and "C would look like B" in version["seen"]
    assert checks[_name("C", burst_kinds.C_KARPENTER_PATCH)]["status"] == PASS
    assert checks[_name("C", burst_kinds.C_BUDGET)]["status"] == PASS
    assert checks[_name("C", burst_kinds.C_IN_PLACE)]["status"] == FAIL


def test_verify_capacity_fails_when_another_pod_takes_room_on_a_hybrid_node(lab_for):
    lab = lab_for(scenario="A", faults=Faults(squatter_m=500))
    assert lab.run("verify") == 1
    capacity = _checks(lab.report())[burst_kinds.CHECK_CAPACITY]
    assert capacity["status"] == FAIL
    assert "hybrid-2: 3920m allocatable − 750m (squatter-1 500m, echo-hybrid-2 50m, " \
           "cilium-h2 100m, kube-proxy-h2 100m) = 3170m → 3 × 900m" in capacity["seen"]
    assert "only 7 fit: 8 burst to the cloud instead of 7" in capacity["seen"]


# --- burst: whole runs ---------------------------------------------------------------------------------

@pytest.mark.charts
def test_scenario_b_runs_the_sequence_and_ends_as_the_rules_say(lab_for):
    lab = lab_for(scenario="B")
    # Polled every second: the timings below are read on the cluster's clock, beside what a
    # one-second poll saw.
    assert lab.run(interval="1") == 0, lab.markdown()
    report = lab.report()
    checks = _checks(report)
    for what in (burst_kinds.C_IN_PLACE, burst_kinds.C_RESTART, burst_kinds.C_SCALEUP, burst_kinds.C_COSTS_SETTLED,
                 burst_kinds.C_FORECAST, burst_kinds.C_RULE, burst_kinds.C_COMPLETED):
        assert checks[_name("B", what)]["status"] == PASS, (what, checks[_name("B", what)])
    steps = _steps(report, "B")
    assert [(s["from"], s["to"]) for s in steps] == [(3, 15), (15, 12), (12, 10), (10, 3)]
    assert steps[0]["hybrid"] == [3, 8] and steps[0]["cloud"] == [0, 7]
    # B: every cost-0 cloud pod before any cost-1 hybrid pod.
    assert [_removed(s) for s in steps[1:]] == [(0, 3), (0, 2), (5, 2)]
    assert all(s["verdict"] == "same" for s in steps[1:])
    # No switch: the stack was left alone, and the Deployment is back at 3.
    assert lab.stack.calls == []
    # The timings, from the cluster's own clocks, beside the demo guide's.
    numbers = _numbers(report)
    created = [p for p in lab.cluster.log if p[1].startswith("NodeClaim")]
    assert numbers[_name("B", burst_kinds.M_NODECLAIM)] in (1.0, 2.0)
    assert numbers[_name("B", burst_kinds.M_READY)] == pytest.approx(38.0, abs=1.0)
    assert created, "Karpenter made NodeClaims"
    text = lab.markdown()
    assert ("| 15 → 12 | 8 → 8 | 7 → 4 | 3: 0 hybrid, 3 cloud | 3: 0 hybrid, 3 cloud (3 chosen "
            "among equals) | same pods |") in text
    assert "| scale to 15 → first NodeClaim |" in text and "| 37–38 s |" in text
    png = (lab.folder() / "burst-scale-in.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


def test_scenario_a_rank_decides(a_run):
    lab = a_run.lab
    assert a_run.code == 0, lab.markdown()
    report = lab.report()
    checks = _checks(report)
    assert checks[_name("A", burst_kinds.C_RULE)]["status"] == PASS
    steps = _steps(report, "A")
    # 15: hybrid 4 + 4, cloud 4 + 3 (one NodeClaim per 4 pods), no costs. Rule 5 first: at
    # 15 -> 12 the 12 pods on nodes holding 4 tie on rank, and rule 6 takes the most recently
    # Ready — the 4-pod cloud node's, Ready half a minute after the hybrid pods, in a younger
    # log2 bucket. At 12 -> 10 only the hybrid nodes still hold 4: hybrid pods go before cloud
    # pods (A's point, docs/scale-in.md: it depends on how Karpenter packed the 7).
    assert [_removed(s) for s in steps[1:]] == [(0, 3), (2, 0), (4, 3)]
    assert all(s["verdict"] == "same" for s in steps[1:])
    assert all(p["cost"] is None for s in steps[1:] for p in s["removed"])
    assert "15 → 12: removed from nodes holding ≥ 4 burst pods" in checks[_name("A", burst_kinds.C_RULE)]["seen"]


def test_scenario_c_ranks_then_removes_the_emptiest_cloud_node_first(lab_for):
    lab = lab_for(scenario="C")
    assert lab.run() == 0, lab.markdown()
    report = lab.report()
    checks = _checks(report)
    assert checks[_name("C", burst_kinds.C_COSTS_SETTLED)]["status"] == PASS
    rule = checks[_name("C", burst_kinds.C_RULE)]
    assert rule["status"] == PASS and "Karpenter ranked 7 of 7 cloud pods" in rule["seen"]
    steps = _steps(report, "C")
    # The node with 3 pods got -2 and the one with 4 got -1: 15 -> 12 empties the 3-pod node.
    removed = steps[1]["removed"]
    assert {p["cost"] for p in removed} == {"-2"} and len({p["node"] for p in removed}) == 1
    assert [_removed(s) for s in steps[1:]][:2] == [(0, 3), (0, 2)]


def test_switching_a_b_c_through_the_seam_and_back(lab_for):
    lab = lab_for(scenario="A")
    assert lab.run("--scenarios", "A", "B", "C") == 0, lab.markdown()
    report = lab.report()
    assert [c for c in lab.stack.calls if c[0] in ("set", "up", "rm")] == [
        ("set", burst_kinds.SCENARIO_KEY, "B"), ("up", "B"), ("set", burst_kinds.SCENARIO_KEY, "C"), ("up", "C"),
        ("set", burst_kinds.SCENARIO_KEY, "A"), ("up", "A")]
    checks = _checks(report)
    assert checks[burst_kinds.CHECK_RESTORED]["status"] == PASS
    assert checks[_name("B", burst_kinds.C_SWITCH)]["status"] == PASS
    text = lab.markdown()
    assert "## Across scenarios" in text and "## Scenario C:" in text
    b, c = _steps(report, "B"), _steps(report, "C")
    assert [_removed(s) for s in b[1:]] == [(0, 3), (0, 2), (5, 2)]
    # B removes from the fuller cloud node (rank), C from the node Karpenter ranked first.
    assert {p["node"] for p in b[1]["removed"]} != {p["node"] for p in c[1]["removed"]}
    assert lab.cluster.scenario == "A"


# --- planted faults: caught, not measured ----------------------------------------------------------------

def _scaled_beyond_start(lab: Lab) -> bool:
    return any(n > 3 for n in lab.cluster.replicas_seen)


def test_b_without_get_nodes_is_refused_not_measured(lab_for):
    lab = lab_for(scenario="B", faults=Faults(background_nodes=False))
    assert lab.run("--within", "3", interval="1") == 1
    checks = _checks(lab.report())
    verdict = checks[_name("B", burst_kinds.C_IN_PLACE)]
    assert verdict["status"] == FAIL and "not measured" in verdict["seen"]
    assert "B would look like A" in verdict["seen"]
    assert not _scaled_beyond_start(lab), "nothing was measured"
    assert "**Not measured**" in lab.markdown()


def test_c_with_an_older_karpenter_is_refused_not_measured(lab_for):
    lab = lab_for(scenario="C", faults=Faults(karpenter_version="1.14.1"))
    assert lab.run() == 1
    verdict = _checks(lab.report())[_name("C", burst_kinds.C_IN_PLACE)]
    assert verdict["status"] == FAIL and "C would look like B" in verdict["seen"]
    assert not _scaled_beyond_start(lab)


def test_a_leftover_annotation_in_the_pod_template_is_caught_after_the_restart(lab_for):
    """A restart clears the pods' annotations, not the template's: the fresh pods carry it."""
    lab = lab_for(scenario="A", faults=Faults(template_cost="1"))
    assert lab.run("--within", "3", interval="1") == 1
    checks = _checks(lab.report())
    assert checks[_name("A", burst_kinds.C_RESTART)]["status"] == PASS
    foreign = checks[_name("A", burst_kinds.C_FOREIGN_COST)]
    assert foreign["status"] == FAIL and "pod template itself carries" in foreign["fix"]
    assert checks[_name("A", burst_kinds.C_IN_PLACE)]["status"] == FAIL
    assert not _scaled_beyond_start(lab)


def test_leftover_pod_annotations_are_cleared_by_the_restart(lab_for):
    """Pods left with B's "1" before a run in A: the restart replaces them, A is in place."""
    lab = lab_for(scenario="A", faults=Faults(pod_cost="1"))
    assert lab.run() == 0, lab.markdown()
    assert _checks(lab.report())[_name("A", burst_kinds.C_FOREIGN_COST)]["status"] == PASS


# --- divergences and evictions ---------------------------------------------------------------------------

def test_an_outcome_that_differs_from_the_forecast_is_flagged(lab_for):
    """A cluster whose ReplicaSet controller ignores pod-deletion-cost (its PodDeletionCost gate
    off): in B it removes hybrid pods the forecast keeps."""
    lab = lab_for(scenario="B", faults=Faults(ignore_cost=True))
    assert lab.run() == 1
    report = lab.report()
    checks = _checks(report)
    forecast = checks[_name("B", burst_kinds.C_FORECAST)]
    assert forecast["status"] == FAIL and "no tie, eviction or cost change explains it" in forecast["seen"]
    assert checks[_name("B", burst_kinds.C_RULE)]["status"] == FAIL
    steps = _steps(report, "B")
    # 12 -> 10: the costs would take the two cost-0 cloud pods; a controller blind to them takes
    # two rank-4 hybrid pods instead.
    assert steps[2]["verdict"] == "unexplained"
    assert "**DIFFERS — unexplained**" in lab.markdown()


def test_karpenter_evictions_are_told_from_scale_in_victims(lab_for):
    lab = lab_for(scenario="A", faults=Faults(evict_at=10))
    original = Cluster.react

    def react(self):
        # Karpenter evicts a pod just as the Deployment is scaled to 10, before the ReplicaSet
        # controller acts: it then has one pod fewer to remove than the forecast said.
        replicas = self.server.get(DEPLOYMENTS, NS, "burst")["spec"]["replicas"]
        if self.faults.evict_at is not None and replicas == self.faults.evict_at:
            self.faults.evict_at = None
            self.evict_one()
        original(self)

    with mock.patch.object(Cluster, "react", react):
        assert lab.run() == 0, lab.markdown()
    report = lab.report()
    step = _steps(report, "A")[2]
    assert len(step["evicted"]) == 1 and step["evicted"][0]["disruption_target"]["reason"] == "EvictionByEvictionAPI"
    assert len(step["removed"]) == 1 and len(step["forecast"]) == 2
    assert step["verdict"] == "explained" and "Karpenter evicted" in step["explanation"]
    assert step["evicted"][0]["name"] not in {p["name"] for p in step["removed"]}
    assert _checks(report)[_name("A", burst_kinds.C_FORECAST)]["status"] == PASS
    assert "Evicted by Karpenter" in lab.markdown()


def test_a_victim_evicted_while_it_terminates_is_still_the_scale_ins_choice(lab_for):
    # The ReplicaSet controller deletes two pods for 12 -> 10; a second after (the tool has
    # seen both terminating, without a condition), one is evicted while it terminates and the
    # API server adds DisruptionTarget to it. Who chose it is what the tool saw first: the
    # scale-in, so it is a victim, not an eviction.
    lab = lab_for(scenario="A")
    original = Cluster.delete
    evicted: list[str] = []

    def delete(self, pod, disruption=False):
        original(self, pod, disruption)
        if not disruption and not evicted and self.replicas_seen[-1] == 10:
            evicted.append(pod.name)
            self.later(1.0, lambda: self.evict_while_terminating(pod))

    with mock.patch.object(Cluster, "delete", delete):
        assert lab.run(interval="1") == 0, lab.markdown()
    assert any(f"evicted {evicted[0]} while it terminates" in line for _, line in lab.cluster.log)
    step = _steps(lab.report(), "A")[2]
    assert step["evicted"] == []
    assert evicted[0] in {p["name"] for p in step["removed"]} and len(step["removed"]) == 2
    assert step["verdict"] == "same", step
    assert "Evicted by Karpenter" not in lab.markdown()


def test_a_scale_up_that_never_finishes_stops_the_sequence_and_says_so(lab_for):
    lab = lab_for(scenario="A", faults=Faults(no_launch=True))
    assert lab.run("--timeout", "60") == 1
    report = lab.report()
    checks = _checks(report)
    scaleup = checks[_name("A", burst_kinds.C_SCALEUP)]
    assert scaleup["status"] == FAIL and "8 of 15 Ready" in scaleup["seen"] and "7 Pending" in scaleup["seen"] \
        and "after 60 s" in scaleup["seen"]
    completed = checks[_name("A", burst_kinds.C_COMPLETED)]
    assert completed["status"] == FAIL and "15 pods Ready: 8 after 60 s" in completed["seen"]
    numbers = _numbers(report)
    assert numbers[_name("A", burst_kinds.M_NODECLAIM)] is None and numbers[_name("A", burst_kinds.M_READY)] is None
    assert lab.server.get(DEPLOYMENTS, NS, "burst")["spec"]["replicas"] == 3, "put back at 3"


# --- consolidation and hybrid capacity (the watch after the last scale-in) ----------------------------------

def _consolidation(report: dict, scenario: str) -> dict:
    return report["demo2"]["scenarios"][scenario]["consolidation"]


def test_the_watch_answers_that_karpenter_leaves_a_cloud_node_whose_pods_fit_on_hybrid(lab_for):
    """A ends at 3 with one pod on a cloud node and six free slots on the hybrid nodes: the
    question arises. The played Karpenter (WhenEmpty) only removes the other, empty node."""
    lab = lab_for(scenario="A")
    assert lab.run("--watch", "180") == 0, lab.markdown()
    report = lab.report()
    answer = _consolidation(report, "A")
    assert answer["status"] == PASS
    [candidate] = [c for c in answer["room"]["cloud"] if c["fits"]]
    [empty] = [c for c in answer["room"]["cloud"] if not c["pods"]]
    assert len(candidate["pods"]) == 1 and answer["room"]["room"] == 6
    assert [h["free_slots"] for h in answer["room"]["hybrid"]] == [2, 4]
    # The evidence: the empty node went (its events say Empty), the candidate stayed.
    assert [r["node"] for r in answer["disrupted"]] == [empty["node"]]
    assert {e["message"] for e in answer["events"]} == {"Disrupting Node: Empty",
                                                         "Disrupting NodeClaim: Empty"}
    assert answer["moved"] == [] and answer["created"] == []
    check = _checks(report)[_name("A", burst_kinds.C_CONSOLIDATION)]
    assert check["seen"].startswith("no disruption of a cloud node whose pods fit on hybrid: "
                                    f"{candidate['node']} (1 burst pod(s)")
    assert "Karpenter's events: DisruptionTerminating × 2" in check["seen"]
    assert "NodePool consolidationPolicy WhenEmpty" in check["seen"]
    # Under WhenEmpty the PASS shows the policy at work, and the report says so.
    assert "(note: with consolidationPolicy WhenEmpty Karpenter considers only empty nodes" in check["seen"]
    text = lab.markdown()
    assert "### Consolidation and hybrid capacity (scenario A)" in text
    assert "Answer (as expected): no disruption of a cloud node whose pods fit on hybrid" in text
    assert "Expected: Karpenter disrupts no cloud node" in text
    assert "No burst pod moved during the watch." in text
    # The watch polled Karpenter's events cluster-wide and took its 180 s of the clock.
    done = next(e for e in lab.events() if e["kind"] == burst_kinds.WATCH_DONE)
    assert done["watched"] == pytest.approx(180.0)


def test_a_karpenter_that_consolidates_onto_hybrid_room_is_caught(lab_for):
    lab = lab_for(scenario="A", faults=Faults(consolidate_onto_hybrid=True))
    # Polled every second before the watch: the watch then sees the evicted pod go between two
    # of its polls (never seen terminating), the case a coarser poll's timeline misses.
    assert lab.run("--watch", "120", interval="1") == 1
    report = lab.report()
    answer = _consolidation(report, "A")
    assert answer["status"] == FAIL
    [candidate] = [c for c in answer["room"]["cloud"] if c["fits"]]
    [pod] = candidate["pods"]
    [bad] = [r for r in answer["disrupted"] if r["fits"]]
    assert bad["node"] == candidate["node"]
    assert [c["name"] for c in answer["moved"]] == [pod]
    [created] = answer["created"]
    assert created["place"] == "hybrid" and answer["moved_to"] == [created["node"]]
    check = _checks(report)[_name("A", burst_kinds.C_CONSOLIDATION)]
    assert check["status"] == FAIL
    assert check["seen"].startswith(f"Karpenter disrupted {candidate['node']} (NodeClaim "
                                    f"{candidate['nodeclaim']}), DisruptionTerminating "
                                    "(Underutilized), which held")
    assert f"which held {pod} — they fit in the hybrid nodes' 6 free slot(s) — and its pods " \
           f"moved to {created['node']}" in check["seen"]
    assert f"pods gone: {pod} from {candidate['node']}" in check["seen"]
    assert "expected: Karpenter disrupts no cloud node" in check["fix"]
    assert "Answer (**NOT as expected**): Karpenter disrupted" in lab.markdown()
    # Everything else in the run still passes: the watch is the only failure.
    assert [c["name"] for c in report["checks"] if c["status"] == FAIL] == \
        [_name("A", burst_kinds.C_CONSOLIDATION)]


def test_watch_0_skips_the_watch_and_the_report_says_so(a_run):
    lab = a_run.lab
    assert a_run.code == 0, lab.markdown()
    report = lab.report()
    check = _checks(report)[_name("A", burst_kinds.C_CONSOLIDATION)]
    assert check["status"] == "SKIP" and check["seen"] == "not watched (--watch 0)"
    assert "### Consolidation and hybrid capacity (scenario A)\n\nNot watched (--watch 0)." in lab.markdown()
    kinds = {e["kind"] for e in lab.events()}
    assert burst_kinds.WATCH_SKIPPED in kinds and burst_kinds.WATCH_STARTED not in kinds


def test_in_b_the_question_does_not_arise_and_the_report_says_why(lab_for):
    """B ends at 3 with every pod on a hybrid node: no cloud node holds pods to move."""
    lab = lab_for(scenario="B")
    assert lab.run("--watch", "60") == 0, lab.markdown()
    check = _checks(lab.report())[_name("B", burst_kinds.C_CONSOLIDATION)]
    assert check["status"] == "SKIP"
    assert check["seen"].startswith("the question did not arise: no cloud node held burst pods "
                                    "after the last scale-in")
    assert "Disrupting Node: Empty" in lab.markdown()


def test_hybrid_room_counts_free_slots_beside_the_other_pods():
    situation = {"deployment": {"found": True, "tolerations": [
                     {"key": burst_kinds.HYBRID_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"resources": {"requests": {"cpu": "900m"}}}],
                     "init_containers": []},
                 "nodes": [node_summary({**node_object(n, p), "metadata": {
                     **node_object(n, p)["metadata"], "name": n}}, POOL)
                           for n, p in (("hybrid-1", "hybrid"), ("hybrid-2", "hybrid"),
                                        ("cloud-1", "cloud"), ("cloud-2", "cloud"))],
                 "hybrid_neighbours": [neighbour_summary_of("other", "hybrid-2", "2000m")],
                 "nodeclaims": [{"name": "claim-1", "node": "cloud-1"}],
                 "pods": [{"name": f"p{i}", "node": n, "phase": "Running", "deleting": False}
                          for i, n in enumerate(["hybrid-1"] * 3 + ["cloud-1"] * 2 + ["cloud-2"] * 3)]}
    room = hybrid_room(situation)
    # hybrid-1: 4 fit, 3 there -> 1; hybrid-2: (3920 - 2000) // 900 = 2 fit -> 2. Room 3.
    assert [(h["node"], h["fit"], h["free_slots"]) for h in room["hybrid"]] == \
        [("hybrid-1", 4, 1), ("hybrid-2", 2, 2)]
    assert room["room"] == 3
    assert [(c["node"], c["nodeclaim"], c["fits"]) for c in room["cloud"]] == \
        [("cloud-1", "claim-1", True), ("cloud-2", None, True)]
    situation["pods"].append({"name": "p9", "node": "cloud-2", "phase": "Running", "deleting": False})
    assert [c["fits"] for c in hybrid_room(situation)["cloud"]] == [True, False]


def neighbour_summary_of(name: str, node: str, cpu: str) -> dict:
    return neighbour_summary({**neighbour(name, "default", node, cpu),
                                    "metadata": {"name": name, "namespace": "default"}})


# --- the scenario is put back ------------------------------------------------------------------------------

def test_an_interrupt_in_the_middle_puts_the_scenario_back(lab_for):
    lab = lab_for(scenario="A", faults=Faults(fail_at_12=KeyboardInterrupt()))
    # Ctrl-C: exit 1 with the folder kept (a run never loses its folder); the restore previews before it
    # applies (item 6).
    assert lab.run("--scenarios", "B") == 1
    assert lab.stack.calls[-3:] == [("set", burst_kinds.SCENARIO_KEY, "A"), ("preview", "A"), ("up", "A")]
    assert lab.cluster.scenario == "A"
    # The folder is kept (a run never loses its folder), its report saying the run was interrupted.
    checks = _checks(lab.report())
    assert checks["run completed"]["seen"].startswith("interrupted (Ctrl-C)")


def test_a_failed_switch_is_reported_and_the_scenario_put_back(lab_for):
    lab = lab_for(scenario="A", fail_up_for="C")
    assert lab.run("--scenarios", "C", "--within", "2") == 1
    checks = _checks(lab.report())
    assert checks[_name("C", burst_kinds.C_SWITCH)]["status"] == FAIL
    assert "update failed" in checks[_name("C", burst_kinds.C_SWITCH)]["seen"]
    assert checks[burst_kinds.CHECK_RESTORED]["status"] == PASS
    assert lab.stack.calls[-1] == ("up", "A")


def test_a_restore_that_fails_says_how_to_do_it_by_hand(lab_for, capsys):
    lab = lab_for(scenario="A", fail_up_for="A")
    assert lab.run("--scenarios", "B") == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: could not put burstScenario back to A: error: update failed")
    assert "`pulumi config set burstScenario A` and `pulumi up`" in line
    assert lab.server.get(DEPLOYMENTS, NS, "burst")["spec"]["replicas"] == 3


@pytest.fixture
def fake_pulumi(tmp_path, monkeypatch):
    """A `pulumi` on PATH that answers from a state file; returns (state path, log path)."""
    return fake_pulumi_cli.install(tmp_path, monkeypatch, {"selected": "dev", "stacks": {"dev": {
        "outputs": {"demo2": {"namespace": NS, "scenario": "A"}},
        "config": {burst_kinds.SCENARIO_KEY: "A"}}}})


def test_a_failure_in_the_middle_restores_the_scenario_through_the_automation_api(
        fake_pulumi, tmp_path):
    """The Automation API against the fake `pulumi`: config set B, up, ... the cluster becomes
    unreachable at 12 (exit 2), and the config is back at A with an up."""
    state, log = fake_pulumi
    with lab_session(tmp_path, scenario="A", faults=Faults(fail_at_12=ConnectionError("reset")),
                     stand_in=False) as lab:
        real = burst_command.open_stack

        def opened(name, work_dir):
            stack = real(name, work_dir)
            up = stack.up

            def up_and_play(**kwargs):
                result = up(**kwargs)
                lab.cluster.apply_scenario(json.loads(state.read_text())["stacks"]["dev"]["config"][burst_kinds.SCENARIO_KEY])
                return result

            stack.up = up_and_play
            return stack

        with mock.patch.object(burst_command, "open_stack", opened):
            assert lab.run("--scenarios", "B") == 2
        assert 12 in lab.cluster.replicas_seen, "it failed in the middle of B"
    calls = [[a for a in json.loads(line) if a != "--non-interactive"]
             for line in log.read_text().splitlines()]
    sets = [c for c in calls if c[:2] == ["config", "set"]]
    ups = [c for c in calls if c[:1] == ["up"]]
    assert [c[c.index("--") + 1] for c in sets] == ["B", "A"]
    assert len(ups) == 2
    final = json.loads(state.read_text())["stacks"]["dev"]
    assert final["config"][burst_kinds.SCENARIO_KEY] == "A"
    assert final["outputs"]["demo2"]["scenario"] == "A"


# --- recorded runs replay (tests/fixtures/rehearse/record_burst.py) --------------------------------------

@pytest.mark.charts
def test_a_recorded_a_b_c_run_replays_to_its_report(tmp_path):
    events = read_events(FIXTURES / "burst-abc")
    report = burst_command.analyse(events)
    assert report.passed, report.summary()
    # The recorded forecasts are rehearse.models.ranking's: every scale-in removed what it forecast.
    for s in "ABC":
        forecast = next(c for c in report.checks if c.name == _name(s, burst_kinds.C_FORECAST))
        assert forecast.status == "PASS" and "3 of 3 scale-ins exactly as forecast" in forecast.seen
    data = report.to_json()
    steps = {s: data["demo2"]["scenarios"][s]["steps"] for s in "ABC"}
    # A: rank, then the most recently Ready (the 4-pod cloud node's pods at 15 -> 12; hybrid
    # pods at 12 -> 10, when only the hybrid nodes hold 4); B: the cost-0 cloud pods first, the
    # fuller cloud node first (rank); C: Karpenter's -2 node (the emptier) first.
    assert [_removed(s) for s in steps["A"][1:]] == [(0, 3), (2, 0), (4, 3)]
    assert [_removed(s) for s in steps["B"][1:]] == [(0, 3), (0, 2), (5, 2)]
    assert [_removed(s) for s in steps["C"][1:]] == [(0, 3), (0, 2), (5, 2)]
    assert {p["cost"] for p in steps["C"][1]["removed"]} == {"-2"}
    assert {p["cost"] for p in steps["B"][1]["removed"]} == {None}
    numbers = {m.name: m.value for m in report.measurements}
    for s in "ABC":
        assert numbers[_name(s, burst_kinds.M_NODECLAIM)] == 1.0
        assert numbers[_name(s, burst_kinds.M_READY)] == 37.0
    text = report.to_markdown()
    assert text.index("## Across scenarios") < text.index("## Checklist")
    assert "| C | 0 / 3 (left: 8 hybrid, 4 cloud on 1 node) |" in text
    assert "| B | 0 / 3 (left: 8 hybrid, 4 cloud on 2 nodes) |" in text
    # The consolidation watch: A ends with a pod on a cloud node and room on the hybrid nodes,
    # and Karpenter leaves it; B and C end with every pod on a hybrid node.
    checks = {c.name: c for c in report.checks}
    assert checks[_name("A", burst_kinds.C_CONSOLIDATION)].status == PASS
    assert "could have moved into the hybrid nodes' 6 free slot(s) and stayed for 180 s" in \
        checks[_name("A", burst_kinds.C_CONSOLIDATION)].seen
    for s in "BC":
        assert checks[_name(s, burst_kinds.C_CONSOLIDATION)].status == "SKIP"
        assert "the question did not arise" in checks[_name(s, burst_kinds.C_CONSOLIDATION)].seen
    assert "consolidation and hybrid capacity |" in text
    assert text.count("### Consolidation and hybrid capacity (scenario") == 3
    # `rehearse report` rewrites the report and the chart from the events alone.
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "events.jsonl").write_bytes((FIXTURES / "burst-abc" / "events.jsonl").read_bytes())
    assert cli.main(["report", str(folder)]) == 0
    assert (folder / "burst-scale-in.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((folder / "report.json").read_text())["charts"] == [
        {"name": "burst-scale-in", "title": "Demo 2: burst pods on hybrid vs cloud nodes after each step",
         "svg": "burst-scale-in.svg", "png": "burst-scale-in.png"}]


def test_a_recorded_refusal_replays(tmp_path):
    report = burst_command.analyse(read_events(FIXTURES / "burst-b-no-get-nodes"))
    verdict = {c.name: c for c in report.checks}[_name("B", burst_kinds.C_IN_PLACE)]
    assert verdict.status == FAIL and "B would look like A" in verdict.seen
    assert report.measurements == [] and "**Not measured**" in report.to_markdown()


def test_a_recorded_verify_replays():
    report = burst_command.analyse(read_events(FIXTURES / "verify-burst-c-old-karpenter"))
    checks = {c.name: c for c in report.checks}
    assert [c.name for c in report.failures] == [_name("C", burst_kinds.C_IN_PLACE),
                                                 _name("C", burst_kinds.C_GATE_VERSION)]
    assert checks[burst_kinds.CHECK_CAPACITY].status == PASS
    assert report.title == "Demo 2: ready to burst"


def test_a_forecast_that_failed_at_collection_is_made_again_at_report_time(monkeypatch):
    """A run made before rehearse.models.ranking was wired: its forecasts failed; `rehearse report`
    makes them from the recorded snapshots once the predictor works."""
    events = read_events(FIXTURES / "burst-abc")
    for event in events:
        if event["kind"] == burst_kinds.FORECAST:
            for key in ("replicas_before", "replicas_after", "delete", "order"):
                event.pop(key)
            event.update(ok=False, error="NotImplementedError: ")
    monkeypatch.setattr(ranking, "forecast", lambda *a: (_ for _ in ()).throw(NotImplementedError()))
    skipped = {c.name: c for c in burst_command.analyse(events).checks}[_name("B", burst_kinds.C_FORECAST)]
    assert skipped.status == "SKIP" and "NotImplementedError" in skipped.seen
    monkeypatch.undo()
    report = burst_command.analyse(events)
    assert {c.name: c for c in report.checks}[_name("B", burst_kinds.C_FORECAST)].status == PASS
    assert "made at report time from the snapshot" in report.to_markdown()


# --- the analysis, pure ---------------------------------------------------------------------------------------

def test_compare_explains_a_tie_and_a_cost_change():
    snapshot = [{"name": n, "node": node, "place": "cloud", "cost": cost, "phase": "Running",
                 "deleting": False}
                for n, node, cost in (("p1", "n1", None), ("p2", "n1", None), ("p3", "n2", None),
                                      ("p4", "n2", None))]
    forecast = {"ok": True, "delete": [{"name": "p1", "tie": True}]}
    verdict, why = compare(snapshot, [{"name": "p3", "cost": None}], forecast, [])
    assert verdict == "explained" and "a tie" in why
    forecast = {"ok": True, "delete": [{"name": "p1", "tie": False}]}
    verdict, why = compare(snapshot, [{"name": "p3", "cost": None, "seen_terminating": True,
                                             "cost_at_deletion": "-1"}], forecast, [])
    assert verdict == "explained" and "costs changed" in why
    verdict, why = compare(snapshot, [{"name": "p3", "cost": None}], forecast, [])
    assert verdict == "unexplained"
    assert compare(snapshot, [{"name": "p1"}], forecast, []) == ("same", "")


def test_capacity_sets_allocatable_beside_the_formula_that_sized_the_request():
    from components.capacity import BURST_PODS_PER_HYBRID_NODE

    assert burst_kinds.PODS_PER_HYBRID_NODE == BURST_PODS_PER_HYBRID_NODE
    observed = {"deployment": {"found": True, "tolerations": [
                    {"key": burst_kinds.HYBRID_LABEL, "operator": "Equal", "value": "hybrid", "effect": "NoSchedule"}],
                    "containers": [{"resources": {"requests": {"cpu": "900m", "memory": "64Mi"}}}],
                    "init_containers": []},
                "nodes": [{**node_summary(node_object(name, "hybrid"), POOL), "name": name}
                          for name in ("hybrid-1", "hybrid-2")],
                "hybrid_neighbours": []}
    observed["nodes"][1]["allocatable"] = {"cpu": "3500m", "memory": "14819Mi"}
    check = capacity_check(observed, {"on_hybrid": 8, "peak": 15})
    assert check.status == FAIL
    assert "hybrid-1: 3920m allocatable − 0m (nothing) = 3920m → 4 × 900m" in check.seen
    assert "hybrid-2: 3500m allocatable (components/capacity.py's formula gives 3920m: the kubelet " \
           "reserves otherwise) − 0m (nothing) = 3500m → 3 × 900m" in check.seen
    assert "only 7 fit" in check.seen


def test_cost_parsing_follows_the_controller():
    assert [cost_of(v) for v in (None, "1", "-5", "0", "+10", "008", "", "x", "2147483648")] == \
        [0, 1, -5, 0, 0, 0, 0, 0, 0]


def test_feature_gates_and_versions_are_read_from_the_running_controller():
    gates, source = feature_gates({"env": [{"name": "FEATURE_GATES",
                                                  "value": "ReservedCapacity=true,PodDeletionCostManagement=true"}]})
    assert gates["PodDeletionCostManagement"] is True and source == "env FEATURE_GATES"
    gates, source = feature_gates({"args": ["--feature-gates=PodDeletionCostManagement=false"]})
    assert gates == {"PodDeletionCostManagement": False} and source == "argument --feature-gates"
    assert image_version("public.ecr.aws/karpenter/controller:1.15.0@sha256:abc") == (1, 15, 0)
    assert image_version("public.ecr.aws/karpenter/controller:v1.14.1") == (1, 14, 1)
    assert image_version("localhost:5000/karpenter@sha256:abc") is None


def test_every_new_command_has_help(capsys):
    # In-process: `python -m rehearse --help` in a fresh interpreter is test_rehearse_frame's.
    from rehearse import cli

    for args in (["burst", "--help"], ["verify", "burst", "--help"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(args)
        captured = capsys.readouterr()
        assert exited.value.code == 0 and "usage: python -m rehearse" in captured.out, captured.err


def test_a_step_whose_victims_the_controllers_clock_decided_is_not_unexplained():
    """The controller's clock window: the forecast called a and b undecided (Ready 34 s and 35 s ago, a log2
    bucket edge within the sync lag and skew); the controller took b. Explained, not a FAIL."""
    snapshot = [{"name": n, "node": "n1", "place": "cloud", "cost": None, "phase": "Running",
                 "deleting": False} for n in ("a", "b", "c")]
    forecast = {"ok": True, "delete": [{"name": "a", "tie": False, "clock": True}],
                "clock_undecided": ["a", "b"], "window": "+0.000 s to +2.000 s around the snapshot"}
    verdict, why = compare(snapshot, [{"name": "b", "cost": None}], forecast, [])
    assert verdict == "explained" and "the controller's clock" in why and "+2.000 s" in why
    # A victim outside the undecided set is still unexplained.
    verdict, _ = compare(snapshot, [{"name": "c", "cost": None}], forecast, [])
    assert verdict == "unexplained"


def test_each_snapshot_records_the_api_servers_clock_and_the_forecast_its_window(a_run):
    lab = a_run.lab
    assert a_run.code == 0, lab.markdown()
    events = lab.events()
    snapshots = [e for e in events if e["kind"] == burst_kinds.SNAPSHOT]
    assert snapshots and all(s["server_offset"]["low_ns"] <= 0 <= s["server_offset"]["high_ns"]
                             for s in snapshots)
    forecasts = [e for e in events if e["kind"] == burst_kinds.FORECAST and e.get("ok")]
    assert forecasts and all("clock_undecided" in f and f["window"].endswith("around the snapshot") for f in forecasts)
