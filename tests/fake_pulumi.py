"""A stand-in for the `pulumi` CLI, for the Automation API (which shells out to it).

It answers the calls the rehearsal's Automation API use makes — version, stack select, stack ls,
stack output, config get/set/rm, up and stack history (which ``up`` reads after the update) —
from a JSON state file (``FAKE_PULUMI_STATE``: ``{"selected": name, "stacks": {name: {"outputs":
{...}, "secrets": [keys], "config": {key: value}}}}``), records every call in ``FAKE_PULUMI_LOG``,
and refuses anything else with exit 255 and the call in stderr, so a new call cannot slip by.

``up`` plays the lab's program for what the rehearsal changes: the ``demo2`` output's scenario
and ``karpenterPodDeletionCostManagement`` follow ``eks-hybrid-lab:burstScenario`` (default A).
A state key ``"up_fails": n`` makes the next n updates fail, as a refused update would.

Before ``up`` or ``preview`` runs anything it checks the stack's config the way the real CLI
does (``stacks/pulumi_cli.py``, ported from pulumi/pulumi ``mergeConfig``): the project is the
``Pulumi.yaml`` of the working directory the Automation API runs it in, the stack's config is
its ``Pulumi.<stack>.yaml`` there (if any) with the state's ``config`` set over it (what
``config set`` would have written), and a refused config ends the command with the CLI's
message and exit 255 — so a rehearsal test fails where the real CLI would refuse the stack.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from stacks import pulumi_cli  # noqa: E402

SCENARIO_KEY = "eks-hybrid-lab:burstScenario"


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
    if args[:2] == ["config", "get"] and "--json" in args:
        name, key = option("--stack") or state.get("selected"), args[2]
        config = state["stacks"][name].setdefault("config", {})
        if key not in config:
            print(f"error: configuration key '{key}' not found for stack '{name}'", file=sys.stderr)
            return 255
        print(json.dumps({"value": config[key], "secret": False}))
        return 0
    if args[:2] == ["config", "set"] and "--" in args:
        name, key = option("--stack") or state.get("selected"), args[2]
        state["stacks"][name].setdefault("config", {})[key] = args[args.index("--") + 1]
        open(state_path, "w").write(json.dumps(state))
        return 0
    if args[:2] == ["config", "rm"]:
        name, key = option("--stack") or state.get("selected"), args[2]
        state["stacks"][name].setdefault("config", {}).pop(key, None)
        open(state_path, "w").write(json.dumps(state))
        return 0
    if args[:1] in (["up"], ["preview"]):
        name = option("--stack") or state.get("selected")
        refusal = _config_refusal(name, state["stacks"][name].get("config", {}))
        if refusal:
            print(f"error: {refusal}", file=sys.stderr)
            return 255
    if args[:1] == ["up"] and "--yes" in args:
        name = option("--stack") or state.get("selected")
        stack = state["stacks"][name]
        print(f"Updating ({name})")
        if state.get("up_fails"):
            state["up_fails"] -= 1
            open(state_path, "w").write(json.dumps(state))
            print("error: update failed", file=sys.stderr)
            return 255
        scenario = stack.setdefault("config", {}).get(SCENARIO_KEY, "A")
        outputs = stack.setdefault("outputs", {})
        if isinstance(outputs.get("demo2"), dict):
            outputs["demo2"] = {**outputs["demo2"], "scenario": scenario}
        outputs["karpenterPodDeletionCostManagement"] = scenario == "C"
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        stack.setdefault("history", []).insert(0, {
            "kind": "update", "startTime": stamp, "endTime": stamp, "message": "",
            "environment": {}, "result": "succeeded", "version": len(stack["history"]) + 1,
            "config": {k: {"value": v, "secret": False} for k, v in stack["config"].items()},
            "resourceChanges": {"same": 1}})
        open(state_path, "w").write(json.dumps(state))
        print(f"Resources: 1 unchanged ({SCENARIO_KEY}={scenario})")
        return 0
    if args[:2] == ["stack", "history"] and "--json" in args:
        name = option("--stack") or state.get("selected")
        print(json.dumps(state["stacks"][name].get("history", [])[:1]))
        return 0
    print(f"fake pulumi: unexpected call {argv}", file=sys.stderr)
    return 255


def _config_refusal(stack: str, state_config: dict) -> str | None:
    """The CLI's config check before the program runs; None when the stack passes."""
    cwd = pathlib.Path.cwd()
    if not (cwd / "Pulumi.yaml").exists():
        return f"no Pulumi.yaml project file found (searching upwards from {cwd})"
    try:
        stack_file = cwd / f"Pulumi.{stack}.yaml"
        project = pulumi_cli.load_project(cwd)
        values = pulumi_cli.load_stack_file(stack_file, project.get("name", "")) if stack_file.exists() else {}
        for key, raw in state_config.items():
            # `pulumi config set KEY VALUE` stores text; a list or map came from --path sets.
            values[key] = pulumi_cli.StackValue(raw) if isinstance(raw, str) else pulumi_cli.stack_value(raw)
        pulumi_cli.merge_config(stack, project, values)
    except pulumi_cli.CliConfigError as refused:
        return str(refused)
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def install(tmp_path, monkeypatch, state: dict):
    """Puts this fake first on PATH for the test, answering from ``state``; returns (state
    file, call log) — the log holds one JSON argument list a line."""
    import pathlib

    bin_dir = pathlib.Path(tmp_path) / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "pulumi"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{pathlib.Path(__file__).resolve()}" "$@"\n')
    exe.chmod(0o755)
    state_file, log = pathlib.Path(tmp_path) / "state.json", pathlib.Path(tmp_path) / "calls.log"
    state_file.write_text(json.dumps(state))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PULUMI_STATE", str(state_file))
    monkeypatch.setenv("FAKE_PULUMI_LOG", str(log))
    monkeypatch.setenv("PULUMI_HOME", str(pathlib.Path(tmp_path) / "pulumi-home"))
    return state_file, log
