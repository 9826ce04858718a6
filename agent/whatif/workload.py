"""The workload a node served, as it was: each request's arrival, prompt and output length and
model, with what was observed of the engine beside it (its settings, its steps and model loads,
its KV use), read from a recorded bundle (`--replay FILE`) or from a running agent (`--connect
URL`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.engine_hooks.records.timeline_reading import read_timelines
from stagelens.errors import CollectError, UserError
from stagelens.replay_limits import MAX_REPLAY_MODELS, MAX_REPLAY_OUTPUT_TOKENS, MAX_REPLAY_PROMPT_TOKENS

WINDOW_PATH = "/api/v1/whatif/window"


@dataclass(frozen=True)
class ServedRequest:
    request_id: str
    model: str
    arrival: float                  # monotonic seconds, the engine's clock
    prompt_tokens: int
    output_tokens: int
    first_token: float | None = None
    finished: float | None = None
    preemptions: int = 0
    finish_reason: str | None = None


@dataclass
class Observed:
    """What replay needs of a recording."""
    source: str
    requests: list[ServedRequest]
    # the bundled engine's settings (bundle.py engine_config)
    engine_config: dict | None = None
    steps: list[dict] = field(default_factory=list)
    loads: list[dict] = field(default_factory=list)
    kv_used_ratio_mean: float | None = None    # the frames' KV blocks in use, over the run
    # for the diagnosis's own fix (`--recommended`), the engine info
    frames: list = field(default_factory=list)
    # each read and checked once, where it came in
    timelines: list[RequestTimeline] = field(default_factory=list)

    def engine_info(self):
        """The last frame's engine description (records.snapshot.EngineInfo) and its KV blocks,
        or Nones."""
        for frame in reversed(self.frames):
            if frame.engine is not None:
                usage = frame.engine.usage
                return frame.engine.engine, usage.num_blocks if usage is not None else None
        return None, None

    @property
    def longest_request(self) -> int:
        """The most tokens a recorded request held: its prompt and output."""
        return max(r.prompt_tokens + r.output_tokens for r in self.requests)

    @property
    def window(self) -> tuple[float, float]:
        """While arrivals ran: the throughput's window, the same for what was measured and what
        is predicted."""
        return self.requests[0].arrival, self.requests[-1].arrival


def from_timelines(source: str, timelines: list[RequestTimeline]) -> list[ServedRequest]:
    """Requests from timelines: those with a prompt, that ran."""
    out = []
    for t in timelines:
        if t.prompt_tokens <= 0:
            continue
        if t.finish_reason in ("error",) and not t.output_tokens:
            continue            # it never ran (its model could not load): nothing to replay
        out.append(ServedRequest(t.request_id, t.model or "model-0", float(t.arrival),
                                 t.prompt_tokens, max(t.output_tokens, 1), t.first_token,
                                 t.finished, t.preemptions, t.finish_reason))
    out.sort(key=lambda r: r.arrival)
    if not out:
        raise UserError(f"{source}: no finished request with its arrival and token counts: nothing to replay")
    return out


def from_bundle(path: str) -> Observed:
    from stagelens.bundle import read_bundle_warned

    return observed_in(read_bundle_warned(path))


def from_agent(url: str) -> Observed:
    """The recent window of a running `stagelens serve` (its whatif window and its frames)."""
    from stagelens.frame import Frame, FrameError
    from stagelens.http_client import get_json, redact_url

    window = get_json(url, WINDOW_PATH, timeout=15.0)
    frames_data = get_json(url, "/api/v1/frames", timeout=15.0)
    shown = redact_url(url.rstrip("/"))
    if not isinstance(window, dict) or not isinstance(frames_data, list):
        raise CollectError(f"{shown}: the answer is not a stagelens agent's")
    try:
        frames = [Frame.from_dict(f) for f in frames_data]
    except (FrameError, TypeError) as exc:
        raise CollectError(f"{shown}/api/v1/frames: a frame could not be read ({exc})") from None
    return observed_from_window(shown + WINDOW_PATH, window, frames)


def observed_from_window(source: str, window: dict, frames: list) -> Observed:
    """From an agent's whatif window (agent.runtime.AgentRuntime.whatif_window, the lab host's
    `whatif_window`), checked as a bundle's records are (agent/recording_checks.py): CollectError
    naming `source` and the field."""
    from stagelens.recording_checks import RecordingProblem, window_timelines

    try:
        timelines = window_timelines(window)
    except RecordingProblem as exc:
        raise CollectError(f"{source}: {exc}") from None
    return _observed(source, timelines, window.get("engine_config"),
                     window.get("steps") or [], window.get("loads") or [], frames)


class FrameDigest:
    """What replay reads of the frames, taken a frame at a time (a bundle streamed: see
    agent/bundle.py `stream_bundle`): the KV blocks in use over the run, the last frame that holds
    the engine (its settings and KV blocks, `Observed.engine_info`) and the last that names the
    node's GPUs (the prior's, agent/whatif/wider.py)."""

    def __init__(self) -> None:
        self.used_sum, self.used_count = 0.0, 0
        self.last_engine = self.last_node = None

    def add(self, frame) -> None:
        usage = frame.engine.usage if frame.engine is not None else None
        if usage is not None and usage.num_blocks and usage.used_blocks is not None:
            self.used_sum += usage.used_blocks / usage.num_blocks
            self.used_count += 1
        if frame.engine is not None:
            self.last_engine = frame
        if frame.gpus():
            self.last_node = frame

    @property
    def frames(self) -> list:
        """The frames kept: what Observed reads of a bundle's frames besides the KV mean."""
        kept = [f for f in (self.last_node, self.last_engine) if f is not None]
        return list({id(f): f for f in kept}.values())

    @property
    def kv_used_ratio_mean(self) -> float | None:
        return self.used_sum / self.used_count if self.used_count else None


def observed_in(bundle, digest: FrameDigest | None = None) -> Observed:
    """What replay needs of a bundle already read (agent.bundle.Bundle); of a bundle streamed, its
    frames' `digest` (the bundle holds none)."""
    frames = bundle.frames if digest is None else digest.frames
    digest = digest or _digest(frames)
    return _observed(bundle.path, read_timelines(bundle.timelines), bundle.engine_config,
                     bundle.steps, bundle.loads, frames, digest)


def _digest(frames: list) -> FrameDigest:
    digest = FrameDigest()
    for frame in frames:
        digest.add(frame)
    return digest


def _observed(source: str, timelines: list[RequestTimeline], engine_config: dict | None,
              steps: list[dict], loads: list[dict], frames: list,
              digest: FrameDigest | None = None) -> Observed:
    _check_bounds(source, timelines)
    digest = digest or _digest(frames)
    return Observed(source, from_timelines(source, timelines), engine_config, steps, loads,
                    digest.kv_used_ratio_mean, frames, timelines)


def _check_bounds(source: str, timelines: list[RequestTimeline]) -> None:
    """The limits of a replay (agent/replay_limits.py; a bundle's size and timelines are bounded
    as it is read, an agent's answer by its bytes), before the fit and the simulation cost what
    they grow to."""
    models = {t.model for t in timelines}
    if len(models) > MAX_REPLAY_MODELS:
        raise UserError(f"{source}: the requests name {len(models):,} models, more than the "
                        f"{MAX_REPLAY_MODELS} an engine serves")
    for what, limit in (("output", MAX_REPLAY_OUTPUT_TOKENS), ("prompt", MAX_REPLAY_PROMPT_TOKENS)):
        tokens = sum(getattr(t, f"{what}_tokens") for t in timelines)
        if tokens > limit:
            raise UserError(f"{source}: the requests hold {tokens:,} {what} tokens, past the "
                            f"{limit:,} a replay simulates: record a shorter window")


def scaled(requests: list[ServedRequest], factor: float) -> list[ServedRequest]:
    """The same requests arriving `factor` times as fast (the gaps from the first arrival divided
    by it): a Poisson workload at a higher rate with the same draws, as the lab's seeded workload
    gives one."""
    if factor == 1:
        return requests
    t0 = requests[0].arrival
    return [dataclasses.replace(r, arrival=t0 + (r.arrival - t0) / factor, first_token=None,
                                finished=None)
            for r in requests]
