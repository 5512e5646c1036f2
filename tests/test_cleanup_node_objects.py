"""The hybrid Node-object cleanup against a fake Kubernetes API server on 127.0.0.1 over HTTPS.

The fake server checks the bearer token is an EKS token (a presigned STS GetCallerIdentity URL
signing the ``x-k8s-aws-id`` header), answers node list/delete like the real API server, and
records every request, so the tests can say exactly which nodes were deleted and how.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from components.cleanup.node_objects import NodeObjectCleanupProvider
from stacks.offline import Secret, run_program
from tests.pickled_provider import result_of, run_pickled

REGION = "ap-northeast-2"
CLUSTER = "eks-hybrid-lab-dev"
SELECTOR = "eks-hybrid-lab.io/stack=eks-hybrid-lab.dev"
HYBRID = {"eks.amazonaws.com/compute-type": "hybrid"}
OURS = {"eks-hybrid-lab.io/stack": "eks-hybrid-lab.dev"}
THEIRS = {"eks-hybrid-lab.io/stack": "eks-hybrid-lab.prod"}
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


def _make_pki(common_name: str) -> Pki:
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
    return _make_pki("fake-eks-ca")


@pytest.fixture(scope="module")
def other_pki() -> Pki:
    return _make_pki("some-other-ca")


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
    lock: threading.Lock = field(default_factory=threading.Lock)

    def plant(self, name: str, **labels: str) -> None:
        self.nodes[name] = dict(labels)

    def of(self, method: str) -> list[Seen]:
        return [r for r in self.requests if r.method == method]

    @property
    def deleted(self) -> list[str]:
        return [r.path.rsplit("/", 1)[1] for r in self.of("DELETE")]


def _token_problem(header: Optional[str]) -> Optional[str]:
    """Why ``header`` is not an EKS bearer token for REGION and CLUSTER's header (None: it is)."""
    prefix = "Bearer k8s-aws-v1."
    if not header or not header.startswith(prefix):
        return f"not an EKS bearer token: {header!r}"
    encoded = header[len(prefix):]
    if "=" in encoded:
        return "token padding not stripped"
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    if parts.scheme != "https" or not parts.hostname.startswith("sts.") \
            or not parts.hostname.endswith(".amazonaws.com"):
        return f"not an STS URL: {url}"
    if query.get("Action") != "GetCallerIdentity" or query.get("Version") != "2011-06-15":
        return f"not GetCallerIdentity: {query}"
    if query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" or not query.get("X-Amz-Signature"):
        return "not presigned with SigV4"
    if query.get("X-Amz-Expires") != "60":
        return f"expiry {query.get('X-Amz-Expires')}"
    scope = query.get("X-Amz-Credential", "").split("/")
    if scope[0] != ACCESS_KEY or scope[2:] != [REGION, "sts", "aws4_request"]:
        return f"wrong credential scope {scope}"
    if "x-k8s-aws-id" not in query.get("X-Amz-SignedHeaders", "").split(";"):
        return "x-k8s-aws-id is not signed"
    return None


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

        def _serve(self, method: str) -> None:
            parts = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(parts.query))
            problem = _token_problem(self.headers.get("Authorization"))
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
                        api.requests[-1].status = 404
                        return self._status(404, "NotFound")
                    return self._answer(200, {"kind": "Status", "status": "Success"})
                api.requests[-1].status = 404
                return self._status(404, "NotFound")

        def do_GET(self) -> None:
            self._serve("GET")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler


@pytest.fixture
def api(pki: Pki, tmp_path: Path):
    """A fake EKS API server at https://127.0.0.1:<ephemeral>, serving ``pki``'s certificate."""
    (tmp_path / "cert.pem").write_bytes(pki.cert_pem + pki.ca_pem)
    (tmp_path / "key.pem").write_bytes(pki.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    fake = FakeApiServer(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    fake.url = f"https://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
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
                 "AWS_ENDPOINT_URL_STS", "AWS_REGION", "HTTPS_PROXY", "https_proxy",
                 "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def provider() -> NodeObjectCleanupProvider:
    # Instance attributes, so they also travel with the pickled provider.
    p = NodeObjectCleanupProvider()
    p.retry_base_seconds = 0
    p.poll_seconds = 0.5
    p.poll_interval_seconds = 0.01
    p.request_timeout_seconds = 3
    return p


def props_for(api: FakeApiServer, pki: Pki, selector: str = SELECTOR) -> dict[str, str]:
    return {"clusterName": CLUSTER, "region": REGION, "endpoint": api.url,
            "certificateAuthority": pki.ca_b64, "labelSelector": selector}


def plant_mixed(api: FakeApiServer) -> None:
    """Two of our hybrid nodes, another stack's hybrid node and a cloud node."""
    api.nodes.update({
        "mi-0aaa": {**HYBRID, **OURS},
        "mi-0bbb": {**HYBRID, **OURS},
        "mi-0ccc": {**HYBRID, **THEIRS},
        "ip-10-0-1-5.ec2.internal": {"eks.amazonaws.com/compute-type": "ec2"},
    })


def assert_authorized(api: FakeApiServer) -> None:
    assert api.requests, "no request reached the server"
    assert [r.token_problem for r in api.requests] == [None] * len(api.requests)


# --- cases ----------------------------------------------------------------------------------

def test_deletes_exactly_this_stacks_hybrid_nodes(api, pki, provider):
    plant_mixed(api)
    provider.delete(f"node-objects-{CLUSTER}", props_for(api, pki))

    assert sorted(api.deleted) == ["mi-0aaa", "mi-0bbb"]
    assert sorted(api.nodes) == ["ip-10-0-1-5.ec2.internal", "mi-0ccc"]
    assert {r.query.get("labelSelector") for r in api.of("GET")} == {SELECTOR}
    assert all(r.path == "/api/v1/nodes" for r in api.of("GET"))
    assert_authorized(api)


def test_no_nodes_is_success_without_delete(api, pki, provider):
    api.plant("mi-0ccc", **HYBRID, **THEIRS)
    provider.delete("x", props_for(api, pki))
    assert api.of("DELETE") == []
    assert len(api.of("GET")) == 1
    assert_authorized(api)


def test_follows_list_pagination(api, pki, provider):
    provider.page_size = 2
    for i in range(5):
        api.plant(f"mi-{i:04d}", **HYBRID, **OURS)
    provider.delete("x", props_for(api, pki))

    assert sorted(api.deleted) == [f"mi-{i:04d}" for i in range(5)]
    first_pages = [r.query for r in api.of("GET")][:3]
    assert [q.get("continue") for q in first_pages] == [None, "2", "4"]
    assert {q["limit"] for q in first_pages} == {"2"}
    assert api.nodes == {}


def test_node_already_gone_is_success(api, pki, provider):
    api.plant("mi-0aaa", **HYBRID, **OURS)
    api.plant("mi-0bbb", **HYBRID, **OURS)
    api.vanish_on_delete = {"mi-0aaa"}
    provider.delete("x", props_for(api, pki))

    assert {r.path.rsplit("/", 1)[1]: r.status for r in api.of("DELETE")} == \
        {"mi-0aaa": 404, "mi-0bbb": 200}
    assert api.nodes == {}


def test_labelled_node_that_is_not_hybrid_is_left_alone(api, pki, provider):
    api.plant("mi-0aaa", **HYBRID, **OURS)
    api.plant("ip-10-0-1-5.ec2.internal", **OURS, **{"eks.amazonaws.com/compute-type": "ec2"})
    api.plant("unlabelled-compute-type", **OURS)
    provider.delete("x", props_for(api, pki))

    assert api.deleted == ["mi-0aaa"]
    assert sorted(api.nodes) == ["ip-10-0-1-5.ec2.internal", "unlabelled-compute-type"]


def test_selector_is_rechecked_when_the_server_ignores_it(api, pki, provider):
    plant_mixed(api)
    api.ignore_selector = True
    provider.delete("x", props_for(api, pki))
    assert sorted(api.deleted) == ["mi-0aaa", "mi-0bbb"]


@pytest.mark.parametrize("selector", ["", "   ", None])
def test_empty_selector_is_refused(api, pki, provider, selector):
    plant_mixed(api)
    props = props_for(api, pki, selector=selector)
    with pytest.raises(ValueError, match="labelSelector"):
        provider.create(props)
    with pytest.raises(ValueError, match="labelSelector"):
        provider.delete("x", props)
    assert api.requests == []


def test_untrusted_server_certificate_fails_with_kubectl_hint(api, pki, other_pki, provider):
    plant_mixed(api)
    started = time.monotonic()
    with pytest.raises(Exception) as raised:
        provider.delete("x", props_for(api, other_pki))

    message = str(raised.value)
    assert f"kubectl delete node -l {SELECTOR}" in message
    assert "certificate" in message.lower()
    # No request got past the handshake, so the token never left.
    assert api.requests == [] and api.of("DELETE") == []
    assert time.monotonic() - started < 2, "a certificate failure is not worth retrying"


def test_retries_after_a_503(api, pki, provider):
    plant_mixed(api)
    api.fail_next = [503]
    provider.delete("x", props_for(api, pki))

    assert [r.status for r in api.requests][:2] == [503, 200]
    assert sorted(api.deleted) == ["mi-0aaa", "mi-0bbb"]


def test_persistent_errors_name_the_nodes_left(api, pki, provider):
    plant_mixed(api)
    api.fail_deletes = 503
    with pytest.raises(Exception) as raised:
        provider.delete("x", props_for(api, pki))

    message = str(raised.value)
    assert "mi-0aaa, mi-0bbb" in message and "mi-0ccc" not in message
    assert f"kubectl delete node -l {SELECTOR}" in message
    assert len(api.of("DELETE")) == provider.attempts
    assert sorted(api.nodes) == ["ip-10-0-1-5.ec2.internal", "mi-0aaa", "mi-0bbb", "mi-0ccc"]


def test_node_that_stays_listed_fails_after_the_poll(api, pki, provider):
    plant_mixed(api)
    api.sticky = {"mi-0bbb"}
    provider.poll_seconds = 0.1
    with pytest.raises(Exception, match="still listed") as raised:
        provider.delete("x", props_for(api, pki))

    message = str(raised.value)
    assert "Nodes left: mi-0bbb (as last listed)" in message
    assert f"kubectl delete node -l {SELECTOR}" in message
    assert sorted(api.nodes) == ["ip-10-0-1-5.ec2.internal", "mi-0bbb", "mi-0ccc"]
    # It kept deleting what was still listed (a re-registered node would go that way).
    assert api.deleted.count("mi-0bbb") >= 2 and api.deleted.count("mi-0aaa") == 1


def test_rejected_token_fails_with_kubectl_hint(api, pki, provider):
    plant_mixed(api)
    api.fail_next = [401] * provider.attempts
    with pytest.raises(Exception, match="401") as raised:
        provider.delete("x", props_for(api, pki))
    assert "unknown" in str(raised.value)
    assert f"kubectl delete node -l {SELECTOR}" in str(raised.value)
    assert api.of("DELETE") == []


def test_unreachable_server_fails_with_kubectl_hint(pki, provider):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    props = {"clusterName": CLUSTER, "region": REGION, "endpoint": f"https://127.0.0.1:{port}",
             "certificateAuthority": pki.ca_b64, "labelSelector": SELECTOR}
    with pytest.raises(Exception, match="kubectl delete node -l"):
        provider.delete("x", props)


def test_create_is_pure_and_diff_replaces_only_on_identity(api, pki, provider, monkeypatch):
    def no_network(*_args, **_kwargs):
        raise AssertionError("create() opened a connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    props = props_for(api, pki)
    created = provider.create(props)
    assert created.id == f"node-objects-{CLUSTER}"
    assert created.outs == props
    assert api.requests == []

    olds = {**props, "__provider": "code"}
    for key, value in [("clusterName", "other"), ("labelSelector", "a=b")]:
        diff = provider.diff(created.id, olds, {**olds, key: value})
        assert diff.changes and diff.replaces == [key]
    for key, value in [("endpoint", "https://example.invalid"), ("certificateAuthority", "Q0E="),
                       ("region", "us-west-2")]:
        diff = provider.diff(created.id, olds, {**olds, key: value})
        assert diff.changes and diff.replaces == [], key
    assert not provider.diff(created.id, olds, dict(olds)).changes
    # New provider code alone is an update, so destroy runs the latest delete().
    assert provider.diff(created.id, olds, {**olds, "__provider": "new code"}).changes

    news = {**props, "endpoint": "https://new.example.invalid"}
    assert provider.update(created.id, props, news).outs == news


def test_pickled_provider_deletes_in_a_fresh_process(api, pki, provider):
    plant_mixed(api)
    done = run_pickled(provider, "delete", f"node-objects-{CLUSTER}", props_for(api, pki),
                       env=FAKE_AWS_ENV, timeout=30)
    assert result_of(done) is None
    assert sorted(api.deleted) == ["mi-0aaa", "mi-0bbb"]
    assert sorted(api.nodes) == ["ip-10-0-1-5.ec2.internal", "mi-0ccc"]
    assert_authorized(api)


def test_resource_registers_public_outputs(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(
        "import pulumi\n"
        "from components.cleanup.node_objects import NodeObjectCleanup\n"
        "res = NodeObjectCleanup('nodes', cluster_name='c', region='r',\n"
        "    endpoint='https://e', certificate_authority=pulumi.Output.secret('Q0E='),\n"
        "    label_selector='k=v')\n"
        "pulumi.export('out', pulumi.Output.all(res.clusterName, res.region, res.endpoint,\n"
        "    res.certificateAuthority, res.labelSelector))\n")
    run = run_program({"aws:region": REGION}, program=program)
    [reg] = run.of_type("pulumi-python:dynamic/cleanup:HybridNodeObjects")
    assert reg.name == "nodes"
    assert reg.inputs["certificateAuthority"] == "Q0E="
    assert not isinstance(reg.inputs["__provider"], Secret)
    assert run.outputs["out"] == ["c", "r", "https://e", "Q0E=", "k=v"]
