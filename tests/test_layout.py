"""The repository's shape, checked from the source: no import circles, and imports only point
down — ``stacks/`` (what `pulumi up` runs) knows nothing of the offline tooling, the AWS tools,
the rehearsal or the tests, and ``components/`` knows nothing of the lab above it.

Every module is parsed (not imported), and every import counts, including those inside
functions: a function-level import still runs, and a circle through one still means the two
modules cannot be understood (or loaded) apart.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path
from typing import Iterable, Mapping

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The project's top-level packages and modules; everything else is a dependency.
SKIP_DIRS = {".git", ".ci", "venv", ".venv", "node_modules", "__pycache__", "docs"}
MAX_LINES = 800


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the project."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS or part.startswith(".") for part in rel.parts[:-1]):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts:
            continue
        found[".".join(parts)] = path
    return found


def _is_package(name: str, modules: Mapping[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


#: The nodes that can hold a statement; an expression cannot (a lambda's body is one too).
_STATEMENT_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case, ast.mod)


def _nodes_to_read(tree: ast.AST, with_expressions: bool) -> Iterable[ast.AST]:
    """Every node (``ast.walk``) when the source may call ``import_module``; else only the
    statements and what holds them, where every ``import`` is: a third of the nodes, and
    walking the expressions as well was most of the parse's cost (the same imports found)."""
    if with_expressions:
        yield from ast.walk(tree)
        return
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo += [child for child in ast.iter_child_nodes(node)
                 if isinstance(child, _STATEMENT_HOLDERS)]


def imports_of(name: str, source: str, modules: Mapping[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its source (top level, functions,
    classes, conditional blocks). ``from pkg import sub`` counts as importing ``pkg.sub`` when
    that is a module, else ``pkg``; ``import a.b`` counts as importing ``a.b``."""
    tree = ast.parse(source, filename=name)
    package = name if _is_package(name, modules) else name.rpartition(".")[0]
    targets: set[str] = set()

    def nearest(dotted: str) -> Iterable[str]:
        # The longest prefix that is a project module.
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in modules:
                yield candidate
                return

    for node in _nodes_to_read(tree, "import_module" in source):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.update(nearest(alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}" if module else alias.name
                if sub in modules:
                    targets.add(sub)
                else:
                    targets.update(nearest(module))
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ast.unparse(node.func) in ("importlib.import_module", "import_module")):
            # importlib.import_module("pkg.mod"): an import all the same.
            targets.update(nearest(node.args[0].value))
    targets.discard(name)
    return targets


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = project_modules(root)
    # Speed only: the syntax trees of 2 MB of source are a million young objects, none in a
    # cycle (a node holds its children, never its parent); the cyclic collector's passes
    # over them were a third of the graph's CPU, and would free nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return {name: imports_of(name, path.read_text(encoding="utf-8"), modules)
                for name, path in modules.items()}
    finally:
        if collecting:
            gc.enable()


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        # Iterative, so a deep graph cannot hit the recursion limit.
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def forbidden_imports(graph: Mapping[str, set[str]], owner: str,
                      banned: Iterable[str]) -> list[str]:
    banned = set(banned)
    return sorted(f"{m} imports {t}" for m, targets in graph.items() if _top(m) == owner
                  for t in targets if _top(t) in banned)


#: What each layer of the repository may not import: imports only point down.
RULES = {
    # What `pulumi up` runs: config, layers, exports. Not the offline models, the AWS tools,
    # the rehearsal or the tests.
    "stacks": ("offline", "ops", "rehearse", "tests"),
    # Reusable components know nothing of the lab that uses them.
    "components": ("stacks", "offline", "ops", "rehearse", "tests"),
}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_graph_sees_every_kind_of_import():
    # The parser counts what Python runs: top-level, function-level, relative, and
    # `from package import module`.
    modules = {"a": Path("a/__init__.py"), "a.b": Path("a/b.py"), "a.c": Path("a/c.py"),
               "d": Path("d.py")}
    source = ("import d\n"
              "from . import c\n"
              "def f():\n"
              "    from a.c import thing\n"
              "    import os\n")
    assert imports_of("a.b", source, modules) == {"d", "a.c"}
    assert imports_of("d", "import importlib\nimportlib.import_module('a.b')\n", modules) == {"a.b"}
    assert imports_of("a", "from a import b\nfrom .c import x\n", modules) == {"a.b", "a.c"}


def test_no_import_circles(graph):
    assert circles(graph) == [], "modules that import each other, directly or round a circle"


@pytest.mark.parametrize("owner", sorted(RULES))
def test_imports_point_down(graph, owner):
    assert forbidden_imports(graph, owner, RULES[owner]) == []


def _planted(graph: Mapping[str, set[str]], module: str, code: str) -> dict[str, set[str]]:
    """The import graph with ``code`` appended to ``module``'s source."""
    modules = project_modules()
    source = modules[module].read_text(encoding="utf-8") + "\n\n" + code
    return {**{k: set(v) for k, v in graph.items()},
            module: imports_of(module, source, modules)}


def _other_circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    return circles(graph)


def test_planted_imports_fail(graph):
    """Each rule above is able to fail: plant, in the parsed source, a circle through a
    function-level import, an upward import from stacks/ and one from components/."""
    assert _other_circles(graph) == []
    circle = _planted(graph, "stacks.config",
                      "def _planted():\n    from stacks.layers import build_lab\n")
    assert any({"stacks.config", "stacks.layers"} <= set(c) for c in _other_circles(circle))
    # The circle the layout broke: config -> capacity -> costs -> config.
    old = _planted(graph, "components.capacity", "from stacks.costs import vcpus\n")
    assert any({"components.capacity", "stacks.config", "stacks.costs"} <= set(c)
               for c in _other_circles(old))
    upward = _planted(graph, "stacks.exports", "if False:\n    import offline.plan\n")
    assert forbidden_imports(upward, "stacks", RULES["stacks"]) == [
        "stacks.exports imports offline.plan"]
    upward = _planted(graph, "components.vpc", "def f():\n    from stacks import config\n")
    assert forbidden_imports(upward, "components", RULES["components"]) == [
        "components.vpc imports stacks.config"]


def _over_limit() -> dict[str, int]:
    over = {}
    for name, path in project_modules().items():
        if _top(name) == "tests":
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            over[name] = lines
    return over


def test_no_module_over_800_lines():
    assert _over_limit() == {}


# --- rehearse/ in rooms -----------------------------------------------------------------------
# rehearse/run/ is the frame every run shares, rehearse/lab/ the only code that talks to
# Kubernetes, EC2 and Pulumi, rehearse/models/ pure, rehearse/commands/<command>/ one folder per
# command, rehearse/pages/ what reads many run folders and never a cluster (rehearse.run.command).

#: What a command's folder may import of rehearse/ besides itself. rehearse.charts is not in it:
#: an analysis describes its charts as data (rehearse.run.report.Chart) and rehearse.run.report
#: has them drawn.
COMMAND_MAY_IMPORT = ("rehearse.run", "rehearse.lab", "rehearse.models")
#: The libraries that reach outside the process: rehearse/models/ imports none of them.
IO_LIBRARIES = ("lightkube", "boto3", "botocore", "subprocess", "pulumi", "pulumi_aws", "httpx",
                "socket", "requests", "urllib", "http")
MAX_REHEARSE_LINES = 500
MAX_FUNCTION_LINES = 80
#: (module, function) allowed over MAX_FUNCTION_LINES, each with why; empty: none needs it.
LONG_FUNCTIONS: dict[tuple[str, str], str] = {}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _command_of(name: str) -> str | None:
    """``rehearse.commands.<c>`` for a module in a command's folder, else None."""
    parts = name.split(".")
    return ".".join(parts[:3]) if len(parts) >= 3 and parts[:2] == ["rehearse", "commands"] else None


def _room_rule(module: str, target: str) -> str | None:
    """Why ``module`` may not import ``target`` (both of rehearse/), or None when it may."""
    command = _command_of(module)
    if command is not None:
        if _within(target, command) or any(_within(target, p) for p in COMMAND_MAY_IMPORT):
            return None
        return "a command imports only rehearse.run, rehearse.lab, rehearse.models and its own folder"
    if _within(module, "rehearse.pages") and (_within(target, "rehearse.lab")
                                              or _within(target, "rehearse.commands")):
        return "rehearse.pages reads run folders, never a cluster nor a command"
    if (_within(module, "rehearse.lab") or _within(module, "rehearse.models")) and \
            (_within(target, "rehearse.commands") or _within(target, "rehearse.pages")):
        return "rehearse.lab and rehearse.models serve the commands, never the other way"
    if _within(module, "rehearse.models") and _within(target, "rehearse.lab"):
        return "rehearse.models is pure: no I/O"
    return None


def room_violations(graph: Mapping[str, set[str]]) -> list[str]:
    return sorted(f"{m} imports {t}: {why}" for m, targets in graph.items()
                  if _within(m, "rehearse") for t in targets if _within(t, "rehearse")
                  for why in [_room_rule(m, t)] if why)


def io_imports(name: str, source: str) -> list[str]:
    """The I/O libraries ``name`` imports anywhere in its source (absolute imports)."""
    found = set()
    for node in ast.walk(ast.parse(source, filename=name)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else []
        found.update(f"{name} imports {n}" for n in names if n.split(".")[0] in IO_LIBRARIES)
    return sorted(found)


def _rehearse_sources() -> dict[str, str]:
    return {name: path.read_text(encoding="utf-8") for name, path in project_modules().items()
            if _within(name, "rehearse")}


def long_functions(name: str, source: str) -> list[str]:
    """Functions of ``name`` over MAX_FUNCTION_LINES lines (a docstring counts), not excepted."""
    return sorted(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
                  for node in ast.walk(ast.parse(source, filename=name))
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
                  and (name, node.name) not in LONG_FUNCTIONS)


def test_each_room_imports_only_what_it_may(graph):
    assert room_violations(graph) == []


def test_models_do_no_io():
    assert [line for name, source in _rehearse_sources().items()
            if _within(name, "rehearse.models") for line in io_imports(name, source)] == []


def test_no_rehearse_module_over_500_lines():
    assert {name: len(source.splitlines()) for name, source in _rehearse_sources().items()
            if len(source.splitlines()) > MAX_REHEARSE_LINES} == {}


def test_no_rehearse_function_over_80_lines():
    assert [line for name, source in _rehearse_sources().items()
            for line in long_functions(name, source)] == []


def test_planted_cross_command_import_is_caught(graph):
    planted = _planted(graph, "rehearse.commands.verify_gpu.analyse",
                       "def f():\n    from rehearse.commands.failover import analyse\n")
    caught = "rehearse.commands.verify_gpu.analyse imports rehearse.commands.failover.analyse"
    assert not any(v.startswith(caught) for v in room_violations(graph))
    assert any(v.startswith(caught) for v in room_violations(planted))


def test_planted_lab_import_in_pages_is_caught(graph):
    planted = _planted(graph, "rehearse.pages.summary", "from rehearse.lab import connection\n")
    caught = "rehearse.pages.summary imports rehearse.lab.connection"
    assert not any(v.startswith(caught) for v in room_violations(graph))
    assert any(v.startswith(caught) for v in room_violations(planted))


def test_planted_io_in_models_and_long_function_are_caught():
    source = _rehearse_sources()["rehearse.models.scenarios"]
    assert io_imports("rehearse.models.scenarios", source) == []
    assert io_imports("rehearse.models.scenarios", source + "\ndef f():\n    import boto3\n") == [
        "rehearse.models.scenarios imports boto3"]
    long = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    assert long_functions("m", "def f():\n" + "    x = 1\n" * (MAX_FUNCTION_LINES - 1)) == []
    assert long_functions("m", long) == [f"m.f: {MAX_FUNCTION_LINES + 1} lines"]


# --- the registry of commands (rehearse.cli) --------------------------------------------------

def _members(protocol: type) -> tuple[set[str], set[str]]:
    """A Protocol's (data members, methods), as declared on it."""
    data = set(getattr(protocol, "__annotations__", {}))
    methods = {k for k, v in vars(protocol).items() if callable(v) and not k.startswith("_")}
    return data, methods


def _lacks(face, protocol: type) -> list[str]:
    from rehearse.run.command import OPTIONAL_MEMBERS

    data, methods = _members(protocol)
    return sorted([m for m in data - OPTIONAL_MEMBERS if not hasattr(face, m)] +
                  [m for m in methods if not callable(getattr(face, m, None))])


def test_every_registered_face_provides_its_kind():
    import importlib

    from rehearse import cli

    assert len(cli.REGISTRY) == len(cli.BY_NAME) == 12
    for entry in cli.REGISTRY:
        face = importlib.import_module(entry.module)
        assert (face.__doc__ or "").strip(), f"{entry.name}: its face {entry.module} has no docstring"
        assert isinstance(face.TITLE, str) and face.TITLE, entry.name
        assert _lacks(face, entry.kind) == [], f"{entry.name}: {entry.module} is no {entry.kind.__name__}"


def test_a_face_that_lacks_a_member_is_caught():
    import types

    from rehearse.run.command import FolderCommand, RunCommand

    face = types.SimpleNamespace(TITLE="t", add_arguments=print, check_inputs=print, collect=print)
    assert _lacks(face, RunCommand) == ["analyse"]
    assert _lacks(types.SimpleNamespace(TITLE="t", add_arguments=print, run=1), FolderCommand) == ["run"]


def test_every_command_folder_has_a_face_and_is_registered():
    from rehearse import cli

    folders = {p.name for p in (ROOT / "rehearse" / "commands").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    assert folders
    assert sorted(f for f in folders if not (ROOT / "rehearse" / "commands" / f / "command.py").exists()) == []
    registered = {_command_of(entry.module) for entry in cli.REGISTRY}
    assert sorted(f for f in folders if f"rehearse.commands.{f}" not in registered) == []


def test_all_runs_its_steps_in_the_registrys_order():
    from rehearse import cli
    from rehearse.pages import all as rehearsal
    from rehearse.run.command import RunCommand

    order = list(cli.REHEARSAL_ORDER)
    for phase in (rehearsal.READ_ONLY, rehearsal.CHANGING):
        assert all(cli.BY_NAME[c].kind is RunCommand for c in phase), phase
        assert list(phase) == sorted(phase, key=order.index), phase
