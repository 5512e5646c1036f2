"""The differential harness between tests/replacement.py's port of Pulumi's step generator (and
tests/graph.py's delete order) and the real engine: graph specs of the shapes the lab has, the
port's steps for a change as the engine's ops, and the comparisons.

Both sides run tests/replacement_program.py's one program with the same spec: offline (mocks,
``run_program``) for the port, under the real engine for the truth. Resources are compared by
name (the URNs differ only in project and stack).

The engine's ops (pkg/resource/deploy/step.go): ``create``, ``update``, ``delete`` (a resource the
program no longer registers), and for a replacement ``create-replacement`` (the new copy),
``replace`` (a logical step, no provider call) and ``delete-replaced`` (the old copy: at the end
for create-before-delete, first for delete-before-replace and for its dependents).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from offline.runner import ProgramRun, run_program
from tests.graph import DestroyGraph
from tests.replacement import (DEPENDENT_DELETE, DEPENDENT_RECREATE, FreshIdsCloud, State, Step,
                               plan, steps)
from tests.replacement_program import PROGRAM

#: The engine's ops a comparison looks at: ``same`` does nothing, ``replace`` is logical.
COMPARED_OPS = ("create", "update", "delete", "create-replacement", "delete-replaced")


def ref(name: str, out: str = "id") -> dict:
    return {"ref": name, "out": out}


def join(*parts: Any) -> dict:
    return {"join": list(parts)}


def host_group(p: str, *, script: str = "v1", generation: int = 1, instance_type: str = "m5.large",
               ami: str = "ami-1") -> list[dict]:
    """One hybrid host as the lab lays it out (components/hybrid_hosts.py; the options and
    edges as the offline run of the lab records them): the activation (every input ForceNew),
    its registrations cleanup, the host's token (a new generation, a new token), the host
    (user data from the activation and the token, ForceNew under userDataReplaceOnChange,
    deleteBeforeReplace, ami ignored, waiting for the registrations cleanup), its Node cleanup
    (instanceId, token and activationId replace it), its stale-node sweep (never replaced) and
    Cilium, which depends on the host by dependsOn alone."""
    return [
        {"name": f"{p}-act", "props": {"generation": str(generation)},
         "replace_keys": ["generation"]},
        {"name": f"{p}-ssm", "props": {"activationId": ref(f"{p}-act")},
         "replace_keys": ["activationId"]},
        {"name": f"{p}-tok", "props": {"generation": join(ref(f"{p}-act"), "/subnet-1")},
         "replace_keys": ["generation"]},
        {"name": f"{p}-host", "props": {
            "userData": join(f"script {script} activation=", ref(f"{p}-act"), " token=",
                             ref(f"{p}-tok", "serial")),
            "userDataReplaceOnChange": True, "ami": ami, "instanceType": instance_type},
         "replace_keys": ["ami"], "replace_if": {"userData": "userDataReplaceOnChange"},
         "delete_before_replace": True, "ignore_changes": ["ami"], "depends_on": [f"{p}-ssm"]},
        {"name": f"{p}-node", "props": {"instanceId": ref(f"{p}-host"),
                                        "token": ref(f"{p}-tok", "serial"),
                                        "activationId": ref(f"{p}-act"), "endpoint": "https://k"},
         "replace_keys": ["instanceId", "token", "activationId"]},
        {"name": f"{p}-sweep", "props": {"instanceId": ref(f"{p}-host"),
                                         "activationId": ref(f"{p}-act")}},
        {"name": f"{p}-cilium", "props": {"chart": "cilium"}, "depends_on": [f"{p}-host"]},
    ]


def chain(p: str, k: str) -> list[dict]:
    """A delete-before-replace root whose replacement cascades through dependents whose
    inputs force replacement (one delete-before-replace itself), stops at one that only
    updates, and skips one joined by dependsOn alone."""
    return [
        {"name": f"{p}-a", "props": {"k": k}, "replace_keys": ["k"], "delete_before_replace": True},
        {"name": f"{p}-b", "props": {"x": ref(f"{p}-a", "serial")}, "replace_keys": ["x"]},
        {"name": f"{p}-c", "props": {"y": ref(f"{p}-b", "serial")}, "replace_keys": ["y"],
         "delete_before_replace": True},
        {"name": f"{p}-d", "props": {"z": ref(f"{p}-c", "serial")}},
        {"name": f"{p}-e", "props": {"w": "plain"}, "depends_on": [f"{p}-a"]},
    ]


def phase_spec(phase: int) -> list[dict]:
    """The whole program of a phase: disjoint subgraphs, one engine run for all of them."""
    second = phase >= 2
    spec = [
        # The join script edited: the host replaced delete-first with its Node cleanup.
        *host_group("h1", script="v2" if second else "v1"),
        # A new activation generation: the activation, its cleanup and the token replaced
        # create-first, the host delete-first, its cleanup as its dependent.
        *host_group("h2", generation=2 if second else 1),
        # Another instance type and a new image (ignored): an update in place.
        *host_group("h3", instance_type="m5.xlarge" if second else "m5.large",
                    ami="ami-2" if second else "ami-1"),
        # Unchanged (phase 3 replaces its host by --replace).
        *host_group("h4"),
        *chain("c", "k2" if second else "k1"),
        # The provider's diff asks for delete-before-replace (no option).
        {"name": "p-1", "props": {"k": "2" if second else "1"}, "replace_keys": ["k"],
         "provider_dbr": True},
        {"name": "p-2", "props": {"x": ref("p-1")}, "replace_keys": ["x"]},
        # replaceOnChanges on a provider with a diff of its own, and on one without.
        {"name": "r-1", "props": {"k": "2" if second else "1"}, "replace_on_changes": ["k"]},
        {"name": "r-2", "props": {"k": "2" if second else "1"}, "replace_on_changes": ["k"],
         "unknown_diff": True},
        # An input the provider's diff does not look at, changed: no changes, no step.
        {"name": "q-1", "props": {"note": "2" if second else "1"}, "quiet_keys": ["note"]},
        # deletedWith a resource replaced delete-first, and one replaced create-first.
        {"name": "w-v1", "props": {"k": "2" if second else "1"}, "replace_keys": ["k"],
         "delete_before_replace": True},
        {"name": "w-1", "props": {"note": "n"}, "deleted_with": "w-v1"},
        {"name": "w-v2", "props": {"k": "2" if second else "1"}, "replace_keys": ["k"]},
        {"name": "w-2", "props": {"note": "n"}, "deleted_with": "w-v2"},
        # A replaced resource's output that stays the same (its label) in a replacing input of
        # a dependent: replaced create-first, and delete-first.
        {"name": "s-1", "props": {"k": "2" if second else "1"}, "replace_keys": ["k"]},
        {"name": "s-2", "props": {"x": ref("s-1", "label")}, "replace_keys": ["x"]},
        {"name": "sd-1", "props": {"k": "2" if second else "1"}, "replace_keys": ["k"],
         "delete_before_replace": True},
        {"name": "sd-2", "props": {"x": ref("sd-1", "label")}, "replace_keys": ["x"]},
    ]
    if not second:
        # Removed in phase 2: the whole host group (deletes, dependents first), and a resource
        # retained on delete.
        spec += host_group("h5")
        spec += [{"name": "t-1", "props": {"k": "1"}, "retain_on_delete": True}]
    return spec


def config_of(spec: list[dict]) -> dict[str, str]:
    return {"diff:spec": json.dumps(spec)}


def offline_run(spec: list[dict], folder: Path) -> ProgramRun:
    """The program under mocks (the port's input)."""
    program = folder / "replacement_program_main.py"
    if not program.exists():
        program.write_text(PROGRAM)
    return run_program(config_of(spec), program=program)


#: The port's step (op, why) as the engine's op.
_ENGINE_OP = {
    ("create", "new"): "create",
    ("create", "replace (create first)"): "create-replacement",
    ("create", "replace (delete first)"): "create-replacement",
    ("create", DEPENDENT_RECREATE): "create-replacement",
    ("delete", "replace (delete first)"): "delete-replaced",
    ("delete", DEPENDENT_DELETE): "delete-replaced",
    ("delete", "pending delete"): "delete-replaced",
    ("delete", "removed"): "delete",
    ("update", "changed"): "update",
}


def name_of(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


@dataclass(frozen=True)
class Op:
    name: str
    op: str
    #: The n-th step of this op on this resource (0 for the first).
    nth: int = 0


def port_ops(port_steps: list[Step]) -> list[Op]:
    """The port's steps as the engine's ops, in the port's order."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for step in port_steps:
        op = _ENGINE_OP[(step.op, step.why)]
        key = (name_of(step.urn), op)
        out.append(Op(key[0], op, seen.get(key, 0)))
        seen[key] = seen.get(key, 0) + 1
    return out


def fresh_run(spec: list[dict], folder: Path, replaced: set[str], epoch: int = 1) -> ProgramRun:
    """The program against a cloud that gives the ``replaced`` URNs new ids and serials, as
    their re-creation does (tests/replacement.py ``FreshIdsCloud``)."""
    offline_run(spec, folder)  # writes the program file
    return run_program(config_of(spec), program=folder / "replacement_program_main.py",
                       cloud=FreshIdsCloud(replaced, epoch=epoch, region="us-east-1"))


def port_update(old: ProgramRun, new: ProgramRun, spec: list[dict], folder: Path,
                replace: Iterable[str] = ()) -> list[Op]:
    """The port's steps for ``pulumi up`` of ``new`` from ``old``: the replaced resources'
    new outputs from a fresh-ids run, taken to a fixed point (a preview's unknowns replace at
    least what an up replaces; the up's set is where the two runs agree)."""
    urns = frozenset(r.urn for r in new.resources() if r.name in set(replace))
    replaced = set(plan(State.of(old), new, urns).replaced)
    for _ in range(4):
        fresh = fresh_run(spec, folder, replaced)
        again = set(plan(State.of(old), new, urns, fresh=fresh).replaced)
        if again == replaced:
            return port_ops(steps(State.of(old), new, fresh, replace=urns))
        replaced = again
    raise AssertionError(f"the port's replaced set does not settle: {sorted(replaced)}")


def engine_ops(run: Any, prefix: str = "pulumi-python:dynamic") -> dict[Op, Any]:
    """The engine's steps of the compared ops on dynamic resources, by Op (started order)."""
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for step in run.steps():
        if step.op not in COMPARED_OPS or not step.type.startswith(prefix):
            continue
        key = (step.name, step.op)
        out[Op(key[0], step.op, seen.get(key, 0))] = step
        seen[key] = seen.get(key, 0) + 1
    return out


def by_resource(ops: Iterable[Op]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for op in ops:
        found.setdefault(op.name, []).append(op.op)
    return {k: sorted(v) for k, v in sorted(found.items())}


def connected(runs: Iterable[ProgramRun]) -> set[tuple[str, str]]:
    """Pairs of names (a, b) such that a depends on b, directly or not, in any of ``runs``."""
    pairs: set[tuple[str, str]] = set()
    for run in runs:
        graph = DestroyGraph(run)
        names = {r.urn: r.name for r in run.resources()}
        for a in names:
            for b in names:
                if a != b and graph.path(a, b):
                    pairs.add((names[a], names[b]))
    return pairs


def order_violations(port: list[Op], engine: dict[Op, Any],
                     pairs: set[tuple[str, str]]) -> list[str]:
    """Each pair of the port's steps, on one resource or on two joined by a dependency, that
    the engine ran the other way round: the later step started before the earlier ended."""
    out = []
    for i, first in enumerate(port):
        for then in port[i + 1:]:
            if first.name != then.name and (first.name, then.name) not in pairs \
                    and (then.name, first.name) not in pairs:
                continue
            a, b = engine.get(first), engine.get(then)
            if a is None or b is None or a.finished is None:
                continue
            if b.started < a.finished:
                out.append(f"port: {first.op} {first.name} before {then.op} {then.name}; engine "
                           f"started {then.op} {then.name} (#{b.started}) before {first.op} "
                           f"{first.name} ended (#{a.finished})")
    return out


def destroy_violations(run: ProgramRun, engine_run: Any) -> tuple[list[str], int]:
    """The pairs tests/graph.py says are deleted in order (a depends on b: a first) that the
    engine's destroy ran otherwise, and how many pairs were checked."""
    deletes = {s.name: s for s in engine_run.steps() if s.op == "delete"}
    graph = DestroyGraph(run)
    out, checked = [], 0
    regs = run.resources()
    for a in regs:
        for b in regs:
            if a is b or not graph.path(a.urn, b.urn):
                continue
            da: Optional[Any] = deletes.get(a.name)
            db: Optional[Any] = deletes.get(b.name)
            if da is None or db is None:
                out.append(f"{a.name} -> {b.name}: engine deleted "
                           f"{[n for n, d in ((a.name, da), (b.name, db)) if d]} only")
                continue
            checked += 1
            if db.started < da.finished:
                out.append(f"{a.name} depends on {b.name} but the engine started deleting "
                           f"{b.name} (#{db.started}) before {a.name}'s delete ended "
                           f"(#{da.finished})")
    return out, checked
