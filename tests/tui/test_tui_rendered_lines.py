"""RenderedLines, the base of every dashboard widget: it redraws only what changed and relays out only
when its height changes, and it follows the width it is given."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from stagelens.tui.widgets.lines import RenderedLines
from tests.helpers.tui_support import text_of

pytestmark = pytest.mark.asyncio


class Recorded(RenderedLines):
    """Records the refreshes it asks for: (repaint, layout)."""

    def __init__(self) -> None:
        super().__init__(id="lines")
        self.asked: list[bool] = []

    def refresh(self, *regions, repaint: bool = True, layout: bool = False, recompose: bool = False):
        self.asked.append(layout)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)


class OneWidget(App):
    def compose(self) -> ComposeResult:
        yield Recorded()


async def test_the_same_lines_ask_for_nothing_new_lines_for_a_repaint_more_lines_for_a_layout():
    app = OneWidget()
    async with app.run_test(size=(40, 10)) as pilot:
        widget = app.query_one(Recorded)
        widget.update(Text("first\nsecond"))
        await pilot.pause()
        assert widget.size.height == 2
        widget.asked.clear()
        widget.update(Text("first\nsecond"))
        assert widget.asked == []
        widget.update(Text("first\nchanged"))
        assert widget.asked == [False]
        widget.update(Text("one\ntwo\nthree"))
        await pilot.pause()
        assert widget.asked[-1] is True and widget.size.height == 3
        assert "three" in text_of(app)


async def test_a_narrower_screen_wraps_the_content_again_and_grows_the_widget():
    words = " ".join(f"word{n}" for n in range(12))
    app = OneWidget()
    async with app.run_test(size=(80, 10)) as pilot:
        widget = app.query_one(Recorded)
        widget.update(Text(words))
        await pilot.pause()
        assert widget.size.height == 1
        await pilot.resize_terminal(30, 10)
        await pilot.pause()
        assert widget.size.height == 3
        shown = text_of(app)
        assert all(f"word{n}" in shown for n in range(12))
