"""Admission and validation by the real API server (issue 29, part 3): for the dev stack, the GPU
stack and the GPU stack in burst scenario C (between them every kind of Kubernetes object the
lab can register: scenario C adds Kyverno's ClusterPolicy), every object the program registers
and every object Helm renders from the lab's releases (the lab's values, the chart sources in
../shared/charts; tests/kube_objects.py) is created in the real kube-apiserver of
engines/ (tests/real_cluster.py) with server-side apply: CRDs first (and waited for until
Established), then Namespaces, then the rest in Helm's install order.

- Accepted: every object gets 200/201; a refusal fails with the API server's own message, one
  line per refused object.
- Pod Security: the demo namespaces carry the lab's labels (enforce, warn and audit
  ``restricted``), the charts' namespaces what Helm's ``createNamespace`` gives them (none), and
  kube-system none (as in EKS): the namespaces' labels decide, as they will in the cluster. A
  Pod of every workload's template — the Pod its controller would create — is judged by a
  server-side dry run, where PodSecurity's enforce mode refuses; the workloads themselves draw
  its warn mode's warnings. Any Warning header on any object fails the test. And the real
  path: each demo Deployment's ReplicaSet (kube-controller-manager) makes all its pods there.
- Custom resources: the Karpenter NodePool and EC2NodeClass and the Kyverno ClusterPolicy are
  judged by the CRDs the charts install (the karpenter-crd release, Kyverno's chart), their
  OpenAPI schemas and their CEL rules (x-kubernetes-validations) alike.
- Dry run only: objects that would make the API server call a service that does not run here
  (webhook configurations, APIServices) and a CRD's conversion webhook (tests/cluster_apply.py).
  The lab's charts render none of them today — Kyverno's admission controller registers its
  webhook configurations itself at run time (no Kyverno runs here, so the ClusterPolicy mutates
  nothing), the karpenter-crd chart renders no conversion webhook and the karpenter chart no
  webhook configuration — and a test keeps that list (empty) current. The Pods of workloads are dry runs too,
  so the only pods are the ones the controllers make.
- Helm hooks: those Pulumi's Helm runs (Kyverno's post-upgrade migrate-resources, its pre-delete
  rm-webhooks and scale-to-zero) are created and judged like the rest, after their release's
  manifests; ``helm test`` Pods are not (Pulumi never runs ``helm test``).

Every check is shown failing on a planted defect: a demo pod that breaks ``restricted`` (refused
as a Pod, warned as a Deployment, and refused to its ReplicaSet when created for real), a
NodePool field the schema refuses, a NodePool that breaks a CEL rule, an EC2NodeClass without a
required field and one that breaks its CEL rule, a ClusterPolicy rule without ``match``, an
order with a custom resource before its CRD.

The tier: it runs only where the engines are built (``python3 engines/build.py``); elsewhere the
``control_plane`` fixture skips it. Each config is applied once per test worker, and shared by
that worker's tests here.
"""

from __future__ import annotations

import copy

import pytest

from offline import chart_render
from tests.cluster_apply import (Applied, apply_all, controller_verdict, find, refusals,
                                 warnings)
from tests.conftest import run_lab
from tests.helm_engine import needs_helm
from tests.kube_checks import CRD_FILES, core_problems, crd_problems, pod_problems, pod_spec_of
from tests.kube_objects import LabObject, lab_objects, order_problems, registered_objects
from tests.real_cluster import control_plane, namespace, refused  # noqa: F401 (fixtures)

pytestmark = needs_helm

#: The stacks judged: dev, GPU, and GPU in scenario C (Kyverno's policy; Karpenter's gate).
CONFIGS = {"dev": {}, "gpu": {"gpuEnabled": True},
           "gpu-scenario-C": {"gpuEnabled": True, "burstScenario": "C"}}
#: Configs whose kinds of object the judged ones must cover (chart_render's recorded ones: every
#: scenario, one to three hybrid nodes, with and without the GPU host).
OTHER_CONFIGS = [dict(c) for c in chart_render.RECORDED_CONFIGS]
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/warn": "restricted",
              "pod-security.kubernetes.io/audit": "restricted"}
PLANTED = "a planted defect: judged, never created"


@pytest.fixture(scope="module")
def judged(control_plane):
    """``judged(config) -> (run, applied)``: the config's objects applied (once per worker)."""
    done: dict[str, tuple] = {}
    judged_before: dict = {}  # what this worker's API server has judged (cluster_apply)

    def get(config: str):
        if config not in done:
            run = run_lab(**CONFIGS[config])
            done[config] = (run, apply_all(control_plane, lab_objects(run),
                                           judged_before=judged_before))
        return done[config]

    return get


def _kinds(run) -> set[str]:
    """The kinds of object a run puts in the cluster: registered, and rendered by Helm."""
    return {f"{i.obj['apiVersion']} {i.kind}" for i in lab_objects(run)}


def test_the_judged_stacks_cover_every_kind_the_lab_creates():
    judged_kinds = set().union(*(_kinds(run_lab(**c)) for c in CONFIGS.values()))
    others = set().union(*(_kinds(run_lab(**c)) for c in OTHER_CONFIGS))
    assert others - judged_kinds == set()
    assert {"karpenter.sh/v1 NodePool", "karpenter.k8s.aws/v1 EC2NodeClass",
            "kyverno.io/v1 ClusterPolicy"} <= judged_kinds


# --- order ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("config", CONFIGS)
def test_objects_come_after_the_crds_and_namespaces_they_need(config):
    items = lab_objects(run_lab(**CONFIGS[config]))
    assert order_problems(items) == []
    kinds = [i.kind for i in items]
    assert kinds.index("Namespace") > max(i for i, k in enumerate(kinds)
                                          if k == "CustomResourceDefinition")


def test_helms_hooks_are_judged_but_not_helm_tests():
    items = lab_objects(run_lab())
    hooks = {(i.kind, i.obj["metadata"]["name"]): i.hook for i in items if i.hook}
    assert hooks[("Job", "kyverno-migrate-resources")] == "post-upgrade"
    assert hooks[("Job", "kyverno-rm-webhooks")] == "pre-delete"
    assert [i.label for i in items if i.kind == "Pod"] == []  # Kyverno's five test Pods
    assert order_problems(items) == [] and items[-1].hook


def test_a_custom_resource_before_its_crd_is_caught():
    items = lab_objects(run_lab())
    [pool] = [i for i in items if i.kind == "NodePool"]
    [gateway_ns] = [i for i in items if i.kind == "Namespace"
                    and i.obj["metadata"]["name"] == "demo-gateway"]
    [echo] = [i for i in items
              if i.kind == "Deployment" and i.obj["metadata"]["name"] == "echo-cloud"]
    planted = [pool, echo] + [i for i in items if i not in (pool, echo)]
    problems = order_problems(planted)
    assert any(p.startswith("NodePool cloud-burst") and "before its CRD" in p for p in problems)
    assert any(p.startswith("Deployment demo-gateway/echo-cloud") and "before its namespace" in p
               for p in problems)
    assert gateway_ns in planted


# --- what the API server says of the lab's objects -----------------------------------------------

@pytest.mark.parametrize("config", CONFIGS)
def test_the_api_server_accepts_every_object_without_a_warning(judged, config):
    run, applied = judged(config)
    assert refusals(applied) == [], "refused by the API server:\n" + "\n".join(refusals(applied))
    assert warnings(applied) == [], "the API server warned:\n" + "\n".join(warnings(applied))
    # Every registered object and every object of every release went in.
    sources = {a.item.source for a in applied}
    assert {f"registered {r.name}" for r in run.registrations if r.custom
            and r.type.startswith("kubernetes:") and r.type != chart_render.RELEASE} <= sources
    assert {r.name for r in chart_render.registered_releases(run)} == {
        s.split()[1] for s in sources if s.startswith("release ")}


@pytest.mark.parametrize("config", CONFIGS)
def test_only_pods_are_dry_runs(judged, config):
    """The objects judged by a dry run only, besides the workloads' Pods: none today. A chart
    that starts rendering a webhook configuration, an APIService or a conversion webhook shows
    here by name, with why."""
    _, applied = judged(config)
    assert [f"{a.item.label}: {a.dry_run}" for a in applied
            if a.dry_run and a.item.kind != "Pod"] == []


@pytest.mark.parametrize("config", CONFIGS)
def test_every_demo_pod_is_judged_under_restricted(judged, control_plane, config):
    """The lab's own workloads run in namespaces labelled restricted (read back from the API
    server), and the Pod of each was admitted there without a warning."""
    run, applied = judged(config)
    demo = [i for i in registered_objects(run) if i.kind == "Deployment"]
    assert len(demo) >= 5
    for item in demo:
        ns = item.obj["metadata"]["namespace"]
        labels = control_plane.call("GET", f"/api/v1/namespaces/{ns}").body["metadata"]["labels"]
        assert RESTRICTED.items() <= labels.items(), (ns, labels)
        pod = find(applied, "Pod", f"{item.obj['metadata']['name']}-pod", source=item.source)
        assert pod.accepted and pod.warnings == [], (pod.message, pod.warnings)


@pytest.mark.parametrize("config", CONFIGS)
def test_the_controllers_make_every_demo_pod(judged, control_plane, config):
    """The real path too: each demo Deployment's ReplicaSet makes all its pods in the restricted
    namespace (PodSecurity enforce would leave a ReplicaFailure with its refusal)."""
    run, _ = judged(config)
    verdicts = {f"{i.obj['metadata']['namespace']}/{i.obj['metadata']['name']}":
                controller_verdict(control_plane, i.obj["metadata"]["namespace"],
                                   i.obj["metadata"]["name"])
                for i in registered_objects(run) if i.kind == "Deployment"}
    assert {k: v for k, v in verdicts.items() if v} == {}


@pytest.mark.parametrize("config", CONFIGS)
def test_the_custom_resources_pass_their_crds_schema_and_cel_rules(judged, control_plane, config):
    run, applied = judged(config)
    kinds = {"NodePool", "EC2NodeClass"} | ({"ClusterPolicy"} if "C" in config else set())
    mine = [a for a in applied if a.item.kind in kinds]
    assert {a.item.kind for a in mine} == kinds
    assert [a.item.label for a in mine if not a.accepted] == []
    # The CRDs judging them are the charts' (karpenter-crd, kyverno), CEL rules included.
    for crd in ("nodepools.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws"):
        served = find(applied, "CustomResourceDefinition", crd)
        assert served.accepted and served.item.source.startswith("release karpenter-crd ")
        text = str(control_plane.call(
            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}").body)
        assert "x-kubernetes-validations" in text
    assert find(applied, "CustomResourceDefinition", "clusterpolicies.kyverno.io").item.source \
        .startswith("release kyverno ")


@pytest.mark.parametrize("config", CONFIGS)
def test_the_stand_ins_agree_with_the_api_server(judged, config):
    """kube_checks' stand-ins (kubernetes-validate for built-in kinds, the CRDs' schemas by
    jsonschema, pod_problems' restricted controls) on the same objects: where the server
    accepts, they find nothing either. (Where they cannot follow it — CEL rules — the planted
    CEL defects below show the server refusing what they accept.)"""
    run, applied = judged(config)
    version = run.config["eks-hybrid-lab:kubernetesVersion"]
    disagree = {}
    for a in applied:
        obj = a.item.obj
        if a.item.kind == "Pod":
            continue
        found = (crd_problems(obj) if (obj["apiVersion"], a.item.kind) in CRD_FILES
                 else core_problems(obj, version))
        if bool(found) == a.accepted:
            disagree[a.item.label] = (found, a.status, a.message)
    for item in registered_objects(run):
        if item.kind == "Deployment":
            found = pod_problems(pod_spec_of(item.obj), item.label)
            pod = find(applied, "Pod", f"{item.obj['metadata']['name']}-pod", source=item.source)
            if bool(found) == (pod.accepted and not pod.warnings):
                disagree[f"pod of {item.label}"] = (found, pod.status, pod.message, pod.warnings)
    assert disagree == {}


# --- planted defects ----------------------------------------------------------------------------

def _lab_object(judged, config: str, kind: str, name: str) -> LabObject:
    """A copy of the lab's own object, as the config applied it (its namespaces and CRDs are
    in the cluster)."""
    item = find(judged(config)[1], kind, name).item
    return LabObject(copy.deepcopy(item.obj), item.source + " (planted defect)")


def _judge(control_plane, item: LabObject, pods: bool = False) -> list[Applied]:
    return apply_all(control_plane, [item], pods=pods, all_dry_run=PLANTED)


def test_a_demo_pod_that_breaks_restricted_is_refused_and_warned(judged, control_plane, namespace):
    echo = _lab_object(judged, "dev", "Deployment", "echo-cloud")
    [container] = echo.obj["spec"]["template"]["spec"]["containers"]
    del container["securityContext"]["allowPrivilegeEscalation"]
    echo.obj["spec"]["template"]["spec"]["securityContext"].pop("runAsNonRoot")
    container["securityContext"].pop("runAsNonRoot")
    applied = _judge(control_plane, echo, pods=True)
    [refusal] = refusals(applied)  # the Pod: enforce
    assert refusal.startswith("Pod demo-gateway/echo-cloud-pod")
    assert 'violates PodSecurity "restricted:latest"' in refusal
    assert "allowPrivilegeEscalation != false" in refusal and "runAsNonRoot != true" in refusal
    found = warnings(applied)  # the Deployment: warn
    assert any(w.startswith("Deployment demo-gateway/echo-cloud") and
               'would violate PodSecurity "restricted:latest"' in w for w in found), found
    # Created for real in a namespace with the lab's labels, its ReplicaSet is refused the pods.
    echo.obj["metadata"]["namespace"] = namespace(RESTRICTED)
    assert control_plane.apply(echo.obj).status in (200, 201)
    refusal = controller_verdict(control_plane, echo.obj["metadata"]["namespace"], "echo-cloud")
    assert 'is forbidden: violates PodSecurity "restricted:latest"' in refusal, refusal
    # The namespace's labels are what judge: without them the same Pod is admitted.
    echo.obj["metadata"]["namespace"] = namespace()
    assert refusals(_judge(control_plane, echo, pods=True)) == []


def _refusal(applied: list[Applied]) -> str:
    [answer] = applied
    assert not answer.accepted, f"{answer.item.label} was accepted"
    return answer.message


def test_a_nodepool_field_the_schema_refuses_is_refused(judged, control_plane):
    pool = _lab_object(judged, "dev", "NodePool", "cloud-burst")
    pool.obj["spec"]["disruption"]["consolidationPolicy"] = "WhenIdle"
    message = _refusal(_judge(control_plane, pool))
    assert 'spec.disruption.consolidationPolicy: Unsupported value: "WhenIdle"' in message
    assert crd_problems(pool.obj)  # the stand-in agrees


def test_a_nodepool_breaking_a_cel_rule_is_refused(judged, control_plane):
    """A disruption budget with a schedule and no duration: the schema allows each field, the
    CRD's CEL rule refuses the combination. The jsonschema stand-in (kube_checks.crd_problems)
    does not evaluate CEL and accepts it: only the real API server catches this."""
    pool = _lab_object(judged, "dev", "NodePool", "cloud-burst")
    pool.obj["spec"]["disruption"]["budgets"][0]["schedule"] = "0 9 * * mon-fri"
    message = _refusal(_judge(control_plane, pool))
    assert "'schedule' must be set with 'duration'" in message
    assert crd_problems(pool.obj) == []


def test_an_ec2nodeclass_without_a_required_field_is_refused(judged, control_plane):
    node_class = _lab_object(judged, "dev", "EC2NodeClass", "default")
    del node_class.obj["spec"]["subnetSelectorTerms"]
    message = _refusal(_judge(control_plane, node_class))
    assert "spec.subnetSelectorTerms: Required value" in message
    assert crd_problems(node_class.obj)


def test_an_ec2nodeclass_breaking_a_cel_rule_is_refused(judged, control_plane):
    node_class = _lab_object(judged, "dev", "EC2NodeClass", "default")
    node_class.obj["spec"]["instanceProfile"] = "lab-instance-profile"  # beside its role
    message = _refusal(_judge(control_plane, node_class))
    assert "must specify exactly one of ['role', 'instanceProfile']" in message
    assert crd_problems(node_class.obj) == []  # CEL: the stand-in cannot see it


def test_a_clusterpolicy_rule_without_match_is_refused(judged, control_plane):
    policy = _lab_object(judged, "gpu-scenario-C", "ClusterPolicy", "hybrid-pod-deletion-cost")
    del policy.obj["spec"]["rules"][0]["match"]
    message = _refusal(_judge(control_plane, policy))
    assert "spec.rules[0].match: Required value" in message
    assert crd_problems(policy.obj)


def test_a_webhook_configuration_is_a_dry_run_only(control_plane):
    """The path no chart of the lab takes today: a webhook configuration is judged by a dry
    run, and none is left behind to call a service that does not run."""
    hook = LabObject({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "planted-webhook"},
        "webhooks": [{"name": "planted.example.com", "admissionReviewVersions": ["v1"],
                      "sideEffects": "None", "failurePolicy": "Fail",
                      "clientConfig": {"service": {"namespace": "kyverno", "name": "absent"}},
                      "rules": [{"operations": ["CREATE"], "apiGroups": [""],
                                 "apiVersions": ["v1"], "resources": ["pods"]}]}]},
        "planted")
    [answer] = apply_all(control_plane, [hook], pods=False)
    assert answer.accepted and "does not run" in answer.dry_run
    assert control_plane.call("GET", "/apis/admissionregistration.k8s.io/v1/"
                              "validatingwebhookconfigurations/planted-webhook").status == 404
