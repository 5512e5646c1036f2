"""Answers that are not AWS's: an HTML page from a proxy, a captive portal or a wrong endpoint.

botocore hands such a page on whole (as a ClientError's message or inside a ResponseParserError)
and the audit would print it line by line. The page is turned into one line with its HTTP
status, the service and the operation, before botocore parses it."""

from __future__ import annotations

import html
import re
from typing import Any

#: The unique id the hook is registered under, so a client is hooked once.
HOOK_ID = "eks-hybrid-lab-html-answer"
_LINE_LIMIT = 120


class NotAnAwsAnswer(Exception):
    """An HTML page where AWS answers with XML or JSON."""

    def __init__(self, status: int, service: str, operation: str, line: str) -> None:
        super().__init__(f"HTTP {status} from {service} {operation}: {line} (an HTML page, not "
                         "an AWS answer: a proxy or a wrong endpoint in between)")
        self.status = status


def refuse_html_answers(client: Any) -> Any:
    """``client`` with the hook that raises NotAnAwsAnswer for an HTML answer. Not retried: a
    page in place of AWS's answer comes from what sits in between, which a retry does not
    change."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None:
        events.register("before-parse", _check_answer, unique_id=HOOK_ID)
    return client


def _is_html(response: dict) -> bool:
    """By the body, not the Content-Type: some endpoints (moto's server among them) label
    JSON text/html."""
    body = response.get("body")
    start = body.lstrip()[:15].lower() if isinstance(body, (bytes, bytearray)) else b""
    return start.startswith((b"<html", b"<!doctype html", b"<head", b"<body"))


def one_line(page: bytes) -> str:
    """The page's title, else its first line of text, shortened."""
    text = page.decode("utf-8", "replace")
    title = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    candidates = [title.group(1)] if title else []
    candidates += re.sub(r"<[^>]*>", "\n", text).splitlines()
    for candidate in candidates:
        line = " ".join(html.unescape(candidate).split())
        if line:
            return line if len(line) <= _LINE_LIMIT else line[:_LINE_LIMIT - 1] + "…"
    return "(an empty page)"


def _check_answer(operation_model: Any = None, response_dict: Any = None, **_: Any) -> None:
    if not response_dict or not _is_html(response_dict):
        return
    raise NotAnAwsAnswer(response_dict.get("status_code"),
                         operation_model.service_model.service_name, operation_model.name,
                         one_line(bytes(response_dict.get("body") or b"")))
