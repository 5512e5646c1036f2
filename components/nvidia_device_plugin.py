"""The NVIDIA device plugin, only on GPU hosts: it advertises nvidia.com/gpu to the scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

REPOSITORY = "https://nvidia.github.io/k8s-device-plugin"
CHART = "nvidia-device-plugin"
VERSION = "0.18.0"
NAMESPACE = "nvidia-device-plugin"
GPU_NODE_LABEL = "nvidia.com/gpu.present"


@dataclass(frozen=True)
class NvidiaDevicePluginArgs:
    #: Taints of the GPU hosts, as pod tolerations.
    tolerations: Sequence[dict]
    #: What the release needs first: the GPU host and the CNI (Cilium) that makes it Ready.
    wait_for: Sequence[pulumi.Resource] = ()


class NvidiaDevicePlugin(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: NvidiaDevicePluginArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:hybrid:NvidiaDevicePlugin", name, None, opts)
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name="nvidia-device-plugin",
            chart=CHART,
            version=VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=REPOSITORY),
            namespace=NAMESPACE,
            create_namespace=True,
            values={
                # No Node Feature Discovery here (the chart leaves it off): the GPU host labels
                # itself nvidia.com/gpu.present=true, which the chart's default affinity accepts,
                # and the plugin goes only where that label is.
                "nodeSelector": {GPU_NODE_LABEL: "true"},
                # The chart's defaults, plus the GPU host's taints.
                "tolerations": [
                    {"key": "CriticalAddonsOnly", "operator": "Exists"},
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    *args.tolerations,
                ],
            },
            # Helm v3 waits for the DaemonSet's desired pods to be scheduled, all but
            # maxUnavailable ready: installed after the Cilium release, while the GPU host is
            # still installing its driver, it finds no node to run on and returns at once. The
            # timeout is for the worst case (offline/timing.py): the host already joined and a
            # wait that counts ready pods, through a reboot and the plugin's longest
            # CrashLoopBackOff, about 13 min; Helm's default 300 s would not do.
            timeout=1200,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.wait_for)),
        )
        self.register_outputs({"releaseName": self.release.name})
