"""Stops a change at preview when the SSM hybrid activation has fewer registrations left than
the hybrid hosts the change creates.

SSM counts registrations *made* through an activation (``RegistrationsCount`` in
DescribeActivations: "the number of managed nodes already registered with this activation"), up
to its ``RegistrationLimit``; once it is reached, the activation registers no further machine.
A deregistered managed node does not hand its registration back: DeregisterManagedInstance's
reference says a machine that registers again must use an activation "not already used on the
maximum number of activations specified when [it was] created" (docs/hybrid-nodes.md
#activation-registrations). Every new host registers once, and every edit of the join script
replaces every host (``user_data_replace_on_change``). Past the limit a host's registration
fails inside nodeadm, on the host, and nothing in ``pulumi up`` says so.

So the hosts depend on this resource, and its ``check`` — which the engine runs at preview and
again at ``up``, before anything that depends on it is touched — counts the hosts the change
creates (a name it has not seen, or a fingerprint that changed: the host's generation, exactly
what replaces its instance), reads the activation's count, and refuses the change with one
message naming the activation, its count and limit, and what to run (a new
``activationGeneration``: a new activation, the hosts re-pointed to it and replaced).

The resource keeps the fingerprints of the last ``up`` in its state (its inputs, which the
engine hands ``check`` as ``olds``). It acts on nothing: ``create``, ``update`` and ``delete``
call no AWS (the offline plan runs ``create`` under mocks).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi.dynamic

from components.aws_account import AwsAccount
from components.cleanup.aws_calls import AwsCalls
from components.cleanup.self_contained import self_contained


@self_contained
class RegistrationBudgetProvider(AwsCalls, pulumi.dynamic.ResourceProvider):
    """Dynamic provider whose ``check`` holds the rule (see the module docstring).

    Pickled into the state and run from there, hence ``@self_contained``. The account settings
    of a call are made from that call's props and passed down (``_ssm``): nothing a call knows
    is kept on the object, which the provider host shares between concurrent calls.
    """

    #: A preview waits for this read: fewer tries than a destroy-time cleanup's.
    attempts: int = 3
    #: What the resource stores; a change of any of them is an update (never a replacement:
    #: nothing here is deleted).
    _keys = ("activationId", "activationName", "registrationLimit", "activationGeneration",
             "region", "hostNames", "hosts")

    # --- the engine's calls -------------------------------------------------------------------

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        from pulumi.dynamic import CheckFailure, CheckResult

        problem = self._bad_input(news) or self.verdict(olds, news)
        return CheckResult(news, [CheckFailure("", problem)] if problem else [])

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        from pulumi.dynamic import CreateResult

        return CreateResult(id_=f"ssm-registration-budget-{self._plain(props['activationId'])}",
                            outs=self._outs(props))

    def diff(self, _id: str, olds: dict[str, Any],
             news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        from pulumi.dynamic import DiffResult

        changed = any(self._plain(olds.get(k)) != self._plain(news.get(k))
                      for k in (*self._keys, *self._account_keys))
        # Stored anew at each change, so the next preview compares with this up's hosts.
        return DiffResult(changes=changed, replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any],
               news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        from pulumi.dynamic import UpdateResult

        return UpdateResult(outs=self._outs(news))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None

    # --- the rule -------------------------------------------------------------------------------

    def created_hosts(self, olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[str]:
        """The hosts ``news`` creates against ``olds``: a name not there before, or one whose
        fingerprint changed or is not known yet (it depends on something being replaced)."""
        names = [str(n) for n in self._plain(news.get("hostNames")) or []]
        fingerprints = self._plain(news.get("hosts"))
        before = self._plain(olds.get("hosts"))
        if not isinstance(fingerprints, dict):
            return sorted(names)  # not known at preview as a whole: every host counts
        before = before if isinstance(before, dict) else {}
        return sorted(n for n in names
                      if self._unknown(fingerprints.get(n)) or n not in before
                      or self._plain(before[n]) != self._plain(fingerprints.get(n)))

    def verdict(self, olds: Mapping[str, Any], news: Mapping[str, Any]) -> Optional[str]:
        """None when the activation can register every host the change creates, else the
        message that stops the change."""
        created = self.created_hosts(olds, news)
        if not created:
            return None  # nothing registers: no read, no call to AWS at every preview
        activation = self._plain(news.get("activationId"))
        limit = int(self._plain(news["registrationLimit"]))
        previous = self._plain(olds.get("activationId"))
        if self._unknown(activation) or (previous and previous != activation):
            # A new activation (unknown at preview, another id at up): all of its limit is left.
            if len(created) <= limit:
                return None
            return self._message(news, created, activation=None, used=0, limit=limit)
        region = self._plain(news["region"])
        found, why = self._read(region, activation, news, retry=bool(previous))
        if why is not None:
            if not previous:
                # First registration of this resource: the activation was either made in this
                # very update (its preview judged it new, above) or made before this resource
                # existed. Only the second needs the count; an unreadable one is let through
                # (docs/hybrid-nodes.md#activation-registrations).
                return None
            # An error page (a proxy's HTML) would bury the message: its start is enough.
            why = " ".join(why.split())[:200]
            return (f"{self._named(news)}: its registrations could not be read ({why}), and this "
                    f"change creates {self._hosts(created)}, each of which registers with it. "
                    f"Fix the credentials or the network and preview again, or start a new "
                    f"activation, which needs no read: {self._fix(news)}")
        if found is None:
            return (f"{self._named(news)} does not exist in {region} (deleted outside Pulumi?), "
                    f"and this change creates {self._hosts(created)} that would register with "
                    f"it. Run pulumi refresh, or start a new activation: {self._fix(news)}")
        if found.get("Expired"):
            return (f"{self._named(news)} expired ({found.get('ExpirationDate')}): "
                    f"{self._hosts(created)} of this change cannot register. Start a new "
                    f"activation: {self._fix(news)}")
        used = int(found.get("RegistrationsCount") or 0)
        limit = int(found.get("RegistrationLimit") or limit)
        if len(created) <= limit - used:
            return None
        return self._message(news, created, activation=activation, used=used, limit=limit)

    def _message(self, news: Mapping[str, Any], created: Sequence[str], activation: Any,
                 used: int, limit: int) -> str:
        left = max(0, limit - used)
        if activation is None:
            return (f"the new SSM activation {self._plain(news.get('activationName'))} allows "
                    f"{limit} registrations and this change creates {self._hosts(created)}: "
                    "raise its registration limit (stacks/layers/hybrid.py)")
        return (f"{self._named(news)} has {left} of its {limit} registrations left ({used} "
                f"used: SSM counts every registration made, a deregistered host's too), and "
                f"this change creates {self._hosts(created)}, each of which registers once. "
                f"Past the limit a host's registration fails inside nodeadm and it never joins. "
                f"Start a new activation first: {self._fix(news)}, then run pulumi up again")

    def _named(self, news: Mapping[str, Any]) -> str:
        return (f"SSM activation {self._plain(news.get('activationId'))} "
                f"({self._plain(news.get('activationName'))}, {self._plain(news.get('region'))})")

    def _hosts(self, created: Sequence[str]) -> str:
        noun = "hybrid host" if len(created) == 1 else "hybrid hosts"
        return f"{len(created)} {noun} ({', '.join(created)})"

    def _fix(self, news: Mapping[str, Any]) -> str:
        generation = int(self._plain(news.get("activationGeneration")) or 1)
        limit = int(self._plain(news.get("registrationLimit")))
        return (f"pulumi config set activationGeneration {generation + 1} (a new activation "
                f"with {limit} registrations; every hybrid host is re-pointed to it and "
                "replaced)")

    # --- SSM --------------------------------------------------------------------------------------

    def _read(self, region: str, activation_id: str, props: Mapping[str, Any],
              retry: bool) -> tuple[Optional[dict[str, Any]], Optional[str]]:
        """The activation as DescribeActivations lists it (None if it is not there), and why
        it could not be read (None when it could). ``retry``: this loop's retries; without
        them, one try."""
        try:
            # The stack's account settings, as every cleanup acts with them (aws_session.py):
            # its profile and roles, and the pinned account checked, with one refusal message.
            ssm = self._aws_client("ssm", region, self._account(dict(props)))
        except Exception as error:  # noqa: BLE001 - the wrong account, a profile that is gone
            return None, f"{type(error).__name__}: {error}"
        request = {"Filters": [{"FilterKey": "ActivationIds", "FilterValues": [activation_id]}]}
        if retry:
            page, why = self._aws_call(ssm.describe_activations, **request)
        else:
            try:
                page, why = ssm.describe_activations(**request), None
            except Exception as error:  # noqa: BLE001 - whatever it is, the read failed
                page, why = {}, f"{type(error).__name__}: {error}"
        if why is not None:
            return None, why
        for activation in page.get("ActivationList") or []:
            # The filter should already guarantee it; another activation's count is no answer.
            if activation.get("ActivationId") == activation_id:
                return activation, None
        return None, None


    # --- values -----------------------------------------------------------------------------------

    def _bad_input(self, news: Mapping[str, Any]) -> Optional[str]:
        limit = self._plain(news.get("registrationLimit"))
        number = isinstance(limit, (int, float)) and not isinstance(limit, bool)
        if not number or int(limit) != limit or not 1 <= limit <= 1000:
            # Numbers arrive as floats (the wire's): 6.0 is shown as 6.
            shown = f"{limit:g}" if number else repr(limit)
            return ("registrationLimit must be a whole number from 1 to 1000 (SSM's range), "
                    f"got {shown}")
        names = self._plain(news.get("hostNames"))
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            return f"hostNames must be a list of host names, got {names!r}"
        if not self._plain(news.get("region")):
            return "region must be set (the activation's region)"
        try:
            self._account_props(dict(news))
        except ValueError as error:
            return str(error)
        return None

    def _outs(self, props: Mapping[str, Any]) -> dict[str, Any]:
        return {**{k: self._plain(props.get(k)) for k in self._keys},
                **self._account_props(dict(props))}

    def _unknown(self, value: Any) -> bool:
        # What the provider host hands over for a value not known at preview.
        from pulumi.output import Unknown
        from pulumi.runtime.rpc import UNKNOWN

        return isinstance(value, Unknown) or value == UNKNOWN

    def _plain(self, value: Any) -> Any:
        # The engine hands a secret value over wrapped as {sig: <secret sig>, value: ...}.
        if isinstance(value, dict) and \
                value.get("4dabf18193072939515e22adb298388d") == "1b47061264138c4ac30d75fd1eb44270":
            return self._plain(value.get("value"))
        if isinstance(value, dict):
            return {k: self._plain(v) for k, v in value.items()}
        return value


class RegistrationBudget(pulumi.dynamic.Resource, module="cleanup", name="SsmRegistrationBudget"):
    """Refuses, at preview, a change that creates more of ``hosts`` than the activation has
    registrations left (components/cleanup/registration_budget.py). Make the hosts depend on
    it: then nothing is replaced before the check."""

    def __init__(self, name: str, *, activation_id: pulumi.Input[str], activation_name: str,
                 registration_limit: int, activation_generation: int, region: str,
                 hosts: Mapping[str, pulumi.Input[str]], account: Optional[AwsAccount] = None,
                 opts: Optional[pulumi.ResourceOptions] = None) -> None:
        """``hosts``: each host's name and fingerprint (what replaces its instance: its
        generation, components/hybrid_hosts.py). ``account``: the credentials the check reads
        the activation with (components/aws_account.py)."""
        super().__init__(RegistrationBudgetProvider(), name, {
            "activationId": activation_id, "activationName": activation_name,
            "registrationLimit": registration_limit,
            "activationGeneration": activation_generation, "region": region,
            # The names apart: a fingerprint not known at preview still counts as a host.
            "hostNames": sorted(hosts), "hosts": dict(hosts),
            **(account or AwsAccount()).cleanup_inputs()}, opts)
