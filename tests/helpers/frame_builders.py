"""Frames built by hand for diagnosis tests: the shape the sampler produces, with chosen figures."""

from stagelens.engine_hooks.records.snapshot import EngineSnapshot
from stagelens.frame import Frame
from stagelens.probes.gpu import GpuSample
from stagelens.probes.host import HostSample, ProcessSample
from stagelens.probes.sample import SAMPLE_VERSION, DriverStatus, NodeSample
from stagelens.probes.sample_json import read


def engine_snapshot(kv=None, scheduler=None, cold_path=None, counters=None, device="cpu", **engine_cfg) -> dict:
    """The JSON of an engine snapshot (docs/snapshot.md) of a busy, healthy engine, with the given figures."""
    window = {
        "span_s": 10.0,
        "kv": {"fragmentation_ratio": 0.05, "access_efficiency": 0.9, "effective_bandwidth_ratio": 0.9,
               "bandwidth_swing_cv": 0.1, "read_bandwidth_bytes_per_s": 5e9, "sequence_lengths": [], **(kv or {})},
        "scheduler": {"steps": 100, "requests_finished": 20, "waiting": 0, "running": 4,
                      "decided_wait_p99_s": 0.001, "busy_ratio_while_waiting": 0.95, "waiting_share": 0.0,
                      "budget_use_while_waiting": 0.9, "head_of_line_share": 0.0, "wait_seconds_by_reason": {},
                      **(scheduler or {})},
        "cold_path": {"step_time_inflation": None, "waiting_on_model": 0, "loads_in_window": 0,
                      "loads_in_progress": [], **(cold_path or {})},
    }
    cfg = {"model": "small", "models": 1, "allocator": "paged", "block_size": 16, "max_num_seqs": 16,
           "max_num_batched_tokens": 512, "enable_chunked_prefill": True, "policy": "fcfs", "max_model_len": 2048,
           "device": device, **engine_cfg}
    return {"format": "stagelens-engine/1", "clock": {"monotonic": 0.0, "wall": 1_800_000_000.0},
            "engine": cfg, "window": window,
            "counters": {"preemptions_with_free_memory_total": 0, "allocation_failures_with_free_memory_total": 0,
                         **(counters or {})}}


def node_sample(t: float, gpus: list | None = None, host: dict | None = None) -> NodeSample:
    """A node sample with the given GPUs (their JSON, read as a frame reader reads it; indexed by position
    where they do not say) and host figures (set as an in-process probe could: a NaN stays); an idle host and
    process where a figure is not given."""
    return NodeSample(version=SAMPLE_VERSION, hostname="test-node", time_unix=1_800_000_000.0 + t, time_monotonic=t,
                      driver=DriverStatus(state="ok", source="test"),
                      gpus=[read(GpuSample, {"index": i, **g}, f"gpus[{i}]") for i, g in enumerate(gpus or [])],
                      host=None if host is None else _host(**host))


def _host(process: dict | None = None, **figures) -> HostSample:
    idle = {"cpu_count": 1, "cpu_busy_percent": [0.0], "cpu_iowait_percent": [0.0], "cpu_iowait_ratio": 0.0,
            "memory_total_bytes": 0, "memory_available_bytes": 0, "memory_used_ratio": 0.0}
    engine = None if process is None else ProcessSample(**{"pid": 0, **process})
    return HostSample(**{**idle, **figures}, process=engine)


def frame(t: float, engine: dict | EngineSnapshot | None = None, gpus: list | None = None,
          host: dict | None = None) -> Frame:
    """One frame at second `t`; an engine snapshot given as JSON is read as the frame reader reads it."""
    node = None
    if gpus is not None or host is not None:
        node = node_sample(t, gpus, host)
    if isinstance(engine, dict):
        engine = EngineSnapshot.from_dict(engine)
    return Frame(time_unix=1_800_000_000.0 + t, time_monotonic=t, node="test-node", node_sample=node, engine=engine)


def series(values_by_time: list[dict], **common) -> list[Frame]:
    """One frame a second; each item gives the kv/scheduler/cold_path overrides of that second."""
    return [frame(i, engine_snapshot(**{**common, **v})) for i, v in enumerate(values_by_time)]
