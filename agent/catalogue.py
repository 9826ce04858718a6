"""Every figure stagelens exports, declared once: its metric name, type, help and unit, the engine
snapshot field it reads (a dotted path in `EngineSnapshot`, as the signals' `reads` are written),
the label a screen gives it and the signal that judges it.

The collectors (agent/metrics), the fleet's PromQL (agent/fleet/query.py), the TUI's and what-if's
figures, the Grafana generator and the metrics reference (docs/metrics.md) read their names here; no
other module spells a `stagelens_` name (tests/metrics/test_catalogue.py). A screen keys a figure by
its field's last part, so the TUI, what-if and the snapshot call one figure by one name.
"""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.vocabulary import STATES

GAUGE, COUNTER, FLAG, INFO, HISTOGRAM = "gauge", "counter", "flag", "info", "histogram"
PREFIX = "stagelens_"


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure. `kind`: gauge, counter, flag (a 0/1 gauge from a boolean), info (a gauge of 1
    whose labels are the value) or histogram. `field`: where an engine snapshot holds it, None
    for node, diagnosis and agent figures. `metric`: None for a figure only screens show."""

    metric: str | None
    kind: str
    help: str
    unit: str = ""
    labels: tuple[str, ...] = ()
    field: str | None = None
    label: str | None = None
    signal: str | None = None

    @property
    def key(self) -> str | None:
        """The name screens and what-if give it: its snapshot field's last part."""
        return self.field.rsplit(".", 1)[-1] if self.field else None

    def read(self, snapshot):
        """Its value in an engine snapshot; None where it has no field or a section on the path
        is missing."""
        return at_path(snapshot, self.field) if self.field else None


def at_path(snapshot, path: str):
    """The snapshot's figure at a dotted path (`window.kv.fragmentation_ratio`); None where there
    is none."""
    for name in path.split("."):
        snapshot = getattr(snapshot, name, None)
    return snapshot


def _gauge(name: str, help: str, unit: str = "", *, labels: tuple[str, ...] = (),
           field: str | None = None, label: str | None = None, signal: str | None = None) -> Figure:
    return Figure(PREFIX + name, GAUGE, help, unit, labels, field, label, signal)


def _counter(name: str, help: str, unit: str = "", *, labels: tuple[str, ...] = (),
             field: str | None = None) -> Figure:
    return Figure(PREFIX + name, COUNTER, help, unit, labels, field)


def _flag(name: str, help: str, *, labels: tuple[str, ...] = ()) -> Figure:
    return Figure(PREFIX + name, FLAG, help, "", labels)


def _info(name: str, help: str, labels: tuple[str, ...]) -> Figure:
    return Figure(PREFIX + name, INFO, help, "", labels)


# the target label naming an agent's base URL where http://<instance> is not it (the fleet's link to
# a node)
TARGET_URL_LABEL = PREFIX + "url"
# a state as a gauge's value, in order of severity so that `>= 1` is warn or worse and `== 2` firing
# (the alert rules and dashboards rely on it)
STATE_VALUES = {state: rank - 1 for rank, state in enumerate(STATES)}
STATE_DOC = ", ".join(f"{state} {value}" for state, value in STATE_VALUES.items())
GPU_LABELS = ("gpu", "uuid", "pci_bus_id", "model_name", "hostname")
LINK_LABELS = ("gpu", "link", "remote")

# --- the agent's own health -----------------------------------------------------------------------
FRAME_TIMESTAMP = _gauge("frame_timestamp_seconds",
                         "When the frame this scrape reads was sampled (Unix time).", "seconds")
COLLECTOR_SUCCESS = _flag("collector_success",
                          "1 when the collector succeeded in the latest frame.",
                          labels=("collector",))
COLLECTOR_DURATION = _gauge("collector_duration_seconds",
                            "How long the collector took in the latest frame.", "seconds",
                            labels=("collector",))
DRIVER_STATE = _flag("driver_state",
                     "1 for the NVML driver's current state (ok, no_driver, error).",
                     labels=("state",))
DRIVER_INFO = _info("driver_info",
                    "1, labelled with the driver and CUDA versions and the NVML source.",
                    ("driver_version", "cuda_driver_version", "source"))
ENGINE_ATTACHED = _flag("engine_attached", "1 when the frame holds an engine snapshot.")
ENGINE_INFO = _info("engine_info", "1, labelled with the engine's configuration.",
                    ("model", "allocator", "policy", "device", "dtype", "chunked_prefill", "source"))
ENGINE_INTAKE = _counter(
    "engine_intake_total",
    "What an engine read from outside sent beside its /metrics, and its /metrics families refused "
    "as implausible (part: traces, kv_events, metrics), counted since the agent started.",
    labels=("part", "what"), field="intake")
ENGINE_WINDOW = _gauge("engine_window_seconds",
                       "Span of the window the engine's derived figures cover.", "seconds",
                       field="window.span_s")
ENGINE_UP = _flag("engine_up",
                  "1 while the engine's loop serves; 0 once it died (see the agent's log).")
ENGINE_STEP_ERRORS = _counter(
    "engine_step_errors_total",
    "Engine steps that raised, by phase; their requests failed, the engine went on.",
    labels=("phase",), field="health.step_errors")
ENGINE_REQUESTS_ENDED = _counter(
    "engine_requests_ended_total",
    "Requests the engine ended, by finish reason (length, stop, abort, timeout, error).",
    labels=("reason",), field="health.finish_reasons")
HOOK_ERRORS = _counter("hook_errors_total",
                       "Hook failures (the engine went on; the figures may be short).",
                       labels=("hook",), field="hook_errors")
RECORDER_DROPPED = _counter("recorder_dropped_total",
                            "Records the recorder's bounded rings overwrote unread.",
                            labels=("ring",), field="dropped")
SCRAPE_COLLECTOR_SUCCESS = _flag("scrape_collector_success",
                                 "1 when this part of the scrape succeeded.", labels=("collector",))
SCRAPE_COLLECTOR_DURATION = _gauge("scrape_collector_duration_seconds",
                                   "How long this part of the scrape took.", "seconds",
                                   labels=("collector",))
TRACE_SPANS = {
    "exported": _counter("trace_spans_exported_total", "Spans the trace exporter accepted.",
                         labels=("exporter",)),
    "dropped": _counter("trace_spans_dropped_total",
                        "Spans dropped before export: queue full, or still queued at shutdown.",
                        labels=("exporter",)),
    "failed": _counter("trace_spans_failed_total",
                       "Spans in a batch the trace exporter failed (returned FAILURE or raised).",
                       labels=("exporter",)),
}

# --- the diagnosis --------------------------------------------------------------------------------
VERDICT_STATE = _gauge("diagnosis_verdict_state", f"The worst stage state ({STATE_DOC}).")
ROOT_STAGE = _info("root_stage_info",
                   "1 for the stage the diagnosis names as the root of the chain.", ("stage",))
STAGE_STATE = _gauge("stage_state", f"State of the bottleneck stage ({STATE_DOC}).",
                     labels=("stage",))
STAGE_STATE_SINCE = _gauge("stage_state_since_timestamp_seconds", "When the stage entered its current state.",
                           "seconds", labels=("stage",))
SIGNAL_VALUE = _gauge("signal_value", "Value of a stage signal over the diagnosis window.",
                      labels=("stage", "signal"))
SIGNAL_BOUND = _info(
    "signal_bound_info",
    "1 where a signal's value (stagelens_signal_value) is a bound of it, not the value itself: "
    "bound at_least or at_most (an engine's coarse histogram places the value only within a "
    "bucket).",
    ("stage", "signal", "bound"))
SIGNAL_STATE = _gauge("signal_state", f"State of a stage signal ({STATE_DOC}).",
                      labels=("stage", "signal"))
SIGNAL_THRESHOLD = _gauge("signal_threshold",
                          "The agent's threshold of a signal for a level (warn, firing).",
                          labels=("signal", "level"))

# --- the KV cache ---------------------------------------------------------------------------------
KV_CAPACITY = _gauge("kv_cache_capacity_bytes", "Bytes of device memory given to the KV cache.",
                     "bytes", field="engine.kv_cache_bytes")
KV_BLOCK_SIZE = _gauge("kv_block_size_tokens", "Tokens per KV block (--block-size).", "tokens",
                       field="engine.block_size")
KV_BLOCKS = _gauge("kv_cache_blocks", "KV blocks in the cache.", "blocks", field="usage.num_blocks")
KV_USED_BLOCKS = _gauge("kv_cache_used_blocks", "KV blocks held by requests.", "blocks",
                        field="usage.used_blocks")
KV_FREE_BLOCKS = _gauge("kv_cache_free_blocks", "KV blocks free.", "blocks")
KV_UNUSABLE_FREE_BLOCKS = _gauge(
    "kv_cache_unusable_free_blocks",
    "Free KV blocks no request can use (contiguous extents too short).", "blocks",
    field="usage.unusable_free_blocks")
KV_LARGEST_FREE_RUN = _gauge("kv_cache_largest_free_run_blocks",
                             "The longest run of contiguous free KV blocks.", "blocks",
                             field="usage.largest_free_run")
KV_USAGE = _gauge("kv_cache_usage_ratio", "Share of KV blocks held by requests.", "ratio")
KV_FRAGMENTATION = _gauge(
    "kv_fragmentation_ratio",
    "KV slots allocated but holding no token (plus unusable free memory) / slots allocated, over the window.",
    "ratio", field="window.kv.fragmentation_ratio", label="KV fragmentation",
    signal="kv_fragmentation_ratio")
KV_ACCESS_EFFICIENCY = _gauge(
    "kv_access_efficiency_ratio",
    "Useful KV bytes read by attention / KV bytes actually moved, over the window.", "ratio",
    field="window.kv.access_efficiency", label="KV access efficiency", signal="kv_access_efficiency")
KV_READ_BANDWIDTH = _gauge(
    "kv_read_bandwidth_bytes_per_second",
    "KV bytes moved per second of attention, over the window's decode steps.", "bytes per second",
    field="window.kv.read_bandwidth_bytes_per_s")
KV_EFFECTIVE_BANDWIDTH = _gauge(
    "kv_effective_bandwidth_ratio",
    "Useful KV bytes per second / what an ideal contiguous layout achieves for the same batch on "
    "this device, over the window's decode steps.",
    "ratio", field="window.kv.effective_bandwidth_ratio", label="effective KV read bandwidth",
    signal="effective_bandwidth_ratio")
KV_BANDWIDTH_SWING = _gauge(
    "kv_bandwidth_swing_ratio",
    "Coefficient of variation of decode-step KV read bandwidth over the window.", "ratio",
    field="window.kv.bandwidth_swing_cv", label="KV bandwidth swing", signal="bandwidth_swing_cv")
KV_GATHERED = _gauge("kv_gathered_ratio",
                     "Share of moved KV bytes read by gathers over non-contiguous blocks.", "ratio",
                     field="window.kv.gathered_share")
KV_BLOCK_RUNS = _gauge("kv_block_runs_per_sequence",
                       "Contiguous block runs per sequence read, over the window.", "runs",
                       field="window.kv.block_runs_per_sequence")
KV_ATTENTION_SHARE = _gauge("kv_attention_step_ratio",
                            "Share of step time spent in attention, over the window.", "ratio",
                            field="window.kv.attention_share_of_step")
KV_USEFUL_BYTES = _counter("kv_useful_bytes_total", "KV bytes attention needed.", "bytes",
                           field="counters.kv_useful_bytes_total")
KV_MOVED_BYTES = _counter("kv_moved_bytes_total", "KV bytes attention moved.", "bytes",
                          field="counters.kv_moved_bytes_total")
KV_GATHERED_BYTES = _counter("kv_gathered_bytes_total", "KV bytes moved by gathers.", "bytes",
                             field="counters.kv_gathered_bytes_total")
KV_ATTENTION_SECONDS = _counter("kv_attention_seconds_total", "Seconds spent in attention.",
                                "seconds", field="counters.attention_seconds_total")
KV_BLOCKS_STORED = _gauge(
    "kv_blocks_stored", "KV blocks the engine's KV events said were stored, over the window.",
    "blocks", field="window.kv.blocks_stored")
KV_BLOCKS_REMOVED = _gauge(
    "kv_blocks_removed", "KV blocks the engine's KV events said were removed, over the window.",
    "blocks", field="window.kv.blocks_removed")
KV_BLOCKS_RESTORED = _gauge(
    "kv_blocks_restored",
    "KV blocks stored again soon after their removal (KV recomputed), over the window, from the engine's KV events.",
    "blocks", field="window.kv.blocks_restored")
KV_BLOCK_LIFETIME_P50 = _gauge(
    "kv_block_lifetime_p50_seconds",
    "Median store-to-removal time of the KV blocks removed in the window, from the engine's KV events.",
    "seconds", field="window.kv.block_lifetime_p50_s")

# --- the scheduler --------------------------------------------------------------------------------
MAX_NUM_BATCHED_TOKENS = _gauge("scheduler_max_num_batched_tokens",
                                "Token budget of a step (--max-num-batched-tokens).", "tokens",
                                field="engine.max_num_batched_tokens")
MAX_NUM_SEQS = _gauge("scheduler_max_num_seqs", "Most sequences in a step (--max-num-seqs).",
                      "sequences", field="engine.max_num_seqs")
WAITING = _gauge("scheduler_waiting_requests", "Requests waiting at the last step.", "requests",
                 field="window.scheduler.waiting", label="waiting")
RUNNING = _gauge("scheduler_running_requests", "Requests running at the last step.", "requests",
                 field="window.scheduler.running", label="running")
BUSY = _gauge("scheduler_busy_ratio", "Share of the window the engine spent in steps.", "ratio",
              field="window.scheduler.busy_ratio", label="busy")
BUSY_WHILE_WAITING = _gauge(
    "scheduler_busy_while_waiting_ratio",
    "Share of time in steps, counting only steps with requests waiting.", "ratio",
    field="window.scheduler.busy_ratio_while_waiting", label="busy while waiting",
    signal="compute_utilisation")
WAITING_STEPS = _gauge("scheduler_waiting_steps_ratio",
                       "Share of the window's steps with requests waiting.", "ratio",
                       field="window.scheduler.waiting_share")
BUDGET_USE = _gauge(
    "scheduler_budget_use_ratio",
    "Tokens scheduled / token budget, over steps with requests waiting.", "ratio",
    field="window.scheduler.budget_use_while_waiting", label="budget use", signal="token_budget_use")
HEAD_OF_LINE = _gauge(
    "scheduler_head_of_line_ratio",
    "Share of short requests' wait spent behind one long prefill step.", "ratio",
    field="window.scheduler.head_of_line_share", label="head-of-line share",
    signal="head_of_line_blocking")
STEP_MEAN = _gauge("scheduler_step_mean_seconds", "Mean step time over the window.", "seconds",
                   field="window.scheduler.step_time_mean_s")
_STILL_WAITING = "over the window's requests, those still waiting included."
_DECIDED = "the scheduler chose (step-boundary waits left out), over the window."
WAIT_P50 = _gauge("scheduler_window_wait_p50_seconds", f"Scheduler wait p50 {_STILL_WAITING}",
                  "seconds", field="window.scheduler.wait_p50_s")
WAIT_P99 = _gauge("scheduler_window_wait_p99_seconds", f"Scheduler wait p99 {_STILL_WAITING}",
                  "seconds", field="window.scheduler.wait_p99_s")
DECIDED_WAIT_P50 = _gauge("scheduler_window_decided_wait_p50_seconds",
                          f"Scheduler wait p50 {_DECIDED}", "seconds",
                          field="window.scheduler.decided_wait_p50_s", label="scheduler wait p50")
DECIDED_WAIT_P99 = _gauge("scheduler_window_decided_wait_p99_seconds",
                          f"Scheduler wait p99 {_DECIDED}", "seconds",
                          field="window.scheduler.decided_wait_p99_s", label="scheduler wait p99",
                          signal="scheduler_wait_p99")
DECODE_RATE = Figure(None, GAUGE, "Decode tokens a second over the window.", "tokens per second",
                     field="window.scheduler.decode_tokens_per_s", label="decode tokens/s")
STEPS = _counter("scheduler_steps_total", "Engine steps run.", "steps", field="counters.steps_total")
BUSY_SECONDS = _counter("scheduler_busy_seconds_total", "Seconds the engine spent in steps.",
                        "seconds", field="counters.busy_seconds_total")
IDLE_SECONDS = _counter("scheduler_idle_seconds_total",
                        "Seconds the engine sat idle between steps.", "seconds",
                        field="counters.idle_seconds_total")
SCHEDULED_TOKENS = _counter("scheduler_scheduled_tokens_total", "Tokens scheduled into steps.",
                            "tokens", field="counters.tokens_scheduled_total")
FINISHED_REQUESTS = _counter("scheduler_finished_requests_total", "Requests finished.", "requests",
                             field="counters.requests_finished_total")
PREEMPTIONS = _counter("scheduler_preemptions_total", "Requests preempted for lack of KV blocks.",
                       "requests", field="counters.preemptions_total")
PREEMPTIONS_WITH_FREE_MEMORY = _counter(
    "scheduler_preemptions_with_free_memory_total",
    "Preemptions while at least the configured share of KV memory was free.", "requests",
    field="counters.preemptions_with_free_memory_total")
ALLOCATION_FAILURES = _counter("scheduler_allocation_failures_total",
                               "KV allocations refused (admission or growth).", "allocations",
                               field="counters.allocation_failures_total")
ALLOCATION_FAILURES_WITH_FREE_MEMORY = _counter(
    "scheduler_allocation_failures_with_free_memory_total",
    "KV allocations refused while at least the configured share of KV memory was free.",
    "allocations", field="counters.allocation_failures_with_free_memory_total")
CHARGED_WAIT = _counter(
    "scheduler_charged_wait_seconds_total",
    "Wait charged to each reason at every scheduling decision, requests still waiting included.",
    "seconds", labels=("reason",), field="wait_seconds_by_reason")
# per finished request, fed by the sampler (agent/metrics/waits.py)
WAIT_HISTOGRAM = Figure(PREFIX + "scheduler_wait_seconds", HISTOGRAM,
                        "Per finished request: arrival to first scheduled plus every wait after a preemption.",
                        "seconds")
REQUEST_WAIT_BY_REASON = _counter("request_wait_seconds_total",
                                  "Scheduler wait of finished requests, by the reason the scheduler gave.",
                                  "seconds", labels=("reason",))

# --- the cold path --------------------------------------------------------------------------------
MODEL_LOADS = _counter("model_loads_total", "Model loads finished.", "loads",
                       field="counters.loads_total")
MODEL_LOAD_BYTES = _counter("model_load_bytes_total", "Bytes of weights loaded.", "bytes",
                            field="counters.load_bytes_total")
H2D_BYTES = _counter("cold_path_h2d_bytes_total",
                     "Bytes copied host to device (weights and inputs).", "bytes",
                     field="counters.h2d_bytes_total")
H2D_RATE = _gauge("cold_path_h2d_bytes_per_second", "Host-to-device copy rate over the window.",
                  "bytes per second", field="window.cold_path.h2d_bytes_per_s")
LOADS_IN_PROGRESS = _gauge("model_loads_in_progress", "Model loads running now.", "loads")
LOAD_IN_PROGRESS_SECONDS = _gauge("model_load_in_progress_seconds",
                                  "How long a running model load has taken so far.", "seconds",
                                  labels=("model",))
NUM_PRELOAD = _gauge("model_num_preload", "Models kept resident (--num-preload-models).", "models",
                     field="engine.num_preload_models")
MODEL_RESIDENT = _info("model_resident", "1 for each model resident on the device.", ("model",))
DECODE_STEP_SECONDS = _gauge("cold_path_decode_step_seconds",
                             "Mean decode step time over the window, with a model load running or not.", "seconds",
                             labels=("model_load",))
STEP_TIME_INFLATION = _gauge(
    "cold_path_step_time_inflation",
    "Decode step time during model loads / without (1 is no inflation).", "ratio",
    field="window.cold_path.step_time_inflation", label="step-time inflation",
    signal="step_time_inflation")
WAITING_ON_MODEL = _gauge("cold_path_waiting_on_model_requests",
                          "Requests queued because their model is not resident.", "requests",
                          field="window.cold_path.waiting_on_model")
WINDOW_LOADS = _gauge("cold_path_window_loads", "Model loads finished in the window.", "loads",
                      field="window.cold_path.loads_in_window")

# --- the tail -------------------------------------------------------------------------------------
TAIL_SECONDS = _gauge("tail_seconds",
                      "The window's requests' TTFT or latency at the quantile (the tail starts at the 99th).",
                      "seconds", labels=("metric", "percentile"))
TAIL_SHARE = _gauge(
    "tail_share",
    "Share of the P99 tail's time charged to each stage (compute: the requests' own work and step "
    "boundaries; queued: queue time whose reason the engine did not publish, charged to no stage), "
    "over the window.",
    "ratio", labels=("metric", "percentile", "stage"))

# --- GPUs, links, topology ------------------------------------------------------------------------
GPU_INFO = _info("gpu_info",
                 "1 for each GPU, with its identity labels (join per-link series on gpu).",
                 GPU_LABELS)
GPU_LOST = _flag("gpu_lost", "1 when NVML reports the GPU lost (fallen off the bus).",
                 labels=GPU_LABELS)
GPU_UTILIZATION = _gauge("gpu_utilization_ratio", "Share of time a kernel ran on the GPU (NVML).",
                         "ratio", labels=GPU_LABELS)
GPU_MEMORY_UTILIZATION = _gauge("gpu_memory_utilization_ratio",
                                "Share of time device memory was read or written (NVML).", "ratio",
                                labels=GPU_LABELS)
GPU_MEMORY_USED = _gauge("gpu_memory_used_bytes", "Device memory in use.", "bytes",
                         labels=GPU_LABELS)
GPU_MEMORY_TOTAL = _gauge("gpu_memory_total_bytes", "Device memory in all.", "bytes",
                          labels=GPU_LABELS)
GPU_CLOCK = _gauge("gpu_clock_hertz", "Current clock of the SM or memory domain.", "hertz",
                   labels=("clock", *GPU_LABELS))
GPU_THROTTLE_REASON = _gauge("gpu_throttle_reason",
                             "1 while the clocks are held down for this reason.",
                             labels=("reason", *GPU_LABELS))
GPU_POWER = _gauge("gpu_power_watts", "Power draw.", "watts", labels=GPU_LABELS)
GPU_TEMPERATURE = _gauge("gpu_temperature_celsius", "GPU core temperature.", "celsius",
                         labels=GPU_LABELS)
PCIE_GENERATION = _gauge("pcie_link_generation", "Negotiated PCIe generation.", labels=GPU_LABELS)
PCIE_MAX_GENERATION = _gauge("pcie_link_max_generation",
                             "Highest PCIe generation the link supports.", labels=GPU_LABELS)
PCIE_WIDTH = _gauge("pcie_link_width_lanes", "Negotiated PCIe width.", "lanes", labels=GPU_LABELS)
PCIE_MAX_WIDTH = _gauge("pcie_link_max_width_lanes", "Widest PCIe width the link supports.",
                        "lanes", labels=GPU_LABELS)
PCIE_BELOW_MAX = _flag("pcie_link_below_max",
                       "1 when the link runs below its maximum generation or width.",
                       labels=GPU_LABELS)
PCIE_BANDWIDTH = _gauge("pcie_link_bandwidth_bytes_per_second",
                        "Bandwidth per direction at the negotiated generation and width.",
                        "bytes per second", labels=GPU_LABELS)
PCIE_THROUGHPUT = _gauge("pcie_throughput_bytes_per_second",
                         "PCIe throughput per direction (NVML, ~20 ms window).", "bytes per second",
                         labels=("direction", *GPU_LABELS))
PCIE_UTILIZATION = _gauge("pcie_utilization_ratio",
                          "PCIe throughput / the link's bandwidth, per direction.", "ratio",
                          labels=("direction", *GPU_LABELS), signal="pcie_backpressure")
PCIE_REPLAYS = _counter("pcie_replays_total",
                        "PCIe replays (link-level retransmissions) since the driver loaded.",
                        labels=GPU_LABELS)
PCIE_REPLAY_INCREMENTS = _gauge("pcie_replay_increments", "PCIe replays since the previous sample.",
                                labels=GPU_LABELS)
NVLINK_UP = _flag("nvlink_up",
                  "1 when the NVLink is active; remote is 'switch' (NVSwitch) or the peer GPU.",
                  labels=LINK_LABELS)
NVLINK_BANDWIDTH = _gauge("nvlink_bandwidth_bytes_per_second", "NVLink bandwidth per direction.",
                          "bytes per second", labels=LINK_LABELS)
NVLINK_THROUGHPUT = _gauge("nvlink_throughput_bytes_per_second", "NVLink throughput per direction.",
                           "bytes per second", labels=("direction", *LINK_LABELS))
NVLINK_UTILIZATION = _gauge("nvlink_utilization_ratio",
                            "NVLink throughput / its bandwidth, per direction.", "ratio",
                            labels=("direction", *LINK_LABELS))
NVLINK_ERRORS = _counter("nvlink_errors_total",
                         "NVLink error counters (replay, recovery, CRC) per link.",
                         labels=("counter", *LINK_LABELS))
GPU_TOPOLOGY = _info("gpu_topology_info",
                     "1 for each GPU pair; path is the nvidia-smi topo -m cell (NV#, PIX, PXB, PHB, NODE, SYS).",
                     ("gpu", "peer", "path"))
GPU_NUMA_NODE = _gauge("gpu_numa_node", "The NUMA node closest to the GPU.", labels=("gpu",))

# --- the host -------------------------------------------------------------------------------------
HOST_IOWAIT = _gauge("host_cpu_iowait_ratio",
                     "Share of CPU time in iowait since the previous sample.", "ratio")
HOST_CPUS = _gauge("host_cpus", "Logical CPUs.", "cpus")
HOST_MEMORY_TOTAL = _gauge("host_memory_total_bytes", "Host memory in all.", "bytes")
HOST_MEMORY_AVAILABLE = _gauge("host_memory_available_bytes", "Host memory available.", "bytes")
PROCESS_THREADS = _gauge("process_threads", "Threads of the engine process.", "threads")
PROCESS_THREADS_UNINTERRUPTIBLE = _gauge(
    "process_threads_uninterruptible",
    "Engine threads in uninterruptible sleep (state D): blocked on I/O or a driver call.", "threads")
PROCESS_THREADS_UNINTERRUPTIBLE_RATIO = _gauge(
    "process_threads_uninterruptible_ratio", "Share of engine threads in uninterruptible sleep.",
    "ratio", signal="threads_blocked_on_data")
PROCESS_CONTEXT_SWITCHES = _counter("process_context_switches_total",
                                    "Context switches of the engine's threads.", labels=("kind",))

FIGURES: tuple[Figure, ...] = tuple(
    value for name, value in sorted(globals().items()) if isinstance(value, Figure)
) + tuple(TRACE_SPANS.values())
