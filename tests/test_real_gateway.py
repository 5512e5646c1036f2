"""`verify gateway` and `failover` against the REAL API server: the gateway Lease, its pods and
the prober logs are the real kube-apiserver's (and kwok's, as the nodes' kubelets), EC2 is moto,
and the gateways are played by the test as the gateway's source and client-go's leader election
act (tests/real_gateway.py says what is played and why the real gateway cannot run here).

One scenario runs in a private network namespace (tests/real_gateway_scenario.py: the first
leader verified, a failover, the new leader verified, both gateway nodes cut off from the API
server), and each test compares what a tool reported with what the played gateways and probers
did by their own clocks — never with the tools' own output read back. Skips, naming the build
command, without the engines; needs root for ``unshare -n`` and Helm for the chart."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from rehearse.run.record import parse_time
from tests import worker_share
from tests.conftest import PROJECT_DIR

sys.path.insert(0, str(PROJECT_DIR / "engines"))
from control_plane import engines_folder  # noqa: E402

#: client-go's leader election with the gateway's flags: a standby sees a renewal at its next
#: try (every retry·[1, 1+1.2) = 1-2.2 s, JitterUntil), counts the lease (3 s) from then, and
#: takes it at its first try after — so a Lease is unowned for more than 3 s and at most 7.4 s.
LEASE, RETRY, JITTER = 3.0, 1.0, 1.2
UNOWNED_MAX = LEASE + 2 * RETRY * (1 + JITTER)
#: A figure read from a MicroTime or a kubelet timestamp is exact; the reports round to 1 ms.
EXACT = 0.0011
#: Seconds the scenario may take (about 45 s alone; much more on a loaded machine).
SCENARIO_TIMEOUT = 300


def _why_not() -> Optional[str]:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return "the gateway scenario needs root, unshare and ip (a private network namespace)"
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        return "`unshare -n` is refused here: the gateway scenario needs a private network namespace"
    if shutil.which("go") is None or shutil.which("openssl") is None:
        return "the real-engine tier needs go and openssl on PATH"
    folder, why = engines_folder()
    if folder is None:
        return f"the real-engine tier needs the engines: {why}"
    from offline import chart_render

    problem = chart_render.engine_problem()
    return f"Helm cannot render the gateway chart here: {problem}" if problem else None


def _run_scenario(work: Path) -> dict[str, Any]:
    done = subprocess.run(["unshare", "-n", sys.executable, "-m", "tests.real_gateway_scenario",
                           str(work)], cwd=PROJECT_DIR, capture_output=True, text=True,
                          timeout=SCENARIO_TIMEOUT)
    path = work / "result.json"
    assert path.exists(), f"the scenario wrote nothing (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> dict[str, Any]:
    why = _why_not()
    if why:
        pytest.skip(why)
    # One run for both xdist workers (the scenario is ~45 s of two cores); its folders stay in
    # the computing worker's temporary directory, which the session keeps.
    shared = worker_share.directory("real-gateway")
    compute = lambda: _run_scenario(tmp_path_factory.mktemp("real-gateway"))  # noqa: E731
    # The other worker waits for it as long as the scenario may take (its own timeout).
    result = compute() if shared is None else worker_share.once(shared, "scenario", compute,
                                                                 wait_s=SCENARIO_TIMEOUT)
    if result.get("skip"):
        pytest.skip(f"the real-engine tier needs the engines: {result['skip']}")
    # What the played gateways met (a 403 from the chart's RBAC, a refused call) comes first.
    met = sorted({e for g in result.get("gateways", []) for e in g["errors"]})
    assert not result.get("error"), "\n".join([result.get("error", ""), "the gateways met:", *met,
                                               json.dumps(result.get("logs"), indent=1)])
    return result


# --- what the played gateways did -----------------------------------------------------------

def _at(stamp: str) -> float:
    return parse_time(stamp).timestamp()


def _writes(result: dict) -> list[dict]:
    """Every Lease write the server accepted, in order: who, kind, renewTime, acquireTime,
    transitions, resourceVersion."""
    found = [{"identity": g["identity"], "node": g["node"], "eni": g["eni"], "ip": g["ip"],
              "pod": g["pod"], "kind": kind, "renew": renew, "acquire": acquire,
              "transitions": transitions, "rv": int(rv)}
             for g in result["gateways"] for kind, renew, acquire, transitions, rv in g["writes"]]
    return sorted(found, key=lambda w: w["rv"])


def _holder_at(result: dict, moment: float) -> dict:
    """The write that made the Lease what it was at ``moment`` (this machine's clock)."""
    return [w for w in _writes(result) if _at(w["renew"]) <= moment][-1]


def _gateway(result: dict, identity: str) -> dict:
    [found] = [g for g in result["gateways"] if g["identity"] == identity]
    return found


def _check(run: dict, name: str) -> dict:
    [found] = [c for c in run["report"]["checks"] if c["name"] == name]
    return found


def _measure(run: dict, prefix: str) -> dict:
    [found] = [m for m in run["report"]["measurements"] if m["name"].startswith(prefix)]
    return found


def _events(run: dict, kind: str) -> list[dict]:
    lines = (Path(run["folder"]) / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def _deleted_at(result: dict) -> float:
    """When `failover` sent its DELETE (its event; this machine's clock, as the played ones)."""
    [event] = _events(result["failover"], "pod.deleted")
    return _at(event["requested_at"])


def _acquisition_after(result: dict, moment: float) -> dict:
    [first, *_] = [w for w in _writes(result) if w["kind"] == "acquire" and _at(w["acquire"]) > moment]
    return first


VERIFIED = ("gateway pods", "lease holder", "gateway healthz", "leader by its own metrics",
            "VPC route to the leader", "CiliumVTEPConfig names the leader",
            "traffic cloud → hybrid", "traffic hybrid → cloud")


def _assert_verified(run: dict, leader: dict) -> None:
    statuses = {c["name"]: c["status"] for c in run["report"]["checks"]}
    assert {n: statuses[n] for n in VERIFIED} == dict.fromkeys(VERIFIED, "PASS"), \
        json.dumps(run["report"]["checks"], indent=1, ensure_ascii=False)
    lease = _check(run, "lease holder")["seen"]
    assert f"holder {leader['identity']!r} → node {leader['node']}" in lease
    assert f"acquired {leader['acquire']}" in lease
    assert leader["pod"] in lease
    route = _check(run, "VPC route to the leader")["seen"]
    assert leader["eni"] in route
    assert leader["ip"] in _check(run, "CiliumVTEPConfig names the leader")["seen"]


# --- the tests ------------------------------------------------------------------------------

def test_verify_gateway_finds_the_leader_the_real_lease_names(scenario):
    """The Lease, pods, route and VTEP config as the real server and moto hold them, the pods'
    healthz and metrics through the real API server's pod proxy, the probers' logs through
    kwok: every gateway check passes, naming the gateway that actually holds the Lease."""
    run = scenario["verify_before"]
    leader = _holder_at(scenario, run["started"])
    assert leader["kind"] in ("create", "renew")
    _assert_verified(run, leader)
    # The first leader created the route in both tables (none was declared).
    calls = [call for _, call, _ in _gateway(scenario, leader["identity"])["routes"]]
    assert calls == ["CreateRoute", "CreateRoute"]


def test_failover_measures_the_handover_the_gateways_made(scenario):
    run = scenario["failover"]
    statuses = {c["name"]: c["status"] for c in run["report"]["checks"]}
    deleted = _deleted_at(scenario)
    old = _holder_at(scenario, deleted)
    new = _acquisition_after(scenario, deleted)
    resolved = _check(run, "leader resolved")["seen"]
    assert f"holder {old['identity']} -> node {old['node']} -> pod {old['pod']}" in resolved
    assert old["eni"] in resolved
    # Only the standby on the other node should take over; the tool says so exactly when the
    # real winner was the deleted leader's own replacement.
    expected = "PASS" if new["node"] != old["node"] else "FAIL"
    assert statuses["new leader elected"] == expected, _check(run, "new leader elected")
    assert new["identity"] in _check(run, "new leader elected")["seen"]
    assert new["transitions"] == old["transitions"] + 1
    assert f"leaseTransitions {old['transitions']} -> {new['transitions']}" in \
        _check(run, "new leader elected")["seen"]

    handover = _measure(run, "Lease handover")["value"]
    assert handover == pytest.approx(_at(new["acquire"]) - deleted, abs=EXACT)
    last_renew = max(_at(w["renew"]) for w in _writes(scenario) if w["identity"] == old["identity"])
    unowned = _measure(run, "Lease unowned")["value"]
    assert unowned == pytest.approx(_at(new["acquire"]) - last_renew, abs=EXACT)
    print(f"handover {handover} s, unowned {unowned} s, winner {new['node']} "
          f"(deleted on {old['node']})")
    assert LEASE < unowned <= UNOWNED_MAX
    assert f"≤ {UNOWNED_MAX:g} s" in _measure(run, "Lease unowned")["reference"]

    winner = _gateway(scenario, new["identity"])
    assert statuses["route switched to the new leader's ENI"] == "PASS"
    assert winner["eni"] in _check(run, "route switched to the new leader's ENI")["seen"]
    if new["node"] == old["node"]:
        # The replacement won (a real, if rare, outcome): the routes already named its ENI.
        assert [call for _, call, _ in winner["routes"]] == ["none", "none"]
        return
    # The route and VTEP switch: first seen by a poll at most one interval (and the poll's own
    # time) after the new leader's ReplaceRoute / Update returned.
    assert sorted(call for _, call, _ in winner["routes"]) == ["ReplaceRoute", "ReplaceRoute"]
    replaced = max(at for _, _, at in winner["routes"]) - deleted
    switch = _measure(run, "route switch")["value"]
    assert replaced <= switch + EXACT <= replaced + 0.25 + 0.5
    call, updated = winner["vtep"]
    assert call == "update" and statuses["VTEP config follows the new leader"] == "PASS"
    follow = _measure(run, "VTEP follow")["value"]
    assert updated - deleted <= follow + EXACT <= updated - deleted + 0.25 + 0.5


@pytest.mark.parametrize("prober, direction", [("prober-cloud", "cloud→hybrid"),
                                               ("prober-hybrid", "hybrid→cloud")])
@pytest.mark.parametrize("path, name", [("svc", "Service"), ("pod", "pod")])
def test_failover_gaps_are_the_probers_own(scenario, prober, direction, path, name):
    """The longest interval between two successful probes over the failover, as the played
    prober logged them (read back through the real API server and kwok)."""
    run = scenario["failover"]
    deleted = _deleted_at(scenario) * 1e6
    ended = _at(_events(run, "failover.ended")[0]["at"]) * 1e6
    oks = [at for at, p, ok in scenario["truth"][prober] if p == path and ok]
    gaps = [(b - a) / 1e6 for a, b in zip(oks, oks[1:]) if a <= ended and b >= deleted]
    figure = _measure(run, f"longest gap {direction} via {name}")["value"]
    assert figure == pytest.approx(max(gaps), abs=EXACT)
    assert _check(run, f"gap {direction} via {name}")["status"] == "PASS"


def test_verify_gateway_follows_the_new_leader(scenario):
    run = scenario["verify_after"]
    leader = _holder_at(scenario, run["started"])
    assert leader["identity"] == _acquisition_after(scenario, _deleted_at(scenario))["identity"]
    _assert_verified(run, leader)


def test_a_lease_nobody_renews_fails_by_the_servers_clock(scenario):
    """Both gateway nodes cut off from the API server: the leader's renewals stop and nobody
    can take over. The Lease the server returns still names the leader; its age, judged by the
    server's Date header, is past the 3 s duration."""
    run = scenario["verify_partitioned"]
    last = _writes(scenario)[-1]
    assert scenario["lease_partitioned"]["spec"]["renewTime"] == last["renew"]
    assert run["started"] - _at(last["renew"]) > LEASE + 1  # the Date header has whole seconds
    check = _check(run, "lease holder")
    assert check["status"] == "FAIL"
    assert f"holder {last['identity']!r}" in check["seen"] and "has expired" in check["seen"]
    statuses = {c["name"]: c["status"] for c in run["report"]["checks"]}
    assert statuses["VPC route to the leader"] == statuses["leader by its own metrics"] == "SKIP"


def test_the_played_election_keeps_to_the_real_servers_rules(scenario):
    """The scenario's own ground: every Lease write the server accepted got a new
    resourceVersion; transitions count exactly the acquisitions; no two holders overlapped
    (each acquisition came more than a lease after the previous holder's last renewal); the
    chart's Role and ClusterRole allowed every call the gateways made (no 403)."""
    writes = _writes(scenario)
    assert len({w["rv"] for w in writes}) == len(writes)
    assert writes[0]["kind"] == "create" and writes[0]["transitions"] == 0
    acquisitions = [w for w in writes if w["kind"] == "acquire"]
    assert [w["transitions"] for w in acquisitions] == list(range(1, len(acquisitions) + 1))
    for before, after in zip(writes, writes[1:]):
        if after["identity"] != before["identity"]:
            assert after["kind"] == "acquire"
            assert _at(after["acquire"]) - _at(before["renew"]) > LEASE
    errors = [e for g in scenario["gateways"] for e in g["errors"]]
    assert not [e for e in errors if "HTTP 403" in e], errors
    timing = scenario["phases"]
    print(f"scenario: engines {timing['engines'] - timing['begin']:.1f} s, first leader "
          f"{timing['first_leader'] - timing['engines']:.1f} s, whole {timing['end'] - timing['begin']:.1f} s")
