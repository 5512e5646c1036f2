"""EKS support windows: the cluster is created with upgradePolicy STANDARD (the API's default
is EXTENDED, six times the price once a version leaves standard support), a version past
standard support is refused with its date, one that ends while the lab may be up is warned
about, and the cost table says which support it prices."""

from __future__ import annotations

import datetime
import io

import pytest

from components.eks_versions import STANDARD_SUPPORT_ENDS, support_window
from stacks import config as config_module
from offline import plan
from stacks import costs
from stacks.config import LAB_LIFETIME_DAYS, SETTINGS_BY_KEY, ConfigError, load_config
from offline.runner import run_program
from tests.conftest import lab_config

CLUSTER = "aws:eks/cluster:Cluster"


def load(version: str, day: datetime.date):
    return load_config({"kubernetesVersion": version}, stack="test", region="ap-northeast-2", day=day)


def test_the_cluster_is_created_with_standard_support(dev_run):
    [cluster] = dev_run.of_type(CLUSTER)
    assert cluster.inputs["upgradePolicy"] == {"supportType": "STANDARD"}


def test_the_dated_end_of_standard_support_is_refused_from_that_day():
    # 1.34's standard support ends 2026-12-02 (EKS version calendar).
    assert load("1.34", datetime.date(2026, 12, 1)).kubernetes_version == "1.34"
    with pytest.raises(ConfigError) as refused:
        load("1.34", datetime.date(2026, 12, 2))
    [violation] = refused.value.violations
    assert violation.key == "kubernetesVersion" and violation.value == "1.34"
    assert "ended on 2026-12-02" in violation.rule
    assert "$0.60/h instead of $0.10/h" in violation.rule
    assert "choose 1.35 or 1.36" in violation.rule


@pytest.mark.parametrize("version", ["1.32", "1.33"])
def test_versions_already_in_extended_support_are_refused(version):
    with pytest.raises(ConfigError, match=f"EKS standard support for {version} ended on"):
        load(version, datetime.date(2026, 12, 1))


def test_a_version_ending_while_the_lab_may_be_up_is_warned_about(monkeypatch):
    monkeypatch.setattr(config_module, "today", lambda: datetime.date(2026, 11, 20))
    run = run_program(lab_config(kubernetesVersion="1.34", upToLayer="cluster"))
    [warning] = [w for w in run.warnings if "standard support ends" in w]
    assert "kubernetesVersion 1.34: EKS standard support ends 2026-12-02" in warning
    assert "pulumi config set kubernetesVersion 1.35" in warning
    quiet = run_program(lab_config(kubernetesVersion="1.35", upToLayer="cluster"))
    assert not [w for w in quiet.warnings if "standard support ends" in w]


def test_the_default_version_stays_in_standard_support_for_a_whole_lab_today():
    """On the real clock: when this fails, the default in stacks/config.py (and Pulumi.yaml,
    Pulumi.dev.yaml) and components/eks_versions.py need the next EKS version."""
    default = SETTINGS_BY_KEY["kubernetesVersion"].default
    window = support_window(default)
    assert not window.ends_within(datetime.date.today(), LAB_LIFETIME_DAYS), (
        f"{default}'s standard support ends {window.standard_ends}: move the default on")


def test_every_offered_version_but_the_newest_has_a_date():
    versions = list(STANDARD_SUPPORT_ENDS)
    assert all(STANDARD_SUPPORT_ENDS[v] for v in versions[:-1])
    dated = [STANDARD_SUPPORT_ENDS[v] for v in versions[:-1]]
    assert dated == sorted(dated), "each minor leaves standard support after the one before"


def test_the_cost_table_says_which_support_it_prices(dev_run):
    out = io.StringIO()
    plan.render(dev_run, out)
    text = out.getvalue()
    assert ("the control plane is priced at EKS standard support ($0.10/h): upgradePolicy "
            "STANDARD, 1.35 in standard support until 2027-03-27" in text)


def test_control_plane_log_ingestion_is_in_the_cluster_layers_cost(dev_run):
    cfg = dev_run.lab_config
    with_logs = {c.layer: c for c in costs.estimate(cfg)[0]}["cluster"]
    without = {c.layer: c for c in costs.estimate(cfg, {"logs.ingestion": 0.0})[0]}["cluster"]
    price = costs.PRICES["ap-northeast-2"]["logs.ingestion"].usd
    low_gb, high_gb = costs.CONTROL_PLANE_LOG_GB_PER_DAY
    assert with_logs.low - without.low == pytest.approx(low_gb / 24 * price, abs=1e-4)
    assert with_logs.high - without.high == pytest.approx(high_gb / 24 * price, abs=1e-4)
    assert "control-plane logs" in with_logs.note
