"""What the HTML pages share (the summary page, rehearse.summary_page, and each run's page,
rehearse.run_page): escaping, the page's frame and style, texts as a reader should see them
(Markdown backticks as <code>, times to the second), and charts' SVG inlined only when it can
neither run nor fetch anything. Each page is XHTML that an HTML parser reads alike."""

from __future__ import annotations

import datetime
import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Iterable, Optional


SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
# So an inlined SVG is written as <svg xmlns="..."> rather than <ns0:svg>.
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60em; margin: 2em auto; padding: 0 1em;
  color: #212529; line-height: 1.4; }
.PASS, .READY { color: #1e7b34; } .FAIL, .NOT-READY, .INTERRUPTED, .FAILED-TO-FINISH,
.COULD-NOT-RUN { color: #b02a37; } .WARN, .NEVER-RUN, .NOT-RUN, .INCOMPLETE, .SKIPPED, .NOT-READ,
.SKIP { color: #8a6d00; }
table { border-collapse: collapse; margin: .5em 0; } td, th { border: 1px solid #dee2e6;
  padding: .2em .5em; vertical-align: top; text-align: left; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
figcaption { font-size: .9em; color: #6c757d; } .missing { color: #b02a37; }
code { background: #f1f3f5; padding: 0 .2em; border-radius: 3px; overflow-wrap: anywhere; }
.verdict { font-size: 1.3em; } details { margin: .5em 0; } summary { cursor: pointer; }
li { margin: .2em 0; } td.value { white-space: nowrap; }
/* A long token (an image digest, a node name) wraps rather than widening the page. */
li, p, summary { overflow-wrap: anywhere; } td { overflow-wrap: break-word; } .fix { margin: .2em 0 .8em 1.5em; }
"""
#: Said once on each page, so the times themselves stay short.
TIMES_ARE_UTC = "Times are UTC."


def inside(folder: Path, name: Any) -> Optional[Path]:
    """``folder / name`` when ``name`` is a relative path that stays in the folder: a report's
    file names are data, and a page links or inlines only what is the run's own."""
    if not isinstance(name, str) or not name:
        return None
    path = (folder / name).resolve()
    return path if path.is_relative_to(folder.resolve()) else None


def e(text: Any) -> str:
    """``text`` escaped for an element's text or an attribute's value."""
    return html.escape(str(text), quote=True)


def css_class(state: str) -> str:
    return state.replace(" ", "-")


def when(moment: datetime.datetime) -> str:
    """A moment to the second, in UTC (the page says once that times are UTC)."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


#: An RFC 3339 time in UTC as the runs write them (rehearse.run.record.iso, Kubernetes' times):
#: shown to the second. A time without its zone is left as written: it may not be UTC.
_UTC_TIME = re.compile(r"\b(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.\d+)?(?:Z|\+00:00)")


def short_times(text: str) -> str:
    return _UTC_TIME.sub(r"\1 \2", text)


def text_html(text: Any) -> str:
    """A check's, a note's or a measurement's text as HTML: escaped, its Markdown code spans
    (`kubectl ...`) as <code>, its UTC times to the second. A lone backtick stays a backtick."""
    parts = short_times(str(text)).split("`")
    if len(parts) % 2 == 0:
        # An odd count of backticks: the last one opens nothing.
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    return "".join(f"<code>{e(p)}</code>" if i % 2 else e(p) for i, p in enumerate(parts))


def document(title: str, body: Iterable[str]) -> str:
    """The page: XHTML with its style inline, nothing to fetch and nothing to run."""
    out = ["<!DOCTYPE html>", "<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">",
           f"<head><meta charset=\"utf-8\"/><title>{e(title)}</title><style>{STYLE}</style></head>",
           "<body>", *body, "</body>", "</html>"]
    return "\n".join(out) + "\n"


#: report.json's statuses a reader must act on, in the order to show them
#: (rehearse.run.report.STATUSES); the others (PASS, SKIP) come after.
ATTENTION = ("FAIL", "NOT READ", "WARN")


def said(status: str, seen: str) -> str:
    """A check's ``seen`` as shown after its status: a NOT READ check's reason starts "not read:"
    (so it reads alone, in report.json), which after "NOT READ:" would be said twice. (The
    statuses are rehearse.run.report's, spelt out: that module imports this one.)"""
    if status == "NOT READ" and seen.lower().startswith("not read: "):
        return seen[len("not read: "):]
    return seen


def to_act_on(checks: list[Any]) -> list[dict[str, Any]]:
    """The checks that failed, then those not read; a status the pages do not know is shown
    with them, never hidden among the passes."""
    checks = [c for c in checks if isinstance(c, dict)]
    return [c for s in ATTENTION for c in checks if c.get("status") == s] + \
        [c for c in checks if c.get("status") not in (*ATTENTION, "PASS", "SKIP")]


def failure_groups(checks: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Checks that share one fix, together where the first of them came; each check without
    a fix, or with a fix of its own, alone: a fix that applies to four gaps is said once,
    after the four."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for n, check in enumerate(checks):
        fix = str(check.get("fix") or "")
        groups.setdefault(fix if fix else ("no fix", n), []).append(check)
    return list(groups.values())


def measured(m: dict[str, Any]) -> str:
    """A measurement's value and unit, or a dash when it was not measured."""
    value = m.get("value")
    if value is None:
        return "—"
    shown = f"{value:g}" if isinstance(value, (int, float)) else str(value)
    return f"{shown} {m.get('unit', '')}".strip()


def numbers_html(numbers: list[dict[str, Any]], reference: str) -> str:
    """The measurements beside their reference (the column named ``reference``)."""
    rows = "".join(f"<tr><td>{text_html(m.get('name', ''))}</td><td class=\"value\">"
                   f"{e(measured(m))}</td><td>{text_html(m.get('reference', ''))}</td>"
                   f"<td>{text_html(m.get('note', ''))}</td></tr>" for m in numbers)
    return ("<table class=\"numbers\"><tr><th>measurement</th><th>this run</th>"
            f"<th>{e(reference)}</th><th>note</th></tr>{rows}</table>")


def _check_html(c: dict[str, Any], fix: bool, commands: bool) -> str:
    status = str(c.get("status", ""))
    fixed = f"<br/>Fix: {text_html(c['fix'])}" if fix and c.get("fix") else ""
    see = f"<br/>See it yourself: <code>{e(c['command'])}</code>" if commands and c.get("command") else ""
    return (f"<li data-status=\"{e(status)}\"><strong>{text_html(c.get('name', '?'))}</strong> — "
            f"<span class=\"{css_class(status)}\">{e(status)}</span>: "
            f"{text_html(said(status, str(c.get('seen', ''))))}"
            f"{fixed}{see}</li>")


def checks_html(checks: list[dict[str, Any]], *, commands: bool = True) -> list[str]:
    """Checks as a list; those that share a fix in a list of their own, the fix once after it."""
    out: list[str] = []
    items: list[str] = []
    for group in failure_groups(checks):
        if len(group) == 1:
            items.append(_check_html(group[0], True, commands))
            continue
        if items:
            out.append("<ul class=\"checks\">" + "".join(items) + "</ul>")
            items = []
        out += ["<ul class=\"checks\">" + "".join(_check_html(c, False, commands) for c in group)
                + "</ul>", f"<p class=\"fix\">Fix, for the {len(group)} above: "
                f"{text_html(group[0]['fix'])}</p>"]
    if items:
        out.append("<ul class=\"checks\">" + "".join(items) + "</ul>")
    return out


def html_chart(name: str, title: str, svg: Optional[str], problem: str, prefix: str,
               links: str = "") -> str:
    """A chart inline, its title once: the drawing holds it (rehearse.charts), so the caption
    carries only what is wrong, and ``links`` (markup); the figure's label names it for a
    screen reader."""
    markup, why = inline_svg(svg, prefix) if svg is not None else (None, "")
    problems = "; ".join(p for p in (problem, why) if p)
    if markup is None:
        return (f"<p class=\"missing\" data-chart=\"{e(name)}\">Chart {e(title)} not shown: "
                f"{e(problems)}</p>")
    caption = (f"<span class=\"missing\">{e(problems)}</span> " if problems else "") + links
    note = f"<figcaption>{caption}</figcaption>" if caption else ""
    return f"<figure data-chart=\"{e(name)}\" aria-label=\"{e(title)}\">{markup}{note}</figure>"


#: The SVG elements a chart may hold: what matplotlib's SVG backend writes, and shapes like
#: them. Anything else (HTML such as <p> or <iframe>, which a browser parsing the page as HTML
#: lifts out of the <svg>; <a>, <image>, <set>, <animate>, <foreignObject>, <script>) is refused.
_SVG_ELEMENTS = frozenset({
    "svg", "g", "defs", "path", "rect", "circle", "ellipse", "line", "polyline", "polygon",
    "text", "tspan", "clipPath", "use", "title", "desc", "symbol", "marker", "linearGradient",
    "radialGradient", "stop", "pattern", "mask", "style"})
#: matplotlib's one style rule (backend_svg), given to the root as presentation attributes: a
#: <style> inside inlined SVG applies to the whole page (``.FAIL{display:none}`` would hide the
#: failures), so no <style> is inlined.
_MATPLOTLIB_STYLE = {"stroke-linejoin": "round", "stroke-linecap": "butt"}
_MATPLOTLIB_STYLE_TEXT = "*{stroke-linejoin: round; stroke-linecap: butt}"
_URL = re.compile(r"url\(\s*['\"]?\s*([^)'\"\s]*)", re.IGNORECASE)


def _css_problem(value: str) -> Optional[str]:
    """Why a style text could reach outside the chart: an @import, an expression, or a url()
    that is not a reference to the chart's own ids."""
    lowered = value.lower()
    if "@import" in lowered or "expression(" in lowered:
        return "an @import or expression in its style"
    if any(not target.startswith("#") for target in _URL.findall(value)):
        return "a url() outside itself"
    return None


def inline_svg(text: str, prefix: str = "") -> tuple[Optional[str], str]:
    """(the SVG markup to inline, "") or (None, why not): it must parse as SVG and hold only SVG
    drawing elements (``_SVG_ELEMENTS``) — no script, event handler, foreign content, style
    sheet or link outside itself — so the page stays self-contained, runs nothing, and no chart
    can restyle the page. Its ids, and the references to them, get ``prefix``: charts drawn
    with the same settings reuse ids (a clip path's, a glyph's), and in one page a reference
    would find the first chart's."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as error:
        return None, f"its SVG does not parse ({error})"
    if root.tag != f"{{{SVG_NS}}}svg":
        return None, "its SVG file is not an <svg> document"
    # The drawing tool's metadata (RDF in other namespaces), not part of the chart.
    for parent in list(root.iter()):
        for child in list(parent):
            if child.tag == f"{{{SVG_NS}}}metadata":
                parent.remove(child)
    for parent in list(root.iter()):
        for child in list(parent):
            if child.tag != f"{{{SVG_NS}}}style":
                continue
            if " ".join((child.text or "").split()) != _MATPLOTLIB_STYLE_TEXT:
                return None, "its SVG holds a <style> sheet, which would apply to the whole page"
            parent.remove(child)
            for key, value in _MATPLOTLIB_STYLE.items():
                root.set(key, value)
    for element in root.iter():
        for key, value in element.attrib.items():
            name = key.rsplit("}", 1)[-1].lower()
            if name.startswith("on") or (name == "href" and not value.startswith("#")):
                return None, f"its SVG has a {name} attribute"
            problem = _css_problem(value)
            if problem:
                return None, f"its SVG has {problem} ({name})"
        namespace, _, local = str(element.tag)[1:].partition("}")
        if namespace != SVG_NS or local not in _SVG_ELEMENTS:
            return None, f"its SVG holds a <{local or element.tag}>"
    _prefix_ids(root, prefix)
    return ET.tostring(root, encoding="unicode"), ""


_URL_REF = re.compile(r"url\(\s*#([^)\s]+)\s*\)")


def _prefix_ids(root: ET.Element, prefix: str) -> None:
    ids = {e.get("id") for e in root.iter() if e.get("id")}
    if not prefix or not ids:
        return

    def refs(value: str) -> str:
        return _URL_REF.sub(lambda m: f"url(#{prefix}{m.group(1)})" if m.group(1) in ids
                            else m.group(0), value)

    for element in root.iter():
        for key, value in list(element.attrib.items()):
            name = key.rsplit("}", 1)[-1]
            if name == "id":
                element.set(key, prefix + value)
            elif name == "href" and value[1:] in ids:
                element.set(key, f"#{prefix}{value[1:]}")
            elif "url(" in value:
                element.set(key, refs(value))
        if str(element.tag).rsplit("}", 1)[-1] == "style" and element.text:
            element.text = refs(element.text)
