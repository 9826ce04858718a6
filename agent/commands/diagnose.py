"""`stagelens diagnose`: one verdict, and its exit status (agent.vocabulary.EXIT_CODES)."""

from __future__ import annotations

import json
import sys
from typing import NoReturn

import click

from stagelens.commands.flags import (
    OUTSIDE_ENGINES,
    OutsideFlags,
    diagnosis_config,
    diagnosis_options,
    engine_url_option,
    open_engine_source,
)
from stagelens.commands.target import Connect, Replay, live_only, read_target, target_options
from stagelens.diagnosis.model import Diagnosis, DiagnosisError
from stagelens.errors import EXIT_UNKNOWN, CollectError, UserError
from stagelens.numbers import Number
from stagelens.vocabulary import EXIT_CODES

EXIT_STATUS = ("Exit status, as a monitoring check's: "
               + ", ".join(f"{code} {verdict}" for verdict, code in EXIT_CODES.items() if code != EXIT_UNKNOWN)
               + f" (the verdict); {EXIT_UNKNOWN} unknown: nothing to diagnose, a server that did not answer, "
               "bad input or an internal error.")


@click.command(epilog=EXIT_STATUS)
@target_options("Diagnose a recorded bundle.", "Ask a running `stagelens serve` (its base URL).")
@click.option("--duration", type=Number(min=0, max=3600, min_open=True, unit="s"), default=3.0,
              show_default=True, help="Without --replay or --connect: seconds to sample this node.")
@click.option("--engine", "engine_kind", type=click.Choice(["none", *OUTSIDE_ENGINES]),
              default="none", show_default=True,
              help="Without --replay or --connect: also read this engine at --engine-url.")
@engine_url_option
@click.option("--discover", is_flag=True,
              help="Without --replay or --connect: also judge every vLLM and SGLang server found "
              "on this node (`stagelens engines`), each on its own, with the GPUs it holds.")
@diagnosis_options
@click.option("--json", "as_json", is_flag=True, help="Print the diagnosis as JSON.")
@click.pass_context
def diagnose(ctx: click.Context, replay_path: str | None, url: str | None, duration: float, engine_kind: str,
             outside: OutsideFlags, discover: bool, config_path, thresholds, as_json: bool) -> int:
    """Say which stage is firing, with its evidence, recommendations and runbook."""
    from stagelens.diagnosis.evaluate import NOTHING_OBSERVED
    from stagelens.diagnosis.whole_run import judge_run

    target = read_target(replay_path, url)
    if isinstance(target, Connect) and (config_path or thresholds):
        raise UserError("--config/--threshold: with --connect the server judges with its own "
                        "settings (give them to `stagelens serve`; `tui --connect` accepts them on "
                        "top)")
    live_only(target, ["--engine"] if engine_kind != "none" else [], "an engine is read live")
    engines_given = (("--engine-url", outside.engine_urls), ("--discover", discover))
    live_only(target, [f for f, given in engines_given if given], "an engine is read live")
    config = diagnosis_config(config_path, thresholds)
    if len(outside.engine_urls) > 1 or discover:
        return _diagnose_engines(ctx, engine_kind, outside, discover, duration, config, as_json)
    engine_source = open_engine_source(engine_kind, outside)
    if isinstance(target, Connect):
        served = fetch_diagnosis(target.url, unknown_too=True)
        if served.verdict == "unknown":
            why = served.unavailable or "nothing to diagnose yet"
            _refuse_unknown(served, as_json,
                            f"{target.url}: {why[:300]} (the server's verdict is 'unknown')")
        return _print(served, as_json)
    if isinstance(target, Replay):
        run, bundle, digest = _judge_bundle(target.path, config)
    else:
        from stagelens.commands.engine_frames import engine_frames
        from stagelens.node_sampling import sample_for

        frames = engine_frames(sample_for((ctx.obj or {}).get("nvml_snapshot"), duration,
                                          engine_source=engine_source), engine_source)
        run = judge_run(frames, [], config)
    result = run.diagnosis
    if result.unavailable or result.verdict == "unknown":
        hint = ("" if isinstance(target, Replay) or engine_source
                else " (use --connect URL of a `stagelens serve`, or --replay FILE)")
        _refuse_unknown(result, as_json, f"{result.unavailable or NOTHING_OBSERVED}{hint}")
    effect = None
    if isinstance(target, Replay):
        from stagelens.whatif.fix_effect import predicted_effect
        from stagelens.whatif.workload import observed_in

        effect = predicted_effect(lambda: observed_in(bundle, digest), result)
    return _print(result, as_json, run if isinstance(target, Replay) else None, effect)


def _judge_bundle(path: str, config):
    """(the run judged, the bundle's records but its frames, its frames' digest for the fix's
    prediction): the frames streamed through the judgment as they are read, so that a replay
    holds its diagnosis window, not the file (a 400 MB bundle once peaked at 1 GB)."""
    from stagelens.bundle import stream_bundle
    from stagelens.diagnosis.whole_run import RunJudge
    from stagelens.engine_hooks.records.timeline import RequestTimeline
    from stagelens.whatif.workload import FrameDigest

    bundle, frames = stream_bundle(path)
    judge, digest = RunJudge(config), FrameDigest()
    for frame in frames:
        judge.add(frame)
        digest.add(frame)
    if bundle.torn_tail:
        print(f"stagelens: warning: {bundle.torn_tail}", file=sys.stderr)
    if not judge.frames:
        raise UserError(f"{path}: the bundle holds no frames")
    run = judge.finish([RequestTimeline.from_dict(t) for t in bundle.timelines])
    return run, bundle, digest


def _diagnose_engines(ctx: click.Context, kind: str, outside: OutsideFlags, discover: bool,
                      duration: float, config, as_json: bool) -> int:
    """Several engines named, or found: each judged on its own, the node's verdict the worst
    judged; exit 3 with a one-line reason only when none could be."""
    from stagelens.commands.diagnose_engines import (
        diagnose_engines,
        discovered_engines,
        named_engines,
        render_node,
    )

    engines, notes = named_engines(kind, outside), []
    if discover:
        engines, notes = discovered_engines(engines)
    if not engines:
        raise CollectError(f"nothing to diagnose: {'; '.join(notes)} (name one with --engine-url)")
    node = diagnose_engines(engines, (ctx.obj or {}).get("nvml_snapshot"), duration, config, notes)
    click.echo(json.dumps(node.to_dict(), indent=2) if as_json else render_node(node))
    if node.worst is None:
        raise CollectError(f"none of the {len(engines)} engines could be judged: "
                           + "; ".join(f"{e.name}: {e.error}" for e in node.engines)[:400])
    return node.exit_code


def _refuse_unknown(result: Diagnosis, as_json: bool, why: str) -> NoReturn:
    """A diagnosis that could not be judged: printed all the same (each stage, what could not be
    judged and why), then refused in one line on stderr, exit 3."""
    _print(result, as_json)
    raise CollectError(why)


def _print(result: Diagnosis, as_json: bool, run=None, effect: dict | None = None) -> int:
    """The diagnosis (and the run's account and the fix's predicted effect, from a bundle) as
    JSON or text, whether judged here or fetched from a server; its verdict's exit status."""
    if as_json:
        document = result.to_dict() if run is None else {**result.to_dict(), "run": run.to_dict()}
        if effect is not None:
            document["fix"] = effect
        click.echo(json.dumps(document, indent=2))
    else:
        from stagelens.diagnosis_text import render_diagnosis, render_run
        from stagelens.printable import printable_lines

        # fetched from a server: its text is another's
        click.echo(printable_lines(render_diagnosis(result)))
        if effect is not None:
            from stagelens.whatif.fix_effect import render_effect

            click.echo(render_effect(effect))
        if run is not None:
            click.echo("\n" + printable_lines(render_run(run)))
    return result.exit_code


def fetch_diagnosis(url: str, unknown_too: bool = False) -> Diagnosis:
    """The server's diagnosis; CollectError when its answer is none, or (unless `unknown_too`)
    has nothing to say."""
    from stagelens.http_client import get_json

    data = get_json(url, "/api/v1/diagnosis")
    try:
        result = Diagnosis.from_dict(data)
    except DiagnosisError as exc:
        raise CollectError(f"{url}: the answer is not a stagelens diagnosis ({exc})") from None
    if result.verdict == "unknown" and not unknown_too:
        why = result.unavailable or "nothing to diagnose yet"
        raise CollectError(f"{url}: {why[:300]} (the server's verdict is 'unknown')")
    return result
