"""The documentation in docs/ cannot drift from the code: every signal with its thresholds as the code has
them, every key of a real engine snapshot, every command and exit status; and nothing in the repository
points at material a user's clone does not have."""

import pathlib
import re
import time

import pytest

from stagelens.diagnosis.signals import SIGNALS
from stagelens.vocabulary import COMPONENT_STAGE, STAGES

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
NONE = "—"   # a threshold the signal does not have


def sections(path: pathlib.Path) -> dict[str, str]:
    """{heading text: the text below it, up to the next heading}."""
    out: dict[str, str] = {}
    current = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^#{1,6} (.+)$", line)
        if m:
            current = m[1].strip()
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


def table_rows(text: str) -> list[list[str]]:
    """The cells of each Markdown table row whose first cell is one `code` word."""
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if re.match(r"^\| `[a-z0-9_]+` \|", line)]


def _number(cell: str) -> float | None:
    return None if cell == NONE else float(cell)


# --- docs/stages.md -----------------------------------------------------------------------------------
def _signal_rows() -> dict[str, tuple[str, list[str]]]:
    """{signal id: (the stage whose section holds its row, its cells)} from docs/stages.md."""
    rows: dict[str, tuple[str, list[str]]] = {}
    for heading, text in sections(DOCS / "stages.md").items():
        stage = next((s for s in STAGES if f"(`{s}`)" in heading), None)
        for cells in table_rows(text):
            name = cells[0].strip("`")
            if stage is not None and len(cells) == 6:
                assert name not in rows, f"{name}: documented twice"
                rows[name] = (stage, cells)
    return rows


def test_every_signal_is_documented_with_its_thresholds_unit_and_direction():
    rows = _signal_rows()
    assert set(rows) == {s.id for s in SIGNALS}, "docs/stages.md and agent/diagnosis/signals.py list other signals"
    for signal in SIGNALS:
        stage, (_, meaning, unit, direction, warn, firing) = rows[signal.id]
        assert stage == signal.stage, (signal.id, stage)
        assert (unit, direction) == (signal.unit, signal.direction), signal.id
        assert (_number(warn), _number(firing)) == (signal.warn, signal.firing), signal.id
        assert len(meaning) > 40, signal.id


def test_the_stages_doc_states_the_tail_rule_and_charges_every_component():
    from stagelens.diagnosis.tail import SLOW_TAIL_FACTOR, SLOW_TAIL_FLOOR_S

    text = " ".join((DOCS / "stages.md").read_text(encoding="utf-8").split())
    assert f"at least {SLOW_TAIL_FACTOR:g}× the median" in text
    assert f"at least {SLOW_TAIL_FLOOR_S * 1000:g} ms" in text
    rows = {cells[0].strip("`"): cells for cells in table_rows(sections(DOCS / "stages.md")["The P99 tail"])}
    assert set(rows) == set(COMPONENT_STAGE)
    for component, stage in COMPONENT_STAGE.items():
        assert rows[component][2] == (f"`{stage}`" if stage else "none"), component


# --- docs/snapshot.md -----------------------------------------------------------------------------------
# Objects keyed by names (wait reasons, time components, step phases, finish reasons, hooks) rather than by
# fixed fields: their keys must be named somewhere in the doc, not in a section of their own.
NAMED_MAPS = ("wait_seconds_by_reason", "window.scheduler.wait_seconds_by_reason", "window.tail.ttft.seconds",
              "window.tail.latency.seconds", "health.step_errors", "health.finish_reasons", "hook_errors")
TOP_LEVEL = "Top level"


def key_paths(value, path: str = "") -> set[tuple[str, str]]:
    """(parent path, key) of every key in a JSON document; a list's objects are walked as `parent[]`."""
    out: set[tuple[str, str]] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            out.add((path, key))
            out |= key_paths(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for item in value:
            out |= key_paths(item, f"{path}[]")
    return out


def _snapshot_sections() -> dict[str, str]:
    """{key path (or "" for the top level): its section's text} from docs/snapshot.md."""
    out = {}
    for heading, text in sections(DOCS / "snapshot.md").items():
        m = re.fullmatch(r"`([a-z_][a-z0-9_.]*)`", heading)
        if m:
            out[m[1]] = text
        elif heading == TOP_LEVEL:
            out[""] = text
    return out


def _snapshots(model_dir) -> list[dict]:
    """Snapshots (as JSON) of a tiny engine that prefills, decodes, preempts (17 KV blocks for 6 requests) and
    loads a model while serving, taken while it runs and once it is done."""
    from stagelens.engine_hooks import RecorderConfig, instrument, uninstrument
    from stagelens.engine_hooks.engine import EngineConfig, LLMEngine, SamplingParams

    engine = LLMEngine(EngineConfig(model="tiny", model_dir=model_dir, max_model_len=256, kv_cache_memory=8192 * 17,
                                    max_num_batched_tokens=256, max_num_seqs=8, device="cpu", models=2,
                                    num_preload_models=1))
    rec = instrument(engine, RecorderConfig(usage_interval_s=0.0))
    snaps = []
    try:
        with engine:
            requests = [engine.submit([i + 1] * 40, SamplingParams(max_tokens=40), model="model-0") for i in range(6)]
            requests.append(engine.submit([7] * 10, SamplingParams(max_tokens=4), model="model-1"))
            while not all(r.finished for r in requests):
                snaps.append(rec.snapshot().to_dict())
                time.sleep(0.01)
            assert all(r.wait(60) for r in requests)
        snaps.append(rec.snapshot().to_dict())
    finally:
        uninstrument(engine)
    return snaps


def test_every_key_of_a_real_engine_snapshot_is_documented(model_dir):
    snaps = _snapshots(model_dir)
    assert snaps[-1]["format"] == "stagelens-engine/1"
    paths = set().union(*(key_paths(s) for s in snaps))
    assert ("counters", "preemptions_total") in paths and ("counters", "loads_total") in paths, \
        "the run should have preempted and loaded a model"
    text = (DOCS / "snapshot.md").read_text(encoding="utf-8")
    documented = _snapshot_sections()
    missing = []
    for parent, key in sorted(paths):
        plain = parent.replace("[]", "")
        if plain in NAMED_MAPS:
            where = text
        else:
            ancestors = [".".join(plain.split(".")[:n]) for n in range(plain.count(".") + 1, 0, -1)] if plain else []
            where = next((documented[a] for a in [*ancestors, ""] if a in documented), "")
        if f"`{key}`" not in where:
            missing.append(f"{parent or '(top level)'}: {key}")
    assert not missing, "keys of the engine snapshot that docs/snapshot.md does not document: " + ", ".join(missing)
    full = {(f"{parent}.{key}" if parent else key).replace("[]", "") for parent, key in paths}
    assert set(documented) - {""} <= full, "docs/snapshot.md documents sections the snapshot does not have"


# --- docs/design.md -------------------------------------------------------------------------------------
def test_the_design_doc_names_every_command_and_exit_status():
    from stagelens import errors
    from stagelens.cli import _register, cli
    from stagelens.probes.nvml_snapshot import FORMAT

    _register()
    text = (DOCS / "design.md").read_text(encoding="utf-8")
    for name in cli.commands:
        assert f"`stagelens {name}" in text, name
    statuses = {cells[0]: cells for cells in (
        [c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
        if re.match(r"^\| \d \|", line))}
    assert set(statuses) == {str(code) for code in (errors.EXIT_OK, errors.EXIT_WARNING, errors.EXIT_CRITICAL,
                                                    errors.EXIT_UNKNOWN)}
    assert f"`{FORMAT}`" in text


# --- nothing points outside the repository ---------------------------------------------------------------
OUTSIDE = re.compile("|".join(re.escape(s) for s in ("../" + "shared", "STAGES" + ".md", "DESIGN" + ".md")))
SCANNED = ("agent", "probes", "engine_hooks", "runbooks", "dashboards", "deploy", "docs", "bench", "tests")
SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".json", ".txt"}


def _scanned_files():
    yield from (ROOT / name for name in ("README.md", "pyproject.toml", "Makefile"))
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                yield path


def test_nothing_points_at_material_outside_the_repository():
    found = [f"{path.relative_to(ROOT)}:{n}" for path in _scanned_files()
             for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if OUTSIDE.search(line)]
    assert not found, "pointers to files a user's clone does not have (use docs/): " + ", ".join(found)


@pytest.mark.parametrize("doc", ["stages.md", "design.md", "snapshot.md"])
def test_the_docs_links_resolve(doc):
    text = (DOCS / doc).read_text(encoding="utf-8")
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert (DOCS / link).is_file(), (doc, link)
    anchors = {_anchor(h) for name in ("stages.md", "design.md", "snapshot.md") for h in sections(DOCS / name)}
    for anchor in re.findall(r"\]\([^)]*#([^)]+)\)", text):
        assert anchor in anchors, (doc, anchor)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


# --- docs for a reader --------------------------------------------------------------------------------------
READER_DOCS = (ROOT / "README.md", *sorted(DOCS.rglob("*.md")))
SESSION_WORDS = re.compile(r"\b(this stop|the stop before|an earlier stop|a later stop)\b", re.IGNORECASE)


def _outside_fences(path: pathlib.Path):
    """(line number, line) of a Markdown file, fenced code blocks (a program's own output) left out."""
    fenced = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield n, line


def test_the_readme_opens_with_its_title_and_purpose_then_the_setup_commands():
    first = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:8]
    assert first[0].startswith("# ") and len(first[1]) > 40, "the README starts with its title and purpose"
    assert any(line.startswith("make demo") for line in first), "`make demo` among the README's first lines"
    assert any(line.startswith("make test ") for line in first), "`make test` among the README's first lines"


def test_doc_lines_fit_in_120_columns():
    long = [f"{path.relative_to(ROOT)}:{n}" for path in READER_DOCS for n, line in _outside_fences(path)
            if len(line) > 120]
    assert not long, "lines over 120 characters: " + ", ".join(long)


def test_the_docs_speak_to_a_reader_not_to_a_work_session():
    found = [f"{path.relative_to(ROOT)}:{n}" for path in READER_DOCS for n, line in _outside_fences(path)
             if SESSION_WORDS.search(line)]
    assert not found, "history told by work session (move it to docs/measurements/, dated): " + ", ".join(found)


def test_every_measurement_is_dated_and_indexed():
    index = (DOCS / "measurements" / "README.md").read_text(encoding="utf-8")
    for path in sorted((DOCS / "measurements").glob("*.md")):
        if path.name != "README.md":
            assert re.match(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$", path.name), path.name
            assert f"]({path.name})" in index, f"docs/measurements/README.md does not list {path.name}"


def test_every_link_of_the_readme_and_the_docs_resolves():
    for path in READER_DOCS:
        for link, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", path.read_text(encoding="utf-8")):
            if link.startswith(("http://", "https://")):
                continue
            target = (path.parent / link) if link else path
            assert target.exists(), (str(path.relative_to(ROOT)), link)
            if anchor and target.suffix == ".md":
                assert anchor in {_anchor(h) for h in sections(target)}, (str(path.relative_to(ROOT)), link, anchor)
