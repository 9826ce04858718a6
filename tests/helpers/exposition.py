"""The metrics an agent exports: parsed, their names, promtool, and lab frames to export."""

import copy
import os

from prometheus_client.parser import text_string_to_metric_families

from stagelens.diagnosis.evaluate import diagnose
from stagelens.engine_hooks import RecorderConfig, instrument, uninstrument
from stagelens.engine_hooks.engine import EngineConfig, LLMEngine, SamplingParams
from stagelens.engine_hooks.records.snapshot import EngineSnapshot
from stagelens.metrics import MetricsExporter
from stagelens.probes.gpu import GpuSample
from stagelens.probes.sample import NodeProbe, open_backend
from stagelens.probes.sample_json import plain_fields, read
from stagelens.sampler import Sampler
from tests.helpers.tools import tool_path

DGX = "tests/fixtures/nvml/dgx_a100.json"


def promtool() -> str:
    """promtool's path; skipped where it is missing, except under CI, where that is a failure."""
    return tool_path("promtool")


def lab_frames(model_dir, snapshot=DGX, ticks=2, allocator="contiguous", prompts=(17, 47, 77, 107),
               trace_ids=None):
    """Run prompts through the tiny engine, sample `ticks` frames; returns (frames, timelines, exporter)."""
    engine = LLMEngine(EngineConfig(model="tiny", model_dir=model_dir, max_model_len=256, kv_cache_memory="4MiB",
                                    device="cpu", allocator=allocator))
    rec = instrument(engine, RecorderConfig(usage_interval_s=0.0))
    try:
        for n in prompts:
            engine.submit(list(range(n)), SamplingParams(max_tokens=4))
        engine.run_until_idle(timeout=120)
        frames, timelines = [], []
        exporter = MetricsExporter(lambda: frames[-1], lambda: diagnose(frames),
                                   trace_id_for=lambda timeline: (trace_ids or {}).get(timeline.request_id))
        sampler = Sampler(node_probe=NodeProbe(open_backend(snapshot), pid=os.getpid()), engine_source=rec)
        sampler.listeners.append(lambda frame, finished: (frames.append(frame), timelines.extend(finished)))
        sampler.listeners.append(exporter.on_frame)
        for _ in range(ticks):
            sampler.tick()
        return frames, timelines, exporter
    finally:
        uninstrument(engine)


def _fill_missing(data, number=0.5):
    """A copy with every None figure set to a number: a frame in which every figure is known."""
    if isinstance(data, dict):
        return {k: _fill_missing(v, number) for k, v in data.items()}
    if isinstance(data, list):
        return [_fill_missing(v, number) for v in data]
    return number if data is None else data


def exported_metric_names(model_dir) -> set[str]:
    """Every sample name the exporter writes for a real frame whose figures are all known (a model load in
    progress, every rate measured), plus the histogram's, with the diagnosis."""
    frames, timelines, exporter = lab_frames(model_dir)
    full = copy.deepcopy(frames[-1])
    engine = _fill_missing(full.engine.to_dict())
    engine["health"]["failure"] = None        # a reason, not a figure: the engine serves
    engine["inferred"] = None                 # words, not figures (an engine read from outside has them)
    engine["intake"] = {"traces.spans": 1.0, "kv_events.messages": 1.0}   # what an outside engine sent
    engine["engine"]["source"] = "hooks"
    # words and flags, not figures
    engine["engine"]["generation"] = engine["engine"]["block_size_forced"] = None
    engine["engine"]["enable_prefix_caching"] = None
    engine["engine"]["kv_capacity_lever"] = None
    engine["window"]["cold_path"]["loads_in_progress"] = [{"model": "model-1", "since": 0.0, "seconds": 2.0}]
    full.engine = EngineSnapshot.from_dict(engine)
    full.node_sample.gpus = [read(GpuSample, _fill_missing(plain_fields(g))) for g in full.node_sample.gpus]
    exporter.collector.latest_frame = lambda: full
    names = {name for name, _ in parse(exporter.render()[0])}
    return names | {n.removesuffix("_bucket") for n in names if n.endswith("_bucket")}   # histograms by family


def parse(body: bytes) -> dict:
    """{(sample name, frozenset of labels): value} of a text exposition."""
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def names(samples: dict, name: str) -> list[dict]:
    return [dict(labels) for n, labels in samples if n == name]
