"""The Kubernetes connection: the stack's kubeconfig with an EKS token minted here (as the lab's
cleanups mint it, so the AWS CLI is optional), or a kubeconfig file given with --kubeconfig.

The client is lightkube (maintained, typed, sync, about 10 MB; the official
client is about 144 MB and pins a python-dateutil botocore forbids). Nothing shells out to
kubectl. The kubeconfig and the token are never printed.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import os
import subprocess
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generator, Optional

import httpx2 as httpx

from rehearse.run.errors import RunError
from rehearse.run.record import parse_time, utc_now

#: The EKS authenticator rejects a token 15 minutes after it was signed (its presigned STS URL's
#: X-Amz-Date); `aws eks get-token` and aws-iam-authenticator report its expirationTimestamp
#: 14 minutes after signing, and so does this.
EKS_TOKEN_REPORTED_LIFETIME = datetime.timedelta(minutes=14)
#: A credential is renewed this long before it expires, so no request leaves with a token that
#: expires on the way (and a clock a little ahead of the server's does not matter).
REFRESH_MARGIN = datetime.timedelta(seconds=60)
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1",
                     "client.authentication.k8s.io/v1alpha1")


@dataclass(frozen=True)
class Credential:
    """A bearer token and when it stops being good (None: it does not say)."""

    token: str
    expires: Optional[datetime.datetime] = None


@dataclass(frozen=True)
class Endpoint:
    """Where the API server is and how to trust and authenticate to it."""

    server: str
    #: PEM of the cluster CA, or None for a plain-HTTP test server.
    certificate_authority: Optional[str]
    #: A bearer token, or None.
    token: Optional[str]
    #: When ``token`` stops being good, and how to get a new one (None: it never changes).
    expires: Optional[datetime.datetime] = None
    refresh: Optional[Callable[[], Credential]] = None


def eks_token(cluster_name: str, region: str, account: Any = None) -> str:
    """The token `aws eks get-token` prints: a presigned STS GetCallerIdentity URL naming the
    cluster in a signed header (the lab's cleanups mint it the same way), signed with the
    stack's credentials (``account``: an ``AwsAccount``, components/aws_account.py; None: the
    environment's)."""
    from components.cleanup.kubernetes_api import KubernetesApi

    api = KubernetesApi()
    settings = account.cleanup_inputs() if account is not None else {}
    return api._bearer_token(cluster_name, region, api._account(settings))


def signed_at(token: str) -> Optional[datetime.datetime]:
    """When an EKS token was signed: the X-Amz-Date of the presigned URL it wraps."""
    prefix = "k8s-aws-v1."
    if not token.startswith(prefix):
        return None
    encoded = token[len(prefix):]
    try:
        url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        stamp = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))["X-Amz-Date"]
        return datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


def eks_credential(cluster_name: str, region: str, account: Any = None) -> Credential:
    """A new EKS token, expiring as `aws eks get-token` says it does: 14 minutes after it was
    signed (by this machine's clock, which signed it)."""
    token = eks_token(cluster_name, region, account)
    signed = signed_at(token) or utc_now()
    return Credential(token, signed + EKS_TOKEN_REPORTED_LIFETIME)


class RefreshingAuth(httpx.Auth):
    """Bearer authentication that renews its credential before it expires, and once more on a
    401 (as kubectl does: client-go's exec authenticator re-runs the plugin when the cached
    credential's expirationTimestamp has passed, and after a 401). Shared by the typed client
    and the raw requests, so both always carry the same, current token."""

    def __init__(self, fetch: Callable[[], Credential], *, first: Optional[Credential] = None,
                 clock: Callable[[], datetime.datetime] = utc_now):
        self._fetch = fetch
        self._credential = first
        self._clock = clock
        self._lock = threading.Lock()
        #: How many credentials were fetched after the first (for the report and the tests).
        self.renewals = 0

    def _current(self, stale: Optional[str] = None) -> str:
        with self._lock:
            credential = self._credential
            due = credential is None or (credential.expires is not None and
                                         self._clock() >= credential.expires - REFRESH_MARGIN)
            if due or (stale is not None and credential.token == stale):
                self._credential = credential = self._fetch()
                self.renewals += 1
            return credential.token

    def sync_auth_flow(self, request: Any) -> Generator[Any, Any, None]:
        token = self._current()
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            # Revoked or expired early (a clock behind the server's): one new token, one retry.
            response.read()
            request.headers["Authorization"] = f"Bearer {self._current(stale=token)}"
            yield request



def endpoint_from_stack_kubeconfig(kubeconfig: Any, region: str, account: Any = None) -> Endpoint:
    """The stack's ``kubeconfig`` output (JSON, exec-based): its server and CA, and a token
    minted here for the cluster it names, with the stack's credentials (``account``)."""
    config = json.loads(kubeconfig) if isinstance(kubeconfig, str) else kubeconfig
    try:
        [cluster] = config["clusters"]
        server = cluster["cluster"]["server"]
        ca = base64.b64decode(cluster["cluster"]["certificate-authority-data"]).decode()
        name = cluster["name"]
    except (KeyError, TypeError, ValueError):
        raise RunError("the stack's kubeconfig output is not the one this lab writes "
                       "(one cluster with a server and CA data)") from None
    def refresh() -> Credential:
        try:
            return eks_credential(name, region, account)
        except Exception as error:  # noqa: BLE001 botocore's many credential errors
            raise RunError(f"no AWS credentials to authenticate to cluster {name}: {error}") from None

    first = refresh()
    return Endpoint(server=server, certificate_authority=ca, token=first.token,
                    expires=first.expires, refresh=refresh)


class Kube:
    """The calls the rehearsal makes: lightkube for objects and logs, and raw requests for what
    has no typed resource (the pod proxy's GETs, the service proxy's POST)."""

    def __init__(self, client: Any, raw: Any):
        self.client = client
        self._raw = raw

    @classmethod
    def connect(cls, endpoint: Endpoint, *, timeout: float = 15.0,
                clock: Callable[[], datetime.datetime] = utc_now) -> "Kube":
        from lightkube import KubeConfig

        cluster: dict[str, Any] = {"server": endpoint.server}
        if endpoint.certificate_authority:
            cluster["certificate-authority-data"] = base64.b64encode(
                endpoint.certificate_authority.encode()).decode()
        config = KubeConfig.from_dict({
            "clusters": [{"name": "lab", "cluster": cluster}],
            "users": [{"name": "lab", "user": {}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}],
            "current-context": "lab",
        })
        client = _client(config, timeout)
        if endpoint.token:
            first = Credential(endpoint.token, endpoint.expires)
            # An EKS token lasts 15 minutes and runs last longer: renew it as it nears the end.
            client._client._client.auth = RefreshingAuth(endpoint.refresh or (lambda: first),
                                                         first=first, clock=clock)
        # The pod proxy goes through lightkube's own transport: the same server, trust (the
        # cluster CA, or the default trust store), credential and timeout, no redirects
        # followed — and no second trust store to load.
        return cls(client, client._client._client)

    @classmethod
    def from_kubeconfig_file(cls, path: Path, *, timeout: float = 15.0,
                             clock: Callable[[], datetime.datetime] = utc_now) -> "Kube":
        """A kubeconfig file (--kubeconfig), its current context. An exec plugin is run here,
        as kubectl runs it (lightkube 1.0.1 knows only v1alpha1/v1beta1 and reads no
        expirationTimestamp), once before the first request so that a plugin that cannot run
        says so, and again whenever its credential expires or the server answers 401."""
        from lightkube import KubeConfig

        user = _kubeconfig_user(path)
        try:
            config = KubeConfig.from_file(path)
            client = _client(config, timeout)
        except Exception as error:  # noqa: BLE001 lightkube's config errors
            raise RunError(f"cannot use the kubeconfig {path}: {error}") from None
        if user.get("exec"):
            plugin = ExecPlugin(user["exec"], user_name=user["name"], clock=clock)
            client._client._client.auth = RefreshingAuth(plugin, first=plugin(), clock=clock)
        # The pod proxy goes through the same authenticated transport as every other call.
        return cls(client, client._client._client)

    def check_reachable(self, server: str) -> None:
        """One request before anything else, so a cluster that cannot be reached, or refuses
        the credentials, stops the run with one line (exit 2)."""
        try:
            status, text = self.get_raw("/version")
        except RunError:
            raise  # the credential could not be had (an exec plugin's own words)
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


def _client(config: Any, timeout: float) -> Any:
    """lightkube's ``Client(config=config, timeout=..., field_manager="rehearse")``, with its
    defaults, whose HTTP client takes its trust from ``_trust`` instead of loading it anew."""
    from lightkube import Client
    from lightkube.config.client_adapter import ConnectionParams
    from lightkube.core.generic_client import GenericSyncClient

    class SharedTrust(ConnectionParams):
        def httpx_params(self, single: Any) -> dict:
            # lightkube's ConnectionParams.httpx_params, but for where the trust comes from.
            from lightkube.config.client_adapter import user_auth

            assert single.user, "Missing user"
            params = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
            return dict(base_url=single.cluster.server, verify=_trust(single, self),
                        auth=user_auth(single.user), **params)

    # Client.__init__ (lightkube 1.x) is these two attributes, with a GenericSyncClient built
    # from its own ConnectionParams.
    client = Client.__new__(Client)
    client._timeout = httpx.Timeout(timeout)
    client._client = GenericSyncClient(SharedTrust(timeout=client._timeout), config, lazy=True,
                                       field_manager="rehearse", dry_run=False)
    return client


#: The SSL contexts made so far, by the trust they carry (see ``_trust``).
_TRUST: dict[tuple, Any] = {}
_TRUST_LOCK = threading.Lock()


def _trust(config: Any, params: Any) -> Any:
    """The SSL context lightkube's ``verify_cluster`` makes for ``config``, made once per
    process for each trust and shared by every client after: loading the system trust store
    costs about 30 ms of CPU, and a rehearsal opens a connection per step. Verification is
    exactly lightkube's — the same CA (the cluster's, or the system store or the
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` one), hostname checking, refusal of any other
    server. An ``SSL_CERT_FILE`` that changes is loaded again. With a client certificate
    (loaded into the context), a CA file (``certificate-authority``) or an insecure cluster,
    lightkube makes the context as it always does."""
    import ssl

    from lightkube.config.client_adapter import verify_cluster

    cluster, user = config.cluster, config.user
    if (user.client_cert or user.client_cert_data or cluster.certificate_auth
            or (cluster.insecure and not cluster.certificate_auth_data)):
        return verify_cluster(cluster, user, config.abs_file, trust_env=params.trust_env)
    store: tuple = ()
    if not cluster.certificate_auth_data and params.trust_env:
        # What httpcore's default context reads: SSL_CERT_FILE (as it is now), else SSL_CERT_DIR.
        cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
        if cafile:
            try:
                found = os.stat(cafile)
                store = ("file", cafile, found.st_ino, found.st_mtime_ns, found.st_size)
            except OSError:
                store = ("file", cafile)
        elif capath:
            store = ("dir", capath)
    # httpcore sets the context's ALPN protocols on each connection, from http2.
    key = (cluster.certificate_auth_data, store, params.trust_env, params.http2)
    with _TRUST_LOCK:
        context = _TRUST.get(key)
        if context is None:
            context = verify_cluster(cluster, user, config.abs_file, trust_env=params.trust_env)
            assert isinstance(context, ssl.SSLContext)
            _TRUST[key] = context
        return context


def check_kubeconfig(path: Path) -> None:
    """A --kubeconfig file this tool can use (a file, YAML, a current context with a user),
    checked before a run starts; reaching its server is ``Kube.check_reachable``'s."""
    _kubeconfig_user(path)


#: How to get a usable kubeconfig, said after what is wrong with one.
_KUBECONFIG_FIX = ("write one with `aws eks update-kubeconfig --name CLUSTER --kubeconfig PATH`, "
                   "or leave out --kubeconfig to use the stack's")


def _kubeconfig_user(path: Path) -> dict:
    """The current context's user entry (``{"name", "exec"?, ...}``), or one line saying why
    the file cannot be used."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise RunError(f"--kubeconfig {path}: the file does not exist; {_KUBECONFIG_FIX}") from None
    except yaml.YAMLError as error:
        raise RunError(f"--kubeconfig {path}: not YAML ({' '.join(str(error).split())}); "
                       f"{_KUBECONFIG_FIX}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunError(f"--kubeconfig {path}: cannot be read ({str(error).splitlines()[0]}); "
                       f"{_KUBECONFIG_FIX}") from None
    if not isinstance(data, dict):
        raise RunError(f"--kubeconfig {path}: not a kubeconfig (no clusters, contexts, users); "
                       f"{_KUBECONFIG_FIX}")
    current = data.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in data.get("contexts") or []}
    if not current:
        raise RunError(f"the kubeconfig {path} sets no current-context "
                       f"(`kubectl config use-context NAME --kubeconfig {path}`)")
    if current not in contexts:
        raise RunError(f"the kubeconfig {path} has no context {current!r}, its current-context "
                       f"(it has: {', '.join(sorted(map(str, contexts))) or 'none'})")
    users = {u.get("name"): u.get("user") or {} for u in data.get("users") or []}
    name = contexts[current].get("user")
    if name not in users:
        raise RunError(f"the kubeconfig {path}'s context {current!r} names user {name!r}, which "
                       "it does not define")
    return {**users[name], "name": name}


class ExecPlugin:
    """A kubeconfig's ``user.exec`` credential plugin, run as client-go runs it
    (plugin/pkg/client/auth/exec/exec.go; the ExecCredential types in
    pkg/apis/clientauthentication/v1): ``KUBERNETES_EXEC_INFO`` carries an ExecCredential
    with ``spec.interactive`` false (nothing is asked of a presenter mid-run), the plugin's
    stdout is an ExecCredential of the same apiVersion whose ``status`` has the token and,
    optionally, ``expirationTimestamp``."""

    def __init__(self, config: dict, *, user_name: str,
                 clock: Callable[[], datetime.datetime] = utc_now):
        self.config, self.user, self.clock = config, user_name, clock
        self.api_version = config.get("apiVersion")
        self.command = config.get("command")
        where = f"the kubeconfig's exec plugin for user {user_name!r}"
        if not self.command:
            raise RunError(f"{where} names no command")
        if self.api_version not in EXEC_API_VERSIONS:
            raise RunError(f"{where} speaks {self.api_version!r}, which is not a "
                           f"client.authentication.k8s.io version this tool (or kubectl) knows "
                           f"({', '.join(EXEC_API_VERSIONS)})")
        mode = config.get("interactiveMode")
        if mode is None and self.api_version.endswith("/v1"):
            # clientcmd's validation: v1 has no default (v1beta1 and v1alpha1 mean IfAvailable).
            raise RunError(f"{where} speaks client.authentication.k8s.io/v1 without interactiveMode, "
                           "which v1 requires: add `interactiveMode: Never`")
        if mode not in (None, "Never", "IfAvailable", "Always"):
            raise RunError(f"{where} has an invalid interactiveMode {mode!r}")
        if mode == "Always":
            raise RunError(f"{where} needs interactiveMode Always (it asks you something): this "
                           "tool runs it without a terminal; log in first (e.g. `aws sso login`) "
                           "and use a plugin that does not prompt (`interactiveMode: Never`)")

    def __call__(self) -> Credential:
        where = f"the kubeconfig's exec plugin {self.command!r}"
        env = dict(os.environ)
        env.update({v["name"]: v.get("value", "") for v in self.config.get("env") or []
                    if v.get("name")})
        if not self.api_version.endswith("/v1alpha1"):
            env["KUBERNETES_EXEC_INFO"] = json.dumps({
                "apiVersion": self.api_version, "kind": "ExecCredential",
                "spec": {"interactive": False}})
        try:
            done = subprocess.run([self.command, *(self.config.get("args") or [])], env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        except FileNotFoundError:
            hint = self.config.get("installHint")
            raise RunError(f"{where} is not on PATH" + (f": {hint.strip()}" if hint else
                           " (install it, or give its full path in the kubeconfig)")) from None
        except subprocess.TimeoutExpired:
            raise RunError(f"{where} did not answer in 120 s") from None
        if done.returncode != 0:
            stderr = done.stderr.decode(errors="replace").strip().splitlines()
            raise RunError(f"{where} exited {done.returncode}"
                           + (f": {' / '.join(stderr[-3:])[:400]}" if stderr else " and said nothing"))
        try:
            answer = json.loads(done.stdout)
            status = answer.get("status") or {}
        except (ValueError, AttributeError):
            raise RunError(f"{where} printed something that is not an ExecCredential") from None
        if answer.get("kind") != "ExecCredential" or answer.get("apiVersion") != self.api_version:
            raise RunError(f"{where} is configured for {self.api_version} but answered "
                           f"{answer.get('apiVersion')!r} {answer.get('kind')!r}")
        if not status.get("token"):
            what = "a client certificate" if status.get("clientCertificateData") else "no token"
            raise RunError(f"{where} gave {what}: this tool authenticates with a bearer token")
        expires = status.get("expirationTimestamp")
        try:
            when = parse_time(expires) if expires else None
        except ValueError:
            raise RunError(f"{where} gave an expirationTimestamp that is not RFC 3339: {expires!r}") from None
        return Credential(status["token"], when)


def unreachable(error: BaseException, server: str) -> RunError:
    """One line for a cluster that cannot be reached."""
    detail = str(error).splitlines()[0] if str(error) else ""
    return RunError(f"cannot reach the cluster's API server {server}: "
                    f"{type(error).__name__}{': ' + detail if detail else ''}")
