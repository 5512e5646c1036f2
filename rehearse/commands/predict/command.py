"""Which pods the ReplicaSet controller deletes when a Deployment scales in, in order, each with
the rule that decided it — and where no rule decides, which the controller picks at random.

The model is the kube-controller-manager's own (docs/scale-in.md#the-replicaset-controllers-ranking): the ReplicaSet's active pods
(not Succeeded or Failed, not being deleted) are sorted by ActivePodsWithRanks.Less and the
first `active - replicas` are deleted, all at once. The rules, first difference decides:
1 not scheduled, 2 phase Pending < Unknown < Running, 3 not Ready, 4 lower
controller.kubernetes.io/pod-deletion-cost, 5 more pods of the Deployment on the same node,
6 Ready more recently, 7 more container restarts (then more sidecar restarts), 8 created more
recently. Rules 6 and 8 compare ages in log2 buckets of nanoseconds; within a bucket the lower
UID goes first. Each deleted pod is explained against the first pod kept; where every rule ties
(or the rules order pods in a circle, which leaves them to the order the controller lists them
in: docs/scale-in.md#ties-and-the-controllers-clock), the forecast says the choice is random.
Live, --replicas is the Deployment's new size; during a rollout the Deployment controller
shares it among the active ReplicaSets, and each is forecast
(docs/scale-in.md#a-rollout-in-progress-the-deployment-controllers-split).

Offline, from files:
  kubectl -n demo-burst get pods -o json > pods.json
  python -m rehearse predict --pods pods.json --replicas 12 [--now 2025-06-01T12:03:00Z]
Live, from the cluster (the Deployment's current ReplicaSet; ranks count the pods of all its
ReplicaSets):
  python -m rehearse predict --deployment burst --namespace demo-burst --replicas 12

It reads, never writes: no run folder, no change to the cluster. Exit 0 with the forecast;
exit 2, with one line, on input it cannot use."""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from rehearse.commands.predict.collect import live_parts, live_state, read_pod_list
from rehearse.commands.predict.report import merge, render
from rehearse.lab import server_clock
from rehearse.models import clock_window
from rehearse.models.deployment import controller_of
from rehearse.models.ranking import NS, forecast, is_active, kube_time_ns
from rehearse.run.arguments import stack_arguments
from rehearse.run.errors import RunError

# The command's face, what rehearse.cli reads: a tool (rehearse.run.command.ToolCommand), which
# prints its answer and keeps no run folder.
TITLE = "which pods a scale-in removes, and why"

#: The lab's demo 2 (stacks/layers/demo.py BURST_NS and the Deployment's name).
DEFAULT_NAMESPACE, DEFAULT_DEPLOYMENT = "demo-burst", "burst"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    what = parser.add_argument_group("the scale-in")
    what.add_argument("--replicas", metavar="N", required=True,
                      help="the new size: how many pods stay (0 up to the active pods); live, the "
                           "Deployment's (shared among its ReplicaSets during a rollout)")
    what.add_argument("--now", metavar="TIME",
                      help="the controller's clock, RFC 3339 (e.g. 2025-06-01T12:03:00Z); rules 6 "
                           "and 8 bucket ages by it (default: now)")
    what.add_argument("--sync-lag", type=float, default=None, metavar="SECONDS",
                      help="how much later than the snapshot the controller may sort (default 2): "
                           "with the skew, the window of controller clocks in which a choice "
                           "that flips at a log2 bucket edge is called undecided")
    what.add_argument("--skew", type=float, default=None, metavar="SECONDS",
                      help="this machine's clock against the API server's (default: measured "
                           "from the API server's Date header when live; 1 offline; 0 with --now)")
    what.add_argument("--json", action="store_true",
                      help="print JSON: {\"delete\": [{name, node, rule, tie, cost, rank, ...}], "
                           "\"order\": [...], ...} instead of a table")
    offline = parser.add_argument_group("offline, from files")
    offline.add_argument("--pods", type=Path, metavar="FILE",
                         help="`kubectl get pods -o json` of the Deployment's pods (a List of Pods)")
    offline.add_argument("--related", type=Path, metavar="FILE",
                         help="the pods of all the Deployment's ReplicaSets, which set each pod's "
                              "rank (default: the --pods file; a List with no items ranks every "
                              "pod 0, as for a ReplicaSet without a controller)")
    offline.add_argument("--replicaset", metavar="NAME",
                         help="only this ReplicaSet's pods from --pods (needed when the file holds "
                              "active pods of several)")
    live = parser.add_argument_group("live, from the cluster (when --pods is not given)")
    live.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                      help=f"the Deployment's namespace (default: {DEFAULT_NAMESPACE}, demo 2's)")
    live.add_argument("--deployment", default=DEFAULT_DEPLOYMENT,
                      help=f"the Deployment (default: {DEFAULT_DEPLOYMENT}); its current "
                           "ReplicaSet's pods are the candidates")
    stack_arguments(live, "use this kubeconfig instead of the stack's")

def parse_replicas(text: Any) -> int:
    try:
        number = int(str(text).strip())
    except ValueError:
        raise RunError(f"--replicas {text!r} is not a whole number") from None
    if number < 0:
        raise RunError(f"--replicas {number} is negative: give the new size, 0 or more")
    return number


def parse_now(text: Optional[str]) -> datetime.datetime:
    from rehearse.run.record import utc_now

    if text is None:
        return utc_now()
    try:
        ns = kube_time_ns(text)
    except ValueError:
        ns = None
    if ns is None:
        raise RunError(f"--now {text!r} is not an RFC 3339 time with a zone, e.g. 2025-06-01T12:03:00Z")
    seconds, rest = divmod(ns, NS)
    return (datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
            + datetime.timedelta(seconds=seconds, microseconds=rest // 1000))


def _owner_names(pods: Iterable[dict]) -> list[str]:
    return sorted({(controller_of(p) or {}).get("name", "") for p in pods if is_active(p)} - {""})


def main(args: argparse.Namespace, read_outputs: Callable[[argparse.Namespace], Any],
         connect: Callable[[argparse.Namespace, Any], Any]) -> int:
    """``read_outputs`` and ``connect`` are rehearse.cli's (the stack's outputs, the cluster),
    handed in by the CLI so this module does not import it back."""
    replicas = parse_replicas(args.replicas)
    now = parse_now(args.now)
    # Measured below when live; otherwise --skew, 0 when --now names the controller's clock.
    offset: Optional[dict] = None
    skew = args.skew if args.skew is not None else (0.0 if args.now else clock_window.DEFAULT_SKEW_SECONDS)
    if args.pods is not None:
        pods = read_pod_list(args.pods)
        related = read_pod_list(args.related) if args.related is not None else pods
        source = str(args.pods)
        if args.replicaset:
            pods = [p for p in pods if (controller_of(p) or {}).get("name") == args.replicaset]
            if not pods:
                raise RunError(f"{args.pods} holds no pod of ReplicaSet {args.replicaset}")
            source += f" (ReplicaSet {args.replicaset})"
        else:
            owners = _owner_names(pods)
            if len(owners) > 1:
                raise RunError(f"{args.pods} holds active pods of {len(owners)} ReplicaSets "
                               f"({', '.join(owners)}): the controller scales each on its own; "
                               "choose one with --replicaset NAME")
    else:
        from rehearse.run.record import utc_now

        stack_outputs = None if args.kubeconfig else read_outputs(args)
        kube = connect(args, stack_outputs)
        try:
            if args.skew is None and args.now is None:
                offset = server_clock.measure_offset(kube, utc_now)
            state = live_state(kube, args.namespace, args.deployment)
        finally:
            kube.close()
        parts = live_parts(state, replicas, f"{args.namespace}/{args.deployment}")
        if len(parts) != 1:
            return _print_split(args, parts, state.related, replicas, now, offset, skew)
        source, pods, replicas = parts[0]
        related = state.related
    active = sum(1 for p in pods if is_active(p))
    if replicas > active:
        raise RunError(f"--replicas {replicas} is above the {active} active pods: a scale-out "
                       "deletes nothing")
    lag = args.sync_lag if args.sync_lag is not None else clock_window.SYNC_LAG_SECONDS
    try:
        result = forecast(pods, related, replicas, now,
                          clock_window.window(offset, lag, default_skew_seconds=skew))
    except ValueError as error:
        raise RunError(f"cannot forecast from {source}: {error}") from None
    if args.json:
        print(json.dumps({"source": source, **result.to_json()}, indent=2))
    else:
        print(render(result, source))
    return 0


def _print_split(args: argparse.Namespace, parts: list[tuple[str, list[dict], int]],
                 related: list[dict], replicas: int, now: datetime.datetime,
                 offset: Optional[dict], skew: float) -> int:
    """Several ReplicaSets resized at once (a rollout in progress): each one's controller
    deletes its own victims, ranked by the pods of all of them. One forecast each, and the lot
    together (``merge``)."""
    lag = args.sync_lag if args.sync_lag is not None else clock_window.SYNC_LAG_SECONDS
    window = clock_window.window(offset, lag, default_skew_seconds=skew)
    results = []
    for source, pods, size in parts:
        active = sum(1 for p in pods if is_active(p))
        try:
            results.append((source, size, forecast(pods, related, min(size, active), now, window)))
        except ValueError as error:
            raise RunError(f"cannot forecast from {source}: {error}") from None
    where = f"{args.namespace}/{args.deployment}"
    if not results:
        note = (f"the Deployment controller changes no ReplicaSet's size at {replicas}: their "
                "sizes already add up to it plus maxSurge, so nothing is deleted")
        print(json.dumps({"source": where, "replicas_after": replicas, "delete": [],
                          "decided": True, "undecided": [], "clock_undecided": [],
                          "notes": [note], "replica_sets": []}, indent=2)
              if args.json else f"Scale-in of {where}: {note}")
        return 0
    if not any(r.delete for _, _, r in results) and replicas > sum(r.replicas_before for _, _, r in results):
        raise RunError(f"--replicas {replicas} is above the active pods: a scale-out deletes nothing")
    if args.json:
        print(json.dumps(merge(results, where, replicas), indent=2))
    else:
        lines = [f"The Deployment controller resizes {len(results)} ReplicaSets of {where} "
                 f"(a rollout in progress): "
                 + ", ".join(f"{s.rsplit(' ', 1)[-1].rstrip(')')} {r.replicas_before} -> {size}"
                             for s, size, r in results)]
        lines += [render(r, s) for s, _, r in results]
        print("\n\n".join(lines))
    return 0
