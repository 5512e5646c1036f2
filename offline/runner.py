"""Runs the real program (``__main__.py``) offline: Pulumi mocks, no CLI, no AWS credentials.

The plan command and the tests both use it. Every ``RegisterResource`` request is recorded with
what the engine would see — type, name, parent, inputs (secrets marked), dependencies, provider
and options — so what registers can be printed and asserted on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from pulumi import Output
from pulumi.dynamic import dynamic as _dynamic
from pulumi.runtime import config as runtime_config
from pulumi.runtime import mocks as runtime_mocks
from pulumi.runtime import resource as runtime_resource
from pulumi.runtime import rpc, settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from offline import pulumi_cli
from offline.fake_cloud import FakeCloud
from stacks.config import PROJECT, ConfigError, load_keyed_config

PROJECT_DIR = Path(__file__).resolve().parent.parent
PROGRAM = PROJECT_DIR / "__main__.py"
LAYER_TYPE_PREFIX = f"{PROJECT}:layer:"


@dataclass(frozen=True)
class Secret:
    """An input value the program marked secret."""

    value: Any

    def __repr__(self) -> str:
        return "Secret(***)"


@dataclass
class Registration:
    type: str
    name: str
    urn: str
    id: str
    parent: str
    custom: bool
    inputs: dict
    #: Every resource this one waits for: explicit ``depends_on`` and inputs' sources.
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    #: ``urn::id`` of the provider, for custom resources.
    provider: str
    additional_secret_outputs: list[str]
    custom_timeouts: dict
    options: dict
    #: What the (fake) cloud answered: the resource's outputs.
    outputs: dict = field(default_factory=dict)

    @property
    def explicit_dependencies(self) -> set[str]:
        """``depends_on`` alone: what the program declared beyond data references."""
        implicit = {urn for urns in self.property_dependencies.values() for urn in urns}
        return set(self.dependencies) - implicit


def _mark_secrets(value: Any) -> Any:
    if rpc.is_rpc_secret(value):
        return Secret(_mark_secrets(rpc.unwrap_rpc_secret(value)))
    if isinstance(value, dict):
        return {k: _mark_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mark_secrets(v) for v in value]
    return value


class RecordingMonitor(runtime_mocks.MockMonitor):
    def __init__(self, mocks: runtime_mocks.Mocks):
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        #: URNs of the resources that called register_outputs (components must).
        self.outputs_registered: set[str] = set()

    def RegisterResourceOutputs(self, request):
        self.outputs_registered.add(request.urn)
        return super().RegisterResourceOutputs(request)

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return response
        timeouts = request.customTimeouts
        self.registrations.append(Registration(
            type=request.type,
            name=request.name,
            urn=response.urn,
            id=response.id,
            parent=request.parent,
            custom=request.custom,
            inputs=_mark_secrets(rpc.deserialize_properties(request.object, keep_unknowns=True)),
            dependencies=list(request.dependencies),
            property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
            provider=request.provider,
            additional_secret_outputs=list(request.additionalSecretOutputs),
            custom_timeouts={k: getattr(timeouts, k) for k in ("create", "update", "delete")
                             if getattr(timeouts, k)},
            options={
                "protect": request.protect,
                "deleteBeforeReplace": request.deleteBeforeReplace,
                "ignoreChanges": list(request.ignoreChanges),
                "replaceOnChanges": list(request.replaceOnChanges),
                "retainOnDelete": request.retainOnDelete,
                "deletedWith": request.deletedWith,
                # The other names a resource may have in a stack's state (an alias by name):
                # the engine takes a state entry of that name as this resource.
                "aliasNames": [a.spec.name for a in request.aliases if a.spec.name],
            },
            outputs=_mark_secrets(self.resources[response.urn].state) if response.urn in self.resources else {},
        ))
        return response


class _LoopThreadPool(concurrent.futures.ThreadPoolExecutor):
    def __init__(self):
        self._loops: list[asyncio.AbstractEventLoop] = []
        super().__init__(max_workers=4, initializer=self._give_loop)

    def _give_loop(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loops.append(loop)

    def shutdown_and_close_loops(self) -> None:
        self.shutdown(wait=True)
        for loop in self._loops:
            loop.close()


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


PROVIDER_TYPE_PREFIX = "pulumi:providers:"


@dataclass(frozen=True)
class ResourceCounts:
    """What "N resources" means: every custom resource (what a provider creates, and the
    explicit providers themselves, which are custom resources too); not the components that
    only group them, nor the root stack: `pulumi up`'s own tally counts those too, so it is
    higher."""

    resources: int
    providers: int
    components: int

    def describe(self) -> str:
        return (f"{self.resources} resources ({self.resources - self.providers} created through "
                f"providers, {self.providers} providers; {self.components} components group "
                "them and are not counted)")


@dataclass
class ProgramRun:
    stack: str
    config: dict[str, str]
    registrations: list[Registration]
    outputs: dict[str, Any]
    warnings: list[str]
    invokes: list[str] = field(default_factory=list)
    outputs_registered: set[str] = field(default_factory=set)
    #: Stack outputs Pulumi will store encrypted.
    secret_outputs: set[str] = field(default_factory=set)

    def __post_init__(self):
        self.by_urn = {r.urn: r for r in self.registrations}

    @property
    def lab_config(self):
        """The validated LabConfig of this run's config."""
        return config_from_stack_values(self.config, self.stack)

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_]

    def one(self, type_: str, name: str) -> Registration:
        found = [r for r in self.registrations if r.type == type_ and r.name == name]
        if len(found) != 1:
            raise LookupError(f"expected one {type_} named {name}, found {len(found)}")
        return found[0]

    def named(self, name: str) -> Registration:
        found = [r for r in self.registrations if r.name == name and r.custom]
        if len(found) != 1:
            raise LookupError(f"expected one resource named {name}, found {len(found)}")
        return found[0]

    def ancestors(self, reg: Registration) -> Iterable[Registration]:
        parent = self.by_urn.get(reg.parent)
        while parent is not None:
            yield parent
            parent = self.by_urn.get(parent.parent)

    def layer_of(self, reg: Registration) -> Optional[str]:
        """The layer (network, cluster, ...) a resource belongs to, None for stack-level ones."""
        for r in [reg, *self.ancestors(reg)]:
            if r.type.startswith(LAYER_TYPE_PREFIX):
                return r.name
        return None

    def resources(self) -> list[Registration]:
        """Custom resources: what the cloud (or a provider) would create."""
        return [r for r in self.registrations if r.custom]

    def counts(self) -> "ResourceCounts":
        """The one resource count the plan and the benchmark print (docs/testing.md#speed)."""
        custom = self.resources()
        return ResourceCounts(
            resources=len(custom),
            providers=sum(1 for r in custom if r.type.startswith(PROVIDER_TYPE_PREFIX)),
            components=sum(1 for r in self.registrations if not r.custom))

    def provider_ref(self, reg: Registration) -> str:
        return f"{reg.urn}::{reg.id}"


_serialized_providers: dict[tuple, str] = {}
_serialize_provider = _dynamic.serialize_provider


def _serialize_provider_once(provider) -> str:
    """dill-serializes a dynamic provider once per class and state: the result depends on
    nothing else, and serializing by value (bytecode analysis) is the costliest step of an
    offline run."""
    key = (type(provider), repr(sorted(vars(provider).items())))
    if key not in _serialized_providers:
        _serialized_providers[key] = _serialize_provider(provider)
    return _serialized_providers[key]


_get_stack_trace = runtime_resource._get_stack_trace


def _no_stack_trace():
    return runtime_resource.source_pb2.StackTrace()


def run_program(config: Mapping[str, str], *, stack: str = "dev",
                program: Path = PROGRAM, cloud: Optional[FakeCloud] = None) -> ProgramRun:
    """Runs ``program`` under mocks with ``config`` (full keys such as ``aws:region`` and
    ``eks-hybrid-lab:clusterName``, string values as Pulumi stores them), against ``cloud``
    (default: a FakeCloud of the config's region, deployed to by an IAM user).

    Each run gets a fresh event loop and a fresh root stack. An exception the program raises
    (a ConfigError, say) propagates; ``.registrations`` of the partial run are on it as
    ``exc.registrations``.
    """
    cloud = cloud or FakeCloud(region=config.get("aws:region") or "us-east-1")
    monitor = RecordingMonitor(cloud)
    collect = _Collect()
    logger = logging.getLogger(f"{PROJECT}.offline.{id(collect)}")
    logger.propagate = False
    logger.addHandler(collect)

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    # The SDK calls the monitor from executor threads, and the mock monitor gives each of those
    # threads an event loop of its own; run them in a pool whose loops are closed afterwards so
    # no half-collected loop complains at garbage collection.
    executor = _LoopThreadPool()
    loop.set_default_executor(executor)
    saved_env = os.environ.pop("PULUMI_CONFIG", None)
    _dynamic.serialize_provider = _serialize_provider_once
    # Source positions only point `pulumi` at lines of the program; offline nothing reads them,
    # and walking the stack for each of ~150 resources is a fifth of a run.
    runtime_resource._get_stack_trace = _no_stack_trace
    try:
        runtime_config.set_all_config(dict(config))
        settings.ROOT.set(None)
        # Outputs a failed earlier run left unresolved belong to its (closed) event loop.
        settings.SETTINGS.outputs.clear()
        runtime_mocks.set_mocks(cloud, project=PROJECT, stack=stack, preview=False,
                                logger=logger, monitor=monitor)
        root = settings.get_root_resource()
        try:
            _sync_await(run_pulumi_func(lambda: runpy.run_path(str(program), run_name="__main__")))
            outputs = _sync_await(Output.from_input(root.outputs).future()) or {}
            secret_outputs = {key for key, value in root.outputs.items()
                              if isinstance(value, Output) and _sync_await(value.is_secret())}
        except BaseException as exc:
            exc.registrations = monitor.registrations  # type: ignore[attr-defined]
            raise
    finally:
        _dynamic.serialize_provider = _serialize_provider
        runtime_resource._get_stack_trace = _get_stack_trace
        if saved_env is not None:
            os.environ["PULUMI_CONFIG"] = saved_env
        runtime_config.set_all_config({})
        # A failed run (a ConfigError, say) leaves RPCs in flight; cancel them so nothing of
        # this run outlives it.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        executor.shutdown_and_close_loops()
        loop.close()
        asyncio.set_event_loop(None)
        logger.removeHandler(collect)

    return ProgramRun(
        stack=stack,
        config=dict(config),
        registrations=monitor.registrations,
        outputs=outputs,
        warnings=[r.getMessage() for r in collect.records if r.levelno == logging.WARNING],
        invokes=list(cloud.calls),
        outputs_registered=set(monitor.outputs_registered),
        secret_outputs=secret_outputs,
    )


def provider_default_tags(reg: Registration) -> dict[str, str]:
    """The default tags of a provider registration (providers receive nested config as JSON)."""
    value = reg.inputs.get("defaultTags") or {}
    if isinstance(value, str):
        value = json.loads(value)
    return dict(value.get("tags") or {})


def _config_string(value: Any) -> str:
    """A stack-file value as the string Pulumi hands the program."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def config_with(config: Mapping[str, str], **overrides: Any) -> dict[str, str]:
    """``config`` with some settings changed (camelCase keys; None removes one). Keys without a
    namespace are the lab's; ``aws_region`` stands for ``aws:region``."""
    changed = dict(config)
    for key, value in overrides.items():
        full = "aws:region" if key == "aws_region" else (key if ":" in key else f"{PROJECT}:{key}")
        if value is None:
            changed.pop(full, None)
        else:
            changed[full] = _config_string(value)
    return changed


def load_stack_config(stack: str, path: Optional[Path] = None) -> dict[str, str]:
    """The config ``pulumi preview`` would start the program with for ``Pulumi.<stack>.yaml``
    (or ``path``): full keys, string values, the project's defaults applied.

    The stack file is first put through the Pulumi CLI's own checks (``offline/pulumi_cli.py``):
    a stack the CLI would refuse raises ``CliConfigError`` with the CLI's message, as `pulumi
    preview` stops before the program runs."""
    path = path or PROJECT_DIR / f"Pulumi.{stack}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"no stack file {path}")
    project = pulumi_cli.load_project(PROJECT_DIR)
    values = pulumi_cli.load_stack_file(path, project.get("name", PROJECT))
    for key, value in values.items():
        if value.secure:
            raise ValueError(f"{path.name}: {key} is encrypted; the offline plan cannot read "
                             "secrets (use a plain value in a copy of the stack file)")
    try:
        merged = pulumi_cli.merge_config(stack, project, values)
    except pulumi_cli.CliConfigError as refused:
        written = pulumi_cli.written_values(path, project.get("name", PROJECT)).get(refused.key or "")
        if written is None:
            raise
        # The CLI names the key and the type, not the value: say what the file holds.
        declared = (project.get("config") or {}).get(refused.key.split(":", 1)[1]) or {}
        type_name = declared.get("type", "") if isinstance(declared, dict) else ""
        raise pulumi_cli.CliConfigError(
            f"{refused} ({pulumi_cli.wrong_type(refused.key, written, type_name)})",
            key=refused.key) from None
    return pulumi_cli.program_config(merged)


def written_in_stack_file(stack: str, path: Optional[Path] = None) -> dict[str, str]:
    """Each value of ``Pulumi.<stack>.yaml`` (or ``path``) as the file writes it, for a
    ``ConfigError.as_written``."""
    path = path or PROJECT_DIR / f"Pulumi.{stack}.yaml"
    return pulumi_cli.written_values(path, pulumi_cli.load_project(PROJECT_DIR).get("name", PROJECT))


def stack_of_file(path: Optional[Path]) -> str:
    """The stack a stack file would be: ``Pulumi.<stack>.yaml`` names it; the default, dev,
    for any other name (or none). The plan and preflight name the stack this way, so both judge
    the names derived from it (the cluster's, the activation's) as ``pulumi up`` on that stack
    would."""
    import re

    match = re.fullmatch(r"Pulumi\.(.+)\.ya?ml", path.name) if path is not None else None
    return match.group(1) if match else "dev"


def config_from_stack_file(stack: str, path: Optional[Path] = None,
                           region: Optional[str] = None):
    """The validated ``LabConfig`` of ``Pulumi.<stack>.yaml`` (or ``path``), for the
    command-line tools that run outside Pulumi (the plan, preflight, the leftovers audit).
    ``region`` overrides ``aws:region``. Raises what ``load_stack_config`` raises, and
    ``ConfigError`` for a value the lab's own rules refuse."""
    try:
        return config_from_stack_values(load_stack_config(stack, path=path), stack, region)
    except ConfigError as refused:
        raise refused.as_written(written_in_stack_file(stack, path)) from None


def config_from_stack_values(raw: Mapping[str, str], stack: str, region: Optional[str] = None):
    """``config_from_stack_file`` of a stack file already read (``load_stack_config``), for a
    tool that reads the raw keys too (preflight's misspelt-key warnings)."""
    return load_keyed_config(raw, stack=stack, region=region or raw.get("aws:region"))
