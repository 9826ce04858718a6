"""`stagelens record --out FILE`: the lab engine with its agent, or with `--engine vllm|sglang
--engine-url` an engine read from outside for `--duration` seconds, written to a bundle as it runs.

SIGTERM or SIGINT ends the run early and cleanly (arrivals stop, the requests in flight finish, a
last frame is written, exit 0); a second one acts as it would have without us. A bundle that cannot
be written (a full disk) ends the run at once and exits with one line."""

from __future__ import annotations

import queue
import signal
import threading
from contextlib import contextmanager

import click

from stagelens.commands.flags import (
    OUTSIDE_ENGINES,
    OutsideFlags,
    engine_options,
    engine_url_option,
    interval_option,
    open_engine_source,
)
from stagelens.errors import CollectError, UserError
from stagelens.lab.scenarios import SCENARIOS
from stagelens.lab.settings import build_configs

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@click.command()
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="The bundle to write.")
@click.option("--scenario", type=click.Choice(list(SCENARIOS)),
              help="Run one of the lab's scenarios.")
@click.option("--engine", "engine_kind", type=click.Choice(["lab", *OUTSIDE_ENGINES]), default="lab",
              show_default=True, help="lab: the bundled engine; vllm, sglang: the engine at "
              "--engine-url, read from outside for --duration seconds.")
@engine_url_option
@interval_option()
@engine_options
@click.pass_context
def record(ctx: click.Context, out_path: str, scenario: str | None, engine_kind: str,
           outside: OutsideFlags, interval: float, **flags) -> int:
    """Record frames and request timelines of an engine to a bundle that `--replay` reads."""
    from stagelens.bundle import BundleWriter
    from stagelens.lab.scenario_run import run_lab

    source = open_engine_source(engine_kind, outside)
    if source is not None:
        return _record_outside(ctx, source, out_path, interval, flags)
    engine_cfg, workload_cfg = build_configs(flags, SCENARIOS[scenario].defaults if scenario else {})
    stop = threading.Event()
    writer = BundleWriter.open(out_path, source=f"record {scenario or 'lab'}", stop=stop)
    with stop_on_signals(stop) as caught:
        try:
            result = run_lab(engine_cfg, workload_cfg, progress=True, interval=interval,
                             nvml_snapshot=(ctx.obj or {}).get("nvml_snapshot"),
                             listeners=(writer.on_frame,), stop=stop, on_start=writer.follow)
        finally:
            writer.close()          # raises, as one line, the write that failed
    if caught:
        click.echo(f"stagelens: {caught[0]}: stopped early, the bundle is complete", err=True)
    click.echo(f"wrote {writer.frames} frames and {writer.timelines} request timelines to "
               f"{out_path} (verdict {result.diagnosis.verdict})")
    if result.run is not None and result.run.tail is not None:
        click.echo(f"tail: {result.run.tail.sentence()}")
    return 0


def _record_outside(ctx: click.Context, source, out_path: str, interval: float, flags: dict) -> int:
    """Sample the node and the engine read from outside for --duration seconds (30 by default)."""
    from stagelens.bundle import BundleWriter
    from stagelens.node_sampling import sample_for

    given = sorted(k for k, v in flags.items() if v is not None and k != "duration")
    if ctx.params.get("scenario"):
        given.insert(0, "scenario")
    if given:
        raise UserError(f"{', '.join('--' + k.replace('_', '-') for k in given)}: lab engine "
                        f"flags, not for --engine {source.kind}")
    duration = flags.get("duration") or 30.0
    stop = threading.Event()
    writer = BundleWriter.open(out_path, source=f"record {source.kind} {source.url}", stop=stop)
    answered = 0

    def count(frame, _timelines) -> None:
        nonlocal answered
        answered += frame.engine is not None

    with stop_on_signals(stop) as caught:
        try:
            sample_for((ctx.obj or {}).get("nvml_snapshot"), duration, interval, source,
                       listeners=(writer.on_frame, count), stop=stop)
        finally:
            writer.close()
    if caught:
        click.echo(f"stagelens: {caught[0]}: stopped early, the bundle is complete", err=True)
    click.echo(f"wrote {writer.frames} frames and {writer.timelines} request timelines to "
               f"{out_path} ({answered} with the engine's figures)")
    if not answered:
        raise CollectError(f"the engine at {source.url} never answered: the bundle holds the node only")
    return 0


@contextmanager
def stop_on_signals(stop: threading.Event):
    """Within: the first SIGTERM or SIGINT sets `stop` and gives the signals back their previous
    handlers. Yields the list that receives the signal's name."""
    caught: list[str] = []
    # A handler runs on the main thread between any two bytecodes, maybe inside `stop.wait()`
    # holding the event's lock: setting the event there could deadlock. SimpleQueue.put is safe in a
    # handler; a thread sets the event.
    signals: queue.SimpleQueue = queue.SimpleQueue()
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, handler)

    def handler(signum, _frame) -> None:
        restore()
        signals.put(signal.Signals(signum).name)

    def relay() -> None:
        name = signals.get()
        if name is not None:
            caught.append(name)
            stop.set()

    relay_thread = threading.Thread(target=relay, name="stagelens-record-signals", daemon=True)
    relay_thread.start()
    for s in STOP_SIGNALS:
        signal.signal(s, handler)
    try:
        yield caught
    finally:
        restore()
        signals.put(None)
        relay_thread.join()
