"""The EKS authenticator, for the real kube-apiserver: a TokenReview webhook
(authentication.k8s.io/v1) on 127.0.0.1, in a daemon thread of the test process.

EKS runs aws-iam-authenticator as the API server's token webhook
(``--authentication-token-webhook-config-file``): the API server posts each bearer token it
cannot authenticate itself as a TokenReview, and the answer says who it is. This one judges a
token by the authenticator's rule as tests/eks_tokens.py ports it (a presigned STS
GetCallerIdentity URL signed for this cluster's name by keys it knows, not expired); a token it
accepts is user ``eks-lab-admin`` in ``system:masters`` (what an EKS access entry with the
cluster-admin policy gives the cluster's creator). Any other token is ``authenticated: false``
with the reason, and the API server answers 401 unless another authenticator (the control
plane's static token) knows it.

    with serving(workdir, cluster="lab", keys={"AKIA…": "…"}, region=REGION) as (config, server):
        plane = ControlPlane.start(bindir, workdir, token_webhook=config)
        ...
        server.reviews          # every TokenReview answered: Review(token, authenticated, reason)
        server.trusted_sts(url) # a moto server's URL stands in for STS while the ``with`` lasts

Plain HTTP on loopback: the API server's webhook client takes the kubeconfig's ``server`` URL
as it is (client-go's rest config), so no certificate is needed between two local processes.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, Mapping, Optional

from tests import eks_tokens

#: The user and groups an accepted token maps to.
USERNAME = "eks-lab-admin"
GROUPS = ("system:masters", "system:authenticated")
PATH = "/authenticate"


@dataclass(frozen=True)
class Review:
    token: str
    authenticated: bool
    #: Why it was refused ('' when accepted).
    reason: str


class Authenticator(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, cluster: str, keys: Mapping[str, str], region: str):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.cluster = cluster
        self.keys = dict(keys)
        self.region = region
        self.reviews: list[Review] = []
        self._sts: list[str] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{PATH}"

    @contextlib.contextmanager
    def trusted_sts(self, endpoint: str,
                    keys: Optional[Mapping[str, str]] = None) -> Iterator[None]:
        """While it lasts, tokens presigned for ``endpoint`` (a moto server boto3 is pointed
        at) are judged as if it were STS, with ``keys`` known besides the others."""
        with self._lock:
            self._sts.append(endpoint)
            added = {k: v for k, v in (keys or {}).items() if k not in self.keys}
            self.keys.update(added)
        try:
            yield
        finally:
            with self._lock:
                self._sts.remove(endpoint)
                for key in added:
                    self.keys.pop(key, None)

    def judge(self, token: str) -> Optional[str]:
        """Why the token is refused, or None: the first (endpoint, keys) that accepts it wins,
        as STS would find the one access key the token names."""
        with self._lock:
            endpoints: list[Optional[str]] = [None, *self._sts]
            keys = dict(self.keys)
        now = datetime.datetime.now(datetime.timezone.utc)
        reasons = []
        for endpoint in endpoints:
            for access_key, secret_key in keys.items():
                why = eks_tokens.problem(token, cluster=self.cluster, access_key=access_key,
                                         secret_key=secret_key, region=self.region, now=now,
                                         sts_endpoint=endpoint)
                if why is None:
                    return None
                reasons.append(why)
        # The most telling reason: one that got past the credential scope if there is one.
        telling = [r for r in reasons if not r.startswith(("wrong credential scope", "not the STS",
                                                           "not an STS"))]
        return (telling or reasons or ["no keys known"])[0]

    def record(self, review: Review) -> None:
        with self._lock:
            self.reviews.append(review)


class _Handler(BaseHTTPRequestHandler):
    server: Authenticator

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(length))
            token = request["spec"]["token"]
        except (ValueError, KeyError, TypeError):
            self.send_error(400, "not a TokenReview")
            return
        why = self.server.judge(token)
        status: dict = {"authenticated": why is None}
        if why is None:
            status["user"] = {"username": USERNAME, "uid": f"aws-iam-authenticator:{USERNAME}",
                              "groups": list(GROUPS)}
        else:
            # The API server logs it; the client only sees 401.
            status["error"] = why
        self.server.record(Review(token, why is None, why or ""))
        body = json.dumps({"apiVersion": request.get("apiVersion", "authentication.k8s.io/v1"),
                           "kind": "TokenReview", "status": status}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass  # quiet: the reviews are recorded


def webhook_config(url: str) -> dict:
    """The kubeconfig kube-apiserver reads the webhook from (the cluster is the webhook, the
    user the API server itself)."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": "webhook",
            "clusters": [{"name": "eks-authenticator", "cluster": {"server": url}}],
            "users": [{"name": "kube-apiserver", "user": {}}],
            "contexts": [{"name": "webhook", "context": {"cluster": "eks-authenticator",
                                                         "user": "kube-apiserver"}}]}


@contextlib.contextmanager
def serving(workdir: Path, *, cluster: str, keys: Mapping[str, str],
            region: str) -> Iterator[tuple[Path, Authenticator]]:
    """Starts the authenticator, writes its webhook kubeconfig in ``workdir``, yields
    (that file, the server), and stops it (the thread joined, bounded) afterwards."""
    server = Authenticator(cluster=cluster, keys=keys, region=region)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="eks-authenticator", daemon=True)
    thread.start()
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "token-webhook.kubeconfig"
        config.write_text(json.dumps(webhook_config(server.url)))
        yield config, server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
