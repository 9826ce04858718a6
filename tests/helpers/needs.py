"""What a test file needs, read from its source: `engine` where it runs the bundled engine (it imports the engine,
its hooks or the lab that hosts it, or runs a command that starts it: `lab`, `--scenario`), `server` where it
starts a server (the agent's HTTP API, a Prometheus, a real vLLM, a scripted one on loopback). tests/conftest.py
marks each test with them, so `pytest -m "not engine and not server"` is the pure-CPU tier (`make test-unit`)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.helpers.imports import ROOT, imported_modules, parsed, within

ENGINE_MODULES = ("torch", "stagelens.lab", "stagelens.engine_hooks.engine", "stagelens.engine_hooks.hooks")
SERVER_MODULES = ("uvicorn", "stagelens.server", "fastapi.testclient", "http.server", "socketserver",
                  "tests.helpers.prometheus_support", "tests.helpers.hostile_servers", "tests.helpers.real_vllm")
# a command line the test runs that starts the bundled engine, or the agent's server
ENGINE_WORDS = frozenset({"lab", "--scenario", "demo"})
SERVER_WORDS = frozenset({"serve"})


def _command_words(path: Path) -> set[str]:
    """The words of each command line `path` spells: a list, a tuple or a call's arguments holding a flag
    (`["lab", "--duration", "5"]`, `stagelens("serve", "--listen", ...)`)."""
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        items = node.elts if isinstance(node, ast.List | ast.Tuple) else node.args if isinstance(node, ast.Call) else []
        words = {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
        if any(w.startswith("--") for w in words):
            found |= words
    return found


@cache
def kinds_of(path: Path) -> frozenset[str]:
    """{"engine", "server"} or part of it, for a test module or a helper, through the helpers it imports."""
    root = ROOT if path.is_relative_to(ROOT) else path.parent
    imported = imported_modules(path, root, type_checking=False)
    kinds: set[str] = set()
    if any(within(m, p) for m in imported for p in ENGINE_MODULES):
        kinds.add("engine")
    if any(within(m, p) for m in imported for p in SERVER_MODULES):
        kinds.add("server")
    words = _command_words(path)
    if words & ENGINE_WORDS:
        kinds.add("engine")
    if words & SERVER_WORDS:
        kinds.add("server")
    for module in imported:
        helper = ROOT / (module.replace(".", "/") + ".py")
        if module.startswith("tests.helpers.") and helper.exists() and helper != path:
            kinds |= kinds_of(helper)
    return frozenset(kinds)
