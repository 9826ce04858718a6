"""The modules of the one import root and what each imports, read from the source (ast), for the
rules on imports: the layers (tests/project/test_layers.py) and the import graph's cycles
(tests/project/test_import_graph.py)."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the one import root: agent/ is the package `stagelens`, the other folders its subpackages
# (pyproject.toml)
PACKAGE_OF_FOLDER = {"agent": "stagelens", "probes": "stagelens.probes",
                     "engine_hooks": "stagelens.engine_hooks", "runbooks": "stagelens.runbooks"}


def within(name: str, prefix: str) -> bool:
    """Whether module `name` is `prefix` or lies under it."""
    return name == prefix or name.startswith(prefix + ".")


@lru_cache(maxsize=8)
def parsed(path: Path) -> ast.Module:
    """`path`'s syntax tree; the last few kept, for readers that look at one file in turn for its imports and
    for more (tests/helpers/needs.py)."""
    return ast.parse(path.read_text(), str(path))


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if root == ROOT and parts[0] in PACKAGE_OF_FOLDER:
        parts[:1] = PACKAGE_OF_FOLDER[parts[0]].split(".")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`: imports for the type checker, never
    run."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST, type_checking: bool) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth (functions, classes, branches); without the body of an
    `if TYPE_CHECKING:` block unless `type_checking` (its `else:` runs, so it is kept)."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        if not type_checking and _is_type_checking(node):
            assert isinstance(node, ast.If)
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_statements(path: Path, root: Path = ROOT, type_checking: bool = True,
                      ) -> list[tuple[str, tuple[str, ...]]]:
    """Each import in `path` as (the module it names, the names it takes from it: none for `import
    a.b`), relative ones resolved; without those under `if TYPE_CHECKING:` unless
    `type_checking`."""
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in _import_nodes(parsed(path), type_checking):
        if isinstance(node, ast.Import):
            found.extend((alias.name, ()) for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
        found.append((base, tuple(alias.name for alias in node.names)))
    return found


def imported_modules(path: Path, root: Path = ROOT, type_checking: bool = True) -> set[str]:
    """Every module an import in `path` names (`from a import b` names `a` and `a.b`), relative ones
    resolved; without those under `if TYPE_CHECKING:` unless `type_checking`."""
    found: set[str] = set()
    for base, names in import_statements(path, root, type_checking):
        found.add(base)
        found.update(f"{base}.{name}" for name in names)
    return found


def modules_under(folder: str, type_checking: bool = True) -> dict[str, set[str]]:
    return {module_name(p): imported_modules(p, type_checking=type_checking)
            for p in sorted((ROOT / folder).rglob("*.py"))}
