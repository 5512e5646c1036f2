"""A real Kubernetes control plane on 127.0.0.1, from the binaries engines/build.py builds:
etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (nodes and pods without a
kubelet). Standard library only, so the smoke run and the tests share it.

    plane = ControlPlane.start(bindir, workdir)     # waits for /readyz and the default SA
    status, body, warnings = plane.call("GET", "/version")
    plane.apply(obj)                                # server-side apply, its warnings returned
    plane.stop()                                    # every process it started, by PID

Every process listens on 127.0.0.1 and a free port, and lives in ``workdir``. The API server
authenticates one admin by bearer token (``--token-auth-file``: user ``lab-admin`` in
``system:masters``), authorizes with Node and RBAC, and admits with its default plugins, which
include PodSecurity. The flags follow controller-runtime's envtest (pkg/internal/testing/
controlplane) and what engines/README.md records as working here.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
TOKEN = "lab-admin-token"
#: kwok's stock stages (in its module, kustomize/stage/): nodes turn Ready and keep a heartbeat;
#: pods on them turn Running, complete, and go when deleted.
KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat/node-heartbeat.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml")
#: The annotation kwok manages nodes by (Karpenter's kwok nodes carry it too).
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SERVICE_CIDR = "10.96.0.0/16"
#: build.py's default groups, which every folder has.
CORE_GROUPS = ("kubernetes", "etcd", "kwok")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engines_folder(*groups: str) -> tuple[Optional[Path], str]:
    """The folder of built binaries of ``groups`` (none: the core; "all", or e.g. "kyverno":
    the core and those), or None and why (build.py --where builds nothing)."""
    extra = [g for g in groups if g != "all"]
    names = ["all"] if "all" in groups else (list(CORE_GROUPS) + extra if extra else [])
    done = subprocess.run(["python3", str(HERE / "build.py"), "--where", *names],
                          capture_output=True, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["engines/build.py --where failed"])[-1]
        return None, why.removeprefix("engines/build.py: ")
    return Path(done.stdout.strip().splitlines()[-1]), ""


def kwok_stages() -> str:
    """The stock stages from kwok's module (engines/kwok pins it), as one YAML stream."""
    folder = Path(subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"],
                                 cwd=HERE / "kwok", check=True, capture_output=True,
                                 text=True).stdout.strip())
    return "\n---\n".join((folder / "kustomize/stage" / s).read_text() for s in KWOK_STAGES)


@dataclass
class Response:
    status: int
    body: Any
    #: The API server's ``Warning`` headers (RFC 7234 form), as their text: PodSecurity's
    #: warnings, deprecations.
    warnings: list[str] = field(default_factory=list)


class ControlPlane:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.processes: list[tuple[str, subprocess.Popen]] = []
        self.url = ""
        self.ca_file = workdir / "apiserver-certs" / "apiserver.crt"
        self.kubeconfig = workdir / "kubeconfig"
        self._context: Optional[ssl.SSLContext] = None
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    # --- processes ----------------------------------------------------------------------------

    @classmethod
    def start(cls, bindir: Path, workdir: Path, *, kwok: bool = True,
              log: Callable[[str], None] = lambda _m: None,
              token_webhook: Optional[Path] = None) -> "ControlPlane":
        """``token_webhook``: a webhook kubeconfig the API server also authenticates bearer
        tokens with (TokenReview v1, as EKS runs its IAM authenticator), after the static token."""
        workdir.mkdir(parents=True, exist_ok=True)
        plane = cls(workdir)
        atexit.register(plane.stop)
        try:
            plane._start(bindir, kwok, log, token_webhook)
        except BaseException:
            plane.stop()
            raise
        return plane

    def _run(self, name: str, argv: list[str], env: Optional[dict] = None) -> None:
        out = open(self.workdir / f"{name}.log", "wb")
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                                   # Its own process group: a Ctrl-C of the test run reaches
                                   # the tests, which stop it in order, not the engines first.
                                   start_new_session=True, preexec_fn=die_with_parent)
        out.close()
        self.processes.append((name, process))

    def _start(self, bindir: Path, kwok: bool, log: Callable[[str], None],
               token_webhook: Optional[Path] = None) -> None:
        work = self.workdir
        subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt",
                        "rsa_keygen_bits:2048", "-out", str(work / "sa.key")],
                       check=True, capture_output=True)
        subprocess.run(["openssl", "pkey", "-in", str(work / "sa.key"), "-pubout",
                        "-out", str(work / "sa.pub")], check=True, capture_output=True)
        (work / "tokens.csv").write_text(f'{TOKEN},lab-admin,lab-admin-uid,"system:masters"\n')

        client, peer = free_port(), free_port()
        etcd = f"http://127.0.0.1:{client}"
        self._run("etcd", [
            str(bindir / "etcd"), "--name", "lab", "--data-dir", str(work / "etcd"),
            "--listen-client-urls", etcd, "--advertise-client-urls", etcd,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"lab=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level", "warn"])
        self.wait_for("etcd /health", lambda: json.loads(urllib.request.urlopen(
            f"{etcd}/health", timeout=2).read()).get("health") == "true")
        log("etcd up")

        port = free_port()
        self.url = f"https://127.0.0.1:{port}"
        self._run("kube-apiserver", [
            str(bindir / "kube-apiserver"), "--etcd-servers", etcd,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(port), "--cert-dir", str(self.ca_file.parent),
            "--token-auth-file", str(work / "tokens.csv"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(work / "sa.pub"),
            "--service-account-signing-key-file", str(work / "sa.key"),
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--authorization-mode", "Node,RBAC", "--allow-privileged=true",
            # Without it, the API server keeps publishing 127.0.0.1 as the kubernetes
            # Service's endpoint and logs that it is not in the loopback range.
            "--endpoint-reconciler-type", "none",
            # No cache: each request's token is judged again (an expired one is refused).
            *([f"--authentication-token-webhook-config-file={token_webhook}",
               "--authentication-token-webhook-version=v1",
               "--authentication-token-webhook-cache-ttl=0s"] if token_webhook else [])])
        self.wait_for("the API server's certificate",
                      lambda: self.ca_file.exists() and self.ca_file.stat().st_size > 0)
        self.wait_for("kube-apiserver /readyz", lambda: self.call("GET", "/readyz").status == 200,
                      timeout=180)
        log("kube-apiserver ready")
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "lab",
            "clusters": [{"name": "lab", "cluster": {"server": self.url,
                                                     "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "lab-admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab-admin"}}],
        }))

        manager, scheduler = free_port(), free_port()
        self._run("kube-controller-manager", [
            str(bindir / "kube-controller-manager"), "--kubeconfig", str(self.kubeconfig),
            "--bind-address", "127.0.0.1", "--secure-port", str(manager),
            "--cert-dir", str(work / "kcm-certs"), "--leader-elect=false",
            "--service-account-private-key-file", str(work / "sa.key"),
            "--root-ca-file", str(self.ca_file), "--use-service-account-credentials=true"])
        self._run("kube-scheduler", [
            str(bindir / "kube-scheduler"), "--kubeconfig", str(self.kubeconfig),
            "--bind-address", "127.0.0.1", "--secure-port", str(scheduler),
            "--cert-dir", str(work / "scheduler-certs"), "--leader-elect=false"])
        if kwok:
            (work / "kwok.yaml").write_text(kwok_stages())
            self._run("kwok", [
                str(bindir / "kwok"), "--kubeconfig", str(self.kubeconfig),
                "--config", str(work / "kwok.yaml"),
                "--manage-nodes-with-annotation-selector", "=".join(KWOK_NODE_ANNOTATION)])
        insecure = ssl._create_unverified_context()  # their self-signed serving certificates
        for name, port in (("kube-controller-manager", manager), ("kube-scheduler", scheduler)):
            self.wait_for(f"{name} /healthz", lambda port=port: urllib.request.urlopen(
                f"https://127.0.0.1:{port}/healthz", context=insecure, timeout=2).read() == b"ok")
        self.wait_for("the default ServiceAccount", lambda: self.call(
            "GET", "/api/v1/namespaces/default/serviceaccounts/default").status == 200)
        log("controllers up")

    def check_alive(self) -> None:
        for name, process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.tail(name)}")

    def tail(self, name: str, lines: int = 25) -> str:
        path = self.workdir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stops every process it started, by PID, newest first; idempotent."""
        while self.processes:
            stop_process(self.processes.pop()[1])

    def pids(self) -> dict[int, str]:
        return {p.pid: name for name, p in self.processes}

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float = 120,
                 interval: float = 0.25) -> Any:
        deadline = time.monotonic() + timeout
        last: Optional[BaseException] = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                found = check()
                if found:
                    return found
            except Exception as error:  # noqa: BLE001 - tried again until the deadline
                last = error
            time.sleep(interval)
        raise TimeoutError(f"timed out after {timeout:g} s waiting for {what} (last: {last})")

    def wait_quiet(self, what: str, answer: Callable[[], Any], quiet: float = 2.0,
                   timeout: float = 120, interval: float = 0.25) -> Any:
        """``answer()`` once it is not None and has not changed for ``quiet`` seconds: the
        controllers have nothing more to do. One answer is not enough where they pass through
        states that look final (a rollout between its steps, a DaemonSet's status trailing a
        node it has just seen)."""
        deadline = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            self.check_alive()
            now = answer()
            if now is None or now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return now
            time.sleep(interval)
        raise TimeoutError(f"timed out after {timeout:g} s waiting for {what} to hold for "
                           f"{quiet:g} s (last: {last})")

    # --- the API ------------------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None, *,
             params: Optional[dict[str, str]] = None,
             content_type: str = "application/json") -> Response:
        if self._context is None:
            if not self.ca_file.exists():
                raise ConnectionError("the API server has no certificate yet")
            self._context = ssl.create_default_context(cafile=str(self.ca_file))
        if params:
            path += ("&" if "?" in path else "?") + urllib.parse.urlencode(params)
        data = None if body is None else (body if isinstance(body, bytes)
                                          else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, method=method, data=data, headers={
            "Authorization": f"Bearer {TOKEN}", "Content-Type": content_type,
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self._context, timeout=30) as answer:
                raw, status, headers = answer.read(), answer.status, answer.headers
        except urllib.error.HTTPError as error:
            raw, status, headers = error.read(), error.code, error.headers
        try:
            parsed: Any = json.loads(raw)
        except ValueError:
            parsed = raw.decode(errors="replace")
        return Response(status, parsed, [_warning_text(w) for w in headers.get_all("Warning") or []])

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(the collection's path prefix, namespaced) for a kind, from the server's discovery."""
        key = (api_version, kind)
        if key not in self._resources:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            answer = self.call("GET", base)
            if answer.status != 200:
                raise LookupError(f"{api_version} is not served ({answer.status})")
            for item in answer.body.get("resources", []):
                if "/" not in item["name"]:
                    self._resources[(api_version, item["kind"])] = (
                        f"{base}/{item['name']}", item["namespaced"])
            if key not in self._resources:
                raise LookupError(f"{kind} is not a kind of {api_version}")
        return self._resources[key]

    def path_of(self, obj: dict) -> str:
        collection, namespaced = self.resource(obj["apiVersion"], obj["kind"])
        name = urllib.parse.quote(obj["metadata"]["name"], safe="")
        if namespaced:
            namespace = obj["metadata"].get("namespace") or "default"
            prefix, plural = collection.rsplit("/", 1)
            return f"{prefix}/namespaces/{namespace}/{plural}/{name}"
        return f"{collection}/{name}"

    def apply(self, obj: dict, *, dry_run: bool = False,
              field_manager: str = "eks-hybrid-lab-tests") -> Response:
        """Server-side apply of ``obj`` (its namespace defaults to default)."""
        params = {"fieldManager": field_manager, "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        return self.call("PATCH", self.path_of(obj), obj, params=params,
                         content_type="application/apply-patch+yaml")

    def forget_discovery(self) -> None:
        """After CRDs are created: their kinds are found on the next look-up."""
        self._resources.clear()


def stop_process(process: subprocess.Popen, grace: float = 15) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; waits, so no zombie is left."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def die_with_parent() -> None:
    """In the child: SIGTERM when the process that started it dies, even by SIGKILL (Linux
    prctl PR_SET_PDEATHSIG), so no engine outlives a test run that was killed."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _warning_text(header: str) -> str:
    # RFC 7234: 299 - "text", the text a quoted-string whose '"' and '\\' the API server
    # escapes with a backslash (apimachinery pkg/util/net/http.go, NewWarningHeader's
    # makeQuotedString; its ParseWarningHeader undoes it the same way).
    code, _, rest = header.partition(" ")
    _, _, text = rest.partition(" ")
    text = text.strip()
    if code != "299" or len(text) < 2 or not (text[0] == text[-1] == '"'):
        return header
    return re.sub(r"\\(.)", r"\1", text[1:-1])
