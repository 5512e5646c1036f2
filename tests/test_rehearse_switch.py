"""Switching a stack setting and putting it back (rehearse/lab/switch.py, rehearse/lab/stack.py), shared
by `burst --scenarios` and `gateway-throughput --instance-types`.

Against the Automation API and the fake `pulumi` (tests/fake_pulumi.py), whose `up` keeps
running while it cancels on Ctrl-C, holds the stack's lock, and whose `stack select` changes
the workspace's current stack as the CLI's does; and against burst's played cluster
(tests/test_rehearse_burst.py) for what a switch leaves on the pods.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest

from rehearse import cli
from rehearse.commands.burst import command as burst_command
from rehearse.commands.burst import kinds as burst_kinds
from rehearse.commands.burst.switching import SCENARIO_SCOPE, clear_costs
from rehearse.lab import outputs
from rehearse.lab import stack as stack_api
from rehearse.lab import switch
from rehearse.commands.gateway_throughput import collect as throughput
from rehearse.commands.gateway_throughput import analyse as throughput_analysis
from rehearse.run.report import FAIL, PASS
from tests import fake_pulumi as fake_pulumi_cli
from tests.kube_emulator import PODS
from tests.test_rehearse_burst import NS, _checks, _name, lab_session

ROOT = Path(__file__).resolve().parent.parent


def _state(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Two stacks, "other" selected (the presenter's own choice), the rehearsal acting on dev."""
    return fake_pulumi_cli.install(tmp_path, monkeypatch, {"selected": "other", "stacks": {
        "dev": {"outputs": {"demo2": {"namespace": NS, "scenario": "A"}},
                "config": {burst_kinds.SCENARIO_KEY: "A"}},
        "other": {"outputs": {}, "config": {}}}})


def _ctx(yes: bool = True) -> SimpleNamespace:
    return SimpleNamespace(outputs=SimpleNamespace(stack="dev", named=True), options={"yes": yes},
                           progress=[].append, monotonic=time.monotonic)


def _switch(ctx) -> switch.ConfigSwitch:
    config = switch.ConfigSwitch(ctx, lambda: stack_api.open_stack("dev", ROOT), SCENARIO_SCOPE)
    ctx.said = ctx.progress.__self__
    config.read_original()
    return config


def _ctrl_c_during_up(state: Path, at: list[float]) -> threading.Thread:
    """A terminal's Ctrl-C, ``at`` seconds after the `up` took the lock: SIGINT to the
    foreground process group — this process, and the CLI if it shares the group (the SDK's
    Popen does; rehearse.lab.stack's runs it in its own session, and forwards)."""
    def press() -> None:
        # The `up`'s own start (a preview takes the lock too, and ends before the up begins).
        deadline = time.monotonic() + 30
        pid = None
        while pid is None and time.monotonic() < deadline:
            pid = next((e[0] for e in _timeline(state) if e[1:3] == ["start", "up"]), None)
            time.sleep(0.01)
        if pid is None:
            return
        started = time.monotonic()
        for delay in at:
            time.sleep(max(0.0, started + delay - time.monotonic()))
            try:
                if os.getpgid(pid) == os.getpgid(0):
                    os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            # A real signal (interrupt_main would not end the blocking wait for the child).
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=press, daemon=True)
    thread.start()
    return thread


def _timeline(state: Path) -> list[list]:
    return _state(state).get("timeline", [])


# --- item 5: Ctrl-C during a switch ------------------------------------------------------------

def test_ctrl_c_waits_for_pulumi_to_cancel_before_the_restore(fake):
    state, log = fake
    data = _state(state)
    data.update(up_seconds=3.0, cancel_seconds=0.3)
    state.write_text(json.dumps(data))
    ctx = _ctx()
    config = _switch(ctx)
    presser = _ctrl_c_during_up(state, [0.1])
    with pytest.raises(KeyboardInterrupt):
        config.switch("B", "burstScenario B")
    presser.join()
    data = _state(state)
    data["up_seconds"] = 0
    state.write_text(json.dumps(data))
    result = config.restore("burstScenario back to A")
    assert result["ok"] and result["applied"]
    # The interrupted `up` ended (cancelled, its lock released) before the restore's began.
    ups = [e for e in _timeline(state) if e[2] == "up"]
    assert [e[1] for e in ups] == ["start", "end", "start", "end"], ups
    assert ups[1][4] == "canceled" and ups[3][4] == "succeeded"
    final = _state(state)["stacks"]["dev"]
    assert final["config"][burst_kinds.SCENARIO_KEY] == "A" and final["deployed"][burst_kinds.SCENARIO_KEY] == "A"
    assert "lock" not in final and not final.get("pending_operations")
    said = "\n".join(ctx.said)
    assert "Ctrl-C: waiting up to" in said and "to cancel" in said


def test_a_second_ctrl_c_terminates_and_the_restore_says_what_to_run(fake):
    state, log = fake
    data = _state(state)
    data.update(up_seconds=3.0, cancel_seconds=5.0)
    state.write_text(json.dumps(data))
    config = _switch(_ctx())
    # Half a second apart: Popen.wait gives the child 0.25 s after the first KeyboardInterrupt,
    # and a second one inside that is the first's (Python's subprocess, bpo-25942).
    presser = _ctrl_c_during_up(state, [0.1, 0.6])
    with pytest.raises(KeyboardInterrupt):
        config.switch("C", "burstScenario C")
    presser.join()
    assert config.interrupted is not None and config.interrupted.forced and config.interrupted.finished
    with pytest.raises(switch.RestoreBlocked) as blocked:
        config.restore("burstScenario back to A")
    text = str(blocked.value)
    assert "3 pending operation(s)" in text and "demo-kyverno-deletion-cost (interrupted while creating)" in text
    assert "`pulumi refresh --stack dev`" in text and "--clear-pending-creates" in text
    assert "`pulumi config set --stack dev burstScenario A` and `pulumi up --stack dev`" in text
    # Nothing was run over the pending operations.
    assert [e[1] for e in _timeline(state) if e[2] == "up"] == ["start", "terminated"]


def test_the_fake_pulumi_refuses_a_second_update_while_one_holds_the_lock(fake):
    state, log = fake
    data = _state(state)
    data["stacks"]["dev"]["lock"] = {"id": "x", "pid": 4242, "username": "presenter",
                                     "hostname": "laptop", "timestamp": "2026-12-01T09:00:00Z"}
    state.write_text(json.dumps(data))
    with pytest.raises(Exception) as refused:
        stack_api.open_stack("dev", ROOT).up()
    assert "the stack is currently locked by 1 lock(s). Either wait for the other process(es) " \
           "to end or delete the lock file with `pulumi cancel`." in str(refused.value)


# --- item 6: preview first, only the switch's resources, confirm -------------------------------

def test_the_preview_reads_the_switch_s_steps_and_change_summary(fake):
    config = _switch(_ctx())
    config.config_changed = True
    config._set("C")
    plan = config.preview("burstScenario C")
    assert [(s["op"], s["name"]) for s in plan["steps"]] == [
        ("create", "demo-kyverno-deletion-cost"), ("update", "karpenter-karpenter-controller-release"),
        ("create", "demo-deletion-cost-ranks")]
    assert plan["summary"] == {"same": 60, "create": 2, "update": 1} and plan["outside"] == []


def test_a_switch_whose_preview_changes_more_is_refused_and_nothing_applied(tmp_path):
    with lab_session(tmp_path, scenario="A") as lab:
        lab.stack.pending_changes = [fake_pulumi_cli.program_step(
            "create", "aws:ec2/securityGroupRule:SecurityGroupRule",
            "eks-hybrid-lab:layer:Network$aws:ec2/securityGroupRule:SecurityGroupRule", "network-extra-rule")]
        assert lab.run("--scenarios", "B") == 1
        calls = [c for c in lab.stack.calls if c[0] != "get"]
        assert calls == [("set", burst_kinds.SCENARIO_KEY, "B"), ("preview", "B"), ("set", burst_kinds.SCENARIO_KEY, "A")]
        assert lab.cluster.scenario == "A"
        checks = _checks(lab.report())
        seen = checks[_name("B", burst_kinds.C_SWITCH)]["seen"]
        assert checks[_name("B", burst_kinds.C_SWITCH)]["status"] == FAIL
        assert "changes more than the scenario's resources" in seen and "network-extra-rule" in seen
        assert checks[burst_kinds.CHECK_RESTORED]["status"] == PASS


def test_each_switch_prints_its_plan_before_the_up(tmp_path):
    with lab_session(tmp_path, scenario="A") as lab:
        assert lab.run("--scenarios", "C") == 0, lab.markdown()
        said = lab.cluster.progress
        plan = said.index("plan (burstScenario C):")
        assert said.index("pulumi preview (burstScenario C)") < plan < said.index("pulumi up (burstScenario C)")
        assert any("karpenter-karpenter-controller-release" in line for line in said[plan:plan + 5])
        switched = next(e for e in lab.events() if e["kind"] == burst_kinds.SWITCHED)
        assert switched["change_summary"] == {"same": 60, "create": 2, "update": 1}


def test_without_yes_a_non_terminal_stdin_is_refused_before_anything_changes(tmp_path, capsys):
    with lab_session(tmp_path, scenario="A") as lab:
        assert lab.run("--scenarios", "B", yes=False) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert "stdin is not a terminal" in line and "--yes" in line
        assert [c for c in lab.stack.calls if c[0] in ("set", "rm", "preview", "up")] == []


def test_without_yes_the_presenter_is_asked_and_a_no_applies_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(burst_command, "require_confirmation", lambda ctx, what: None)  # a terminal
    asked = []
    monkeypatch.setattr(switch, "ask", lambda question: asked.append(question) or False)
    with lab_session(tmp_path, scenario="A") as lab:
        assert lab.run("--scenarios", "B", yes=False) == 1
        assert [c for c in lab.stack.calls if c[0] == "up"] == []
        assert asked and "apply this plan (burstScenario B)" in asked[0]
        assert lab.stack.config.get(burst_kinds.SCENARIO_KEY) == "A"


def test_instance_types_say_the_node_group_is_replaced_and_the_leader_fails_over():
    parser = cli.build_parser()
    text = " ".join(parser._subparsers._group_actions[0].choices["gateway-throughput"].format_help().split())
    assert "REPLACES the gateway node group's nodes" in text and "fails over" in text
    report = throughput_analysis.analyse([
        {"kind": "run.started", "at": "2026-12-01T09:00:00Z", "stack": "lab"},
        {"kind": throughput.SETTINGS, "namespace": "demo-gateway", "seconds": 10, "streams": 4,
         "image": "x", "instance_types": ["c6in.xlarge"]}])
    assert any("failed over at every switch" in note for note in report.notes)


def test_the_instance_type_scope_is_the_gateway_node_group():
    steps = fake_pulumi_cli.program_steps("lab", {throughput.CONFIG_KEY: "m6i.large"},
                                          {throughput.CONFIG_KEY: "c6in.xlarge"})
    assert steps and all(throughput.GATEWAY_SCOPE.allows(switch.step_of(s["urn"], s["op"], s["type"]))
                         for s in steps)
    burst_steps = fake_pulumi_cli.program_steps("lab", {}, {burst_kinds.SCENARIO_KEY: "C"})
    assert not any(throughput.GATEWAY_SCOPE.allows(switch.step_of(s["urn"], s["op"], s["type"]))
                   for s in burst_steps)


# --- item 7: the presenter's selected stack stays selected ---------------------------------------

def test_switching_dev_leaves_the_selected_stack_as_it_was(fake):
    state, log = fake
    config = _switch(_ctx())
    assert config.switch("B", "burstScenario B")["ok"]
    assert config.restore("burstScenario back to A")["ok"]
    values = outputs.from_pulumi("dev", ROOT)
    assert values.stack == "dev" and values.values["demo2"]["scenario"] == "A"
    calls = [[a for a in json.loads(line) if a != "--non-interactive"] for line in log.read_text().splitlines()]
    assert not [c for c in calls if c[:2] == ["stack", "select"]]
    assert all("--stack" in c and c[c.index("--stack") + 1] == "dev"
               for c in calls if c[:1] in (["up"], ["preview"], ["config"]))
    listed = stack_api.open_stack("dev", ROOT).workspace.list_stacks()
    assert {s.name: s.current for s in listed} == {"dev": False, "other": True}


def test_the_fake_pulumi_selects_as_the_cli_does(fake):
    """The check above can fail: a `stack select` moves the current stack."""
    from pulumi import automation

    automation.select_stack("dev", work_dir=str(ROOT))
    listed = stack_api.open_stack("dev", ROOT).workspace.list_stacks()
    assert {s.name: s.current for s in listed} == {"dev": True, "other": False}


# --- item 8: the restore removes what the switch left on the pods ---------------------------------

def test_after_b_the_restore_to_a_strips_kyverno_s_costs_and_verify_passes(tmp_path):
    with lab_session(tmp_path, scenario="A") as lab:
        assert lab.run("--scenarios", "B") == 0, lab.markdown()
        restored = next(e for e in lab.events() if e["kind"] == burst_kinds.RESTORED)
        assert restored["ok"] and restored["costs_cleared"] and \
            {c["cost"] for c in restored["costs_cleared"]} == {"1"}
        pods = [lab.server.get(PODS, NS, name) for name in lab.cluster.pods]
        assert all(burst_kinds.COST not in (p["metadata"].get("annotations") or {}) for p in pods if p)
        for folder in lab.out.iterdir():
            for item in folder.iterdir():
                item.unlink()
            folder.rmdir()
        assert lab.run("verify") == 0, lab.markdown()
        assert _checks(lab.report())[_name("A", burst_kinds.C_FOREIGN_COST)]["status"] == PASS


def test_a_restore_to_b_keeps_kyverno_s_one_and_strips_karpenter_s_ranks():
    pods = [{"metadata": {"name": "p1", "annotations": {burst_kinds.COST: "1"}}},
            {"metadata": {"name": "p2", "annotations": {burst_kinds.COST: "-2"}}},
            {"metadata": {"name": "p3", "annotations": {}}}]
    cluster = mock.Mock(burst_pods=lambda: pods, t={"Pod": "Pod"}, s=SimpleNamespace(namespace=NS))
    assert clear_costs(cluster, "B") == [{"name": "p2", "cost": "-2"}]
    assert clear_costs(cluster, "C") == []
    assert [c["name"] for c in clear_costs(cluster, "A")] == ["p1", "p2"]


# --- item 15: --outputs without --stack changes no stack -------------------------------------------

def test_outputs_without_stack_refuses_to_switch(tmp_path, capsys):
    with lab_session(tmp_path, scenario="A") as lab:
        assert lab.run("--scenarios", "B", stack=None) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("error: burst --scenarios changes the stack's config: pass --stack NAME")
        assert lab.stack.calls == []


def test_outputs_without_stack_still_runs_what_changes_nothing(tmp_path):
    with lab_session(tmp_path, scenario="A") as lab:
        assert lab.run("verify", stack=None) == 0, lab.markdown()
