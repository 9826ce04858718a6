"""Timelines from untrusted data (a bundle, an agent's answer) read once, checked: one that reads comes back equal
to the RequestTimeline it was written from; a malformed one is a TimelineError naming its field (left out by
`read_timelines`, refused where a recording is read), never a traceback."""

import pytest

from stagelens.bundle import Bundle
from stagelens.engine_hooks.records.timeline import BEHIND_LONG_PREFILL, PrefillChunk, RequestTimeline, Wait
from stagelens.engine_hooks.records.timeline_reading import TimelineError, read_timeline, read_timelines
from stagelens.errors import CollectError
from stagelens.whatif.workload import observed_from_window, observed_in


def timeline(rid="r1", arrival=1.0) -> RequestTimeline:
    return RequestTimeline(rid, "model-0", 120, 8, arrival, finished=arrival + 2.0, finish_reason="length",
                           first_token=arrival + 0.5, events=[(arrival, "arrived"), (arrival + 0.1, "scheduled")],
                           chunks=[PrefillChunk(arrival + 0.1, arrival + 0.3, 64, 3),
                                   PrefillChunk(arrival + 0.3, arrival + 0.5, 56, 4)],
                           waits=[Wait(arrival, arrival + 0.1, BEHIND_LONG_PREFILL, 2, "r0")], preemptions=1,
                           ttft_components={"scheduler": 0.1, "prefill": 0.4}, latency_components=None)


def test_a_written_timeline_reads_back_equal():
    written = timeline()
    assert read_timeline(written.to_dict()) == written


@pytest.mark.parametrize("change", [
    {"chunks": "x"},
    {"chunks": [{"start": 1.1}]},                         # a chunk without its end
    {"chunks": [{"start": "1.1", "end": 1.3}]},
    {"chunks": ["x"]},
    {"arrival": "1"},
    {"arrival": float("nan")},
    {"prompt_tokens": None},
    {"output_tokens": 8.5},
    {"request_id": None},
    {"waits": [{"start": 1.0, "end": 1.1}]},              # a wait without its reason
    {"events": [{"t": 1.0}]},
    {"first_token": "soon"},
    {"ttft_components": {"scheduler": "a while"}},
])
def test_a_malformed_timeline_is_a_timeline_error(change):
    with pytest.raises(TimelineError):
        read_timeline({**timeline().to_dict(), **change})


def test_not_an_object_is_a_timeline_error():
    with pytest.raises(TimelineError):
        read_timeline(["r1"])


def test_malformed_timelines_are_left_out_the_others_kept_in_order():
    good = [timeline("a", 1.0), timeline("b", 2.0)]
    items = [good[0].to_dict(), {**timeline("x").to_dict(), "chunks": "x"}, 7, good[1].to_dict()]
    assert read_timelines(items) == good
    assert read_timelines("not a list") == []


MALFORMED = [timeline("a", 1.0).to_dict(), {**timeline("x", 1.5).to_dict(), "arrival": "1"},
             {**timeline("y", 1.6).to_dict(), "chunks": [{"start": 1.7}]}, timeline("b", 2.0).to_dict()]


def test_whatif_skips_a_malformed_timeline_of_a_bundle_built_in_memory():
    observed = observed_in(Bundle("b.jsonl", "test", timelines=MALFORMED))
    assert [r.request_id for r in observed.requests] == ["a", "b"]
    assert observed.timelines == [timeline("a", 1.0), timeline("b", 2.0)]


def test_an_agents_window_with_a_malformed_timeline_is_refused_as_a_bundle_line_is():
    # agent/bundle.py refuses such a line naming it: the window over HTTP is held to the same checks
    with pytest.raises(CollectError, match=r"^http://agent/w: timelines\[1\]: arrival: must be a finite number"):
        observed_from_window("http://agent/w", {"timelines": MALFORMED}, [])


def test_a_timeline_without_its_model_reads_as_the_bundle_reader_lets_it():
    # agent/bundle.py checks what replay reads, not the model: such a request is replayed as model-0, as before
    written = {k: v for k, v in timeline("a").to_dict().items() if k not in ("model", "preemptions")}
    assert read_timeline(written).model == "" and read_timeline(written).preemptions == 0
    (request,) = observed_in(Bundle("b.jsonl", "test", timelines=[written])).requests
    assert request.model == "model-0"
