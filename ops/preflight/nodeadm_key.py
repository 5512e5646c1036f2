"""Can the pinned nodeadm still install with SSM? Its signing key's expiry against the clock.

`nodeadm install --credential-provider ssm` verifies the SSM installer with a key compiled into
nodeadm; after the key expires no host can join, whatever the account holds
(docs/hybrid-nodes.md#nodeadm). No AWS call: only the pin and today's date.
"""

from __future__ import annotations

import datetime
from typing import Callable

from components.nodeadm import NODEADM_VERSION, PIN_SOURCE, SSM_KEY_EXPIRES, SSM_KEY_WARN_DAYS
from ops.preflight.checks import FAIL, PASS, WARN, Check

NAME = "nodeadm SSM signing key"

Clock = Callable[[], datetime.datetime]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def check_nodeadm_ssm_key(now: datetime.datetime, version: str = NODEADM_VERSION,
                          expiries: dict[str, datetime.datetime] = SSM_KEY_EXPIRES,
                          warn_days: int = SSM_KEY_WARN_DAYS) -> Check:
    """PASS while the pinned release's key has more than ``warn_days`` left, WARN within them,
    FAIL once it has expired (or when the release's expiry is not recorded)."""
    fix = (f"raise {PIN_SOURCE} to a release whose internal/ssm/source.go carries a newer key, "
           "and record that key's expiry in SSM_KEY_EXPIRES (docs/hybrid-nodes.md#nodeadm)")
    expires = expiries.get(version)
    if expires is None:
        return Check(NAME, FAIL, f"nodeadm {version}: its SSM key's expiry is not recorded",
                     f"record it in SSM_KEY_EXPIRES in components/nodeadm.py, from the release's "
                     "internal/ssm/source.go (docs/hybrid-nodes.md#nodeadm)")
    left = expires - now
    when = f"{expires:%Y-%m-%d %H:%M} UTC"
    if left <= datetime.timedelta(0):
        return Check(NAME, FAIL, f"nodeadm {version}: its SSM key expired on {when}; "
                                 "`nodeadm install --credential-provider ssm` fails, so no host "
                                 "can join", fix)
    days = left.days
    detail = f"nodeadm {version}: its SSM key expires on {when}, in {days} days"
    if left <= datetime.timedelta(days=warn_days):
        return Check(NAME, WARN, f"{detail}; a host that installs nodeadm after that cannot "
                                 "join", fix)
    return Check(NAME, PASS, detail)
