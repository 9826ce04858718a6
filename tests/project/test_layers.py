"""The layers, checked over the imports (every import statement, function-level ones included): the engine
imports neither the hooks nor the agent; the records import nothing above them; the agent reaches the engine
only through the lab, which hosts it; the fleet does not import the TUI; nothing below the CLI imports the
commands; each protocol of the engine sources reads none of the others, the OTLP transports know
their receiver only as an intake, and the sources import nothing of the agent above them."""

from __future__ import annotations

import pytest

from tests.helpers.imports import (
    PACKAGE_OF_FOLDER,
    ROOT,
    imported_modules,
    module_name,
    modules_under,
    within,
)


def breaches(importers: dict[str, set[str]], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{importer} imports {target}" for importer, targets in importers.items()
                  for target in targets if any(within(target, f) for f in forbidden))


AGENT = modules_under("agent")
# the agent's own modules and packages, stagelens.X (the other folders' subpackages are not under agent/)
AGENT_ROOTS = tuple(sorted({".".join(m.split(".")[:2]) for m in AGENT if m != "stagelens"}))
ENGINE_HOOKS = modules_under("engine_hooks")


def test_the_rule_sees_a_function_level_and_a_relative_import(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    mod = tmp_path / "pkg" / "sub" / "mod.py"
    mod.write_text("def f():\n    from ..other import thing\n    import stagelens.tui\n")
    assert {"pkg.other", "pkg.other.thing", "stagelens.tui"} <= imported_modules(mod, tmp_path)


def test_the_engine_imports_neither_the_hooks_nor_the_agent():
    engine = {m: t for m, t in ENGINE_HOOKS.items() if within(m, "stagelens.engine_hooks.engine")}
    assert engine, "no engine modules found"
    assert breaches(engine, ("stagelens.engine_hooks.hooks", *AGENT_ROOTS, "stagelens.probes")) == []


def test_the_records_import_nothing_above_them():
    records = {m: t for m, t in ENGINE_HOOKS.items() if within(m, "stagelens.engine_hooks.records")}
    assert records, "no record modules found"
    assert breaches(records, ("stagelens.engine_hooks.engine", "stagelens.engine_hooks.hooks", *AGENT_ROOTS,
                              "stagelens.probes")) == []


def test_the_shared_helpers_import_nothing_of_stagelens_above_them():
    shared = {m: t for m, t in ENGINE_HOOKS.items() if within(m, "stagelens.engine_hooks.shared")}
    assert breaches(shared, ("stagelens.engine_hooks.engine", "stagelens.engine_hooks.hooks",
                             "stagelens.engine_hooks.records", *AGENT_ROOTS)) == []


def test_no_agent_module_imports_the_engine_outside_the_lab_that_hosts_it():
    outside_the_lab = {m: t for m, t in AGENT.items() if not within(m, "stagelens.lab")}
    assert breaches(outside_the_lab, ("stagelens.engine_hooks.engine", "stagelens.engine_hooks.hooks")) == []


def test_the_fleet_does_not_import_the_tui():
    fleet = {m: t for m, t in AGENT.items() if within(m, "stagelens.fleet")}
    assert fleet, "no fleet modules found"
    assert breaches(fleet, ("stagelens.tui",)) == []


@pytest.mark.parametrize("folder", ["agent", "probes", "engine_hooks"])
def test_nothing_below_the_cli_imports_the_commands(folder):
    below = {m: t for m, t in modules_under(folder).items()
             if not (within(m, "stagelens.commands") or m == "stagelens.cli")}
    assert breaches(below, ("stagelens.commands",)) == []


@pytest.mark.parametrize("folder", ["agent", "probes", "engine_hooks", "tests", "bench", "dashboards"])
def test_everything_imports_through_the_one_root(folder):
    """The wheel installs `stagelens` alone: a module importing a folder's old top-level name runs from the
    repository but not from an install."""
    importers = {str(p.relative_to(ROOT)): imported_modules(p) for p in sorted((ROOT / folder).rglob("*.py"))}
    assert breaches(importers, tuple(PACKAGE_OF_FOLDER)) == []


def test_the_wheel_lists_every_package_the_folders_hold():
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = [module_name(init) for folder in PACKAGE_OF_FOLDER for init in sorted((ROOT / folder).rglob("__init__.py"))]
    assert sorted(listed) == sorted(found)


SOURCES = {m: t for m, t in AGENT.items() if within(m, "stagelens.sources")}


def _sources_in(folder: str) -> dict[str, set[str]]:
    found = {m: t for m, t in SOURCES.items() if within(m, f"stagelens.sources.{folder}")}
    assert found, f"no modules found in agent/sources/{folder}/"
    return found


@pytest.mark.parametrize("folder, others", [
    ("otlp", ("scrape", "kv_events", "inference")),
    ("kv_events", ("scrape", "otlp", "inference")),
    ("inference", ("otlp", "kv_events", "scrape")),
])
def test_each_protocol_of_the_sources_reads_none_of_the_others(folder, others):
    """The OTLP receiver and the KV-event subscriber stand alone; the inferences read a scrape's
    histograms (scrape/families.py) and nothing else of it; the scrape's engine source is what puts
    them together."""
    allowed = "stagelens.sources.scrape.families" if folder == "inference" else None
    imported = {m: {n for n in t if not (allowed and within(n, allowed))}
                for m, t in _sources_in(folder).items()}
    assert breaches(imported, tuple(f"stagelens.sources.{o}" for o in others)) == []


def test_the_otlp_transports_hand_their_bodies_to_an_intake_and_never_import_the_receiver():
    transports = {m: t for m, t in _sources_in("otlp").items()
                  if m in ("stagelens.sources.otlp.http", "stagelens.sources.otlp.grpc")}
    assert len(transports) == 2
    assert breaches(transports, ("stagelens.sources.otlp.receiver",)) == []
    assert all("stagelens.sources.otlp.intake" in t for t in transports.values())


def test_the_sources_import_nothing_of_the_agent_above_them():
    """An engine read from outside fills the snapshot; what reads the snapshot (the diagnosis,
    what-if, the exporters, the server, the TUI, the fleet, the lab, the commands) is above it."""
    above = ("diagnosis", "whatif", "metrics", "tracing", "server", "tui", "fleet", "lab",
             "loadtest", "commands", "sampler", "cli")
    assert breaches(SOURCES, tuple(f"stagelens.{a}" for a in above)) == []
