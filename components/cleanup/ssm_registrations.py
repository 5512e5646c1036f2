"""Deregisters, at destroy time, the SSM managed instances (``mi-…``) that joined through this
stack's hybrid activation.

Deleting an SSM activation leaves the instances that registered with it in place, and a
registered hybrid node (or an SSM advanced-tier instance) keeps being billed. ``nodeadm
uninstall`` would deregister a host, but a destroyed host never runs it. So the hosts depend on
this resource and this resource depends on the activation: at destroy Pulumi removes the hosts,
then this resource's ``delete`` deregisters what they left behind, then the activation goes.

Only instances that registered through *this* activation are touched: a region-wide cleanup
would deregister other people's servers.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic

from components.aws_account import AwsAccount
from components.cleanup.aws_calls import AwsCalls
from components.cleanup.self_contained import self_contained


@self_contained
class SsmRegistrationCleanupProvider(AwsCalls, pulumi.dynamic.ResourceProvider):
    """Dynamic provider whose ``delete`` deregisters the activation's managed instances.

    Pickled into the state and run from there at destroy time, hence ``@self_contained``: every
    helper is a method and every import happens inside a method.
    """

    # Keys of the outputs ``delete`` reads; changing either means another set of instances.
    _keys = ("activationId", "region")

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        # No AWS call: the offline plan runs create() under mocks, and there is nothing to
        # create — the resource only carries what delete() needs.
        from pulumi.dynamic import CreateResult

        activation_id = self._plain(props.get("activationId"))
        region = self._plain(props.get("region"))
        if not activation_id or not region:
            raise ValueError("SsmRegistrationCleanup needs a non-empty activationId and region "
                             f"(got activationId={activation_id!r}, region={region!r})")
        return CreateResult(
            id_=f"ssm-registrations-{activation_id}",
            outs={"activationId": activation_id, "region": region,
                  **self._account_props(props)})

    def diff(self, _id: str, olds: dict[str, Any],
             news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        from pulumi.dynamic import DiffResult

        replaces = [key for key in self._keys
                    if self._plain(olds.get(key)) != self._plain(news.get(key))]
        if replaces:
            # The old resource's delete must still run against the old activation.
            return DiffResult(changes=True, replaces=replaces, delete_before_replace=False)
        # Another account setting: the same instances, reached with other credentials.
        if olds.get("__provider") != news.get("__provider") or any(
                olds.get(key) != news.get(key) for key in self._account_keys):
            # delete() runs the provider code stored in the state. Without an update a fix to
            # this class would never reach a stack whose activation stays the same.
            return DiffResult(changes=True, replaces=[], delete_before_replace=False)
        return DiffResult(changes=False, replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any],
               news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        # Reached only when just the provider code changed; the engine stores the new code.
        from pulumi.dynamic import UpdateResult

        return UpdateResult(
            outs={**{key: self._plain(news.get(key)) for key in self._keys},
                  **self._account_props(news)})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        activation_id = self._plain(props["activationId"])
        region = self._plain(props["region"])
        # This call's credentials (never kept on the provider object, which the engine's
        # concurrent deletes share: components/cleanup/aws_session.py).
        account = self._account(props)
        try:
            ssm = self._aws_client("ssm", region, account=account)
        except Exception as error:  # noqa: BLE001 - the wrong account, a profile that is gone
            raise Exception(f"SSM activation {activation_id} ({region}): its managed instances "
                            f"were not looked at: {error}") from None

        instance_ids, listing_error = self._list_instances(ssm, activation_id)

        left: dict[str, str] = {}
        for instance_id in instance_ids:
            why = self._deregister(ssm, instance_id)
            if why is not None:
                left[instance_id] = why

        if left or listing_error:
            lines = [f"SSM activation {activation_id} ({region}): could not deregister all of "
                     "its managed instances. They keep being billed while registered."]
            if listing_error:
                lines.append(
                    f"  listing the instances failed ({listing_error}); list the rest with: "
                    f"aws ssm describe-instance-information --region {region} "
                    f"--filters Key=ActivationIds,Values={activation_id}")
            for instance_id, why in left.items():
                lines.append(f"  {instance_id}: {why}")
            if left:
                lines.append("Remove each by hand with: aws ssm deregister-managed-instance "
                             f"--region {region} --instance-id <id>")
            raise Exception("\n".join(lines))

    def _list_instances(self, ssm: Any, activation_id: str) -> tuple[list[str], Optional[str]]:
        """Ids of the instances registered through ``activation_id``, and why listing stopped
        early (None when every page was read). What was listed before an error is still
        returned, so that delete() can deregister it."""
        instance_ids: list[str] = []
        token = None
        while True:
            request = {"Filters": [{"Key": "ActivationIds", "Values": [activation_id]}],
                       "MaxResults": 50}
            if token:
                request["NextToken"] = token
            page, error = self._aws_call(ssm.describe_instance_information, **request)
            if error is not None:
                return instance_ids, error
            for info in page.get("InstanceInformationList", []):
                instance_id = info.get("InstanceId")
                # The filter should already guarantee this; an instance of another activation
                # must never be deregistered even if the API returned it.
                if info.get("ActivationId") != activation_id or not instance_id:
                    continue
                if instance_id not in instance_ids:
                    instance_ids.append(instance_id)
            token = page.get("NextToken")
            if not token:
                return instance_ids, None

    def _deregister(self, ssm: Any, instance_id: str) -> Optional[str]:
        """None once ``instance_id`` is no longer registered, else why it still is."""
        _, error = self._aws_call(ssm.deregister_managed_instance, InstanceId=instance_id,
                              gone_codes=("InvalidInstanceId",))
        return error

    def _plain(self, value: Any) -> Any:
        # The engine hands a secret value over wrapped as {sig: <secret sig>, value: ...}.
        if isinstance(value, dict) and \
                value.get("4dabf18193072939515e22adb298388d") == "1b47061264138c4ac30d75fd1eb44270":
            return value.get("value")
        return value


class SsmRegistrationCleanup(pulumi.dynamic.Resource, module="cleanup", name="SsmRegistrations"):
    """Deregisters the managed instances of ``activation_id`` when this resource is deleted.

    Make the hosts that register through the activation depend on this resource (and this
    resource depends on the activation through ``activation_id``), so that at destroy it runs
    after the hosts are gone and before the activation is.
    """

    activation_id: pulumi.Output[str]
    region: pulumi.Output[str]

    # Python attribute names ↔ the provider's (camelCase) property names.
    _to_property = {"activation_id": "activationId"}
    _to_attribute = {"activationId": "activation_id"}

    def __init__(self, name: str, activation_id: pulumi.Input[str], region: pulumi.Input[str],
                 account: Optional[AwsAccount] = None,
                 opts: Optional[pulumi.ResourceOptions] = None) -> None:
        """``account``: the credentials ``delete`` acts with (components/aws_account.py)."""
        # Keyed by attribute name: the SDK creates one output attribute per key and
        # translate_input_property turns the key into the property name the provider sees.
        super().__init__(SsmRegistrationCleanupProvider(), name,
                         {"activation_id": activation_id, "region": region,
                          **(account or AwsAccount()).cleanup_inputs()}, opts)

    def translate_input_property(self, prop: str) -> str:
        return self._to_property.get(prop, prop)

    def translate_output_property(self, prop: str) -> str:
        return self._to_attribute.get(prop, prop)
