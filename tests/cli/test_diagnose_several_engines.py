"""`stagelens diagnose` with `--engine-url` given more than once: each engine judged on its own window from its
own scrapes (real published captures served over HTTP), the node's verdict the worst judged engine's, named;
an engine that does not answer is said with its reason and never stops the others being judged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli_run import assert_one_line_error, stagelens
from tests.helpers.otlp_posts import closed_port
from tests.helpers.real_captures import Serving

REAL = Path(__file__).parents[1] / "fixtures" / "real"
DGX = str(Path(__file__).parents[1] / "fixtures" / "nvml" / "dgx_a100.json")


def capture(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


@pytest.fixture
def node():
    """An idle vLLM V1 0.10 (its counters advancing) and an overloaded SGLang 0.4 (2,826 queued, the KV cache
    with room), on two ports of this machine."""
    idle = Serving(capture("vllm_v1_0.10_idle_qwen3_4b.txt"), per_s=0.05)
    overloaded = Serving(capture("sglang_0.4_overloaded_llama31_8b.txt"), per_s=2 / 11228)
    yield idle, overloaded
    idle.server.close()
    overloaded.server.close()


def _diagnose(*urls: str, extra: tuple[str, ...] = ()):
    args = ["--nvml-snapshot", DGX, "diagnose", "--duration", "3", "--json", *extra]
    for url in urls:
        args += ["--engine-url", url]
    return stagelens(*args, timeout=180)


def test_each_engine_is_judged_and_the_node_reads_the_worst(node):
    idle, overloaded = node
    down = f"http://127.0.0.1:{closed_port()}"
    proc = _diagnose(f"idle=vllm={idle.url}", f"sglang={overloaded.url}", f"vllm={down}")
    assert proc.stdout, proc.stderr
    doc = json.loads(proc.stdout)
    by_name = {e["name"]: e for e in doc["engines"]}
    assert list(by_name) == ["idle", f"sglang-{overloaded.url.rsplit(':', 1)[1]}", f"vllm-{down.rsplit(':', 1)[1]}"]
    busy = by_name[f"sglang-{overloaded.url.rsplit(':', 1)[1]}"]
    assert (busy["kind"], busy["verdict"], busy["root_stage"]) == ("sglang", "firing", "scheduler"), busy
    assert by_name["idle"]["kind"] == "vllm" and by_name["idle"]["root_stage"] in (None, "cold_path")
    assert by_name["idle"]["engine"].startswith("vLLM V1")
    gone = by_name[f"vllm-{down.rsplit(':', 1)[1]}"]
    assert gone["verdict"] == "unknown" and "did not answer" in gone["error"] and gone["stages"] == []
    # the node: the worst judged engine, named, its diagnosis at the top; exit 2 (firing), not 3
    assert (doc["verdict"], doc["root_stage"], doc["worst_engine"]) == ("firing", "scheduler", busy["name"])
    assert doc["stages"] == busy["stages"] and "1 of 3 engines not judged" in doc["notes"]
    assert proc.returncode == 2, proc.stderr


def test_the_text_names_the_node_then_each_engine(node):
    idle, overloaded = node
    proc = stagelens("--nvml-snapshot", DGX, "diagnose", "--duration", "3", "--engine-url", f"vllm={idle.url}",
                     "--engine-url", f"busy=sglang={overloaded.url}", timeout=180)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "node: firing, worst engine busy (root stage: scheduler)", lines[:3]
    heads = [line for line in lines if line.startswith("== ")]
    assert heads == [f"== vllm-{idle.url.rsplit(':', 1)[1]} (vllm, {idle.url}): ok",
                     f"== busy (sglang, {overloaded.url}): firing"], heads


def test_no_engine_answering_prints_each_reason_and_exits_3():
    ports = [closed_port(), closed_port()]
    proc = _diagnose(*(f"vllm=http://127.0.0.1:{p}" for p in ports))
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "unknown" and doc["worst_engine"] is None and doc["stages"] == []
    assert [e["verdict"] for e in doc["engines"]] == ["unknown", "unknown"]
    # each engine's sampler said its trouble as it met it; the command ends on one line saying why
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("stagelens: error: none of the 2 engines could be judged: "), last
    assert f"vllm-{ports[0]}: the engine at http://127.0.0.1:{ports[0]} did not answer" in last, last


@pytest.mark.parametrize("urls, extra, words", [
    (["vllm=http://127.0.0.1:8000", "vllm=http://localhost:8000/"], (), ["two engines on one URL", "127.0.0.1:8000"]),
    (["a=vllm=http://127.0.0.1:8000", "a=vllm=http://127.0.0.1:8001"], (), ["two engines with one name", "a"]),
    (["vllm=http://127.0.0.1:8000", "sglang=http://127.0.0.1:8001"], ("--otlp-receiver", "127.0.0.1:4318"),
     ["--otlp-receiver", "one engine's receivers"]),
    (["http://127.0.0.1:8000", "http://127.0.0.1:8001"], (), ["its kind is not known", "KIND=URL"]),
    (["tgi=http://127.0.0.1:8000", "vllm=http://127.0.0.1:8001"], (), ["'tgi' is no engine kind"]),
    (["bad name=vllm=http://127.0.0.1:8000", "vllm=http://127.0.0.1:8001"], (), ["the name 'bad name'"]),
    (["vllm=ftp://127.0.0.1:8000", "vllm=http://127.0.0.1:8001"], (), ["expected http(s)://HOST[:PORT]"]),
    ([f"vllm=http://127.0.0.1:{8000 + i}" for i in range(65)], (), ["at most 64 engines"]),
])
def test_bad_engine_lists_get_one_line(urls, extra, words):
    assert_one_line_error(_diagnose(*urls, extra=extra), *words)


def test_other_commands_say_they_watch_one_engine():
    proc = stagelens("record", "--out", "/dev/null", "--engine", "vllm", "--engine-url", "http://127.0.0.1:8000",
                     "--engine-url", "http://127.0.0.1:8001")
    assert_one_line_error(proc, "--engine-url more than once", "diagnose")
