"""Every preflight check, in order, and the tally of their results.

An AWS check that cannot run because an earlier one failed is reported as SKIP, not attempted.
The checks themselves are in ``ops/preflight/checks.py``.
"""

from __future__ import annotations

import shutil
from typing import Iterable, Optional

import boto3

from components.aws_account import AwsAccount
from ops.preflight.account import check_account
from ops.preflight.activation import ActivationNeed, check_activation
from ops.preflight.checks import (FAIL, PASS, SKIP, WARN, Check, LabNeeds, Run, Which, _credentials,
                                  check_admin_roles, check_availability_zones, check_aws_cli,
                                  check_instance_types, check_names_free, check_pulumi_cli,
                                  check_quotas, check_region, check_spot_role, run_command,
                                  skipped)
from ops.preflight.nodeadm_key import Clock, check_nodeadm_ssm_key, utc_now


class _ClientPerService:
    """The session, handing out one client per service, region and config for a whole run:
    the checks ask for an EC2 client five times, and making one costs about 20 ms (its
    hundreds of operations become methods). A client that could not be made is not kept, so
    the next check asks again, as it did. Configs are told apart by identity: the checks pass
    the one ``CLIENT_CONFIG`` (ops/preflight/checks.py), which lives as long as the module."""

    def __init__(self, session: boto3.Session) -> None:
        self._session = session
        self._clients: dict[tuple, object] = {}

    def client(self, service: str, region_name: Optional[str] = None, config=None):
        key = (service, region_name, id(config))
        if key not in self._clients:
            self._clients[key] = self._session.client(service, region_name=region_name,
                                                      config=config)
        return self._clients[key]


def run_preflight(session: boto3.Session, needs: LabNeeds, *, which: Which = shutil.which,
                  run: Run = run_command, now: Clock = utc_now,
                  account: AwsAccount = AwsAccount(),
                  activation: Optional[ActivationNeed] = None) -> list[Check]:
    """Every check, in order. An AWS check that cannot run because an earlier one failed
    (no credentials, another account than the stack's, a disabled region, too few zones) is
    reported as SKIP, not attempted. ``account``: the stack's account settings; ``session``
    must have been made from them (``AwsAccount.boto3_session``). ``activation``: the stack's
    SSM hybrid activation, whose registrations left are reported (ops/preflight/activation.py)."""
    session = _ClientPerService(session)
    credentials, caller_arn = _credentials(session, needs.region)
    checks = [credentials]
    regional = ("region", "availability zones", "instance types", "quotas",
                "names in the region") + (("hybrid activation",) if activation else ())
    account_wide = ("spot service-linked role", "admin access entries")
    if caller_arn is not None:
        checks.append(check_account(caller_arn, account))
    if caller_arn is None:
        checks += [skipped(n, "no working AWS credentials (see credentials)")
                   for n in regional + account_wide]
    elif checks[-1].status == FAIL:
        # Another account's zones, quotas and names say nothing about the stack's.
        checks += [skipped(n, "the credentials are for another account than the stack's "
                              "(see account)") for n in regional + account_wide]
    else:
        checks.append(check_region(session, needs.region))
        if checks[-1].status == FAIL:
            checks += [skipped(n, f"{needs.region} is not usable (see region)")
                       for n in regional[1:]]
        else:
            zone_check, zones = check_availability_zones(session, needs)
            checks.append(zone_check)
            if zone_check.status == PASS:
                checks += check_instance_types(session, needs, zones)
            else:
                checks.append(skipped("instance types", "the lab's zones are not settled "
                                                        "(see availability zones)"))
            checks += check_quotas(session, needs, zones)
            if needs.cluster_name:
                checks.append(check_names_free(session, needs))
            if activation is not None:
                checks.append(check_activation(session, activation))
        # IAM is global: these hold whatever the region.
        checks.append(check_spot_role(session, needs.region))
        checks.append(check_admin_roles(caller_arn, needs))
    checks.append(check_aws_cli(which, run))
    checks.append(check_pulumi_cli(which, run))
    # Whatever the account: a host that cannot install nodeadm with SSM cannot join.
    checks.append(check_nodeadm_ssm_key(now()))
    return checks


def counts(checks: Iterable[Check]) -> dict[str, int]:
    result = {PASS: 0, WARN: 0, FAIL: 0, SKIP: 0}
    for check in checks:
        result[check.status] += 1
    return result
