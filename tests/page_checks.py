"""What the HTML pages (the summary, each run's page) are held to, for both pages' tests: they
parse as XHTML and as HTML, and are self-contained — nothing runs, nothing is fetched, and the
only links are relative ones to files beside them that exist."""

from __future__ import annotations

import html.parser
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote, urlsplit

XHTML = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"
#: Elements that run or fetch something, or show another document.
FORBIDDEN = ("script", "link", "img", "iframe", "object", "embed", "image", "foreignObject",
             "audio", "video", "source", "base")
#: A time written to the microsecond (or any fraction of a second) with its date.
FRACTIONAL_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}\.\d+")


def parse(text: str) -> ET.Element:
    """The page as XHTML; an HTML parser reads it too."""
    html.parser.HTMLParser().feed(text)
    return ET.fromstring(text)


def links(page: ET.Element) -> list[str]:
    return [a.get("href") for a in page.iter(f"{XHTML}a") if a.get("href")]


def assert_self_contained(page: ET.Element, beside: Path) -> None:
    """No element that runs or fetches; no src, no event handler; an href only on an <a>, to
    a relative path that stays under ``beside`` and names a file there (or, inside a chart,
    to the chart's own ids)."""
    for element in page.iter():
        local = str(element.tag).rsplit("}", 1)[-1]
        assert local not in FORBIDDEN, local
        if local == "meta":
            assert element.get("http-equiv") is None, element.attrib
        for key, value in element.attrib.items():
            name = key.rsplit("}", 1)[-1].lower()
            assert not name.startswith("on") and name != "src", (local, name)
            if name == "href" and not (local != "a" and value.startswith("#")):
                assert element.tag == f"{XHTML}a", (local, value)
                assert_resolves(value, beside)


def assert_resolves(href: str, beside: Path) -> None:
    parts = urlsplit(href)
    assert not parts.scheme and not parts.netloc and not href.startswith("/"), href
    target = (beside / unquote(parts.path)).resolve()
    assert target.is_relative_to(beside.resolve()) and target.is_file(), href


def assert_no_fractional_times(text: str) -> None:
    found = FRACTIONAL_TIME.findall(text)
    assert not found, found[:3]
