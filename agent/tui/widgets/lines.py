"""A widget drawn from Rich content rendered once per change.

Static renders its content twice per update (once to measure its height, once to paint it) and asks
the whole screen for a new layout every time; at 160x48 and a frame a second that was most of the
TUI's CPU. Here the content is rendered once into lines at the widget's width: an update that draws
the same lines repaints nothing, and only an update that changes the number of lines asks for a
layout.

Every screen of both TUIs draws through here, and what they show came partly from other processes
(an engine's model name, a collector's error, Prometheus's labels): each rendered line is made
printable (agent.printable), so no terminal escape in that text reaches the user's terminal,
whichever widget put it on the screen.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.segment import Segment
from rich.text import Text
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from stagelens.printable import printable


class RenderedLines(Widget):
    DEFAULT_CSS = "RenderedLines { height: auto; }"

    def __init__(self, content: RenderableType = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._content: RenderableType = content
        self._lines: list[Strip] = []
        # the width `_lines` were rendered at; 0: not rendered since the last update
        self._width = 0

    def update(self, content: RenderableType) -> None:
        self._content = content
        width = self.content_region.width
        if width <= 0:              # not laid out yet: the first layout renders it
            self._width = 0
            self.refresh(layout=True)
            return
        before = self._lines
        self._render_at(width)
        if len(self._lines) != len(before):
            self.refresh(layout=True)
        elif self._lines != before:
            self.refresh()

    def _render_at(self, width: int) -> None:
        content = Text(self._content) if isinstance(self._content, str) else self._content
        options = self.app.console_options.update(width=width, height=None, highlight=False)
        lines = self.app.console.render_lines(content, options, pad=True, new_lines=False)
        self._lines = [_printable_strip(line, width) for line in lines]
        self._width = width

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return container.width

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if width <= 0:
            return 0
        if width != self._width:
            self._render_at(width)
        return len(self._lines)

    def render_line(self, y: int) -> Strip:
        width = self.content_region.width
        if width != self._width and width > 0:
            self._render_at(width)
        if y >= len(self._lines):
            return Strip.blank(width, self.rich_style)
        return self._lines[y].apply_style(self.rich_style)


def _printable_strip(line: list[Segment], width: int) -> Strip:
    """The line as a strip of `width` cells, its text made printable (a control had no width: its
    visible stand-in has one, so a line that held one is cropped back to the width)."""
    if all(segment.text.isprintable() for segment in line):
        return Strip(line, width)
    shown = [segment if segment.control else Segment(printable(segment.text), segment.style) for segment in line]
    return Strip(shown).adjust_cell_length(width)
