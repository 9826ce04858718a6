"""The verdict strip: the root stage and its severity, every stage's state, the evidence sentence
with its numbers, and what the keys do about it (Enter: runbook; f: apply the fix, in local
mode)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from stagelens.fmt import STATE_COLOR, STATE_MARK, STATE_STYLE, clock
from stagelens.runbook_files import runbook_stem
from stagelens.tui.state import TuiState
from stagelens.tui.widgets.lines import RenderedLines
from stagelens.vocabulary import STAGE_NAMES


def fix_text(state: TuiState) -> str | None:
    """The engine flags the diagnosis recommends, as typed on a command line; None when there are
    none."""
    from stagelens.lab.fixes import as_flags, fix_flags

    if state.diagnosis is None or state.diagnosis.verdict not in ("warn", "firing"):
        return None
    flags = fix_flags(state.diagnosis)
    return as_flags(flags) if flags else None


class VerdictStrip(RenderedLines):
    def refresh_from(self, state: TuiState, info: dict) -> None:
        d = state.diagnosis
        verdict = d.verdict if d else "unknown"
        self.set_class(verdict == "firing", "-firing")
        self.set_class(verdict == "warn", "-warn")
        self.set_class(verdict == "ok", "-ok")
        head = Text()
        head.append(f" {STATE_MARK[verdict]} ", style=STATE_STYLE[verdict])
        if d is None:
            note = info.get("error") or info.get("note") or "waiting for the first frame"
            head.append(f"  {note}", style="bold")
            self.update(head)
            return
        root = d.stage(d.root_stage) if d.root_stage else None
        if root is not None:
            head.append(f" root stage: {STAGE_NAMES[root.stage]}", style="bold")
            head.append(f"  since {clock(root.since_unix)}", style="grey70")
        elif verdict == "ok":
            head.append(" no stage is firing", style="bold")
        elif d.unavailable:
            head.append(f" {d.unavailable}", style="bold red")
        else:
            head.append(" not enough data to judge every stage", style="bold")
        chips = Text(" ")
        for s in d.stages:
            chips.append(f"{STAGE_NAMES[s.stage]} ", style="grey70")
            chips.append(STATE_MARK[s.state], style=f"bold {STATE_COLOR[s.state]}")
            if s.consequence_of:
                chips.append(f" (← {STAGE_NAMES[s.consequence_of]})", style="grey70")
            chips.append("  ")
        width = self.content_region.width or 78
        joined = head + Text("  ") + chips
        lines = [joined] if joined.cell_len <= width else [head, chips]
        if info.get("error"):
            last = state.last
            lines.append(Text(f"source not answering: {info['error']} — showing the frame of "
                              f"{clock(last.time_unix if last else None)}", style="bold red"))
        shown = root or next((s for s in d.stages if s.state == "unknown"), None) or d.stages[0]
        lines.append(Text(shown.explanation, style="bold" if root else ""))
        if d.disagreement:
            lines.append(Text(f"⚠ {d.disagreement}", style="bold yellow"))
        actions = Text()
        if root is not None:
            actions.append(" ⏎ ", style="bold reverse")
            actions.append(f" runbook {runbook_stem(root.runbook)}  ")
            fix = fix_text(state) if info.get("can_fix") else None
            if fix:
                actions.append(" f ", style="bold reverse")
                actions.append(f" apply fix: {fix}")
            elif root.recommendations:
                advice = root.recommendations[0].text
                if width < 120:   # the flags, without the reason
                    advice = advice.split(": ", 1)[0]
                actions.append(f"→ {advice}", style="grey70")
        if state.fix is not None:
            if actions.cell_len:
                lines.append(actions)
            actions = Text(f"fix applied at {clock(state.fix.at_unix)}: {state.verdict_text()} now "
                           f"(was {state.fix.verdict_before}) — before/after "
                           f"in panel 3", style="bold cyan")
        if actions.cell_len:
            lines.append(actions)
        self.update(Group(*lines))
