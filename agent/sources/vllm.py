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
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass

from agent.errors import CollectError, UserError
from agent.sources.families import (
    HistogramDelta,
    by_label,
    counter_delta,
    histogram_delta,
    histogram_part,
    label,
    mean,
    quantile,
    total,
    values,
)
from agent.sources.gauge_poll import GaugePoller
from agent.sources.inference import (
    Counted,
    Gauges,
    Inferred,
    charge_queued,
    decided_wait_p99,
    fragmentation,
    head_of_line_share,
    held_tokens,
    queued_mean_wait,
    step_period,
    wait_seconds_by_reason,
    waiting_share,
)
from agent.sources.prometheus_text import Exposition, ExpositionError, parse_exposition
from engine_hooks.attribution import tail as attribution_tail
from engine_hooks.snapshot import (
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

KINDS = ("vllm", "sglang")
MAX_BODY_BYTES = 32 * 1024 * 1024     # a /metrics body past this is not an engine's


class EngineScrapeError(CollectError):
    """The engine's /metrics could not be read (unreachable, slow, an HTTP error, too large)."""


@dataclass(frozen=True, slots=True)
class Metric:
    """One figure stagelens reads, the families that give it (newest name first) and what it fills."""
    kind: str                  # gauge | counter | histogram | info
    vllm: tuple[str, ...]
    sglang: tuple[str, ...]
    fills: str


METRICS: dict[str, Metric] = {
    "running": Metric("gauge", ("vllm:num_requests_running",), ("sglang:num_running_reqs",),
                      "window.scheduler.running"),
    "waiting": Metric("gauge", ("vllm:num_requests_waiting",), ("sglang:num_queue_reqs",),
                      "window.scheduler.waiting"),
    "waiting_by_reason": Metric("gauge", ("vllm:num_requests_waiting_by_reason",), (),
                                "reading.waiting_by_reason (capacity | deferred)"),
    "kv_usage": Metric("gauge", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), ("sglang:token_usage",),
                       "usage.used_blocks (× num_blocks), reading.kv_usage_ratio"),
    "cache_config": Metric("info", ("vllm:cache_config_info",), (),
                           "engine.block_size, usage.num_blocks (labels block_size, num_gpu_blocks)"),
    "kv_tokens_capacity": Metric("gauge", (), ("sglang:max_total_num_tokens",), "reading.kv_capacity_tokens"),
    "preemptions": Metric("counter", ("vllm:num_preemptions_total",), ("sglang:num_retracted_requests_total",),
                          "counters.preemptions_total, reading.preemptions_in_window"),
    "finished": Metric("counter", ("vllm:request_success_total",), (),
                       "counters.requests_finished_total / requests_failed_total, health.finish_reasons"),
    "queue_time": Metric("histogram", ("vllm:request_queue_time_seconds",), ("sglang:queue_time_seconds",),
                         "window.scheduler.wait_p50_s / wait_p99_s"),
    "ttft": Metric("histogram", ("vllm:time_to_first_token_seconds",), ("sglang:time_to_first_token_seconds",),
                   "reading.ttft_p50_s / ttft_p99_s"),
    "inter_token": Metric("histogram", ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
                          ("sglang:inter_token_latency_seconds",), "reading.inter_token_p50_s / p99_s"),
    "e2e": Metric("histogram", ("vllm:e2e_request_latency_seconds",), ("sglang:e2e_request_latency_seconds",),
                  "window.scheduler.requests_finished (count), reading.e2e_p50_s / e2e_p99_s"),
    "iteration_tokens": Metric("histogram", ("vllm:iteration_tokens_total",), (),
                               "window.scheduler.steps (count), tokens_per_s (sum)"),
    "generation_tokens": Metric("counter", ("vllm:generation_tokens_total",), ("sglang:generation_tokens_total",),
                                "window.scheduler.decode_tokens_per_s"),
    "prompt_tokens": Metric("counter", ("vllm:prompt_tokens_total",), ("sglang:prompt_tokens_total",),
                            "with the three below, the tokens running requests hold (fragmentation)"),
    "request_prompt_tokens": Metric("histogram", ("vllm:request_prompt_tokens",), (),
                                    "its sum: the prompt tokens of the requests finished"),
    "request_generation_tokens": Metric("histogram", ("vllm:request_generation_tokens",), (),
                                        "its sum: the output tokens of the requests finished"),
    "lora": Metric("info", ("vllm:lora_requests_info",), (),
                   "whether the engine serves LoRA adapters (label max_lora): `deferred` waits are model loads"),
}

POLLED = ("running", "waiting", "waiting_by_reason", "kv_usage", "lora")   # what the gauge poll reads
FINISHED_OK = ("stop", "length")      # vLLM's finished_reason values that are successes
WINDOW_S = 10.0                       # as the hooks' window (engine_hooks.recorder): deltas and means over it
LENGTHS_SAMPLE = 256                  # requests' lengths kept for block-size advice, as the hooks keep


@dataclass(frozen=True, slots=True)
class Reading:
    """What the scrape tells beyond the snapshot's fields (None: not observable, or no data in the window)."""
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

    def __init__(self, url: str, timeout_s: float = 2.0, kind: str = "vllm", window_s: float = WINDOW_S,
                 spans=None, kv_events=None, poll_s: float | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"engine kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not timeout_s > 0:
            raise ValueError(f"the scrape timeout must be positive, got {timeout_s}")
        if not window_s > 0:
            raise ValueError(f"the window must be positive, got {window_s}")
        self.url = url.rstrip("/")
        self.metrics_url = self.url + "/metrics"
        self.timeout_s = timeout_s
        self.kind = kind
        self.window_s = window_s
        self.spans = spans
        self.kv_events = kv_events
        self.reading = Reading()
        self._scrapes: deque[_Scrape] = deque()
        self._by_reason: dict[str, float] | None = None   # the latest window's waiting seconds by reason
        polled = [n for f in POLLED for n in self._names(f)]
        self.poller = GaugePoller(self._fetch, self._gauges, polled, poll_s) if poll_s else None

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
        exposition = parse_exposition(self._fetch())
        scrape = _Scrape(now_monotonic, exposition, self._gauges(exposition, now_monotonic))
        if self._scrapes and self._scrapes[-1].at >= scrape.at:
            self._scrapes.clear()          # a clock that did not advance gives no window
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
        return [] if self.spans is None else charge_queued(self.spans.recent_timelines(since), self._by_reason,
                                                           self.poller.kept() if self.poller else ())

    def _window_timelines(self, start: float) -> tuple[list, list[int] | None]:
        """From one read of the spans kept (by finish): the requests that finished after `start`, the window, and
        the lengths (prompt and output tokens) of the latest LENGTHS_SAMPLE finished, window or not."""
        if self.spans is None:
            return [], None
        kept = [t for t in self.spans.recent_timelines() if t.finished is not None]
        lengths = [t.prompt_tokens + t.output_tokens for t in kept[-LENGTHS_SAMPLE:]] or None
        return kept[bisect.bisect_right(kept, start, key=lambda t: t.finished):], lengths

    # --- scraping ----------------------------------------------------------------------------------
    def _fetch(self) -> str:
        """The body of /metrics, read within `timeout_s` in all (connect, headers and body together)."""
        deadline = time.monotonic() + self.timeout_s
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=self.timeout_s) as response:
                chunks, size = [], 0
                while chunk := response.read(65536):
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        raise EngineScrapeError(f"{self.metrics_url}: body larger than {MAX_BODY_BYTES} bytes")
                    if time.monotonic() > deadline:
                        raise EngineScrapeError(f"{self.metrics_url}: no full answer within {self.timeout_s:g}s")
                    chunks.append(chunk)
        except EngineScrapeError:
            raise
        except urllib.error.HTTPError as exc:
            raise EngineScrapeError(f"{self.metrics_url}: HTTP {exc.code} {exc.reason}") from None
        except (TimeoutError, urllib.error.URLError, OSError) as exc:
            raise EngineScrapeError(f"{self.metrics_url}: {_reason(exc, self.timeout_s)}") from None
        try:
            return b"".join(chunks).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ExpositionError(f"not Prometheus exposition text: not UTF-8 at byte {exc.start}") from None

    # --- filling the snapshot ----------------------------------------------------------------------
    def _names(self, figure: str) -> tuple[str, ...]:
        metric = METRICS[figure]
        return metric.vllm if self.kind == "vllm" else metric.sglang

    def _gauges(self, ex: Exposition, at: float) -> Gauges:
        reasons = by_label(ex.first(self._names("waiting_by_reason")), "reason") or {}
        lora = ex.first(self._names("lora"))
        prompts = ex.first(self._names("request_prompt_tokens"))
        running = total(ex.first(self._names("running")))
        held = held_tokens(Counted(
            prompt_tokens=total(ex.first(self._names("prompt_tokens"))),
            generated_tokens=total(ex.first(self._names("generation_tokens"))),
            finished_prompt_tokens=histogram_part(prompts, "_sum"),
            finished_prompts=histogram_part(prompts, "_count"),
            finished_generated_tokens=histogram_part(ex.first(self._names("request_generation_tokens")), "_sum"),
            running=running, first_tokens=histogram_part(ex.first(self._names("ttft")), "_count"),
            ended=histogram_part(ex.first(self._names("e2e")), "_count")))
        return Gauges(at=at, running=running, held_tokens=held,
                      waiting=total(ex.first(self._names("waiting"))),
                      deferred=reasons.get("deferred"),
                      kv_ratio=mean(ex.first(self._names("kv_usage"))),
                      adapters=bool(label(lora, "max_lora")))

    def _fill(self, now: _Scrape, before: _Scrape | None, window: list[_Scrape], timelines: list,
              lengths: list[int] | None) -> tuple[EngineSnapshot, Reading]:
        ex, was = now.exposition, before.exposition if before else None
        span = now.at - before.at if before else 0.0
        gauges = [w.gauges for w in window]
        if self.poller is not None and before is not None:   # the polls between the scrapes, in time order
            gauges = sorted(gauges + self.poller.samples(before.at, now.at), key=lambda g: g.at)

        def family(figure):
            return ex.first(self._names(figure))

        def delta_total(figure) -> float | None:
            return counter_delta(family(figure), was.first(self._names(figure)) if was else None)

        def histogram(figure) -> HistogramDelta | None:
            return histogram_delta(family(figure), was.first(self._names(figure)) if was else None)

        block_size, num_blocks = _cache_config(family("cache_config"))
        kv_ratio = now.gauges.kv_ratio
        usage = None
        if num_blocks is not None:
            used = None if kv_ratio is None else round(kv_ratio * num_blocks)
            usage = KvUsage(num_blocks=num_blocks, used_blocks=used)

        queue, ttft, itl, e2e = histogram("queue_time"), histogram("ttft"), histogram("inter_token"), histogram("e2e")
        steps = histogram("iteration_tokens")
        step_count = None if steps is None else round(steps.count)
        generated = delta_total("generation_tokens")
        inferred: dict[str, str] = {}

        def infer(path: str, found: Inferred | None):
            if found is None:
                return None
            inferred[path] = found.how
            return found.value

        period = step_period(span, step_count)
        by_reason = infer("window.scheduler.wait_seconds_by_reason", wait_seconds_by_reason(gauges, span))
        self._by_reason = by_reason
        scheduler = SchedulerFigures(
            running=_whole(now.gauges.running),
            waiting=_whole(now.gauges.waiting),
            steps=step_count,
            tokens_per_s=_per_s(None if steps is None else steps.sum, span),
            decode_tokens_per_s=_per_s(generated, span),
            requests_finished=None if e2e is None else round(e2e.count),
            wait_p50_s=quantile(queue, 0.50), wait_p99_s=quantile(queue, 0.99),
            decided_wait_p99_s=infer("window.scheduler.decided_wait_p99_s", decided_wait_p99(
                timelines, period, queue, itl, queued_mean_wait(
                    by_reason, max((h.count for h in (ttft, queue) if h is not None), default=None),
                    now.gauges.waiting), steps)) if span else None,
            head_of_line_share=infer("window.scheduler.head_of_line_share", head_of_line_share(timelines, period)),
            waiting_share=infer("window.scheduler.waiting_share", waiting_share(gauges)) if span else None,
            wait_seconds_by_reason=by_reason,
            step_time_mean_s=period)
        kv = KvFigures(fragmentation_ratio=infer("window.kv.fragmentation_ratio",
                                                 fragmentation(gauges, num_blocks, block_size)),
                       sequence_lengths=lengths)
        if self.kv_events is not None:
            blocks = self.kv_events.figures(since_monotonic=before.at if before else now.at - self.window_s)
            kv.blocks_stored, kv.blocks_removed = blocks.blocks_stored, blocks.blocks_removed
            kv.blocks_restored, kv.block_lifetime_p50_s = blocks.restored_blocks, blocks.lifetime_p50_s
        cold = ColdPathFigures(waiting_on_model=_whole(now.gauges.deferred) if now.gauges.adapters else None)
        tail = None
        if timelines:
            charged = charge_queued(timelines, by_reason, self.poller.kept() if self.poller else ())
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
            engine=EngineInfo(source=self.kind, model=label(family("running"), "model_name"),
                              allocator="paged", block_size=block_size),
            usage=usage,
            window=Window(span_s=span, kv=kv, scheduler=scheduler, cold_path=cold, tail=tail),
            counters=counters, health=health, inferred=inferred or None, intake=self._intake())
        reading = Reading(
            kv_usage_ratio=kv_ratio, kv_capacity_tokens=total(family("kv_tokens_capacity")),
            waiting_by_reason=by_label(family("waiting_by_reason"), "reason"),
            preemptions_in_window=delta_total("preemptions"),
            ttft_p50_s=quantile(ttft, 0.50), ttft_p99_s=quantile(ttft, 0.99),
            inter_token_p50_s=quantile(itl, 0.50), inter_token_p99_s=quantile(itl, 0.99),
            e2e_p50_s=quantile(e2e, 0.50), e2e_p99_s=quantile(e2e, 0.99))
        return snap, reading


    def _intake(self) -> dict[str, float] | None:
        """What the span receiver and the KV-events subscriber took in and dropped, so far."""
        out: dict[str, float] = {}
        if self.spans is not None:
            out.update({f"traces.{k}": v for k, v in self.spans.counts.items()})
        if self.kv_events is not None:
            out.update({f"kv_events.{k}": v for k, v in self.kv_events.totals.items()})
        if self.poller is not None:
            out.update({f"gauge_poll.{k}": v for k, v in self.poller.counts.items()})
        return out or None


# --- reading families ----------------------------------------------------------------------------------
def _cache_config(family) -> tuple[int | None, int | None]:
    """(block size, KV blocks over all engines) from vLLM's cache_config_info labels."""
    samples = values(family)
    sizes = {_int(s.labels.get("block_size")) for s in samples} - {None}
    blocks = [_int(s.labels.get("num_gpu_blocks")) for s in samples]
    block_size = sizes.pop() if len(sizes) == 1 else None
    num_blocks = sum(blocks) if blocks and None not in blocks else None
    return block_size, num_blocks


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


def _reason(exc: BaseException, timeout_s: float) -> str:
    """One line saying why the engine could not be read."""
    inner = exc.reason if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException) else exc
    if isinstance(inner, TimeoutError) or "timed out" in str(inner):
        return f"no answer within {timeout_s:g}s"
    if isinstance(inner, ConnectionRefusedError):
        return "connection refused (is the engine running there?)"
    text = " ".join(str(inner).split()) or type(inner).__name__
    return text[:200]
