"""`--interval`: seconds between samples (the TUI: between refreshes), for every command that samples."""

from __future__ import annotations

import click

from agent.numbers import Number

# Faster than 10 a second the sampler's own work shows in the engine's figures; slower than an hour
# no window of the diagnosis would ever hold two samples.
INTERVAL = Number(min=0.1, max=3600.0, unit="s")


def interval_option(default: float = 1.0, help: str = "Sampling interval in seconds."):
    return click.option("--interval", type=INTERVAL, default=default, show_default=True, help=help)
