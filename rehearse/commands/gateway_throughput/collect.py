"""The collector of `python -m rehearse gateway-throughput`; what the command is and does, its --help, is
its face's docstring (command.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Optional

from rehearse.lab import flows
from rehearse.run.arguments import PROJECT_DIR
from rehearse.run import record as rec
from rehearse.run.errors import RunError, first_line, status_code
from rehearse.run.outcome import ending, not_read
from rehearse.lab.stack import open_stack
from rehearse.lab.switch import ConfigSwitch, RestoreBlocked, Scope, require_confirmation, require_stack
from rehearse.run.report import FAIL, PASS, Chart, Check, Measurement, Report

TITLE = "measure the gateway's throughput, pod to pod, each way"

#: iperf3 3.16 on Alpine, whose image runs as a non-root user (``USER iperf``, michellabbe/
#: docker-iperf3's Dockerfile). Pinned by version tag: its sha256 digest could not be read
#: here (no registry access) — pin it with ``crane digest docker.io/mlabbe/iperf3:3.16-r0`` and
#: append ``@sha256:...``, or pass ``--image`` with a digest. iperf3 needs no capability: it
#: listens on 5201 (above 1024) and uses plain TCP sockets.
IMAGE = "docker.io/mlabbe/iperf3:3.16-r0"
PORT = 5201
#: Any UID works: iperf3 reads no file of the image's user; it writes its buffer file in /tmp
#: (``/tmp/iperf3.XXXXXX``), an emptyDir here since the root filesystem is read-only.
RUN_AS = 10001

LABEL, LABEL_VALUE = "eks-hybrid-lab.io/rehearse", "throughput"
HYBRID_KEY, HYBRID_VALUE = "eks.amazonaws.com/compute-type", "hybrid"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: rehearse.leader.GATEWAY_NODE_LABEL (the gateway node group's label).
GATEWAY_NODE_LABEL = "hybrid-gateway-node"
CONFIG_KEY = "eks-hybrid-lab:gatewayInstanceType"
#: components.cilium.TRANSIT_SAFE_MTU (not imported: it would import Pulumi).
LAB_MTU = 8450
TGW_MAX_PACKET = 8500

DEFAULT_SECONDS = 10
DEFAULT_STREAMS = 4
#: Scheduling and an image pull before the server listens.
SERVER_START_SECONDS = 180
#: Beyond the test's duration: connecting, the end exchange, the pod's exit.
CLIENT_MARGIN_SECONDS = 60
POLL_SECONDS = 2.0
#: After a switch: the node group's old nodes leave and the Lease moves to a new node.
GATEWAY_SETTLE_SECONDS = 600

#: (direction, where the server runs, where the client runs). iperf3's client sends.
DIRECTIONS = (("cloud → hybrid", True), ("hybrid → cloud", False))
#: Baseline network bandwidth (Gbit/s) of the gateway instance types the lab compares, from
#: AWS's instance-type network specifications (docs/networking.md#gateway-instance-bandwidth):
#: these sizes burst above it on network I/O credits, for minutes.
BASELINE_GBPS = {"m6i.large": 0.781, "m6in.large": 3.125, "c6in.xlarge": 6.25}

# --- event kinds ----------------------------------------------------------------------------

SETTINGS = "throughput.settings"
MTU = "throughput.mtu"
GATEWAY = "throughput.gateway"
POD_CREATED = "throughput.pod_created"
POD_DELETED = "throughput.pod_deleted"
RESULT = "throughput.result"
ORIGINAL = "throughput.original_instance_type"
SWITCHED = "throughput.switched"
RESTORED = "throughput.restored"

CHECK_PODS_REMOVED = "measurement pods removed"
CHECK_RESTORED = "gatewayInstanceType put back"


def check_name(direction: str, instance_type: Optional[str]) -> str:
    return f"{direction} measured" + (f" ({instance_type})" if instance_type else "")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("throughput")
    group.add_argument("-t", "--seconds", type=_at_least_one, default=DEFAULT_SECONDS, metavar="S",
                       help=f"each direction's iperf3 test length (default {DEFAULT_SECONDS})")
    group.add_argument("-P", "--streams", type=_at_least_one, default=DEFAULT_STREAMS, metavar="N",
                       help=f"parallel TCP streams (default {DEFAULT_STREAMS})")
    group.add_argument("--image", default=IMAGE, metavar="REF",
                       help=f"the iperf3 image, pinned (default {IMAGE})")
    group.add_argument("--instance-types", nargs="+", metavar="TYPE", default=None,
                       help="switch gatewayInstanceType to each (pulumi up), measure, and put "
                            "the original back; the report compares them. Each type REPLACES "
                            "the gateway node group's nodes, so the gateway's leader fails over "
                            "at every switch and at the restore. Each switch prints `pulumi "
                            "preview`'s plan, refuses one that changes more than the gateway "
                            "node group, and asks before applying; needs --stack")
    group.add_argument("--yes", action="store_true",
                       help="apply each previewed switch without asking (a run whose stdin is "
                            "not a terminal needs it)")


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not 1 or more")
    return value


# --- the pods -------------------------------------------------------------------------------


def pod_manifest(name: str, namespace: str, *, on_hybrid: bool, args: list[str], image: str,
                 deadline_seconds: int, role: str) -> dict:
    expression = {"key": HYBRID_KEY, "operator": "In" if on_hybrid else "NotIn",
                  "values": [HYBRID_VALUE]}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": int(deadline_seconds),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expression]}]}}},
        "containers": [{
            "name": "iperf3", "image": image, "args": args,
            "ports": [{"containerPort": PORT, "protocol": "TCP"}] if role == "server" else [],
            "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                                "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]},
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "resources": {"requests": {"cpu": "500m", "memory": "64Mi"},
                          "limits": {"cpu": "2", "memory": "256Mi"}},
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
    }
    if on_hybrid:
        spec["tolerations"] = [{"key": HYBRID_KEY, "operator": "Equal", "value": HYBRID_VALUE,
                                "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {LABEL: LABEL_VALUE, "eks-hybrid-lab.io/role": role}},
            "spec": spec}


def server_args() -> list[str]:
    # One test, then the server exits (the pod Succeeds).
    return ["-s", "-1", "-p", str(PORT)]


def client_args(server_ip: str, seconds: int, streams: int) -> list[str]:
    return ["-c", server_ip, "-p", str(PORT), "-t", str(seconds), "-P", str(streams),
            "--connect-timeout", "5000", "--json"]


# --- the collector --------------------------------------------------------------------------


class Pods:
    """Creates the measurement pods and remembers them, to delete every one by name."""

    def __init__(self, ctx: Any, record: Any, namespace: str):
        self.ctx, self.record, self.ns = ctx, record, namespace
        self.created: list[str] = []
        self.serial = 0

    def name(self, role: str, where: str) -> str:
        self.serial += 1
        stamp = self.ctx.clock().strftime("%H%M%S")
        return f"rehearse-iperf3-{stamp}-{self.serial}-{role}-{where}"

    def create(self, manifest: dict) -> None:
        from lightkube.resources.core_v1 import Pod

        name = manifest["metadata"]["name"]
        self.ctx.kube.client.create(Pod.from_dict(manifest), namespace=self.ns)
        self.created.append(name)
        self.record(POD_CREATED, name=name, namespace=self.ns, spec=manifest["spec"],
                    labels=manifest["metadata"]["labels"])

    def delete_all(self) -> None:
        from lightkube.resources.core_v1 import Pod

        while self.created:
            name = self.created.pop(0)
            try:
                self.ctx.kube.client.delete(Pod, name, namespace=self.ns, grace_period=0)
                self.record(POD_DELETED, name=name, ok=True)
            except Exception as error:  # noqa: BLE001 recorded; the next pod is still deleted
                gone = status_code(error) == 404
                self.record(POD_DELETED, name=name, ok=gone,
                            **({} if gone else {"error": first_line(error)}))

    def read(self, name: str) -> Optional[dict]:
        from lightkube.resources.core_v1 import Pod

        try:
            return self.ctx.kube.client.get(Pod, name, namespace=self.ns).to_dict()
        except Exception as error:  # noqa: BLE001 lightkube's ApiError
            if status_code(error) == 404:
                return None
            raise

    def wait(self, name: str, done: Any, seconds: float) -> Optional[dict]:
        """Polls the pod until ``done(pod)`` or ``seconds`` pass: the last pod seen."""
        deadline = self.ctx.monotonic() + seconds
        while True:
            pod = self.read(name)
            if pod is not None and done(pod):
                return pod
            if self.ctx.monotonic() >= deadline:
                return pod
            self.ctx.sleep(POLL_SECONDS)


def _phase(pod: Optional[dict]) -> Optional[str]:
    return ((pod or {}).get("status") or {}).get("phase")


def _why(pod: Optional[dict]) -> str:
    if pod is None:
        return "the pod is gone"
    status = pod.get("status") or {}
    parts = [f"phase {status.get('phase') or 'unknown'}"]
    for c in status.get("conditions") or []:
        if c.get("status") != "True" and c.get("message"):
            parts.append(f"{c.get('type')}: {c['message']}")
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting")
        if waiting:
            parts.append(f"waiting: {waiting.get('reason')}")
    return ", ".join(parts)


def measure_direction(ctx: Any, record: Any, pods: Pods, direction: str, server_on_hybrid: bool,
                      instance_type: Optional[str], seconds: int, streams: int, image: str) -> None:
    where = ("hybrid", "cloud") if server_on_hybrid else ("cloud", "hybrid")
    server = pods.name("server", where[0])
    client = pods.name("client", where[1])
    result: dict[str, Any] = {"direction": direction, "instance_type": instance_type,
                              "server_pod": server, "client_pod": client,
                              "seconds_asked": seconds, "streams_asked": streams}
    ctx.progress(f"{direction}: iperf3 server on a {where[0]} node")
    pods.create(pod_manifest(server, pods.ns, on_hybrid=server_on_hybrid, args=server_args(),
                             image=image, role="server",
                             deadline_seconds=SERVER_START_SECONDS + seconds + CLIENT_MARGIN_SECONDS))
    running = pods.wait(server, lambda p: _phase(p) == "Running" and (p.get("status") or {}).get("podIP")
                        or _phase(p) in ("Succeeded", "Failed"), SERVER_START_SECONDS)
    server_ip = ((running or {}).get("status") or {}).get("podIP")
    if _phase(running) != "Running" or not server_ip:
        record(RESULT, **result, log=None,
               error=f"the server pod did not run in {SERVER_START_SECONDS} s ({_why(running)})")
        return
    result.update(server_ip=server_ip, server_node=(running.get("spec") or {}).get("nodeName"))
    ctx.progress(f"{direction}: iperf3 client on a {where[1]} node → {server_ip}, "
                 f"{seconds} s, {streams} streams")
    pods.create(pod_manifest(client, pods.ns, on_hybrid=not server_on_hybrid,
                             args=client_args(server_ip, seconds, streams), image=image,
                             role="client",
                             deadline_seconds=SERVER_START_SECONDS + seconds + CLIENT_MARGIN_SECONDS))
    finished = pods.wait(client, lambda p: _phase(p) in ("Succeeded", "Failed"),
                         SERVER_START_SECONDS + seconds + CLIENT_MARGIN_SECONDS)
    result.update(client_phase=_phase(finished),
                  client_node=((finished or {}).get("spec") or {}).get("nodeName"))
    try:
        log = "".join(ctx.kube.client.log(client, namespace=pods.ns, container="iperf3"))
    except Exception as error:  # noqa: BLE001 a container that never started answers 400
        if status_code(error) is None:
            raise
        record(RESULT, **result, log=None, error=f"no log from the client: {first_line(error)} "
               f"({_why(finished)})")
        return
    record(RESULT, **result, log=log)


def read_mtu(ctx: Any) -> dict:
    from lightkube.resources.core_v1 import ConfigMap

    try:
        cm = ctx.kube.client.get(ConfigMap, "cilium-config", namespace="kube-system")
    except Exception as error:  # noqa: BLE001 not found, or not allowed to read it
        return {"mtu": LAB_MTU, "source": "configured, not observed",
                "why": first_line(error)}
    value = (cm.data or {}).get("mtu")
    if value:
        return {"mtu": int(value), "source": "cilium-config ConfigMap (kube-system), key mtu"}
    return {"mtu": LAB_MTU, "source": "configured, not observed",
            "why": "cilium-config has no mtu key"}


def read_gateway(ctx: Any) -> dict:
    from lightkube.resources.core_v1 import Node

    from rehearse.lab import leader

    nodes = []
    for node in ctx.kube.client.list(Node):
        labels = node.metadata.labels or {}
        if labels.get(GATEWAY_NODE_LABEL) == "true":
            nodes.append({"name": node.metadata.name,
                          "instance_type": labels.get(INSTANCE_TYPE_LABEL)})
    found: dict[str, Any] = {"nodes": sorted(nodes, key=lambda n: n["name"])}
    namespace = ctx.outputs.optional("gatewayNamespace") or "eks-hybrid-nodes-gateway"
    lease_name = ctx.outputs.optional("gatewayLeaseName") or "hybrid-gateway-leader"
    try:
        lease = leader.read_lease(ctx.kube, namespace, lease_name)
        host = lease.host if lease else None
        node = leader.find_node(ctx.kube, host) if host else None
    except Exception as error:  # noqa: BLE001 recorded, the measurement goes on
        found.update(leader=None, leader_why=first_line(error))
        return found
    if node is None:
        found.update(leader=None, holder=lease.holder if lease else None,
                     leader_why="no Lease" if lease is None else
                     f"no node for the holder {lease.holder}")
    else:
        labels = node.metadata.labels or {}
        found.update(leader=node.metadata.name, holder=lease.holder,
                     leader_instance_type=labels.get(INSTANCE_TYPE_LABEL))
    return found


def _settled(gateway: dict, instance_type: str) -> bool:
    nodes = gateway.get("nodes") or []
    return (bool(nodes) and all(n.get("instance_type") == instance_type for n in nodes)
            and gateway.get("leader_instance_type") == instance_type)


def measure(ctx: Any, record: Any, pods: Pods, instance_type: Optional[str], seconds: int,
            streams: int, image: str) -> None:
    gateway = read_gateway(ctx)
    if instance_type and not _settled(gateway, instance_type):
        # `pulumi up` returns once the node group is updated; the old nodes may still drain
        # and the Lease move: wait (bounded) for every gateway node and the leader on the type.
        ctx.progress(f"waiting up to {GATEWAY_SETTLE_SECONDS} s for the gateway on {instance_type}")
        deadline = ctx.monotonic() + GATEWAY_SETTLE_SECONDS
        while not _settled(gateway, instance_type) and ctx.monotonic() < deadline:
            ctx.sleep(POLL_SECONDS)
            gateway = read_gateway(ctx)
    record(GATEWAY, instance_type=instance_type, when="before", **gateway)
    try:
        for direction, server_on_hybrid in DIRECTIONS:
            measure_direction(ctx, record, pods, direction, server_on_hybrid, instance_type,
                              seconds, streams, image)
    finally:
        pods.delete_all()
    # A leader that changed during the measurement (a failover) is said beside the numbers.
    record(GATEWAY, instance_type=instance_type, when="after", **read_gateway(ctx))


def check_inputs(given: Any) -> None:
    """Before a run starts (rehearse.inputs): the lab's demo namespace, and with
    --instance-types a stack named and someone to confirm each switch."""
    demo1 = given.outputs.optional("demo1")
    if not demo1 or not demo1.get("namespace"):
        raise RunError(f"{given.outputs.origin} has no output demo1 (the lab's demo-gateway "
                       f"namespace): set upToLayer to demo and run `pulumi up`{given.outputs.rewrite()}")
    if given.options.get("instance_types"):
        require_stack(given, "gateway-throughput --instance-types")
        require_confirmation(given, "gateway-throughput --instance-types")


def collect(ctx: Any, record: Any) -> None:
    demo1 = ctx.outputs.optional("demo1")
    if not demo1 or not demo1.get("namespace"):
        raise RunError(f"the stack {ctx.outputs.stack} has no output demo1 (the lab's "
                       "demo-gateway namespace): set upToLayer to demo and run `pulumi up`")
    namespace = demo1["namespace"]
    seconds = int(ctx.options.get("seconds") or DEFAULT_SECONDS)
    streams = int(ctx.options.get("streams") or DEFAULT_STREAMS)
    image = ctx.options.get("image") or IMAGE
    types = list(ctx.options.get("instance_types") or [])
    record(SETTINGS, namespace=namespace, seconds=seconds, streams=streams, image=image,
           instance_types=types)
    record(MTU, **read_mtu(ctx))
    pods = Pods(ctx, record, namespace)
    try:
        if not types:
            measure(ctx, record, pods, None, seconds, streams, image)
            return
        _measure_each(ctx, record, pods, types, seconds, streams, image)
    finally:
        pods.delete_all()


#: What a gatewayInstanceType change touches in the program: the gateway node group's
#: resources (stacks/layers/gateway.py → components/hybrid_gateway.py GatewayNodes →
#: components/node_group.py: its launch template and EKS node group).
GATEWAY_SCOPE = Scope(CONFIG_KEY, "the gateway node group (GatewayNodes)",
                      parents=("eks-hybrid-lab:gateway:GatewayNodes",))


def _measure_each(ctx: Any, record: Any, pods: Pods, types: list[str], seconds: int,
                  streams: int, image: str) -> None:
    # Before anything changes: a stack named, and someone to confirm each plan.
    require_stack(ctx, "gateway-throughput --instance-types")
    require_confirmation(ctx, "gateway-throughput --instance-types")
    work_dir = Path(getattr(ctx, "work_dir", None) or PROJECT_DIR)

    def opened() -> Any:
        try:
            return open_stack(ctx.outputs.stack, work_dir)
        except FileNotFoundError:
            raise RunError("--instance-types needs the pulumi CLI (the Automation API runs it)") from None
        except Exception as error:  # noqa: BLE001 automation's CommandError
            raise RunError(f"pulumi could not find the stack {ctx.outputs.stack}: "
                           f"{first_line(error)}") from None

    switch = ConfigSwitch(ctx, opened, GATEWAY_SCOPE)
    original = switch.read_original()
    record(ORIGINAL, value=original)
    ctx.progress("note: each instance type replaces the gateway node group's nodes, so the "
                 "gateway's leader fails over at each switch and at the restore")
    try:
        for instance_type in types:
            started = ctx.monotonic()
            try:
                result = switch.switch(instance_type, f"gatewayInstanceType {instance_type}")
            except (KeyboardInterrupt, RunError):
                raise
            except Exception as error:  # noqa: BLE001 a refused update: recorded, next type
                record(SWITCHED, instance_type=instance_type, ok=False, error=first_line(error),
                       seconds=round(ctx.monotonic() - started, 1))
                continue
            record(SWITCHED, instance_type=instance_type, **result,
                   seconds=round(ctx.monotonic() - started, 1))
            if not result["ok"]:
                ctx.progress(f"{instance_type}: not applied: {result['error']}")
                continue
            measure(ctx, record, pods, instance_type, seconds, streams, image)
    finally:
        pods.delete_all()
        if switch.touched:
            back = original or "the project's default"
            try:
                result = switch.restore(f"gatewayInstanceType back to {back}")
            except RestoreBlocked as blocked:
                record(RESTORED, value=original, ok=False, error=str(blocked))
                raise RunError(f"could not put gatewayInstanceType back to {back}: {blocked}") from None
            except Exception as error:  # noqa: BLE001 said loudly: the stack is changed
                record(RESTORED, value=original, ok=False, error=first_line(error))
                raise RunError(f"could not put gatewayInstanceType back to {back}: "
                               f"{first_line(error)}: run `pulumi config set gatewayInstanceType "
                               f"{original}` and `pulumi up`") from None
            record(RESTORED, value=original, **result)


# --- the analysis (pure) --------------------------------------------------------------------


def parse_iperf(text: Optional[str], seconds_asked: Optional[int] = None) -> dict[str, Any]:
    """iperf3 ``--json`` output -> {"status": ok|failed|partial|unreadable, ...}. A failed run
    (its ``error`` key) or a partial one (fewer intervals than seconds asked, or no end sums)
    carries no throughput figure."""
    if not text or not text.strip():
        return {"status": "unreadable", "why": "empty log"}
    start = text.find("{")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:]) if start >= 0 else (None, 0)
    except ValueError as error:
        return {"status": "unreadable", "why": f"not iperf3 JSON: {error}"}
    if not isinstance(doc, dict):
        return {"status": "unreadable", "why": "not iperf3 JSON"}
    test_start = (doc.get("start") or {}).get("test_start") or {}
    asked = seconds_asked or test_start.get("duration")
    intervals = len(doc.get("intervals") or [])
    # What the path's MTU looked like to TCP: the MSS iperf3 saw, and the path MTU the kernel
    # reported per stream (``pmtu``, Linux, iperf3 3.11 and later).
    pmtus = {s.get("pmtu") for i in doc.get("intervals") or [] for s in i.get("streams") or []
             if s.get("pmtu")}
    base = {"intervals": intervals, "seconds_asked": asked,
            "streams": test_start.get("num_streams"),
            "version": (doc.get("start") or {}).get("version"),
            "tcp_mss": (doc.get("start") or {}).get("tcp_mss_default"),
            "pmtu": max(pmtus) if pmtus else None}
    if doc.get("error"):
        return {**base, "status": "failed", "why": str(doc["error"])}
    end = doc.get("end") or {}
    sent, received = end.get("sum_sent"), end.get("sum_received")
    if not sent or not received or (asked and intervals < int(asked)):
        return {**base, "status": "partial",
                "why": f"{intervals} of {asked} one-second intervals" if asked else "no end sums"}
    return {**base, "status": "ok",
            "sender_gbps": round(sent["bits_per_second"] / 1e9, 3),
            "receiver_gbps": round(received["bits_per_second"] / 1e9, 3),
            "retransmits": sent.get("retransmits"),
            "seconds": round(float(sent.get("seconds") or 0), 2)}


class ThroughputReport(Report):
    """A Report with a comparison table, when more than one instance type was measured."""

    table: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "comparison": getattr(self, "table", [])}

    def to_markdown(self) -> str:
        text = super().to_markdown()
        rows = getattr(self, "table", [])
        if not rows:
            return text
        lines = ["", "## Instance types compared", "",
                 "| gateway instance type | cloud → hybrid Gbit/s (receiver) | retransmits | "
                 "hybrid → cloud Gbit/s (receiver) | retransmits |", "|---|---|---|---|---|"]
        for row in rows:
            cells = [row["instance_type"]]
            for direction, _ in DIRECTIONS:
                r = row.get(direction) or {}
                cells += ([f"{r['receiver_gbps']:g}", str(r.get("retransmits"))]
                          if r.get("status") == "ok" else [r.get("status", "not measured"), "—"])
            lines.append("| " + " | ".join(cells) + " |")
        return text + "\n".join(lines) + "\n"


#: iperf3's words when its TCP connection to the server is not made (iperf_api.c / net.c).
_NOT_CONNECTED = ("unable to connect to server", "connection timed out", "connection refused",
                  "no route to host")


def _failure_fix(direction: str, parsed: dict[str, Any]) -> str:
    """A connection never made is a flow the lab blocks (or a server that stopped): name that
    flow and what opens it. ``verify gateway`` passing says nothing about iperf3's port."""
    why = str(parsed.get("why") or "").lower()
    if parsed.get("status") == "failed" and any(words in why for words in _NOT_CONNECTED):
        return (f"iperf3 could not connect to the server pod, which was Running: the flow is "
                f"BLOCKED somewhere — {flows.blocked_text('gateway-throughput', direction)}")
    if parsed.get("status") == "failed":
        return ("a failed run: is the server pod Running and reachable through the gateway "
                "(`python -m rehearse verify gateway`)?")
    return "the client stopped early (deadline, eviction): run again"


def analyse(events: list[dict[str, Any]]) -> Report:
    started = rec.first(events, rec.RUN_STARTED) or {}
    settings = rec.first(events, SETTINGS) or {}
    report = ThroughputReport(command="gateway-throughput", stack=started.get("stack", ""),
                              started=started.get("at", ""), title=TITLE)
    report.table = []
    ns = settings.get("namespace", "demo-gateway")
    mtu = rec.first(events, MTU)
    if mtu:
        report.notes.append(
            f"MTU in force: {mtu['mtu']} ({mtu['source']}" + (f": {mtu['why']}" if mtu.get("why") else "")
            + f"); a Transit Gateway carries at most {TGW_MAX_PACKET}-byte packets (docs/networking.md#mtu).")
    gateways = list(rec.every(events, GATEWAY))
    for gw in gateways:
        if gw.get("when") == "after":
            before = next((g for g in gateways if g.get("when") == "before"
                           and g.get("instance_type") == gw.get("instance_type")), {})
            if before.get("leader") != gw.get("leader"):
                report.notes.append(
                    (f"[{gw['instance_type']}] " if gw.get("instance_type") else "")
                    + f"the leader changed during the measurement: {before.get('leader')} → "
                    f"{gw.get('leader')} (a failover: the figures span it)")
            continue
        types = sorted({n.get("instance_type") or "unknown" for n in gw.get("nodes") or []})
        report.notes.append(
            (f"[{gw['instance_type']}] " if gw.get("instance_type") else "")
            + f"gateway nodes: {', '.join(n['name'] for n in gw.get('nodes') or []) or 'none found'}"
            f" (instance type {', '.join(types) or 'unknown'}); leader: "
            + (f"{gw['leader']} ({gw.get('leader_instance_type') or 'type unknown'})" if gw.get("leader")
               else f"unknown ({gw.get('leader_why', '')})"))

    switched = {e["instance_type"]: e for e in rec.every(events, SWITCHED)}
    rounds = list(settings.get("instance_types") or []) or [None]
    results = list(rec.every(events, RESULT))
    seconds_asked = settings.get("seconds")
    bars = []
    for instance_type in rounds:
        row: dict[str, Any] = {"instance_type": instance_type}
        switch = switched.get(instance_type) if instance_type else None
        for direction, _ in DIRECTIONS:
            name = check_name(direction, instance_type)
            command = f"kubectl -n {ns} get pods -l {LABEL}={LABEL_VALUE} -o wide"
            if instance_type and switch is None:
                report.checks.append(not_read(name, f"the {direction} measurement on "
                                              f"{instance_type}", events, command))
                continue
            if instance_type and not switch.get("ok"):
                report.checks.append(Check(name, FAIL, f"not measured: switching to {instance_type} "
                                           f"failed ({switch.get('error')})", "see the pulumi output",
                                           command))
                continue
            found = [r for r in results if r.get("direction") == direction
                     and r.get("instance_type") == instance_type]
            if not found:
                report.checks.append(not_read(name, f"the {direction} measurement", events, command))
                continue
            r = found[-1]
            parsed = ({"status": "failed", "why": r["error"]} if r.get("error") else
                      parse_iperf(r.get("log"), r.get("seconds_asked") or seconds_asked))
            if parsed["status"] == "unreadable" and r.get("client_phase") not in ("Succeeded", "Failed"):
                # iperf3 --json writes its JSON at the end: a client still running has none.
                parsed = {**parsed, "status": "partial",
                          "why": f"the client pod did not finish (phase {r.get('client_phase')})"}
            row[direction] = parsed
            prefix = f"{instance_type}: " if instance_type else ""
            if parsed["status"] == "ok":
                report.checks.append(Check(
                    name, PASS, f"{parsed['receiver_gbps']:g} Gbit/s received, "
                    f"{parsed['sender_gbps']:g} sent, {parsed['retransmits']} retransmits over "
                    f"{parsed['seconds']:g} s, {parsed['streams']} streams ({r.get('client_node')} → "
                    f"{r.get('server_node')}, server pod IP {r.get('server_ip')}; TCP MSS "
                    f"{parsed.get('tcp_mss') or '?'}, path MTU {parsed.get('pmtu') or '?'})", "",
                    # The pods are gone: the client's JSON is kept in events.jsonl.
                    f"jq -r 'select(.kind==\"{RESULT}\" and .client_pod==\"{r['client_pod']}\")"
                    f" | .log' events.jsonl"))
                report.measurements += [
                    Measurement(f"{prefix}{direction} (sender)", parsed["sender_gbps"], "Gbit/s",
                                "never measured before (docs/demo-guide.md#open-questions)"),
                    Measurement(f"{prefix}{direction} (receiver)", parsed["receiver_gbps"], "Gbit/s",
                                "never measured before (docs/demo-guide.md#open-questions)"),
                    Measurement(f"{prefix}{direction} retransmits", parsed["retransmits"], "segments",
                                note=f"{parsed['streams']} streams, {parsed['seconds']:g} s")]
            else:
                report.checks.append(Check(
                    name, FAIL, f"{parsed['status']}: {parsed.get('why', '')}",
                    _failure_fix(direction, parsed), command))
                report.measurements.append(Measurement(f"{prefix}{direction} (receiver)", None,
                                                       "Gbit/s", note=parsed["status"]))
        bars.append(_bar(row, gateways))
        if instance_type:
            report.table.append(row)
            gw = next((g for g in gateways if g.get("when") == "before"
                       and g.get("instance_type") == instance_type), None)
            if gw is not None:
                types = sorted({n.get("instance_type") or "unknown" for n in gw.get("nodes") or []})
                on_type = _settled(gw, instance_type)
                report.checks.append(Check(
                    f"gateway on {instance_type}", PASS if on_type else FAIL,
                    f"gateway nodes {', '.join(types) or 'none'}, leader "
                    f"{gw.get('leader') or 'unknown'} ({gw.get('leader_instance_type') or '?'})",
                    f"the node group did not finish replacing its nodes in "
                    f"{GATEWAY_SETTLE_SECONDS} s: the figures for {instance_type} are not its own",
                    "kubectl get nodes -l hybrid-gateway-node=true -L node.kubernetes.io/instance-type"))

    report.charts.append(Chart("gateway-throughput", "Gateway throughput per instance type, pod to pod",
                               {"rows": bars, "mtu": mtu and {"mtu": mtu["mtu"], "source": mtu["source"]}}))
    created = [e["name"] for e in rec.every(events, POD_CREATED)]
    deleted = {e["name"] for e in rec.every(events, POD_DELETED) if e.get("ok")}
    left = [n for n in created if n not in deleted]
    if not created and ending(events) is not None:
        report.checks.append(not_read(CHECK_PODS_REMOVED, "the measurement pods (none was created)",
                                      events, f"kubectl -n {ns} get pods -l {LABEL}={LABEL_VALUE}"))
    else:
        report.checks.append(Check(
            CHECK_PODS_REMOVED, FAIL if left else PASS,
            f"left behind: {', '.join(left)}" if left else
            f"{len(created)} pods created, {len(created)} deleted by name",
            f"kubectl -n {ns} delete pod -l {LABEL}={LABEL_VALUE}",
            f"kubectl -n {ns} get pods -l {LABEL}={LABEL_VALUE}"))
    if settings.get("instance_types"):
        report.notes.append(
            "each instance type replaced the gateway node group's nodes (`pulumi up` of "
            "gatewayInstanceType), so the gateway's leader failed over at every switch and at "
            "the restore: each type's figures are measured after that failover, on new nodes")
        restored = rec.first(events, RESTORED)
        original = (rec.first(events, ORIGINAL) or {}).get("value")
        ok = bool(restored and restored.get("ok"))
        if not switched and restored is None and ending(events) is not None:
            # Nothing was switched, so nothing was left to put back.
            report.checks.append(not_read(CHECK_RESTORED, "gatewayInstanceType (it was never "
                                          "switched)", events, "pulumi config get gatewayInstanceType"))
            return report
        report.checks.append(Check(
            CHECK_RESTORED, PASS if ok else FAIL,
            f"back to {original or 'the default'}" if ok else
            f"not put back to {original or 'the default'}: {(restored or {}).get('error', 'no restore recorded')}",
            f"`pulumi config set gatewayInstanceType {original}` and `pulumi up`",
            "pulumi config get gatewayInstanceType"))
    return report


def _bar(row: dict[str, Any], gateways: list[dict]) -> dict[str, Any]:
    """One instance type's figures for the chart: the table's row, named by the type measured
    (the leader's, when the run switched nothing), with its baseline where known."""
    named = row["instance_type"] or next((g.get("leader_instance_type") for g in gateways
                                          if g.get("when") != "after" and g.get("leader_instance_type")), None)
    directions = {}
    for direction, _ in DIRECTIONS:
        r = row.get(direction) or {}
        directions[direction] = {"status": r.get("status", "not measured"), "receiver_gbps": r.get("receiver_gbps"),
                                 "retransmits": r.get("retransmits"), "pmtu": r.get("pmtu"),
                                 "tcp_mss": r.get("tcp_mss")}
    return {"instance_type": named or "the current gateway type", "baseline_gbps": BASELINE_GBPS.get(named or ""),
            "directions": directions}


__all__ = ["TITLE", "add_arguments", "collect", "analyse", "parse_iperf", "pod_manifest"]
