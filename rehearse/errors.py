"""Why a run could not be made (exit 2), as opposed to a check that failed (exit 1)."""

from __future__ import annotations


class RunError(Exception):
    """The run could not be made: an unreachable cluster or AWS, a missing stack output, a layer
    not built. Its message is the one line the command prints."""


def status_code(error: BaseException) -> "int | None":
    """The HTTP status of an error from the cluster: lightkube's ApiError carries it in
    ``status.code``, the HTTP client's error in ``response.status_code``; None for others."""
    status = getattr(error, "status", None)
    if getattr(status, "code", None):
        return int(status.code)
    return getattr(getattr(error, "response", None), "status_code", None)


def first_line(error: BaseException) -> str:
    """``<ErrorType>: <first line of its message>``, for one-line reports."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
