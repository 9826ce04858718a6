"""The span tree one RequestTimeline becomes: names, links, explicit timestamps, attributes, parents."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.tracing import ClockOffset, TraceExporter
from tests.helpers.tracing_support import OFFSET, clear_otel_env, preempted_timeline, small_timeline

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clear_otel_env(monkeypatch)


@pytest.fixture
def memory():
    sink = InMemorySpanExporter()
    exporter = TraceExporter(sink, name="memory", offset=OFFSET, schedule_delay_s=0.05)
    yield exporter, sink
    exporter.shutdown()


def export(memory, timeline, **kw):
    exporter, sink = memory
    trace_id = exporter.export_timeline(timeline, **kw)
    assert exporter.flush(5)
    spans = sink.get_finished_spans()
    root = next(s for s in spans if s.name == "llm_request")
    return trace_id, root, spans


def by_name(spans, name):
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time)


def test_timeline_import_pulls_no_torch():
    code = "import stagelens.engine_hooks.records.timeline, stagelens.tracing"
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                         capture_output=True, text=True, check=True)
    modules = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert "stagelens.engine_hooks.records.timeline" in modules and "stagelens.tracing" in modules
    assert not {m for m in modules if m == "torch" or m.startswith("torch.")}


def test_tree_shape_and_links(memory):
    tl = preempted_timeline()
    trace_id, root, spans = export(memory, tl)
    assert trace_id == format(root.context.trace_id, "032x")
    assert root.kind is SpanKind.SERVER and root.parent is None
    assert sorted(s.name for s in spans) == sorted(
        ["llm_request", "queue_wait", "queue_wait", "queue_wait", "prefill_chunk", "prefill_chunk",
         "prefill_chunk", "decode", "preempted"])
    for s in spans:
        assert s.context.trace_id == root.context.trace_id
        if s is not root:
            assert s.parent.span_id == root.context.span_id
            assert s.kind is SpanKind.INTERNAL
    assert len({s.context.span_id for s in spans}) == len(spans)


def test_timestamps_are_the_timeline_times_converted_with_one_offset(memory):
    tl = preempted_timeline()
    _, root, spans = export(memory, tl)
    ns = OFFSET.to_epoch_ns
    assert root.start_time == 1_700_000_100_000_000_000 == ns(tl.arrival)
    assert root.end_time == ns(tl.finished)
    waits = by_name(spans, "queue_wait")
    assert [(s.start_time, s.end_time) for s in waits] == [(ns(w.start), ns(w.end)) for w in tl.waits]
    chunks = by_name(spans, "prefill_chunk")
    assert [(s.start_time, s.end_time) for s in chunks] == [(ns(c.start), ns(c.end)) for c in tl.chunks]
    (decode,) = by_name(spans, "decode")
    assert (decode.start_time, decode.end_time) == (ns(tl.first_token), ns(tl.finished))
    (preempted,) = by_name(spans, "preempted")
    assert (preempted.start_time, preempted.end_time) == (ns(100.1), ns(100.2))
    for s in spans:
        assert root.start_time <= s.start_time <= s.end_time <= root.end_time


def test_root_attributes(memory):
    tl = preempted_timeline()
    _, root, _ = export(memory, tl)
    a = dict(root.attributes)
    assert a["gen_ai.operation.name"] == "text_completion"
    assert a["gen_ai.system"] == a["gen_ai.provider.name"] == "stagelens-lab"
    assert a["gen_ai.request.id"] == "req-1"
    assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "lab-7b"
    assert a["gen_ai.usage.input_tokens"] == 512 and a["gen_ai.usage.output_tokens"] == 64
    assert a["gen_ai.latency.time_in_queue"] == pytest.approx(0.13)
    assert a["stagelens.scheduler_wait_s"] == pytest.approx(tl.scheduler_wait_s)
    assert a["gen_ai.latency.time_to_first_token"] == pytest.approx(0.045)
    assert a["gen_ai.latency.e2e"] == pytest.approx(0.5)
    assert a["stagelens.preemptions"] == 1
    assert a["stagelens.finish_reason"] == "length"
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("length",)
    assert a["stagelens.wait_s.step_boundary"] == pytest.approx(0.01)
    assert a["stagelens.wait_s.behind_long_prefill"] == pytest.approx(0.02)
    assert a["stagelens.wait_s.preempted"] == pytest.approx(0.1)
    assert not any(k.startswith("stagelens.wait_s.no_free_blocks") for k in a)
    assert root.status.status_code is StatusCode.UNSET


def test_child_attributes(memory):
    _, _, spans = export(memory, preempted_timeline())
    waits = [dict(s.attributes) for s in by_name(spans, "queue_wait")]
    assert waits[0] == {"stagelens.wait.reason": "step_boundary"}
    assert waits[1] == {"stagelens.wait.reason": "behind_long_prefill", "stagelens.wait.step": 7,
                        "stagelens.wait.held_by": "req-long"}
    assert waits[2] == {"stagelens.wait.reason": "preempted"}
    chunks = [dict(s.attributes) for s in by_name(spans, "prefill_chunk")]
    assert chunks == [{"stagelens.prefill.tokens": 256, "stagelens.step": 8},
                      {"stagelens.prefill.tokens": 256, "stagelens.step": 9},
                      {"stagelens.prefill.tokens": 560, "stagelens.step": 31}]
    (decode,) = by_name(spans, "decode")
    assert decode.attributes["gen_ai.usage.output_tokens"] == 64
    (preempted,) = by_name(spans, "preempted")
    assert preempted.attributes["stagelens.preemption.index"] == 1


def test_preemption_never_resumed_lasts_to_the_end(memory):
    tl = small_timeline("r-abort")
    tl.events.insert(3, (tl.arrival + 0.03, "preempted"))
    tl.finish_reason = "error"
    _, root, spans = export(memory, tl)
    (preempted,) = by_name(spans, "preempted")
    assert (preempted.start_time, preempted.end_time) == (OFFSET.to_epoch_ns(10.03), OFFSET.to_epoch_ns(10.05))
    assert root.status.status_code is StatusCode.ERROR


def test_unfinished_timeline_ends_at_its_last_known_instant(memory):
    tl = RequestTimeline("r-cut", "lab-1b", 8, arrival=5.0, events=[(5.0, "arrival"), (5.2, "scheduled")])
    _, root, spans = export(memory, tl)
    assert [s.name for s in spans] == ["llm_request"]
    assert root.end_time == OFFSET.to_epoch_ns(5.2)
    assert "gen_ai.latency.time_to_first_token" not in root.attributes


def test_traceparent_becomes_the_parent(memory):
    trace_id, root, spans = export(memory, preempted_timeline(), traceparent=TRACEPARENT)
    assert trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert root.parent is not None and root.parent.is_remote
    assert root.parent.span_id == 0xB7AD6B7169203331
    assert all(s.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C for s in spans)


@pytest.mark.parametrize("bad", ["", "garbage", "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                                 "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
                                 "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-" + "a" * 600])
def test_invalid_traceparent_starts_a_new_trace(memory, bad):
    trace_id, root, _ = export(memory, preempted_timeline(), traceparent=bad)
    assert root.parent is None
    assert trace_id == format(root.context.trace_id, "032x") != "0af7651916cd43dd8448eb211c80319c"


def test_unsampled_parent_records_nothing(memory):
    exporter, sink = memory
    assert exporter.export_timeline(preempted_timeline(), traceparent=TRACEPARENT[:-2] + "00") is None
    assert exporter.flush(5)
    assert sink.get_finished_spans() == ()
    assert exporter.stats()["sampled_out"] == 1 and exporter.stats()["submitted"] == 0


def test_each_timeline_is_its_own_trace(memory):
    exporter, sink = memory
    ids = {exporter.export_timeline(small_timeline(f"r{i}", 10.0 + i)) for i in range(5)}
    assert exporter.flush(5)
    assert len(ids) == 5 and None not in ids
    assert len(sink.get_finished_spans()) == 20
    assert exporter.stats()["exported"] == 20


def test_malformed_timeline_is_counted_not_raised(memory):
    exporter, _ = memory
    tl = small_timeline("bad")
    tl.waits[0].end = None   # would raise inside the span builder
    assert exporter.export_timeline(tl) is None
    assert exporter.stats()["errors"] == 1


def test_clock_offset_capture():
    offset = ClockOffset.capture()
    assert abs(offset.to_epoch_ns(time.monotonic()) - time.time_ns()) < 10**9
    assert ClockOffset(5).to_epoch_ns(1.5) == 1_500_000_005
