"""A point in time fixed when the resource is created, so a setting derived from "now" (an SSM
activation's expiry) does not change on every preview and replace what depends on it."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi.dynamic as dynamic

from components.cleanup.self_contained import self_contained


@self_contained
class ExpiryProvider(dynamic.ResourceProvider):
    """``expiresAt`` = creation time + ``days`` − ``marginMinutes``, stored in the state; a new
    ``generation`` (or a new ``days``) replaces the resource and so computes a new time."""

    def create(self, props):
        import datetime

        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        if props.get("createdAt"):
            # A caller-supplied clock: the offline plan freezes time so its runs repeat.
            now = datetime.datetime.strptime(props["createdAt"], "%Y-%m-%dT%H:%M:%SZ").replace(
                tzinfo=datetime.timezone.utc)
        margin = datetime.timedelta(minutes=int(props.get("marginMinutes") or 0))
        expires = now + datetime.timedelta(days=int(props["days"])) - margin
        outs = {
            "days": int(props["days"]),
            "marginMinutes": int(props.get("marginMinutes") or 0),
            "generation": int(props["generation"]),
            "createdAt": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "expiresAt": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        return dynamic.CreateResult(id_=f"expiry-g{outs['generation']}-{outs['createdAt']}", outs=outs)

    def diff(self, _id, olds, news):
        # The margin is left out on purpose: changing it must not replace an expiry (and with
        # it the activation and every host) that is already in place; it applies at renewal.
        changed = [k for k in ("days", "generation") if int(olds.get(k, -1)) != int(news[k])]
        return dynamic.DiffResult(changes=bool(changed), replaces=changed,
                                  delete_before_replace=False)

    def delete(self, _id, _props):
        return None


class Expiry(dynamic.Resource, module="time", name="Expiry"):
    """An RFC 3339 UTC timestamp ``days`` after creation (less ``margin_minutes``), renewed
    when ``generation`` changes."""

    expires_at: pulumi.Output[str]
    created_at: pulumi.Output[str]

    def __init__(self, name: str, days: int, generation: int, margin_minutes: int = 0,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(ExpiryProvider(), name,
                         {"days": days, "generation": generation, "marginMinutes": margin_minutes,
                          "expiresAt": None, "createdAt": ""}, opts)
        # A dynamic resource exposes each output under its property name.
        self.expires_at = getattr(self, "expiresAt")
        self.created_at = getattr(self, "createdAt")
