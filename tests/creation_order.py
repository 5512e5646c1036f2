"""Creation order, as functions over recorded registrations.

Pulumi creates a resource only after everything it depends on: its explicit ``depends_on``, the
resources its inputs' Outputs come from, and its provider — the edges ``tests/graph.py`` builds
(the same graph, walked the other way, is the destroy order). A reference written as a plain
string (a name taken from config, an id pasted in) creates no edge, so the engine may create the
referring resource first. Where the cloud API does not retry — EKS ``CreateAccessEntry`` on a
cluster that does not exist yet — the first ``pulumi up`` from scratch fails (docs/models.md#creation-order).

Each check returns the problems it found (empty: the rule holds), so a test can run it over the
real stack and prove, on planted registrations, that it catches what it claims.

``unwaited_references(run)``
    Every resource whose inputs contain, as an exact whole string, an identity another resource
    produced has a dependency path to that resource. Identities:

    - the ``id`` and ``arn`` a resource produced itself. An output that only echoes one of its
      own inputs is not its identity (an EventBridge target's ``arn`` is the queue it sends to);
    - the ``name`` output of an AWS resource named by it in the account and region (the EKS
      cluster, an IAM role, an SQS queue, a log group, an activation; ``NAME_IS_IDENTITY``),
      whether the program chose the name or AWS did;
    - a Kubernetes Namespace's ``metadata.name``, only where a resource says it lives in that
      namespace (``metadata.namespace``, or a top-level ``namespace`` as Helm releases and the
      Kubernetes cleanups take it). Elsewhere the name is a selector, not a reference: the
      Kyverno ClusterPolicy that matches pods in ``demo-burst`` works before the namespace
      exists.

    Strings holding JSON (IAM policies, event patterns, the kubeconfig) are parsed and searched
    too.

``outside_cluster_scope(run)``
    Nothing in the cluster's scope can be created before the cluster: every ``kubernetes:*``
    resource and the Kubernetes provider, every ``aws:eks/*`` resource other than the cluster,
    and every dynamic cleanup that talks to the cluster (it takes a ``clusterName`` or an API
    ``endpoint``) has a dependency path to the ``aws:eks/cluster:Cluster``.

Not references (the exclusions, each a false positive otherwise):

- ``tags``/``tagsAll`` anywhere, and the ``key``/``value`` of an ``aws:ec2/tag:Tag``: a subnet
  tagged ``karpenter.sh/discovery=<cluster>`` is found by Karpenter later, it does not need the
  cluster to exist (the EC2NodeClass's selector ``tags`` likewise);
- IAM ``Condition`` blocks: ``aws:RequestTag/eks:eks-cluster-name = <cluster>`` constrains
  tags on future requests, it names nothing that must exist;
- free text: ``description`` and similar keys (``FREE_TEXT_KEYS``);
- a dynamic provider's serialized code (``__provider``);
- a resource's own identities in its own inputs (the cluster's ``name`` input).

What the model cannot see: a reference hidden inside a longer string (a URL, a user-data
script, a ``--cluster-name`` flag) is not an exact whole string; such resources get their
ordering from the Outputs they are built from, which the cluster-scope rule checks for
everything that talks to the cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator

from offline.runner import ProgramRun, Registration, Secret
from tests.graph import DestroyGraph

CLUSTER_TYPE = "aws:eks/cluster:Cluster"
NAMESPACE_TYPE = "kubernetes:core/v1:Namespace"
DYNAMIC_PREFIX = "pulumi-python:dynamic/"
#: AWS types whose ``name`` output identifies them in the account and region: other resources
#: (access entries, policies, event targets, Karpenter's settings) refer to them by it.
NAME_IS_IDENTITY = frozenset({
    CLUSTER_TYPE,
    "aws:iam/role:Role",
    "aws:iam/policy:Policy",
    "aws:iam/instanceProfile:InstanceProfile",
    "aws:sqs/queue:Queue",
    "aws:cloudwatch/logGroup:LogGroup",
    "aws:cloudwatch/eventRule:EventRule",
    "aws:ssm/activation:Activation",
    "aws:ec2/launchTemplate:LaunchTemplate",
    "aws:kms/alias:Alias",
})
#: Keys whose values are tags: a tag value equal to a name refers to nothing.
TAG_KEYS = frozenset({"tags", "tagsAll"})
#: Keys whose values are prose meant for people.
FREE_TEXT_KEYS = frozenset({"description", "Description", "Sid", "comment", "displayName"})
#: Inputs that carry a tag's key and value as plain fields.
TAG_FIELDS_BY_TYPE = {"aws:ec2/tag:Tag": frozenset({"key", "value"})}
#: Keys through which a namespaced resource says where it lives.
NAMESPACE_KEYS = frozenset({"namespace"})


@dataclass(frozen=True)
class Reference:
    """``path`` in ``consumer``'s inputs holds ``value``, an identity of ``producer``."""

    consumer: Registration
    producer: Registration
    path: str
    value: str
    #: Which identity it is: id, arn, name or namespace.
    kind: str


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Secret) else value


def _json_or_none(text: str) -> Any:
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def strings(value: Any, path: str = "", skip: frozenset = frozenset()) -> Iterator[tuple[str, str]]:
    """Every string in ``value`` with its path, skipping tags, free text, IAM conditions and the
    keys in ``skip`` (top level only); JSON held in a string is searched as well."""
    value = _plain(value)
    if isinstance(value, dict):
        for key, item in value.items():
            if path == "" and key in skip:
                continue
            if key in TAG_KEYS or key in FREE_TEXT_KEYS or key == "Condition" or key == "__provider":
                continue
            yield from strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from strings(item, f"{path}[{index}]")
    elif isinstance(value, str):
        parsed = _json_or_none(value)
        if parsed is not None:
            yield from strings(parsed, f"{path}<json>")
        else:
            yield path, value


def _own_inputs(reg: Registration) -> set[str]:
    return {text for _, text in strings(reg.inputs)}


def identities(run: ProgramRun) -> dict[str, list[tuple[Registration, str]]]:
    """Identity string -> the resources that produced it, with the kind of identity."""
    found: dict[str, list[tuple[Registration, str]]] = {}
    for reg in run.resources():
        if reg.type.startswith("pulumi:providers:"):
            continue  # Provider edges are part of the graph already.
        echoed = _own_inputs(reg)
        for kind in ("id", "arn"):
            value = _plain(reg.outputs.get(kind))
            if isinstance(value, str) and value and value not in echoed:
                found.setdefault(value, []).append((reg, kind))
        if reg.type in NAME_IS_IDENTITY:
            value = _plain(reg.outputs.get("name"))
            if isinstance(value, str) and value:
                found.setdefault(value, []).append((reg, "name"))
    return found


def _namespaces(run: ProgramRun) -> dict[str, Registration]:
    named = {}
    for reg in run.of_type(NAMESPACE_TYPE):
        name = _plain((_plain(reg.inputs.get("metadata")) or {}).get("name"))
        if isinstance(name, str):
            named[name] = reg
    return named


def _is_namespace_path(path: str) -> bool:
    return path in NAMESPACE_KEYS or path == "metadata.namespace"


def references(run: ProgramRun) -> list[Reference]:
    """Every exact-string reference from one resource's inputs to another's identity."""
    produced = identities(run)
    namespaces = _namespaces(run)
    found = []
    for consumer in run.resources():
        skip = TAG_FIELDS_BY_TYPE.get(consumer.type, frozenset())
        for path, text in strings(consumer.inputs, skip=skip):
            for producer, kind in produced.get(text, ()):
                if producer.urn != consumer.urn:
                    found.append(Reference(consumer, producer, path, text, kind))
            namespace = namespaces.get(text)
            if namespace is not None and namespace.urn != consumer.urn and _is_namespace_path(path):
                found.append(Reference(consumer, namespace, path, text, "namespace"))
    return found


def unwaited_references(run: ProgramRun, graph: DestroyGraph | None = None) -> list[str]:
    """References with no dependency path from the referring resource to the one it names: the
    engine may create the referrer first."""
    graph = graph or DestroyGraph(run)
    problems = []
    for ref in references(run):
        if graph.path(ref.consumer.urn, ref.producer.urn) is None:
            problems.append(
                f"{ref.consumer.name} ({ref.consumer.type}) refers to {ref.producer.name} "
                f"({ref.producer.type}) by its {ref.kind} {ref.value!r} at {ref.path}, but does "
                f"not depend on it: pass {ref.producer.name}'s output, or depend on it")
    return problems


def in_cluster_scope(reg: Registration) -> bool:
    """Kubernetes objects and the provider that makes them, EKS sub-resources, and dynamic
    resources that talk to the cluster."""
    if reg.type.startswith("kubernetes:") or reg.type == "pulumi:providers:kubernetes":
        return True
    if reg.type.startswith("aws:eks/"):
        return reg.type != CLUSTER_TYPE
    if reg.type.startswith(DYNAMIC_PREFIX):
        return "clusterName" in reg.inputs or "endpoint" in reg.inputs
    return False


def outside_cluster_scope(run: ProgramRun, graph: DestroyGraph | None = None) -> list[str]:
    """Resources in the cluster's scope that could be created before the cluster."""
    clusters = run.of_type(CLUSTER_TYPE)
    if not clusters:
        return []
    graph = graph or DestroyGraph(run)
    problems = []
    for reg in run.resources():
        if not in_cluster_scope(reg):
            continue
        for cluster in clusters:
            if graph.path(reg.urn, cluster.urn) is None:
                problems.append(
                    f"{reg.name} ({reg.type}) belongs to the cluster but has no dependency path "
                    f"to {cluster.name}: it can be created before the cluster exists")
    return problems


def creation_order_problems(run: ProgramRun) -> list[str]:
    graph = DestroyGraph(run)
    return unwaited_references(run, graph) + outside_cluster_scope(run, graph)
