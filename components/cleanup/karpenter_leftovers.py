"""Removes, at destroy time, what Karpenter created for this cluster and did not clean up itself.

While the controller runs, the NodePool and EC2NodeClass finalizers terminate Karpenter's
instances and delete its launch templates and instance profiles. A controller that crashed or a
finalizer that timed out leaves them behind: the instances keep billing, their network
interfaces block deleting the subnets and security groups, and a leftover instance profile
blocks deleting the node role.

The controller's Helm release depends on this resource, and this resource on the node role, the
subnets and the security groups: at destroy Pulumi uninstalls the controller first, then this
resource's ``delete`` terminates the instances (and waits until they are gone), deletes the
launch templates and the instance profiles, then the role, subnets and security groups go.

Only what Karpenter made for *this* cluster is touched, as told by the tags it puts on
everything: ``kubernetes.io/cluster/<cluster>=owned`` plus ``karpenter.sh/nodepool`` (instances)
or ``karpenter.k8s.aws/ec2nodeclass`` (launch templates, instance profiles), never anything whose
``eks:eks-cluster-name`` names another cluster, and — IAM being global — only instance profiles
tagged ``topology.kubernetes.io/region=<region>``. The API's filters select them and the code
checks the tags again before acting.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic

from components.aws_account import AwsAccount
from components.cleanup.aws_calls import AwsCalls
from components.cleanup.self_contained import self_contained


@self_contained
class KarpenterLeftoverCleanupProvider(AwsCalls, pulumi.dynamic.ResourceProvider):
    """Dynamic provider: ``create`` records the cluster and region, ``delete`` removes the
    Karpenter instances, launch templates and instance profiles of that cluster that are left.

    Pickled into the state and run from there at destroy time, hence ``@self_contained``: every
    helper is a method and every import happens inside a method. Retries and backoff of each AWS
    request come from ``AwsCalls``.
    """

    # Nothing secret is captured by the provider or stored in its outputs.
    serialize_as_secret_always = False

    #: How long ``delete`` waits for the terminated instances to reach ``terminated``.
    wait_seconds: float = 600.0
    #: Pause between two looks at the instances while waiting.
    poll_seconds: float = 10.0
    #: Instance ids per TerminateInstances / DescribeInstances request.
    batch_size: int = 100

    # A change to either means other things to clean up; the old resource's delete must still
    # clean up the old ones.
    _keys = ("region", "clusterName")

    #: Instance states that can still hold network interfaces. ``shutting-down`` is included so
    #: that ``delete`` also waits for an instance Karpenter began terminating before it stopped.
    _live_states = ("pending", "running", "stopping", "stopped", "shutting-down")

    # --- lifecycle ------------------------------------------------------------------------

    def check_props(self, props: dict[str, Any]) -> dict[str, Any]:
        """The props ``delete`` needs, validated; raises ValueError."""
        bad = [key for key in self._keys
               if not isinstance(props.get(key), str) or not props[key].strip()]
        if bad:
            raise ValueError("Karpenter leftover cleanup needs a non-empty "
                             + " and ".join(bad)
                             + f" (got {', '.join(f'{k}={props.get(k)!r}' for k in bad)})")
        return {**{key: props[key] for key in self._keys}, **self._account_props(props)}

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        # Pure on purpose: the offline plan calls it under mocks, and there is nothing to make.
        from pulumi.dynamic import CreateResult

        outs = self.check_props(props)
        return CreateResult(f"karpenter-leftovers-{outs['clusterName']}", outs)

    def diff(self, _id: str, olds: dict[str, Any],
             news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        from pulumi.dynamic import DiffResult

        replaces = [key for key in self._keys if olds.get(key) != news.get(key)]
        # Another account setting is the same things reached with other credentials: stored
        # by an update, never a replacement (whose delete would clean up the new cluster).
        updates = [key for key in self._account_keys if olds.get(key) != news.get(key)]
        # delete() runs the provider code stored in the state: a changed provider alone is an
        # update, or a fix to this class would never reach a stack whose inputs stay the same.
        code_changed = olds.get("__provider") != news.get("__provider")
        return DiffResult(changes=bool(replaces or updates) or code_changed, replaces=replaces,
                          delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any],
               news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        # Reached only when just the provider code changed; the engine stores the new code.
        from pulumi.dynamic import UpdateResult

        return UpdateResult(self.check_props(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        props = self.check_props(props)
        region, cluster = props["region"], props["clusterName"]
        # This call's credentials, handed to each part (never kept on the provider object,
        # which the engine's concurrent deletes share: components/cleanup/aws_session.py).
        account = self._account(props)

        # Each part runs whatever happened to the ones before; everything left is reported at
        # once. A part is a list of (what, why, commands to remove it by hand).
        left: list[tuple[str, str, list[str]]] = []
        parts = (("instances", self._clean_instances),
                 ("launch templates", self._clean_launch_templates),
                 ("instance profiles", self._clean_instance_profiles))
        for what, part in parts:
            try:
                left.extend(part(region, cluster, account))
            except Exception as error:  # noqa: BLE001 - reported below, with what to do by hand
                left.append((f"Karpenter {what} of the cluster (not looked at)",
                             f"{type(error).__name__}: {error}",
                             self._find_commands(what, region, cluster)))
        if not left:
            return

        lines = [f"Could not remove everything Karpenter left behind for cluster {cluster} in "
                 f"{region}. Left:"]
        lines.extend(f"  {what}: {why}" for what, why, _commands in left)
        lines.append("Leftover instances keep being billed, and with their network interfaces "
                     "block deleting the cluster's subnets and security groups; a leftover "
                     "instance profile blocks deleting the node role.")
        lines.append("Remove them by hand with:")
        commands: list[str] = []
        for _what, _why, part_commands in left:
            commands.extend(c for c in part_commands if c not in commands)
        lines.extend(f"  {command}" for command in commands)
        raise Exception("\n".join(lines))

    # --- tags -----------------------------------------------------------------------------

    def _tags(self, tag_list: Any) -> dict[str, str]:
        return {t.get("Key"): t.get("Value", "") for t in tag_list or [] if t.get("Key")}

    def _is_karpenters(self, tags: dict[str, str], cluster: str, karpenter_key: str) -> bool:
        """Tagged as this cluster's and as Karpenter's (``karpenter_key``), and not tagged as
        another cluster's."""
        return (tags.get(f"kubernetes.io/cluster/{cluster}") == "owned"
                and karpenter_key in tags
                and tags.get("eks:eks-cluster-name", cluster) == cluster)

    def _find_commands(self, what: str, region: str, cluster: str) -> list[str]:
        """aws CLI commands that list what ``delete`` looks for, for a part it could not read."""
        owned = f"Name=tag:kubernetes.io/cluster/{cluster},Values=owned"
        if what == "instances":
            states = ",".join(self._live_states)
            return [f"aws ec2 describe-instances --region {region} --filters {owned} "
                    f"Name=tag-key,Values=karpenter.sh/nodepool "
                    f"Name=instance-state-name,Values={states} "
                    "--query 'Reservations[].Instances[].InstanceId' --output text",
                    f"aws ec2 terminate-instances --region {region} --instance-ids <ids>"]
        if what == "launch templates":
            return [f"aws ec2 describe-launch-templates --region {region} --filters {owned} "
                    "Name=tag-key,Values=karpenter.k8s.aws/ec2nodeclass "
                    "--query 'LaunchTemplates[].LaunchTemplateId' --output text",
                    f"aws ec2 delete-launch-template --region {region} "
                    "--launch-template-id <id>"]
        return ["aws iam list-instance-profiles --query 'InstanceProfiles[].[InstanceProfileName,"
                "Roles[].RoleName]' --output text   # then, for each profile:",
                "aws iam list-instance-profile-tags --instance-profile-name <name>   # tagged "
                f"kubernetes.io/cluster/{cluster}=owned, topology.kubernetes.io/region={region} "
                "and karpenter.k8s.aws/ec2nodeclass:",
                "aws iam remove-role-from-instance-profile --instance-profile-name <name> "
                "--role-name <role>",
                "aws iam delete-instance-profile --instance-profile-name <name>"]

    # --- EC2 instances --------------------------------------------------------------------

    def _clean_instances(self, region: str, cluster: str,
                         account: Any) -> list[tuple[str, str, list[str]]]:
        """Terminates this cluster's Karpenter instances (with ``account``'s credentials) and
        waits until they are terminated."""
        ec2 = self._aws_client("ec2", region, account=account)
        left: list[tuple[str, str, list[str]]] = []
        instance_ids, listing_error = self._list_instances(ec2, cluster)
        if listing_error is not None:
            left.append(("Karpenter instances of the cluster (could not list them all)",
                         listing_error, self._find_commands("instances", region, cluster)))

        failed: dict[str, str] = {}
        terminating: list[str] = []
        for start in range(0, len(instance_ids), self.batch_size):
            batch = instance_ids[start:start + self.batch_size]
            done, batch_failed = self._terminate(ec2, batch)
            terminating.extend(done)
            failed.update(batch_failed)
        # Subnets and security groups cannot go while the instances' interfaces exist.
        failed.update(self._wait_terminated(ec2, terminating))

        ids = " ".join(i for i in instance_ids if i in failed)
        commands = [f"aws ec2 terminate-instances --region {region} --instance-ids {ids}",
                    f"aws ec2 wait instance-terminated --region {region} --instance-ids {ids}"]
        left.extend((f"EC2 instance {instance_id}", failed[instance_id], commands)
                    for instance_id in instance_ids if instance_id in failed)
        return left

    def _list_instances(self, ec2: Any, cluster: str) -> tuple[list[str], Optional[str]]:
        """Ids of this cluster's Karpenter instances that are not terminated, and why listing
        stopped early (None when every page was read)."""
        found: list[str] = []
        token = None
        while True:
            request: dict[str, Any] = {"Filters": [
                {"Name": f"tag:kubernetes.io/cluster/{cluster}", "Values": ["owned"]},
                {"Name": "tag-key", "Values": ["karpenter.sh/nodepool"]},
                {"Name": "instance-state-name", "Values": list(self._live_states)},
            ], "MaxResults": 1000}
            if token:
                request["NextToken"] = token
            page, why = self._aws_call(ec2.describe_instances, **request)
            if why is not None:
                return found, why
            for reservation in page.get("Reservations") or []:
                for instance in reservation.get("Instances") or []:
                    instance_id = instance.get("InstanceId")
                    state = (instance.get("State") or {}).get("Name")
                    # The filters should already guarantee this; never terminate anything the
                    # API returned that is not this cluster's Karpenter node.
                    if not instance_id or instance_id in found \
                            or state not in self._live_states \
                            or not self._is_karpenters(self._tags(instance.get("Tags")), cluster,
                                                       "karpenter.sh/nodepool"):
                        continue
                    found.append(instance_id)
            token = page.get("NextToken")
            if not token:
                return found, None

    def _terminate(self, ec2: Any, instance_ids: list[str]
                   ) -> tuple[list[str], dict[str, str]]:
        """Terminates ``instance_ids``. Returns the ids to wait for and {id: why} of those that
        could not be terminated. An instance that no longer exists is neither."""
        gone = ("InvalidInstanceID.NotFound",)
        response, why = self._aws_call(ec2.terminate_instances, InstanceIds=instance_ids)
        if why is None:
            return list(instance_ids), {}
        if "(gave up after" in why or len(instance_ids) == 1:
            # Retried to no avail: one request per instance would only fail the same way.
            if len(instance_ids) == 1 and why.startswith(gone):
                return [], {}
            return [], {instance_id: why for instance_id in instance_ids}
        # One bad instance (gone, protected, ...) fails the whole request: one at a time.
        done, failed = [], {}
        for instance_id in instance_ids:
            _, why = self._aws_call(ec2.terminate_instances, gone_codes=gone,
                                    InstanceIds=[instance_id])
            if why is None:
                done.append(instance_id)
            else:
                failed[instance_id] = why
        return done, failed

    def _wait_terminated(self, ec2: Any, instance_ids: list[str]) -> dict[str, str]:
        """Waits (at most ``wait_seconds``) until ``instance_ids`` are terminated or gone.
        Returns {id: why} of those that are not."""
        import time

        pending = {instance_id: "not yet looked at" for instance_id in instance_ids}
        deadline = time.monotonic() + self.wait_seconds
        while pending:
            states, why = self._instance_states(ec2, list(pending))
            if why is not None:
                return {instance_id: f"termination requested, but could not confirm it: {why}"
                        for instance_id in pending}
            # An instance no longer listed is long gone.
            pending = {i: states[i] for i in pending
                       if states.get(i, "terminated") != "terminated"}
            if not pending:
                break
            now = time.monotonic()
            if now >= deadline:
                return {instance_id: f"termination requested, still {state} after "
                                     f"{self.wait_seconds:g} s"
                        for instance_id, state in pending.items()}
            time.sleep(max(0.0, min(self.poll_seconds, deadline - now)))
        return {}

    def _instance_states(self, ec2: Any, instance_ids: list[str]
                         ) -> tuple[dict[str, str], Optional[str]]:
        """{id: state name} of the listed instances that still exist."""
        states: dict[str, str] = {}
        for start in range(0, len(instance_ids), self.batch_size):
            token = None
            while True:
                # A filter, not InstanceIds: an id that is gone does not fail the request.
                request: dict[str, Any] = {"Filters": [
                    {"Name": "instance-id",
                     "Values": instance_ids[start:start + self.batch_size]}]}
                if token:
                    request["NextToken"] = token
                page, why = self._aws_call(ec2.describe_instances, **request)
                if why is not None:
                    return states, why
                for reservation in page.get("Reservations") or []:
                    for instance in reservation.get("Instances") or []:
                        states[instance.get("InstanceId")] = \
                            (instance.get("State") or {}).get("Name", "unknown")
                token = page.get("NextToken")
                if not token:
                    break
        return states, None

    # --- launch templates -----------------------------------------------------------------

    def _clean_launch_templates(self, region: str, cluster: str,
                                account: Any) -> list[tuple[str, str, list[str]]]:
        ec2 = self._aws_client("ec2", region, account=account)
        left: list[tuple[str, str, list[str]]] = []
        templates: list[tuple[str, str]] = []
        token = None
        while True:
            request: dict[str, Any] = {"Filters": [
                {"Name": f"tag:kubernetes.io/cluster/{cluster}", "Values": ["owned"]},
                {"Name": "tag-key", "Values": ["karpenter.k8s.aws/ec2nodeclass"]},
            ], "MaxResults": 200}
            if token:
                request["NextToken"] = token
            page, why = self._aws_call(ec2.describe_launch_templates, **request)
            if why is not None:
                left.append(("Karpenter launch templates of the cluster (could not list them "
                             "all)", why, self._find_commands("launch templates", region,
                                                              cluster)))
                break
            for template in page.get("LaunchTemplates") or []:
                template_id = template.get("LaunchTemplateId")
                if template_id and self._is_karpenters(
                        self._tags(template.get("Tags")), cluster,
                        "karpenter.k8s.aws/ec2nodeclass"):
                    templates.append((template_id, template.get("LaunchTemplateName", "")))
            token = page.get("NextToken")
            if not token:
                break

        for template_id, name in dict(templates).items():
            _, why = self._aws_call(
                ec2.delete_launch_template, LaunchTemplateId=template_id,
                gone_codes=("InvalidLaunchTemplateId.NotFound",
                            "InvalidLaunchTemplateName.NotFoundException"))
            if why is not None:
                left.append((f"launch template {template_id} ({name})", why, [
                    f"aws ec2 delete-launch-template --region {region} "
                    f"--launch-template-id {template_id}"]))
        return left

    # --- instance profiles ----------------------------------------------------------------

    def _clean_instance_profiles(self, region: str, cluster: str,
                                 account: Any) -> list[tuple[str, str, list[str]]]:
        iam = self._aws_client("iam", region, account=account)
        left: list[tuple[str, str, list[str]]] = []
        profiles, why = self._list_profiles(iam)
        if why is not None:
            left.append(("Karpenter instance profiles of the cluster (could not list them all)",
                         why, self._find_commands("instance profiles", region, cluster)))

        for profile in profiles:
            name = profile.get("InstanceProfileName")
            if not name:
                continue
            tags, why = self._profile_tags(iam, name)
            if why is not None:
                left.append((f"instance profile {name} (could not read its tags to tell whether "
                             "it is Karpenter's)", why, [
                                 f"aws iam list-instance-profile-tags --instance-profile-name "
                                 f"{name}   # if it is this cluster's Karpenter's in {region}:",
                                 f"aws iam delete-instance-profile --instance-profile-name "
                                 f"{name}   # after removing its role"]))
                continue
            # IAM is global: the same cluster name may live in another region.
            if tags is None or tags.get("topology.kubernetes.io/region") != region or \
                    not self._is_karpenters(tags, cluster, "karpenter.k8s.aws/ec2nodeclass"):
                continue
            left.extend(self._delete_profile(iam, name, [
                role.get("RoleName") for role in profile.get("Roles") or []
                if role.get("RoleName")]))
        return left

    def _list_profiles(self, iam: Any) -> tuple[list[dict[str, Any]], Optional[str]]:
        profiles: list[dict[str, Any]] = []
        marker = None
        while True:
            request: dict[str, Any] = {"MaxItems": 1000}
            if marker:
                request["Marker"] = marker
            page, why = self._aws_call(iam.list_instance_profiles, **request)
            if why is not None:
                return profiles, why
            profiles.extend(page.get("InstanceProfiles") or [])
            marker = page.get("Marker")
            if not page.get("IsTruncated") or not marker:
                return profiles, None

    def _profile_tags(self, iam: Any, name: str
                      ) -> tuple[Optional[dict[str, str]], Optional[str]]:
        """The profile's tags (None when it is gone), or why they could not be read."""
        tags: list[dict[str, str]] = []
        marker = None
        while True:
            request: dict[str, Any] = {"InstanceProfileName": name, "MaxItems": 1000}
            if marker:
                request["Marker"] = marker
            page, why = self._aws_call(iam.list_instance_profile_tags,
                                       gone_codes=("NoSuchEntity",), **request)
            if why is not None:
                return None, why
            if not page:  # NoSuchEntity: gone already
                return None, None
            tags.extend(page.get("Tags") or [])
            marker = page.get("Marker")
            if not page.get("IsTruncated") or not marker:
                return self._tags(tags), None

    def _delete_profile(self, iam: Any, name: str,
                        roles: list[str]) -> list[tuple[str, str, list[str]]]:
        """Removes ``roles`` from the profile, then deletes it. Returns what is left."""
        gone = ("NoSuchEntity",)
        for role in roles:
            _, why = self._aws_call(iam.remove_role_from_instance_profile, gone_codes=gone,
                                    InstanceProfileName=name, RoleName=role)
            if why is not None:
                return [(f"instance profile {name} (role {role} still in it)", why, [
                    f"aws iam remove-role-from-instance-profile --instance-profile-name {name} "
                    f"--role-name {r}" for r in roles] + [
                    f"aws iam delete-instance-profile --instance-profile-name {name}"])]
        _, why = self._aws_call(iam.delete_instance_profile, gone_codes=gone,
                                InstanceProfileName=name)
        if why is not None:
            return [(f"instance profile {name}", why, [
                f"aws iam delete-instance-profile --instance-profile-name {name}"])]
        return []


class KarpenterLeftoverCleanup(pulumi.dynamic.Resource, module="cleanup",
                               name="KarpenterLeftovers"):
    """Removes the instances, launch templates and instance profiles Karpenter left behind for
    ``cluster_name`` in ``region`` when this resource is deleted.

    Make the Karpenter controller's Helm release depend on it, and make it depend on the node
    role, the subnets and the security groups (through its inputs or ``depends_on``). At destroy
    it then runs after the controller is gone and before those are deleted.
    """

    # Dynamic resources publish each output under its property name, as an attribute.
    region: pulumi.Output[str]
    clusterName: pulumi.Output[str]

    def __init__(self, name: str, region: pulumi.Input[str], cluster_name: pulumi.Input[str],
                 account: Optional[AwsAccount] = None,
                 opts: Optional[pulumi.ResourceOptions] = None) -> None:
        """``account``: the credentials ``delete`` acts with (components/aws_account.py)."""
        super().__init__(KarpenterLeftoverCleanupProvider(), name,
                         {"region": region, "clusterName": cluster_name,
                          **(account or AwsAccount()).cleanup_inputs()}, opts)
