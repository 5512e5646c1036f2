"""The summary (rehearse.pages.summary) as one self-contained page: XHTML with its charts' SVG inline
(no scripts, nothing fetched, every text escaped; its only links go to each run's own page,
rehearse.run_page, in the folders beside it), and the same as Markdown, which links the charts'
PNGs beside it. What both HTML pages share is rehearse.pages."""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any, Optional

from rehearse.pages.html import (TIMES_ARE_UTC, checks_html, css_class, document, e, failure_groups,
                            html_chart, inline_svg, measured, numbers_html, said, text_html,
                            to_act_on, when)
from rehearse.pages.summary import NEVER_RUN, OPEN_QUESTIONS, PARTS, Run, Step, Summary, gather


def _run_line(summary: Summary, run: Run) -> str:
    stale = " — older than a day: run it again before the talk" if summary.stale(run) else ""
    return f"started {when(run.started)} ({summary.age(run)}), folder {run.folder.name}{stale}"


def _never_line(summary: Summary, command: str) -> str:
    skipped = summary.skipped.get(command)
    why = f" (skipped this time: {skipped})" if skipped else ""
    return f"no run of this stack{why}: `python -m rehearse {command}`"


def _rehearsal_rows(summary: Summary) -> list[tuple[str, str, str]]:
    return [(s.command, s.state, s.detail) for s in summary.rehearsal or []]


def run_page_link(run: Run) -> tuple[str, str]:
    """(the link to the run's own page, relative to the summary, or "" when there is nothing
    to link; its words): a run older than the pages has report.md alone."""
    if (run.folder / "report.html").is_file():
        return f"{run.folder.name}/report.html", "the run's page"
    if (run.folder / "report.md").is_file():
        return f"{run.folder.name}/report.md", "report.md (a run older than the run pages has no page)"
    return "", "no report.html or report.md in its folder"


# --- HTML ---------------------------------------------------------------------------------

def _html_checks(run: Run) -> list[str]:
    # The failures, and the checks not read: a run with one has not passed either.
    shown = to_act_on(run.report.get("checks") or [])
    out = ["<div class=\"failures\">", *checks_html(shown), "</div>"] if shown else []
    if run.state not in ("PASS", "FAIL") and run.report.get("notes"):
        out.append("<ul class=\"notes\">" + "".join(f"<li>{text_html(n)}</li>"
                                                   for n in run.report["notes"]) + "</ul>")
    return out


def _html_numbers(run: Run) -> list[str]:
    numbers = run.report.get("measurements") or []
    return [numbers_html(numbers, "the demo guide's")] if numbers else []


def _html_command(summary: Summary, command: str) -> list[str]:
    run = summary.latest.get(command)
    state = run.state if run else NEVER_RUN
    out = [f"<div class=\"command\" data-command=\"{e(command)}\" data-state=\"{e(state)}\">",
           f"<h3><code>python -m rehearse {e(command)}</code>: "
           f"<span class=\"{css_class(state)}\">{e(state)}</span></h3>"]
    if run is None:
        out.append(f"<p class=\"NEVER-RUN\">{text_html(_never_line(summary, command))}</p>")
    else:
        href, words = run_page_link(run)
        link = (f"<a class=\"run-page\" href=\"{e(href)}\">{e(words)}</a>" if href
                else f"<span class=\"missing\">{e(words)}</span>")
        out.append(f"<p>{e(run.report.get('title', ''))}: {e(_run_line(summary, run))} — {link}</p>")
        # Each chart's ids prefixed by the command and the chart's place: unique in the page.
        slug = re.sub(r"[^A-Za-z0-9]+", "-", command)
        out += _html_checks(run) + _html_numbers(run) + [
            html_chart(c.name, c.title, c.svg, c.problem, f"{slug}-{n}-")
            for n, c in enumerate(run.charts)]
    return out + ["</div>"]


def html_page(summary: Summary) -> str:
    title = f"Rehearsal summary: stack {summary.stack}"
    out = [f"<h1>{e(title)}</h1>",
           f"<p>Written {e(when(summary.now))} from the latest run of each command in "
           f"<code>{e(summary.root)}</code>. {TIMES_ARE_UTC}</p>", "<h2>Checklist</h2>",
           "<ul class=\"checklist\">"]
    for part in PARTS:
        state = summary.readiness(part)
        out.append(f"<li data-part=\"{e(part.title)}\"><strong>{e(part.title)}</strong>: "
                   f"<span class=\"{css_class(state)}\">{e(state)}</span> — {e(part.what)}</li>")
    out.append("</ul>")
    never = summary.never_run()
    out.append("<h2>Never run</h2>")
    out.append("<ul class=\"never-run\">" + "".join(
        f"<li data-command=\"{e(c)}\">{text_html(_never_line(summary, c))}</li>" for c in never)
        + "</ul>" if never else "<p>Every command of the runbook has a run.</p>")
    if summary.unreadable:
        out.append("<h2>Folders without a readable report</h2><ul>" +
                   "".join(f"<li>{text_html(u)}</li>" for u in summary.unreadable) + "</ul>")
    if summary.rehearsal is not None:
        rows = "".join(f"<tr data-step=\"{e(c)}\"><td><code>{e(c)}</code></td>"
                       f"<td class=\"{css_class(s)}\">{e(s)}</td><td>{text_html(d)}</td></tr>"
                       for c, s, d in _rehearsal_rows(summary))
        out.append("<h2>This rehearsal</h2><table class=\"rehearsal\"><tr><th>step</th>"
                   f"<th>result</th><th>detail</th></tr>{rows}</table>")
    for part in summary.parts():
        if part is OPEN_QUESTIONS and not any(c in summary.latest for c in part.commands):
            continue
        out += [f"<h2>{e(part.title)}</h2>", f"<p>{e(part.what)}</p>"]
        for command in part.commands:
            out += _html_command(summary, command)
    return document(title, out)


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
    href, words = run_page_link(run)
    link = f"[{_md(words)}]({href})" if href else _md(words)
    out += [f"{_md(run.report.get('title', ''))}: {_md(_run_line(summary, run))} — {link}", ""]
    shown = to_act_on(run.report.get("checks") or [])
    for group in failure_groups(shown):
        for c in group:
            out.append(f"- **{_md(c.get('name', '?'))}** — {_md(c.get('status', '?'))}: "
                       f"{_md(said(str(c.get('status', '')), str(c.get('seen', ''))))}")
            if c.get("fix") and len(group) == 1:
                out.append(f"  - Fix: {_md(c['fix'])}")
            if c.get("command"):
                out.append(f"  - See it yourself: `{_md(c['command'])}`")
        if len(group) > 1 and group[0].get("fix"):
            out += ["", f"Fix, for the {len(group)} above: {_md(group[0]['fix'])}", ""]
    if run.state not in ("PASS", "FAIL"):
        out += [f"- {_md(n)}" for n in run.report.get("notes") or []]
    if shown or run.state not in ("PASS", "FAIL"):
        out.append("")
    numbers = run.report.get("measurements") or []
    if numbers:
        out += ["| measurement | this run | the demo guide's | note |", "|---|---|---|---|"]
        out += [f"| {_md(m.get('name', ''))} | {_md(measured(m))} | {_md(m.get('reference', ''))} | "
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
           f"Written {when(summary.now)} from the latest run of each command in `{summary.root}`. "
           f"{TIMES_ARE_UTC}",
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
