"""A fake EKS Kubernetes API server on 127.0.0.1 over HTTPS, for the cleanups that talk to it.

It checks the bearer token as the EKS authenticator and STS would (tests/eks_tokens.py: a
presigned STS GetCallerIdentity URL, signed by the test keys for this cluster's name in the
``x-k8s-aws-id`` header, not expired), answers like the real API server for:

- nodes: ``GET /api/v1/nodes`` (label selector, ``limit``/``continue`` paging) and
  ``DELETE /api/v1/nodes/<name>``;
- cluster-scoped custom objects: ``GET``/``DELETE /apis/<group>/<version>/<plural>/<name>``.
  An object is stored once per (group, plural, name) and reachable through every *served*
  group-version, as with a CRD serving several versions; a group-version that is not served
  answers 404, as the real server does for an unknown path.

and records every request, so tests can say exactly what was called and how.

Test modules use the fixtures by importing them: ``from tests.fake_kube_api import api, pki,
fake_aws`` (``fake_aws`` is autouse once imported).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests import eks_tokens

REGION = "ap-northeast-2"
CLUSTER = "eks-hybrid-lab-dev"
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS_DEFAULT_REGION": REGION,
    # No config or credential files, no IMDS: presigning uses the keys above and nothing else.
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


# --- certificates ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Pki:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @property
    def ca_b64(self) -> str:
        """The CA as EKS returns it in ``certificate_authority.data``."""
        return base64.b64encode(self.ca_pem).decode()


def make_pki(common_name: str) -> Pki:
    """A CA and a server certificate it signs for IP 127.0.0.1."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca = (x509.CertificateBuilder()
          .subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return Pki(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki("fake-eks-ca")


@pytest.fixture(scope="module")
def other_pki() -> Pki:
    return make_pki("some-other-ca")


# --- the fake API server --------------------------------------------------------------------

@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    status: int
    token_problem: Optional[str]


@dataclass
class FakeApiServer:
    url: str
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Cluster-scoped custom objects by (group, plural, name), whatever version stored them.
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    #: Pods by (namespace, name): their annotations.
    pods: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    #: Group-versions served for custom objects ("cilium.io/v2"); others answer 404.
    served: set[str] = field(default_factory=set)
    requests: list[Seen] = field(default_factory=list)
    #: Statuses to answer the next requests with, before serving them normally.
    fail_next: list[int] = field(default_factory=list)
    #: Statuses to answer every DELETE with.
    fail_deletes: Optional[int] = None
    #: Nodes that vanish between the list and our DELETE (it then answers 404).
    vanish_on_delete: set[str] = field(default_factory=set)
    #: Nodes a finalizer keeps: DELETE succeeds but they stay listed.
    sticky: set[str] = field(default_factory=set)
    #: Behave like a server (or proxy) that drops the labelSelector.
    ignore_selector: bool = False
    #: What a valid token must be signed for.
    access_key: str = ACCESS_KEY
    region: str = REGION
    cluster: str = CLUSTER
    #: TCP connections accepted (each one's TLS handshake is attempted, whatever its outcome).
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def plant(self, name: str, **labels: str) -> None:
        self.nodes[name] = dict(labels)

    def plant_object(self, api_version: str, plural: str, name: str,
                     spec: Optional[dict[str, Any]] = None) -> None:
        """Stores a cluster-scoped custom object and serves its group-version."""
        group, _, _version = api_version.partition("/")
        self.served.add(api_version)
        self.objects[(group, plural, name)] = {
            "apiVersion": api_version, "metadata": {"name": name}, "spec": spec or {}}

    def plant_pod(self, namespace: str, name: str, **annotations: str) -> None:
        self.pods[(namespace, name)] = dict(annotations)

    def has_object(self, group: str, plural: str, name: str) -> bool:
        return (group, plural, name) in self.objects

    def of(self, method: str) -> list[Seen]:
        return [r for r in self.requests if r.method == method]

    @property
    def deleted(self) -> list[str]:
        return [r.path.rsplit("/", 1)[1] for r in self.of("DELETE")]


def token_problem(header: Optional[str], access_key: str = ACCESS_KEY,
                  region: str = REGION, cluster: str = CLUSTER) -> Optional[str]:
    """Why the EKS authenticator of ``cluster`` would refuse ``header``: not an EKS bearer
    token signed with the test keys (``access_key``) for ``region`` and that cluster, or
    expired (tests/eks_tokens.py). None: it accepts it."""
    prefix = "Bearer "
    if not header or not header.startswith(prefix):
        return f"not an EKS bearer token: {header!r}"
    return eks_tokens.problem(header[len(prefix):], cluster=cluster, access_key=access_key,
                              secret_key=FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"], region=region,
                              now=datetime.datetime.now(datetime.timezone.utc))


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _handler(api: FakeApiServer) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args) -> None:
            pass

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, reason: str) -> None:
            self._answer(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "reason": reason, "code": code})

        def _not_found(self) -> None:
            api.requests[-1].status = 404
            self._status(404, "NotFound")

        def _serve(self, method: str) -> None:
            parts = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(parts.query))
            problem = token_problem(self.headers.get("Authorization"), api.access_key,
                                    api.region, api.cluster)
            with api.lock:
                if problem:
                    status = 401
                elif api.fail_next:
                    status = api.fail_next.pop(0)
                elif method == "DELETE" and api.fail_deletes:
                    status = api.fail_deletes
                else:
                    status = 0
                api.requests.append(Seen(method, parts.path, query, status or 200, problem))
                if status:
                    return self._status(status, "Injected" if not problem else "Unauthorized")
                if method == "GET" and parts.path == "/api/v1/nodes":
                    selected = sorted(name for name, labels in api.nodes.items()
                                      if api.ignore_selector
                                      or _matches(labels, query.get("labelSelector", "")))
                    start = int(query.get("continue") or 0)
                    limit = int(query.get("limit") or 500)
                    page = selected[start:start + limit]
                    metadata = {"resourceVersion": "1"}
                    if start + limit < len(selected):
                        metadata["continue"] = str(start + limit)
                    return self._answer(200, {"kind": "NodeList", "apiVersion": "v1",
                                              "metadata": metadata, "items": [
                        {"metadata": {"name": name, "labels": api.nodes[name]}}
                        for name in page]})
                if method == "DELETE" and parts.path.startswith("/api/v1/nodes/"):
                    name = urllib.parse.unquote(parts.path[len("/api/v1/nodes/"):])
                    if name in api.vanish_on_delete:
                        api.nodes.pop(name, None)
                    if name in api.sticky and name in api.nodes:
                        return self._answer(200, {"kind": "Node", "metadata": {"name": name}})
                    if api.nodes.pop(name, None) is None:
                        return self._not_found()
                    return self._answer(200, {"kind": "Status", "status": "Success"})
                segments = parts.path.split("/")
                # ["", "api", "v1", "namespaces", ns, "pods"(, name)]
                if segments[1:4] == ["api", "v1", "namespaces"] and len(segments) >= 6 \
                        and segments[5] == "pods":
                    namespace = segments[4]
                    if method == "GET" and len(segments) == 6:
                        return self._answer(200, {"kind": "PodList", "apiVersion": "v1",
                                                  "metadata": {}, "items": [
                            {"metadata": {"name": name, "namespace": namespace,
                                          "annotations": annotations}}
                            for (ns, name), annotations in sorted(api.pods.items())
                            if ns == namespace]})
                    if method == "PATCH" and len(segments) == 7:
                        key = (namespace, segments[6])
                        if key not in api.pods:
                            return self._not_found()
                        if self.headers.get("Content-Type") != "application/merge-patch+json":
                            return self._status(415, "Unsupported Media Type")
                        length = int(self.headers.get("Content-Length") or 0)
                        patch = json.loads(self.rfile.read(length) or b"{}")
                        for k, v in ((patch.get("metadata") or {}).get("annotations") or {}).items():
                            if v is None:
                                api.pods[key].pop(k, None)
                            else:
                                api.pods[key][k] = v
                        return self._answer(200, {"metadata": {"name": key[1],
                                                               "annotations": api.pods[key]}})
                    return self._not_found()
                # ["", "apis", group, version, plural, name]
                if len(segments) == 6 and segments[1] == "apis" and all(segments[2:]):
                    group, version, plural, name = segments[2:]
                    key = (group, plural, urllib.parse.unquote(name))
                    if f"{group}/{version}" not in api.served or key not in api.objects:
                        return self._not_found()
                    stored = dict(api.objects[key], apiVersion=f"{group}/{version}")
                    if method == "DELETE":
                        del api.objects[key]
                    return self._answer(200, stored)
                return self._not_found()

        def do_GET(self) -> None:
            self._serve("GET")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

    return Handler


@pytest.fixture
def api(pki: Pki, tmp_path: Path):
    """A fake EKS API server at https://127.0.0.1:<ephemeral>, serving ``pki``'s certificate."""
    (tmp_path / "cert.pem").write_bytes(pki.cert_pem + pki.ca_pem)
    (tmp_path / "key.pem").write_bytes(pki.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    fake = FakeApiServer(url="")

    class CountingServer(ThreadingHTTPServer):
        def get_request(self):
            # Counted before the handshake: a client that refuses the certificate has still
            # connected once (it can only refuse what this handshake sent it).
            with fake.lock:
                fake.connections += 1
            return super().get_request()

    server = CountingServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    fake.url = f"https://127.0.0.1:{server.server_address[1]}"
    # A short poll interval: shutdown() waits up to one interval, once per test.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01},
                              daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def fake_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake keys so presigning works offline; no proxy between us and 127.0.0.1."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL_EC2", "AWS_REGION", "HTTPS_PROXY",
                 "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def no_eks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cleanup that cannot reach the API server asks EKS whether the cluster still exists:
    in these tests that question goes to a closed port on this machine, never to AWS."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_EKS", "http://127.0.0.1:9")


def assert_authorized(api: FakeApiServer) -> None:
    """Every request reached the server with a valid EKS token."""
    assert api.requests, "no request reached the server"
    assert [r.token_problem for r in api.requests] == [None] * len(api.requests)
