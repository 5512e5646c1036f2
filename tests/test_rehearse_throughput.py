"""`python -m rehearse gateway-throughput` against the Kubernetes API emulator: iperf3's JSON
parsed from samples (a good, a failed and a partial run), an end-to-end run where the test plays
the kubelet (the server gets an IP, the client logs a sample and Succeeds), the pods deleted
after a failure in the middle and on Ctrl-C, the instance-type switch and restore through the
Automation API and the fake `pulumi`, and the pods' spec against Pod Security "restricted".
"""

from __future__ import annotations

import datetime
import functools
import json
from pathlib import Path
from typing import Any, Callable, Optional
from unittest import mock

import pytest

from rehearse import cli
from rehearse.run import execute as run_execute
from rehearse.commands.gateway_throughput import collect as throughput
from rehearse.commands.gateway_throughput import analyse as throughput_analysis
from rehearse.commands.gateway_throughput import gateway as throughput_gateway
from rehearse.commands.gateway_throughput import kinds as throughput_kinds
from rehearse.run import record as rec
from rehearse.lab.connection import Kube
from rehearse.run.context import Context
from rehearse.run.report import FAIL, PASS
from tests import fake_pulumi as fake_pulumi_cli, rehearsal_evening
from tests.offline_guard import forbid_non_loopback
from tests.kube_checks import pod_problems
from tests.kube_emulator import CONFIGMAPS, LEASES, NODES, emulator  # noqa: F401 fixture

FIXTURES_RUNS = Path(__file__).resolve().parent / "fixtures" / "rehearse"
SAMPLES = FIXTURES_RUNS / "iperf3"
NS = "demo-gateway"
GOOD_C2H = (SAMPLES / "good-cloud-to-hybrid.json").read_text()
GOOD_H2C = (SAMPLES / "good-hybrid-to-cloud.json").read_text()
FAILED = (SAMPLES / "failed-connect.json").read_text()
PARTIAL = (SAMPLES / "partial-4-of-10.json").read_text()
HYBRID_NODE, CLOUD_NODE = "mi-0aaaaaaaaaaaaaaa1", "ip-10-0-11-57.ap-northeast-2.compute.internal"
GW_NODES = ("ip-10-0-1-10.ap-northeast-2.compute.internal",
            "ip-10-0-2-20.ap-northeast-2.compute.internal")


# --- iperf3 JSON ----------------------------------------------------------------------------


def test_a_good_run_gives_both_figures_and_the_retransmits():
    parsed = throughput_analysis.parse_iperf(GOOD_C2H, 10)
    assert parsed["status"] == "ok"
    assert parsed["sender_gbps"] == 4.76 and parsed["receiver_gbps"] == 4.74
    assert parsed["retransmits"] == 31 and parsed["seconds"] == 10.0
    assert parsed["streams"] == 4 and parsed["intervals"] == 10
    assert parsed["version"] == "iperf 3.16"
    # The path as TCP saw it: Cilium's 8450 less 52 bytes of IP and TCP headers with options.
    assert (parsed["tcp_mss"], parsed["pmtu"]) == (8398, 8450)


def test_a_failed_run_is_reported_as_failed_not_as_a_number():
    parsed = throughput_analysis.parse_iperf(FAILED, 10)
    assert parsed["status"] == "failed"
    assert "unable to connect to server" in parsed["why"]
    assert "receiver_gbps" not in parsed and "sender_gbps" not in parsed


def test_a_partial_run_is_reported_as_partial():
    parsed = throughput_analysis.parse_iperf(PARTIAL, 10)
    assert parsed["status"] == "partial" and parsed["why"] == "4 of 10 one-second intervals"
    assert "receiver_gbps" not in parsed
    # Asked from the run itself when the settings do not say.
    assert throughput_analysis.parse_iperf(PARTIAL)["status"] == "partial"


def test_an_empty_or_garbled_log_is_unreadable():
    assert throughput_analysis.parse_iperf("")["status"] == "unreadable"
    assert throughput_analysis.parse_iperf("iperf3: error - exec format\n")["status"] == "unreadable"
    assert throughput_analysis.parse_iperf('{"start": ')["status"] == "unreadable"


# --- the pods -------------------------------------------------------------------------------


@pytest.mark.parametrize("on_hybrid", [True, False])
def test_the_measurement_pods_meet_restricted(on_hybrid):
    pod = throughput.pod_manifest("p", NS, on_hybrid=on_hybrid, image=throughput.IMAGE,
                                  args=throughput.client_args("10.200.1.23", 10, 4),
                                  deadline_seconds=250, role="client")
    problems = pod_problems(pod["spec"], "p")
    # Probes are this lab's hardening for long-running pods, not part of "restricted": a
    # one-shot iperf3 run has nothing to probe (a TCP probe would be taken for a client).
    assert [p for p in problems if "Probe" not in p] == []
    spec = pod["spec"]
    assert spec["activeDeadlineSeconds"] == 250 and spec["restartPolicy"] == "Never"
    assert spec["securityContext"]["runAsUser"] != 0
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "eks.amazonaws.com/compute-type",
                                         "operator": "In" if on_hybrid else "NotIn",
                                         "values": ["hybrid"]}]
    assert bool(spec.get("tolerations")) is on_hybrid
    assert pod["metadata"]["labels"][throughput_kinds.LABEL] == "throughput"
    # A read-only root: iperf3's buffer file goes to an emptyDir /tmp.
    [container] = spec["containers"]
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert {"-t", "10", "-P", "4", "--json"} <= set(container["args"])


def test_the_constants_follow_the_lab():
    from components.cilium import TRANSIT_SAFE_MTU
    from components.demos import HYBRID_TAINT_TOLERATION, OFF_HYBRID, ON_HYBRID
    from rehearse.lab.leader import GATEWAY_NODE_LABEL
    from stacks.layers.demo import GATEWAY_NS

    assert throughput_gateway.LAB_MTU == TRANSIT_SAFE_MTU
    assert throughput_gateway.GATEWAY_NODE_LABEL == GATEWAY_NODE_LABEL
    assert GATEWAY_NS == NS
    hybrid = throughput.pod_manifest("p", NS, on_hybrid=True, image="i:1.0", args=[],
                                     deadline_seconds=1, role="server")["spec"]
    cloud = throughput.pod_manifest("p", NS, on_hybrid=False, image="i:1.0", args=[],
                                    deadline_seconds=1, role="server")["spec"]
    expr = lambda s: s["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][  # noqa: E731
        "nodeSelectorTerms"][0]["matchExpressions"][0]
    assert (expr(hybrid), expr(cloud)) == (ON_HYBRID, OFF_HYBRID)
    assert hybrid["tolerations"] == [HYBRID_TAINT_TOLERATION]


# --- the cluster, played --------------------------------------------------------------------


def _node(name: str, *, hybrid: bool = False, gateway: bool = False,
          instance_type: str = "m6i.large") -> dict:
    labels = {"node.kubernetes.io/instance-type": instance_type, "kubernetes.io/hostname": name}
    if hybrid:
        labels["eks.amazonaws.com/compute-type"] = "hybrid"
    if gateway:
        labels["hybrid-gateway-node"] = "true"
    return {"metadata": {"labels": labels}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def plant(emulator, *, mtu: Optional[str] = "8450", gateway_type: str = "m6i.large") -> None:
    emulator.put(NODES, None, HYBRID_NODE, _node(HYBRID_NODE, hybrid=True, instance_type="hybrid"))
    emulator.put(NODES, None, CLOUD_NODE, _node(CLOUD_NODE))
    for name in GW_NODES:
        emulator.put(NODES, None, name, _node(name, gateway=True, instance_type=gateway_type))
    emulator.put(LEASES, "eks-hybrid-nodes-gateway", "hybrid-gateway-leader", {"spec": {
        "holderIdentity": f"{GW_NODES[1]}_3f2a9c1e-7b44-4d0a-9e51-2c8d6f0b1a77",
        "leaseDurationSeconds": 3, "leaseTransitions": 2}})
    if mtu is not None:
        emulator.put(CONFIGMAPS, "kube-system", "cilium-config", {"data": {"mtu": mtu}})


class Cluster:
    """The cluster's clock, simulated: the tool's sleeps advance it, and in each sleep the
    players (the kubelet below) act once, as the real ones would have meanwhile. No test waits
    for a deadline in real time."""

    def __init__(self, emulator):
        self.emulator = emulator
        self.t = 0.0
        self.players: list[Any] = []
        self.t0 = datetime.datetime.now(datetime.timezone.utc)

    def clock(self) -> datetime.datetime:
        return self.t0 + datetime.timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return 1000.0 + self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        for player in list(self.players):
            player.step()


class Kubelet:
    """Plays the scheduler and kubelet for the measurement pods, in each of the tool's sleeps:
    a server pod gets a node and an IP and runs; a client pod's log is declared
    (``logs(args)`` -> text) and it ends in ``client_phase``."""

    def __init__(self, cluster: Cluster, logs: Callable[[list[str], bool], str],
                 client_phase: str = "Succeeded"):
        self.cluster, self.emulator = cluster, cluster.emulator
        self.logs, self.client_phase = logs, client_phase
        self.seen: list[tuple[str, dict]] = []
        self.done: set[str] = set()

    def __enter__(self) -> "Kubelet":
        self.cluster.players.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cluster.players.remove(self)

    def _pods(self) -> list[dict]:
        def read(kmock: Any) -> list[dict]:
            return [kmock.objects[key].raw for key in list(kmock.objects.keys())
                    if key[0].plural == "pods" and not kmock.objects[key].deleted]
        return self.emulator.do(read)

    def _update(self, name: str, pod: dict) -> None:
        """Writes the played pod unless the tool deleted it meanwhile (checked and written on
        the emulator's thread, so a deleted pod is not brought back)."""
        def write(kmock: Any) -> None:
            key = next((k for k in list(kmock.objects.keys())
                        if k[0].plural == "pods" and k[1:] == (NS, name)), None)
            if key is not None and not kmock.objects[key].deleted:
                kmock.objects[key] = pod

        self.emulator.do(write)

    def step(self) -> None:
        for pod in self._pods():
            name = pod["metadata"]["name"]
            if name in self.done or (pod["metadata"].get("labels") or {}).get(throughput_kinds.LABEL) != "throughput":
                continue
            self.done.add(name)
            self.seen.append((name, pod))
            spec = pod["spec"]
            on_hybrid = spec["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
                "matchExpressions"][0]["operator"] == "In"
            node = HYBRID_NODE if on_hybrid else CLOUD_NODE
            args = spec["containers"][0]["args"]
            if "-s" in args:
                ip = "10.200.1.23" if on_hybrid else "10.0.12.88"
                status = {"phase": "Running", "podIP": ip}
            else:
                self.emulator.log(NS, name, self.logs(args, on_hybrid))
                status = {"phase": self.client_phase}
            self._update(name, {**pod, "spec": {**spec, "nodeName": node}, "status": status})


def samples(c2h: str = GOOD_C2H, h2c: str = GOOD_H2C) -> Callable[[list[str], bool], str]:
    # The client on a cloud node measures cloud → hybrid.
    return lambda args, on_hybrid: h2c if on_hybrid else c2h


@pytest.fixture
def loopback_only(monkeypatch):
    """Any connection to an address other than this machine's fails the test."""
    forbid_non_loopback(monkeypatch)


@pytest.fixture
def cluster(emulator) -> Cluster:
    return Cluster(emulator)


@pytest.fixture
def run(emulator, cluster, tmp_path, monkeypatch, loopback_only, capsys):
    """Runs `python -m rehearse gateway-throughput` in-process against the emulator, on the
    cluster's simulated clock: (exit code, run folder or None, report.json or None, stdout,
    stderr)."""
    return _runner(emulator, cluster, tmp_path, monkeypatch, capsys)


def _runner(emulator, cluster, tmp_path, monkeypatch, capsys, stack: str = "lab"):
    """The ``run`` fixture's runner, for ``stack`` (the outputs file's name and --stack)."""
    monkeypatch.setattr(run_execute, "_connect", lambda args, outputs: Kube.connect(emulator.endpoint))
    monkeypatch.setattr("rehearse.run.context.Context", functools.partial(
        Context, clock=cluster.clock, sleep=cluster.sleep, monotonic=cluster.monotonic))
    outputs = tmp_path / f"{stack}.json"
    outputs.write_text(json.dumps({
        "region": "ap-northeast-2", "kubeconfig": "{}", "layers": ["network", "cluster", "demo"],
        "gatewayNamespace": "eks-hybrid-nodes-gateway", "gatewayLeaseName": "hybrid-gateway-leader",
        "demo1": {"namespace": NS}}))

    def go(*args: str, named: bool = True, yes: bool = True):
        out = tmp_path / "rehearsals"
        # A run that switches the stack names it (item 15: the file's name is not a stack) and,
        # stdin not being a terminal, applies each previewed switch with --yes.
        switching = "--instance-types" in args
        extra = (["--stack", stack] if switching and named else []) + (["--yes"] if switching and yes else [])
        code = cli.main(["gateway-throughput", "--outputs", str(outputs), "--out", str(out), *extra, *args])
        captured = capsys.readouterr()
        folders = sorted(out.glob(f"*-{stack}-gateway-throughput")) if out.exists() else []
        folder = folders[-1] if folders else None
        report = (json.loads((folder / "report.json").read_text())
                  if folder and (folder / "report.json").exists() else None)
        return code, folder, report, captured.out, captured.err

    return go


def statuses(report: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


def measured(report: dict) -> dict[str, Any]:
    return {m["name"]: m["value"] for m in report["measurements"]}


def live_measurement_pods(emulator) -> list[str]:
    def read(kmock: Any) -> list[str]:
        return [key[2] for key in list(kmock.objects.keys())
                if key[0].plural == "pods" and not kmock.objects[key].deleted
                and (kmock.objects[key].raw["metadata"].get("labels") or {}).get(throughput_kinds.LABEL)]
    return emulator.do(read)


def assert_created_and_deleted(emulator, count: int) -> None:
    """``count`` pods POSTed, and each deleted by its name."""
    requests = emulator.requests()
    assert requests.count(("POST", f"/api/v1/namespaces/{NS}/pods")) == count
    deleted = [path for method, path in requests
               if method == "DELETE" and path.startswith(f"/api/v1/namespaces/{NS}/pods/")]
    assert len(deleted) == count and all("rehearse-iperf3-" in path for path in deleted)
    assert live_measurement_pods(emulator) == []


def test_a_run_measures_both_ways_records_the_gateway_and_removes_its_pods(emulator, cluster, run):
    plant(emulator)
    with Kubelet(cluster, samples()) as kubelet:
        code, folder, report, out, err = run("-t", "10", "-P", "4")
    assert code == 0, out + err
    assert statuses(report) == {"cloud → hybrid measured": PASS, "hybrid → cloud measured": PASS,
                                throughput_kinds.CHECK_PODS_REMOVED: PASS}
    numbers = measured(report)
    assert numbers["cloud → hybrid (receiver)"] == 4.74 and numbers["cloud → hybrid (sender)"] == 4.76
    assert numbers["hybrid → cloud (receiver)"] == 4.19 and numbers["hybrid → cloud retransmits"] == 48
    seen = {c["name"]: c["seen"] for c in report["checks"]}
    assert "TCP MSS 8398, path MTU 8450" in seen["cloud → hybrid measured"]
    notes = "\n".join(report["notes"])
    assert "MTU in force: 8450 (cilium-config ConfigMap" in notes
    assert f"leader: {GW_NODES[1]} (m6i.large)" in notes and "instance type m6i.large" in notes

    # Server on hybrid + client on cloud, then the reverse; the client aims at the server's IP.
    created = [(n, p) for n, p in kubelet.seen]
    roles = [(p["metadata"]["labels"]["eks-hybrid-lab.io/role"],
              p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                  "nodeSelectorTerms"][0]["matchExpressions"][0]["operator"]) for _, p in created]
    assert roles == [("server", "In"), ("client", "NotIn"), ("server", "NotIn"), ("client", "In")]
    assert created[1][1]["spec"]["containers"][0]["args"][:2] == ["-c", "10.200.1.23"]
    assert created[3][1]["spec"]["containers"][0]["args"][:2] == ["-c", "10.0.12.88"]
    for name, pod in created:
        assert pod["metadata"]["namespace"] == NS
        assert [p for p in pod_problems(pod["spec"], name) if "Probe" not in p] == []
    # Every pod deleted by name.
    requests = emulator.requests()
    for name, _ in created:
        assert ("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}") in requests
    assert live_measurement_pods(emulator) == []

    # The report replays from events.jsonl.
    markdown = (folder / "report.md").read_text()
    assert cli.main(["report", str(folder)]) == 0
    assert (folder / "report.md").read_text() == markdown


def test_the_mtu_falls_back_to_the_lab_s_configured_value(emulator, cluster, run):
    plant(emulator, mtu=None)
    with Kubelet(cluster, samples()):
        code, folder, report, out, err = run("-t", "10")
    assert code == 0, out + err
    assert "MTU in force: 8450 (configured, not observed" in "\n".join(report["notes"])


def test_a_failed_and_a_partial_run_fail_their_checks_without_a_number(emulator, cluster, run):
    plant(emulator)
    with Kubelet(cluster, samples(c2h=FAILED, h2c=PARTIAL), client_phase="Failed"):
        code, folder, report, out, err = run("-t", "10")
    assert code == 1, out + err
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["cloud → hybrid measured"]["status"] == FAIL
    assert checks["cloud → hybrid measured"]["seen"].startswith("failed: unable to connect")
    assert checks["hybrid → cloud measured"]["seen"] == "partial: 4 of 10 one-second intervals"
    assert measured(report) == {"cloud → hybrid (receiver)": None, "hybrid → cloud (receiver)": None}
    assert checks[throughput_kinds.CHECK_PODS_REMOVED]["status"] == PASS
    assert live_measurement_pods(emulator) == []


def test_a_connection_never_made_is_reported_as_a_blocked_flow_not_a_gateway_problem(emulator, cluster, run):
    """iperf3's hybrid → cloud connection timed out (the cluster security
    group dropped TCP 5201 from the remote networks). The fix names that flow and what opens it,
    not `verify gateway`, which passes on such a lab."""
    plant(emulator)
    with Kubelet(cluster, samples(h2c=FAILED), client_phase="Failed"):
        code, folder, report, out, err = run("-t", "10")
    assert code == 1, out + err
    checks = {c["name"]: c for c in report["checks"]}
    check = checks["hybrid → cloud measured"]
    assert check["status"] == FAIL and check["seen"].startswith("failed: unable to connect")
    assert "BLOCKED" in check["fix"] and "verify gateway" not in check["fix"]
    assert "hybrid pods (node IP) or hybrid pods (pod IP) → rehearsal pods (cloud), TCP 5201" in check["fix"]
    assert "stacks/layers/demo.py REHEARSE_IPERF3_PORT" in check["fix"]
    assert checks["cloud → hybrid measured"]["status"] == PASS


def test_the_pods_are_deleted_after_a_failure_in_the_middle(emulator, cluster, run, monkeypatch):
    plant(emulator)
    real = throughput.Pods.read
    calls = {"n": 0}

    def broken(self, name):
        if "client" in name:
            calls["n"] += 1
            raise ConnectionError("connection reset by peer")
        return real(self, name)

    monkeypatch.setattr(throughput.Pods, "read", broken)
    with Kubelet(cluster, samples()):
        code, folder, report, out, err = run("-t", "10")
    assert code == 2 and "cannot reach the cluster" in err
    # The folder is kept: its report says the run failed, and why.
    assert report["checks"][0]["status"] == "FAIL" and "cannot reach the cluster" in report["checks"][0]["seen"]
    assert calls["n"] == 1
    assert_created_and_deleted(emulator, 2)


def test_the_pods_are_deleted_on_ctrl_c(emulator, cluster, run, monkeypatch):
    plant(emulator)
    real = throughput.Pods.wait

    def interrupted(self, name, done, seconds):
        if "client" in name:
            raise KeyboardInterrupt
        return real(self, name, done, seconds)

    monkeypatch.setattr(throughput.Pods, "wait", interrupted)
    with Kubelet(cluster, samples()):
        code, folder, report, out, err = run("-t", "10")
    assert code == 1 and "interrupted" in err
    assert report["checks"][0]["seen"].startswith("interrupted (Ctrl-C)")
    assert_created_and_deleted(emulator, 2)


def test_a_server_that_never_runs_is_reported_and_its_pod_removed(emulator, run, monkeypatch):
    plant(emulator)
    monkeypatch.setattr(throughput, "SERVER_START_SECONDS", 0.2)
    code, folder, report, out, err = run("-t", "10")  # no kubelet: the pods stay Pending
    assert code == 1, out + err
    checks = {c["name"]: c for c in report["checks"]}
    # The API server creates a pod Pending (the emulator once left its phase unset: "unknown").
    assert "the server pod did not run in 0.2 s (phase Pending)" in checks["cloud → hybrid measured"]["seen"]
    assert checks[throughput_kinds.CHECK_PODS_REMOVED]["status"] == PASS
    assert live_measurement_pods(emulator) == []


def test_a_stack_without_the_demo_layer_cannot_run(emulator, run, tmp_path):
    (tmp_path / "lab.json").write_text(json.dumps({"region": "ap-northeast-2", "kubeconfig": "{}"}))
    out = tmp_path / "rehearsals"
    assert cli.main(["gateway-throughput", "--outputs", str(tmp_path / "lab.json"),
                     "--out", str(out)]) == 2


# --- instance types through the Automation API and the fake `pulumi` ------------------------


@pytest.fixture
def fake_pulumi(tmp_path, monkeypatch):
    """A `pulumi` on PATH that answers from a state file; returns (state path, log path)."""
    return _install_fake_pulumi(tmp_path, monkeypatch)


def _install_fake_pulumi(tmp_path, monkeypatch, stack: str = "lab"):
    return fake_pulumi_cli.install(tmp_path, monkeypatch, {"selected": stack, "stacks": {stack: {
        "outputs": {"demo1": {"namespace": NS}},
        "config": {throughput.CONFIG_KEY: "m6i.large"}}}})


def _calls(log: Path) -> list[list[str]]:
    return [[a for a in json.loads(line) if a != "--non-interactive"]
            for line in log.read_text().splitlines()]


def _relabelling(emulator, state: Path, stack_name: str = "lab") -> Callable:
    """open_stack whose up relabels the gateway nodes with the configured type, as the node
    group's replacement would."""
    real = throughput.open_stack

    def opened(name, work_dir):
        stack = real(name, work_dir)
        up = stack.up

        def up_and_play(**kwargs):
            result = up(**kwargs)
            wanted = json.loads(state.read_text())["stacks"][stack_name]["config"][throughput.CONFIG_KEY]
            for node in GW_NODES:
                emulator.put(NODES, None, node, _node(node, gateway=True, instance_type=wanted))
            return result

        stack.up = up_and_play
        return stack

    return opened


def test_instance_types_are_switched_measured_compared_and_restored(emulator, cluster, run, fake_pulumi):
    state, log = fake_pulumi
    plant(emulator)
    with mock.patch.object(throughput, "open_stack", _relabelling(emulator, state)), \
            Kubelet(cluster, samples()) as kubelet:
        code, folder, report, out, err = run("-t", "10", "--instance-types", "c6in.xlarge", "m6in.large")
    assert code == 0, out + err
    sets = [c for c in _calls(log) if c[:2] == ["config", "set"]]
    assert [c[c.index("--") + 1] for c in sets] == ["c6in.xlarge", "m6in.large", "m6i.large"]
    assert len([c for c in _calls(log) if c[:1] == ["up"]]) == 3
    assert json.loads(state.read_text())["stacks"]["lab"]["config"][throughput.CONFIG_KEY] == "m6i.large"
    assert statuses(report)[throughput_kinds.CHECK_RESTORED] == PASS
    assert statuses(report)["cloud → hybrid measured (c6in.xlarge)"] == PASS
    assert statuses(report)["gateway on c6in.xlarge"] == PASS
    assert statuses(report)["gateway on m6in.large"] == PASS
    assert measured(report)["m6in.large: hybrid → cloud (receiver)"] == 4.19
    assert [row["instance_type"] for row in report["comparison"]] == ["c6in.xlarge", "m6in.large"]
    notes = "\n".join(report["notes"])
    assert "[c6in.xlarge] gateway nodes:" in notes and "(instance type c6in.xlarge)" in notes
    markdown = (folder / "report.md").read_text()
    assert "## Instance types compared" in markdown
    assert "| c6in.xlarge | 4.74 | 31 | 4.19 | 48 |" in markdown
    assert len(kubelet.seen) == 8 and live_measurement_pods(emulator) == []


def _scaled(sample: str, factor: float) -> str:
    """An iperf3 JSON with its summed throughput scaled: another instance type's figures."""
    data = json.loads(sample)
    for key in ("sum_sent", "sum_received"):
        data["end"][key]["bits_per_second"] *= factor
    return json.dumps(data)


@pytest.mark.skipif(not __import__("os").environ.get("RECORD_THROUGHPUT"),
                    reason="records tests/fixtures/rehearse/throughput-two-types when RECORD_THROUGHPUT=1")
def test_record_the_committed_run(emulator, cluster, tmp_path, monkeypatch, loopback_only, capsys):
    """Two instance types, the second (m6in.large) measuring 70 % of the first's figures; as
    the stack, and at the start, tests/rehearsal_evening.py gives it."""
    stack = rehearsal_evening.STACK
    cluster.t0 = rehearsal_evening.STARTED["throughput-two-types"]
    run = _runner(emulator, cluster, tmp_path, monkeypatch, capsys, stack)
    state, _ = _install_fake_pulumi(tmp_path, monkeypatch, stack)
    plant(emulator)
    clients = []

    def logs(args: list[str], on_hybrid: bool) -> str:
        clients.append(on_hybrid)
        sample = GOOD_H2C if on_hybrid else GOOD_C2H
        return sample if len(clients) <= 2 else _scaled(sample, 0.7)

    with mock.patch.object(throughput, "open_stack", _relabelling(emulator, state, stack)), \
            Kubelet(cluster, logs):
        code, folder, report, out, err = run("-t", "10", "--instance-types", "c6in.xlarge", "m6in.large")
    assert code == 0, out + err
    target = FIXTURES_RUNS / "throughput-two-types"
    target.mkdir(exist_ok=True)
    (target / "events.jsonl").write_bytes((folder / "events.jsonl").read_bytes())


def test_a_failure_in_the_middle_restores_the_instance_type(emulator, cluster, run, fake_pulumi, monkeypatch):
    state, log = fake_pulumi
    plant(emulator)
    real = throughput.Pods.read

    def broken(self, name):
        if "client" in name:
            raise ConnectionError("connection reset by peer")
        return real(self, name)

    monkeypatch.setattr(throughput.Pods, "read", broken)
    with mock.patch.object(throughput, "open_stack", _relabelling(emulator, state)), \
            Kubelet(cluster, samples()):
        code, folder, report, out, err = run("-t", "10", "--instance-types", "c6in.xlarge")
    assert code == 2, out + err
    sets = [c for c in _calls(log) if c[:2] == ["config", "set"]]
    assert [c[c.index("--") + 1] for c in sets] == ["c6in.xlarge", "m6i.large"]
    assert json.loads(state.read_text())["stacks"]["lab"]["config"][throughput.CONFIG_KEY] == "m6i.large"
    assert live_measurement_pods(emulator) == []


def test_a_refused_update_is_reported_and_the_original_put_back(emulator, cluster, run, fake_pulumi):
    state, log = fake_pulumi
    data = json.loads(state.read_text())
    data["up_fails"] = 1
    state.write_text(json.dumps(data))
    plant(emulator)
    with mock.patch.object(throughput, "open_stack", _relabelling(emulator, state)), \
            Kubelet(cluster, samples()):
        code, folder, report, out, err = run("-t", "10", "--instance-types", "c6in.xlarge", "m6in.large")
    assert code == 1, out + err
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["cloud → hybrid measured (c6in.xlarge)"]["status"] == FAIL
    assert "switching to c6in.xlarge failed" in checks["cloud → hybrid measured (c6in.xlarge)"]["seen"]
    assert checks["cloud → hybrid measured (m6in.large)"]["status"] == PASS
    assert checks[throughput_kinds.CHECK_RESTORED]["status"] == PASS
    assert json.loads(state.read_text())["stacks"]["lab"]["config"][throughput.CONFIG_KEY] == "m6i.large"
    assert "| c6in.xlarge | not measured |" in (folder / "report.md").read_text()


def test_events_replay_to_the_same_report(emulator, cluster, run):
    plant(emulator)
    with Kubelet(cluster, samples()):
        code, folder, report, out, err = run()
    again = throughput_analysis.analyse(rec.read_events(folder))
    assert again.to_json() == report


def test_a_gateway_still_on_the_old_type_fails_its_check(emulator, cluster, run, fake_pulumi, monkeypatch):
    """`pulumi up` returned but the nodes were not replaced (here: nothing relabels them)."""
    plant(emulator)
    monkeypatch.setattr(throughput, "GATEWAY_SETTLE_SECONDS", 0.1)
    with Kubelet(cluster, samples()):
        code, folder, report, out, err = run("-t", "10", "--instance-types", "c6in.xlarge")
    assert code == 1, out + err
    check = {c["name"]: c for c in report["checks"]}["gateway on c6in.xlarge"]
    assert check["status"] == FAIL and check["seen"].startswith("gateway nodes m6i.large, leader")
    assert statuses(report)[throughput_kinds.CHECK_RESTORED] == PASS


def test_a_leader_change_during_the_measurement_is_noted(emulator, cluster, run, monkeypatch):
    plant(emulator)
    real = throughput.measure_direction

    def failover_midway(ctx, record, pods, direction, *args):
        real(ctx, record, pods, direction, *args)
        emulator.put(LEASES, "eks-hybrid-nodes-gateway", "hybrid-gateway-leader", {"spec": {
            "holderIdentity": f"{GW_NODES[0]}_0c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f"}})

    monkeypatch.setattr(throughput, "measure_direction", failover_midway)
    with Kubelet(cluster, samples()):
        code, folder, report, out, err = run("-t", "10")
    assert code == 0, out + err
    assert (f"the leader changed during the measurement: {GW_NODES[1]} → {GW_NODES[0]}"
            in "\n".join(report["notes"]))


def test_a_client_that_does_not_finish_is_partial(emulator, cluster, run, monkeypatch):
    plant(emulator)
    monkeypatch.setattr(throughput, "CLIENT_MARGIN_SECONDS", 0)
    monkeypatch.setattr(throughput, "SERVER_START_SECONDS", 0.3)
    with Kubelet(cluster, lambda args, on_hybrid: "", client_phase="Running"):
        code, folder, report, out, err = run("-t", "1")
    assert code == 1, out + err
    seen = {c["name"]: c["seen"] for c in report["checks"]}
    assert seen["cloud → hybrid measured"] == "partial: the client pod did not finish (phase Running)"
    assert statuses(report)[throughput_kinds.CHECK_PODS_REMOVED] == PASS
