"""No import circle under the one root: the graph of every module of stagelens (agent/, probes/,
engine_hooks/, runbooks/) over its imports, those inside functions included, has no cycle. A
circle hidden behind a function-level import still ties its modules into one: none can be read,
tested or moved without the others.

Run as it runs (`if TYPE_CHECKING:` blocks left out: the type checker's alone), and as the type
checker reads it (those blocks in): the OTLP receiver and its transports were a circle of the
second kind, now broken by the intake protocol (agent/sources/otlp/intake.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.imports import ROOT, import_statements, module_name

FOLDERS = ("agent", "probes", "engine_hooks", "runbooks")


def import_graph(paths: list[Path], root: Path = ROOT,
                 type_checking: bool = False) -> dict[str, set[str]]:
    """Each module -> the modules of the graph it imports: `from a import b` imports the module a.b
    where there is one, else a (`from a.b import c` does not import the package a for this rule:
    a package's __init__ runs before any of its modules, whoever imports them)."""
    modules = {module_name(p, root): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for base, names in import_statements(path, root, type_checking):
            for taken in names or ("",):
                target = f"{base}.{taken}" if f"{base}.{taken}" in modules else base
                # `import a.b.c` of a name the graph holds only a prefix of: that prefix
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each circle (strongly connected component of more than one module), as the
    modules in import order, the first again at the end, from the circle's first module by name."""
    found = []
    for component in _components(graph):
        start = min(component)
        found.append(_path_back(graph, component, start))
    return sorted(found)


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of more than one module, iteratively (no recursion
    limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                on_stack.add(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in on_stack:
                low[node] = min(low[node], index[target])
    return found


def _path_back(graph: dict[str, set[str]], component: set[str], start: str) -> list[str]:
    """The shortest path of imports from `start` back to it, within its circle (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{start} is in a circle with no path back to it")


def said(graph: dict[str, set[str]]) -> str:
    """Each circle's shortest cycle from its first module, and the other modules of the circle."""
    lines = []
    for component in _components(graph):
        cycle = _path_back(graph, component, min(component))
        others = sorted(component - set(cycle))
        also = f" (its circle also holds {', '.join(others)})" if others else ""
        lines.append(" -> ".join(cycle) + also)
    return "import circles:\n" + "\n".join(sorted(lines))


def stagelens_paths() -> list[Path]:
    return [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]


def test_the_rule_names_a_circle_through_a_function_level_import(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import thing\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from . import c\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    (tmp_path / "pkg" / "d.py").write_text("from pkg import a\n")
    graph = import_graph(sorted(tmp_path.rglob("*.py")), tmp_path)
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    assert said(graph) == "import circles:\npkg.a -> pkg.b -> pkg.c -> pkg.a"


def test_the_rule_leaves_the_type_checkers_imports_out_unless_asked(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "receiver.py").write_text(
        "def start():\n    from pkg.transport import Intake\n")
    (tmp_path / "pkg" / "transport.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.receiver import Receiver\n")
    paths = sorted(tmp_path.rglob("*.py"))
    assert cycles(import_graph(paths, tmp_path)) == []
    assert cycles(import_graph(paths, tmp_path, type_checking=True)) == [
        ["pkg.receiver", "pkg.transport", "pkg.receiver"]]


@pytest.mark.parametrize("type_checking", [False, True], ids=["as_run", "as_type_checked"])
def test_no_module_of_stagelens_imports_itself_through_others(type_checking):
    graph = import_graph(stagelens_paths(), type_checking=type_checking)
    assert len(graph) > 200, "the modules were not found"
    assert cycles(graph) == [], said(graph)
