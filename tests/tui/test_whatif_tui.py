"""The TUI's `f` with the fix's predicted effect: the prediction (stagelens whatif, on the run before the fix)
is announced and stands beside the measured before and after in panel 3."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from stagelens.bundle import read_bundle
from stagelens.tui.feed import Poll
from tests.helpers.tui_pilot import HOL, FakeFeed, frames, inject, make_app, notes
from tests.helpers.tui_support import text_of

pytestmark = pytest.mark.asyncio
RUN = Path(__file__).parents[1] / "fixtures" / "bundles" / "hol-blocking.jsonl"


class RecordedLab(FakeFeed):
    """A local source whose engine served the recorded hol-blocking run."""

    def whatif_window(self) -> dict:
        return {"timelines": read_bundle(str(RUN)).timelines, "engine_config": None, "steps": [], "loads": []}


async def test_f_announces_the_prediction_and_shows_it_beside_before_and_after():
    app = make_app(RecordedLab())
    async with app.run_test(size=(160, 48)) as pilot:
        await inject(app, pilot, Poll(frames(5, **HOL)))
        await pilot.press("f")
        deadline = time.monotonic() + 30
        while not app.state.fix.predicted:
            assert time.monotonic() < deadline, "no prediction came"
            await asyncio.sleep(0.05)
        assert "predicted P99 TTFT" in notes(app)
        await inject(app, pilot, Poll(frames(5, start=5, enable_chunked_prefill=True)))
        screen = text_of(app)
        assert "predicted" in screen and "before" in screen and "after" in screen
        assert app.state.fix.predicted["ttft_p50_s"] > 0
