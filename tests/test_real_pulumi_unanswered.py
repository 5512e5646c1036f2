"""Bad input under the real Pulumi engine (issue 41, last "Done when"): an AWS endpoint or a
Kubernetes API server that does not answer, and a stack file the CLI refuses. Each must end
in a clear one-line error naming the thing, within a bound (never the runner's deadline),
with no process of the run and no temporary folder left.

"Does not answer" is two things: a port nothing listens on (the connect is refused at once)
and a server that accepts and never sends a byte (tests/unanswered.py's SilentServer: a hung
server, a black-holed proxy) — the second is the one only a timeout ends.

The cleanups' waits are the program's own settings (class attributes of the provider, which
the engine pickles into the state with the class): a test program scales them down so a run
takes seconds, and checks that the wait it sees is the one those settings give. With the
users' values the same runs end in about two minutes (see each test)."""

from __future__ import annotations

import base64
import os
import re
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT_DIR
from tests.fake_kube_api import make_pki
from tests.real_pulumi import EngineError, PulumiEngine, PulumiProject, pulumi_bindir  # noqa: F401
from tests.unanswered import SilentServer, closed_port, engine_processes, leftovers

REGION = "ap-northeast-2"
#: What the engine itself costs around the program's waits (CLI start, language host, plugin
#: start, state writes) on a loaded 2-core machine; the runner's deadline is far beyond it.
ENGINE_SECONDS = 30
DEADLINE = 60

KARPENTER = '''
import pulumi
from components.cleanup.karpenter_leftovers import (KarpenterLeftoverCleanup,
                                                     KarpenterLeftoverCleanupProvider as P)

# The program's own bounds, scaled down for the test (users: 5 s, 20 s, 1 s).
P.connect_timeout_seconds = P.read_timeout_seconds = {timeout}
P.retry_base_seconds = {backoff}
KarpenterLeftoverCleanup("alpha-karpenter-leftovers", region="{region}", cluster_name="alpha")
'''


@pytest.fixture
def own_tmp(tmp_path, monkeypatch) -> Path:
    """This process's temporary folder (the Automation API makes its event-log folder there),
    to be empty again after the run."""
    folder = tmp_path / "own-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def assert_no_process_left(engine: PulumiEngine) -> None:
    assert engine.command.alive() == [], "processes left in the CLI's sessions"
    assert engine_processes(engine.home) == [], "processes of the engine left"


def assert_no_temporary_left(engine: PulumiEngine, own_tmp: Path) -> None:
    """After ``close``: the engine's TMPDIR is gone and this process's is empty."""
    assert not engine.tmp.exists(), leftovers(engine.tmp)
    assert leftovers(own_tmp) == [], f"temporary files left in {own_tmp}"


def run_karpenter_destroy(bindir, tmp_path, own_tmp, endpoint: str, *, timeout: float,
                          backoff: float):
    main = KARPENTER.format(timeout=timeout, backoff=backoff, region=REGION)
    project = PulumiProject.program(tmp_path / "project", "unanswered", main, source=PROJECT_DIR)
    with PulumiEngine(bindir, tmp_path / "engine", aws_endpoint=endpoint,
                      deadline=DEADLINE) as engine:
        stack = engine.stack(project, "t")
        up = stack.up()  # create() is pure: no AWS call
        assert up.ok, up.error
        down = stack.destroy()
        assert_no_process_left(engine)
    assert_no_temporary_left(engine, own_tmp)
    return down


def test_an_aws_endpoint_that_never_answers_ends_the_cleanup_s_delete_in_bounded_time(
        pulumi_bindir, tmp_path, own_tmp):  # noqa: F811
    # Users' settings: 3 parts (instances, launch templates, instance profiles), each one
    # request tried timeout_attempts (2) times of read_timeout (20 s) + a 1 s backoff: ~2 min.
    with SilentServer() as server:
        down = run_karpenter_destroy(pulumi_bindir, tmp_path, own_tmp, server.url(),
                                     timeout=1.0, backoff=0.1)
        accepted = server.accepted
    assert not down.ok
    # Each of the three parts' first request, tried twice (AwsCalls.timeout_attempts), one
    # connection each (the SDK's own retries are off: sdk_attempts 1).
    assert accepted == 3 * 2, accepted
    assert down.seconds < 3 * 2 * (1.0 + 0.1) + ENGINE_SECONDS, down.seconds
    assert "\n" not in down.error
    assert server.url() in down.error and "Read timeout" in down.error, down.error
    assert "not answered" in down.error, down.error
    assert [s.name for s in down.steps() if s.failed] == ["alpha-karpenter-leftovers"]


def test_an_aws_endpoint_nothing_listens_on_is_an_error_naming_it(
        pulumi_bindir, tmp_path, own_tmp):  # noqa: F811
    # Refused at once, so AwsCalls' full attempts (6) with backoff: users' 1+2+4+8+16 s per
    # part, ~1.5 min for the three.
    endpoint = f"http://127.0.0.1:{closed_port()}"
    down = run_karpenter_destroy(pulumi_bindir, tmp_path, own_tmp, endpoint, timeout=5.0,
                                 backoff=0.05)
    assert not down.ok
    assert down.seconds < 3 * 0.05 * (1 + 2 + 4 + 8 + 16) + ENGINE_SECONDS, down.seconds
    assert "\n" not in down.error
    assert f'Could not connect to the endpoint URL: "{endpoint}/"' in down.error, down.error
    assert "gave up after 6 attempts" in down.error, down.error


DELETION_COST = '''
import pulumi
from components.cleanup.deletion_cost_ranks import (DeletionCostRanks,
                                                    DeletionCostRanksProvider as P)

# The program's own bounds, scaled down for the test (users: 15 s a request, 5 attempts).
P.request_timeout_seconds = {timeout}
P.attempts = {attempts}
P.retry_base_seconds = 0.1
DeletionCostRanks("ranks", cluster_name="alpha", region="{region}", endpoint="{endpoint}",
                  certificate_authority="{ca}", namespace="demo")
'''


def test_a_kubernetes_api_that_never_answers_ends_the_cleanup_s_delete_in_bounded_time(
        pulumi_bindir, tmp_path, own_tmp):  # noqa: F811
    # Users' settings: 5 tries of 15 s (the socket timeout bounds the TLS handshake too) and
    # 1+2+4+8 s of backoff: 90 s, then EKS is asked whether the cluster is gone (5 s connect,
    # 10 s read, 2 SDK retries).
    pki = make_pki("unanswered-ca")
    with SilentServer() as server:
        main = DELETION_COST.format(timeout=1.0, attempts=2, region=REGION, ca=pki.ca_b64,
                                    endpoint=server.url("https"))
        project = PulumiProject.program(tmp_path / "project", "unanswered", main,
                                        source=PROJECT_DIR)
        # EKS's "is the cluster gone?" goes to a port nothing listens on: refused at once.
        with PulumiEngine(pulumi_bindir, tmp_path / "engine", deadline=DEADLINE,
                          aws_endpoint=f"http://127.0.0.1:{closed_port()}") as engine:
            stack = engine.stack(project, "t")
            up = stack.up()
            assert up.ok, up.error
            down = stack.destroy()
            assert_no_process_left(engine)
        assert_no_temporary_left(engine, own_tmp)
        accepted = server.accepted
    assert not down.ok
    assert accepted == 2, accepted  # P.attempts connections, each left unanswered
    assert down.seconds < 2 * 1.0 + 0.1 + ENGINE_SECONDS, down.seconds
    assert "\n" not in down.error
    pods = f"GET {server.url('https')}/api/v1/namespaces/demo/pods"
    assert f"could not list the pods of demo: {pods} failed" in down.error, down.error
    assert "timed out" in down.error and "(after 2 attempts)" in down.error, down.error


KUBERNETES_PROVIDER = '''
import pulumi
import pulumi_kubernetes as k8s

cfg = pulumi.Config()
settings = cfg.get_int("clientTimeout")
provider = k8s.Provider("silent", kubeconfig=cfg.require_secret("kubeconfig"),
                        kube_client_settings=k8s.KubeClientSettingsArgs(timeout=settings)
                        if settings else None)
k8s.core.v1.ConfigMap("settings", metadata={"name": "settings", "namespace": "default"},
                      data={"a": "b"}, opts=pulumi.ResourceOptions(provider=provider))
'''


def kubeconfig(server: str, ca_pem: bytes) -> str:
    ca = base64.b64encode(ca_pem).decode()
    return (f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n"
            f"    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: t\n"
            "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n")


def silent_kubernetes_stack(engine: PulumiEngine, tmp_path: Path, server: SilentServer, pki):
    """A stack of the ConfigMap program, its provider's kubeconfig (a secret) naming ``server``."""
    project = PulumiProject.program(tmp_path / "project", "silentk8s", KUBERNETES_PROVIDER,
                                    packages=())
    stack = engine.stack(project, "t")
    stack.set_config({"silentk8s:kubeconfig": kubeconfig(server.url("https"), pki.ca_pem)},
                     secret=("silentk8s:kubeconfig",))
    return stack


def assert_kubeconfig_contained(engine: PulumiEngine, server: SilentServer) -> None:
    """pulumi-kubernetes writes the kubeconfig it is given (here with a bearer token) to
    $TMPDIR at Configure and leaves it: it must be in the engine's own TMPDIR, which goes with
    close(), and not in the system's."""
    written = [p.name for p in engine.tmp.iterdir()]
    assert written and all(n.startswith("kubeconfig") for n in written), written
    system_tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    assert not [p for p in system_tmp.glob("kubeconfig*")
                if f":{server.port}" in p.read_text(errors="replace")]


def test_pulumi_kubernetes_on_an_api_server_that_never_answers_fails_up_in_bounded_time(
        pulumi_bindir, tmp_path, own_tmp):  # noqa: F811
    """No TLS handshake at all: the provider's Configure asks for the server version
    (cluster.TryGetServerVersion), then the OpenAPI schema (getResources); each connect is cut
    by Go's 10 s TLSHandshakeTimeout (net/http's DefaultTransport, which client-go's
    SetTransportDefaults copies), with no kubeClientSettings needed — the program's own
    provider (stacks/layers/cluster.py) sets none. The ConfigMap then fails naming the server."""
    pki = make_pki("unanswered-ca")
    with SilentServer() as server:
        with PulumiEngine(pulumi_bindir, tmp_path / "engine", deadline=DEADLINE) as engine:
            stack = silent_kubernetes_stack(engine, tmp_path, server, pki)
            started = time.monotonic()
            try:
                up = stack.up()
            except EngineError as error:
                pytest.fail(f"only the runner's deadline ended it: {error}")
            seconds = time.monotonic() - started
            assert_no_process_left(engine)
            assert_kubeconfig_contained(engine, server)
        assert_no_temporary_left(engine, own_tmp)
        accepted = server.accepted
    assert not up.ok
    assert accepted == 2, accepted
    assert "\n" not in up.error
    assert f"{server.url('https')}/" in up.error and "TLS handshake timeout" in up.error, up.error
    assert up.error.endswith("(settings, kubernetes:core/v1:ConfigMap)"), up.error
    assert seconds < 2 * 10 + ENGINE_SECONDS, seconds


STACK_FILE = "config:\n  eks-hybrid-lab:availabilityZoneCount: two\n"


def test_a_stack_file_the_cli_refuses_leaves_no_process_and_no_temporary_folder(
        pulumi_bindir, tmp_path, own_tmp):  # noqa: F811
    project = PulumiProject.copy_of(PROJECT_DIR, tmp_path / "project")
    with PulumiEngine(pulumi_bindir, tmp_path / "engine", deadline=DEADLINE) as engine:
        stack = engine.stack(project, "bad")
        stack.write_stack_file(STACK_FILE)
        run = stack.preview()
        assert_no_process_left(engine)
    assert_no_temporary_left(engine, own_tmp)
    assert not run.ok
    assert "\n" not in run.error
    # The CLI's own type check (pkg/workspace/config.go), naming the key and the type.
    assert "availabilityZoneCount" in run.error and "integer" in run.error, run.error



def test_pulumi_kubernetes_on_an_api_server_whose_tls_answers_and_http_never_does(
        pulumi_bindir, tmp_path, own_tmp):  # noqa: F811
    """TLS up, HTTP behind it hung (an overloaded apiserver, a TLS-terminating balancer): the
    provider's client has no timeout unless ``kubeClientSettings.timeout`` is set
    (provider.go's Configure sets ``rest.Config.Timeout`` only from it or
    PULUMI_K8S_CLIENT_TIMEOUT), so nothing but a deadline ends ``up``. The runner's deadline
    does, naming the step under way; with the provider's own timeout set, ``up`` ends on it."""
    pki = make_pki("unanswered-ca")
    (tmp_path / "tls").mkdir()
    (tmp_path / "tls" / "cert.pem").write_bytes(pki.cert_pem)
    (tmp_path / "tls" / "key.pem").write_bytes(pki.key_pem)
    deadline = 20
    with SilentServer(tls=tmp_path / "tls") as server:
        with PulumiEngine(pulumi_bindir, tmp_path / "engine", deadline=deadline) as engine:
            stack = silent_kubernetes_stack(engine, tmp_path, server, pki)
            started = time.monotonic()
            with pytest.raises(EngineError) as stopped:
                stack.up()
            assert time.monotonic() - started < deadline + 15
            assert_no_process_left(engine)
            assert server.accepted >= 1  # it did get through to the server
            # The killed CLI's stack lock went with it: the next command may run.
            assert stack._locks() == []

            stack.set_config({"silentk8s:clientTimeout": 3})
            bounded = stack.up()
            assert_no_process_left(engine)
            assert_kubeconfig_contained(engine, server)
        assert_no_temporary_left(engine, own_tmp)
    error = str(stopped.value)
    assert "\n" not in error
    assert error.startswith(f"`pulumi up --yes --skip-preview --color` did not finish in "
                            f"{deadline} s; stopped it and every process it started"), error
    # The provider's create was under way (its Configure asks the server for its version).
    assert error.endswith("while running: create of silent"), error
    assert not bounded.ok
    # Two requests (version, then the OpenAPI schema), each cut at the provider's 3 s.
    assert bounded.seconds < 2 * 3 + ENGINE_SECONDS, bounded.seconds
    # client-go puts rest.Config.Timeout both on the http.Client (rest.HTTPClientFor) and on
    # each request's context (rest/request.go), asking the server to give up by then too
    # (``?timeout=3s``): whichever fires first words the error.
    assert f"{server.url('https')}/" in bounded.error, bounded.error
    assert "?timeout=3s" in bounded.error, bounded.error
    assert re.search(r"context deadline exceeded|Client\.Timeout exceeded", bounded.error), \
        bounded.error
