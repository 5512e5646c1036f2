"""What a stack of the lab left in AWS: run after `pulumi destroy`.

    python -m ops.leftovers [--stack dev] [--stack-file PATH] [--region R] [--json]

Reads ``Pulumi.<stack>.yaml`` (or the stack file given) for the cluster name, the region, the
hybrid pod CIDR, the stack's lab tag and its account settings (aws:profile, aws:assumeRoles: the
credentials the program uses; aws:allowedAccountIds: the audit refuses another account, where
it would find nothing and call the stack clean), then lists — read-only, Describe/List/Get calls only —
everything of that stack that still exists in the account, with an approximate hourly cost and
the command that removes it. Exit 0: nothing left; 1: something is left; 2: bad usage or config,
or AWS could not be (fully) queried.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any, Optional, TextIO

import yaml

from ops.leftovers import audit
from ops.leftovers.audit import AwsUnavailable, Report, Scope, scan
from ops.leftovers.prices import COST_NOTE
from stacks.costs import PriceBook

#: Pulumi's rule for stack names (without an organization or project prefix).
_STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_STACK_FILE = re.compile(r"Pulumi\.(.+)\.ya?ml")
_HOURS_A_MONTH = 730


def scope_of(config: Any) -> Scope:
    """The leftovers scope of a validated ``LabConfig``, priced from the lab's price table
    (stacks/costs.py, with the stack's priceOverrides) so the audit and the plan agree."""
    (key, value), = config.lab_tag.items()
    book = PriceBook(config.region, dict(config.price_overrides))
    hourly = {"nat-gateway": book.hourly("natGateway"), "public-ipv4": book.hourly("publicIpv4"),
              "tgw-attachment": book.hourly("tgwAttachment"), "eks-cluster": book.hourly("eks.cluster"),
              "kms-key": book.hourly("kms.key")}
    instances = {k[len("ec2."):]: v for k, v in book.prices.items() if k.startswith("ec2.")}
    return Scope(stack=config.stack, region=config.region, cluster_name=config.cluster_name,
                 hybrid_pod_cidr=config.hybrid_pod_cidr, lab_tag_key=key, lab_tag_value=value,
                 hourly_usd=hourly, instance_hourly_usd=instances)


def _usd(value: Optional[float]) -> str:
    if value is None:
        return "?"
    return f"{value:.4f}".rstrip("0").rstrip(".") or "0"


def render(report: Report, out: TextIO) -> None:
    scope = report.scope
    out.write(f"eks-hybrid-lab leftovers of stack {scope.stack} in {scope.region} "
              f"(account {scope.account})\n")
    out.write(f"Scope: tag {scope.lab_tag_key}={scope.lab_tag_value}, cluster "
              f"{scope.cluster_name}, hybrid pod CIDR {scope.hybrid_pod_cidr}\n\n")

    if report.leftovers:
        kind_width = max(len("KIND"), *(len(item.kind) for item in report.leftovers))
        id_width = max(len("ID"), *(len(item.id) for item in report.leftovers))
        out.write(f"{'KIND':<{kind_width}}  {'ID':<{id_width}}  {'~$/h':>7}  DETAIL\n")
        for item in report.leftovers:
            region = "" if item.region == scope.region else f" [{item.region}]"
            out.write(f"{item.kind:<{kind_width}}  {item.id:<{id_width}}  "
                      f"{_usd(item.hourly_usd):>7}  {item.detail}{region}\n")
            out.write(f"{'':<{kind_width}}  remove: {item.remove}\n")
        total, unknown = report.total_hourly_usd()
        out.write(f"\nTotal: ~${_usd(total)}/h (~${total * _HOURS_A_MONTH:.2f} a month) for "
                  f"{len(report.leftovers)} leftover{'s' if len(report.leftovers) != 1 else ''}"
                  + (f"; {unknown} of unknown cost" if unknown else "") + ".\n")
        out.write(COST_NOTE + "\n")
    elif report.complete:
        out.write(f"nothing of stack {scope.stack} is left in {scope.region} "
                  f"({len(audit.CHECKS)} checks).\n")

    if report.errors:
        out.write("\nCould not check (the audit is incomplete):\n")
        for check, why in report.errors:
            out.write(f"  {check}: {why}\n")


def as_json(report: Report) -> dict[str, Any]:
    scope = report.scope
    total, unknown = report.total_hourly_usd()
    return {
        "stack": scope.stack,
        "region": scope.region,
        "account": scope.account,
        "scope": {"lab_tag": {scope.lab_tag_key: scope.lab_tag_value},
                  "cluster_name": scope.cluster_name,
                  "hybrid_pod_cidr": str(scope.hybrid_pod_cidr)},
        "clean": report.clean,
        "complete": report.complete,
        "leftovers": [dataclasses.asdict(item) for item in report.leftovers],
        "errors": [{"check": check, "error": why} for check, why in report.errors],
        "total_hourly_usd": round(total, 6),
        "unknown_cost_count": unknown,
        "cost_note": COST_NOTE,
    }


def _stack_name(args: argparse.Namespace) -> str:
    """The stack whose lab tag to look for: --stack, else the name in Pulumi.<name>.yaml."""
    if args.stack is not None:
        return args.stack
    if args.stack_file is None:
        return "dev"
    match = _STACK_FILE.fullmatch(args.stack_file.name)
    if not match:
        raise ValueError(f"cannot tell the stack name from {args.stack_file.name}; pass "
                         "--stack NAME (the lab tag this audit looks for names the stack)")
    return match.group(1)


def main(argv: Optional[list[str]] = None, session: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.leftovers", allow_abbrev=False,
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--stack", help="stack whose leftovers to list (default: dev, or the "
                                        "name in --stack-file's Pulumi.<name>.yaml)")
    parser.add_argument("--stack-file", type=Path, metavar="PATH",
                        help="read the settings from this stack file")
    parser.add_argument("--region", help="look in this region instead of aws:region")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

    try:
        stack = _stack_name(args)
        if not _STACK_NAME.fullmatch(stack) or stack.startswith("."):
            raise ValueError(f"{stack!r} is not a stack name (letters, digits, '-', '_' and "
                             "'.', at most 100)")
        from offline.runner import config_from_stack_file
        from stacks.config import ConfigError

        source = args.stack_file or f"Pulumi.{stack}.yaml"
        try:
            config = config_from_stack_file(stack, path=args.stack_file, region=args.region)
        except ConfigError as error:
            raise ValueError(f"{source}: {error}") from error
        except (yaml.YAMLError, AttributeError) as error:
            # AttributeError: YAML that is not a mapping of settings.
            raise ValueError(f"{source}: not a Pulumi stack file ({error})") from error
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    if session is None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            session = config.aws_account.boto3_session(config.region)
        except (BotoCoreError, ClientError, RuntimeError) as error:
            print(f"error: cannot audit stack {stack} with its AWS credentials "
                  f"({config.aws_account.describe()}): {error}\nNothing was looked at.",
                  file=sys.stderr)
            return 2
    try:
        report = scan(session, scope_of(config))
    except AwsUnavailable as error:
        print(f"error: cannot query AWS in {config.region} for stack {stack}: {error}\n"
              "Check the credentials and region (aws sts get-caller-identity); nothing was "
              "looked at.", file=sys.stderr)
        return 2

    if args.json:
        json.dump(as_json(report), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(report, sys.stdout)
    if report.errors:
        print(f"error: {len(report.errors)} of {len(audit.CHECKS)} checks could not run; "
              "what is listed may not be all that is left.", file=sys.stderr)
        return 2
    return 1 if report.leftovers else 0


if __name__ == "__main__":
    sys.exit(main())
