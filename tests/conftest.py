"""Shared fixtures: run the real program offline with a given config and look at what registers."""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

from offline.runner import ProgramRun, config_with, load_stack_config, run_program  # noqa: E402
from tests import worker_share  # noqa: E402

#: The dev stack's config: the defaults, written out, in ap-northeast-2.
DEV_CONFIG = load_stack_config("dev")


#: An explicit cluster name, with another version and log retention: the tests of what the
#: name (and those settings) reach read this one run.
RENAMED = dict(clusterName="rehearsal-1", kubernetesVersion="1.36", logRetentionDays=14)

#: A Karpenter version, burst CPU limit and burst size other than the defaults, none of which
#: reaches what another sets (the charts' version, the NodePool's limit, the burst Deployment's
#: replicas): test_karpenter's charts and node pool tests and test_demo's burst test read this
#: one run.
BURST = dict(karpenterVersion="1.15.1", burstCpuLimit=96, burstReplicas=5)

#: Non-default host settings; test_hybrid's activation and Cilium tests run with them too (they
#: reach neither), so its three tests share their runs. The model reaches only the vLLM
#: Deployment (and the exports): test_demo's vLLM test reads the GPU run of these.
HOST_SETTINGS = dict(hybridNodeInstanceType="m6i.xlarge", gpuInstanceType="g6.2xlarge",
                     hybridPodCidr="172.17.0.0/20", gpuModel="Qwen/Qwen2.5-1.5B-Instruct")

#: Other node types (gateway, system), a third zone and the smallest burst CPU limit, none
#: reaching what another sets: test_gateway's gateway-node test, test_cluster's Graviton test
#: and test_karpenter's 4-vCPU node pool case read this one run.
NODE_TYPES = dict(gatewayInstanceType="c6in.large", availabilityZoneCount=3,
                  systemNodeInstanceType="m7g.large", burstCpuLimit=4)


def lab_config(**overrides: Any) -> dict[str, str]:
    """The dev stack's config with some settings changed (camelCase keys; None removes one).

    Keys without a namespace are the lab's; ``aws_region`` stands for ``aws:region``.
    """
    return config_with(DEV_CONFIG, **overrides)


# --- speed only: the cyclic garbage collector ---------------------------------------------------
# A worker's heap is mostly modules (pulumi, the providers' SDKs, moto, the tests) and the cached
# program runs, all kept for the session; every full collection walks them again, and program
# runs make enough cyclic garbage for a full collection every few runs (a third of a run's CPU).
# Frozen after collection, and again whenever tests have imported many more modules (the first
# program run loads pulumi_aws's), they are left out of those walks. Garbage made later is
# collected as before. A full collection also waits for 100 collections of the middle
# generation, not 10 (in the program-run files: 34 full collections -> 7, GC 4.3 s -> 2.2 s of
# CPU); the younger ones still run at Python's default pace, so garbage cycles are freed soon
# enough.

#: len(sys.modules) at the last freeze.
_MODULES_AT_FREEZE = 0


def _freeze_what_is_loaded() -> None:
    global _MODULES_AT_FREEZE
    gc.collect()
    gc.freeze()
    _MODULES_AT_FREEZE = len(sys.modules)


# From here on, collection too: importing the tests and what they import makes long-lived
# objects, which full collections would walk over and over (15 of them, ~2 s of collection).
gc.freeze()
gc.set_threshold(gc.get_threshold()[0], gc.get_threshold()[1], 100)


# --- speed only: each worker rewrites half of the tests' asserts -------------------------------
# pytest rewrites every test module's asserts when it imports it (~0.05 s a module here, 70
# modules: most of a worker's start), and reads the rewritten code back from __pycache__ when
# it is there and current (_pytest/assertion/rewrite.py, AssertionRewritingHook.exec_module:
# it checks the source's mtime and size) — but writes it there only when bytecode may be
# written, which this machine's PYTHONDONTWRITEBYTECODE=1 forbids, so both workers rewrote
# every module. Here bytecode is written (to the checkout's git-ignored __pycache__ folders, as
# Python and pytest do by default), and the odd-numbered worker imports the test modules from
# the last to the first before collecting while the other collects from the first: they meet
# in the middle, and each reads what the other rewrote. The product's modules are compiled once
# too, for the workers and for the commands the tests start in fresh processes (which read
# __pycache__ even though they do not write it). Which worker imports what first changes no
# test: a module that fails to import is left to the collection, which reports it.
sys.dont_write_bytecode = False


def pytest_configure(config):
    # Ctrl-C as a terminal gives it, in every test process and every process a test starts:
    # Python's handler (KeyboardInterrupt). A run started in the background of a non-interactive
    # shell (``cmd &``) inherits SIGINT ignored (POSIX, Shell Command Language 2.11: job control
    # off, an asynchronous list ignores SIGINT), an exec keeps that, and Python installs no
    # handler over it, so the tests that press Ctrl-C (a switch's `up`, an interrupted real-tier
    # run) would press nothing. A caught signal is reset to the default on exec, so the
    # processes the tests start install Python's handler themselves.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionstart(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or int(worker[2:]) % 2 == 0:
        return
    # Only when the whole suite is collected (a run of one file imports that file alone).
    tests_dir = Path(__file__).resolve().parent
    here = session.config.invocation_params.dir
    if not any((here / arg.split("::")[0]).resolve() in (tests_dir, PROJECT_DIR)
               for arg in session.config.args):
        return
    import importlib

    for path in sorted(tests_dir.glob("test_*.py"), reverse=True):
        try:
            importlib.import_module(f"tests.{path.stem}")
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # a module-level pytest.skip too: the collection says it
            sys.modules.pop(f"tests.{path.stem}", None)


#: The files whose tests take a minute or more each (the real Pulumi engine over the whole lab,
#: endpoints that do not answer, every cleanup): run first. Collected in file order they came
#: last, and the run ended with one worker waiting on the other's two-minute test alone; first,
#: the other worker steals the short ones meanwhile (xdist's worksteal).
_LONG_FIRST = ("test_real_pulumi_lab.py", "test_real_karpenter.py", "test_real_scenarios.py",
               "test_real_pulumi_unanswered.py", "test_real_pulumi_cleanups.py",
               "test_real_pulumi_replacement.py")


def pytest_collection_modifyitems(items):
    # A stable sort: every worker collects the same order, as xdist requires.
    items.sort(key=lambda item: item.path.name not in _LONG_FIRST)


def pytest_collection_finish(session):
    _freeze_what_is_loaded()


def pytest_runtest_logfinish(nodeid, location):
    if len(sys.modules) > _MODULES_AT_FREEZE + 100:
        _freeze_what_is_loaded()


@functools.lru_cache(maxsize=None)
def _cached_run(items: tuple[tuple[str, str], ...]) -> ProgramRun:
    """One worker runs a config and leaves the result for the other: the same ~0.6 s run is
    not done twice (tests/worker_share.py)."""
    folder = worker_share.directory("program-runs")
    if folder is None:
        return run_program(dict(items))
    key = hashlib.sha256(repr(items).encode()).hexdigest()[:24]
    return worker_share.once(folder, key, lambda: run_program(dict(items)))


@pytest.fixture(scope="session", autouse=True)
def _share_between_workers(request, tmp_path_factory):
    """Under xdist, the workers' temporary directories share a parent that pytest keeps for
    the run (and removes a few runs later): finished runs and renders are left there."""
    if hasattr(request.config, "workerinput"):
        worker_share.PARENT = tmp_path_factory.getbasetemp().parent
    yield


def list_charts_only(folder, name, title, data) -> None:
    """``rehearse.charts.write`` where charts are listed, not drawn (below)."""


@pytest.fixture(autouse=True)
def _charts_drawn_where_they_are_tested(request, monkeypatch):
    """A rehearsal test's report lists its charts (report.json, report.md) without drawing
    them: matplotlib's drawing costs about 0.3 s a chart, over dozens of runs. The drawing is
    tested where it is read back — tests/test_rehearse_charts.py, and tests marked ``charts``."""
    if not request.module.__name__.startswith("tests.test_rehearse") or \
            request.module.__name__ == "tests.test_rehearse_charts" or request.node.get_closest_marker("charts"):
        return
    from rehearse import charts

    monkeypatch.setattr(charts, "write", list_charts_only)


def main_in_process(capsys, monkeypatch, module: str, main: Any, *args: str) -> subprocess.CompletedProcess:
    """``python -m module args`` in-process: ``main`` with the arguments, in the environment the
    tests' fresh processes get (no AWS_ or PULUMI_ variables, the project as the working
    directory); its exit code and captured output as a CompletedProcess. For the cases where
    the process boundary is not what is tested."""
    for name in [k for k in os.environ if k.startswith(("AWS_", "PULUMI_"))]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(PROJECT_DIR)
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["python", "-m", module, *args], code, out, err)


def run_lab(**overrides: Any) -> ProgramRun:
    """Runs __main__.py under mocks with the dev config plus ``overrides``. Runs are
    deterministic, so identical configs share one run; treat the result as read-only."""
    return _cached_run(tuple(sorted(lab_config(**overrides).items())))


@functools.lru_cache(maxsize=None)
def _independent_run(items: tuple[tuple[str, str], ...]) -> ProgramRun:
    return run_program(dict(items))


def independent_run(**overrides: Any) -> ProgramRun:
    """A second run of the config ``run_lab(**overrides)`` runs, made in this process and never
    shared: for the tests that compare two runs of one config (nothing may come from the clock
    or the process). Those tests share it, as ``run_lab``'s callers share theirs."""
    return _independent_run(tuple(sorted(lab_config(**overrides).items())))


@pytest.fixture
def lab():
    """``lab(**overrides)`` runs the program and returns what registered (a ProgramRun)."""
    return run_lab


@pytest.fixture(scope="session")
def dev_run() -> ProgramRun:
    return run_lab()

