"""The activation check: how many registrations the stack's SSM hybrid activation has left.

SSM counts every registration made through an activation against its limit, and a deregistered
host gives none back (docs/hybrid-nodes.md#activation-registrations); each replacement of the
hybrid hosts (any edit of their join script) registers them all again. ``pulumi preview`` stops
a change the activation cannot register (components/cleanup/registration_budget.py); this says
ahead of it how many are used and left, and warns when fewer are left than one replacement of
every host needs.

The stack's activation is found by its name (pulumi-aws passes an activation's ``name`` to SSM
as ``DefaultInstanceName``: terraform-provider-aws internal/service/ssm/activation.go,
``resourceActivationCreate``), a server-side filter of DescribeActivations, and among those by
the stack's tag, which the program's provider puts on everything it creates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from ops.preflight.checks import CLIENT_CONFIG, PASS, WARN, Check, describe_error

NAME = "hybrid activation"
ACTION = "ssm:DescribeActivations"
BY_HAND = ("allow ssm:DescribeActivations for these credentials, or look by hand: aws ssm "
           "describe-activations --filters FilterKey=DefaultInstanceName,FilterValues=<name>")


@dataclass(frozen=True)
class ActivationNeed:
    region: str
    #: The activation's name (``<cluster>-hybrid-nodes``).
    name: str
    #: The limit a new activation of the stack gets (stacks/layers/hybrid.py).
    limit: int
    #: Hosts that register through it: a replacement of every host registers this many.
    hosts: int
    #: The stack's tag (key, value): an activation of that name without it is another stack's.
    owner_tag: tuple[str, str]
    #: The setting whose next value starts a new activation.
    generation_setting: str = "activationGeneration"
    generation: int = 1


def _listed(session: boto3.Session, need: ActivationNeed) -> list[dict[str, Any]]:
    ssm = session.client("ssm", region_name=need.region, config=CLIENT_CONFIG)
    request: dict[str, Any] = {
        "Filters": [{"FilterKey": "DefaultInstanceName", "FilterValues": [need.name]}]}
    found: list[dict[str, Any]] = []
    while True:
        page = ssm.describe_activations(**request)
        found += page.get("ActivationList") or []
        if not page.get("NextToken"):
            return found
        request["NextToken"] = page["NextToken"]


def _ours(activations: list[dict[str, Any]], need: ActivationNeed) -> list[dict[str, Any]]:
    """The stack's activations, oldest first: of its name, and not tagged as another stack's
    (one without the tag at all is taken as the stack's: its name is the stack's cluster's)."""
    key, value = need.owner_tag

    def owner(activation: dict[str, Any]) -> Any:
        return {t.get("Key"): t.get("Value") for t in activation.get("Tags") or []}.get(key)

    ours = [a for a in activations
            if a.get("DefaultInstanceName") == need.name and owner(a) in (value, None)]
    return sorted(ours, key=lambda a: str(a.get("CreatedDate") or ""))


def check_activation(session: boto3.Session, need: ActivationNeed) -> Check:
    """PASS with used/limit/left; WARN when fewer are left than the hosts (the next change that
    replaces them all stops at preview) or it has expired; PASS when there is none yet."""
    try:
        activations = _ours(_listed(session, need), need)
    except (ClientError, BotoCoreError) as exc:
        # A WARN whatever the error: pulumi preview judges the registrations itself, this is
        # the early word on them.
        why = describe_error(exc)
        return Check(NAME, WARN, f"not checked: {ACTION} failed ({why})", BY_HAND)
    except Exception as exc:  # noqa: BLE001 - a stand-in SSM that does not implement the call
        return Check(NAME, WARN, f"not checked: {ACTION} failed ({type(exc).__name__}: {exc})",
                     BY_HAND)
    hosts = f"{need.hosts} host{'s' if need.hosts != 1 else ''}"
    if not activations:
        return Check(NAME, PASS, f"{need.name}: none yet in {need.region}; the first pulumi up "
                                 f"creates it with {need.limit} registrations and registers "
                                 f"{hosts}, leaving {need.limit - need.hosts}")
    current = activations[-1]
    used = int(current.get("RegistrationsCount") or 0)
    limit = int(current.get("RegistrationLimit") or 0)
    left = max(0, limit - used)
    others = len(activations) - 1
    detail = (f"{need.name} ({current.get('ActivationId')}): {used} of {limit} registrations "
              f"used, {left} left for {hosts}"
              + (f" ({others} older activation{'s' if others != 1 else ''} of this name)"
                 if others else ""))
    fix = (f"pulumi config set {need.generation_setting} {need.generation + 1} (a new "
           f"activation with {need.limit} registrations; every hybrid host is replaced)")
    if current.get("Expired"):
        return Check(NAME, WARN, f"{detail}; it has EXPIRED: no host can register with it", fix)
    if left < need.hosts:
        return Check(NAME, WARN,
                     f"{detail}: a change that replaces every host (an edit of the join script, a "
                     "new Kubernetes version) stops at preview", fix)
    return Check(NAME, PASS, detail)


def stack_activation(cfg: Any) -> Optional[ActivationNeed]:
    """The activation a stack's preflight checks, or None when the stack stops below the hybrid
    layer (it makes none): `python -m ops.preflight` and `python -m rehearse preflight` alike."""
    return activation_need(cfg) if "hybrid" in cfg.layers else None


def activation_need(cfg: Any) -> ActivationNeed:
    """The check's inputs from the stack's config (stacks/config.LabConfig)."""
    from stacks.layers.hybrid import activation_name, registration_limit

    return ActivationNeed(region=cfg.region, name=activation_name(cfg),
                          limit=registration_limit(cfg),
                          hosts=cfg.hybrid_host_count,
                          owner_tag=next(iter(cfg.lab_tag.items())),
                          generation=cfg.activation_generation)

