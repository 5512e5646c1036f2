"""The plan is read in a terminal: every line fits 120 columns, the chart-source modelling detail
is behind --details, and the Time section says how a host's Node cleanup ends it."""

from __future__ import annotations

import pytest

from offline import plan as offline_plan
from tests.conftest import PROJECT_DIR, main_in_process
from tests.test_accounts import FAKE_CLOUD_ACCOUNT

DEV = (PROJECT_DIR / "Pulumi.dev.yaml").read_text()

#: The stack files the tests plan: the dev stack's copy under another name
#: (test_plan.py), a profile with a pinned account (test_accounts.py), and the largest
#: variant the settings allow a plan of (the GPU host and ten hybrid hosts: the longest lists).
STACK_FILES = {
    "Pulumi.variant.yaml": DEV,
    "Pulumi.profiled.yaml": ("config:\n  aws:region: ap-northeast-2\n  aws:profile: lab\n"
                             f"  aws:allowedAccountIds:\n    - \"{FAKE_CLOUD_ACCOUNT}\"\n"),
    "Pulumi.big.yaml": DEV.replace("gpuEnabled: false", "gpuEnabled: true")
                          .replace("hybridNodeCount: 2", "hybridNodeCount: 10"),
}


def _planned(capsys, monkeypatch, *args):
    done = main_in_process(capsys, monkeypatch, "offline.plan", offline_plan.main, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > offline_plan.WIDTH]


@pytest.mark.parametrize("details", [False, True])
def test_every_line_of_the_dev_plan_fits_120_columns(capsys, monkeypatch, details):
    out = _planned(capsys, monkeypatch, *(["--details"] if details else []))
    assert offline_plan.WIDTH == 120
    assert not _too_wide(out), _too_wide(out)
    # Not vacuous: the plan has rows that come out wider than that before they are fitted.
    assert "\n                                                        network-" in out


@pytest.mark.parametrize("name", sorted(STACK_FILES))
def test_every_line_of_each_stack_files_plan_fits_120_columns(tmp_path, capsys, monkeypatch,
                                                              name):
    path = tmp_path / name
    path.write_text(STACK_FILES[name])
    out = _planned(capsys, monkeypatch, "--stack-file", str(path))
    assert not _too_wide(out), _too_wide(out)


def test_fitting_keeps_every_word_in_order_and_indents_continuations():
    row = ("       aws.ec2.Route   6  " + ", ".join(f"network-route-number-{i}" for i in range(12)))
    fitted = offline_plan.fit(row).splitlines()
    assert len(fitted) > 1 and all(len(line) <= 120 for line in fitted)
    assert " ".join(fitted).split() == row.split()
    # Continuations start under the names, the row's last column.
    assert all(line.startswith(" " * 26) and line[26] != " " for line in fitted[1:])


def test_the_chart_source_detail_is_behind_details_and_the_plan_says_so(capsys, monkeypatch):
    plain = _planned(capsys, monkeypatch)
    detailed = _planned(capsys, monkeypatch, "--details")
    heading = "Chart values not read by the chart source here"
    assert heading not in plain and heading in detailed
    assert plain.rstrip().splitlines()[-1].startswith("--details adds the chart values")
    assert "--details adds" not in detailed


def test_the_plan_says_a_hosts_node_cleanup_ends_it(capsys, monkeypatch):
    out = _planned(capsys, monkeypatch)
    time = out.split("\nTime (", 1)[1].split("\n\n", 1)[0]
    # The hosts boot while EKS creates the control plane: neither a host nor its cleanup is on
    # the up path.
    up = " ".join(time.split("  pulumi up", 1)[1].split("\n  node cleanup", 1)[0].split())
    assert "cluster-eks-cluster" in up and "hybrid-hosts-" not in up
    assert ("\n  node cleanup    <host>-node comes after its host and, at delete, terminates the "
            "host before it deletes the Node\n") in time
