"""Kyverno, and the policy that gives pods bound to hybrid nodes a pod-deletion-cost of "1" so a
ReplicaSet scales the cloud pods in first (demo 2, scenarios B and C).

The policy is the EKS Workshop's mutate-existing shape, the one the demo was measured with: it
matches ``Pod/binding`` (which Kyverno's default resource filters drop — re-enabled here), looks
up the target node's labels, and patches the bound pod. Both the admission controller (which
evaluates the node lookup) and the background controller (which patches the pod) need
``get nodes``; without it the rule is dropped *silently*.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

REPOSITORY = "https://kyverno.github.io/kyverno/"
CHART = "kyverno"
VERSION = "3.9.0"
NAMESPACE = "kyverno"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"

_NODES_GET = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
_PODS_PATCH = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "update", "patch"]}


def kyverno_values(node_selector: Mapping[str, str]) -> dict:
    placement = {"nodeSelector": dict(node_selector)}
    return {
        # Exact strings: they cancel the default filters that drop bindings.
        "config": {"resourceFiltersExclude": ["[Pod/binding,*,*]", "[Binding,*,*]"]},
        "admissionController": {**placement, "rbac": {"clusterRole": {
            "extraResources": [_NODES_GET]}}},
        "backgroundController": {**placement, "rbac": {"clusterRole": {
            "extraResources": [_NODES_GET, _PODS_PATCH]}}},
        "cleanupController": placement,
        "reportsController": placement,
    }


def deletion_cost_policy(namespaces: Sequence[str], cost: str = "1") -> dict:
    """A kyverno.io/v1 ClusterPolicy spec."""
    return {
        # A Kyverno outage must not block pod binding: the annotation is a preference.
        "webhookConfiguration": {"failurePolicy": "Ignore"},
        "background": False,
        "rules": [{
            "name": "deletion-cost-on-hybrid-nodes",
            "match": {"any": [{"resources": {"kinds": ["Pod/binding"],
                                             "namespaces": list(namespaces)}}]},
            "context": [{"name": "computeType", "apiCall": {
                "urlPath": "/api/v1/nodes/{{request.object.target.name}}",
                "jmesPath": "metadata.labels.\"eks.amazonaws.com/compute-type\" || 'cloud'",
            }}],
            "preconditions": {"all": [{"key": "{{ computeType }}", "operator": "Equals",
                                       "value": "hybrid"}]},
            "mutate": {
                "targets": [{"apiVersion": "v1", "kind": "Pod",
                             "name": "{{ request.object.metadata.name }}",
                             "namespace": "{{ request.object.metadata.namespace }}"}],
                "patchStrategicMerge": {"metadata": {"annotations": {DELETION_COST: cost}}},
            },
        }],
    }


@dataclass(frozen=True)
class KyvernoArgs:
    #: Where Kyverno runs: cloud nodes (it must not depend on the nodes it acts for).
    node_selector: Mapping[str, str]
    #: Namespaces whose pods get the deletion cost; None: no policy (scenario A).
    policy_namespaces: Optional[Sequence[str]]
    #: What the release needs first: the nodes ``node_selector`` picks (Helm waits for the
    #: pods); at delete, the release goes before them, so its pre-delete hook can still run.
    wait_for: Sequence[pulumi.Resource] = ()


class Kyverno(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    policy: Optional[k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: KyvernoArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:demo:Kyverno", name, None, opts)
        # helm.v3.Release runs the chart's pre-delete hook, which removes Kyverno's webhook
        # configurations; without it they would outlive Kyverno and block admission.
        self.release = k8s.helm.v3.Release(
            f"{name}-release", name="kyverno", chart=CHART, version=VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=REPOSITORY),
            namespace=NAMESPACE, create_namespace=True,
            values=kyverno_values(args.node_selector),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.wait_for)))
        self.policy = None
        if args.policy_namespaces is not None:
            self.policy = k8s.apiextensions.CustomResource(
                f"{name}-deletion-cost",
                api_version="kyverno.io/v1", kind="ClusterPolicy",
                metadata={"name": "hybrid-pod-deletion-cost", "annotations": {
                    "policies.kyverno.io/title": "Pod deletion cost on hybrid nodes",
                    "policies.kyverno.io/description":
                        f"Pods bound to hybrid nodes get {DELETION_COST}=1, so cloud pods "
                        "are scaled in first."}},
                spec=deletion_cost_policy(args.policy_namespaces),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.release]))
        self.register_outputs({"releaseName": self.release.name})
