"""One run's own page, ``report.html`` beside its report.md and report.json: self-contained
XHTML (rehearse.pages: no script, nothing fetched, every text escaped) with the run's charts
inline. What needs attention comes first — the verdict, the checks that failed, then those
not read — then those that passed, the numbers beside their reference, the charts, and last
the detail (notes, the report's own sections, the commands to see each check yourself),
folded where it is long: demo 2's report.md is some 270 lines.

It reads a report as report.json holds it, so it depends on no analysis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rehearse.pages import markdown_html
from rehearse.pages.html import (TIMES_ARE_UTC, checks_html, document, e, html_chart, inside,
                            numbers_html, short_times, text_html, to_act_on)

PAGE = "report.html"
#: Up to this many checks that passed are listed open; more are folded.
OPEN_UP_TO = 12


def _file(folder: Path, name: Any) -> Path | None:
    path = inside(folder, name)
    return path if path is not None and path.is_file() else None


def _verdict(report: dict[str, Any]) -> list[str]:
    checks = report.get("checks") or []
    counts = {s: sum(c.get("status") == s for c in checks) for s in ("FAIL", "NOT READ", "WARN", "SKIP")}
    # A warning passed: it is counted with the passes and named beside them.
    passed = sum(c.get("status") in ("PASS", "WARN") for c in checks)
    verdict = "PASS" if report.get("passed") else "FAIL"
    others = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    why = (" A check that was not read has not passed: the run did not reach it, or an earlier "
           "read failed." if counts["NOT READ"] else "")
    return [f"<p class=\"verdict\" data-verdict=\"{verdict}\"><strong class=\"{verdict}\">"
            f"{verdict}</strong>: {passed} of {len(checks)} checks passed"
            f"{f' ({others})' if others else ''}.{why}</p>"]


def _checks(report: dict[str, Any]) -> list[str]:
    checks = [c for c in report.get("checks") or [] if isinstance(c, dict)]
    first = to_act_on(checks)
    rest = [c for c in checks if c.get("status") in ("PASS", "SKIP")]
    out = []
    if first:
        out += ["<h2>Needs attention</h2>", "<div class=\"attention\">", *checks_html(first),
                "</div>"]
    if rest:
        words = f"{len(rest)} check{'s' if len(rest) != 1 else ''} passed or skipped"
        fold = " open=\"open\"" if len(rest) <= OPEN_UP_TO else ""
        out += ["<h2>Checks</h2>", f"<details class=\"passed\"{fold}><summary>{words}</summary>",
                *checks_html(rest, commands=False), "</details>"]
    return out


def _numbers(report: dict[str, Any]) -> list[str]:
    numbers = [m for m in report.get("measurements") or [] if isinstance(m, dict)]
    return ["<h2>Numbers</h2>", numbers_html(numbers, "reference")] if numbers else []


def _charts(report: dict[str, Any], folder: Path) -> list[str]:
    listed = [c for c in report.get("charts") or [] if isinstance(c, dict)]
    if not listed:
        return []
    out = ["<h2>Charts</h2>"]
    for n, chart in enumerate(listed):
        name = str(chart.get("name") or "chart")
        svg_path, png_path = _file(folder, chart.get("svg")), _file(folder, chart.get("png"))
        svg = svg_path.read_text(encoding="utf-8", errors="replace") if svg_path else None
        problem = "" if svg_path else f"its SVG {chart.get('svg')!s} is missing from this folder"
        links = [f"<a href=\"{e(p.name)}\">{kind}</a>" for p, kind in
                 ((svg_path, "SVG"), (png_path, "PNG")) if p is not None]
        out.append(html_chart(name, str(chart.get("title") or name), svg, problem, f"chart{n}-",
                              f"for slides: {' · '.join(links)}" if links else ""))
    return out


def _commands(report: dict[str, Any]) -> list[str]:
    """The commands behind the checks that passed (those to act on show theirs above)."""
    rows = [c for c in report.get("checks") or []
            if isinstance(c, dict) and c.get("command") and c.get("status") in ("PASS", "SKIP")]
    if not rows:
        return []
    items = "".join(f"<li>{text_html(c.get('name', '?'))}: <code>{e(c['command'])}</code></li>"
                    for c in rows)
    return ["<details class=\"commands\"><summary>See it yourself: the commands behind the "
            f"{len(rows)} checks that passed</summary><ul>{items}</ul></details>"]


def _detail(report: dict[str, Any], sections: str) -> list[str]:
    notes = [n for n in report.get("notes") or [] if isinstance(n, str)]
    body = []
    if notes:
        body.append("<ul class=\"notes\">" + "".join(f"<li>{text_html(n)}</li>" for n in notes)
                    + "</ul>")
    body += markdown_html.sections(sections) if sections.strip() else []
    body += _commands(report)
    return ["<h2>Detail</h2>", *body] if body else []


def html_page(report: dict[str, Any], folder: Path, sections: str = "") -> str:
    """The page of the run in ``folder`` (its charts are read from there); ``sections`` is
    the Markdown a report adds to report.md beyond its checks, numbers and notes."""
    title = str(report.get("title") or "Rehearsal run")
    meta = (f"Stack <code>{e(report.get('stack', '?'))}</code>, <code>python -m rehearse "
            f"{e(report.get('command', '?'))}</code>, started "
            f"{e(short_times(str(report.get('started', '?'))))}. {TIMES_ARE_UTC}")
    body = [f"<h1>{e(title)}</h1>", f"<p class=\"meta\">{meta}</p>", *_verdict(report),
            *_checks(report), *_numbers(report), *_charts(report, folder),
            *_detail(report, sections),
            "<p class=\"files\">The same as text: <a href=\"report.md\">report.md</a>, "
            "<a href=\"report.json\">report.json</a>.</p>"]
    return document(title, body)


def write(folder: Path, report: dict[str, Any], sections: str = "") -> Path:
    path = folder / PAGE
    path.write_text(html_page(report, folder, sections), encoding="utf-8")
    return path

