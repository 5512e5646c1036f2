"""A stand-in for the `pulumi` CLI, for the Automation API (which shells out to it).

It answers the calls the rehearsal's Automation API use makes — version, stack select, stack ls,
stack output — from a JSON state file (``FAKE_PULUMI_STATE``: ``{"selected": name, "stacks":
{name: {"outputs": {...}, "secrets": [keys]}}}``), records every call in ``FAKE_PULUMI_LOG``,
and refuses anything else with exit 255 and the call in stderr, so a new call cannot slip by.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    state_path = os.environ["FAKE_PULUMI_STATE"]
    with open(os.environ["FAKE_PULUMI_LOG"], "a") as log:
        log.write(json.dumps(argv) + "\n")
    state = json.loads(open(state_path).read())
    args = [a for a in argv if a not in ("--non-interactive",)]

    def option(name: str):
        return args[args.index(name) + 1] if name in args else None

    if args[:1] == ["version"]:
        print("v3.210.0")
        return 0
    if args[:2] == ["stack", "select"]:
        name = option("--stack") or (args[2] if len(args) > 2 else None)
        if name not in state["stacks"]:
            print(f"error: no stack named '{name}' found", file=sys.stderr)
            return 255
        state["selected"] = name
        open(state_path, "w").write(json.dumps(state))
        return 0
    if args[:2] == ["stack", "ls"] and "--json" in args:
        print(json.dumps([{"name": name, "current": name == state.get("selected"),
                           "updateInProgress": False} for name in state["stacks"]]))
        return 0
    if args[:2] == ["stack", "output"] and "--json" in args:
        name = option("--stack") or state.get("selected")
        stack = state["stacks"][name]
        outputs = dict(stack["outputs"])
        if "--show-secrets" not in args:
            outputs = {k: ("[secret]" if k in stack.get("secrets", []) else v)
                       for k, v in outputs.items()}
        print(json.dumps(outputs))
        return 0
    print(f"fake pulumi: unexpected call {argv}", file=sys.stderr)
    return 255


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
