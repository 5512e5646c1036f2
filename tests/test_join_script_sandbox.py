"""The rendered join script run as cloud-init runs it, in a sandbox (tests/join_sandbox.py) with
stand-ins that print what nodeadm, the SSM agent and the rest print: the activation code reaches
no log, console or readable file; a registration refused for the activation's limit is said so
and not retried; a hanging image pull does not hold the join past its deadline."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
import subprocess

import pytest

from components.demos import VLLM
from components.hybrid_user_data import HostBootstrap, JoinTiming, normalized_image, render_user_data
from tests import join_sandbox as sandbox

# A code as SSM hands them out (20 characters of letters, digits, + and /) and an id of the
# activation's form: both made up.
CODE = "Qm7+Vt2/Kx9pLw4rZs8N"
ACTIVATION_ID = "5c1d2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
HOST = HostBootstrap(
    cluster_name="hybrid-lab", region="ap-northeast-2", kubernetes_version="1.35",
    activation_id=ACTIVATION_ID, activation_code=CODE, architecture="x86_64",
    node_labels={"topology.kubernetes.io/zone": "onprem"},
    node_taints=["eks.amazonaws.com/compute-type=hybrid:NoSchedule"],
    instance_label="eks-hybrid-lab.io/instance")
NODE_CONFIG = "/etc/eks-hybrid-lab/nodeconfig.yaml"
#: What holds the code by design, each root-only: the NodeConfig nodeadm reads, and cloud-init's
#: own copies of the user data (written by cloud-init, not by the script).
HOLDS_THE_CODE = {NODE_CONFIG, "/var/lib/cloud/instance/user-data.txt",
                  "/var/lib/cloud/instance/scripts/part-001"}

needs_sandbox = pytest.mark.skipif(sandbox.unavailable() is not None,
                                   reason=str(sandbox.unavailable()))


def _run(tmp_path, host=HOST,
         timing=JoinTiming(deadline_seconds=30, retry_seconds=1, prefetch_reserve_seconds=10),
         **kwargs):
    real_log = os.path.exists(sandbox.JOIN_LOG)
    run = sandbox.run_user_data(tmp_path, render_user_data(host, timing), **kwargs)
    # The sandbox wrote its own /var/log, not this machine's.
    assert os.path.exists(sandbox.JOIN_LOG) == real_log
    assert not run.timed_out, f"the join script did not end within the test's bound\n{run.console}"
    return run


def _readable_by_others(path) -> bool:
    return bool(path.stat().st_mode & 0o077)


def _assert_no_code_anywhere(run) -> None:
    """The code is in no stream and in no file but the ones that hold it by design, which are
    root-only; the id is in no stream and only in root-only files."""
    for name, text in (("the console (cloud-init's output)", run.console),
                       ("the sandbox's stderr", run.stderr)):
        assert CODE not in text, f"the activation code is in {name}"
        assert ACTIVATION_ID not in text, f"the activation id is in {name}"
    for path in run.written():
        data = path.read_bytes()
        where = run.inside(path)
        if CODE.encode() in data:
            assert where in HOLDS_THE_CODE, f"the activation code is in {where}"
            assert not _readable_by_others(path), f"{where} holds the code and is {oct(path.stat().st_mode)}"
        if ACTIVATION_ID.encode() in data:
            assert not _readable_by_others(path), \
                f"the activation id is in {where}, mode {oct(path.stat().st_mode & 0o777)}"


@needs_sandbox
def test_the_activation_code_reaches_no_log_console_or_readable_file(tmp_path):
    """nodeadm's first registration fails (the network) and it logs the command it retries,
    `amazon-ssm-agent -register ... -code ... -id ...`; its first init finds the cluster not
    active, the script tries again and joins. Every file the run wrote and both streams are
    searched for the code."""
    run = _run(tmp_path)
    assert run.status == 0, run.console
    # What the test is about happened: nodeadm printed the command with the code, twice asked
    # the agent with the NodeConfig's code and id, and the second init joined.
    assert run.record("nodeadm") == ["install", "init", "init"]
    pair = hashlib.sha256(f"{CODE} {ACTIVATION_ID}".encode()).hexdigest()
    assert run.record("agent-register") == [pair, pair]
    assert '"msg":"Command failed, retrying"' in run.join_log
    assert "done: this host is a hybrid node of hybrid-lab" in run.console
    assert CODE in run.read(NODE_CONFIG)

    _assert_no_code_anywhere(run)
    # Taken out where nodeadm printed it; the id kept in the root-only join log only.
    assert "-code [activation code] -id " + ACTIVATION_ID in run.join_log
    assert "-code [activation code] -id [activation id]" in run.console

    # The NodeConfig is root-only in a root-only folder.
    assert stat.S_IMODE(run.path(NODE_CONFIG).stat().st_mode) == 0o600
    assert stat.S_IMODE(run.path("/etc/eks-hybrid-lab").stat().st_mode) == 0o700
    # The join log was 0600 whenever a stand-in looked, the first right after the script opened
    # it, and is at the end.
    modes = run.record("join-log-modes")
    assert modes and set(modes) == {"600"}, f"the join log's mode as the stand-ins saw it: {modes}"
    assert stat.S_IMODE(run.path(sandbox.JOIN_LOG).stat().st_mode) == 0o600
    # cloud-init's output log got what the console got.
    assert run.read(sandbox.CLOUD_INIT_OUTPUT) == run.console


@needs_sandbox
def test_a_registration_refused_for_the_activation_limit_is_said_so_and_not_retried(tmp_path):
    """SSM refuses every registration once the activation has registered as many machines as
    its limit: no later try can pass, so the script says so, with the activation id and what to
    run, and stops instead of retrying until the join deadline."""
    run = _run(tmp_path, agent="limit")
    assert run.status == 1, run.console
    assert run.record("nodeadm") == ["install", "init"], "nodeadm init was tried again"
    assert len(run.record("agent-register")) == sandbox.SSM_ATTEMPTS  # nodeadm's own retries
    said = (f"not joining: SSM refused to register this host, activation {ACTIVATION_ID} has "
            "reached its registration limit (RegistrationLimitExceeded) and no retry can pass it. "
            "Renew it with `pulumi config set activationGeneration N+1` (N: the current value), "
            "which replaces the activation and the hybrid hosts")
    assert said in run.join_log
    assert said.replace(ACTIVATION_ID, "[activation id]") in run.console
    assert "waiting for EKS cluster" not in run.join_log and "giving up" not in run.join_log
    _assert_no_code_anywhere(run)


@needs_sandbox
def test_a_hanging_image_pull_is_stopped_before_the_join_deadline(tmp_path):
    """ctr hangs on the image: the wait ends the prefetch reserve before the join deadline,
    stops the pull (nothing of it runs when nodeadm init starts, nor after the script), logs the
    image not prefetched, and the host joins before the deadline."""
    host = dataclasses.replace(HOST, prefetch_images=(VLLM,))
    deadline, reserve = 10, 5
    run = _run(tmp_path, host, JoinTiming(deadline_seconds=deadline, retry_seconds=1,
                                          prefetch_reserve_seconds=reserve), ctr="hang")
    assert run.status == 0, run.console
    assert run.record("ctr") == [f"-n k8s.io images pull {normalized_image(VLLM)}"]
    assert run.record("ctr-alive") == [], "a pull was still running"
    first_init = float(run.record("init-times")[0])
    # The script starts after the sandbox; `date +%s` rounds its start down by under a second.
    assert first_init < run.started + deadline, "nodeadm init started after the join deadline"
    assert first_init >= run.started + (deadline - reserve) - 1, "the pull was not waited for"
    assert re.search(r"stopped the image pulls 5 s before the join deadline, leaving that time to "
                     r"nodeadm init; not prefetched: " + re.escape(normalized_image(VLLM)) +
                     r" \(the kubelet pulls them", run.join_log), run.join_log
    assert "done: this host is a hybrid node" in run.join_log
    _assert_no_code_anywhere(run)


def _redact(tmp_path, code: str, lines: list[str]) -> tuple[str, str]:
    """Runs the script's own redact_output on ``lines``: (what it writes to the join log, what
    it passes on to cloud-init's output)."""
    script = render_user_data(dataclasses.replace(HOST, activation_code=code))
    assignments = "".join(re.findall(r"^ACTIVATION_(?:CODE|ID)=.*\n", script, re.M))
    functions = "".join(re.search(rf"^{name}\(\) \{{.*?^\}}\n", script, re.S | re.M).group(0)
                        for name in ("code_forms", "redact_output"))
    probe = tmp_path / "redact.sh"
    probe.write_text("set -euo pipefail\n" + assignments + functions +
                     f"redact_output 3> {tmp_path}/log < {tmp_path}/input\n")
    (tmp_path / "input").write_text("".join(line + "\n" for line in lines))
    done = subprocess.run(["bash", str(probe)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return (tmp_path / "log").read_text(), done.stdout


def test_every_form_nodeadm_prints_the_code_in_is_taken_out(tmp_path):
    """As printed (the command's arguments), and as zap's JSON escapes it: a code with a quote,
    a backslash, a tab and pattern characters is taken out of both, the id out of the console
    only."""
    code = 'Ab"c\\d&e*f[g]h\tij+k/l==xyz'
    escaped = code.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t")
    log, console = _redact(tmp_path, code, [
        f"running command [/usr/bin/amazon-ssm-agent -register -code {code} -id {ACTIVATION_ID}]",
        '{"level":"info","msg":"Command failed, retrying","error":"running command '
        f'[/usr/bin/amazon-ssm-agent -register -code {escaped} -id {ACTIVATION_ID}]"}}',
        "a line without either"])
    for text in (log, console):
        assert code not in text and escaped not in text
        assert text.count("[activation code]") == 2
        assert "a line without either" in text
    assert log.count(ACTIVATION_ID) == 2
    assert ACTIVATION_ID not in console and console.count("[activation id]") == 2
