"""The markers a test file gets from what it needs (tests/helpers/needs.py): `engine` where it runs the bundled
engine, `server` where it starts one, through the helpers it imports too; neither for a pure-CPU test."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.needs import kinds_of

TESTS = Path(__file__).resolve().parents[1]


def test_a_file_that_imports_the_engine_or_runs_the_lab_needs_the_engine(tmp_path):
    imports = tmp_path / "test_a.py"
    imports.write_text("def f():\n    from stagelens.engine_hooks.engine.engine import Engine\n")
    runs = tmp_path / "test_b.py"
    runs.write_text("ARGS = ['stagelens', 'lab', '--duration', '5']\n")
    named = tmp_path / "test_c.py"
    named.write_text("PARTS = ('diagnosis', 'lab')\n")
    assert kinds_of(imports) == {"engine"} and kinds_of(runs) == {"engine"} and kinds_of(named) == frozenset()


def test_a_file_that_starts_a_server_needs_a_server(tmp_path):
    serving = tmp_path / "test_d.py"
    serving.write_text("import uvicorn\n")
    assert kinds_of(serving) == {"server"}


def test_what_a_helper_needs_its_importers_need_too():
    assert "server" in kinds_of(TESTS / "helpers" / "real_vllm.py")
    assert "server" in kinds_of(TESTS / "sources" / "test_real_vllm.py")


def test_the_tree_rules_need_nothing_and_the_engine_tests_need_the_engine():
    assert kinds_of(TESTS / "project" / "test_layers.py") == frozenset()
    assert kinds_of(TESTS / "metrics" / "test_catalogue.py") == frozenset()
    assert "engine" in kinds_of(TESTS / "engine" / "test_engine_allocator.py")
    assert "server" in kinds_of(TESTS / "server" / "test_serve_api.py")
