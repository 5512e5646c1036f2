"""The rehearsal tools' frame: the stack's outputs (Automation API through a fake `pulumi`, or a
file), the connection (the stack's kubeconfig with an EKS token, over HTTPS), run folders, the
report, and the exit codes — 2 with one line when the run cannot be made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rehearse.lab import outputs
from rehearse.run import record
from rehearse.lab.connection import Kube, endpoint_from_stack_kubeconfig
from rehearse.run.errors import RunError
from rehearse.run.report import FAIL, PASS, Check, Measurement, Report
from tests import fake_pulumi as fake_pulumi_cli
from tests.conftest import PROJECT_DIR, main_in_process
from tests.fake_kube_api import (  # noqa: F401
    CLUSTER, FAKE_AWS_ENV, REGION, api, assert_authorized, fake_aws, pki)



# --- stack outputs ----------------------------------------------------------------------------

@pytest.fixture
def fake_pulumi(tmp_path, monkeypatch):
    """A `pulumi` on PATH that answers from a state file; returns (state path, log path)."""
    return fake_pulumi_cli.install(tmp_path, monkeypatch, {"selected": "dev", "stacks": {"dev": {
        "outputs": {"region": REGION, "kubeconfig": "{\"secret\": true}", "layers": ["network"]},
        "secrets": ["kubeconfig"]}}})


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_outputs_through_the_automation_api_come_with_their_secrets(fake_pulumi):
    _, log = fake_pulumi
    found = outputs.from_pulumi("dev", PROJECT_DIR)
    assert found.stack == "dev"
    assert found.get("kubeconfig") == "{\"secret\": true}", "secrets come back decrypted"
    assert found.get("region") == REGION
    made = calls(log)
    # Addressed with --stack, never selected (a `stack select` would change the
    # presenter's current stack).
    assert ["--non-interactive", "stack", "--show-name", "--stack", "dev"] in made
    assert not [call for call in made if "select" in call]
    assert any("--show-secrets" in call for call in made)


def test_the_selected_stack_is_the_default(fake_pulumi):
    assert outputs.from_pulumi(None, PROJECT_DIR).stack == "dev"


def test_no_selected_stack_says_what_to_pass(fake_pulumi):
    state, _ = fake_pulumi
    data = json.loads(state.read_text())
    data["selected"] = None
    state.write_text(json.dumps(data))
    with pytest.raises(RunError, match="no stack is selected: pass --stack NAME"):
        outputs.from_pulumi(None, PROJECT_DIR)


def test_an_unknown_stack_lists_the_stacks_there_are(fake_pulumi):
    with pytest.raises(RunError, match=r"^--stack prod: no such stack in .*; the stacks there are dev$"):
        outputs.from_pulumi("prod", PROJECT_DIR)


def test_no_pulumi_cli_says_to_use_an_outputs_file(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RunError, match="--outputs FILE"):
        outputs.from_pulumi("dev", PROJECT_DIR)


def test_outputs_file_problems_are_one_line(tmp_path):
    with pytest.raises(RunError, match="pulumi stack output --json --show-secrets"):
        outputs.from_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(RunError, match="is not the JSON"):
        outputs.from_file(bad)


def test_a_missing_output_names_the_layer_to_build(tmp_path):
    found = outputs.StackOutputs("dev", {"layers": ["network", "cluster"]})
    with pytest.raises(RunError, match="no output gatewayLeaseName: build the gateway layer"):
        found.get("gatewayLeaseName")
    with pytest.raises(RunError, match="set upToLayer to gateway or higher"):
        found.require_layer("gateway", "demo 1")


# --- the connection: the stack's kubeconfig, an EKS token, HTTPS ---------------------------------

def stack_kubeconfig(server: str, ca_b64: str) -> str:
    """The kubeconfig output the lab writes (components/eks_cluster.py)."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": CLUSTER, "cluster": {"server": server,
                                                   "certificate-authority-data": ca_b64}}],
        "contexts": [{"name": CLUSTER, "context": {"cluster": CLUSTER, "user": CLUSTER}}],
        "current-context": CLUSTER,
        "users": [{"name": CLUSTER, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", CLUSTER, "--region", REGION]}}}]})


def test_the_stacks_kubeconfig_connects_over_https_with_an_eks_token(api, pki):
    from lightkube.resources.core_v1 import Node

    api.plant("hybrid-0", **{"eks.amazonaws.com/compute-type": "hybrid"})
    endpoint = endpoint_from_stack_kubeconfig(stack_kubeconfig(api.url, pki.ca_b64), REGION)
    kube = Kube.connect(endpoint)
    try:
        hybrid = {"eks.amazonaws.com/compute-type": "hybrid"}
        assert [n.metadata.name for n in kube.client.list(Node, labels=hybrid)] == ["hybrid-0"]
    finally:
        kube.close()
    # The fake server checked that every request carried a valid EKS token for the cluster.
    assert_authorized(api)


def test_a_server_the_cluster_ca_did_not_sign_is_refused(api, pki):
    from tests.fake_kube_api import make_pki
    from lightkube.resources.core_v1 import Node

    other = make_pki("another-cluster")
    endpoint = endpoint_from_stack_kubeconfig(stack_kubeconfig(api.url, other.ca_b64), REGION)
    kube = Kube.connect(endpoint)
    try:
        with pytest.raises(Exception) as caught:
            list(kube.client.list(Node))
        assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value) or "certificate" in str(caught.value).lower()
        # The raw requests (the pod proxy's) trust no more than the typed client does.
        with pytest.raises(Exception) as caught:
            kube.get_raw("/version")
        assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value) or "certificate" in str(caught.value).lower()
    finally:
        kube.close()
    assert api.requests == [], "no request, so no token, reached an untrusted server"


def test_a_trust_is_loaded_once_and_lent_to_no_other_ca(api, pki):
    """Connections with the same cluster CA share one SSL context (the trust is loaded once
    per process); a connection with another CA gets its own and is refused by the same
    server right after a trusted one."""
    from tests.fake_kube_api import make_pki
    from lightkube.resources.core_v1 import Node

    def context(kube: Kube):
        return kube._raw._transport._pool._ssl_context

    hybrid = {"eks.amazonaws.com/compute-type": "hybrid"}
    api.plant("hybrid-0", **hybrid)
    trusted = endpoint_from_stack_kubeconfig(stack_kubeconfig(api.url, pki.ca_b64), REGION)
    untrusted = endpoint_from_stack_kubeconfig(
        stack_kubeconfig(api.url, make_pki("another-cluster").ca_b64), REGION)
    first, second, other = Kube.connect(trusted), Kube.connect(trusted), Kube.connect(untrusted)
    try:
        assert context(first) is context(second)
        assert context(other) is not context(first)
        assert [n.metadata.name for n in second.client.list(Node, labels=hybrid)] == ["hybrid-0"]
        seen = len(api.requests)
        with pytest.raises(Exception) as caught:
            other.get_raw("/version")
        assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value) or "certificate" in str(caught.value).lower()
        assert len(api.requests) == seen, "no request reached the server through the other CA"
    finally:
        for kube in (first, second, other):
            kube.close()


# --- reports and run folders --------------------------------------------------------------------

def test_a_report_is_versioned_json_and_markdown_with_a_way_to_see_each_check(tmp_path):
    report = Report(command="verify gateway", stack="dev", started="2026-12-01T09:00:00Z",
                    title="Demo 1: the gateway", checks=[
                        Check("leader resolved", PASS, "node-a holds the lease",
                              command="kubectl -n eks-hybrid-nodes-gateway get lease"),
                        Check("route to the leader", FAIL, "targets eni-2, the leader's is eni-1",
                              fix="delete the leader pod", command="aws ec2 describe-route-tables")],
                    measurements=[Measurement("gap", 3.2, "s", "AWS: 3-5 s")])
    report.write(tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["version"] == 2 and data["passed"] is False and data["charts"] == []
    assert [c["name"] for c in data["checks"]] == ["leader resolved", "route to the leader"]
    text = (tmp_path / "report.md").read_text()
    assert "Result: **FAIL** (1 of 2 checks passed)" in text
    assert "Fix: delete the leader pod" in text
    assert "See it yourself: `aws ec2 describe-route-tables`" in text
    assert "| gap | 3.2 s | AWS: 3-5 s |" in text


def test_a_run_folder_is_named_by_time_stack_and_command(tmp_path):
    moment = record.parse_time("2026-12-01T09:05:07.123456789Z")
    folder = record.folder_for(tmp_path, "dev", "verify gateway", moment)
    assert folder.name == "20261201T090507Z-dev-verify-gateway"
    recorder = record.Recorder(folder, clock=lambda: moment)
    recorder("run.started", command="verify gateway", stack="dev")
    recorder.close()
    [event] = record.read_events(folder)
    assert event == {"at": "2026-12-01T09:05:07.123456Z", "kind": "run.started",
                     "command": "verify gateway", "stack": "dev"}


# --- exit codes ---------------------------------------------------------------------------------

def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PULUMI_"))}
    return subprocess.run([sys.executable, "-m", "rehearse", *args], cwd=PROJECT_DIR,
                          env={**base, **(env or {})}, capture_output=True, text=True, timeout=60)


def ran_main(capsys, monkeypatch, *args: str) -> subprocess.CompletedProcess:
    """``run_cli`` in-process, in the environment ``run_cli`` gives it. For the refusals, where
    the process boundary is not what is tested (an unreachable cluster keeps its fresh
    interpreter: the one `python -m rehearse` of the rehearse tests)."""
    from rehearse import cli

    return main_in_process(capsys, monkeypatch, "rehearse", cli.main, *args)


def test_an_unreachable_cluster_exits_2_with_one_line(tmp_path, pki):
    from tests.fake_kube_api import FAKE_AWS_ENV

    stack = tmp_path / "dev.json"
    # Port 9 (discard) on this machine: nothing listens there.
    stack.write_text(json.dumps({"region": REGION, "layers": ["network", "cluster", "gateway", "demo"],
                                 "gatewayNamespace": "eks-hybrid-nodes-gateway",
                                 "gatewayLeaseName": "hybrid-gateway-leader",
                                 "gatewayRouteTableIds": ["rtb-1"], "hybridPodCidr": "10.86.0.0/16",
                                 "demo1": {"namespace": "demo-gateway"},
                                 "kubeconfig": stack_kubeconfig("https://127.0.0.1:9", pki.ca_b64)}))
    done = run_cli("verify", "gateway", "--outputs", str(stack), "--out", str(tmp_path / "runs"),
                   env={**FAKE_AWS_ENV, "NO_PROXY": "127.0.0.1"})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: cannot reach the cluster")


def test_missing_outputs_exit_2_naming_what_to_do(tmp_path, capsys, monkeypatch):
    done = ran_main(capsys, monkeypatch, "failover", "--outputs", str(tmp_path / "nope.json"))
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "pulumi stack output --json --show-secrets" in line


def test_report_of_a_folder_without_events_exits_2(tmp_path, capsys, monkeypatch):
    done = ran_main(capsys, monkeypatch, "report", str(tmp_path))
    assert done.returncode == 2 and "holds no events.jsonl" in done.stderr


def test_every_command_has_help(capsys):
    # In-process, each from the same main: `python -m rehearse` in a fresh interpreter is
    # test_an_unreachable_cluster_exits_2_with_one_line's (a fresh one here would only import
    # the tools again).
    from rehearse import cli

    for args in (["--help"], ["verify", "gateway", "--help"], ["verify", "gpu", "--help"],
                 ["failover", "--help"], ["report", "--help"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(args)
        assert exited.value.code == 0 and "usage: python -m rehearse" in capsys.readouterr().out, args


def test_the_readme_test_command_is_what_ci_runs():
    readme = (PROJECT_DIR / "README.md").read_text()
    ci = (PROJECT_DIR / ".ci" / "run").read_text()
    [command] = [line for line in ci.splitlines() if line.startswith("pip install")]
    assert command in readme.split("## ", 1)[0], "the README's first screen shows CI's command"


def test_a_404_is_recognised_as_a_real_api_server_and_the_emulator_give_it():
    """A real API server (and the emulator, tests/test_emulator_contract.py) answers a missing
    object with a JSON Status, which lightkube raises as ApiError, and a resource it does not
    serve (a CRD not installed, a version not served) with a plain-text 404, which lightkube
    passes through as httpx's error. The tools treat both as "not found" (a Lease or VTEP config
    that does not exist)."""
    import httpx2
    from lightkube import ApiError

    from rehearse.lab.leader import not_found

    request = httpx2.Request("GET", "http://127.0.0.1/apis/cilium.io/v2/ciliumvtepconfigs/x")
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "reason": "NotFound", "code": 404, "message": "not found"}
    assert not_found(ApiError(request=request, response=httpx2.Response(
        404, json=status, request=request)))
    assert not_found(httpx2.HTTPStatusError("", request=request, response=httpx2.Response(
        404, text="404: Not Found", request=request)))
    forbidden = {**status, "reason": "Forbidden", "code": 403}
    assert not not_found(ApiError(request=request, response=httpx2.Response(
        403, json=forbidden, request=request)))


def test_a_kubeconfig_file_given_with_kubeconfig_serves_objects_and_raw_calls(tmp_path):
    """--kubeconfig PATH: lightkube reads the file (and would run its exec plugin); the pod
    proxy's raw GETs go through the same client."""
    import yaml
    from lightkube.resources.core_v1 import Pod

    from tests.kube_emulator import PODS, Emulator

    server = Emulator()
    try:
        server.put(PODS, "demo-gateway", "echo", {"spec": {"containers": [{"name": "c"}]}})
        server.proxy("demo-gateway", "echo", 8080, "/", b"hello")
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "lab",
            "clusters": [{"name": "lab", "cluster": {"server": server.url}}],
            "users": [{"name": "lab", "user": {}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}]}))
        kube = Kube.from_kubeconfig_file(config)
        try:
            assert [p.metadata.name for p in kube.client.list(Pod, namespace="demo-gateway")] == ["echo"]
            assert kube.get_raw("/api/v1/namespaces/demo-gateway/pods/echo:8080/proxy/") == (200, "hello")
        finally:
            kube.close()
        with pytest.raises(RunError, match="--kubeconfig .*missing: the file does not exist"):
            Kube.from_kubeconfig_file(tmp_path / "missing")
    finally:
        server.close()


def test_the_emulator_answers_what_was_declared_after_the_same_request_was_answered():
    """The emulator remembers how it judged a request's path between requests: a resource
    declared, or a pod log given, after the same request was answered changes the next
    answer, as on a real API server."""
    import json

    from tests.kube_emulator import NODEPOOLS, PODS, Emulator

    server = Emulator()
    kube = Kube.connect(server.endpoint)
    try:
        assert kube.get_raw("/apis/karpenter.sh/v1/nodepools")[0] == 404
        server.declare(NODEPOOLS)
        status, body = kube.get_raw("/apis/karpenter.sh/v1/nodepools")
        assert (status, json.loads(body)["items"]) == (200, [])
        server.put(PODS, "demo", "p", {"spec": {"containers": [{"name": "c"}]}})
        log = "/api/v1/namespaces/demo/pods/p/log"
        before = kube.get_raw(log)
        server.log("demo", "p", "first\n")
        assert before != (200, "first\n") and kube.get_raw(log) == (200, "first\n")
    finally:
        kube.close()
        server.close()


# --- tokens that expire: the stack's EKS token and a kubeconfig's exec plugin ----------------

class Clock:
    """One shifted "now" for this machine's clock, botocore's signer and the emulator's
    authenticator: a test moves it forward instead of waiting 15 minutes."""

    def __init__(self, monkeypatch):
        import datetime

        import botocore.auth

        self.offset = datetime.timedelta(0)
        self._real = botocore.auth.get_current_datetime
        monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: self._real() + self.offset)

    def now(self):
        return record.utc_now() + self.offset

    def advance(self, **delta):
        import datetime

        self.offset += datetime.timedelta(**delta)


@pytest.fixture
def authenticating(monkeypatch):
    from tests.kube_emulator import PODS, Emulator

    clock = Clock(monkeypatch)
    server = Emulator()
    server.put(PODS, "demo-gateway", "echo", {"spec": {"containers": [{"name": "c"}]}})
    server.proxy("demo-gateway", "echo", 8080, "/", b"hello")
    server.authenticate(clock.now, cluster=CLUSTER, region=REGION,
                        keys=(FAKE_AWS_ENV["AWS_ACCESS_KEY_ID"], FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"]))
    try:
        yield server, clock
    finally:
        server.close()


def pod_names(kube: Kube) -> list[str]:
    from lightkube.resources.core_v1 import Pod

    return [p.metadata.name for p in kube.client.list(Pod, namespace="demo-gateway")]


@pytest.mark.parametrize("cluster, keys", [
    ("another-cluster", None),
    (CLUSTER, ("AKIAIOSFODNN7EXAMPLE", "a-secret-key-the-test-account-does-not-have")),
], ids=["another-cluster", "other-keys"])
def test_a_token_the_cluster_did_not_sign_for_is_refused(authenticating, monkeypatch, cluster, keys):
    # What the EKS authenticator and STS refuse: a token signed for another cluster's name, or
    # with keys that are not the account's, though well-formed and fresh (tests/eks_tokens.py).
    import httpx2

    from rehearse.lab.connection import eks_token

    server, _clock = authenticating
    if keys:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys[0])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys[1])
    token = eks_token(cluster, REGION)
    with httpx2.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as client:
        assert client.get("/api/v1/namespaces/demo-gateway/pods").status_code == 401
    assert server.refused[-1].startswith("signature does not match")
    # The same request with the cluster's own token, from the account's keys, is served.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_AWS_ENV["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"])
    good = eks_token(CLUSTER, REGION)
    with httpx2.Client(base_url=server.url, headers={"Authorization": f"Bearer {good}"}) as client:
        assert client.get("/api/v1/namespaces/demo-gateway/pods").status_code == 200


def test_the_fake_api_server_refuses_a_token_for_another_cluster(api, pki):
    from lightkube.core.exceptions import ApiError
    from lightkube.resources.core_v1 import Node

    from rehearse.lab.connection import eks_token
    from tests.fake_kube_api import token_problem

    assert token_problem(f"Bearer {eks_token(CLUSTER, REGION)}") is None
    refused = token_problem(f"Bearer {eks_token('another-cluster', REGION)}")
    assert refused is not None and refused.startswith("signature does not match")
    # Another stack's kubeconfig, pointing at this server: the tool mints for the cluster the
    # kubeconfig names, which this server's authenticator refuses.
    endpoint = endpoint_from_stack_kubeconfig(
        stack_kubeconfig(api.url, pki.ca_b64).replace(CLUSTER, "another-cluster"), REGION)
    kube = Kube.connect(endpoint)
    try:
        with pytest.raises(ApiError) as caught:
            list(kube.client.list(Node))  # (lazy: the request is made on iteration)
    finally:
        kube.close()
    assert caught.value.status.code == 401
    assert api.requests and all(r.status == 401 for r in api.requests)
    assert all(r.token_problem.startswith("signature does not match") for r in api.requests)


def test_the_emulator_refuses_an_eks_token_15_minutes_after_it_was_signed(authenticating):
    server, clock = authenticating
    endpoint = endpoint_from_stack_kubeconfig(stack_kubeconfig(server.url, ""), REGION)
    import httpx2

    fixed = httpx2.Client(base_url=server.url, headers={"Authorization": f"Bearer {endpoint.token}"})
    try:
        assert fixed.get("/api/v1/namespaces/demo-gateway/pods").status_code == 200
        clock.advance(minutes=15, seconds=1)
        answer = fixed.get("/api/v1/namespaces/demo-gateway/pods")
        assert answer.status_code == 401
        assert answer.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                 "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    finally:
        fixed.close()
    assert server.refused and server.refused[-1].startswith("token expired")


def test_a_run_longer_than_15_minutes_renews_the_stacks_eks_token(authenticating):
    server, clock = authenticating
    endpoint = endpoint_from_stack_kubeconfig(stack_kubeconfig(server.url, ""), REGION)
    kube = Kube.connect(endpoint, clock=clock.now)
    try:
        assert pod_names(kube) == ["echo"]
        clock.advance(minutes=13, seconds=30)  # inside the refresh margin: renewed before use
        assert pod_names(kube) == ["echo"]
        clock.advance(minutes=20)
        assert pod_names(kube) == ["echo"]
        assert kube.get_raw("/api/v1/namespaces/demo-gateway/pods/echo:8080/proxy/") == (200, "hello")
    finally:
        kube.close()
    assert server.refused == [], "no request went out with an expired token"


def test_a_401_renews_the_token_once_and_retries(authenticating):
    """This machine's clock behind the server's: the token looks good here, is expired there."""
    server, clock = authenticating
    endpoint = endpoint_from_stack_kubeconfig(stack_kubeconfig(server.url, ""), REGION)
    behind = record.utc_now  # the client's clock does not move; the signer's and server's do
    kube = Kube.connect(endpoint, clock=behind)
    try:
        clock.advance(minutes=16)
        assert pod_names(kube) == ["echo"]
    finally:
        kube.close()
    assert len(server.refused) == 1 and server.refused[0].startswith("token expired")


PLUGIN = """#!{python}
# Stands in for `aws eks get-token` (v2 of the AWS CLI, which is botocore): logs its run, then
# prints an ExecCredential whose token botocore presigned by the test's clock, expiring 14
# minutes after it was signed, as the CLI reports it. botocore alone, imported only once there
# is a token to make: the plugin runs once per credential.
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["spec"]["interactive"] is False, info
with open({calls!r}, "a") as log:
    log.write(json.dumps(info) + "\\n")
if os.environ.get("PLUGIN_FAIL"):
    sys.stderr.write("Error loading SSO Token: Token for lab does not exist\\n")
    sys.exit(255)
import base64, datetime, urllib.parse
import botocore.auth, botocore.session
offset = float(open({offset!r}).read())
real = botocore.auth.get_current_datetime
botocore.auth.get_current_datetime = lambda: real() + datetime.timedelta(seconds=offset)
# Signed for the cluster its arguments name, as `aws eks get-token --cluster-name` signs.
cluster = sys.argv[sys.argv.index("--cluster-name") + 1]
sts = botocore.session.Session().create_client("sts", region_name="ap-northeast-2")
sts.meta.events.register("before-sign.sts.GetCallerIdentity",
                         lambda request, **_: request.headers.__setitem__("x-k8s-aws-id", cluster))
url = sts.generate_presigned_url("get_caller_identity", Params={{}}, ExpiresIn=60, HttpMethod="GET")
signed = datetime.datetime.strptime(dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))["X-Amz-Date"],
                                    "%Y%m%dT%H%M%SZ")
print(json.dumps({{"apiVersion": {version!r}, "kind": "ExecCredential", "status": {{
    "token": "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("="),
    "expirationTimestamp": (signed + datetime.timedelta(minutes=14)).strftime("%Y-%m-%dT%H:%M:%SZ")}}}}))
"""


def write_kubeconfig(tmp_path, server_url: str, version: str = "client.authentication.k8s.io/v1",
                     command: str = "", **exec_extra) -> Path:
    import yaml

    exec_config = {"apiVersion": version, "command": command or str(tmp_path / "get-token"),
                   "args": ["eks", "get-token", "--cluster-name", CLUSTER, "--region", REGION],
                   "interactiveMode": "Never", **exec_extra}
    exec_config = {k: v for k, v in exec_config.items() if v is not None}
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": server_url}}],
        "users": [{"name": "lab", "user": {"exec": exec_config}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}]}))
    return config


@pytest.fixture
def plugin(tmp_path, authenticating):
    server, clock = authenticating
    offset, calls = tmp_path / "offset", tmp_path / "calls"
    offset.write_text("0")
    calls.write_text("")

    def install(version: str = "client.authentication.k8s.io/v1") -> Path:
        script = tmp_path / "get-token"
        script.write_text(PLUGIN.format(python=sys.executable,
                                        offset=str(offset), calls=str(calls), version=version))
        script.chmod(0o755)
        return script

    def advance(**delta):
        clock.advance(**delta)
        offset.write_text(str(clock.offset.total_seconds()))

    def runs() -> int:
        return len(calls.read_text().splitlines())

    return server, clock, install, advance, runs


def test_a_v1_exec_plugin_is_run_again_when_its_credential_expires(tmp_path, plugin):
    server, clock, install, advance, runs = plugin
    install()
    kube = Kube.from_kubeconfig_file(write_kubeconfig(tmp_path, server.url), clock=clock.now)
    try:
        assert pod_names(kube) == ["echo"] and runs() == 1
        advance(minutes=10)
        assert pod_names(kube) == ["echo"] and runs() == 1, "not before it expires"
        advance(minutes=6)  # past the ExecCredential's expirationTimestamp (14 min)
        assert pod_names(kube) == ["echo"] and runs() == 2
        assert kube.get_raw("/api/v1/namespaces/demo-gateway/pods/echo:8080/proxy/") == (200, "hello")
    finally:
        kube.close()
    assert server.refused == []


@pytest.mark.parametrize("change, message", [
    ({"command": "no-such-aws-plugin"}, "the kubeconfig's exec plugin 'no-such-aws-plugin' is not on PATH"),
    ({"version": "client.authentication.k8s.io/v2"}, "speaks 'client.authentication.k8s.io/v2'"),
    ({"interactiveMode": None}, "v1 without interactiveMode, which v1 requires"),
    ({"env": [{"name": "PLUGIN_FAIL", "value": "1"}]},
     "exited 255: Error loading SSO Token: Token for lab does not exist"),
])
def test_a_kubeconfig_that_cannot_be_used_names_the_real_cause(tmp_path, plugin, change, message):
    server, clock, install, advance, runs = plugin
    install()
    config = write_kubeconfig(tmp_path, server.url, **change)
    with pytest.raises(RunError) as caught:
        Kube.from_kubeconfig_file(config, clock=clock.now)
    assert message in str(caught.value)
    assert "cannot reach" not in str(caught.value)


def test_a_kubeconfig_without_its_context_or_file_says_so(tmp_path):
    import yaml

    with pytest.raises(RunError, match="does not exist"):
        Kube.from_kubeconfig_file(tmp_path / "nope")
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "prod",
                                      "contexts": [{"name": "lab", "context": {"user": "lab"}}]}))
    with pytest.raises(RunError, match="has no context 'prod', its current-context \\(it has: lab\\)"):
        Kube.from_kubeconfig_file(config)


def test_the_shared_trust_client_is_the_one_lightkube_builds(pki):
    """``connection._client`` rebuilds lightkube 1.x's ``Client.__init__`` to lend it a shared
    SSL context. Built both ways from the same kubeconfig, the two clients hold the same
    attributes and the same HTTP client settings (base URL, timeout, auth, headers,
    redirects), so a lightkube release that builds its client otherwise fails here rather than
    in a rehearsal."""
    import httpx2 as httpx
    from lightkube import Client, KubeConfig

    from rehearse.lab import connection

    config = KubeConfig.from_dict({
        "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:6443",
                                                 "certificate-authority-data": pki.ca_b64}}],
        "users": [{"name": "lab", "user": {"token": "t"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}],
        "current-context": "lab"})
    ours = connection._client(config, 7.0)
    theirs = Client(config=config, timeout=httpx.Timeout(7.0), field_manager="rehearse")
    try:
        assert set(vars(ours)) == set(vars(theirs))
        assert ours._timeout == theirs._timeout
        assert set(vars(ours._client)) == set(vars(theirs._client))
        for name, value in vars(theirs._client).items():
            if name != "_client":
                assert vars(ours._client)[name] == value, name
        mine, lightkubes = ours._client._client, theirs._client._client
        assert type(mine) is type(lightkubes)
        assert (mine.base_url, mine.timeout, mine.follow_redirects, dict(mine.headers)) == (
            lightkubes.base_url, lightkubes.timeout, lightkubes.follow_redirects, dict(lightkubes.headers))
        assert type(mine.auth) is type(lightkubes.auth)
    finally:
        ours.close()
        theirs.close()
