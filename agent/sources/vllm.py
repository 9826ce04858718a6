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

import math
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from agent.errors import CollectError
from agent.sources.prometheus_text import Exposition, ExpositionError, parse_exposition
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
}

FINISHED_OK = ("stop", "length")      # vLLM's finished_reason values that are successes


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


class VllmSource:
    """An engine source for a vLLM (or, with kind="sglang", an SGLang) server at `url`."""

    def __init__(self, url: str, timeout_s: float = 2.0, kind: str = "vllm") -> None:
        if kind not in KINDS:
            raise ValueError(f"engine kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not timeout_s > 0:
            raise ValueError(f"the scrape timeout must be positive, got {timeout_s}")
        self.url = url.rstrip("/")
        self.metrics_url = self.url + "/metrics"
        self.timeout_s = timeout_s
        self.kind = kind
        self.reading = Reading()
        self._previous: _Scrape | None = None

    # --- the engine source interface (agent/sampler.py) ------------------------------------------------
    def snapshot(self, now_monotonic: float) -> EngineSnapshot:
        scrape = _Scrape(now_monotonic, parse_exposition(self._fetch()))
        previous, self._previous = self._previous, scrape
        if previous is not None and previous.at >= scrape.at:
            previous = None        # a clock that did not advance gives no window
        snap, self.reading = self._fill(scrape, previous)
        return snap

    def recent_timelines(self, since: float | None = None) -> list:
        return []   # per-request evidence (vLLM's llm_request spans) comes from OTLP, not /metrics

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

    def _fill(self, now: _Scrape, before: _Scrape | None) -> tuple[EngineSnapshot, Reading]:
        ex, was = now.exposition, before.exposition if before else None
        span = now.at - before.at if before else 0.0

        def family(figure):
            return ex.first(self._names(figure))

        def delta_total(figure) -> float | None:
            return _counter_delta(family(figure), was.first(self._names(figure)) if was else None)

        def histogram(figure) -> _HistogramDelta | None:
            return _histogram_delta(family(figure), was.first(self._names(figure)) if was else None)

        block_size, num_blocks = _cache_config(family("cache_config"))
        kv_ratio = _mean(family("kv_usage"))
        model = _label(family("running"), "model_name")   # the served model name, as the engine labels it
        usage = None
        if num_blocks is not None:
            used = None if kv_ratio is None else round(kv_ratio * num_blocks)
            usage = KvUsage(num_blocks=num_blocks, used_blocks=used)

        queue, ttft, itl, e2e = histogram("queue_time"), histogram("ttft"), histogram("inter_token"), histogram("e2e")
        steps = histogram("iteration_tokens")
        generated = delta_total("generation_tokens")
        scheduler = SchedulerFigures(
            running=_whole(_total(family("running"))),
            waiting=_whole(_total(family("waiting"))),
            steps=None if steps is None else round(steps.count),
            tokens_per_s=_per_s(None if steps is None else steps.sum, span),
            decode_tokens_per_s=_per_s(generated, span),
            requests_finished=None if e2e is None else round(e2e.count),
            wait_p50_s=_quantile(queue, 0.50), wait_p99_s=_quantile(queue, 0.99))

        finish_reasons = _by_label(family("finished"), "finished_reason")
        succeeded = failed = health = None
        if finish_reasons is not None:
            succeeded = sum(v for k, v in finish_reasons.items() if k in FINISHED_OK)
            failed = sum(finish_reasons.values()) - succeeded
            health = Health(finish_reasons={k: int(v) for k, v in finish_reasons.items()})
        counters = Counters(preemptions_total=_total(family("preemptions")),
                            requests_finished_total=succeeded, requests_failed_total=failed)

        snap = EngineSnapshot(
            clock=Clock(monotonic=now.at, wall=time.time()),
            engine=EngineInfo(model=model, block_size=block_size),
            usage=usage,
            window=Window(span_s=span, kv=KvFigures(), scheduler=scheduler, cold_path=ColdPathFigures()),
            counters=counters, health=health)
        reading = Reading(
            kv_usage_ratio=kv_ratio, kv_capacity_tokens=_total(family("kv_tokens_capacity")),
            waiting_by_reason=_by_label(family("waiting_by_reason"), "reason"),
            preemptions_in_window=delta_total("preemptions"),
            ttft_p50_s=_quantile(ttft, 0.50), ttft_p99_s=_quantile(ttft, 0.99),
            inter_token_p50_s=_quantile(itl, 0.50), inter_token_p99_s=_quantile(itl, 0.99),
            e2e_p50_s=_quantile(e2e, 0.50), e2e_p99_s=_quantile(e2e, 0.99))
        return snap, reading


# --- reading families ----------------------------------------------------------------------------------
def _values(family, suffix: str = "") -> list:
    """The finite values of the family's samples named `family.name + suffix` (or `_total` for a counter)."""
    if family is None:
        return []
    names = {family.name + suffix}
    if family.type == "counter" and not suffix:
        names.add(family.name + "_total")
    return [s for s in family.samples if s.name in names and math.isfinite(s.value)]


def _total(family) -> float | None:
    """The family's value added up over its label sets (engines, ranks); None when it is absent."""
    samples = _values(family)
    return sum(s.value for s in samples) if samples else None


def _mean(family) -> float | None:
    """A ratio's mean over label sets (each data-parallel engine has its own KV pool of the same size)."""
    samples = _values(family)
    return sum(s.value for s in samples) / len(samples) if samples else None


def _label(family, name: str) -> str | None:
    for s in _values(family):
        if s.labels.get(name):
            return s.labels[name]
    return None


def _by_label(family, label: str) -> dict[str, float] | None:
    samples = _values(family)
    if not samples:
        return None
    out: dict[str, float] = {}
    for s in samples:
        key = s.labels.get(label, "")
        out[key] = out.get(key, 0.0) + s.value
    return out


def _cache_config(family) -> tuple[int | None, int | None]:
    """(block size, KV blocks over all engines) from vLLM's cache_config_info labels."""
    samples = _values(family)
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


def _counter_delta(now, before) -> float | None:
    """The counter's increase since the previous scrape; None without both; a reset counts from zero."""
    total_now = _total(now)
    if total_now is None or before is None:
        return None
    total_before = _total(before)
    if total_before is None:
        return None
    return total_now - total_before if total_now >= total_before else total_now


@dataclass(frozen=True, slots=True)
class _HistogramDelta:
    buckets: list[tuple[float, float]]     # (upper bound, cumulative count), ascending, +Inf last
    count: float
    sum: float


def _cumulative(family) -> tuple[dict[float, float], float, float] | None:
    if family is None or family.type != "histogram":
        return None
    buckets: dict[float, float] = {}
    for s in _values(family, "_bucket"):
        bound = float(s.labels["le"])
        buckets[bound] = buckets.get(bound, 0.0) + s.value
    if math.inf not in buckets:
        return None
    count = sum(s.value for s in _values(family, "_count")) if _values(family, "_count") else buckets[math.inf]
    return buckets, count, sum(s.value for s in _values(family, "_sum"))


def _histogram_delta(now, before) -> _HistogramDelta | None:
    """Observations between two scrapes; None without both or when buckets changed (a restart with other
    buckets); a reset (counts went down) counts from zero."""
    a, b = _cumulative(now), _cumulative(before)
    if a is None or b is None or set(a[0]) != set(b[0]):
        return None
    reset = a[1] < b[1]
    base = ({k: 0.0 for k in b[0]}, 0.0, 0.0) if reset else b
    buckets = sorted((le, a[0][le] - base[0][le]) for le in a[0])
    return _HistogramDelta(buckets, a[1] - base[1], a[2] - base[2])


def _quantile(h: _HistogramDelta | None, q: float) -> float | None:
    """The q-quantile of the window's observations, interpolated within its bucket as Prometheus's
    histogram_quantile does; the highest finite bound when it falls past it. None without observations."""
    if h is None or h.count <= 0:
        return None
    rank = q * h.buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, cumulative in h.buckets:
        if cumulative >= rank and cumulative > below:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (cumulative - below)
        lower, below = bound, cumulative
    return lower


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
