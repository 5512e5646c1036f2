"""One run command's run into its run folder (the frame every run shares): read the stack's
outputs, check the command's input, reach the cluster, then collect into events.jsonl and write
the report whatever happens. rehearse.cli looks up the command's face in its registry and hands
it here; ``rehearse all`` runs each step through ``execute`` too.

``_outputs`` and ``_connect`` are looked up in this module when a run needs them, so a test
points every command (and ``predict``, and ``all``'s check of the cluster) at an emulator by
replacing them here."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from rehearse.run import outcome
from rehearse.run import record
from rehearse.run.command import RunCommand
from rehearse.run.errors import RunError


def _outputs(args: argparse.Namespace):
    from rehearse.lab import outputs

    if args.outputs:
        return outputs.from_file(args.outputs, args.stack)
    return outputs.from_pulumi(args.stack, args.work_dir)


def _connect(args: argparse.Namespace, stack_outputs) -> Any:
    from rehearse.lab.connection import Kube, endpoint_from_stack_kubeconfig

    if args.kubeconfig:
        kube = Kube.from_kubeconfig_file(args.kubeconfig)
        server = str(args.kubeconfig)
    else:
        from rehearse.lab.account import stack_account

        endpoint = endpoint_from_stack_kubeconfig(
            stack_outputs.get("kubeconfig"), stack_outputs.get("region"),
            stack_account(stack_outputs.stack, args.work_dir))
        kube, server = Kube.connect(endpoint), endpoint.server
    try:
        kube.check_reachable(server)
    except BaseException:
        kube.close()
        raise
    return kube


@dataclass(frozen=True)
class RunResult:
    """How one command's run ended, for ``rehearse all``: its exit code, its folder, and
    whether Ctrl-C ended it (exit code 1 either way)."""
    code: int
    folder: Path
    interrupted: bool = False


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The command's own options, as its collector's context has them."""
    return {k: v for k, v in vars(args).items()
            if k not in ("command", "target", "stack", "outputs", "work_dir", "kubeconfig", "out")}


def check_inputs(command: str, face: RunCommand, args: argparse.Namespace,
                 stack_outputs: Any) -> None:
    """Input ``command`` (whose face is ``face``) cannot use, as one line (RunError) before
    anything is read or made: the outputs its collector reads, its options' shape, a
    --kubeconfig file that cannot be used, a --out that is not a folder."""
    from rehearse.run import inputs

    # The region, and the stack's kubeconfig unless --kubeconfig stands for it, are read by
    # every command to reach the cluster.
    frame = ("region",) if args.kubeconfig else ("region", "kubeconfig")
    inputs.check(face, command, inputs.Given(stack_outputs, _options(args), args.work_dir),
                 also=frame)
    if args.kubeconfig:
        from rehearse.lab.connection import check_kubeconfig

        check_kubeconfig(args.kubeconfig)
    if args.out.exists() and not args.out.is_dir():
        raise RunError(f"--out {args.out}: is a file, not a folder for the run folders; name a "
                       "folder (default ./rehearsals)")


def execute(command: str, face: RunCommand, args: argparse.Namespace) -> RunResult:
    """One command's run into its folder. Raises before the folder exists (the stack's
    outputs, the command's input, the cluster); once it exists, every ending is a report in
    it."""
    from rehearse.lab.account import stack_account
    from rehearse.run.context import Context, boto3_clients

    stack_outputs = _outputs(args)
    check_inputs(command, face, args, stack_outputs)
    region = stack_outputs.get("region")
    kube = _connect(args, stack_outputs)
    options = _options(args)
    account = stack_account(stack_outputs.stack, args.work_dir)
    ctx = Context(outputs=stack_outputs, kube=kube, region=region,
                  aws=boto3_clients(region, account),
                  options=options, work_dir=args.work_dir)
    folder = record.folder_for(args.out, stack_outputs.stack, command, ctx.clock())
    recorder = record.Recorder(folder, clock=ctx.clock)
    show = ctx.progress

    def progress(message: str) -> None:
        # Each step is kept, so a run that stops part-way can say how far it got.
        recorder(outcome.RUN_STEP, message=message)
        show(message)

    ctx.progress = progress

    def collect() -> None:
        recorder(record.RUN_STARTED, command=command, stack=stack_outputs.stack,
                 options={k: str(v) for k, v in options.items()})
        face.collect(ctx, recorder)

    try:
        code, interrupted = _ended(collect, recorder, folder)
    finally:
        recorder.close()
        kube.close()
    return _write_report(face, recorder.events, folder, code, interrupted)


def _ended(collect: Callable[[], None], recorder: record.Recorder,
           folder: Path) -> tuple[Optional[int], bool]:
    """The collector's run, every ending recorded: (None, False) when it finished, else the
    exit code it ended with and whether Ctrl-C ended it. A run that stops part-way keeps its
    folder: what it measured, and the record of what it changed (a leader pod deleted, a stack
    switched and restored), is in events.jsonl."""
    try:
        collect()
    except KeyboardInterrupt:
        recorder(outcome.RUN_INTERRUPTED, reason="Ctrl-C")
        print("interrupted: writing what was recorded", file=sys.stderr)
        return 1, True
    except Exception as error:  # noqa: BLE001 every failure ends as a report and one line
        reason, defect = outcome.reason_of(error, _as_run_error)
        details = None
        if defect:
            details = "error.txt"
            (folder / details).write_text("".join(traceback.format_exception(error)))
        recorder(outcome.RUN_FAILED, reason=reason, details=details)
        print(f"error: {reason}", file=sys.stderr)
        return 2, False
    return None, False


def _write_report(face: RunCommand, events: list[dict], folder: Path, code: Optional[int],
                  interrupted: bool) -> RunResult:
    report = outcome.analyse_run(face.analyse, events)
    try:
        report.write(folder)
    except KeyboardInterrupt:
        # The report is written before the charts (Report.write): the run is kept, and a
        # rehearsal (`all`) ends here as on any other Ctrl-C.
        print("interrupted while drawing the charts: the report is written", file=sys.stderr)
        code, interrupted = 1, True
    print(report.summary())
    print(f"report: {folder / 'report.html'} (and report.md)")
    if code is None:
        code = 0 if report.passed else 1
    return RunResult(code, folder, interrupted)


def _as_run_error(error: BaseException) -> Optional[RunError]:
    """Errors that mean the run could not be made, as one line."""
    if isinstance(error, RunError):
        return error
    name = type(error).__name__
    module = type(error).__module__ or ""
    if module.startswith(("httpx", "httpcore", "ssl")) or isinstance(error, (ConnectionError, OSError)):
        return RunError(f"cannot reach the cluster or AWS: {name}: {str(error).splitlines()[0] if str(error) else ''}")
    if module.startswith("botocore") or module.startswith("boto3"):
        return RunError(f"AWS refused or could not be reached: {name}: {error}")
    if module.startswith("msgspec") or isinstance(error, json.JSONDecodeError):
        # lightkube decodes answers with msgspec: a body cut short (a proxy, a dropped
        # connection) or not the object asked for.
        return RunError(f"an answer from the cluster could not be read ({name}: "
                        f"{str(error).splitlines()[0] if str(error) else ''}): a truncated or "
                        "malformed body; run again, and if it persists check what sits between "
                        "you and the API server")
    if module.startswith("lightkube") and name == "ApiError":
        status = getattr(getattr(error, "status", None), "code", None)
        if status in (401, 403):
            return RunError(f"the cluster refused the credentials (HTTP {status}): {error}")
    return None
