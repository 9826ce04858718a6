"""Panel 2: the KV cache — fragmentation, access efficiency and read bandwidth against the ideal layout,
each with its history and its warn/firing lines; blocks in use."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from agent.tui.fmt import pct, size
from agent.tui.state import TuiState
from agent.tui.widgets.panel import Panel
from agent.tui.widgets.signal_rows import headline, signal_plot


class KvPanel(Panel):
    KEY = "2"
    TITLE = "KV cache"
    STAGE = "kv_cache"

    def render_state(self, state: TuiState, app_info: dict):
        last = state.last
        if last is None or not last.engine:
            return Text("no engine is observed: the KV cache signals need the engine hooks", style="grey50")
        engine = last.engine
        cfg = engine.get("engine") or {}
        usage = engine.get("usage") or {}
        height = 3 if app_info.get("tall") else 2
        on_gpu = str(cfg.get("device", "cpu")).startswith("cuda")
        line = Text(f"{cfg.get('allocator', '?')} allocator, block {cfg.get('block_size', '?')}, "
                    f"{size(cfg.get('kv_cache_bytes'))}", style="grey70")
        if usage.get("num_blocks"):
            line.append(f" · blocks used {usage['used_blocks']}/{usage['num_blocks']} "
                        f"({pct(usage['used_blocks'] / usage['num_blocks'])})", style="grey70")
            if usage.get("unusable_free_blocks"):
                line.append(f" · {usage['unusable_free_blocks']} free blocks unusable", style="yellow")
        parts = [line,
                 headline(state, "kv_fragmentation_ratio"),
                 signal_plot(state, "kv_fragmentation_ratio", "kv", "fragmentation_ratio", height, top=1.0),
                 headline(state, "kv_access_efficiency"),
                 signal_plot(state, "kv_access_efficiency", "kv", "access_efficiency", height, top=1.0)]
        note = "" if on_gpu else "(CPU: not judged)"
        parts += [headline(state, "effective_bandwidth_ratio", note),
                  signal_plot(state, "effective_bandwidth_ratio", "kv", "effective_bandwidth_ratio", height,
                              judged=on_gpu)]
        return Group(*parts)
