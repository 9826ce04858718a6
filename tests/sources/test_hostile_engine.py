"""A hostile engine's /metrics (issue 24): what it sends is bounded in time and size, checked for plausibility,
never followed elsewhere, and the URL's credentials are never shown. Real sockets on loopback throughout."""

from __future__ import annotations

import base64
import contextlib
import gzip
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from stagelens.commands.engine_frames import engine_frames
from stagelens.commands.flags import OutsideFlags, open_engine_source
from stagelens.errors import CollectError
from stagelens.frame import Frame
from stagelens.probes.sample import CollectorStatus
from stagelens.sources.scrape import prometheus_text
from stagelens.sources.scrape.engine_source import (
    MAX_BODY_BYTES,
    SCRAPE_TIMEOUT_S,
    EngineScrapeError,
    VllmSource,
)
from stagelens.sources.scrape.heavy_answers import (
    FIRST_PAUSE_S,
    MAX_PAUSE_S,
    HeavyAnswers,
    ReadPaused,
)
from stagelens.sources.scrape.prometheus_text import ExpositionError, parse_exposition
from tests.helpers.hostile_servers import ScriptedServer, answer, drip_body, drip_headers
from tests.helpers.metrics_server import MetricsServer

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engines"
BODY = (FIXTURES / "vllm_v1_new_names.txt").read_text()
NEXT = (FIXTURES / "vllm_v1_new_names.next.txt").read_text()
DGX = str(Path(__file__).parents[1] / "fixtures" / "nvml" / "dgx_a100.json")
NO_GPU = str(Path(__file__).parents[1] / "fixtures" / "nvml" / "no_driver.json")
REAL = Path(__file__).parents[1] / "fixtures" / "real"
GENERATION_0 = 'vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}'


def serving(*bodies: str) -> ScriptedServer:
    """An engine whose /metrics answers each of `bodies` in turn (the last one from then on)."""
    def script(server, conn):
        server.read_head(conn)
        answer(conn, bodies[min(len(server.heads), len(bodies)) - 1])
    return ScriptedServer(script)


def _stagelens(*args: str, nvml: str = DGX) -> subprocess.CompletedProcess:
    """The command's run; it fails the test by TimeoutExpired if it outlasts the dripping servers' 40 s."""
    return subprocess.run([sys.executable, "-m", "stagelens.cli", "--nvml-snapshot", nvml, *args],
                          capture_output=True, text=True, timeout=35)


# --- 2: a dripping engine never holds the sampler past the scrape's deadline ----------------------------------
@pytest.mark.parametrize("script", [drip_body, drip_headers], ids=["body", "headers"])
def test_a_dripping_engine_metrics_is_given_up_at_the_scrape_deadline(script):
    with ScriptedServer(script) as engine:
        source = VllmSource(engine.url, timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(EngineScrapeError, match="answer within 0.5 ?s"):
            source.snapshot(1.0)
        assert time.monotonic() - started < 8     # the drip lasts 40 s: only the deadline ends it sooner


def test_the_scrape_deadline_fits_a_busy_engine_not_the_sampling_interval():
    """A real vLLM (0.32, CPU build) under load answers /metrics in 0.6-3 s: a deadline of one sampling interval
    (1 s for `diagnose`) gave up on an engine that was answering. The deadline is its own, whatever the interval."""
    assert SCRAPE_TIMEOUT_S > 3.0     # the slowest answer of the busy vLLM measured
    busy = MetricsServer(BODY, delay_s=1.5)
    try:
        source = open_engine_source("vllm", OutsideFlags(busy.url))
        assert source.timeout_s == SCRAPE_TIMEOUT_S and source.snapshot(1.0).window is not None
    finally:
        busy.close()


@pytest.mark.slow
def test_diagnose_on_a_dripping_engine_exits_unknown():
    with ScriptedServer(drip_body) as engine:
        done = _stagelens("diagnose", "--engine", "vllm", "--engine-url", engine.url, "--duration", "3")
    assert done.returncode == 3, done
    assert "no complete answer within" in done.stderr and "Traceback" not in done.stderr


def answering_for(seconds: float, body: str) -> ScriptedServer:
    """An engine whose /metrics answers `body` for `seconds` from its first request, then HTTP 503."""
    first: list[float] = []

    def script(server, conn):
        server.read_head(conn)
        first.append(time.monotonic())
        if time.monotonic() - first[0] < seconds:
            answer(conn, body)
        else:
            answer(conn, "busy", "503 Service Unavailable")
    return ScriptedServer(script)


def test_diagnose_judges_the_scrapes_a_busy_engine_answered():
    """A host with no GPU, an engine that answered the first scrapes and then failed: the run is judged from the
    scrapes answered (before: exit 3, "no engine is observed", as the last frame had no engine)."""
    with answering_for(2.5, (REAL / "vllm_v1_0.10_idle_qwen3_4b.txt").read_text()) as engine:
        done = _stagelens("diagnose", "--engine", "vllm", "--engine-url", engine.url, "--duration", "5",
                          nvml=NO_GPU)
    assert done.returncode == 0, done
    assert "[ok] kv_cache" in done.stdout and "HTTP 503" in done.stderr and "Traceback" not in done.stderr


def frame(at: float, answered: str | None) -> Frame:
    """A frame whose engine collector answered (`answered` is None) or failed with that error."""
    return Frame(at, at, "n", collectors=[CollectorStatus("engine", answered is None, 0.1, answered)])


def test_a_run_with_fewer_than_two_answers_says_a_window_needs_two():
    source = types.SimpleNamespace(url="http://e:8000", kind="vllm")
    timed_out = "EngineScrapeError: http://e:8000/metrics: no complete answer within 5 s"
    with pytest.raises(CollectError, match="answered 1 of 3 scrapes.*a window needs two.*no complete answer"):
        engine_frames([frame(0.0, None), frame(1.0, timed_out), frame(2.0, timed_out)], source)
    with pytest.raises(CollectError, match="did not answer: http://e:8000/metrics: no complete answer within 5 s"):
        engine_frames([frame(0.0, timed_out)], source)
    answered = [frame(0.0, None), frame(1.0, timed_out), frame(2.0, None)]
    assert engine_frames(answered, source) == [answered[0], answered[2]]


# --- 10: a huge exposition is refused before it is parsed; the parse has a deadline ---------------------------
def test_a_huge_exposition_is_refused_unparsed_with_a_clear_error():
    huge = "# TYPE x gauge\n" + "".join(f'x{{i="{i}"}} 1\n' for i in range(20_001))
    with pytest.raises(ExpositionError, match="has 20001 series, more than the 20000"):
        parse_exposition(huge)
    assert parse_exposition(huge, max_series=30_000).family("x") is not None


def test_a_huge_exposition_parse_gives_up_at_its_deadline():
    many = "".join(f"# TYPE f{n} gauge\n" + "".join(f'f{n}{{i="{i}"}} 1\n' for i in range(100)) for n in range(100))
    with pytest.raises(ExpositionError, match="longer than 0 s to parse"):
        parse_exposition(many, deadline_s=0.0)


def test_a_real_vllm_body_parses_well_inside_the_parse_deadline():
    """The parse deadline (1 s of CPU time) is for hostile bodies: a real vLLM's, 46 KB here (a 0.32 CPU build
    served 53 KB), and the same twice over (two data-parallel engines), parse in a small part of it."""
    one = (REAL / "vllm_v1_0.10_idle_qwen3_4b.txt").read_text()
    two = one + "\n" + "\n".join(line.replace('engine="0"', 'engine="1"') for line in one.splitlines()
                                   if 'engine="0"' in line) + "\n"
    for body in (one, two):
        started = time.thread_time()
        assert parse_exposition(body).family("vllm:num_requests_running") is not None
        assert time.thread_time() - started < prometheus_text.PARSE_DEADLINE_S / 10, len(body)


def test_the_parse_deadline_counts_cpu_time_not_the_wait_for_a_core(monkeypatch):
    """On a busy host the parsing thread waits for a core between families: 10 s of wall time go by between
    each, and a sound scrape must still parse (test_the_agent_reads_a_vllm_engine_attached_by_url failed under
    load while the wall clock was the deadline's)."""
    wall = iter(range(0, 10**6, 10))
    monkeypatch.setattr(prometheus_text, "time",
                        types.SimpleNamespace(monotonic=lambda: float(next(wall)), thread_time=time.thread_time))
    sound = "".join(f"# TYPE f{n} gauge\nf{n} 1\n" for n in range(5))
    assert parse_exposition(sound).family("f4") is not None


# --- 13: implausible figures are refused, counted and never exported -----------------------------------------
def test_a_negative_gauge_and_an_implausible_kv_configuration_are_refused_and_counted():
    hostile = (BODY.replace('engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0',
                            'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} -2e9', 1)
               .replace('num_gpu_blocks="1000"', 'num_gpu_blocks="2e29"', 1))
    with serving(hostile) as engine:
        source = VllmSource(engine.url)
        snap = source.snapshot(1.0)
    with serving(BODY) as engine:
        plain = VllmSource(engine.url).snapshot(1.0)
    assert snap.window.scheduler.running is None and snap.usage is None
    assert snap.engine.block_size is None
    assert source.refused == {"running": 1, "cache_config": 1}
    assert snap.intake["metrics.refused_running"] == 1 and snap.intake["metrics.refused_cache_config"] == 1
    assert plain.window.scheduler.running == 4 and plain.usage.num_blocks == 2000
    assert snap.window.scheduler.waiting == plain.window.scheduler.waiting   # the plausible families as ever
    assert snap.counters == plain.counters


def test_a_duplicated_series_is_read_once_not_added_up():
    def doubled(text: str) -> str:
        line = next(x for x in text.splitlines() if x.startswith(GENERATION_0))
        return text.replace(line, f"{line}\n{line}")

    rates = []
    for first, second in ((BODY, NEXT), (doubled(BODY), doubled(NEXT))):
        with serving(first, second) as engine:
            source = VllmSource(engine.url)
            source.snapshot(100.0)
            rates.append(source.snapshot(110.0).window.scheduler.decode_tokens_per_s)
    assert rates[0] is not None and rates[1] == rates[0]
    assert source.refused == {"duplicate_series": 2}


def test_a_redirect_to_another_host_is_not_followed_nor_blamed_on_it():
    with serving(BODY) as elsewhere:
        def redirect(server, conn):
            server.read_head(conn)
            answer(conn, status="302 Found", headers={"Location": f"{elsewhere.url}/metrics"})

        with ScriptedServer(redirect) as engine, pytest.raises(EngineScrapeError) as caught:
            VllmSource(engine.url).snapshot(1.0)
        assert elsewhere.heads == []
    message = str(caught.value)
    assert message.startswith(f"{engine.url}/metrics: HTTP 302 Found") and "not followed" in message
    assert elsewhere.url not in message


def test_a_redirect_loop_is_one_line():
    def loop(server, conn):
        server.read_head(conn)
        answer(conn, status="301 Moved\x1b]0;owned\x07", headers={"Location": "/metrics"})

    with ScriptedServer(loop) as engine, pytest.raises(EngineScrapeError) as caught:
        VllmSource(engine.url).snapshot(1.0)
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message and "\x07" not in message
    assert len(engine.heads) == 1


# --- 15: credentials in --engine-url are used, never shown -----------------------------------------------------
def test_engine_url_credentials_go_as_basic_auth_and_are_never_shown():
    with serving(BODY) as engine:
        source = VllmSource(engine.url.replace("http://", "http://ops:s%3Ecret@"))
        source.snapshot(1.0)
        assert b"Authorization: Basic " + base64.b64encode(b"ops:s>cret") in engine.heads[0]
    assert "cret" not in source.url and source.url == engine.url.replace("http://", "http://***@")
    with pytest.raises(EngineScrapeError) as caught:
        source.snapshot(2.0)      # the engine is gone: the error names the URL, not its password
    assert "cret" not in str(caught.value) and "***@127.0.0.1" in str(caught.value)


def test_diagnose_never_echoes_the_engine_url_password():
    with ScriptedServer(drip_headers) as engine:
        url = engine.url.replace("http://", "http://ops:hunter2@")
        done = _stagelens("diagnose", "--engine", "vllm", "--engine-url", url, "--duration", "1")
    assert done.returncode == 3, done
    assert "hunter2" not in done.stderr + done.stdout and "***@" in done.stderr


# --- issue 39, 12 and 14: a histogram whose buckets are not a histogram is refused whole, like other families ----
TTFT_0 = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="%s",model_name="meta-llama/Llama-3.1-8B-Instruct"}'


def _bucket(text: str, le: str, value: str, new_le: str | None = None) -> str:
    """`text` with engine 0's TTFT bucket `le` counting `value` (and its `le` written `new_le`)."""
    line = next(x for x in text.splitlines() if x.startswith(TTFT_0 % le))
    return text.replace(line, f"{TTFT_0 % (new_le or le)} {value}")


def _two_scrapes(first: str, second: str) -> tuple[VllmSource, object]:
    with serving(first, second) as engine:
        source = VllmSource(engine.url)
        source.snapshot(100.0)
        return source, source.snapshot(110.0)


@pytest.mark.parametrize("le", ["abc", "0x1", "1_0", "٣", "NaN"])
def test_a_bucket_whose_le_is_not_a_number_refuses_its_family_and_keeps_the_rest(le):
    """Before: KeyError / ValueError out of the scrape (a traceback every tick, the whole scrape lost); Python's
    float() reads "1_0" and "٣" too, Prometheus does not."""
    source, snap = _two_scrapes(_bucket(BODY, "0.5", "15.0", le), _bucket(NEXT, "0.5", "15.0", le))
    _, plain = _two_scrapes(BODY, NEXT)
    assert source.refused == {"ttft": 2}
    assert source.reading.ttft_p50_s is None and source.reading.ttft_p99_s is None
    assert snap.window.scheduler.decode_tokens_per_s == plain.window.scheduler.decode_tokens_per_s is not None
    assert snap.window.scheduler.wait_p99_s == plain.window.scheduler.wait_p99_s
    assert snap.intake["metrics.refused_ttft"] == 2


def test_non_cumulative_buckets_are_refused_not_read_as_data():
    """A glitch bucket counting fewer than the one below it: the family is refused for that scrape and counted,
    as a negative gauge is, instead of its window (a negative bucket delta) being read as quantiles."""
    source, snap = _two_scrapes(BODY, _bucket(NEXT, "0.06", "3.0"))
    assert source.refused == {"ttft": 1}
    assert source.reading.ttft_p50_s is None and "ttft_p50" not in (source.reading.said or {})
    _, plain = _two_scrapes(BODY, NEXT)
    assert plain.window.scheduler.decode_tokens_per_s == snap.window.scheduler.decode_tokens_per_s is not None


def test_diagnose_on_a_bucket_without_a_number_says_what_it_refused_without_a_traceback():
    hostile = _bucket(BODY, "0.5", "15.0", "abc")
    with serving(hostile, _bucket(NEXT, "0.5", "15.0", "abc")) as engine:
        done = _stagelens("diagnose", "--engine", "vllm", "--engine-url", engine.url, "--duration", "2")
    assert done.returncode in (0, 1, 2), done
    assert "Traceback" not in done.stderr and "did not answer" not in done.stderr, done.stderr
    assert "refused vllm:time_to_first_token_seconds bucket" in done.stderr and "'abc': not a number" in done.stderr
    assert done.stderr.count("refused vllm:time_to_first_token_seconds") == 1, done.stderr


# --- issue 39, 18: an engine that answered with what is refused is not said to be down ---------------------------
def _answering(body: bytes, headers: dict | None = None) -> ScriptedServer:
    def script(server, conn):
        server.read_head(conn)
        answer(conn, body, headers=headers)
    return ScriptedServer(script)


@pytest.mark.parametrize("body, headers, said", [
    (gzip.compress(BODY.encode()), {"Content-Encoding": "gzip"}, "a gzip-compressed body"),
    (b"<!DOCTYPE html><html><form action='/login'>", {"Content-Type": "text/html"}, "an HTML page"),
    (("# TYPE x gauge\n" + "".join(f'x{{i="{i}"}} 1\n' for i in range(20_001))).encode(), None,
     "20001 series, more than the 20000"),
    (b"busy", None, None),
], ids=["gzip", "html-login", "too-many-series", "not-exposition"])
def test_diagnose_says_what_it_refused_of_an_engine_that_answered(body, headers, said):
    """Before: "the engine at URL did not answer: ..." for each, which on-call reads as the engine down."""
    with _answering(body, headers) as engine:
        done = _stagelens("diagnose", "--engine", "vllm", "--engine-url", engine.url, "--duration", "1")
    assert done.returncode == 3, done
    last = done.stderr.strip().splitlines()[-1]
    assert f"the engine at {engine.url} answered, but its answer was refused: " in last, done.stderr
    assert said is None or said in last, last
    assert "did not answer" not in done.stderr and "Traceback" not in done.stderr


def test_a_parse_past_its_deadline_is_said_as_an_answer_refused():
    many = "".join(f"# TYPE f{n} gauge\n" + "".join(f'f{n}{{i="{i}"}} 1\n' for i in range(100)) for n in range(100))
    with pytest.raises(ExpositionError) as caught:
        parse_exposition(many, deadline_s=0.0)
    source = types.SimpleNamespace(url="http://e:8000", kind="vllm")
    error = f"{type(caught.value).__name__}: {caught.value}"      # as the sampler keeps a collector's error
    with pytest.raises(CollectError, match=r"answered, but its answer was refused: .*longer than 0 s to parse"):
        engine_frames([frame(0.0, error)], source)


# --- issue 39, 4: a heavy answer pauses the reads, scrape and poll alike, the pause doubling ---------------------
NEAR_CAP = BODY + "# " + "x" * (MAX_BODY_BYTES // 2 + 1) + "\n"     # under the 8 MiB cap, past half of it


def test_a_body_near_the_cap_pauses_the_scrape_and_the_poll_and_is_counted():
    """Before: a 7.8 MB body under the cap was fetched every scrape and four times a second by the poll
    (~0.8 core). Now the engine is not asked again until the pause ends, and the pause is counted and said."""
    with serving(NEAR_CAP, BODY) as engine:
        source = VllmSource(engine.url, poll_s=60.0)
        snap = source.snapshot(1.0)               # read: it is under the cap
        assert snap.intake["metrics.heavy_answers"] == 1 and len(engine.heads) == 1
        with pytest.raises(ReadPaused, match=r"not read for 2 s after an answer too heavy .*past half of the 8388608"):
            source.snapshot(2.0)
        assert source.poller.poll() is None
        assert len(engine.heads) == 1, "the engine was asked during the pause"
    assert source.heavy.counts == {"heavy_answers": 1, "reads_skipped": 2}
    assert source.poller.counts == {"polls": 1, "failed": 0, "paused": 1}


def test_an_engine_always_heavy_is_read_ever_more_rarely_up_to_the_longest_pause():
    """Sampled every second for 10 minutes (a clock of our own), an engine whose every answer is near the cap
    is read 10 times, not 600: at 0, 2, 6, 14, 30, 62, 126, 246, 366 and 486 s."""
    now = [0.0]
    with serving(NEAR_CAP) as engine:
        source = VllmSource(engine.url)
        source.heavy = HeavyAnswers(source.metrics_url, clock=lambda: now[0])
        for second in range(600):
            now[0] = float(second)
            with contextlib.suppress(ReadPaused):
                source.snapshot(now[0])
        assert len(engine.heads) == 10
    assert source.heavy.counts == {"heavy_answers": 10, "reads_skipped": 590}


def test_a_calm_engine_starts_the_doubling_over():
    now = [0.0]
    pauses = HeavyAnswers("http://e/metrics", clock=lambda: now[0])
    for at in (0.0, 2.0, 6.0):
        now[0] = at
        pauses.check()
        pauses.heavy("near the cap")
    now[0] = 13.9
    with pytest.raises(ReadPaused, match="not read for 8 s"):
        pauses.check()
    now[0] = 6.0 + 2 * MAX_PAUSE_S + 1        # a calm longer than twice the longest pause
    pauses.check()
    pauses.heavy("near the cap")
    with pytest.raises(ReadPaused, match=f"not read for {FIRST_PAUSE_S:g} s"):
        pauses.check()


def test_a_body_past_the_series_cap_pauses_the_reads_too():
    huge = ("# TYPE x gauge\n" + "".join(f'x{{i="{i}"}} 1\n' for i in range(20_001)))
    with serving(huge) as engine:
        source = VllmSource(engine.url)
        with pytest.raises(ExpositionError, match="20001 series"):
            source.snapshot(1.0)
        with pytest.raises(ReadPaused, match="20001 series"):
            source.snapshot(2.0)
        assert len(engine.heads) == 1
