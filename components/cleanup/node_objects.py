"""Terminates a hybrid host, then deletes its Kubernetes ``Node`` object and the SSM
registration it joined with.

EKS bills a hybrid node per vCPU-hour for as long as its ``Node`` object exists, not while the
machine runs. When the stack is lowered below the hybrid layer (the cluster stays) or a host is
replaced, the EC2 host is terminated but its ``Node`` stays behind, NotReady, and keeps billing.
Nothing in Pulumi owns those objects (the kubelet created them), so this dynamic resource removes
them in its ``delete``.

There is one per host: it depends on the host (its instance id), the cluster and the access
entry. The host depends on none of them, so it boots and installs while EKS creates the control
plane. A Node deleted while its kubelet still runs comes back (the kubelet registers it again),
so the Node must go after its host; since Pulumi deletes a dependent before what it depends on,
the cleanup's ``delete`` ends its host itself: it terminates the instance — by id, and only if
it carries this stack's tag — and waits until it is terminated, then deregisters and deletes.
Pulumi's own delete of the host comes next and finds it terminated, which the AWS provider
takes as deleted (docs/hybrid-nodes.md#the-node-goes-after-its-host).

A new host means a new cleanup: ``instanceId`` (and the host's token, which changes only with
the host's user data) replaces it. The host is replaced delete-before-create, and the engine
deletes first the dependents a new host would replace — this cleanup, with its old outputs, so
the old instance and the old Node (pulumi/pulumi step_generator.go,
calculateDependentReplacements). The host labels its Node with its token
(components/cleanup/host_token.py), so a cleanup selects only the Node of the host it came
with, never a later generation's. nodeadm names a Node
after the host's SSM managed instance (``mi-…``); a replaced host leaves that registration
behind too, still counting against the activation's registration limit, and the stack-wide SSM
cleanup runs only when the activation goes. So before deleting a Node, ``delete`` deregisters
the managed instance of the same name — only if SSM says it registered through this stack's
activation. A host whose Node never registered (nodeadm failed after the SSM agent registered)
leaves a registration this cleanup cannot find: the activation's own cleanup deregisters it at
destroy.

It acts only on nodes selected by this stack's label *and* labelled as hybrid compute: other
stacks' hybrid nodes and the cloud nodes of the same cluster are never touched.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic

from components.aws_account import AwsAccount
from components.cleanup.aws_calls import AwsCalls
from components.cleanup.kubernetes_api import KubernetesApi, public_certificate_authority
from components.cleanup.self_contained import self_contained


@self_contained
class NodeObjectCleanupProvider(KubernetesApi, AwsCalls, pulumi.dynamic.ResourceProvider):
    """Dynamic provider: ``create`` records where the nodes live, ``delete`` deregisters and
    removes them.

    The API plumbing (token, CA-pinned opener, retried calls) comes from ``KubernetesApi``, the
    retried SSM calls from ``AwsCalls``; both read ``attempts`` and ``retry_base_seconds``, and
    ``KubernetesApi``'s come first.
    """

    # Nothing secret is captured by the provider or stored in its outputs.
    serialize_as_secret_always = False

    #: How long ``delete`` waits for its host to be terminated (shutting-down takes about a
    #: minute; EC2 documents no upper bound).
    terminate_seconds: float = 900.0
    #: Pause between two looks at the host while it shuts down.
    terminate_interval_seconds: float = 5.0
    #: How long ``delete`` waits for the deleted nodes to disappear from the list.
    poll_seconds: float = 60.0
    #: Pause between two looks at the node list while waiting.
    poll_interval_seconds: float = 2.0
    # retry_base_seconds, attempts and request_timeout_seconds come from KubernetesApi.
    #: Nodes fetched per list page.
    page_size: int = 100

    def check_props(self, props: dict[str, Any]) -> dict[str, str]:
        # An empty selector matches every node of the cluster: refuse it outright.
        keys = ("clusterName", "region", "endpoint", "certificateAuthority", "labelSelector",
                "activationId")
        missing = [key for key in keys
                   if not isinstance(props.get(key), str) or not props[key].strip()]
        if missing:
            why = ("; an empty labelSelector would select every node of the cluster"
                   if "labelSelector" in missing else "")
            raise ValueError("node-object cleanup needs non-empty " + ", ".join(missing) + why)
        if not props["endpoint"].startswith("https://"):
            raise ValueError(f"endpoint must be an https URL, got {props['endpoint']!r}")
        outs = {key: props[key] for key in keys}
        # Optional: the label the host carries its token in, the token, and the host (with
        # the tag that makes it this stack's) that delete terminates first.
        for key in ("tokenLabel", "token", "instanceId", "instanceLabel", "hostTagKey",
                    "hostTagValue"):
            if props.get(key):
                outs[key] = str(props[key])
        if outs.get("instanceId"):
            import re

            if not re.fullmatch(r"i-[0-9a-f]{8,17}", outs["instanceId"]):
                raise ValueError(f"instanceId must be an EC2 instance id (i-…), "
                                 f"got {outs['instanceId']!r}")
            if not (outs.get("hostTagKey") and outs.get("hostTagValue")):
                raise ValueError("a node-object cleanup that terminates its host needs the "
                                 "stack's tag (hostTagKey, hostTagValue): it terminates only an "
                                 "instance that carries it")
        outs.update(self._account_props(props))
        return outs

    def _with_selector(self, outs: dict[str, str]) -> dict[str, str]:
        """``outs`` with ``nodeSelector``, the selector ``delete`` uses: the identity labels
        and, when the host carries them, its token and its instance id. The instance id is what
        tells a host from the same generation's host created again without a replacement (one
        terminated outside Pulumi, dropped by a refresh and created anew: same user data, same
        token), whose Node this cleanup, deleted at the end of that update, must leave alone."""
        terms = [outs["labelSelector"]]
        if outs.get("token") and outs.get("tokenLabel"):
            terms.append(f"{outs['tokenLabel']}={outs['token']}")
        if outs.get("instanceId") and outs.get("instanceLabel"):
            terms.append(f"{outs['instanceLabel']}={outs['instanceId']}")
        return {**outs, "nodeSelector": ",".join(terms)}

    def node_selector(self, outs: dict[str, Any]) -> str:
        """The Nodes ``delete`` removes: what create stored; a cleanup stored before tokens
        existed selects by its labels alone."""
        return outs.get("nodeSelector") or outs["labelSelector"]

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        # Nothing to make in the cloud: the offline plan calls it under mocks.
        outs = self.check_props(props)
        return pulumi.dynamic.CreateResult(f"node-objects-{outs['clusterName']}",
                                           self._with_selector(outs))

    def diff(self, _id: str, olds: dict[str, Any],
             news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        # A new host (instance id), or a different cluster, selector, activation or token, means
        # a different host, Node and registration to clean up; the old resource's delete must
        # still clean up the old ones. Each of them changes only with a new host (they are in
        # its user data), so a cleanup is never replaced while its host lives on: its delete
        # would terminate that host. The rest only says how to reach them. ``nodeSelector``,
        # which create adds, is never in ``news``.
        replace_keys = ("clusterName", "labelSelector", "activationId", "tokenLabel", "token",
                        "instanceId", "instanceLabel")
        update_keys = ("endpoint", "certificateAuthority", "region", "hostTagKey",
                       "hostTagValue", *self._account_keys)
        replaces = [key for key in replace_keys if olds.get(key) != news.get(key)]
        changed = [key for key in replace_keys + update_keys if olds.get(key) != news.get(key)]
        # A changed provider (new code) is an update too, so destroy runs the latest code.
        code_changed = olds.get("__provider") != news.get("__provider")
        return pulumi.dynamic.DiffResult(
            changes=bool(changed) or code_changed, replaces=replaces,
            delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any],
               news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult(self._with_selector(self.check_props(news)))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        import time

        selector = self.node_selector(props)
        props = self.check_props(props)
        # This call's credentials, handed to every helper (never kept on the provider object,
        # which the engine's concurrent deletes share: components/cleanup/aws_session.py).
        account = self._account(props)
        # Its host first: a Node deleted while its kubelet runs is registered again. A cleanup
        # stored before cleanups took the instance id has none: its host was deleted first.
        if props.get("instanceId"):
            self._terminate_host(props, account)
        left: Optional[list[str]] = None
        # Nodes whose registration is settled (deregistered, or not this activation's), and
        # those whose deregistration failed: their Node is kept, so that the retried delete (the
        # next `pulumi up` or `destroy`) lists them again and retries.
        settled: set[str] = set()
        registered: dict[str, str] = {}
        ssm: list[Any] = []
        try:
            token = self._bearer_token(props["clusterName"], props["region"], account)
            opener = self._opener(props["certificateAuthority"])
            deadline = time.monotonic() + self.poll_seconds
            left = self._list_hybrid_nodes(opener, props, token, selector)
            while left:
                for name in left:
                    if name not in settled and name not in registered:
                        why = self._deregister(ssm, props, name, account)
                        if why is None:
                            settled.add(name)
                        else:
                            registered[name] = why
                    if name in settled:
                        self._delete_node(opener, props, token, name)
                left = [n for n in self._list_hybrid_nodes(opener, props, token, selector)
                        if n not in registered]
                if not left:
                    break
                # Nodes with finalizers linger a moment, and a kubelet that was still alive
                # re-registers its node: look again, deleting whatever is still listed.
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"still listed after {self.poll_seconds:g} s")
                time.sleep(self.poll_interval_seconds)
        except Exception as error:
            if self._cluster_is_gone(props["clusterName"], props["region"], account):
                return  # deleted outside Pulumi: its Node objects went with it
            nodes = (", ".join(left) + " (as last listed)" if left
                     else "unknown (the node list did not succeed)")
            raise Exception(
                f"Could not delete the hybrid Node objects of EKS cluster "
                f"{props['clusterName']} at {props['endpoint']}: {error}. "
                f"Nodes left: {nodes}. They are billed while they exist; remove them by hand "
                f"with: kubectl delete node -l {selector}") from error
        if registered:
            region, activation = props["region"], props["activationId"]
            lines = [f"Could not deregister the SSM managed instances of these hybrid Nodes "
                     f"(activation {activation}, {region}); their Node objects were kept, so "
                     "the next `pulumi up` or `pulumi destroy` retries. A registration counts "
                     "against the activation's limit, and the Node is billed while it exists."]
            lines += [f"  {name}: {why}" for name, why in sorted(registered.items())]
            lines.append(f"Or by hand, for each: aws ssm deregister-managed-instance --region "
                         f"{region} --instance-id <mi-id> && kubectl delete node <mi-id>")
            raise Exception("\n".join(lines))

    def _terminate_host(self, props: dict[str, str], account: Any) -> None:
        """Terminates the host ``instanceId`` (with ``account``'s credentials) if it carries
        this stack's tag, and waits until EC2 says it is terminated (or no longer knows it).
        Raises, keeping the Node, when the instance is not this stack's or does not end in
        time."""
        import time

        instance, region = props["instanceId"], props["region"]
        key, value = props["hostTagKey"], props["hostTagValue"]
        ec2 = self._aws_client("ec2", region, account=account)
        deadline = time.monotonic() + self.terminate_seconds
        asked = False
        while True:
            # InvalidInstanceID.NotFound: EC2 forgot it (about an hour after termination).
            page, error = self._aws_call(ec2.describe_instances, InstanceIds=[instance],
                                         gone_codes=("InvalidInstanceID.NotFound",))
            if error is not None:
                raise RuntimeError(f"could not look up the hybrid host {instance} in {region} "
                                   f"({error}); its Node is kept until it is terminated")
            found = [i for r in page.get("Reservations") or [] for i in r.get("Instances") or []
                     if i.get("InstanceId") == instance]
            state = (found[0].get("State") or {}).get("Name") if found else "terminated"
            if state == "terminated":
                return
            if not asked:
                tags = {t.get("Key"): t.get("Value") for t in found[0].get("Tags") or []}
                if tags.get(key) != value:
                    raise RuntimeError(
                        f"the hybrid host {instance} does not carry this stack's tag "
                        f"{key}={value} (it has {key}={tags.get(key)!r}): it was not terminated, "
                        f"and its Node is kept. Check the instance, terminate it if it is this "
                        f"lab's host, and run the command again")
                _, error = self._aws_call(ec2.terminate_instances, InstanceIds=[instance],
                                          gone_codes=("InvalidInstanceID.NotFound",))
                if error is not None:
                    raise RuntimeError(f"could not terminate the hybrid host {instance} "
                                       f"({error}); its Node is kept")
                asked = True
            if time.monotonic() >= deadline:
                raise RuntimeError(f"the hybrid host {instance} is still {state} after "
                                   f"{self.terminate_seconds:g} s; its Node is kept")
            time.sleep(self.terminate_interval_seconds)

    def _deregister(self, ssm: list[Any], props: dict[str, str], name: str,
                    account: Any) -> Optional[str]:
        """Deregisters the SSM managed instance ``name`` if it registered through this stack's
        activation. None once it is not (or no longer) registered through it, else why not.

        ``ssm`` caches the call's client, made with ``account``'s credentials on first use
        (most deletes find nothing to do)."""
        import re

        # nodeadm names a hybrid Node after its managed instance (mi- and 17 hex digits, as
        # the SSM API requires); any other name is no SSM registration.
        if not re.fullmatch(r"mi-[0-9a-f]{17}", name):
            return None
        if not ssm:
            ssm.append(self._aws_client("ssm", props["region"], account=account))
        client, activation = ssm[0], props["activationId"]
        # InvalidInstanceId: SSM knows no such instance (deregistered already).
        page, error = self._aws_call(
            client.describe_instance_information, gone_codes=("InvalidInstanceId",),
            Filters=[{"Key": "InstanceIds", "Values": [name]},
                     {"Key": "ActivationIds", "Values": [activation]}])
        if error is not None:
            return f"looking it up failed ({error})"
        ours = [info for info in page.get("InstanceInformationList") or []
                if info.get("InstanceId") == name and info.get("ActivationId") == activation]
        if not ours:
            return None  # not registered through this activation: not ours to deregister
        _, error = self._aws_call(client.deregister_managed_instance, InstanceId=name,
                                  gone_codes=("InvalidInstanceId",))
        return None if error is None else f"deregistering failed ({error})"

    def _list_hybrid_nodes(self, opener: Any, props: dict[str, str], token: str,
                           selector: str) -> list[str]:
        import urllib.parse

        names: list[str] = []
        cont = ""
        while True:
            query = {"labelSelector": selector, "limit": str(self.page_size)}
            if cont:
                query["continue"] = cont
            page = self._call(opener, "GET", props["endpoint"].rstrip("/") + "/api/v1/nodes?"
                             + urllib.parse.urlencode(query), token) or {}
            for node in page.get("items") or []:
                metadata = node.get("metadata") or {}
                labels = metadata.get("labels") or {}
                if self._selected(labels, selector) and \
                        labels.get("eks.amazonaws.com/compute-type") == "hybrid":
                    names.append(metadata["name"])
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                return names

    def _selected(self, labels: dict[str, str], selector: str) -> bool:
        # Re-checks the equality terms on our side, so a server or proxy that ignored the
        # selector cannot make us delete other stacks' nodes. Set-based terms are left to the
        # server.
        for term in selector.split(","):
            term = term.strip()
            if "!=" in term:
                key, value = (part.strip() for part in term.split("!=", 1))
                if labels.get(key) == value:
                    return False
            elif "=" in term and " in " not in term and " notin " not in term:
                key, value = (part.strip() for part in term.replace("==", "=").split("=", 1))
                if labels.get(key) != value:
                    return False
        return True

    def _delete_node(self, opener: Any, props: dict[str, str], token: str, name: str) -> None:
        import urllib.parse

        # 404: already gone (deleted by someone else between list and delete), which is the goal.
        self._call(opener, "DELETE", props["endpoint"].rstrip("/") + "/api/v1/nodes/"
                  + urllib.parse.quote(name, safe=""), token, allow_404=True)


class NodeObjectCleanup(pulumi.dynamic.Resource, module="cleanup", name="HybridNodeObjects"):
    """When it is deleted: terminates its host (``instance_id``, if tagged ``host_tag``), then
    deregisters the SSM managed instances of ``activation_id`` behind the selected ``Node``
    objects and removes those Nodes.

    Make it depend on the host (through ``instance_id``), the cluster and the access entry; the
    host must not depend on it.
    """

    # Dynamic resources publish each output under its property name, as an attribute.
    clusterName: pulumi.Output[str]
    region: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    certificateAuthority: pulumi.Output[str]
    labelSelector: pulumi.Output[str]
    #: The activation the selected Nodes' hosts registered through: only its managed instances
    #: are deregistered.
    activationId: pulumi.Output[str]
    #: The host's token (host_token.py): its Node carries ``<token_label>=<token>``, so this
    #: cleanup selects that Node and no other host's.
    token: pulumi.Output[str]
    #: The host ``delete`` terminates first.
    instanceId: pulumi.Output[str]
    #: The selector ``delete`` uses: ``label_selector`` and the token.
    nodeSelector: pulumi.Output[str]

    def __init__(self, name: str, cluster_name: pulumi.Input[str], region: pulumi.Input[str],
                 endpoint: pulumi.Input[str], certificate_authority: pulumi.Input[str],
                 label_selector: pulumi.Input[str], activation_id: pulumi.Input[str],
                 token_label: Optional[str] = None,
                 token: Optional[pulumi.Input[str]] = None,
                 instance_id: Optional[pulumi.Input[str]] = None,
                 instance_label: Optional[str] = None,
                 host_tag: Optional[tuple[str, str]] = None,
                 account: Optional[AwsAccount] = None,
                 opts: Optional[pulumi.ResourceOptions] = None) -> None:
        """``token``: the host's (host_token.py), with ``token_label``. ``instance_id`` and
        ``host_tag``: the host ``delete`` terminates first, and the tag it must carry;
        ``instance_label``: the label the host puts its instance id in on its Node."""
        super().__init__(NodeObjectCleanupProvider(), name, {
            "clusterName": cluster_name,
            "region": region,
            "endpoint": endpoint,
            "certificateAuthority": public_certificate_authority(certificate_authority),
            "labelSelector": label_selector,
            "activationId": activation_id,
            "tokenLabel": token_label,
            "token": token,
            "instanceId": instance_id,
            "instanceLabel": instance_label,
            "hostTagKey": host_tag[0] if host_tag else None,
            "hostTagValue": host_tag[1] if host_tag else None,
            # An output of create, declared so it is an attribute.
            "nodeSelector": None,
            **(account or AwsAccount()).cleanup_inputs(),
        }, opts)
