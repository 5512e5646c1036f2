"""`python -m rehearse`: verify gateway|gpu|burst, preflight, failover, burst, gateway-throughput,
hostnet, predict, all, summary, report.

Exit codes: 0 every check passed; 1 a check failed or the run was interrupted; 2 the run could
not be made (one line, no traceback). Once a run has started, its folder is kept whatever
happens, with a report of what was done (rehearse.outcome)."""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import shutil
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from rehearse.run import outcome
from rehearse.run import record
from rehearse.run.arguments import stack_arguments
from rehearse.run.errors import RunError

#: command -> module with ``TITLE``, ``add_arguments(parser)``, ``collect(ctx, record)`` and
#: ``analyse(events) -> Report``.
COMMANDS = {
    "verify gateway": "rehearse.commands.verify_gateway.command",
    "verify gpu": "rehearse.commands.verify_gpu.command",
    "failover": "rehearse.commands.failover.command",
    "verify burst": "rehearse.commands.burst.verify",
    "burst": "rehearse.commands.burst.command",
    "gateway-throughput": "rehearse.commands.gateway_throughput.command",
    "hostnet": "rehearse.commands.hostnet.command",
    "preflight": "rehearse.commands.preflight.command",
}


#: Every command, in the order a rehearsal runs them (the README's "Rehearse"): what a bare
#: `python -m rehearse` lists.
REHEARSAL_ORDER = ("all", "preflight", "verify gateway", "failover", "verify burst", "burst",
                   "predict", "verify gpu", "gateway-throughput", "hostnet", "report", "summary")
_REPORT_HELP = "analyse a run's folder again and rewrite its report"
_SUMMARY_HELP = "one page of the latest run of each command, for the evening before"


class _Parser(argparse.ArgumentParser):
    """No option prefixes (`--out` must not stand for `--outputs`); subcommands' parsers are
    made through this class too, since ``allow_abbrev`` is not passed down to them."""

    def __init__(self, *args: Any, allow_abbrev: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse lists every choice of a misspelt command or demo; name the one meant.
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            kind = (action.metavar or action.dest).lower()
            names = list(action.choices)
            close = difflib.get_close_matches(value, names, n=1)
            hint = f"did you mean {close[0]}?" if close else f"the {kind}s: {', '.join(names)}"
            raise argparse.ArgumentError(None, f"no {kind} {value!r}; {hint}")
        super()._check_value(action, value)

    def error(self, message: str) -> None:
        # A command's option with a value it cannot take is one line, as every other input
        # the tool cannot use; --help shows the usage.
        if isinstance(self, _RootParser):
            super().error(message)
        see = "" if "--help" in message or "did you mean" in message else f" (see {self.prog} --help)"
        self.exit(2, f"{self.prog}: error: {message}{see}\n")


class _RootParser(_Parser):
    def error(self, message: str) -> None:
        # argparse's own words for a bare `python -m rehearse` name no command at all.
        if message.startswith("the following arguments are required: COMMAND"):
            message = "name a command; in the order of a rehearsal:\n" + _command_lines()
        super().error(message)

    def parse_args(self, args: Optional[Sequence[str]] = None,  # type: ignore[override]
                   namespace: Optional[argparse.Namespace] = None) -> argparse.Namespace:
        # argparse reports a subcommand's unknown option from the root parser, with the root's
        # usage: the user sees every command and not the option they meant. The subcommand
        # they typed says it instead, with its own usage.
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            typed = _typed_subcommand(self, parsed)
            typed.error(_unknown_arguments(typed, extras))
        return parsed


def _typed_subcommand(parser: argparse.ArgumentParser,
                      parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost parser of the command the user typed (``verify gateway``'s, not the root's)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(parsed, action.dest, None)
            if chosen in action.choices:
                return _typed_subcommand(action.choices[chosen], parsed)
    return parser


def _unknown_arguments(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    known = [o for action in parser._actions for o in action.option_strings]
    for extra in extras:
        if extra.startswith("-"):
            option = extra.split("=", 1)[0]
            close = difflib.get_close_matches(option, known, n=1)
            hint = f"did you mean {close[0]}?" if close else "--help lists its options"
            return f"no option {option}; {hint}"
    return f"unrecognized arguments: {' '.join(extras)} ({parser.prog} --help lists what it takes)"


def _command_lines() -> str:
    titles = {"report": _REPORT_HELP, "summary": _SUMMARY_HELP,
              "all": importlib.import_module("rehearse.pages.all").TITLE,
              "predict": importlib.import_module("rehearse.commands.predict.command").TITLE}
    titles.update({c: _module(c).TITLE for c in COMMANDS})
    width = max(len(c) for c in REHEARSAL_ORDER)
    return "".join(f"  {c:<{width}}  {titles[c]}\n" for c in REHEARSAL_ORDER) + \
        "each takes --help, e.g. python -m rehearse verify gateway --help"


def _module(command: str) -> Any:
    return importlib.import_module(COMMANDS[command])


def _common(parser: argparse.ArgumentParser) -> None:
    stack_arguments(parser.add_argument_group("the stack"),
                    "use this kubeconfig instead of the stack's (whose token is minted here with "
                    "your AWS credentials)")
    parser.add_argument("--out", type=Path, default=Path("rehearsals"), metavar="DIR",
                        help="the rehearsals folder: the run's folder <time>-<stack>-<command> "
                             "goes in it (default: ./rehearsals)")


def build_parser() -> argparse.ArgumentParser:
    parser = _RootParser(
        prog="python -m rehearse",
        description="Rehearse the EKS Hybrid Nodes demos against a deployed lab: check, "
                    "measure, and keep a report (report.md, report.json, events.jsonl).",
        epilog="Exit codes: 0 every check passed, 1 a check failed or the run was interrupted, "
               "2 the run could not be made.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=_Parser)

    verify = commands.add_parser("verify", help="check that a demo is ready",
                                 description="Check that a demo is ready.")
    targets = verify.add_subparsers(dest="target", required=True, metavar="DEMO")
    for target in ("gateway", "gpu", "burst"):
        module = _module(f"verify {target}")
        sub = targets.add_parser(target, help=module.TITLE, description=module.__doc__)
        _common(sub)
        module.add_arguments(sub)

    for command in ("preflight", "failover", "burst", "gateway-throughput", "hostnet"):
        module = _module(command)
        sub = commands.add_parser(command, help=module.TITLE, description=module.__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        _common(sub)
        module.add_arguments(sub)

    predict = importlib.import_module("rehearse.commands.predict.command")
    predict.add_arguments(commands.add_parser("predict", help=predict.TITLE,
                                              description=predict.__doc__))

    rehearsal = importlib.import_module("rehearse.pages.all")
    every = commands.add_parser("all", help=rehearsal.TITLE, description=rehearsal.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(every)
    rehearsal.add_arguments(every)

    summary = commands.add_parser(
        "summary", help=_SUMMARY_HELP,
        # The docstring's last paragraph is for whoever reads the code.
        description=importlib.import_module("rehearse.pages.summary").__doc__.rsplit("\n\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    summary.add_argument("--stack", metavar="NAME",
                         help="the stack whose runs to gather (default: the one stack the runs "
                              "in --out are of)")
    summary.add_argument("--out", type=Path, default=Path("rehearsals"), metavar="DIR",
                         help="the rehearsals folder, whose run folders <time>-<stack>-<command> "
                              "are read, and where <stack>-summary.html and <stack>-summary.md "
                              "are written (default: ./rehearsals)")

    report = commands.add_parser(
        "report", help=_REPORT_HELP,
        description="Analyse a run folder's events.jsonl again and write report.md, "
                    "report.json and the report's charts (SVG and PNG), into the folder or with "
                    "--out DIR into a run folder of the rehearsals folder DIR, named as a live "
                    "run's (a recorded run replays through the same analysis; `summary --out DIR` "
                    "then reads it).")
    report.add_argument("folder", type=Path, help="a run folder (rehearsals/<time>-<stack>-<command>)")
    report.add_argument("--out", type=Path, metavar="DIR",
                        help="the rehearsals folder: write the report (report.md, report.json, "
                             "charts, and a copy of events.jsonl) into DIR/<time>-<stack>-<command>, "
                             "the run's start, stack and command, and leave FOLDER as it is "
                             "(default: rewrite them in FOLDER)")
    return parser


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


def run_command(command: str, args: argparse.Namespace) -> int:
    return execute(command, args).code


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The command's own options, as its collector's context has them."""
    return {k: v for k, v in vars(args).items()
            if k not in ("command", "target", "stack", "outputs", "work_dir", "kubeconfig", "out")}


def check_inputs(command: str, args: argparse.Namespace, stack_outputs: Any) -> None:
    """Input ``command`` cannot use, as one line (RunError) before anything is read or made:
    the outputs its collector reads, its options' shape, a --kubeconfig file that cannot be
    used, a --out that is not a folder."""
    from rehearse.run import inputs

    # The region, and the stack's kubeconfig unless --kubeconfig stands for it, are read by
    # every command to reach the cluster.
    frame = ("region",) if args.kubeconfig else ("region", "kubeconfig")
    inputs.check(_module(command), command,
                 inputs.Given(stack_outputs, _options(args), args.work_dir), also=frame)
    if args.kubeconfig:
        from rehearse.lab.connection import check_kubeconfig

        check_kubeconfig(args.kubeconfig)
    if args.out.exists() and not args.out.is_dir():
        raise RunError(f"--out {args.out}: is a file, not a folder for the run folders; name a "
                       "folder (default ./rehearsals)")


def execute(command: str, args: argparse.Namespace) -> RunResult:
    """One command's run into its folder. Raises before the folder exists (the stack's
    outputs, the command's input, the cluster); once it exists, every ending is a report in
    it."""
    from rehearse.run.context import Context, boto3_clients

    module = _module(command)
    stack_outputs = _outputs(args)
    check_inputs(command, args, stack_outputs)
    region = stack_outputs.get("region")
    kube = _connect(args, stack_outputs)
    options = _options(args)
    from rehearse.lab.account import stack_account

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
    # A run that stops part-way keeps its folder: what it measured, and the record of what it
    # changed (a leader pod deleted, a stack switched and restored), is in events.jsonl.
    code: Optional[int] = None
    interrupted = False
    try:
        recorder(record.RUN_STARTED, command=command, stack=stack_outputs.stack,
                 options={k: str(v) for k, v in options.items()})
        module.collect(ctx, recorder)
    except KeyboardInterrupt:
        recorder(outcome.RUN_INTERRUPTED, reason="Ctrl-C")
        print("interrupted: writing what was recorded", file=sys.stderr)
        code, interrupted = 1, True
    except Exception as error:  # noqa: BLE001 every failure ends as a report and one line
        reason, defect = outcome.reason_of(error, _as_run_error)
        details = None
        if defect:
            details = "error.txt"
            (folder / details).write_text("".join(traceback.format_exception(error)))
        recorder(outcome.RUN_FAILED, reason=reason, details=details)
        print(f"error: {reason}", file=sys.stderr)
        code = 2
    finally:
        recorder.close()
        kube.close()
    report = outcome.analyse_run(module.analyse, recorder.events)
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


def _recorded(folder: Path) -> tuple[list[dict], dict]:
    """A run folder's events and its run.started event, or one line saying why it is not one."""
    try:
        events = record.read_events(folder)
    except FileNotFoundError:
        raise RunError(f"{folder} holds no {record.EVENTS}: is it a rehearsal run folder?") from None
    except ValueError as error:
        raise RunError(f"{folder / record.EVENTS} is not JSON lines: {error}") from None
    started = record.first(events, record.RUN_STARTED)
    if started is None or started.get("command") not in COMMANDS:
        raise RunError(f"{folder / record.EVENTS} does not say which command it recorded")
    return events, started


def _replay_target(folder: Path, out: Optional[Path], started: dict) -> Path:
    if out is None:
        return folder
    stack = started.get("stack")
    if not isinstance(stack, str) or not stack or not all(c.isalnum() or c in "-_." for c in stack) \
            or stack.strip(".") == "":
        raise RunError(f"{folder / record.EVENTS}: its run.started event names no usable stack "
                       f"({stack!r}): the run folder under --out is named after it")
    try:
        moment = record.parse_time(str(started.get("at")))
    except ValueError:
        raise RunError(f"{folder / record.EVENTS}: its run.started event has no time ({started.get('at')!r}): "
                       "the run folder under --out is named after it") from None
    return record.folder_for(out, stack, started["command"], moment)


def replay_folder(folder: Path, out: Optional[Path]) -> Path:
    """Where ``rehearse report FOLDER [--out DIR]`` writes: FOLDER itself, or the run folder a
    live run of the same start, stack and command would have made in the rehearsals folder DIR
    (record.folder_for), so ``rehearse summary --out DIR`` reads it. The same recording
    replayed twice into DIR lands in the same folder."""
    return _replay_target(folder, out, _recorded(folder)[1])


def run_report(folder: Path, out: Optional[Path] = None) -> int:
    """Analyse ``folder`` again; with ``out`` (a rehearsals folder) the report goes to a run
    folder of its own there (replay_folder), with the events beside it, so a recorded run (a
    test fixture, a colleague's folder) is read and never written."""
    events, started = _recorded(folder)
    target = _replay_target(folder, out, started)
    report = outcome.analyse_run(_module(started["command"]).analyse, events)
    target.mkdir(parents=True, exist_ok=True)
    if target.resolve() != folder.resolve():
        # A run folder as a live run leaves it: it can be replayed again from there.
        shutil.copyfile(folder / record.EVENTS, target / record.EVENTS)
    report.write(target)
    print(report.summary())
    if target != folder:
        print(f"replayed into {target}")
    print(f"report: {target / 'report.html'} (and report.md)")
    if outcome.ending(events) is not None:
        return 1 if outcome.ending(events)["kind"] == outcome.RUN_INTERRUPTED else 2
    return 0 if report.passed else 1


def run_summary(out: Path, stack: Optional[str], now: Optional[Any] = None) -> int:
    from rehearse.pages import summary
    from rehearse.pages import summary_page

    if not out.is_dir():
        # Not made here: a mistyped --out would leave an empty summary in a new folder.
        raise RunError(f"--out {out}: the rehearsals folder does not exist: name the folder the "
                       "runs were written to (default ./rehearsals)")
    if stack is not None:
        stacks = summary.stacks_of(out)
        if stacks and stack not in stacks:
            raise RunError(f"--stack {stack}: {out} holds no run of that stack; its runs are of "
                           f"{', '.join(sorted(stacks))}")
    stack = stack or summary.only_stack(out)
    html_path, md_path = summary_page.write(out, stack, now or record.utc_now())
    print(f"summary: {html_path} and {md_path}")
    return 0


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "report":
            if not args.folder.is_dir():
                what = "is a file, not a run folder" if args.folder.exists() else "does not exist"
                raise RunError(f"the run folder {args.folder} {what}: name a folder under "
                               "rehearsals/ (`ls rehearsals`) or a recorded one")
            return run_report(args.folder, args.out)
        if args.command == "summary":
            return run_summary(args.out, args.stack)
        if args.command == "all":
            return importlib.import_module("rehearse.pages.all").main(
                args, runner=execute, read_outputs=_outputs, parse=build_parser().parse_args,
                as_run_error=_as_run_error, check_inputs=check_inputs,
                reach=lambda options, stack_outputs: _connect(options, stack_outputs).close())
        if args.command == "predict":
            # The CLI's own readers, looked up here when it runs (tests replace ``_connect``).
            return importlib.import_module("rehearse.commands.predict.command").main(args, _outputs, _connect)
        command = f"verify {args.target}" if args.command == "verify" else args.command
        return run_command(command, args)
    except KeyboardInterrupt:
        # Before a run folder exists (reading the stack, connecting): nothing was done.
        print("interrupted before anything was recorded", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 sorted into "could not run" or a real bug
        run_error = _as_run_error(error)
        if run_error is None:
            raise
        print(f"error: {run_error}", file=sys.stderr)
        return 2
