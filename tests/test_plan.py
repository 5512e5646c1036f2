"""The README's first command: `python -m offline.plan`, run as a user runs it.

The dev plan runs it as a user does, in a fresh interpreter; the machine without helm and the
refusals of a bad stack are the same ``main`` called in-process (``planned``), where the process
boundary is not what is tested and a fresh interpreter would only re-import the program.
"""

from __future__ import annotations

import ast
import importlib.abc
import os
import re
import subprocess
import sys
import resource

import pytest
import yaml

from components.nodeadm import NODEADM_VERSION
from offline import plan as offline_plan
from stacks.config import AVAILABLE_LAYERS
from tests.conftest import PROJECT_DIR, main_in_process


def plan(*args: str, cwd=PROJECT_DIR) -> tuple[subprocess.CompletedProcess, float]:
    """Runs the plan as a user does (with ``-X importtime``, which writes only to stderr);
    returns it and the CPU seconds it used. (CPU time, not wall time: the suite runs on two
    busy workers, and a plan waiting for a core is not a slower plan.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PULUMI_"))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "offline.plan", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, cpu


#: ``python -X importtime``'s line: self and cumulative microseconds, then the module's name
#: indented by its import depth (CPython's Python/import.c, ``import_find_and_load``).
_IMPORT_TIME = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)$")


def seconds_importing(importtime_log: str) -> float:
    """The seconds a ``python -X importtime`` process spent importing: the cumulative time of
    each outermost import (depth 0), which includes everything it imported in turn. Lazy
    imports made while the program runs are outermost too, so they count."""
    total = 0
    for line in importtime_log.splitlines():
        found = _IMPORT_TIME.match(line)
        if found and not found.group(3):
            total += int(found.group(2))
    return total / 1e6


def test_seconds_importing_sums_the_outermost_imports():
    log = ("import time: self [us] | cumulative | imported package\n"
           "import time:       100 |        100 |   json.decoder\n"
           "import time:       200 |        300 | json\n"
           "import time:        50 |         50 | yaml\n"
           "some other line the plan wrote\n")
    assert seconds_importing(log) == pytest.approx(350e-6)


def planned(capsys, monkeypatch, *args: str) -> subprocess.CompletedProcess:
    """``plan`` in-process, in the environment ``plan`` gives it."""
    return main_in_process(capsys, monkeypatch, "offline.plan", offline_plan.main, *args)


def test_plan_of_the_dev_stack(dev_run):
    done, seconds = plan()
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    # The counts' detail goes on a line of its own, so the first line fits a terminal.
    described = dev_run.counts().describe()
    assert out.splitlines()[0] == ("eks-hybrid-lab plan for stack 'dev' in ap-northeast-2: 6 of 6 "
                                   f"layers, {described.split(' (', 1)[0]}")
    assert out.splitlines()[1] == f"  ({described.split(' (', 1)[1]}"
    assert "nothing was created" in out
    assert "1. network" in out
    for type_ in ("aws.ec2.Vpc", "aws.ec2.NatGateway", "aws.ec2transitgateway.TransitGateway",
                  "aws.ec2transitgateway.VpcAttachment"):
        assert type_ in out
    for number, layer in enumerate(dev_run.outputs["layers"], start=1):
        count = sum(1 for r in dev_run.resources() if dev_run.layer_of(r) == layer)
        assert f"{number}. {layer:<10} {count} resources" in out
    assert dev_run.outputs["layers"] == list(AVAILABLE_LAYERS)
    for type_ in ("aws.eks.Cluster", "aws.eks.NodeGroup", "aws.ssm.Activation", "aws.ec2.Instance",
                  "kubernetes.helm.sh.Release", "pulumi-python.dynamic.SsmRegistrations"):
        assert type_ in out
    assert " -> ".join(reversed(AVAILABLE_LAYERS)) in out
    assert "Destroy order" in out
    assert f"\n  nodeadm {NODEADM_VERSION} on 2 hosts (hybrid-hosts-node-0, hybrid-hosts-node-1): " in out
    # The dev stack leaves adminCidrs empty and pins no account (it cannot know yours): the
    # open endpoint and the unpinned account are its two warnings.
    # (A warning wider than the terminal goes on over lines of its own, indented.)
    warnings = [line for line in out.split("\nWarnings\n", 1)[1].splitlines()
                if line.startswith("  ! ")]
    assert len(warnings) == 2, warnings
    assert "aws:allowedAccountIds is not set" in warnings[0], warnings
    assert "adminCidrs is empty" in warnings[1], warnings
    assert "eks-hybrid-lab:stack=eks-hybrid-lab/dev" in out
    assert "Cost while up (USD, on-demand, approximate; ap-northeast-2 prices" in out
    assert "  total " in out and "/day" in out
    assert "pulumi up       ~" in out and "pulumi destroy  ~" in out and "layer by layer  ~" in out
    assert "fits its limit" in out
    # The models: where every pod runs and demo 2's capacity; every flow the lab needs.
    scheduling = out.split("\nScheduling (", 1)[1].split("\n\n", 1)[0]
    # (The name column is as wide as the longest workload name, kyverno-background-controller.)
    assert re.search(r"\n  burst +Deployment x15 +8 on hybrid, 7 on Karpenter burst nodes\n",
                     scheduling)
    assert ": 8 fit, for every placement of the others" in scheduling
    assert "problems: none" in scheduling
    flows = out.split("\nFlows (", 1)[1].split("\n\n", 1)[0]
    assert "udp/53     hybrid pods (pod IP) -> CoreDNS" in flows and " 0 blocked" in flows
    assert "BLOCKED" not in flows and "Internet exposure: none" in flows
    # A quick command: its own work (running the program and the models) costs at most two and
    # a half times what importing the code costs in the same process; it costs 1.0-1.5 times
    # that now, depending on whether the project's bytecode is cached (docs/testing.md#speed). Not a
    # number of seconds: this machine's speed varies from hour to hour by a factor of two and
    # more (the same plan took 2.9 s and 6.0 s of CPU), and both sides of the ratio move with it.
    # Wall time spent importing is never shorter than its CPU time (the other worker may hold a
    # core), so a busy machine only eases the check.
    importing = seconds_importing(done.stderr)
    assert importing > 0.2, done.stderr[-2000:]
    assert seconds < 3.5 * importing, \
        f"the plan used {seconds:.1f}s of CPU, {importing:.1f}s of it importing"


def test_plan_of_an_invalid_stack_file_fails_with_the_rule(tmp_path, capsys, monkeypatch):
    stack = yaml.safe_load((PROJECT_DIR / "Pulumi.dev.yaml").read_text())
    stack["config"]["eks-hybrid-lab:hybridPodCidr"] = "10.0.0.0/16"
    stack["config"]["eks-hybrid-lab:hybridNodeCount"] = 42
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(yaml.safe_dump(stack))
    done = planned(capsys, monkeypatch, "--stack-file", str(bad))
    assert done.returncode == 1
    assert done.stdout == ""
    assert "invalid configuration (2 problems); nothing was created" in done.stderr
    # Each value as the stack file writes it (yaml.safe_dump writes neither one quoted).
    assert 'hybridPodCidr = 10.0.0.0/16: must not overlap cloudVpcCidr (10.0.0.0/16)' in done.stderr
    assert 'hybridNodeCount = 42: must be from 1 to 10' in done.stderr
    assert "Traceback" not in done.stderr


def test_plan_of_a_stack_file_names_the_file_and_the_stack_it_would_be(tmp_path, capsys,
                                                                        monkeypatch):
    variant = tmp_path / "Pulumi.variant.yaml"
    variant.write_text((PROJECT_DIR / "Pulumi.dev.yaml").read_text())
    done = planned(capsys, monkeypatch, "--stack-file", str(variant))
    assert done.returncode == 0, done.stderr
    first, _, file_line = done.stdout.splitlines()[:3]
    assert first.startswith("eks-hybrid-lab plan for stack 'variant' in ap-northeast-2:")
    assert file_line == f"Stack file: {variant}"
    assert "eks-hybrid-lab:stack=eks-hybrid-lab/variant" in done.stdout


def test_a_stack_file_of_another_name_is_planned_as_dev():
    assert offline_plan.stack_of_file(PROJECT_DIR / "settings.yaml") == "dev"
    assert offline_plan.stack_of_file(PROJECT_DIR / "Pulumi.big.yaml") == "big"
    assert offline_plan.stack_of_file(None) == "dev"


def test_plan_refuses_both_a_stack_and_a_stack_file(capsys):
    with pytest.raises(SystemExit) as done:
        offline_plan.main(["--stack", "dev", "--stack-file", str(PROJECT_DIR / "Pulumi.dev.yaml")])
    assert done.value.code == 2
    assert "argument --stack-file: not allowed with argument --stack" in capsys.readouterr().err


def test_plan_of_a_missing_stack_says_so(capsys, monkeypatch):
    done = planned(capsys, monkeypatch, "--stack", "does-not-exist")
    assert done.returncode == 2
    assert "no stack file" in done.stderr and "Pulumi.does-not-exist.yaml" in done.stderr


class _Absent(importlib.abc.MetaPathFinder):
    """Finds nothing for these top-level packages and stops the search, so that an import of
    them fails as it does where they are not installed (ModuleNotFoundError, "No module
    named ..."), even in a process that has imported them before."""

    def __init__(self, *names: str):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def _imported_on_load(tree: ast.Module) -> set[str]:
    """Top-level packages a module imports when it is loaded: statements outside function
    bodies (a class body and an if/try at module level run at import too)."""
    found: set[str] = set()
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".", 1)[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".", 1)[0])
        pending.extend(ast.iter_child_nodes(node))
    return found


def test_no_program_module_imports_helm_when_loaded():
    """The in-process test below imports the program with the SDK installed, so it cannot see
    a module that imports helm_python when it is loaded: on a machine without Helm the
    README's plan would stop at that import. Every project module leaves it to the call."""
    from tests.test_layout import project_modules

    # Only a source that names helm_python can import it: the others are not parsed.
    sources = {name: (path, path.read_text()) for name, path in project_modules().items()
               if not name.startswith("tests")}
    loading = {name: path for name, (path, text) in sources.items()
               if "helm_python" in text
               and "helm_python" in _imported_on_load(ast.parse(text, str(path)))}
    assert not loading, f"imports helm_python when loaded: {sorted(loading)}"


def test_the_plan_on_a_machine_without_helm_reads_the_recorded_render(capsys, monkeypatch):
    """The README's first command after `pip install -r requirements.txt` alone: no
    helm-python-sdk, no ../shared/charts. The charts' pods come from the recorded render.
    (In-process: the SDK is made absent as an uninstalled package is; the README command's own
    fresh-process run is test_plan_of_the_dev_stack.)"""
    for name in [m for m in sys.modules if m.split(".", 1)[0] == "helm_python"]:
        monkeypatch.delitem(sys.modules, name)
    # Put in front of the finders in place (not a new list: a finder another import adds
    # meanwhile must stay), and taken out again after the plan.
    absent = _Absent("helm_python")
    sys.meta_path.insert(0, absent)
    try:
        with pytest.raises(ModuleNotFoundError, match="No module named 'helm_python'"):
            import helm_python  # noqa: F401
        monkeypatch.setenv("EKS_HYBRID_LAB_CHARTS", str(PROJECT_DIR / "no-charts-here"))
        done = planned(capsys, monkeypatch)
    finally:
        sys.meta_path.remove(absent)
    assert done.returncode == 0, done.stderr
    scheduling = done.stdout.split("\nScheduling (", 1)[1].split("\n\n", 1)[0]
    assert "from Helm's recorded render" in scheduling and "rendered by Helm here" not in scheduling
    assert "NOT MODELLED" not in scheduling and "problems: none" in scheduling
    assert re.search(r"\n  cilium +DaemonSet +2 on hybrid\n", scheduling)
