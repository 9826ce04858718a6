"""An engine whose /metrics answer never ends (issue 49 item 3): a chunked body of bytes forever, fast or dripped.
The read stops at the scrape's deadline or the body's cap, whichever comes first, and what it read is an answer
refused (as a gzip body or an HTML page is), not an engine that did not answer; the reads pause after it, as
after any answer too heavy to read every second. `diagnose` ends with its one-line refusal, with or without
`--json`. Real sockets on loopback."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from stagelens.sources.scrape.engine_source import MAX_BODY_BYTES, EngineAnswerRefused, VllmSource
from stagelens.sources.scrape.heavy_answers import ReadPaused
from tests.helpers.hostile_servers import ScriptedServer, endless_chunked

DGX = str(Path(__file__).parents[1] / "fixtures" / "nvml" / "dgx_a100.json")
# as fast as they are read, in chunks of one byte: the deadline ends the read long before the cap (8 MiB
# of them is millions of chunks to parse)
FAST = endless_chunked(b"#", per_write=4096)
# a chunk every 50 ms: each read returns well before any socket timeout
DRIP = endless_chunked(every_s=0.05, per_write=1)
# chunks of 64 KiB as fast as they are read: the cap ends it
LARGE = endless_chunked(b"# " + b"x" * (64 * 2**10 - 3) + b"\n", per_write=4)


@pytest.mark.parametrize("script, said", [(FAST, "no complete answer within 0.5 s"),
                                          (DRIP, "no complete answer within 0.5 s"),
                                          (LARGE, f"larger than {MAX_BODY_BYTES} bytes")],
                         ids=["fast", "drip", "past-the-cap"])
def test_an_endless_answer_is_refused_at_the_deadline_or_the_cap_and_pauses_the_reads(script, said):
    with ScriptedServer(script) as engine:
        source = VllmSource(engine.url, timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(EngineAnswerRefused, match=said):
            source.snapshot(1.0)
        assert time.monotonic() - started < 8       # the answer never ends: only the deadline or the cap ends it
        with pytest.raises(ReadPaused):
            source.snapshot(2.0)                     # not read again at once: every read would cost the deadline


@pytest.mark.parametrize("script, json_flag", [(FAST, []), (FAST, ["--json"]), (DRIP, [])],
                         ids=["fast", "fast-json", "drip"])
def test_diagnose_on_an_endless_answer_ends_with_its_one_line_refusal(script, json_flag):
    """Before: "the engine at URL did not answer: ... no complete answer within 5 s", read on call as the engine
    down, when it answered bytes for as long as it was read."""
    with ScriptedServer(script) as engine:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "stagelens.cli", "--nvml-snapshot", DGX, "diagnose",
                               "--engine", "vllm", "--engine-url", engine.url, "--duration", "1", *json_flag],
                              capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
    assert done.returncode == 3, done
    assert "Traceback" not in done.stderr and done.stdout == "", done
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"stagelens: error: the engine at {engine.url} answered, but its answer was refused: "), \
        done.stderr
    # the deadline ends it (a machine fast enough to parse 8 MiB of one-byte chunks in 5 s would meet the cap)
    assert "no complete answer within 5 s" in last or f"larger than {MAX_BODY_BYTES} bytes" in last, last
    assert "did not answer" not in done.stderr, done.stderr
    assert took < 40, took      # a scrape's 5 s deadline and the sampling's second, on a busy machine: no hang
