"""Panel 2: the KV cache — fragmentation, access efficiency and read bandwidth against the ideal
layout, each with its history and its warn/firing lines; blocks in use."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from stagelens.fmt import pct, size
from stagelens.tui.state import TuiState
from stagelens.tui.widgets.panel import Panel
from stagelens.tui.widgets.signal_rows import headline, signal_plot


def _known(value) -> str:
    return "?" if value is None else str(value)


class KvPanel(Panel):
    KEY = "2"
    TITLE = "KV cache"
    STAGE = "kv_cache"

    def render_state(self, state: TuiState, app_info: dict):
        last = state.last
        if last is None or last.engine is None:
            return Text("no engine is observed: the KV cache signals need the engine hooks",
                        style="grey50")
        cfg, usage = last.engine.engine, last.engine.usage
        height = 3 if app_info.get("tall") else 2
        on_gpu = cfg.on_cuda
        line = Text(f"{cfg.allocator or '?'} allocator, block {_known(cfg.block_size)}, "
                    f"{size(cfg.kv_cache_bytes)}", style="grey70")
        if usage is not None and usage.num_blocks and usage.used_blocks is not None:
            line.append(f" · blocks used {usage.used_blocks}/{usage.num_blocks} "
                        f"({pct(usage.used_blocks / usage.num_blocks)})", style="grey70")
            if usage.unusable_free_blocks:
                line.append(f" · {usage.unusable_free_blocks} free blocks unusable", style="yellow")
        parts = [line,
                 headline(state, "kv_fragmentation_ratio"),
                 signal_plot(state, "kv_fragmentation_ratio", lambda w: w.kv.fragmentation_ratio, height, top=1.0),
                 headline(state, "kv_access_efficiency"),
                 signal_plot(state, "kv_access_efficiency", lambda w: w.kv.access_efficiency, height, top=1.0)]
        note = "" if on_gpu else "(CPU: not judged)"
        parts += [headline(state, "effective_bandwidth_ratio", note),
                  signal_plot(state, "effective_bandwidth_ratio", lambda w: w.kv.effective_bandwidth_ratio, height,
                              judged=on_gpu)]
        return Group(*parts)
