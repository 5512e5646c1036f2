"""`python -m rehearse verify gateway` against a planted lab: the Kubernetes API emulator
(tests/kube_emulator.py) for the cluster, moto in-process for EC2.

``Scene`` describes a healthy demo 1 lab — two gateway pods on two gateway nodes in two zones,
the Lease held by one of them, healthz, the pod route to the leader's primary ENI, the VTEP
config, Cilium's settings, the Pod Identity agent and both probers logging every second — and
each test breaks one thing before ``run`` plants it and runs the command through
``rehearse.cli.main``. A recorded run (tests/fixtures/rehearse/) replays to the same report.

The recordings are two ``Scene`` runs against the emulator and moto (healthy, and with the
route on the other gateway's ENI). After changing the analysis on purpose,
``python -m rehearse report tests/fixtures/rehearse/<name>`` rewrites their expected
report.md and report.json: review the diff.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
import json
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from moto import mock_aws
from moto.ec2.models.route_tables import Route

from rehearse import cli
from rehearse.run import execute as run_execute
from rehearse.commands.verify_gateway import collect as gateway
from rehearse.commands.verify_gateway import kinds as gateway_kinds
from rehearse.run import record
from rehearse.lab.connection import Kube
from rehearse.run.context import Context
from rehearse.run.record import iso, read_events, utc_now
from tests import rehearsal_evening
from tests.offline_guard import forbid_non_loopback
from tests.kube_emulator import (CONFIGMAPS, DAEMONSETS, LEASES, NODES, PODS, VTEP_CONFIGS,
                                 VTEP_CONFIGS_V2ALPHA1)
from tests.kube_emulator import emulator  # noqa: F401 (fixture)

REGION = "ap-northeast-2"
VPC_CIDR = "10.0.0.0/16"
POD_CIDR = "172.17.0.0/16"
GW_NS = "eks-hybrid-nodes-gateway"
DEMO_NS = "demo-gateway"
LEASE = "hybrid-gateway-leader"
GW_LABELS = {"app.kubernetes.io/name": "eks-hybrid-nodes-gateway",
             "app.kubernetes.io/instance": "eks-hybrid-nodes-gateway"}
FIXTURES = Path(__file__).parent / "fixtures" / "rehearse"


@pytest.fixture(scope="module")
def ec2_client():
    """One client for the module, used only inside ``mock_aws``; its session shares the other
    sessions' botocore data loader (a loader of its own parses the EC2 model again, 0.1-0.2 s)."""
    from rehearse.run.context import boto3_session

    return boto3_session().client("ec2", region_name=REGION, aws_access_key_id="testing",
                                  aws_secret_access_key="testing")


#: The command's environment: moto's fake credentials and region.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION,
           # Loading moto's catalogue of public AMIs takes a second or two.
           "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}


@dataclass
class World:
    """The lab's EC2 side as planted once for the module: the three nodes, the gateways' route
    table, and what a test may change there (the pod route, network interfaces)."""
    nodes: list["Node"]
    route_table: str
    routes: frozenset
    enis: frozenset


@pytest.fixture(scope="module")
def ec2_world(ec2_client):
    """EC2 in moto, in-process, planted once for the module: the command only reads EC2, and
    each test's own changes (the pod route, an interface it made or deleted) are undone after
    it (``ec2``), so every test starts from the same world a fresh mock would give it
    (planting it costs ~40 ms a test: a VPC, three subnets, three instances, a table)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in AWS_ENV.items():
            patch.setenv(key, value)
        with mock_aws(config={"core": {"mock_credentials": False, "reset_boto3_session": False}}):
            nodes, route_table = _plant_ec2(ec2_client)
            routes = _backend().route_tables[route_table].routes
            yield World(nodes, route_table, frozenset(r.id for r in routes), frozenset(_backend().enis))


def _backend() -> Any:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    return ec2_backends[DEFAULT_ACCOUNT_ID][REGION]


@pytest.fixture
def ec2(monkeypatch, ec2_world, ec2_client):
    """The module's moto EC2 (nothing leaves the machine); the command gets this client. After
    the test, the routes and interfaces it added are removed again (the world is checked to be
    the planted one: a test that changed something else fails here)."""
    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)

    def clients(region: str, account=None):
        assert region == REGION

        def client(service: str):
            assert service == "ec2", f"the command asked for {service}"
            return ec2_client

        return client

    monkeypatch.setattr("rehearse.run.context.boto3_clients", clients)
    yield ec2_client
    backend, world = _backend(), ec2_world
    table = backend.route_tables[world.route_table]
    for route in table.routes:
        if route.id not in world.routes:
            ec2_client.delete_route(RouteTableId=world.route_table,
                                    DestinationCidrBlock=route.destination_cidr_block)
    for eni in set(backend.enis) - world.enis:
        ec2_client.delete_network_interface(NetworkInterfaceId=eni)
    assert ({r.id for r in table.routes}, set(backend.enis)) == (world.routes, world.enis), \
        "the test changed EC2 beyond the pod route and its own interfaces"


@pytest.fixture
def blackholes(monkeypatch) -> set[str]:
    """ENI ids whose routes moto reports as ``blackhole`` (moto reports every route active;
    AWS does so once the target interface is deleted)."""
    gone: set[str] = set()
    monkeypatch.setattr(Route, "state", property(
        lambda route: "blackhole" if route.network_interface_id in gone else "active"))
    return gone


@dataclass
class Node:
    name: str
    zone: str
    ip: str
    instance: str
    eni: str


def _plant_ec2(ec2: Any) -> tuple[list[Node], str]:
    """Three nodes in their own subnets (two gateways in two zones, a system node) and the
    gateways' route table, without the pod route (``Scene.plant`` adds it)."""
    vpc = ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
    ami = "ami-0c9c942bd7bf113a2"  # moto does not check it
    nodes = []
    for index, zone in enumerate(("a", "c", "a")):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{index + 1}.0/24",
                                   AvailabilityZone=f"{REGION}{zone}")["Subnet"]["SubnetId"]
        instance = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, SubnetId=subnet,
                                     InstanceType="m6i.large")["Instances"][0]
        eni = next(n["NetworkInterfaceId"] for n in instance["NetworkInterfaces"]
                   if n["Attachment"]["DeviceIndex"] == 0)
        nodes.append(Node(instance["PrivateDnsName"], f"{REGION}{zone}",
                          instance["PrivateIpAddress"], instance["InstanceId"], eni))
    return nodes, ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]


@dataclass
class Scene:
    """A healthy lab; tests change the fields, then ``run`` plants it and runs the command."""
    emulator: Any
    ec2: Any
    tmp: Path
    monkeypatch: Any
    blackholes: Optional[set] = None
    gateways: list[Node] = field(default_factory=list)
    system: Optional[Node] = None
    route_table: str = ""
    #: What the Lease's holder names (default: the first gateway node), and the route's ENI.
    holder: Optional[str] = None
    route_eni: Optional[str] = None
    route: bool = True
    provider_ids: bool = True
    healthz: int = 200
    vtep: Optional[str] = "v2"
    vtep_ip: Optional[str] = None
    cilium: dict = field(default_factory=lambda: {"enable-vtep": "true", "enable-l7-proxy": "false"})
    agent_ready: int = 3
    #: direction -> (path, seconds ago) -> "ok" | "FAIL"
    prober_result: Callable[[str, str, int], str] = lambda direction, path, ago: "ok"
    #: What each gateway replica's metrics say (hybrid_gateway_leader_is_active), by index:
    #: default the real gateway's, 1 on the leader only.
    leader_gauges: Optional[list[int]] = None
    #: How long before the run the leader last renewed the Lease (it renews about every second).
    renewed_ago: float = 1.0
    metrics_refused: bool = False
    #: direction -> how the API server refuses that prober's log: ("kubelet",) for a kubelet it
    #: cannot dial, or (code, reason, message).
    log_refusals: dict = field(default_factory=dict)
    layers: list[str] = field(default_factory=lambda: ["network", "cluster", "hybrid", "gateway",
                                                       "karpenter", "demo"])
    pods: dict[str, dict] = field(default_factory=dict)
    #: The stack (the outputs file's name), and when the run starts (default: now); the
    #: lab's clock, and the tool's, run on from there.
    stack: str = "lab"
    started: Optional[datetime.datetime] = None
    now: Callable[[], datetime.datetime] = utc_now

    @property
    def leader(self) -> Node:
        return self.gateways[0]

    def plant_ec2(self, world: World) -> None:
        """This test's copy of the module's nodes (a test may move one to another zone)."""
        nodes = [dataclasses.replace(node) for node in world.nodes]
        self.gateways, self.system = nodes[:2], nodes[2]
        self.route_table = world.route_table

    def stale_eni(self) -> str:
        """An interface that the route may target and that is then deleted (a replaced node)."""
        subnet = self.ec2.describe_subnets()["Subnets"][0]["SubnetId"]
        eni = self.ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
        return eni

    def plant(self) -> None:
        e, now = self.emulator, self.now()
        # The API server's clock stands still at the planting: the Lease's age (Date - renewTime)
        # is then exactly renewed_ago, however long a loaded machine takes to reach the read.
        e.server_clock = lambda: now
        leader = self.leader
        target = self.route_eni or leader.eni
        if self.route:
            self.ec2.create_route(RouteTableId=self.route_table, DestinationCidrBlock=POD_CIDR,
                                  NetworkInterfaceId=target)
        if self.blackholes is not None and target in self.blackholes:
            self.ec2.delete_network_interface(NetworkInterfaceId=target)

        for node in [*self.gateways, self.system]:
            labels = {"topology.kubernetes.io/zone": node.zone, "kubernetes.io/hostname": node.name}
            if node in self.gateways:
                labels["hybrid-gateway-node"] = "true"
            e.put(NODES, None, node.name, {
                "metadata": {"labels": labels},
                "spec": {"providerID": f"aws:///{node.zone}/{node.instance}"} if self.provider_ids else {},
                "status": {"addresses": [{"type": "InternalIP", "address": node.ip},
                                         {"type": "Hostname", "address": node.name}],
                           "conditions": [{"type": "Ready", "status": "True"}]}})
        e.put(NODES, None, "mi-0a1b2c3d4e5f60001", {
            "metadata": {"labels": {"eks.amazonaws.com/compute-type": "hybrid"}},
            "spec": {"providerID": "eks-hybrid:///ap-northeast-2/lab/mi-0a1b2c3d4e5f60001"},
            "status": {"addresses": [{"type": "InternalIP", "address": "172.16.0.10"}]}})

        for index, node in enumerate(self.gateways):
            name = f"eks-hybrid-nodes-gateway-6c8d9f7b5-{'xk2lp' if index == 0 else 'q9wzt'}"
            self.pods[node.name] = self._pod(GW_NS, name, node, GW_LABELS, "gateway", host_network=True)
            e.proxy(GW_NS, name, 8088, "healthz",
                    b"ok" if node is not leader or self.healthz == 200 else b"[-]vxlan failed",
                    status=200 if node is not leader else self.healthz)
            gauges = self.leader_gauges or [1 if n is leader else 0 for n in self.gateways]
            if self.metrics_refused and node is leader:
                # The API server's pod proxy cannot open the port on the node.
                e.proxy(GW_NS, name, 10080, "metrics", b"Error trying to reach service: dial tcp "
                        + node.ip.encode() + b":10080: connect: connection refused", status=503)
            else:
                e.gateway_metrics(GW_NS, name, leader=bool(gauges[index]))

        holder = self.holder if self.holder is not None else leader.name
        e.put(LEASES, GW_NS, LEASE, {"spec": {
            "holderIdentity": f"{holder}_{uuid.UUID(int=7)}", "leaseDurationSeconds": 3,
            "acquireTime": iso(now - datetime.timedelta(minutes=42)),
            "renewTime": iso(now - datetime.timedelta(seconds=self.renewed_ago)),
            "leaseTransitions": 1}})

        vtep = {"spec": {"endpoints" if self.vtep == "v2" else "vtepEndpoints": [{
            "name": "vpc-gateway", "tunnelEndpoint": self.vtep_ip or leader.ip, "cidr": VPC_CIDR,
            "mac": "02:4f:1a:2b:3c:4d"}]}}
        if self.vtep == "v2":
            e.put(VTEP_CONFIGS, None, "hybrid-gateway", vtep)
        elif self.vtep == "v2alpha1":
            e.put(VTEP_CONFIGS_V2ALPHA1, None, "hybrid-gateway", vtep)

        e.put(CONFIGMAPS, "kube-system", "cilium-config", {"data": {
            **self.cilium, "routing-mode": "tunnel", "tunnel-protocol": "vxlan"}})
        e.put(DAEMONSETS, "kube-system", "eks-pod-identity-agent", {
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "eks-pod-identity-agent"}},
                     "template": {"metadata": {"labels": {"app.kubernetes.io/name": "eks-pod-identity-agent"}},
                                  "spec": {"containers": [{"name": "eks-pod-identity-agent"}]}}},
            "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberMisscheduled": 0,
                       "numberReady": self.agent_ready, "numberAvailable": self.agent_ready}})

        for direction, prober, node, suffix in (("cloudToHybrid", "prober-cloud", self.system, "7b9c4"),
                                                ("hybridToCloud", "prober-hybrid", None, "5d2f8")):
            pod = f"{prober}-6f5d8c7b9-{suffix}"
            self._pod(DEMO_NS, pod, node, {"app": prober}, "prober")
            lines = []
            for ago in range(45, 0, -1):
                at = now - datetime.timedelta(seconds=ago)
                for offset, path in ((0.31, "svc"), (0.52, "pod")):
                    moment = at + datetime.timedelta(seconds=offset)
                    stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"
                    lines.append(f"{stamp} {moment:%H:%M:%S} {path} "
                                 f"{self.prober_result(direction, path, ago)}")
            refusal = self.log_refusals.get(direction)
            if refusal == ("kubelet",):
                e.unreachable_kubelet(DEMO_NS, pod, "prober", node.ip if node else "172.16.0.10")
            elif refusal:
                e.log_failure(DEMO_NS, pod, *refusal)
            else:
                e.log(DEMO_NS, pod, "\n".join(lines) + "\n")

    def _pod(self, namespace: str, name: str, node: Optional[Node], labels: dict, container: str,
             host_network: bool = False) -> dict:
        node_name = node.name if node else "mi-0a1b2c3d4e5f60001"
        return self.emulator.put(PODS, namespace, name, {
            "metadata": {"labels": labels},
            "spec": {"nodeName": node_name, "hostNetwork": host_network,
                     "containers": [{"name": container, "image": "example"}]},
            "status": {"phase": "Running", "hostIP": node.ip if node else "172.16.0.10",
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": container, "ready": True, "restartCount": 0,
                                              "image": "example", "imageID": "example"}]}})

    def outputs_file(self) -> Path:
        path = self.tmp / f"{self.stack}.json"
        path.write_text(json.dumps({
            "region": REGION, "kubeconfig": "{}", "clusterName": "eks-hybrid-lab",
            "hybridPodCidr": POD_CIDR, "cloudVpcCidr": VPC_CIDR, "gatewayNamespace": GW_NS,
            "gatewayLeaseName": LEASE, "gatewayRouteTableIds": [self.route_table],
            "gatewayPodSelector": "app.kubernetes.io/name=eks-hybrid-nodes-gateway",
            "gatewayNodeSelector": "hybrid-gateway-node=true",
            "demo1": {"namespace": DEMO_NS,
                      "probers": {"cloudToHybrid": "prober-cloud", "hybridToCloud": "prober-hybrid"}},
            "layers": self.layers}))
        return path

    def run(self, *extra: str) -> "Run":
        if self.started is not None:
            begin, started = utc_now(), self.started
            self.now = lambda: started + (utc_now() - begin)
            self.monkeypatch.setattr("rehearse.run.context.Context",
                                     functools.partial(Context, clock=self.now))
        self.plant()
        self.monkeypatch.setattr(run_execute, "_connect", lambda args, outputs: Kube.connect(self.emulator.endpoint))
        out = self.tmp / "runs"
        code = cli.main(["verify", "gateway", "--outputs", str(self.outputs_file()), "--out", str(out),
                         *extra])
        folders = sorted(out.iterdir()) if out.exists() else []
        return Run(code, folders[-1] if folders else None)


@dataclass
class Run:
    code: int
    folder: Optional[Path]

    @property
    def report(self) -> dict:
        return json.loads((self.folder / "report.json").read_text())

    @property
    def markdown(self) -> str:
        return (self.folder / "report.md").read_text()

    def check(self, name: str) -> dict:
        [found] = [c for c in self.report["checks"] if c["name"] == name]
        return found

    def statuses(self) -> dict[str, str]:
        return {c["name"]: c["status"] for c in self.report["checks"]}


@pytest.fixture
def loopback_only(monkeypatch):
    """Any connection to an address other than this machine's fails the test."""
    forbid_non_loopback(monkeypatch)


@pytest.fixture
def scene(emulator, ec2, ec2_world, tmp_path, monkeypatch, blackholes, loopback_only):  # noqa: F811 (fixture)
    planted = Scene(emulator, ec2, tmp_path, monkeypatch, blackholes)
    planted.plant_ec2(ec2_world)
    return planted


ALL_CHECKS = [gateway_kinds.CHECK_PODS, gateway_kinds.CHECK_LEASE, gateway_kinds.CHECK_HEALTH,
              gateway_kinds.CHECK_LEADERSHIP, gateway_kinds.CHECK_ROUTE,
              gateway_kinds.CHECK_VTEP, gateway_kinds.CHECK_TRAFFIC["cloudToHybrid"],
              gateway_kinds.CHECK_TRAFFIC["hybridToCloud"], gateway_kinds.CHECK_CILIUM, gateway_kinds.CHECK_AGENT]


def only_failing(run: Run, *names: str, skipped: tuple[str, ...] = ()) -> None:
    """Exit 1, exactly ``names`` FAIL, ``skipped`` SKIP and every other check PASSes."""
    assert run.code == 1
    expected = {n: "FAIL" if n in names else "SKIP" if n in skipped else "PASS" for n in ALL_CHECKS}
    assert run.statuses() == expected


# --- a healthy lab ----------------------------------------------------------------------------

def test_a_healthy_lab_passes_every_check(scene, emulator, capsys):  # noqa: F811
    run = scene.run()
    assert run.code == 0, capsys.readouterr()
    assert run.statuses() == {name: "PASS" for name in ALL_CHECKS}
    leader, other = scene.gateways
    route = run.check(gateway_kinds.CHECK_ROUTE)["seen"]
    assert leader.eni in route and f"node {leader.name}" in route
    assert leader.ip in run.check(gateway_kinds.CHECK_VTEP)["seen"]
    assert "45 ok, 0 FAIL" in run.check(gateway_kinds.CHECK_TRAFFIC["cloudToHybrid"])["seen"]
    # The leader's health went through the API server's pod proxy, no port-forward.
    pod = scene.pods[leader.name]["metadata"]["name"]
    assert ("GET", f"/api/v1/namespaces/{GW_NS}/pods/{pod}:8088/proxy/healthz") in emulator.requests()
    # The selectors went to the server too (the emulator, like the API server, applies them).
    queries = emulator.do(lambda kmock: [r.url.query_string for r in kmock._requests])
    assert "labelSelector=app.kubernetes.io/name%3Deks-hybrid-nodes-gateway" in queries
    assert "labelSelector=app%3Dprober-hybrid" in queries
    assert any("timestamps=true" in q and "sinceSeconds=61" in q for q in queries)
    # The instances were found by the providerID's instance id.
    events = read_events(run.folder)
    lookups = {e["node"]: e["lookup"] for e in events if e["kind"] == gateway.INSTANCE}
    assert lookups[leader.name] == {"by": "instance-id (spec.providerID)", "value": leader.instance}
    assert "PASS" in capsys.readouterr().out


def test_a_node_without_a_provider_id_is_found_by_its_internal_ip(scene):
    scene.provider_ids = False
    run = scene.run()
    assert run.code == 0
    lookups = {e["node"]: e for e in read_events(run.folder) if e["kind"] == gateway.INSTANCE}
    leader = lookups[scene.leader.name]
    assert leader["lookup"] == {"by": "private-ip-address (InternalIP)", "value": scene.leader.ip}
    assert leader["instanceId"] == scene.leader.instance


def test_the_report_is_one_a_presenter_can_follow(scene):
    run = scene.run()
    md = run.markdown
    leader = scene.leader
    pod = scene.pods[leader.name]["metadata"]["name"]
    for command in (
            f"kubectl -n {GW_NS} get pods -l app.kubernetes.io/name=eks-hybrid-nodes-gateway -o wide",
            f"kubectl -n {GW_NS} get lease {LEASE} -o jsonpath='{{.spec.holderIdentity}}'",
            f"kubectl get --raw \"/api/v1/namespaces/{GW_NS}/pods/{pod}:8088/proxy/healthz\"",
            f"aws ec2 describe-route-tables --region {REGION} --route-table-ids {scene.route_table}",
            f"--instance-ids {leader.instance}",
            "kubectl get ciliumvtepconfig hybrid-gateway -o yaml",
            f"kubectl -n {DEMO_NS} logs deploy/prober-cloud --timestamps --since=60s",
            f"kubectl -n {DEMO_NS} logs deploy/prober-hybrid --timestamps --since=60s",
            'grep -E "enable-vtep|enable-l7-proxy"',
            "kubectl -n kube-system get daemonset eks-pod-identity-agent"):
        assert command in md, command
    assert md.count("See it yourself:") == len(ALL_CHECKS)
    assert "not a pod name" in md and f"delete pod {pod}" in md


def test_a_recorded_run_replays_to_the_same_report(scene, tmp_path):
    run = scene.run()
    before = run.markdown, run.report
    assert cli.main(["report", str(run.folder)]) == 0
    assert (run.markdown, run.report) == before


@pytest.mark.parametrize("recording, code", [("gateway-healthy", 0), ("gateway-route-elsewhere", 1)])
def test_a_committed_recording_replays_to_its_committed_report(recording, code, tmp_path):
    folder = tmp_path / recording
    shutil.copytree(FIXTURES / recording, folder)
    (folder / "report.md").unlink()
    (folder / "report.json").unlink()
    assert cli.main(["report", str(folder)]) == code
    assert (folder / "report.md").read_text() == (FIXTURES / recording / "report.md").read_text()
    assert (folder / "report.json").read_text() == (FIXTURES / recording / "report.json").read_text()


# --- each check broken in turn ----------------------------------------------------------------

def test_a_route_to_another_nodes_eni_fails_the_route_check(scene):
    other = scene.gateways[1]
    scene.route_eni = other.eni
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_ROUTE)
    check = run.check(gateway_kinds.CHECK_ROUTE)
    assert f"{other.eni} (node {other.name})" in check["seen"]
    assert f"not the leader's primary ENI {scene.leader.eni}" in check["seen"]
    assert "delete pod" in check["fix"]


def test_a_blackhole_route_fails_the_route_check(scene, blackholes):
    stale = scene.stale_eni()
    blackholes.add(stale)
    scene.route_eni = stale
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_ROUTE)
    check = run.check(gateway_kinds.CHECK_ROUTE)
    assert "blackhole" in check["seen"] and "no longer exists" in check["fix"]


def test_a_missing_route_fails_the_route_check(scene):
    scene.route = False
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_ROUTE)
    assert f"no route for {POD_CIDR}" in run.check(gateway_kinds.CHECK_ROUTE)["seen"]


@pytest.mark.parametrize("holder", ["system", "gone", "pod name"])
def test_a_holder_whose_node_runs_no_gateway_pod_fails_the_lease_check(scene, holder):
    if holder == "system":
        scene.holder = scene.system.name
    elif holder == "gone":
        scene.holder = "ip-10-0-9-9.ap-northeast-2.compute.internal"
    else:
        scene.holder = "eks-hybrid-nodes-gateway-6c8d9f7b5-xk2lp"
    run = scene.run()
    # Without a leader, what depends on knowing it cannot be judged.
    only_failing(run, gateway_kinds.CHECK_LEASE,
                 skipped=(gateway_kinds.CHECK_LEADERSHIP, gateway_kinds.CHECK_ROUTE, gateway_kinds.CHECK_VTEP))
    seen = run.check(gateway_kinds.CHECK_LEASE)["seen"]
    if holder == "system":
        assert f"no gateway pod runs on {scene.system.name}" in seen
    elif holder == "gone":
        assert "has no node" in seen
    else:
        assert "<node name>_<uuid>" in seen or "no node" in seen


def test_healthz_500_fails_the_health_check(scene):
    scene.healthz = 500
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_HEALTH)
    assert "HTTP 500" in run.check(gateway_kinds.CHECK_HEALTH)["seen"]


def test_no_vtep_config_fails_the_vtep_check(scene):
    scene.vtep = None
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_VTEP)
    assert "no CiliumVTEPConfig hybrid-gateway (asked cilium.io v2, v2alpha1)" in run.check(
        gateway_kinds.CHECK_VTEP)["seen"]


def test_a_vtep_config_naming_the_other_gateway_fails(scene):
    scene.vtep_ip = scene.gateways[1].ip
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_VTEP)
    assert f"(it is {scene.gateways[1].name}'s)" in run.check(gateway_kinds.CHECK_VTEP)["seen"]


def test_the_vtep_config_is_read_at_v2alpha1_when_v2_is_not_served(scene):
    scene.vtep = "v2alpha1"
    run = scene.run()
    assert run.code == 0
    assert "cilium.io/v2alpha1" in run.check(gateway_kinds.CHECK_VTEP)["seen"]


@pytest.mark.parametrize("path, hint", [("pod", "VTEP"), ("svc", "node IP")])
def test_a_prober_failing_one_way_fails_that_direction_only(scene, path, hint):
    scene.prober_result = lambda direction, p, ago: "FAIL" if (
        direction == "hybridToCloud" and p == path and ago <= 8) else "ok"
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_TRAFFIC["hybridToCloud"])
    check = run.check(gateway_kinds.CHECK_TRAFFIC["hybridToCloud"])
    assert "8 FAIL" in check["seen"] and hint in check["fix"]


def test_a_cloud_prober_failing_only_through_the_service_points_at_snat(scene):
    scene.prober_result = lambda direction, p, ago: "FAIL" if (
        direction == "cloudToHybrid" and p == "svc") else "ok"
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_TRAFFIC["cloudToHybrid"])
    assert f"AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS={POD_CIDR}" in run.check(
        gateway_kinds.CHECK_TRAFFIC["cloudToHybrid"])["fix"]


def test_a_failure_older_than_the_window_is_forgiven(scene):
    scene.prober_result = lambda direction, p, ago: "FAIL" if ago > 40 else "ok"
    assert scene.run("--window", "30").code == 0


@pytest.mark.parametrize("cilium, problem", [
    ({"enable-vtep": "false", "enable-l7-proxy": "false"}, "VTEP is not on"),
    ({"enable-vtep": "true"}, "the L7 proxy is not off"),
])
def test_vtep_off_or_l7_proxy_on_fails_the_cilium_check(scene, cilium, problem):
    scene.cilium = cilium
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_CILIUM)
    assert problem in run.check(gateway_kinds.CHECK_CILIUM)["seen"]


def test_a_pod_identity_agent_not_ready_fails(scene):
    scene.agent_ready = 2
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_AGENT)
    assert run.check(gateway_kinds.CHECK_AGENT)["seen"] == "2 of 3 pods ready"


def test_gateway_pods_in_one_zone_fail_the_pods_check(scene):
    scene.gateways[1].zone = scene.gateways[0].zone
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_PODS)
    assert "1 zone, not 2" in run.check(gateway_kinds.CHECK_PODS)["seen"]


def test_a_stack_without_the_demo_layer_cannot_be_verified(scene, capsys):
    scene.layers = ["network", "cluster", "hybrid", "gateway"]
    run = scene.run()
    assert run.code == 2
    err = capsys.readouterr().err.strip()
    # Read from --outputs: the file lacks the layer, and is named (a file is not a stack).
    assert err.startswith(f"error: the outputs file {scene.tmp / 'lab.json'} records no demo "
                          "layer") and "\n" not in err


# --- the Lease's age and the gateway's own word on leadership (docs/gateway.md#metrics) ---

def test_a_lease_not_renewed_for_ten_minutes_fails_the_lease_check(scene):
    """The gateway's Lease lasts 3 s and its leader renews it about every second
    (aws/eks-hybrid-nodes-gateway cmd/gateway/main.go): ten minutes without a renewal means
    nobody leads, whatever holder it still names."""
    scene.renewed_ago = 600
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_LEASE,
                 skipped=(gateway_kinds.CHECK_LEADERSHIP, gateway_kinds.CHECK_ROUTE, gateway_kinds.CHECK_VTEP))
    check = run.check(gateway_kinds.CHECK_LEASE)
    assert "by the API server's clock, its Date header" in check["seen"]
    assert "longer than the Lease's 3 s" in check["seen"] and "no gateway replica is leading" in check["seen"]
    assert "delete pods -l app.kubernetes.io/name=eks-hybrid-nodes-gateway" in check["fix"]


def test_a_lease_renewed_within_its_duration_passes(scene):
    scene.renewed_ago = 2.0
    run = scene.run()
    assert run.code == 0
    assert "renewed at least" in run.check(gateway_kinds.CHECK_LEASE)["seen"]


def with_lease(events: list[dict], **changes) -> list[dict]:
    changed = copy.deepcopy(events)
    for event in changed:
        if event["kind"] == gateway.LEASE:
            event.update(changes)
    return changed


def lease_status(events: list[dict]) -> Any:
    return {c.name: c for c in gateway.analyse(events).checks}[gateway_kinds.CHECK_LEASE]


def test_the_lease_age_is_judged_by_the_api_servers_clock_not_this_machines():
    events = recorded()
    [lease] = [e for e in events if e["kind"] == gateway.LEASE]
    renewed = datetime.datetime.fromisoformat(lease["renewTime"].replace("Z", "+00:00"))
    http = lambda moment: moment.strftime("%a, %d %b %Y %H:%M:%S GMT")  # noqa: E731
    # This machine's clock runs 10 minutes ahead: the server's Date says 1 s, which passes.
    ahead = with_lease(events, at=iso(renewed + datetime.timedelta(minutes=10)),
                       serverDate=http(renewed + datetime.timedelta(seconds=1)))
    check = lease_status(ahead)
    assert check.status == "PASS"
    assert re.search(r"this machine's clock read \+(599|600)\.\d s from it", check.seen), check.seen
    # This machine's clock agrees with the lease, but the server's says 10 minutes later.
    stale = with_lease(events, at=iso(renewed + datetime.timedelta(seconds=1)),
                       serverDate=http(renewed + datetime.timedelta(minutes=10)))
    assert lease_status(stale).status == "FAIL"
    # No Date header: this machine's clock is all there is, and the report says so.
    local = with_lease(events, at=iso(renewed + datetime.timedelta(minutes=10)), serverDate=None)
    check = lease_status(local)
    assert check.status == "FAIL" and "by this machine's clock" in check.seen


def test_healthz_answers_200_on_the_standby_too_and_is_its_own_check(scene, emulator):  # noqa: F811
    run = scene.run()
    check = run.check(gateway_kinds.CHECK_HEALTH)
    for node in scene.gateways:
        pod = scene.pods[node.name]["metadata"]["name"]
        assert f"{pod} on {node.name}: HTTP 200" in check["seen"]
        assert ("GET", f"/api/v1/namespaces/{GW_NS}/pods/{pod}:8088/proxy/healthz") in emulator.requests()


def test_the_holder_and_only_the_holder_says_it_leads(scene, emulator):  # noqa: F811
    run = scene.run()
    check = run.check(gateway_kinds.CHECK_LEADERSHIP)
    assert check["status"] == "PASS"
    leader, standby = (scene.pods[n.name]["metadata"]["name"] for n in scene.gateways)
    assert f"{leader} (the holder): hybrid_gateway_leader_is_active 1" in check["seen"]
    assert f"{standby} (standby): hybrid_gateway_leader_is_active 0" in check["seen"]
    # Read through the API server's pod proxy, on the gateway's metrics port.
    assert ("GET", f"/api/v1/namespaces/{GW_NS}/pods/{standby}:10080/proxy/metrics") in emulator.requests()


@pytest.mark.parametrize("gauges, problem", [
    ([0, 0], "is not running the leader's setup"),
    ([1, 1], "says it leads: two gateways"),
    ([0, 1], "says it leads"),
])
def test_a_holder_whose_gateway_does_not_say_it_leads_fails(scene, gauges, problem):
    """Healthz 200 on both replicas, a fresh Lease: only the metrics show who really leads."""
    scene.leader_gauges = gauges
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_LEADERSHIP)
    assert problem in run.check(gateway_kinds.CHECK_LEADERSHIP)["seen"]


def test_metrics_the_proxy_cannot_read_fail_the_leadership_check(scene):
    scene.metrics_refused = True
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_LEADERSHIP)
    assert "answered HTTP 503" in run.check(gateway_kinds.CHECK_LEADERSHIP)["seen"]


# --- a refused log request is a finding, not a traceback ------------------------------------

def test_a_hybrid_kubelet_the_api_server_cannot_dial_is_named_with_the_fix(scene, capsys):
    scene.log_refusals = {"hybridToCloud": ("kubelet",)}
    run = scene.run()
    assert "Traceback" not in capsys.readouterr().err
    only_failing(run, gateway_kinds.CHECK_TRAFFIC["hybridToCloud"])
    check = run.check(gateway_kinds.CHECK_TRAFFIC["hybridToCloud"])
    assert "the API server could not reach the kubelet on the hybrid node mi-0a1b2c3d4e5f60001" in check["seen"]
    assert "HTTP 500" in check["seen"] and "dial tcp 172.16.0.10:10250" in check["seen"]
    assert "check TCP 10250 from the cluster to the remote node network" in check["fix"]


@pytest.mark.parametrize("refusal, meaning", [
    ((400, "BadRequest", 'container "prober" in pod "prober-cloud-6f5d8c7b9-7b9c4" is waiting to '
      "start: ContainerCreating"), "its container has not started yet"),
    ((404, "NotFound", 'pods "prober-cloud-6f5d8c7b9-7b9c4" not found'), "the pod went away"),
])
def test_a_log_refused_with_a_status_is_reported_in_the_check(scene, refusal, meaning):
    scene.log_refusals = {"cloudToHybrid": refusal}
    run = scene.run()
    only_failing(run, gateway_kinds.CHECK_TRAFFIC["cloudToHybrid"])
    check = run.check(gateway_kinds.CHECK_TRAFFIC["cloudToHybrid"])
    assert meaning in check["seen"] and f"HTTP {refusal[0]} {refusal[1]}" in check["seen"]


@pytest.mark.skipif(not __import__("os").environ.get("RECORD_GATEWAY"),
                    reason="records tests/fixtures/rehearse/gateway-* when RECORD_GATEWAY=1")
@pytest.mark.parametrize("recording", ["gateway-healthy", "gateway-route-elsewhere"])
def test_record_the_committed_runs(scene, recording):
    scene.stack, scene.started = rehearsal_evening.STACK, rehearsal_evening.STARTED[recording]
    if recording == "gateway-route-elsewhere":
        scene.route_eni = scene.gateways[1].eni
    run = scene.run()
    target = FIXTURES / recording
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(run.folder, target)


# --- a run that stops part-way keeps its folder ----------------------------------------------

def test_ctrl_c_in_the_middle_keeps_the_folder_and_says_what_was_done(scene, monkeypatch, capsys):
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gateway, "_collect_route_tables", interrupted)
    run = scene.run()
    err = capsys.readouterr().err
    assert run.code == 1 and "Traceback" not in err
    kinds = [e["kind"] for e in read_events(run.folder)]
    assert kinds[-1] == "run.interrupted" and gateway.LEASE in kinds and gateway.HEALTHZ in kinds
    check = run.check("run completed")
    assert check["status"] == "FAIL"
    assert check["seen"].startswith("interrupted (Ctrl-C)")
    assert "during “reading the gateway's route tables and nodes in EC2”" in check["seen"]
    notes = run.report["notes"]
    assert any(n.startswith("Done: reading the gateway in eks-hybrid-nodes-gateway. Not finished: "
                            "reading the gateway's route tables") for n in notes)
    # What was read before the interrupt is still judged; what was not says so.
    assert run.check(gateway_kinds.CHECK_LEASE)["status"] == "PASS"
    route = run.check(gateway_kinds.CHECK_ROUTE)
    assert route["status"] == "NOT READ" and not route["fix"]
    assert route["seen"] == "not read: the run was interrupted before reading the route tables"
    # The folder replays to the same report.
    before = run.markdown
    assert cli.main(["report", str(run.folder)]) == 1
    assert run.markdown == before


def test_a_truncated_answer_is_one_line_and_a_kept_report_not_a_traceback(scene, emulator, capsys):  # noqa: F811
    emulator.truncated("/api/v1/nodes")
    run = scene.run()
    err = capsys.readouterr().err
    assert run.code == 2 and "Traceback" not in err
    [line] = err.strip().splitlines()[-1:]
    assert line.startswith("error: an answer from the cluster could not be read (DecodeError")
    assert "truncated or malformed" in line
    check = run.check("run completed")
    assert check["seen"].startswith("failed at ") and "could not be read" in check["seen"]
    assert not (run.folder / "error.txt").exists(), "a malformed answer is not a defect of the tool"


def test_a_defect_of_the_tool_keeps_the_folder_with_the_traceback_beside_it(scene, monkeypatch, capsys):
    monkeypatch.setattr(gateway, "_collect_vtep", lambda *a: {}["no such key"])
    run = scene.run()
    err = capsys.readouterr().err
    assert run.code == 2 and "Traceback" not in err
    assert "KeyError: 'no such key' (a defect in python -m rehearse)" in err
    assert "Traceback" in (run.folder / "error.txt").read_text()
    assert "the traceback is in error.txt" in run.check("run completed")["fix"]


# --- report --out leaves a recorded run as it is -------------------------------------------

def test_report_out_writes_elsewhere_and_leaves_the_recording_byte_for_byte(tmp_path):
    import hashlib

    def digest(folder: Path) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(folder.iterdir())}

    fixture = FIXTURES / "gateway-route-elsewhere"
    before = digest(fixture)
    rehearsals = tmp_path / "again"
    assert cli.main(["report", str(fixture), "--out", str(rehearsals)]) == 1
    assert digest(fixture) == before
    # A run folder of the rehearsals folder, named as the live run's would be.
    [out] = rehearsals.iterdir()
    started = read_events(fixture)[0]
    assert out.name == record.folder_for(rehearsals, started["stack"], "verify gateway",
                                         record.parse_time(started["at"])).name
    assert (out / "report.md").read_text() == (fixture / "report.md").read_text()
    assert (out / "report.json").read_text() == (fixture / "report.json").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["events.jsonl", "report.html", "report.json", "report.md"]
    # Replayed again into the same rehearsals folder: the same folder, rewritten.
    assert cli.main(["report", str(fixture), "--out", str(rehearsals)]) == 1
    assert [p.name for p in rehearsals.iterdir()] == [out.name]


# --- the analysis alone, over a recording ---------------------------------------------------

def recorded(name: str = "gateway-healthy") -> list[dict]:
    return read_events(FIXTURES / name)


def with_lease_holder(events: list[dict], holder: str) -> list[dict]:
    changed = copy.deepcopy(events)
    for event in changed:
        if event["kind"] == gateway.LEASE:
            event["holderIdentity"] = holder
    return changed


def test_the_holder_is_resolved_exactly_not_by_prefix():
    events = recorded()
    [lease] = [e for e in events if e["kind"] == gateway.LEASE]
    node = lease["holderIdentity"].rsplit("_", 1)[0]
    # A node name that merely starts with the leader's (AWS's e2e suite matches by prefix).
    report = gateway.analyse(with_lease_holder(events, f"{node}x_{uuid.UUID(int=1)}"))
    assert {c.name: c.status for c in report.checks}[gateway_kinds.CHECK_LEASE] == "FAIL"
    report = gateway.analyse(with_lease_holder(events, f"{node}_{uuid.UUID(int=1)}"))
    assert report.passed


def test_a_lease_without_a_holder_fails():
    report = gateway.analyse(with_lease_holder(recorded(), ""))
    [check] = [c for c in report.checks if c.name == gateway_kinds.CHECK_LEASE]
    assert check.status == "FAIL" and "no holder" in check.seen


def test_a_stale_prober_log_fails():
    events = copy.deepcopy(recorded())
    for event in events:
        if event["kind"] == gateway.PROBER_LOG and event["direction"] == "cloudToHybrid":
            event["at"] = iso(datetime.datetime.fromisoformat(event["at"].replace("Z", "+00:00"))
                              + datetime.timedelta(minutes=5))
    report = gateway.analyse(events)
    failed = {c.name for c in report.failures}
    assert failed == {gateway_kinds.CHECK_TRAFFIC["cloudToHybrid"]}
    assert "stopped logging" in report.failures[0].seen


def test_rehearse_all_runs_the_real_commands_and_pages_what_they_found(scene, capsys):
    # `rehearse all --read-only` end to end through the real commands: the pre-check reads the
    # stack file of "lab" (its --work-dir holds one) and asks AWS, which is not there; verify
    # gateway passes against the emulator, verify burst finds no burst Deployment, demo 3 is
    # skipped (no output demo3).
    scene.plant()
    scene.monkeypatch.setattr(run_execute, "_connect", lambda args, outputs: Kube.connect(scene.emulator.endpoint))
    out = scene.tmp / "runs"
    outputs = scene.outputs_file()
    # First with input a step cannot use: --outputs names no stack, and the pre-check reads the
    # stack's file. Nothing starts: one line, exit 2, no run folder and no summary.
    code = cli.main(["all", "--outputs", str(outputs), "--out", str(out), "--read-only", "--keep-going"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "pass --stack NAME with --outputs" in err
    assert not out.exists()
    values = json.loads(outputs.read_text())
    values["demo2"] = {"namespace": "demo-burst", "deployment": "burst", "scenario": "A",
                       "scaleSequence": [3, 15, 12, 10, 3]}
    outputs.write_text(json.dumps(values))
    work = scene.tmp / "project"
    work.mkdir()
    root = Path(__file__).resolve().parent.parent
    shutil.copy(root / "Pulumi.yaml", work / "Pulumi.yaml")
    shutil.copy(root / "Pulumi.dev.yaml", work / "Pulumi.lab.yaml")
    code = cli.main(["all", "--stack", "lab", "--outputs", str(outputs), "--work-dir", str(work),
                     "--out", str(out), "--read-only", "--keep-going"])
    assert code == 1
    printed = capsys.readouterr().out
    assert re.search(r"PASS +verify gateway", printed) and re.search(r"SKIPPED +verify gpu", printed)
    folders = sorted(p.name.split("-lab-", 1)[1] for p in out.iterdir() if p.is_dir())
    assert folders == ["preflight", "verify-burst", "verify-gateway"]
    md = (out / "lab-summary.md").read_text()
    assert "### `python -m rehearse verify gateway`: PASS" in md
    assert "### `python -m rehearse verify gpu`: NEVER RUN" in md
    assert (out / "lab-summary.html").read_text().count('data-state="PASS"') == 1
