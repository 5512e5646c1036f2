"""Removes the pod-deletion-cost ranks Karpenter wrote, when its ranking is switched off.

With the ``podDeletionCostManagement`` feature gate (demo 2, scenario C) Karpenter writes
negative ``controller.kubernetes.io/pod-deletion-cost`` values on the pods of its nodes. Turning
the gate off leaves them on the pods, and they would skew the next scenario (what the demo
guide's ``karpenter-gate.sh off`` did, docs/scale-in.md#karpenters-pod-deletion-cost-gate-scenario-c). This resource exists only while the gate is on; when the gate is
switched off (or the stack destroyed) Pulumi deletes it, after the controller's update, and its
``delete`` strips the negative values — and only those: Kyverno's "1" on hybrid pods stays.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic

from components.aws_account import AwsAccount
from components.cleanup.kubernetes_api import KubernetesApi, public_certificate_authority
from components.cleanup.self_contained import self_contained

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


@self_contained
class DeletionCostRanksProvider(KubernetesApi, pulumi.dynamic.ResourceProvider):
    serialize_as_secret_always = False
    _keys = ("clusterName", "region", "endpoint", "certificateAuthority", "namespace")

    def _props(self, props: dict[str, Any]) -> dict[str, Any]:
        values = {key: props.get(key) for key in self._keys}
        missing = [key for key, value in values.items() if not isinstance(value, str) or not value]
        if missing:
            raise ValueError(f"DeletionCostRanks needs {', '.join(missing)}")
        return {**values, **self._account_props(props)}

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        # Pure: nothing to do until the ranking is switched off.
        from pulumi.dynamic import CreateResult

        values = self._props(props)
        return CreateResult(id_=f"deletion-cost-ranks-{values['namespace']}", outs=values)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        from pulumi.dynamic import DiffResult

        # An account setting changed is an update: the same pods, reached with other credentials.
        changed = [k for k in (*self._keys, *self._account_keys) if olds.get(k) != news.get(k)]
        if olds.get("__provider") != news.get("__provider") and not changed:
            # Store new provider code, so delete runs the latest.
            return DiffResult(changes=True, replaces=[], delete_before_replace=False)
        replaces = [k for k in changed if k in ("clusterName", "namespace")]
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        from pulumi.dynamic import UpdateResult

        return UpdateResult(outs=self._props(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        import urllib.parse

        p = self._props(props)
        # This call's credentials (never kept on the provider object, which the engine's
        # concurrent deletes share: components/cleanup/aws_session.py).
        account = self._account(p)
        token = self._bearer_token(p["clusterName"], p["region"], account)
        opener = self._opener(p["certificateAuthority"])
        base = f"{p['endpoint'].rstrip('/')}/api/v1/namespaces/{urllib.parse.quote(p['namespace'])}/pods"
        hint = (f"kubectl -n {p['namespace']} annotate pod <name> {DELETION_COST}- "
                f"(or kubectl -n {p['namespace']} rollout restart deployment)")
        try:
            listed = self._call(opener, "GET", base, token, allow_404=True) or {}
        except RuntimeError as error:
            if self._cluster_is_gone(p["clusterName"], p["region"], account):
                return  # deleted outside Pulumi: its pods went with it
            raise Exception(f"could not list the pods of {p['namespace']}: {error}; "
                            f"remove negative {DELETION_COST} values with: {hint}") from None
        left = []
        for pod in listed.get("items") or []:
            name = pod["metadata"]["name"]
            value = ((pod["metadata"].get("annotations") or {}).get(DELETION_COST) or "").strip()
            try:
                negative = int(value) < 0
            except ValueError:
                negative = False
            if not negative:
                continue
            try:
                # A JSON merge patch with null removes the annotation; a pod already gone is fine.
                self._call(opener, "PATCH", f"{base}/{urllib.parse.quote(name)}", token,
                           allow_404=True, body={"metadata": {"annotations": {DELETION_COST: None}}},
                           content_type="application/merge-patch+json")
            except RuntimeError as error:
                left.append(f"{name}: {error}")
        if left:
            raise Exception(f"negative {DELETION_COST} values left on pods of {p['namespace']}:\n  "
                            + "\n  ".join(left) + f"\nRemove them with: {hint}")


class DeletionCostRanks(pulumi.dynamic.Resource, module="cleanup", name="DeletionCostRanks"):
    """Exists while Karpenter ranks pod deletion costs in ``namespace``; its deletion strips the
    negative values Karpenter wrote."""

    def __init__(self, name: str, cluster_name: pulumi.Input[str], region: pulumi.Input[str],
                 endpoint: pulumi.Input[str], certificate_authority: pulumi.Input[str],
                 namespace: str, account: Optional[AwsAccount] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        """``account``: the credentials ``delete`` signs its token with."""
        super().__init__(DeletionCostRanksProvider(), name, {
            "clusterName": cluster_name, "region": region, "endpoint": endpoint,
            "certificateAuthority": public_certificate_authority(certificate_authority),
            "namespace": namespace,
            **(account or AwsAccount()).cleanup_inputs(),
        }, opts)
