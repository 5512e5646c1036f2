"""Facts about EKS Kubernetes versions: which ones EKS offers, and when each one's standard
support ends (see ``docs/eks-support.md`` for the sources).

A version is in standard support for 14 months after EKS releases it, then in extended support
for 12 more. The control plane costs $0.10 an hour in standard support and $0.60 in extended
support. ``aws.eks.Cluster`` without an ``upgrade_policy`` gets ``supportType: EXTENDED`` (the
EKS API's default), so a lab left up past the end date would quietly cost six times as much;
the lab sets ``STANDARD`` instead, under which EKS upgrades the control plane to the next
version at the end of standard support rather than billing extended support.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Optional

#: The ``upgrade_policy.support_type`` the lab creates clusters with.
SUPPORT_TYPE = "STANDARD"

#: End of EKS standard support per minor version. None: the version is newer than every dated
#: one, released on EKS after 1.35 (2026-01-28), so its 14 months end after 1.35's; its exact
#: date is not recorded here. The one place to move when EKS adds or retires a version.
STANDARD_SUPPORT_ENDS: dict[str, Optional[datetime.date]] = {
    "1.32": datetime.date(2026, 3, 23),
    "1.33": datetime.date(2026, 7, 29),
    "1.34": datetime.date(2026, 12, 2),
    "1.35": datetime.date(2027, 3, 27),
    "1.36": None,
}

#: Control plane prices per hour (EKS pricing page): the same in every commercial region.
STANDARD_SUPPORT_USD_PER_HOUR = 0.10
EXTENDED_SUPPORT_USD_PER_HOUR = 0.60


@dataclass(frozen=True)
class SupportWindow:
    version: str
    #: None: not recorded (the newest version; it ends after every dated one).
    standard_ends: Optional[datetime.date]

    def ends_within(self, day: datetime.date, days: int = 0) -> bool:
        """Standard support is over by ``days`` after ``day`` (the end date itself counts as
        over; ``days=0``: it is over on ``day``)."""
        return (self.standard_ends is not None
                and self.standard_ends <= day + datetime.timedelta(days=days))

    def describe(self) -> str:
        if self.standard_ends is None:
            latest = max(d for d in STANDARD_SUPPORT_ENDS.values() if d is not None)
            return (f"{self.version} in standard support (end date not recorded; after "
                    f"{latest.isoformat()})")
        return f"{self.version} in standard support until {self.standard_ends.isoformat()}"


def support_window(version: str) -> SupportWindow:
    """Raises KeyError for a version EKS does not offer for new clusters."""
    return SupportWindow(version, STANDARD_SUPPORT_ENDS[version])


def offered_versions() -> tuple[str, ...]:
    return tuple(STANDARD_SUPPORT_ENDS)


def in_standard_support(day: datetime.date, days: int = 0) -> list[str]:
    """The versions still in standard support ``days`` after ``day``."""
    return [v for v in offered_versions() if not support_window(v).ends_within(day, days)]
