"""The TUI and what-if call a figure by its snapshot field's name (agent/catalogue.py): what the scheduler panel
and the before/after table read is the snapshot's own figure under the snapshot's own name."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagelens import catalogue as c
from stagelens.bundle import read_bundle
from stagelens.tui.figures import COMPARED, FINISHED, LATENCY_P99, SHOWN, TTFT_P50, frame_figures
from stagelens.whatif.fix_effect import TUI_FIGURES

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"
REQUEST_FIGURES = {FINISHED, TTFT_P50, LATENCY_P99}   # over the requests that finished, not a snapshot field


@pytest.fixture(scope="module")
def frames():
    bundle = read_bundle(str(BUNDLES / "hol-blocking.jsonl"))
    return [f for f in bundle.frames if f.engine is not None and f.engine.window.scheduler.decided_wait_p99_s]


def test_each_window_figure_is_the_snapshots_field_under_its_name(frames):
    assert frames, "the fixture's frames hold scheduler waits"
    for frame in frames:
        shown = frame_figures(frame)
        for figure in SHOWN:
            field = figure.field.rsplit(".", 1)[-1]
            assert field in shown and shown[field] == figure.read(frame.engine), field
    last = frame_figures(frames[-1])
    assert last["decided_wait_p99_s"] == frames[-1].engine.window.scheduler.decided_wait_p99_s
    assert last["head_of_line_share"] == frames[-1].engine.window.scheduler.head_of_line_share


def test_every_key_the_tui_compares_is_a_snapshot_field_or_a_request_figure():
    snapshot_keys = {f.key for f in c.FIGURES if f.key}
    for _label, key, _kind, _lower in COMPARED:
        assert key in snapshot_keys | REQUEST_FIGURES, key
    assert set(TUI_FIGURES) <= {key for _, key, _, _ in COMPARED}
