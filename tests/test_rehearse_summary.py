"""The summary page (`python -m rehearse summary`): the latest run of each command for a stack,
from the recorded runs replayed into a rehearsals folder — it parses, names every part of the
runbook, marks what was never run, shows interrupted runs, and embeds every chart it lists."""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rehearse import cli
from rehearse.run import outcome
from rehearse.run import record
from rehearse.pages import summary_page
from rehearse.pages.summary_page import inline_svg
from tests import rehearsal_evening
from tests.page_checks import assert_no_fractional_times, assert_resolves, assert_self_contained, parse
from tests.report_replays import replayed

#: The page inlines the charts the runs drew: these replays draw them (tests/conftest.py).
pytestmark = pytest.mark.charts

FIXTURES = Path(__file__).parent / "fixtures" / "rehearse"
XHTML = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"
STACK = rehearsal_evening.STACK
#: Every recording, replayed under its own name but one: "z-" sorts the day-before failing
#: gateway run last, so neither the name nor the modification time (set newest below) can be
#: what picks the latest.
REPLAYED = {name: name for name in rehearsal_evening.STARTED} | {
    "gateway-route-elsewhere": "z-gateway-route-elsewhere"}
#: Two hours after the evening's failover run started (tests/rehearsal_evening.py).
NOW = rehearsal_evening.STARTED["failover-healthy"] + datetime.timedelta(hours=2, microseconds=246314)
RUNBOOK = ("preflight", "verify gateway", "failover", "burst", "verify burst", "verify gpu")


@pytest.fixture(scope="module")
def rehearsals(tmp_path_factory) -> Path:
    """The recorded runs replayed into one rehearsals folder (the reports only, as
    `rehearse report FOLDER --out DIR` writes them)."""
    root, replays = tmp_path_factory.mktemp("rehearsals"), tmp_path_factory.mktemp("replays")
    with contextlib.redirect_stdout(io.StringIO()):
        for fixture, name in REPLAYED.items():
            # Replayed once for the process: tests/test_rehearse_charts.py replays some too.
            shutil.copytree(replayed(FIXTURES / fixture, replays), root / name)
    newest = (root / "gateway-healthy" / "report.json").stat().st_mtime + 3600
    os.utime(root / "z-gateway-route-elsewhere" / "report.json", (newest, newest))
    os.utime(root / "z-gateway-route-elsewhere", (newest, newest))
    return root


def without(rehearsals: Path, tmp_path: Path, *names: str) -> Path:
    """A copy of the rehearsals folder without the runs ``names``."""
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    for name in names:
        shutil.rmtree(root / name)
    return root


def pages(root: Path, stack: str, now=NOW, **kwargs) -> tuple[ET.Element, str, str]:
    html_path, md_path = summary_page.write(root, stack, now, **kwargs)
    assert (html_path.name, md_path.name) == (f"{stack}-summary.html", f"{stack}-summary.md")
    text = html_path.read_text()
    page = parse(text)
    # Self-contained, whatever the test: its only links are to the runs' pages beside it.
    assert_self_contained(page, root)
    return page, text, md_path.read_text()


def commands(page: ET.Element) -> dict[str, ET.Element]:
    return {d.get("data-command"): d for d in page.iter(f"{XHTML}div") if d.get("data-command")}


def text_of(element: ET.Element) -> str:
    return " ".join("".join(element.itertext()).split())


def test_the_evening_shows_every_demo_ready_and_the_open_questions(rehearsals, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    page, _, md = pages(root, STACK)
    headings = [text_of(h) for h in page.iter(f"{XHTML}h2")]
    for part in ("Pre-check", "Demo 1: gateway failover", "Demo 2: bursting and scale-in",
                 "Demo 3: GPU inference", "Open questions"):
        assert part in headings and f"## {part}" in md
    shown = commands(page)
    assert set(RUNBOOK) | {"gateway-throughput", "hostnet"} <= set(shown)
    # The evening ran every command of the runbook, the pre-check first, each healthy last.
    assert all(d.get("data-state") == "PASS" for d in shown.values())
    checklist = {li.get("data-part"): text_of(li) for ul in page.iter(f"{XHTML}ul")
                 if ul.get("class") == "checklist" for li in ul}
    for part in ("Pre-check", "Demo 1: gateway failover", "Demo 2: bursting and scale-in",
                 "Demo 3: GPU inference"):
        assert "READY" in checklist[part] and "NOT READY" not in checklist[part]
        assert f"- [x] **{part}**: READY" in md


def test_a_demo_whose_runs_are_missing_or_failed_is_not_ready(rehearsals, tmp_path):
    # Without the evening's gateway run, the day-before failing one is demo 1's latest; without
    # the pre-check and the GPU run, neither was ever run.
    root = without(rehearsals, tmp_path, "gateway-healthy", "gpu-recorded", "preflight-healthy")
    page, _, md = pages(root, STACK)
    shown = commands(page)
    never = {c for c, d in shown.items() if d.get("data-state") == "NEVER RUN"}
    assert never == {"preflight", "verify gpu"}
    listed = {li.get("data-command") for ul in page.iter(f"{XHTML}ul")
              if ul.get("class") == "never-run" for li in ul}
    assert listed == never
    for command in never:
        assert f"### `python -m rehearse {command}`: NEVER RUN" in md
        assert f"- `{command}`: no run of this stack" in md
    checklist = {li.get("data-part"): text_of(li) for ul in page.iter(f"{XHTML}ul")
                 if ul.get("class") == "checklist" for li in ul}
    assert "NOT READY" in checklist["Demo 1: gateway failover"]
    assert "NOT RUN" in checklist["Demo 3: GPU inference"] and "NOT RUN" in checklist["Pre-check"]
    assert "- [ ] **Demo 1: gateway failover**: NOT READY" in md


def test_the_latest_run_is_by_its_recorded_start_and_says_how_old(rehearsals, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    page, _, md = pages(root, STACK)
    gateway = commands(page)["verify gateway"]
    # The evening's healthy run is the latest, though the day before's failing run's folder
    # is the newer file and sorts last by name.
    assert gateway.get("data-state") == "PASS"
    assert "folder gateway-healthy" in text_of(gateway)
    # failover-healthy started at NOW less 2 h.
    failover = text_of(commands(page)["failover"])
    assert "folder failover-healthy" in failover and "2 h 0 min ago" in failover
    assert "folder failover-healthy" in md
    # Numbers beside the demo guide's: failover's Lease handover and "AWS documents 3–5 s".
    assert "Lease handover" in failover and "AWS documents 3–5 s" in failover
    # The handover test_rehearse_failover works out from the recording: acquireTime
    # 18:05:03.214567 less the deletion at 18:05:00.
    assert "| Lease handover (new acquireTime − deletion) | 3.215 s | AWS documents 3–5 s" in md


def test_a_failed_run_shows_its_fix_and_one_older_than_a_day_says_to_run_it_again(
        rehearsals, tmp_path):
    root = without(rehearsals, tmp_path, "gateway-healthy")
    page, _, md = pages(root, STACK)
    gateway = commands(page)["verify gateway"]
    assert gateway.get("data-state") == "FAIL"
    words = text_of(gateway)
    # Started the day before at 18:00:00.02: 1 d 2 h 4 min 59.98 s before NOW.
    assert "folder z-gateway-route-elsewhere" in words and "1 d 2 h ago" in words
    assert "older than a day: run it again" in words
    assert "VPC route to the leader" in words and "Fix: the leader writes the route once" in words
    assert "  - Fix: the leader writes the route once" in md
    assert "older than a day" not in text_of(commands(page)["verify burst"])


def test_an_interrupted_run_is_shown_as_such_with_what_it_left(tmp_path):
    events = record.read_events(FIXTURES / "failover-healthy")
    deleted = next(i for i, e in enumerate(events) if e["kind"] == "pod.deleted")
    partial = events[:deleted + 1] + [{"at": events[deleted]["at"], "kind": outcome.RUN_INTERRUPTED,
                                       "reason": "Ctrl-C"}]
    from rehearse.commands.failover import collect as failover

    folder = tmp_path / "20261201T180500Z-dev-failover"
    folder.mkdir()
    outcome.analyse_run(failover.analyse, partial).write(folder)
    page, _, md = pages(tmp_path, STACK)
    run = commands(page)["failover"]
    assert run.get("data-state") == "INTERRUPTED"
    assert "deleted the leader's pod" in text_of(run)
    assert "### `python -m rehearse failover`: INTERRUPTED" in md and "deleted the leader's pod" in md


TINY_SVG = ('<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg" '
            'width="40" height="20"><rect x="0" y="0" width="40" height="20" fill="#1f77b4"/>'
            '<text x="2" y="14">gap &lt; 5 s</text></svg>\n')


def charted_run(root: Path, charts: list[dict], files: dict[str, str | bytes]) -> Path:
    """A run folder whose report.json lists ``charts``, holding ``files``."""
    folder = root / "20261201T100000Z-lab-failover"
    folder.mkdir(parents=True)
    report = {"version": 1, "command": "failover", "stack": "lab",
              "started": "2026-12-01T10:00:00.000000Z", "title": "Gateway leader failover",
              "passed": True, "checks": [{"name": "gap", "status": "PASS", "seen": "3 s",
                                          "fix": "", "command": ""}],
              "measurements": [], "notes": [], "charts": charts}
    (folder / "report.json").write_text(json.dumps(report))
    for name, body in files.items():
        (folder / name).write_bytes(body if isinstance(body, bytes) else body.encode())
    return folder


def test_every_listed_chart_is_embedded_and_a_missing_one_is_reported(tmp_path):
    charts = [{"name": "gaps", "title": "Gaps <each way>", "svg": "gaps.svg", "png": "gaps.png"},
              {"name": "routes", "title": "Route switch", "svg": "routes.svg", "png": "routes.png"}]
    folder = charted_run(tmp_path, charts, {"gaps.svg": TINY_SVG, "gaps.png": b"\x89PNG\r\n"})
    page, text, md = pages(tmp_path, "lab")
    run = commands(page)["failover"]
    [figure] = [f for f in run.iter(f"{XHTML}figure")]
    assert figure.get("data-chart") == "gaps"
    [svg] = list(figure.iter(f"{SVG}svg"))
    assert svg.find(f"{SVG}rect").get("fill") == "#1f77b4"
    # The drawing holds the title (rehearse.charts): the figure names it for a screen reader.
    assert figure.get("aria-label") == "Gaps <each way>" and "Gaps &lt;each way&gt;" in text
    [missing] = [p for p in run.iter(f"{XHTML}p") if p.get("data-chart") == "routes"]
    assert "routes.svg is missing" in text_of(missing)
    assert f"![Gaps <each way>]({folder.name}/gaps.png)" in md
    assert "Chart Route switch: its SVG routes.svg is missing" in md and "routes.png is missing" in md
    # Self-contained: nothing fetched, nothing run (pages() checks the whole page).
    for element in page.iter():
        assert element.tag.rsplit("}", 1)[-1] not in ("script", "link", "img", "iframe", "object")
        assert "src" not in element.attrib, element.tag


CLIPPED_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
               '<metadata><title>drawn by a tool</title></metadata>'
               '<defs><clipPath id="clip"><rect width="9" height="9"/></clipPath>'
               '<path id="mark" d="M0 0h1"/></defs>'
               '<g clip-path="url(#clip)"><use xlink:href="#mark" x="{x}"/></g></svg>')


def test_charts_drawn_alike_keep_their_own_ids_in_one_page(tmp_path):
    # Charts drawn with the same settings reuse ids (a clip path's, a marker's): in one page a
    # reference would find the first chart's definition unless each chart's ids are its own.
    charts = [{"name": n, "title": n, "svg": f"{n}.svg", "png": f"{n}.png"} for n in ("a", "b")]
    charted_run(tmp_path, charts, {"a.svg": CLIPPED_SVG.format(x=1), "b.svg": CLIPPED_SVG.format(x=2),
                                   "a.png": b"", "b.png": b""})
    page, _, _ = pages(tmp_path, "lab")
    figures = list(page.iter(f"{XHTML}figure"))
    ids = [e.get("id") for e in page.iter() if e.get("id")]
    assert len(figures) == 2 and len(ids) == 4 and len(set(ids)) == 4
    xlink = "{http://www.w3.org/1999/xlink}href"
    for figure in figures:
        own = {e.get("id") for e in figure.iter() if e.get("id")}
        [group] = [g for g in figure.iter(f"{SVG}g") if g.get("clip-path")]
        assert group.get("clip-path")[len("url(#"):-1] in own
        assert group.find(f"{SVG}use").get(xlink)[1:] in own
        assert figure.find(f".//{SVG}metadata") is None


def _latest_runs(root: Path, stack: str) -> dict[str, dict]:
    """Each command's latest run of ``stack`` in ``root``, by the start its report.json says."""
    latest: dict[str, tuple[str, Path, dict]] = {}
    for report_json in root.glob("*/report.json"):
        report = json.loads(report_json.read_text())
        if report["stack"] != stack:
            continue
        seen = latest.get(report["command"])
        if seen is None or report["started"] > seen[0]:
            latest[report["command"]] = (report["started"], report_json.parent, report)
    return {command: {"folder": folder, **report} for command, (_, folder, report) in latest.items()}


def test_every_chart_the_latest_runs_list_is_inlined_and_exists(rehearsals, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    page, _, md = pages(root, STACK)
    listed = {(run["folder"], chart["name"]): chart for run in _latest_runs(root, STACK).values()
              for chart in run.get("charts") or []}
    # The recorded runs draw: the page is not vacuous.
    assert {name for _, name in listed} >= {"failover-timeline", "hostnet-paths", "burst-scale-in",
                                            "gpu-latency", "gateway-throughput"}
    figures = list(page.iter(f"{XHTML}figure"))
    assert sorted(f.get("data-chart") for f in figures) == sorted(name for _, name in listed)
    for figure in figures:
        assert list(figure.iter(f"{SVG}svg")), figure.get("data-chart")
    for (folder, _), chart in listed.items():
        assert (folder / chart["svg"]).is_file() and (folder / chart["png"]).is_file()
        assert chart["png"] in md


def test_older_runs_without_charts_show_none(rehearsals, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    for report_json in root.glob("*/report.json"):
        # report.json before version 2 had no "charts".
        report = json.loads(report_json.read_text())
        report.pop("charts", None)
        report_json.write_text(json.dumps(report))
    page, _, _ = pages(root, STACK)
    assert not list(page.iter(f"{XHTML}figure")) and not list(page.iter(f"{SVG}svg"))


@pytest.mark.parametrize("svg, why", [
    ('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>', "<script>"),
    ('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>', "onload attribute"),
    ('<svg xmlns="http://www.w3.org/2000/svg" xmlns:x="http://www.w3.org/1999/xlink">'
     '<image x:href="https://example.com/a.png"/></svg>', "href attribute"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><rect></svg>', "does not parse"),
    ('<html xmlns="http://www.w3.org/1999/xhtml"/>', "not an <svg>"),
    # A style sheet in inlined SVG applies to the whole page: it could hide the failures.
    ('<svg xmlns="http://www.w3.org/2000/svg"><style>.FAIL{display:none}</style></svg>',
     "<style> sheet"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><style>@import url(http://e.example/x.css)</style>'
     '</svg>', "<style> sheet"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><rect style="fill:url(http://e.example/p)"/></svg>',
     "url() outside itself"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><rect fill="url(\'//e.example/p\')"/></svg>',
     "url() outside itself"),
    # HTML inside <svg>: a browser parsing the page as HTML lifts it out, and the iframe runs.
    ('<svg xmlns="http://www.w3.org/2000/svg"><p/><iframe srcdoc="&lt;script&gt;"/></svg>',
     "holds a <p>"),
    ('<svg xmlns="http://www.w3.org/2000/svg" xmlns:h="http://www.w3.org/1999/xhtml">'
     '<h:img src="http://e.example/x.png"/></svg>', "holds a <img>"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><set attributeName="fill" to="red"/></svg>',
     "holds a <set>"),
])
def test_an_svg_that_would_run_or_fetch_something_is_not_inlined(svg, why):
    markup, problem = inline_svg(svg)
    assert markup is None and why in problem, problem
    assert inline_svg(TINY_SVG)[0].startswith('<svg xmlns="http://www.w3.org/2000/svg"')


def test_matplotlibs_own_style_rule_becomes_the_charts_attributes_not_a_page_style():
    svg = ('<svg xmlns="http://www.w3.org/2000/svg"><defs><style type="text/css">'
           '*{stroke-linejoin: round; stroke-linecap: butt}</style></defs><path d="M0 0h1"/></svg>')
    markup, problem = inline_svg(svg)
    root = ET.fromstring(markup)
    assert problem == "" and root.find(f".//{SVG}style") is None
    assert (root.get("stroke-linejoin"), root.get("stroke-linecap")) == ("round", "butt")


def test_the_command_writes_both_pages_and_asks_for_a_stack_when_runs_are_of_several(
        rehearsals, tmp_path, capsys):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    assert cli.main(["summary", "--out", str(root)]) == 0  # the evening is one stack's
    assert f"{STACK}-summary.html" in capsys.readouterr().out
    assert (root / f"{STACK}-summary.html").is_file() and (root / f"{STACK}-summary.md").is_file()
    other = charted_run(root, [], {})
    assert cli.main(["summary", "--out", str(root)]) == 2
    assert "several stacks (dev, lab): pass --stack NAME" in capsys.readouterr().err
    assert cli.main(["summary", "--out", str(root), "--stack", "lab"]) == 0
    assert (root / "lab-summary.html").is_file()
    shutil.rmtree(other)
    assert cli.main(["summary", "--out", str(root)]) == 0


def test_report_out_and_summary_out_name_the_same_rehearsals_folder(tmp_path, capsys):
    rehearsals = tmp_path / "replay"
    for name in ("failover-healthy", "gateway-route-elsewhere"):
        assert cli.main(["report", str(FIXTURES / name), "--out", str(rehearsals)]) in (0, 1)
    # Each run in its own folder, named as the live run's: its start, stack and command.
    started = {name: rehearsal_evening.STARTED[name] for name in ("failover-healthy",)}
    out = capsys.readouterr().out
    expected = record.folder_for(rehearsals, STACK, "failover", started["failover-healthy"])
    assert f"replayed into {expected}" in out and (expected / "report.json").is_file()
    assert len(list(rehearsals.iterdir())) == 2
    assert cli.main(["summary", "--out", str(rehearsals)]) == 0
    md = (rehearsals / f"{STACK}-summary.md").read_text()
    assert f"folder {expected.name}" in md


def test_a_missing_or_empty_rehearsals_folder_says_which(tmp_path, capsys):
    assert cli.main(["summary", "--out", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {tmp_path / 'nowhere'}" in err, err
    assert "does not exist" in err and "holds no" not in err
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "empty" / "notes").mkdir(parents=True)
    assert cli.main(["summary", "--out", str(tmp_path / "empty")]) == 2
    assert "holds no rehearsal runs" in capsys.readouterr().err


@pytest.mark.parametrize("report", [
    "{not json",
    json.dumps({"version": 2, "command": "failover", "stack": "dev", "started": "2026-12-01T10:00:00Z",
                "checks": ["x"]}),
    json.dumps({"version": 2, "command": "failover", "stack": "dev", "started": "2026-12-01T10:00:00Z",
                "measurements": "7 s"}),
    json.dumps(["a report", "of another shape"]),
])
def test_a_report_json_of_another_shape_is_listed_unreadable_not_a_crash(rehearsals, tmp_path, report):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    odd = root / "2026-12-01T10-00-00Z-dev-failover"
    odd.mkdir()
    (odd / "report.json").write_text(report)
    page, text, md = pages(root, STACK)
    assert odd.name in text and "report.json unreadable" in text and odd.name in md
    # The recorded failover run is still the one shown.
    assert commands(page)["failover"].get("data-state") == "PASS"


def _unreadable(root: Path) -> dict[str, str]:
    """Run folders the summary cannot read, each named as a run of the evening's stack would
    be, with what makes it so."""
    at = datetime.datetime(2026, 12, 1, 21, 0, tzinfo=datetime.timezone.utc)
    folders = {}
    for i, (why, files) in enumerate([
            ("no report.json", {"events.jsonl": json.dumps(
                {"at": "2026-12-01T21:00:00Z", "kind": "run.started", "command": "failover",
                 "stack": STACK}) + "\n"}),
            ("report.json unreadable (JSONDecodeError", {"report.json": "{not json"}),
            ("report.json unreadable (ValueError: it is of version 99", {"report.json": json.dumps(
                {"version": 99, "command": "failover", "stack": STACK, "started": "2026-12-01T21:00:00Z",
                 "checks": []})}),
            ("report.json unreadable (TypeError: it holds a JSON list", {"report.json": "[]"})]):
        folder = record.folder_for(root, STACK, "failover", at + datetime.timedelta(minutes=i))
        folder.mkdir(parents=True)
        for name, body in files.items():
            (folder / name).write_text(body)
        folders[folder.name] = why
    return folders


def test_every_run_folder_the_summary_cannot_read_is_listed_with_why(rehearsals, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    broken = _unreadable(root)
    # Another stack's run without its report is that stack's, not an unreadable one of ours.
    theirs = record.folder_for(root, "lab", "failover", NOW)
    theirs.mkdir()
    (theirs / "events.jsonl").write_text(json.dumps({"at": "2026-12-01T21:00:00Z", "kind": "run.started",
                                                     "command": "failover", "stack": "lab"}) + "\n")
    page, text, md = pages(root, STACK)
    section = " ".join(text_of(li) for ul in page.iter(f"{XHTML}ul") for li in ul
                       if any(name in text_of(li) for name in broken))
    for name, why in broken.items():
        assert f"{name}: {why}" in section and f"{name}: {why}" in md
    assert theirs.name not in text and theirs.name not in md
    # The readable runs are still the page's.
    assert commands(page)["failover"].get("data-state") == "PASS"


def test_a_folder_of_only_unreadable_runs_lists_them_not_that_it_holds_none(tmp_path, capsys):
    root = tmp_path / "r"
    broken = _unreadable(root)
    assert cli.main(["summary", "--out", str(root)]) == 0
    assert "holds no" not in capsys.readouterr().err
    md = (root / f"{STACK}-summary.md").read_text()
    for name, why in broken.items():
        assert f"{name}: {why}" in md


def test_a_run_folder_without_its_report_is_listed_for_its_own_stack_only(rehearsals, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    ours, theirs = root / "20261201T100000Z-dev-failover", root / "20261201T100000Z-dev-gpu-failover"
    for folder in (ours, theirs):
        folder.mkdir()
        (folder / "events.jsonl").write_text("")
    _, text, md = pages(root, STACK)
    assert f"{ours.name}: no report.json" in text and f"{ours.name}: no report.json" in md
    # Stack dev-gpu's run, not dev's: stack names hold dashes too.
    assert theirs.name not in text and theirs.name not in md


# --- what the page shows a reader: code as code, a title once, a fix once, times to the second --
# Whichever stack the recordings are of and whichever of them is a command's latest run.

def _most_runs(root: Path) -> str:
    """The stack with the most runs under ``root``."""
    stacks = [json.loads(p.read_text())["stack"] for p in root.glob("*/report.json")]
    return max(sorted(set(stacks)), key=stacks.count)


def test_markdown_code_is_code_on_the_page_and_stays_markdown_in_the_md(tmp_path):
    folder = charted_run(tmp_path, [], {})
    report = json.loads((folder / "report.json").read_text())
    report["passed"] = False
    report["checks"] = [{"name": "leader pod deleted", "status": "FAIL", "seen": "`gw-a` still Running",
                         "fix": "hand over: `kubectl -n gw delete pod gw-a`", "command": ""}]
    (folder / "report.json").write_text(json.dumps(report))
    page, _, md = pages(tmp_path, "lab")
    [never] = [ul for ul in page.iter(f"{XHTML}ul") if ul.get("class") == "never-run"]
    assert len(never)
    for li in never:
        [code] = list(li.iter(f"{XHTML}code"))
        assert code.text == f"python -m rehearse {li.get('data-command')}"
        assert "`" not in text_of(li)
        assert f"`python -m rehearse {li.get('data-command')}`" in md
    failover = commands(page)["failover"]
    assert [c.text for c in failover.iter(f"{XHTML}code")][1:] == ["gw-a", "kubectl -n gw delete pod gw-a"]
    assert "`" not in text_of(failover)
    assert "`gw-a` still Running" in md and "  - Fix: hand over: `kubectl -n gw delete pod gw-a`" in md


def test_each_chart_title_is_shown_once(rehearsals, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    stack = _most_runs(root)
    page, _, _ = pages(root, stack)
    titles = {chart["name"]: chart["title"] for run in _latest_runs(root, stack).values()
              for chart in run.get("charts") or []}
    figures = list(page.iter(f"{XHTML}figure"))
    assert figures and {f.get("data-chart") for f in figures} == set(titles)
    for figure in figures:
        title = titles[figure.get("data-chart")]
        # The drawing's own title (an SVG <text>), and no caption saying it again.
        assert text_of(figure).count(title) == 1, title
        assert [t.tag for t in figure.iter() if (t.text or "").strip() == title] == [f"{SVG}text"]


def test_a_fix_shared_by_several_checks_is_said_once_after_them(tmp_path):
    root = tmp_path / "r"
    with contextlib.redirect_stdout(io.StringIO()):
        shutil.copytree(replayed(FIXTURES / "failover-slow-standby", tmp_path / "replays"),
                        root / "failover-slow-standby")
    report = json.loads((root / "failover-slow-standby" / "report.json").read_text())
    gaps = [c for c in report["checks"] if c["status"] == "FAIL" and c["name"].startswith("gap ")]
    # The recording: the four probes' gaps all over 10 s, each with the same advice.
    assert len(gaps) == 4 and len({c["fix"] for c in gaps}) == 1
    fix = gaps[0]["fix"]
    page, text, md = pages(root, report["stack"])
    failover = commands(page)["failover"]
    assert text_of(failover).count(fix) == 1 and md.count(fix) == 1
    [fixed] = [p for p in failover.iter(f"{XHTML}p") if p.get("class") == "fix"]
    assert text_of(fixed) == f"Fix, for the 4 above: {fix}"
    [listed] = [ul for ul in failover.iter(f"{XHTML}ul") if len(ul) == 4]
    assert [text_of(li).split(" — ")[0] for li in listed] == [c["name"] for c in gaps]
    assert f"Fix, for the 4 above: {fix}" in md
    for check in gaps:
        assert f"- **{check['name']}** — FAIL" in md


def test_times_are_to_the_second_and_said_to_be_utc_once(rehearsals, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    stack = _most_runs(root)
    page, text, md = pages(root, stack)
    assert_no_fractional_times(text_of(page))
    assert_no_fractional_times(md.split("## Checklist")[0])
    assert text_of(page).count("Times are UTC.") == 1 and md.count("Times are UTC.") == 1
    # NOW to the second (its microseconds dropped), and each run's start to its second.
    assert NOW.microsecond, "NOW has no fraction to drop: the test would prove nothing"
    written = NOW.strftime("%Y-%m-%d %H:%M:%S")
    assert f"Written {written} from" in text_of(page) and f"Written {written}" in md
    for command, run in _latest_runs(root, stack).items():
        started = record.parse_time(run["started"]).strftime("%Y-%m-%d %H:%M:%S")
        assert f"started {started} (" in text_of(commands(page)[command]), command
        assert f"started {started} (" in md


def test_each_run_links_its_own_page_and_an_older_run_its_report_md(rehearsals, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(rehearsals, root)
    stack = _most_runs(root)
    page, _, md = pages(root, stack)
    latest = _latest_runs(root, stack)
    shown = commands(page)
    assert latest
    for command, run in latest.items():
        [link] = [a for a in shown[command].iter(f"{XHTML}a") if a.get("class") == "run-page"]
        assert link.get("href") == f"{run['folder'].name}/report.html"
        assert_resolves(link.get("href"), root)
        assert f"]({run['folder'].name}/report.html)" in md
    # A run written before the run pages: said so, and its report.md linked instead.
    command, run = sorted(latest.items())[0]
    older = run["folder"]
    (older / "report.html").unlink()
    page, _, md = pages(root, stack)
    [link] = [a for a in commands(page)[command].iter(f"{XHTML}a") if a.get("class") == "run-page"]
    assert link.get("href") == f"{older.name}/report.md"
    assert "older than the run pages has no page" in text_of(link)
    assert f"]({older.name}/report.md)" in md
    # Nor that: nothing to link, and said so.
    (older / "report.md").unlink()
    page, _, md = pages(root, stack)
    assert not [a for a in commands(page)[command].iter(f"{XHTML}a") if a.get("class") == "run-page"]
    assert "no report.html or report.md in its folder" in text_of(commands(page)[command])


def test_a_check_not_read_is_shown_after_the_failures(tmp_path):
    folder = charted_run(tmp_path, [], {})
    report = json.loads((folder / "report.json").read_text())
    report["passed"] = False
    report["checks"] = [
        {"name": "route switched", "status": "NOT READ", "seen": "the run ended before the route was read",
         "fix": "", "command": ""},
        {"name": "baseline healthy", "status": "PASS", "seen": "18 probes", "fix": "", "command": ""},
        {"name": "leader pod deleted", "status": "FAIL", "seen": "still there", "fix": "delete it",
         "command": ""}]
    (folder / "report.json").write_text(json.dumps(report))
    page, _, md = pages(tmp_path, "lab")
    shown = [li.get("data-status") for li in commands(page)["failover"].iter(f"{XHTML}li")]
    assert shown == ["FAIL", "NOT READ"]
    assert md.index("- **leader pod deleted** — FAIL: still there") < \
        md.index("- **route switched** — NOT READ: the run ended before the route was read")
