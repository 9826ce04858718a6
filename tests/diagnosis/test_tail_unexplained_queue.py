"""Queue time whose reason the engine did not publish (vLLM's `time_in_queue`, read from its spans) is a share of
its own wherever the tail is shown: never the requests' compute, and charged to no stage."""

import pytest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from stagelens.diagnosis.tail import Tail, by_stage, with_stages
from stagelens.engine_hooks.records.attribution import tail as attribution_tail
from stagelens.engine_hooks.records.snapshot import WindowTail
from stagelens.engine_hooks.records.timeline import QUEUED, STEP_BOUNDARY
from stagelens.metrics import tail as tail_metrics
from stagelens.metrics.families import Scrape
from stagelens.sources.otlp.llm_request_spans import timeline_from_span
from stagelens.tui.drawing.waterfall import blame
from tests.helpers.frame_builders import engine_snapshot, frame

START_NS = 1_700_000_000 * 10**9
UNEXPLAINED, OWN = "queued", "compute"   # the tail's parts: a queue without its reason, the requests' own


def queued_span(rid: str, queue_s: float = 2.80, ttft_s: float = 2.83, e2e_s: float = 3.0) -> trace_pb2.Span:
    """vLLM's llm_request span of a request queued `queue_s` for a reason it does not publish."""
    attrs = {"gen_ai.request.id": common_pb2.AnyValue(string_value=rid),
             "gen_ai.latency.time_in_queue": common_pb2.AnyValue(double_value=queue_s),
             "gen_ai.latency.time_to_first_token": common_pb2.AnyValue(double_value=ttft_s),
             "gen_ai.latency.time_in_model_prefill": common_pb2.AnyValue(double_value=ttft_s - queue_s)}
    return trace_pb2.Span(name="llm_request", trace_id=bytes(range(1, 17)), span_id=bytes(range(1, 9)),
                          start_time_unix_nano=START_NS, end_time_unix_nano=START_NS + round(e2e_s * 1e9),
                          attributes=[common_pb2.KeyValue(key=k, value=v) for k, v in attrs.items()])


def test_a_queue_without_its_reason_is_its_own_part_never_compute():
    assert by_stage({QUEUED: 2.80, "compute": 0.03}) == pytest.approx({UNEXPLAINED: 2.80, OWN: 0.03})
    assert by_stage({STEP_BOUNDARY: 0.01, "compute": 0.03}) == pytest.approx({OWN: 0.04})   # the requests' own
    timeline = timeline_from_span(queued_span("cmpl-1"), clock_offset=0.0)
    stages = with_stages(timeline.to_dict())["stage_seconds"]
    assert stages["ttft"] == pytest.approx({UNEXPLAINED: 2.80, OWN: 0.03})
    assert blame(timeline).startswith("queue ")


def test_the_tail_says_the_queue_without_its_reason_and_exports_it_as_its_own_share():
    timelines = [timeline_from_span(queued_span(f"cmpl-{i}"), clock_offset=0.0) for i in range(3)]
    tail = Tail.from_figures("ttft", attribution_tail(timelines, "ttft"))
    assert tail.shares[UNEXPLAINED] == pytest.approx(2.80 / 2.83)
    assert tail.share(OWN) == pytest.approx(0.03 / 2.83) and tail.blamed is None
    assert "99% of their time was queued (why, the engine does not say), 1% compute" in tail.sentence()

    snap = engine_snapshot()
    snap["window"]["tail"] = WindowTail(ttft=attribution_tail(timelines, "ttft")).to_dict()
    out = Scrape()
    tail_metrics.collect(out, frame(1, snap), None)
    shares = {s.labels["stage"]: s.value for f in out.families() if f.name == "stagelens_tail_share"
              for s in f.samples}
    assert shares[UNEXPLAINED] == pytest.approx(2.80 / 2.83) and shares[OWN] == pytest.approx(0.03 / 2.83)
    assert shares["scheduler"] == shares["kv_cache"] == shares["cold_path"] == 0.0
