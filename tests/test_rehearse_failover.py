"""`python -m rehearse failover`: recorded timelines give exact figures, and whole runs against
the Kubernetes emulator and moto, with the test playing the cluster.

The test plays the controllers on a simulated clock: the tool's sleeps advance it, and the
cluster acts when its time comes — the deleted leader's pod goes (and its replacement comes
back on the same node), the standby takes the Lease, rewrites each route table in moto and the
VTEP config, and the demo 1 probers log what a busybox loop would have logged (each probe ends
``timeout 1`` later when the path is down; the next turn starts a second after the last probe).
Every time is an integer of microseconds, so the expected figures below are exact and worked out
by hand from the timelines, not read from the tool.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import random
import re
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional
from unittest import mock

import pytest

from rehearse import cli
from rehearse.run import execute as run_execute
from rehearse.commands.failover import collect as failover
from rehearse.commands.failover import gaps as failover_gaps
from rehearse.commands.failover import moments as failover_moments
from rehearse.lab import leader as leaders
from rehearse.lab import probes as probe_logs
from rehearse.run.record import iso, parse_time, read_events
from rehearse.run.report import FAIL, PASS
from tests import rehearsal_evening
from tests.conftest import main_in_process
from tests.offline_guard import loopback_connect
from tests.kube_emulator import (LEASES, NODES, PODS, VTEP_CONFIGS, Emulator, status_response,
                                 emulator)  # noqa: F401 (the fixture)

FIXTURES = Path(__file__).parent / "fixtures" / "rehearse"
REGION = "ap-northeast-2"
GATEWAY_NS, LEASE, DEMO_NS = "eks-hybrid-nodes-gateway", "hybrid-gateway-leader", "demo-gateway"
POD_CIDR = "172.17.0.0/16"
#: The simulated "now" when a run starts (this machine's clock).
T0 = datetime.datetime(2026, 12, 1, 9, 0, 0, tzinfo=datetime.timezone.utc)
S = 1_000_000  # microseconds in a second
#: What the API server takes for a log's sinceTime (metav1.Time: Go's time.RFC3339).
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


# --- the cluster, played -------------------------------------------------------------------

@dataclass
class Prober:
    """A demo 1 prober's busybox loop: probe svc, probe pod, touch, sleep 1."""

    name: str
    direction: str
    #: Cluster time (µs from T0) at which one turn starts, and how long a successful probe takes.
    anchor_us: int
    ok_us: int
    #: Deterministic jitter (µs) added to successful probes and to the sleep, for recordings.
    jitter_us: int = 0
    seed: int = 0

    def lines(self, until_us: int, down: Callable[[str, str, int], bool]) -> list[str]:
        """Every line logged up to cluster time ``until_us``, kubelet-timestamped."""
        rng = random.Random(self.seed)
        turn = 2 * self.ok_us + S
        t = self.anchor_us - 70 * turn
        lines = []
        while True:
            for path in ("svc", "pod"):
                fail = down(self.direction, path, t)
                slow = rng.randint(0, 2_000 if self.jitter_us else 0)
                took = S + slow if fail else self.ok_us + rng.randint(0, self.jitter_us)
                t += took
                if t > until_us:
                    return lines
                at = T0 + datetime.timedelta(microseconds=t)
                nanos = rng.randint(0, 999) if self.jitter_us else 0
                lines.append(f"{at.strftime('%Y-%m-%dT%H:%M:%S')}.{at.microsecond:06d}{nanos:03d}Z "
                             f"{at.strftime('%H:%M:%S')} {path} {'FAIL' if fail else 'ok'}")
            t += S + rng.randint(0, self.jitter_us)


@dataclass
class Scenario:
    """What the cluster does after the leader's pod is deleted (µs after the deletion)."""

    lease_us: Optional[int] = 3_214_567
    #: When the standby rewrites each route table (None: never, e.g. no permission on it).
    routes_us: tuple[Optional[int], ...] = (3_700_000, 3_900_000)
    vtep_us: Optional[int] = 4_300_000
    #: The traffic stops this long after the deletion (the old leader tears its VXLAN down).
    outage_after_us: int = 50_000
    #: The cluster's clock less this machine's (µs).
    skew_us: int = 0
    #: (direction, path) that fail all along (an unhealthy baseline).
    broken: frozenset = frozenset()
    #: The Lease holder's host, when it should name something else than gateway node A.
    holder_host: Optional[str] = None
    #: The standby is the deleted leader's replacement pod on node A, not gateway B.
    same_node: bool = False
    probers: tuple[Prober, ...] = (
        Prober("prober-cloud", "cloud→hybrid", anchor_us=-500_000, ok_us=10_000),
        Prober("prober-hybrid", "hybrid→cloud", anchor_us=-700_000, ok_us=30_000))


class Sim:
    """This machine's clock, the tool's sleeps and the cluster's timeline."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.t_us = 0
        self.deleted_us: Optional[int] = None  # this machine's clock
        self.actions: list[tuple[int, int, Callable[[], None]]] = []
        self.progress: list[str] = []

    def clock(self) -> datetime.datetime:
        return T0 + datetime.timedelta(microseconds=self.t_us)

    def cluster_us(self, local_us: Optional[int] = None) -> int:
        return (self.t_us if local_us is None else local_us) + self.scenario.skew_us

    def cluster_time(self, local_us: int) -> datetime.datetime:
        return T0 + datetime.timedelta(microseconds=self.cluster_us(local_us))

    def monotonic(self) -> float:
        return 5000 + self.t_us / S

    def sleep(self, seconds: float) -> None:
        self.t_us += round(seconds * S)
        due = sorted(a for a in self.actions if a[0] <= self.t_us)
        self.actions = [a for a in self.actions if a[0] > self.t_us]
        for _, _, action in due:
            action()

    def later(self, after_deletion_us: int, action: Callable[[], None]) -> None:
        assert self.deleted_us is not None
        self.actions.append((self.deleted_us + after_deletion_us, len(self.actions), action))

    def down(self, direction: str, path: str, cluster_us: int) -> bool:
        """Whether a probe started at ``cluster_us`` fails."""
        sc = self.scenario
        if (direction, path) in sc.broken:
            return True
        if self.deleted_us is None:
            return False
        start = self.cluster_us(self.deleted_us) + sc.outage_after_us
        routes = [r for r in sc.routes_us]
        cloud_back = None if None in routes else max(routes)
        needs = [cloud_back] if direction == "cloud→hybrid" else [cloud_back, sc.vtep_us]
        back = None if None in needs else self.cluster_us(self.deleted_us) + max(needs)
        return cluster_us >= start and (back is None or cluster_us < back)


@dataclass
class Lab:
    emulator: Emulator
    sim: Sim
    ec2: Any
    tables: list[str]
    nodes: dict[str, dict[str, str]]  # "a" | "b" | "c" -> instance, eni, ip, dns
    outputs: Path
    out: Path
    pods: dict[str, dict] = field(default_factory=dict)

    def run(self, *args: str) -> int:
        return cli.main(["failover", "--outputs", str(self.outputs), "--out", str(self.out),
                         *args])

    def folder(self) -> Path:
        [folder] = list(self.out.iterdir())
        return folder

    def report(self) -> dict[str, Any]:
        return json.loads((self.folder() / "report.json").read_text())

    def deletes(self) -> list[str]:
        return [path for method, path in self.emulator.requests() if method == "DELETE"]


def _node(name: str, info: dict[str, str], gateway: bool) -> dict:
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": info["zone"]}
    if gateway:
        labels["hybrid-gateway-node"] = "true"
    return {"metadata": {"labels": labels},
            "spec": {"providerID": f"aws:///{info['zone']}/{info['instance']}"},
            "status": {"addresses": [{"type": "InternalIP", "address": info["ip"]},
                                     {"type": "InternalDNS", "address": name},
                                     {"type": "Hostname", "address": name}]}}


def _gateway_pod(name: str, node: str, ip: str, uid: str) -> dict:
    return {"metadata": {"uid": uid, "labels": {
                "app.kubernetes.io/name": "eks-hybrid-nodes-gateway",
                "app.kubernetes.io/instance": "eks-hybrid-nodes-gateway"}},
            "spec": {"nodeName": node, "hostNetwork": True,
                     "nodeSelector": {"hybrid-gateway-node": "true"},
                     "containers": [{"name": "gateway"}]},
            "status": {"phase": "Running", "hostIP": ip, "podIP": ip}}


def _prober_pod(app: str, node: str) -> dict:
    return {"metadata": {"labels": {"app": app, "pod-template-hash": "5d9c"}},
            "spec": {"nodeName": node, "containers": [{"name": "prober"}]},
            "status": {"phase": "Running"}}


@functools.lru_cache(maxsize=None)
def _ec2_client() -> Any:
    """One EC2 client for the lab's own calls, used only inside ``mock_aws`` (each mock's
    state is its own), from a session sharing the command runs' botocore data loader (a
    loader of its own parses the EC2 model again, 0.1-0.2 s)."""
    from rehearse.run.context import boto3_session

    return boto3_session().client("ec2", region_name=REGION, aws_access_key_id="testing",
                                  aws_secret_access_key="testing", aws_session_token="testing")


#: The lab's environment: moto's fake credentials and region.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION,
           "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
           # moto's catalogue of public AMIs, loaded with each EC2 backend, is most of its
           # start-up; the lab's instances take any image id.
           "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}


@dataclass(frozen=True)
class Ec2World:
    """The lab's VPC and its three nodes (instance, ENI, IP, DNS name, zone) in moto."""
    vpc: str
    nodes: dict[str, dict[str, str]]


@contextlib.contextmanager
def ec2_world() -> Iterator[Ec2World]:
    """moto (nothing leaves the machine) with the lab's VPC and nodes. Labs add their route
    tables to it and remove them again (the command only reads EC2), so one world serves the
    labs of a module (planting it costs ~30 ms a lab)."""
    from moto import mock_aws

    with mock.patch.dict(os.environ, AWS_ENV), mock_aws():
        yield _plant_nodes(_ec2_client())


@pytest.fixture(scope="module")
def module_ec2() -> Iterator[Ec2World]:
    with ec2_world() as world:
        yield world


@contextlib.contextmanager
def lab_session(scenario: Scenario, workdir: Path, world: Optional[Ec2World] = None,
                stack_name: str = "lab") -> Iterator[Lab]:
    """The emulator, moto and the patches that point the CLI at them; the cluster played on
    ``Sim``'s clock. Only 127.0.0.1 may be reached. In ``world`` (its moto active) if given,
    else in a world of its own."""
    from rehearse.lab.connection import Kube
    from rehearse.run.context import Context

    loopback_only = loopback_connect(socket.socket.connect)

    sim = Sim(scenario)
    server = Emulator()
    with contextlib.ExitStack() as stack:
        if world is None:
            world = stack.enter_context(ec2_world())
        stack.enter_context(mock.patch.dict(os.environ, AWS_ENV))
        stack.enter_context(mock.patch.object(socket.socket, "connect", loopback_only))
        ec2 = _ec2_client()
        tables: list[str] = []
        try:
            lab = _build(server, sim, ec2, world, tables, scenario, workdir, stack_name)
            context = functools.partial(Context, clock=sim.clock, sleep=sim.sleep,
                                        monotonic=sim.monotonic, progress=sim.progress.append)
            with mock.patch.object(run_execute, "_connect", lambda args, outputs: Kube.connect(server.endpoint)), \
                    mock.patch("rehearse.run.context.Context", context):
                yield lab
        finally:
            server.close()
            # The world as it was: this lab's tables gone, nothing else changed.
            for table in tables:
                ec2.delete_route_table(RouteTableId=table)
            left = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [world.vpc]}])
            assert [t for t in left["RouteTables"] if not any(a.get("Main") for a in t["Associations"])] == [], \
                "a lab left a route table behind"


def _plant_nodes(ec2: Any) -> Ec2World:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    # Any image id will do for moto; listing its catalogue of real ones costs a second a test.
    ami = "ami-12c6146b"
    nodes = {}
    for key, zone, cidr in (("a", "ap-northeast-2a", "10.0.1.0/24"),
                            ("b", "ap-northeast-2c", "10.0.2.0/24"),
                            ("c", "ap-northeast-2a", "10.0.3.0/24")):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]
        instance = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType="t3.medium",
                                     SubnetId=subnet["SubnetId"])["Instances"][0]
        nodes[key] = {"instance": instance["InstanceId"], "ip": instance["PrivateIpAddress"],
                      "dns": instance["PrivateDnsName"], "zone": zone,
                      "eni": next(n["NetworkInterfaceId"] for n in instance["NetworkInterfaces"]
                                  if n["Attachment"]["DeviceIndex"] == 0)}
    return Ec2World(vpc, nodes)


def _build(server: Emulator, sim: Sim, ec2: Any, world: Ec2World, tables: list[str],
           scenario: Scenario, workdir: Path, stack: str = "lab") -> Lab:
    """The lab's route tables (into ``tables``, for removal) and the cluster."""
    nodes = {key: dict(node) for key, node in world.nodes.items()}
    for _ in scenario.routes_us:
        table = ec2.create_route_table(VpcId=world.vpc)["RouteTable"]["RouteTableId"]
        tables.append(table)
        ec2.create_route(RouteTableId=table, DestinationCidrBlock=POD_CIDR,
                         NetworkInterfaceId=nodes["a"]["eni"])

    a, b, c = (nodes[k]["dns"] for k in "abc")
    for key, name in (("a", a), ("b", b), ("c", c)):
        server.put(NODES, None, name, _node(name, nodes[key], gateway=key != "c"))
    pods = {"gw-a": _gateway_pod("gw-a", a, nodes["a"]["ip"], "uid-gw-a"),
            "gw-b": _gateway_pod("gw-b", b, nodes["b"]["ip"], "uid-gw-b")}
    for name, pod in pods.items():
        server.put(PODS, GATEWAY_NS, f"eks-hybrid-nodes-gateway-{name}", pod)
    # Not gateways: another pod in the namespace, and one on the leader's node elsewhere.
    server.put(PODS, GATEWAY_NS, "debug-shell", {**_prober_pod("debug", a)})
    server.put(PODS, DEMO_NS, "prober-cloud-5d9c-x1", _prober_pod("prober-cloud", c))
    server.put(PODS, DEMO_NS, "prober-hybrid-5d9c-y2", _prober_pod("prober-hybrid", "hybrid-1"))
    host = scenario.holder_host or a
    server.put(LEASES, GATEWAY_NS, LEASE, {"spec": {
        "holderIdentity": f"{host}_0f7c1d2e-5b7a-4a53-9d38-2c1e0b6f4a11",
        "acquireTime": iso(T0 - datetime.timedelta(hours=2, microseconds=123_456)),
        "renewTime": iso(sim.cluster_time(-600_000)), "leaseDurationSeconds": 3,
        "leaseTransitions": 4}})
    server.put(VTEP_CONFIGS, None, "hybrid-gateway", {"spec": {"endpoints": [
        {"name": "vpc-gateway", "tunnelEndpoint": nodes["a"]["ip"], "cidr": "10.0.0.0/16",
         "mac": "02:11:22:33:44:55"}]}})

    def serve_log(prober: Prober):
        def answer(request) -> Any:
            since = request.params.get("sinceTime")
            if since and not RFC3339.match(since):
                # As the real API server: sinceTime is a metav1.Time, parsed as RFC 3339 only
                # (tests/test_real_gateway.py saw it refuse anything else).
                return status_response(400, "BadRequest", f'parsing time "{since}" as RFC 3339')
            lines = prober.lines(sim.cluster_us(), sim.down)
            if since:
                lines = [ln for ln in lines if parse_time(ln.split()[0]) >= parse_time(since)]
            return "".join(ln + "\n" for ln in lines).encode()
        return answer

    for prober in scenario.probers:
        pod = "prober-cloud-5d9c-x1" if prober.name == "prober-cloud" else "prober-hybrid-5d9c-y2"
        url = f"get /api/v1/namespaces/{DEMO_NS}/pods/{pod}/log"
        server.do(lambda km, url=url, prober=prober: km[url] << serve_log(prober))

    leader_pod = "eks-hybrid-nodes-gateway-gw-a"
    leader_key = ("v1/pods", GATEWAY_NS, leader_pod)
    # kmock removes a Terminating object without finalizers as soon as a declared reaction (on
    # DELETE, below) has answered; the finalizer keeps it Terminating, as the API server keeps
    # it until its kubelet confirms (``gone`` in _play).
    leader = pods["gw-a"]
    stored = server.put(PODS, GATEWAY_NS, leader_pod, {
        **leader, "metadata": {**leader["metadata"], "finalizers": ["tests/kubelet-confirms"]}})

    def on_delete(request) -> bytes:
        # The API server marks the pod Terminating: deletionTimestamp = now + grace (whole
        # seconds, its clock). The cluster's story starts here.
        sim.deleted_us = sim.t_us
        stamp = sim.cluster_time(sim.t_us).replace(microsecond=0) + datetime.timedelta(seconds=30)
        terminating = {**stored, "metadata": {**stored["metadata"], "deletionGracePeriodSeconds": 30,
                                              "deletionTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ")}}
        server.kmock.objects[leader_key] = terminating
        _play(server, sim, ec2, scenario, nodes, tables)
        return json.dumps(terminating).encode()

    server.do(lambda km: km[f"delete /api/v1/namespaces/{GATEWAY_NS}/pods/{leader_pod}"] << on_delete)

    # The outputs file's name is the stack's (rehearse.lab.outputs).
    outputs = workdir / f"{stack}.json"
    outputs.write_text(json.dumps({
        "region": REGION, "kubeconfig": "{}", "hybridPodCidr": POD_CIDR,
        "gatewayNamespace": GATEWAY_NS, "gatewayLeaseName": LEASE,
        "gatewayRouteTableIds": tables, "layers": ["network", "cluster", "hybrid", "gateway", "demo"],
        "demo1": {"namespace": DEMO_NS,
                  "probeCloudToHybrid": f"kubectl -n {DEMO_NS} logs -f deploy/prober-cloud"}}))
    return Lab(server, sim, ec2, tables, nodes, outputs, workdir / "rehearsals", pods)


def _play(server: Emulator, sim: Sim, ec2: Any, scenario: Scenario, nodes: dict,
          tables: list[str]) -> None:
    """Schedules the controllers' answers to the deletion (runs on the emulator's thread: only
    schedules; the actions run in the tool's sleeps)."""
    a, b = nodes["a"], nodes["b"]
    winner = a if scenario.same_node else b

    def gone() -> None:
        server.delete(PODS, GATEWAY_NS, "eks-hybrid-nodes-gateway-gw-a")

    def replacement() -> None:
        server.put(PODS, GATEWAY_NS, "eks-hybrid-nodes-gateway-gw-a2",
                   _gateway_pod("gw-a2", a["dns"], a["ip"], "uid-gw-a2"))

    def lease() -> None:
        acquired = sim.cluster_time(sim.deleted_us + scenario.lease_us)
        server.put(LEASES, GATEWAY_NS, LEASE, {"spec": {
            "holderIdentity": f"{winner['dns']}_7d0e9a44-1c2b-4f6e-8a9d-5e4f3a2b1c0d",
            "acquireTime": iso(acquired), "renewTime": iso(acquired),
            "leaseDurationSeconds": 3, "leaseTransitions": 5}})

    def route(table: str) -> Callable[[], None]:
        return lambda: ec2.replace_route(RouteTableId=table, DestinationCidrBlock=POD_CIDR,
                                         NetworkInterfaceId=winner["eni"])

    def vtep() -> None:
        server.put(VTEP_CONFIGS, None, "hybrid-gateway", {"spec": {"endpoints": [
            {"name": "vpc-gateway", "tunnelEndpoint": winner["ip"], "cidr": "10.0.0.0/16",
             "mac": "02:66:77:88:99:aa"}]}})

    sim.later(1_500_000, gone)
    sim.later(2_000_000, replacement)
    if scenario.lease_us is not None:
        sim.later(scenario.lease_us, lease)
    for table, at in zip(tables, scenario.routes_us):
        if at is not None:
            sim.later(at, route(table))
    if scenario.vtep_us is not None:
        sim.later(scenario.vtep_us, vtep)


@pytest.fixture
def lab_for(tmp_path, module_ec2):
    sessions = contextlib.ExitStack()

    def start(scenario: Scenario = Scenario()) -> Lab:
        return sessions.enter_context(lab_session(scenario, tmp_path, module_ec2))

    with sessions:
        yield start


def _checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def _numbers(report: dict) -> dict[str, Optional[float]]:
    return {m["name"]: m["value"] for m in report["measurements"]}


GAP = "longest gap {}"
HANDOVER = "Lease handover (new acquireTime − deletion)"
UNOWNED = "Lease unowned (old holder's last renewTime → new acquireTime)"
ROUTE = "route switch (first poll seeing the new ENI)"
VTEP = "VTEP follow (first poll naming the new leader)"


# --- whole runs against the emulator and moto ------------------------------------------------

def test_a_healthy_failover_is_measured_end_to_end(lab_for, capsys):
    lab = lab_for()
    assert lab.run() == 0
    report = lab.report()
    assert report["passed"] and report["title"] == "Gateway leader failover"
    # Only the leader's pod was deleted: resolved from the holder (node A's name + uuid) to
    # the one gateway pod on node A, not the debug pod beside it.
    assert lab.deletes() == [f"/api/v1/namespaces/{GATEWAY_NS}/pods/eks-hybrid-nodes-gateway-gw-a"]
    assert lab.sim.deleted_us == 0

    numbers = _numbers(report)
    # By hand from the played timeline (Scenario's defaults; deletion at 09:00:00.000000, the
    # traffic stops 0.05 s later; the cloud routes are back at 3.9 s, the VTEP at 4.3 s):
    # prober-cloud (ok probes take 0.01 s) turns at -0.50: svc ok -0.49, pod ok -0.48; at 0.52
    # both fail (lines 1.52, 2.52); at 3.52 svc fails (4.52: started before 3.9), pod ok 4.53;
    # at 5.53 svc ok 5.54.  -> svc 5.54 + 0.49 = 6.03 s, pod 4.53 + 0.48 = 5.01 s.
    # prober-hybrid (0.03 s) turns at -0.70: svc ok -0.67, pod ok -0.64; at 0.36 both fail
    # (1.36, 2.36); at 3.36 svc fails (4.36), pod starts 4.36 >= 4.3: ok 4.39; at 5.39 svc ok
    # 5.42.  -> svc 5.42 + 0.67 = 6.09 s, pod 4.39 + 0.64 = 5.03 s.
    assert numbers[GAP.format("cloud→hybrid via Service")] == 6.03
    assert numbers[GAP.format("cloud→hybrid via pod")] == 5.01
    assert numbers[GAP.format("hybrid→cloud via Service")] == 6.09
    assert numbers[GAP.format("hybrid→cloud via pod")] == 5.03
    # acquireTime 09:00:03.214567 less the deletion; the old holder last renewed at -0.6 s.
    assert numbers[HANDOVER] == 3.215 and numbers[UNOWNED] == 3.815
    # Polls every 0.5 s from the deletion: the routes (3.7 s, 3.9 s) are first seen at 4.0 s,
    # the VTEP config (4.3 s) at 4.5 s.
    assert numbers[ROUTE] == 4.0 and numbers[VTEP] == 4.5
    measurement = {m["name"]: m for m in report["measurements"]}
    assert "between 3.5 and 4.0 s" in measurement[ROUTE]["note"]

    checks = _checks(report)
    assert all(c["status"] == PASS for c in checks.values()), checks
    assert lab.nodes["b"]["eni"] in checks["route switched to the new leader's ENI"]["seen"]
    assert lab.nodes["b"]["ip"] in checks["VTEP config follows the new leader"]["seen"]
    assert "leaseTransitions 4 -> 5" in checks["new leader elected"]["seen"]
    for name in ("cloud→hybrid via Service", "hybrid→cloud via pod"):
        assert checks[f"gap {name}"]["command"].startswith(f"kubectl -n {DEMO_NS} logs deploy/")

    # Every poll is recorded, the waits are bounded and shown, the logs were read with
    # timestamps from the baseline on.
    events = read_events(lab.folder())
    assert [e["kind"] for e in events][:2] == ["run.started", "failover.settings"]
    assert sum(e["kind"] == "routes.observed" for e in events) >= 60
    assert any(e["kind"] == "failover.converged" for e in events)
    assert any("waiting for the failover" in line for line in lab.sim.progress)
    assert any("observing the recovery:" in line for line in lab.sim.progress)
    log_reads = [p for m, p in lab.emulator.requests() if p.endswith("/log")]
    assert len(log_reads) == 4
    out = capsys.readouterr().out
    assert "Gateway leader failover: PASS" in out and "longest gap cloud→hybrid via Service: 6.03 s" in out


def test_a_recorded_run_replays_to_the_same_report(lab_for):
    lab = lab_for()
    # Ten seconds of watching cover the outage; the default 30 s is the end-to-end test's.
    assert lab.run("--observe", "10") == 0
    folder = lab.folder()
    first = (folder / "report.json").read_text(), (folder / "report.md").read_text()
    (folder / "report.json").unlink()
    (folder / "report.md").unlink()
    assert cli.main(["report", str(folder)]) == 0
    assert ((folder / "report.json").read_text(), (folder / "report.md").read_text()) == first


def test_rehearse_report_replays_a_recorded_run_through_the_command(tmp_path, capsys, monkeypatch):
    # In-process, as the fresh process would run it: `python -m rehearse` in a fresh
    # interpreter is test_rehearse_frame's (an unreachable cluster); a fresh one here would
    # only import the tools and matplotlib again (a second of CPU).
    folder = tmp_path / "run"
    shutil.copytree(FIXTURES / "failover-healthy", folder)
    expected = failover.analyse(read_events(folder)).to_json()
    result = main_in_process(capsys, monkeypatch, "rehearse", cli.main, "report", str(folder))
    assert result.returncode == 0, result.stderr
    assert json.loads((folder / "report.json").read_text()) == expected
    assert "Gateway leader failover: PASS" in result.stdout


def test_ctrl_c_after_the_deletion_keeps_the_record_that_the_leader_pod_was_deleted(lab_for, monkeypatch, capsys):
    """The run folder survives an interrupt, with the deletion in it."""
    from rehearse.commands.failover import collect as failover

    lab = lab_for()

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(failover._Collector, "poll", interrupted)
    assert lab.run() == 1
    assert "Traceback" not in capsys.readouterr().err
    events = [json.loads(line) for line in (lab.folder() / "events.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events if e["kind"] in ("pod.deleted", "run.interrupted")] == [
        "pod.deleted", "run.interrupted"]
    report = lab.report()
    assert report["checks"][0]["name"] == "run completed" and report["checks"][0]["status"] == FAIL
    assert any("deleted the leader's pod (pod eks-hybrid-nodes-gateway-gw-a" in n for n in report["notes"])


def test_an_unhealthy_baseline_refuses_to_measure(lab_for):
    lab = lab_for(Scenario(broken=frozenset({("hybrid→cloud", "pod")})))
    assert lab.run() == 1
    assert lab.deletes() == []
    report = lab.report()
    assert report["title"] == "Gateway leader failover — not a measurement"
    assert report["measurements"] == []
    check = _checks(report)["baseline healthy"]
    assert check["status"] == FAIL
    assert "hybrid→cloud via pod: 0 successful probe(s) in the 20 s before acting" in check["seen"]
    assert "Not a measurement: nothing was deleted" in report["notes"][0]
    assert any(e["kind"] == "failover.refused" for e in read_events(lab.folder()))


def test_a_holder_naming_no_gateway_pods_node_refuses(lab_for):
    lab = lab_for(Scenario(holder_host=None))
    c = lab.nodes["c"]["dns"]
    lab.emulator.put(LEASES, GATEWAY_NS, LEASE, {"spec": {
        "holderIdentity": f"{c}_0f7c1d2e-5b7a-4a53-9d38-2c1e0b6f4a11",
        "acquireTime": iso(T0), "renewTime": iso(T0), "leaseTransitions": 4}})
    assert lab.run() == 1
    assert lab.deletes() == []
    check = _checks(lab.report())["leader resolved"]
    assert check["status"] == FAIL
    assert f"names node {c}, where no gateway pod runs" in check["seen"]
    assert "eks-hybrid-nodes-gateway-gw-a on " in check["seen"]


def test_a_holder_that_is_a_pod_name_or_a_prefix_refuses(lab_for):
    """The public script's mistake (the holder is not a pod name), and a host name that is only
    a prefix of the gateway node's (ip-10-0-1-4 of ip-10-0-1-4x...): neither resolves."""
    lab = lab_for()
    short = lab.nodes["a"]["dns"].split(".")[0]  # ip-10-0-1-4, a prefix of the node's name
    for holder in ("eks-hybrid-nodes-gateway-gw-a", f"{short}_0f7c1d2e"):
        lab.emulator.put(LEASES, GATEWAY_NS, LEASE, {"spec": {"holderIdentity": holder}})
        from rehearse.lab.connection import Kube

        resolution = leaders.resolve(Kube.connect(lab.emulator.endpoint), GATEWAY_NS, LEASE)
        assert resolution.leader is None
        assert "which is no node of the cluster" in resolution.reason


def test_a_route_that_never_switches_fails_naming_that_check(lab_for):
    lab = lab_for(Scenario(routes_us=(3_700_000, None)))
    assert lab.run("--timeout", "8", "--observe", "10") == 1
    report = lab.report()
    checks = _checks(report)
    route = checks["route switched to the new leader's ENI"]
    assert route["status"] == FAIL
    stuck, moved = lab.tables[1], lab.tables[0]
    old_eni, new_eni = lab.nodes["a"]["eni"], lab.nodes["b"]["eni"]
    assert f"{stuck}: {POD_CIDR} → {old_eni} (the deleted leader's), active" in route["seen"]
    assert moved not in route["seen"].split("at the end:")[1]
    assert new_eni in route["seen"] and "ec2:ReplaceRoute" in route["fix"]
    assert checks["new leader elected"]["status"] == PASS
    assert checks["VTEP config follows the new leader"]["status"] == PASS
    # The cloud side never came back: the gaps are open and fail as such.
    gap = checks["gap cloud→hybrid via Service"]
    assert gap["status"] == FAIL and "still failing" in gap["seen"]
    assert _numbers(report)[ROUTE] is None
    events = read_events(lab.folder())
    [timeout] = [e for e in events if e["kind"] == "wait.timeout"]
    assert timeout["after"] == 8
    assert timeout["missing"] == [f"the route in {stuck} on {new_eni}"]
    assert any("gave up waiting after 8 s; still missing: the route in " + stuck in line
               for line in lab.sim.progress)


def test_a_gap_over_the_threshold_fails(lab_for):
    lab = lab_for()
    assert lab.run("--threshold", "5.5", "--observe", "10") == 1
    checks = _checks(lab.report())
    # 6.03 and 6.09 s are over 5.5 s; 5.01 and 5.03 s are not.
    assert checks["gap cloud→hybrid via Service"]["status"] == FAIL
    assert "6.030 s without a successful probe" in checks["gap cloud→hybrid via Service"]["seen"]
    assert checks["gap hybrid→cloud via Service"]["status"] == FAIL
    assert checks["gap cloud→hybrid via pod"]["status"] == PASS
    assert checks["gap hybrid→cloud via pod"]["status"] == PASS
    assert checks["route switched to the new leader's ENI"]["status"] == PASS


def test_the_lease_going_back_to_the_deleted_leaders_node_is_not_a_failover(lab_for):
    lab = lab_for(Scenario(same_node=True))
    assert lab.run("--observe", "5") == 1
    check = _checks(lab.report())["new leader elected"]
    assert check["status"] == FAIL and "not to the standby" in check["seen"]


# --- recorded timelines ----------------------------------------------------------------------

def _fixture(name: str) -> dict:
    return failover.analyse(read_events(FIXTURES / name)).to_json()


def test_recorded_healthy_failover_gives_exact_figures():
    """failover-healthy (jittered probers; started 2026-12-01 18:05, tests/rehearsal_evening.py;
    DELETE sent at 18:05:00.000000, deletionTimestamp
    18:05:30 with 30 s grace: the clocks agree). Read off probes.read, truncated to µs:
    cloud→hybrid svc ok 18:04:59.288646, FAIL 18:05:01.340591, FAIL 18:05:04.361525, ok
    18:05:05.416060 -> 6.127414 s; pod ok 18:04:59.303402, FAIL 02.342500, ok 18:05:04.371550
    -> 5.068148 s. hybrid→cloud svc ok 18:04:59.125004 ... ok 18:05:06.294097 -> 7.169093 s;
    pod ok 18:04:59.188517 ... ok 18:05:06.329462 -> 7.140945 s."""
    report = _fixture("failover-healthy")
    numbers = _numbers(report)
    assert numbers[GAP.format("cloud→hybrid via Service")] == 6.127
    assert numbers[GAP.format("cloud→hybrid via pod")] == 5.068
    assert numbers[GAP.format("hybrid→cloud via Service")] == 7.169
    assert numbers[GAP.format("hybrid→cloud via pod")] == 7.141
    # acquireTime 18:05:03.214567; the old holder's renewTime 18:04:59.400000.
    assert numbers[HANDOVER] == 3.215 and numbers[UNOWNED] == 3.815
    assert numbers[ROUTE] == 4.0 and numbers[VTEP] == 4.5
    assert report["passed"]
    notes = " ".join(report["notes"])
    assert "agrees with the API server's deletionTimestamp" in notes
    assert "within ±1.5 s" in notes


def test_the_handover_beside_aws_3_to_5_s_says_its_clock_bound():
    """The clock bound: the handover is the new acquireTime (a gateway node's clock) less the
    deletion moment, which is this machine's clock when it agrees with the API server's within
    ±1.5 s: the figure beside AWS's 3–5 s says so, in report.md and report.json alike."""
    healthy = {m["name"]: m for m in _fixture("failover-healthy")["measurements"]}[HANDOVER]
    assert "3–5 s" in healthy["reference"]
    assert "± 1.5 s: the deletion moment is this machine's clock" in healthy["note"]
    report = failover.analyse(read_events(FIXTURES / "failover-healthy"))
    [row] = [line for line in report.to_markdown().splitlines() if line.startswith(f"| {HANDOVER}")]
    assert "AWS documents 3–5 s" in row and "± 1.5 s" in row
    skewed = {m["name"]: m for m in _fixture("failover-skewed-clock")["measurements"]}[HANDOVER]
    assert "up to 1 s long: the deletion moment is the API server's deletionTimestamp" in skewed["note"]
    assert failover_moments.deletion_moment({"requested_at": "2026-12-01T09:00:00.400000Z"}).bound is None


def test_a_gap_is_shown_against_its_pass_limit_and_not_against_aws_3_to_5_s():
    """A healthy gap is 5–8 s (a prober turn is up to about 3 s while the path is down): beside
    "AWS documents 3–5 s" it reads as a miss. Its reference leads with the pass limit the check
    applies (failover's --threshold, 10 s by default) and says what AWS's figure times."""
    report = _fixture("failover-healthy")
    gaps = [m for m in report["measurements"] if m["name"].startswith(GAP.format(""))]
    assert len(gaps) == 4
    threshold = failover.DEFAULTS["threshold"]
    for gap in gaps:
        assert gap["value"] > 5 and gap["reference"].startswith(f"PASS ≤ {threshold:g} s"), gap
        assert "AWS documents" not in gap["reference"], gap
        assert "Lease handover" in gap["reference"], gap


def test_recorded_slow_standby_fails_the_gap_checks():
    """failover-slow-standby: the standby took the Lease 12.6 s after the deletion (acquireTime
    18:20:12.600000), the routes followed at 13.1 and 13.2 s (first seen by the 13.5 s poll).
    cloud→hybrid svc ok 18:19:59.288646 -> 18:20:14.505605 = 15.216959 s; pod 18:19:59.303402
    -> 18:20:13.459367 = 14.155965 s. hybrid→cloud svc 18:19:59.125004 -> 18:20:15.326588 =
    16.201584 s; pod 18:19:59.188517 -> 18:20:15.356803 = 16.168286 s."""
    report = _fixture("failover-slow-standby")
    numbers = _numbers(report)
    assert numbers[GAP.format("cloud→hybrid via Service")] == 15.217
    assert numbers[GAP.format("cloud→hybrid via pod")] == 14.156
    assert numbers[GAP.format("hybrid→cloud via Service")] == 16.202
    assert numbers[GAP.format("hybrid→cloud via pod")] == 16.168
    assert numbers[HANDOVER] == 12.6 and numbers[ROUTE] == 13.5 and numbers[VTEP] == 13.5
    checks = _checks(report)
    failed = sorted(n for n, c in checks.items() if c["status"] == FAIL)
    assert failed == ["gap cloud→hybrid via Service", "gap cloud→hybrid via pod",
                      "gap hybrid→cloud via Service", "gap hybrid→cloud via pod"]
    assert checks["gap cloud→hybrid via pod"]["seen"] == (
        "14.156 s without a successful probe, from 18:19:59.303 to 18:20:13.459 UTC: over 10 s")


def test_recorded_stuck_route_fails_the_route_check_and_the_open_gaps():
    """failover-route-stuck (--timeout 8 --observe 10): the second route table never left the
    old leader's ENI and nothing came back. The last lines are FAILs: cloud→hybrid svc ok
    18:29:59.288646, last svc FAIL 18:30:16.451692 -> at least 17.163046 s; pod ok
    18:29:59.303402, last pod FAIL 18:30:17.451763 -> 18.148361 s. hybrid→cloud svc
    18:29:59.125004 -> 18:30:16.294959 = 17.169955 s; pod 18:29:59.188517 -> 18:30:17.296929 =
    18.108412 s."""
    report = _fixture("failover-route-stuck")
    checks = _checks(report)
    route = checks["route switched to the new leader's ENI"]
    assert route["status"] == FAIL and "(the deleted leader's), active" in route["seen"]
    numbers = _numbers(report)
    assert numbers[GAP.format("cloud→hybrid via Service")] == 17.163
    assert numbers[GAP.format("cloud→hybrid via pod")] == 18.148
    assert numbers[GAP.format("hybrid→cloud via Service")] == 17.17
    assert numbers[GAP.format("hybrid→cloud via pod")] == 18.108
    assert numbers[ROUTE] is None
    for name in ("cloud→hybrid via Service", "hybrid→cloud via pod"):
        assert checks[f"gap {name}"]["status"] == FAIL
        assert "still failing when the observation ended: the last probe (18:30:1" in \
            checks[f"gap {name}"]["seen"]
    assert any(note.startswith("Gave up waiting after 8 s") for note in report["notes"])


def test_recorded_run_with_a_skewed_workstation_clock_measures_on_the_clusters():
    """failover-skewed-clock: this machine's clock ran 7 s behind the cluster's. The DELETE was
    sent at 18:40:00.000000 by ours; the API server answered deletionTimestamp 18:40:37 with a
    30 s grace: 18:40:07 on the cluster's clock. acquireTime 18:40:10.214567 -> 3.214567 s.
    cloud→hybrid svc ok 18:40:06.832414 -> 18:40:10.983163 = 4.150749 s; pod 18:40:06.875675 ->
    18:40:11.027861 = 4.152186 s. hybrid→cloud svc 18:40:06.859896 -> 18:40:13.052151 =
    6.192255 s; pod 18:40:06.902139 -> 18:40:11.995858 = 5.093719 s. The polls are on this
    machine's clock: the routes first seen 4.0 s after the DELETE was sent."""
    report = _fixture("failover-skewed-clock")
    numbers = _numbers(report)
    assert numbers[HANDOVER] == 3.215
    assert numbers[GAP.format("cloud→hybrid via Service")] == 4.151
    assert numbers[GAP.format("cloud→hybrid via pod")] == 4.152
    assert numbers[GAP.format("hybrid→cloud via Service")] == 6.192
    assert numbers[GAP.format("hybrid→cloud via pod")] == 5.094
    assert numbers[ROUTE] == 4.0 and numbers[VTEP] == 4.5
    assert "about 7 s behind the cluster's" in " ".join(report["notes"])
    assert report["passed"]


def test_recorded_refusal_is_not_a_measurement():
    report = _fixture("failover-refused-baseline")
    assert report["title"].endswith("not a measurement") and not report["passed"]
    assert report["measurements"] == []


# --- the pure parts ----------------------------------------------------------------------

def _probe(at: str, path: str, ok: bool) -> probe_logs.Probe:
    return probe_logs.Probe(parse_time(f"2026-12-01T{at}Z"), path, ok)


def test_an_outage_still_open_at_the_end_is_counted_to_the_last_probe():
    found = [_probe("09:00:00.0", "svc", True), _probe("09:00:01.0", "svc", True),
             _probe("09:00:03.0", "svc", False), _probe("09:00:09.5", "svc", False)]
    gap = failover_gaps.failover_gap(found, "svc", parse_time("2026-12-01T09:00:02Z"),
                                parse_time("2026-12-01T09:00:10Z"))
    assert gap.ongoing and gap.seconds == 8.5 and gap.failed == 2


def test_the_deletion_moment_comes_from_this_machine_when_the_clocks_agree():
    agree = failover_moments.deletion_moment({
        "requested_at": "2026-12-01T09:00:00.400000Z", "answered_at": "2026-12-01T09:00:00.450000Z",
        "deletion_timestamp": "2026-12-01T09:00:30Z", "grace_seconds": 30})
    assert agree.cluster == agree.local == parse_time("2026-12-01T09:00:00.400000Z")
    skewed = failover_moments.deletion_moment({
        "requested_at": "2026-12-01T09:00:00.400000Z", "answered_at": "2026-12-01T09:00:00.450000Z",
        "deletion_timestamp": "2026-12-01T08:59:55Z", "grace_seconds": 30})
    assert skewed.cluster == parse_time("2026-12-01T08:59:25Z")
    assert "ahead of" in skewed.source
    missing = failover_moments.deletion_moment({"requested_at": "2026-12-01T09:00:00.400000Z"})
    assert missing.offset == datetime.timedelta(0)


def test_the_baseline_needs_five_recent_successes_and_a_successful_latest_probe():
    until = parse_time("2026-12-01T09:00:20Z")
    since = until - datetime.timedelta(seconds=20)
    good = [_probe(f"09:00:{s:02d}.5", path, True) for s in range(10, 20) for path in ("svc", "pod")]
    assert failover.baseline_problems({"cloud→hybrid": (good, ""), "hybrid→cloud": (good, "")},
                                      since, until) == []
    last_failed = good + [_probe("09:00:19.9", "pod", False)]
    stale = [_probe(f"09:00:0{s}.5", path, True) for s in range(1, 8) for path in ("svc", "pod")]
    problems = failover.baseline_problems(
        {"cloud→hybrid": (last_failed, ""), "hybrid→cloud": (stale, "")}, since, until)
    assert problems == ["cloud→hybrid via pod: the latest probe (09:00:19.900) failed",
                        "hybrid→cloud via Service: the latest probe is 12.5 s old (is the prober "
                        "still running?)",
                        "hybrid→cloud via pod: the latest probe is 12.5 s old (is the prober "
                        "still running?)"]
    assert failover.baseline_problems({"cloud→hybrid": ([], "no prober-cloud pod in demo-gateway"),
                                       "hybrid→cloud": (good, "")}, since, until) == [
        "cloud→hybrid: no prober-cloud pod in demo-gateway"]


def test_the_interval_is_at_most_a_second():
    parser = cli.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["failover", "--interval", "2"])
    args = parser.parse_args(["failover"])
    assert (args.interval, args.observe, args.threshold, args.timeout) == (0.5, 30.0, 10.0, 60.0)


# --- recording the fixtures ------------------------------------------------------------------

#: The committed recordings: ``python -m tests.test_rehearse_failover`` made them (jittered
#: probers, so their figures are not round).
RECORDINGS = {
    "failover-healthy": (Scenario(), ()),
    "failover-slow-standby": (Scenario(lease_us=12_600_000, routes_us=(13_100_000, 13_200_000),
                                       vtep_us=13_300_000), ("--observe", "15")),
    "failover-route-stuck": (Scenario(routes_us=(3_700_000, None)), ("--timeout", "8",
                                                                     "--observe", "10")),
    "failover-skewed-clock": (Scenario(skew_us=7 * S), ("--observe", "15")),
    "failover-refused-baseline": (Scenario(broken=frozenset({("hybrid→cloud", "pod")})), ()),
}


def _jittered(scenario: Scenario) -> Scenario:
    import dataclasses

    return dataclasses.replace(scenario, probers=(
        Prober("prober-cloud", "cloud→hybrid", anchor_us=-500_000, ok_us=9_000, jitter_us=40_000,
               seed=11),
        Prober("prober-hybrid", "hybrid→cloud", anchor_us=-700_000, ok_us=28_000,
               jitter_us=40_000, seed=23)))


def record_fixtures(target: Path = FIXTURES, stack: str = rehearsal_evening.STACK,
                    started: Optional[dict[str, datetime.datetime]] = None) -> None:
    """Each recording as ``stack``'s run, started at ``started[name]`` (default: the
    rehearsal evening's): the simulated clock's origin T0 moves there, the scenario with it."""
    import tempfile

    started = started or rehearsal_evening.STARTED
    for name, (scenario, args) in RECORDINGS.items():
        with tempfile.TemporaryDirectory() as work, \
                mock.patch.dict(globals(), {"T0": started[name]}), \
                lab_session(_jittered(scenario), Path(work), stack_name=stack) as lab:
            lab.run(*args)
            destination = target / name
            destination.mkdir(parents=True, exist_ok=True)
            shutil.copy(lab.folder() / "events.jsonl", destination / "events.jsonl")


if __name__ == "__main__":
    record_fixtures()
