"""`stagelens whatif --replay FILE [--set FLAG=VALUE ...] [--recommended] [--json]`: the workload a node served,
replayed through a simulator of the engine calibrated on its own steps, under today's flags and candidates."""

from __future__ import annotations

import json

import click


@click.command()
@click.option("--replay", "replay_path", type=click.Path(dir_okay=False), required=True,
              help="A bundle recorded by `stagelens lab --record` or `stagelens record`.")
@click.option("--set", "sets", multiple=True, metavar="FLAG=VALUE",
              help="A candidate's change, the lab's flag name (max-num-seqs=16, enable-chunked-prefill=true); "
                   "repeat for several changes in one candidate.")
@click.option("--recommended", is_flag=True, help="Also predict the diagnosis's own fix.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def whatif(replay_path: str, sets: tuple[str, ...], recommended: bool, as_json: bool) -> int:
    """Predict TTFT, TPOT, latency, throughput and KV use under other engine flags, from a recorded run."""
    from agent.whatif.recommended import recommended_changes
    from agent.whatif.report import render, today_settings, what_if
    from agent.whatif.settings import parse_set
    from agent.whatif.workload import from_bundle

    changes = parse_set(sets)
    observed = from_bundle(replay_path)
    settings = today_settings(observed)
    candidates = [changes] if changes else []
    if recommended:
        candidates.append(recommended_changes(observed))
    result = what_if(observed, candidates, settings)
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else render(result))
    return 0
