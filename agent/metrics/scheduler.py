"""Scheduler metrics: queue, busy ratio, token budget, head-of-line blocking, waits, preemptions."""

from __future__ import annotations

from stagelens.metrics.families import Scrape

_COUNTERS = (   # (metric, the engine_hooks.records.snapshot.Counters field, its help)
    ("stagelens_scheduler_steps_total", "steps_total", "Engine steps run."),
    ("stagelens_scheduler_busy_seconds_total", "busy_seconds_total", "Seconds the engine spent in steps."),
    ("stagelens_scheduler_idle_seconds_total", "idle_seconds_total", "Seconds the engine sat idle between steps."),
    ("stagelens_scheduler_scheduled_tokens_total", "tokens_scheduled_total", "Tokens scheduled into steps."),
    ("stagelens_scheduler_finished_requests_total", "requests_finished_total", "Requests finished."),
    ("stagelens_scheduler_preemptions_total", "preemptions_total", "Requests preempted for lack of KV blocks."),
    ("stagelens_scheduler_preemptions_with_free_memory_total", "preemptions_with_free_memory_total",
     "Preemptions while at least the configured share of KV memory was free."),
    ("stagelens_scheduler_allocation_failures_total", "allocation_failures_total",
     "KV allocations refused (admission or growth)."),
    ("stagelens_scheduler_allocation_failures_with_free_memory_total", "allocation_failures_with_free_memory_total",
     "KV allocations refused while at least the configured share of KV memory was free."),
)


def collect(out: Scrape, frame, _diagnosis) -> None:
    engine = frame.engine if frame else None
    if engine is None:
        return
    config, s, counters = engine.engine, engine.window.scheduler, engine.counters
    out.gauge("stagelens_scheduler_max_num_batched_tokens", "Token budget of a step (--max-num-batched-tokens).",
              config.max_num_batched_tokens)
    out.gauge("stagelens_scheduler_max_num_seqs", "Most sequences in a step (--max-num-seqs).", config.max_num_seqs)
    out.gauge("stagelens_scheduler_waiting_requests", "Requests waiting at the last step.", s.waiting)
    out.gauge("stagelens_scheduler_running_requests", "Requests running at the last step.", s.running)
    out.gauge("stagelens_scheduler_busy_ratio", "Share of the window the engine spent in steps.", s.busy_ratio)
    out.gauge("stagelens_scheduler_busy_while_waiting_ratio",
              "Share of time in steps, counting only steps with requests waiting.", s.busy_ratio_while_waiting)
    out.gauge("stagelens_scheduler_waiting_steps_ratio", "Share of the window's steps with requests waiting.",
              s.waiting_share)
    out.gauge("stagelens_scheduler_budget_use_ratio",
              "Tokens scheduled / token budget, over steps with requests waiting.", s.budget_use_while_waiting)
    out.gauge("stagelens_scheduler_head_of_line_ratio",
              "Share of short requests' wait spent behind one long prefill step.", s.head_of_line_share)
    out.gauge("stagelens_scheduler_step_mean_seconds", "Mean step time over the window.", s.step_time_mean_s)
    for q, wait, decided in (("p50", s.wait_p50_s, s.decided_wait_p50_s), ("p99", s.wait_p99_s, s.decided_wait_p99_s)):
        out.gauge(f"stagelens_scheduler_window_wait_{q}_seconds",
                  f"Scheduler wait {q} over the window's requests, those still waiting included.", wait)
        out.gauge(f"stagelens_scheduler_window_decided_wait_{q}_seconds",
                  f"Scheduler wait {q} the scheduler chose (step-boundary waits left out), over the window.", decided)
    for name, key, doc in _COUNTERS:   # 0 until the first event (then rate() and increase() see it); None: not counted
        out.counter(name, doc, getattr(counters, key))
    for reason, seconds in sorted((engine.wait_seconds_by_reason or {}).items()):
        out.counter("stagelens_scheduler_charged_wait_seconds_total",
                    "Wait charged to each reason at every scheduling decision, requests still waiting included.",
                    seconds, reason=reason)
