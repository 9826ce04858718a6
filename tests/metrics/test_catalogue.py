"""Every figure is declared once (agent/catalogue.py): no other module of the agent, the engine, the probes or
the dashboards' generator spells a `stagelens_` name; each declared field is one the engine snapshot has, each
signal one the diagnosis judges, each counter named as Prometheus counters are; and the metrics reference in
docs/ is the catalogue's."""

from __future__ import annotations

import ast
import dataclasses
import re
import types
import typing
from pathlib import Path

import pytest

from stagelens import catalogue
from stagelens.catalogue import COUNTER, FIGURES, Figure
from stagelens.diagnosis.signals import SIGNALS_BY_ID
from stagelens.engine_hooks.records.snapshot import EngineSnapshot
from stagelens.metrics.reference import reference_markdown

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "agent" / "catalogue.py"
# a name the exposition has; a recording rule's (`instance:stagelens_x:rate5m`) is the rule file's
A_NAME = re.compile(r"(?<![:\w])stagelens_[a-z0-9_]+(?![:\w])")


def spelled(path: Path, root: Path = ROOT) -> list[str]:
    """Each string constant in `path` (docstrings left out) that holds a stagelens_ name."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [f"{path.relative_to(root)}:{node.lineno}: {node.value}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and A_NAME.search(node.value)]


def test_the_rule_sees_a_name_in_an_f_string_and_not_a_recording_rules(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Reads stagelens_doc."""\nx = f"rate(stagelens_a_total{{{SEL}}}[5m])"\n'
                      'y = "instance:stagelens_b:rate5m"\nz = "_stagelens_private"\n')
    assert spelled(module, tmp_path) == ["m.py:2: rate(stagelens_a_total{"]


def test_no_other_module_spells_a_stagelens_name():
    modules = [p for folder in ("agent", "engine_hooks", "probes", "dashboards")
               for p in sorted((ROOT / folder).rglob("*.py"))]
    assert [line for p in modules if p != HOME for line in spelled(p)] == []


def test_each_metric_is_declared_once():
    names = [f.metric for f in FIGURES if f.metric is not None]
    assert len(names) > 100
    assert len(names) == len(set(names))
    constants = [v for v in vars(catalogue).values() if isinstance(v, Figure)]
    assert len(constants) + len(catalogue.TRACE_SPANS) == len(FIGURES)


def test_each_name_follows_the_conventions():
    for figure in FIGURES:
        if figure.metric is None:
            continue
        assert re.fullmatch(r"stagelens_[a-z0-9_]+", figure.metric), figure.metric
        assert figure.metric.endswith("_total") == (figure.kind == COUNTER), figure.metric
        assert figure.help.endswith(".") and not figure.help[0].islower(), figure.metric
        if figure.unit in ("seconds", "bytes"):     # base units, named
            assert figure.unit in figure.metric, figure.metric


def _field_type(cls, name: str):
    """The type of dataclass `cls`'s field `name`, None unwrapped; None where it has no such field."""
    if not dataclasses.is_dataclass(cls):
        return None
    hints = typing.get_type_hints(cls)
    if name not in hints:
        return None
    hint = hints[name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


@pytest.mark.parametrize("figure", [f for f in FIGURES if f.field], ids=lambda f: f.field)
def test_each_field_is_one_the_engine_snapshot_has(figure):
    cls = EngineSnapshot
    for name in figure.field.split("."):
        cls = _field_type(cls, name)
        assert cls is not None, f"{figure.field}: no {name}"


def test_screens_call_each_figure_by_one_name():
    keys = [f.key for f in FIGURES if f.key is not None]
    assert len(keys) == len(set(keys))


def test_each_signal_named_judges_its_figure():
    judged = [f for f in FIGURES if f.signal]
    assert len(judged) >= 10
    for figure in judged:
        signal = SIGNALS_BY_ID[figure.signal]
        assert not signal.reads or figure.field in signal.reads, (figure.field, signal.reads)
        assert signal.unit == figure.unit or signal.unit.startswith("share"), (figure.metric, signal.unit)


def test_the_metrics_reference_is_the_catalogues():
    """docs/metrics.md is written by `python -m stagelens.metrics_reference` (make docs)."""
    assert (ROOT / "docs" / "metrics.md").read_text() == reference_markdown()
