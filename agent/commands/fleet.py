"""`stagelens fleet`: every node Prometheus scrapes an agent on, most severe first, from one query a
refresh.

The fleet screen by default (agent/tui/fleet/); `--once` prints the table once, `--json` the
document (agent/fleet/output.py), each with the fleet's exit status.
"""

from __future__ import annotations

import json

import click

from stagelens.commands.flags import interval_option
from stagelens.errors import EXIT_CRITICAL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARNING, CollectError, UserError
from stagelens.fleet.model import counts
from stagelens.fleet.output import DEFAULT_LIMIT, fleet_document, render_fleet
from stagelens.fleet.query import DEFAULT_SELECTOR, FleetQuery, parse_filters
from stagelens.numbers import Number

EXIT_STATUS = (f"Exit status with --once or --json: {EXIT_OK} every node up and none warns or fires, {EXIT_WARNING} a "
               f"node warns, {EXIT_CRITICAL} a node fires or is down, {EXIT_UNKNOWN} Prometheus could not be read, no "
               "node matched, bad input or an internal error.")


@click.command(epilog=EXIT_STATUS)
@click.option("--prometheus", "prometheus_url", required=True,
              help="Base URL of the Prometheus server that scrapes the agents, like http://prometheus:9090.")
@click.option("--selector", default=DEFAULT_SELECTOR, show_default=True,
              help="Label matchers of the agents' targets, in braces.")
@click.option("--filter", "filters", multiple=True, metavar="LABEL=VALUE",
              help="Only the nodes whose target label has this value (repeatable: all must hold).")
@click.option("--limit", type=Number(min=1, max=1_000_000, integer=True), default=DEFAULT_LIMIT,
              show_default=True, help="Show the N most severe nodes, and how many more there are.")
@click.option("--json", "as_json", is_flag=True, help="Print the fleet once as JSON.")
@click.option("--once", is_flag=True,
              help="Print the fleet once as text instead of opening the fleet screen.")
@interval_option(default=5.0, help="Seconds between refreshes of the fleet screen.")
@click.option("--timeout", "timeout_s", type=Number(min=0, max=300, min_open=True, unit="s"),
              default=5.0, show_default=True,
              help="Seconds a refresh may take, all of it (connect, query, answer).")
def fleet(prometheus_url: str, selector: str, filters: tuple[str, ...], limit: int, as_json: bool,
          once: bool, interval: float, timeout_s: float) -> int:
    """Every node's stage states, evidence and health, read from Prometheus."""
    query = FleetQuery(prometheus_url, selector=selector, timeout_s=timeout_s,
                       filters=parse_filters(filters))
    if not (as_json or once):
        try:
            from stagelens.tui.fleet import run_fleet_app
        except ModuleNotFoundError as exc:
            if exc.name and not exc.name.startswith("stagelens.tui.fleet"):
                raise
            raise UserError("the fleet screen is not in this build: use --once or --json") from None
        run_fleet_app(query, interval)
        return EXIT_OK
    view = query.fetch()
    if view.error:
        raise CollectError(view.error)
    click.echo(json.dumps(fleet_document(view, limit), indent=2) if as_json else render_fleet(view, limit))
    if not view.rows:
        what = f"no target matches {selector}" + (f" with {', '.join(filters)}" if filters else "")
        raise CollectError(f"{query.prometheus_url}: {what} (is Prometheus scraping the agents under that selector?)")
    return fleet_status(view.rows)


def fleet_status(rows) -> int:
    """The fleet as a monitoring check's status: CRITICAL when a node fires or is down, WARNING
    when one warns."""
    n = counts(rows)
    if n["down"] or n["firing"]:
        return EXIT_CRITICAL
    return EXIT_WARNING if n["warn"] else EXIT_OK
