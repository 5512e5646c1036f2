"""The API server's clock less this machine's, read off one answer (the one request the scale-in
forecast's clock window needs; the arithmetic is rehearse.models.clock_window's)."""

from __future__ import annotations

import datetime
from typing import Any, Callable, Optional

from rehearse.models.clock_window import offset_from_date


def measure_offset(kube: Any, clock: Callable[[], datetime.datetime]) -> Optional[dict]:
    """One ``GET /version``: the API server's clock less this machine's, bounded (ns), with what
    it was read from; None when the answer carries no ``Date``."""
    sent = clock()
    # Kube's raw client (httpx): lightkube's typed calls do not return the headers.
    response = kube._raw.get("/version")
    received = clock()
    date = response.headers.get("date")
    if not date:
        return None
    try:
        low, high = offset_from_date(date, sent, received)
    except (TypeError, ValueError):
        return None
    return {"date": date, "sent": sent.isoformat(), "received": received.isoformat(),
            "low_ns": low, "high_ns": high}
