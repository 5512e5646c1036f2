"""Karpenter's kwok provider (``karpenter-kwok``, built by ``build.py karpenter``) on a
ControlPlane (control_plane.py). Generic: any caller that has a plane and the binaries' folder.

    install_crds(plane)                                # NodePool, NodeClaim, ... and KWOKNodeClass
    process = start(plane, bindir, feature_gates="PodDeletionCostManagement=true",
                    instance_types=path)               # waits for its /readyz
    stop(plane, "karpenter-kwok")                      # by PID; start() again with other gates

Karpenter binds its metrics and health ports as ":<port>" (sigs.k8s.io/karpenter
pkg/operator/operator.go), every interface, with no host option: ``start`` refuses to run
outside a private network namespace (``unshare -n`` with only ``lo``), where those listeners
reach nothing but loopback — and every client of the plane must then run in there too.
Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Optional

from control_plane import ControlPlane, free_port, stop_process

HERE = Path(__file__).resolve().parent
#: The process name in ControlPlane.processes and the log file's name.
NAME = "karpenter-kwok"
#: What engines/smoke.py and the tests set when they re-execute themselves under ``unshare -n``.
NETNS_MARK = "ENGINES_PRIVATE_NETNS"


def module_dir() -> Path:
    """The pinned sigs.k8s.io/karpenter module's source (engines/karpenter/go.mod), from the
    module cache: its CRDs and its kwok instance types are read from there."""
    gomod = (HERE / "karpenter" / "go.mod").read_text()
    version = next(line.split()[1] for line in gomod.splitlines()
                   if line.strip().startswith("sigs.k8s.io/karpenter "))
    cache = subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True,
                           text=True).stdout.strip()
    return Path(cache) / f"sigs.k8s.io/karpenter@{version}"


def crd_files() -> list[Path]:
    """kwok/charts/crds holds NodePool, NodeClaim, NodeOverlay and CapacityBuffer; the
    KWOKNodeClass CRD is only in kwok/apis/crds (engines/README.md, pitfalls)."""
    moddir = module_dir()
    return sorted((moddir / "kwok/charts/crds").glob("*.yaml")) + [
        moddir / "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml"]


def install_crds(plane: ControlPlane) -> None:
    wanted = set()
    for crd in crd_files():
        answer = plane.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                            crd.read_bytes(), content_type="application/yaml")
        if answer.status != 201:
            raise RuntimeError(f"{crd.name}: {answer.status} {answer.body}")
        wanted.add(answer.body["metadata"]["name"])

    def established() -> bool:
        items = plane.call("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions").body
        names = {c["metadata"]["name"] for c in items["items"] if any(
            x["type"] == "Established" and x["status"] == "True"
            for x in (c.get("status") or {}).get("conditions") or [])}
        return wanted <= names

    plane.wait_for("Karpenter's CRDs Established", established, timeout=60)
    plane.forget_discovery()


def in_private_netns() -> bool:
    return os.environ.get(NETNS_MARK) == "1"


def start(plane: ControlPlane, bindir: Path, *, feature_gates: str = "",
          instance_types: Optional[Path] = None, log_level: str = "debug",
          extra_env: Optional[dict[str, str]] = None) -> None:
    """Starts karpenter-kwok against ``plane`` (no leader election, system namespace
    kube-system) and waits for its /readyz. ``feature_gates``: FEATURE_GATES as Karpenter
    parses it (``Name=true,...``; empty: its defaults). ``instance_types``: a kwok instance
    types file (INSTANCE_TYPES_FILE_PATH; none: kwok/cloudprovider/instance_types.json)."""
    if not in_private_netns():
        raise RuntimeError("karpenter-kwok listens on every interface: run it only inside a "
                           f"private network namespace (unshare -n, {NETNS_MARK}=1)")
    health, metrics = free_port(), free_port()
    env = {"KUBECONFIG": str(plane.kubeconfig), "DISABLE_LEADER_ELECTION": "true",
           "SYSTEM_NAMESPACE": "kube-system", "METRICS_PORT": str(metrics),
           "HEALTH_PROBE_PORT": str(health), "LOG_LEVEL": log_level, **(extra_env or {})}
    if feature_gates:
        env["FEATURE_GATES"] = feature_gates
    if instance_types is not None:
        env["INSTANCE_TYPES_FILE_PATH"] = str(instance_types)
    plane._run(NAME, [str(bindir / NAME)], env)
    plane.wait_for("karpenter-kwok /readyz", lambda: urllib.request.urlopen(
        f"http://127.0.0.1:{health}/readyz", timeout=2).status == 200, timeout=90)


def stop(plane: ControlPlane) -> None:
    """Stops the running karpenter-kwok (by its PID) and forgets it; the plane runs on."""
    for entry in list(plane.processes):
        name, process = entry
        if name == NAME:
            plane.processes.remove(entry)
            stop_process(process)


def log_lines(plane: ControlPlane) -> list[dict]:
    """Its JSON log lines (each start rewrites the log file)."""
    path = plane.workdir / f"{NAME}.log"
    found = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            found.append(json.loads(line))
        except ValueError:
            pass
    return found
