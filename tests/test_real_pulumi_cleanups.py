"""Destroy-time cleanups run by the real engine (issue 41, item 3, "Destroy-time cleanups"): each
dynamic provider of components/cleanup/, in this program's own resource class, created by
``pulumi up``, updated by a second ``up`` where its diff allows, and deleted by ``pulumi
destroy`` with the engine's parallel deletes. boto3 goes to a moto server on 127.0.0.1 the way a
user's environment points it (``AWS_ENDPOINT_URL``); the Kubernetes calls go to the real
kube-apiserver behind the EKS authenticator's rule (tests/real_cluster.py
``eks_control_plane``). What they did is read from moto and the API server, not from Pulumi's
answer; the state the engine wrote is searched for every secret.

The Karpenter leftover cleanup (components/cleanup/karpenter_leftovers.py): three delete at
once, clusters "alpha" and "beta" in moto's account, and "gamma" pinned
(``aws:allowedAccountIds``) to an account the credentials are not for. Each must act on its own
inputs only: alpha's and beta's Karpenter instances terminated, gamma's refused with nothing
done, and the decoys (another cluster's node, an instance without Karpenter's tag) left
running. A provider whose per-call state (the account it checked, its sessions) leaked between
concurrent deletes would terminate gamma's instances or refuse alpha's.

The others, in one stack (one engine start): two hosts' tokens, Node cleanups and stale-node
sweeps, the activation's SSM registrations, the gateway's routes and VTEP config, and the demo's
deletion-cost ranks (tests/real_cleanups_world.py sets up what they find, decoys included).
"""

from __future__ import annotations

import boto3
import pytest

from tests.conftest import PROJECT_DIR
from tests.real_cluster import eks_control_plane  # noqa: F401
from tests.real_pulumi import PulumiEngine, PulumiProject, moto_url, pulumi_bindir  # noqa: F401

REGION = "ap-northeast-2"
#: moto's account for any credentials.
MOTO_ACCOUNT = "123456789012"
OTHER_ACCOUNT = "210987654321"

PROGRAM = '''
import pulumi

from components.aws_account import AwsAccount
from components.cleanup.karpenter_leftovers import KarpenterLeftoverCleanup

cfg = pulumi.Config()
region = cfg.require("region")
for cluster, account in (("alpha", cfg.require("alphaAccount")), ("beta", cfg.require("betaAccount")),
                         ("gamma", cfg.require("gammaAccount"))):
    KarpenterLeftoverCleanup(f"{cluster}-karpenter-leftovers", region=region, cluster_name=cluster,
                             account=AwsAccount(allowed_account_ids=(account,)))
'''


@pytest.fixture
def fresh_moto(moto_url):  # noqa: F811
    """``moto_url`` with nothing in it: moto's backends live in this process, not in the
    server, so another test's instances would otherwise still be listed."""
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST"),
                           timeout=10).close()
    return moto_url


def karpenter_node(ec2, cluster: str, *, karpenter: bool = True) -> str:
    tags = [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"},
            {"Key": "eks:eks-cluster-name", "Value": cluster}]
    if karpenter:
        tags.append({"Key": "karpenter.sh/nodepool", "Value": "burst"})
    answer = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                               InstanceType="m5.large",
                               TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    return answer["Instances"][0]["InstanceId"]


def states(ec2) -> dict[str, str]:
    return {i["InstanceId"]: i["State"]["Name"]
            for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}


def test_parallel_deletes_each_clean_up_their_own_cluster_in_their_own_account(
        pulumi_bindir, fresh_moto, tmp_path):  # noqa: F811
    moto_url = fresh_moto
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_url,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    mine = {c: [karpenter_node(ec2, c), karpenter_node(ec2, c)] for c in ("alpha", "beta", "gamma")}
    decoys = [karpenter_node(ec2, "delta"), karpenter_node(ec2, "alpha", karpenter=False)]

    project = PulumiProject.program(tmp_path / "project", "cleanups", PROGRAM, source=PROJECT_DIR)
    with PulumiEngine(pulumi_bindir, tmp_path / "engine", aws_endpoint=moto_url,
                      deadline=180) as engine:
        stack = engine.stack(project, "t")
        stack.set_config({"cleanups:region": REGION, "cleanups:alphaAccount": MOTO_ACCOUNT,
                          "cleanups:betaAccount": MOTO_ACCOUNT,
                          "cleanups:gammaAccount": OTHER_ACCOUNT})
        up = stack.up()
        assert up.ok, up.error
        # create() is pure: nothing was touched by ``up``.
        assert set(states(ec2).values()) == {"running"}

        down = stack.destroy(parallel=8)

    after = states(ec2)
    for cluster in ("alpha", "beta"):
        assert [after[i] for i in mine[cluster]] == ["terminated", "terminated"], cluster
    assert [after[i] for i in mine["gamma"]] == ["running", "running"]
    assert [after[i] for i in decoys] == ["running", "running"]
    # gamma's delete failed, naming the account, and so did the destroy.
    assert not down.ok
    failed = [s.name for s in down.steps() if s.op == "delete" and s.failed]
    assert failed == ["gamma-karpenter-leftovers"], down.steps()
    assert any(OTHER_ACCOUNT in d and MOTO_ACCOUNT in d for d in down.diagnostics()), down.diagnostics()
    # The three deletes were under way at once: each started before any of them ended.
    deletes = [s for s in down.steps() if s.op == "delete" and "leftovers" in s.urn]
    assert len(deletes) == 3
    assert max(s.started for s in deletes) < min(s.finished for s in deletes)


# --- The host, gateway and demo cleanups, with the Kubernetes side on the real API server ------

HOSTS_PROGRAM = '''
import pulumi

from components.aws_account import AwsAccount
from components.cleanup.deletion_cost_ranks import DeletionCostRanks
from components.cleanup.gateway_routes import GatewayRouteCleanup
from components.cleanup.host_token import HostToken
from components.cleanup.node_objects import NodeObjectCleanup
from components.cleanup.ssm_registrations import SsmRegistrationCleanup
from components.cleanup.stale_nodes import StaleNodeSweep
from components.eks_cluster import kubeconfig

cfg = pulumi.Config()
# One object for the plain values: one `config set` each is a CLI run each.
world = cfg.require_object("world")
region, cluster, endpoint = world["region"], world["cluster"], world["endpoint"]
# The CA as it comes cut out of a kubeconfig: inside a secret (the cleanups unsecret it).
ca = cfg.require_secret("certificateAuthority")
activation = world["activationId"]
pinned = world.get("pinnedAccount")
account = AwsAccount(allowed_account_ids=(pinned,)) if pinned else AwsAccount()
selector, labels = world["selectors"], world["labels"]

# As components/hybrid_activation.py: the code is a secret, the registrations' cleanup takes the id.
code = pulumi.Output.secret(cfg.require_secret("activationCode"))
registrations = SsmRegistrationCleanup("registrations", activation_id=activation, region=region,
                                       account=account)
tokens = {}
for host in ("a", "b"):
    token = HostToken(f"host-{host}-token", generation=world[f"generation{host.upper()}"])
    tokens[host] = token.token
    # As components/hybrid_hosts.py: the cleanup after the host, which waits for the
    # registrations' cleanup (here directly: the host is an AWS resource).
    NodeObjectCleanup(f"host-{host}-node", cluster_name=cluster, region=region, endpoint=endpoint,
                      certificate_authority=ca, label_selector=selector[host],
                      activation_id=activation, token_label=labels["token"], token=token.token,
                      instance_id=world[f"instance{host.upper()}"],
                      instance_label=labels["instance"], host_tag=tuple(labels["hostTag"]),
                      opts=pulumi.ResourceOptions(depends_on=[registrations]))
    StaleNodeSweep(f"host-{host}-stale-nodes", cluster_name=cluster, region=region,
                   endpoint=endpoint, certificate_authority=ca, label_selector=selector[host],
                   activation_id=activation, instance_id=world[f"instance{host.upper()}"])
spare = HostToken("spare-token", generation=world["generationSpare"])
GatewayRouteCleanup("gateway-routes", region=region, route_table_ids=world["routeTables"],
                    pod_cidrs=world["podCidrs"], cluster_name=cluster,
                    endpoint=world["gatewayEndpoint"], certificate_authority=ca,
                    vtep_config_name=world["vtepName"])
DeletionCostRanks("deletion-cost-ranks", cluster_name=cluster, region=region,
                  endpoint=world["gatewayEndpoint"], certificate_authority=ca,
                  namespace=world["burstNamespace"])
pulumi.export("tokens", tokens)
pulumi.export("spareToken", spare.token)
pulumi.export("activationCode", code)
pulumi.export("kubeconfig", kubeconfig(cluster, endpoint, ca, region))
'''


#: A change of the cleanups' code only (pickled by value into each one's ``__provider``): a
#: backoff in the two mixins every cleanup but the token uses, the token provider's docstring.
CODE_FIX = (("components/cleanup/kubernetes_api.py", "retry_base_seconds: float = 1.0",
             "retry_base_seconds: float = 0.5"),
            ("components/cleanup/aws_calls.py", "retry_base_seconds: float = 1.0",
             "retry_base_seconds: float = 0.5"),
            ("components/cleanup/host_token.py", "a new generation replaces it.",
             "a new generation replaces it, and only that."))


def ops(run, dynamic: bool = False) -> dict[str, set[str]]:
    """What the engine decided for each resource of the run (``dynamic``: each cleanup, not
    the stack or the provider): {name: {op, ...}}."""
    found: dict[str, set[str]] = {}
    for step in run.steps():
        if dynamic and not step.type.startswith("pulumi-python:dynamic"):
            continue
        found.setdefault(step.name, set()).add(step.op)
    return found


def plain_texts(state: str) -> list[str]:
    """The state file(s), and the pickled providers they hold (base64 dill) decoded: a secret
    captured by a provider object would be in its pickle, not in the JSON's text."""
    import base64
    import json as json_

    texts, decoder, at = [state], json_.JSONDecoder(), 0
    while at < len(state):
        document, at = decoder.raw_decode(state, at)
        at += len(state[at:]) - len(state[at:].lstrip())
        for resource in (document.get("checkpoint", {}).get("latest") or {}).get("resources") or []:
            for props in (resource.get("inputs") or {}, resource.get("outputs") or {}):
                blob = props.get("__provider")
                if isinstance(blob, str):
                    texts.append(base64.b64decode(blob).decode("latin-1"))
    return texts


def test_host_gateway_and_demo_cleanups_updated_and_deleted_at_once(
        pulumi_bindir, fresh_moto, eks_control_plane, monkeypatch, tmp_path):  # noqa: F811
    import datetime
    import json
    import secrets as secrets_

    from tests import moto_ssm_instances
    from tests.real_cleanups_world import (HOST_TAG, INSTANCE_LABEL, POD_CIDR, TOKEN_LABEL, World,
                                           clients)

    eks, moto_url = eks_control_plane, fresh_moto
    ssm = moto_ssm_instances.install(monkeypatch)
    world = World(eks, clients(moto_url, REGION), ssm)
    # The cluster exists in the account: a cleanup whose Kubernetes calls fail must not take
    # a missing cluster for one deleted outside Pulumi (KubernetesApi._cluster_is_gone).
    boto3.client("eks", region_name=REGION, endpoint_url=moto_url, aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_cluster(
        name=eks.cluster, roleArn=f"arn:aws:iam::{MOTO_ACCOUNT}:role/lab",
        resourcesVpcConfig={"subnetIds": []})
    host_a, host_b, decoy_host = world.host("host-a"), world.host("host-b"), world.host("other")
    listed_table, other_table = world.route_tables()
    world.vtep()
    world.ranked_pods()
    activation_code = "code-" + secrets_.token_urlsafe(24)
    hour_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    # The authenticator is the session's: this test's reviews are the ones after these.
    reviewed_before = len(eks.authenticator.reviews)

    project = PulumiProject.program(tmp_path / "project", "hosts", HOSTS_PROGRAM,
                                    source=PROJECT_DIR)
    values = {
        "region": REGION, "cluster": eks.cluster, "endpoint": eks.endpoint,
        "gatewayEndpoint": eks.endpoint, "activationId": world.activation,
        "selectors": {h: world.selector(h) for h in ("a", "b")},
        "labels": {"token": TOKEN_LABEL, "instance": INSTANCE_LABEL, "hostTag": list(HOST_TAG)},
        "generationA": "g1", "generationB": "g1", "generationSpare": "g1",
        "instanceA": host_a, "instanceB": host_b, "routeTables": [listed_table],
        "podCidrs": [POD_CIDR], "vtepName": world.vtep_name, "burstNamespace": world.namespace,
    }
    config = {"hosts:world": json.dumps(values), "hosts:activationCode": activation_code,
              "hosts:certificateAuthority": eks.certificate_authority}
    secret_keys = ("hosts:activationCode", "hosts:certificateAuthority")
    try:
        with eks.authenticator.trusted_sts(moto_url), \
                PulumiEngine(pulumi_bindir, tmp_path / "engine", aws_endpoint=moto_url,
                             deadline=180) as engine:
            stack = engine.stack(project, "t")
            stack.set_config(config, secret=secret_keys)
            up = stack.up()
            assert up.ok, up.error
            states_written = [stack.state()]
            outputs = stack.outputs()
            tokens, spare = outputs["tokens"], outputs["spareToken"]
            kube_config = outputs["kubeconfig"]
            assert eks.endpoint in kube_config
            assert len({tokens["a"], tokens["b"], spare}) == 3

            # What the hosts left: each one's Node (token and instance labels), host a's Node
            # of an instance before this one (registered an hour ago), and decoys: another
            # stack's hybrid Node of a host "a", a cloud Node of this stack's labels, and a
            # registration of another activation.
            node_a = world.host_node("a", tokens["a"], host_a)
            node_a_old = world.host_node("a", "old-token", "i-0aaaaaaaaaaaaaaaa")
            node_b = world.host_node("b", tokens["b"], host_b)
            other_stack = world.host_node("a", tokens["a"], host_a, stack=world.stack + "x")
            cloud = world.host_node("a", tokens["a"], host_a, hybrid=False)
            for name, when in ((node_a, None), (node_a_old, hour_ago), (node_b, None)):
                ssm.register(name, world.activation, when)
            foreign = world.host_node("b", "t", "i-0bbbbbbbbbbbbbbbb", stack=world.stack + "x")
            ssm.register(foreign, world.other_activation)
            assert set(world.states().values()) == {"running"}  # create() touched nothing

            # Host a re-created outside the cleanups (``pulumi up --replace``): a new instance,
            # whose Node registers after it launched. The gateway's and the ranks' cleanups
            # reach the cluster by another name, the registrations' is pinned to the account;
            # the spare token's generation changes.
            host_a2 = world.host("host-a")
            node_a2 = world.host_node("a", tokens["a"], host_a2)
            ssm.register(node_a2, world.activation,
                         world.launched(host_a2) + datetime.timedelta(seconds=30))
            stack.set_config({"hosts:world": json.dumps({
                **values, "instanceA": host_a2, "pinnedAccount": MOTO_ACCOUNT,
                "generationSpare": "g2",
                # The same server by another spelling (its certificate names 127.0.0.1, not
                # localhost).
                "gatewayEndpoint": eks.endpoint + "/"})})
            update = stack.up()
            assert update.ok, update.diagnostics()
            decided = ops(update)
            # The diffs' rules (each provider's ``diff``), as the engine applied them.
            assert {"create-replacement", "replace", "delete-replaced"} <= decided["host-a-node"]
            assert decided["host-a-stale-nodes"] == {"update"}
            assert decided["gateway-routes"] == {"update"}
            assert decided["deletion-cost-ranks"] == {"update"}
            assert decided["registrations"] == {"update"}
            assert {"create-replacement", "delete-replaced"} <= decided["spare-token"]
            for same in ("host-b-node", "host-b-stale-nodes", "host-a-token", "host-b-token"):
                assert decided[same] == {"same"}, (same, decided[same])
            outputs = stack.outputs()
            assert outputs["spareToken"] != spare and outputs["tokens"] == tokens
            # The old cleanup's delete ended the old host and removed its Node; the sweep took
            # the Node of the instance before it; host a's new Node, host b's and the decoys stay.
            states = world.states()
            assert states[host_a] == "terminated" and states[host_a2] == "running"
            assert states[host_b] == states[decoy_host] == "running"
            nodes = world.nodes()
            assert node_a not in nodes and node_a_old not in nodes
            assert {node_a2, node_b, other_stack, cloud, foreign} <= nodes
            assert {node_a, node_a_old} <= set(ssm.deregistered)
            assert ssm.ids() == {node_a2, node_b, foreign}
            states_written.append(stack.state())

            # A fix to the cleanups' code, and nothing else: every cleanup is updated, none
            # replaced (their diffs compare ``__provider``), so destroy runs the fixed code;
            # the tokens stay (a new one would replace the host).
            for path, before, after in CODE_FIX:
                source = project.path / path
                assert source.read_text().count(before) == 1, path
                source.write_text(source.read_text().replace(before, after))
            fixed = stack.up()
            assert fixed.ok, "\n".join(fixed.diagnostics())
            decided = ops(fixed, dynamic=True)
            assert len(decided) == 10 and all(op == {"update"} for op in decided.values()), decided
            assert stack.outputs()["tokens"] == tokens
            # The code destroy will run is the fixed one: it is in the state's pickles.
            states_written.append(stack.state())
            assert any("and only that." in text for text in plain_texts(states_written[-1])[1:])
            assert world.nodes() >= {node_a2, node_b} and ssm.ids() == {node_a2, node_b, foreign}

            down = stack.destroy(parallel=8)
            assert down.ok, "\n".join(down.diagnostics())
            states_written.append(stack.state())

        states = world.states()
        assert states[host_a2] == states[host_b] == "terminated"
        assert states[decoy_host] == "running"
        nodes = world.nodes()
        assert not {node_a2, node_b} & nodes
        assert {other_stack, cloud, foreign} <= nodes
        # Every registration of the activation is gone; another activation's stays.
        assert ssm.ids() == {foreign}
        assert world.routes(listed_table) == {"10.200.0.0/16"}
        assert world.routes(other_table) == {POD_CIDR}
        assert not world.vtep_exists()
        assert world.costs() == {"karpenter-ranked": None, "kyverno-ranked": "1", "unranked": None}
        # The cleanups' deletes were under way together, not one after another.
        deletes = [s for s in down.steps()
                   if s.op == "delete" and s.type.startswith("pulumi-python")]
        assert len(deletes) == 10
        overlap = max(sum(1 for s in deletes if s.started <= d.started < (s.finished or 1 << 60))
                      for d in deletes)
        assert overlap >= 4, [(s.name, s.started, s.finished) for s in deletes]
        # The registrations' cleanup after the hosts' (they wait for it, as in the program).
        ended = [urn.rsplit("::", 1)[-1] for urn in down.order("delete")]
        assert ended.index("registrations") > max(ended.index("host-a-node"),
                                                  ended.index("host-b-node"))
        # Every token the API server saw was the EKS authenticator's to accept, and it did.
        reviews = eks.authenticator.reviews[reviewed_before:]
        assert reviews and all(r.authenticated for r in reviews), [r.reason for r in reviews]

        # No secret in plain text in the state the engine wrote: the activation code, the
        # kubeconfig, the bearer tokens the cleanups sent, in the state after each command
        # (destroy's is empty). Each value is looked for as it is and as JSON escapes it.
        texts = [text for written in states_written for text in plain_texts(written)]
        assert len(texts) > 20  # the providers' pickles were read too
        assert "ciphertext" in states_written[0]  # the secrets are there, encrypted
        bearer = {r.token for r in reviews}
        secret_values = {"the activation code": activation_code, "the kubeconfig": kube_config,
                         **{f"bearer token {i}": t for i, t in enumerate(sorted(bearer))}}
        # Named, not shown: a failure must not print the secret it found.
        leaked = sorted({what for text in texts
                         for what, value in secret_values.items()
                         if value in text or json.dumps(value)[1:-1] in text})
        assert not leaked, f"in plain text in the state: {', '.join(leaked)}"
    finally:
        world.forget()
