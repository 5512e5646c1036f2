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


def api_failure(error: BaseException) -> "dict | None":
    """What the API server said when it refused a request: ``{"code", "reason", "message"}`` from
    the ``Status`` object it answers with (lightkube raises it as ApiError when the content type
    is exactly ``application/json``, and passes httpx's HTTPStatusError through otherwise, with
    the body unread as a Status). None for an error that is not an HTTP answer (a timeout, a
    refused connection), which the caller should let through."""
    import json

    status = getattr(error, "status", None)
    if getattr(status, "code", None):
        return {"code": int(status.code), "reason": getattr(status, "reason", None) or "",
                "message": getattr(status, "message", None) or ""}
    response = getattr(error, "response", None)
    code = getattr(response, "status_code", None)
    if not code:
        return None
    try:
        body = json.loads(response.text)
    except (ValueError, AttributeError, TypeError):
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return {"code": int(body.get("code") or code), "reason": body.get("reason") or "",
                "message": body.get("message") or ""}
    text = (getattr(response, "text", "") or "").strip()
    return {"code": int(code), "reason": "", "message": text.splitlines()[0][:300] if text else ""}
