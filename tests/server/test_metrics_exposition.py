"""The Prometheus exposition equals the frame and diagnosis it was read from; promtool accepts it.

Frames come from the real tiny engine on CPU, instrumented, and the DGX A100 NVML snapshot.
What other metrics and alerts tests share (`lab_frames`, `parse`, `promtool`) is in tests/helpers/exposition.py.
"""

import os
import subprocess

import pytest

from stagelens.diagnosis.evaluate import diagnose
from stagelens.metrics import WAIT_BUCKETS, MetricsExporter
from stagelens.metrics.collector import SECTIONS, StagelensCollector
from stagelens.probes.sample import NodeProbe, open_backend
from stagelens.sampler import Sampler
from tests.helpers.exposition import lab_frames, names, parse, promtool

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def value(samples: dict, name: str, **labels):
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture(scope="module")
def lab(model_dir):
    trace_ids = {"req-0": "0af7651916cd43dd8448eb211c80319c"}
    frames, timelines, exporter = lab_frames(model_dir, trace_ids=trace_ids)
    body, content_type = exporter.render("text/plain")
    return frames, timelines, exporter, parse(body), body, content_type


def test_kv_scheduler_and_counters_equal_the_frame(lab):
    frames, _, _, samples, _, content_type = lab
    assert content_type.startswith("text/plain; version=0.0.4")
    engine = frames[-1].engine
    kv, sched, counters = engine.window.kv, engine.window.scheduler, engine.counters
    assert kv.fragmentation_ratio > 0.3   # the contiguous allocator over-reserves: the case the metric exists for
    assert value(samples, "stagelens_kv_fragmentation_ratio") == pytest.approx(kv.fragmentation_ratio)
    assert value(samples, "stagelens_kv_access_efficiency_ratio") == pytest.approx(kv.access_efficiency)
    assert value(samples, "stagelens_kv_read_bandwidth_bytes_per_second") == pytest.approx(
        kv.read_bandwidth_bytes_per_s)
    usage = engine.usage
    assert value(samples, "stagelens_kv_cache_blocks") == usage.num_blocks
    assert value(samples, "stagelens_kv_cache_free_blocks") == usage.num_blocks - usage.used_blocks
    assert value(samples, "stagelens_scheduler_steps_total") == counters.steps_total
    assert value(samples, "stagelens_scheduler_busy_seconds_total") == pytest.approx(counters.busy_seconds_total)
    assert value(samples, "stagelens_scheduler_allocation_failures_total") == counters.allocation_failures_total
    assert value(samples, "stagelens_scheduler_preemptions_total") == counters.preemptions_total
    assert value(samples, "stagelens_scheduler_waiting_requests") == sched.waiting
    assert value(samples, "stagelens_scheduler_head_of_line_ratio") == pytest.approx(sched.head_of_line_share)
    for reason, seconds in engine.wait_seconds_by_reason.items():
        assert value(samples, "stagelens_scheduler_charged_wait_seconds_total", reason=reason) == pytest.approx(seconds)
    assert value(samples, "stagelens_model_loads_total") == counters.loads_total
    hooks = {d["hook"] for d in names(samples, "stagelens_hook_errors_total")}
    assert {"step_end", "schedule", "forward", "attention"} <= hooks
    assert all(value(samples, "stagelens_hook_errors_total", hook=h) == 0 for h in hooks)
    for ring, dropped in engine.dropped.to_dict().items():
        assert value(samples, "stagelens_recorder_dropped_total", ring=ring) == dropped


def test_a_missing_figure_is_left_out_not_exported_as_zero(lab):
    frames, _, _, samples, _, _ = lab
    cold = frames[-1].engine.window.cold_path
    assert cold.step_time_during_load_s is None and cold.step_time_without_load_s is not None
    assert names(samples, "stagelens_cold_path_decode_step_seconds") == [{"model_load": "none"}]
    assert not names(samples, "stagelens_cold_path_step_time_inflation")


def test_every_gpu_link_and_topology_pair_of_the_dgx(lab):
    frames, _, _, samples, _, _ = lab
    gpus = frames[-1].node_sample.gpus
    hostname = frames[-1].node_sample.hostname
    assert len(gpus) == 8
    for g in gpus:
        labels = {"gpu": str(g.index), "uuid": g.uuid, "pci_bus_id": g.pci_bus_id,
                  "model_name": g.name, "hostname": hostname}
        assert value(samples, "stagelens_gpu_utilization_ratio", **labels) == pytest.approx(g.utilization_gpu_ratio)
        assert value(samples, "stagelens_gpu_memory_used_bytes", **labels) == g.memory_used_bytes
        assert value(samples, "stagelens_gpu_clock_hertz", clock="sm", **labels) == g.clock_sm_mhz * 1e6
        assert value(samples, "stagelens_gpu_lost", **labels) == 0
        assert value(samples, "stagelens_pcie_link_generation", **labels) == g.pcie.gen
        assert value(samples, "stagelens_pcie_link_below_max", **labels) == 0
        assert value(samples, "stagelens_pcie_throughput_bytes_per_second", direction="tx", **labels) == \
            pytest.approx(g.pcie.tx_bytes_per_second)
        for link in g.nvlinks:
            assert value(samples, "stagelens_nvlink_up", gpu=str(g.index), link=str(link.link),
                         remote="switch") == 1
    assert len(names(samples, "stagelens_nvlink_up")) == 8 * 12
    pairs = names(samples, "stagelens_gpu_topology_info")
    assert len(pairs) == 8 * 7 and {p["path"] for p in pairs} == {"NV12"}
    assert value(samples, "stagelens_driver_state", state="ok") == 1


def test_collector_status_of_the_frame_and_of_the_scrape(lab):
    frames, _, _, samples, _, _ = lab
    for c in frames[-1].collectors:
        assert value(samples, "stagelens_collector_success", collector=c.name) == int(c.success)
        assert value(samples, "stagelens_collector_duration_seconds", collector=c.name) == pytest.approx(
            c.duration_seconds)
    sections = {d["collector"] for d in names(samples, "stagelens_scrape_collector_success")}
    assert sections == {name for name, _ in SECTIONS} | {"read_frame", "read_diagnosis"}


def test_stage_states_signals_and_thresholds_equal_the_diagnosis(lab):
    frames, _, _, samples, _, _ = lab
    diagnosis = diagnose(frames)
    encoding = {"unknown": -1, "ok": 0, "warn": 1, "firing": 2}
    for stage in diagnosis.stages:
        assert value(samples, "stagelens_stage_state", stage=stage.stage) == encoding[stage.state]
        for e in stage.evidence:
            if e.value is None:
                assert ("stagelens_signal_value", frozenset({"stage": stage.stage, "signal": e.signal}.items())) \
                    not in samples
            else:
                assert value(samples, "stagelens_signal_value", stage=stage.stage, signal=e.signal) == \
                    pytest.approx(e.value)
            if e.firing is not None:
                assert value(samples, "stagelens_signal_threshold", signal=e.signal, level="firing") == e.firing
    assert diagnosis.stage("kv_cache").state == "firing"   # fragmentation far over 0.3, held for 2 samples
    assert value(samples, "stagelens_root_stage_info", stage="kv_cache") == 1


def test_scheduler_wait_histogram_counts_every_finished_request(lab):
    _, timelines, _, samples, _, _ = lab
    assert len(timelines) == 4
    assert value(samples, "stagelens_scheduler_wait_seconds_count") == 4
    assert value(samples, "stagelens_scheduler_wait_seconds_sum") == pytest.approx(
        sum(t.scheduler_wait_s for t in timelines))
    buckets = names(samples, "stagelens_scheduler_wait_seconds_bucket")
    assert sorted(float(b["le"]) for b in buckets if b["le"] != "+Inf") == list(WAIT_BUCKETS)
    within = sum(t.scheduler_wait_s <= 0.0005 for t in timelines)
    assert value(samples, "stagelens_scheduler_wait_seconds_bucket", le="0.0005") == within
    by_reason: dict = {}
    for t in timelines:
        for reason, seconds in t.wait_by_reason().items():
            by_reason[reason] = by_reason.get(reason, 0.0) + seconds
    for reason, seconds in by_reason.items():
        assert value(samples, "stagelens_request_wait_seconds_total", reason=reason) == pytest.approx(seconds)


def test_openmetrics_carries_the_trace_id_exemplar(lab):
    _, _, exporter, _, _, _ = lab
    body, content_type = exporter.render(OPENMETRICS)
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith(b"# EOF\n")
    lines = [ln for ln in body.decode().splitlines() if ln.startswith("stagelens_scheduler_wait_seconds_bucket")]
    with_exemplar = [ln for ln in lines if "# {trace_id=" in ln]
    assert len(with_exemplar) == 1   # only req-0 had a trace id
    assert 'trace_id="0af7651916cd43dd8448eb211c80319c"' in with_exemplar[0]


def test_promtool_check_metrics_passes_on_the_text_exposition(lab):
    body = lab[4]
    result = subprocess.run([promtool(), "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


def test_a_frame_without_engine_and_with_a_lost_gpu(model_dir):
    probe = NodeProbe(open_backend("tests/fixtures/nvml/gpu_lost.json"), pid=os.getpid())
    frame = Sampler(node_probe=probe).tick()
    exporter = MetricsExporter(lambda: frame)
    samples = parse(exporter.render()[0])
    assert value(samples, "stagelens_engine_attached") == 0
    assert not [n for n, _ in samples if n.startswith(("stagelens_kv_", "stagelens_scheduler_steps"))]
    assert not names(samples, "stagelens_stage_state")   # no diagnosis given: no state, rather than a false ok
    lost = [d for d in names(samples, "stagelens_gpu_lost") if value(samples, "stagelens_gpu_lost", **d) == 1]
    assert [d["gpu"] for d in lost] == ["2"]
    assert not [d for d in names(samples, "stagelens_gpu_utilization_ratio") if d["gpu"] == "2"]
    assert len(names(samples, "stagelens_gpu_utilization_ratio")) == 3


def test_a_broken_section_costs_only_its_own_series(lab):
    frames = lab[0]

    def broken(_out, _frame, _diagnosis):
        raise RuntimeError("a bug in a section")

    collector = StagelensCollector(lambda: frames[-1], sections=(("broken", broken), *SECTIONS))
    families = {f.name: f for f in collector.collect()}
    success = {s.labels["collector"]: s.value for s in families["stagelens_scrape_collector_success"].samples}
    assert success["broken"] == 0 and success["kv"] == 1
    assert "stagelens_kv_fragmentation_ratio" in families


def test_vllm_names_only_when_asked(model_dir, lab):
    frames, timelines, exporter, samples, _, _ = lab
    assert not [n for n, _ in samples if n.startswith("vllm:")]
    opted = MetricsExporter(lambda: frames[-1], vllm_names=True)
    opted.on_frame(frames[-1], timelines)
    opted_samples = parse(opted.render()[0])
    assert value(opted_samples, "vllm:request_queue_time_seconds_count", model_name="model-0") == len(timelines)
