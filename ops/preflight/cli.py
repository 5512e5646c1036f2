"""Can this account and this machine hold the lab? Read-only checks to run before `pulumi up`.

    python -m ops.preflight [--stack dev] [--stack-file PATH] [--region R]

Reads ``Pulumi.<stack>.yaml`` and checks, with Describe/List/Get calls only: the AWS
credentials (made as the program makes them: the stack's aws:profile and aws:assumeRoles), that
they are for the account the stack is pinned to (aws:allowedAccountIds), the region, the
availability zones, the instance types, the quota headroom, that
the names the stack takes in the region (cluster, log group, interruption queue) are free or
already its own, the registrations its SSM hybrid activation has left, the account's Spot
service-linked role, that adminRoleArns does not hold the deployer's own role, the AWS CLI v2
and the Pulumi CLI, and that the pinned nodeadm's SSM signing key has not expired (a WARN
from 60 days before). Each line is PASS, WARN or FAIL (with the fix); SKIP marks an AWS check
an earlier failure left nothing to run with. Exits 1 on any
FAIL, 2 on bad usage or an invalid config.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Optional, TextIO

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from components.zones import EKS_UNSUPPORTED_ZONE_IDS
from ops.preflight.activation import stack_activation
from ops.preflight.checks import (FAIL, PASS, SKIP, WARN, Check, InstanceNeed, LabNeeds, Run, Which,
                                  run_command)
from ops.preflight.nodeadm_key import Clock, utc_now
from ops.preflight.sequence import counts, run_preflight
from offline.runner import (config_from_stack_values, load_stack_config, stack_of_file,
                           written_in_stack_file)
from stacks.config import ConfigError, LabConfig, unknown_provider_keys
from stacks.layers.cluster import SYSTEM_NODE_COUNT
from stacks.layers.gateway import GATEWAY_NODE_COUNT
from stacks.layers.karpenter import BURST_INSTANCE_TYPES

ON_PREM_NOTE = ", which holds the simulated on-prem LAN"


def control_plane_log_group(cluster_name: str) -> str:
    """The log group EKS writes the control-plane logs of ``cluster_name`` to (and the stack
    creates first, to own it)."""
    return f"/aws/eks/{cluster_name}/cluster"


def interruption_queue(cluster_name: str) -> str:
    """The name of the stack's Karpenter interruption queue."""
    return f"{cluster_name}-karpenter"


def lab_needs(cfg: LabConfig) -> LabNeeds:
    """What the stack launches and where (the placement the layers use)."""
    instances = [
        # The system node group spans every private subnet of the cloud VPC.
        # Managed node groups: an upgrade adds up to twice their zones' count of nodes before it
        # drains the old ones (maxUnavailable is 1).
        InstanceNeed("system nodes", cfg.system_node_instance_type, SYSTEM_NODE_COUNT,
                     "systemNodeInstanceType", span=cfg.availability_zone_count, min_zones=2,
                     upgrade_surge=2 * cfg.availability_zone_count),
        # The gateway nodes use the first two private subnets, one node in each zone.
        InstanceNeed("gateway nodes", cfg.gateway_instance_type, GATEWAY_NODE_COUNT,
                     "gatewayInstanceType", span=GATEWAY_NODE_COUNT, min_zones=GATEWAY_NODE_COUNT,
                     upgrade_surge=2 * GATEWAY_NODE_COUNT),
        # The on-prem VPC has one server LAN subnet, in the first zone.
        InstanceNeed("hybrid hosts", cfg.hybrid_node_instance_type, cfg.hybrid_node_count,
                     "hybridNodeInstanceType", span=1, min_zones=1, placement_note=ON_PREM_NOTE),
    ]
    if cfg.gpu_enabled:
        instances.append(InstanceNeed("GPU host", cfg.gpu_instance_type, 1, "gpuInstanceType",
                                      span=1, min_zones=1, placement_note=ON_PREM_NOTE))
    return LabNeeds(
        region=cfg.region,
        availability_zone_count=cfg.availability_zone_count,
        instances=tuple(instances),
        burst_instance_types=tuple(BURST_INSTANCE_TYPES),
        burst_cpu_limit=cfg.burst_cpu_limit,
        excluded_zone_ids=tuple(EKS_UNSUPPORTED_ZONE_IDS),
        burst_types_source="BURST_INSTANCE_TYPES in stacks/layers/karpenter.py",
        cluster_name=cfg.cluster_name,
        log_group_name=control_plane_log_group(cfg.cluster_name),
        queue_name=interruption_queue(cfg.cluster_name),
        owner_tag=next(iter(cfg.lab_tag.items())),
        admin_role_arns=tuple(cfg.admin_role_arns),
    )


def render(checks: list[Check], out: TextIO) -> None:
    """One line per check, its fix under a WARN or FAIL, then the summary."""
    for check in checks:
        out.write(f"{check.status}  {check.name}: {check.detail}\n")
        if check.fix and check.status in (WARN, FAIL):
            out.write(f"      fix: {check.fix}\n")
    n = counts(checks)
    skipped = f" ({n[SKIP]} skipped)" if n[SKIP] else ""
    out.write(f"preflight: {n[PASS]} passed, {n[WARN]} warnings, {n[FAIL]} failed{skipped}\n")


def main(argv: Optional[list[str]] = None, *, session: Optional[boto3.Session] = None,
         which: Which = shutil.which, run: Run = run_command, now: Clock = utc_now) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.preflight", allow_abbrev=False,
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--stack",
                        help="stack whose Pulumi.<stack>.yaml to check for (default: dev, or the "
                             "name in --stack-file's Pulumi.<name>.yaml)")
    parser.add_argument("--stack-file", type=Path, metavar="PATH",
                        help="read this stack file instead")
    parser.add_argument("--region", help="check this region instead of the stack's aws:region")
    args = parser.parse_args(argv)
    # The stack's name decides names the checks look up (the cluster's is hybrid-lab-<stack>):
    # a Pulumi.prod.yaml is checked as prod, not as the default dev.
    args.stack = args.stack or stack_of_file(args.stack_file)
    source = args.stack_file or f"Pulumi.{args.stack}.yaml"
    try:
        # Read once (with Pulumi.yaml, ~10 ms to parse) for the config and the provider-key
        # warnings below.
        raw = load_stack_config(args.stack, path=args.stack_file)
        cfg = config_from_stack_values(raw, args.stack, args.region)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"error: {source}: {exc.as_written(written_in_stack_file(args.stack, args.stack_file))}",
              file=sys.stderr)
        return 2
    if session is None:
        try:
            # As the program's provider: the stack's profile, then its role. The account is
            # judged by the account check below, not refused here.
            session = cfg.aws_account.boto3_session(cfg.region, check_account=False)
        except (BotoCoreError, ClientError) as exc:
            # A profile that does not exist, a role these credentials may not assume.
            print(f"error: the AWS credentials of {source} ({cfg.aws_account.describe()}) "
                  f"cannot be used: {exc}", file=sys.stderr)
            return 2

    print(f"eks-hybrid-lab preflight for stack '{cfg.stack}' in {cfg.region} "
          f"(read-only: Describe/List/Get calls only)")
    print(f"credentials: {cfg.aws_account.describe()}")
    # A misspelt provider key (aws:regon) is ignored by the provider: said here as by the plan.
    settings = [Check("stack settings", WARN, warning, "correct or remove the key in "
                      f"{source}")
                for warning in unknown_provider_keys(raw)]
    checks = settings + run_preflight(session, lab_needs(cfg), which=which, run=run,
                                      now=now, account=cfg.aws_account,
                                      activation=stack_activation(cfg))
    render(checks, sys.stdout)
    return 1 if any(c.status == FAIL for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
