"""The pinned nodeadm and its SSM signing key: preflight's check, on a fixed clock, and the
facts it stands on (docs/hybrid-nodes.md#nodeadm)."""

from __future__ import annotations

import datetime
import io

import pytest

from components.nodeadm import NODEADM_VERSION, SSM_KEY_EXPIRES, ssm_key_expires
from components.nodeadm import SSM_KEY_WARN_DAYS as WARN_DAYS
from ops.preflight.checks import FAIL, PASS, WARN
from offline.plan import render_nodeadm
from offline.runner import Secret
from ops.preflight.nodeadm_key import NAME, check_nodeadm_ssm_key

UTC = datetime.timezone.utc
EXPIRES = SSM_KEY_EXPIRES[NODEADM_VERSION]
DAY = datetime.timedelta(days=1)


def far_from_expiry() -> datetime.datetime:
    """A clock for preflight runs that test other checks: a year before the pin's key expires."""
    return EXPIRES - 365 * DAY


def test_the_recorded_expiries_are_the_keys_own():
    """The key in v1.0.18's internal/ssm/source.go expired on 2026-07-15 (aws/eks-hybrid #864,
    #865); v1.0.19 and v1.0.20 carry one that expires on 2027-11-25 (the source's comment; the
    times are the keys' self-signatures)."""
    assert SSM_KEY_EXPIRES["v1.0.18"] == datetime.datetime(2026, 7, 15, 18, 19, 26, tzinfo=UTC)
    assert SSM_KEY_EXPIRES["v1.0.19"] == SSM_KEY_EXPIRES["v1.0.20"] == \
        datetime.datetime(2027, 11, 25, 13, 58, 7, tzinfo=UTC)
    assert ssm_key_expires() == EXPIRES


def test_a_key_far_from_expiry_passes():
    check = check_nodeadm_ssm_key(far_from_expiry())
    assert check.name == NAME and check.status == PASS
    assert check.detail == (f"nodeadm {NODEADM_VERSION}: its SSM key expires on "
                            f"{EXPIRES:%Y-%m-%d %H:%M} UTC, in 365 days")


@pytest.mark.parametrize("days_left", [WARN_DAYS, 30, 1])
def test_a_key_expiring_within_the_warning_window_warns_naming_the_fix(days_left):
    check = check_nodeadm_ssm_key(EXPIRES - days_left * DAY)
    assert check.status == WARN
    assert f"in {days_left} days" in check.detail and "cannot join" in check.detail
    assert "raise NODEADM_VERSION in components/nodeadm.py" in check.fix


def test_the_day_before_the_window_still_passes():
    assert check_nodeadm_ssm_key(EXPIRES - (WARN_DAYS + 1) * DAY).status == PASS


@pytest.mark.parametrize("after", [datetime.timedelta(0), datetime.timedelta(seconds=1), 400 * DAY])
def test_an_expired_key_fails_naming_the_fix(after):
    check = check_nodeadm_ssm_key(EXPIRES + after)
    assert check.status == FAIL
    assert f"expired on {EXPIRES:%Y-%m-%d %H:%M} UTC" in check.detail
    assert "no host can join" in check.detail
    assert "raise NODEADM_VERSION in components/nodeadm.py" in check.fix


def test_a_release_pinned_before_the_new_key_fails_today():
    """v1.0.18 on the day this lab pinned v1.0.20: its key had expired."""
    check = check_nodeadm_ssm_key(datetime.datetime(2026, 12, 4, tzinfo=UTC), version="v1.0.18")
    assert check.status == FAIL and "nodeadm v1.0.18" in check.detail


def test_a_pin_without_a_recorded_expiry_fails():
    check = check_nodeadm_ssm_key(far_from_expiry(), version="v9.9.9")
    assert check.status == FAIL and "not recorded" in check.detail
    assert "SSM_KEY_EXPIRES" in check.fix



# --- the plan says which release the hosts install ---------------------------------------------

def _plan_lines(run, today) -> list[str]:
    out = io.StringIO()
    render_nodeadm(run, out, today=today)
    return out.getvalue().splitlines()


def test_the_plan_names_the_release_the_hosts_user_data_installs_and_its_key_expiry(lab):
    run = lab(gpuEnabled=True)
    lines = _plan_lines(run, EXPIRES - 100 * DAY)
    assert lines[1].startswith("Hybrid hosts' nodeadm (pinned: NODEADM_VERSION in components/nodeadm.py")
    assert lines[2:] == [
        f"  nodeadm {NODEADM_VERSION} on 3 hosts (hybrid-hosts-gpu, hybrid-hosts-node-0, "
        f"hybrid-hosts-node-1): its SSM signing key expires {EXPIRES:%Y-%m-%d} (100 days from "
        f"today; preflight warns {WARN_DAYS} days before)"]
    assert _plan_lines(run, EXPIRES + DAY)[2].endswith(
        f"expires {EXPIRES:%Y-%m-%d}: EXPIRED, no host can install nodeadm with SSM")


class _Host:
    type = "aws:ec2/instance:Instance"

    def __init__(self, name: str, url: str):
        self.name = name
        self.inputs = {"userData": Secret(f"NODEADM_URL='{url}'\ncat <<'NODECONFIG'\nkind: NodeConfig\nNODECONFIG\n")}


class _Run:
    def __init__(self, *hosts):
        self.hosts = hosts

    def of_type(self, type_):
        return [h for h in self.hosts if h.type == type_]


def test_the_plan_says_when_a_host_installs_an_unpinned_nodeadm():
    latest = "https://hybrid-assets.eks.amazonaws.com/releases/latest/bin/linux/amd64/nodeadm"
    lines = _plan_lines(_Run(_Host("hybrid-hosts-node-0", latest)), far_from_expiry())
    assert lines[2] == ("  nodeadm latest on 1 host (hybrid-hosts-node-0): NOT PINNED to a release "
                        "whose SSM key is known")
    assert _plan_lines(_Run(), far_from_expiry()) == []
