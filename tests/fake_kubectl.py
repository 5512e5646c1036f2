"""A stand-in for ``kubectl get`` over a planted cluster state, for testing the one-liners the
stack exports (``tests/test_exports.py`` puts it on PATH as ``kubectl``).

It answers ``get nodes|pods`` with ``-n``, ``-l`` (``k=v``, ``k!=v``, ``k``, comma = and),
``--field-selector`` (``spec.nodeName`` and ``metadata.name`` with ``=``, ``==``, ``!=``, as the
API server supports for pods), ``-o name|wide`` and ``--no-headers``. Anything else is refused
(exit 2) rather than half-understood, so a command using a flag this fake does not know fails
its test instead of passing on a guess. Every invocation's arguments are appended, as a JSON
line, to ``$FAKE_KUBECTL_LOG``; the state is read from ``$FAKE_KUBECTL_STATE``:

    {"nodes": [{"name": ..., "labels": {...}}],
     "pods": [{"namespace": ..., "name": ..., "labels": {...}, "node": ... or null}]}
"""

from __future__ import annotations

import json
import os
import sys

RESOURCES = {"node": "nodes", "nodes": "nodes", "pod": "pods", "pods": "pods"}
FIELDS = {"nodes": {"metadata.name": "name"},
          "pods": {"metadata.name": "name", "spec.nodeName": "node"}}


class Refused(Exception):
    pass


def parse(argv: list[str]) -> dict:
    opts = {"namespace": "default", "labels": "", "fields": "", "output": "", "headers": True}
    positional = []
    flags = {"-n": "namespace", "--namespace": "namespace", "-l": "labels",
             "--selector": "labels", "--field-selector": "fields", "-o": "output",
             "--output": "output"}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--no-headers":
            opts["headers"] = False
        elif arg in flags:
            if not args:
                raise Refused(f"flag needs an argument: {arg}")
            opts[flags[arg]] = args.pop(0)
        elif "=" in arg and arg.split("=", 1)[0] in flags and arg.startswith("--"):
            key, value = arg.split("=", 1)
            opts[flags[key]] = value
        elif arg.startswith("-"):
            raise Refused(f"unsupported argument {arg}")
        else:
            positional.append(arg)
    if len(positional) != 2 or positional[0] != "get" or positional[1] not in RESOURCES:
        raise Refused(f"unsupported command {' '.join(positional)}")
    if opts["output"] not in ("", "name", "wide"):
        raise Refused(f"unsupported output {opts['output']}")
    opts["resource"] = RESOURCES[positional[1]]
    return opts


def _terms(selector: str) -> list[tuple[str, str, str]]:
    terms = []
    for term in filter(None, selector.split(",")):
        for op in ("!=", "==", "="):
            if op in term:
                key, value = term.split(op, 1)
                terms.append((key, "!=" if op == "!=" else "=", value))
                break
        else:
            terms.append((term, "exists", ""))
    return terms


def _holds(actual, op: str, value: str) -> bool:
    if op == "exists":
        return actual is not None
    equal = (actual or "") == value
    return equal if op == "=" else not equal


def select(opts: dict, state: dict) -> list[dict]:
    items = state.get(opts["resource"], [])
    if opts["resource"] == "pods":
        items = [p for p in items if p["namespace"] == opts["namespace"]]
    for key, op, value in _terms(opts["labels"]):
        items = [i for i in items if _holds((i.get("labels") or {}).get(key), op, value)]
    for key, op, value in _terms(opts["fields"]):
        field = FIELDS[opts["resource"]].get(key)
        if field is None or op == "exists":
            raise Refused(f'field label not supported: "{key}"')
        items = [i for i in items if _holds(i.get(field), op, value)]
    return items


def render(opts: dict, items: list[dict]) -> str:
    kind = opts["resource"][:-1]
    if opts["output"] == "name":
        return "".join(f"{kind}/{i['name']}\n" for i in items)
    lines = []
    if kind == "pod":
        if opts["headers"]:
            lines.append("NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE READINESS GATES")
        # RESTARTS as kubectl prints it after a restart: words that shift every later column.
        lines += [f"{i['name']} 1/1 Running 1 (5m ago) 10m 172.17.0.9 {i.get('node') or '<none>'} "
                  "<none> <none>" for i in items]
    else:
        if opts["headers"]:
            lines.append("NAME STATUS ROLES AGE VERSION")
        lines += [f"{i['name']} Ready <none> 1h v1.35.0" for i in items]
    return "".join(line + "\n" for line in lines)


def main(argv: list[str]) -> int:
    log = os.environ.get("FAKE_KUBECTL_LOG")
    if log:
        with open(log, "a") as out:
            out.write(json.dumps(argv) + "\n")
    try:
        opts = parse(argv)
        with open(os.environ["FAKE_KUBECTL_STATE"]) as source:
            items = select(opts, json.load(source))
    except Refused as refused:
        sys.stderr.write(f"fake kubectl: {refused}\n")
        return 2
    if not items:
        where = f" in {opts['namespace']} namespace" if opts["resource"] == "pods" else ""
        sys.stderr.write(f"No resources found{where}.\n")
        return 0
    sys.stdout.write(render(opts, items))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
