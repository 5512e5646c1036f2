"""EKS managed add-ons at the version EKS names as default for the cluster's Kubernetes version."""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

import pulumi
import pulumi_aws as aws


def eks_addon(name: str, *, cluster_name: pulumi.Input[str], addon_name: str,
              kubernetes_version: str, configuration: Optional[Mapping[str, Any]] = None,
              opts: pulumi.ResourceOptions) -> aws.eks.Addon:
    """One managed add-on.

    The version is the one EKS marks default for ``kubernetes_version`` (not the newest): it
    moves only when EKS changes its default, so previews stay quiet between rehearsals. This
    stack owns the add-on's configuration, so conflicts with fields set outside it are
    overwritten, on create and on update.
    """
    # An output invoke: it runs alongside the rest of the program instead of blocking it.
    version = aws.eks.get_addon_version_output(
        addon_name=addon_name,
        kubernetes_version=kubernetes_version,
        most_recent=False,
        opts=pulumi.InvokeOutputOptions(parent=opts.parent, provider=opts.provider),
    ).version
    return aws.eks.Addon(
        name,
        cluster_name=cluster_name,
        addon_name=addon_name,
        addon_version=version,
        configuration_values=json.dumps(configuration) if configuration else None,
        resolve_conflicts_on_create="OVERWRITE",
        resolve_conflicts_on_update="OVERWRITE",
        opts=opts,
    )
