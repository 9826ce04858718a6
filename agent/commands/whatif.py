"""`stagelens whatif --replay FILE | --connect URL [--set FLAG=VALUE[,...] ...] [--recommended]
[--json]`: the workload a node served, replayed through a simulator of the engine calibrated on
its own steps, under today's flags and candidates (each `--set` one: `--set a=1,b=2` changes both
in one candidate, `--set a=1 --set b=2` are two)."""

from __future__ import annotations

import json
import sys

import click

from stagelens.commands.target import Replay, read_target, target_options
from stagelens.errors import UserError
from stagelens.numbers import Number
from stagelens.printable import printable_lines


@click.command()
@target_options("A bundle recorded by `stagelens lab --record` or `stagelens record`.",
                "A running `stagelens serve` (its base URL): replay its recent window.")
@click.option("--set", "sets", multiple=True, metavar="FLAG=VALUE[,...]",
              help="A candidate: its changes in the lab's flag names (max-num-seqs=16, or "
                   "enable-chunked-prefill=true,max-num-batched-tokens=512); repeat for several "
                   "candidates.")
@click.option("--recommended", is_flag=True, help="Also predict the diagnosis's own fix.")
@click.option("--today", "todays", multiple=True, metavar="FLAG=VALUE[,...]",
              help="Today's flags where the bundle does not hold them (an engine read from "
                   "outside), max-model-len among them (else its longest request recorded).")
@click.option("--scale-rate", type=Number(min=0.01, max=100, unit="x"), default=1.0,
              show_default=True,
              help="Replay the same requests this many times as fast (a higher load of the same traffic).")
@click.option("--search", "do_search", is_flag=True,
              help="Sweep batch size, token budget, chunking and policy.")
@click.option("--slo", "slos", multiple=True, metavar="FIGURE=SECONDS[,...]",
              help="With --search: e.g. ttft_p99=0.5,tpot_p99=0.05 (seconds); each figure once.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="With --search: P99 "
              "TTFT against throughput to this PNG.")
@click.option("--model-config", type=click.Path(), help="An engine read from outside: its model's "
              "config.json (file or folder), for the prior that prices batches past those "
              "recorded.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def whatif(replay_path: str | None, url: str | None, sets: tuple[str, ...], todays: tuple[str, ...],
           recommended: bool, scale_rate: float, do_search: bool, slos: tuple[str, ...],
           plot_path: str | None, model_config: str | None, as_json: bool) -> int:
    """Predict TTFT, TPOT, latency, throughput and KV use under other engine flags, from a
    recorded run or the recent window of a running agent."""
    from stagelens.whatif.predict_all import today_settings, what_if
    from stagelens.whatif.prior import read_model_config
    from stagelens.whatif.recommended import recommended_changes
    from stagelens.whatif.report import render_whatif
    from stagelens.whatif.search import parse_slo
    from stagelens.whatif.settings import check_candidates, parse_set
    from stagelens.whatif.wider import Wider
    from stagelens.whatif.workload import from_agent, from_bundle

    if (slos or plot_path) and not do_search:
        raise UserError("--slo and --plot go with --search")
    if plot_path:
        from stagelens.whatif.plot import plot_format

        image_format = plot_format(plot_path)   # before the search, which takes a while
    slo_figures = parse_slo(slos)
    changes = [parse_set([text]) for text in sets]
    today = parse_set(todays, "--today")
    target = read_target(replay_path, url, live=False)
    observed = from_bundle(target.path) if isinstance(target, Replay) else from_agent(target.url)
    settings = today_settings(observed, today)
    check_candidates(settings, sets, changes)
    candidates = list(changes)
    if recommended:
        candidates.append(recommended_changes(observed))
    wider = Wider(model_config, progress=lambda line: click.echo(line, err=True))
    if model_config:
        read_model_config(model_config)     # a bad config is refused before the work
    result = what_if(observed, candidates, settings, scale_rate=scale_rate, wider=wider)
    document = result.to_dict()
    text = render_whatif(result)
    if do_search:
        from stagelens.whatif.search import search
        from stagelens.whatif.search_report import render_search, search_dict

        cost = result.cost if result.cost.beyond else wider.widen(result.cost, observed) or result.cost
        found = search(settings, cost, result.replayed, slo_figures)
        document["search"] = search_dict(found)
        text += "\n\n" + render_search(found)
    # the text quotes the recording (its engine's settings, its models): none of its controls reach
    # the terminal
    click.echo(json.dumps(document, indent=2) if as_json else printable_lines(text))
    if plot_path:      # after the results: a plot that cannot be written loses none of them
        _plot(found, plot_path, image_format)
    return 0


def _plot(found, path: str, image_format: str) -> None:
    from stagelens.whatif.plot import plot

    # the results reach their reader before the one line that says the plot did not
    sys.stdout.flush()
    try:
        plot(found, path, image_format)
    except OSError as exc:
        raise UserError(f"--plot {path}: the plot was not written ({exc.strerror or exc}); the results were "
                        "printed") from None
