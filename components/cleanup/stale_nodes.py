"""Deletes the Node a hybrid host left behind when it was re-created with the same user data.

A host's Node cleanup (node_objects.py) is replaced, and so removes the old host's Node, whenever
the host is replaced for a change of what it boots with. But `pulumi up --replace <host>`
re-creates the host alone: same user data, same cleanup, same token. The new host registers a
new SSM managed instance and so a new Node (nodeadm names it after the registration), and the
old Node stays, NotReady and billed, until the next replacement or `pulumi destroy`. Nothing
registered before the host can act then: the engine replaces only the host, and deletes its
dependents first only if they must be replaced (pulumi/pulumi
pkg/resource/deploy/step_generator.go, calculateDependentReplacements).

So each host also has this sweep, registered after it: it takes the host's instance id, which
a new host changes. Its diff asks for an update, never a replacement (so it is not deleted
ahead of the host's delete-first replacement), and its ``update`` runs once the new instance
exists: it deletes the Nodes of this host (this stack's and this host's labels, any
generation) whose SSM registration is older than the new instance's launch — the old host's, whose kubelet is gone
(the old instance was terminated before the new one was launched). The new host's Node
registers after its launch and is left alone. Its ``create`` and ``delete`` do nothing: at
destroy the Node cleanup removes every Node of the host.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic

from components.aws_account import AwsAccount
from components.cleanup.kubernetes_api import public_certificate_authority
from components.cleanup.node_objects import NodeObjectCleanupProvider
from components.cleanup.self_contained import self_contained


@self_contained
class StaleNodeSweepProvider(NodeObjectCleanupProvider):
    """Dynamic provider: ``update`` to a new instance id deletes the Nodes registered before
    that instance was launched; ``create`` and ``delete`` act on nothing."""

    serialize_as_secret_always = False

    def check_props(self, props: dict[str, Any]) -> dict[str, Any]:
        import re

        # Its instance id is the host to compare launch times with, not one to terminate.
        outs = super().check_props({k: v for k, v in props.items() if k != "instanceId"})
        instance = props.get("instanceId")
        if not isinstance(instance, str) or not re.fullmatch(r"i-[0-9a-f]{8,17}", instance):
            raise ValueError(f"stale-node sweep needs the host's instanceId (i-…), got {instance!r}")
        outs["instanceId"] = instance
        return outs

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        outs = self.check_props(props)
        return pulumi.dynamic.CreateResult(f"stale-nodes-{outs['instanceId']}", outs)

    def diff(self, _id: str, olds: dict[str, Any],
             news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        keys = ("clusterName", "labelSelector", "activationId", "instanceId", "endpoint",
                "certificateAuthority", "region", *self._account_keys)
        changed = [key for key in keys if olds.get(key) != news.get(key)]
        code_changed = olds.get("__provider") != news.get("__provider")
        # Never a replacement: a replacement would be deleted ahead of the host's and created
        # anew, and its create cannot tell an old Node from the new host's by itself.
        return pulumi.dynamic.DiffResult(changes=bool(changed) or code_changed, replaces=[],
                                         delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any],
               news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        outs = self.check_props(news)
        if olds.get("instanceId") != outs["instanceId"]:
            # This call's credentials (never kept on the provider object, which the engine's
            # concurrent calls share: components/cleanup/aws_session.py).
            self._sweep(outs, self._account(outs))
        return pulumi.dynamic.UpdateResult(outs)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None  # the host's Node cleanup removes its Nodes at destroy

    def _launched(self, props: dict[str, Any], account: Any) -> Any:
        ec2 = self._aws_client("ec2", props["region"], account=account)
        answer, error = self._aws_call(ec2.describe_instances, InstanceIds=[props["instanceId"]])
        instances = [i for r in answer.get("Reservations") or [] for i in r.get("Instances") or []]
        if error is not None or not instances:
            raise RuntimeError(f"could not read when {props['instanceId']} was launched "
                               f"({error or 'EC2 does not list it'})")
        return instances[0]["LaunchTime"]

    def _registered(self, ssm: list[Any], props: dict[str, Any], name: str,
                    account: Any) -> Optional[Any]:
        """When the managed instance ``name`` registered through this stack's activation; None
        when it did not (or SSM no longer knows it). ``ssm`` caches the call's client, made
        with ``account``'s credentials."""
        if not ssm:
            ssm.append(self._aws_client("ssm", props["region"], account=account))
        page, error = self._aws_call(
            ssm[0].describe_instance_information, gone_codes=("InvalidInstanceId",),
            Filters=[{"Key": "InstanceIds", "Values": [name]},
                     {"Key": "ActivationIds", "Values": [props["activationId"]]}])
        if error is not None:
            raise RuntimeError(f"could not look up the registration of {name} ({error})")
        for info in page.get("InstanceInformationList") or []:
            if info.get("InstanceId") == name and info.get("ActivationId") == props["activationId"]:
                return info.get("RegistrationDate")
        return None

    def _sweep(self, props: dict[str, Any], account: Any) -> None:
        import re

        selector = props["labelSelector"]
        launched = self._launched(props, account)
        token = self._bearer_token(props["clusterName"], props["region"], account)
        opener = self._opener(props["certificateAuthority"])
        ssm: list[Any] = []
        left = []
        for name in self._list_hybrid_nodes(opener, props, token, selector):
            # nodeadm names the Node after its managed instance; any other name is no host of
            # this lab's, and an unknown age is not stale.
            if not re.fullmatch(r"mi-[0-9a-f]{17}", name):
                continue
            registered = self._registered(ssm, props, name, account)
            if registered is None or registered >= launched:
                continue
            why = self._deregister(ssm, props, name, account)
            if why is not None:
                left.append(f"{name}: {why}")
                continue
            self._delete_node(opener, props, token, name)
        if left:
            raise RuntimeError(
                f"The Nodes the re-created host {props['instanceId']} left behind could not all "
                f"be removed (they are billed while they exist; the next `pulumi up` tries "
                f"again): " + "; ".join(left))


class StaleNodeSweep(pulumi.dynamic.Resource, module="cleanup", name="HybridStaleNodes"):
    """When its host is re-created (a new ``instance_id``), deletes the host's Nodes that
    registered before the new instance was launched, and their SSM registrations.

    Register it after the host, with the host's id and the host's identity labels (no token: a
    host of a generation that is gone may have left its Node).
    """

    instanceId: pulumi.Output[str]
    labelSelector: pulumi.Output[str]

    def __init__(self, name: str, cluster_name: pulumi.Input[str], region: pulumi.Input[str],
                 endpoint: pulumi.Input[str], certificate_authority: pulumi.Input[str],
                 label_selector: pulumi.Input[str], activation_id: pulumi.Input[str],
                 instance_id: pulumi.Input[str], account: Optional[AwsAccount] = None,
                 opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(StaleNodeSweepProvider(), name, {
            "clusterName": cluster_name,
            "region": region,
            "endpoint": endpoint,
            "certificateAuthority": public_certificate_authority(certificate_authority),
            "labelSelector": label_selector,
            "activationId": activation_id,
            "instanceId": instance_id,
            **(account or AwsAccount()).cleanup_inputs(),
        }, opts)
