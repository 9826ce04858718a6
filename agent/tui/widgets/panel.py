"""A panel: bordered lines redrawn from the state; its border takes the colour of its stage."""

from __future__ import annotations

from stagelens.tui.state import TuiState
from stagelens.tui.widgets.lines import RenderedLines


class Panel(RenderedLines):
    KEY = "0"
    TITLE = ""
    STAGE: str | None = None        # the diagnosis stage this panel explains, if any

    def __init__(self, **kwargs) -> None:
        super().__init__("", id=f"panel-{self.KEY}", classes="panel", **kwargs)
        self.border_title = f"{self.KEY} {self.TITLE}"

    @property
    def inner_width(self) -> int:
        """Columns inside the border and padding (a guess before the first layout)."""
        width = self.content_region.width if self.size.width else 0
        return width if width > 0 else 76

    def refresh_from(self, state: TuiState, app_info: dict) -> None:
        state_name = "unknown"
        if self.STAGE and state.diagnosis is not None:
            state_name = state.diagnosis.stage(self.STAGE).state
            subtitle = state_name.upper() if state_name != "ok" else "ok"
            self.border_subtitle = subtitle
        for name in ("firing", "warn", "ok"):
            self.set_class(self.STAGE is not None and state_name == name, f"-{name}")
        self.update(self.render_state(state, app_info))

    def render_state(self, state: TuiState, app_info: dict):
        raise NotImplementedError
