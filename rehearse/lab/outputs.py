"""The deployed stack's outputs: through the Pulumi Automation API, or from a file written by
`pulumi stack output --json --show-secrets`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from rehearse.run.errors import RunError

#: The layer each output comes from, so a missing one says which layer to build.
LAYER_OF = {
    "kubeconfig": "cluster", "clusterName": "cluster", "clusterEndpoint": "cluster",
    "region": "network", "hybridPodCidr": "network", "gatewayNamespace": "gateway",
    "gatewayLeaseName": "gateway", "gatewayRouteTableIds": "gateway", "demo1": "demo",
    "demo3": "demo (with gpuEnabled)", "hybridNodeSelector": "hybrid",
}


#: What writes an ``--outputs`` file (the kubeconfig is a secret: without --show-secrets it is
#: "[secret]").
WRITE_COMMAND = "pulumi stack output --json --show-secrets"


@dataclass(frozen=True)
class StackOutputs:
    stack: str
    values: Mapping[str, Any]
    #: False when the name is only the outputs file's (no --stack): nothing may change a stack
    #: of that name (rehearse.lab.switch.require_stack).
    named: bool = True
    #: The ``--outputs`` file the values were read from, if any: a missing output is then the
    #: file's, not a stack's.
    source: Optional[Path] = None

    def get(self, key: str) -> Any:
        if key not in self.values:
            layer = LAYER_OF.get(key)
            if self.source is not None:
                built = f" (the {layer} layer's)" if layer else ""
                raise RunError(f"the outputs file {self.source} has no output {key}{built}: "
                               f"write it from a stack that has it with `{WRITE_COMMAND} > "
                               f"{self.source}`")
            where = f": build the {layer} layer (upToLayer) and run `pulumi up`" if layer else ""
            raise RunError(f"the stack {self.stack} has no output {key}{where}")
        return self.values[key]

    def require(self, keys: Sequence[str], command: str) -> None:
        """Every output in ``keys`` (what ``command`` reads), or one line naming all that are
        missing and where they come from, before anything is read from the cluster."""
        missing = [key for key in keys if key not in self.values]
        if not missing:
            return
        names = ", ".join(missing)
        layers = sorted({LAYER_OF[key] for key in missing if key in LAYER_OF})
        built = (f" (the {layers[0]} layer's)" if len(layers) == 1 else
                 f" (from the {', '.join(layers[:-1])} and {layers[-1]} layers)" if layers else "")
        plural = "s" if len(missing) > 1 else ""
        if self.source is not None:
            raise RunError(f"the outputs file {self.source} has no output{plural} {names}{built}, "
                           f"which {command} reads: write it from a stack that has "
                           f"{'them' if plural else 'it'} with `{WRITE_COMMAND} > {self.source}`")
        where = (f": build the {' and '.join(layers)} layer{'s' if len(layers) > 1 else ''} "
                 "(upToLayer) and run `pulumi up`"
                 if layers else ": run `pulumi up` with this version of the lab")
        raise RunError(f"the stack {self.stack} has no output{plural} {names}, which {command} "
                       f"reads{where}")

    def optional(self, key: str) -> Optional[Any]:
        return self.values.get(key)

    @property
    def origin(self) -> str:
        """Where the values come from, for a message: the outputs file, or the stack."""
        return f"the outputs file {self.source}" if self.source is not None else f"the stack {self.stack}"

    def rewrite(self) -> str:
        """What an outputs file needs after the stack is fixed ("" for a stack's own outputs)."""
        return (f", then write {self.source} again with `{WRITE_COMMAND} > {self.source}`"
                if self.source is not None else "")

    @property
    def layers(self) -> list[str]:
        return list(self.values.get("layers") or [])

    def require_layer(self, layer: str, why: str) -> None:
        if layer not in self.layers and self.source is not None:
            raise RunError(f"the outputs file {self.source} records no {layer} layer ({why}): "
                           f"write it from a stack with upToLayer {layer} or higher with "
                           f"`{WRITE_COMMAND} > {self.source}`")
        if layer not in self.layers:
            raise RunError(f"the stack {self.stack} has no {layer} layer ({why}): set upToLayer "
                           f"to {layer} or higher and run `pulumi up`")


def from_file(path: Path, stack: Optional[str] = None) -> StackOutputs:
    try:
        values = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunError(f"no outputs file {path}: write it with "
                       f"`pulumi stack output --json --show-secrets > {path}`") from None
    except ValueError as error:
        raise RunError(f"{path} is not the JSON of `pulumi stack output --json`: {error}") from None
    if not isinstance(values, dict):
        raise RunError(f"{path} is not the JSON of `pulumi stack output --json` (not an object)")
    return StackOutputs(stack or path.stem, values, named=stack is not None, source=path)


def from_pulumi(stack: Optional[str], work_dir: Path) -> StackOutputs:
    """The outputs of ``stack`` (default: the selected one) through the Automation API, which
    runs the `pulumi` CLI; secrets come back decrypted (the kubeconfig is one)."""
    from pulumi import automation

    try:
        name = stack or _selected_stack(work_dir)
        # Addressed with --stack, not selected: `select_stack` would change the presenter's
        # current stack (rehearse.lab.stack).
        from rehearse.lab.stack import open_stack

        selected = open_stack(name, work_dir)
        values = {key: item.value for key, item in selected.outputs().items()}
    except FileNotFoundError:
        missing_cli = ("the pulumi CLI is not installed: install it, or pass --outputs FILE "
                       "written by `pulumi stack output --json --show-secrets`")
        # Without the CLI the stack files are all there is to go by: a name none of them has
        # is most likely mistyped, and saying so first saves installing pulumi to find out.
        if stack and not (Path(work_dir) / f"Pulumi.{stack}.yaml").is_file():
            stacks = known_stacks(work_dir)
            have = (f"the stack files there are for {', '.join(stacks)}" if stacks
                    else "there is none")
            raise RunError(f"--stack {stack}: no Pulumi.{stack}.yaml in {work_dir} ({have}); "
                           f"and {missing_cli}") from None
        raise RunError(missing_cli) from None
    except automation.errors.CommandError as error:
        if stack and "no stack named" in str(error):
            raise RunError(_unknown_stack(stack, work_dir)) from None
        raise RunError(f"pulumi could not read the stack's outputs: {_first_line(error)}") from None
    return StackOutputs(name, values)


def known_stacks(work_dir: Path) -> list[str]:
    """The stacks `pulumi stack ls` knows for the project in ``work_dir``, or failing that the
    ``Pulumi.<stack>.yaml`` files there (a stack whose backend is not reachable from here)."""
    from pulumi import automation

    try:
        found = [s.name for s in automation.LocalWorkspace(work_dir=str(work_dir)).list_stacks()]
    except (FileNotFoundError, automation.errors.CommandError, ValueError, KeyError):
        found = []
    if not found:
        found = [p.name[len("Pulumi."):-len(".yaml")] for p in Path(work_dir).glob("Pulumi.*.yaml")]
    return sorted(set(found))


def _unknown_stack(stack: str, work_dir: Path) -> str:
    stacks = known_stacks(work_dir)
    have = (f"the stacks there are {', '.join(stacks)}" if stacks else
            "it has no stacks yet (`pulumi stack init NAME`)")
    return f"--stack {stack}: no such stack in {work_dir}; {have}"


def _selected_stack(work_dir: Path) -> str:
    from pulumi import automation

    workspace = automation.LocalWorkspace(work_dir=str(work_dir))
    summary = workspace.stack()
    if summary is None:
        raise RunError("no stack is selected: pass --stack NAME (or `pulumi stack select`)")
    return summary.name


def _first_line(error: Exception) -> str:
    text = str(error)
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("error:", "stderr:")) and len(line) > 8:
            return line.removeprefix("stderr:").strip()
    return text.strip().splitlines()[0] if text.strip() else repr(error)
