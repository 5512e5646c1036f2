"""Every Kubernetes object a run of the program puts in the cluster, in the order they go in:
the ``kubernetes:*`` resources it registers (as manifests), and, for each Helm release, the
objects Helm renders from the chart source (../shared/charts) with the release's values, name
and namespace — not the Release resource itself — plus what Helm's install adds: the chart's
``crds/`` folders unless ``skipCrds``, the namespace when ``createNamespace``.

Order (``ordered``): CustomResourceDefinitions first, then Namespaces, then the rest by Helm's
install order of kinds (helm pkg/releaseutil/kind_sorter.go ``InstallOrder``; kinds it does not
list — the custom resources — after those it does, webhook configurations last of all), hooks
after the release's manifests. ``order_problems`` says where a list breaks that.
"""

from __future__ import annotations

import functools
import json
import re
import tarfile
from dataclasses import dataclass
from typing import Iterable, Optional

import yaml

from offline import chart_render
from offline.runner import ProgramRun
from tests.kube_checks import _integral

RELEASE = chart_render.RELEASE
#: helm v3 pkg/releaseutil/kind_sorter.go, InstallOrder.
HELM_INSTALL_ORDER = (
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
    "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
    "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
    "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
    "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
#: Objects that make the API server call a service (a webhook, an aggregated API): with no
#: such service running here they are applied as a server-side dry run only.
CALLS_A_SERVICE = ("APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
#: Hooks only ``helm test`` creates; Pulumi's Release never runs them.
TEST_HOOKS = {"test", "test-success", "test-failure"}
_CRDS_FOLDER = re.compile(r"^[^/]+/(?:charts/[^/]+/)*crds/[^/]+\.ya?ml$")


@dataclass
class LabObject:
    obj: dict
    #: Where it comes from: "registered <pulumi name>" or "release <name> <template path>".
    source: str
    #: A Helm hook (its helm.sh/hook annotation), applied after its release's manifests.
    hook: str = ""

    @property
    def kind(self) -> str:
        return self.obj["kind"]

    @property
    def label(self) -> str:
        meta = self.obj["metadata"]
        where = f"{meta['namespace']}/" if meta.get("namespace") else ""
        return f"{self.kind} {where}{meta['name']} ({self.source})"


def _documents(text: str) -> list[dict]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(text, Loader=loader) if isinstance(d, dict) and d.get("kind")]


def _chart_crds(archive: str) -> list[tuple[str, str]]:
    """(path, text) of the files in the chart's (and its subcharts') ``crds/`` folders."""
    found = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.isfile() and _CRDS_FOLDER.match(member.name):
                found.append((member.name, tar.extractfile(member).read().decode()))
    return sorted(found)


def release_objects(reg) -> list[LabObject]:
    """What Helm installs for a registered Release: Helm's own render (unmasked: the Secrets
    carry the certificates the chart generates), hooks but those of ``helm test``. Rendered
    and parsed once per worker for given inputs (Kyverno's 3.5 MB of CRDs take a second to
    parse): the objects are shared, and callers copy one before changing it."""
    release = chart_render.Release.of(reg)
    return list(_release_objects(
        chart_render._archive(release), chart_render.canonical_json(release.values),
        release.name, release.namespace, bool(reg.inputs.get("skipCrds")),
        bool(reg.inputs.get("createNamespace"))))


@functools.lru_cache(maxsize=64)
def _release_objects(archive: str, values_json: str, name: str, namespace: str,
                     skip_crds: bool, create_namespace: bool) -> tuple[LabObject, ...]:
    rendered = chart_render._loaded(archive).render(json.loads(values_json), name=name,
                                                    namespace=namespace)
    found: list[LabObject] = []
    if create_namespace:
        # Helm's install makes it with this one label (helm v3 pkg/action/install.go,
        # Install.RunWithContext): no Pod Security labels, so PodSecurity's default
        # (privileged) judges the chart's pods there.
        found.append(LabObject({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": namespace, "labels": {"name": namespace}}},
            f"release {name} createNamespace"))
    if not skip_crds:
        for path, text in _chart_crds(archive):
            found += [LabObject(d, f"release {name} {path}") for d in _documents(text)]
    for path in sorted(rendered):
        if not path.endswith((".yaml", ".yml")):
            continue
        for doc in _documents(rendered[path]):
            meta = doc.setdefault("metadata", {})
            hook = (meta.get("annotations") or {}).get("helm.sh/hook") or ""
            hooks = {h.strip() for h in hook.split(",") if h.strip()}
            if hooks & TEST_HOOKS:
                continue
            if not meta.get("namespace") and doc["kind"] not in CLUSTER_SCOPED:
                meta["namespace"] = namespace
            found.append(LabObject(doc, f"release {name} {path}", ",".join(sorted(hooks))))
    return tuple(found)


#: Cluster-scoped kinds among those the lab's charts render (the rest get the release's
#: namespace, as Helm's install gives them).
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                  "PriorityClass", "StorageClass", "PersistentVolume", "IngressClass",
                  "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
                  "NodePool", "EC2NodeClass", "ClusterPolicy", "NodeClaim", "NodeOverlay"}


def registered_objects(run: ProgramRun) -> list[LabObject]:
    """The registered ``kubernetes:*`` resources as manifests: a resource's inputs are its
    object's fields, all of them (kube_checks.as_object keeps only apiVersion, kind, metadata,
    spec and data; a ClusterRole's rules or a Secret's stringData would be lost)."""
    return [LabObject(_integral(dict(reg.inputs)), f"registered {reg.name}")
            for reg in run.registrations
            if reg.custom and reg.type.startswith("kubernetes:") and reg.type != RELEASE]


def lab_objects(run: ProgramRun) -> list[LabObject]:
    """Every object the run puts in the cluster, ordered (``ordered``)."""
    found = registered_objects(run)
    for reg in run.of_type(RELEASE):
        found += release_objects(reg)
    return ordered(found)


def _rank(item: LabObject) -> tuple:
    kind = item.kind
    if kind == "CustomResourceDefinition":
        group = 0
    elif kind == "Namespace":
        group = 1
    elif kind in CALLS_A_SERVICE:
        group = 4
    elif item.hook:
        group = 3
    else:
        group = 2
    known = (HELM_INSTALL_ORDER.index(kind) if kind in HELM_INSTALL_ORDER
             else len(HELM_INSTALL_ORDER))
    return group, known


def ordered(items: Iterable[LabObject]) -> list[LabObject]:
    return sorted(items, key=_rank)  # stable: within a kind, the program's and Helm's order


def order_problems(items: list[LabObject]) -> list[str]:
    """Where an object comes before what it needs: a custom resource before its CRD, a
    namespaced object before its namespace (among those the list creates), a webhook
    configuration before anything else."""
    problems = []
    crds: dict[tuple[str, str], int] = {}
    namespaces: dict[str, int] = {}
    for i, item in enumerate(items):
        if item.kind == "CustomResourceDefinition":
            spec = item.obj["spec"]
            crds[(spec["group"], spec["names"]["kind"])] = i
        elif item.kind == "Namespace":
            namespaces[item.obj["metadata"]["name"]] = i
    last_plain = max((i for i, it in enumerate(items) if it.kind not in CALLS_A_SERVICE),
                     default=-1)
    for i, item in enumerate(items):
        group = item.obj["apiVersion"].split("/")[0] if "/" in item.obj["apiVersion"] else ""
        at = crds.get((group, item.kind))
        if at is not None and at > i:
            problems.append(f"{item.label} comes before its CRD ({items[at].label})")
        ns = item.obj["metadata"].get("namespace")
        if ns in namespaces and namespaces[ns] > i:
            problems.append(f"{item.label} comes before its namespace")
        if item.kind in CALLS_A_SERVICE and i < last_plain:
            problems.append(f"{item.label} comes before objects its webhook could be asked about")
    return problems


def crd_calls_a_service(obj: dict) -> Optional[str]:
    """The service a CRD's conversion webhook calls (None: it converts itself)."""
    conversion = (obj.get("spec") or {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        return None
    client = (conversion.get("webhook") or {}).get("clientConfig") or {}
    service = client.get("service") or {}
    if service:
        return f"{service.get('namespace')}/{service.get('name')}"
    return client.get("url", "?")
