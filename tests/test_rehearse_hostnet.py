"""`python -m rehearse hostnet` against a played lab: the Kubernetes API emulator for the
cluster (the test plays the kubelet: the pods the tool creates start, run and log what their
servers would have seen), a stub EC2 client for the cloud route tables. Nothing but 127.0.0.1 is
reached.

The recording ``tests/fixtures/rehearse/hostnet-healthy`` is ``Scene().run()`` copied; after
changing the analysis on purpose, ``python -m rehearse report tests/fixtures/rehearse/hostnet-healthy``
rewrites its report: review the diff.
"""

from __future__ import annotations

import datetime
import functools
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from rehearse import cli
from rehearse.run import execute as run_execute
from rehearse.commands.hostnet import collect as hostnet
from rehearse.lab.connection import Kube
from rehearse.run.record import read_events
from tests import kube_emulator, rehearsal_evening
from tests.offline_guard import forbid_non_loopback
from tests.kube_emulator import NODES, PODS
from tests.kube_emulator import emulator  # noqa: F401 (fixture)

REGION = "ap-northeast-2"
DEMO_NS = "demo-gateway"
POD_CIDR = "172.17.0.0/16"
NODE_CIDR = "172.16.0.0/16"
VPC_CIDR = "10.0.0.0/16"
HYBRID, HYBRID_IP = "mi-0a1b2c3d4e5f60001", "172.16.0.10"
CLOUD, CLOUD_IP = "ip-10-0-1-20.ap-northeast-2.compute.internal", "10.0.1.20"
CLOUD_CLIENT_IP = "10.0.1.77"
ECHO_PODS = {"echo-cloud-7c9d8b6f5-2kq7x": "10.0.1.55", "echo-cloud-7c9d8b6f5-h8v4n": "10.0.2.66"}
CLUSTER_IP = "172.20.114.9"
ROUTE_TABLE, TGW_ID, LEADER_ENI = "rtb-0c1d2e3f4a5b60001", "tgw-0a9b8c7d6e5f40001", "eni-0f1e2d3c4b5a60001"
FIXTURES = Path(__file__).parent / "fixtures" / "rehearse"
T0 = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.timezone.utc)
SERVICES, NAMESPACES = "v1/services", "v1/namespaces"


class StubEc2:
    """DescribeRouteTables of the cloud private route table, as the lab leaves it: local, the
    remote node CIDR to the Transit Gateway, the pod CIDR to the gateway leader's ENI, NAT."""

    def __init__(self, routes: list[dict]):
        self.routes = routes

    def describe_route_tables(self, RouteTableIds):  # noqa: N803 (boto3's name)
        assert RouteTableIds == [ROUTE_TABLE]
        return {"RouteTables": [{"RouteTableId": ROUTE_TABLE, "Routes": self.routes}]}


def lab_routes() -> list[dict]:
    return [{"DestinationCidrBlock": VPC_CIDR, "GatewayId": "local", "State": "active", "Origin": "CreateRouteTable"},
            {"DestinationCidrBlock": NODE_CIDR, "TransitGatewayId": TGW_ID, "State": "active", "Origin": "CreateRoute"},
            {"DestinationCidrBlock": POD_CIDR, "NetworkInterfaceId": LEADER_ENI, "State": "active", "Origin": "CreateRoute"},
            {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": "nat-0123456789abcdef0", "State": "active",
             "Origin": "CreateRoute"}]


@dataclass
class Scene:
    """A lab whose hybrid node, cloud node, echo-cloud and route table are planted; ``run``
    plays the probe pods the tool creates and runs the command."""
    emulator: Any
    tmp: Path
    monkeypatch: Any
    #: What echo-cloud's nginx saw for the hybrid host network's requests, per probe.
    host_source: dict = field(default_factory=lambda: {hostnet.HOST_TO_POD: HYBRID_IP,
                                                       hostnet.HOST_TO_SVC: HYBRID_IP})
    #: What the host-network httpd saw for the cloud pod's requests (the VPC CNI SNATs to the node).
    cloud_source: str = CLOUD_IP
    #: The client results logged (ok/FAIL) and whether the servers saw anything.
    reached: bool = True
    routes: list = field(default_factory=lab_routes)
    #: Raised from the tool's sleep once the clients exist (a failure in the middle).
    fail_with: Optional[BaseException] = None
    t: float = 0.0
    progress: list = field(default_factory=list)
    played: set = field(default_factory=set)
    #: The stack (the outputs file's name) and when the run starts on the played clock.
    stack: str = "lab"
    t0: datetime.datetime = T0

    # the clock
    def clock(self) -> datetime.datetime:
        return self.t0 + datetime.timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return 1000.0 + self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        self.play()
        self.emulator.kubelet_deadlines(self.clock())

    # the kubelet
    def play(self) -> None:
        e = self.emulator
        for name in (hostnet.SERVER, hostnet.HOST_CLIENT, hostnet.CLOUD_CLIENT):
            pod = e.get(PODS, hostnet.NAMESPACE, name)
            if pod is None or name in self.played:
                continue
            self.played.add(name)
            token = pod["metadata"]["labels"][hostnet.RUN_LABEL]
            if name == hostnet.SERVER:
                status = {"phase": "Running", "hostIP": HYBRID_IP, "podIP": HYBRID_IP}
                node = HYBRID
            elif name == hostnet.HOST_CLIENT:
                status = {"phase": "Succeeded", "hostIP": HYBRID_IP, "podIP": HYBRID_IP}
                node = HYBRID
                self._echo_logs(token)
            else:
                status = {"phase": "Succeeded", "hostIP": CLOUD_IP, "podIP": CLOUD_CLIENT_IP}
                node = CLOUD
                self._server_log(token)
            pod["spec"]["nodeName"] = node
            # The kubelet's start time: activeDeadlineSeconds counts from it.
            status["startTime"] = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
            e.put(PODS, hostnet.NAMESPACE, name, {**pod, "status": status})
            if name != hostnet.SERVER:
                probes = ([hostnet.HOST_TO_POD, hostnet.HOST_TO_SVC] if name == hostnet.HOST_CLIENT
                          else [hostnet.CLOUD_TO_HOST])
                result = "ok" if self.reached else "FAIL"
                lines = [self._stamp(i) + f" client {probe} {result}" for i in range(3) for probe in probes]
                e.log(hostnet.NAMESPACE, name, "\n".join(lines + [self._stamp(3) + " done"]) + "\n")
        if self.fail_with is not None and hostnet.CLOUD_CLIENT in self.played:
            error, self.fail_with = self.fail_with, None
            raise error

    def _stamp(self, offset: float) -> str:
        moment = self.clock() + datetime.timedelta(seconds=offset)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"

    def _echo_logs(self, token: str) -> None:
        for index, pod in enumerate(ECHO_PODS):
            lines = [self._stamp(0) + ' 10.0.1.20 - - [01/Dec/2026:09:00:00 +0000] "GET / HTTP/1.1" 200 615 "-" "kube-probe/1.33" "-"']
            if self.reached:
                # The pod probe always lands on the first pod; the Service spreads.
                for i in range(3):
                    for probe, source in self.host_source.items():
                        if probe == hostnet.HOST_TO_POD and index != 0:
                            continue
                        if probe == hostnet.HOST_TO_SVC and i % 2 != index:
                            continue
                        lines.append(self._stamp(i) + f' {source} - - [01/Dec/2026:09:00:0{i} +0000] '
                                     f'"GET /?rehearse-hostnet={token}-{probe} HTTP/1.1" 200 615 "-" "Wget" "-"')
            self.emulator.log(DEMO_NS, pod, "\n".join(lines) + "\n")

    def _server_log(self, token: str) -> None:
        lines = []
        if self.reached:
            for i in range(3):
                peer = f"{self.cloud_source}:{40000 + i}"
                lines += [self._stamp(i) + f" {peer}: url:/hostnet-{token}",
                          self._stamp(i) + f" {peer}: response:200"]
        self.emulator.log(hostnet.NAMESPACE, hostnet.SERVER, "\n".join(lines) + "\n")

    # the lab
    def plant(self) -> None:
        e = self.emulator
        e.declare(NAMESPACES, SERVICES)
        e.put(NODES, None, HYBRID, {
            "metadata": {"labels": {"eks.amazonaws.com/compute-type": "hybrid"}},
            "spec": {"providerID": f"eks-hybrid:///{REGION}/eks-hybrid-lab/{HYBRID}"},
            "status": {"addresses": [{"type": "InternalIP", "address": HYBRID_IP}],
                       "conditions": [{"type": "Ready", "status": "True"}]}})
        e.put(NODES, None, CLOUD, {
            "metadata": {"labels": {"role": "system"}},
            "spec": {"providerID": f"aws:///{REGION}a/i-0123456789abcdef0"},
            "status": {"addresses": [{"type": "InternalIP", "address": CLOUD_IP}],
                       "conditions": [{"type": "Ready", "status": "True"}]}})
        e.put(SERVICES, DEMO_NS, "echo-cloud", {"spec": {
            "type": "ClusterIP", "clusterIP": CLUSTER_IP, "selector": {"app": "echo-cloud"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
        for name, ip in ECHO_PODS.items():
            e.put(PODS, DEMO_NS, name, {
                "metadata": {"labels": {"app": "echo-cloud"}},
                "spec": {"nodeName": CLOUD, "containers": [
                    {"name": "echo", "image": "nginx", "ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"phase": "Running", "podIP": ip, "hostIP": CLOUD_IP}})

    def outputs_file(self) -> Path:
        path = self.tmp / f"{self.stack}.json"
        path.write_text(json.dumps({
            "region": REGION, "kubeconfig": "{}", "clusterName": "eks-hybrid-lab",
            "hybridPodCidr": POD_CIDR, "remoteNodeCidr": NODE_CIDR, "cloudVpcCidr": VPC_CIDR,
            "transitGatewayId": TGW_ID, "gatewayRouteTableIds": [ROUTE_TABLE],
            "demo1": {"namespace": DEMO_NS}, "hybridNodeSelector": "eks.amazonaws.com/compute-type=hybrid",
            "layers": ["network", "cluster", "hybrid", "gateway", "karpenter", "demo"]}))
        return path

    def run(self, *extra: str) -> "Run":
        from rehearse.run.context import Context

        self.plant()
        ec2 = StubEc2(self.routes)

        def clients(region: str, account=None):
            assert region == REGION
            return lambda service: ec2 if service == "ec2" else pytest.fail(f"asked for {service}")

        self.monkeypatch.setattr("rehearse.run.context.boto3_clients", clients)
        self.monkeypatch.setattr(run_execute, "_connect", lambda args, outputs: Kube.connect(self.emulator.endpoint))
        self.monkeypatch.setattr("rehearse.run.context.Context", functools.partial(
            Context, clock=self.clock, sleep=self.sleep, monotonic=self.monotonic,
            progress=self.progress.append))
        out = self.tmp / "runs"
        code = cli.main(["hostnet", "--outputs", str(self.outputs_file()), "--out", str(out), *extra])
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

    def events(self, kind: str) -> list[dict]:
        return [e for e in read_events(self.folder) if e["kind"] == kind]


@pytest.fixture
def loopback_only(monkeypatch):
    """Any connection to an address other than this machine's fails the test."""
    forbid_non_loopback(monkeypatch)


def namespaces_as_a_resource(monkeypatch) -> None:
    """kmock reads ``/api/v1/namespaces[/<name>]`` as a namespace with no resource in it, so a
    Namespace cannot be created, read or deleted: here those two paths are the cluster-scoped
    resource ``v1/namespaces`` (every other path is parsed as kmock does)."""
    from kmock._internal import parsing

    parse = parsing.parse_path

    def parse_path(path: str):
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
            return parsing.ParsedPath("", "v1", "namespaces", None, parts[3] if len(parts) == 4 else None, None)
        return parse(path)

    monkeypatch.setattr(parsing, "parse_path", parse_path)


@pytest.fixture
def scene(emulator, tmp_path, monkeypatch, loopback_only):  # noqa: F811 (fixture)
    monkeypatch.setitem(kube_emulator._KINDS, SERVICES, ("v1", "Service"))
    monkeypatch.setitem(kube_emulator._KINDS, NAMESPACES, ("v1", "Namespace"))
    namespaces_as_a_resource(monkeypatch)
    return Scene(emulator, tmp_path, monkeypatch)


ALL = [hostnet.CHECK[hostnet.HOST_TO_POD], hostnet.CHECK[hostnet.HOST_TO_SVC],
       hostnet.CHECK[hostnet.CLOUD_TO_HOST], hostnet.CHECK_CLEANUP]


def deletes(emulator) -> set[str]:  # noqa: F811
    return {path for method, path in emulator.requests() if method == "DELETE"}


REMOVED = {f"/api/v1/namespaces/{hostnet.NAMESPACE}/pods/{name}"
           for name in (hostnet.SERVER, hostnet.HOST_CLIENT, hostnet.CLOUD_CLIENT)} | {
    f"/api/v1/namespaces/{hostnet.NAMESPACE}"}


# --- a healthy lab ----------------------------------------------------------------------------

def test_each_direction_goes_node_to_node_across_the_transit_gateway(scene, emulator, capsys):  # noqa: F811
    run = scene.run()
    assert run.code == 0, capsys.readouterr()
    assert run.statuses() == {name: "PASS" for name in ALL}
    to_pod = run.check(hostnet.CHECK[hostnet.HOST_TO_POD])["seen"]
    assert f"Path: {hostnet.TGW}" in to_pod and f"the hybrid node's own IP {HYBRID_IP}" in to_pod
    assert f"{ROUTE_TABLE}: {NODE_CIDR} → {TGW_ID} (active)" in to_pod
    assert "echo-cloud pod 10.0.1.55" in to_pod and "3 ok, 0 FAIL" in to_pod
    assert f"Service echo-cloud {CLUSTER_IP}:80" in run.check(hostnet.CHECK[hostnet.HOST_TO_SVC])["seen"]
    back = run.check(hostnet.CHECK[hostnet.CLOUD_TO_HOST])["seen"]
    assert f"Path: {hostnet.TGW}" in back and f"the cloud node's IP {CLOUD_IP}" in back
    assert f"→ {HYBRID_IP}:9443" in back and f"{NODE_CIDR} → {TGW_ID}" in back
    # The clients asked for the addresses the cluster gave, by IP (no DNS on the host network).
    created = {e["name"]: e["manifest"] for e in run.events(hostnet.CREATED)}
    script = created[hostnet.HOST_CLIENT]["spec"]["containers"][0]["command"][-1]
    assert "http://10.0.1.55:8080/" in script and f"http://{CLUSTER_IP}:80/" in script
    assert f"http://{HYBRID_IP}:9443/hostnet-" in created[hostnet.CLOUD_CLIENT]["spec"]["containers"][0]["command"][-1]
    # Everything went, and the namespace is gone.
    assert REMOVED <= deletes(emulator)
    assert emulator.get(NAMESPACES, None, hostnet.NAMESPACE) is None
    for name in (hostnet.SERVER, hostnet.HOST_CLIENT, hostnet.CLOUD_CLIENT):
        assert emulator.get(PODS, hostnet.NAMESPACE, name) is None
    assert any("waiting" in p or "creating" in p for p in scene.progress)


def test_a_source_in_the_pod_cidr_means_through_the_gateway_and_fails_the_expectation(scene):
    scene.host_source = {hostnet.HOST_TO_POD: "172.17.3.14", hostnet.HOST_TO_SVC: HYBRID_IP}
    run = scene.run()
    assert run.code == 1
    assert run.statuses() == {**{name: "PASS" for name in ALL}, hostnet.CHECK[hostnet.HOST_TO_POD]: "FAIL"}
    check = run.check(hostnet.CHECK[hostnet.HOST_TO_POD])
    assert f"Path: {hostnet.GATEWAY}" in check["seen"]
    assert f"172.17.3.14, in the hybrid pod CIDR {POD_CIDR}" in check["seen"]
    assert f"{POD_CIDR} → {LEADER_ENI}" in check["seen"]
    assert "offline/reachability.py" in check["fix"]


def test_the_cloud_pods_own_address_is_told_apart_from_its_nodes(scene):
    scene.cloud_source = CLOUD_CLIENT_IP
    run = scene.run()
    assert run.code == 0
    assert f"the cloud pod's own IP {CLOUD_CLIENT_IP} (not SNATed)" in run.check(
        hostnet.CHECK[hostnet.CLOUD_TO_HOST])["seen"]


def test_a_hybrid_node_ip_routed_to_an_eni_is_not_the_transit_gateway(scene):
    scene.routes = [r for r in lab_routes() if r["DestinationCidrBlock"] != NODE_CIDR] + [
        {"DestinationCidrBlock": "172.16.0.0/24", "NetworkInterfaceId": LEADER_ENI, "State": "active"}]
    run = scene.run()
    check = run.check(hostnet.CHECK[hostnet.CLOUD_TO_HOST])
    assert check["status"] == "FAIL" and f"Path: {hostnet.GATEWAY}" in check["seen"]


def test_nothing_reached_says_why(scene):
    scene.reached = False
    run = scene.run("--port", "18080")
    assert run.code == 1
    back = run.check(hostnet.CHECK[hostnet.CLOUD_TO_HOST])
    assert back["status"] == "FAIL" and "0 ok, 3 FAIL" in back["seen"]
    assert "--port 9443" in back["fix"]
    assert "admit the remote node CIDR" in run.check(hostnet.CHECK[hostnet.HOST_TO_POD])["fix"]
    assert run.check(hostnet.CHECK_CLEANUP)["status"] == "PASS"


# --- least privilege --------------------------------------------------------------------------

EXACT_CONTAINER = {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534, "privileged": False,
                   "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                   "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
EXACT_POD = {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
             "seccompProfile": {"type": "RuntimeDefault"}}


def test_the_pods_get_exactly_the_least_privilege_that_works(scene):
    run = scene.run()
    created = {e["name"]: e["manifest"] for e in run.events(hostnet.CREATED)}
    namespace = created.pop(hostnet.NAMESPACE)["metadata"]
    assert namespace["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespace["labels"][hostnet.REHEARSE_LABEL] == "hostnet"
    assert "hostNetwork" in namespace["annotations"]["eks-hybrid-lab.io/why"]
    assert set(created) == {hostnet.SERVER, hostnet.HOST_CLIENT, hostnet.CLOUD_CLIENT}
    for name, pod in created.items():
        spec = pod["spec"]
        assert spec["securityContext"] == EXACT_POD, name
        assert spec.get("hostNetwork", False) == (name != hostnet.CLOUD_CLIENT), name
        for key in ("hostPID", "hostIPC", "shareProcessNamespace", "initContainers", "serviceAccountName"):
            assert key not in spec, (name, key)
        assert spec["automountServiceAccountToken"] is False
        [container] = spec["containers"]
        assert container["securityContext"] == EXACT_CONTAINER, name
        assert container["image"] == hostnet.BUSYBOX and "@sha256:" in container["image"]
        assert "ports" not in container  # no hostPort: the host network needs none
    assert "-p 9443" in created[hostnet.SERVER]["spec"]["containers"][0]["command"][-1]
    # The host-network pods land on the probed hybrid node (by name) and tolerate its taint;
    # the cloud client keeps off hybrid nodes.
    for name in (hostnet.SERVER, hostnet.HOST_CLIENT):
        spec = created[name]["spec"]
        [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [HYBRID]}]}
        assert spec["tolerations"] == [hostnet.HYBRID_TOLERATION]
    [term] = created[hostnet.CLOUD_CLIENT]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "eks.amazonaws.com/compute-type", "operator": "NotIn",
                                         "values": ["hybrid"]}]
    assert "tolerations" not in created[hostnet.CLOUD_CLIENT]["spec"]


def test_the_default_port_is_the_one_the_hybrid_hosts_admit_from_the_vpc():
    from components.hybrid_hosts import WEBHOOK_PORT

    assert hostnet.PORT == WEBHOOK_PORT > 1024


@pytest.mark.parametrize("port", ["80", "1024"])
def test_a_privileged_port_is_refused(scene, port, capsys):
    assert scene.run("--port", port).code == 2
    assert "above 1024" in capsys.readouterr().err


# --- cleanup ----------------------------------------------------------------------------------

@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("the cluster went away")])
def test_a_failure_in_the_middle_leaves_no_pod_or_namespace(scene, emulator, error):  # noqa: F811
    scene.fail_with = error
    # Interrupted: exit 1; failed: exit 2, never a traceback.
    run = scene.run()
    assert run.code == (1 if isinstance(error, KeyboardInterrupt) else 2)
    assert REMOVED <= deletes(emulator)
    assert emulator.get(NAMESPACES, None, hostnet.NAMESPACE) is None
    for name in (hostnet.SERVER, hostnet.HOST_CLIENT, hostnet.CLOUD_CLIENT):
        assert emulator.get(PODS, hostnet.NAMESPACE, name) is None
    # The run's folder is kept with a report saying how it ended.
    report = json.loads((run.folder / "report.json").read_text())
    assert report["checks"][0]["name"] == "run completed" and report["checks"][0]["status"] == "FAIL"


def test_a_second_interrupt_while_the_namespace_goes_still_leaves_the_deletions_made(scene, emulator, monkeypatch):  # noqa: F811
    """Ctrl-C once (mid-run), and again while the cleanup waits for the namespace to go."""
    from lightkube import Client

    scene.fail_with = KeyboardInterrupt()
    real_get = Client.get

    def get(self, resource, name=None, **kwargs):
        # Only the cleanup's wait (the run's first look, for leftovers, precedes the Ctrl-C).
        if resource.__name__ == "Namespace" and hostnet.CLOUD_CLIENT in scene.played:
            raise KeyboardInterrupt()
        return real_get(self, resource, name, **kwargs)

    monkeypatch.setattr(Client, "get", get)
    assert scene.run().code == 1
    assert REMOVED <= deletes(emulator)
    assert any("stopped waiting" in p for p in scene.progress)


def test_a_namespace_left_from_another_run_is_not_taken_over(scene, emulator, capsys):  # noqa: F811
    scene.plant()
    emulator.put(NAMESPACES, None, hostnet.NAMESPACE, {"metadata": {"labels": {"someone": "else"}}})
    assert scene.run().code == 2
    assert "already exists and is not a leftover" in capsys.readouterr().err
    assert not deletes(emulator)
    assert emulator.get(NAMESPACES, None, hostnet.NAMESPACE) is not None


class Killed(BaseException):
    """A SIGKILL, a closed laptop: the process stops where it is and runs no cleanup."""


def killed_run(scene, monkeypatch) -> None:
    """Runs the tool until its clients exist, then kills it: nothing of its own is removed."""
    with pytest.MonkeyPatch.context() as killed:
        killed.setattr(hostnet, "_cleanup", lambda *args, **kwargs: None)
        scene.fail_with = Killed()
        with pytest.raises(Killed):
            scene.run()


OURS = {hostnet.REHEARSE_LABEL: "hostnet", hostnet.STACK_LABEL: "eks-hybrid-lab"}


def test_a_killed_runs_pods_end_at_their_deadline_and_the_next_run_removes_them(
        scene, emulator, tmp_path, monkeypatch):  # noqa: F811
    """The cluster bounds the probe pods' life (activeDeadlineSeconds: the
    kubelet stops the host-network server and marks the pod Failed, DeadlineExceeded), and the
    next run finds the namespace by the labels only this tool sets and removes it."""
    killed_run(scene, monkeypatch)
    namespace = emulator.get(NAMESPACES, None, hostnet.NAMESPACE)
    assert namespace is not None and OURS.items() <= namespace["metadata"]["labels"].items()
    server = emulator.get(PODS, hostnet.NAMESPACE, hostnet.SERVER)
    assert server["status"]["phase"] == "Running"
    deadline = server["spec"]["activeDeadlineSeconds"]
    assert deadline == hostnet.deadline_seconds(hostnet.TIMEOUT) < 600
    for name in (hostnet.SERVER, hostnet.HOST_CLIENT, hostnet.CLOUD_CLIENT):
        pod = emulator.get(PODS, hostnet.NAMESPACE, name)
        assert pod["spec"]["activeDeadlineSeconds"] == deadline, name
        assert OURS.items() <= pod["metadata"]["labels"].items(), name

    # Nobody runs the tool again for a while: the kubelet ends the server at its deadline.
    scene.t += deadline
    emulator.kubelet_deadlines(scene.clock())
    server = emulator.get(PODS, hostnet.NAMESPACE, hostnet.SERVER)
    assert (server["status"]["phase"], server["status"]["reason"]) == ("Failed", "DeadlineExceeded")
    assert "terminated" in server["status"]["containerStatuses"][0]["state"]
    assert emulator.get(NAMESPACES, None, hostnet.NAMESPACE) is not None, "a namespace never expires"

    # The next run removes its own leftovers by label, then probes as usual.
    again = Scene(emulator, tmp_path / "again", monkeypatch, t=scene.t)
    (tmp_path / "again").mkdir()
    before = len(emulator.requests())
    run = again.run()
    assert run.code == 0 and run.statuses() == {name: "PASS" for name in ALL}
    [swept] = run.events(hostnet.SWEPT)
    assert swept["pods"][hostnet.SERVER] == {"phase": "Failed", "reason": "DeadlineExceeded"}
    assert swept["namespaceGone"] and f"namespace/{hostnet.NAMESPACE}" in swept["deleted"]
    # Its pods first, then the namespace: all before this run created anything.
    removed = [p for m, p in emulator.requests()[before:] if m == "DELETE"]
    assert set(removed[:3]) == REMOVED - {f"/api/v1/namespaces/{hostnet.NAMESPACE}"}
    assert removed[3] == f"/api/v1/namespaces/{hostnet.NAMESPACE}"
    assert any("removed the leftovers of an earlier run" in n and "DeadlineExceeded" in n
               for n in run.report["notes"])
    assert emulator.get(NAMESPACES, None, hostnet.NAMESPACE) is None


def test_a_leftover_whose_pods_still_run_is_another_run_and_is_left_alone(
        scene, emulator, tmp_path, monkeypatch, capsys):  # noqa: F811
    killed_run(scene, monkeypatch)
    capsys.readouterr()
    before = len(emulator.requests())
    again = Scene(emulator, tmp_path / "again", monkeypatch, t=scene.t + 5)
    (tmp_path / "again").mkdir()
    assert again.run().code == 2
    assert "another hostnet run is still going" in capsys.readouterr().err
    assert not [p for m, p in emulator.requests()[before:] if m == "DELETE"]
    assert emulator.get(PODS, hostnet.NAMESPACE, hostnet.SERVER)["status"]["phase"] == "Running"


@pytest.mark.parametrize("labels", [{hostnet.REHEARSE_LABEL: "hostnet", hostnet.STACK_LABEL: "another-lab"},
                                    {hostnet.STACK_LABEL: "eks-hybrid-lab"}], ids=["other-stack", "no-tool-label"])
def test_a_namespace_without_both_labels_is_never_removed(scene, emulator, capsys, labels):  # noqa: F811
    scene.plant()
    emulator.put(NAMESPACES, None, hostnet.NAMESPACE, {"metadata": {"labels": labels}})
    assert scene.run().code == 2
    assert "not a leftover of this tool on this stack" in capsys.readouterr().err
    assert not deletes(emulator)
    assert emulator.get(NAMESPACES, None, hostnet.NAMESPACE) is not None


def test_a_server_that_never_runs_is_reported_and_removed(scene, emulator, monkeypatch):  # noqa: F811
    monkeypatch.setattr(Scene, "play", lambda self: None)
    run = scene.run("--timeout", "10")
    assert run.code == 1
    assert "never ran" in run.check(hostnet.CHECK[hostnet.HOST_TO_POD])["seen"]
    assert run.check(hostnet.CHECK_CLEANUP)["status"] == "PASS"
    assert {f"/api/v1/namespaces/{hostnet.NAMESPACE}/pods/{hostnet.SERVER}",
            f"/api/v1/namespaces/{hostnet.NAMESPACE}"} <= deletes(emulator)
    assert any("Gave up waiting" in n for n in run.report["notes"])


# --- parsing and replay -----------------------------------------------------------------------

def test_httpd_peers_are_read_in_both_address_forms():
    lines = ["2026-12-01T09:00:00.1Z 10.0.1.20:41234: url:/hostnet-abc",
             "[::ffff:10.0.1.21]:41235: url:/hostnet-abc",
             "10.0.1.22:41236: url:/other", "10.0.1.20:41234: response:200"]
    assert hostnet.httpd_sources(lines, "hostnet-abc") == ["10.0.1.20", "10.0.1.21"]


def test_a_recorded_run_replays_to_the_same_report(scene):
    run = scene.run()
    before = run.markdown, run.report
    assert cli.main(["report", str(run.folder)]) == 0
    assert (run.markdown, run.report) == before


def test_the_committed_recording_replays_to_its_committed_report(tmp_path):
    folder = tmp_path / "hostnet-healthy"
    shutil.copytree(FIXTURES / "hostnet-healthy", folder)
    (folder / "report.md").unlink()
    (folder / "report.json").unlink()
    assert cli.main(["report", str(folder)]) == 0
    assert (folder / "report.md").read_text() == (FIXTURES / "hostnet-healthy" / "report.md").read_text()
    assert (folder / "report.json").read_text() == (FIXTURES / "hostnet-healthy" / "report.json").read_text()


@pytest.mark.skipif(not __import__("os").environ.get("RECORD_HOSTNET"),
                    reason="records tests/fixtures/rehearse/hostnet-healthy when RECORD_HOSTNET=1")
def test_record_the_healthy_run(scene):
    scene.stack, scene.t0 = rehearsal_evening.STACK, rehearsal_evening.STARTED["hostnet-healthy"]
    run = scene.run()
    target = FIXTURES / "hostnet-healthy"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(run.folder, target)
