"""`stagelens tui`: the firing stage, its evidence and its runbook at a glance.

Local by default (the agent in-process with the bundled lab engine, optionally a scenario),
`--engine vllm|sglang --engine-url URL` for an engine read from outside, `--connect URL` for a
running `stagelens serve`, `--replay FILE` for a recorded bundle.
"""

from __future__ import annotations

import click

from stagelens.commands.flags import (
    OUTSIDE_ENGINES,
    OutsideFlags,
    diagnosis_options,
    engine_options,
    engine_url_option,
    interval_option,
    open_engine_source,
)
from stagelens.commands.target import Connect, Replay, Target, live_only, read_target, target_options
from stagelens.diagnosis import load_config
from stagelens.errors import UserError
from stagelens.http_client import check_url
from stagelens.lab.scenarios import SCENARIOS
from stagelens.tui.server_settings import server_settings


@click.command()
@target_options("Play back a recorded bundle.", "Watch a running `stagelens serve` (its base URL).")
@interval_option(help="Refresh interval in seconds.")
@click.option("--engine", "engine_kind", type=click.Choice(["lab", *OUTSIDE_ENGINES]), default="lab",
              show_default=True, help="lab: the bundled engine in-process; vllm, sglang: read the "
              "engine at --engine-url from outside.")
@engine_url_option
@click.option("--scenario", type=click.Choice(list(SCENARIOS)),
              help="Local mode: run the lab engine on this scenario.")
@click.option("--screenshot-dir", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Where ctrl+s saves SVG screenshots.")
@engine_options
@diagnosis_options
@click.pass_context
def tui(ctx: click.Context, url: str | None, replay_path: str | None, interval: float,
        engine_kind: str, outside: OutsideFlags, scenario: str | None, screenshot_dir: str,
        config_path, thresholds, **flags) -> int:
    """Terminal UI: which stage is firing, the evidence, the runbook; apply the fix in local
    mode."""
    target = read_target(replay_path, url)
    if isinstance(target, Connect):
        # a URL that can never answer fails here, not as a screen that stays STALE
        check_url(target.url)
    given = ["--" + k.replace("_", "-") for k in sorted(flags) if flags[k] is not None] + (
        ["--scenario"] if scenario else [])
    live_only(target, given, "engine and scenario flags apply to the local lab engine")
    if given and engine_kind != "lab":
        raise UserError(f"{', '.join(given)}: engine and scenario flags apply to the local lab "
                        f"engine, not to --engine {engine_kind}")
    live_only(target, ["--engine"] if engine_kind != "lab" else [], "an engine is read live")
    outside = open_engine_source(engine_kind, outside)
    base, notice = server_settings(target.url) if isinstance(target, Connect) else (None, None)
    config = load_config(config_path, thresholds, base)
    source = _source(ctx, target, scenario, interval, flags, outside)

    from stagelens.tui.app import StagelensApp

    app = StagelensApp(source, interval=interval, config=config, screenshot_dir=screenshot_dir,
                       notice=notice)
    app.run()
    app.poller.finished.wait(timeout=15)   # the local engine stops on the worker thread
    return 0


def _source(ctx: click.Context, target: Target, scenario, interval: float, flags: dict, outside=None):
    if outside is not None:
        from stagelens.tui.outside_feed import OutsideFeed

        return OutsideFeed(outside, (ctx.obj or {}).get("nvml_snapshot"), interval)
    if isinstance(target, Connect):
        from stagelens.tui.remote_feed import RemoteFeed

        return RemoteFeed(target.url, timeout=max(1.0, min(5.0, interval * 2)))
    if isinstance(target, Replay):
        from stagelens.bundle import read_bundle_warned
        from stagelens.tui.replay_feed import ReplayFeed

        bundle = read_bundle_warned(target.path)
        if not bundle.frames:
            raise UserError(f"{target.path}: the bundle holds no frames")
        return ReplayFeed(bundle)
    from stagelens.tui.local_feed import LocalFeed

    return LocalFeed(flags, scenario, (ctx.obj or {}).get("nvml_snapshot"), interval)
