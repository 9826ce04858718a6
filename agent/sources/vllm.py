"""A live vLLM or SGLang server as an engine source, read from its own `/metrics`.

Each `snapshot()` scrapes `URL/metrics` under a hard deadline, keeps that scrape, and fills the engine
snapshot from the gauges as they are now and from counter and histogram deltas since the previous
scrape (the window). Label sets are added up (the `engine` label of data parallelism, SGLang's ranks);
ratios are averaged. A figure no exposed metric gives stays None: not observable. A failed scrape
raises `EngineScrapeError` or `ExpositionError` with a one-line reason (the sampler counts it as a
failed `engine` collector). METRICS is the one table of which metric fills which figure
(docs/engines.md is its prose).
"""

from __future__ import annotations

import bisect
import logging
import math
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass

from stagelens.engine_hooks.records.attribution import tail as attribution_tail
from stagelens.engine_hooks.records.snapshot import (
    WINDOW_S,
    Clock,
    ColdPathFigures,
    Counters,
    EngineInfo,
    EngineSnapshot,
    Health,
    KvFigures,
    KvUsage,
    SchedulerFigures,
    Window,
    WindowTail,
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
    TIME_PER_OUTPUT_TOKEN_SECONDS,
    TIME_TO_FIRST_TOKEN_SECONDS,
    total_name,
)
from stagelens.errors import CollectError, UserError
from stagelens.http_client import EXCHANGE_ERRORS, AnswerTooLarge, exchange_reason, redact_url, request
from stagelens.printable import printable
from stagelens.sources.engine_names import generation
from stagelens.sources.families import (
    HistogramDelta,
    by_label,
    counter_delta,
    highest_bound,
    histogram_delta,
    histogram_part,
    label,
    length_biased_mean,
    mean,
    quantile,
    quantile_said,
    total,
    values,
    without_rank_copies,
)
from stagelens.sources.gauge_poll import POLL_S, GaugePoller
from stagelens.sources.heavy_answers import NEAR_SHARE, HeavyAnswers
from stagelens.sources.inference import (
    Counted,
    Gauges,
    Inferred,
    KvCapacity,
    charge_queued,
    decided_wait_p99,
    fragmentation,
    full_while_waiting,
    head_of_line_share,
    held_tokens,
    kv_full,
    mark_preemptions,
    ordinary_step_bounds,
    pinned_batch,
    queued_mean_wait,
    step_period,
    wait_seconds_by_reason,
    waiting_share,
)
from stagelens.sources.llm_request_spans import with_model
from stagelens.sources.plausible import refuse_implausible, rule_for
from stagelens.sources.prometheus_text import (
    MAX_SERIES,
    PARSE_DEADLINE_S,
    Exposition,
    ExpositionError,
    ExpositionTooCostly,
    parse_exposition,
    sample_lines,
)
from stagelens.sources.step_stall import StepWatch, growing_wait, stalled_wait
from stagelens.sources.wait_bounds import WaitBounds, queue_wait_p99_bounds

log = logging.getLogger(__name__)

KINDS = ("vllm", "sglang")
SCRAPE_TIMEOUT_S = 5.0                # a busy engine's, not the sampling interval's: a real vLLM (0.32, CPU build)
                                      # under load answered in 0.6-3 s; a tick waits for it, the next comes after
MAX_BODY_BYTES = 8 * 1024 * 1024      # a /metrics body past this is not an engine's: prometheus_text.MAX_SERIES
                                      # lines of 400 bytes; reading 32 MB held the agent's /metrics 300 ms


class EngineScrapeError(CollectError):
    """The engine's /metrics could not be read (unreachable, slow, an HTTP error, too large)."""


class EngineAnswerRefused(EngineScrapeError):
    """The engine answered, with what is not read: an HTTP error, or more than MAX_BODY_BYTES."""


ANSWER_REFUSED = (EngineAnswerRefused, ExpositionError)   # with agent.sources.heavy_answers.ReadPaused: it answered


@dataclass(frozen=True, slots=True)
class Metric:
    """One figure stagelens reads, the families that give it (newest name first) and what it fills."""
    kind: str                  # gauge | counter | histogram | info
    vllm: tuple[str, ...]
    sglang: tuple[str, ...]
    fills: str


METRICS: dict[str, Metric] = {
    "running": Metric("gauge", (NUM_REQUESTS_RUNNING,),
                      ("sglang:num_running_reqs", "sglang:num_requests_running"), "window.scheduler.running"),
    "waiting": Metric("gauge", (NUM_REQUESTS_WAITING,),
                      ("sglang:num_queue_reqs", "sglang:num_requests_waiting"), "window.scheduler.waiting"),
    "waiting_by_reason": Metric("gauge", (NUM_REQUESTS_WAITING_BY_REASON,), (),
                                "reading.waiting_by_reason (capacity | deferred)"),
    "kv_usage": Metric("gauge", (KV_CACHE_USAGE_PERC, GPU_CACHE_USAGE_PERC), ("sglang:token_usage",),
                       "usage.used_blocks (× num_blocks), reading.kv_usage_ratio"),
    "cache_config": Metric("info", (CACHE_CONFIG_INFO,), (),
                           "engine.block_size, usage.num_blocks, engine.kv_capacity_tokens (labels block_size, "
                           "num_gpu_blocks, kv_cache_size_tokens, mamba_block_size)"),
    "kv_tokens_capacity": Metric("gauge", (), ("sglang:max_total_num_tokens",), "engine.kv_capacity_tokens"),
    "kv_tokens_used": Metric("gauge", (), ("sglang:num_used_tokens",),
                             "with token_usage, the capacity where max_total_num_tokens is not published"),
    "preemptions": Metric("counter", (total_name(NUM_PREEMPTIONS),), ("sglang:num_retracted_requests_total",),
                          "counters.preemptions_total, reading.preemptions_in_window, "
                          "window.kv.full_while_waiting_share"),
    "prefix_queries": Metric("counter", (total_name(PREFIX_CACHE_QUERIES), total_name(GPU_PREFIX_CACHE_QUERIES)), (),
                             "with prefix_hits, the prompt share served from the prefix cache (tokens held)"),
    "prefix_hits": Metric("counter", (total_name(PREFIX_CACHE_HITS), total_name(GPU_PREFIX_CACHE_HITS)), (),
                          "the prompt tokens found in the prefix cache"),
    "gpu_execution": Metric("counter", (), ("sglang:gpu_execution_seconds_total",),
                            "window.scheduler.busy_ratio (and while waiting: compute utilisation)"),
    "realtime_tokens": Metric("counter", (), ("sglang:realtime_tokens_total",),
                              "label mode: decode -> decode_tokens_per_s, prefill_compute + decode -> tokens_per_s"),
    "finished": Metric("counter", (total_name(REQUEST_SUCCESS),), (),
                       "counters.requests_finished_total / requests_failed_total, health.finish_reasons"),
    "queue_time": Metric("histogram", (REQUEST_QUEUE_TIME_SECONDS,),
                         ("sglang:queue_time_seconds", "sglang:waiting_request_latency_seconds"),
                         "window.scheduler.wait_p50_s / wait_p99_s, the decided wait's bounds without spans"),
    "ttft": Metric("histogram", (TIME_TO_FIRST_TOKEN_SECONDS,), ("sglang:time_to_first_token_seconds",),
                   "reading.ttft_p50_s / ttft_p99_s"),
    "inter_token": Metric("histogram", (INTER_TOKEN_LATENCY_SECONDS, TIME_PER_OUTPUT_TOKEN_SECONDS),
                          ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
                          "reading.inter_token_p50_s / p99_s"),
    "e2e": Metric("histogram", (E2E_REQUEST_LATENCY_SECONDS,), ("sglang:e2e_request_latency_seconds",),
                  "window.scheduler.requests_finished (count), reading.e2e_p50_s / e2e_p99_s"),
    "iteration_tokens": Metric("histogram", (ITERATION_TOKENS,), (),
                               "window.scheduler.steps (count), tokens_per_s (sum)"),
    "generation_tokens": Metric("counter", (total_name(GENERATION_TOKENS),), ("sglang:generation_tokens_total",),
                                "window.scheduler.decode_tokens_per_s"),
    "prompt_tokens": Metric("counter", (total_name(PROMPT_TOKENS),), ("sglang:prompt_tokens_total",),
                            "with the three below, the tokens running requests hold (fragmentation)"),
    "request_prompt_tokens": Metric("histogram", (REQUEST_PROMPT_TOKENS,), (),
                                    "its sum: the prompt tokens of the requests finished"),
    "request_generation_tokens": Metric("histogram", (REQUEST_GENERATION_TOKENS,), (),
                                        "its sum: the output tokens of the requests finished"),
    "lora": Metric("info", (LORA_REQUESTS_INFO,), (),
                   "whether the engine serves LoRA adapters (label max_lora): `deferred` waits are model loads"),
}

POLLED = ("running", "waiting", "waiting_by_reason", "kv_usage", "lora", "preemptions")   # what the gauge poll reads
FINISHED_OK = ("stop", "length")      # vLLM's finished_reason values that are successes
LENGTHS_SAMPLE = 256                  # requests' lengths kept for block-size advice, as the hooks keep


@dataclass(frozen=True, slots=True)
class Reading:
    """What the scrape tells beyond the snapshot's fields (None: not observable, or no data in the window).
    A quantile the buckets cannot place is None, and its `said` text gives the bound ("< 0.3 s", ">= 30 s")."""
    kv_usage_ratio: float | None = None
    kv_capacity_tokens: float | None = None
    waiting_by_reason: dict[str, float] | None = None
    preemptions_in_window: float | None = None
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    inter_token_p50_s: float | None = None
    inter_token_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None
    said: dict[str, str] | None = None     # "ttft_p99" -> ">= 30 s", as far as the buckets place each quantile


@dataclass(frozen=True, slots=True)
class _Scrape:
    at: float                 # monotonic seconds
    exposition: Exposition
    gauges: Gauges


class VllmSource:
    """An engine source for a vLLM (or, with kind="sglang", an SGLang) server at `url`.

    `spans`, when given, is where the engine's per-request traces arrive (an OtlpReceiver the engine
    exports its `llm_request` spans to): the request timelines, the tail and the figures only spans give.
    `kv_events`, when given, is a KvEventsSubscriber on the engine's KV events: block-level figures.
    `poll_s`, when given, reads the queue gauges that often between scrapes (agent.sources.gauge_poll).
    `start()` and `close()` start and stop them with the agent."""

    def __init__(self, url: str, timeout_s: float = SCRAPE_TIMEOUT_S, kind: str = "vllm", window_s: float = WINDOW_S,
                 spans=None, kv_events=None, poll_s: float | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"engine kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not timeout_s > 0:
            raise ValueError(f"the scrape timeout must be positive, got {timeout_s}")
        if not window_s > 0:
            raise ValueError(f"the window must be positive, got {window_s}")
        self._parts = urllib.parse.urlsplit(url.rstrip("/"))    # to fetch: with its credentials, if any
        self.url = redact_url(url.rstrip("/"))                  # to show: without
        self.metrics_url = self.url + "/metrics"
        self.timeout_s = timeout_s
        self.kind = kind
        self.window_s = window_s
        self.spans = spans
        self.kv_events = kv_events
        self.reading = Reading()
        self.generation: str | None = None     # the metric names' generation the latest scrape showed
        self._scrapes: deque[_Scrape] = deque()
        self._started: float | None = None      # when a restart of the engine was seen (monotonic), if one was
        self._by_reason: dict[str, float] | None = None   # the latest window's waiting seconds by reason
        self._steps = StepWatch()                        # a step outlasting scrapes (agent.sources.step_stall)
        self._rules = {name: (figure, rule_for(figure, m.kind)) for figure, m in METRICS.items()
                       for name in (m.vllm if kind == "vllm" else m.sglang)}
        self.refused: dict[str, int] = {}   # scrapes whose family for a figure was implausible, by figure
        polled = [n for f in POLLED for n in self._names(f)]
        self.heavy = HeavyAnswers(self.metrics_url)       # the pause after an answer too heavy to read often
        self.poller = GaugePoller(self._fetch, self._polled_gauges, polled, poll_s) if poll_s else None
        self._last_poll: Gauges | None = None   # the poll before, which the next is marked against

    # --- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the span receiver and the KV-events subscriber; UserError when one cannot (a port taken)."""
        for name, part in (("traces", self.spans), ("KV events", self.kv_events), ("gauge poll", self.poller)):
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

    # --- the engine source interface (agent/sampler.py) ------------------------------------------------
    def snapshot(self, now_monotonic: float) -> EngineSnapshot:
        exposition = self._parse(*self._read_body())
        if self.kind == "sglang":   # every tensor-parallel rank publishes its scheduler's figures: count them once
            exposition = Exposition({n: without_rank_copies(f) for n, f in exposition.families.items()},
                                    exposition.duplicates)
        self.generation = generation(exposition, self.kind, self.metrics_url)   # EngineMismatchError: not this engine
        self._refuse_implausible(exposition)
        scrape = _Scrape(now_monotonic, exposition, self._gauges(exposition, now_monotonic))
        if self._scrapes and self._scrapes[-1].at >= scrape.at:
            self._scrapes.clear()          # a clock that did not advance gives no window
        elif self._scrapes and self._restarted(self._scrapes[-1].exposition, exposition):
            self._started = scrape.at      # counters count from zero again (counter_delta); lengths from here
        self._scrapes.append(scrape)
        # the window's base: the newest earlier scrape at least window_s old, else the oldest kept
        while len(self._scrapes) > 2 and self._scrapes[1].at <= scrape.at - self.window_s:
            self._scrapes.popleft()
        base = self._scrapes[0] if len(self._scrapes) > 1 else None
        timelines, lengths = self._window_timelines(base.at if base else scrape.at - self.window_s)
        snap, self.reading = self._fill(scrape, base, list(self._scrapes)[1:] or [scrape], timelines, lengths)
        return snap

    def recent_timelines(self, since: float | None = None) -> list:
        """Requests the engine's spans told of (none without `spans`), their queue time charged by the mix of
        waiting reasons the gauge poll saw while each waited, else the latest window's (a span does not say why
        its request waited)."""
        return [] if self.spans is None else charge_queued(self._named(self.spans.recent_timelines(since)),
                                                           self._by_reason, self._polled())

    def _restarted(self, before: Exposition, now: Exposition) -> bool:
        """Whether the engine restarted between two scrapes: a counter it never lowers fell."""
        names = self._names("prompt_tokens")
        was, count = total(before.first(names)), total(now.first(names))
        return was is not None and count is not None and count < was

    def _window_timelines(self, start: float) -> tuple[list, list[int] | None]:
        """From one read of the spans kept (by finish): the requests that finished after `start`, the window, and
        the lengths (prompt and output tokens) of the latest LENGTHS_SAMPLE finished, window or not."""
        if self.spans is None:
            return [], None
        kept = [t for t in self.spans.recent_timelines() if t.finished is not None]
        # the block-size advice weighs this engine's requests, not those of the one before a restart
        current = kept if self._started is None else [t for t in kept if t.arrival >= self._started]
        lengths = [t.prompt_tokens + t.output_tokens for t in current[-LENGTHS_SAMPLE:]] or None
        return self._named(kept[bisect.bisect_right(kept, start, key=lambda t: t.finished):]), lengths

    def _named(self, timelines: list) -> list:
        """The spans' timelines, the model filled in where a span names none, from the latest scrape's."""
        try:
            latest = self._scrapes[-1]    # one step: the HTTP API reads timelines while the sampler scrapes
        except IndexError:
            return timelines
        return with_model(timelines, self._model(latest.exposition))

    def _model(self, ex: Exposition) -> str | None:
        """The model a scrape names: its families' `model_name` label (SGLang 0.3's `name`)."""
        running = ex.first(self._names("running"))
        return label(running, "model_name") or label(running, "name")

    # --- scraping ----------------------------------------------------------------------------------
    def _fetch(self) -> str:
        """The body of /metrics, for the gauge poll: a heavy one pauses the reads (agent.sources.heavy_answers)."""
        text, heavy = self._read_body()
        if heavy is not None:
            self.heavy.heavy(heavy)
        return text

    def _read_body(self) -> tuple[str, str | None]:
        """The body of /metrics, read within `timeout_s` in all (name lookup, connect, headers and body under one
        deadline, agent.http_get.request: a server dripping its answer cannot hold the sampler past it), and
        why it is heavy if it is near a cap (None if not). ReadPaused while a heavy answer's pause lasts."""
        self.heavy.check()
        target = self._parts.path.rstrip("/") + "/metrics"
        try:
            status, reason, body = request("GET", self._parts, target, {"Accept": "text/plain"},
                                           time.monotonic() + self.timeout_s, MAX_BODY_BYTES)
        except AnswerTooLarge as exc:
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
        """The scrape's families; a body near a cap, or whose parse broke or neared its deadline, pauses the
        reads after it."""
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
        """Leave out the families agent.sources.plausible refuses; count each, and log its first refusal."""
        for refusal in refuse_implausible(exposition, self._rules):
            if refusal.figure not in self.refused:
                log.warning("engine at %s: refused %s (counted in stagelens_engine_intake_total{part=\"metrics\"})",
                            self.url, printable(refusal.why))
            self.refused[refusal.figure] = self.refused.get(refusal.figure, 0) + 1

    # --- filling the snapshot ----------------------------------------------------------------------
    def _names(self, figure: str) -> tuple[str, ...]:
        metric = METRICS[figure]
        return metric.vllm if self.kind == "vllm" else metric.sglang

    def _gauges(self, ex: Exposition, at: float) -> Gauges:
        reasons = by_label(ex.first(self._names("waiting_by_reason")), "reason") or {}
        prompts = ex.first(self._names("request_prompt_tokens"))
        running = total(ex.first(self._names("running")))
        held = held_tokens(Counted(
            prompt_tokens=total(ex.first(self._names("prompt_tokens"))),
            generated_tokens=total(ex.first(self._names("generation_tokens"))),
            finished_prompt_tokens=histogram_part(prompts, "_sum"),
            finished_prompts=histogram_part(prompts, "_count"),
            finished_generated_tokens=histogram_part(ex.first(self._names("request_generation_tokens")), "_sum"),
            running=running, first_tokens=histogram_part(ex.first(self._names("ttft")), "_count"),
            ended=histogram_part(ex.first(self._names("e2e")), "_count"),
            longest_request=_sum_or_none(highest_bound(prompts),
                                         highest_bound(ex.first(self._names("request_generation_tokens")))),
            prompt_in_prefill=length_biased_mean(prompts),
            prefix_hit_share=_share(total(ex.first(self._names("prefix_hits"))),
                                    total(ex.first(self._names("prefix_queries"))))))
        return Gauges(at=at, running=running, held_tokens=held,
                      waiting=total(ex.first(self._names("waiting"))),
                      deferred=reasons.get("deferred"),
                      kv_ratio=mean(ex.first(self._names("kv_usage"))),
                      adapters=_serves_adapters(ex.first(self._names("lora"))),
                      preemptions=total(ex.first(self._names("preemptions"))))

    def _marked(self, samples: list[Gauges]) -> list[Gauges]:
        """The samples (in time order) with what vLLM's preemptions say of its KV cache between them (SGLang's
        retractions are not read so: agent.sources.inference.mark_preemptions says why)."""
        return mark_preemptions(samples, per_preemption_s=POLL_S) if self.kind == "vllm" else samples

    def _polled_gauges(self, ex: Exposition, at: float) -> Gauges:
        """One poll's gauges, marked against the poll before as it arrives (on the poll's thread), so that the
        samples kept (10 minutes of them) are marked once, not again at every scrape and every read."""
        g = self._gauges(ex, at)
        if self._last_poll is not None:
            g = self._marked([self._last_poll, g])[1]
        self._last_poll = g
        return g

    def _polled(self) -> list[Gauges]:
        """Every sample the gauge poll keeps, each marked as it came (_polled_gauges)."""
        return self.poller.kept() if self.poller else []

    def _capacity(self, ex: Exposition) -> KvCapacity | None:
        """The KV cache's size: vLLM's cache_config_info (kv_cache_size_tokens where published: a hybrid model's
        blocks do not hold block_size tokens each), SGLang's token pool (a block of one token)."""
        if self.kind == "vllm":
            assert self.generation is not None   # snapshot reads the generation before the capacity
            return _cache_config(ex.first(self._names("cache_config")), v1=not self.generation.startswith("vLLM V0"))
        tokens = total(ex.first(self._names("kv_tokens_capacity")))
        if tokens is None:   # SGLang 0.4 publishes the tokens in use and their share
            used, ratio = total(ex.first(self._names("kv_tokens_used"))), mean(ex.first(self._names("kv_usage")))
            tokens = used / ratio if used and ratio else None
        return KvCapacity(num_blocks=round(tokens), tokens=round(tokens), block_size=1) if tokens else None

    def _fill(self, now: _Scrape, before: _Scrape | None, window: list[_Scrape], timelines: list,
              lengths: list[int] | None) -> tuple[EngineSnapshot, Reading]:
        ex, was = now.exposition, before.exposition if before else None
        span = now.at - before.at if before else 0.0
        gauges = [w.gauges for w in window]
        if self.poller is not None and before is not None:   # the polls between the scrapes, in time order
            gauges = sorted(gauges + self.poller.samples(before.at, now.at), key=lambda g: g.at)
        samples = self._marked(([before.gauges] if before else []) + gauges)   # each against the one before
        gauges = samples[1:] if before else samples

        def family(figure):
            return ex.first(self._names(figure))

        def delta_total(figure) -> float | None:
            return counter_delta(family(figure), was.first(self._names(figure)) if was else None)

        def histogram(figure) -> HistogramDelta | None:
            return histogram_delta(family(figure), was.first(self._names(figure)) if was else None)

        capacity = self._capacity(ex)
        kv_ratio = now.gauges.kv_ratio
        usage = None
        if capacity is not None:
            used = None if kv_ratio is None else round(kv_ratio * capacity.num_blocks)
            usage = KvUsage(num_blocks=capacity.num_blocks, used_blocks=used)

        queue, ttft, itl, e2e = histogram("queue_time"), histogram("ttft"), histogram("inter_token"), histogram("e2e")
        steps = histogram("iteration_tokens")
        step_count = None if steps is None else round(steps.count)
        generated = delta_total("generation_tokens")
        by_mode = _delta_by_label(family("realtime_tokens"), was.first(self._names("realtime_tokens")) if was else None,
                                  "mode")
        if generated is None and by_mode:
            generated = by_mode.get("decode")
        computed = None if steps is None else steps.sum
        if computed is None and by_mode:
            computed = by_mode.get("decode", 0.0) + by_mode.get("prefill_compute", 0.0)
        inferred: dict[str, str] = {}

        def infer(path: str, found: Inferred | None):
            if found is None:
                return None
            inferred[path] = found.how
            return found.value

        period = step_period(span, step_count)
        by_reason = infer("window.scheduler.wait_seconds_by_reason", wait_seconds_by_reason(gauges, span))
        self._by_reason = by_reason
        share_waiting = infer("window.scheduler.waiting_share", waiting_share(gauges)) if span else None
        busy = self._busy(delta_total("gpu_execution"), span, ex)
        # spans tell of a request only when it ends: with them, the requests still queued bound the wait too
        queued = None if self.spans is None else queued_mean_wait(
            by_reason, max((h.count for h in (ttft, queue) if h is not None), default=None), now.gauges.waiting)
        ordinary, longest = ordinary_step_bounds(itl, timelines, steps)    # one pass over the window's spans
        found = decided_wait_p99(timelines, period, ordinary, queued, longest, now.gauges.waiting) if span else None
        # a floor only where the few requests finished say less than those still queued wait
        decided, bounds = (None, found) if isinstance(found, WaitBounds) else (found, None)
        if found is not None:
            inferred["window.scheduler.decided_wait_p99_s"] = found.how
        elif span:
            done = queue or e2e
            left = done.count / span if done is not None else None
            bounds = queue_wait_p99_bounds(queue, [g.waiting for g in gauges if g.waiting is not None], left, span,
                                           period)
            if bounds is not None:
                inferred["window.scheduler.decided_wait_p99_s"] = bounds.how
        still = self._steps.still_for(now.at, histogram_part(family("iteration_tokens"), "_count"),
                                      bool(now.gauges.running or now.gauges.waiting))
        decided, bounds = self._with_stalls(still, decided, bounds, now, before, inferred,
                                            max(period or 0.0, ordinary or 0.0))
        for q in ("p50", "p99"):
            said = quantile_said(queue, 0.5 if q == "p50" else 0.99)
            if said is not None and quantile(queue, 0.5 if q == "p50" else 0.99) is None:
                inferred[f"window.scheduler.wait_{q}_s"] = f"{said}: as far as the queue-time buckets place it"
        scheduler = SchedulerFigures(
            running=_whole(now.gauges.running),
            waiting=_whole(now.gauges.waiting),
            steps=step_count,
            busy_ratio=busy,
            busy_ratio_while_waiting=busy if busy is not None and share_waiting == 1.0 else None,
            tokens_per_s=_per_s(computed, span),
            decode_tokens_per_s=_per_s(generated, span),
            requests_finished=None if e2e is None else round(e2e.count),
            wait_p50_s=quantile(queue, 0.50), wait_p99_s=quantile(queue, 0.99),
            decided_wait_p99_s=None if decided is None else decided.value,
            decided_wait_p99_at_least_s=None if bounds is None else bounds.at_least,
            decided_wait_p99_at_most_s=None if bounds is None else bounds.at_most,
            head_of_line_share=infer("window.scheduler.head_of_line_share", head_of_line_share(timelines, period)),
            waiting_share=share_waiting,
            wait_seconds_by_reason=by_reason,
            step_time_mean_s=period, no_step_for_s=still)
        if busy is not None:
            inferred["window.scheduler.busy_ratio_while_waiting"] = (
                f"GPU execution {busy:.0%} of the window (gpu_execution_seconds_total over {span:.1f} s"
                + (", requests waiting at every scrape)" if share_waiting == 1.0 else ")"))
        kv = KvFigures(fragmentation_ratio=infer("window.kv.fragmentation_ratio", fragmentation(gauges, capacity)),
                       full_while_waiting_share=infer("window.kv.full_while_waiting_share",
                                                      full_while_waiting(samples)),
                       sequence_lengths=lengths)
        if self.kv_events is not None:
            blocks = self.kv_events.figures(since_monotonic=before.at if before else now.at - self.window_s)
            kv.blocks_stored, kv.blocks_removed = blocks.blocks_stored, blocks.blocks_removed
            kv.blocks_restored, kv.block_lifetime_p50_s = blocks.restored_blocks, blocks.lifetime_p50_s
        cold = ColdPathFigures(waiting_on_model=_whole(now.gauges.deferred) if now.gauges.adapters else None)
        tail = None
        if timelines:
            charged = charge_queued(timelines, by_reason, self._polled())
            tail = WindowTail(ttft=attribution_tail(charged, "ttft"), latency=attribution_tail(charged, "latency"))
            inferred["window.tail"] = (f"{len(charged)} requests' llm_request spans: queue, prefill and decode; "
                                       f"their queue time charged by the window's mix of waiting reasons")

        finish_reasons = by_label(family("finished"), "finished_reason")
        succeeded = failed = health = None
        if finish_reasons is not None:
            succeeded = sum(v for k, v in finish_reasons.items() if k in FINISHED_OK)
            failed = sum(finish_reasons.values()) - succeeded
            health = Health(finish_reasons={k: int(v) for k, v in finish_reasons.items()})
        counters = Counters(preemptions_total=total(family("preemptions")),
                            requests_finished_total=succeeded, requests_failed_total=failed)

        snap = EngineSnapshot(
            clock=Clock(monotonic=now.at, wall=time.time()),
            engine=EngineInfo(source=self.kind, generation=self.generation,
                              model=self._model(ex),
                              allocator="paged", block_size=None if capacity is None or self.kind == "sglang"
                              else capacity.block_size,
                              kv_capacity_tokens=None if capacity is None else capacity.tokens,
                              kv_capacity_lever=None if capacity is None else capacity.lever,
                              max_num_seqs=infer("engine.max_num_seqs", pinned_batch(gauges)),
                              block_size_forced=None if capacity is None else capacity.forced_block_size),
            usage=usage,
            window=Window(span_s=span, kv=kv, scheduler=scheduler, cold_path=cold, tail=tail),
            counters=counters, health=health, inferred=inferred or None, intake=self._intake())
        quantiles = {f"{name}_{q}": (h, level) for name, h in (("ttft", ttft), ("inter_token", itl), ("e2e", e2e))
                     for q, level in (("p50", 0.50), ("p99", 0.99))}
        reading = Reading(
            kv_usage_ratio=kv_ratio, kv_capacity_tokens=None if capacity is None else capacity.tokens,
            waiting_by_reason=by_label(family("waiting_by_reason"), "reason"),
            preemptions_in_window=delta_total("preemptions"),
            ttft_p50_s=quantile(ttft, 0.50), ttft_p99_s=quantile(ttft, 0.99),
            inter_token_p50_s=quantile(itl, 0.50), inter_token_p99_s=quantile(itl, 0.99),
            e2e_p50_s=quantile(e2e, 0.50), e2e_p99_s=quantile(e2e, 0.99),
            said={k: t for k, (h, level) in quantiles.items() if (t := quantile_said(h, level)) is not None} or None)
        return snap, reading

    def _with_stalls(self, still: float | None, decided: Inferred | None, bounds: WaitBounds | None, now: _Scrape,
                     before: _Scrape | None, inferred: dict, ordinary: float,
                     ) -> tuple[Inferred | None, WaitBounds | None]:
        """The decided-wait P99 (or its bounds) with what a step outlasting the scrapes says (agent.sources.
        step_stall): while no step finishes, the window's figures are a floor only, with a wait seen growing;
        once steps move again, a wait seen growing in the window still bounds it from below."""
        seen = decided if decided is not None else None if bounds is None or not bounds.at_least else \
            Inferred(bounds.at_least, bounds.how)
        if still is not None:
            growing = growing_wait(still, now.gauges.waiting, ordinary, kv_full(now.gauges))
            if growing is not None:
                self._steps.saw_growing(now.at, growing.value, growing.how)
        carried = self._steps.grown_since(before.at if before else now.at)
        if still is not None:
            floor = stalled_wait(still, kv_full(now.gauges), [seen, carried])
        elif carried is not None and carried.value > (seen.value if seen is not None else 0.0):
            floor = carried
        else:
            return decided, bounds
        inferred["window.scheduler.decided_wait_p99_s"] = floor.how
        return None, (None if floor.value is None else WaitBounds(floor.value, None, floor.how))

    def _busy(self, executed: float | None, span: float, ex: Exposition) -> float | None:
        """SGLang's GPU execution seconds in the window over the window, per data-parallel rank."""
        if executed is None or span <= 0:
            return None
        ranks = {s.labels.get("dp_rank") for s in values(ex.first(self._names("gpu_execution")))} or {None}
        return min(1.0, executed / span / len(ranks))

    def _intake(self) -> dict[str, float] | None:
        """What the span receiver and the KV-events subscriber took in and dropped, and the scrapes' families
        refused as implausible, so far."""
        out: dict[str, float] = {f"metrics.refused_{k}": v for k, v in self.refused.items()}
        out.update({f"metrics.{k}": v for k, v in self.heavy.counts.items() if v})
        if self.spans is not None:
            out.update({f"traces.{k}": v for k, v in self.spans.counts.items()})
        if self.kv_events is not None:
            out.update({f"kv_events.{k}": v for k, v in self.kv_events.totals.items()})
        if self.poller is not None:
            out.update({f"gauge_poll.{k}": v for k, v in self.poller.counts.items()})
        return out or None


# --- reading families ----------------------------------------------------------------------------------
def _cache_config(family, v1: bool) -> KvCapacity | None:
    """The KV cache's size from vLLM's cache_config_info labels, over all engines: blocks, the tokens they
    hold (kv_cache_size_tokens where published, else blocks x block size), V1's reserved null block per
    engine, and whether the model forced the block size (a hybrid model: its tokens are not blocks x block
    size, or a mamba block size is published)."""
    samples = values(family)
    sizes = {size for s in samples if (size := _int(s.labels.get("block_size"))) is not None}
    blocks = _every_int(samples, "num_gpu_blocks")
    if len(sizes) != 1 or not blocks:
        return None
    block_size, num_blocks = sizes.pop(), sum(blocks)
    published = _every_int(samples, "kv_cache_size_tokens")
    tokens = sum(published) if published is not None else num_blocks * block_size
    forced = tokens != num_blocks * block_size or any(_int(s.labels.get("mamba_block_size")) for s in samples)
    return KvCapacity(num_blocks=num_blocks, tokens=tokens, block_size=block_size,
                      reserved_blocks=len(samples) if v1 else 0, forced_block_size=forced,
                      lever=_capacity_lever(samples[0].labels))


def _every_int(samples: list, name: str) -> list[int] | None:
    """Each sample's label `name` as a whole number above 0 (_int); None where one has none."""
    found = [_int(s.labels.get(name)) for s in samples]
    return [v for v in found if v is not None] if None not in found else None


def _capacity_lever(labels: dict[str, str]) -> str:
    """The vLLM flag that set the KV cache's size, with its value: a block count forced by
    --num-gpu-blocks-override outranks a memory size (--kv-cache-memory-bytes; a CPU build's
    VLLM_CPU_KVCACHE_SPACE shows there too), which outranks the share of device memory."""
    override = _int(labels.get("num_gpu_blocks_override"))
    if override:
        return f"--num-gpu-blocks-override {override}"
    memory = _int(labels.get("kv_cache_memory_bytes"))
    if memory:
        return f"--kv-cache-memory-bytes {memory}"
    return f"--gpu-memory-utilization {labels.get('gpu_memory_utilization') or '0.9'}"


def _serves_adapters(family) -> bool:
    """Whether vLLM serves LoRA adapters: lora_requests_info's max_lora above 0 (it publishes "0" without)."""
    return bool(_int(label(family, "max_lora")))


def _sum_or_none(*parts: float | None) -> float | None:
    known = [p for p in parts if p is not None and not math.isinf(p)]
    return sum(known) if len(known) == len(parts) else None


def _share(part: float | None, whole: float | None) -> float | None:
    return min(1.0, part / whole) if part is not None and whole else None


def _delta_by_label(now, before, name: str) -> dict[str, float] | None:
    """A counter's increase between two scrapes by the value of label `name`; a reset counts from zero."""
    a, b = by_label(now, name), by_label(before, name)
    if a is None or b is None:
        return None
    return {k: v - b.get(k, 0.0) if v >= b.get(k, 0.0) else v for k, v in a.items()}


def _int(text) -> int | None:
    try:
        value = int(text)
    except (TypeError, ValueError):
        return None     # "None" before the KV cache is profiled
    return value if value > 0 else None


def _per_s(amount: float | None, span: float) -> float | None:
    return amount / span if amount is not None and span > 0 else None


def _whole(value: float | None) -> int | None:
    return None if value is None else round(value)


def _near_a_cap(size: int, series: int) -> str | None:
    """Why a body of `size` bytes and `series` sample lines is heavy (past NEAR_SHARE of a cap), or None."""
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
