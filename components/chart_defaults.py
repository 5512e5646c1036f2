"""What the charts this lab installs default to, where it decides where their pods run and how
much they ask for: node selectors, affinity, tolerations, replicas and resource requests.

Helm merges the values a release gives into the chart's ``values.yaml`` map by map, and
*replaces* lists whole (``helm_merge``). A release that sets ``tolerations`` therefore drops the
chart's own tolerations, so a component that adds one must write the chart's defaults back in —
these are those defaults. Each subset is copied from the chart's real ``values.yaml`` (the
version pinned, or the nearest readable one; ``SOURCES``), and ``tests/test_scheduling.py``
checks every value here against that file, so they cannot drift unnoticed.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

#: chart -> (version of the values.yaml these come from, why that one).
SOURCES: dict[str, tuple[str, str]] = {
    "cilium": ("1.18.8", "upstream chart of the pinned AWS build 1.18.8-1 (its own source is not public)"),
    "karpenter": ("1.14.1", "newest readable chart; the lab pins 1.15.0, whose placement values are unchanged"),
    "kyverno": ("3.9.0", "the pinned chart"),
    "eks-hybrid-nodes-gateway": ("1.0.0", "newest readable chart; the lab pins 1.0.1"),
    "nvidia-device-plugin": ("0.18.0", "the pinned chart"),
}

_CILIUM_OPERATOR_TOLERATIONS = [
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
    {"key": "node-role.kubernetes.io/master", "operator": "Exists"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
    {"key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Exists"},
]

DEFAULTS: dict[str, dict[str, Any]] = {
    "cilium": {
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname",
             "labelSelector": {"matchLabels": {"k8s-app": "cilium"}}}]}},
        # Tolerate everything: the agent is the CNI, and a node is NotReady until it runs.
        "tolerations": [{"operator": "Exists"}],
        "resources": {},
        "initResources": {},
        # The install-cni-binaries init container: the agent pod's only CPU request.
        "cni": {"resources": {"requests": {"cpu": "100m", "memory": "10Mi"}}},
        "MTU": 0,
        "operator": {
            "replicas": 2,
            "hostNetwork": True,
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname",
                 "labelSelector": {"matchLabels": {"io.cilium/app": "operator"}}}]}},
            "tolerations": _CILIUM_OPERATOR_TOLERATIONS,
            "resources": {},
        },
    },
    "karpenter": {
        "replicas": 2,
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname"}]},
        },
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "DoNotSchedule"}],
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
        "controller": {"resources": {}},
    },
    "kyverno": {
        "global": {"nodeSelector": {"kubernetes.io/os": "linux"}, "tolerations": []},
        "admissionController": {
            "replicas": None, "nodeSelector": {}, "tolerations": [],
            "container": {"resources": {"limits": {"memory": "384Mi"},
                                        "requests": {"cpu": "100m", "memory": "128Mi"}}},
            "initContainer": {"resources": {"limits": {"cpu": "100m", "memory": "256Mi"},
                                            "requests": {"cpu": "10m", "memory": "64Mi"}}},
        },
        **{controller: {
            "replicas": None, "nodeSelector": {}, "tolerations": [],
            "resources": {"limits": {"memory": "128Mi"},
                          "requests": {"cpu": "100m", "memory": "64Mi"}},
        } for controller in ("backgroundController", "cleanupController", "reportsController")},
    },
    "eks-hybrid-nodes-gateway": {
        "replicas": 2,
        "nodeLabel": "hybrid-gateway-node",
        "autoMode": {"enabled": True},
    },
    "nvidia-device-plugin": {
        "nodeSelector": {},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present",
                                   "operator": "In", "values": ["true"]}]},
            {"matchExpressions": [{"key": "feature.node.kubernetes.io/cpu-model.vendor_id",
                                   "operator": "In", "values": ["NVIDIA"]}]},
            {"matchExpressions": [{"key": "nvidia.com/gpu.present",
                                   "operator": "In", "values": ["true"]}]},
        ]}}},
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "resources": {},
    },
}


def chart_default(chart: str, *path: str) -> Any:
    """A copy of one default, e.g. ``chart_default("cilium", "operator", "tolerations")``."""
    value: Any = DEFAULTS[chart]
    for key in path:
        value = value[key]
    return copy.deepcopy(value)


def helm_merge(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The values a chart renders with, merged the way Helm merges a release's values into the
    chart's: maps key by key, recursively; anything else — lists included — replaced whole; a
    null override deletes the default."""
    merged: dict[str, Any] = copy.deepcopy(dict(defaults))
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = helm_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
