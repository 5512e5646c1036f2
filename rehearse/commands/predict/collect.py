"""The tool of `python -m rehearse predict`; what the command is and does, its --help, is
its face's docstring (command.py)."""

from __future__ import annotations

import argparse
import datetime
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from rehearse.models import clock_window
from rehearse.run.arguments import stack_arguments
from rehearse.run.errors import RunError
from rehearse.models.ranking import Forecast, RULES, _NS, forecast, is_active, parse_time


TITLE = "which pods a scale-in removes, and why"

#: The lab's demo 2 (stacks/layers/demo.py BURST_NS and the Deployment's name).
DEFAULT_NAMESPACE, DEFAULT_DEPLOYMENT = "demo-burst", "burst"


# --- reading the input: files or the cluster -------------------------------------------------------

def read_pod_list(path: Path) -> list[dict]:
    """``kubectl get pods -o json`` (a List) or the API's PodList: its items, each a Pod."""
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RunError(f"no file {path}: write it with `kubectl get pods -o json > {path}`") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunError(f"cannot read {path}: {error}") from None
    except ValueError as error:
        raise RunError(f"{path} is not JSON ({error}): write it with `kubectl get pods -o json`") from None
    kind = document.get("kind") if isinstance(document, dict) else None
    if kind not in ("List", "PodList") or not isinstance(document.get("items"), list):
        what = f"a {kind}" if kind else f"a JSON {type(document).__name__}"
        raise RunError(f"{path} is {what}, not a List of Pods: write it with `kubectl get pods -o json`")
    for number, item in enumerate(document["items"], 1):
        if not isinstance(item, dict):
            raise RunError(f"{path}: item {number} is a JSON {type(item).__name__}, not a Pod")
        if item.get("kind", "Pod") != "Pod":
            raise RunError(f"{path}: item {number} is a {item.get('kind')}, not a Pod")
        if not isinstance(item.get("metadata"), dict) or not item["metadata"].get("name"):
            raise RunError(f"{path}: item {number} is a Pod without a name")
    return document["items"]


def controller_of(obj: dict) -> Optional[dict]:
    """metav1.GetControllerOf: the ownerReference with controller: true."""
    return next((ref for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
                 if isinstance(ref, dict) and ref.get("controller")), None)


def selector_matches(selector: Optional[dict], labels: Optional[dict]) -> bool:
    """metav1.LabelSelectorAsSelector(...).Matches: matchLabels and matchExpressions (In,
    NotIn, Exists, DoesNotExist). An empty selector matches everything; a missing one nothing."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _revision(obj: dict) -> int:
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get("deployment.kubernetes.io/revision")
    try:
        return int(text)
    except (TypeError, ValueError):
        return -1


@dataclass
class LiveState:
    """The Deployment, its ReplicaSets (the current one: its revision), every pod of the
    namespace, and the related pods (``related_pods``)."""
    deploy: dict
    replica_sets: list[dict]
    current: dict
    all_pods: list[dict]
    related: list[dict]

    def pods_of(self, rs: dict) -> list[dict]:
        """The ReplicaSet's pods as its controller claims them: controlled by it and matching
        its selector, or orphans matching it (adopted before it scales)."""
        rs_uid = rs["metadata"].get("uid")
        selector = (rs.get("spec") or {}).get("selector")
        pods = []
        for pod in self.all_pods:
            owner = controller_of(pod)
            labels = (pod.get("metadata") or {}).get("labels")
            if owner is not None and owner.get("uid") == rs_uid and selector_matches(selector, labels):
                pods.append(pod)
            elif owner is None and is_active(pod) and selector_matches(selector, labels):
                pods.append(pod)
        return pods


def live_state(kube: Any, namespace: str, deployment: str) -> LiveState:
    def get(path: str, what: str) -> dict:
        status, body = kube.get_raw(path)
        if status == 404:
            raise RunError(f"{what} not found")
        if status in (401, 403):
            raise RunError(f"the cluster refused to show {what} (HTTP {status}): check your access entry")
        if status >= 300:
            raise RunError(f"the API server answered HTTP {status} for {what}")
        try:
            return json.loads(body)
        except ValueError:
            raise RunError(f"the API server's answer for {what} is not JSON") from None

    deploy = get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}",
                 f"Deployment {namespace}/{deployment}")
    uid = (deploy.get("metadata") or {}).get("uid")
    replica_sets = [rs for rs in get(f"/apis/apps/v1/namespaces/{namespace}/replicasets",
                                     f"the ReplicaSets in {namespace}").get("items") or []
                    if (controller_of(rs) or {}).get("uid") == uid and uid]
    if not replica_sets:
        raise RunError(f"Deployment {namespace}/{deployment} controls no ReplicaSet yet")
    # The current ReplicaSet carries the Deployment's revision; failing that, the newest.
    revision = _revision(deploy)
    newest = max(replica_sets, key=lambda rs: (_revision(rs), (rs.get("metadata") or {}).get("creationTimestamp") or ""))
    current_rs = next((rs for rs in replica_sets if _revision(rs) == revision), newest)
    all_pods = get(f"/api/v1/namespaces/{namespace}/pods", f"the pods in {namespace}").get("items") or []
    related, seen = [], set()
    for rs in replica_sets:
        for pod in all_pods:
            key = (pod.get("metadata") or {}).get("uid") or (pod.get("metadata") or {}).get("name")
            if key not in seen and selector_matches((rs.get("spec") or {}).get("selector"),
                                                    (pod.get("metadata") or {}).get("labels")):
                seen.add(key)
                related.append(pod)
    return LiveState(deploy, replica_sets, current_rs, all_pods, related)


def live_input(kube: Any, namespace: str, deployment: str) -> tuple[list[dict], list[dict], str]:
    """From the cluster, as the controller sees them: the pods of the Deployment's current
    ReplicaSet (controlled by it and matching its selector, or orphans it would adopt), and the
    related pods — every pod matching the selector of a ReplicaSet the Deployment controls,
    once each (getIndirectlyRelatedPods). Returns (pods, related, ReplicaSet name)."""
    state = live_state(kube, namespace, deployment)
    return state.pods_of(state.current), state.related, state.current["metadata"].get("name", "")


# --- the Deployment controller's split of a scale across its ReplicaSets ---------------------------

def _replicas(rs: dict) -> int:
    return int((rs.get("spec") or {}).get("replicas") or 0)


def _scaled(value: Any, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int as is, "N%" of ``total`` rounded up or
    down."""
    if isinstance(value, str):
        if not value.endswith("%"):
            raise ValueError(f"{value!r} is neither an int nor a percentage")
        exact = int(value[:-1]) * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)


def max_surge(deploy: dict, replicas: int) -> int:
    """deploymentutil.MaxSurge for a Deployment of ``replicas``: 0 unless RollingUpdate; the
    defaults are 25% and 25% (ResolveFenceposts: surge rounds up, unavailable down, and both 0
    makes unavailable 1 — which leaves surge 0)."""
    strategy = (deploy.get("spec") or {}).get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0
    rolling = strategy.get("rollingUpdate") or {}
    return _scaled(rolling.get("maxSurge", "25%"), replicas, True)


def _annotation_int(rs: dict, key: str) -> Optional[int]:
    text = ((rs.get("metadata") or {}).get("annotations") or {}).get(key)
    # strconv.ParseUint(text, 10, 32), at most MaxInt32.
    if text is None or not text.isdigit() or not text.isascii() or int(text) > 2**31 - 1:
        return None
    return int(text)


def _rs_age_key(rs: dict) -> tuple:
    meta = rs.get("metadata") or {}
    return (parse_time(meta.get("creationTimestamp")) or 0, meta.get("name") or "")


def split_scale(deploy: dict, replica_sets: list[dict], current: Optional[dict],
                replicas: int) -> dict[str, int]:
    """The Deployment controller's scale (pkg/controller/deployment/sync.go ``scale``) when the
    Deployment's spec.replicas becomes ``replicas``: each ReplicaSet's new spec.replicas, by
    name, for those it changes. ``current`` is the new ReplicaSet (the Deployment's revision).

    - One active ReplicaSet (spec.replicas > 0; none: the new one, else the newest): it takes
      the whole size.
    - Several, and the new one saturated (its size, its desired-replicas annotation and its
      available pods all equal to the Deployment's size): the old ones go to 0.
    - Several, RollingUpdate: the change (``replicas`` + maxSurge less their sum) is shared in
      proportion to each one's size over its max-replicas annotation (rounded half away from
      zero), largest first — the older first among equals when scaling down — and what is
      left over goes to the first. Recreate: nothing changes."""
    olds = sorted((rs for rs in replica_sets if rs is not current), key=_rs_age_key, reverse=True)
    active = [rs for rs in ([current] if current else []) + olds if _replicas(rs) > 0]
    if len(active) <= 1:
        target = active[0] if active else (current or (olds[0] if olds else None))
        if target is None or _replicas(target) == replicas:
            return {}
        return {target["metadata"]["name"]: replicas}
    if current is not None:
        desired = _annotation_int(current, "deployment.kubernetes.io/desired-replicas")
        available = int((current.get("status") or {}).get("availableReplicas") or 0)
        if _replicas(current) == replicas and desired == replicas and available == replicas:
            return {rs["metadata"]["name"]: 0 for rs in olds if _replicas(rs) > 0}
    strategy = ((deploy.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate")
    if strategy != "RollingUpdate":
        return {}
    # FilterActiveReplicaSets(append(oldRSs, newRS)): the old ones newest first, then the new.
    ordered = [rs for rs in olds + ([current] if current else []) if _replicas(rs) > 0]
    total = sum(_replicas(rs) for rs in ordered)
    surge = max_surge(deploy, replicas)
    allowed = replicas + surge if replicas > 0 else 0
    to_add = allowed - total
    if to_add != 0:
        # ReplicaSetsBySizeNewer (adding) / BySizeOlder (removing): larger first; among equals
        # the newer / the older first (creation time, then name).
        ordered.sort(key=_rs_age_key, reverse=to_add > 0)
        ordered.sort(key=lambda rs: -_replicas(rs))
    status_replicas = int((deploy.get("status") or {}).get("replicas") or 0)
    sizes: dict[str, int] = {}
    added = 0
    for rs in ordered:
        size = _replicas(rs)
        if to_add == 0:
            sizes[rs["metadata"]["name"]] = size
            continue
        # GetReplicaSetProportion / getReplicaSetFraction.
        if size == 0 or to_add == added:
            proportion = 0
        else:
            if replicas == 0:
                fraction = -size
            else:
                before = _annotation_int(rs, "deployment.kubernetes.io/max-replicas") or status_replicas
                fraction = 0 if not before else _round(size * (replicas + surge) / before) - size
            left = to_add - added
            proportion = min(fraction, left) if to_add > 0 else max(fraction, left)
        sizes[rs["metadata"]["name"]] = size + proportion
        added += proportion
    if ordered and to_add != 0:
        first = ordered[0]["metadata"]["name"]
        sizes[first] = max(0, sizes[first] + to_add - added)
    return {name: size for name, size in sizes.items()
            if size != next(_replicas(rs) for rs in ordered if rs["metadata"]["name"] == name)}


def _round(value: float) -> int:
    """Go's math.Round: half away from zero (Python's round() rounds half to even)."""
    return int(math.floor(abs(value) + 0.5)) * (1 if value >= 0 else -1)


# --- the command ---------------------------------------------------------------------------------

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
        ns = parse_time(text)
    except ValueError:
        ns = None
    if ns is None:
        raise RunError(f"--now {text!r} is not an RFC 3339 time with a zone, e.g. 2025-06-01T12:03:00Z")
    seconds, rest = divmod(ns, _NS)
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
                offset = clock_window.measure_offset(kube, utc_now)
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


def live_parts(state: LiveState, replicas: int, where: str) -> list[tuple[str, list[dict], int]]:
    """(source, the ReplicaSet's pods, its new size) for each ReplicaSet the Deployment
    controller resizes when the Deployment goes to ``replicas`` (``split_scale``); with one
    active ReplicaSet, that one at ``replicas``."""
    sizes = split_scale(state.deploy, state.replica_sets, state.current, replicas)
    active = [rs for rs in state.replica_sets if _replicas(rs) > 0]
    if not sizes and len(active) <= 1:
        target = active[0] if active else state.current
        sizes = {target["metadata"]["name"]: replicas}
    return [(f"{where} (ReplicaSet {rs['metadata']['name']})", state.pods_of(rs),
             sizes[rs["metadata"]["name"]])
            for rs in sorted(state.replica_sets, key=_rs_age_key)
            if rs["metadata"]["name"] in sizes]


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


def merge(results: list[tuple[str, int, Forecast]], where: str, replicas: int) -> dict[str, Any]:
    """The forecasts of several ReplicaSets as one JSON document: each under ``replica_sets``,
    and their victims, open pods and notes together at the top, as a single forecast has them."""
    parts = [{"source": source, "size": size, **r.to_json()} for source, size, r in results]
    split: dict[str, int] = {}
    for part in parts:
        for rule, count in part["split"].items():
            split[rule] = split.get(rule, 0) + count
    return {"source": f"{where} ({len(parts)} ReplicaSets)",
            "replicas_before": sum(p["replicas_before"] for p in parts), "replicas_after": replicas,
            "now": parts[0]["now"] if parts else "", "window": parts[0]["window"] if parts else "",
            "sorted": all(p["sorted"] for p in parts), "decided": all(p["decided"] for p in parts),
            "delete": [v for p in parts for v in p["delete"]],
            "order": [n for p in parts for n in p["order"]],
            "undecided": [n for p in parts for n in p["undecided"]],
            "clock_undecided": [n for p in parts for n in p["clock_undecided"]],
            "split": split, "notes": [n for p in parts for n in p["notes"]],
            "replica_sets": parts}


def render(result: Forecast, source: str = "") -> str:
    """The forecast as a table a presenter can read."""
    lines = [f"Scale-in {result.replicas_before} -> {result.replicas_after}"
             + (f" of {source}" if source else "") + f", controller clock {result.now}"]
    if not result.delete:
        lines.append("Nothing is deleted.")
    else:
        versus = {v.versus for v in result.delete if v.versus and not v.tie}
        against = f", each against the first pod kept ({next(iter(versus))})" if len(versus) == 1 else ""
        header = ("#", "POD", "NODE", "COST", "RANK", "DECIDED BY")
        rows = [(str(i), v.name, v.node or "(none)", str(v.cost), str(v.rank),
                 ("RANDOM: " if v.tie else "CLOCK: " if v.clock else
                  (f"rule {v.rule_number}: " if v.rule_number else "")) + v.rule)
                for i, v in enumerate(result.delete, 1)]
        widths = [max(len(r[c]) for r in rows + [header]) for c in range(5)]
        lines.append(f"Deleted, in order, {len(result.delete)} of {result.replicas_before}{against}:")
        for row in [header] + rows:
            lines.append("  " + "  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row[:5]))
                         + "  " + row[5])
    if result.split:
        pairs = sum(result.split.values())
        parts = [f"{count} by rule {rule} ({RULES[rule]})" if rule else f"{count} by no rule (random)"
                 for rule, count in sorted(result.split.items(), key=lambda item: (-item[1], item[0]))]
        lines.append(f"What separates deleted from kept ({pairs} pairs): {'; '.join(parts)}")
    kept = result.order[len(result.delete):] if result.sorted else []
    if kept:
        lines.append(f"Kept ({len(kept)}), next to go first: {', '.join(kept)}")
    if result.undecided:
        lines.append(f"Could go instead (random): {', '.join(result.undecided)}")
    if result.clock_undecided:
        lines.append(f"Undecided by the controller's clock ({result.window}): "
                     f"{', '.join(result.clock_undecided)}")
    lines += [f"Note: {note}" for note in result.notes]
    return "\n".join(lines)
