"""The page a presenter reads the evening before: the latest run of each command for one stack,
gathered from the run folders (``rehearsals/<time>-<stack>-<command>/report.json``) into
``<stack>-summary.html`` (self-contained, its charts inline) and ``<stack>-summary.md``.

For each part of the demo guide's runbook (docs/demo-guide.md#the-runbook) — the pre-check,
demo 1, demo 2, demo 3 — it says whether the latest runs passed (and, for a FAIL, the fix),
their numbers beside the demo guide's, how old each run is, and which commands were never run.
"Latest" is by the start time the run recorded, not by the folder's modification time: a
``rehearse report`` replay rewrites a report without making its run any newer. A run that was
interrupted or failed part-way is shown as such (its report's first check says so)."""

# The face of `rehearse summary` (a folder command, rehearse.run.command): its docstring is its
# --help description, as written. rehearse.pages.summary gathers the runs and
# rehearse.pages.summary_page renders and writes the pages.

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Mapping, Optional

from rehearse.pages import summary
from rehearse.pages import summary_page
from rehearse.run import record
from rehearse.run.command import RunCommand
from rehearse.run.errors import RunError

TITLE = "one page of the latest run of each command, for the evening before"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", metavar="NAME",
                        help="the stack whose runs to gather (default: the one stack the runs "
                             "in --out are of)")
    parser.add_argument("--out", type=Path, default=Path("rehearsals"), metavar="DIR",
                        help="the rehearsals folder, whose run folders <time>-<stack>-<command> "
                             "are read, and where <stack>-summary.html and <stack>-summary.md "
                             "are written (default: ./rehearsals)")


def run(args: argparse.Namespace, faces: Mapping[str, RunCommand]) -> int:
    """The summary page of ``args.out``; it reads the run folders' reports, so ``faces`` (the
    registry's run commands) is not needed."""
    return run_summary(args.out, args.stack)


def run_summary(out: Path, stack: Optional[str], now: Optional[Any] = None) -> int:
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
