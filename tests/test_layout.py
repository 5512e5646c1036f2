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
