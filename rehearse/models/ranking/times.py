"""Kubernetes times (metav1.Time, RFC 3339 to the nanosecond) as the controller compares them:
integers of nanoseconds since the epoch, exactly (a datetime keeps only microseconds).
rehearse.run.record.parse_time is another thing: a recorded ISO time -> datetime."""

from __future__ import annotations

import calendar
import datetime
import re
from typing import Any, Optional

NS = 10**9
#: Go's zero time.Time (0001-01-01T00:00:00Z), which metav1.Time serializes when it is unset.
_GO_ZERO_NS = -62135596800 * NS

_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
                      r"([Zz]|[+-]\d{2}:\d{2})")


def kube_time_ns(value: Any) -> Optional[int]:
    """An RFC 3339 time (or an aware datetime) -> nanoseconds since the epoch, exactly; None for
    an unset time (absent, null, empty, or Go's zero time), which the rules treat as zero."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        ns = datetime_ns(value)
    else:
        match = _RFC3339.fullmatch(str(value).strip())
        if not match:
            raise ValueError(f"{value!r} is not an RFC 3339 time")
        year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
        digits, zone = match.group(7) or "", match.group(8)
        # datetime validates the calendar (month 13, second 61 and the like).
        moment = datetime.datetime(year, month, day, hour, minute, second)
        offset = 0
        if zone not in ("Z", "z"):
            sign = 1 if zone[0] == "+" else -1
            offset = sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
        seconds = calendar.timegm(moment.timetuple()) - offset
        ns = seconds * NS + int(digits[:9].ljust(9, "0"))
    return None if ns == _GO_ZERO_NS else ns


def datetime_ns(moment: datetime.datetime) -> int:
    """An aware datetime (a naive one is taken as UTC) -> nanoseconds since the epoch."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * NS + delta.microseconds * 1000


def format_ns(ns: int) -> str:
    seconds, rest = divmod(ns, NS)
    moment = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{rest:09d}".rstrip("0") if rest else "") + "Z"
