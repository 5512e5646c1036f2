"""The Kubernetes connection: the stack's kubeconfig with an EKS token minted here (as the lab's
cleanups mint it, so the AWS CLI is optional), or a kubeconfig file given with --kubeconfig.

The client is lightkube (REFERENCE §10: maintained, typed, sync, about 10 MB; the official
client is about 144 MB and pins a python-dateutil botocore forbids). Nothing shells out to
kubectl. The kubeconfig and the token are never printed.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from rehearse.errors import RunError


@dataclass(frozen=True)
class Endpoint:
    """Where the API server is and how to trust and authenticate to it."""

    server: str
    #: PEM of the cluster CA, or None for a plain-HTTP test server.
    certificate_authority: Optional[str]
    #: A bearer token, or None.
    token: Optional[str]


def eks_token(cluster_name: str, region: str) -> str:
    """The token `aws eks get-token` prints: a presigned STS GetCallerIdentity URL naming the
    cluster in a signed header (the lab's cleanups mint it the same way)."""
    from components.cleanup.kubernetes_api import KubernetesApi

    return KubernetesApi()._bearer_token(cluster_name, region)


def endpoint_from_stack_kubeconfig(kubeconfig: Any, region: str) -> Endpoint:
    """The stack's ``kubeconfig`` output (JSON, exec-based): its server and CA, and a token
    minted here for the cluster it names."""
    config = json.loads(kubeconfig) if isinstance(kubeconfig, str) else kubeconfig
    try:
        [cluster] = config["clusters"]
        server = cluster["cluster"]["server"]
        ca = base64.b64decode(cluster["cluster"]["certificate-authority-data"]).decode()
        name = cluster["name"]
    except (KeyError, TypeError, ValueError):
        raise RunError("the stack's kubeconfig output is not the one this lab writes "
                       "(one cluster with a server and CA data)") from None
    try:
        token = eks_token(name, region)
    except Exception as error:  # noqa: BLE001 botocore's many credential errors
        raise RunError(f"no AWS credentials to authenticate to cluster {name}: {error}") from None
    return Endpoint(server=server, certificate_authority=ca, token=token)


class Kube:
    """The calls the rehearsal makes: lightkube for objects and logs, and raw requests for what
    has no typed resource (the pod proxy's GETs, the service proxy's POST)."""

    def __init__(self, client: Any, raw: Any):
        self.client = client
        self._raw = raw

    @classmethod
    def connect(cls, endpoint: Endpoint, *, timeout: float = 15.0) -> "Kube":
        import httpx2 as httpx
        from lightkube import Client, KubeConfig

        cluster: dict[str, Any] = {"server": endpoint.server}
        if endpoint.certificate_authority:
            cluster["certificate-authority-data"] = base64.b64encode(
                endpoint.certificate_authority.encode()).decode()
        user: dict[str, Any] = {"token": endpoint.token} if endpoint.token else {}
        config = KubeConfig.from_dict({
            "clusters": [{"name": "lab", "cluster": cluster}],
            "users": [{"name": "lab", "user": user}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}],
            "current-context": "lab",
        })
        client = Client(config=config, timeout=httpx.Timeout(timeout), field_manager="rehearse")
        verify: Any = True
        if endpoint.certificate_authority:
            import ssl

            verify = ssl.create_default_context(cadata=endpoint.certificate_authority)
        headers = {"Authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
        raw = httpx.Client(base_url=endpoint.server, verify=verify, headers=headers,
                           timeout=timeout, follow_redirects=False)
        return cls(client, raw)

    @classmethod
    def from_kubeconfig_file(cls, path: Path, *, timeout: float = 15.0) -> "Kube":
        """A kubeconfig file (--kubeconfig): lightkube runs its exec plugin if it has one."""
        import httpx2 as httpx
        from lightkube import Client, KubeConfig

        try:
            config = KubeConfig.from_file(path)
        except Exception as error:  # noqa: BLE001 lightkube's config errors
            raise RunError(f"cannot read the kubeconfig {path}: {error}") from None
        client = Client(config=config, timeout=httpx.Timeout(timeout), field_manager="rehearse")
        # The pod proxy goes through the same authenticated transport as every other call.
        return cls(client, client._client._client)

    def check_reachable(self, server: str) -> None:
        """One request before anything else, so a cluster that cannot be reached, or refuses
        the credentials, stops the run with one line (exit 2)."""
        try:
            status, text = self.get_raw("/version")
        except Exception as error:  # noqa: BLE001 httpx, ssl and socket errors alike
            raise unreachable(error, server) from None
        if status in (401, 403):
            raise RunError(f"the cluster's API server {server} refused the credentials "
                           f"(HTTP {status}): check your AWS identity has an access entry")
        if status >= 500:
            raise RunError(f"the cluster's API server {server} answered HTTP {status}")

    def get_raw(self, path: str) -> tuple[int, str]:
        """GET ``path`` on the API server: (status, body)."""
        response = self._raw.get(path)
        return response.status_code, response.text

    def get_raw_dated(self, path: str) -> tuple[int, str, Optional[str]]:
        """GET ``path``: (status, body, the answer's ``Date`` header). The Date is the API
        server's clock (to the second), for judging how old a timestamp in the answer is
        without trusting this machine's clock."""
        response = self._raw.get(path)
        return response.status_code, response.text, response.headers.get("date")

    def post_raw(self, path: str, json_body: Any, *, timeout: Optional[float] = None) -> tuple[int, str]:
        """POST ``json_body`` to ``path`` on the API server (a service proxy): (status, body).
        ``timeout`` overrides the connection's for this one request."""
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        response = self._raw.post(path, json=json_body, **extra)
        return response.status_code, response.text

    def close(self) -> None:
        self.client.close()
        self._raw.close()


def unreachable(error: BaseException, server: str) -> RunError:
    """One line for a cluster that cannot be reached."""
    detail = str(error).splitlines()[0] if str(error) else ""
    return RunError(f"cannot reach the cluster's API server {server}: "
                    f"{type(error).__name__}{': ' + detail if detail else ''}")
