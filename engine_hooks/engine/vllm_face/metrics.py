"""vLLM V1's Prometheus metrics, kept by an observer on the bundled engine.

`VllmMetrics(engine, served_model_name)` owns a `prometheus_client.CollectorRegistry` holding the
families vLLM's `PrometheusStatLogger` (vllm/v1/metrics/loggers.py) exposes, with vLLM's names,
types, label names (`model_name`, `engine` = "0") and bucket boundaries, filled the way vLLM fills
them (vllm/v1/metrics/stats.py):

- scheduler gauges (`num_requests_running`, `num_requests_waiting`,
  `num_requests_waiting_by_reason`,
  `kv_cache_usage_perc`) are set after every step, as vLLM sets them from each step's
  SchedulerStats;
- iteration figures are counted as tokens come out: the prompt is counted (`prompt_tokens`) and TTFT
  observed when a request's first token comes out, every later token observes one inter-token
  latency, `iteration_tokens_total` observes, per step, the prompt tokens counted plus the tokens
  generated in it;
- request histograms (`e2e_request_latency_seconds`, queue, prefill, decode, inference, token
  counts) are
  observed once, when the request ends, from its events: queue = arrival to first `scheduled` (a
  preempted request keeps its first scheduling, as vLLM ignores rescheduling), prefill = first
  `scheduled` to `first_token` (preemptions included), decode = `first_token` to `finished`,
  inference = first `scheduled` to `finished`. A request that never got that far has 0 for the
  phases it missed.

Everything runs on the engine thread and does no I/O; prometheus_client's metrics are thread-safe,
so the HTTP server reads the registry from its own thread. Attached to an engine already serving,
the counts start at the attachment: a request whose first token came before it is not counted in
TTFT or the token counters (its end still is).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from stagelens.engine_hooks.records import vllm_names as vllm
from stagelens.engine_hooks.records.waits import MODEL_LOADING

ENGINE_INDEX = "0"
LABELS = ("model_name", "engine")

# vLLM's FinishReason values (vllm/v1/engine/__init__.py FINISH_REASON_STRINGS); vLLM creates every
# one.
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
# The bundled engine's finish reasons in vLLM's words. vLLM has no deadline of its own: a request
# past it is one the caller gave up on, as a client that went away is an `abort`. The engine's
# `error` (its model failed to load, a step it was in raised) is vLLM's `error`, a request-level
# internal failure.
FINISHED_REASON_OF = {"stop": "stop", "length": "length", "abort": "abort", "timeout": "abort",
                      "error": "error"}

# vLLM's bucket boundaries (PrometheusStatLogger).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
INTER_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                       7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

# num_requests_waiting_by_reason: vLLM sets reason="capacity" to the requests in its scheduler's
# waiting queue and reason="deferred" to those it skipped for a transient constraint (a LoRA adapter
# not loaded or over the LoRA budget, a KV transfer not arrived, a grammar not compiled), and
# documents that the two add up to num_requests_waiting. So `capacity` is every waiting request that
# is not deferred: those waiting for KV blocks (no_free_blocks, preempted) and also those behind the
# token budget or max_num_seqs, which vLLM leaves in the same queue. `deferred` is a request whose
# model is not resident (model_loading): the bundled engine's extra models are vLLM's LoRA adapters
# (see lora_requests_info), and vLLM defers a request whose adapter it cannot load yet.
CAPACITY, DEFERRED = "capacity", "deferred"


@dataclass(frozen=True, slots=True)
class RequestPhases:
    """A finished request's times in vLLM's meaning (monotonic seconds; a phase it never reached
    is 0)."""
    arrival: float
    finished: float
    first_token: float | None
    queue: float        # arrival to first `scheduled` (to the end when never scheduled)
    prefill: float      # first `scheduled` to `first_token` (to the end when no token came)
    decode: float       # `first_token` to the end
    inference: float    # first `scheduled` to the end
    reason: str         # vLLM's finished_reason

    @property
    def e2e(self) -> float:
        return self.finished - self.arrival


def request_phases(request) -> RequestPhases:
    """The phases of a request that ended, as vLLM measures them (the metrics' histograms and the
    spans' latencies); one that has no `finished` event ends now."""
    arrival = request.arrival_time
    finished = request.first_event_time("finished") or time.monotonic()
    scheduled = request.first_event_time("scheduled")
    first_token = request.first_event_time("first_token")
    return RequestPhases(
        arrival=arrival, finished=finished, first_token=first_token,
        queue=(scheduled if scheduled is not None else finished) - arrival,
        prefill=0.0 if scheduled is None else (first_token if first_token is not None else finished) - scheduled,
        decode=0.0 if first_token is None else finished - first_token,
        inference=0.0 if scheduled is None else finished - scheduled,
        reason=FINISHED_REASON_OF.get(request.finish_reason, "abort"))


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to max_value: vLLM's buckets for token counts per request."""
    buckets, scale = [], 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return buckets
            buckets.append(mantissa * scale)
        scale *= 10


class VllmMetrics:
    """An engine observer filling `registry` with vLLM V1's families for one served model."""

    def __init__(self, engine, served_model_name: str | None = None) -> None:
        config = engine.config
        self.model_name = served_model_name or engine.model_names[0]
        self.registry = CollectorRegistry()
        self._base_model = engine.model_names[0]
        self._attached_at = time.monotonic()
        # request id -> [output tokens counted, time of the last one]
        self._requests: dict[str, list] = {}
        # prompt tokens counted + tokens generated, this step
        self._iteration_tokens = 0
        values = (self.model_name, ENGINE_INDEX)
        r = self.registry

        def gauge(name, doc):
            return Gauge(name, doc, LABELS, registry=r).labels(*values)

        def counter(name, doc):
            return Counter(name, doc, LABELS, registry=r).labels(*values)

        def histogram(name, doc, buckets):
            return Histogram(name, doc, LABELS, registry=r, buckets=buckets).labels(*values)

        # scheduler state
        self.running = gauge(vllm.NUM_REQUESTS_RUNNING,
                             "Number of requests in model execution batches.")
        self.waiting = gauge(vllm.NUM_REQUESTS_WAITING,
                             "Number of requests waiting to be processed.")
        by_reason = Gauge(vllm.NUM_REQUESTS_WAITING_BY_REASON,
                          "Number of waiting requests by reason. Reason labels: 'capacity' = "
                          "waiting for scheduling capacity; 'deferred' = deferred by transient "
                          "constraints (here: its model is not resident). Sum of all reasons "
                          "equals vllm:num_requests_waiting.",
                          (*LABELS, "reason"), registry=r)
        self.waiting_capacity = by_reason.labels(*values, CAPACITY)
        self.waiting_deferred = by_reason.labels(*values, DEFERRED)
        self.kv_usage = gauge(vllm.KV_CACHE_USAGE_PERC, "KV-cache usage. 1 means 100 percent usage.")

        # counters
        self.preemptions = counter(vllm.NUM_PREEMPTIONS,
                                   "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter(vllm.PROMPT_TOKENS, "Number of prefill tokens processed.")
        self.generation_tokens = counter(vllm.GENERATION_TOKENS,
                                         "Number of generation tokens processed.")
        success = Counter(vllm.REQUEST_SUCCESS, "Count of successfully processed requests.",
                          (*LABELS, "finished_reason"), registry=r)
        self.request_success = {reason: success.labels(*values, reason) for reason in FINISHED_REASONS}

        # histograms of counts
        token_buckets = build_1_2_5_buckets(config.max_model_len)
        self.request_prompt_tokens = histogram(vllm.REQUEST_PROMPT_TOKENS,
                                               "Number of prefill tokens processed.", token_buckets)
        self.request_generation_tokens = histogram(vllm.REQUEST_GENERATION_TOKENS,
                                                   "Number of generation tokens processed.",
                                                   token_buckets)
        self.request_max_tokens = histogram(vllm.REQUEST_PARAMS_MAX_TOKENS,
                                            "Histogram of the max_tokens request parameter.",
                                            token_buckets)
        self.iteration_tokens = histogram(vllm.ITERATION_TOKENS,
                                          "Histogram of number of tokens per engine_step.",
                                          ITERATION_TOKENS_BUCKETS)

        # histograms of time
        self.ttft = histogram(vllm.TIME_TO_FIRST_TOKEN_SECONDS,
                              "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.inter_token = histogram(vllm.INTER_TOKEN_LATENCY_SECONDS,
                                     "Histogram of inter-token latency in seconds.",
                                     INTER_TOKEN_BUCKETS)
        self.time_per_output_token = histogram(vllm.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS,
                                               "Histogram of time_per_output_token_seconds per request.",
                                               INTER_TOKEN_BUCKETS)
        self.e2e = histogram(vllm.E2E_REQUEST_LATENCY_SECONDS, "Histogram of e2e request latency in seconds.",
                             REQUEST_LATENCY_BUCKETS)
        self.queue_time = histogram(vllm.REQUEST_QUEUE_TIME_SECONDS,
                                    "Histogram of time spent in WAITING phase for request.",
                                    REQUEST_LATENCY_BUCKETS)
        self.inference_time = histogram(vllm.REQUEST_INFERENCE_TIME_SECONDS,
                                        "Histogram of time spent in RUNNING phase for request.",
                                        REQUEST_LATENCY_BUCKETS)
        self.prefill_time = histogram(vllm.REQUEST_PREFILL_TIME_SECONDS,
                                      "Histogram of time spent in PREFILL phase for request.",
                                      REQUEST_LATENCY_BUCKETS)
        self.decode_time = histogram(vllm.REQUEST_DECODE_TIME_SECONDS,
                                     "Histogram of time spent in DECODE phase for request.",
                                     REQUEST_LATENCY_BUCKETS)

        # vllm:cache_config_info: vLLM's CacheConfig.metrics_info() as labels of a gauge set to 1
        # (vLLM emulates an info metric with a gauge). The fields the bundled engine has a value
        # for, in vLLM's meaning: its KV cache is sized in bytes (kv_cache_memory_bytes, which makes
        # vLLM ignore gpu_memory_utilization, left at vLLM's long-standing default), stored in the
        # model's dtype (cache_dtype "auto"), with no prefix caching, no CPU swap blocks and no
        # sliding window.
        info = {
            "block_size": str(config.block_size),
            "cache_dtype": "auto",
            "enable_prefix_caching": "False",
            "gpu_memory_utilization": "0.9",
            "is_attention_free": "False",
            "kv_cache_memory_bytes": str(config.kv_cache_memory),
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(engine.allocator.num_blocks),
            "num_gpu_blocks_override": "None",
            "sliding_window": "None",
            "engine": ENGINE_INDEX,
        }
        Gauge(vllm.CACHE_CONFIG_INFO, "Information of the LLMEngine CacheConfig", tuple(info),
              registry=r).labels(**info).set(1)

        # vllm:lora_requests_info exists only when vLLM serves LoRA adapters. The bundled engine
        # serves several models over one configuration, loading the cold ones on demand; that is
        # what vLLM does with LoRA adapters over one base model, so model-1.. are the adapters and
        # model-0 the base. Its value is the time of the last step (vLLM's set_to_current_time), its
        # labels the adapters with requests running and waiting, and max_lora how many may be
        # resident at once: the residency capacity less the base model's slot.
        self._lora = None
        if len(engine.model_names) > 1:
            self._lora = Gauge(vllm.LORA_REQUESTS_INFO, "Running stats on lora requests.",
                               ("max_lora", "waiting_lora_adapters", "running_lora_adapters"),
                               registry=r)
            self._max_lora = str(max(1, engine.residency.capacity - 1))

    # --- the observer (engine thread) -------------------------------------------------------------
    def on_step(self, engine, stats, batch) -> None:
        token_time = stats.end - stats.update_s        # when this step's tokens were appended
        for req, _ in batch.entries:
            if not req.finished:                       # one that finished was counted as it ended
                self._count_tokens(req, token_time)
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        deferred = 0
        residency = engine.residency
        for req in engine.scheduler.waiting:
            if batch.waiting_reasons.get(req.request_id) == MODEL_LOADING or not residency.is_resident(req.model):
                deferred += 1
        self.waiting_deferred.set(deferred)
        self.waiting_capacity.set(stats.num_waiting - deferred)
        allocator = engine.allocator
        self.kv_usage.set(1.0 - allocator.num_free_blocks() / allocator.num_blocks if allocator.num_blocks else 0.0)
        if stats.num_preempted:
            self.preemptions.inc(stats.num_preempted)
        if stats.num_scheduled_tokens or self._iteration_tokens:
            self.iteration_tokens.observe(self._iteration_tokens)
        self._iteration_tokens = 0
        if self._lora is not None:
            self._lora.labels(self._max_lora, self._adapters(engine.scheduler.waiting),
                              self._adapters(engine.scheduler.running)).set_to_current_time()

    def on_request_end(self, engine, request) -> None:
        phases = request_phases(request)
        # a request ending on its last token ends at that token's time
        self._count_tokens(request, phases.finished)
        self._requests.pop(request.request_id, None)
        generated = len(request.output_token_ids)
        self.request_success[phases.reason].inc()
        self.e2e.observe(phases.e2e)
        self.queue_time.observe(phases.queue)
        self.prefill_time.observe(phases.prefill)
        self.decode_time.observe(phases.decode)
        self.inference_time.observe(phases.inference)
        self.request_prompt_tokens.observe(request.num_prompt_tokens)
        self.request_generation_tokens.observe(generated)
        self.request_max_tokens.observe(request.params.max_tokens)
        self.time_per_output_token.observe(phases.decode / (generated - 1) if generated > 1 else 0.0)

    # --- helpers (engine thread) ------------------------------------------------------------------
    def _count_tokens(self, req, token_time: float) -> None:
        """Count the tokens `req` produced since it was last seen, all at `token_time`."""
        n = len(req.output_token_ids)
        state = self._requests.get(req.request_id)
        if state is None:
            first = req.first_event_time("first_token")
            if first is not None and first < self._attached_at:
                # its first tokens came before we attached
                self._requests[req.request_id] = [n, token_time]
                return
            state = self._requests[req.request_id] = [0, None]
        new = n - state[0]
        if new <= 0:
            return
        self.generation_tokens.inc(new)
        self._iteration_tokens += new
        last = state[1]
        if state[0] == 0:
            first = req.first_event_time("first_token")
            last = first if first is not None else token_time
            self.ttft.observe(last - req.arrival_time)
            self.prompt_tokens.inc(req.num_prompt_tokens)
            self._iteration_tokens += req.num_prompt_tokens
            new -= 1
        for _ in range(new):
            self.inter_token.observe(token_time - last)
            last = token_time
        state[0], state[1] = n, last

    def _adapters(self, requests) -> str:
        return ",".join(sorted({r.model for r in requests if r.model != self._base_model}))
