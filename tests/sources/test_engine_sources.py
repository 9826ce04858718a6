"""Engine sources read from outside (agent/sources): vLLM's and SGLang's /metrics, served for real on
loopback from exposition fixtures written with the engines' own family names, labels and buckets."""

import time

import pytest

from stagelens.diagnosis.evaluate import LiveDiagnosis, diagnose
from stagelens.engine_hooks.records.snapshot import WINDOW_S, EngineSnapshot
from stagelens.frame import Frame
from stagelens.sampler import Sampler
from stagelens.sources.scrape.engine_source import METRICS, EngineScrapeError, VllmSource
from stagelens.sources.scrape.prometheus_text import ExpositionError, parse_exposition
from stagelens.vocabulary import STAGES
from tests.helpers.engine_stub import DGX, Engine, closed_port_url, fixture


@pytest.fixture
def engine():
    served = Engine()
    yield served
    served.close()


def two_scrapes(engine: Engine, name: str, kind: str = "vllm") -> tuple[VllmSource, EngineSnapshot, EngineSnapshot]:
    source = VllmSource(engine.url, timeout_s=2.0, kind=kind)
    engine.body = fixture(f"{name}.txt")
    first = source.snapshot(100.0)
    engine.body = fixture(f"{name}.next.txt")
    second = source.snapshot(100.0 + WINDOW_S)
    return source, first, second


# --- the parser -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["vllm_v1_new_names", "vllm_old_names", "sglang"])
def test_each_fixture_parses_with_its_families_typed(name):
    for suffix in (".txt", ".next.txt"):
        exposition = parse_exposition(fixture(name + suffix))
        kinds = {f.type for f in exposition.families.values()}
        assert {"gauge", "counter", "histogram"} <= kinds
        assert all(f.samples for f in exposition.families.values())


def test_the_parser_finds_a_counter_by_its_exposed_name():
    exposition = parse_exposition(fixture("vllm_v1_new_names.txt"))
    preemptions = exposition.family("vllm:num_preemptions_total")
    assert preemptions.type == "counter"
    assert {s.labels["engine"] for s in preemptions.samples} == {"0", "1"}


def test_a_malformed_body_raises_one_line():
    with pytest.raises(ExpositionError) as caught:
        parse_exposition('vllm:num_requests_running{engine="0" 3\nnot a metric line\n')
    assert isinstance(caught.value, ValueError)
    assert "\n" not in str(caught.value) and str(caught.value).startswith("not Prometheus exposition text")


def test_every_table_entry_names_its_families_for_both_engines_or_none():
    new, old, sglang = (parse_exposition(fixture(f"{n}.txt")) for n in ("vllm_v1_new_names", "vllm_old_names",
                                                                       "sglang"))
    for figure, metric in METRICS.items():
        if metric.vllm:
            assert new.first(metric.vllm) or old.first(metric.vllm), figure
        if metric.sglang:
            assert sglang.first(metric.sglang), figure


# --- the snapshot from two scrapes ------------------------------------------------------------------------
def test_vllm_new_names_fill_the_snapshot_from_deltas_summed_over_engines(engine):
    source, first, snap = two_scrapes(engine, "vllm_v1_new_names")
    s, r = snap.window.scheduler, source.reading
    assert snap.window.span_s == WINDOW_S
    assert (s.running, s.waiting) == (8, 6)
    assert r.waiting_by_reason == {"capacity": 5.0, "deferred": 1.0}
    assert snap.engine.model == "meta-llama/Llama-3.1-8B-Instruct" and snap.engine.block_size == 16
    assert snap.engine.device is None and snap.engine.max_num_seqs is None     # not exposed: not observable
    assert r.kv_usage_ratio == pytest.approx(0.8)
    assert (snap.usage.num_blocks, snap.usage.used_blocks) == (2000, 1600)
    assert snap.counters.preemptions_total == 6 and r.preemptions_in_window == 4
    assert (snap.counters.requests_finished_total, snap.counters.requests_failed_total) == (65, 3)
    assert snap.health.finish_reasons == {"stop": 50, "length": 15, "abort": 3}
    assert s.steps == 200 and s.tokens_per_s == pytest.approx(200 * 256 / WINDOW_S)
    assert s.decode_tokens_per_s == pytest.approx(100.0)
    assert s.requests_finished == 10
    # 50 waits in (0, 0.3], 49 in (0.3, 0.5], 1 in (2.5, 5]: interpolated as histogram_quantile does where the
    # buckets place it; the P50 in the first bucket is only "under 0.3 s", never a made-up 0.3
    assert s.wait_p50_s is None and s.wait_p99_s == pytest.approx(0.5)
    assert snap.inferred["window.scheduler.wait_p50_s"].startswith("< 0.3 s")
    assert r.e2e_p50_s == pytest.approx(2.25) and r.e2e_p99_s == pytest.approx(2.495)
    assert r.ttft_p50_s == pytest.approx(0.07) and r.inter_token_p50_s == pytest.approx(0.0175)
    # inferred, each with how: the queue-time P99's bucket (0.3, 0.5] says the decided wait is at least 0.3 s;
    # 6 waiting over the 10 s window (Little's law) with the KV cache 80% in use: the scheduler's queue (vLLM's
    # `capacity` is its whole queue; `deferred` is the scheduler's without adapters), but for the 4 preemptions:
    # vLLM preempts only for want of a block, each a quarter second of a full cache, 1 s of the 10: 6 s of blocks
    # (a bound, less one step period: 10 s / 200 steps)
    assert s.decided_wait_p99_s is None and s.decided_wait_p99_at_least_s == pytest.approx(0.3 - 0.05)
    assert s.decided_wait_p99_at_most_s == pytest.approx(0.5)
    assert s.wait_seconds_by_reason == pytest.approx({"no_free_blocks": 6.0, "queued": 54.0})
    # 0.8 x 2000 blocks less V1's null block on each of the 2 engines, x 16 = 25,568 slots in use for the tokens
    # held: 110,000 prompt and 11,000 generated tokens counted, less 100,000 and 17,000 in the 40 requests
    # finished, = 4,000; and the 8 running are all still in prefill (40 past their first token, 40 ended): half
    # a prompt found in its prefill each, weighted by its length (every prompt in the (2000, 5000] bucket: its
    # middle, 3,500), 14,000 more; 22.5% of prompt tokens were prefix-cache hits, shared: 8 x a mean prompt
    # (2,500) x 0.225 = 4,500 tokens need no slots of their own
    # ... less the block size's floor: up to 15 slots each of the 8 running requests' last blocks leave empty
    assert snap.window.kv.fragmentation_ratio == pytest.approx(1 - (4000 + 8 * 3500 / 2 - 4500 + 8 * 15) / 25568)
    assert set(snap.inferred) == {"window.scheduler.decided_wait_p99_s", "window.scheduler.wait_seconds_by_reason",
                                  "window.scheduler.waiting_share", "window.kv.fragmentation_ratio",
                                  "window.scheduler.wait_p50_s", "window.kv.full_while_waiting_share",
                                  "window.kv.preemptions_per_request", "window.kv.tokens_per_request"}
    # the KV wall over the window: 4 preemptions against the 10 requests finished in it, with 6 waiting; and what
    # a request finished in it held: 22,000 prompt and 7,000 output tokens over those 10 (no prefix-cache query in
    # the window: nothing shared)
    assert snap.window.kv.preemptions_per_request == pytest.approx(4 / 10)
    assert snap.window.kv.tokens_per_request == pytest.approx((22000 + 7000) / 10)
    assert snap.window.kv.most_running == 8
    # how the window's requests ended, by request_success_total's growth (30 stop, 5 length, 1 abort), and
    # speculative decoding: 480 of 600 draft tokens accepted
    assert (s.cut_at_length_share, s.failed_share) == (pytest.approx(5 / 36), pytest.approx(1 / 36))
    assert s.spec_acceptance == pytest.approx(480 / 600)
    assert "(0.3, 0.5]" in snap.inferred["window.scheduler.decided_wait_p99_s"]
    assert "25,568 KV slots in use on average" in snap.inferred["window.kv.fragmentation_ratio"]
    assert snap.engine.generation == "vLLM V1 (0.11+ names), 2 data-parallel engines"
    assert snap.engine.source == "vllm"
    # without the engine's spans, what needs each request's time stays not observable
    assert s.head_of_line_share is None and snap.window.tail is None
    assert snap.counters.preemptions_with_free_memory_total is None
    # the first scrape has no window: nothing from deltas, gauges as they are
    assert first.window.span_s == 0.0 and first.window.scheduler.steps is None
    assert first.window.scheduler.wait_p99_s is None and first.window.scheduler.running == 4
    assert EngineSnapshot.from_dict(snap.to_dict()) == snap     # a valid stagelens-engine/1 snapshot


def test_vllm_old_names_are_understood(engine):
    source, _, snap = two_scrapes(engine, "vllm_old_names")
    s, r = snap.window.scheduler, source.reading
    assert (s.running, s.waiting) == (12, 9)
    assert r.kv_usage_ratio == pytest.approx(0.98)                      # vllm:gpu_cache_usage_perc
    assert (snap.usage.num_blocks, snap.usage.used_blocks) == (7000, 6860)
    assert r.inter_token_p50_s is not None and 0.05 < r.inter_token_p50_s <= 0.075   # time_per_output_token
    assert r.preemptions_in_window == 6 and s.requests_finished == 8 and s.steps == 100
    assert r.waiting_by_reason is None                                  # that family came later
    # the KV cache 98% in use with 9 waiting: they wait for blocks (the "no free blocks inferred");
    # LoRA adapters are served, but who was deferred is not published: model loads stay not observable
    assert s.wait_seconds_by_reason == pytest.approx({"no_free_blocks": 90.0, "queued": 0.0})
    assert "no room for one more request in 1 of them" in snap.inferred["window.scheduler.wait_seconds_by_reason"]
    assert s.wait_p50_s == pytest.approx(1.25)                          # 8 waits in (1.0, 1.5]: rank 4 of 8


def test_sglang_families_fill_what_they_can(engine):
    source, _, snap = two_scrapes(engine, "sglang", kind="sglang")
    s, r = snap.window.scheduler, source.reading
    assert (s.running, s.waiting) == (30, 11)
    assert r.kv_usage_ratio == pytest.approx(0.95) and r.kv_capacity_tokens == 80000
    assert snap.counters.preemptions_total == 5 and r.preemptions_in_window == 3    # retractions
    assert s.requests_finished == 20 and r.e2e_p50_s == pytest.approx(9.0)          # 20 in (8, 10]: rank 10
    assert s.wait_p50_s == pytest.approx(0.5) and 2.0 < s.wait_p99_s <= 3.0
    assert s.decode_tokens_per_s == pytest.approx(400.0)
    # the token pool as blocks of one token (max_total_num_tokens); no block size, no steps published
    assert (snap.usage.num_blocks, snap.usage.used_blocks) == (80000, 76000) and snap.engine.kv_capacity_tokens == 80000
    assert snap.engine.block_size is None and s.steps is None
    # SGLang's GPU execution seconds (8 of the 10 s window) and its realtime tokens by mode
    assert s.busy_ratio == pytest.approx(0.8) and s.tokens_per_s == pytest.approx((4000 + 4000) / WINDOW_S)
    assert snap.health is None                                                           # no finish reasons


def test_a_missing_family_leaves_its_fields_none(engine):
    dropped = ("vllm:kv_cache_usage_perc", "vllm:request_queue_time_seconds", "vllm:num_preemptions")
    keep = [line for line in fixture("vllm_v1_new_names.next.txt").splitlines()
            if not any(line.startswith(n) or line.split(" ")[2:3] == [n] for n in dropped)]
    source = VllmSource(engine.url)
    engine.body = fixture("vllm_v1_new_names.txt")
    source.snapshot(0.0)
    engine.body = "\n".join(keep) + "\n"
    snap = source.snapshot(WINDOW_S)
    assert source.reading.kv_usage_ratio is None and snap.usage.used_blocks is None
    assert snap.usage.num_blocks == 2000
    assert snap.window.scheduler.wait_p99_s is None and snap.counters.preemptions_total is None
    assert source.reading.preemptions_in_window is None
    assert snap.window.scheduler.running == 8     # the rest still read


def test_a_counter_reset_counts_from_zero(engine):
    source = VllmSource(engine.url)
    engine.body = fixture("vllm_v1_new_names.next.txt")
    source.snapshot(0.0)
    engine.body = fixture("vllm_v1_new_names.txt")     # the engine restarted: counters went down
    snap = source.snapshot(WINDOW_S)
    assert source.reading.preemptions_in_window == 2
    assert snap.window.scheduler.steps == 100


# --- failures: quick, one line, and a failed collector in the sampler's frame -------------------------------
def _raises_quickly(source: VllmSource, kind: type[Exception], within_s: float) -> str:
    started = time.monotonic()
    with pytest.raises(kind) as caught:
        source.snapshot(1.0)
    assert time.monotonic() - started < within_s
    message = str(caught.value)
    assert message and "\n" not in message
    return message


def test_an_unreachable_engine_raises_quickly_with_a_reason():
    message = _raises_quickly(VllmSource(closed_port_url(), timeout_s=1.0), EngineScrapeError, 1.5)
    assert "connection refused" in message


def test_a_slow_engine_raises_within_its_timeout():
    slow = Engine(fixture("vllm_v1_new_names.txt"), delay_s=3.0)
    try:
        message = _raises_quickly(VllmSource(slow.url, timeout_s=0.5), EngineScrapeError, 1.5)
    finally:
        slow.close()
    assert "no complete answer within 0.5 s" in message


def test_a_malformed_body_raises_with_a_reason(engine):
    engine.body = "<html>502 Bad Gateway</html>\n"
    message = _raises_quickly(VllmSource(engine.url), ExpositionError, 1.5)
    assert message.startswith("not Prometheus exposition text")


def test_a_wrong_path_is_an_http_error(engine):
    message = _raises_quickly(VllmSource(engine.url + "/v1"), EngineScrapeError, 1.5)
    assert "HTTP 404" in message


@pytest.mark.parametrize("case", ["unreachable", "slow", "malformed"])
def test_the_sampler_records_a_failed_engine_collector_and_goes_on(case, engine):
    slow = None
    if case == "unreachable":
        url = closed_port_url()
    elif case == "slow":
        slow = Engine(fixture("vllm_v1_new_names.txt"), delay_s=2.0)
        url = slow.url
    else:
        engine.body = "vllm:num_requests_running{ 1\n"
        url = engine.url
    sampler = Sampler(engine_source=VllmSource(url, timeout_s=0.3))
    try:
        frames = [sampler.tick() for _ in range(2)]
    finally:
        if slow is not None:
            slow.close()
    for f in frames:
        assert f.engine is None
        (collector,) = [c for c in f.collectors if c.name == "engine"]
        assert collector.success is False and "\n" not in collector.error
    Frame.from_dict(frames[0].to_dict())      # still a frame every surface reads


# --- the diagnosis on what is observed from outside ------------------------------------------------------
def _frames_from(engine: Engine, bodies: list[str], kind: str = "vllm") -> list[Frame]:
    sampler = Sampler(engine_source=VllmSource(engine.url, kind=kind))
    frames = []
    for body in bodies:
        engine.body = body
        frames.append(sampler.tick())
    assert all(c.success for f in frames for c in f.collectors)
    return frames


def test_a_source_observing_little_is_diagnosed_unknown_never_ok(engine):
    little = ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 3\n'
              '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine="0",model_name="m"} 7\n')
    frames = _frames_from(engine, [little] * 6)
    result = diagnose(frames)
    assert {s.stage: s.state for s in result.stages} == dict.fromkeys(STAGES, "unknown")
    assert result.verdict == "unknown" and result.root_stage is None


@pytest.mark.parametrize("name,kind", [("vllm_v1_new_names", "vllm"), ("vllm_old_names", "vllm"),
                                       ("sglang", "sglang")])
def test_busy_engines_seen_from_outside_are_judged_on_what_is_inferred_and_never_ok(engine, name, kind):
    # one window: every later scrape is compared with the first (all within the 10 s window)
    bodies = [fixture(f"{name}.txt")] + [fixture(f"{name}.next.txt")] * 5
    live = LiveDiagnosis()
    for f in _frames_from(engine, bodies, kind):
        live.add(f)
    result = live.result()
    states = {s.stage: s.state for s in result.stages}
    assert "ok" not in states.values(), states
    # queue-time P99s of 0.3 s and more: the scheduler's wait is over its 20 ms line, said to be inferred
    scheduler = result.stage("scheduler")
    wait = next(e for e in scheduler.evidence if e.signal == "scheduler_wait_p99")
    assert scheduler.state == "firing" and wait.state == "firing" and wait.provenance == "inferred"
    assert "inferred from the queue-time histogram's P99" in scheduler.explanation
    for stage in result.stages:
        for e in stage.evidence:
            assert e.state != "ok" or e.provenance in ("inferred", "measured"), (stage.stage, e.signal)
            if e.state == "unknown" and e.value is None:
                assert e.provenance in ("not observable", None), (stage.stage, e.signal)


def _stagelens(*args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "stagelens.cli", "--nvml-snapshot", DGX, *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, said", [
    (["--engine-url", "http://127.0.0.1:1"], "--engine-url needs --engine"),
    (["--engine", "vllm"], "--engine vllm needs --engine-url"),
    (["--engine", "vllm", "--engine-url", "ftp://host"], "expected http(s)://HOST[:PORT]"),
    (["--engine", "sglang", "--engine-url", "http://host:99999"], "bad port"),
])
def test_diagnose_refuses_a_bad_engine_url_in_one_line(args, said):
    done = _stagelens("diagnose", "--duration", "1", *args)
    assert done.returncode == 3, done
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_diagnose_on_an_engine_that_does_not_answer_exits_unknown_with_the_reason():
    url = closed_port_url()
    done = _stagelens("diagnose", "--duration", "1", "--engine", "vllm", "--engine-url", url)
    assert done.returncode == 3, done
    last = done.stderr.strip().splitlines()[-1]
    assert f"the engine at {url} did not answer" in last and "refused" in last, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 2   # the sampler's warning


def test_the_agent_reads_a_vllm_engine_attached_by_url(engine):
    """The runtime `serve --engine vllm` builds: its frames carry what the engine's /metrics said, and its
    /metrics and diagnosis serve them like any other frame."""
    from fastapi.testclient import TestClient

    from stagelens.runtime import AgentRuntime
    from stagelens.server.app import create_app

    engine.body = fixture("vllm_v1_new_names.txt")
    runtime = AgentRuntime(nvml_snapshot=DGX, engine_source=VllmSource(engine.url))
    runtime.sampler.tick()
    engine.body = fixture("vllm_v1_new_names.next.txt")
    frame = runtime.sampler.tick()
    expected = VllmSource(engine.url)
    expected.snapshot(0.0)
    assert frame.collector("engine").success
    assert frame.engine.usage.used_blocks == expected.snapshot(1.0).usage.used_blocks is not None
    client = TestClient(create_app(runtime, token=None))
    exposition = client.get("/metrics").text
    assert "stagelens_kv_blocks" in exposition or "stagelens_kv_" in exposition
    diagnosis = client.get("/api/v1/diagnosis").json()
    assert {s["stage"] for s in diagnosis["stages"]} == set(STAGES)
    assert diagnosis["engine"] == "vLLM V1 (0.11+ names), 2 data-parallel engines"     # what was read, said
    evidence = [e for s in diagnosis["stages"] for e in s["evidence"]]
    # not observable: never OK (a situation the engine's counts say did not arise, such as no prompt asking the
    # prefix cache in the window, is ok and says so)
    assert all(e["state"] == "unknown" for e in evidence if e["value"] is None and e["provenance"] != "inferred")
    assert all("did not arise" in e["how"] for e in evidence if e["value"] is None and e["state"] == "ok")
    assert all(e["provenance"] == "not observable" for e in evidence if e["value"] is None and e["signal"] in (
        "kv_access_efficiency", "head_of_line_blocking", "token_budget_use"))
