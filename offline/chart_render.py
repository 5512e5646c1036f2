"""Each Helm release the program registers, rendered by Helm's own engine — or, where that engine
is not installed, read back from a render it recorded.

    python -m offline.chart_render --write     # re-record offline/recorded_renders.json
    python -m offline.chart_render --check     # exit 1 if the recorded file is stale

The scheduling and capacity models (``offline/scheduling.py``) and the tests read each chart's
pods from here: the DaemonSets and Deployments the chart renders with the values, release name
and namespace the program registers, against the chart source ``../shared/charts`` holds for the
version the lab pins (``CHART_SOURCES``; ``docs/charts.md`` says why each is the nearest).

The engine, ``helm-python-sdk`` (Helm's Go SDK, a 244 MB wheel), is a test dependency only, and
``../shared`` is not part of the repository; ``python -m offline.plan`` must still run after
``pip install -r requirements.txt``. So a render's workload objects are recorded in
``recorded_renders.json``, keyed by chart, pinned version, release name, namespace and the sha256
of the canonical values JSON: exactly those values, and nothing else, reproduce the entry. A
release whose key is not recorded and cannot be rendered here is reported by name with the
reason (``Rendered.problem``), never silently left out.

Self-contained: it imports nothing from the rest of the project but ``offline.runner``'s
registration types, so it can move with the offline tooling.
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import yaml

from offline.runner import PROJECT_DIR, ProgramRun, Registration, Secret

RELEASE = "kubernetes:helm.sh/v3:Release"
#: Overrides where the chart sources are (default: ``../shared/charts`` beside the project).
CHARTS_ENV = "EKS_HYBRID_LAB_CHARTS"
RECORDED = Path(__file__).resolve().parent / "recorded_renders.json"
#: Kinds whose pods the models place. Hook Jobs and CronJobs (Kyverno's cleanup jobs) run on the
#: untainted system nodes and are not modelled.
WORKLOAD_KINDS = ("DaemonSet", "Deployment", "StatefulSet")


@dataclass(frozen=True)
class ChartSource:
    """The chart source rendered for a pinned chart (docs/charts.md)."""

    directory: str
    version: str
    why: str

    def archive(self, charts_dir: Path) -> Path:
        return charts_dir / self.directory / self.version / f"{self.directory}-{self.version}.tgz"


#: (chart as registered, version pinned) -> the source rendered for it.
CHART_SOURCES: dict[tuple[str, str], ChartSource] = {
    ("oci://public.ecr.aws/eks/cilium/cilium", "1.18.8-1"): ChartSource(
        "cilium", "1.18.8", "upstream chart of the AWS build 1.18.8-1 (its own source is not public)"),
    ("oci://public.ecr.aws/karpenter/karpenter", "1.15.0"): ChartSource(
        "karpenter", "1.14.1", "the newest source this machine can get (main after v1.14.1)"),
    ("oci://public.ecr.aws/karpenter/karpenter-crd", "1.15.0"): ChartSource(
        "karpenter-crd", "1.14.1", "the newest source this machine can get; its CRDs differ from 1.15.0's as docs/charts.md lists"),
    ("oci://public.ecr.aws/eks/eks-hybrid-nodes-gateway", "1.0.1"): ChartSource(
        "eks-hybrid-nodes-gateway", "1.0.0", "the newest source this machine can get (tag v1.0.0)"),
    ("kyverno", "3.9.0"): ChartSource("kyverno", "3.9.0", "the pinned chart"),
    ("nvidia-device-plugin", "0.18.0"): ChartSource("nvidia-device-plugin", "0.18.0", "the pinned chart"),
}


def charts_dir() -> Path:
    return Path(os.environ.get(CHARTS_ENV) or PROJECT_DIR.parent / "shared" / "charts")


def engine_problem() -> Optional[str]:
    """Why Helm cannot render here (None: it can)."""
    try:
        import helm_python  # noqa: F401
    except ImportError:
        return "helm-python-sdk is not installed (it is in requirements-test.txt)"
    if not charts_dir().is_dir():
        return f"no chart sources at {charts_dir()} (../shared/charts, or set {CHARTS_ENV})"
    return None


# --- values and keys ----------------------------------------------------------------------------

def plain_values(value: Any) -> Any:
    """The values as Helm receives them: secrets unwrapped, and the integers protobuf carried as
    floats made integers again (the provider hands Helm ``2``, which templates print as 2)."""
    if isinstance(value, Secret):
        return plain_values(value.value)
    if isinstance(value, Mapping):
        return {k: plain_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_values(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def canonical_json(values: Any) -> str:
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class ReleaseKey:
    chart: str
    version: str
    name: str
    namespace: str
    values_sha256: str

    def text(self) -> str:
        return f"{self.chart}@{self.version} {self.namespace}/{self.name} values:{self.values_sha256[:12]}"

    def as_dict(self) -> dict[str, str]:
        return {"chart": self.chart, "version": self.version, "name": self.name,
                "namespace": self.namespace, "valuesSha256": self.values_sha256}


@dataclass(frozen=True)
class Release:
    """A registered release, as Helm would install it."""

    chart: str
    version: str
    name: str
    namespace: str
    values: dict

    @classmethod
    def of(cls, reg: Registration) -> "Release":
        inputs = reg.inputs
        return cls(chart=inputs["chart"], version=str(inputs.get("version", "")),
                   name=str(plain_values(inputs.get("name") or reg.name)),
                   namespace=str(inputs.get("namespace") or "default"),
                   values=plain_values(inputs.get("values") or {}))

    @property
    def key(self) -> ReleaseKey:
        digest = hashlib.sha256(canonical_json(self.values).encode()).hexdigest()
        return ReleaseKey(self.chart, self.version, self.name, self.namespace, digest)

    @property
    def source(self) -> Optional[ChartSource]:
        return CHART_SOURCES.get((self.chart, self.version))

    @property
    def label(self) -> str:
        return f"{self.name} ({self.chart.rsplit('/', 1)[-1]} {self.version})"


# --- rendering ----------------------------------------------------------------------------------

#: Secret values the charts generate afresh on every render (Cilium's Hubble and CA certificates,
#: genCA/genSignedCert): masked, so two renders of the same values compare equal.
_GENERATED = re.compile(r"^(\s+(?:ca|tls)\.(?:crt|key):).*$", re.M)
_WORKLOAD_KIND = re.compile(rf"^kind: ({'|'.join(WORKLOAD_KINDS)})\s*$", re.M)


@functools.lru_cache(maxsize=8)
def _loaded(archive: str):
    import helm_python
    return helm_python.Chart.load(archive)


@functools.lru_cache(maxsize=512)
def _render_cached(archive: str, values_json: str, name: str, namespace: str) -> tuple[tuple[str, str], ...]:
    """(template path, manifest text) of every rendered manifest, generated secrets masked;
    NOTES.txt and other non-manifest templates left out. Texts, not parsed objects: Kyverno's
    CRDs are 3 MB of YAML, and parsing them would cost ten times the render."""
    rendered = _loaded(archive).render(json.loads(values_json), name=name, namespace=namespace)
    return tuple((path, _masked(rendered[path]))
                 for path in sorted(rendered) if path.endswith((".yaml", ".yml")))


def _masked(text: str) -> str:
    # Every match holds ".crt:" or ".key:": a plain search first spares the line-anchored
    # pattern Kyverno's 3.5 MB of CRDs (44 ms a render), which never hold either.
    if ".crt:" not in text and ".key:" not in text:
        return text
    return _GENERATED.sub(r"\1 <generated at render>", text)


class RenderError(RuntimeError):
    """Helm refused the values (a required value missing, the values schema, a template's own
    check)."""


def _archive(release: Release) -> str:
    source = release.source
    if source is None:
        raise LookupError(f"no chart source known for {release.chart} {release.version} "
                          "(offline/chart_render.py CHART_SOURCES)")
    archive = source.archive(charts_dir())
    if not archive.exists():
        raise FileNotFoundError(f"{archive} is absent")
    return str(archive)


def render_texts(release: Release, values: Optional[Mapping[str, Any]] = None) -> tuple[tuple[str, str], ...]:
    """Helm's render of ``release`` (or of it with other ``values``), cached per chart, values,
    name and namespace."""
    import helm_python
    chosen = release.values if values is None else values
    try:
        return _render_cached(_archive(release), canonical_json(chosen), release.name, release.namespace)
    except helm_python.HelmError as error:
        raise RenderError(f"{release.label}: {error}") from error


def render_workloads(release: Release, values: Optional[Mapping[str, Any]] = None) -> list[dict]:
    """The workload objects Helm renders for ``release``, whole (fresh copies)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    found = []
    for _, text in render_texts(release, values):
        if not _WORKLOAD_KIND.search(text):
            continue
        found += [doc for doc in yaml.load_all(text, Loader=loader)
                  if isinstance(doc, dict) and doc.get("kind") in WORKLOAD_KINDS]
    return found


#: What the models read of a pod template (and all the recorded file keeps): where it may run,
#: what it asks for, how it runs. Probes, commands, args and ports are left out.
_POD_FIELDS = ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints",
               "hostNetwork", "hostPID", "hostIPC", "priorityClassName", "securityContext",
               "volumes", "initContainers", "containers")
#: ``ports``: a host-network pod's container ports are host ports, which two pods on one node
#: cannot share.
_CONTAINER_FIELDS = ("name", "image", "resources", "securityContext", "env", "volumeMounts",
                     "ports")


def model_view(obj: dict) -> dict:
    """The part of a rendered workload the models read. Live renders go through it too, so a
    plan from the recorded file and one rendered here see exactly the same objects."""
    pod = obj["spec"]["template"]["spec"]
    view_pod = {k: copy.deepcopy(pod[k]) for k in _POD_FIELDS if k in pod}
    for kind in ("initContainers", "containers"):
        if kind in view_pod:
            view_pod[kind] = [{k: c[k] for k in _CONTAINER_FIELDS if k in c} for c in view_pod[kind]]
    spec = {k: obj["spec"][k] for k in ("replicas",) if k in obj["spec"]}
    spec["template"] = {"spec": view_pod}
    # Its pods' labels: what pod anti-affinity and spread selectors match.
    labels = (obj["spec"]["template"].get("metadata") or {}).get("labels")
    if labels:
        spec["template"]["metadata"] = {"labels": copy.deepcopy(labels)}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "metadata": {k: obj["metadata"][k] for k in ("name", "namespace") if k in obj["metadata"]},
            "spec": spec}


def workloads_of(objects: Sequence[dict]) -> list[dict]:
    """The DaemonSets, Deployments and StatefulSets among ``objects``, as the models see them."""
    return [model_view(o) for o in objects if o.get("kind") in WORKLOAD_KINDS]


# --- values the chart does not read -------------------------------------------------------------

#: Values the lab sets that the chart source rendered here does not read, each with why it is
#: still set. (chart directory, source version) -> dotted value path -> reason. The inert-value
#: test fails on any other value whose removal changes nothing, and on an entry here that the
#: chart does read.
NOT_READ: dict[tuple[str, str], dict[str, str]] = {
    ("karpenter", "1.14.1"): {
        "settings.featureGates.podDeletionCostManagement":
            "the gate (and the pods `patch` permission it brings) is new in Karpenter v1.15.0, "
            "which the lab pins; the 1.14.1 source rendered here predates it (docs/charts.md)",
    },
    ("cilium", "1.18.8"): {
        "envoy.enabled":
            "not read while l7Proxy is false (the chart's envoyDaemonSetEnabled answers false "
            "before it looks at envoy.enabled); kept so that turning l7Proxy back on does not "
            "also bring the standalone Envoy DaemonSet onto the hybrid nodes",
    },
}


def leaf_paths(values: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every leaf of ``values``: a scalar, a list (one leaf, as Helm replaces lists whole) or an
    empty map."""
    paths = []
    for key, value in values.items():
        path = (*prefix, key)
        if isinstance(value, Mapping) and value:
            paths += leaf_paths(value, path)
        else:
            paths.append(path)
    return paths


def _at(values: dict, path: Sequence[str]) -> tuple[dict, str]:
    node = values
    for key in path[:-1]:
        node = node[key]
    return node, path[-1]


def without(values: Mapping[str, Any], path: Sequence[str]) -> dict:
    pruned = copy.deepcopy(dict(values))
    node, key = _at(pruned, path)
    del node[key]
    return pruned


def perturbed(values: Mapping[str, Any], path: Sequence[str]) -> dict:
    """``values`` with the leaf at ``path`` changed to another value of its type."""
    changed = copy.deepcopy(dict(values))
    node, key = _at(changed, path)
    value = node[key]
    if isinstance(value, bool):
        node[key] = not value
    elif isinstance(value, (int, float)):
        node[key] = value + 1
    elif isinstance(value, list):
        node[key] = value + value[-1:] if value else ["perturbed"]
    elif isinstance(value, Mapping):
        node[key] = {"perturbed": True}
    else:
        node[key] = f"{value}-perturbed"
    return changed


def _renders_as(release: Release, values: Mapping[str, Any], full: tuple) -> bool:
    """True if ``values`` render exactly as ``full``; a render Helm refuses is a difference."""
    try:
        return render_texts(release, values) == full
    except RenderError:
        return False


def value_read(release: Release, path: Sequence[str]) -> bool:
    """Whether the chart reads the release's value at ``path``: removing it changes the render,
    or — for a value equal to the chart's default, which renders the same without it — changing
    it does. A render Helm refuses (a required value, the chart's schema) counts as read."""
    full = render_texts(release)
    # Unread only if both render as ``full``: either order gives the same answer, and the
    # second render is skipped once the first differs, so the likelier difference goes first.
    # A scalar the lab sets is often the chart's own default pinned (removing it renders the
    # same; only a change shows it read). A list or map replaces the chart's whole default,
    # so removing it shows, and renders the chart's default, which other checks render too.
    node, key = _at(release.values, path)
    changes = (without, perturbed) if isinstance(node[key], (list, Mapping)) else (perturbed, without)
    return not all(_renders_as(release, change(release.values, path), full) for change in changes)


def values_not_read(release: Release) -> list[str]:
    """The dotted paths of the release's values the chart does not read (``value_read``)."""
    return [".".join(path) for path in leaf_paths(release.values) if not value_read(release, path)]


def documented_not_read(release: Release) -> dict[str, str]:
    """The documented unread values this release sets (path -> reason)."""
    source = release.source
    documented = NOT_READ.get((source.directory, source.version), {}) if source else {}
    set_here = {".".join(p) for p in leaf_paths(release.values)}
    return {path: why for path, why in documented.items() if path in set_here}


# --- the recorded renders -----------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _recorded(path: str) -> dict[str, dict]:
    p = Path(path)
    if not p.exists():
        return {}
    data = json.loads(p.read_text())
    return {entry["key"]["valuesSha256"] + "|" + _key_id(entry["key"]): entry
            for entry in data.get("renders", [])}


def _key_id(key: Mapping[str, str]) -> str:
    return "|".join(key[k] for k in ("chart", "version", "name", "namespace"))


def recorded_workloads(key: ReleaseKey, path: Path = RECORDED) -> Optional[list[dict]]:
    entry = _recorded(str(path)).get(key.values_sha256 + "|" + _key_id(key.as_dict()))
    return copy.deepcopy(entry["workloads"]) if entry else None


@dataclass(frozen=True)
class Rendered:
    release: Release
    #: The release's DaemonSets, Deployments and StatefulSets (empty if ``problem``).
    workloads: tuple[dict, ...]
    #: "helm" (rendered here), "recorded" (recorded_renders.json), or "" (not modelled).
    origin: str
    #: Why its pods are not modelled, and how to model them.
    problem: Optional[str] = None
    #: Helm refused to render these values: `pulumi up` would fail to install the release.
    refused: Optional[str] = None


def release_workloads(release: Release, *, use_engine: Optional[bool] = None) -> Rendered:
    """The release's workloads: rendered with Helm where it runs, else the recorded render of
    exactly these values, else a ``problem`` that says why not and how to get them."""
    engine = engine_problem() if use_engine is not False else "not asked to render"
    if engine is None and release.source is not None:
        try:
            return Rendered(release, tuple(workloads_of(render_workloads(release))), "helm")
        except RenderError as error:
            return Rendered(release, (), "helm", refused=(
                f"Helm refuses the values of release {release.label}, so pulumi up would fail "
                f"to install it: {error}"))
    recorded = recorded_workloads(release.key)
    if recorded is not None:
        return Rendered(release, tuple(recorded), "recorded")
    why = engine or f"no chart source known for {release.chart} {release.version}"
    return Rendered(release, (), "", (
        f"pods of release {release.label} not modelled: {why}, and {RECORDED.name} has no "
        f"render of these values ({release.key.text()}); to model them, pip install -r "
        f"requirements-test.txt and put the chart sources at {charts_dir()} (or set {CHARTS_ENV})"))


def registered_releases(run: ProgramRun) -> list[Release]:
    return [Release.of(reg) for reg in run.of_type(RELEASE)]


#: The configs whose renders are recorded (lab overrides of the dev stack): the dev stack, its
#: GPU variant and the variants the plan and the tests commonly use.
RECORDED_CONFIGS: tuple[dict[str, Any], ...] = (
    {},
    {"gpuEnabled": True},
    {"burstScenario": "B"},
    {"burstScenario": "C"},
    {"burstScenario": "C", "gpuEnabled": True},
    {"hybridNodeCount": 1},
    {"hybridNodeCount": 1, "gpuEnabled": True},
    {"hybridNodeCount": 3},
)


def _run_config(overrides: Mapping[str, Any]) -> ProgramRun:
    from offline.runner import config_with, load_stack_config, run_program
    return run_program(config_with(load_stack_config("dev"), **overrides))


def record(configs: Sequence[Mapping[str, Any]] = RECORDED_CONFIGS,
           run_for: Optional[Callable[..., ProgramRun]] = None) -> dict:
    """The recorded-render document for ``configs``, rendered by the real engine; ``run_for``
    runs the program for a config's overrides (the tests pass their cached runs)."""
    problem = engine_problem()
    if problem:
        raise RuntimeError(f"cannot record: {problem}")
    run_for = run_for or (lambda **overrides: _run_config(overrides))
    entries: dict[str, dict] = {}
    for overrides in configs:
        for release in registered_releases(run_for(**overrides)):
            key = release.key
            entry_id = key.values_sha256 + "|" + _key_id(key.as_dict())
            if entry_id in entries:  # the configs share most releases: each is read once
                continue
            entries[entry_id] = {
                "key": key.as_dict(),
                "source": f"{release.source.directory} {release.source.version}",
                "workloads": workloads_of(render_workloads(release)),
            }
    return {
        "about": "Workload objects Helm rendered for the lab's releases (offline/chart_render.py); "
                 "rewrite with `python -m offline.chart_render --write`.",
        "configs": [dict(c) for c in configs],
        "renders": sorted(entries.values(), key=lambda e: (e["key"]["chart"], e["key"]["valuesSha256"])),
    }


def dumps(document: dict) -> str:
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offline.chart_render", allow_abbrev=False,
                                     description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help=f"rewrite {RECORDED.name}")
    group.add_argument("--check", action="store_true", help=f"exit 1 if {RECORDED.name} is stale")
    args = parser.parse_args(argv)
    try:
        text = dumps(record())
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.write:
        RECORDED.write_text(text)
        print(f"wrote {RECORDED}")
        return 0
    if not RECORDED.exists() or RECORDED.read_text() != text:
        print(f"{RECORDED.name} is stale: run python -m offline.chart_render --write", file=sys.stderr)
        return 1
    print(f"{RECORDED.name} is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
