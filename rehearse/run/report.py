"""What a run found: checks (PASS/FAIL with what was seen, the fix, and the command to see it
yourself) and measurements (beside the demo guide's figure, docs/demo-guide.md), rendered as ``report.md`` and
``report.json`` (versioned), with the run's charts (rehearse.charts) beside them and the run's
own page, ``report.html`` (rehearse.run_page), which shows them inline."""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from rehearse.pages import run_page
from rehearse.pages.html import said

#: 2: ``charts`` lists the charts written beside the report (1 had none, and demo 2's
#: ``chart``).
REPORT_VERSION = 2
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
#: A check that passed with something the presenter should know before going on (preflight's
#: warnings): it does not fail the run, and it is said once, as its own verdict.
WARN = "WARN"
#: A check whose input was never read: the run ended before it (interrupted, failed part-way)
#: or an earlier read failed. Not a verdict on the cluster, so it carries no fix about the
#: cluster — its ``seen`` says why it was not read — and a run with one has not passed.
NOT_READ = "NOT READ"
#: The statuses a check may have, in the order a reader should see them.
STATUSES = (FAIL, NOT_READ, WARN, PASS, SKIP)



@dataclass(frozen=True)
class Check:
    name: str
    status: str
    seen: str
    #: What to do about a FAIL.
    fix: str = ""
    #: The kubectl or aws command that shows the same thing.
    command: str = ""


@dataclass(frozen=True)
class Measurement:
    name: str
    value: Optional[float]
    unit: str
    #: The figure it is compared with (the demo guide's or AWS's, docs/demo-guide.md), as text.
    reference: str = ""
    note: str = ""


@dataclass(frozen=True)
class Chart:
    """A picture of what the analysis found, drawn by rehearse.charts (the module that draws
    ``name``) from ``data``: plain values the report's own tables were made from."""

    #: The files' stem: ``<name>.svg`` and ``<name>.png`` in the run folder.
    name: str
    title: str
    data: dict = field(default_factory=dict)

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "title": self.title, "svg": f"{self.name}.svg",
                "png": f"{self.name}.png"}


@dataclass
class Report:
    command: str
    stack: str
    started: str
    title: str
    checks: list[Check] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    #: Things a reader should know that are neither checks nor numbers.
    notes: list[str] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.status not in (FAIL, NOT_READ) for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    def to_json(self) -> dict[str, Any]:
        return {"version": REPORT_VERSION, "command": self.command, "stack": self.stack,
                "started": self.started, "title": self.title, "passed": self.passed,
                "checks": [asdict(c) for c in self.checks],
                "measurements": [asdict(m) for m in self.measurements],
                "notes": list(self.notes), "charts": [c.to_json() for c in self.charts]}

    def to_markdown(self) -> str:
        lines = [f"# {self.title}", "",
                 f"Stack `{self.stack}`, `python -m rehearse {self.command}`, started {self.started}. "
                 f"Result: **{'PASS' if self.passed else 'FAIL'}** "
                 f"({sum(c.status in (PASS, WARN) for c in self.checks)} of {len(self.checks)} "
                 "checks passed).",
                 ""]
        for c in self.charts:
            lines += [f"![{c.title}]({c.name}.png)", "", f"*{c.title}* ([SVG for slides]({c.name}.svg))", ""]
        if self.measurements:
            lines += ["## Numbers", "", "| measurement | value | reference | note |",
                      "|---|---|---|---|"]
            for m in self.measurements:
                value = "—" if m.value is None else f"{m.value:g} {m.unit}"
                lines.append(f"| {m.name} | {value} | {m.reference} | {m.note} |")
            lines.append("")
        lines += ["## Checklist", ""]
        for c in self.checks:
            box = {PASS: "[x]", WARN: "[!]", FAIL: "[ ]", SKIP: "[-]", NOT_READ: "[?]"}[c.status]
            lines.append(f"- {box} **{c.name}** — {c.status}: {said(c.status, c.seen)}")
            if c.status in (FAIL, WARN) and c.fix:
                lines.append(f"  - Fix: {c.fix}")
            if c.command:
                lines.append(f"  - See it yourself: `{c.command}`")
        if self.notes:
            lines += ["", "## Notes", ""] + [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def own_sections(self) -> str:
        """The Markdown a report of a kind adds to report.md (demo 2's scenario tables, the
        throughput comparison), without what every report writes: the run's page
        (rehearse.run_page) renders those from report.json, and these as they are."""
        base, full = Report.to_markdown(self).splitlines(), self.to_markdown().splitlines()
        added = [line for tag, _, _, j1, j2 in
                 difflib.SequenceMatcher(None, base, full, autojunk=False).get_opcodes()
                 if tag in ("insert", "replace") for line in full[j1:j2] + [""]]
        return "\n".join(added).strip("\n")

    def write(self, folder: Path) -> None:
        """report.json and report.md first, then the charts, then the run's page (report.html,
        which inlines them): a chart that cannot be drawn, or a Ctrl-C while the plotting
        library loads and draws (a second or so), must not cost the report of a run that may
        already have changed the lab. A chart that failed is left out of the report with a
        note; on Ctrl-C the report says which were not drawn, and the interrupt goes on."""
        self._write_files(folder, page=not self.charts)
        if not self.charts:
            return
        drawn: list[Chart] = []
        failed: list[str] = []
        try:
            # Imported here: a report without charts never loads the plotting library.
            from rehearse import charts

            for chart in self.charts:
                try:
                    charts.write(folder, chart.name, chart.title, chart.data)
                except Exception as error:  # noqa: BLE001 a drawing defect costs one picture
                    failed.append(f"the chart {chart.name} could not be drawn ({type(error).__name__}: "
                                  f"{error}); the tables hold its figures")
                else:
                    drawn.append(chart)
        except KeyboardInterrupt:
            missing = [c.name for c in self.charts if c not in drawn]
            self.charts = drawn
            self.notes.append(f"interrupted while drawing the charts: {', '.join(missing)} not "
                              "drawn (python -m rehearse report FOLDER draws them again)")
            self._write_files(folder)
            raise
        if failed:
            self.charts = drawn
            self.notes.extend(failed)
            self._write_files(folder)
        else:
            self._write_page(folder)

    def _write_files(self, folder: Path, page: bool = True) -> None:
        (folder / "report.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")
        (folder / "report.md").write_text(self.to_markdown())
        if page:
            self._write_page(folder)
        else:
            # A page left from an earlier write of this folder (a replay) would show the old
            # report until the charts are drawn.
            (folder / run_page.PAGE).unlink(missing_ok=True)

    def _write_page(self, folder: Path) -> None:
        run_page.write(folder, self.to_json(), self.own_sections())

    def summary(self) -> str:
        lines = [f"{self.title}: {'PASS' if self.passed else 'FAIL'}"]
        for m in self.measurements:
            value = "—" if m.value is None else f"{m.value:g} {m.unit}"
            lines.append(f"  {m.name}: {value}" + (f" ({m.reference})" if m.reference else ""))
        for c in self.failures:
            lines.append(f"  FAIL {c.name}: {c.seen}" + (f" — fix: {c.fix}" if c.fix else ""))
        for c in self.checks:
            if c.status == NOT_READ:
                lines.append(f"  NOT READ {c.name}: {said(c.status, c.seen)}")
        for c in self.checks:
            if c.status == WARN:
                lines.append(f"  WARN {c.name}: {c.seen}" + (f" — fix: {c.fix}" if c.fix else ""))
        return "\n".join(lines)
