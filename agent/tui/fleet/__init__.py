"""The fleet screen (`stagelens fleet`), and opening a node's own TUI from it.

One Textual app at a time: `run_fleet_app` runs the fleet screen; `Enter` on a node ends it with
that node's agent URL; the loop then runs the node's TUI (as `stagelens tui --connect URL` would)
and, when that is left with `q` or `Esc`, a new fleet screen with the last one's answer, filter and
selection. `q` on the fleet ends the loop. Running the apps one after the other, rather than the
node TUI as a screen inside the fleet app, keeps each app as it is (its bindings, its own worker and
signal handling) and costs only a redraw on the way back.
"""

from __future__ import annotations

from collections.abc import Callable

from stagelens.tui.fleet.app import FleetApp, FleetMemory
from stagelens.tui.fleet.refresher import Refresher

__all__ = ["FleetApp", "FleetMemory", "open_node_tui", "run_fleet_app"]
NODE_INTERVAL = 1.0      # the node TUI's pace (`stagelens tui`'s default), whatever the fleet's


def run_fleet_app(query, interval: float = 5.0, open_node: Callable[[str], object] | None = None) -> None:
    """The fleet screen until `q`. `open_node(url)` runs what `Enter` opens (default: the node's
    own TUI, `open_node_tui`); it returns True to end the fleet too (a signal), and a UserError
    it raises is said on the fleet screen when it comes back."""
    from stagelens.errors import UserError

    opener = open_node or open_node_tui
    memory = FleetMemory()
    # one across every fleet screen: queries never overlap
    refresher = Refresher(query, interval)
    try:
        while True:
            app = FleetApp(query, interval, memory=memory, refresher=refresher)
            url = app.run()
            if not url or app.stopped_by_signal:
                return
            try:
                if opener(url):
                    return
            except UserError as exc:
                memory.notice = f"could not open {url}: {exc}"
    finally:
        refresher.stop()


def open_node_tui(url: str) -> bool:
    """The node's own TUI over its agent's API, judged with the agent's thresholds (as `stagelens
    tui --connect`); True when it was ended by a signal, so the fleet ends too. UserError for a
    URL that can never answer."""
    import click

    from stagelens.diagnosis import load_config
    from stagelens.http_client import check_url
    from stagelens.tui.fleet.node import NodeApp
    from stagelens.tui.remote_feed import RemoteFeed
    from stagelens.tui.server_settings import server_settings

    check_url(url)
    click.echo(f"connecting to {url} …", err=True)
    # up to 3 s: the agent's thresholds, or a notice that they were not read
    base, notice = server_settings(url)
    app = NodeApp(RemoteFeed(url, timeout=NODE_INTERVAL * 2), interval=NODE_INTERVAL,
                  config=load_config(None, (), base), notice=notice)
    app.run()
    return app.stopped_by_signal
