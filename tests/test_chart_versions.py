"""The chart versions: the Karpenter CRDs the program installs against the pinned controller's
own, and the plan's word on each release whose rendered source is not the pinned chart.

The program installs Karpenter's CRDs with the `karpenter-crd` chart at the controller chart's
version (components/karpenter.py); aws/karpenter-provider-aws publishes both from one tag, and
its CRDs for `karpenter.sh` are sigs.k8s.io/karpenter's `pkg/apis/crds` at the version it
depends on, to which its `hack/validation/` scripts add the rules for the `karpenter.k8s.aws`
label domain. The engines' Karpenter (engines/karpenter/go.mod) is that core module. The chart
source this machine has is 1.14.1 while the lab pins 1.15.0 (docs/charts.md: the newest
readable), so the render cannot equal 1.15.0's: the test names every difference between the
render and the pinned controller's CRDs, and each must be either the AWS provider's own addition
or one of the 1.14.1 -> 1.15.0 changes listed in docs/charts.md. Anything else — a pin moved,
an older or newer source, a CRD gone — fails, naming the field.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from offline import chart_render
from tests.conftest import BURST, PROJECT_DIR
from tests.helm_engine import needs_helm, release
from tests.kube_checks import CRD_DIR, as_object

ENGINES_GOMOD = PROJECT_DIR / "engines" / "karpenter" / "go.mod"
PULUMI_YAML = PROJECT_DIR / "Pulumi.yaml"

#: The 1.14.1 -> 1.15.0 changes of the `karpenter.sh` CRDs (sigs.k8s.io/karpenter's
#: pkg/apis/v1/nodepool.go between the tags: the Unhealthy disruption reason, consolidateAfter
#: given a default of 0s and so no longer required),
#: as docs/charts.md lists them. Paths are under the v1 version's openAPIV3Schema (another version's are prefixed with its name).
KNOWN_DRIFT = {
    ("nodepools.karpenter.sh", "spec/disruption/budgets/items/reasons/items/enum"),
    ("nodepools.karpenter.sh", "spec/disruption/consolidateAfter/default"),
    ("nodepools.karpenter.sh", "spec/disruption/required"),
}
#: The AWS provider's rule for its own label domain, added to the core CRDs.
AWS_DOMAIN_RULE = re.compile(r'label domain \\?"karpenter\.k8s\.aws\\?" is restricted')


def _gomod_version() -> str:
    text = ENGINES_GOMOD.read_text()
    return re.search(r"^\s*sigs\.k8s\.io/karpenter (v\S+)", text, re.M).group(1)


def _module_crds() -> Path:
    try:
        cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True,
                               check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pytest.skip("no go on PATH: the pinned Karpenter's CRDs come from Go's module cache "
                    "(python3 engines/build.py karpenter)")
    crds = Path(cache) / f"sigs.k8s.io/karpenter@{_gomod_version()}" / "pkg" / "apis" / "crds"
    if not crds.is_dir():
        pytest.skip(f"the pinned Karpenter module is not in Go's module cache ({crds}): "
                    "python3 engines/build.py karpenter")
    return crds


def _schema_paths(node: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of a schema under its property path ("properties" and descriptions left out,
    lists of plain values kept whole, enums as sets, rules by their message)."""
    out: dict[str, Any] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description":
                continue
            if key == "enum":
                # A set: its order validates nothing (1.14.1 lists Gte and Lte first).
                out[f"{path}/{key}"] = sorted(map(str, value))
                continue
            if key == "x-kubernetes-validations":
                out[f"{path}/{key}"] = sorted(rule.get("message") or rule["rule"] for rule in value)
                continue
            out.update(_schema_paths(value, path if key == "properties" else f"{path}/{key}"))
    elif isinstance(node, list) and any(isinstance(v, (dict, list)) for v in node):
        for i, value in enumerate(node):
            out.update(_schema_paths(value, f"{path}[{i}]"))
    else:
        out[path] = node
    return out


def _schemas(crd: dict) -> dict[str, dict]:
    """Each served version's openAPIV3Schema, by version name."""
    return {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}


def _differences(installed: dict, controller: dict) -> list[tuple[str, str, Any, Any]]:
    name = controller["metadata"]["name"]
    ours, theirs = _schemas(installed), _schemas(controller)
    if set(ours) != set(theirs):
        return [(name, "versions", sorted(ours), sorted(theirs))]
    return [d for version in sorted(theirs)
            for d in _version_differences(name, version, ours[version], theirs[version])]


def _version_differences(name: str, version: str, installed: dict,
                         controller: dict) -> list[tuple[str, str, Any, Any]]:
    a, b = _schema_paths(installed), _schema_paths(controller)
    prefix = "" if version == "v1" else f"{version}:"
    found = []
    for path in sorted(set(a) | set(b)):
        ours, theirs = a.get(path), b.get(path)
        if path.endswith("x-kubernetes-validations") and ours is not None and theirs is not None:
            # The AWS provider's own rules are additions: the rest must be the controller's.
            ours = [m for m in ours if not AWS_DOMAIN_RULE.search(m)]
        if ours != theirs:
            found.append((name, prefix + path.lstrip("/"), ours, theirs))
    return found


def test_the_crd_chart_is_installed_at_the_controller_charts_version(lab):
    # Both charts from one release, whatever karpenterVersion says (BURST sets 1.15.1).
    for run, version in ((lab(), "1.15.0"), (lab(**BURST), BURST["karpenterVersion"])):
        crds = run.named("karpenter-karpenter-crds").inputs
        chart = run.named("karpenter-karpenter-controller-release").inputs
        assert (crds["chart"], crds["version"]) == (
            "oci://public.ecr.aws/karpenter/karpenter-crd", version)
        assert chart["version"] == version
        # The controller chart's own crds/ are install-only: the CRD chart owns them.
        assert chart.get("skipCrds") is True


def test_the_engines_karpenter_is_the_version_the_lab_pins():
    # The Karpenter the real-engine tier runs is the controller the lab installs by default.
    default = yaml.safe_load(PULUMI_YAML.read_text())["config"]["karpenterVersion"]["default"]
    assert _gomod_version() == f"v{default}"


@needs_helm
def test_the_crds_the_program_installs_differ_from_the_pinned_controllers_only_as_documented(lab):
    controller = {}
    for path in sorted(_module_crds().glob("karpenter.sh_*.yaml")):
        crd = yaml.safe_load(path.read_text())
        controller[crd["metadata"]["name"]] = crd
    rendered = {}
    for _, text in chart_render.render_texts(release(lab(), "karpenter-crd")):
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                rendered[doc["metadata"]["name"]] = doc
    # Every karpenter.sh CRD the controller serves is installed.
    assert set(controller) <= set(rendered), sorted(set(controller) - set(rendered))
    differences = [d for name in sorted(controller)
                   for d in _differences(rendered[name], controller[name])]
    unexplained = [d for d in differences if (d[0], d[1]) not in KNOWN_DRIFT]
    assert not unexplained, "\n".join(f"{n} {p}: installed {a!r}, controller {b!r}"
                                      for n, p, a, b in unexplained)
    # The list is not stale: each documented change is still a difference, and docs/charts.md
    # says each one.
    assert {(d[0], d[1]) for d in differences} == KNOWN_DRIFT
    charts_md = (PROJECT_DIR / "docs" / "charts.md").read_text()
    for word in ("Unhealthy", "consolidateAfter", "required"):
        assert word in charts_md.split("## Karpenter's CRDs", 1)[1].split("\n## ", 1)[0]


@pytest.mark.skipif(not CRD_DIR.is_dir(), reason=f"no CRDs at {CRD_DIR} (../shared/crds)")
def test_the_lab_nodepool_is_valid_under_the_pinned_controllers_schema(lab):
    import jsonschema

    crd = yaml.safe_load((_module_crds() / "karpenter.sh_nodepools.yaml").read_text())
    nodepool = as_object(lab().named("karpenter-node-pool"))
    validator = jsonschema.Draft7Validator(_schemas(crd)[nodepool["apiVersion"].split("/")[1]])
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(nodepool)]
    assert not problems, problems


def test_the_plan_says_which_releases_render_a_source_other_than_the_pinned_chart(dev_run):
    from offline import plan_charts

    text = "\n".join(plan_charts.lines(dev_run))
    flat = " ".join(text.split())
    # The pins are the program's (components/karpenter.py, hybrid_gateway.py); the sources
    # are chart_render.CHART_SOURCES', which docs/charts.md describes.
    for name, pinned, source in (
            ("karpenter", "oci://public.ecr.aws/karpenter/karpenter 1.15.0", "karpenter 1.14.1"),
            ("karpenter-crd", "oci://public.ecr.aws/karpenter/karpenter-crd 1.15.0",
             "karpenter-crd 1.14.1"),
            ("eks-hybrid-nodes-gateway", "oci://public.ecr.aws/eks/eks-hybrid-nodes-gateway 1.0.1",
             "eks-hybrid-nodes-gateway 1.0.0")):
        assert re.search(rf"\b{re.escape(name)} +{re.escape(pinned)}: rendered from "
                         rf"{re.escape(source)}, NOT the pinned version: the newest source this "
                         "machine can get", flat), name
    assert "kyverno 3.9.0: rendered from that chart (kyverno 3.9.0)" in flat
    assert all(len(line) <= plan_charts.WIDTH for line in text.splitlines())
