"""Availability zones an EKS cluster can use."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

#: Zones where EKS cannot place a cluster's control-plane interfaces (EKS user guide, "VPC and
#: subnet requirements"). Subnets there make CreateCluster fail with
#: UnsupportedAvailabilityZoneException, so they are never offered.
EKS_UNSUPPORTED_ZONE_IDS = ("use1-az3", "usw1-az2", "cac1-az3")


def eks_availability_zones(provider: pulumi.ProviderResource) -> list[str]:
    """Names of the region's available, non-opt-in zones (no Local or Wavelength Zones) that
    EKS supports, sorted. Resolved while the program runs, so a region with too few zones is
    reported before anything is created."""
    result = aws.get_availability_zones(
        state="available",
        filters=[aws.GetAvailabilityZonesFilterArgs(
            name="opt-in-status", values=["opt-in-not-required"])],
        exclude_zone_ids=list(EKS_UNSUPPORTED_ZONE_IDS),
        opts=pulumi.InvokeOptions(provider=provider),
    )
    return sorted(result.names)
