"""The EKS Hybrid Nodes gateway, played by the test against the REAL API server (and moto for
EC2), for tests/test_real_gateway.py; its scenario (tests/real_gateway_scenario.py) runs it in a
private network namespace.

Why played and not run: the gateway (github.com/aws/eks-hybrid-nodes-gateway, whose go.mod says
``module github.com/aws/hybrid-gateway``) is not served by the Go module proxy — every look-up
answers ``403 Forbidden … This module version is not available`` (``go list -m -versions``, its
chart's appVersion ``@v0.1.0``, ``@v1.0.0``, ``@main``, and the module path its go.mod declares),
so engines/ cannot pin and build it (docs/gateway.md#the-lease).

What is played, from the gateway's source (``cmd/gateway/main.go``, ``internal/gateway/setup.go``,
``internal/aws/routetable.go``, ``internal/cilium/vtep.go``) and the libraries it runs:

- one process per gateway pod the real scheduler placed and kwok set Running, started when the
  pod runs and stopped when the pod is deleted (the container's SIGTERM: the manager stops, and
  controller-runtime does not release the Lease on cancel by default);
- at start-up, before leader election, what ``main`` does with AWS: ``DescribeInstances`` of its
  own instance for the primary ENI (device index 0) and ``DescribeRouteTables`` of each table
  (``VerifyRouteTableAccess``);
- leader election exactly as client-go's ``tools/leaderelection`` (v0.35: ``tryAcquireOrRenew``,
  ``acquire`` with ``JitterUntil(retry, 1.2, sliding)``, ``renew`` with
  ``PollUntilContextTimeout(retry, renewDeadline)``, the Lease lock's Get/Create/Update with the
  object's resourceVersion) with the gateway's flags (lease 3 s, renew deadline 2 s, retry 1 s)
  and controller-runtime's identity ``os.Hostname() + "_" + uuid`` — the node's hostname, the
  pods using the host network; on the pod's own ServiceAccount token (a TokenRequest bound to the
  pod), so the chart's Role and ClusterRole are what authorizes it;
- when elected (``Setup.Start``): ``hybrid_gateway_leader_is_active`` 1, then per route table
  ``DescribeRouteTables`` and ``ReplaceRoute`` (or ``CreateRoute`` where there is none; nothing if
  it already targets the ENI), then the ``CiliumVTEPConfig/hybrid-gateway`` upsert (Get, then
  Create or Update when tunnelEndpoint, mac or cidr differ);
- ``/healthz`` and ``/readyz`` on :8088 and ``/metrics`` on :10080 on its node's IP, which the
  real API server's pod proxy reaches.

Every act is recorded with this machine's clock (``Record``), so the test compares the tools'
figures with what the gateways actually did. The demo 1 probers are played too: each turn probes
``svc`` then ``pod`` (a failed probe ends after ``timeout 1``), then sleeps 1 s, and logs each
result as the container runtime writes it (CRI format), which kwok serves as the pod's log; a
probe succeeds when every route table's route and the VTEP config name the node of a running
gateway process (every replica carries the VXLAN device, the leader only writes where traffic
goes)."""

from __future__ import annotations

import datetime
import http.server
import json
import random
import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

#: The gateway's flags' defaults (cmd/gateway/main.go).
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3.0, 2.0, 1.0
#: client-go tools/leaderelection: JitterFactor.
JITTER_FACTOR = 1.2
HEALTH_PORT, METRICS_PORT = 8088, 10080
VTEP_NAME, VTEP_ENDPOINT = "hybrid-gateway", "vpc-gateway"
VTEP_PATH = "/apis/cilium.io/v2/ciliumvtepconfigs"


def micro_time(moment: float) -> str:
    """metav1.MicroTime's JSON form: RFC 3339, six fractional digits, UTC."""
    return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


class Partitioned(ConnectionError):
    """The played gateway's node has lost the API server (a scenario's fault)."""


class Api:
    """The API server as one identity sees it: bearer token, the cluster CA."""

    def __init__(self, url: str, ca_file: Path, token: str, *, timeout: float = 10.0,
                 cut: Optional[threading.Event] = None):
        self.url, self.token, self.timeout = url, token, timeout
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self.cut = cut

    def call(self, method: str, path: str, body: Any = None, *,
             timeout: Optional[float] = None) -> tuple[int, Any]:
        if self.cut is not None and self.cut.is_set():
            raise Partitioned(f"{method} {path}: no route to the API server")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self.context,
                                        timeout=timeout or self.timeout) as answer:
                raw, status = answer.read(), answer.status
        except urllib.error.HTTPError as error:
            raw, status = error.read(), error.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")


@dataclass
class Record:
    """What one played gateway process did, by this machine's clock (time.time())."""

    pod: str
    node: str
    ip: str
    identity: str
    started: float
    eni: Optional[str] = None
    stopped: Optional[float] = None
    #: Each Lease write that succeeded: (kind, its renewTime string, acquireTime, transitions,
    #: the resourceVersion the server gave back).
    writes: list[tuple[str, str, str, int, str]] = field(default_factory=list)
    acquired: Optional[float] = None
    lost: Optional[float] = None
    #: (table, call, when it returned).
    routes: list[tuple[str, str, float]] = field(default_factory=list)
    vtep: Optional[tuple[str, float]] = None
    errors: list[str] = field(default_factory=list)
    conflicts: int = 0

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Elector:
    """client-go's LeaderElector with a LeaseLock, non-coordinated (tools/leaderelection/
    leaderelection.go and resourcelock/leaselock.go, v0.35), playing one gateway replica."""

    def __init__(self, api: Api, namespace: str, name: str, identity: str, record: Record,
                 stop: threading.Event, rng: random.Random,
                 on_started: Callable[[], None], on_stopped: Callable[[], None]):
        self.api, self.identity, self.record, self.stop = api, identity, record, stop
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name, self.namespace, self.rng = name, namespace, rng
        self.on_started, self.on_stopped = on_started, on_stopped
        self.lease: Optional[dict] = None  # the lock's last object (its resourceVersion)
        self.observed: Optional[dict] = None
        self.observed_raw: Optional[str] = None
        self.observed_time = 0.0

    # --- the lock -----------------------------------------------------------------------------

    @staticmethod
    def _record_of(lease: dict) -> dict:
        spec = lease.get("spec") or {}
        return {"holderIdentity": spec.get("holderIdentity") or "",
                "leaseDurationSeconds": spec.get("leaseDurationSeconds") or 0,
                "acquireTime": spec.get("acquireTime"), "renewTime": spec.get("renewTime"),
                "leaseTransitions": spec.get("leaseTransitions") or 0}

    def _spec(self, record: dict) -> dict:
        return {"holderIdentity": record["holderIdentity"],
                "leaseDurationSeconds": record["leaseDurationSeconds"],
                "acquireTime": record["acquireTime"], "renewTime": record["renewTime"],
                "leaseTransitions": record["leaseTransitions"]}

    def _update(self, record: dict, kind: str) -> bool:
        if self.lease is None:
            return False  # "lease not initialized, call get or create first"
        body = {**self.lease, "spec": self._spec(record)}
        status, answer = self.api.call("PUT", self.path, body, timeout=RENEW_DEADLINE)
        if status != 200:
            if status == 409:
                self.record.conflicts += 1
            self.record.errors.append(f"{kind}: HTTP {status}")
            return False
        self.lease = answer
        self._wrote(kind, record, answer)
        return True

    def _wrote(self, kind: str, record: dict, answer: dict) -> None:
        self.record.writes.append((kind, record["renewTime"], record["acquireTime"],
                                   record["leaseTransitions"],
                                   answer["metadata"]["resourceVersion"]))

    def _set_observed(self, record: dict) -> None:
        self.observed, self.observed_time = dict(record), time.time()

    def is_leader(self) -> bool:
        return bool(self.observed) and self.observed["holderIdentity"] == self.identity

    def _valid(self, now: float) -> bool:
        duration = (self.observed or {}).get("leaseDurationSeconds") or 0
        return self.observed_time + duration > now

    def try_acquire_or_renew(self) -> bool:
        now = time.time()
        stamp = micro_time(now)
        record = {"holderIdentity": self.identity, "leaseDurationSeconds": int(LEASE_DURATION),
                  "renewTime": stamp, "acquireTime": stamp, "leaseTransitions": 0}
        # 1. The leader's fast path: update the object it saw last.
        if self.is_leader() and self._valid(now):
            record["acquireTime"] = self.observed["acquireTime"]
            record["leaseTransitions"] = self.observed["leaseTransitions"]
            if self._update(record, "renew"):
                self._set_observed(record)
                return True
        # 2. Get, or create.
        status, answer = self.api.call("GET", self.path, timeout=RENEW_DEADLINE)
        if status == 404:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(record)}
            status, answer = self.api.call("POST", self.collection, body, timeout=RENEW_DEADLINE)
            if status != 201:
                self.record.errors.append(f"create: HTTP {status}")
                return False
            self.lease = answer
            self._wrote("create", record, answer)
            self._set_observed(record)
            return True
        if status != 200:
            self.record.errors.append(f"get: HTTP {status}")
            return False
        self.lease = answer
        old = self._record_of(answer)
        raw = json.dumps(old, sort_keys=True)
        # 3. A record not seen before restarts the expiry clock (observedTime).
        if raw != self.observed_raw:
            self._set_observed(old)
            self.observed_raw = raw
        if old["holderIdentity"] and self._valid(now) and not self.is_leader():
            return False
        # 4. Take it (or renew by the slow path).
        if self.is_leader():
            record["acquireTime"] = old["acquireTime"]
            record["leaseTransitions"] = old["leaseTransitions"]
            kind = "renew"
        else:
            record["leaseTransitions"] = old["leaseTransitions"] + 1
            kind = "acquire"
        if not self._update(record, kind):
            return False
        self._set_observed(record)
        return True

    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except (OSError, ValueError) as error:  # a partition, a timeout
            self.record.errors.append(f"{type(error).__name__}: {error}"[:200])
            return False

    def run(self) -> None:
        # acquire(): JitterUntil(f, retry, 1.2, sliding=true) until it succeeds.
        while not self.stop.is_set():
            if self._attempt():
                break
            self.stop.wait(RETRY_PERIOD + self.rng.random() * JITTER_FACTOR * RETRY_PERIOD)
        if self.stop.is_set():
            return
        self.record.acquired = time.time()
        threading.Thread(target=self.on_started, daemon=True).start()
        # renew(): Until(PollUntilContextTimeout(retry, renewDeadline, immediate), retry).
        while not self.stop.is_set():
            deadline = time.monotonic() + RENEW_DEADLINE
            renewed = self._attempt()
            while not renewed and not self.stop.is_set():
                if self.stop.wait(RETRY_PERIOD) or time.monotonic() >= deadline:
                    break
                renewed = self._attempt()
            if self.stop.is_set():
                return  # the process ends; ReleaseOnCancel is off: the Lease stays as it is
            if not renewed:
                # controller-runtime: "leader election lost", the manager (and process) exits.
                self.record.lost = time.time()
                self.on_stopped()
                return
            self.stop.wait(RETRY_PERIOD)


class _Handler(http.server.BaseHTTPRequestHandler):
    gateway: "PlayedGateway"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        port = self.server.server_address[1]
        if port == HEALTH_PORT and self.path in ("/healthz", "/readyz"):
            body = b"ok"
        elif port == METRICS_PORT and self.path == "/metrics":
            body = self.gateway.metrics().encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


class PlayedGateway:
    """One gateway container: start-up, election, the leader's setup, its HTTP endpoints."""

    def __init__(self, world: "World", pod: dict, token: str, *, seed: int):
        meta, status = pod["metadata"], pod["status"]
        self.world = world
        self.node = pod["spec"]["nodeName"]
        self.ip = status["hostIP"]
        self.instance = world.instances[self.node]
        # controller-runtime: os.Hostname() + "_" + uuid; the host network's hostname is the
        # node's (on EKS its name, the private DNS name).
        identity = f"{self.node}_{uuid.UUID(int=random.Random(seed).getrandbits(128), version=4)}"
        self.record = Record(pod=meta["name"], node=self.node, ip=self.ip, identity=identity,
                             started=time.time())
        self.stop_event = threading.Event()
        self.leading = False
        self.api = Api(world.url, world.ca_file, token, cut=world.partition)
        self.elector = Elector(self.api, world.namespace, world.lease_name, identity,
                               self.record, self.stop_event, random.Random(seed),
                               self._setup, self._stopped_leading)
        self.servers: list[http.server.ThreadingHTTPServer] = []
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def metrics(self) -> str:
        # internal/metrics: the gauge under the hybrid_gateway namespace.
        return ("# HELP hybrid_gateway_leader_is_active Whether this instance is the leader\n"
                "# TYPE hybrid_gateway_leader_is_active gauge\n"
                f"hybrid_gateway_leader_is_active {1 if self.leading else 0}\n")

    def _main(self) -> None:
        try:
            # The container's start (image cached, the VXLAN device) before main runs.
            if self.stop_event.wait(self.world.start_delay):
                return
            ec2 = self.world.ec2()
            reservations = ec2.describe_instances(InstanceIds=[self.instance])["Reservations"]
            for eni in reservations[0]["Instances"][0]["NetworkInterfaces"]:
                if (eni.get("Attachment") or {}).get("DeviceIndex") == 0:
                    self.record.eni = eni["NetworkInterfaceId"]
            for table in self.world.tables:
                ec2.describe_route_tables(RouteTableIds=[table])  # VerifyRouteTableAccess
            handler = type("Handler", (_Handler,), {"gateway": self})
            for port in (HEALTH_PORT, METRICS_PORT):
                server = http.server.ThreadingHTTPServer((self.ip, port), handler)
                server.daemon_threads = True
                self.servers.append(server)
                threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                 daemon=True).start()
            self.elector.run()
        except Exception as error:  # noqa: BLE001 recorded for the test to show
            self.record.errors.append(f"main: {type(error).__name__}: {error}"[:300])
        finally:
            if self.record.lost is not None:
                self._close()

    def _setup(self) -> None:
        """internal/gateway/setup.go Start: routes, then the VTEP config."""
        self.leading = True
        try:
            ec2 = self.world.ec2()
            for table in self.world.tables:
                routes = ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"][0]["Routes"]
                route = next((r for r in routes
                              if r.get("DestinationCidrBlock") == self.world.pod_cidr), None)
                if route is not None and route.get("NetworkInterfaceId") == self.record.eni:
                    call = "none"
                elif route is not None:
                    ec2.replace_route(RouteTableId=table, DestinationCidrBlock=self.world.pod_cidr,
                                      NetworkInterfaceId=self.record.eni)
                    call = "ReplaceRoute"
                else:
                    ec2.create_route(RouteTableId=table, DestinationCidrBlock=self.world.pod_cidr,
                                     NetworkInterfaceId=self.record.eni)
                    call = "CreateRoute"
                self.record.routes.append((table, call, time.time()))
            self._upsert_vtep()
        except Exception as error:  # noqa: BLE001 the real setup logs and returns its error
            self.record.errors.append(f"setup: {type(error).__name__}: {error}"[:300])

    def _upsert_vtep(self) -> None:
        mac = "02:00:00:%02x:%02x:%02x" % tuple(int(p) for p in self.ip.split(".")[1:])
        endpoint = {"name": VTEP_ENDPOINT, "tunnelEndpoint": self.ip, "cidr": self.world.vpc_cidr,
                    "mac": mac}
        desired = {"apiVersion": "cilium.io/v2", "kind": "CiliumVTEPConfig",
                   "metadata": {"name": VTEP_NAME}, "spec": {"endpoints": [endpoint]}}
        status, existing = self.api.call("GET", f"{VTEP_PATH}/{VTEP_NAME}")
        if status == 404:
            status, _ = self.api.call("POST", VTEP_PATH, desired)
            call = "create"
        elif status == 200:
            first = ((existing.get("spec") or {}).get("endpoints") or [{}])[0]
            if all(first.get(k) == endpoint[k] for k in ("tunnelEndpoint", "mac", "cidr")):
                self.record.vtep = ("none", time.time())
                return
            desired["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            status, _ = self.api.call("PUT", f"{VTEP_PATH}/{VTEP_NAME}", desired)
            call = "update"
        if status not in (200, 201):
            self.record.errors.append(f"vtep {call}: HTTP {status}")
            return
        self.record.vtep = (call, time.time())

    def _stopped_leading(self) -> None:
        self.leading = False

    def _close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
        self.servers = []

    def stop(self) -> None:
        """The pod's deletion: SIGTERM, the process exits (its Lease left as it is)."""
        if self.record.stopped is None:
            self.record.stopped = time.time()
        self.stop_event.set()
        self.leading = False
        self.thread.join(5)
        self._close()

    @property
    def alive(self) -> bool:
        return self.record.stopped is None and self.record.lost is None and bool(self.servers)
