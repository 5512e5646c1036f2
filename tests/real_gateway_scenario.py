"""The gateway scenario on the real engines, run by tests/test_real_gateway.py as
``unshare -n python -m tests.real_gateway_scenario OUTDIR`` — in a network namespace of its own
holding only ``lo``, because it binds addresses that are not loopback: the gateway nodes' private
IPs (moto's) are added to ``lo`` so the real API server's pod proxy reaches the played gateways'
:8088 and :10080 (it refuses loopback addresses, apimachinery's ``IsProxyableIP``), and kwok's
kubelet server listens on every address of the namespace so the API server can reach "kubelets"
at the nodes' IPs for the probers' logs. Nothing in the namespace can reach beyond it.

It starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler (engines/control_plane.py)
and kwok (with its server, and Logs that serve the played probers' files), moto's server on
127.0.0.1, renders the gateway chart with the lab's values (Helm; components/hybrid_gateway.py
``gateway_values``) and applies it, adds the lab's nodes, plays the gateways and the probers
(tests/real_gateway.py), then runs the rehearsal tools in this process:

1. ``verify gateway`` with the first leader settled;
2. ``failover`` (deletes the leader's pod through the real API server);
3. ``verify gateway`` again, with the new leader;
4. both gateway nodes lose the API server (a partition): the leader's renewals stop, the Lease
   expires with nobody to take it, and ``verify gateway`` runs once more.

It writes OUTDIR/result.json: each run's report and folder, what each played gateway did, each
prober's probes, the nodes and ENIs, and the phases' times."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Optional

from tests.conftest import PROJECT_DIR
from tests.real_gateway import PlayedGateway, VTEP_NAME, VTEP_PATH

sys.path.insert(0, str(PROJECT_DIR / "engines"))
from control_plane import (KWOK_NODE_ANNOTATION, ControlPlane, engines_folder,  # noqa: E402
                           free_port, kwok_stages)

REGION = "ap-northeast-2"
NAMESPACE, LEASE = "eks-hybrid-nodes-gateway", "hybrid-gateway-leader"
DEMO_NS = "demo-gateway"
VPC_CIDR, POD_CIDR = "10.0.0.0/16", "172.17.0.0/16"
HYBRID_NODE, HYBRID_IP = "mi-0a1b2c3d4e5f60001", "192.168.100.11"
PROBERS = {"prober-cloud": "cloud", "prober-hybrid": "hybrid"}  # prober -> its node
#: The container start before the gateway's main runs (image cached, VXLAN device).
START_DELAY = 1.0
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION,
           "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
           "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def private_namespace() -> None:
    """Refuses to run anywhere but a fresh network namespace (only ``lo``); brings ``lo`` up."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    names = [line.split(":")[1].strip() for line in links]
    if names != ["lo"]:
        raise SystemExit(f"not in a private network namespace (links: {names}); run it under "
                         "`unshare -n`")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def moto_server() -> tuple[Any, str]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


class World:
    """The lab's EC2 (moto), the played gateways and probers, on the real control plane."""

    def __init__(self, plane: ControlPlane, moto_url: str, work: Path):
        import boto3

        self.plane, self.moto_url, self.work = plane, moto_url, work
        self.url, self.ca_file = plane.url, plane.ca_file
        self.namespace, self.lease_name = NAMESPACE, LEASE
        self.pod_cidr, self.vpc_cidr = POD_CIDR, VPC_CIDR
        self.start_delay = START_DELAY
        self.partition = threading.Event()
        self._local = threading.local()
        self._boto3 = boto3
        self.stopping = threading.Event()
        self.gateways: dict[str, list[PlayedGateway]] = {}  # pod uid -> its processes
        self.lock = threading.Lock()
        self.seeds = iter(range(1000, 100000))
        #: Each prober's probes: (when it logged, µs since the epoch; path; ok).
        self.truth: dict[str, list[tuple[int, str, bool]]] = {p: [] for p in PROBERS}

    def ec2(self) -> Any:
        """One client per thread (botocore clients are shared safely, sessions are not)."""
        if not hasattr(self._local, "ec2"):
            self._local.ec2 = self._boto3.session.Session().client(
                "ec2", region_name=REGION, endpoint_url=self.moto_url)
        return self._local.ec2

    # --- EC2 ----------------------------------------------------------------------------------

    def plant_ec2(self) -> None:
        ec2 = self.ec2()
        self.vpc = ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
        self.nodes: dict[str, dict[str, str]] = {}
        for key, zone, cidr in (("a", "ap-northeast-2a", "10.0.1.0/24"),
                                ("b", "ap-northeast-2c", "10.0.2.0/24"),
                                ("cloud", "ap-northeast-2a", "10.0.3.0/24")):
            subnet = ec2.create_subnet(VpcId=self.vpc, CidrBlock=cidr,
                                       AvailabilityZone=zone)["Subnet"]["SubnetId"]
            instance = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                         InstanceType="t3.medium", SubnetId=subnet)["Instances"][0]
            self.nodes[key] = {
                "name": instance["PrivateDnsName"], "ip": instance["PrivateIpAddress"],
                "instance": instance["InstanceId"], "zone": zone,
                "eni": next(n["NetworkInterfaceId"] for n in instance["NetworkInterfaces"]
                            if n["Attachment"]["DeviceIndex"] == 0)}
        # Two route tables, as the lab's private subnets have; the first leader creates the
        # pod CIDR's route in them (the lab declares none, docs/gateway.md#the-route-it-writes).
        self.tables = [ec2.create_route_table(VpcId=self.vpc)["RouteTable"]["RouteTableId"]
                       for _ in range(2)]
        self.instances = {n["name"]: n["instance"] for n in self.nodes.values()}
        for ip in [n["ip"] for n in self.nodes.values()] + [HYBRID_IP]:
            subprocess.run(["ip", "addr", "add", f"{ip}/32", "dev", "lo"], check=True)

    # --- the cluster --------------------------------------------------------------------------

    def must(self, method: str, path: str, body: Any = None, ok=(200, 201)) -> Any:
        answer = self.plane.call(method, path, body)
        if answer.status not in ok:
            raise RuntimeError(f"{method} {path}: HTTP {answer.status}: {answer.body}")
        return answer.body

    def plant_cluster(self) -> None:
        plane = self.plane
        self.must("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", vtep_crd())
        for ns in (NAMESPACE, DEMO_NS):
            plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for obj in chart_objects(self.tables):
            answer = plane.apply(obj)
            if answer.status not in (200, 201):
                raise RuntimeError(f"applying {obj['kind']}/{obj['metadata']['name']}: {answer.body}")
        for key in ("a", "b", "cloud"):
            self.must("POST", "/api/v1/nodes", node(self.nodes[key], gateway=key != "cloud"))
        self.must("POST", "/api/v1/nodes", hybrid_node())
        plane.wait_for("the CiliumVTEPConfig CRD", lambda: plane.call(
            "GET", VTEP_PATH).status == 200)
        plane.wait_for(f"the default ServiceAccount of {DEMO_NS}", lambda: plane.call(
            "GET", f"/api/v1/namespaces/{DEMO_NS}/serviceaccounts/default").status == 200)
        for prober, where in PROBERS.items():
            name = HYBRID_NODE if where == "hybrid" else self.nodes["cloud"]["name"]
            self.must("POST", f"/api/v1/namespaces/{DEMO_NS}/pods", prober_pod(prober, name))

    def gateway_pods(self) -> list[dict]:
        return self.must("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]

    def token_for(self, pod: dict) -> str:
        """The pod's projected ServiceAccount token: a TokenRequest bound to the pod."""
        meta, spec = pod["metadata"], pod["spec"]
        answer = self.must(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/"
                    f"{spec['serviceAccountName']}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 3600, "boundObjectRef": {
                 "apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}})
        return answer["status"]["token"]

    # --- the played processes -----------------------------------------------------------------

    def supervise(self) -> None:
        """The kubelet's part: a process for each Running gateway pod, stopped when the pod is
        deleted, restarted (a new process) when it exits while its pod runs."""
        while not self.stopping.wait(0.1):
            try:
                pods = self.gateway_pods()
            except (OSError, RuntimeError) as error:
                log(f"supervisor: {error}")
                continue
            seen = set()
            for pod in pods:
                uid = pod["metadata"]["uid"]
                seen.add(uid)
                running = self.gateways.get(uid, [])
                if pod["metadata"].get("deletionTimestamp"):
                    for gateway in running:
                        gateway.stop()
                    continue
                status = pod.get("status") or {}
                if status.get("phase") != "Running" or not status.get("hostIP"):
                    continue
                last = running[-1] if running else None
                if last is None or (last.record.lost is not None
                                    and time.time() - last.record.lost > 1.0):
                    with self.lock:
                        self.gateways.setdefault(uid, []).append(PlayedGateway(
                            self, pod, self.token_for(pod), seed=next(self.seeds)))
            for uid, running in self.gateways.items():
                if uid not in seen:
                    for gateway in running:
                        gateway.stop()

    def live(self) -> list[PlayedGateway]:
        with self.lock:
            return [g for gs in self.gateways.values() for g in gs if g.alive]

    def traffic_ok(self) -> bool:
        """Both ways need the route in every table and the VTEP config to name a node whose
        gateway process runs (each replica has the VXLAN device; only the leader writes)."""
        live = self.live()
        enis, ips = {g.record.eni for g in live}, {g.ip for g in live}
        answer = self.ec2().describe_route_tables(RouteTableIds=self.tables)["RouteTables"]
        for table in answer:
            route = next((r for r in table["Routes"]
                          if r.get("DestinationCidrBlock") == POD_CIDR), None)
            if route is None or route.get("NetworkInterfaceId") not in enis:
                return False
        vtep = self.plane.call("GET", f"{VTEP_PATH}/{VTEP_NAME}")
        if vtep.status != 200:
            return False
        return all(e.get("tunnelEndpoint") in ips
                   for e in (vtep.body.get("spec") or {}).get("endpoints") or [{}])

    def probe(self, prober: str) -> None:
        """A demo 1 prober's loop (components/demos.py): svc, pod, sleep 1; a failed probe
        ends after ``timeout 1``. Each line as the container runtime writes it (CRI)."""
        rng = random.Random(prober)
        with open(self.work / f"{prober}.log", "a", buffering=1) as out:
            while not self.stopping.is_set():
                for path in ("svc", "pod"):
                    try:
                        ok = self.traffic_ok()
                    except Exception:  # noqa: BLE001 the world is stopping
                        ok = False
                    time.sleep(0.008 + rng.random() * 0.004 if ok else 1.0)
                    # Whole microseconds, so the truth and the line say the same moment.
                    seconds, micros = divmod(round(time.time() * 1e6), 10**6)
                    self.truth[prober].append((seconds * 10**6 + micros, path, ok))
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
                    clock = time.strftime("%H:%M:%S", time.gmtime(seconds))
                    out.write(f"{stamp}.{micros:06d}000Z stdout F {clock} {path} "
                              f"{'ok' if ok else 'FAIL'}\n")
                self.stopping.wait(1.0)

    def start(self) -> None:
        for target, args in [(self.supervise, ())] + [(self.probe, (p,)) for p in PROBERS]:
            threading.Thread(target=target, args=args, daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        for gateway in [g for gs in list(self.gateways.values()) for g in gs]:
            gateway.stop()

    def leader(self) -> Optional[PlayedGateway]:
        return next((g for g in self.live() if g.leading and g.record.vtep), None)

    def records(self) -> list[dict]:
        with self.lock:
            return [g.record.to_json() for gs in self.gateways.values() for g in gs]


# --- objects --------------------------------------------------------------------------------

def vtep_crd() -> dict:
    """A stand-in for Cilium's CiliumVTEPConfig CRD (the AWS build of Cilium registers it; no
    copy of it is on this machine): group, version, scope and names as the gateway uses them."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "ciliumvtepconfigs.cilium.io"},
            "spec": {"group": "cilium.io", "scope": "Cluster",
                     "names": {"kind": "CiliumVTEPConfig", "plural": "ciliumvtepconfigs",
                               "singular": "ciliumvtepconfig", "listKind": "CiliumVTEPConfigList"},
                     "versions": [{"name": "v2", "served": True, "storage": True, "schema": {
                         "openAPIV3Schema": {"type": "object",
                                             "x-kubernetes-preserve-unknown-fields": True}}}]}}


def chart_objects(tables: list[str]) -> list[dict]:
    """The gateway chart as Helm renders it with the lab's values."""
    import yaml

    from components import hybrid_gateway
    from offline import chart_render

    release = chart_render.Release(
        chart=hybrid_gateway.CHART, version="1.0.1", name=hybrid_gateway.RELEASE_NAME,
        namespace=NAMESPACE, values=hybrid_gateway.gateway_values(VPC_CIDR, [POD_CIDR], tables))
    objects = [doc for _, text in chart_render.render_texts(release)
               for doc in yaml.safe_load_all(text) if isinstance(doc, dict) and doc.get("kind")]
    order = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    for obj in objects:
        obj["metadata"].setdefault("namespace", NAMESPACE)
    return sorted(objects, key=lambda o: order.index(o["kind"]) if o["kind"] in order else 99)


def node(info: dict, *, gateway: bool) -> dict:
    """A lab node: EKS's name, providerID and addresses. The API server dials a kubelet at its
    first address of the default preference (Hostname, InternalDNS, InternalIP…); nothing
    resolves names in this namespace, so the Hostname address is the IP, as kwok's kubelet
    server is reached there."""
    name = info["name"]
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": info["zone"],
              "kubernetes.io/os": "linux"}
    taints = []
    if gateway:
        labels["hybrid-gateway-node"] = "true"
        taints = [{"key": "hybrid-gateway-node", "value": "true", "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                         "annotations": dict([KWOK_NODE_ANNOTATION])},
            "spec": {"providerID": f"aws:///{info['zone']}/{info['instance']}", "taints": taints},
            "status": {"addresses": [{"type": "InternalIP", "address": info["ip"]},
                                     {"type": "Hostname", "address": info["ip"]},
                                     {"type": "InternalDNS", "address": name}],
                       "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "17"},
                       "capacity": {"cpu": "2", "memory": "4Gi", "pods": "17"}}}


def hybrid_node() -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": HYBRID_NODE, "annotations": dict([KWOK_NODE_ANNOTATION]),
                         "labels": {"kubernetes.io/hostname": HYBRID_NODE,
                                    "eks.amazonaws.com/compute-type": "hybrid"}},
            "spec": {"taints": []},
            "status": {"addresses": [{"type": "InternalIP", "address": HYBRID_IP},
                                     {"type": "Hostname", "address": HYBRID_IP}]}}


def prober_pod(name: str, node_name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-0", "labels": {"app": name}},
            "spec": {"nodeName": node_name, "containers": [{"name": "prober", "image": "busybox"}]}}


def kwok_config(work: Path) -> str:
    """kwok's stock stages and a Logs per prober pod: its log is the played prober's file."""
    logs = [json.dumps({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                        "metadata": {"name": f"{p}-0", "namespace": DEMO_NS},
                        "spec": {"logs": [{"containers": ["prober"],
                                           "logsFile": str(work / f"{p}.log")}]}})
            for p in PROBERS]
    return "\n---\n".join([kwok_stages(), *logs])


def start_kwok(plane: ControlPlane, bindir: Path, work: Path) -> None:
    """kwok with its kubelet server on every address of this private namespace (the nodes'
    daemonEndpoints port is the same, ``--node-port``)."""
    (work / "kwok.yaml").write_text(kwok_config(work))
    for prober in PROBERS:
        (work / f"{prober}.log").touch()
    port = free_port()
    # ControlPlane.start(kwok=False) started the rest; kwok joins its processes, so stop() ends it.
    plane._run("kwok", [str(bindir / "kwok"), "--kubeconfig", str(plane.kubeconfig),
                        "--config", str(work / "kwok.yaml"),
                        "--manage-nodes-with-annotation-selector", "=".join(KWOK_NODE_ANNOTATION),
                        "--server-address", f"0.0.0.0:{port}", "--node-port", str(port)])


def outputs_file(world: World, work: Path) -> Path:
    path = work / "lab.json"
    path.write_text(json.dumps({
        "region": REGION, "kubeconfig": "{}", "clusterName": "eks-hybrid-lab",
        "hybridPodCidr": POD_CIDR, "cloudVpcCidr": VPC_CIDR, "gatewayNamespace": NAMESPACE,
        "gatewayLeaseName": LEASE, "gatewayRouteTableIds": world.tables,
        "gatewayPodSelector": "app.kubernetes.io/name=eks-hybrid-nodes-gateway",
        "gatewayNodeSelector": "hybrid-gateway-node=true",
        "demo1": {"namespace": DEMO_NS,
                  "probers": {"cloudToHybrid": "prober-cloud", "hybridToCloud": "prober-hybrid"}},
        "layers": ["network", "cluster", "hybrid", "gateway", "demo"]}))
    return path


# --- the phases -----------------------------------------------------------------------------

def tool(world: World, work: Path, name: str, *args: str) -> dict:
    from rehearse import cli

    out = work / "runs" / name
    started = time.time()
    code = cli.main([*args, "--outputs", str(work / "lab.json"), "--kubeconfig",
                     str(world.plane.kubeconfig), "--work-dir", str(work), "--out", str(out)])
    [folder] = list(out.iterdir())
    return {"code": code, "folder": str(folder), "started": started, "ended": time.time(),
            "report": json.loads((folder / "report.json").read_text())}


def wait(what: str, check, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


def healthy_for(world: World, seconds: float) -> bool:
    """Every prober's last ``seconds`` held only successful probes, at least 5 per path."""
    since = (time.time() - seconds) * 1e6
    for probes in world.truth.values():
        recent = [p for p in list(probes) if p[0] >= since]
        if any(not ok for _, _, ok in recent):
            return False
        if min(sum(1 for _, path, _ in recent if path == p) for p in ("svc", "pod")) < 5:
            return False
    return True


def lease(world: World) -> dict:
    return world.must("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}")


def run(work: Path) -> dict:
    private_namespace()
    os.environ.update(AWS_ENV)
    bindir, why = engines_folder()
    if bindir is None:
        return {"skip": why}
    moto, moto_url = moto_server()
    os.environ["AWS_ENDPOINT_URL"] = moto_url  # the tools' boto3 clients: moto, nowhere else
    times: dict[str, float] = {"begin": time.time()}
    plane = ControlPlane.start(bindir, work / "engines", kwok=False, log=log)
    world = World(plane, moto_url, work)
    result: dict[str, Any] = {"phases": times}
    try:
        times["engines"] = time.time()
        world.plant_ec2()
        start_kwok(plane, bindir, work)
        world.plant_cluster()
        outputs_file(world, work)
        world.start()
        first = wait("the first leader's setup", world.leader)
        times["first_leader"] = time.time()
        log(f"leader {first.record.identity}")
        wait("both gateways and 9 s of good probes", lambda: len(world.live()) == 2
             and healthy_for(world, 9.0))
        times["healthy"] = time.time()
        result["verify_before"] = tool(world, work, "verify-before", "verify", "gateway",
                                       "--window", "7")
        result["lease_before"] = lease(world)
        result["failover"] = tool(world, work, "failover", "failover", "--interval", "0.25",
                                  "--observe", "4", "--timeout", "40", "--baseline", "8")
        result["lease_after"] = lease(world)
        times["failover_done"] = time.time()
        # verify's window ends at the newest line, up to a turn (~1 s) before it reads: 9 s
        # of good probes keep its 7 s clean.
        wait("the new leader and 9 s of good probes", lambda: len(world.live()) == 2
             and world.leader() is not None and healthy_for(world, 9.0))
        result["verify_after"] = tool(world, work, "verify-after", "verify", "gateway",
                                      "--window", "7")
        # Both gateway nodes lose the API server: the leader cannot renew, nobody can take over.
        times["partition"] = time.time()
        world.partition.set()
        wait("the Lease to expire", lambda: time.time() - times["partition"] > 5.0)
        result["lease_partitioned"] = lease(world)
        result["verify_partitioned"] = tool(world, work, "verify-partitioned", "verify",
                                            "gateway", "--window", "8")
        times["end"] = time.time()
    except Exception:  # noqa: BLE001 the test shows it with the engines' logs
        result["error"] = traceback.format_exc()
        result["logs"] = {name: plane.tail(name, 15) for name, _ in plane.processes}
    finally:
        world.stop()
        result.update(gateways=world.records(), truth=world.truth,
                      nodes=getattr(world, "nodes", {}), tables=getattr(world, "tables", []))
        plane.stop()
        moto.stop()
    return result


def main(argv: list[str]) -> int:
    work = Path(argv[0]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    result = run(work)
    (work / "result.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
