"""Checks for the Kubernetes objects the stack emits: the real CRD schemas of ../shared/crds,
kubernetes-validate for core objects, and Pod Security "restricted" plus this lab's hardening
rules, field by field. Each check returns its problems (empty: it holds)."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Optional

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import yaml

from offline.runner import Registration

CRD_DIR = Path(__file__).resolve().parents[2] / "shared" / "crds"
CRD_FILES = {
    ("karpenter.sh/v1", "NodePool"): "karpenter.sh_nodepools.yaml",
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): "karpenter.k8s.aws_ec2nodeclasses.yaml",
    ("kyverno.io/v1", "ClusterPolicy"): "kyverno.io_clusterpolicies.yaml",
}


def _integral(value: Any) -> Any:
    """Protobuf carries every number as a float; Kubernetes wants integers where they are."""
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def as_object(reg: Registration) -> dict:
    """The Kubernetes object a registration of a pulumi-kubernetes resource describes."""
    inputs = _integral(reg.inputs)
    return {k: v for k, v in inputs.items() if k in ("apiVersion", "kind", "metadata", "spec", "data")}


@functools.lru_cache(maxsize=None)
def crd_schema(api_version: str, kind: str) -> dict:
    # The Kyverno CRD is 1.4 MB: the C loader reads it ten times faster.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((CRD_DIR / CRD_FILES[(api_version, kind)]).read_text(), Loader=loader)
    version = api_version.split("/")[1]
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return served["schema"]["openAPIV3Schema"]


def crd_problems(obj: dict) -> list[str]:
    """Validates a custom resource against its CRD's openAPIV3Schema (structural checks;
    CEL x-kubernetes-validations are not evaluated here)."""
    schema = crd_schema(obj["apiVersion"], obj["kind"])
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


# kubernetes-validate reads and parses its schema files on every call: the definitions alone are
# 1.5 MB of JSON for each object validated (~8 ms). The files never change, so each is parsed
# once per process; validate() only reads what it is given, and a missing file still raises.
if not hasattr(kubernetes_validate.utils.schema_contents, "cache_info"):
    kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(
        kubernetes_validate.utils.schema_contents)


def core_problems(obj: dict, kubernetes_version: str) -> list[str]:
    """kubernetes-validate, strict (unknown fields are errors), for that Kubernetes version."""
    try:
        kubernetes_validate.validate(obj, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'/'.join(map(str, error.path))}: {error.message}"]
    return []


_ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                    "persistentVolumeClaim", "projected", "secret"}
_PINNED = re.compile(r".+(@sha256:[0-9a-f]{64}|:v?\d+(\.\d+)+[\w.-]*)$")


def pod_problems(pod: dict, where: str = "") -> list[str]:
    """Pod Security "restricted" (every control of the profile), and this lab's hardening:
    read-only root, requests and limits, probes, pinned images."""
    problems = []
    say = problems.append
    psc = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            say(f"{where}: {key}")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= _ALLOWED_VOLUMES:
            say(f"{where}: volume {volume['name']} of type {kinds - _ALLOWED_VOLUMES}")
    for container in (pod.get("initContainers") or []) + (pod.get("containers") or []):
        name = f"{where}/{container.get('name')}"
        csc = container.get("securityContext") or {}
        if csc.get("privileged"):
            say(f"{name}: privileged")
        if csc.get("allowPrivilegeEscalation") is not False:
            say(f"{name}: allowPrivilegeEscalation is not false")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            say(f"{name}: capabilities not dropped")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            say(f"{name}: adds capabilities {caps['add']}")
        non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if non_root is not True:
            say(f"{name}: runAsNonRoot not true")
        if csc.get("runAsUser", psc.get("runAsUser")) == 0:
            say(f"{name}: runs as UID 0")
        seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            say(f"{name}: seccompProfile {seccomp}")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                say(f"{name}: hostPort")
        # This lab's hardening beyond the profile.
        if csc.get("readOnlyRootFilesystem") is not True:
            say(f"{name}: root filesystem is writable")
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                if resource not in (resources.get(kind) or {}):
                    say(f"{name}: no {resource} {kind[:-1]}")
        for probe in ("livenessProbe", "readinessProbe"):
            if probe not in container:
                say(f"{name}: no {probe}")
        image = container.get("image", "")
        if not _PINNED.match(image) or image.endswith(":latest"):
            say(f"{name}: image {image} is not pinned")
    return problems


def pod_spec_of(obj: dict) -> Optional[dict]:
    spec = obj.get("spec") or {}
    if obj.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return (spec.get("template") or {}).get("spec")
    if obj.get("kind") == "Pod":
        return spec
    return None
