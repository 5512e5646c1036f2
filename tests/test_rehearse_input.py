"""Input the tool cannot use stops every command before anything starts, and a run that ended
part-way says "not read" for what it never read.

The first half runs each command (``rehearse.cli.main``, in-process) with one bad input at a
time — an outputs file that is missing, not JSON, or without an output the command's collector
reads; a --kubeconfig that is missing, not YAML, without a current context, or whose server does
not answer; an unknown --stack (through the fake `pulumi` the other tests use); an option with a
value it cannot take — and expects exit 2, one line on stderr naming the setting and its value,
no traceback, and no run folder. What each command reads is written out here from its collector
(rehearse/<command>.py's ``collect``), not taken from the modules' own declarations.

The second half cuts the recorded runs of tests/fixtures/rehearse/ after every event, ends each
cut as a failed or an interrupted run, and analyses it as ``rehearse report`` would: no check may
FAIL unless the whole recording FAILs it too (a verdict on what was read), the cut leaves a
change of this run not undone, or it is the one read the failed run was making (a FAIL with the
run's error); a check that was not read is NOT READ, says why, and has no fix.
The expectations come from the events (their kinds and order), not from the recordings' stack
names or times, which change when they are recorded again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from rehearse import cli
from rehearse.run import execute as run_execute
from rehearse.run import outcome
from rehearse.run import record
from rehearse.run.errors import RunError
from rehearse.run.report import FAIL, NOT_READ
from tests import fake_pulumi as fake_pulumi_cli
from tests.conftest import PROJECT_DIR, main_in_process

FIXTURES = Path(__file__).parent / "fixtures" / "rehearse"

#: Every output a command of this tool reads, with a value of the shape the lab writes.
COMPLETE = {
    "region": "ap-northeast-2", "kubeconfig": "{}", "clusterName": "hybrid-lab-lab",
    "layers": ["network", "cluster", "gateway", "hybrid", "demo"],
    "gatewayNamespace": "eks-hybrid-nodes-gateway", "gatewayLeaseName": "hybrid-gateway-leader",
    "gatewayRouteTableIds": ["rtb-0123456789abcdef0"], "hybridPodCidr": "172.17.0.0/16",
    "demo1": {"namespace": "demo-gateway"},
    "demo2": {"namespace": "demo-burst", "deployment": "burst", "scenario": "A",
              "scaleSequence": [3, 15, 12, 10, 3]},
    "demo3": {"namespace": "demo-gpu", "deployment": "vllm", "service": "vllm", "port": 8000,
              "clientDeployment": "vllm-client"},
}

#: What each command's collector reads from the stack (its ``collect``), and the cluster's
#: address every command reads (rehearse.cli: region, and the kubeconfig without --kubeconfig).
FRAME = ("region", "kubeconfig")
GATEWAY = ("gatewayNamespace", "gatewayLeaseName", "gatewayRouteTableIds", "hybridPodCidr", "demo1")
READS = {
    "verify gateway": GATEWAY + FRAME,
    "failover": GATEWAY + FRAME,
    "verify gpu": ("demo3",) + FRAME,
    "verify burst": ("demo2",) + FRAME,
    "burst": ("demo2",) + FRAME,
    "gateway-throughput": ("demo1",) + FRAME,
    "hostnet": ("demo1", "hybridPodCidr") + FRAME,
    "preflight": FRAME,
    # Every step's, before the first starts (demo 3's step is skipped without demo3).
    "all": tuple(dict.fromkeys(GATEWAY + ("demo2",) + FRAME)),
}
#: The layers a collector requires by name (rehearse/commands/verify_gateway/collect.py, rehearse/commands/hostnet/collect.py).
LAYERS = {"verify gateway": ("gateway", "demo"), "hostnet": ("demo",)}
#: The commands that make a run folder, with what each needs besides the outputs: the
#: pre-check (and so `all`) reads the stack's Pulumi.<stack>.yaml, so names the stack; `all`
#: asks before what changes the lab unless --yes.
RUNS = {"verify gateway": (), "verify gpu": (), "verify burst": (), "preflight": (),
        "failover": (), "burst": (), "gateway-throughput": (), "hostnet": (), "all": ("--yes",)}


class Reached(RunError):
    """Raised where the run would connect to the cluster: the input was usable."""


@pytest.fixture
def lab(tmp_path, monkeypatch, capsys):
    """A project folder with the lab's stack file for stack "lab", an outputs file of every
    output, and ``run(command, *args, outputs=..., connect=True)``: the command's exit code,
    its stderr lines and the entries --out holds after it."""
    work = tmp_path / "project"
    work.mkdir()
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", work / "Pulumi.yaml")
    shutil.copy(PROJECT_DIR / "Pulumi.dev.yaml", work / "Pulumi.lab.yaml")
    out = tmp_path / "rehearsals"
    default_out = sorted((PROJECT_DIR / "rehearsals").glob("*")) if (PROJECT_DIR / "rehearsals").exists() else []

    def refuse_to_connect(args: Any, outputs: Any) -> Any:
        raise Reached("reached the cluster")

    def outputs_file(values: dict) -> Path:
        path = tmp_path / "lab.json"
        path.write_text(json.dumps(values))
        return path

    def run(command: str, *args: str, outputs: Optional[Any] = COMPLETE, stack: bool = True,
            patch_connect: bool = True) -> tuple[int, list[str], list[str]]:
        if patch_connect:
            monkeypatch.setattr(run_execute, "_connect", refuse_to_connect)
        argv = command.split()
        if isinstance(outputs, dict):
            argv += ["--outputs", str(outputs_file(outputs))]
        elif outputs is not None:
            argv += ["--outputs", str(outputs)]
        if stack and "--stack" not in args:
            argv += ["--stack", "lab"]
        if command not in ("predict", "report", "summary"):
            argv += ["--work-dir", str(work), "--out", str(out), *RUNS.get(command, ())]
        try:
            done = main_in_process(capsys, monkeypatch, "rehearse", cli.main, *argv, *args)
        except SystemExit as exited:  # argparse's refusal of an option's value
            captured = capsys.readouterr()
            done = subprocess.CompletedProcess(argv, exited.code, captured.out, captured.err)
        after = sorted((PROJECT_DIR / "rehearsals").glob("*")) if (PROJECT_DIR / "rehearsals").exists() else []
        assert after == default_out, "nothing may appear in ./rehearsals"
        return done.returncode, done.stderr.splitlines(), sorted(p.name for p in out.glob("*"))

    run.tmp = tmp_path
    run.work = work
    run.out = out
    return run


def refused(result: tuple[int, list[str], list[str]], *named: str) -> str:
    """Exit 2, one line naming each of ``named``, no traceback, nothing in --out."""
    code, lines, made = result
    assert code == 2, lines
    assert len(lines) == 1, lines
    [line] = lines
    assert "Traceback" not in line and line.startswith(("error: ", "python -m rehearse"))
    for text in named:
        assert text in line, (text, line)
    assert made == [], f"a refused run left {made}"
    return line


def without(key: str) -> dict:
    return {k: v for k, v in COMPLETE.items() if k != key}


# --- complete input reaches the cluster ----------------------------------------------------------

@pytest.mark.parametrize("command", sorted(RUNS))
def test_complete_input_gets_as_far_as_the_cluster_and_leaves_no_folder(lab, command):
    # The outputs above are enough for every command: the input check lets each through, and a
    # cluster that cannot be reached still leaves no folder.
    line = refused(lab(command), "reached the cluster")
    assert line == "error: reached the cluster"


# --- the outputs file ------------------------------------------------------------------------

@pytest.mark.parametrize("command", sorted(RUNS) + ["predict"])
def test_a_missing_outputs_file_is_one_line(lab, command):
    missing = lab.tmp / "nope.json"
    extra = ("--replicas", "1") if command == "predict" else ()
    refused(lab(command, *extra, outputs=missing), str(missing),
            "pulumi stack output --json --show-secrets")


@pytest.mark.parametrize("command", sorted(RUNS) + ["predict"])
def test_an_outputs_file_that_is_not_json_is_one_line(lab, command):
    bad = lab.tmp / "bad.json"
    bad.write_text("region: ap-northeast-2\n")
    extra = ("--replicas", "1") if command == "predict" else ()
    refused(lab(command, *extra, outputs=bad), str(bad), "is not the JSON")


@pytest.mark.parametrize("command, key", [(c, k) for c, keys in READS.items() for k in keys])
def test_an_output_the_command_reads_missing_is_one_line_naming_it(lab, command, key):
    line = refused(lab(command, outputs=without(key)), key, str(lab.tmp / "lab.json"))
    assert "pulumi stack output --json --show-secrets" in line


@pytest.mark.parametrize("command, layer", [(c, layer) for c, layers in LAYERS.items() for layer in layers])
def test_a_layer_the_command_needs_missing_is_one_line_naming_it(lab, command, layer):
    values = {**COMPLETE, "layers": [x for x in COMPLETE["layers"] if x != layer]}
    refused(lab(command, outputs=values), f"no {layer} layer")


@pytest.mark.parametrize("command, key, value, said", [
    ("failover", "gatewayRouteTableIds", [], "gatewayRouteTableIds is empty"),
    ("verify gateway", "demo1", {}, "the output demo1 names no namespace"),
    ("hostnet", "demo1", {"probers": {}}, "the output demo1 names no namespace"),
    ("gateway-throughput", "demo1", {}, "no output demo1"),
    ("verify burst", "demo2", {"scaleSequence": [3, 2]}, "scaleSequence [3, 2]"),
    ("burst", "demo2", "A", "no output demo2"),
])
def test_an_output_of_the_wrong_shape_is_one_line(lab, command, key, value, said):
    refused(lab(command, outputs={**COMPLETE, key: value}), said)


def test_the_gateway_outputs_without_route_tables_start_no_run(lab):
    # The report this replaces: a run folder and nine FAIL lines, none of them true.
    line = refused(lab("verify gateway", outputs=without("gatewayRouteTableIds")))
    assert line == (f"error: the outputs file {lab.tmp / 'lab.json'} has no output "
                    "gatewayRouteTableIds (the gateway layer's), which verify gateway reads: "
                    "write it from a stack that has it with `pulumi stack output --json "
                    f"--show-secrets > {lab.tmp / 'lab.json'}`")


# --- the kubeconfig ------------------------------------------------------------------------------

def kubeconfigs(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Kubeconfig files that cannot be used, and what the one line must say of each."""
    missing = tmp / "missing-kubeconfig"
    not_yaml = tmp / "not-yaml"
    not_yaml.write_text("clusters: [unclosed\n  - : :\n")
    no_context = tmp / "no-context"
    no_context.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [],
                                          "users": [], "contexts": []}))
    return {"missing": (missing, "the file does not exist"), "not YAML": (not_yaml, "not YAML"),
            "no current context": (no_context, "sets no current-context")}


@pytest.mark.parametrize("case", ["missing", "not YAML", "no current context"])
@pytest.mark.parametrize("command", sorted(RUNS) + ["predict"])
def test_a_kubeconfig_that_cannot_be_used_is_one_line(lab, command, case):
    path, said = kubeconfigs(lab.tmp)[case]
    extra = ("--replicas", "1") if command == "predict" else ()
    line = refused(lab(command, *extra, "--kubeconfig", str(path), patch_connect=False), said)
    assert f"--kubeconfig {path}" in line or f"the kubeconfig {path}" in line


@pytest.mark.parametrize("command", sorted(RUNS))
def test_a_kubeconfig_whose_server_does_not_answer_is_one_line(lab, command, monkeypatch):
    path = lab.tmp / "kubeconfig"
    # Port 9 (discard) on this machine: nothing listens there.
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:9",
                                                 "insecure-skip-tls-verify": True}}],
        "users": [{"name": "lab", "user": {"token": "t"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}]}))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    # `all` too: it reaches for the cluster before its first step, so nothing runs and no
    # summary of nothing is written.
    refused(lab(command, "--kubeconfig", str(path), patch_connect=False), "cannot reach the cluster")


# --- the stack -------------------------------------------------------------------------------

@pytest.fixture
def stacks(tmp_path, monkeypatch):
    """The fake `pulumi` with stacks dev and lab, dev selected."""
    return fake_pulumi_cli.install(tmp_path, monkeypatch, {"selected": "dev", "stacks": {
        "dev": {"outputs": dict(COMPLETE)}, "lab": {"outputs": dict(COMPLETE)}}})


@pytest.mark.parametrize("command", sorted(RUNS) + ["predict"])
def test_an_unknown_stack_lists_the_stacks_there_are(lab, stacks, command):
    extra = ("--replicas", "1") if command == "predict" else ()
    line = refused(lab(command, *extra, "--stack", "dve", outputs=None), "--stack dve",
                   "the stacks there are dev, lab")
    assert "no stack named" not in line


def test_the_pre_check_of_a_stack_without_a_stack_file_lists_the_stack_files(lab, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "no-pulumi-here"))
    refused(lab("preflight", "--stack", "dve"), "--stack dve", "Pulumi.dve.yaml", "the stacks there are lab")


@pytest.mark.parametrize("command", sorted(set(RUNS) - {"preflight"}) + ["predict"])
def test_without_pulumi_a_mistyped_stack_is_named_with_the_stack_files(lab, monkeypatch, tmp_path, command):
    # No `pulumi` on PATH (a fresh machine): a stack no Pulumi.<stack>.yaml is for is named
    # as mistyped, with the stack files, before the missing CLI.
    monkeypatch.setenv("PATH", str(tmp_path / "no-pulumi-here"))
    extra = ("--replicas", "1") if command == "predict" else ()
    work = ("--work-dir", str(lab.work)) if command == "predict" else ()
    refused(lab(command, *extra, *work, "--stack", "dve", outputs=None), "--stack dve",
            "no Pulumi.dve.yaml", "the stack files there are for lab", "the pulumi CLI is not installed")


def test_without_a_stack_ls_the_stack_files_are_listed(lab, monkeypatch, tmp_path):
    # A `pulumi` that cannot list (another backend, logged out): the Pulumi.<stack>.yaml files.
    from rehearse.lab import outputs

    shutil.copy(PROJECT_DIR / "Pulumi.dev.yaml", lab.work / "Pulumi.stage.yaml")
    monkeypatch.setenv("PATH", str(tmp_path / "no-pulumi-here"))
    assert outputs.known_stacks(lab.work) == ["lab", "stage"]


# --- option values ---------------------------------------------------------------------------

OPTIONS = [
    ("verify gateway", ["--window", "-1"], "--window", "-1"),
    ("verify gateway", ["--min-successes", "0"], "--min-successes", "0"),
    ("verify gpu", ["--min-success-rate", "200"], "--min-success-rate", "200"),
    ("verify burst", ["--within", "soon"], "--within", "soon"),
    ("failover", ["--interval", "5"], "--interval", "5"),
    ("burst", ["--scenarios", "Z"], "--scenarios", "Z"),
    ("gateway-throughput", ["--instance-types", "c6in.xlarge"], "--instance-types", "--stack"),
    ("hostnet", ["--port", "80"], "--port", "80"),
    ("hostnet", ["--attempts", "0"], "--attempts", "0"),
    ("all", ["--scenarios", "Q"], "--scenarios", "Q"),
    ("predict", ["--replicas", "x"], "--replicas", "'x'"),
    ("predict", ["--replicas", "1", "--now", "yesterday"], "--now", "yesterday"),
]


@pytest.mark.parametrize("command, args, setting, value", OPTIONS)
def test_an_option_value_the_command_cannot_take_is_one_line(lab, command, args, setting, value):
    stack = not (command == "gateway-throughput")
    refused(lab(command, *args, stack=stack), setting, value)


def test_predict_pods_file_missing_is_one_line(lab):
    missing = lab.tmp / "pods.json"
    refused(lab("predict", "--replicas", "1", "--pods", str(missing), outputs=None, stack=False),
            str(missing), "kubectl get pods -o json")


def test_an_out_that_is_a_file_is_one_line(lab):
    lab.out.parent.mkdir(exist_ok=True)
    lab.out.write_text("not a folder")
    code, lines, _ = lab("verify gateway")
    assert code == 2 and len(lines) == 1 and f"--out {lab.out}" in lines[0]


# --- report and summary ------------------------------------------------------------------------

def test_report_of_a_missing_folder_says_it_does_not_exist(lab):
    missing = lab.tmp / "rehearsals" / "20261201T090000Z-lab-verify-gateway"
    refused(lab("report", str(missing), outputs=None, stack=False), str(missing), "does not exist")
    assert not missing.exists()


def test_report_of_a_file_says_it_is_not_a_run_folder(lab):
    events = recordings()[0] / "events.jsonl"
    refused(lab("report", str(events), outputs=None, stack=False), str(events), "is a file, not a run folder")


def test_summary_of_a_stack_with_no_runs_lists_the_stacks_that_have_some(lab):
    run = lab.out / "20261201T090000Z-lab-verify-gateway"
    run.mkdir(parents=True)
    (run / "report.json").write_text(json.dumps({"stack": "lab", "command": "verify gateway"}))
    code, lines, made = lab("summary", "--out", str(lab.out), "--stack", "dve", outputs=None, stack=False)
    assert code == 2 and len(lines) == 1, lines
    assert "--stack dve" in lines[0] and "its runs are of lab" in lines[0]
    assert made == [run.name], "nothing written beside the runs"


def test_summary_of_a_missing_folder_says_it_does_not_exist(lab):
    missing = lab.tmp / "elsewhere"
    line = refused(lab("summary", "--out", str(missing), outputs=None, stack=False),
                   f"--out {missing}", "does not exist")
    assert "holds no rehearsal runs" not in line
    assert not missing.exists()


# --- not read: the recorded runs cut after every event ---------------------------------------------

#: The checks that judge whether this run undid a change it made, and the change: such a check
#: may FAIL in a cut (the change is recorded, its undoing is not), with the fix to undo it.
UNDO_CHECKS = {"namespace and pods removed": "hostnet.created",
               "measurement pods removed": "throughput.pod_created",
               "gatewayInstanceType put back": "throughput.switched",
               "the stack's burstScenario put back": "scenario.switched"}


def recordings() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.glob("*/events.jsonl"))


def ended(events: list[dict], kind: str) -> list[dict]:
    extra = {"reason": "Ctrl-C"} if kind == outcome.RUN_INTERRUPTED else {
        "reason": "cannot reach the cluster or AWS: ConnectError: [Errno 111] Connection refused",
        "details": None}
    return events + [{"at": events[-1]["at"], "kind": kind, **extra}]


def read_failed(events: list[dict]) -> str:
    """What the check whose read failed says: the run's own error."""
    return f"its read failed: {events[-1]['reason']}"


def analyse(events: list[dict]):
    started = record.first(events, record.RUN_STARTED)
    return outcome.analyse_run(cli._module(started["command"]).analyse, events)


def left_undone(events: list[dict], change: str) -> bool:
    undo = outcome.UNDONE_BY[change]
    if change == "throughput.pod_created":
        # One event a pod: a pod created and not yet deleted, by name.
        deleted = {e["name"] for e in events if e["kind"] == undo}
        return any(e["name"] not in deleted for e in events if e["kind"] == change)
    last = {e["kind"]: i for i, e in enumerate(events)}
    return change in last and last.get(undo, -1) < last[change]


@pytest.mark.parametrize("folder", recordings(), ids=lambda p: p.name)
def test_a_run_cut_after_any_event_fails_only_what_it_read(folder):
    events = record.read_events(folder)
    whole = analyse(events).checks
    full = {c.name: c.status for c in whole}
    #: What the whole run says of the checks it did not read itself (a refused failover:
    #: nothing was deleted), which a cut after that point says too.
    unread_in_full = {(c.name, c.seen) for c in whole if c.status == NOT_READ}
    for cut in range(1, len(events)):
        for kind in (outcome.RUN_FAILED, outcome.RUN_INTERRUPTED):
            part = ended(events[:cut], kind)
            report = analyse(part)
            where = f"{folder.name} cut after event {cut} ({events[cut - 1]['kind']}), {kind}"
            assert not any("could not be worked out" in n for n in report.notes), where
            first, *checks = report.checks
            assert first.name == outcome.CHECK_COMPLETED and first.status == FAIL, where
            assert not report.passed, where
            failed_read = [c for c in checks if c.status == FAIL and c.seen == read_failed(part)]
            if kind == outcome.RUN_INTERRUPTED:
                assert failed_read == [], where
            else:
                # One read failed, if any was left to make.
                assert len(failed_read) == (1 if failed_read or any(
                    c.status == NOT_READ for c in checks) else 0), (where, failed_read)
            for check in checks:
                if check.status == FAIL and check not in failed_read:
                    undo = UNDO_CHECKS.get(check.name)
                    assert full.get(check.name) == FAIL or (undo and left_undone(part, undo)), (
                        f"{where}: {check.name} FAILs on input it never read: {check.seen}")
                if check.status == NOT_READ and (check.name, check.seen) not in unread_in_full:
                    verb = "interrupted" if kind == outcome.RUN_INTERRUPTED else "failed"
                    assert check.seen.startswith(f"not read: the run {'was ' if verb == 'interrupted' else ''}"
                                                 f"{verb} before"), (where, check)
                    assert not check.fix, (where, check)


@pytest.mark.parametrize("folder", recordings(), ids=lambda p: p.name)
@pytest.mark.parametrize("kind", [outcome.RUN_FAILED, outcome.RUN_INTERRUPTED])
def test_a_run_that_ended_before_reading_anything_has_every_check_not_read(folder, kind):
    events = record.read_events(folder)
    part = ended(events[:1], kind)
    report = analyse(part)
    first, *checks = report.checks
    assert first.name == outcome.CHECK_COMPLETED and checks
    statuses = [c.status for c in checks]
    if kind == outcome.RUN_INTERRUPTED:
        assert statuses == [NOT_READ] * len(checks)
    else:
        # The first read failed; every other check needed a read after it.
        [failed] = [c for c in checks if c.status == FAIL]
        assert failed.seen == read_failed(part)
        assert sorted(statuses) == sorted([FAIL] + [NOT_READ] * (len(checks) - 1))


#: The linear collectors' reads: a check and the events it judges, by kind and, where one kind
#: serves several checks, a field (rehearse/commands/verify_gateway/collect.py and rehearse/commands/verify_gpu/collect.py record them in this
#: order). A check that passes on what it read may stay PASS; one whose read was not over is
#: NOT READ.
LINEAR = {
    "verify gateway": {"gateway pods": "gateway.pods", "lease holder": "gateway.lease",
                       "gateway healthz": "gateway.healthz",
                       "leader by its own metrics": "gateway.metrics",
                       # The route tables, and the leader node's instance (its primary ENI).
                       "VPC route to the leader": ["ec2.route_table", ("ec2.instance", "LEADER")],
                       "CiliumVTEPConfig names the leader": "cilium.vtep_config",
                       "Cilium: VTEP on, L7 proxy off": "cilium.config",
                       "Pod Identity agent": "kube.pod_identity_agent",
                       "traffic cloud → hybrid": ("prober.log", "cloudToHybrid"),
                       "traffic hybrid → cloud": ("prober.log", "hybridToCloud")},
    "verify gpu": {"nvidia.com/gpu allocatable on the hybrid GPU host": "gpu.nodes",
                   "vLLM pod Ready on the GPU host": "gpu.server_pods",
                   "the cloud client's calls succeed": "gpu.client_log",
                   "one completion through the vLLM Service": "gpu.completion"},
}


@pytest.mark.parametrize("folder", [f for f in recordings() if record.read_events(f)[0]["command"] in LINEAR],
                         ids=lambda p: p.name)
def test_a_check_whose_events_were_not_all_recorded_is_not_read(folder):
    events = record.read_events(folder)
    reads = LINEAR[events[0]["command"]]
    lease = record.first(events, "gateway.lease") or {}
    leader = (lease.get("holderIdentity") or "").rsplit("_", 1)[0]
    for cut in range(1, len(events)):
        later = {e["kind"] for e in events[cut:]} | {(e["kind"], e.get("direction")) for e in events[cut:]} | {
            (e["kind"], "LEADER") for e in events[cut:] if e.get("node") and e.get("node") == leader}
        # Its read was not over when the run ended (an event of it comes later).
        unread = [name for name, kinds in reads.items()
                  if any(kind in later for kind in (kinds if isinstance(kinds, list) else [kinds]))]
        for ending in (outcome.RUN_FAILED, outcome.RUN_INTERRUPTED):
            part = ended(events[:cut], ending)
            checks = {c.name: c for c in analyse(part).checks}
            for name in unread:
                if ending == outcome.RUN_FAILED and name == unread[0]:
                    # The read the run was making when it failed: a FAIL with its error.
                    assert (checks[name].status, checks[name].seen) == (FAIL, read_failed(part)), (
                        folder.name, cut, name)
                else:
                    assert checks[name].status == NOT_READ, (folder.name, cut, name, checks[name])
