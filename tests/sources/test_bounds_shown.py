"""A signal known only within bounds (vLLM's coarse queue-time histogram) is shown as the bound that decided its
state, marked as one, on every surface: the explanation, the text rows, `--json`, /metrics and the TUI; and what
the evidence says of that bound is the number it shows, never a larger one."""

import pytest
from rich.console import Console

from stagelens.diagnosis.evaluate import diagnose
from stagelens.diagnosis.model import Diagnosis
from stagelens.diagnosis_text import render_diagnosis
from stagelens.engine_hooks.records.snapshot import WINDOW_S
from stagelens.metrics import diagnosis as diagnosis_metrics
from stagelens.metrics.families import Scrape
from stagelens.sources.scrape.engine_source import VllmSource
from stagelens.tui.state import TuiState
from stagelens.tui.widgets.scheduler_panel import figures_grid
from tests.helpers.engine_stub import Engine, fixture
from tests.helpers.frame_builders import frame


@pytest.fixture
def engine():
    served = Engine()
    yield served
    served.close()


def busy_vllm_frames(engine) -> list:
    """vLLM V1 through two scrapes of its fixture: the queue-time P99 in the bucket (0.3, 0.5] s, 200 steps in the
    10 s window (a step period of 50 ms), no spans."""
    source = VllmSource(engine.url, timeout_s=2.0)
    engine.body = fixture("vllm_v1_new_names.txt")
    source.snapshot(100.0)
    engine.body = fixture("vllm_v1_new_names.next.txt")
    snap = source.snapshot(100.0 + WINDOW_S)
    return [frame(i, snap) for i in range(4)]


def test_a_lower_bound_is_shown_as_the_bound_it_is_everywhere(engine):
    frames = busy_vllm_frames(engine)
    result = diagnose(frames)
    wait = next(e for e in result.stage("scheduler").evidence if e.signal == "scheduler_wait_p99")
    # queued at least 0.3 s, less the step in progress (one 50 ms period): the decided wait is at least 250 ms
    assert wait.state == "firing" and wait.bound == "at_least" and wait.value == pytest.approx(0.25)
    assert "queued at least 0.3 s, less one step period (50.0 ms)" in wait.how
    assert "scheduler wait p99 ≥ 250 ms > 20 ms, inferred from" in result.stage("scheduler").explanation
    row = next(line for line in render_diagnosis(result).splitlines() if "scheduler_wait_p99" in line)
    assert "≥0.25" in row.replace(" ", "")
    assert next(e for e in result.to_dict()["stages"][1]["evidence"]
                if e["signal"] == "scheduler_wait_p99")["bound"] == "at_least"
    read_back = Diagnosis.from_dict(result.to_dict())     # what `tui --connect` reads from the agent's API
    assert next(e for e in read_back.stage("scheduler").evidence if e.signal == "scheduler_wait_p99").bound == \
        "at_least"

    out = Scrape()
    diagnosis_metrics.collect(out, frames[-1], result)
    bounds = {(s.labels["signal"], s.labels["bound"]): s.value for f in out.families()
              if f.name == "stagelens_signal_bound_info" for s in f.samples}
    assert bounds == {("scheduler_wait_p99", "at_least"): 1.0}

    state = TuiState()
    state.add(frames)
    console = Console(width=120, record=True)
    console.print(figures_grid(state))
    assert "wait p99 ≥ 250 ms" in console.export_text()


def test_a_plain_value_carries_no_bound(engine):
    frames = busy_vllm_frames(engine)
    result = diagnose(frames)
    rows = {e.signal: e for s in result.stages for e in s.evidence}
    assert rows["kv_fragmentation_ratio"].bound is None and rows["kv_fragmentation_ratio"].value is not None
