"""`python -m rehearse all`: the demo guide's runbook in one command (docs/demo-guide.md#the-runbook).

The read-only checks come first — the pre-check, demo 1's `verify gateway`, demo 2's `verify
burst`, demo 3's `verify gpu` when the stack has a GPU host (its outputs hold ``demo3`` only
with gpuEnabled) — so a lab that is not ready is found before anything in it changes. Then,
once confirmed (or with --yes), what changes the lab: `failover` (deletes the gateway leader's
pod) and `burst` (scales the burst Deployment; with --scenarios it switches burstScenario with
`pulumi up`, each switch previewed and asked as `burst` always does). It stops at the first
step that does not pass unless --keep-going, and always ends by writing the summary page
(as `rehearse summary` does) — after Ctrl-C too, which ends the rehearsal: every finished run keeps its
folder, the interrupted one its report of what was done.

Each step is the command's own run, into its own folder, with this
command's stack, outputs, kubeconfig and --out; the commands' other options keep their
defaults. Every step's input (the outputs it reads, its options) and the cluster are checked
before the first step starts: input a step cannot use stops the rehearsal there, in one line,
with nothing run and no summary."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Optional

from rehearse.pages import summary_page
from rehearse.models.scenarios import scenario_name
from rehearse.run.errors import RunError, first_line
from rehearse.run.outcome import CHECK_COMPLETED
from rehearse.run.record import utc_now
from rehearse.pages.summary import Step
from rehearse.run.terminal import ask

TITLE = "the whole rehearsal: the checks, then (confirmed) failover and burst, then the summary"

#: In the demo guide's order within each phase.
READ_ONLY = ("preflight", "verify gateway", "verify burst", "verify gpu")
CHANGING = ("failover", "burst")
GPU_STEP = "verify gpu"
#: What a changing step does to the lab, for the question before them.
WHAT_CHANGES = {
    "failover": "deletes the gateway leader's pod (its Deployment starts another)",
    "burst": "scales the burst Deployment 3 → 15 → 12 → 10 → 3, which adds and removes burst "
             "nodes (with --scenarios it also switches burstScenario with `pulumi up` and puts "
             "it back)",
}
PASS, FAIL, INTERRUPTED = "PASS", "FAIL", "INTERRUPTED"
COULD_NOT_RUN, SKIPPED, NOT_RUN = "COULD NOT RUN", "SKIPPED", "NOT RUN"
#: The options every step gets from `rehearse all`.
FORWARDED = (("stack", "--stack"), ("outputs", "--outputs"), ("work_dir", "--work-dir"),
             ("kubeconfig", "--kubeconfig"), ("out", "--out"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the rehearsal")
    group.add_argument("--yes", action="store_true",
                       help="run the steps that change the lab without asking, and apply each "
                            "previewed scenario switch (a run whose stdin is not a terminal "
                            "needs it, or --read-only)")
    group.add_argument("--read-only", action="store_true",
                       help="run only the read-only checks (no failover, no burst)")
    group.add_argument("--keep-going", action="store_true",
                       help="run every step even after one fails (Ctrl-C still stops)")
    # Checked here too, so a wrong value is said of `all`'s own option.
    group.add_argument("--scenarios", nargs="+", type=scenario_name, metavar="X",
                       help="passed to `burst --scenarios` (A, B, C): compare these scenarios "
                            "(default: the stack's current one, no switch)")


def _argv(command: str, args: argparse.Namespace) -> list[str]:
    argv = command.split()
    for key, flag in FORWARDED:
        if getattr(args, key, None) is not None:
            argv += [flag, str(getattr(args, key))]
    if command == "burst":
        if args.scenarios:
            argv += ["--scenarios", *args.scenarios]
        if args.yes:
            argv.append("--yes")
    return argv


def _interactive() -> bool:
    return bool(sys.stdin) and sys.stdin.isatty()


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(args: argparse.Namespace, *, runner: Callable[[str, argparse.Namespace], Any],
         read_outputs: Callable[[argparse.Namespace], Any],
         parse: Callable[[list[str]], argparse.Namespace],
         as_run_error: Callable[[BaseException], Optional[RunError]],
         check_inputs: Callable[[str, argparse.Namespace, Any], None] = lambda *_: None,
         reach: Callable[[argparse.Namespace, Any], None] = lambda *_: None,
         clock: Callable[[], Any] = utc_now,
         confirm: Callable[[str], Optional[bool]] = ask,
         interactive: Callable[[], bool] = _interactive) -> int:
    """Run the steps, write the summary; 0 when every step that ran passed, else 1.
    ``check_inputs(command, options, outputs)`` raises RunError for a step's input it cannot
    use, and ``reach(options, outputs)`` for a cluster it cannot reach, before the first step
    starts."""
    changing = () if args.read_only else CHANGING
    if changing and not args.yes and not interactive():
        raise RunError("rehearse all asks before the steps that change the lab (failover, "
                       "burst), and stdin is not a terminal: run it from a terminal, pass --yes "
                       "to run them without asking, or --read-only for the checks alone")
    outputs = read_outputs(args)
    steps: list[Step] = []
    skipped: dict[str, str] = {}
    if not outputs.optional("demo3"):
        skipped[GPU_STEP] = f"the stack {outputs.stack} has no GPU host (no output demo3)"
    plan = list(READ_ONLY + changing)
    # Every step's options parsed and its input checked before anything runs: a bad
    # --scenarios, or an output only the burst reads, stops here, not after the checks.
    parsed = {command: parse(_argv(command, args)) for command in plan}
    for command in plan:
        if command not in skipped:
            check_inputs(command, parsed[command], outputs)
    # The cluster too: one that cannot be reached (or refuses the credentials) stops the
    # rehearsal here, with nothing run and no summary of nothing.
    reach(parsed[plan[0]], outputs)
    stop: Optional[str] = None
    defect: Optional[BaseException] = None
    try:
        for index, command in enumerate(plan):
            if stop is not None:
                steps.append(Step(command, NOT_RUN, stop))
                continue
            if command in skipped:
                steps.append(Step(command, SKIPPED, skipped[command]))
                continue
            if changing and command == changing[0] and not args.yes:
                question = ("The checks are done. Next, what changes the lab: " +
                            "; ".join(f"{c} {WHAT_CHANGES[c]}" for c in changing) + ". Go on?")
                if not confirm(question):
                    for rest in plan[index:]:
                        steps.append(Step(rest, SKIPPED, "not confirmed: the lab was not changed"))
                        skipped[rest] = "not confirmed"
                    break
            _say(f"== rehearse all, step {index + 1} of {len(plan)}: {command} ==")
            step, defect = _run_step(command, parsed[command], runner, as_run_error)
            steps.append(step)
            if step.state == INTERRUPTED:
                stop = f"the rehearsal was interrupted during {command}"
            elif defect is not None:
                stop = f"{command} hit a defect in python -m rehearse"
            elif step.state != PASS and not args.keep_going:
                stop = f"stopped after {command} did not pass (--keep-going runs on)"
    except KeyboardInterrupt:
        # Between runs (the question, a step starting): what was done is kept.
        done = {s.command for s in steps}
        steps += [Step(c, NOT_RUN, "the rehearsal was interrupted") for c in plan if c not in done]
        _say("interrupted: writing the summary of what was done")
    for step in steps:
        print(f"{step.state:<13} {step.command}" + (f" — {step.detail}" if step.detail else ""))
    try:
        html_path, md_path = summary_page.write(args.out, outputs.stack, clock(), skipped=skipped,
                                                rehearsal=steps)
    except KeyboardInterrupt:
        _say("interrupted while writing the summary: every run's folder is kept; write it with "
             f"`python -m rehearse summary --stack {outputs.stack} --out {args.out}`")
        return 1
    print(f"summary: {html_path} and {md_path}")
    if defect is not None:
        raise defect
    return 0 if all(s.state in (PASS, SKIPPED) for s in steps) else 1


def _run_step(command: str, options: argparse.Namespace, runner: Callable,
              as_run_error: Callable) -> tuple[Step, Optional[BaseException]]:
    """One command's run as a Step (and the error when it is this tool's defect)."""
    try:
        result = runner(command, options)
    except KeyboardInterrupt:
        # Before its folder existed (the stack's outputs, the cluster): nothing was recorded.
        return Step(command, INTERRUPTED, "Ctrl-C before the run started: nothing recorded"), None
    except Exception as error:  # noqa: BLE001 sorted into "could not run" or a real defect
        run_error = as_run_error(error)
        if run_error is None:
            return Step(command, COULD_NOT_RUN, f"a defect: {first_line(error)}"), error
        _say(f"error: {run_error}")
        return Step(command, COULD_NOT_RUN, str(run_error)), None
    where = f"{result.folder.name}"
    if result.interrupted:
        return Step(command, INTERRUPTED, f"Ctrl-C; what was done is in {where}"), None
    if result.code == 0:
        return Step(command, PASS, where), None
    if result.code == 1:
        return Step(command, FAIL, f"a check failed: {where}"), None
    return Step(command, COULD_NOT_RUN, f"{_ending(result.folder)}: {where}"), None


def _ending(folder: Any) -> str:
    """The reason a run that failed part-way recorded (its report's first check)."""
    import json

    try:
        checks = json.loads((folder / "report.json").read_text()).get("checks") or []
        return next(str(c["seen"]) for c in checks if c.get("name") == CHECK_COMPLETED)
    except (OSError, ValueError, StopIteration, KeyError, AttributeError):
        return "the run failed part-way"
