"""The reports' charts (rehearse/charts), drawn from the recorded runs in tests/fixtures/rehearse
through `python -m rehearse report FOLDER --out DIR` (in-process): each SVG's text read back
with xml.etree for the labels and numbers it must show, equal to report.json's; the PNG is a
PNG; a second replay writes the same bytes; a step not measured says so on the picture; and the
README's chart is what a replay draws today.

Each recorded run is replayed once for the module (matplotlib's import and the drawing are the
cost), and once for the process where tests/test_rehearse_summary.py replays it too
(tests/report_replays.py)."""

from __future__ import annotations

import ast
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rehearse import cli
from rehearse.commands.failover import follow as failover_follow
from rehearse.commands.failover import gaps as failover_gaps
from rehearse.commands.failover import kinds as failover_kinds
from rehearse.run import record
from rehearse.commands.gateway_throughput import collect as throughput
from rehearse.commands.burst.kinds import SCENARIO_WORDS
from rehearse.charts import DRAWERS
from tests.report_replays import replayed, report_into

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "rehearse"
README_CHART = ROOT / "docs" / "img" / "failover-timeline.svg"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG = "{http://www.w3.org/2000/svg}"


def _partial(source: str, keep: int, target: Path) -> Path:
    """A run that stopped part-way: the first ``keep`` events of a recording, then Ctrl-C."""
    events = record.read_events(FIXTURES / source)[:keep]
    events.append({"at": events[-1]["at"], "kind": "run.interrupted", "reason": "Ctrl-C"})
    target.mkdir(parents=True)
    (target / "events.jsonl").write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in events))
    return target


def _cut_after_first_type(target: Path) -> Path:
    """throughput-two-types stopped before it measured the second instance type."""
    events = record.read_events(FIXTURES / "throughput-two-types")
    results = [i for i, e in enumerate(events) if e["kind"] == throughput.RESULT]
    return _partial("throughput-two-types", results[1] + 1, target)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> the folder `rehearse report --out` wrote for that recording."""
    base = tmp_path_factory.mktemp("charts")
    out = {name: replayed(FIXTURES / name, base) for name in (
        "failover-healthy", "failover-route-stuck", "burst-abc", "burst-b-no-get-nodes",
        "throughput-two-types", "gpu-recorded", "hostnet-healthy")}
    # burst-abc up to scenario A's 15 -> 12 (its scalein.done): 12 -> 10 and 10 -> 3 never ran.
    settled = next(i for i, e in enumerate(record.read_events(FIXTURES / "burst-abc"))
                   if e["kind"] == "scalein.done" and (e.get("scenario"), e.get("step")) == ("A", 2))
    partials = {"burst-partial": _partial("burst-abc", settled + 1, base / "in" / "burst-partial"),
                "throughput-partial": _cut_after_first_type(base / "in" / "throughput-partial")}
    for name, folder in partials.items():
        out[name] = report_into(folder, base / name)
    return out


def report_of(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())


def texts(svg: Path) -> list[str]:
    """Every <text> element's text: the labels matplotlib wrote as text (svg.fonttype none)."""
    root = ET.parse(svg).getroot()
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def values(report: dict) -> dict:
    return {m["name"]: m["value"] for m in report["measurements"]}


def only_chart(folder: Path) -> tuple[dict, list[str]]:
    [chart] = report_of(folder)["charts"]
    return chart, texts(folder / chart["svg"])


# --- what every chart is -----------------------------------------------------------------------

@pytest.mark.parametrize("name, chart", [
    ("failover-healthy", "failover-timeline"), ("burst-abc", "burst-scale-in"),
    ("throughput-two-types", "gateway-throughput"), ("gpu-recorded", "gpu-latency"),
    ("hostnet-healthy", "hostnet-paths")])
def test_each_command_writes_its_chart_as_svg_and_png_listed_and_linked(runs, name, chart):
    folder = runs[name]
    report = report_of(folder)
    assert report["version"] == 2
    [listed] = report["charts"]
    assert listed == {"name": chart, "title": listed["title"], "svg": f"{chart}.svg", "png": f"{chart}.png"}
    assert listed["title"]
    assert (folder / listed["png"]).read_bytes()[:8] == PNG_SIGNATURE
    assert ET.parse(folder / listed["svg"]).getroot().tag == f"{SVG}svg"
    markdown = (folder / "report.md").read_text()
    assert f"![{listed['title']}]({chart}.png)" in markdown and f"]({chart}.svg)" in markdown
    assert not (folder / "chart.png").exists()
    # The files are named by the chart: the summary page and the README point at them.
    assert chart in DRAWERS


def test_a_second_replay_writes_the_same_bytes(runs, tmp_path):
    for name in ("failover-route-stuck", "burst-partial", "hostnet-healthy"):
        recorded = FIXTURES / name
        again = report_into(recorded if recorded.exists() else runs[name].parents[1] / "in" / name,
                            tmp_path / name)
        [chart] = report_of(again)["charts"]
        for kind in ("svg", "png"):
            assert (again / chart[kind]).read_bytes() == (runs[name] / chart[kind]).read_bytes(), (name, kind)


def test_the_svg_carries_no_date_or_version_and_draws_with_agg(runs):
    import matplotlib

    svg = (runs["gpu-recorded"] / "gpu-latency.svg").read_text()
    assert "<dc:date>" not in svg and matplotlib.__version__ not in svg
    assert matplotlib.get_backend().lower() == "agg"


def test_a_report_without_charts_writes_none_and_an_empty_list(tmp_path):
    folder = report_into(FIXTURES / "gateway-healthy", tmp_path)
    assert report_of(folder)["charts"] == []
    assert sorted(p.name for p in folder.iterdir()) == ["events.jsonl", "report.html", "report.json", "report.md"]


# --- demo 1: the failover timeline -------------------------------------------------------------

def test_the_failover_timeline_shows_each_gap_with_its_verdict_and_the_markers(runs):
    report = report_of(runs["failover-healthy"])
    _, shown = only_chart(runs["failover-healthy"])
    numbers = values(report)
    threshold = failover_kinds.DEFAULTS["threshold"]
    for direction in ("cloud→hybrid", "hybrid→cloud"):
        for path in ("Service", "pod"):
            label = f"{direction} via {path}"
            assert label in shown
            gap = numbers[f"longest gap {label}"]
            assert f"longest gap {gap:.1f} s" in shown
    # Every gap of the healthy run passes, and says so beside it, under the pass limit drawn.
    assert shown.count(f"PASS: ≤ {threshold:g} s") == 4
    assert f"pass limit: the gap ends within {threshold:g} s of its start" in shown
    # AWS's 3–5 s said once, with what it times: not a gap in traffic.
    said = " ".join(shown)
    assert said.count(failover_follow.DOCUMENTED) == 1
    assert f"{failover_follow.DOCUMENTED} for {failover_gaps.DOCUMENTED_MEASURES}" in said
    assert "leader pod deleted 0.0 s" in shown
    lease = numbers["Lease handover (new acquireTime − deletion)"]
    assert f"Lease handed over {lease:.1f} s" in shown
    assert f"route replaced {numbers['route switch (first poll seeing the new ENI)']:.1f} s" in shown
    assert f"VTEP config updated {numbers['VTEP follow (first poll naming the new leader)']:.1f} s" in shown


def test_two_markers_at_the_same_second_are_both_named(runs, tmp_path):
    folder = replayed(FIXTURES / "failover-slow-standby", tmp_path)
    numbers = values(report_of(folder))
    _, shown = only_chart(folder)
    route = numbers["route switch (first poll seeing the new ENI)"]
    assert route == numbers["VTEP follow (first poll naming the new leader)"]
    assert f"route replaced {route:.1f} s" in shown and f"VTEP config updated {route:.1f} s" in shown


def test_a_route_that_never_switched_reads_not_measured_and_the_gaps_still_open(runs):
    report = report_of(runs["failover-route-stuck"])
    _, shown = only_chart(runs["failover-route-stuck"])
    assert values(report)["route switch (first poll seeing the new ENI)"] is None
    assert "route replaced: not measured" in shown
    gap = values(report)["longest gap cloud→hybrid via pod"]
    assert f"longest gap {gap:.1f} s and counting" in shown
    assert f"FAIL: over {failover_kinds.DEFAULTS['threshold']:g} s" in shown


# --- demo 2: scale-in --------------------------------------------------------------------------

def _places(pods: list[dict]) -> tuple[int, int]:
    return (len([p for p in pods if p.get("place") == "hybrid"]),
            len([p for p in pods if p.get("place") == "cloud"]))


def test_the_scale_in_chart_shows_every_steps_split_and_removed_beside_forecast(runs):
    report = report_of(runs["burst-abc"])
    _, shown = only_chart(runs["burst-abc"])
    for scenario, data in report["demo2"]["scenarios"].items():
        assert f"Scenario {scenario}" in "\n".join(shown)
        start = data["start"]
        assert f"{start[0]} + {start[1]}" in shown
        for step in data["steps"]:
            assert f"{step['from']} → {step['to']}" in shown
            assert f"{step['hybrid'][1]} + {step['cloud'][1]}" in shown
            if step["to"] < step["from"]:
                removed = _places(step["removed"])
                assert f"removed {removed[0]} + {removed[1]}" in shown
                # Every recorded scale-in went as forecast: the forecast names the same split.
                assert f"forecast {removed[0]} + {removed[1]}" in shown
    # A's last scale-in, by hand from the step table: 4 hybrid and 3 cloud pods removed.
    assert "removed 4 + 3" in shown
    assert "not measured" not in shown


def test_a_partial_run_draws_the_missing_steps_as_not_measured(runs):
    _, shown = only_chart(runs["burst-partial"])
    # Scenario A reached 15 -> 12; the sequence's 12 -> 10 and 10 -> 3 did not run, nor B or C.
    assert "15 → 12" in shown and "8 + 4" in shown
    assert "12 → 10" in shown and "10 → 3" in shown
    # Two bars in A's panel, and B's and C's panels, each with why.
    assert shown.count("not measured") == 4
    assert shown.count("the run ended before it") == 3


def test_a_refused_scenario_reads_not_measured_with_the_reason(runs):
    report = report_of(runs["burst-b-no-get-nodes"])
    _, shown = only_chart(runs["burst-b-no-get-nodes"])
    assert report["demo2"]["scenarios"]["B"]["refused"]
    assert f"Scenario B ({SCENARIO_WORDS['B']}): not measured" in shown
    # The reasons in full, wrapped: nothing cut short.
    said = " ".join(line.strip() for line in shown)
    for reason in report["demo2"]["scenarios"]["B"]["refused"]:
        assert reason.split(": ")[-1] in said
    assert "…" not in said
    # Nothing measured: no axes, no legend of hybrid and cloud bars.
    assert "on hybrid nodes" not in shown and "burst pods" not in shown


# --- gateway throughput ------------------------------------------------------------------------

def test_the_throughput_chart_shows_both_directions_baselines_and_the_mtu(runs):
    report = report_of(runs["throughput-two-types"])
    _, shown = only_chart(runs["throughput-two-types"])
    numbers = values(report)
    for instance_type in ("c6in.xlarge", "m6in.large"):
        assert instance_type in shown
        for direction in ("cloud → hybrid", "hybrid → cloud"):
            # One precision for every measured figure (iperf3's own stays in the table).
            assert f"{numbers[f'{instance_type}: {direction} (receiver)']:.2f} Gbit/s" in shown
    # docs/networking.md#gateway-instance-bandwidth
    assert "baseline 6.25 Gbit/s" in shown and "baseline 3.125 Gbit/s" in shown
    assert "MTU in force: 8450 (cilium-config ConfigMap (kube-system), key mtu)" in shown
    # The same path MTU on all four directions: said once, not in every bar.
    assert [t for t in shown if "path MTU" in t] == ["every direction measured: path MTU 8450, MSS 8398"]


def test_a_type_the_run_did_not_reach_reads_not_measured(runs):
    report = report_of(runs["throughput-partial"])
    _, shown = only_chart(runs["throughput-partial"])
    assert values(report)["c6in.xlarge: cloud → hybrid (receiver)"] == 4.74
    assert "4.74 Gbit/s" in shown
    assert "m6in.large" in shown and shown.count("not measured") == 2


# --- demo 3 ------------------------------------------------------------------------------------

def test_the_gpu_chart_marks_p50_p95_and_the_pull_beside_the_guide(runs):
    report = report_of(runs["gpu-recorded"])
    _, shown = only_chart(runs["gpu-recorded"])
    numbers = values(report)
    assert f"p50 {numbers['client latency p50']:g} s" in " ".join(shown)
    assert f"p95 {numbers['client latency p95']:g} s" in " ".join(shown)
    # The failed call counted in the panel's title, not written beside some other call's bar.
    [failed] = [t for t in shown if "failed" in t]
    assert re.fullmatch(r"the cloud client's calls: \d+ ok, [1-9]\d* failed \(not in the histogram\)", failed)
    # The demo guide's 4m28s (docs/demo-guide.md#demo-3-gpu-inference-on-a-hybrid-node) as a
    # line, this run's pull as the one bar.
    assert "demo guide: 4 min 28 s (268 s)" in shown
    assert f"this run: 4 min 28 s ({numbers['vLLM image pull (kubelet)']:g} s)" in shown


def test_the_pull_panel_draws_one_bar_for_the_one_pull():
    """The recording holds one vLLM pod's one pull (which is the demo guide's own 4m28s, the
    same pull): one bar, the guide's figure a line beside it, not a second bar of the same
    length."""
    from matplotlib.patches import Rectangle

    import importlib

    from rehearse import charts
    from rehearse.run import outcome

    events = record.read_events(FIXTURES / "gpu-recorded")
    [chart] = outcome.analyse_run(importlib.import_module(cli.COMMANDS["verify gpu"]).analyse, events).charts
    pulled = [e for e in events for ev in e.get("events") or [] if ev.get("reason") == "Pulled"]
    figure = charts.draw(chart.name, chart.title, chart.data)
    pull = figure.axes[-1]
    assert pull.get_title("left") == "vLLM image pull (kubelet)"
    assert len([p for p in pull.patches if isinstance(p, Rectangle)]) == len(pulled) == 1


# --- hostnet -----------------------------------------------------------------------------------

def test_the_hostnet_chart_labels_each_arrow_with_the_path_taken(runs):
    _, shown = only_chart(runs["hostnet-healthy"])
    for number, label in enumerate(("hybrid host network → cloud pod", "hybrid host network → ClusterIP Service",
                                    "cloud pod → hybrid host network"), start=1):
        assert f"{number}. {label}: node to node across the Transit Gateway (PASS)" in shown
        assert str(number) in shown
    assert {"cloud VPC", "Transit", "hybrid nodes gateway"} <= {line for t in shown for line in t.split("\n")} | set(shown)


def test_a_direction_through_the_gateway_or_not_probed_is_drawn_so(tmp_path):
    from rehearse import charts
    from rehearse.commands.hostnet import collect as hostnet

    data = {"tgw": hostnet.TGW, "gateway": hostnet.GATEWAY, "paths": [
        {"label": "hybrid host network → cloud pod", "path": hostnet.GATEWAY, "status": "FAIL"},
        {"label": "hybrid host network → ClusterIP Service", "path": None, "status": "FAIL"},
        {"label": "cloud pod → hybrid host network", "path": hostnet.TGW, "status": "PASS"}]}
    charts.write(tmp_path, "hostnet-paths", "t", data)
    shown = texts(tmp_path / "hostnet-paths.svg")
    assert f"1. hybrid host network → cloud pod: {hostnet.GATEWAY} (FAIL)" in shown
    assert "2. hybrid host network → ClusterIP Service: not measured" in shown
    assert "2" not in shown and "1" in shown and "3" in shown


# --- the README's chart, the requirements, the import ----------------------------------------

def test_the_readme_shows_the_chart_a_replay_draws_today(runs):
    """docs/img/failover-timeline.svg is failover-healthy's; after changing a chart on purpose,
    copy it again: `python -m rehearse report tests/fixtures/rehearse/failover-healthy --out DIR`."""
    assert README_CHART.read_bytes() == (runs["failover-healthy"] / "failover-timeline.svg").read_bytes()
    assert "docs/img/failover-timeline.svg" in (ROOT / "README.md").read_text()


def test_matplotlib_is_the_rehearsals_requirement_not_the_programs():
    assert "matplotlib" not in (ROOT / "requirements.txt").read_text()
    assert any(line.startswith("matplotlib>=3") for line in (ROOT / "requirements-rehearse.txt").read_text().splitlines())


def test_matplotlib_is_imported_only_inside_the_chart_modules_functions():
    """Commands that draw nothing never load it; analysers hand plain data to the drawing."""
    for path in sorted((ROOT / "rehearse").rglob("*.py")):
        source = path.read_text()
        # An import of matplotlib names it in the text: the other modules need no parse.
        if "matplotlib" not in source:
            continue
        tree = ast.parse(source)
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if not any(n.split(".")[0] == "matplotlib" for n in names):
                continue
            rel = path.relative_to(ROOT).as_posix()
            assert rel.startswith("rehearse/charts/"), rel
            assert node not in tree.body, f"{rel}: matplotlib imported at module level"


# --- a chart that cannot be drawn costs that picture, not the report -----------------------------


def test_a_chart_that_fails_to_draw_is_left_out_with_a_note_and_the_report_is_written(
        tmp_path, monkeypatch, capsys):
    from rehearse import charts

    def broken(folder, name, title, data):
        raise KeyError("status")

    monkeypatch.setattr(charts, "write", broken)
    folder = report_into(FIXTURES / "failover-healthy", tmp_path)
    report = json.loads((folder / "report.json").read_text())
    assert report["charts"] == []
    assert any("failover-timeline could not be drawn (KeyError" in n for n in report["notes"])
    assert "failover-timeline.png" not in (folder / "report.md").read_text()
    assert report["measurements"], "the tables are all there"


def test_ctrl_c_while_drawing_keeps_the_report_saying_which_charts_are_missing(tmp_path, monkeypatch):
    from rehearse import charts

    def interrupted(folder, name, title, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(charts, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cli.run_report(FIXTURES / "failover-healthy", out=tmp_path)
    folder = cli.replay_folder(FIXTURES / "failover-healthy", tmp_path)
    report = json.loads((folder / "report.json").read_text())
    assert report["charts"] == [] and report["measurements"]
    assert any("interrupted while drawing the charts: failover-timeline not drawn" in n
               for n in report["notes"])
    assert (folder / "report.md").is_file()
