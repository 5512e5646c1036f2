"""The summary (rehearse.summary) as one self-contained page: XHTML with its charts' SVG inline
(no scripts, no links out, every text escaped), and the same as Markdown, which links the
charts' PNGs beside it."""

from __future__ import annotations

import datetime
import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Optional

from rehearse.record import iso
from rehearse.summary import NEVER_RUN, OPEN_QUESTIONS, PARTS, Chart, Run, Step, Summary, gather

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
# So an inlined SVG is written as <svg xmlns="..."> rather than <ns0:svg>.
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60em; margin: 2em auto; color: #212529; }
.PASS, .READY { color: #1e7b34; } .FAIL, .NOT-READY, .INTERRUPTED, .FAILED-TO-FINISH,
.COULD-NOT-RUN { color: #b02a37; } .NEVER-RUN, .NOT-RUN, .INCOMPLETE, .SKIPPED { color: #8a6d00; }
table { border-collapse: collapse; } td, th { border: 1px solid #dee2e6; padding: .2em .5em; }
figure svg { max-width: 100%; height: auto; } .missing { color: #b02a37; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _cls(state: str) -> str:
    return state.replace(" ", "-")


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


def _value(m: dict[str, Any]) -> str:
    value = m.get("value")
    if value is None:
        return "—"
    shown = f"{value:g}" if isinstance(value, (int, float)) else str(value)
    return f"{shown} {m.get('unit', '')}".strip()


def _run_line(summary: Summary, run: Run) -> str:
    stale = " — older than a day: run it again before the talk" if summary.stale(run) else ""
    return f"started {iso(run.started)} ({summary.age(run)}), folder {run.folder.name}{stale}"


def _never_line(summary: Summary, command: str) -> str:
    skipped = summary.skipped.get(command)
    why = f" (skipped this time: {skipped})" if skipped else ""
    return f"no run of this stack{why}: `python -m rehearse {command}`"


def _rehearsal_rows(summary: Summary) -> list[tuple[str, str, str]]:
    return [(s.command, s.state, s.detail) for s in summary.rehearsal or []]


# --- HTML ---------------------------------------------------------------------------------

def _html_checks(run: Run) -> list[str]:
    out = []
    if run.failures:
        out.append("<ul class=\"failures\">")
        for c in run.failures:
            fix = f"<br/>Fix: {_e(c['fix'])}" if c.get("fix") else ""
            see = f"<br/>See it yourself: <code>{_e(c['command'])}</code>" if c.get("command") else ""
            out.append(f"<li><strong>{_e(c.get('name', '?'))}</strong> — FAIL: "
                       f"{_e(c.get('seen', ''))}{fix}{see}</li>")
        out.append("</ul>")
    if run.state not in ("PASS", "FAIL") and run.report.get("notes"):
        out.append("<ul class=\"notes\">" + "".join(f"<li>{_e(n)}</li>" for n in run.report["notes"])
                   + "</ul>")
    return out


def _html_numbers(run: Run) -> list[str]:
    numbers = run.report.get("measurements") or []
    if not numbers:
        return []
    rows = "".join(f"<tr><td>{_e(m.get('name', ''))}</td><td>{_e(_value(m))}</td>"
                   f"<td>{_e(m.get('reference', ''))}</td><td>{_e(m.get('note', ''))}</td></tr>"
                   for m in numbers)
    return ["<table class=\"numbers\"><tr><th>measurement</th><th>this run</th>"
            f"<th>the demo guide's</th><th>note</th></tr>{rows}</table>"]


def _html_chart(chart: Chart, prefix: str) -> str:
    markup, why = inline_svg(chart.svg, prefix) if chart.svg is not None else (None, "")
    problems = "; ".join(p for p in (chart.problem, why) if p)
    if markup is None:
        return (f"<p class=\"missing\" data-chart=\"{_e(chart.name)}\">Chart {_e(chart.title)} "
                f"not shown: {_e(problems)}</p>")
    note = f"<br/><span class=\"missing\">{_e(problems)}</span>" if problems else ""
    return (f"<figure data-chart=\"{_e(chart.name)}\">{markup}<figcaption>{_e(chart.title)}"
            f"{note}</figcaption></figure>")


def _html_command(summary: Summary, command: str) -> list[str]:
    run = summary.latest.get(command)
    state = run.state if run else NEVER_RUN
    out = [f"<div class=\"command\" data-command=\"{_e(command)}\" data-state=\"{_e(state)}\">",
           f"<h3><code>python -m rehearse {_e(command)}</code>: "
           f"<span class=\"{_cls(state)}\">{_e(state)}</span></h3>"]
    if run is None:
        out.append(f"<p class=\"NEVER-RUN\">{_e(_never_line(summary, command))}</p>")
    else:
        out.append(f"<p>{_e(run.report.get('title', ''))}: {_e(_run_line(summary, run))}</p>")
        # Each chart's ids prefixed by the command and the chart's place: unique in the page.
        slug = re.sub(r"[^A-Za-z0-9]+", "-", command)
        out += _html_checks(run) + _html_numbers(run) + [
            _html_chart(c, f"{slug}-{n}-") for n, c in enumerate(run.charts)]
    return out + ["</div>"]


def html_page(summary: Summary) -> str:
    title = f"Rehearsal summary: stack {summary.stack}"
    out = ["<!DOCTYPE html>", "<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">",
           f"<head><meta charset=\"utf-8\"/><title>{_e(title)}</title><style>{STYLE}</style></head>",
           "<body>", f"<h1>{_e(title)}</h1>",
           f"<p>Written {_e(iso(summary.now))} from the latest run of each command in "
           f"<code>{_e(summary.root)}</code>.</p>", "<h2>Checklist</h2>", "<ul class=\"checklist\">"]
    for part in PARTS:
        state = summary.readiness(part)
        out.append(f"<li data-part=\"{_e(part.title)}\"><strong>{_e(part.title)}</strong>: "
                   f"<span class=\"{_cls(state)}\">{_e(state)}</span> — {_e(part.what)}</li>")
    out.append("</ul>")
    never = summary.never_run()
    out.append("<h2>Never run</h2>")
    out.append("<ul class=\"never-run\">" + "".join(
        f"<li data-command=\"{_e(c)}\">{_e(_never_line(summary, c))}</li>" for c in never)
        + "</ul>" if never else "<p>Every command of the runbook has a run.</p>")
    if summary.unreadable:
        out.append("<h2>Folders without a readable report</h2><ul>" +
                   "".join(f"<li>{_e(u)}</li>" for u in summary.unreadable) + "</ul>")
    if summary.rehearsal is not None:
        rows = "".join(f"<tr data-step=\"{_e(c)}\"><td><code>{_e(c)}</code></td>"
                       f"<td class=\"{_cls(s)}\">{_e(s)}</td><td>{_e(d)}</td></tr>"
                       for c, s, d in _rehearsal_rows(summary))
        out.append("<h2>This rehearsal</h2><table class=\"rehearsal\"><tr><th>step</th>"
                   f"<th>result</th><th>detail</th></tr>{rows}</table>")
    for part in summary.parts():
        if part is OPEN_QUESTIONS and not any(c in summary.latest for c in part.commands):
            continue
        out += [f"<h2>{_e(part.title)}</h2>", f"<p>{_e(part.what)}</p>"]
        for command in part.commands:
            out += _html_command(summary, command)
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


# --- Markdown -----------------------------------------------------------------------------

def _md(text: Any) -> str:
    """One table cell or list item: no line breaks, no unescaped pipes."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _md_command(summary: Summary, command: str) -> list[str]:
    run = summary.latest.get(command)
    state = run.state if run else NEVER_RUN
    out = [f"### `python -m rehearse {command}`: {state}", ""]
    if run is None:
        return out + [_md(_never_line(summary, command)), ""]
    out += [f"{_md(run.report.get('title', ''))}: {_md(_run_line(summary, run))}", ""]
    for c in run.failures:
        out.append(f"- **{_md(c.get('name', '?'))}** — FAIL: {_md(c.get('seen', ''))}")
        if c.get("fix"):
            out.append(f"  - Fix: {_md(c['fix'])}")
        if c.get("command"):
            out.append(f"  - See it yourself: `{_md(c['command'])}`")
    if run.state not in ("PASS", "FAIL"):
        out += [f"- {_md(n)}" for n in run.report.get("notes") or []]
    if run.failures or run.state not in ("PASS", "FAIL"):
        out.append("")
    numbers = run.report.get("measurements") or []
    if numbers:
        out += ["| measurement | this run | the demo guide's | note |", "|---|---|---|---|"]
        out += [f"| {_md(m.get('name', ''))} | {_md(_value(m))} | {_md(m.get('reference', ''))} | "
                f"{_md(m.get('note', ''))} |" for m in numbers]
        out.append("")
    for chart in run.charts:
        why = "" if chart.svg is None else inline_svg(chart.svg)[1]
        problems = "; ".join(p for p in (chart.problem, why) if p)
        if chart.png:
            out.append(f"![{_md(chart.title)}]({chart.png})")
        if problems:
            out.append(f"Chart {_md(chart.title)}: {_md(problems)}.")
        out.append("")
    return out


def markdown_page(summary: Summary) -> str:
    out = [f"# Rehearsal summary: stack `{summary.stack}`", "",
           f"Written {iso(summary.now)} from the latest run of each command in `{summary.root}`.",
           "", "## Checklist", ""]
    for part in PARTS:
        state = summary.readiness(part)
        box = "[x]" if state == "READY" else "[ ]"
        out.append(f"- {box} **{part.title}**: {state} — {part.what}")
    out += ["", "## Never run", ""]
    never = summary.never_run()
    out += [f"- `{c}`: {_md(_never_line(summary, c))}" for c in never] or \
        ["Every command of the runbook has a run."]
    out.append("")
    if summary.unreadable:
        out += ["## Folders without a readable report", ""] + \
               [f"- {_md(u)}" for u in summary.unreadable] + [""]
    if summary.rehearsal is not None:
        out += ["## This rehearsal", "", "| step | result | detail |", "|---|---|---|"]
        out += [f"| `{c}` | {s} | {_md(d)} |" for c, s, d in _rehearsal_rows(summary)] + [""]
    for part in summary.parts():
        if part is OPEN_QUESTIONS and not any(c in summary.latest for c in part.commands):
            continue
        out += [f"## {part.title}", "", part.what, ""]
        for command in part.commands:
            out += _md_command(summary, command)
    return "\n".join(out).rstrip("\n") + "\n"


def write(root: Path, stack: str, now: datetime.datetime, *, skipped: Optional[dict[str, str]] = None,
          rehearsal: Optional[list[Step]] = None) -> tuple[Path, Path]:
    """Gather and write ``<stack>-summary.html`` and ``<stack>-summary.md`` under ``root``."""
    summary = gather(root, stack, now)
    summary.skipped = dict(skipped or {})
    summary.rehearsal = rehearsal
    root.mkdir(parents=True, exist_ok=True)
    html_path, md_path = root / f"{stack}-summary.html", root / f"{stack}-summary.md"
    html_path.write_text(html_page(summary), encoding="utf-8")
    md_path.write_text(markdown_page(summary), encoding="utf-8")
    return html_path, md_path
