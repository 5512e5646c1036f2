"""The corpus of stack files tests/test_real_pulumi_config.py puts before both the real
``pulumi preview`` and the offline plan, and how each side's verdict is read.

A verdict is ``("accepted", None)`` or ``("refused by the CLI" | "refused by the program" |
"refused", key)``: the key (without the project
namespace) the CLI's config check or the program's validation names, or ``None`` when the
refusal names no key (a file that is not YAML)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from tests.conftest import PROJECT_DIR

PROJECT = "eks-hybrid-lab"
DEV = (PROJECT_DIR / "Pulumi.dev.yaml").read_text()


def shipped_stack_files() -> list[Path]:
    return sorted(p for p in PROJECT_DIR.glob("Pulumi.*.yaml")
                  if p.name != "Pulumi.yaml" and not p.name.endswith(".local.yaml"))


def with_line(key: str, value: Optional[str]) -> str:
    """The dev stack file with ``key``'s line set to ``value`` (added if absent, dropped if None)."""
    line = re.compile(rf"^  {PROJECT}:{key}:.*$", re.M)
    new = "" if value is None else f"  {PROJECT}:{key}: {value}"
    if line.search(DEV):
        text = line.sub(new, DEV)
        return re.sub(r"\n\n+", "\n", text) if value is None else text
    return DEV.rstrip("\n") + f"\n{new}\n"


def project_variant(key: str, change: Callable[[str], str]) -> Callable[[str], str]:
    """A Pulumi.yaml transform changing only ``key``'s declaration block."""
    def apply(text: str) -> str:
        block = re.search(rf"^  {key}:\n(?:    .*\n|\s*#.*\n)+", text, re.M)
        assert block, f"Pulumi.yaml declares no {key}"
        return text[:block.start()] + change(block.group(0)) + text[block.end():]
    return apply


def no_default(block: str) -> str:
    return re.sub(r"^    default:.*\n", "", block, flags=re.M)


def secret(block: str) -> str:
    return block + "    secret: true\n"


@dataclass(frozen=True)
class Case:
    name: str
    stack_text: str
    #: What the spec says (Pulumi's mergeConfig, stacks/config.py): None = accepted.
    refused_key: Optional[str]
    #: Who refuses: "the CLI" (mergeConfig), "the program" (stacks/config.py), "" = accepted.
    refused: str = "the CLI"
    project: Optional[Callable[[str], str]] = None
    #: Keys to write as secrets with ``pulumi config set --secret`` after the file is written.
    secrets: tuple = ()


CORPUS = [
    Case("missing-required", with_line("kubernetesVersion", None), "kubernetesVersion",
         project=project_variant("kubernetesVersion", no_default)),
    Case("integer-as-text", with_line("hybridNodeCount", "two"), "hybridNodeCount"),
    Case("boolean-as-text", with_line("gpuEnabled", "maybe"), "gpuEnabled"),
    Case("array-as-scalar", with_line("adminCidrs", "10.0.0.0/8"), "adminCidrs"),
    Case("integer-as-array", with_line("burstCpuLimit", "[32]"), "burstCpuLimit"),
    # The CLI passes a key the project does not declare (mergeConfig checks declared keys
    # only); the program's own validation refuses it.
    Case("undeclared-key", with_line("noSuchKey", "x"), "noSuchKey", refused="the program"),
    Case("plain-for-secret", DEV, "gpuModel",
         project=project_variant("gpuModel", secret)),
    Case("secret-as-secret", with_line("gpuModel", None), None, refused="",
         project=project_variant("gpuModel", secret), secrets=("gpuModel",)),
    Case("malformed-yaml", DEV.replace("  aws:region: ap-northeast-2",
                                       "  aws:region: [ap-northeast-2"), None,
         refused="a YAML error"),
    Case("az-count-5", with_line("availabilityZoneCount", "5"), "availabilityZoneCount", refused="the program"),
    Case("bad-cidr", with_line("cloudVpcCidr", "10.0.0.300/16"), "cloudVpcCidr", refused="the program"),
    Case("burst-scenario-D", with_line("burstScenario", '"D"'), "burstScenario", refused="the program"),
    # EKS Hybrid Nodes is not offered in GovCloud: stacks/region.py refuses its regions.
    Case("govcloud-region", DEV.replace("aws:region: ap-northeast-2", "aws:region: us-gov-west-1"),
         "region", refused="the program"),
]

_CLI_KEY = re.compile(r"(?:configuration key|missing configuration values?) '(?:[\w-]+:)?(\w+)'")
#: A line of stacks/config.py's ConfigError: "  - <key> = <value>: <rule>".
VIOLATION = re.compile(r"^\s+-\s+(?:[\w-]+:)?(\w+) = ", re.M)
_NEEDS_AWS = re.compile(r"pulumi-resource-aws|plugin[^\n]*\baws\b|\baws\b[^\n]*plugin", re.I)


def engine_verdict(text: str, ok: bool) -> tuple[str, Optional[str]]:
    """The real preview's verdict out of its error and output."""
    if ok:
        return ("accepted", None)
    cli = _CLI_KEY.search(text)
    if cli:
        return ("refused by the CLI", cli.group(1))
    if re.search(r"invalid configuration \(\d+ problems?\)", text):
        first = VIOLATION.search(text)
        return ("refused by the program", first.group(1) if first else None)
    if _NEEDS_AWS.search(text):
        return ("accepted", None)
    return ("refused", None)  # not YAML, or a failure this corpus does not name
