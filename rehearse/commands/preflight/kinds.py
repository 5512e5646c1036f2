"""What `python -m rehearse preflight` records: one event per check of ops.preflight (replays
read it, so its value never changes)."""

TITLE = "the pre-check: the account and this machine can hold the lab (read-only)"
CHECKED = "preflight.check"
