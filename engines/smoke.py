#!/usr/bin/env python3
"""Smoke-run the built engines on 127.0.0.1 only, then stop them by PID.

    python3 engines/smoke.py                  # builds (or reuses) the core, then runs it
    python3 engines/smoke.py /abs/bin/folder  # runs the binaries of that folder
    python3 engines/smoke.py --karpenter      # also Karpenter's kwok provider (build.py all),
                                              # all of it inside a private network namespace

etcd -> kube-apiserver (/readyz with a token) -> kube-controller-manager and kube-scheduler
(/healthz on their own loopback ports) -> kwok with the stock node/pod stages: a fake Node
becomes Ready, a Pod is scheduled onto it by kube-scheduler and set Running by kwok.
Every process listens on 127.0.0.1 and a free port; everything lives in one temp dir, removed
at the end. Needs openssl (service-account keys). Prints the time of each step to stderr.

--karpenter: Karpenter binds its metrics and health ports on every interface (":<port>", no
host option), so the whole run re-executes itself under `unshare -n` (root), where only a
loopback interface exists. It applies Karpenter's CRDs from its module, starts karpenter-kwok,
waits for /readyz, and checks that a Pod pinned to a NodePool gets a Karpenter node (created by
the provider, made Ready by kwok) and runs there.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from control_plane import ControlPlane, free_port

HERE = Path(__file__).resolve().parent
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)



class Procs:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        out = open(self.tmp / f"{name}.log", "wb")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=dict(os.environ, **(env or {})))
        self.procs.append((name, p))
        log(f"started {name} (pid {p.pid})")
        return p

    def check_alive(self) -> None:
        for name, p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}:\n" + self.tail(name))

    def tail(self, name: str, n: int = 25) -> str:
        path = self.tmp / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else ""

    def stop_all(self) -> None:
        for name, p in reversed(self.procs):  # by PID, newest first
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            log(f"stopped {name} (pid {p.pid}, exit {p.returncode})")


def listeners(pids: list[int]) -> list[tuple[int, str]]:
    """(pid, "addr:port") of every TCP socket in LISTEN state that these processes hold."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = pid
        except OSError:
            pass
    found = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for row in Path(table).read_text().splitlines()[1:]:
            f = row.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A = LISTEN
                hexip, hexport = f[1].split(":")
                raw = bytes.fromhex(hexip)
                # /proc prints the address as 32-bit words in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                ip = socket.inet_ntop(socket.AF_INET if width == 4 else socket.AF_INET6, raw)
                found.append((inodes[f[9]], f"{ip}:{int(hexport, 16)}"))
    return found


def wait_for(what: str, fn, procs: Procs, timeout: float = 120) -> object:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        procs.check_alive()
        try:
            got = fn()
            if got:
                log(f"{what}: ok")
                return got
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what} (last error: {last})")


def smoke_karpenter(bindir: Path, procs: Procs, call, kubeconfig: Path, tmp: Path) -> None:
    gomod = (HERE / "karpenter" / "go.mod").read_text()
    version = next(l.split()[1] for l in gomod.splitlines()
                   if l.strip().startswith("sigs.k8s.io/karpenter "))
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True,
                              text=True).stdout.strip()
    moddir = Path(modcache) / f"sigs.k8s.io/karpenter@{version}"
    crds = sorted((moddir / "kwok/charts/crds").glob("*.yaml")) + [
        moddir / "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml"]
    for crd in crds:
        code, resp = call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                          raw=crd.read_bytes(), content_type="application/yaml")
        assert code == 201, (crd.name, code, resp)

    def established():
        _, lst = call("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        ok = [c for c in lst["items"] if any(x["type"] == "Established" and x["status"] == "True"
                                             for x in c.get("status", {}).get("conditions", []))]
        return len(ok) >= len(crds)
    wait_for(f"{len(crds)} Karpenter CRDs Established", established, procs, 60)

    hp, mp = free_port(), free_port()
    procs.start("karpenter-kwok", [str(bindir / "karpenter-kwok")], env={
        "KUBECONFIG": str(kubeconfig), "DISABLE_LEADER_ELECTION": "true",
        "SYSTEM_NAMESPACE": "kube-system", "METRICS_PORT": str(mp), "HEALTH_PROBE_PORT": str(hp),
        "LOG_LEVEL": "debug"})
    wait_for("karpenter-kwok /readyz", lambda: urllib.request.urlopen(
        f"http://127.0.0.1:{hp}/readyz", timeout=2).status == 200, procs, 90)

    code, resp = call("POST", "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses", {
        "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
        "metadata": {"name": "default"}})
    assert code == 201, (code, resp)
    code, resp = call("POST", "/apis/karpenter.sh/v1/nodepools", {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
            "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
            "expireAfter": "Never"}},
            "limits": {"cpu": "100"}}})
    assert code == 201, (code, resp)
    code, resp = call("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "smoke-karpenter-pod"},
        "spec": {"nodeSelector": {"karpenter.sh/nodepool": "default"},
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}})
    assert code == 201, (code, resp)

    def pod_on_karpenter_node():
        _, p = call("GET", "/api/v1/namespaces/default/pods/smoke-karpenter-pod")
        node = p["spec"].get("nodeName")
        if not node or p["status"].get("phase") != "Running":
            return None
        _, n = call("GET", f"/api/v1/nodes/{node}")
        return (node, n["metadata"]["labels"].get("node.kubernetes.io/instance-type"))
    node, itype = wait_for("karpenter + kwok: pod Running on a Karpenter node",
                           pod_on_karpenter_node, procs, 120)
    log(f"karpenter node {node} ({itype})")
    for line in (tmp / "karpenter-kwok.log").read_text(errors="replace").splitlines():
        if "discovered karpenter version" in line:
            log("karpenter-kwok: " + json.loads(line).get("version", line))
            break


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--karpenter"]
    karpenter = "--karpenter" in sys.argv[1:]
    private_netns = os.environ.get("ENGINES_SMOKE_NETNS") == "1"
    if karpenter and not private_netns:
        # Only a loopback interface in there: Karpenter's 0.0.0.0 listeners reach nothing else.
        inner = f"ip link set lo up && exec {sys.executable} {Path(__file__).resolve()} " + " ".join(
            sys.argv[1:])
        return subprocess.run(["unshare", "-n", "--", "sh", "-c", inner],
                              env=dict(os.environ, ENGINES_SMOKE_NETNS="1")).returncode
    if args:
        bindir = Path(args[0])
    else:
        out = subprocess.run([sys.executable, str(HERE / "build.py")] + (["all"] if karpenter else []),
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        bindir = Path(out.strip().splitlines()[-1])
    tmp = Path(tempfile.mkdtemp(prefix="engines-smoke-"))
    procs = Procs(tmp)
    plane = None
    ok = False
    try:
        for n in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
            v = subprocess.run([str(bindir / n), "--version"], capture_output=True, text=True)
            log(f"{n} --version: {(v.stdout or v.stderr).strip().splitlines()[0]}")
        # The control plane the tests use (control_plane.py): etcd, kube-apiserver (token,
        # Node+RBAC), kube-controller-manager, kube-scheduler, kwok with the stock stages.
        plane = ControlPlane.start(bindir, tmp / "plane", log=log)
        procs.procs = list(plane.processes)
        log(f"/version: {plane.call('GET', '/version').body['gitVersion']}")

        def call(method: str, path: str, body: dict | None = None, raw: bytes | None = None,
                 content_type: str = "application/json") -> tuple[int, dict | str]:
            answer = plane.call(method, path, raw if raw is not None else body,
                                content_type=content_type)
            return answer.status, answer.body

        kubeconfig = plane.kubeconfig
        code, resp = call("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "smoke-node", "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"type": "kwok"}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
        assert code == 201, (code, resp)

        def node_ready():
            _, n = call("GET", "/api/v1/nodes/smoke-node")
            return any(c["type"] == "Ready" and c["status"] == "True"
                       for c in n.get("status", {}).get("conditions", []))
        wait_for("kwok: smoke-node Ready", node_ready, procs, 60)
        code, resp = call("POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "smoke-pod"},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
        assert code == 201, (code, resp)

        def pod_running():
            _, p = call("GET", "/api/v1/namespaces/default/pods/smoke-pod")
            return (p["spec"].get("nodeName"), p["status"].get("phase")) == ("smoke-node", "Running")
        wait_for("kube-scheduler + kwok: smoke-pod Running on smoke-node", pod_running, procs, 60)

        if karpenter:
            smoke_karpenter(bindir, procs, call, kubeconfig, tmp)

        names = {p.pid: n for n, p in procs.procs}
        socks = listeners(list(names))
        for pid, addr in sorted(socks):
            log(f"listening: {names[pid]} {addr}")
        bad = [] if private_netns else [(names[pid], a) for pid, a in socks
                                        if not (a.startswith("127.") or a.startswith("::1:"))]
        if bad:
            raise RuntimeError(f"listening beyond loopback: {bad}")
        ok = True
    except Exception as exc:  # noqa: BLE001
        log(f"FAILED: {exc}")
        for name, _ in procs.procs:
            print(f"--- {name}.log (tail) ---\n{procs.tail(name)}", file=sys.stderr)
    finally:
        procs.stop_all()
        if plane is not None:
            plane.stop()
        if ok:
            subprocess.run(["rm", "-rf", str(tmp)])
        else:
            log(f"logs kept in {tmp}")
    log("smoke run " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
