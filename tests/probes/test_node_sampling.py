"""One lifecycle for the probes, the engine source and the sampler (agent/node_sampling.py): a source's own
services run exactly while the sampling does, unless the caller runs them; a bad NVML snapshot is a UserError."""

import pytest

from stagelens.engine_hooks.records.source import EngineSource
from stagelens.errors import UserError
from stagelens.node_sampling import NodeSampling, sample_for

DGX = "tests/fixtures/nvml/dgx_a100.json"


class ServicedSource:
    """An engine source with services of its own, as one read from outside is; it fails every snapshot."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def close(self) -> None:
        self.calls.append("close")

    def snapshot(self, now_monotonic):
        self.calls.append("snapshot")
        raise OSError("no engine here")

    def recent_timelines(self, since=None):
        return []


def test_a_sources_services_run_exactly_while_it_is_sampled():
    source = ServicedSource()
    assert isinstance(source, EngineSource)
    frames = sample_for(DGX, duration=0.0, interval=0.1, engine_source=source)
    assert source.calls == ["start", "snapshot", "close"]
    assert [c.name for c in frames[0].collectors][-1] == "engine"
    assert frames[0].collector("engine").success is False


def test_the_caller_may_run_the_sources_services_itself():
    source = ServicedSource()
    sampling = NodeSampling(source, DGX, interval=0.1, run_source_services=False)
    sampling.start_source()
    frame, timelines = sampling.tick()
    sampling.stop(before_last_frame=lambda: source.calls.append("drained"))
    sampling.close()
    assert source.calls == ["snapshot", "drained", "snapshot"]
    assert frame.engine is None and timelines == []


def test_the_outside_window_holds_the_timelines_only():
    sampling = NodeSampling(ServicedSource(), DGX)
    assert sampling.whatif_window() == {"timelines": [], "engine_config": None, "steps": [], "loads": []}
    sampling.close()


def test_an_unreadable_nvml_snapshot_is_a_user_error(tmp_path):
    bad = tmp_path / "nvml.json"
    bad.write_text("{not json")
    with pytest.raises(UserError):
        NodeSampling(None, str(bad))


def test_collector_statuses_are_typed_and_read_back_as_written():
    from stagelens.frame import Frame, FrameError
    from stagelens.probes.sample import CollectorStatus

    frame = NodeSampling(ServicedSource(), DGX).tick()[0]
    assert all(isinstance(c, CollectorStatus) for c in frame.collectors)
    data = frame.to_dict()
    assert data["collectors"][-1] == {"name": "engine", "success": False,
                                      "duration_seconds": frame.collector("engine").duration_seconds,
                                      "error": "OSError: no engine here"}
    assert Frame.from_dict(data).collectors == frame.collectors
    data["collectors"][0]["success"] = "yes"
    with pytest.raises(FrameError, match=r"collectors\[0\].success"):
        Frame.from_dict(data)


class FinishingSource:
    """An engine source one request of which finishes before every snapshot."""

    def __init__(self) -> None:
        self.finished: list = []

    def snapshot(self, now_monotonic):
        from stagelens.engine_hooks.records.timeline import RequestTimeline

        self.finished.append(RequestTimeline(request_id=f"r{len(self.finished)}", model="m", prompt_tokens=1,
                                             arrival=now_monotonic - 1, finished=now_monotonic))
        return None     # no figures: only the timelines matter here

    def recent_timelines(self, since=None):
        return [t for t in self.finished if since is None or t.finished > since]


def test_a_sampler_on_its_own_thread_keeps_no_timeline_the_source_let_go():
    """serve samples on the sampler's thread: nobody calls `tick()`, so the timelines handed to the listeners
    must not be kept for it (they were, every one, for as long as the agent ran)."""
    import gc
    import weakref

    source = FinishingSource()
    sampling = NodeSampling(source, DGX, run_source_services=False)
    for _ in range(5):
        sampling.sampler.tick()          # what the sampling thread does each interval
    finished = [weakref.ref(t) for t in source.finished]
    source.finished.clear()
    gc.collect()
    assert [ref() for ref in finished] == [None] * 5


def test_a_polling_feed_gets_each_finished_timeline_once():
    source = FinishingSource()
    sampling = NodeSampling(source, DGX, run_source_services=False)
    got = [t.request_id for _ in range(3) for t in sampling.tick()[1]]
    assert got == ["r0", "r1", "r2"]


class SlowSource(FinishingSource):
    """An engine source answering each snapshot in `answer_s`, as a busy engine does."""

    def __init__(self, answer_s: float) -> None:
        super().__init__()
        self.answer_s = answer_s

    def snapshot(self, now_monotonic):
        import time

        time.sleep(self.answer_s)
        return super().snapshot(now_monotonic)


def test_ticks_come_as_a_slow_engine_answers():
    """An engine answering in 1 s, sampled every 0.5 s: the next tick starts when the answer came (the interval
    is already past), not an interval after it, so a busy engine still gives a window its scrapes."""
    frames = sample_for(DGX, duration=2.0, interval=0.5, engine_source=SlowSource(1.0))
    starts = [f.time_monotonic for f in frames]
    assert len(frames) >= 2 and max(b - a for a, b in zip(starts, starts[1:], strict=False)) < 1.4, starts
