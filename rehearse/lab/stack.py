"""The Pulumi Automation API seam of the commands that change a setting and run `pulumi up`
(`burst` switches burstScenario, `gateway-throughput` gatewayInstanceType). Tests replace
``open_stack`` in the module that calls it.

Two things differ from ``automation.select_stack``, and both are about leaving the presenter's
terminal as it was:

- The stack is addressed, not selected. ``LocalWorkspace.select_stack`` always runs
  ``pulumi stack select --stack NAME`` for a local workspace (pulumi 3.272.0,
  ``pulumi/automation/_local_workspace.py``), which rewrites the workspace's current stack: the
  presenter's next bare ``pulumi destroy`` would act on NAME. Every command a ``Stack`` runs
  passes ``--stack NAME`` anyway (``Stack._run_pulumi_cmd_sync``; the workspace's config
  commands too), so the selection is not needed. The SDK's own remote workspace does the same
  to avoid "modify[ing] global state": it checks the stack exists with ``pulumi stack --stack``.
- Ctrl-C does not abandon a running ``pulumi``. The SDK runs the CLI in ``with Popen(...)``;
  on KeyboardInterrupt ``Popen.__exit__`` waits 0.25 s and returns with the CLI still running
  (CPython ``subprocess``, bpo-25942) and its pipes closed — the next write kills the Go CLI
  with SIGPIPE, or the restore's ``up`` meets the lock. ``CancellingCommand`` asks the CLI to
  cancel as a terminal's first Ctrl-C does and waits, bounded, for it to finish (see
  ``CancellingCommand.run``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

#: How long a cancelling `pulumi` may take to finish the steps it has in flight (a Helm release
#: waits for its pods, a node group for its nodes) before the run gives up waiting.
CANCEL_WAIT_SECONDS = 600.0


class PulumiInterrupted(KeyboardInterrupt):
    """Ctrl-C while `pulumi` ran. ``finished``: the CLI has exited (its lock released unless
    ``forced``); ``forced``: a second Ctrl-C terminated it (it may leave pending operations and,
    on a file backend, its lock); ``pid`` of a CLI still running when the wait ran out."""

    def __init__(self, command: list[str], finished: bool, forced: bool, pid: int,
                 code: Optional[int], stderr: str, waited: float):
        super().__init__(f"pulumi {' '.join(command)} interrupted")
        self.command, self.finished, self.forced, self.pid = command, finished, forced, pid
        self.code, self.stderr, self.waited = code, stderr, waited


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _consume(stream: Any, callback: Any, chunks: list[str]) -> None:
    """One of the command's reader threads: each line to ``callback`` as it comes, and kept."""
    for line in iter(stream.readline, ""):
        line = line.rstrip()
        if callback:
            callback(line)
        chunks.append(line)
    stream.close()


def cancelling_command(say: Callable[[str], None] = _say,
                       cancel_wait: float = CANCEL_WAIT_SECONDS) -> Any:
    """A ``PulumiCommand`` whose ``run`` survives Ctrl-C (see the module's docstring)."""
    from pulumi.automation import PulumiCommand
    from pulumi.automation.errors import create_command_error
    from pulumi.automation._cmd import CommandResult

    class CancellingCommand(PulumiCommand):
        def __init__(self) -> None:
            super().__init__()
            self.say, self.cancel_wait = say, cancel_wait

        def run(self, args: list[str], cwd: str, additional_env: Mapping[str, str],
                on_output: Optional[Callable[[str], Any]] = None,
                on_error: Optional[Callable[[str], Any]] = None) -> Any:
            # As PulumiCommand.run (pulumi 3.272.0 automation/_cmd.py): --non-interactive
            # first, PULUMI_AUTOMATION_API set, one reader thread a stream.
            sep = args.index("--") if "--" in args else len(args)
            if "--non-interactive" not in args[:sep]:
                args.insert(0, "--non-interactive")
            env = {**os.environ, **additional_env, "PULUMI_AUTOMATION_API": "true"}
            out: list[str] = []
            err: list[str] = []
            # Its own session: a terminal's Ctrl-C reaches this process only, and exactly one
            # SIGINT is forwarded (the CLI's first Ctrl-C cancels gracefully, its second
            # terminates at once — pulumi/pulumi pkg/backend/cancellation_scope.go).
            process = subprocess.Popen([self.command, *args], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, cwd=cwd, env=env,
                                       encoding="utf-8", start_new_session=True)
            readers = [threading.Thread(target=_consume, args=(process.stdout, on_output, out), daemon=True),
                       threading.Thread(target=_consume, args=(process.stderr, on_error, err), daemon=True)]
            for reader in readers:
                reader.start()
            try:
                code = process.wait()
            except KeyboardInterrupt:
                raise self._cancel(process, args, readers, err) from None
            for reader in readers:
                reader.join()
            result = CommandResult(stdout="\n".join(out), stderr="\n".join(err), code=code)
            if code != 0:
                raise create_command_error(result)
            return result

        def _cancel(self, process: Any, args: list[str], readers: list[Any],
                    err: list[str]) -> PulumiInterrupted:
            command = [a for a in args if a != "--non-interactive"]
            started = time.monotonic()
            forced = False
            process.send_signal(signal.SIGINT)
            self.say(f"Ctrl-C: waiting up to {self.cancel_wait:g} s for `pulumi {command[0]}` to "
                     "cancel (it finishes the steps in flight and releases the stack's lock); "
                     "Ctrl-C again terminates it at once, which may leave pending operations")
            while True:
                left = self.cancel_wait - (time.monotonic() - started)
                try:
                    process.wait(timeout=max(left, 0.0) if not forced else 30.0)
                    break
                except subprocess.TimeoutExpired:
                    break
                except KeyboardInterrupt:
                    if forced:
                        continue
                    forced = True
                    process.send_signal(signal.SIGINT)
                    self.say(f"Ctrl-C again: `pulumi {command[0]}` terminates now")
            finished = process.poll() is not None
            if finished:
                for reader in readers:
                    reader.join(timeout=5)
            return PulumiInterrupted(command, finished, forced, process.pid, process.poll(),
                                     "\n".join(err), round(time.monotonic() - started, 1))

    return CancellingCommand()


def open_stack(stack_name: str, work_dir: Path) -> Any:
    """The stack through the Automation API (it runs the `pulumi` CLI), addressed by name with
    ``--stack`` on every command and never selected; its CLI calls survive Ctrl-C."""
    from pulumi import automation

    class AddressingWorkspace(automation.LocalWorkspace):
        def select_stack(self, stack_name: str) -> None:
            # Proves the stack exists, as `stack select` would, without selecting it.
            self._run_pulumi_cmd_sync(["stack", "--show-name", "--stack", stack_name])

    workspace = AddressingWorkspace(work_dir=str(work_dir), pulumi_command=cancelling_command())
    return automation.Stack.select(stack_name, workspace)


def config_value(value: str) -> Any:
    from pulumi.automation import ConfigValue

    return ConfigValue(value=value)
