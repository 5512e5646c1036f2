"""The offline plan: what `pulumi up` would build for a stack, without AWS or the Pulumi CLI.

    python -m offline.plan [--stack dev | --stack-file PATH] [--details]

Reads ``Pulumi.<stack>.yaml``, runs the real program against a stand-in for AWS and prints the
layers in creation order with their resources, the destroy order, the nodeadm release the hybrid
hosts install and when its SSM signing key expires, cost and time, where every
pod would run (the scheduling and capacity model), the flows the lab needs with whether what
registers allows them (the reachability model), and any warnings, in lines that fit a
120-column terminal; ``--details`` adds the chart values the chart source the models render does
not read. Invalid config prints the validation error and exits 1, as `pulumi preview` would fail.
"""

from __future__ import annotations

import gc

if __name__ == "__main__":
    # A one-shot command: what it builds (the SDK's modules, the run's resources and outputs)
    # lives until it exits, so the cyclic collector's passes, each walking all of it again,
    # were a fifth of the plan's CPU and freed next to nothing (the peak memory is the same
    # without them). Reference counting still frees what is dropped; importing this module
    # (the tests, other tools) leaves the collector as it is.
    gc.disable()

import argparse
import datetime
import io
import os
import re
import sys
import textwrap
from pathlib import Path
from collections import Counter, defaultdict
from typing import Optional, TextIO

from components.eks_versions import (EXTENDED_SUPPORT_USD_PER_HOUR, STANDARD_SUPPORT_USD_PER_HOUR,
                                     SUPPORT_TYPE, support_window)
from components.nodeadm import PIN_SOURCE, SSM_KEY_EXPIRES, SSM_KEY_WARN_DAYS
from stacks.config import LAYERS, ConfigError
from offline import chart_render, plan_charts, reachability, scheduling
from stacks.costs import READ_ON
from stacks.costs import estimate as estimate_costs
from stacks.costs import totals as cost_totals
from offline.timing import (SAFETY_FACTOR, awaits, estimate_destroy, estimate_layer_by_layer,
                           estimate_up)
from offline.pulumi_cli import CliConfigError, StackFileError
from offline.runner import (ProgramRun, Secret, load_stack_config, provider_default_tags,
                            run_program, stack_of_file, written_in_stack_file)

_MAX_NAMES = 4
#: A host's Node cleanup (components/cleanup/node_objects.py).
NODE_CLEANUP_TYPE = "pulumi-python:dynamic/cleanup:HybridNodeObjects"


def short_type(token: str) -> str:
    """aws:ec2/vpc:Vpc -> aws.ec2.Vpc: the name a Python reader knows the resource by."""
    package, module, type_ = token.split(":")
    return f"{package}.{module.split('/')[0]}.{type_}"



#: The plan is read in a terminal: no line wider than this.
WIDTH = 120


def fit(text: str, width: int = WIDTH) -> str:
    """``text`` with every line wider than ``width`` wrapped at spaces. A continuation starts
    under the line's last column (the text after its last run of two or more spaces, if that
    starts in the left half), else under a warning's text or four in from the line's indent,
    so a wrapped row still reads as one row of its table."""
    lines = []
    for line in text.split("\n"):
        if len(line) <= width:
            lines.append(line)
            continue
        lines.extend(textwrap.wrap(line, width=width, subsequent_indent=" " * _hanging(line, width),
                                   break_on_hyphens=False))
    return "\n".join(lines)


def _hanging(line: str, width: int) -> str:
    lead = len(line) - len(line.lstrip(" "))
    columns = [m.end() for m in re.finditer(r"\S {2,}(?=\S)", line) if m.end() <= width // 2]
    if columns:
        indent = columns[-1]
    elif line[lead:].startswith("! "):
        indent = lead + 2
    else:
        indent = lead + 4
    # A word that would not fit after that indent (a long resource name) gets the narrower one.
    longest = max(len(word) for word in line.split())
    return indent if indent + longest <= width else lead + 4


def render(run: ProgramRun, out: TextIO, stack_file: Optional[Path] = None, *,
           details: bool = False) -> None:
    """The plan of ``run``; ``stack_file`` when its settings came from that file rather than
    ``Pulumi.<stack>.yaml``; ``details`` adds the chart values the models' chart source does
    not read. Lines are as long as they come: ``main`` fits them to the terminal."""
    cfg = run.config
    region = cfg.get("aws:region", "?")
    built = run.outputs.get("layers", [])
    by_layer: dict[Optional[str], list] = defaultdict(list)
    for reg in run.resources():
        by_layer[run.layer_of(reg)].append(reg)

    counts = run.counts()
    out.write(f"eks-hybrid-lab plan for stack '{run.stack}' in {region}: "
              f"{len(built)} of {len(LAYERS)} layers, {counts.resources} resources\n")
    out.write(f"  ({counts.describe().split(' (', 1)[1]}\n")
    if stack_file is not None:
        out.write(f"Stack file: {stack_file}\n")
    out.write("Offline: the program ran against a stand-in for AWS; nothing was created.\n")
    # Which credentials pulumi up, the kubeconfig and the cleanups use, and the account they
    # must be in (an unpinned stack is also among the warnings, with the command that pins it).
    out.write(f"AWS credentials: {run.lab_config.aws_account.describe()}\n\n")

    out.write("Create order\n")
    for number, layer in enumerate(LAYERS, start=1):
        if layer not in built:
            out.write(f"  {number}. {layer:<10} not built "
                      f"(upToLayer = {built[-1] if built else '-'})\n")
            continue
        regs = by_layer.get(layer, [])
        out.write(f"  {number}. {layer:<10} {len(regs)} resources\n")
        names: dict[str, list[str]] = defaultdict(list)
        counts = Counter()
        for reg in regs:
            counts[short_type(reg.type)] += 1
            names[short_type(reg.type)].append(reg.name)
        width = max((len(t) for t in counts), default=0)
        for type_ in sorted(counts):
            shown = sorted(names[type_])
            more = f", … (+{len(shown) - _MAX_NAMES})" if len(shown) > _MAX_NAMES else ""
            out.write(f"       {type_:<{width}}  {counts[type_]:>2}  "
                      f"{', '.join(shown[:_MAX_NAMES])}{more}\n")

    stack_level = by_layer.get(None, [])
    if stack_level:
        out.write("\nStack-level (providers)\n")
        for reg in stack_level:
            tags = provider_default_tags(reg)
            tag_text = ", ".join(f"{k}={v}" for k, v in tags.items())
            out.write(f"       {reg.type}  {reg.name}"
                      f"{'  default tags: ' + tag_text if tag_text else ''}\n")

    out.write("\nDestroy order (pulumi destroy; lowering upToLayer removes the layers above it)\n")
    out.write(f"  {' -> '.join(reversed(built)) if built else '(nothing)'}\n")

    render_versions(run, out)
    render_nodeadm(run, out)
    render_activation(run, out)
    _render_costs(run, out)
    _render_times(run, out)
    plan_charts.render(run, out)
    render_scheduling(scheduling.evaluate(run), out)
    if details:
        _render_values_not_read(run, out)
    reachability.render(reachability.evaluate(run), out, reachability.internet_exposure(run))

    out.write("\nWarnings\n")
    if run.warnings:
        for warning in run.warnings:
            out.write(f"  ! {warning}\n")
    else:
        out.write("  none\n")
    if not details:
        out.write("\n--details adds the chart values the lab sets that the chart source the models "
                  "render does not read.\n")


def render_versions(run: ProgramRun, out: TextIO) -> None:
    """The Kubernetes version the control plane and each cloud node group are registered with:
    a version change upgrades the control plane first, then the node groups, which may not be
    newer (docs/eks-support.md#upgrades)."""
    rows = [("control plane", r.name, r.inputs.get("version"))
            for r in run.of_type("aws:eks/cluster:Cluster")]
    rows += [("node group", r.name, r.inputs.get("version"))
             for r in run.of_type("aws:eks/nodeGroup:NodeGroup")]
    if not rows:
        return
    out.write("\nKubernetes version (the control plane is upgraded first, then the node groups: "
              "docs/eks-support.md#upgrades)\n")
    width = max(len(name) for _, name, _ in rows)
    for role, name, version in rows:
        out.write(f"  {role:<13}  {name:<{width}}  {version}\n")


_NODEADM_RELEASE = re.compile(r"^NODEADM_URL='[^']*/releases/([^/']+)/bin/linux/", re.M)


def render_nodeadm(run: ProgramRun, out: TextIO,
                   today: Optional[datetime.datetime] = None) -> None:
    """The nodeadm release the hybrid hosts' registered user data installs, and when its SSM
    signing key expires (after that `nodeadm install --credential-provider ssm` fails)."""
    releases: dict[str, list[str]] = defaultdict(list)
    for reg in run.of_type("aws:ec2/instance:Instance"):
        data = reg.inputs.get("userData", "")
        data = str(data.value if isinstance(data, Secret) else data)
        if scheduling.node_config_of(data) is None:
            continue
        found = _NODEADM_RELEASE.search(data)
        releases[found.group(1) if found else "?"].append(reg.name)
    if not releases:
        return
    today = today or datetime.datetime.now(datetime.timezone.utc)
    out.write(f"\nHybrid hosts' nodeadm (pinned: {PIN_SOURCE}; docs/hybrid-nodes.md#nodeadm)\n")
    for release, hosts in sorted(releases.items()):
        expires = SSM_KEY_EXPIRES.get(release)
        if expires is None:
            key = ("NOT PINNED to a release whose SSM key is known" if release in ("latest", "?")
                   else "its SSM signing key's expiry is not recorded")
        else:
            days = (expires - today).days
            key = (f"its SSM signing key expires {expires:%Y-%m-%d}"
                   + (f" ({days} days from today; preflight warns {SSM_KEY_WARN_DAYS} days before)"
                      if expires > today else ": EXPIRED, no host can install nodeadm with SSM"))
        count = f"{len(hosts)} host" + ("s" if len(hosts) != 1 else "")
        out.write(f"  nodeadm {release} on {count} ({', '.join(sorted(hosts))}): {key}\n")


#: The registration budget in front of the hybrid hosts (components/cleanup/registration_budget.py).
BUDGET_TYPE = "pulumi-python:dynamic/cleanup:SsmRegistrationBudget"


def render_activation(run: ProgramRun, out: TextIO) -> None:
    """The SSM activation's registration limit, what a first `pulumi up` registers and how many
    replacements of every host that leaves: each registers every host again, and a change that
    needs more than are left stops at preview (docs/hybrid-nodes.md#activation-registrations)."""
    for budget in run.of_type(BUDGET_TYPE):
        limit = int(budget.inputs.get("registrationLimit") or 0)
        hosts = list(budget.inputs.get("hostNames") or [])
        name = budget.inputs.get("activationName")
        replacements = (limit - len(hosts)) // len(hosts) if hosts else 0
        out.write(f"\nSSM hybrid activation {name} (docs/hybrid-nodes.md#activation-registrations)\n"
                  f"  registration limit {limit}; a first pulumi up registers {len(hosts)} "
                  f"({', '.join(hosts) or 'no hosts'}), leaving {limit - len(hosts)}: "
                  f"{replacements} replacement{'s' if replacements != 1 else ''} of every host "
                  "(an edit of the join script) before preview asks for a new activationGeneration\n")


def _render_values_not_read(run: ProgramRun, out: TextIO) -> None:
    """The values the lab sets that the chart source the models render does not read: the
    inert-value test allows exactly these (offline/chart_render.py NOT_READ)."""
    out.write("\nChart values not read by the chart source here (offline/chart_render.py)\n")
    found = [(release, path, why) for release in chart_render.registered_releases(run)
             for path, why in chart_render.documented_not_read(release).items()]
    # By release and path: the releases come in registration order, which varies from run to run.
    found.sort(key=lambda item: (item[0].name, item[0].namespace, item[1]))
    for release, path, why in found:
        source = release.source
        out.write(f"  {release.name}: {path} (source {source.directory} {source.version}): {why}\n")
    if not found:
        out.write("  none\n")


# --- the scheduling model's summary ---------------------------------------------------------------

def _where(result: scheduling.Schedule, placement: scheduling.Placement) -> str:
    by_name = {n.name: n for n in result.nodes}
    parts = []
    roles = Counter()
    for name, count in placement.nodes.items():
        if count and not by_name[name].elastic:
            roles[by_name[name].role] += count
    for role, count in sorted(roles.items()):
        parts.append(f"{count} on {role}")
    if placement.workload.kind == "DaemonSet" and any(
            placement.nodes[n.name] for n in result.nodes if n.elastic):
        parts.append("each burst node")
    if placement.karpenter:
        parts.append(f"{placement.karpenter} on Karpenter burst nodes")
    if placement.pending:
        parts.append(f"{placement.pending} PENDING")
    return ", ".join(parts) or "nowhere"


def render_scheduling(model: scheduling.SchedulingModel, out: TextIO) -> None:
    """The scheduling model's part of the plan."""
    out.write("\nScheduling (model over the registered nodes, taints and pods, charts' pods as "
              "Helm renders the registered values; offline/scheduling.py)\n")
    out.write(f"  chart releases: {scheduling._origins(model.renders)}\n")
    groups = Counter((n.role, n.instance_type, n.allocatable.cpu_m)
                     for n in model.nodes if not n.elastic)
    out.write("  nodes: " + ", ".join(
        f"{role} {count}x {itype} ({cpu}m allocatable)"
        for (role, itype, cpu), count in sorted(groups.items())) + "\n")
    burst_types = sorted({n.instance_type for n in model.nodes if n.elastic})
    if burst_types:
        taints = sorted({str(t) for n in model.nodes if n.elastic for t in n.taints})
        out.write(f"  burst: Karpenter nodes of {', '.join(burst_types)}"
                  f" (taint {', '.join(taints) or 'none'})\n")
    width = max((len(p.workload.name) for p in model.result.placements), default=10)
    for p in model.result.placements:
        count = "" if p.workload.kind == "DaemonSet" else f" x{p.workload.replicas}"
        out.write(f"  {p.workload.name:<{width}}  {p.workload.kind + count:<15} "
                  f"{_where(model.result, p)}\n")
    if model.burst:
        b = model.burst
        nodes = ", ".join(f"{name} {alloc}m - {daemons}m daemons" for name, (alloc, daemons)
                          in sorted(b.nodes.items()))
        others = ", ".join(f"{name} {n}x{cpu}m" for name, n, cpu in b.co_tenants) or "none"
        verdict = (f"{b.fewest} fit" if b.fewest == b.most
                   else f"{b.fewest} to {b.most} fit, depending on where the others land")
        out.write(f"  hybrid capacity for burst ({b.request_m}m each): {verdict}, for every "
                  f"placement of the others\n    hosts: {nodes}\n    shared with: {others}\n")
    for unchecked in model.unchecked:
        out.write(f"  not checked: {unchecked}\n")
    problems = model.problems
    out.write("  problems: " + ("none" if not problems else "") + "\n")
    for problem in problems:
        out.write(f"    ! {problem}\n")


def _render_costs(run: ProgramRun, out: TextIO) -> None:
    cfg = run.lab_config
    costs, book = estimate_costs(cfg, dict(cfg.price_overrides))
    source = f"{book.region} prices" + (f" (no table for {cfg.region})" if book.fallback else "")
    out.write(f"\nCost while up (USD, on-demand, approximate; {source} read {READ_ON}, "
              "stacks/costs.py; priceOverrides replaces them)\n")

    def money(low, high, per):
        if low is None:
            return "?"
        return f"{low * per:.2f}" if low == high else f"{low * per:.2f}-{high * per:.2f}"

    for cost in costs:
        note = f"  ({cost.note})" if cost.note else ""
        out.write(f"  {cost.layer:<10} {money(cost.low, cost.high, 1):>12} /h "
                  f"{money(cost.low, cost.high, 24):>14} /day{note}\n")
    low, high = cost_totals(costs)
    out.write(f"  {'total':<10} {money(low, high, 1):>12} /h {money(low, high, 24):>14} /day\n")
    if "cluster" in cfg.layers:
        window = support_window(cfg.kubernetes_version)
        out.write(f"  the control plane is priced at EKS standard support "
                  f"(${book.prices.get('eks.cluster', STANDARD_SUPPORT_USD_PER_HOUR):.2f}/h): "
                  f"upgradePolicy {SUPPORT_TYPE}, {window.describe()}; extended support would "
                  f"be ${EXTENDED_SUPPORT_USD_PER_HOUR:.2f}/h\n")
    if book.missing:
        out.write(f"  no price for {', '.join(sorted(book.missing))}: set priceOverrides\n")


def _render_times(run: ProgramRun, out: TextIO) -> None:
    up, down = estimate_up(run), estimate_destroy(run)
    layered = estimate_layer_by_layer(run)
    out.write("\nTime (critical path; typical durations per resource type in offline/timing.py)\n")
    out.write(f"  pulumi up       ~{up.seconds / 60:.0f} min: {' -> '.join(up.chain)}\n")
    if run.of_type(NODE_CLEANUP_TYPE):
        # The host boots while EKS creates the control plane, so nothing it waits for holds its
        # Node's cleanup; the cleanup, created after it, ends it at delete: the Node, which EKS
        # bills while it exists, goes after its host (components/cleanup/node_objects.py).
        out.write("  node cleanup    <host>-node comes after its host and, at delete, terminates "
                  "the host before it deletes the Node\n")
    out.write(f"  pulumi destroy  ~{down.seconds / 60:.0f} min: {' -> '.join(down.chain)}\n")
    out.write(f"  layer by layer  ~{layered / 60:.0f} min (if each layer waited for the whole "
              "previous one)\n")
    checked = awaits(run)
    longest = max(checked, key=lambda a: a.typical, default=None)
    problems = [a.problem for a in checked if a.problem]
    out.write(f"  awaits          {len(checked)} awaited operations; each one's typical time "
              f"x{SAFETY_FACTOR:g} fits its limit" if not problems else
              f"  awaits          {len(problems)} of {len(checked)} would time out")
    if longest is not None and not problems:
        out.write(f" (longest: {longest.name} ~{longest.typical / 60:.0f} min of "
                  f"{longest.limit.seconds / 60:.0f})")
    out.write("\n")
    for problem in problems:
        out.write(f"    ! {problem}\n")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offline.plan", allow_abbrev=False,
                                     description=__doc__.split("\n")[0])
    # One or the other: with both, which settings were planned would be a guess.
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--stack", help="stack whose Pulumi.<stack>.yaml to plan (default: dev)")
    which.add_argument("--stack-file", type=Path, metavar="PATH",
                       help="plan this stack file instead (a config variant you have not made "
                            "a stack for), as the stack its name Pulumi.<stack>.yaml gives, "
                            "else as dev")
    parser.add_argument("--details", action="store_true",
                        help="also list the chart values the lab sets that the chart source the "
                             "models render does not read (offline/chart_render.py)")
    args = parser.parse_args(argv)
    args.stack = args.stack or stack_of_file(args.stack_file)
    try:
        config = load_stack_config(args.stack, path=args.stack_file)
    except StackFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CliConfigError as exc:
        # What `pulumi preview` itself would print before running the program.
        print(f"error: {args.stack_file or f'Pulumi.{args.stack}.yaml'}: the Pulumi CLI would "
              f"refuse this stack: {exc}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        run = run_program(config, stack=args.stack)
    except ConfigError as exc:
        source = args.stack_file or f"Pulumi.{args.stack}.yaml"
        print(f"error: {source}: {exc.as_written(written_in_stack_file(args.stack, args.stack_file))}",
              file=sys.stderr)
        return 1
    text = io.StringIO()
    render(run, text, args.stack_file, details=args.details)
    sys.stdout.write(fit(text.getvalue()))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # `python -m offline.plan | head`: the reader left; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
