"""One stack setting switched through Pulumi and put back — `burst --scenarios` (burstScenario)
and `gateway-throughput --instance-types` (gatewayInstanceType) share it.

The demo guide's rule holds for every switch and every restore: the plan is printed first and
applied after confirmation. So a switch is ``config set``, ``pulumi preview`` (its steps read
from the engine events the Automation API streams, its counts from ``PreviewResult.
change_summary``), a refusal if the plan touches anything outside the setting's ``Scope`` (an
unrelated pending change would otherwise be applied with it — the config is put back and
nothing is applied), a question unless ``--yes``, then ``pulumi up``. A refused or declined
switch changed only the config, so putting it back needs no ``up``.

Ctrl-C while `pulumi` runs is ``rehearse.lab.stack.PulumiInterrupted``: the CLI has been asked to
cancel and waited for. The restore does not start while it still runs, nor over pending
operations an interrupted update left: it says exactly what to run instead (the CLI's own
recovery: pulumi/pulumi pkg/resource/deploy/deployment_executor.go, "repair your stack using
`pulumi refresh`", pkg/cmd/pulumi/operations/refresh.go ``--clear-pending-creates``, and
pkg/backend/diy/lock.go's "delete the lock file with `pulumi cancel`").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from rehearse.run.errors import RunError
from rehearse.lab.stack import PulumiInterrupted, config_value
from rehearse.run.terminal import ask

#: Engine step ops that change nothing (pulumi.automation.events.OpType).
NO_CHANGE = ("same", "read", "refresh")
STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass(frozen=True)
class Scope:
    """What switching ``key`` may change: a step is in scope when its resource's type chain
    (the URN's type part, parents first) contains one of ``parents``, or its (type, name
    suffix) is one of ``resources``. The stack resource itself (its outputs follow the config)
    is always in scope."""
    key: str
    words: str
    resources: tuple[tuple[str, str], ...] = ()
    parents: tuple[str, ...] = ()

    def allows(self, step: dict) -> bool:
        if step["type"] == STACK_TYPE:
            return True
        if any(parent in step["chain"] for parent in self.parents):
            return True
        return any(step["type"] == kind and step["name"].endswith(suffix)
                   for kind, suffix in self.resources)

    @property
    def short(self) -> str:
        return self.key.split(":", 1)[-1]


def step_of(urn: str, op: str, kind: str) -> dict:
    """A plan step from an engine event's ``metadata``: the URN is
    ``urn:pulumi:<stack>::<project>::<parent types$...$type>::<name>``."""
    parts = urn.split("::")
    chain = parts[2].split("$") if len(parts) > 3 else [kind]
    return {"op": op, "type": kind, "name": parts[-1], "chain": chain, "urn": urn}


def plan_lines(plan: dict) -> list[str]:
    counts = ", ".join(f"{n} {op}" for op, n in sorted((plan.get("summary") or {}).items()))
    lines = [f"  {s['op']:<18} {s['type']}  {s['name']}" for s in plan["steps"]]
    return lines + [f"  ({counts or 'no change summary'})"]


def require_stack(ctx: Any, what: str, needs: str = "changes the stack's config") -> None:
    """A command that changes a stack (or reads its stack file) must name it: outputs read
    from a file carry the file's name, which is not a stack."""
    if not getattr(ctx.outputs, "named", True):
        raise RunError(f"{what} {needs}: pass --stack NAME with --outputs "
                       "(the outputs file does not say which stack it came from)")


def require_confirmation(ctx: Any, what: str) -> None:
    """Before anything changes: without --yes every switch is asked, so stdin must be a
    terminal."""
    if ctx.options.get("yes"):
        return
    if not sys.stdin or not sys.stdin.isatty():
        raise RunError(f"{what} previews and asks before each `pulumi up`, and stdin is not a "
                       "terminal: run it from a terminal, or pass --yes to apply each previewed "
                       "switch without asking")


class RestoreBlocked(RunError):
    """The setting cannot be put back now; the message says what to run."""


class ConfigSwitch:
    def __init__(self, ctx: Any, opener: Callable[[], Any], scope: Scope):
        self.ctx, self.opener, self.scope = ctx, opener, scope
        self._stack: Any = None
        self.original: Optional[str] = None
        #: The config differs from the original (an `up` may or may not have run).
        self.config_changed = False
        #: An `up` ran (or was interrupted) with a value other than the original.
        self.applied = False
        #: A switch was attempted: the run reports the setting put back (or not).
        self.touched = False
        self.interrupted: Optional[PulumiInterrupted] = None

    # --- the stack -------------------------------------------------------------------------

    @property
    def stack(self) -> Any:
        if self._stack is None:
            stack = self.opener()
            command = getattr(getattr(stack, "workspace", None), "pulumi_command", None)
            if hasattr(command, "say"):
                command.say = self.ctx.progress  # the cancel messages go where progress goes
            self._stack = stack
        return self._stack

    @property
    def name(self) -> str:
        return self.ctx.outputs.stack

    def _cli(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except PulumiInterrupted as interrupted:
            self.interrupted = interrupted
            raise

    def read_original(self) -> Optional[str]:
        try:
            self.original = str(self.stack.get_config(self.scope.key).value)
        except RunError:
            raise
        except Exception as error:  # noqa: BLE001 a key not set: the project's default
            if "not found" not in str(error):
                raise RunError(f"pulumi could not read {self.scope.key}: {_first_line(error)}") from None
            self.original = None
        return self.original

    def _set(self, value: Optional[str]) -> None:
        if value is None:
            self._cli(lambda: self.stack.remove_config(self.scope.key))
        else:
            self._cli(lambda: self.stack.set_config(self.scope.key, config_value(value)))

    # --- preview, confirm, up ----------------------------------------------------------------

    def preview(self, why: str) -> dict:
        steps: list[dict] = []

        def on_event(event: Any) -> None:
            pre = getattr(event, "resource_pre_event", None)
            if pre is None or pre.metadata is None:
                return
            op = getattr(pre.metadata.op, "value", pre.metadata.op)
            if op not in NO_CHANGE:
                steps.append(step_of(pre.metadata.urn, op, pre.metadata.type))

        self.ctx.progress(f"pulumi preview ({why})")
        result = self._cli(lambda: self.stack.preview(on_event=on_event))
        summary = dict(getattr(result, "change_summary", None) or {})
        outside = [s for s in steps if not self.scope.allows(s)]
        return {"steps": steps, "summary": {str(getattr(k, "value", k)): v for k, v in summary.items()},
                "outside": outside}

    def _confirm(self, why: str, plan: dict) -> bool:
        if self.ctx.options.get("yes"):
            return True
        answer = ask(f"apply this plan ({why}) with `pulumi up --stack {self.name}`?")
        return bool(answer)

    def _up(self, why: str) -> None:
        def output(line: str) -> None:
            if line.strip():
                self.ctx.progress(f"  pulumi | {line.rstrip()}")

        self.ctx.progress(f"pulumi up ({why})")
        self._cli(lambda: self.stack.up(on_output=output))

    def _show(self, why: str, plan: dict) -> None:
        self.ctx.progress(f"plan ({why}):")
        for line in plan_lines(plan):
            self.ctx.progress(line)

    def _refusal(self, plan: dict) -> str:
        shown = "; ".join(f"{s['op']} {s['type']} {s['name']}" for s in plan["outside"][:5])
        more = f" and {len(plan['outside']) - 5} more" if len(plan["outside"]) > 5 else ""
        return (f"the preview changes more than {self.scope.words}: {shown}{more} — another change "
                f"is pending on the stack; apply or drop it first (`pulumi preview --stack "
                f"{self.name} --diff`), then run again")

    def switch(self, value: str, why: str) -> dict:
        """Config set, preview, refuse or ask, up. ``ok`` False: not applied (``refused`` /
        ``declined``: the config is back as it was)."""
        self.touched = self.config_changed = True
        self._set(value)
        plan = self.preview(why)
        self._show(why, plan)
        public = {"plan": [{k: s[k] for k in ("op", "type", "name")} for s in plan["steps"]],
                  "change_summary": plan["summary"]}
        if plan["outside"]:
            self._put_config_back()
            return {"ok": False, "refused": True, "error": self._refusal(plan), **public}
        if not self._confirm(why, plan):
            self._put_config_back()
            return {"ok": False, "declined": True, "error": "not confirmed: nothing applied", **public}
        self.applied = True
        self._up(why)
        return {"ok": True, **public}

    def _put_config_back(self) -> None:
        self._set(self.original)
        self.config_changed = False

    # --- the restore ---------------------------------------------------------------------------

    def _by_hand(self) -> str:
        value = self.original or "the project's default"
        setting = (f"`pulumi config set --stack {self.name} {self.scope.short} {self.original}`"
                   if self.original is not None else
                   f"`pulumi config rm --stack {self.name} {self.scope.short}`")
        return f"{setting} and `pulumi up --stack {self.name}` (back to {value})"

    def pending_operations(self) -> list[dict]:
        deployment = self.stack.export_stack()
        state = getattr(deployment, "deployment", None) or {}
        return list(state.get("pending_operations") or [])

    def _blocked(self) -> Optional[str]:
        """Why the restore must not run now, with what to run; None when it may."""
        interrupted = self.interrupted
        if interrupted is not None and not interrupted.finished:
            return (f"`pulumi {interrupted.command[0]}` (pid {interrupted.pid}) was still cancelling "
                    f"after {interrupted.waited:g} s and holds the stack's lock: wait for it to "
                    f"end, then run {self._by_hand()}")
        if interrupted is None or not self.applied:
            return None
        pending = self.pending_operations()
        if not pending:
            return None
        creates = [p for p in pending if p.get("type") == "creating"]
        listed = ", ".join(f"{(p.get('resource') or {}).get('urn', '?').split('::')[-1]} "
                           f"(interrupted while {p.get('type', '?')})" for p in pending[:5])
        steps = [f"check in the AWS console or with kubectl whether each finished, then "
                 f"`pulumi refresh --stack {self.name}` (it clears the pending operations)"]
        if creates:
            steps.append(f"for the {len(creates)} pending create(s) a non-interactive refresh "
                         f"skips: `pulumi refresh --stack {self.name} --clear-pending-creates` "
                         "drops them from the state (or `--import-pending-creates URN ID` keeps "
                         "one that was made)")
        return (f"the interrupted update left {len(pending)} pending operation(s): {listed}; "
                + "; ".join(steps) + f"; then {self._by_hand()}")

    def restore(self, why: str) -> dict:
        """Puts the original value back: the config alone if nothing was applied, else with a
        previewed, confirmed `up`. Raises RestoreBlocked (what to run) when it cannot."""
        if not self.config_changed and not self.applied:
            return {"ok": True, "config_only": True, "applied": False}
        blocked = self._blocked()
        if blocked:
            raise RestoreBlocked(blocked)
        if self.interrupted is not None and self.interrupted.forced:
            # A terminated CLI can leave its lock (file backends): `pulumi cancel` removes it.
            self.ctx.progress(f"note: pulumi was terminated; if the restore meets the stack's "
                              f"lock, run `pulumi cancel --stack {self.name}` first")
        self._set(self.original)
        self.config_changed = False
        if not self.applied:
            return {"ok": True, "config_only": True, "applied": False}
        plan = self.preview(why)
        self._show(why, plan)
        public = {"plan": [{k: s[k] for k in ("op", "type", "name")} for s in plan["steps"]],
                  "change_summary": plan["summary"]}
        if plan["outside"]:
            raise RestoreBlocked(f"{self._refusal(plan)}; the config is back, the resources are "
                                 f"not: run `pulumi up --stack {self.name}` once it is")
        if not self._confirm(why, plan):
            raise RestoreBlocked(f"the restore was not confirmed: the config is back, the "
                                 f"resources are not: run `pulumi up --stack {self.name}`")
        self._up(why)
        self.applied = False
        return {"ok": True, "applied": True, **public}


def _first_line(error: BaseException) -> str:
    from rehearse.lab.outputs import _first_line as first

    return first(error) if isinstance(error, Exception) else type(error).__name__
