"""Putting the lab's objects (tests/kube_objects.py) in the real API server, in order, with
server-side apply, and reading its verdicts: what it refused (its own message), what it warned
(PodSecurity's warnings), what was judged only by a server-side dry run and why."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, replace
from typing import Iterable, Optional

from tests.kube_objects import CALLS_A_SERVICE, LabObject, crd_calls_a_service

WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job")


@dataclass
class Applied:
    item: LabObject
    status: int
    message: str
    warnings: list[str]
    #: Why it was only a server-side dry run ("" when it was created).
    dry_run: str = ""

    @property
    def accepted(self) -> bool:
        return self.status in (200, 201)


def _message(response) -> str:
    body = response.body
    if response.status < 400:
        return ""
    return body.get("message", str(body)) if isinstance(body, dict) else str(body)


def _memo_apply(plane, item: LabObject, dry_run: str = "",
                judged_before: Optional[dict[str, Applied]] = None) -> Applied:
    """Applies one object; with ``judged_before`` (a memo kept per API server), an object
    identical to one this server has already judged the same way gets that verdict again
    without a second request: re-applying it would change nothing (an unchanged object is a
    no-op for server-side apply), and the three stacks share most of their objects."""
    key = ""
    if judged_before is not None:
        key = hashlib.sha256(json.dumps([item.obj, dry_run], sort_keys=True).encode()).hexdigest()
        if key in judged_before:
            return replace(judged_before[key], item=item)
    answer = apply_one(plane, item, dry_run)
    if judged_before is not None:
        judged_before[key] = answer
    return answer


def apply_one(plane, item: LabObject, dry_run: str = "") -> Applied:
    try:
        response = plane.apply(item.obj, dry_run=bool(dry_run))
    except LookupError as error:  # its kind is not served: no CRD for it (yet)
        return Applied(item, 404, f"not served by the API server: {error}", [], dry_run)
    return Applied(item, response.status, _message(response), response.warnings, dry_run)


def _established(plane, name: str) -> bool:
    body = plane.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").body
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (body.get("status") or {}).get("conditions") or [])


def pod_of(workload: dict) -> dict:
    """The Pod a workload's controller would create from its template (the name aside)."""
    template = copy.deepcopy(workload["spec"].get("template") or {})
    if workload["kind"] == "CronJob":
        template = copy.deepcopy(workload["spec"]["jobTemplate"]["spec"]["template"])
    meta = template.get("metadata") or {}
    meta["name"] = f"{workload['metadata']['name']}-pod"[:63]
    meta["namespace"] = workload["metadata"].get("namespace") or "default"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def apply_all(plane, items: Iterable[LabObject], *, pods: bool = True, all_dry_run: str = "",
              judged_before: Optional[dict[str, Applied]] = None) -> list[Applied]:
    """Applies ``items`` in their order. CRDs are waited for (Established) before the objects
    after them. Webhook configurations and APIServices are a dry run only (their services do not
    run here; created, they would make the API server call them). A CRD whose conversion calls
    a webhook is judged as rendered by a dry run, then created without the conversion stanza so
    its custom resources can be judged. With ``pods``, each workload's Pod — as its controller
    would create it — is judged by a dry run: that is where PodSecurity's enforce mode refuses.
    With ``all_dry_run`` (why), every object is a dry run: the planted defects leave the
    cluster's objects as the lab made them. ``judged_before``: see ``_memo_apply``."""

    def judge(item: LabObject, dry_run: str = "") -> Applied:
        return _memo_apply(plane, item, dry_run, judged_before)

    done: list[Applied] = []
    crds: list[str] = []
    items = list(items)
    for item in items:
        if item.kind != "CustomResourceDefinition" and crds:
            for name in crds:
                plane.wait_for(f"CRD {name} Established", lambda n=name: _established(plane, n),
                               timeout=60)
            plane.forget_discovery()
            crds = []
        if item.kind in CALLS_A_SERVICE:
            done.append(judge(item, f"{item.kind} calls a service that does not run"))
            continue
        if item.kind == "CustomResourceDefinition":
            service = crd_calls_a_service(item.obj)
            if service:
                done.append(judge(item, f"its conversion webhook ({service}) does not run"))
                served = copy.deepcopy(item.obj)
                served["spec"].pop("conversion")
                item = LabObject(served, item.source + " (conversion stanza removed)", item.hook)
            answer = judge(item, all_dry_run)
            done.append(answer)
            if answer.accepted and not all_dry_run:
                crds.append(item.obj["metadata"]["name"])
            continue
        done.append(judge(item, all_dry_run))
    if pods:
        for item in items:
            if item.kind in WORKLOAD_KINDS + ("CronJob",):
                pod = pod_of(item.obj)
                ns = pod["metadata"]["namespace"]
                account = pod["spec"].get("serviceAccountName") or "default"
                # The ServiceAccount admission refuses a pod whose account is not there yet:
                # the namespace's default one is the controller's to make.
                plane.wait_for(f"ServiceAccount {ns}/{account}", lambda: plane.call(
                    "GET", f"/api/v1/namespaces/{ns}/serviceaccounts/{account}").status == 200,
                    timeout=30)
                done.append(judge(LabObject(pod, f"pod of {item.label}"),
                                  "a Pod of the workload's template, as its controller makes"))
    return done


def refusals(applied: Iterable[Applied]) -> list[str]:
    return [f"{a.item.label}: {a.status} {a.message}" for a in applied if not a.accepted]


def warnings(applied: Iterable[Applied]) -> list[str]:
    return [f"{a.item.label}: {w}" for a in applied for w in a.warnings]


def find(applied: Iterable[Applied], kind: str, name: str,
         source: Optional[str] = None) -> Applied:
    found = [a for a in applied if a.item.kind == kind and a.item.obj["metadata"]["name"] == name
             and (source is None or source in a.item.source)]
    if len(found) != 1:
        raise LookupError(f"{len(found)} applied {kind} named {name}")
    return found[0]


def controller_verdict(plane, namespace: str, name: str, timeout: float = 60) -> str:
    """What the Deployment's controllers met making its pods: "" once its ReplicaSet has made
    them all, else the ReplicaFailure condition's message (the API server's refusal of the
    pod, as the ReplicaSet controller relays it)."""
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"

    def settled():
        body = plane.call("GET", path).body
        status = body.get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") == "ReplicaFailure" and condition.get("status") == "True":
                return ("refused", condition.get("message", ""))
        wanted = body["spec"].get("replicas", 1)
        if (status.get("observedGeneration", 0) >= body["metadata"]["generation"]
                and status.get("replicas", 0) >= wanted):
            return ("made", "")
        return None

    return plane.wait_for(f"the pods of Deployment {namespace}/{name}", settled, timeout)[1]
