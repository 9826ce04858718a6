"""A live vLLM or SGLang server as an engine source, read from its own `/metrics`.

Each `snapshot()` scrapes `URL/metrics` under a hard deadline, keeps that scrape, and fills the
engine snapshot from the gauges as they are now and from counter and histogram deltas since the
previous scrape (the window). Label sets are added up (the `engine` label of data parallelism,
SGLang's ranks); ratios are averaged. A figure no exposed metric gives stays None: not observable. A
failed scrape raises `EngineScrapeError` or `ExpositionError` with a one-line reason (the sampler
counts it as a failed `engine` collector). METRICS is the one table of which metric fills which
figure (docs/engines.md is its prose). The snapshot's parts are built over one scrape window by
window.py and scheduler.py; the source keeps the scrapes and what lasts from one window to the next.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stagelens.catalogue import ENGINE_INTAKE
from stagelens.engine_hooks.records.snapshot import (
    WINDOW_S,
    Clock,
    EngineSnapshot,
    Window,
)
from stagelens.engine_hooks.records.vllm_names import (
    CACHE_CONFIG_INFO,
    E2E_REQUEST_LATENCY_SECONDS,
    GENERATION_TOKENS,
    GPU_CACHE_USAGE_PERC,
    GPU_PREFIX_CACHE_HITS,
    GPU_PREFIX_CACHE_QUERIES,
    INTER_TOKEN_LATENCY_SECONDS,
    ITERATION_TOKENS,
    KV_CACHE_USAGE_PERC,
    LORA_REQUESTS_INFO,
    NUM_PREEMPTIONS,
    NUM_REQUESTS_RUNNING,
    NUM_REQUESTS_WAITING,
    NUM_REQUESTS_WAITING_BY_REASON,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    PROMPT_TOKENS,
    REQUEST_GENERATION_TOKENS,
    REQUEST_PROMPT_TOKENS,
    REQUEST_QUEUE_TIME_SECONDS,
    REQUEST_SUCCESS,
    SPEC_DECODE_ACCEPTED_TOKENS,
    SPEC_DECODE_DRAFT_TOKENS,
    TIME_PER_OUTPUT_TOKEN_SECONDS,
    TIME_TO_FIRST_TOKEN_SECONDS,
    total_name,
)
from stagelens.errors import CollectError, UserError
from stagelens.http_client import (
    EXCHANGE_ERRORS,
    AnswerTooLarge,
    AnswerUnfinished,
    exchange_reason,
    redact_url,
    request,
)
from stagelens.printable import printable
from stagelens.sources.inference.figures import Gauges, Inferred, charge_queued, kv_full
from stagelens.sources.inference.step_stall import StepWatch, growing_wait, stalled_wait
from stagelens.sources.inference.wait_bounds import WaitBounds
from stagelens.sources.otlp.llm_request_spans import with_model
from stagelens.sources.scrape.engine_names import generation
from stagelens.sources.scrape.families import histogram_part, label, total, without_rank_copies
from stagelens.sources.scrape.gauge_poll import GaugePoller
from stagelens.sources.scrape.heavy_answers import NEAR_SHARE, HeavyAnswers
from stagelens.sources.scrape.plausible import refuse_implausible, rule_for
from stagelens.sources.scrape.prometheus_text import (
    MAX_SERIES,
    PARSE_DEADLINE_S,
    Exposition,
    ExpositionError,
    ExpositionTooCostly,
    parse_exposition,
    sample_lines,
)
from stagelens.sources.scrape.scheduler import DECIDED, Waits, scheduler_figures, window_waits
from stagelens.sources.scrape.window import (
    Reading,
    Scrape,
    ScrapeWindow,
    cold_path,
    counters_and_health,
    engine_info,
    gauges_of,
    kv_capacity,
    kv_figures,
    kv_usage,
    marked,
    reading,
    scrape_window,
    window_tail,
)

if TYPE_CHECKING:
    from stagelens.sources.kv_events.subscriber import KvEventFigures

log = logging.getLogger(__name__)

KINDS = ("vllm", "sglang")
# a busy engine's, not the sampling interval's: a real vLLM (0.32, CPU build) under load answered in
# 0.6-3 s; a tick waits for it, the next comes after
SCRAPE_TIMEOUT_S = 5.0
# a /metrics body past this is not an engine's: prometheus_text.MAX_SERIES lines of 400 bytes;
# reading 32 MB held the agent's /metrics 300 ms
MAX_BODY_BYTES = 8 * 1024 * 1024


class EngineScrapeError(CollectError):
    """The engine's /metrics could not be read (unreachable, slow, an HTTP error, too large)."""


class EngineAnswerRefused(EngineScrapeError):
    """The engine answered, with what is not read: an HTTP error, more than MAX_BODY_BYTES, or a body
    still coming at the scrape's deadline."""


# with agent.sources.scrape.heavy_answers.ReadPaused: it answered
ANSWER_REFUSED = (EngineAnswerRefused, ExpositionError)


@dataclass(frozen=True, slots=True)
class Metric:
    """One figure stagelens reads, the families that give it (newest name first) and what it
    fills."""
    kind: str                  # gauge | counter | histogram | info
    vllm: tuple[str, ...]
    sglang: tuple[str, ...]
    fills: str


METRICS: dict[str, Metric] = {
    "running": Metric("gauge", (NUM_REQUESTS_RUNNING,),
                      ("sglang:num_running_reqs", "sglang:num_requests_running"),
                      "window.scheduler.running"),
    "waiting": Metric("gauge", (NUM_REQUESTS_WAITING,),
                      ("sglang:num_queue_reqs", "sglang:num_requests_waiting"),
                      "window.scheduler.waiting"),
    "waiting_by_reason": Metric("gauge", (NUM_REQUESTS_WAITING_BY_REASON,), (),
                                "reading.waiting_by_reason (capacity | deferred)"),
    "kv_usage": Metric("gauge", (KV_CACHE_USAGE_PERC, GPU_CACHE_USAGE_PERC),
                       ("sglang:token_usage",),
                       "usage.used_blocks (× num_blocks), reading.kv_usage_ratio"),
    "cache_config": Metric("info", (CACHE_CONFIG_INFO,), (),
                           "engine.block_size, usage.num_blocks, engine.kv_capacity_tokens (labels block_size, "
                           "num_gpu_blocks, kv_cache_size_tokens, mamba_block_size)"),
    "kv_tokens_capacity": Metric("gauge", (), ("sglang:max_total_num_tokens",),
                                 "engine.kv_capacity_tokens"),
    "kv_tokens_used": Metric("gauge", (), ("sglang:num_used_tokens",),
                             "with token_usage, the capacity where max_total_num_tokens is not published"),
    "preemptions": Metric("counter", (total_name(NUM_PREEMPTIONS),), ("sglang:num_retracted_requests_total",),
                          "counters.preemptions_total, reading.preemptions_in_window, "
                          "window.kv.full_while_waiting_share"),
    "prefix_queries": Metric("counter", (total_name(PREFIX_CACHE_QUERIES),
                                         total_name(GPU_PREFIX_CACHE_QUERIES)), (),
                             "with prefix_hits, the prompt share served from the prefix cache (tokens held)"),
    "prefix_hits": Metric("counter",
                          (total_name(PREFIX_CACHE_HITS), total_name(GPU_PREFIX_CACHE_HITS)), (),
                          "the prompt tokens found in the prefix cache"),
    "gpu_execution": Metric("counter", (), ("sglang:gpu_execution_seconds_total",),
                            "window.scheduler.busy_ratio (and while waiting: compute utilisation)"),
    "realtime_tokens": Metric("counter", (), ("sglang:realtime_tokens_total",),
                              "label mode: decode -> decode_tokens_per_s, prefill_compute + decode -> tokens_per_s"),
    "finished": Metric("counter", (total_name(REQUEST_SUCCESS),), (),
                       "counters.requests_finished_total / requests_failed_total, health.finish_reasons"),
    "spec_draft_tokens": Metric("counter", (total_name(SPEC_DECODE_DRAFT_TOKENS),), (),
                                "with spec_accepted_tokens, window.scheduler.spec_acceptance"),
    "spec_accepted_tokens": Metric("counter", (total_name(SPEC_DECODE_ACCEPTED_TOKENS),), (),
                                   "the draft tokens the target model accepted"),
    "queue_time": Metric("histogram", (REQUEST_QUEUE_TIME_SECONDS,),
                         ("sglang:queue_time_seconds", "sglang:waiting_request_latency_seconds"),
                         "window.scheduler.wait_p50_s / wait_p99_s, the decided wait's bounds without spans"),
    "ttft": Metric("histogram", (TIME_TO_FIRST_TOKEN_SECONDS,),
                   ("sglang:time_to_first_token_seconds",), "reading.ttft_p50_s / ttft_p99_s"),
    "inter_token": Metric("histogram", (INTER_TOKEN_LATENCY_SECONDS, TIME_PER_OUTPUT_TOKEN_SECONDS),
                          ("sglang:inter_token_latency_seconds",
                           "sglang:time_per_output_token_seconds"),
                          "reading.inter_token_p50_s / p99_s"),
    "e2e": Metric("histogram", (E2E_REQUEST_LATENCY_SECONDS,),
                  ("sglang:e2e_request_latency_seconds",),
                  "window.scheduler.requests_finished (count), reading.e2e_p50_s / e2e_p99_s"),
    "iteration_tokens": Metric("histogram", (ITERATION_TOKENS,), (),
                               "window.scheduler.steps (count), tokens_per_s (sum)"),
    "generation_tokens": Metric("counter", (total_name(GENERATION_TOKENS),),
                                ("sglang:generation_tokens_total",),
                                "window.scheduler.decode_tokens_per_s"),
    "prompt_tokens": Metric("counter", (total_name(PROMPT_TOKENS),),
                            ("sglang:prompt_tokens_total",),
                            "with the three below, the tokens running requests hold (fragmentation)"),
    "request_prompt_tokens": Metric("histogram", (REQUEST_PROMPT_TOKENS,), (),
                                    "its sum: the prompt tokens of the requests finished"),
    "request_generation_tokens": Metric("histogram", (REQUEST_GENERATION_TOKENS,), (),
                                        "its sum: the output tokens of the requests finished"),
    "lora": Metric("info", (LORA_REQUESTS_INFO,), (),
                   "whether the engine serves LoRA adapters (label max_lora): `deferred` waits are model loads"),
}


def names_for(kind: str) -> dict[str, tuple[str, ...]]:
    """Each figure's families (newest name first) for an engine of `kind` (vllm, sglang)."""
    return {figure: m.vllm if kind == "vllm" else m.sglang for figure, m in METRICS.items()}


# what the gauge poll reads
POLLED = ("running", "waiting", "waiting_by_reason", "kv_usage", "lora", "preemptions")
# requests' lengths kept for block-size advice, as the hooks keep
LENGTHS_SAMPLE = 256


class VllmSource:
    """An engine source for a vLLM (or, with kind="sglang", an SGLang) server at `url`.

    `spans`, when given, is where the engine's per-request traces arrive (an OtlpReceiver the
    engine exports its `llm_request` spans to): the request timelines, the tail and the figures
    only spans give. `kv_events`, when given, is a KvEventsSubscriber on the engine's KV events:
    block-level figures. `poll_s`, when given, reads the queue gauges that often between scrapes
    (agent.sources.scrape.gauge_poll). `start()` and `close()` start and stop them with the
    agent."""

    def __init__(self, url: str, timeout_s: float = SCRAPE_TIMEOUT_S, kind: str = "vllm", window_s: float = WINDOW_S,
                 spans=None, kv_events=None, poll_s: float | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"engine kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not timeout_s > 0:
            raise ValueError(f"the scrape timeout must be positive, got {timeout_s}")
        if not window_s > 0:
            raise ValueError(f"the window must be positive, got {window_s}")
        # to fetch: with its credentials, if any
        self._parts = urllib.parse.urlsplit(url.rstrip("/"))
        self.url = redact_url(url.rstrip("/"))                  # to show: without
        self.metrics_url = self.url + "/metrics"
        self.timeout_s = timeout_s
        self.kind = kind
        self.window_s = window_s
        self.spans = spans
        self.kv_events = kv_events
        self.reading = Reading()
        # the metric names' generation the latest scrape showed
        self.generation: str | None = None
        self._scrapes: deque[Scrape] = deque()
        # when a restart of the engine was seen (monotonic), if one was
        self._started: float | None = None
        # the latest window's waiting seconds by reason
        self._by_reason: dict[str, float] | None = None
        # a step outlasting scrapes (agent.sources.inference.step_stall)
        self._steps = StepWatch()
        self._names_of = names_for(kind)
        self._rules = {name: (figure, rule_for(figure, METRICS[figure].kind))
                       for figure, names in self._names_of.items() for name in names}
        # scrapes whose family for a figure was implausible, by figure
        self.refused: dict[str, int] = {}
        polled = [n for f in POLLED for n in self._names(f)]
        # the pause after an answer too heavy to read often
        self.heavy = HeavyAnswers(self.metrics_url)
        self.poller = GaugePoller(self._fetch, self._polled_gauges, polled, poll_s) if poll_s else None
        self._last_poll: Gauges | None = None   # the poll before, which the next is marked against

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the span receiver and the KV-events subscriber; UserError when one cannot (a
        port taken)."""
        for name, part in (("traces", self.spans), ("KV events", self.kv_events),
                           ("gauge poll", self.poller)):
            if part is None:
                continue
            try:
                part.start()
            except OSError as exc:
                self.close()
                raise UserError(f"cannot listen for the engine's {name}: {exc}") from None

    def close(self) -> None:
        for part in (self.spans, self.kv_events, self.poller):
            if part is not None:
                part.stop()

    # --- the engine source interface (agent/sampler.py) -------------------------------------------
    def snapshot(self, now_monotonic: float) -> EngineSnapshot:
        exposition = self._parse(*self._read_body())
        # every tensor-parallel rank publishes its scheduler's figures: count them once
        if self.kind == "sglang":
            exposition = Exposition({n: without_rank_copies(f) for n, f in exposition.families.items()},
                                    exposition.duplicates)
        # EngineMismatchError: not this engine
        self.generation = generation(exposition, self.kind, self.metrics_url)
        self._refuse_implausible(exposition)
        scrape = Scrape(now_monotonic, exposition, self._gauges(exposition, now_monotonic))
        if self._scrapes and self._scrapes[-1].at >= scrape.at:
            self._scrapes.clear()          # a clock that did not advance gives no window
        elif self._scrapes and self._restarted(self._scrapes[-1].exposition, exposition):
            # counters count from zero again (counter_delta); lengths from here
            self._started = scrape.at
        self._scrapes.append(scrape)
        # the window's base: the newest earlier scrape at least window_s old, else the oldest kept
        while len(self._scrapes) > 2 and self._scrapes[1].at <= scrape.at - self.window_s:
            self._scrapes.popleft()
        base = self._scrapes[0] if len(self._scrapes) > 1 else None
        timelines, lengths = self._window_timelines(base.at if base else scrape.at - self.window_s)
        window = self._window(scrape, base, list(self._scrapes)[1:] or [scrape], timelines, lengths)
        snap, self.reading = self._fill(window)
        return snap

    def recent_timelines(self, since: float | None = None) -> list:
        """Requests the engine's spans told of (none without `spans`), their queue time charged
        by the mix of waiting reasons the gauge poll saw while each waited, else the latest
        window's (a span does not say why its request waited)."""
        return [] if self.spans is None else charge_queued(self._named(self.spans.recent_timelines(since)),
                                                           self._by_reason, self._polled())

    def _restarted(self, before: Exposition, now: Exposition) -> bool:
        """Whether the engine restarted between two scrapes: a counter it never lowers fell."""
        names = self._names("prompt_tokens")
        was, count = total(before.first(names)), total(now.first(names))
        return was is not None and count is not None and count < was

    def _window_timelines(self, start: float) -> tuple[list, list[int] | None]:
        """From one read of the spans kept (by finish): the requests that finished after `start`,
        the window, and the lengths (prompt and output tokens) of the latest LENGTHS_SAMPLE
        finished, window or not."""
        if self.spans is None:
            return [], None
        kept = [t for t in self.spans.recent_timelines() if t.finished is not None]
        # the block-size advice weighs this engine's requests, not those of the one before a restart
        current = kept if self._started is None else [t for t in kept if t.arrival >= self._started]
        lengths = [t.prompt_tokens + t.output_tokens for t in current[-LENGTHS_SAMPLE:]] or None
        return self._named(kept[bisect.bisect_right(kept, start, key=lambda t: t.finished):]), lengths

    def _named(self, timelines: list) -> list:
        """The spans' timelines, the model filled in where a span names none, from the latest
        scrape's."""
        try:
            # one step: the HTTP API reads timelines while the sampler scrapes
            latest = self._scrapes[-1]
        except IndexError:
            return timelines
        return with_model(timelines, self._model(latest.exposition))

    def _model(self, ex: Exposition) -> str | None:
        """The model a scrape names: its families' `model_name` label (SGLang 0.3's `name`)."""
        running = ex.first(self._names("running"))
        return label(running, "model_name") or label(running, "name")

    # --- scraping ---------------------------------------------------------------------------------
    def _fetch(self) -> str:
        """The body of /metrics, for the gauge poll: a heavy one pauses the reads
        (agent.sources.scrape.heavy_answers)."""
        text, heavy = self._read_body()
        if heavy is not None:
            self.heavy.heavy(heavy)
        return text

    def _read_body(self) -> tuple[str, str | None]:
        """The body of /metrics, read within `timeout_s` in all (name lookup, connect, headers
        and body under one deadline, agent.http_client.request: a server dripping its answer
        cannot hold the sampler past it), and why it is heavy if it is near a cap (None if not).
        ReadPaused while a heavy answer's pause lasts."""
        self.heavy.check()
        target = self._parts.path.rstrip("/") + "/metrics"
        try:
            status, reason, body = request("GET", self._parts, target, {"Accept": "text/plain"},
                                           time.monotonic() + self.timeout_s, MAX_BODY_BYTES)
        # an answer that never ends costs the deadline's reading every time, as a body past the cap
        # costs its bytes: both pause the reads
        except (AnswerTooLarge, AnswerUnfinished) as exc:
            why = _reason(exc, self.timeout_s)
            self.heavy.heavy(why)
            raise EngineAnswerRefused(f"{self.metrics_url}: {why}") from None
        except EXCHANGE_ERRORS as exc:
            raise EngineScrapeError(f"{self.metrics_url}: {_reason(exc, self.timeout_s)}") from None
        if not 200 <= status < 300:
            moved = " (redirects are not followed: give --engine-url the engine's own address)" \
                if 300 <= status < 400 else ""
            raise EngineAnswerRefused(f"{self.metrics_url}: HTTP {status} {printable(reason)[:100]}{moved}")
        if body[:2] == b"\x1f\x8b":
            raise ExpositionError("not Prometheus exposition text: a gzip-compressed body, which was not asked "
                                  "for (no Accept-Encoding is sent)")
        if body[:1024].lstrip()[:1] == b"<":
            raise ExpositionError("not Prometheus exposition text: an HTML page (a login page or a proxy in front "
                                  "of the engine? give --engine-url the engine's own address)")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ExpositionError(f"not Prometheus exposition text: not UTF-8 at byte {exc.start}") from None
        return text, _near_a_cap(len(body), sample_lines(text))

    def _parse(self, text: str, heavy: str | None) -> Exposition:
        """The scrape's families; a body near a cap, or whose parse broke or neared its deadline,
        pauses the reads after it."""
        started = time.thread_time()
        try:
            exposition = parse_exposition(text)
        except ExpositionError as exc:
            if isinstance(exc, ExpositionTooCostly):
                self.heavy.heavy(str(exc))
            elif heavy is not None:
                self.heavy.heavy(heavy)
            raise
        spent = time.thread_time() - started
        if heavy is None and spent > NEAR_SHARE * PARSE_DEADLINE_S:
            heavy = f"its parse took {spent:.2f} s of CPU time, near the {PARSE_DEADLINE_S:g} s deadline"
        if heavy is not None:
            self.heavy.heavy(heavy)
        return exposition

    def _refuse_implausible(self, exposition: Exposition) -> None:
        """Leave out the families agent.sources.scrape.plausible refuses; count each, and log its
        first refusal."""
        for refusal in refuse_implausible(exposition, self._rules):
            if refusal.figure not in self.refused:
                log.warning("engine at %s: refused %s (counted in %s{part=\"metrics\"})",
                            self.url, printable(refusal.why), ENGINE_INTAKE.metric)
            self.refused[refusal.figure] = self.refused.get(refusal.figure, 0) + 1

    # --- filling the snapshot ---------------------------------------------------------------------
    def _names(self, figure: str) -> tuple[str, ...]:
        return self._names_of[figure]

    def _gauges(self, ex: Exposition, at: float) -> Gauges:
        return gauges_of(ex, self._names_of, at)

    def _polled_gauges(self, ex: Exposition, at: float) -> Gauges:
        """One poll's gauges, marked against the poll before as it arrives (on the poll's
        thread), so that the samples kept (10 minutes of them) are marked once, not again at
        every scrape and every read."""
        g = self._gauges(ex, at)
        if self._last_poll is not None:
            g = marked(self.kind, [self._last_poll, g])[1]
        self._last_poll = g
        return g

    def _polled(self) -> list[Gauges]:
        """Every sample the gauge poll keeps, each marked as it came (_polled_gauges)."""
        return self.poller.kept() if self.poller else []

    def _window(self, now: Scrape, before: Scrape | None, scrapes: list[Scrape], timelines: list,
                lengths: list[int] | None) -> ScrapeWindow:
        # snapshot reads the generation before the window
        assert self.generation is not None
        polls = None
        if self.poller is not None and before is not None:
            polls = self.poller.samples(before.at, now.at)
        capacity = kv_capacity(now.exposition, self.kind, self._names_of, self.generation)
        return scrape_window(self.kind, self._names_of, now, before, scrapes, polls, capacity,
                             timelines, lengths, with_spans=self.spans is not None)

    def _fill(self, w: ScrapeWindow) -> tuple[EngineSnapshot, Reading]:
        """The snapshot of one window, from its builders (window.py, scheduler.py) and what lasts
        across windows: a step outlasting the scrapes, the KV events, the waiting reasons the tail
        is charged by."""
        now = w.now
        waits = window_waits(w)
        self._by_reason = waits.by_reason
        steps = histogram_part(w.family("iteration_tokens"), "_count")
        still = self._steps.still_for(now.at, steps, bool(now.gauges.running or now.gauges.waiting))
        waits = self._with_stalls(still, waits, now, w.before)
        scheduler, inferred = scheduler_figures(w, waits, still)
        kv, kv_how = kv_figures(w, self._blocks(w))
        tail, tail_how = window_tail(w, waits.by_reason, self._polled())
        engine, engine_how = engine_info(w, self.generation, self._model(now.exposition))
        counters, health = counters_and_health(w)
        inferred.update(kv_how | tail_how | engine_how)
        window = Window(span_s=w.span, kv=kv, scheduler=scheduler, cold_path=cold_path(w),
                        tail=tail)
        snap = EngineSnapshot(
            clock=Clock(monotonic=now.at, wall=time.time()), engine=engine, usage=kv_usage(w),
            window=window, counters=counters, health=health, inferred=inferred or None,
            intake=self._intake())
        return snap, reading(w)

    def _blocks(self, w: ScrapeWindow) -> KvEventFigures | None:
        """What the engine's KV events said in the window; None without a subscriber."""
        if self.kv_events is None:
            return None
        since = w.before.at if w.before else w.now.at - self.window_s
        return self.kv_events.figures(since_monotonic=since)

    def _with_stalls(self, still: float | None, waits: Waits, now: Scrape,
                     before: Scrape | None) -> Waits:
        """The window's waits with what a step outlasting the scrapes says of the decided-wait P99
        (agent.sources.inference.step_stall): while no step finishes, the window's figures are a
        floor only, with a wait seen growing; once steps move again, a wait seen growing in the
        window still bounds it from below."""
        decided, bounds = waits.decided, waits.bounds
        seen = decided if decided is not None else None if bounds is None or not bounds.at_least else \
            Inferred(bounds.at_least, bounds.how)
        if still is not None:
            full = kv_full(now.gauges)
            growing = growing_wait(still, now.gauges.waiting, waits.ordinary_step, full)
            if growing is not None:
                self._steps.saw_growing(now.at, growing.value, growing.how)
        carried = self._steps.grown_since(before.at if before else now.at)
        if still is not None:
            floor = stalled_wait(still, kv_full(now.gauges), [seen, carried])
        elif carried is not None and carried.value > (seen.value if seen is not None else 0.0):
            floor = carried
        else:
            return waits
        floor_bounds = None if floor.value is None else WaitBounds(floor.value, None, floor.how)
        return dataclasses.replace(waits, decided=None, bounds=floor_bounds,
                                   inferred={**waits.inferred, DECIDED: floor.how})

    def _intake(self) -> dict[str, float] | None:
        """What the span receiver and the KV-events subscriber took in and dropped, and the
        scrapes' families refused as implausible, so far."""
        out: dict[str, float] = {f"metrics.refused_{k}": v for k, v in self.refused.items()}
        out.update({f"metrics.{k}": v for k, v in self.heavy.counts.items() if v})
        if self.spans is not None:
            out.update({f"traces.{k}": v for k, v in self.spans.counts.items()})
        if self.kv_events is not None:
            out.update({f"kv_events.{k}": v for k, v in self.kv_events.totals.items()})
        if self.poller is not None:
            out.update({f"gauge_poll.{k}": v for k, v in self.poller.counts.items()})
        return out or None


# --- reading families -----------------------------------------------------------------------------
def _near_a_cap(size: int, series: int) -> str | None:
    """Why a body of `size` bytes and `series` sample lines is heavy (past NEAR_SHARE of a cap),
    or None."""
    if size > NEAR_SHARE * MAX_BODY_BYTES:
        return f"a body of {size} bytes, past half of the {MAX_BODY_BYTES} a scrape reads"
    if series > NEAR_SHARE * MAX_SERIES:
        return f"a body of {series} series, {'more than' if series > MAX_SERIES else 'past half of'} the " \
               f"{MAX_SERIES} a scrape reads"
    return None


def _reason(exc: Exception, timeout_s: float) -> str:
    """One line saying why the engine could not be read."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the engine running there?)"
    return printable(exchange_reason(exc, timeout_s, MAX_BODY_BYTES))[:200]
