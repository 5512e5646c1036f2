"""Each run's own page, report.html beside report.md and report.json: well-formed XHTML that is
self-contained (the summary page's checks, tests/page_checks.py), with every chart its report
lists inline, the checks to act on before those that passed, Markdown code as <code>, times
to the second, and a long run's detail folded — from the recorded runs replayed, and from
reports written here."""

from __future__ import annotations

import contextlib
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rehearse import charts
from rehearse.run import record
from rehearse.pages import run_page
from rehearse.pages import summary_page
from rehearse.run.report import FAIL, NOT_READ, PASS, SKIP, WARN, Chart, Check, Measurement, Report
from tests.page_checks import SVG, XHTML, assert_no_fractional_times, assert_self_contained, parse
from tests.report_replays import replayed

#: The page inlines the charts the runs drew: these replays draw them (tests/conftest.py).
pytestmark = pytest.mark.charts

FIXTURES = Path(__file__).parent / "fixtures" / "rehearse"
RECORDINGS = sorted(p.name for p in FIXTURES.iterdir() if (p / "events.jsonl").is_file())
RANK = {FAIL: 0, NOT_READ: 1, WARN: 2, PASS: 3, SKIP: 3}
TINY_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20">'
            '<text x="2" y="14">{title}</text></svg>')


def replay(name: str, tmp_path_factory) -> Path:
    with contextlib.redirect_stdout(io.StringIO()):
        return replayed(FIXTURES / name, tmp_path_factory.getbasetemp())


def page_of(folder: Path) -> tuple[ET.Element, str]:
    text = (folder / run_page.PAGE).read_text(encoding="utf-8")
    page = parse(text)
    assert_self_contained(page, folder)
    return page, text


def text_of(element: ET.Element) -> str:
    return " ".join("".join(element.itertext()).split())


def statuses(page: ET.Element) -> list[str]:
    """The checks' statuses in the order the page shows them."""
    return [li.get("data-status") for li in page.iter(f"{XHTML}li") if li.get("data-status")]


def written(tmp_path: Path, **fields) -> tuple[ET.Element, str]:
    report = Report(command="failover", stack="lab", started="2026-12-01T09:00:00.123456Z",
                    title="Gateway leader failover", **fields)
    report.write(tmp_path)
    return page_of(tmp_path)


@pytest.mark.parametrize("name", RECORDINGS)
def test_each_recorded_run_has_a_self_contained_page_with_its_charts_inline(name, tmp_path_factory):
    folder = replay(name, tmp_path_factory)
    report = json.loads((folder / "report.json").read_text())
    page, _ = page_of(folder)
    assert text_of(page.find(f".//{XHTML}h1")) == report["title"]
    [verdict] = [p for p in page.iter(f"{XHTML}p") if p.get("class") == "verdict"]
    assert verdict.get("data-verdict") == ("PASS" if report["passed"] else "FAIL")
    figures = [f for f in page.iter(f"{XHTML}figure")]
    assert [f.get("data-chart") for f in figures] == [c["name"] for c in report["charts"]]
    for figure, chart in zip(figures, report["charts"]):
        [svg] = list(figure.iter(f"{SVG}svg"))
        # The drawing itself, its texts as the SVG file holds them.
        drawn = ET.parse(folder / chart["svg"]).getroot()
        assert [t.text for t in svg.iter(f"{SVG}text")] == [t.text for t in drawn.iter(f"{SVG}text")]
        assert figure.get("aria-label") == chart["title"]
    # The checks to act on first (FAIL, then NOT READ), then the others in the report's
    # order (demo 2's go scenario by scenario); each check once.
    shown = statuses(page)
    assert shown == sorted(shown, key=RANK.get)
    assert sorted(shown) == sorted(c["status"] for c in report["checks"])
    assert_no_fractional_times(text_of(page))


def test_failed_and_not_read_checks_come_before_those_that_passed(tmp_path):
    checks = [Check("baseline healthy", PASS, "18 probes each way"),
              Check("route switched", NOT_READ, "the run was interrupted before the route was read"),
              Check("leader pod deleted", FAIL, "the pod is still there", "delete it again",
                    "kubectl -n gw get pods"),
              Check("VTEP config", SKIP, "no hybrid node"),
              Check("new leader elected", FAIL, "no new holder", "read the standby's log")]
    page, _ = written(tmp_path, checks=checks)
    assert statuses(page) == [FAIL, FAIL, NOT_READ, PASS, SKIP]
    [verdict] = [p for p in page.iter(f"{XHTML}p") if p.get("class") == "verdict"]
    assert verdict.get("data-verdict") == "FAIL"
    assert "1 of 5 checks passed (2 FAIL, 1 NOT READ, 1 SKIP)" in text_of(verdict)
    [attention] = [d for d in page.iter(f"{XHTML}div") if d.get("class") == "attention"]
    not_read = next(li for li in attention.iter(f"{XHTML}li") if li.get("data-status") == NOT_READ)
    assert "interrupted before the route was read" in text_of(not_read) and "Fix" not in text_of(not_read)
    # A run whose only doubt is a check not read has not passed either.
    page, _ = written(tmp_path, checks=[checks[0], checks[1]])
    [verdict] = [p for p in page.iter(f"{XHTML}p") if p.get("class") == "verdict"]
    assert verdict.get("data-verdict") == "FAIL" and "not read has not passed" in text_of(verdict)


def test_markdown_code_renders_as_code_and_times_to_the_second(tmp_path):
    page, text = written(
        tmp_path,
        checks=[Check("leader resolved", FAIL, "no Lease `hybrid-gateway-leader` at 2026-12-01T09:00:03.214567Z",
                      "run `python -m rehearse verify gateway` first", "kubectl get lease -A")],
        measurements=[Measurement("Lease handover", 3.2, "s", "AWS documents 3–5 s",
                                  "from `acquireTime`")],
        notes=["`verify burst` restarts nothing"])
    codes = [c.text for c in page.iter(f"{XHTML}code")]
    for code in ("hybrid-gateway-leader", "python -m rehearse verify gateway", "acquireTime",
                 "verify burst", "kubectl get lease -A"):
        assert code in codes, codes
    assert "`" not in text_of(page)
    assert_no_fractional_times(text_of(page))
    assert "at 2026-12-01 09:00:03" in text_of(page) and "started 2026-12-01 09:00:00." in text_of(page)
    assert text_of(page).count("Times are UTC.") == 1
    # report.md keeps the Markdown, report.json the times as measured.
    assert "`hybrid-gateway-leader`" in (tmp_path / "report.md").read_text()
    assert "09:00:03.214567Z" in (tmp_path / "report.json").read_text()


def test_a_long_run_reads_its_verdict_first_and_its_detail_folded(tmp_path_factory):
    folder = replay("burst-abc", tmp_path_factory)
    page, _ = page_of(folder)
    markdown = (folder / "report.md").read_text()
    report = json.loads((folder / "report.json").read_text())
    headings = [h2.text for h2 in page.iter(f"{XHTML}h2")]
    assert [h for h in headings if h != "Needs attention"] == ["Checks", "Numbers", "Charts", "Detail"]
    # Dozens of checks that passed (three scenarios'): listed, folded.
    passing = [c for c in report["checks"] if c["status"] in (PASS, SKIP)]
    [passed] = [d for d in page.iter(f"{XHTML}details") if d.get("class") == "passed"]
    assert len(passing) > run_page.OPEN_UP_TO and passed.get("open") is None
    assert len(list(passed.iter(f"{XHTML}li"))) == len(passing)
    # Demo 2's own sections (report.md's "## Scenario A: ..."), each folded under its heading,
    # their tables as tables and their Markdown as markup, not text.
    sections = [d for d in page.iter(f"{XHTML}details") if d.get("class") == "section"]
    own = [line[3:] for line in markdown.splitlines() if line.startswith("## ")
           and line[3:] not in ("Numbers", "Checklist", "Notes")]
    assert [text_of(d.find(f"{XHTML}summary")) for d in sections] == own and len(own) >= 3
    tables = [t for d in sections for t in d.iter(f"{XHTML}table")]
    assert len(tables) == sum(1 for n, line in enumerate(markdown.splitlines()[1:], 1)
                              if line.startswith("|---") and "## Numbers" not in
                              "\n".join(markdown.splitlines()[max(0, n - 4):n]))
    for section in sections:
        words = text_of(section)
        assert "**" not in words and "|---" not in words and "`" not in words
    assert any(s.text and s.text.startswith("15 → 12") for d in sections for s in d.iter(f"{XHTML}strong"))


def _draw_or(fail: str, error: BaseException):
    def write(folder: Path, name: str, title: str, data: dict) -> None:
        if name == fail:
            raise error
        (folder / f"{name}.svg").write_text(TINY_SVG.format(title=title))
        (folder / f"{name}.png").write_bytes(b"\x89PNG\r\n")
    return write


@pytest.mark.parametrize("error, note", [
    (ValueError("no data"), "the chart routes could not be drawn (ValueError: no data)"),
    (KeyboardInterrupt(), "interrupted while drawing the charts: routes not drawn"),
])
def test_the_page_shows_the_charts_drawn_and_says_which_were_not(tmp_path, monkeypatch, error, note):
    monkeypatch.setattr(charts, "write", _draw_or("routes", error))
    shown = [Chart("gaps", "Gaps each way"), Chart("routes", "Route switch")]
    with pytest.raises(KeyboardInterrupt) if isinstance(error, KeyboardInterrupt) else contextlib.nullcontext():
        written(tmp_path, checks=[Check("gap", PASS, "3 s")], charts=shown)
    page, _ = page_of(tmp_path)
    assert [f.get("data-chart") for f in page.iter(f"{XHTML}figure")] == ["gaps"]
    assert note in text_of(page)
    # The chart's files linked for slides, beside the page.
    [figure] = page.iter(f"{XHTML}figure")
    assert [a.get("href") for a in figure.iter(f"{XHTML}a")] == ["gaps.svg", "gaps.png"]


def test_a_page_from_an_earlier_write_is_gone_while_the_charts_are_drawn(tmp_path, monkeypatch):
    (tmp_path / run_page.PAGE).write_text("an earlier report's page")
    seen = []

    def write(folder: Path, name: str, title: str, data: dict) -> None:
        seen.append((folder / run_page.PAGE).exists())
        (folder / f"{name}.svg").write_text(TINY_SVG.format(title=title))

    monkeypatch.setattr(charts, "write", write)
    page, _ = written(tmp_path, checks=[Check("gap", PASS, "3 s")], charts=[Chart("gaps", "Gaps")])
    assert seen == [False] and [f.get("data-chart") for f in page.iter(f"{XHTML}figure")] == ["gaps"]


def test_a_check_not_read_says_so_once_everywhere_it_is_shown(tmp_path):
    # Its reason reads alone in report.json ("not read: ..."); after its status it is not said
    # twice: in report.md, the printed summary, the run page and the summary page.
    check = Check("the Lease", NOT_READ, "not read: the run failed before reading the Lease")
    report = Report("verify gateway", "dev", "2026-12-01T18:00:00.000000Z", "Demo 1", checks=[check])
    twice = ("not read: not read", "NOT READ: not read")
    shown = {"report.md": report.to_markdown(), "printed": report.summary()}
    (tmp_path / "alone").mkdir()
    page, text = written(tmp_path / "alone", checks=[check])
    shown["report.html"] = text
    rehearsals = tmp_path / "rehearsals"
    folder = record.folder_for(rehearsals, "dev", "verify gateway", record.parse_time(report.started))
    folder.mkdir(parents=True)
    report.write(folder)
    html_path, md_path = summary_page.write(rehearsals, "dev", record.parse_time(report.started))
    shown["summary page"] = html_path.read_text()
    shown["summary.md"] = md_path.read_text()
    for where, said in shown.items():
        assert "the run failed before reading the Lease" in said, where
        assert not any(t.lower() in said.lower() for t in twice), (where, said)
    assert json.loads(json.dumps(report.to_json()))["checks"][0]["seen"] == check.seen
