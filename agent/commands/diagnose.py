"""`stagelens diagnose`: one verdict. Exit 0 ok, 1 warn, 2 firing, 3 could not collect."""

from __future__ import annotations

import json
import time

import click

from agent.commands.diagnosis_flags import diagnosis_config, diagnosis_options
from agent.errors import CollectError, UserError


@click.command()
@click.option("--replay", "replay_path", type=click.Path(dir_okay=False), help="Diagnose a recorded bundle.")
@click.option("--connect", "url", help="Ask a running `stagelens serve` (its base URL).")
@click.option("--duration", type=float, default=3.0, show_default=True,
              help="Without --replay or --connect: seconds to sample this node.")
@diagnosis_options
@click.option("--json", "as_json", is_flag=True, help="Print the diagnosis as JSON.")
@click.pass_context
def diagnose(ctx: click.Context, replay_path: str | None, url: str | None, duration: float, config_path, thresholds,
             as_json: bool) -> int:
    """Say which stage is firing, with its evidence, recommendations and runbook."""
    from agent.diagnosis import diagnose as diagnose_frames
    from agent.diagnosis.model import Diagnosis

    if replay_path and url:
        raise UserError("--replay and --connect are alternatives: give one")
    if url and (config_path or thresholds):
        raise UserError("--config/--threshold: with --connect the server judges with its own settings "
                        "(give them to `stagelens serve`; `tui --connect` accepts them on top)")
    config = diagnosis_config(config_path, thresholds)
    if url:
        data = fetch_diagnosis(url)
        return _emit(data, as_json, {"ok": 0, "warn": 1, "firing": 2}.get(data.get("verdict"), 3))
    if replay_path:
        from agent.record import read_bundle

        frames = read_bundle(replay_path).frames
        if not frames:
            raise UserError(f"{replay_path}: the bundle holds no frames")
    else:
        frames = _sample_node((ctx.obj or {}).get("nvml_snapshot"), duration)
    result: Diagnosis = diagnose_frames(frames, config)
    if result.verdict == "unknown" or not any(f.engine or f.gpus() for f in frames):
        raise CollectError("nothing to diagnose: no engine is observed and no GPU signal could be read "
                           "(use --connect URL of a `stagelens serve`, or --replay FILE)")
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        from agent.render import render_diagnosis

        click.echo(render_diagnosis(result))
    return result.exit_code


def _emit(data: dict, as_json: bool, code: int) -> int:
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"verdict: {data.get('verdict')} — root stage: {data.get('root_stage')}")
        for s in data.get("stages", []):
            click.echo(f"[{s['state']}] {s['stage']}: {s['explanation']}")
    return code


def fetch_diagnosis(url: str) -> dict:
    from agent.remote import get_json

    data = get_json(url, "/api/v1/diagnosis")
    if not isinstance(data, dict) or "verdict" not in data:
        raise CollectError(f"{url}: the answer is not a stagelens diagnosis")
    return data


def _sample_node(snapshot: str | None, duration: float) -> list:
    from agent.sampler import Sampler
    from probes.sample import NodeProbe, open_backend

    if duration <= 0:
        raise UserError(f"--duration: must be positive, got {duration}")
    try:
        probe = NodeProbe(open_backend(snapshot))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    sampler = Sampler(node_probe=probe, interval=1.0)
    try:
        deadline = time.monotonic() + duration
        while True:
            sampler.tick()
            if time.monotonic() + 1.0 > deadline:
                break
            time.sleep(1.0)
    finally:
        probe.close()
    return sampler.frames()
